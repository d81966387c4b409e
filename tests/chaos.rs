//! The chaos test: udtrace grabs a multi-threaded program that forks, execs and signals
//! (the `chaos` fixture, with pid probes patched in it and in its children, strings
//! captured) and is stopped by SIGINT, SIGTERM, SIGHUP or SIGKILL at a random moment:
//! while it starts, while it sets processes up, while they run patched, or while the
//! program waits at its end. On each pid backend: in-process with BPF (proc probes too,
//! sites the kernel cannot take patched), BPF uprobes (`-x uprobes`), and in-process
//! without BPF (as an ordinary user: breakpoints where a site cannot be patched, the
//! loader hook on a debug register, the SIGTRAP guard after a SIGKILL).
//!
//! Every round, once udtrace has gone and while the program's processes still live
//! (the program waits for its stdin's end of file after its last round, except in one
//! round of six, where it may end first): no thread of the program is left stopped, no
//! probe is left in its code (memory compared with the files), and then its output and
//! exit status are an untraced run's. Each test counts, per signal, the rounds, harmed
//! programs, stopped processes and leftover probes, prints them, and fails on any.
//!
//! `UDTRACE_CHAOS_ROUNDS` sets the number of rounds of each (60 by default;
//! bench/chaos.sh runs more), `UDTRACE_CHAOS_SEED` replays a failing sequence (each run
//! prints its seed).

use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

mod util;

use util::live::{children_of, code_differences, process_tree, stopped_threads, wait_gone};
use util::{bin, bpf_gate, fixture, udtrace_cmd, unprivileged, wait_output, Guard};

/// Killed with SIGKILL, udtrace cannot take the in-process backend's patched jumps
/// (nor, without BPF, its guarded breakpoints) out of the program; its undertaker does
/// (docs/design.md, "Exit policy"). Were that not so, such leftovers would be counted
/// and printed, not failed.
const SIGKILL_LEAVES_PATCHES: bool = false;

/// Rounds of the fixture's own loop: about 15 ms each.
const FIXTURE_ROUNDS: &str = "25";

/// `copyinstr(self->s)` is read when consumed: every thread stops as it ends
/// (docs/pid-provider.md, "Exits wait for those reads").
const SCRIPT: &str = "pid$target::work:entry { @c[pid] = count(); } \
     pid$target::mix:entry { @s[copyinstr(arg0)] = count(); self->s = arg0; } \
     pid$target::mix:return { @m = sum(arg1); } \
     pid$target::mix:return /self->s/ { @t[copyinstr(self->s)] = count(); self->s = 0; } \
     proc:::exec-success /ppid == $target/ { @e = count(); }";

/// Without BPF: no proc probe; work's return site becomes a breakpoint (its block is
/// the bytes the entry's patch took).
const SCRIPT_WITHOUT_BPF: &str = "pid$target::work:entry { @c[pid] = count(); } \
     pid$target::work:return { @r = count(); } \
     pid$target::mix:entry { @s[copyinstr(arg0)] = count(); self->s = arg0; } \
     pid$target::mix:return { @m = sum(arg1); } \
     pid$target::mix:return /self->s/ { @t[copyinstr(self->s)] = count(); self->s = 0; }";

const SIGNALS: [(&str, i32); 4] =
    [("SIGINT", libc::SIGINT), ("SIGTERM", libc::SIGTERM), ("SIGHUP", libc::SIGHUP), ("SIGKILL", libc::SIGKILL)];

