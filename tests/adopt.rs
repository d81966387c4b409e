//! Issue 25, item 7: `-p` on a daemon traces the workers it already has when it is
//! grabbed (forked copies, and workers that exec'd another image), as it traces those
//! it forks later; `-x nofollow` traces the daemon alone, as DTrace does. `prefork`'s
//! workers wait on a pipe until udtrace holds the daemon, then make exactly known
//! calls (tests/fixtures/prefork.c); once udtrace has stopped, the daemon and its
//! workers run on as untraced, with no thread stopped and no code changed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

mod util;

use util::live::{code_differences, process_tree, stopped_threads};
use util::{
    bin, bpf_gate, copy_fixture, hold, kill_after_deadline, pid_backends, unprivileged, Backend, Guard, TempDir,
};

pid_backends!(
    existing_workers_are_traced,
    nofollow_traces_the_daemon_alone,
    a_worker_under_a_debugger_is_traced,
    a_worker_given_with_p_too_stays_a_process_of_its_own,
    workers_forked_and_reaped_while_the_daemon_is_grabbed_are_unharmed,
);

/// Workers, calls per worker and round, and the daemon's own calls (prefork.c's D).
const N: usize = 6;
const K: u64 = 100;
const D: u64 = 3;

/// Per process: target() entries and returns, helper() entries; "armed" from BEGIN,
/// once every probe is in.
const SCRIPT: &str = "BEGIN { printf(\"armed\\n\"); } \
     pid$target::target:entry { @e[pid] = count(); } \
     pid$target::target:return { @r[pid] = count(); } \
     pid$target::helper:entry { @h[pid] = count(); } \
     END { printa(\"entry %d %@d\\n\", @e); printa(\"return %d %@d\\n\", @r); printa(\"helper %d %@d\\n\", @h); }";

/// Who runs the daemon and udtrace.
#[derive(Clone, Copy)]
enum User {
    /// The user running the tests (root in CI).
    Caller,
    /// nobody when the tests run as root (see `util::unprivileged`): no BPF.
    Unprivileged,
}

impl User {
    fn command(self, program: &str) -> Command {
        match self {
            User::Caller => Command::new(program),
            User::Unprivileged => unprivileged(program),
        }
    }
}

/// A running `prefork N K`, its stdin and stdout pipes held.
struct Daemon {
    guard: Guard,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    lines: Vec<String>,
}

impl Daemon {
    /// Starts `prefork` as `user` and waits until every worker is ready.
    fn start(prefork: &str, user: User) -> Daemon {
        let mut cmd = user.command(prefork);
        cmd.args([N.to_string(), K.to_string()]).stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut guard = Guard::spawn(&mut cmd);
        kill_after_deadline(guard.child().id());
        let stdin = guard.child().stdin.take();
        let out = BufReader::new(guard.child().stdout.take().expect("stdout"));
        let mut d = Daemon { guard, stdin, out, lines: Vec::new() };
        assert_eq!(d.line(), format!("prefork: {N} workers ready"));
        d
    }

    fn pid(&mut self) -> u32 {
        self.guard.child().id()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).expect("prefork's stdout");
        assert!(l.ends_with('\n'), "prefork ended early: {l:?}");
        self.lines.push(l.clone());
        l.trim_end().to_string()
    }

    /// Lets it go on to its next step.
    fn go(&mut self) {
        self.stdin.as_mut().expect("stdin").write_all(b"go\n").expect("prefork's stdin");
    }

    /// Lets it finish: its output lines, sorted (workers print in any order), and its
    /// exit status.
    fn finish(mut self) -> (Vec<String>, Option<i32>) {
        self.go();
        drop(self.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).expect("prefork's stdout");
        let status = self.guard.take().wait().expect("prefork's end");
        let mut lines: Vec<String> = self.lines.into_iter().chain(rest.lines().map(|l| format!("{l}\n"))).collect();
        lines.sort();
        (lines, status.code())
    }
}

/// An untraced run: its output lines sorted, and its exit status.
fn untraced(prefork: &str, user: User) -> (Vec<String>, Option<i32>) {
    let mut cmd = user.command(prefork);
    cmd.args([N.to_string(), K.to_string()]).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut g = Guard::spawn(&mut cmd);
    kill_after_deadline(g.child().id());
    g.child().stdin.take().expect("stdin").write_all(b"go\ngo\n").expect("prefork's stdin");
    let out = g.take().wait_with_output().expect("prefork's end");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(|l| format!("{l}\n")).collect();
    lines.sort();
    (lines, out.status.code())
}

/// What becomes of the first worker.
#[derive(Clone, Copy, PartialEq)]
enum First {
    /// Nothing: a worker as the others.
    AsTheOthers,
    /// A debugger-like holder holds it with ptrace.
    UnderADebugger,
    /// It is given with `-p` too, after the daemon: a root of its own, which no
    /// description names (`pid$target` is the daemon).
    AlsoGrabbed,
}

