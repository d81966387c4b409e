//! Issue 25: what a process maps that is no object file is never read as one. Shared
//! anonymous memory (`/dev/zero (deleted)` in maps), /dev/zero itself, System V
//! segments and memfds are left alone, so udtrace stays small and quick on a process
//! that holds a gigabyte of them (as PostgreSQL does); a file deleted or replaced
//! since it was mapped is never read through the path that now names another file
//! (docs/pid-provider.md, "Sites").

use std::path::Path;

mod util;

use util::driven::{Driven, Ready};
use util::{fixture, is_root, pid_backends, run_args, Backend, TempDir, NAME};

pid_backends!(shared_memory_and_devices_are_never_read, a_python_mmap_is_never_read);

/// Peak resident size udtrace may reach on the processes below, whose non-objects
/// add up to more than a gigabyte.
const MAX_HWM_KB: u64 = 64 << 10;

/// A program that prints "ready", does its counted calls on the first line it reads,
/// prints one line, and exits at the end of its stdin.
fn start(argv: &[&str]) -> Driven {
    let mut d = Driven::start(argv);
    assert_eq!(d.line(), "ready\n");
    d
}

/// What an untraced run of such a program prints (the ready line included) and its
/// status.
fn untraced(argv: &[&str]) -> (String, Option<i32>) {
    let mut d = start(argv);
    d.send("go\n");
    let done = d.line();
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

/// Runs `program` (whose BEGIN prints "ready") on such a program, `argv`, with `-p`,
/// on `backend`: the program's output and status must be an untraced run's, and
/// udtrace's peak size stay under [`MAX_HWM_KB`]. Returns udtrace's stdout (None when
/// the kernel refuses BPF).
fn traced_small(backend: Backend, argv: &[&str], program: &str) -> Option<String> {
    let expected = untraced(argv);
    let mut target = start(argv);
    let pid = target.pid().to_string();
    let mut tracer = Ready::start(backend, &["-q", "-n", program, "-p", &pid])?;
    target.send("go\n");
    let done = target.line();
    // Every object is read and armed by now; only the output is left to do.
    let hwm = hwm_kb(tracer.pid());
    let (rest, status) = target.finish();
    let (end, text, err) = tracer.finish();
    assert!(end.success(), "udtrace failed: {err}");
    assert_eq!((format!("ready\n{done}{rest}"), status), expected, "the traced program's output and status");
    assert!(hwm < MAX_HWM_KB, "udtrace grew to {hwm} KiB on pid {pid}");
    Some(text)
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
    let mut d = start(&[argv[0], argv[1], "1"]);
    let pid = d.pid().to_string();
    let listed = run_args(&["-l", "-n", "pid$target::work:entry", "-p", &pid]);
    assert_eq!(listed.status, 0, "{}", listed.stderr);
    let rows: Vec<Vec<&str>> = listed.stdout.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 1, "{}", listed.stdout);
    assert_eq!(rows[0][1..], [format!("pid{pid}").as_str(), "mapholder", "work", "entry"]);
    d.send("go\n");
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
    let mut target = Driven::start(&[&exe_s, "wait", "100"]);
    let pid = target.pid().to_string();
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
    let Some(tracer) = Ready::start(Backend::InProcess, &["-q", "-n", &ready, "-p", &pid]) else { return };
    target.send("go\n");
    assert_eq!(target.finish(), ("wait 100 sink=4950\n".to_string(), Some(0)));
    let (status, text, err) = tracer.finish();
    assert!(status.success(), "{err}");
    if is_root() {
        assert_eq!(text, expected);
    } else {
        assert!(!text.contains("probes`"), "{text}");
    }
}
