//! Tier of real programs: Debian's python3 (tests/real/python/abs_calls.py) calling
//! libc through ctypes, in its own process and in `multiprocessing` children started
//! by fork and by spawn (a fork and an exec of python3), and loading a library with
//! SIGURG blocked, as a program may block it (udtrace's loader hook stops a process
//! with SIGURG where BPF runs it).

mod real;
mod util;

use std::collections::BTreeMap;

use real::{cmd, expect, real_modes, require, source, traced_unharmed, Mode};

real_modes!(
    ctypes_calls_into_libc_are_counted_exactly,
    multiprocessing_fork_children_are_counted_exactly,
    multiprocessing_spawn_children_are_counted_exactly,
    a_library_loaded_with_sigurg_blocked_fires,
);

/// `python3 -I -B abs_calls.py ARGS`: isolated from the environment, and writing no
/// bytecode next to the script (a spawned child imports it as a module).
fn python(args: &[&str]) -> Vec<String> {
    let python = require("/usr/bin/python3", "python3").display().to_string();
    let script = source("python/abs_calls.py").display().to_string();
    let mut c = cmd(&[&python, "-I", "-B", &script]);
    c.extend(cmd(args));
    c
}

const COUNT_ABS: &str = "pid$target:libc:abs:entry { @c[probefunc] = count(); @p[pid] = count(); } \
                         END { printa(\"%s=%@d\\n\", @c); printa(\"pid %d=%@d\\n\", @p); }";

/// The total of abs() calls, and the calls of each process sorted.
fn abs_calls(counts: &BTreeMap<String, u64>) -> (Option<u64>, Vec<u64>) {
    let mut per_pid: Vec<u64> = counts.iter().filter(|(k, _)| k.starts_with("pid ")).map(|(_, &n)| n).collect();
    per_pid.sort_unstable();
    (counts.get("abs").copied(), per_pid)
}

fn ctypes_calls_into_libc_are_counted_exactly(mode: Mode) {
    let n = 3000;
    let Some(run) = traced_unharmed(mode, &[], COUNT_ABS, &python(&["ctypes", &n.to_string()])) else { return };
    assert_eq!(abs_calls(&run.counts()), (Some(n), vec![n]), "{}", run.said());
}

/// `children` children with `start` (fork or spawn), each calling abs() `k` times,
/// as the parent does too: every process's calls are counted.
fn multiprocessing_children_are_counted_exactly(mode: Mode, start: &str) {
    let (children, k) = (3u64, 400u64);
    let args = [start, &children.to_string(), &k.to_string()];
    let Some(run) = traced_unharmed(mode, &[], COUNT_ABS, &python(&args)) else { return };
    let want = (Some((children + 1) * k), vec![k; children as usize + 1]);
    assert_eq!(abs_calls(&run.counts()), want, "{}", run.said());
}

fn multiprocessing_fork_children_are_counted_exactly(mode: Mode) {
    multiprocessing_children_are_counted_exactly(mode, "fork");
}

fn multiprocessing_spawn_children_are_counted_exactly(mode: Mode) {
    multiprocessing_children_are_counted_exactly(mode, "spawn");
}

fn a_library_loaded_with_sigurg_blocked_fires(mode: Mode) {
    let n = 100;
    // libzstd.so.1 is not mapped until the script loads it: -Z.
    let script = "pid$target::ZSTD_versionNumber:entry { @c[probefunc] = count(); } END { printa(\"%s=%@d\\n\", @c); }";
    let Some(run) = traced_unharmed(mode, &["-Z"], script, &python(&["sigurg", &n.to_string()])) else { return };
    assert_eq!(run.counts(), expect(&[("ZSTD_versionNumber", n)]), "{}", run.said());
}
