//! Tier of real programs: where user stacks end. Real programs recurse deeper than
//! the bytes of stack a firing captures, run threads on stacks that end right above
//! their frames, and call functions from signal handlers; `stackedges`
//! (tests/fixtures/stackedges.c) does each with a fixed call chain, so every frame of
//! every stack is known. A stack is whole, or udtrace says in one line what it lacks.

mod real;
mod util;

use std::path::Path;

use real::{cmd, real_modes, return_addresses, stacks, traced_unharmed, Mode, Traced};
use util::fixture;

real_modes!(a_stack_deeper_than_the_capture_says_so, a_thread_stack_is_captured_to_its_end,);

/// The one stack of `run`'s `@s[ustack()]`, seen `n` times, and the `depth=` its
/// `ustackdepth` printed.
fn one_stack(run: &Traced, n: u64) -> (Vec<String>, u64) {
    let all = stacks(&run.trace);
    assert_eq!(all.len(), 1, "one stack expected: {}", run.said());
    let (frames, count) = all.into_iter().next().expect("one stack");
    assert_eq!(count, n, "{}", run.said());
    (frames, run.counts()["depth"])
}

/// `module`function` of a frame, without its offset.
fn function(line: &str) -> &str {
    line.split_once('+').map_or(line, |(f, _)| f)
}

/// `module`caller+0xOFF` of the one call of `callee` in `caller`.
fn call_in(exe: &str, caller: &str, callee: &str) -> String {
    let at = return_addresses(Path::new(exe), caller, callee);
    assert_eq!(at.len(), 1, "one call of {callee} in {caller}: {at:?}");
    format!("stackedges`{}", at[0])
}

/// udtrace's line for `n` stacks that ran past the 8 KiB captured by default.
fn deeper_than_8k(n: u64) -> String {
    format!(
        "{}: {n} user stacks were deeper than the 8192 bytes of stack captured at their firings: their outer \
         frames are missing (-x ustackframes=200 captures 16384 bytes)",
        util::NAME
    )
}

const STACKS: &str = "END { printa(\"depth=%@d\\n\", @d); printa(@s); }";

fn a_stack_deeper_than_the_capture_says_so(mode: Mode) {
    // 40 levels of 256-byte frames: over 10 KiB, more than the 8 KiB a firing copies
    // for ustackframes' 100 frames, less than the 16 KiB it copies for 200.
    let (n, depth) = (20u64, 40usize);
    let exe = mode.own(fixture("stackedges"));
    let script = format!("pid$target::in_deep:entry {{ @s[ustack()] = count(); @d = max(ustackdepth); }} {STACKS}");
    let run_cmd = cmd(&[&exe, "deep", &n.to_string(), &depth.to_string()]);
    let leaf = call_in(&exe, "recurse", "in_deep");
    let inner = call_in(&exe, "recurse", "recurse");

    let Some(run) = traced_unharmed(mode, &[], &script, &run_cmd) else { return };
    let (frames, deepest) = one_stack(&run, n);
    // The innermost frames as they are, then nothing: every one was cut, and said so.
    assert!(frames.len() > 10 && frames.len() < depth, "{}", run.said());
    assert_eq!(frames[..2], ["stackedges`in_deep".to_string(), leaf.clone()], "{}", run.said());
    assert!(frames[2..].iter().all(|f| *f == inner), "{}", run.said());
    assert_eq!(deepest, frames.len() as u64, "ustackdepth counts what ustack() shows: {}", run.said());
    assert!(run.notices.contains(&deeper_than_8k(n)), "{}", run.said());

    let Some(run) = traced_unharmed(mode, &["-x", "ustackframes=200"], &script, &run_cmd) else { return };
    let (frames, deepest) = one_stack(&run, n);
    let mut want = vec!["stackedges`in_deep".to_string(), leaf];
    want.extend(std::iter::repeat_n(inner, depth));
    want.push(call_in(&exe, "main", "recurse"));
    assert_eq!(frames[..want.len()], want, "{}", run.said());
    let outer: Vec<&str> = frames[want.len()..].iter().map(|f| function(f)).collect();
    assert_eq!(
        outer,
        ["libc.so.6`__libc_start_call_main", "libc.so.6`__libc_start_main", "stackedges`_start"],
        "{}",
        run.said()
    );
    assert_eq!(deepest, frames.len() as u64, "{}", run.said());
    assert!(!run.notices.iter().any(|l| l.contains("user stack")), "{}", run.said());
}

fn a_thread_stack_is_captured_to_its_end(mode: Mode) {
    // The thread's frames reach 8 KiB above in_thread's, and its stack ends 12 to 16
    // KiB above it: a 16 KiB copy fails whole, and what is readable is kept, on every
    // backend alike (BPF's reads once kept only 8 KiB, a halving of 16).
    let n = 20u64;
    let exe = mode.own(fixture("stackedges"));
    let script = format!("pid$target::in_thread:entry {{ @s[ustack()] = count(); @d = max(ustackdepth); }} {STACKS}");
    let run_cmd = cmd(&[&exe, "top", &n.to_string()]);
    let ours = [
        "stackedges`in_thread".to_string(),
        call_in(&exe, "chain_b", "in_thread"),
        call_in(&exe, "chain_a", "chain_b"),
        call_in(&exe, "thread_main", "chain_a"),
    ];

    let Some(run) = traced_unharmed(mode, &[], &script, &run_cmd) else { return };
    let (frames, _) = one_stack(&run, n);
    assert_eq!(frames, ours, "{}", run.said());
    assert!(run.notices.contains(&deeper_than_8k(n)), "{}", run.said());

    let Some(run) = traced_unharmed(mode, &["-x", "ustackframes=200"], &script, &run_cmd) else { return };
    let (frames, deepest) = one_stack(&run, n);
    assert_eq!(frames[..ours.len()], ours, "{}", run.said());
    let outer: Vec<&str> = frames[ours.len()..].iter().map(|f| function(f)).collect();
    assert_eq!(outer, ["libc.so.6`start_thread", "libc.so.6`clone3"], "{}", run.said());
    assert_eq!(deepest, frames.len() as u64, "{}", run.said());
    assert!(!run.notices.iter().any(|l| l.contains("user stack")), "{}", run.said());
}
