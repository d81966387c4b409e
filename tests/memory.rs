//! Issue 15, item 6: udtrace's own memory stays flat while a daemon creates thousands
//! of short-lived processes under pid$target probes: what it knows of a process goes
//! once the process is reaped and its firings consumed. (bench/memory.sh runs 100,000.)

use std::process::Stdio;
use std::time::Duration;

mod util;

use util::{bpf_gate, fixture, kill_after_deadline, pid_backends, stdout, Backend, Guard};

pid_backends!(memory_stays_flat_over_thousands_of_short_lived_processes);

/// `RssAnon` of `pid` in KiB: udtrace's own heap, without the rings it shares with the
/// traced processes (their pages are touched up to the ring's size, then reused).
fn rss_anon(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("RssAnon:"))?.split_whitespace().next()?.parse().ok()
}

fn memory_stays_flat_over_thousands_of_short_lived_processes(backend: Backend) {
    // forker: every fifth worker execs worker2 (posix_spawn), the others are forks.
    let (n, m, k) = (8000u64, 2u64, 1u64);
    let cmd = format!("{} {n} {m} {k} spawn", fixture("forker"));
    let prog = "pid$target::target:entry { @ = count(); } END { printa(\"count %@d\\n\", @); }";
    let mut g = Guard::spawn(backend.command(&["-q", "-n", prog, "-c", &cmd]).stdout(Stdio::piped()));
    let pid = g.child().id();
    kill_after_deadline(pid);
    let mut samples = Vec::new();
    while let Some(kib) = rss_anon(pid) {
        samples.push(kib);
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = g.take().wait_with_output().expect("udtrace ends");
    bpf_gate(&out);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e = n / 5;
    let want = 3 + (n - e) * m + e * k;
    assert!(stdout(&out).contains(&format!("count {want}\n")), "every firing: {}", stdout(&out));
    // Zombie samples (status without RssAnon) end the list; the run's last third
    // against its first: ~5,000 processes ended in between. Before udtrace forgot
    // ended processes it grew by 1.6 KiB each (8 MiB here).
    assert!(samples.len() >= 6, "too few samples: {samples:?}");
    let (early, late) = (samples[samples.len() / 3], *samples.last().expect("samples"));
    assert!(late <= early + 2048, "udtrace's heap grew from {early} KiB to {late} KiB: {samples:?}");
}
