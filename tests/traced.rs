//! Issue 15, items 2 and 3: a process that another tracer holds with ptrace (a
//! debugger, another udtrace session) is traced all the same: its probes are armed
//! without stopping it, the kernel adds the processes it forks, and udtrace names the
//! tracer in one line.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod util;

use util::{
    bpf_gate, copy_fixture, fixture, hold, kill_after_deadline, stdout, udtrace_cmd, wait_mapped, Guard, TempDir,
};

/// Reads `child`'s stderr on a thread: its lines come through the receiver, and the
/// whole text when the stream ends.
fn stderr_lines(child: &mut Child) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, reader)
}

/// Waits (at most 30 s) for a line containing `what`; `None` if the stream ended first.
fn wait_line(rx: &mpsc::Receiver<String>, what: &str) -> Option<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return Some(l),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("no line with {what:?} in 30 s"),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// A udtrace session whose stderr is read as it comes.
struct Session {
    guard: Guard,
    lines: mpsc::Receiver<String>,
    all: std::thread::JoinHandle<String>,
}

impl Session {
    fn start(args: &[&str]) -> Session {
        let mut guard = Guard::spawn(udtrace_cmd(args).stderr(Stdio::piped()));
        kill_after_deadline(guard.child().id());
        let (lines, all) = stderr_lines(guard.child());
        Session { guard, lines, all }
    }

    fn pid(&mut self) -> u32 {
        self.guard.child().id()
    }

    /// Waits for a stderr line containing `what`. `None` when udtrace ended first
    /// because the kernel refused BPF (the test skips); any other end fails the test.
    fn wait_for(&mut self, what: &str) -> Option<String> {
        if let Some(l) = wait_line(&self.lines, what) {
            return Some(l);
        }
        let (out, err) = self.finish();
        bpf_gate(&std::process::Output { stderr: err.clone().into_bytes(), ..out })?;
        panic!("udtrace ended before printing {what:?}:\n{err}");
    }

    /// Waits for udtrace's end: its output and its whole stderr.
    fn finish(&mut self) -> (std::process::Output, String) {
        let out = self.guard.take().wait_with_output().expect("udtrace ends");
        let all = std::mem::replace(&mut self.all, std::thread::spawn(String::new));
        (out, all.join().expect("stderr"))
    }
}

/// The count printed after `name ` (`printa("%s %@d\n")`; without -q the first row
/// follows the END record's columns on its line).
fn labelled(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.split(&format!("{name} ")).nth(1)?.trim().parse::<u64>().ok())
}

