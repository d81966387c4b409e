//! Tier of real programs: another tracer's uprobe (tests/real/foreign_uprobe.rs, as
//! bpftrace or perf would place one, in the same process only) on libc's `abs()`, and
//! on functions whose entry udtrace patches over its first byte (tests/fixtures/
//! firstargs.c), while udtrace traces them, patched in-process or a uprobe of its own.
//! The program must live and print as untraced; udtrace's count must be exact, or,
//! where it cannot be, what it did not see must be counted as drops and said.

mod real;
mod util;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use real::{
    assert_program_unharmed, assert_unharmed, cmd, real_modes, untraced, untraced_with_input, Group, Mode, Traced,
    Tracing,
};
use util::fixture;

real_modes!(
    a_foreign_uprobe_comes_and_goes_while_the_function_runs,
    a_foreign_uprobe_comes_and_goes_before_the_function_runs,
    foreign_uprobes_on_entries_patched_over_their_first_byte_while_they_run,
    foreign_uprobes_on_entries_patched_over_their_first_byte_before_they_run,
);

const COUNT_ABS: &str = "pid$target:libc:abs:entry { @c[probefunc] = count(); } END { printa(\"%s=%@d\\n\", @c); }";

/// The helper, built by Cargo with the tests as an example.
fn helper() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile = exe.ancestors().nth(2).expect("target/<profile>");
    let p = profile.join("examples").join("foreign_uprobe");
    assert!(p.exists(), "{} not built: `cargo test --workspace` builds examples", p.display());
    p
}

/// The libc the programs map.
fn libc_path() -> String {
    std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6").expect("libc.so.6").display().to_string()
}

/// A foreign uprobe on a function in one process, until [`Foreign::remove`].
struct Foreign(Group);

impl Foreign {
    /// Attaches it on libc's abs() (as root: another tracer's, whoever runs udtrace);
    /// None where the kernel refuses BPF and the test may skip.
    fn attach(pid: u32) -> Option<Foreign> {
        Foreign::attach_to(&libc_path(), "abs", pid)
    }

    /// Attaches it on `function` of `file`.
    fn attach_to(file: &str, function: &str, pid: u32) -> Option<Foreign> {
        let mut c = Command::new(helper());
        c.args([file, function, &pid.to_string()]).stdin(Stdio::piped());
        let mut g = Group::spawn(&mut c);
        match g.next_line() {
            Some(l) if l.starts_with(&format!("attached {function} at ")) => Some(Foreign(g)),
            first => {
                let (end, _, err, _) = g.wait();
                util::bpf_gate_stderr(&err)?;
                panic!("the foreign uprobe was not attached ({end:?}): {first:?} {err}");
            }
        }
    }

    /// Detaches it; returns how many times it fired.
    fn remove(mut self) -> u64 {
        drop(self.0.child().stdin.take());
        let line = self.0.next_line().unwrap_or_default();
        let (end, _, err, _) = self.0.wait();
        let hits = line.strip_prefix("detached after ").and_then(|l| l.strip_suffix(" hits\n"));
        hits.and_then(|h| h.parse().ok()).unwrap_or_else(|| panic!("the foreign uprobe: {line:?} {end:?} {err}"))
    }
}

/// The traced program's pid: udtrace's child named `comm` (its other child is its
/// undertaker).
fn traced_child(udtrace: u32, comm: &str) -> u32 {
    let children = util::live::children_of(udtrace);
    let named = |p: &&u32| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm);
    *children.iter().find(named).unwrap_or_else(|| panic!("no child {comm} of udtrace among {children:?}"))
}

/// udtrace counted every one of the `calls` abs() calls, or said that it could not.
fn assert_counted_or_said(run: &Traced, calls: u64) {
    let counted = run.counts().get("abs").copied().unwrap_or(0);
    // What any run says: the description's match and the program's exit.
    let usual = |l: &&String| l.contains(": description '") || l.contains(": pid ") && l.contains(" exited");
    let said: Vec<&String> = run.notices.iter().filter(|l| !usual(l)).collect();
    assert!(
        counted == calls || (counted < calls && !said.is_empty()),
        "abs() ran {calls} times, udtrace counted {counted} and said nothing of it:\n{}",
        run.said()
    );
}

fn a_foreign_uprobe_comes_and_goes_while_the_function_runs(mode: Mode) {
    // absloop calls abs() N times, sleeping GAP µs every 10 calls (about 1.5 s in
    // all): the foreign uprobe is placed and removed while it does.
    let (n, gap) = (3000u64, 5000u64);
    let command = cmd(&[&fixture("absloop"), &n.to_string(), &gap.to_string()]);
    let mut tracing = Tracing::start(mode, &[], COUNT_ABS, &command, Stdio::null());
    // The program's first line (udtrace's stdout is the program's): it runs, armed.
    let mut hits = None;
    if tracing.group.next_line().as_deref() == Some("absloop: looping\n") {
        let pid = traced_child(tracing.group.pid(), "absloop");
        let Some(foreign) = Foreign::attach(pid) else { return };
        std::thread::sleep(Duration::from_millis(300));
        hits = Some(foreign.remove());
    }
    let Some(run) = tracing.finish() else { return };
    assert_unharmed(&run, &untraced(mode, &command));
    assert!(hits.is_some_and(|h| h > 0), "the foreign uprobe never fired while abs() ran: {hits:?}");
    assert_counted_or_said(&run, n);
}

