//! Issue 25: what a process maps that is no object file is never read as one. Shared
//! anonymous memory (`/dev/zero (deleted)` in maps), /dev/zero itself, System V
//! segments and memfds are left alone, so udtrace stays small and quick on a process
//! that holds a gigabyte of them (as PostgreSQL does); a file deleted or replaced
//! since it was mapped is never read through the path that now names another file
//! (docs/pid-provider.md, "Sites").

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

mod util;

use util::{bpf_gate, fixture, is_root, kill_after_deadline, pid_backends, run_args, Backend, Guard, TempDir, NAME};

pid_backends!(shared_memory_and_devices_are_never_read, a_python_mmap_is_never_read);

/// Peak resident size udtrace may reach on the processes below, whose non-objects
/// add up to more than a gigabyte.
const MAX_HWM_KB: u64 = 64 << 10;

/// A program driven through its stdin: it prints a line when ready, does its counted
/// calls on the first line it reads, prints one line, and exits at the end of stdin.
struct Driven {
    child: Guard,
    out: BufReader<ChildStdout>,
}

impl Driven {
    fn start(argv: &[&str]) -> Driven {
        let mut child =
            Guard::spawn(Command::new(argv[0]).args(&argv[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()));
        kill_after_deadline(child.child().id());
        let out = BufReader::new(child.child().stdout.take().expect("piped stdout"));
        let mut d = Driven { child, out };
        assert_eq!(d.line(), "ready\n");
        d
    }

    fn pid(&mut self) -> u32 {
        self.child.child().id()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).expect("the program's output");
        l
    }

    fn go(&mut self) -> String {
        self.child.child().stdin.as_mut().expect("stdin").write_all(b"go\n").expect("write");
        self.line()
    }

    /// Closes its stdin; what it printed since, and its exit status.
    fn finish(mut self) -> (String, Option<i32>) {
        drop(self.child.child().stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).expect("the program's output");
        (rest, self.child.take().wait().expect("wait").code())
    }
}

/// What an untraced run of `argv` prints (the ready line included) and its status.
fn untraced(argv: &[&str]) -> (String, Option<i32>) {
    let mut d = Driven::start(argv);
    let done = d.go();
    let (rest, status) = d.finish();
    (format!("ready\n{done}{rest}"), status)
}

/// The peak resident size of process `pid` so far, in KiB.
fn hwm_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("udtrace's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix(" kB")?.parse().ok())
        .expect("VmHWM in the status")
}

/// Runs `program` (whose BEGIN prints "ready") on the driven program `argv` with `-p`,
/// on `backend`: the program's output and status must be an untraced run's, and
/// udtrace's peak size stay under [`MAX_HWM_KB`]. Returns udtrace's stdout (None when
/// the kernel refuses BPF).
fn traced_small(backend: Backend, argv: &[&str], program: &str) -> Option<String> {
    let expected = untraced(argv);
    let mut target = Driven::start(argv);
    let pid = target.pid().to_string();
    let mut tracer = Guard::spawn(&mut backend.command(&["-q", "-n", program, "-p", &pid]));
    let udtrace = tracer.child().id();
    kill_after_deadline(udtrace);
    let mut out = BufReader::new(tracer.child().stdout.take().expect("piped stdout"));
    let mut ready = String::new();
    out.read_line(&mut ready).expect("udtrace's output");
    if ready.is_empty() {
        let done = tracer.take().wait_with_output().expect("udtrace ends");
        bpf_gate(&done)?;
        panic!("udtrace ended before BEGIN: {}", String::from_utf8_lossy(&done.stderr));
    }
    assert_eq!(ready, "ready\n");
    let done = target.go();
    // Every object is read and armed by now; only the output is left to do.
    let hwm = hwm_kb(udtrace);
    let (rest, status) = target.finish();
    let mut text = String::new();
    out.read_to_string(&mut text).expect("udtrace's output");
    let end = collect(tracer.take());
    assert!(end.0.success(), "udtrace failed: {}", end.1);
    assert_eq!((format!("ready\n{done}{rest}"), status), expected, "the traced program's output and status");
    assert!(hwm < MAX_HWM_KB, "udtrace grew to {hwm} KiB on pid {pid}");
    Some(text)
}