/// A small xorshift generator: the sequence of moments is replayable from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The pid backend and privilege a test runs udtrace with.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// The default backend, as the tests run (root in CI): patches, BPF as fallback.
    InProcess,
    /// `-x uprobes`: every site a kernel uprobe.
    Uprobes,
    /// Both udtrace and the program as the user nobody (or as the current user, when
    /// not root): patches and breakpoints, no BPF.
    WithoutBpf,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::InProcess => "in-process",
            Variant::Uprobes => "uprobes",
            Variant::WithoutBpf => "in-process without BPF",
        }
    }

    fn command(self, program: &str) -> Command {
        let mut c = match self {
            Variant::WithoutBpf => unprivileged(program),
            _ => Command::new(program),
        };
        // A SIGINT ignored here (this run started in the background by a shell, which
        // ignores SIGINT and SIGQUIT for it; or a SIGHUP under nohup) would be ignored
        // by udtrace too: one sent before udtrace blocks it (its first millisecond)
        // would be discarded, and the round would hang. Started from a terminal, it
        // kills udtrace instead.
        // SAFETY: runs in the child between fork and exec; signal(2) is async-signal-safe
        // and touches no memory of the parent's.
        unsafe {
            c.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        c
    }

    fn udtrace_args(self, pid: u32) -> Vec<String> {
        let (flags, script): (&[&str], _) = match self {
            Variant::InProcess => (&[], SCRIPT),
            Variant::Uprobes => (&["-x", "uprobes"], SCRIPT),
            Variant::WithoutBpf => (&[], SCRIPT_WITHOUT_BPF),
        };
        let args = ["-q", "-p", &pid.to_string(), "-n", script].map(String::from);
        flags.iter().map(|f| f.to_string()).chain(args).collect()
    }

    /// Whether leftover code after this signal is the known gap rather than a failure.
    fn leftovers_allowed(self, sig: i32) -> bool {
        SIGKILL_LEAVES_PATCHES && sig == libc::SIGKILL && self != Variant::Uprobes
    }
}

/// What the rounds of one signal found.
#[derive(Default, Clone, Copy)]
struct Tally {
    rounds: u64,
    /// Rounds where the program's output or exit status differed from the untraced run.
    harmed: u64,
    /// Processes found with a thread stopped.
    stopped: u64,
    /// Runs of code bytes that differ from the file (one per patch or breakpoint).
    leftovers: u64,
    leftover_rounds: u64,
    /// Kernel uprobes of another tracer on the machine (see `other_tracer_runs`).
    foreign: u64,
}

/// The fixture, its stdin a pipe: it waits at its end until the pipe is closed.
fn spawn_fixture(v: Variant) -> (Guard, Option<ChildStdin>) {
    let mut g = Guard::spawn(
        v.command(&fixture("chaos"))
            .arg(FIXTURE_ROUNDS)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let stdin = g.child().stdin.take();
    (g, stdin)
}

/// The fixture's output (stdout, then stderr) and exit status (-N: killed by signal N).
fn finish_fixture(mut child: Guard, stdin: Option<ChildStdin>, what: &str) -> (String, i32) {
    drop(stdin);
    let pid = child.0.as_ref().map_or(0, |c| c.id());
    // A program that does not end is described before wait_output gives up on it.
    let (done, watched) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watched.recv_timeout(util::TIMEOUT - Duration::from_secs(2)).is_err() {
            eprintln!("chaos: the program has not ended: {}", describe_tree(pid));
        }
    });
    let out = wait_output(child.take(), &format!("the program ({what})"));
    let _ = done.send(());
    let _ = watchdog.join();
    (out.stdout + &out.stderr, out.status)
}

/// Each thread of `pid`'s tree: state, wait channel, system call, signals pending and
/// blocked, tracer.
fn describe_tree(pid: u32) -> String {
    let mut out = String::new();
    for p in process_tree(pid) {
        let read = |f: &str| std::fs::read_to_string(format!("/proc/{p}/{f}")).unwrap_or_default();
        let cmd = read("cmdline").replace('\0', " ");
        for entry in std::fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten() {
            let t = entry.file_name().to_string_lossy().into_owned();
            let task = |f: &str| std::fs::read_to_string(format!("/proc/{p}/task/{t}/{f}")).unwrap_or_default();
            let status = task("status");
            let field = |name: &str| {
                status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or("?").to_string()
            };
            out.push_str(&format!(
                "\n  {p} ({cmd}) thread {t}: {} wchan {} syscall {} SigPnd {} ShdPnd {} SigBlk {} tracer {}",
                field("State:"),
                task("wchan"),
                task("syscall").trim(),
                field("SigPnd:"),
                field("ShdPnd:"),
                field("SigBlk:"),
                field("TracerPid:")
            ));
        }
    }
    out
}

