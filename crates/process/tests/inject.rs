//! Remote system calls and shared mappings in a real process: the C fixture
//! `tests/fixtures/inject.c`, built here with gcc, stopped with `Target::grab`, injected
//! into, and let go; it must go on exactly as before.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::libc;
use nix::sys::ptrace;
use nix::sys::signal::{kill, Signal};
use nix::sys::uio::{process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use udtrace_process::control::Target;
use udtrace_process::follow::Tree;
use udtrace_process::inject::{
    self, create_shared_near, map_exec_near, map_shared_near, remote_syscall, unmap, InjectError, Prot, RemoteCall,
    REACH,
};
use udtrace_process::procfs;
use udtrace_sys::mmap::Mmap;

const NOBODY: u32 = 65534;
const WORKER_ENV: &str = "UDTRACE_INJECT_WORKER";
const FIXTURE_ENV: &str = "UDTRACE_INJECT_FIXTURE";
const TIMEOUT: Duration = Duration::from_secs(20);

/// The fixture, compiled once per test binary into cargo's test scratch directory
/// (which every user may read): to a name of its own, then renamed into place, so that
/// concurrent test runs never see a half-written file.
fn fixture() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os(FIXTURE_ENV) {
            return PathBuf::from(p);
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inject.c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(dir).expect("create fixture dir");
        let tmp = dir.join(format!("inject-fixture.{}", std::process::id()));
        let st = Command::new("gcc").args(["-O2", "-g", "-o"]).arg(&tmp).arg(&src).status().expect("run gcc");
        assert!(st.success(), "gcc failed on {}", src.display());
        let out = dir.join("inject-fixture");
        std::fs::rename(&tmp, &out).expect("rename the fixture into place");
        out
    })
}

/// A running fixture, killed (and reaped) on drop whatever happened.
struct Tracee {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Tracee {
    fn spawn(mode: &str, uid: Option<u32>) -> Tracee {
        let mut cmd = Command::new(fixture());
        cmd.arg(mode).stdin(Stdio::piped()).stdout(Stdio::piped());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd.spawn().expect("spawn fixture");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Tracee { child, stdin, lines }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(TIMEOUT).expect("a line from the fixture")
    }