/// The `name count` rows of a printed aggregation.
fn rows(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_process_under_a_debugger_is_traced_with_its_forked_children() {
    // A copy of forker and its library of our own: no other test's process maps them,
    // so their probes fire in a child from its first instruction (docs/pid-provider.md).
    let w = WaitingForker::start("traced-forker");
    let pid = w.pid;
    let _holder = hold(pid);
    let mut tracer = Session::start(&["-q", "-n", BY_PROCESS, "-p", &pid.to_string()]);
    let Some(note) = tracer.wait_for("is traced by") else { return };
    assert!(note.contains(&format!("pid {pid} is traced by holder (pid ")), "{note}");
    w.run_and_check(&mut [&mut tracer]);
}

/// Counts target() calls in the daemon and in its workers.
const BY_PROCESS: &str = "pid$target::target:entry { @[pid == $target ? \"daemon\" : \"workers\"] = count(); }";

/// `forker 4 50 1 fork` (four forked workers, none exec'ing), from copies of its files
/// (no other test's process maps them, so their probes fire in a child from its first
/// instruction, docs/pid-provider.md), waiting for a line before it calls anything.
struct WaitingForker {
    _dir: TempDir,
    lib: std::path::PathBuf,
    untraced: std::process::Output,
    target: Guard,
    pid: u32,
}

const WORKERS: u64 = 4;
const CALLS: u64 = 50;

impl WaitingForker {
    fn start(name: &str) -> WaitingForker {
        let dir = TempDir::new(name);
        for f in ["forker", "libfollow.so", "worker2"] {
            copy_fixture(f, &dir.path().join(f));
        }
        let forker = dir.path().join("forker");
        let args = [WORKERS.to_string(), CALLS.to_string(), "1".into(), "fork".into()];
        let untraced = Command::new(&forker).args(&args).output().expect("forker");
        let mut target = Guard::spawn(
            Command::new(&forker).args(&args).env("FORKER_WAIT", "1").stdin(Stdio::piped()).stdout(Stdio::piped()),
        );
        let pid = target.child().id();
        wait_mapped(pid, "libfollow.so");
        WaitingForker { lib: dir.path().join("libfollow.so"), _dir: dir, untraced, target, pid }
    }

    /// Lets it go; checks it ran as untraced, and that each session counted every call.
    fn run_and_check(self, sessions: &mut [&mut Session]) {
        let (text, status) = let_go(self.target);
        assert_eq!(text.as_bytes(), self.untraced.stdout, "the program ran as untraced");
        assert_eq!(status.code(), self.untraced.status.code());
        for session in sessions.iter_mut() {
            let (out, err) = session.finish();
            assert!(out.status.success(), "{err}");
            assert_eq!(
                rows(&stdout(&out)),
                vec![("daemon".to_string(), 3), ("workers".to_string(), WORKERS * CALLS)],
                "every call, in the daemon and in each forked worker:\n{err}"
            );
        }
    }
}

#[test]
fn a_program_exec_d_under_a_debugger_is_armed_after_the_fact() {
    // A shell the holder holds execs the fixture: its pid probes, matched against the
    // new image once udtrace reads the kernel's record of the exec, fire from then on.
    let (calls, gap_ms) = (300u64, 3);
    let script = format!("read x; exec {} spin {calls} {gap_ms}", fixture("probes"));
    let target = Guard::spawn(Command::new("sh").args(["-c", &script]).stdin(Stdio::piped()).stdout(Stdio::piped()));
    let prog = "pid$target::work:entry { @ = count(); } END { printa(\"count %@d\\n\", @); }";
    // Armed within a few tens of milliseconds of the exec: the first calls, 3 ms apart,
    // may be missed, never most of them.
    let Some(text) = counted_after_the_fact(target, prog, "the programs they exec", calls) else { return };
    assert!(text.starts_with(&format!("spin {calls} ")), "{text}");
}

/// Traces `target` (waiting for a line on stdin) while a debugger-like holder holds
/// it, with `prog` (`-q -Z`, printing `count N`); checks that udtrace's note says the
/// kernel follows `follows`, lets the program go, and that udtrace counted at least
/// two thirds of its `calls` (the first ones, before arming, may be missed). The
/// program's output; `None` when the kernel refused BPF.
fn counted_after_the_fact(target: Guard, prog: &str, follows: &str, calls: u64) -> Option<String> {
    let pid = target.0.as_ref().map(|c| c.id()).expect("spawned");
    wait_mapped(pid, "libc.so.6");
    let _holder = hold(pid);
    let mut tracer = Session::start(&["-q", "-Z", "-n", prog, "-p", &pid.to_string()]);
    let note = tracer.wait_for("is traced by")?;
    assert!(note.contains(follows), "{note}");
    let (text, status) = let_go(target);
    assert!(status.success());
    let (out, err) = tracer.finish();
    assert!(out.status.success(), "{err}");
    let n = count_of(&out).unwrap_or(0);
    assert!((calls * 2 / 3..=calls).contains(&n), "{n} of {calls} calls counted\n{}\n{err}", stdout(&out));
    Some(text)
}

/// Sends a line to `target`'s stdin, then waits for its end: its output and status.
fn let_go(mut target: Guard) -> (String, std::process::ExitStatus) {
    target.child().stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let mut child = target.take();
    let mut text = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut text).expect("read");
    (text, child.wait().expect("wait"))
}