/// Waits (10 s at most) until process `pid` runs the executable `name`.
fn wait_exec(pid: u32, name: &str) {
    for _ in 0..10_000 {
        if std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e.ends_with(name)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("pid {pid} never ran {name}");
}

/// Waits until the program's main thread reads its stdin at its end (`read`, system
/// call 0, on descriptor 0), the program has ended, or one of its threads is stopped
/// (which would keep it from getting there); 20 s at most.
fn wait_held(pid: u32) {
    let deadline = Instant::now() + util::TIMEOUT;
    while Instant::now() < deadline {
        let Ok(call) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")) else { return };
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if call.starts_with("0 0x0 ")
            || state.rsplit_once(") ").is_none_or(|(_, s)| s.starts_with('Z'))
            || !stopped_threads(&process_tree(pid)).is_empty()
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn stopping_udtrace_at_any_moment_leaves_the_program_as_untraced() {
    // The proc probe needs BPF: skip only where the kernel refuses it.
    if bpf_refused() {
        return;
    }
    chaos(Variant::InProcess);
}

#[test]
fn stopping_udtrace_on_uprobes_at_any_moment_leaves_the_program_as_untraced() {
    if bpf_refused() {
        return;
    }
    chaos(Variant::Uprobes);
}

#[test]
fn stopping_udtrace_without_bpf_at_any_moment_leaves_the_program_as_untraced() {
    chaos(Variant::WithoutBpf);
}

/// Whether a tracer other than this round's udtrace (gone by now) runs on the machine.
fn other_tracer_runs() -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        let tracer = |n: &str| n.starts_with("udtrace") || n == "dtrace" || n == "bpftrace";
        // The name too: a process that is exiting has no exe link, its uprobes yet.
        std::fs::read_link(e.path().join("exe"))
            .is_ok_and(|x| tracer(&x.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()))
            || std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| tracer(c.trim()))
    })
}

/// Prints a failed check at once (a long run goes on to count the others).
fn fail(failures: &mut Vec<String>, f: String) {
    println!("chaos FAILED: {f}");
    failures.push(f);
}

fn bpf_refused() -> bool {
    let probe = udtrace_cmd(&["-q", "-n", "proc:::exec-success { exit(0); }", "-c", "true"]).output().expect("udtrace");
    bpf_gate(&probe).is_none()
}

