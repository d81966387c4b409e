//! Tier of real programs: a Rust program built by Cargo as Rust programs are built
//! (tests/real/rust: the default linker, rust-lld, and v0 mangling), with threads, a
//! generic function instantiated twice and a closure, traced by demangled names. Its
//! first functions share their file page with the read-only segment before `.text`,
//! as in every lld-linked binary: they must fire as the others do.

mod real;
mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use real::{build, build_dir, cmd, expect, functions, real_modes, source, traced_unharmed, Mode};

real_modes!(a_cargo_built_program_counts_every_call_of_its_functions);

/// tests/real/rust built once per test run, release, into target/real/rust.
fn realrust() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = build_dir().join("rust");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--release", "--offline", "--locked", "--quiet", "--manifest-path"])
            .arg(source("rust/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            // The test run's own settings would override the program's.
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET")
            .env("RUSTFLAGS", "-Csymbol-mangling-version=v0");
        build("realrust", &mut cargo);
        let exe = target.join("release/realrust");
        assert_built_as_rust_builds(&exe);
        exe
    })
}

/// The program is what the test is about: linked by lld, names in v0 mangling, and a
/// counted function in `.text`'s first file page, which a read-only segment maps too.
fn assert_built_as_rust_builds(exe: &Path) {
    let comment = Command::new("readelf").args(["-p", ".comment"]).arg(exe).output().expect("readelf");
    let comment = String::from_utf8_lossy(&comment.stdout);
    assert!(comment.contains("Linker: LLD"), "{} was not linked by lld:\n{comment}", exe.display());
    let raw = functions(exe, false);
    assert!(raw.iter().any(|(_, n)| n.starts_with("_R") && n.contains("tier_plain_work")), "no v0-mangled names");
    let shared: Vec<String> = functions(exe, true)
        .into_iter()
        .filter(|(addr, name)| name.contains("tier_") && in_shared_text_page(exe, *addr))
        .map(|(_, name)| name)
        .collect();
    assert!(!shared.is_empty(), "no tier_ function of {} is in .text's first page (check `nm`)", exe.display());
}

/// A LOAD segment of `readelf -lW`: file offset, virtual address, file size, executable.
fn load_segments(exe: &Path) -> Vec<(u64, u64, u64, bool)> {
    let out = Command::new("readelf").args(["-lW"]).arg(exe).output().expect("readelf");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() != Some(&"LOAD") || f.len() < 8 {
                return None;
            }
            Some((hex(f[1])?, hex(f[2])?, hex(f[4])?, f[6..f.len() - 1].concat().contains('E')))
        })
        .collect()
}

/// Whether the code at `vaddr` lies in a file page that a non-executable segment maps
/// too: the page lld shares between the read-only data and the start of `.text`.
fn in_shared_text_page(exe: &Path, vaddr: u64) -> bool {
    let segments = load_segments(exe);
    let Some(&(off, va, _, _)) = segments.iter().find(|&&(_, va, size, x)| x && vaddr >= va && vaddr < va + size)
    else {
        return false;
    };
    let page = (vaddr - va + off) & !0xfff;
    segments.iter().any(|&(o, _, size, x)| !x && o < page + 0x1000 && o + size > page)
}

fn a_cargo_built_program_counts_every_call_of_its_functions(mode: Mode) {
    let (threads, rounds) = (4u64, 2000u64);
    let exe = mode.own(realrust());
    let script = "pid$target::*tier_*:entry, pid$target::*tier_*:return { @c[probefunc, probename] = count(); } \
                  END { printa(\"%s %s=%@d\\n\", @c); }";
    let Some(run) = traced_unharmed(mode, &[], script, &cmd(&[&exe, &threads.to_string(), &rounds.to_string()])) else {
        return;
    };
    // Per thread and round: tier_round once, which calls tier_plain_work and
    // tier_generic_work::<u32> once, ::<u64> twice, tier_closure_work three times, and
    // through it the closure.
    let calls = threads * rounds;
    let mut want = Vec::new();
    for (f, n) in [
        ("realrust::tier_round", calls),
        ("realrust::tier_plain_work", calls),
        ("realrust::tier_generic_work::<u32>", calls),
        ("realrust::tier_generic_work::<u64>", 2 * calls),
        ("realrust::tier_closure_work", 3 * calls),
        ("realrust::tier_round::{closure#0}", 3 * calls),
    ] {
        want.push((format!("{f} entry"), n));
        want.push((format!("{f} return"), n));
    }
    assert_eq!(run.counts(), expect(&want), "{}", run.said());
}