/// What one traced run showed.
struct Traced {
    daemon: u32,
    /// Each worker, and whether it runs preworker (it exec'd).
    workers: Vec<(u32, bool)>,
    /// (probe, pid) → firings.
    counts: BTreeMap<(String, u32), u64>,
    stderr: String,
}

/// Starts prefork as `user`, then udtrace (as `user` too, with `flags`) on the
/// daemon once its workers wait; lets the workers make their first round, stops udtrace
/// with SIGINT, checks that nothing of it is left in any process of the tree, lets the
/// daemon finish and checks it ran as untraced; `first` says what becomes of the first
/// worker. `None` when the kernel refuses BPF.
fn trace_daemon(user: User, flags: &[&str], first: First) -> Option<Traced> {
    let dir = copies(&["prefork", "preworker", "libfollow.so"]);
    let prefork = dir.path().join("prefork").display().to_string();
    let expected = untraced(&prefork, user);
    assert_eq!(expected.1, Some(0), "untraced: {:?}", expected.0);
    let mut daemon = Daemon::start(&prefork, user);
    let pid = daemon.pid();
    let tree = process_tree(pid);
    assert_eq!(tree.len(), N + 1, "the daemon and its workers, before udtrace: {tree:?}");
    let workers: Vec<(u32, bool)> = tree[1..].iter().map(|&w| (w, comm(w) == "preworker")).collect();
    assert_eq!(workers.iter().filter(|w| w.1).count(), N / 3, "exec'd workers: {workers:?}");
    let _holder = (first == First::UnderADebugger).then(|| hold(workers[0].0));

    let (pid_arg, first_arg) = (pid.to_string(), workers[0].0.to_string());
    let mut args: Vec<&str> = flags.iter().copied().chain(["-q", "-Z", "-n", SCRIPT, "-p", &pid_arg]).collect();
    if first == First::AlsoGrabbed {
        args.extend(["-p", &first_arg]);
    }
    let mut tracer = Guard::spawn(
        user.command(&bin().display().to_string())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null()),
    );
    kill_after_deadline(tracer.child().id());
    let mut out = BufReader::new(tracer.child().stdout.take().expect("stdout"));
    let mut err = tracer.child().stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut first = String::new();
    out.read_line(&mut first).expect("udtrace's stdout");
    if first.is_empty() {
        // udtrace ended before BEGIN: only a refusal of BPF may explain it.
        let status = tracer.take().wait().expect("udtrace's end");
        let stderr = err.join().expect("stderr");
        bpf_gate(&std::process::Output { status, stdout: Vec::new(), stderr: stderr.clone().into_bytes() })?;
        panic!("udtrace ended before BEGIN: {stderr}");
    }
    assert_eq!(first, "armed\n");
    daemon.go();
    assert_eq!(daemon.line(), "prefork: first round done");
    // SAFETY: kill() only sends a signal to udtrace, still running (a Guard holds it).
    unsafe { libc::kill(tracer.child().id() as i32, libc::SIGINT) };
    let mut text = String::new();
    out.read_to_string(&mut text).expect("udtrace's stdout");
    let status = tracer.take().wait().expect("udtrace's end");
    let stderr = err.join().expect("stderr");
    assert_eq!(status.code(), Some(0), "{stderr}");

    // Released untouched: no thread stopped, the code as in the files.
    let now = process_tree(pid);
    assert_eq!(now, tree, "no process of the tree ended or was added");
    assert_eq!(stopped_threads(&now), Vec::<String>::new());
    // Another session on the machine (a concurrent test's) may have a uprobe (a lone
    // int3) in a library every process maps: never in these files, where the probes were.
    let ours = dir.path().display().to_string();
    let foreign = |d: &String| d.contains(": cc in memory,") && !d.contains(&ours);
    let left: Vec<String> = now.iter().flat_map(|&p| code_differences(p)).filter(|d| !foreign(d)).collect();
    assert_eq!(left, Vec::<String>::new(), "code left changed");
    assert_eq!(daemon.finish(), expected, "the daemon and its workers ran as untraced");

    let mut counts = BTreeMap::new();
    for l in text.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let [probe, pid, n] = f[..] else { panic!("unexpected line {l:?} in {text}") };
        counts.insert((probe.to_string(), pid.parse().expect("pid")), n.parse().expect("count"));
    }
    Some(Traced { daemon: pid, workers, counts, stderr })
}

/// Copies of fixtures in a directory of their own: a concurrent test's uprobes on the
/// fixtures' files (a link for every process that maps a file) never reach these.
fn copies(files: &[&str]) -> TempDir {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = TempDir::new(&format!("adopt-{}", RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)));
    for f in files {
        copy_fixture(f, &dir.path().join(f));
    }
    dir
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

/// What every run must count when the workers are traced: the daemon's D calls, each
/// worker's K calls of target() (entries and returns) and each preworker's K of helper().
fn every_call(t: &Traced) -> BTreeMap<(String, u32), u64> {
    let mut want = BTreeMap::new();
    for probe in ["entry", "return"] {
        want.insert((probe.to_string(), t.daemon), D);
        for &(w, _) in &t.workers {
            want.insert((probe.to_string(), w), K);
        }
    }
    for &(w, _) in t.workers.iter().filter(|w| w.1) {
        want.insert(("helper".to_string(), w), K);
    }
    want
}

