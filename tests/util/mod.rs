//! Running the udtrace binary from tests: with a deadline (a test that would hang
//! fails instead), capturing stdout, stderr and the exit status.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub mod driven;
pub mod live;

/// Long enough for a debug build on a busy 2-core machine; only a hang reaches it.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The program name udtrace's messages start with when run as built.
pub const NAME: &str = "udtrace";

/// The udtrace binary cargo built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_udtrace"))
}

/// What one run produced.
#[derive(Debug)]
pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn first_err_line(&self) -> &str {
        self.stderr.lines().next().unwrap_or("")
    }
}

/// A udtrace command: `udtrace(&["-n", "BEGIN"]).run()`.
pub fn udtrace<S: AsRef<OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(bin());
    c.args(args);
    c
}

/// Runs `cmd` with empty stdin, killing it if it outlives [`TIMEOUT`].
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    wait_output(child, &format!("{cmd:?}"))
}

/// Waits for a spawned `child` (stdout and stderr piped) and collects what it printed,
/// killing it if it outlives [`TIMEOUT`]; `what` names it in that failure.
pub fn wait_output(mut child: Child, what: &str) -> Output {
    // Read both pipes on threads so a chatty child cannot block on a full pipe.
    let out = reader(&mut child, true);
    let err = reader(&mut child, false);
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        match child.try_wait().expect("wait for the child") {
            Some(s) => break s,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let stderr = err.join().unwrap_or_default();
                panic!("{what} did not finish within {TIMEOUT:?}; stderr:\n{stderr}");
            }
            None => thread::sleep(Duration::from_millis(10)),
        }
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    // A signal death has no code: minus the signal's number, a status no test expects.
    let status = status.code().unwrap_or_else(|| -std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(1));
    Output { status, stdout, stderr }
}

fn reader(child: &mut Child, stdout: bool) -> thread::JoinHandle<String> {
    let mut pipe: Box<dyn Read + Send> = if stdout {
        Box::new(child.stdout.take().expect("piped stdout"))
    } else {
        Box::new(child.stderr.take().expect("piped stderr"))
    };
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs udtrace with these arguments on a terminal, as a person would: through
/// util-linux's `script`, whose pty carries both stdout and stderr. What the terminal
/// showed is returned as `stderr` (carriage returns removed), `stdout` is empty.
pub fn run_args_tty<S: AsRef<OsStr>>(args: &[S]) -> Output {
    let mut line = shell_quote(bin().as_os_str());
    for a in args {
        line.push(' ');
        line.push_str(&shell_quote(a.as_ref()));
    }
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"]);
    // The progress line at once, however fast arming is (docs/design.md).
    cmd.env("UDTRACE_PROGRESS_DELAY_MS", "0");
    let out = run(&mut cmd);
    Output { status: out.status, stdout: String::new(), stderr: out.stdout.replace('\r', "") }
}

fn shell_quote(s: &OsStr) -> String {
    format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"))
}

/// Shorthand: run udtrace with these arguments.
pub fn run_args<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run(&mut udtrace(args))
}

/// A fresh empty directory for one test's files, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("udtrace-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` inside the directory and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create dir");
        }
        std::fs::write(&p, text).expect("write file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// Live processes: fixtures, guards, and udtrace runs that need BPF.

/// The example daemon `target/<profile>/examples/workerd`, next to the test's `deps/`
/// directory (examples/workerd.rs: the README's main job).
pub fn workerd() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile.join("examples").join("workerd");
    assert!(path.exists(), "{} not built: `cargo test --workspace` builds examples", path.display());
    path
}

/// A C fixture built by build.rs (tests/fixtures/).
pub fn fixture(name: &str) -> String {
    PathBuf::from(env!("UDTRACE_FIXTURES")).join(name).display().to_string()
}

/// Copies fixture `name` to `to`, through `cp`: a file this process wrote would be open
/// for writing in any child another test thread forks meanwhile, until that child execs,
/// and running it then fails with "Text file busy".
pub fn copy_fixture(name: &str, to: &std::path::Path) {
    let st = Command::new("cp").arg(fixture(name)).arg(to).status().expect("cp");
    assert!(st.success(), "cannot copy {name} to {}", to.display());
}

/// Starts `holder PID` (a debugger-like fixture that holds the process with ptrace)
/// and waits until it holds it.
pub fn hold(pid: u32) -> Guard {
    let mut h = Guard::spawn(Command::new(fixture("holder")).arg(pid.to_string()).stdout(Stdio::piped()));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(h.child().stdout.take().expect("stdout")), &mut line)
        .expect("holder's line");
    assert_eq!(line, format!("holder: holding {pid}\n"));
    h
}

/// Kills and reaps a spawned process when the test ends, even on failure.
pub struct Guard(pub Option<Child>);

impl Guard {
    pub fn spawn(c: &mut Command) -> Guard {
        Guard(Some(c.spawn().expect("spawn")))
    }
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("child")
    }
    pub fn take(&mut self) -> Child {
        self.0.take().expect("child")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits (up to 10 s) until `pid` has a file whose name contains `name` mapped: a
/// process grabbed right after it was spawned may not have run its loader yet.
pub fn wait_mapped(pid: impl std::fmt::Display, name: &str) {
    for _ in 0..1000 {
        if std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(name)) {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("pid {pid} never mapped {name}");
}

/// Whether the tests run as root (effective uid 0), who may switch to another user.
#[allow(dead_code)]
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|v| v.split_whitespace().nth(1)) == Some("0")
}

