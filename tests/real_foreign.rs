//! Tier of real programs: another tracer's uprobe (tests/real/foreign_uprobe.rs, as
//! bpftrace or perf would place one, in the same process only) on libc's `abs()`
//! while udtrace traces it there, patched in-process or a uprobe of its own. The
//! program must live and print as untraced; udtrace's count must be exact, or, where
//! it cannot be, udtrace must say so.

mod real;
mod util;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use real::{assert_unharmed, cmd, real_modes, untraced, untraced_with_input, Group, Mode, Traced, Tracing};
use util::fixture;

real_modes!(
    a_foreign_uprobe_comes_and_goes_while_the_function_runs,
    a_foreign_uprobe_comes_and_goes_before_the_function_runs,
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

/// A foreign uprobe on libc's abs() in one process, until [`Foreign::remove`].
struct Foreign(Group);

impl Foreign {
    /// Attaches it (as root: another tracer's, whoever runs udtrace); None where the
    /// kernel refuses BPF and the test may skip.
    fn attach(pid: u32) -> Option<Foreign> {
        let mut c = Command::new(helper());
        c.args([&libc_path(), "abs", &pid.to_string()]).stdin(Stdio::piped());
        let mut g = Group::spawn(&mut c);
        match g.next_line() {
            Some(l) if l.starts_with("attached abs at ") => Some(Foreign(g)),
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
