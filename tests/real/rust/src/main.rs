//! realrust: threads, a generic function instantiated twice and a closure, each
//! called an exact number of times.
//!
//!   realrust THREADS N
//!     each of THREADS threads calls tier_round N times, which calls tier_plain_work
//!     and tier_generic_work::<u32> once, tier_generic_work::<u64> twice, and
//!     tier_closure_work three times, which calls the closure of tier_round
//!     (tier_round::{closure#0}) once; prints "realrust: THREADS threads, N rounds,
//!     checksum C" and exits 0.
//!
//! rust-lld lays the generic instantiations out first in `.text`, in the file page it
//! shares with the read-only segment before it (tests/real_rust.rs checks that one of
//! these functions landed there).

use std::hint::black_box;

#[inline(never)]
fn tier_plain_work(x: u64) -> u64 {
    black_box(x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(7)
}

#[inline(never)]
fn tier_generic_work<T: Into<u64> + Copy>(x: T) -> u64 {
    black_box(x).into().wrapping_add(0x51)
}

#[inline(never)]
fn tier_closure_work(f: &dyn Fn(u64) -> u64, x: u64) -> u64 {
    black_box(f)(x)
}

#[inline(never)]
fn tier_round(seed: u64, i: u64) -> u64 {
    let mut c = tier_plain_work(seed ^ i);
    c ^= tier_generic_work::<u32>(i as u32);
    c ^= tier_generic_work::<u64>(i) ^ tier_generic_work::<u64>(i + 1);
    let salt = seed.rotate_left(13);
    let closure = move |x: u64| x.wrapping_mul(salt) ^ (x >> 3);
    for k in 0..3 {
        c = c.wrapping_add(tier_closure_work(&closure, i * 3 + k));
    }
    c
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: realrust THREADS N");
        std::process::exit(2)
    };
    if args.len() != 3 {
        usage();
    }
    let (Ok(threads), Ok(n)) = (args[1].parse::<u64>(), args[2].parse::<u64>()) else { usage() };
    let sums: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || (0..n).fold(0u64, |acc, i| acc.wrapping_add(tier_round(t + 1, i)))))
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let checksum = sums.iter().fold(0u64, |a, s| a.rotate_left(5) ^ s);
    println!("realrust: {threads} threads, {n} rounds, checksum {checksum:016x}");
}