fn existing_workers_are_traced(backend: Backend) {
    let Some(t) = trace_daemon(User::Caller, backend.flags(), First::AsTheOthers) else { return };
    assert_eq!(t.counts, every_call(&t), "{}", t.stderr);
    assert_eq!(t.stderr, "");
}

#[test]
fn existing_workers_are_traced_without_bpf() {
    // The default backend needs no root: the daemon and udtrace run as nobody (or as
    // the user running the tests).
    let t = trace_daemon(User::Unprivileged, &[], First::AsTheOthers).expect("no BPF needed");
    assert_eq!(t.counts, every_call(&t), "{}", t.stderr);
    assert_eq!(t.stderr, "");
}

fn nofollow_traces_the_daemon_alone(backend: Backend) {
    let flags: Vec<&str> = backend.flags().iter().copied().chain(["-x", "nofollow"]).collect();
    let Some(t) = trace_daemon(User::Caller, &flags, First::AsTheOthers) else { return };
    let want: BTreeMap<(String, u32), u64> =
        [("entry".to_string(), t.daemon), ("return".to_string(), t.daemon)].into_iter().map(|k| (k, D)).collect();
    assert_eq!(t.counts, want, "{}", t.stderr);
    assert_eq!(t.stderr, "");
}

fn a_worker_under_a_debugger_is_traced(backend: Backend) {
    // The first worker is held by another tracer: udtrace does not stop it, arms its
    // probes as uprobes while it runs (never over the patches in the daemon and the
    // other workers, which map the same files) and says so; every call still counts.
    let Some(t) = trace_daemon(User::Caller, backend.flags(), First::UnderADebugger) else { return };
    assert_eq!(t.counts, every_call(&t), "{}", t.stderr);
    let held = t.workers[0].0;
    let note = format!("udtrace: pid {held} is traced by holder (pid ");
    assert!(t.stderr.starts_with(&note) && t.stderr.lines().count() == 1, "{}", t.stderr);
}

fn a_worker_given_with_p_too_stays_a_process_of_its_own(backend: Backend) {
    // `-p DAEMON -p WORKER`: the worker is a root, not the daemon's descendant, and
    // `pid$target` names the daemon alone; the other workers are the daemon's.
    let Some(t) = trace_daemon(User::Caller, backend.flags(), First::AlsoGrabbed) else { return };
    let mut want = every_call(&t);
    want.retain(|(_, pid), _| *pid != t.workers[0].0);
    assert_eq!(t.counts, want, "{}", t.stderr);
    assert_eq!(t.stderr, "");
}

fn workers_forked_and_reaped_while_the_daemon_is_grabbed_are_unharmed(backend: Backend) {
    // forker starts a worker every 2 ms (at most 4 alive, each calling target() 5 times
    // at once, every fifth exec'ing worker2) while udtrace grabs it: workers are born
    // and end while the trees are listed and grabbed. Every one runs as untraced, and
    // udtrace follows the rest of the run until the daemon ends.
    let dir = copies(&["forker", "worker2", "libfollow.so"]);
    let forker = dir.path().join("forker");
    let (n, m, k) = (600u64, 5u64, 3u64);
    let args = [n.to_string(), m.to_string(), k.to_string(), "fork".into(), "2".into()];
    let untraced = Command::new(&forker).args(&args).output().expect("forker");
    assert!(untraced.status.success(), "{untraced:?}");
    let mut daemon = Guard::spawn(
        Command::new(&forker).args(&args).env("FORKER_WAIT", "1").stdin(Stdio::piped()).stdout(Stdio::piped()),
    );
    kill_after_deadline(daemon.child().id());
    let pid = daemon.child().id().to_string();
    util::wait_mapped(&pid, "libfollow.so");
    daemon.child().stdin.take().expect("stdin").write_all(b"go\n").expect("forker's stdin");
    // Some workers in, well before its end (600 workers take at least 1.2 s).
    std::thread::sleep(std::time::Duration::from_millis(100));
    let prog = "pid$target::target:entry { @ = count(); } END { printa(\"target %@d\\n\", @); }";
    let Some(out) = backend.traced(&["-q", "-n", prog, "-p", &pid]) else { return };
    let mut text = String::new();
    daemon.child().stdout.take().expect("stdout").read_to_string(&mut text).expect("forker's stdout");
    let status = daemon.take().wait().expect("forker's end");
    assert_eq!((status.code(), text.as_bytes()), (untraced.status.code(), &untraced.stdout[..]), "ran as untraced");
    let (traced, err) = (util::stdout(&out), util::stderr(&out));
    assert!(out.status.success() && err.is_empty(), "{err}");
    // Calls before the grab are not seen; those after it are, up to the total.
    let total = 3 + n * m + n / 5 * k;
    let counted: u64 = traced.trim().strip_prefix("target ").and_then(|c| c.parse().ok()).expect(&traced);
    assert!(counted > 0 && counted < total, "{counted} of {total}");
}
