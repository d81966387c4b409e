//! The tier of real programs (docs/design.md, "Tests and benchmarks"): programs built
//! the way their users build them (Cargo, the Go toolchain, g++, Debian's python3),
//! traced on each way udtrace can run pid probes, each run checked for exact counts
//! and for a program that printed and ended exactly as an untraced run of it did.
//!
//! Shared by tests/real_*.rs; the programs' sources are next to this file (rust/, go/,
//! python/) or in tests/fixtures (C, C++).

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::util;

/// How udtrace runs a program's pid probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The default: sites patched into the program, as root (BPF for what cannot be
    /// patched and for the loader hook).
    InProcess,
    /// `-x uprobes`: every site a kernel uprobe (root).
    Uprobes,
    /// The default as an ordinary user (nobody when the tests run as root): patches
    /// and breakpoints, no BPF at all.
    Unprivileged,
}

impl Mode {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Mode::Uprobes => &["-x", "uprobes"],
            Mode::InProcess | Mode::Unprivileged => &[],
        }
    }

    /// `program` run as this mode's user: an ordinary user's udtrace traces that
    /// user's programs.
    pub fn command(self, program: impl AsRef<OsStr>) -> Command {
        match self {
            Mode::Unprivileged => util::unprivileged(program),
            Mode::InProcess | Mode::Uprobes => Command::new(program),
        }
    }

    /// This mode's own copy of the program `exe` (made once per test run). Each mode
    /// traces a file of its own: a `-x uprobes` session's uprobes go into every process
    /// that maps the file, and an instruction where the unprivileged mode put a
    /// breakpoint would have its hits taken by such a uprobe (docs/pid-provider.md,
    /// "Other tracers' uprobes"), which no test means to measure.
    pub fn own(self, exe: impl AsRef<Path>) -> String {
        static COPIES: std::sync::Mutex<Vec<(Mode, PathBuf, PathBuf)>> = std::sync::Mutex::new(Vec::new());
        let exe = exe.as_ref();
        let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, copy)) = copies.iter().find(|(m, e, _)| *m == self && e == exe) {
            return copy.display().to_string();
        }
        let dir = build_dir().join("modes").join(format!("{self:?}").to_lowercase());
        std::fs::create_dir_all(&dir).expect("mode directory");
        let copy = dir.join(exe.file_name().expect("a file name"));
        // cp: a copy made with std::fs::copy is open for writing in any child another
        // test forks meanwhile ("Text file busy").
        let st = Command::new("cp").arg(exe).arg(&copy).status().expect("cp");
        assert!(st.success(), "cannot copy {} to {}", exe.display(), copy.display());
        copies.push((self, exe.to_path_buf(), copy.clone()));
        copy.display().to_string()
    }

    /// udtrace with this mode's user and options, then `args`.
    pub fn udtrace(self, args: &[&str]) -> Command {
        let mut c = self.command(util::bin());
        c.args(self.flags()).args(args);
        c
    }
}

/// `real_modes!(name, ...)`: for each `fn name(mode: Mode)` of the test file, the tests
/// `in_process::name`, `uprobes::name` and `unprivileged::name`.
macro_rules! real_modes {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(#[test]
            fn $name() {
                super::$name($crate::real::Mode::InProcess)
            })*
        }
        mod uprobes {
            $(#[test]
            fn $name() {
                super::$name($crate::real::Mode::Uprobes)
            })*
        }
        mod unprivileged {
            $(#[test]
            fn $name() {
                super::$name($crate::real::Mode::Unprivileged)
            })*
        }
    };
}
pub(crate) use real_modes;

/// No run may hang: one that outlives this is killed, and the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How a process ended, in the words udtrace reports a `-c` process's end with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    Exited(i32),
    Signaled(String),
}

impl End {
    fn of_wait_status(status: i32) -> End {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            End::Signaled(nix::sys::signal::Signal::try_from(sig).map_or(format!("signal {sig}"), |s| s.to_string()))
        } else {
            End::Exited(libc::WEXITSTATUS(status))
        }
    }

    /// The end of the `-c` process from udtrace's notice of it (`pid N has exited`,
    /// `pid N exited with status S`, `pid N terminated by SIG`), if it gave one.
    fn of_notice(line: &str) -> Option<End> {
        let rest = line.strip_prefix(&format!("{}: pid ", util::NAME))?;
        let (_, what) = rest.split_once(' ')?;
        if what == "has exited" {
            return Some(End::Exited(0));
        }
        if let Some(code) = what.strip_prefix("exited with status ") {
            return code.parse().ok().map(End::Exited);
        }
        what.strip_prefix("terminated by ").map(|s| End::Signaled(s.to_string()))
    }
}

