//! The fuzz targets' guarantee on every `cargo test`: the seeds of `fuzz/seeds/`, mutated
//! with a fixed seed, go through the harness of their target, and none panics. The fuzz
//! targets themselves run in `fuzz/` (see its README).

use std::panic::{catch_unwind, AssertUnwindSafe};

use udtrace_fuzz_harness::mutate::{mutate, Rng};

macro_rules! seeds {
    ($dir:literal: $($name:literal),* $(,)?) => {
        &[$(include_bytes!(concat!("../../../fuzz/seeds/", $dir, "/", $name))),*]
    };
}

const ELF: &[&[u8]] = seeds!("elf":
    "prog", "prog-stripped", "prog-minidebuginfo", "prog-debuglink", "prog-dwarf", "static-nolibc",
    "static-nolibc-stripped", "libshapes-cxx.so", "prog-truncated-1k", "libshapes-truncated-5k", "header-only",
    "usdt-notes",
);
const RECORD: &[&[u8]] = seeds!("record": "ring-hostile-header", "ring-laps", "ring-dead-writer");
const PROCFS: &[&[u8]] = seeds!("procfs": "maps", "maps-deleted", "stat", "stat-odd-comm", "status", "auxv");

/// Runs `target` on each seed and on `rounds` mutations of them; every input that
/// panicked is reported, as a byte string a unit test can hold.
fn no_panics(target: fn(&[u8]), seeds: &[&[u8]], rounds: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut failures = Vec::new();
    let inputs = seeds.iter().map(|s| s.to_vec()).chain((0..rounds).map(|_| {
        let s = seeds[rng.below(seeds.len())];
        mutate(&mut rng, s, seeds)
    }));
    for input in inputs {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| target(&input))) {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            let shown: String = input.escape_ascii().take(400).map(char::from).collect();
            failures.push(format!("b\"{shown}\" ({} bytes): {}", input.len(), msg.unwrap_or_default()));
        }
    }
    assert!(failures.is_empty(), "{} inputs panicked:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn object_files() {
    no_panics(udtrace_fuzz_harness::elf::run, ELF, 2000, 0x5eed_e1f0_0000_0001);
}

#[test]
fn ring_records() {
    no_panics(udtrace_fuzz_harness::record::run, RECORD, 10000, 0x5eed_0ec0_0000_0002);
}

#[test]
fn proc_files() {
    no_panics(udtrace_fuzz_harness::procfs::run, PROCFS, 10000, 0x5eed_9f00_0000_0003);
}
