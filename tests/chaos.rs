//! The chaos test: udtrace grabs a multi-threaded program that forks and execs (the
//! `chaos` fixture, with pid probes patched in it and in its children, strings
//! captured) and is stopped by SIGINT, SIGTERM or SIGKILL at a random moment: while it
//! starts, while it sets processes up, while they run patched, or after the program
//! ended. Whatever the moment, the program's output and exit status must be those of
//! an untraced run. Twice: with BPF (proc probes too, sites the kernel cannot take
//! patched), and without (as an ordinary user: breakpoints where a site cannot be
//! patched, the loader hook on a debug register, the SIGTRAP guard after a SIGKILL).
//!
//! `UDTRACE_CHAOS_ROUNDS` sets the number of rounds of each (100 by default;
//! bench/chaos.sh runs more), `UDTRACE_CHAOS_SEED` replays a failing sequence (each run
//! prints its seed).

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

mod util;

use util::{bin, bpf_gate, fixture, udtrace_cmd, unprivileged, wait_output, Guard};

/// Rounds of the fixture's own loop: about 15 ms each.
const FIXTURE_ROUNDS: &str = "25";

const SCRIPT: &str = "pid$target::work:entry { @c[pid] = count(); } \
     pid$target::mix:entry { @s[copyinstr(arg0)] = count(); } \
     pid$target::mix:return { @m = sum(arg1); } \
     proc:::exec-success /ppid == $target/ { @e = count(); }";

/// Without BPF: no proc probe; work's return site becomes a breakpoint (its block is
/// the bytes the entry's patch took).
const SCRIPT_WITHOUT_BPF: &str = "pid$target::work:entry { @c[pid] = count(); } \
     pid$target::work:return { @r = count(); } \
     pid$target::mix:entry { @s[copyinstr(arg0)] = count(); } \
     pid$target::mix:return { @m = sum(arg1); }";

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

/// The fixture's output (stdout, then stderr) and exit status (-1: killed by a signal).
fn run_fixture(mut child: Guard) -> (String, i32) {
    let out = wait_output(child.take(), "the program (a thread left stopped?)");
    (out.stdout + &out.stderr, out.status)
}

/// How udtrace and the fixture run.
#[derive(Clone, Copy)]
enum Privilege {
    /// As the tests run (root in CI): BPF.
    Bpf,
    /// Both as the user nobody (or as the current user, when not root): no BPF.
    WithoutBpf,
}

fn command(program: &str, how: Privilege) -> Command {
    match how {
        Privilege::Bpf => Command::new(program),
        Privilege::WithoutBpf => unprivileged(program),
    }
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

fn spawn_fixture(how: Privilege) -> Guard {
    Guard::spawn(
        command(&fixture("chaos"), how)
            .arg(FIXTURE_ROUNDS)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

#[test]
fn stopping_udtrace_at_any_moment_leaves_the_program_as_untraced() {
    // The proc probe needs BPF: skip only where the kernel refuses it.
    let probe = udtrace_cmd(&["-q", "-n", "proc:::exec-success { exit(0); }", "-c", "true"]).output().expect("udtrace");
    if bpf_gate(&probe).is_none() {
        return;
    }
    chaos(Privilege::Bpf, SCRIPT);
}

#[test]
fn stopping_udtrace_without_bpf_at_any_moment_leaves_the_program_as_untraced() {
    chaos(Privilege::WithoutBpf, SCRIPT_WITHOUT_BPF);
}

fn chaos(how: Privilege, script: &str) {
    let rounds: u64 = std::env::var("UDTRACE_CHAOS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let seed = std::env::var("UDTRACE_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    println!("chaos: {rounds} rounds, UDTRACE_CHAOS_SEED={seed}");
    let mut rng = Rng(seed);

    let expected = run_fixture(spawn_fixture(how));
    assert_eq!(expected.1, 5, "untraced run: {}", expected.0);

    let signals = [("SIGINT", libc::SIGINT), ("SIGTERM", libc::SIGTERM), ("SIGKILL", libc::SIGKILL)];
    let udtrace = bin().display().to_string();
    let mut printed = 0;
    for round in 0..rounds {
        let (name, sig) = signals[rng.below(3) as usize];
        let grab_after = Duration::from_millis(rng.below(40));
        // Half the moments fall in udtrace's first 60 ms (start, grab, set-up), the
        // rest anywhere in the program's run and a little past its end.
        let stop_after = Duration::from_millis(if rng.below(2) == 0 { rng.below(60) } else { 60 + rng.below(400) });
        let what =
            format!("round {round}: {name} {stop_after:?} after udtrace started, {grab_after:?} after the program");

        let target = spawn_fixture(how);
        let pid = target.0.as_ref().map(|c| c.id()).expect("fixture pid");
        // setpriv runs as root until it execs the program: no user may grab it before.
        wait_exec(pid, "chaos");
        std::thread::sleep(grab_after);
        let mut tracer = Guard::spawn(
            command(&udtrace, how)
                .args(["-q", "-p", &pid.to_string(), "-n", script])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        std::thread::sleep(stop_after);
        // SAFETY: kill(2) on the pid of our own child, not yet reaped (setpriv execs
        // udtrace: the pid is udtrace's).
        unsafe { libc::kill(tracer.child().id() as i32, sig) };
        let traced = run_fixture(target);
        let util::Output { stdout, stderr, status } = wait_output(tracer.take(), "udtrace");
        assert!(!stderr.contains("panicked"), "{what}: udtrace panicked: {stderr}");
        if traced.1 != expected.1 || traced.0 != expected.0 {
            panic!(
                "{what} (UDTRACE_CHAOS_SEED={seed}): the program ended differently\n\
                 untraced: status {:?}\n{}\ntraced: status {:?}\n{}\nudtrace: {status:?}\n{stderr}",
                expected.1, expected.0, traced.1, traced.0
            );
        }
        // Killed by the signal, or ended by it (or by the program's end) as it should.
        assert!(status == -1 || status == 0, "{what}: udtrace exit status {status}: {stderr}");
        if stdout.lines().any(|l| !l.trim().is_empty()) {
            printed += 1;
        }
    }
    // Not a check of timing: rounds where udtrace printed what it traced prove that the
    // stops fell while it traced, not only before it began.
    println!("chaos: udtrace printed its aggregations in {printed} of {rounds} rounds");
    assert!(rounds < 10 || printed > 0, "udtrace never traced anything");
}