/// What a program printed and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    pub end: Option<End>,
}

/// A process and its process group, killed whole when dropped: a test that fails
/// leaves neither udtrace nor its programs (nor theirs) running.
pub struct Group {
    child: Option<Child>,
    /// Its stdout, line by line, as it comes.
    lines: Receiver<String>,
    /// The lines [`Group::next_line`] took.
    seen: String,
    err: Option<JoinHandle<String>>,
}

impl Group {
    /// Starts `cmd` as the leader of a new process group, its stdout and stderr read.
    pub fn spawn(cmd: &mut Command) -> Group {
        cmd.process_group(0).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let (send, lines) = mpsc::channel();
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        std::thread::spawn(move || {
            let mut line = Vec::new();
            while out.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                if send.send(String::from_utf8_lossy(&line).into_owned()).is_err() {
                    break;
                }
                line.clear();
            }
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let err = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        });
        Group { child: Some(child), lines, seen: String::new(), err: Some(err) }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("running")
    }

    /// The next line of its stdout (kept for [`Group::wait`]'s), or None at its end.
    pub fn next_line(&mut self) -> Option<String> {
        let line = self.lines.recv_timeout(DEADLINE).ok()?;
        self.seen.push_str(&line);
        Some(line)
    }

    /// Waits until the leader has ended, without reaping it (its pid stays its own),
    /// killing the group past [`DEADLINE`].
    pub fn wait_exit(&mut self) {
        let pid = self.pid() as libc::pid_t;
        let start = Instant::now();
        loop {
            // SAFETY: siginfo_t is a C struct for which all zeros is a valid value.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            // SAFETY: waitid writes only into the siginfo it is given; WNOWAIT leaves
            // the child a zombie.
            let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
            assert_eq!(r, 0, "waitid: {}", std::io::Error::last_os_error());
            // SAFETY: si_pid is valid in the siginfo waitid filled (0 when nothing ended).
            if unsafe { info.si_pid() } == pid {
                return;
            }
            if start.elapsed() > DEADLINE {
                kill_group(pid);
                panic!("{pid} did not end within {DEADLINE:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the leader to end, kills what is left of its group, and returns its
    /// end, stdout, stderr and peak resident size in KiB (its own, or that of a child
    /// of its it waited for, if larger).
    pub fn wait(mut self) -> (End, String, String, u64) {
        self.wait_exit();
        let pid = self.pid() as libc::pid_t;
        // The leader is a zombie: the group's id names no other group yet.
        kill_group(pid);
        let mut status = 0;
        // SAFETY: rusage is a C struct for which all zeros is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 reaps our own child `pid` and writes its status and usage.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
        // Reaped: nothing is left to kill or wait for when the Child is dropped.
        self.child = None;
        let mut out = std::mem::take(&mut self.seen);
        out.extend(self.lines.iter());
        let err = self.err.take().expect("stderr").join().unwrap_or_default();
        (End::of_wait_status(status), out, err, usage.ru_maxrss as u64)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            kill_group(child.id() as libc::pid_t);
            let _ = child.wait();
        }
    }
}

fn kill_group(pgid: libc::pid_t) {
    // SAFETY: kill(2) on a process group this module started, whose leader is not
    // reaped yet (so the id names no other group).
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// A fresh directory anyone may write in (an ordinary user's udtrace writes its `-o`
/// file there), removed when dropped.
pub fn shared_temp_dir(name: &str) -> util::TempDir {
    // Tests run on parallel threads of one process: each directory gets its own name.
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = util::TempDir::new(&format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod temp dir");
    dir
}

/// Runs `cmd` (program and arguments) untraced, as `mode`'s user.
pub fn untraced(mode: Mode, cmd: &[String]) -> Ran {
    untraced_with_input(mode, cmd, "")
}

/// [`untraced`], with `input` on its stdin.
pub fn untraced_with_input(mode: Mode, cmd: &[String], input: &str) -> Ran {
    let mut c = mode.command(&cmd[0]);
    c.args(&cmd[1..]).stdin(Stdio::piped());
    let mut g = Group::spawn(&mut c);
    let mut stdin = g.child().stdin.take().expect("piped stdin");
    // A program that ends without reading it all is not this function's business.
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let (end, stdout, stderr, _) = g.wait();
    Ran { stdout, stderr, end: Some(end) }
}

/// One udtrace run of a `-c` program.
#[derive(Debug)]
pub struct Traced {
    /// The program's output (udtrace's own goes to a `-o` file) and its end as udtrace
    /// reported it.
    pub program: Ran,
    /// What the D program printed (the `-o` file).
    pub trace: String,
    /// udtrace's own messages (its lines of stderr).
    pub notices: Vec<String>,
    /// udtrace's exit status.
    pub end: End,
}

/// A udtrace run of a `-c` program under way.
pub struct Tracing {
    pub group: Group,
    dir: util::TempDir,
    output: PathBuf,
}

impl Tracing {
    /// Starts `udtrace -o FILE ARGS -n SCRIPT -c CMD` in `mode`, not quiet (udtrace then
    /// reports how the program ended), with `stdin` for it and the program.
    pub fn start(mode: Mode, args: &[&str], script: &str, cmd: &[String], stdin: Stdio) -> Tracing {
        let dir = shared_temp_dir("real");
        let output = dir.path().join("trace.out");
        let command = cmd.join(" ");
        let mut all = vec!["-o", output.to_str().expect("UTF-8 path")];
        all.extend(args);
        all.extend(["-n", script, "-c", &command]);
        let group = Group::spawn(mode.udtrace(&all).stdin(stdin));
        Tracing { group, dir, output }
    }

    /// Waits for udtrace to end; None (the reason printed) when the kernel refused
    /// BPF where the tests may skip.
    pub fn finish(self) -> Option<Traced> {
        let (end, stdout, stderr, _) = self.group.wait();
        util::bpf_gate_stderr(&stderr)?;
        let trace = std::fs::read_to_string(&self.output).unwrap_or_default();
        let prefix = format!("{}: ", util::NAME);
        let (notices, own): (Vec<&str>, Vec<&str>) = stderr.lines().partition(|l| l.starts_with(&prefix));
        let program_end = notices.iter().find_map(|l| End::of_notice(l));
        let program_stderr: String = own.iter().map(|l| format!("{l}\n")).collect();
        drop(self.dir);
        Some(Traced {
            program: Ran { stdout, stderr: program_stderr, end: program_end },
            trace,
            notices: notices.into_iter().map(str::to_string).collect(),
            end,
        })
    }
}

/// Traces `cmd` with `script` (and `args` before it) in `mode`; None where the kernel
/// refuses BPF and the test may skip.
pub fn traced(mode: Mode, args: &[&str], script: &str, cmd: &[String]) -> Option<Traced> {
    Tracing::start(mode, args, script, cmd, Stdio::null()).finish()
}

/// Traces `cmd` and runs it untraced; asserts that udtrace succeeded, without drops,
/// and that the program printed and ended exactly as untraced. Returns the run.
pub fn traced_unharmed(mode: Mode, args: &[&str], script: &str, cmd: &[String]) -> Option<Traced> {
    let run = traced(mode, args, script, cmd)?;
    assert_unharmed(&run, &untraced(mode, cmd));
    Some(run)
}

/// The traced program printed and ended as `alone` did, and udtrace succeeded
/// without dropping a firing.
pub fn assert_unharmed(run: &Traced, alone: &Ran) {
    assert_program_unharmed(run, alone);
    assert!(!run.notices.iter().any(|l| l.contains("drop")), "firings dropped:\n{}", run.said());
}

/// The traced program printed and ended as `alone` did, and udtrace succeeded (drops
/// allowed: the caller accounts for them).
pub fn assert_program_unharmed(run: &Traced, alone: &Ran) {
    assert_eq!(run.program, *alone, "the traced program differs from its untraced run; udtrace said:\n{}", run.said());
    assert_eq!(run.end, End::Exited(0), "udtrace's exit; it said:\n{}", run.said());
}

impl Traced {
    /// udtrace's messages and the trace, for failure messages.
    pub fn said(&self) -> String {
        format!("{}\n--- trace:\n{}", self.notices.join("\n"), self.trace)
    }

    /// The trace's `KEY=COUNT` lines (`printa("%s=%@d\n", @)` in END; the first one
    /// follows END's record prefix) as a map.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.trace
            .lines()
            .map(|l| l.split_once(":END ").map_or(l, |(_, rest)| rest))
            .filter_map(|l| {
                let (key, n) = l.rsplit_once('=')?;
                Some((key.to_string(), n.trim().parse().ok()?))
            })
            .collect()
    }
}

/// `(key, count)` pairs as the map [`Traced::counts`] gives.
pub fn expect<K: AsRef<str>>(pairs: &[(K, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, n)| (k.as_ref().to_string(), *n)).collect()
}

/// The stacks of a trace that printed `printa(@)` of an aggregation keyed by
/// `ustack()` alone: (frames, count) per stack, frames innermost first. The trace's
/// `KEY=COUNT` lines ([`Traced::counts`]) are not stacks.
pub fn stacks(trace: &str) -> Vec<(Vec<String>, u64)> {
    let mut out = Vec::new();
    let mut frames = Vec::new();
    for line in trace.lines().map(|l| l.split_once(":END ").map_or(l, |(_, rest)| rest).trim()) {
        if line.is_empty() || line.starts_with("CPU ") || line.contains('=') {
            continue;
        }
        match line.parse::<u64>() {
            Ok(n) => out.push((std::mem::take(&mut frames), n)),
            Err(_) => frames.push(line.to_string()),
        }
    }
    out
}

/// `function+0xOFF` of the return address of each call of `callee` in `caller`, from
/// `objdump -d`: the frame of `caller` a stack shows while `callee` runs.
pub fn return_addresses(exe: &Path, caller: &str, callee: &str) -> Vec<String> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(exe).output().expect("objdump");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().skip_while(|l| !l.ends_with(&format!("<{caller}>:")));
    let start = lines.next().and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok());
    let start = start.unwrap_or_else(|| panic!("no {caller} in {}", exe.display()));
    let insns: Vec<(u64, &str)> = lines
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (addr, insn) = l.trim().split_once(':')?;
            Some((u64::from_str_radix(addr, 16).ok()?, insn.trim()))
        })
        .collect();
    insns
        .windows(2)
        .filter(|w| w[0].1.starts_with("call") && w[0].1.ends_with(&format!("<{callee}>")))
        .map(|w| format!("{caller}+{:#x}", w[1].0 - start))
        .collect()
}

