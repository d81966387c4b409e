//! The README's main job, end to end: `examples/workers.d` on the example daemon
//! `examples/workerd.rs` (built by Cargo with the tests), whose workers are forked and
//! exec'd. Every request of every worker is counted, exactly, by probes placed with
//! `pid$target` on the daemon.

mod util;

use util::{pid_backends, stdout, workerd, Backend};

pid_backends!(the_main_job_counts_every_request_of_every_worker);

fn the_main_job_counts_every_request_of_every_worker(backend: Backend) {
    let (workers, requests) = (3u64, 250u64);
    let cmd = format!("{} {workers} {requests}", workerd().display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/workers.d");
    let Some(out) = backend.traced(&["-s", script, "-c", &cmd]) else { return };
    let text = stdout(&out);
    assert!(out.status.success(), "udtrace failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(&format!("workerd: {workers} of {workers} workers served {requests} requests each")),
        "{text}"
    );
    assert!(text.contains(&format!("\n{workers} workers\n")), "{text}");
    for w in 0..workers {
        let row = format!("\n{w:<8} {requests:>8}\n");
        assert!(text.contains(&row), "worker {w} should have {requests} requests:\n{text}");
    }
    assert!(text.contains(&format!("requests answered: {}\n", workers * requests)), "{text}");
    // The latency distribution counts every answered request once.
    let counted: u64 = text
        .lines()
        .skip_while(|l| !l.starts_with("handle_request latency"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[1].starts_with('|')).then(|| f[f.len() - 1].parse::<u64>().ok()).flatten()
        })
        .sum();
    assert_eq!(counted, workers * requests, "{text}");
}