#[test]
fn a_library_loaded_under_a_debugger_is_armed_after_the_fact() {
    // The loader hook never stops a process another tracer holds: it tells udtrace in a
    // record, and the new library's probes are armed when udtrace reads it.
    let dir = TempDir::new("traced-dlopen");
    for f in ["dlopener", "plugin.so"] {
        copy_fixture(f, &dir.path().join(f));
    }
    let (calls, gap_ms) = (200u64, 2);
    let target = Guard::spawn(
        Command::new(dir.path().join("dlopener"))
            .args([calls.to_string(), "wait".into(), gap_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let prog = "pid$target::plugin_fn:entry { @ = count(); } END { printa(\"count %@d\\n\", @); }";
    // Armed within a few tens of milliseconds of the load: the first calls, 2 ms apart,
    // may be missed, never most of them (before, all were).
    let Some(text) = counted_after_the_fact(target, prog, "the objects they load", calls) else { return };
    assert_eq!(text, format!("dlopener: {calls} calls\n"));
}

#[test]
fn pointers_saved_at_entry_under_a_debugger_are_read_at_the_return() {
    // changebuf (see pid_fire's test of the same idiom): udtrace cannot hold a process
    // another tracer holds, so its exit would not wait for a read made when the record
    // is consumed, and the image is gone by an exec anyway: every pointer kept at entry
    // is read at the return's firing, in the kernel.
    let target = Guard::spawn(
        Command::new(fixture("changebuf")).args(["exec", "wait"]).stdin(Stdio::piped()).stdout(Stdio::piped()),
    );
    let pid = target.0.as_ref().map(|c| c.id()).expect("spawned");
    wait_mapped(pid, "libc.so.6");
    let _holder = hold(pid);
    let prog = "pid$target::point:entry, pid$target::named:entry { self->p = arg0; } \
                pid$target::point:return /self->p/ { printf(\"%s %d\\n\", probefunc, ((int *)copyin(self->p, 8))[1]); self->p = 0; } \
                pid$target::named:return /self->p/ { printf(\"%s %s\\n\", probefunc, copyinstr(self->p)); self->p = 0; }";
    let mut tracer = Session::start(&["-q", "-n", prog, "-p", &pid.to_string()]);
    if tracer.wait_for("is traced by").is_none() {
        return;
    }
    let (text, status) = let_go(target);
    assert!(status.success() && text == "changebuf: 3660\n", "{text}");
    let (out, err) = tracer.finish();
    assert!(out.status.success() && !err.contains("invalid address"), "{err}");
    let lines: Vec<String> = stdout(&out).lines().filter(|l| !l.is_empty()).map(String::from).collect();
    let want = ["point 10", "point 20", "point 30", "point 40", "named name-1", "named name-2", "named name-3"];
    assert_eq!(lines, want, "{err}");
}

/// Starts `probes wait N`, which calls work() N times once it reads a line.
/// A copy of its own in `dir`: a uprobe that another test places on the fixture for
/// every process mapping it (a file only traced processes map is armed once for all)
/// would be a change another tracer made, here.
fn waiting_probes(n: u64, dir: &TempDir) -> Guard {
    waiting_probes_named(n, dir, "probes")
}

/// [`waiting_probes`], its copy named `name`.
fn waiting_probes_named(n: u64, dir: &TempDir, name: &str) -> Guard {
    let exe = dir.path().join(name);
    copy_fixture("probes", &exe);
    let mut g =
        Guard::spawn(Command::new(&exe).args(["wait", &n.to_string()]).stdin(Stdio::piped()).stdout(Stdio::piped()));
    wait_mapped(g.child().id(), "libc.so.6");
    g
}

/// The count a session printed with `printa("count %@d\n", @)` (after END's
/// default line: the sessions are not quiet, so that "matched" tells they armed).
fn count_of(out: &std::process::Output) -> Option<u64> {
    stdout(out).lines().find_map(|l| l.split("count ").nth(1)?.trim().parse().ok())
}

const COUNT: &str = "pid$target::work:entry { @ = count(); } END { printa(\"count %@d\\n\", @); }";

const ENTRY_AND_RETURN: &str = "pid$target::work:entry, pid$target::work:return { @[probename] = count(); } \
                                END { printa(\"%s %@d\\n\", @); }";

#[test]
fn two_sessions_on_one_process_each_count_every_firing() {
    let n = 5000u64;
    let dir = TempDir::new("two-sessions");
    let mut target = waiting_probes(n, &dir);
    let pid = target.child().id().to_string();
    // The first session holds the process (its uprobes stay in place: a site another
    // session patched in-process is one a uprobe must not share, see below).
    let mut first = Session::start(&["-x", "uprobes", "-n", COUNT, "-p", &pid]);
    if first.wait_for("matched").is_none() {
        return;
    }
    // Its tracer pid shows once it has seized the process.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while util_tracer(&pid).is_none() {
        assert!(std::time::Instant::now() < deadline, "the first session never held pid {pid}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut second = Session::start(&["-n", COUNT, "-p", &pid]);
    let note = second.wait_for("is traced by").expect("the second session names the first");
    assert!(note.contains(&format!("pid {pid} is traced by udtrace (pid {})", first.pid())), "{note}");
    run_waiting(target, n);
    for session in [&mut first, &mut second] {
        let (out, err) = session.finish();
        assert!(out.status.success(), "{err}");
        assert_eq!(count_of(&out), Some(n), "{}\n{err}", stdout(&out));
    }
}

#[test]
fn a_first_session_gives_its_in_process_sites_to_a_second_and_both_are_exact() {
    let n = 5000u64;
    let dir = TempDir::new("beside-in-process");
    let mut target = waiting_probes(n, &dir);
    let pid = target.child().id().to_string();
    // The first session patches work()'s entry and return in-process: a uprobe of the
    // second on the patched bytes would run the file's instruction over the first's
    // jump, so the second asks the first to give the sites up. The return's patch
    // starts before the `ret`, whose byte is an int3 pad: no uprobe's, though it looks
    // like one.
    let script = ENTRY_AND_RETURN;
    let Some(mut first) = patching_session(&pid, script) else { return };
    let mut second = Session::start(&["-n", script, "-p", &pid]);
    let note = second.wait_for("is traced by").expect("the second session names the first");
    assert!(note.contains(&format!("pid {pid} is traced by udtrace (pid {})", first.pid())), "{note}");
    // Its probes are armed when it says so; both sessions' uprobes share the place now.
    assert_eq!(first_byte(&pid), Some(0xcc), "the patch gave way to uprobes");
    run_waiting(target, n);
    for session in [&mut first, &mut second] {
        let (out, err) = session.finish();
        assert!(out.status.success(), "{err}");
        let text = stdout(&out);
        for name in ["entry", "return"] {
            assert_eq!(labelled(&text, name), Some(n), "{name}: {text}\n{err}");
        }
        assert!(!err.contains("probe site"), "{err}");
    }
}

#[test]
fn a_second_session_given_in_process_sites_stays_exact_after_the_first_ends() {
    let n = 5000u64;
    let dir = TempDir::new("after-in-process");
    let mut target = waiting_probes(n, &dir);
    let pid = target.child().id().to_string();
    // The return site is the one given up (the entry's first byte stays the file's: the
    // second's uprobe goes there without asking).
    let Some(mut first) = patching_session(&pid, ENTRY_AND_RETURN) else { return };
    let mut second = Session::start(&["-n", ENTRY_AND_RETURN, "-p", &pid]);
    second.wait_for("is traced by").expect("the second session names the first");
    // The first session ends: taking its other patches out must leave the site it gave
    // up, where the second's uprobe is, alone.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.pid() as i32), nix::sys::signal::Signal::SIGINT)
        .expect("kill");
    let (out, err) = first.finish();
    assert!(out.status.success(), "{err}");
    assert_eq!(util_tracer(&pid), None, "the first session let the process go");
    assert_eq!(first_byte(&pid), Some(0xcc), "the second session's uprobe is in place");
    run_waiting(target, n);
    let (out, err) = second.finish();
    assert!(out.status.success(), "{err}");
    let text = stdout(&out);
    assert_eq!((labelled(&text, "entry"), labelled(&text, "return")), (Some(n), Some(n)), "{text}\n{err}");
}

#[test]
fn an_all_processes_session_beside_an_in_process_one_is_exact() {
    // A `pid*` session arms a uprobe for every process mapping the file: the site the
    // first session patched in-process is asked for first, as a second `-p` session
    // does (the process would otherwise run the file's instruction over the jump).
    let n = 3000u64;
    let dir = TempDir::new("all-beside-in-process");
    let mut target = waiting_probes_named(n, &dir, "allside-probes");
    let pid = target.child().id().to_string();
    let Some(mut first) = patching_session(&pid, COUNT) else { return };
    // Its output goes to stderr, read as it comes: BEGIN says when it is armed.
    let prog = format!(
        "BEGIN {{ printf(\"armed\\n\"); }} pid*:allside-probes:work:entry /pid == {pid}/ {{ @ = count(); }} \
         END {{ printa(\"count %@d\\n\", @); }}"
    );
    let mut second = Session::start(&["-q", "-o", "/dev/stderr", "-n", &prog]);
    second.wait_for("armed").expect("the pid* session arms");
    assert_eq!(first_byte(&pid), Some(0xcc), "the patch gave way to uprobes");
    run_waiting(target, n);
    let (out, err) = first.finish();
    assert!(out.status.success(), "{err}");
    assert_eq!(count_of(&out), Some(n), "{}\n{err}", stdout(&out));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(second.pid() as i32), nix::sys::signal::Signal::SIGINT)
        .expect("kill");
    let (out, err) = second.finish();
    assert!(out.status.success(), "{err}");
    let counted = err.lines().find_map(|l| l.strip_prefix("count ")?.trim().parse::<u64>().ok());
    assert_eq!(counted, Some(n), "{err}");
}

#[test]
fn two_sessions_on_a_forking_daemon_count_every_worker_when_the_first_patched_in_process() {
    let w = WaitingForker::start("two-on-forker");
    let pid = w.pid.to_string();
    let mut first = Session::start(&["-q", "-n", BY_PROCESS, "-p", &pid]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !entry_patched(&pid, &w.lib, "target") {
        assert!(std::time::Instant::now() < deadline, "the first session never patched pid {pid}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The entry's first byte is the file's: the second session's uprobe goes there,
    // beside the first's patch, with nothing to ask of it.
    let mut second = Session::start(&["-q", "-n", BY_PROCESS, "-p", &pid]);
    while first_byte_of(&pid, &w.lib, "target") != Some(0xcc) {
        assert!(std::time::Instant::now() < deadline, "the second session never armed pid {pid}");
        if second.guard.child().try_wait().expect("try_wait").is_some() {
            let (out, err) = second.finish();
            if bpf_gate(&std::process::Output { stderr: err.clone().into_bytes(), ..out }).is_none() {
                return;
            }
            panic!("the second session ended: {err}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    w.run_and_check(&mut [&mut first, &mut second]);
}

/// A session counting work() in `pid`, once it has patched it in-process (`None`: the
/// kernel refused BPF, and the test skips).
fn patching_session(pid: &str, script: &str) -> Option<Session> {
    let mut first = Session::start(&["-n", script, "-p", pid]);
    first.wait_for("matched")?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while util_tracer(pid).is_none() || !entry_patched(pid, &exe, "work") {
        assert!(std::time::Instant::now() < deadline, "the first session never patched pid {pid}");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(first)
}

/// Whether function `name` of `file` is patched at its entry in `pid`: its first
/// instruction left as the file has it (another tracer's uprobe goes there), a jump
/// right after it (docs/pid-provider.md, "Other tracers' uprobes").
fn entry_patched(pid: &str, file: &std::path::Path, name: &str) -> bool {
    let (Some(addr), Some(off)) = (symbol_address(pid, file, name), symbol_value(file, name)) else { return false };
    let mut live = [0u8; 16];
    let mut orig = [0u8; 16];
    let read = |path: &str, at: u64, b: &mut [u8]| {
        std::fs::File::open(path).and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, b, at)).is_ok()
    };
    if !read(&format!("/proc/{pid}/mem"), addr, &mut live) || !read(&file.to_string_lossy(), off, &mut orig) {
        return false;
    }
    let first = udtrace_object::sites::instruction_len(&orig).unwrap_or(16);
    live[..first] == orig[..first] && live.get(first) == Some(&0xe9)
}

/// Lets `probes wait N` go, and checks it ran as untraced.
fn run_waiting(target: Guard, n: u64) {
    let (text, status) = let_go(target);
    assert!(status.success(), "the program survives both sessions");
    assert!(text.starts_with(&format!("wait {n} ")), "{text}");
}

/// The pid of `pid`'s tracer, if it has one.
fn util_tracer(pid: &str) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse().ok()).filter(|&t| t != 0)
}

/// work()'s first byte in `pid`: a jump (0xe9) where the in-process backend patched it,
/// an `int3` (0xcc) under uprobes.
fn first_byte(pid: &str) -> Option<u8> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    first_byte_of(pid, &exe, "work")
}

/// The first byte of function `name` of object `file` in `pid`.
fn first_byte_of(pid: &str, file: &std::path::Path, name: &str) -> Option<u8> {
    let addr = symbol_address(pid, file, name)?;
    let mut b = [0u8; 1];
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, addr).ok()?;
    Some(b[0])
}

/// `name`'s value in `file`, from `nm` (gcc's objects: also its file offset).
fn symbol_value(file: &std::path::Path, name: &str) -> Option<u64> {
    let nm = Command::new("nm").arg(file).output().ok()?;
    String::from_utf8_lossy(&nm.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).ok()).flatten()
    })
}

/// `name`'s address in `pid`, from `nm` of `file` and the file's first mapping.
fn symbol_address(pid: &str, file: &std::path::Path, name: &str) -> Option<u64> {
    let exe = file.to_path_buf();
    let value = symbol_value(file, name)?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let exe = exe.to_string_lossy().into_owned();
    let base = maps.lines().find(|l| l.ends_with(&exe))?.split('-').next()?;
    Some(u64::from_str_radix(base, 16).ok()? + value)
}
