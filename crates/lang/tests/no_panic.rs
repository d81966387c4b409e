//! A fuzzer's guarantee without a fuzzer: the seed scripts of `fuzz/`, mutated
//! deterministically a few thousand times, go through parse, check and error
//! rendering, and nothing panics. The real fuzz targets live in `fuzz/` (see its
//! README); this keeps their main property checked by every `cargo test`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use udtrace_lang::check::Checker;
use udtrace_lang::diag::{render, Origin, Style};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::parser::{parse_program, parse_script, DescAlign};

const SEEDS: &[&str] = &[
    include_str!("../../../fuzz/seeds/d/control.d"),
    include_str!("../../../fuzz/seeds/d/count_syscalls.d"),
    include_str!("../../../fuzz/seeds/d/latency.d"),
    include_str!("../../../fuzz/seeds/d/llquantize.d"),
    include_str!("../../../fuzz/seeds/d/macros.d"),
    include_str!("../../../fuzz/seeds/d/small.d"),
    include_str!("../../../fuzz/seeds/d/strings.d"),
    include_str!("../../../fuzz/seeds/d/typedefs.d"),
];

/// Fragments that mutations splice in: they reach deeper than random bytes do.
const TOKENS: &[&str] = &[
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ";",
    ",",
    "/",
    "*",
    "->",
    "@",
    "$",
    "$$",
    "`",
    "\"",
    "'",
    "\\",
    ":",
    "::",
    "#",
    "\n#pragma D option ",
    "\n# 7 \"x.d\"\n",
    "self->",
    "this->",
    "struct ",
    "sizeof(",
    "stringof ",
    "offsetof(",
    "(int)",
    "(char *)",
    "0x",
    "1LL",
    "-",
    "?",
    "=",
    "++",
    "<<",
    "%",
    "printf(\"%",
    "$1",
    "$$3",
    "$target",
    "\u{e9}",
    "\u{1f600}",
    "\0",
    "/*",
    "*/",
    "//",
    "typedef ",
    "inline ",
    "if (",
    "else ",
    "count()",
    "quantize(",
    "BEGIN",
    "pid$1::$2:entry",
    "translator ",
];

/// xorshift64*: tiny, fixed-seed and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four random edits of `input`.
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = rng.next() as u8;
            }
            2 => b.truncate(rng.below(len + 1)),
            3 if len > 0 => {
                // Duplicate a range in place: nests or repeats whatever it holds.
                let start = rng.below(len);
                let end = start + rng.below((len - start).min(64) + 1);
                let copy = b[start..end].to_vec();
                let at = rng.below(len + 1);
                b.splice(at..at, copy);
            }
            4 if len > 0 => {
                let start = rng.below(len);
                let end = start + rng.below((len - start).min(32) + 1);
                b.drain(start..end);
            }
            5 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let at = rng.below(len + 1);
                b.splice(at..at, t.iter().copied());
            }
            _ => {
                // Splice in a piece of another seed.
                let other = SEEDS[rng.below(SEEDS.len())].as_bytes();
                let start = rng.below(other.len());
                let end = start + rng.below((other.len() - start).min(128) + 1);
                let at = rng.below(len + 1);
                b.splice(at..at, other[start..end].iter().copied());
            }
        }
    }
    b
}

/// `-p 4242 -s t.d 1 main '"s"'`: what the seeds' macro references expect.
fn macros() -> MacroArgs {
    let mut m = MacroArgs::new(["t.d", "1", "main", "\"s\""].iter().map(|s| s.to_string()).collect());
    m.target = Some(4242);
    m
}

/// Parse, check and render as the binary does, as a script and as a description.
fn compile(src: &str) {
    let script = Origin::Script("t.d".into());
    for (parsed, origin) in [
        (parse_script(src), &script),
        (parse_program(src, DescAlign::Name), &Origin::Description),
        (parse_program(src, DescAlign::Function), &Origin::Description),
    ] {
        let program = match parsed {
            Ok(p) => p,
            Err(e) => {
                render(&e, origin, src, Style { errtags: true, excerpt: true });
                continue;
            }
        };
        let macros = macros();
        let mut checker = Checker::new(&macros);
        if let Err(e) = checker.add_source(&program, 0, src) {
            render(&e, origin, src, Style { errtags: true, excerpt: true });
        }
        let _ = macros.check_unused();
    }
}

#[test]
fn seeds_compile() {
    for seed in SEEDS {
        let p = parse_script(seed)
            .unwrap_or_else(|e| panic!("{}", render(&e, &Origin::Script("seed.d".into()), seed, Style::default())));
        let macros = macros();
        let mut checker = Checker::new(&macros);
        if let Err(e) = checker.add_source(&p, 0, seed) {
            panic!("{}", render(&e, &Origin::Script("seed.d".into()), seed, Style::default()));
        }
    }
}

#[test]
fn mutated_seeds_never_panic() {
    let mut rng = Rng(0x5eed_d7ac_e000_0001);
    // Panics are caught so that the report names every input that panicked.
    let mut failures = Vec::new();
    for _ in 0..4000 {
        let seed = SEEDS[rng.below(SEEDS.len())].as_bytes();
        let input = mutate(&mut rng, seed);
        let src = String::from_utf8_lossy(&input).into_owned();
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| compile(&src))) {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            failures.push(format!("{src:?}: {}", msg.unwrap_or_default()));
        }
    }
    assert!(failures.is_empty(), "{} inputs panicked:\n{}", failures.len(), failures.join("\n"));
}
