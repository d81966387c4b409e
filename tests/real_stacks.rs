//! Tier of real programs: where user stacks end. Real programs recurse deeper than
//! the bytes of stack a firing captures, run threads on stacks that end right above
//! their frames, and call functions from signal handlers, on their own stack or an
//! alternate one; `stackedges` (tests/fixtures/stackedges.c) does each with a fixed
//! call chain, so every frame of every stack is known. A stack is whole, or udtrace
//! says in one line what it lacks.

mod real;
mod util;

use std::path::Path;
use std::process::Command;

use real::{cmd, real_modes, return_addresses, stacks, traced_unharmed, Mode, Traced};
use util::fixture;

real_modes!(
    a_stack_deeper_than_the_capture_says_so,
    a_thread_stack_is_captured_to_its_end,
    a_signal_handler_s_stack_goes_on_into_the_interrupted_code,
    a_handler_on_an_alternate_stack_ends_at_the_interrupted_instruction,
);

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

/// `module`trap_here+0xOFF` of its `ud2`, where the signal interrupts it.
fn trapping_instruction(exe: &str) -> String {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(exe).output().expect("objdump");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().skip_while(|l| !l.ends_with("<trap_here>:"));
    let start = lines.next().and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok());
    let start = start.expect("trap_here in stackedges");
    let ud2 = lines
        .take_while(|l| !l.trim().is_empty())
        .find_map(|l| {
            let (addr, insn) = l.trim().split_once(':')?;
            (insn.trim() == "ud2").then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .expect("a ud2 in trap_here");
    match ud2 - start {
        0 => "stackedges`trap_here".to_string(),
        off => format!("stackedges`trap_here+{off:#x}"),
    }
}

/// The frames of `stackedges same|alt` from the probe in the handler to the
/// instruction the signal interrupted: the handler's frames, the signal trampoline
/// it returns into (glibc's `__restore_rt`, a symbol of size 0 in libc's debug file),
/// the interrupted instruction.
fn handler_frames(exe: &str) -> Vec<String> {
    vec![
        "stackedges`in_handler".to_string(),
        format!("stackedges`{}", handler_call(exe)),
        "libc.so.6`__restore_rt".to_string(),
        trapping_instruction(exe),
    ]
}

/// `handler+0xOFF` of its call of in_handler (handler is static: not in `nm`'s
/// globals, but objdump names it).
fn handler_call(exe: &str) -> String {
    let at = return_addresses(Path::new(exe), "handler", "in_handler");
    assert_eq!(at.len(), 1, "one call of in_handler in handler: {at:?}");
    at[0].clone()
}

/// udtrace's line for `n` stacks that ran past the 8 KiB captured by default.
fn deeper_than_8k(n: u64) -> String {
    format!(
        "{}: {n} user stacks were deeper than the 8192 bytes of stack captured at their firings: their outer \
         frames are missing (-x ustackframes=200 captures 16384 bytes)",
        util::NAME
    )
}

/// The script that takes `func`'s stacks at its entry and their greatest
/// `ustackdepth`.
fn stacks_of(func: &str) -> String {
    format!(
        "pid$target::{func}:entry {{ @s[ustack()] = count(); @d = max(ustackdepth); }} \
         END {{ printa(\"depth=%@d\\n\", @d); printa(@s); }}"
    )
}

/// `run`'s one stack, seen `n` times, is `inner`, then frames in `outer` (libc's,
/// whose offsets depend on its build; the executable's `_start`) without their
/// offsets; `ustackdepth` counts them all, and udtrace said nothing of stacks.
fn assert_whole(run: &Traced, n: u64, inner: &[String], outer: &[&str]) {
    let (frames, deepest) = one_stack(run, n);
    assert_eq!(frames[..inner.len().min(frames.len())], *inner, "{}", run.said());
    let rest: Vec<&str> = frames[inner.len()..].iter().map(|f| function(f)).collect();
    assert_eq!(rest, outer, "{}", run.said());
    assert_eq!(deepest, frames.len() as u64, "ustackdepth counts what ustack() shows: {}", run.said());
    assert!(!run.notices.iter().any(|l| l.contains("user stack")), "{}", run.said());
}

/// Where the main thread's stack starts.
const MAIN: [&str; 3] = ["libc.so.6`__libc_start_call_main", "libc.so.6`__libc_start_main", "stackedges`_start"];

fn a_stack_deeper_than_the_capture_says_so(mode: Mode) {
    // 40 levels of 256-byte frames: over 10 KiB, more than the 8 KiB a firing copies
    // for ustackframes' 100 frames, less than the 16 KiB it copies for 200.
    let (n, depth) = (20u64, 40usize);
    let exe = mode.own(fixture("stackedges"));
    let script = stacks_of("in_deep");
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
    let mut want = vec!["stackedges`in_deep".to_string(), leaf];
    want.extend(std::iter::repeat_n(inner, depth));
    want.push(call_in(&exe, "main", "recurse"));
    assert_whole(&run, n, &want, &MAIN);
}

fn a_thread_stack_is_captured_to_its_end(mode: Mode) {
    // The thread's frames reach 8 KiB above in_thread's, and its stack ends 12 to 16
    // KiB above it: a 16 KiB copy fails whole, and what is readable is kept, on every
    // backend alike (BPF's reads once kept only 8 KiB, a halving of 16).
    let n = 20u64;
    let exe = mode.own(fixture("stackedges"));
    let script = stacks_of("in_thread");
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
    assert_whole(&run, n, &ours, &["libc.so.6`start_thread", "libc.so.6`clone3"]);
}

fn a_signal_handler_s_stack_goes_on_into_the_interrupted_code(mode: Mode) {
    // The handler runs on the stack the signal interrupted, the signal frame between
    // them: the stack goes on from the registers the kernel saved there, as DTrace's
    // on illumos shows the interrupted frames after the handler's.
    let n = 20u64;
    let exe = mode.own(fixture("stackedges"));
    let script = stacks_of("in_handler");
    let Some(run) = traced_unharmed(mode, &[], &script, &cmd(&[&exe, "same", &n.to_string()])) else { return };
    let mut want = handler_frames(&exe);
    want.extend([
        call_in(&exe, "chain_b", "trap_here"),
        call_in(&exe, "chain_a", "chain_b"),
        call_in(&exe, "main", "chain_a"),
    ]);
    assert_whole(&run, n, &want, &MAIN);
}

fn a_handler_on_an_alternate_stack_ends_at_the_interrupted_instruction(mode: Mode) {
    // The interrupted code's registers are in the signal frame on the alternate
    // stack, its stack is not: the stack ends at the instruction, and udtrace says so.
    let n = 20u64;
    let exe = mode.own(fixture("stackedges"));
    let script = stacks_of("in_handler");
    let Some(run) = traced_unharmed(mode, &[], &script, &cmd(&[&exe, "alt", &n.to_string()])) else { return };
    let (frames, deepest) = one_stack(&run, n);
    assert_eq!(frames, handler_frames(&exe), "{}", run.said());
    assert_eq!(deepest, frames.len() as u64, "{}", run.said());
    let said = format!(
        "{}: {n} user stacks end at the instruction a signal interrupted: their handlers ran on an alternate \
         signal stack, and the interrupted stack is not captured at a firing",
        util::NAME
    );
    assert!(run.notices.contains(&said), "{}", run.said());
}