    /// The rest of its output and its exit status.
    fn finish(mut self) -> (Vec<String>, ExitStatus) {
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => out.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("fixture still running; output so far {out:?}"),
            }
        }
        let st = self.child.wait().expect("wait for the fixture");
        (out, st)
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The registers a thread stopped in an interrupted system call is left with after a
/// session: the call restarted as the kernel restarts it with no handler to run (rip
/// back on the `syscall`, rax its number or restart_syscall's), none pending.
fn with_restart(before: &libc::user_regs_struct) -> libc::user_regs_struct {
    let mut r = *before;
    match r.rax as i64 {
        -514..=-512 => r.rax = r.orig_rax,
        -516 => r.rax = libc::SYS_restart_syscall as u64,
        _ => return r,
    }
    r.rip -= 2;
    r.orig_rax = u64::MAX;
    r
}

fn parse_hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

fn write_word(pid: i32, addr: u64, v: &[u8]) {
    let n = process_vm_writev(
        Pid::from_raw(pid),
        &[std::io::IoSlice::new(v)],
        &[RemoteIoVec { base: addr as usize, len: v.len() }],
    )
    .expect("process_vm_writev");
    assert_eq!(n, v.len());
}

fn mapping_at(pid: i32, addr: u64) -> Option<procfs::Mapping> {
    procfs::read_maps(pid).expect("maps").into_iter().find(|m| m.start == addr)
}

fn vdso_bytes(pid: i32) -> Vec<u8> {
    let maps = procfs::read_maps(pid).expect("maps");
    let v = maps.iter().find(|m| m.path.as_deref() == Some("[vdso]")).expect("a vdso");
    procfs::read_memory(pid, v.start, (v.end - v.start) as usize).expect("read vdso")
}

fn is_root() -> bool {
    // /proc/self belongs to the effective user.
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self")) == 0
}

/// Waits until the (single-threaded) process is blocked in one of `nrs`.
fn wait_in_syscall(pid: i32, nrs: &[i64]) -> i64 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let s = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        if let Some(nr) = s.split_whitespace().next().and_then(|n| n.parse::<i64>().ok()) {
            let state =
                procfs::stat(pid).ok().and_then(|_| procfs::task_stat(pid, pid).ok()).map(|(_, f)| f[0].clone());
            if nrs.contains(&nr) && state.as_deref() == Some("S") {
                return nr;
            }
        }
        assert!(Instant::now() < deadline, "fixture never blocked in {nrs:?}: {s}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The whole injection against the spinning fixture, as the current user (root or the
/// unprivileged worker): shared memory both ways, udtrace's own memfd, a trampoline
/// region, unmap, error results, signals arriving while stopped; then registers and
/// code are as before and the fixture finishes as it would have.
fn spin_scenario() {
    let t = Tracee::spawn("spin", None);
    let ready = t.line();
    let f: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(f.first(), Some(&"ready"), "{ready}");
    let (tick, stop, shared_ptr) = (parse_hex(f[1]), parse_hex(f[2]), parse_hex(f[3]));
    let pid = t.pid();
    let mut target = Target::grab(pid).expect("grab the fixture");
    let p = Pid::from_raw(pid);
    let regs_before = ptrace::getregs(p).expect("getregs");
    let code_before = procfs::read_memory(pid, regs_before.rip, 64).expect("read code");
    let tick_before = procfs::read_memory(pid, tick, 64).expect("read tick");
    let vdso_before = vdso_bytes(pid);

    // Pending while stopped: taken by the first step, queued again at the end of each
    // session, delivered to the handlers once the fixture runs.
    kill(p, Signal::SIGUSR1).expect("SIGUSR1");
    kill(p, Signal::SIGUSR2).expect("SIGUSR2");

    // A memfd created by the tracee, read-write on both sides, near tick().
    let region = create_shared_near(pid, 8192, tick, Prot::READ | Prot::WRITE).expect("create_shared_near");
    assert_eq!(region.len, 8192);
    assert!(region.remote_addr.abs_diff(tick) < REACH && (region.remote_addr + region.len).abs_diff(tick) < REACH);
    let m = mapping_at(pid, region.remote_addr).expect("the region in maps");
    assert_eq!(m.end - m.start, 8192);
    assert!(m.read && m.write && !m.exec, "{m:?}");
    assert!(m.path.as_deref().is_some_and(|p| p.contains("memfd:udtrace-shared")), "{m:?}");
    let magic = 0x5eed_f00d_cafe_d00du64;
    region.write(0, &magic.to_le_bytes()).expect("write magic");
    assert_eq!(procfs::read_memory(pid, region.remote_addr, 8).expect("read remote"), magic.to_le_bytes());
    write_word(pid, region.remote_addr + 4096, b"tracee!!");
    assert_eq!(region.read(4096, 8), Some(&b"tracee!!"[..]));
    assert!(region.write(8190, b"toolong").is_err());
    assert!(region.read(8190, 7).is_none());

    // udtrace's own memfd: the tracee opens /proc/<udtrace>/fd/<n> (same user here).
    let ours = nix::sys::memfd::memfd_create(c"udtrace-test", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
        .expect("memfd_create");
    std::fs::File::from(ours.try_clone().expect("dup")).set_len(4096).expect("set_len");
    let view = Mmap::map(ours.as_fd(), 4096, 0, true).expect("map our memfd");
    let addr = map_shared_near(pid, ours.as_fd(), 4096, tick, Prot::READ | Prot::WRITE).expect("map_shared_near");
    assert!(addr.abs_diff(tick) < REACH);
    view.write_bytes(16, b"from udtrace").expect("write");
    assert_eq!(procfs::read_memory(pid, addr + 16, 12).expect("read"), b"from udtrace");
    unmap(pid, addr, 4096).expect("unmap");
    assert!(mapping_at(pid, addr).is_none(), "still mapped after unmap");

    // Trampolines: read+exec in the tracee, written through udtrace's view.
    let tramp = map_exec_near(pid, 100, tick).expect("map_exec_near");
    let m = mapping_at(pid, tramp.remote_addr).expect("the trampolines in maps");
    assert!(m.read && !m.write && m.exec, "{m:?}");
    assert!(tramp.remote_addr.abs_diff(tick) < REACH);
    tramp.write(0, &[0x90, 0x90, 0xc3]).expect("write code");
    assert_eq!(procfs::read_memory(pid, tramp.remote_addr, 3).expect("read code"), [0x90, 0x90, 0xc3]);

    // Raw results: -errno, MAP_FIXED_NOREPLACE over an existing mapping is EEXIST.
    {
        let mut call = RemoteCall::new(pid).expect("session");
        assert_eq!(call.syscall(libc::SYS_getpid, [0; 6]).expect("getpid"), pid as i64);
        assert_eq!(
            call.syscall(libc::SYS_close, [u64::MAX >> 33, 0, 0, 0, 0, 0]).expect("close"),
            -(libc::EBADF as i64)
        );
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
        let r = call.syscall(libc::SYS_mmap, [region.remote_addr, 4096, 3, flags, u64::MAX, 0]).expect("mmap");
        assert_eq!(r, -(libc::EEXIST as i64));
        match call.checked("close", libc::SYS_close, [u64::MAX >> 33, 0, 0, 0, 0, 0]) {
            Err(InjectError::Remote { errno, .. }) => assert_eq!(errno, nix::errno::Errno::EBADF),
            other => panic!("{other:?}"),
        }
        call.finish().expect("finish");
    }
    assert_eq!(remote_syscall(pid, libc::SYS_gettid, [0; 6]).expect("gettid"), pid as i64);
    assert!(matches!(unmap(pid, 123, 4096), Err(InjectError::Invalid(_))));
    assert!(matches!(create_shared_near(pid, 0, tick, Prot::READ), Err(InjectError::Invalid(_))));

    // Everything as it was.
    assert_eq!(ptrace::getregs(p).expect("getregs"), regs_before);
    assert_eq!(procfs::read_memory(pid, regs_before.rip, 64).expect("read code"), code_before);
    assert_eq!(procfs::read_memory(pid, tick, 64).expect("read tick"), tick_before);
    assert_eq!(vdso_bytes(pid), vdso_before);

    // The fixture reads the shared word, and stops.
    write_word(pid, shared_ptr, &region.remote_addr.to_ne_bytes());
    write_word(pid, stop, &1i32.to_ne_bytes());
    target.release();
    let (out, st) = t.finish();
    assert_eq!(out, ["count ok".to_string(), format!("shared {magic:x}"), "usr1 1 usr2 1".to_string()]);
    assert_eq!(st.code(), Some(42));
}

#[test]
fn inject_into_spinning_process() {
    spin_scenario();
}

/// Runs the scenario as an unprivileged user: when root, this test binary again as
/// `nobody`, only the worker test.
#[test]
fn inject_unprivileged() {
    if !is_root() {
        spin_scenario();
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(exe)
        .args(["--exact", "worker_inject_as_nobody", "--ignored", "--nocapture", "--test-threads=1"])
        .env(WORKER_ENV, "1")
        .env(FIXTURE_ENV, fixture())
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run the worker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("worker ok"), "worker failed: {stdout}\n{stderr}");
}

/// Run by [`inject_unprivileged`] only.
#[test]
#[ignore = "run as nobody by inject_unprivileged"]
fn worker_inject_as_nobody() {
    if std::env::var(WORKER_ENV).as_deref() != Ok("1") {
        return;
    }
    assert!(!is_root());
    spin_scenario();
    println!("worker ok");
}

/// Root udtrace, a user's process: the tracee may not open udtrace's /proc fd, the
/// tracee-created memfd works.
#[test]
fn inject_across_users() {
    if !is_root() {
        eprintln!("skipping inject_across_users: needs root to start a process as nobody");
        return;
    }
    let t = Tracee::spawn("spin", Some(NOBODY));
    let ready = t.line();
    let f: Vec<&str> = ready.split_whitespace().collect();
    let (tick, stop) = (parse_hex(f[1]), parse_hex(f[2]));
    let pid = t.pid();
    let mut target = Target::grab(pid).expect("grab");
    let regs_before = ptrace::getregs(Pid::from_raw(pid)).expect("getregs");
    let ours = nix::sys::memfd::memfd_create(c"udtrace-test", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
        .expect("memfd_create");
    std::fs::File::from(ours.try_clone().expect("dup")).set_len(4096).expect("set_len");
    match map_shared_near(pid, ours.as_fd(), 4096, tick, Prot::READ) {
        Err(InjectError::FdNotReachable { errno, .. }) => assert_eq!(errno, nix::errno::Errno::EACCES),
        other => panic!("expected FdNotReachable, got {other:?}"),
    }
    let region = create_shared_near(pid, 4096, tick, Prot::READ | Prot::WRITE).expect("create_shared_near");
    region.write(0, b"hello").expect("write");
    assert_eq!(procfs::read_memory(pid, region.remote_addr, 5).expect("read"), b"hello");
    assert_eq!(ptrace::getregs(Pid::from_raw(pid)).expect("getregs"), regs_before);
    write_word(pid, stop, &1i32.to_ne_bytes());
    target.release();
    let (out, st) = t.finish();
    assert_eq!(out.first().map(String::as_str), Some("count ok"));
    assert_eq!(st.code(), Some(42));
}

/// Stopped inside `read` on an empty pipe (rax = -ERESTARTSYS): after the injection the
/// read restarts and returns what is written later.
#[test]
fn inject_while_blocked_in_read() {
    let t = Tracee::spawn("read", None);
    assert_eq!(t.line(), "ready");
    let pid = t.pid();
    wait_in_syscall(pid, &[libc::SYS_read]);
    let mut target = Target::grab(pid).expect("grab");
    let p = Pid::from_raw(pid);
    let regs_before = ptrace::getregs(p).expect("getregs");
    assert_eq!(regs_before.orig_rax as i64, libc::SYS_read);
    assert_eq!(regs_before.rax as i64, -512, "ERESTARTSYS");
    let region = create_shared_near(pid, 4096, regs_before.rip, Prot::READ | Prot::WRITE).expect("create_shared_near");
    let tramp = map_exec_near(pid, 4096, regs_before.rip).expect("map_exec_near");
    unmap(pid, region.remote_addr, region.len).expect("unmap");
    unmap(pid, tramp.remote_addr, tramp.len).expect("unmap");
    assert_eq!(ptrace::getregs(p).expect("getregs"), with_restart(&regs_before));
    target.release();
    read_restarts(t);
}

/// Stopped inside nanosleep (rax = -ERESTART_RESTARTBLOCK): after the injection the
/// sleep goes on through restart_syscall and returns 0 after the full time.
#[test]
fn inject_while_blocked_in_nanosleep() {
    let t = Tracee::spawn("sleep", None);
    assert_eq!(t.line(), "ready");
    let pid = t.pid();
    let nr = wait_in_syscall(pid, &[libc::SYS_nanosleep, libc::SYS_clock_nanosleep]);
    let mut target = Target::grab(pid).expect("grab");
    let p = Pid::from_raw(pid);
    let regs_before = ptrace::getregs(p).expect("getregs");
    assert_eq!(regs_before.orig_rax as i64, nr);
    assert_eq!(regs_before.rax as i64, -516, "ERESTART_RESTARTBLOCK");
    let region = create_shared_near(pid, 4096, regs_before.rip, Prot::READ | Prot::WRITE).expect("create_shared_near");
    region.write(0, b"x").expect("write");
    assert_eq!(ptrace::getregs(p).expect("getregs"), with_restart(&regs_before));
    target.release();
    let (out, st) = t.finish();
    let f: Vec<&str> = out.first().map(|l| l.split_whitespace().collect()).unwrap_or_default();
    assert_eq!(f.get(..3), Some(&["slept", "0", "0"][..]), "{out:?}");
    let ms: u64 = f[3].parse().expect("ms");
    assert!((600..5000).contains(&ms), "slept {ms} ms");
    assert!(st.success());
}

/// Stopped in ppoll, whose temporary mask lets in SIGUSR1 (blocked otherwise), with a
/// SIGUSR1 pending: the calls take it, it is queued again, and once let go ppoll gets
/// it as it would have (EINTR, the handler ran) and the mask is the original again.
#[test]
fn inject_while_in_ppoll_with_a_signal_pending() {
    let t = Tracee::spawn("ppoll", None);
    assert_eq!(t.line(), "ready");
    let pid = t.pid();
    wait_in_syscall(pid, &[libc::SYS_ppoll]);
    let mut target = Target::grab(pid).expect("grab");
    let p = Pid::from_raw(pid);
    kill(p, Signal::SIGUSR1).expect("SIGUSR1");
    let regs_before = ptrace::getregs(p).expect("getregs");
    assert_eq!(regs_before.orig_rax as i64, libc::SYS_ppoll);
    let region = create_shared_near(pid, 4096, regs_before.rip, Prot::READ | Prot::WRITE).expect("create_shared_near");
    unmap(pid, region.remote_addr, region.len).expect("unmap");
    assert_eq!(ptrace::getregs(p).expect("getregs"), with_restart(&regs_before));
    target.release();
    let (out, st) = t.finish();
    assert_eq!(out, [format!("ppoll -1 {} blocked 1 usr1 1", libc::EINTR)]);
    assert!(st.success());
}

/// A SIGSTOP that arrives while the thread is held is taken by the first step, kept,
/// and queued again: once let go, the fixture stops (group-stop) until SIGCONT.
#[test]
fn sigstop_during_injection_is_kept() {
    let t = Tracee::spawn("spin", None);
    let ready = t.line();
    let stop = parse_hex(ready.split_whitespace().nth(2).expect("stop address"));
    let pid = t.pid();
    let p = Pid::from_raw(pid);
    let mut target = Target::grab(pid).expect("grab");
    kill(p, Signal::SIGUSR1).expect("SIGUSR1");
    kill(p, Signal::SIGSTOP).expect("SIGSTOP");
    let regs_before = ptrace::getregs(p).expect("getregs");
    let region = create_shared_near(pid, 4096, regs_before.rip, Prot::READ | Prot::WRITE).expect("create_shared_near");
    unmap(pid, region.remote_addr, region.len).expect("unmap");
    assert_eq!(ptrace::getregs(p).expect("getregs"), regs_before);
    target.release();
    let deadline = Instant::now() + TIMEOUT;
    while procfs::task_stat(pid, pid).expect("stat").1[0] != "T" {
        assert!(Instant::now() < deadline, "the fixture never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    write_word(pid, stop, &1i32.to_ne_bytes());
    kill(p, Signal::SIGCONT).expect("SIGCONT");
    let (out, st) = t.finish();
    assert_eq!(out, ["count ok", "usr1 1 usr2 0"]);
    assert_eq!(st.code(), Some(42));
}

/// µs per remote system call, in one session and one session per call.
#[test]
fn remote_syscall_cost() {
    let t = Tracee::spawn("spin", None);
    let ready = t.line();
    let stop = parse_hex(ready.split_whitespace().nth(2).expect("stop address"));
    let pid = t.pid();
    let mut target = Target::grab(pid).expect("grab");
    let n = 1000;
    let mut call = RemoteCall::new(pid).expect("session");
    let t0 = Instant::now();
    for _ in 0..n {
        assert_eq!(call.syscall(libc::SYS_getpid, [0; 6]).expect("getpid"), pid as i64);
    }
    let in_session = t0.elapsed();
    call.finish().expect("finish");
    let t0 = Instant::now();
    for _ in 0..n / 5 {
        assert_eq!(remote_syscall(pid, libc::SYS_getpid, [0; 6]).expect("getpid"), pid as i64);
    }
    let one_shot = t0.elapsed();
    let t0 = Instant::now();
    let region = create_shared_near(pid, 4096, 0x1000_0000, Prot::READ).expect("create_shared_near");
    let create = t0.elapsed();
    unmap(pid, region.remote_addr, region.len).expect("unmap");
    eprintln!(
        "remote getpid: {:.1} µs each in one session, {:.1} µs each as one-shot sessions; \
         create_shared_near: {} µs (syscall instruction at {:#x})",
        in_session.as_secs_f64() * 1e6 / n as f64,
        one_shot.as_secs_f64() * 1e6 / (n / 5) as f64,
        create.as_micros(),
        inject::find_syscall_instruction(pid).unwrap_or(0),
    );
    write_word(pid, stop, &1i32.to_ne_bytes());
    target.release();
    let (_, st) = t.finish();
    assert_eq!(st.code(), Some(42));
}

/// Bad thread ids are errors, not panics.
#[test]
fn bad_threads_are_errors() {
    assert!(matches!(RemoteCall::new(0), Err(InjectError::Invalid(_))));
    assert!(matches!(RemoteCall::new(-5), Err(InjectError::Invalid(_))));
    // A live thread that is not traced by us.
    assert!(matches!(RemoteCall::new(1), Err(InjectError::Ptrace { .. })));
}

const ABANDON_ENV: &str = "UDTRACE_INJECT_ABANDON";

/// udtrace killed in the middle of a remote call: the thread, left at the call's
/// syscall-entry stop with the call's registers, returns to its own through the signal
/// frame of the way back, and the program runs on as if it had never been stopped:
/// spinning at any instruction (every register, the vector state), and blocked in
/// `read` (the read restarts and gets what is written later).
#[test]
fn a_tracer_killed_in_a_call_leaves_the_thread_whole() {
    let exe = std::env::current_exe().expect("current_exe");
    let abandon = |pid: i32| {
        let out = Command::new(&exe)
            .args(["--exact", "worker_abandons_a_call", "--ignored", "--nocapture", "--test-threads=1"])
            .env(ABANDON_ENV, pid.to_string())
            .env(FIXTURE_ENV, fixture())
            .output()
            .expect("run the worker");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("abandoned"), "worker failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    };

    let t = Tracee::spawn("spin", None);
    let ready = t.line();
    let f: Vec<&str> = ready.split_whitespace().collect();
    let stop = parse_hex(f[2]);
    abandon(t.pid());
    std::thread::sleep(Duration::from_millis(50));
    write_word(t.pid(), stop, &1i32.to_ne_bytes());
    let (out, st) = t.finish();
    assert_eq!(out, ["count ok", "usr1 0 usr2 0"]);
    assert_eq!(st.code(), Some(42));

    let t = Tracee::spawn("read", None);
    assert_eq!(t.line(), "ready");
    wait_in_syscall(t.pid(), &[libc::SYS_read]);
    abandon(t.pid());
    read_restarts(t);
}

/// The `read` fixture, let go inside its read: a line written later is what it reads.
fn read_restarts(mut t: Tracee) {
    std::thread::sleep(Duration::from_millis(50));
    t.stdin.as_mut().expect("stdin").write_all(b"hello\n").expect("write to the fixture");
    let (out, st) = t.finish();
    assert_eq!(out, ["read 6 hello"]);
    assert!(st.success(), "{st:?}");
}

/// Run by [`a_tracer_killed_in_a_call_leaves_the_thread_whole`] only: grabs the
/// process, runs one call, leaves the thread inside a second one, and exits without
/// putting anything back.
#[test]
#[ignore = "run by a_tracer_killed_in_a_call_leaves_the_thread_whole"]
fn worker_abandons_a_call() {
    let Ok(pid) = std::env::var(ABANDON_ENV) else { return };
    let pid: i32 = pid.parse().expect("pid");
    let target = Target::grab(pid).expect("grab");
    let mut call = RemoteCall::new(pid).expect("session");
    assert!(call.has_way_back(), "no way back in a glibc process");
    assert_eq!(call.syscall(libc::SYS_getpid, [0; 6]).expect("getpid"), pid as i64);
    call.abandon_in_call(libc::SYS_getppid, [0; 6]).expect("abandon");
    std::mem::forget(target);
    println!("abandoned");
    std::process::exit(0);
}

/// The chaos test's lost real-time value, made deterministic: a thread is in the
/// signal-delivery stop of a sigqueue'd SIGRTMIN (value 7, a second one with 35 still
/// queued) when the tree lets go, and the release runs a remote call in that very
/// thread (as the guard's removal does). Both values must arrive: a signal resumed
/// from any stop but its own is sent anew by the kernel, value 0.
#[test]
fn detach_after_remote_calls_keeps_a_stopped_signals_value() {
    // In a process of its own: the tree waits for any child, and would reap the other
    // tests' children running beside it in this one.
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(&exe)
        .args(["--exact", "worker_detaches_after_remote_calls", "--ignored", "--nocapture", "--test-threads=1"])
        .env(DETACH_ENV, "1")
        .env(FIXTURE_ENV, fixture())
        .output()
        .expect("run the worker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("detached whole"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const DETACH_ENV: &str = "UDTRACE_INJECT_DETACH";

/// Run by [`detach_after_remote_calls_keeps_a_stopped_signals_value`] only.
#[test]
#[ignore = "run by detach_after_remote_calls_keeps_a_stopped_signals_value"]
fn worker_detaches_after_remote_calls() {
    if std::env::var_os(DETACH_ENV).is_none() {
        return;
    }
    let t = Tracee::spawn("rt", None);
    assert_eq!(t.line(), "ready");
    let pid = t.pid();
    let rtmin = libc::SIGRTMIN();
    let mut target = Target::grab(pid).expect("grab");
    let mut tree = Tree::new(false, &[Signal::SIGURG], false);
    tree.adopt(&mut target).expect("adopt");
    tree.start(pid);
    udtrace_sys::process::sigqueue(pid, rtmin, 7).expect("sigqueue 7");
    // Never polled: the stop stays for detach_all to find.
    let deadline = Instant::now() + TIMEOUT;
    while procfs::task_stat(pid, pid).expect("stat").1[0] != "t" {
        assert!(Instant::now() < deadline, "the fixture never stopped with SIGRTMIN");
        std::thread::sleep(Duration::from_millis(5));
    }
    udtrace_sys::process::sigqueue(pid, rtmin, 35).expect("sigqueue 35");
    let mut released = 0;
    tree.detach_all(&mut |_, _, _| false, &mut |_| {}, &mut |p| {
        assert_eq!(remote_syscall(p, libc::SYS_getpid, [0; 6]).expect("getpid"), p as i64);
        released += 1;
    });
    assert_eq!(released, 1);
    let (out, st) = t.finish();
    assert_eq!(out, ["rt 2 42"]);
    assert!(st.success(), "{st:?}");
    println!("detached whole");
}
