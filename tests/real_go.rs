//! Tier of real programs: a Go program (tests/real/go) built by Debian's Go toolchain
//! twice, static (CGO_ENABLED=0, Go's own linker) and cgo-linked (gcc as the external
//! linker, libc called through cgo), whose goroutines' stacks grow. Go code has no
//! `.eh_frame` (its unwind rules are in a compressed `.debug_frame`), runs on small
//! stacks the Go runtime moves, and in the cgo build on the stacks of threads libc
//! made: counts must be exact, and stacks right and harmless.

mod real;
mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use real::{
    build, build_dir, cmd, expect, frame, real_modes, require, return_addresses, source, stacks, traced_unharmed, Mode,
};

real_modes!(
    a_static_go_program_counts_every_call,
    a_cgo_go_program_counts_every_call,
    stacks_in_a_static_go_program_show_every_caller_unharmed,
    stacks_in_a_cgo_go_program_show_every_caller_unharmed,
    reading_arguments_in_a_go_program_is_said_to_read_the_c_registers,
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Static,
    Cgo,
}

/// (goroutines, rounds, depth) of every run: the stacks grow to about 110 KiB.
const G: u64 = 4;
const N: u64 = 150;
const DEPTH: u64 = 200;
/// Rounds of the runs that take stacks.
const N_STACKS: u64 = 50;

/// realgo built once per test run and link mode, into target/real/go/bin; the Go
/// caches and home are under target/real/go too, apart from the user's.
fn realgo(link: Link) -> &'static Path {
    static STATIC: OnceLock<PathBuf> = OnceLock::new();
    static CGO: OnceLock<PathBuf> = OnceLock::new();
    let cell = if link == Link::Static { &STATIC } else { &CGO };
    cell.get_or_init(|| {
        let go = require("go", "golang-go");
        let dir = build_dir().join("go");
        for sub in ["cache", "path", "home"] {
            std::fs::create_dir_all(dir.join(sub)).expect("create Go dirs");
        }
        let name = if link == Link::Static { "realgo-static" } else { "realgo-cgo" };
        let exe = dir.join("bin").join(name);
        let mut c = Command::new(go);
        c.args(["build", "-o"]).arg(&exe).current_dir(source("go"));
        c.env("GOCACHE", dir.join("cache")).env("GOPATH", dir.join("path")).env("HOME", dir.join("home"));
        c.env("GOFLAGS", "").env("GOPROXY", "off").env("GO111MODULE", "on").env("GOTOOLCHAIN", "local");
        match link {
            Link::Static => c.env("CGO_ENABLED", "0"),
            Link::Cgo => c.env("CGO_ENABLED", "1").arg("-ldflags=-linkmode=external"),
        };
        build(name, &mut c);
        exe
    })
}

/// realgo with `rounds` rounds per goroutine.
fn run_cmd(mode: Mode, link: Link, rounds: u64) -> Vec<String> {
    let exe = mode.own(realgo(link));
    cmd(&[&exe, &G.to_string(), &rounds.to_string(), &DEPTH.to_string()])
}

fn counts_every_call(mode: Mode, link: Link) {
    // Entries of functions whose prologue checks the stack run again whenever that
    // check sends them through runtime.morestack (to grow the stack, or for the
    // scheduler to preempt the goroutine) and back: their returns are what is
    // counted. main.work, a small leaf, has no such check.
    let mut script = "pid$target::main.work:entry, pid$target::main.level1:return, pid$target::main.level2:return, \
                      pid$target::main.deep:return { @c[probefunc, probename] = count(); } "
        .to_string();
    if link == Link::Cgo {
        script += "pid$target:libc:abs:entry { @c[probefunc, probename] = count(); } ";
    }
    script += "END { printa(\"%s %s=%@d\\n\", @c); }";
    let Some(run) = traced_unharmed(mode, &[], &script, &run_cmd(mode, link, N)) else { return };
    let rounds = G * N;
    let mut want = vec![
        ("main.work entry", 2 * rounds),
        ("main.level1 return", rounds),
        ("main.level2 return", rounds),
        ("main.deep return", rounds * (DEPTH + 1)),
    ];
    if link == Link::Cgo {
        want.push(("abs entry", rounds));
    }
    assert_eq!(run.counts(), expect(&want), "{}", run.said());
    // No clause reads arguments: nothing to warn of.
    assert_eq!(go_argument_notes(&run), 0, "{}", run.said());
}

/// udtrace's lines saying a Go program's `argN` are the C ABI's registers.
fn go_argument_notes(run: &real::Traced) -> usize {
    run.notices
        .iter()
        .filter(|l| l.contains(" is a Go program: arg0..arg9 and args[] are the C ABI's registers"))
        .count()
}