fn chaos(v: Variant) {
    let rounds: u64 = std::env::var("UDTRACE_CHAOS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed = std::env::var("UDTRACE_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    let name = v.name();
    println!("chaos {name}: {rounds} rounds, UDTRACE_CHAOS_SEED={seed}");
    let mut rng = Rng(seed);
    let started = Instant::now();

    let (g, stdin) = spawn_fixture(v);
    let expected = finish_fixture(g, stdin, "untraced");
    assert_eq!(expected.1, 5, "untraced run: {}", expected.0);

    let udtrace = bin().display().to_string();
    let mut tally = [Tally::default(); SIGNALS.len()];
    let mut printed = 0;
    let mut failures = Vec::new();
    for round in 0..rounds {
        let s = rng.below(SIGNALS.len() as u64) as usize;
        let (sig_name, sig) = SIGNALS[s];
        let grab_after = Duration::from_millis(rng.below(40));
        // Half the moments fall in udtrace's first 60 ms (start, grab, set-up), the
        // rest anywhere in the program's run and a little past its last round.
        let stop_after = Duration::from_millis(if rng.below(2) == 0 { rng.below(60) } else { 60 + rng.below(400) });
        let hold = rng.below(6) != 0;
        let what = format!(
            "{name}, round {round} (UDTRACE_CHAOS_SEED={seed}): {sig_name} {stop_after:?} after udtrace started, \
             {grab_after:?} after the program{}",
            if hold { "" } else { ", which did not wait at its end" }
        );
        let t = &mut tally[s];
        t.rounds += 1;

        let (target, mut stdin) = spawn_fixture(v);
        let pid = target.0.as_ref().map(|c| c.id()).expect("fixture pid");
        if !hold {
            // Its end of file: the program may end before udtrace is stopped.
            stdin = None;
        }
        // setpriv runs as root until it execs the program: no user may grab it before.
        wait_exec(pid, "chaos");
        std::thread::sleep(grab_after);
        let mut tracer = Guard::spawn(
            v.command(&udtrace)
                .args(v.udtrace_args(pid))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        std::thread::sleep(stop_after);
        // Stopped, udtrace leaves what it could not undo to its undertaker, which is
        // waited for.
        let undertakers = children_of(tracer.child().id());
        // SAFETY: kill(2) on the pid of our own child, not yet reaped (setpriv execs
        // udtrace: the pid is udtrace's).
        unsafe { libc::kill(tracer.child().id() as i32, sig) };
        let util::Output { stdout, stderr, status } = wait_output(tracer.take(), &format!("udtrace ({what})"));
        assert!(!stderr.contains("panicked"), "{what}: udtrace panicked: {stderr}");
        // Killed by the signal, or ended by it (or by the program's end) as it should.
        assert!(status == -sig || status == 0, "{what}: udtrace exit status {status}: {stderr}");
        if stdout.lines().any(|l| !l.trim().is_empty()) {
            printed += 1;
        }

        // udtrace has gone: what it left is what the program lives with.
        wait_gone(&undertakers);
        if hold {
            wait_held(pid);
        }
        // An undertaker started just as the signal came is not among those waited for:
        // give it a moment (it stops the threads while it writes).
        let settled = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < settled
            && process_tree(pid).iter().any(|&p| {
                !stopped_threads(&[p]).is_empty() || code_differences(p).iter().any(|d| d.contains("/fixtures/chaos "))
            })
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let tree = process_tree(pid);
        for &p in &tree {
            let stopped = stopped_threads(&[p]);
            if stopped.is_empty() {
                continue;
            }
            t.stopped += 1;
            fail(&mut failures, format!("{what}: threads left stopped:\n  {}", stopped.join("\n  ")));
            // Let them go, so that the output can still be compared.
            // SAFETY: kill(2) with SIGCONT on a process of the program's tree.
            unsafe { libc::kill(p as i32, libc::SIGCONT) };
        }
        let mut left: Vec<String> = tree.iter().flat_map(|&p| code_differences(p)).collect();
        // Another tracer on the machine (a concurrent test's udtrace, BPF's loader hook
        // without a pid filter, a `pid*` probe) puts kernel uprobes in every process
        // mapping a library: a lone int3 outside the fixture's own file is its while one
        // runs. Counted apart; never in the fixture, where this round's probes are.
        // One ending as we look has no exe any more but still its uprobes: a lone int3
        // that goes away within half a second was its.
        let lone = |d: &String| d.contains(": cc in memory,") && !d.contains("/fixtures/chaos ");
        let before = left.len();
        if left.iter().any(lone) && !other_tracer_runs() {
            let settled = std::time::Instant::now() + Duration::from_millis(500);
            while std::time::Instant::now() < settled && left.iter().any(lone) {
                std::thread::sleep(Duration::from_millis(20));
                left = tree.iter().flat_map(|&p| code_differences(p)).collect();
            }
        }
        left.retain(|d| !(lone(d) && other_tracer_runs()));
        t.foreign += before.saturating_sub(left.len()) as u64;
        if !left.is_empty() {
            t.leftovers += left.len() as u64;
            t.leftover_rounds += 1;
            if !v.leftovers_allowed(sig) {
                fail(&mut failures, format!("{what}: probes left in the program's code:\n  {}", left.join("\n  ")));
            }
        }

        let traced = finish_fixture(target, stdin, &what);
        if traced != expected {
            t.harmed += 1;
            fail(
                &mut failures,
                format!(
                    "{what}: the program ended differently\nuntraced: status {:?}\n{}\ntraced: status {:?}\n{}\n\
                     udtrace: {status:?}\n{stderr}",
                    expected.1, expected.0, traced.1, traced.0
                ),
            );
        }
    }
    let elapsed = started.elapsed();
    for (&(sig_name, sig), t) in SIGNALS.iter().zip(&tally) {
        println!(
            "chaos summary | {name} | {sig_name} | {} rounds | {} harmed | {} stopped | {} leftover probes in {} rounds | \
             {} other tracers' uprobes{}",
            t.rounds,
            t.harmed,
            t.stopped,
            t.leftovers,
            t.leftover_rounds,
            t.foreign,
            if t.leftovers > 0 && v.leftovers_allowed(sig) {
                " (SIGKILL_LEAVES_PATCHES)"
            } else {
                ""
            }
        );
    }
    println!("chaos summary | {name} | all | {rounds} rounds in {:.0} s", elapsed.as_secs_f64());
    // Not a check of timing: rounds where udtrace printed what it traced prove that the
    // stops fell while it traced, not only before it began.
    println!("chaos {name}: udtrace printed its aggregations in {printed} of {rounds} rounds");
    assert!(failures.is_empty(), "{} failures, the first:\n{}", failures.len(), failures[0]);
    assert!(rounds < 10 || printed > 0, "udtrace never traced anything");
}
