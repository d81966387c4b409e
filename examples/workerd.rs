//! A small forking daemon, the example udtrace's main job traces: the daemon starts
//! `workers` workers (each a fork and an exec of this same program) and waits for them;
//! worker `w` serves `requests` requests by calling `handle_request(w, r)` for r in
//! 0..requests, each a little work whose length varies with `r`, so that request
//! latencies spread over several powers of two. Exact numbers to check a trace by:
//! `workers × requests` calls of `handle_request`, `requests` per worker.
//!
//! Usage: workerd [workers] [requests]   (default 4 1000)

use std::hint::black_box;
use std::process::{Command, ExitCode};

/// One request: `r % 8` rounds of spinning, each twice the last, so the latency
/// distribution has eight steps. Returns a checksum the worker prints, so the work
/// cannot be optimized away.
#[no_mangle]
#[inline(never)]
pub extern "C" fn handle_request(worker: u64, r: u64) -> u64 {
    let rounds = 1u64 << (r % 8);
    let mut acc = worker;
    for i in 0..rounds * 64 {
        acc = black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    acc
}

/// A worker's life: serve every request, report.
#[no_mangle]
#[inline(never)]
pub extern "C" fn worker_main(worker: u64, requests: u64) -> u64 {
    (0..requests).fold(0u64, |sum, r| sum ^ handle_request(worker, r))
}

fn number(arg: Option<String>, default: u64) -> Result<u64, String> {
    match arg {
        None => Ok(default),
        Some(a) => a.parse().map_err(|_| format!("not a number: {a}")),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--worker") {
        let (Ok(w), Ok(n)) = (number(args.next(), 0), number(args.next(), 0)) else {
            eprintln!("workerd: bad worker arguments");
            return ExitCode::from(2);
        };
        let sum = worker_main(w, n);
        println!("worker {w}: {n} requests (checksum {sum:016x})");
        return ExitCode::SUCCESS;
    }
    let (workers, requests) = match (number(first, 4), number(args.next(), 1000)) {
        (Ok(w), Ok(r)) => (w, r),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("workerd: {e}\nusage: workerd [workers] [requests]");
            return ExitCode::from(2);
        }
    };
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("workerd: cannot find myself: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Every worker is a new process running a new image: fork and exec.
    let mut children = Vec::new();
    for w in 0..workers {
        match Command::new(&me).args(["--worker", &w.to_string(), &requests.to_string()]).spawn() {
            Ok(c) => children.push(c),
            Err(e) => eprintln!("workerd: cannot start worker {w}: {e}"),
        }
    }
    let mut ok = 0;
    for mut c in children {
        if c.wait().is_ok_and(|s| s.success()) {
            ok += 1;
        }
    }
    println!("workerd: {ok} of {workers} workers served {requests} requests each");
    if ok == workers {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