/// `program` to run without BPF: as the user nobody when the tests run as root
/// (`setpriv` execs it, so the pid is the program's), as the current user otherwise.
#[allow(dead_code)]
pub fn unprivileged(program: impl AsRef<OsStr>) -> Command {
    if !is_root() {
        return Command::new(program);
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(program);
    c
}

/// Runs udtrace with `args` without BPF ([`unprivileged`]) and collects its output,
/// killing it after 60 s.
#[allow(dead_code)]
pub fn traced_unprivileged(args: &[&str]) -> std::process::Output {
    let mut c = unprivileged(bin());
    c.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut g = Guard::spawn(&mut c);
    kill_after_deadline(g.child().id());
    g.take().wait_with_output().expect("udtrace finishes")
}

/// A udtrace command with stdout and stderr piped and no stdin.
pub fn udtrace_cmd(args: &[&str]) -> Command {
    let mut c = udtrace(args);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Kills `pid` after 60 s: no test may hang.
pub fn kill_after_deadline(pid: u32) {
    kill_after(pid, 60);
}

/// Kills `pid` with SIGKILL after `secs` seconds (a hang guard, not a timing check).
/// Through a pidfd taken now: once the process has ended and been reaped, its pid may
/// name another process of the machine (another test's, or anyone's), which a `kill`
/// by number would hit.
pub fn kill_after(pid: u32, secs: u64) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
    if fd < 0 {
        return; // Gone already: nothing can hang.
    }
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(secs));
        // SAFETY: `fd` is the pidfd opened above, owned by this thread and closed once;
        // a process that has ended makes the signal fail with ESRCH, harmlessly.
        unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, fd, libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0);
            libc::close(fd);
        }
    });
}

/// Runs udtrace to completion (killed after 60 s); None when the kernel refuses BPF.
pub fn traced(args: &[&str]) -> Option<std::process::Output> {
    let mut g = Guard::spawn(&mut udtrace_cmd(args));
    kill_after_deadline(g.child().id());
    let out = g.take().wait_with_output().expect("udtrace finishes");
    bpf_gate(&out)?;
    Some(out)
}

/// Tests that need BPF skip only where the kernel refuses it, and never when
/// UDTRACE_REQUIRE_BPF=1 (CI), where a refusal fails the test.
pub fn bpf_gate(out: &std::process::Output) -> Option<()> {
    bpf_gate_stderr(&String::from_utf8_lossy(&out.stderr))
}

/// [`bpf_gate`] on what udtrace (or a BPF tool of the tests) said on stderr.
pub fn bpf_gate_stderr(err: &str) -> Option<()> {
    if err.contains("the kernel refused BPF") {
        assert_ne!(
            std::env::var("UDTRACE_REQUIRE_BPF").as_deref(),
            Ok("1"),
            "BPF refused under UDTRACE_REQUIRE_BPF=1: {err}"
        );
        println!("skipped: the kernel refuses BPF here: {err}");
        return None;
    }
    Some(())
}

pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// The pid provider's two backends. Both must behave the same, so each pid-provider
// test is written once, as a function of its backend, and run on each.

/// Where pid probes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The default: sites patched into the traced process, uprobes as the fallback.
    InProcess,
    /// `-x uprobes`: every site a kernel uprobe driven by BPF.
    Uprobes,
}

impl Backend {
    /// The options that select this backend.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Backend::InProcess => &[],
            Backend::Uprobes => &["-x", "uprobes"],
        }
    }

    /// udtrace's arguments `args` on this backend: its options go first, where any
    /// option may be.
    pub fn with<'a>(self, args: &[&'a str]) -> Vec<&'a str> {
        self.flags().iter().chain(args).copied().collect()
    }

    /// [`traced`] on this backend.
    pub fn traced(self, args: &[&str]) -> Option<std::process::Output> {
        traced(&self.with(args))
    }

    /// [`udtrace_cmd`] on this backend.
    pub fn command(self, args: &[&str]) -> Command {
        udtrace_cmd(&self.with(args))
    }
}

/// `pid_backends!(name, ...)`: for each `fn name(backend: Backend)` of the test file,
/// the tests `in_process::name` and `uprobes::name`, so that `cargo test uprobes::`
/// runs one half. The bodies stay ordinary functions, which rustfmt formats, and one
/// missing from the list is dead code, which clippy refuses.
#[allow(unused_macros)] // Test binaries without pid-provider tests do not use it.
macro_rules! pid_backends {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(#[test]
            fn $name() {
                super::$name($crate::util::Backend::InProcess)
            })*
        }
        mod uprobes {
            $(#[test]
            fn $name() {
                super::$name($crate::util::Backend::Uprobes)
            })*
        }
    };
}
#[allow(unused_imports)] // As above.
pub(crate) use pid_backends;