/// A clause reading `arg0` in a Go function reads rdi, not the function's argument
/// (Go's register ABI passes it in rax): udtrace says so once, and still counts.
fn reading_arguments_in_a_go_program_is_said_to_read_the_c_registers(mode: Mode) {
    let script = "pid$target::main.work:entry /arg0 == arg0/ { @c[probefunc, probename] = count(); } \
                  pid$target::main.work:entry /args[0] == args[0]/ { @d[probefunc] = count(); } \
                  END { printa(\"%s %s=%@d\\n\", @c); printa(\"%s args=%@d\\n\", @d); }";
    let Some(run) = traced_unharmed(mode, &[], script, &run_cmd(mode, Link::Static, N)) else { return };
    let rounds = G * N;
    let want = expect(&[("main.work entry", 2 * rounds), ("main.work args", 2 * rounds)]);
    assert_eq!(run.counts(), want, "{}", run.said());
    assert_eq!(go_argument_notes(&run), 1, "{}", run.said());
}

fn a_static_go_program_counts_every_call(mode: Mode) {
    counts_every_call(mode, Link::Static);
}

fn a_cgo_go_program_counts_every_call(mode: Mode) {
    counts_every_call(mode, Link::Cgo);
}

fn stacks_show_every_caller(mode: Mode, link: Link) {
    let exe = realgo(link);
    let script = "pid$target::main.work:entry { @s[ustack()] = count(); @d = min(ustackdepth); } \
                  END { printa(\"least depth=%@d\\n\", @d); printa(@s); }";
    // Fewer rounds: each record carries 8 KiB of stack, and all of them fit in the
    // buffers even when udtrace is slow to drain them.
    let Some(run) = traced_unharmed(mode, &[], script, &run_cmd(mode, link, N_STACKS)) else { return };
    // main.work is called by main.level2 (called by main.level1) and by the deepest
    // main.deep (called by main.deep): every stack shows the calls it is in.
    let only = |v: Vec<String>| -> String {
        assert_eq!(v.len(), 1, "one call site expected: {v:?}");
        v[0].clone()
    };
    let via_level2 = [
        "main.work".to_string(),
        only(return_addresses(exe, "main.level2", "main.work")),
        only(return_addresses(exe, "main.level1", "main.level2")),
    ];
    let via_deep = [
        "main.work".to_string(),
        only(return_addresses(exe, "main.deep", "main.work")),
        only(return_addresses(exe, "main.deep", "main.deep")),
    ];
    let (mut level2_calls, mut deep_calls) = (0, 0);
    for (frames, n) in stacks(&run.trace) {
        let top: Vec<&str> = frames.iter().take(3).map(|f| frame(f)).collect();
        // A goroutine's outermost frame is runtime.goexit's. The chain through
        // main.level2 is a few frames deep and whole (its goroutine's stack may end
        // right above it, at the end of Go's heap: all that is readable is captured);
        // the one through main.deep, 200 frames of over 512 bytes, runs past the 8 KiB
        // captured, which udtrace says.
        let whole = frames.last().is_some_and(|f| frame(f) == "runtime.goexit.abi0+0x1");
        if top == via_level2 {
            assert!(
                whole,
                "a stack through main.level2 ({n} times) stops short:\n{}\n{}",
                frames.join("\n"),
                run.said()
            );
            level2_calls += n;
        } else if top == via_deep {
            assert!(!whole && frames.len() < 100, "{}", run.said());
            deep_calls += n;
        } else {
            panic!(
                "a stack of main.work ({n} times) that starts neither {via_level2:?} nor {via_deep:?}:\n{}\n{}",
                frames.join("\n"),
                run.said()
            );
        }
    }
    assert_eq!((level2_calls, deep_calls), (G * N_STACKS, G * N_STACKS), "{}", run.said());
    let cut = format!(
        "{}: {deep_calls} user stacks were deeper than the 8192 bytes of stack captured at their firings: \
         their outer frames are missing (-x ustackframes=200 captures 16384 bytes)",
        util::NAME
    );
    assert!(run.notices.contains(&cut), "no notice {cut:?}: {}", run.said());
    let depth = run.counts()["least depth"];
    assert!(depth >= 3, "ustackdepth {depth} below the 3 frames every stack shows: {}", run.said());
}

fn stacks_in_a_static_go_program_show_every_caller_unharmed(mode: Mode) {
    stacks_show_every_caller(mode, Link::Static);
}

fn stacks_in_a_cgo_go_program_show_every_caller_unharmed(mode: Mode) {
    stacks_show_every_caller(mode, Link::Cgo);
}