/// The status and stderr of a child whose stdout was taken.
fn collect(child: Child) -> (std::process::ExitStatus, String) {
    let o = child.wait_with_output().expect("udtrace ends");
    (o.status, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The count a `@ = count()` program printed.
fn count(text: &str) -> Option<u64> {
    text.split_whitespace().last()?.parse().ok()
}

fn shared_memory_and_devices_are_never_read(backend: Backend) {
    // A gigabyte of shared memory, touched, as a database's buffers: before, udtrace
    // read it (and /dev/zero) as object files until memory ran out.
    let exe = fixture("mapholder");
    let argv = [exe.as_str(), "1024", "5000"];
    let program = "BEGIN { printf(\"ready\\n\"); } pid$target::work:entry { @ = count(); }";
    let Some(text) = traced_small(backend, &argv, program) else { return };
    assert_eq!(count(&text), Some(5000), "{text}");

    // The memfd holds a copy of the executable, mapped executable: still no object,
    // so `work` is the executable's alone.
    let d = Driven::start(&argv[..2].iter().copied().chain(["1"]).collect::<Vec<_>>());
    let mut d = d;
    let pid = d.pid().to_string();
    let listed = run_args(&["-l", "-n", "pid$target::work:entry", "-p", &pid]);
    assert_eq!(listed.status, 0, "{}", listed.stderr);
    let rows: Vec<Vec<&str>> = listed.stdout.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 1, "{}", listed.stdout);
    assert_eq!(rows[0][1..], [format!("pid{pid}").as_str(), "mapholder", "work", "entry"]);
    d.go();
    assert_eq!(d.finish().1, Some(0));
}

fn a_python_mmap_is_never_read(backend: Backend) {
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        assert_ne!(std::env::var("UDTRACE_REQUIRE_BPF").as_deref(), Ok("1"), "{python} is not installed");
        println!("skipped: {python} is not installed");
        return;
    }
    // os.getppid() is libc's getppid(), once a call.
    let script = "import mmap, os, sys\n\
                  m = mmap.mmap(-1, 1 << 20)\n\
                  m[:] = b'x' * (1 << 20)\n\
                  print('ready', flush=True)\n\
                  sys.stdin.readline()\n\
                  for _ in range(3000): os.getppid()\n\
                  print('done', flush=True)\n\
                  sys.stdin.read()\n";
    let program = "BEGIN { printf(\"ready\\n\"); } pid$target::getppid:entry { @ = count(); }";
    let Some(text) = traced_small(backend, &[python, "-c", script], program) else { return };
    assert_eq!(count(&text), Some(3000), "{text}");
}

/// The executable is replaced while it runs (as an upgrade replaces a library): its
/// path now names another program. Its probes are refused in one line naming the
/// file, never placed at the other program's addresses; its frames still name its
/// functions where udtrace may read the file as mapped (root: /proc/PID/map_files).
#[test]
fn a_replaced_executable_is_never_read_through_its_path() {
    let dir = TempDir::new("replaced");
    let exe = dir.path().join("probes");
    util::copy_fixture("probes", &exe);
    let exe_s = exe.display().to_string();
    let mut target = Guard::spawn(
        Command::new(&exe).args(["wait", "100"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()),
    );
    kill_after_deadline(target.child().id());
    let pid = target.child().id().to_string();
    util::wait_mapped(&pid, "libc.so.6");
    let other = dir.path().join("other");
    util::copy_fixture("fixture", &other);
    std::fs::rename(&other, &exe).expect("replace the executable");

    let out = run_args(&["-n", "pid$target:a.out:work:entry {}", "-p", &pid]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!(
            "{NAME}: invalid probe specifier pid$target:a.out:work:entry {{}}: {exe_s} was deleted or replaced \
             since process {pid} mapped it: its probes cannot be placed (restart the process to probe it)\n"
        )
    );
    let out = run_args(&["-n", "pid$target::work:entry {}", "-p", &pid]);
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.ends_with(&format!(
            ":work:entry does not match any probes: probes was deleted or replaced since process {pid} mapped it: \
             its probes cannot be placed (restart the process to probe it)\n"
        )),
        "{}",
        out.stderr
    );

    // Its call of printf, from main: the frame names main where the file can be read
    // as it was mapped, and is a bare address where it cannot; never a function of
    // the program that replaced it.
    let program = "pid$target:libc.so.6:printf:entry { @[ustack(2)] = count(); }";
    let reference = util::traced(&["-q", "-n", program, "-c", &format!("{} chain 1", fixture("probes"))]);
    let Some(reference) = reference else { return };
    // Its first line is the program's own.
    let expected = util::stdout(&reference).split_once('\n').map(|(_, s)| s.to_string()).unwrap_or_default();
    assert!(expected.contains("probes`main+0x"), "{expected}");
    let ready = format!("BEGIN {{ printf(\"ready\\n\"); }} {program}");
    let mut tracer = Guard::spawn(&mut util::udtrace_cmd(&["-q", "-n", &ready, "-p", &pid]));
    kill_after_deadline(tracer.child().id());
    let mut out = BufReader::new(tracer.child().stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("udtrace's output");
    assert_eq!(line, "ready\n", "{}", collect(tracer.take()).1);
    let mut child = target.take();
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let done = child.wait_with_output().expect("the program ends");
    assert_eq!(String::from_utf8_lossy(&done.stdout), "wait 100 sink=4950\n");
    let mut text = String::new();
    out.read_to_string(&mut text).expect("udtrace's output");
    let (status, err) = collect(tracer.take());
    assert!(status.success(), "{err}");
    if is_root() {
        assert_eq!(text, expected);
    } else {
        assert!(!text.contains("probes`"), "{text}");
    }
}