/// The frame of a `module`function+0xoff` line, without its module.
pub fn frame(line: &str) -> &str {
    line.split_once('`').map_or(line, |(_, f)| f)
}

/// `args` as an owned command line.
pub fn cmd(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The directory the tier builds its programs into: `target/real`, beside the
/// profile directories of the test binaries.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let target = exe.ancestors().nth(3).expect("target/<profile>/deps/<test>");
    target.join("real")
}

/// Runs a build step; panics with its output when it fails.
pub fn build(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A program the tier needs, found on PATH or at its path, or a failure that says
/// what to install (`.ci/run` installs it).
pub fn require(program: &str, package: &str) -> PathBuf {
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| p.exists())
    } else {
        std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(program)).find(|p| p.exists()))
    };
    found.unwrap_or_else(|| panic!("{program} is not installed: the tier of real programs needs Debian's {package}"))
}

/// The source directory of the tier's programs, `tests/real/<name>`.
pub fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real").join(name)
}

/// The symbols of `exe` as `nm` lists them (demangled when `demangle`): (address,
/// name) of every defined function.
pub fn functions(exe: &Path, demangle: bool) -> Vec<(u64, String)> {
    let mut c = Command::new("nm");
    c.arg("--defined-only");
    if demangle {
        c.arg("-C");
    }
    let out = c.arg(exe).output().expect("nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(' ')?;
            let (kind, name) = rest.split_once(' ')?;
            ["t", "T", "W", "w"]
                .contains(&kind)
                .then(|| Some((u64::from_str_radix(addr, 16).ok()?, name.to_string())))?
        })
        .collect()
}
