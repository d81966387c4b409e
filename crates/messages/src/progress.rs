//! A progress line on a terminal for work that takes long before tracing starts
//! (arming thousands of probes in a daemon's tree): "arming 3,706 probes in 12
//! processes…" on stderr, drawn only when stderr is a terminal and the work has taken
//! longer than a delay, and erased (carriage return, erase to end of line) before any
//! message is written and when the work ends. Nothing is ever left on the terminal.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Whether a progress line is on stderr now. Its lock orders the writers of stderr:
/// a message erases the line and writes while holding it, so the line is never
/// drawn in the middle of a message.
static LINE: Mutex<bool> = Mutex::new(false);

/// How long the work may take before the line shows. Most runs arm within a few tens
/// of milliseconds; a line that flashes for that long is noise.
pub const DELAY: Duration = Duration::from_millis(200);

/// [`DELAY`], or the milliseconds in `UDTRACE_PROGRESS_DELAY_MS`: the tests show the
/// line at once rather than depend on arming being slow.
pub fn delay() -> Duration {
    std::env::var("UDTRACE_PROGRESS_DELAY_MS").ok().and_then(|v| v.parse().ok()).map_or(DELAY, Duration::from_millis)
}

/// How often a shown line is redrawn with new counts (or after a message erased it).
const REDRAW: Duration = Duration::from_millis(100);

/// Erases the progress line, if one is shown, and keeps stderr to the caller until the
/// guard is dropped. `warn!` (and so every message) writes through it.
pub fn hold_stderr() -> MutexGuard<'static, bool> {
    let mut shown = LINE.lock().unwrap_or_else(PoisonError::into_inner);
    if *shown {
        let _ = std::io::stderr().write_all(b"\r\x1b[K");
        *shown = false;
    }
    shown
}

#[derive(Default)]
struct Counts {
    probes: usize,
    processes: usize,
    done: bool,
}

struct Shared {
    counts: Mutex<Counts>,
    wake: Condvar,
}

/// The progress of arming, shown by a thread of its own while the work goes on; the
/// line is erased when this is dropped.
pub struct Progress {
    shared: Option<Arc<Shared>>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts reporting, if `show` (not `-q`) and stderr is a terminal that can erase a
    /// line. The thread inherits the caller's signal mask: started after udtrace has
    /// blocked the signals it takes through its signalfd, it never receives them.
    pub fn start(show: bool, delay: Duration) -> Progress {
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        if !show || dumb || !std::io::stderr().is_terminal() {
            return Progress { shared: None, thread: None };
        }
        let shared = Arc::new(Shared { counts: Mutex::new(Counts::default()), wake: Condvar::new() });
        let mine = Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("progress".into()).spawn(move || show_until_done(&mine, delay));
        Progress { shared: Some(shared), thread: thread.ok() }
    }

    /// The work as now known: this many probes in this many processes.
    pub fn set(&self, probes: usize, processes: usize) {
        if let Some(s) = &self.shared {
            let mut c = s.counts.lock().unwrap_or_else(PoisonError::into_inner);
            c.probes = probes;
            c.processes = processes;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(s) = &self.shared {
            s.counts.lock().unwrap_or_else(PoisonError::into_inner).done = true;
            s.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn show_until_done(s: &Shared, delay: Duration) {
    let due = Instant::now() + delay;
    let mut last = String::new();
    let mut counts = s.counts.lock().unwrap_or_else(PoisonError::into_inner);
    while !counts.done {
        let now = Instant::now();
        if now < due {
            counts = s.wake.wait_timeout(counts, due - now).unwrap_or_else(PoisonError::into_inner).0;
            continue;
        }
        let text = line(counts.probes, counts.processes);
        drop(counts);
        {
            let mut shown = LINE.lock().unwrap_or_else(PoisonError::into_inner);
            if !*shown || text != last {
                let _ = std::io::stderr().write_all(format!("\r\x1b[K{text}").as_bytes());
                *shown = true;
                last = text;
            }
        }
        counts = s.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if !counts.done {
            counts = s.wake.wait_timeout(counts, REDRAW).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
    drop(counts);
    drop(hold_stderr());
}

/// "arming 3,706 probes in 12 processes…".
pub fn line(probes: usize, processes: usize) -> String {
    let plural = |n: usize, one: &str, many: &str| format!("{} {}", grouped(n), if n == 1 { one } else { many });
    format!("arming {} in {}…", plural(probes, "probe", "probes"), plural(processes, "process", "processes"))
}

/// `n` with a comma between groups of three digits.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_and_pluralized() {
        assert_eq!(line(3706, 12), "arming 3,706 probes in 12 processes…");
        assert_eq!(line(1, 1), "arming 1 probe in 1 process…");
        assert_eq!(line(1_234_567, 0), "arming 1,234,567 probes in 0 processes…");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(100_000), "100,000");
    }

    #[test]
    fn nothing_is_shown_when_quiet() {
        let p = Progress::start(false, Duration::ZERO);
        assert!(p.shared.is_none() && p.thread.is_none());
    }
}