fn a_foreign_uprobe_comes_and_goes_before_the_function_runs(mode: Mode) {
    // absloop waits on its stdin (udtrace's) with abs() patched or probed: the
    // foreign uprobe is placed and removed meanwhile, then abs() runs N times.
    let n = 2000u64;
    let command = cmd(&[&fixture("absloop"), &n.to_string(), "0", "wait"]);
    let mut tracing = Tracing::start(mode, &[], COUNT_ABS, &command, Stdio::piped());
    let mut stdin = tracing.group.child().stdin.take().expect("piped stdin");
    if tracing.group.next_line().as_deref() == Some("absloop: waiting\n") {
        let pid = traced_child(tracing.group.pid(), "absloop");
        let Some(foreign) = Foreign::attach(pid) else { return };
        assert_eq!(foreign.remove(), 0, "abs() ran before it was asked to");
        stdin.write_all(b"go\n").expect("absloop's stdin");
    }
    drop(stdin);
    let Some(run) = tracing.finish() else { return };
    assert_unharmed(&run, &untraced_with_input(mode, &command, "go\n"));
    assert_counted_or_said(&run, n);
}

/// firstargs.c's functions: each first instruction of another length, writing an
/// argument (f_tiny's may run first, but leaves too few bytes after it to patch).
const FIRSTARGS: [&str; 6] = ["f_l1", "f_l2", "f_l3", "f_l4", "f_l5", "f_tiny"];

const COUNT_FIRSTARGS: &str = "pid$target::f_*:entry { @c[probefunc] = count(); } END { printa(\"%s=%@d\\n\", @c); }";

/// The firings udtrace reported as drops (`N drops on CPU C`).
fn drops(run: &Traced) -> u64 {
    run.notices.iter().filter_map(|l| l.split_once(": ")?.1.split_once(" drop")?.0.parse::<u64>().ok()).sum()
}

/// Every one of the `calls` calls of each of firstargs' functions was counted or
/// reported as a drop (a firing another tracer's uprobe took), and nothing else was
/// lost, unless a breakpoint lost firings, which udtrace then said.
fn assert_firstargs_accounted(run: &Traced, calls: u64) {
    let counts = run.counts();
    let counted: u64 = FIRSTARGS.iter().map(|f| counts.get(*f).copied().unwrap_or(0)).sum();
    let lost_at_a_breakpoint = run.notices.iter().any(|l| l.contains("took udtrace's breakpoint"));
    let all = calls * FIRSTARGS.len() as u64;
    assert!(
        counted + drops(run) == all || (counted + drops(run) < all && lost_at_a_breakpoint),
        "{all} calls, {counted} counted and {} reported dropped:\n{}",
        drops(run),
        run.said()
    );
}

fn foreign_uprobes_on_entries_patched_over_their_first_byte_while_they_run(mode: Mode) {
    // Each of firstargs' functions N times, sleeping GAP µs every 10 rounds (about 1.5
    // s): a foreign uprobe on each is placed and removed meanwhile. On the first byte
    // of an entry patched over it, the kernel runs the first instruction out of line
    // and goes on right after it: on the landing udtrace put there.
    let (n, gap) = (3000u64, 5000u64);
    let exe = mode.own(fixture("firstargs"));
    let command = cmd(&[&exe, &n.to_string(), &gap.to_string()]);
    let mut tracing = Tracing::start(mode, &[], COUNT_FIRSTARGS, &command, Stdio::null());
    let mut hits = Vec::new();
    if tracing.group.next_line().as_deref() == Some("firstargs: looping\n") {
        let pid = traced_child(tracing.group.pid(), "firstargs");
        let mut foreign = Vec::new();
        for f in FIRSTARGS {
            let Some(u) = Foreign::attach_to(&exe, f, pid) else { return };
            foreign.push(u);
        }
        std::thread::sleep(Duration::from_millis(300));
        hits = foreign.into_iter().map(Foreign::remove).collect();
    }
    let Some(run) = tracing.finish() else { return };
    assert_program_unharmed(&run, &untraced(mode, &command));
    assert!(hits.len() == FIRSTARGS.len() && hits.iter().all(|&h| h > 0), "foreign hits: {hits:?}");
    assert_firstargs_accounted(&run, n);
}

fn foreign_uprobes_on_entries_patched_over_their_first_byte_before_they_run(mode: Mode) {
    // The foreign uprobes come and go while firstargs waits: the kernel writes each
    // entry's first byte back, and the first instruction is whole again (the jump's
    // displacement kept its bytes). The first call of each then runs it and comes to
    // the landing; udtrace writes its jump back.
    let n = 2000u64;
    let exe = mode.own(fixture("firstargs"));
    let command = cmd(&[&exe, &n.to_string(), "0", "wait"]);
    let mut tracing = Tracing::start(mode, &[], COUNT_FIRSTARGS, &command, Stdio::piped());
    let mut stdin = tracing.group.child().stdin.take().expect("piped stdin");
    if tracing.group.next_line().as_deref() == Some("firstargs: waiting\n") {
        let pid = traced_child(tracing.group.pid(), "firstargs");
        for f in FIRSTARGS {
            let Some(u) = Foreign::attach_to(&exe, f, pid) else { return };
            assert_eq!(u.remove(), 0, "{f} ran before it was asked to");
        }
        stdin.write_all(b"go\n").expect("firstargs' stdin");
    }
    drop(stdin);
    let Some(run) = tracing.finish() else { return };
    assert_program_unharmed(&run, &untraced_with_input(mode, &command, "go\n"));
    assert_firstargs_accounted(&run, n);
    // One landing per function at most: the jump is back after it.
    assert!(drops(&run) <= FIRSTARGS.len() as u64, "{}", run.said());
}
