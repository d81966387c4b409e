//! udtrace's debugging messages (`-x debug`, or `DTRACE_DEBUG` set in the
//! environment), worded as libdtrace's: `udtrace DEBUG <unix time>: message`.

use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the messages on, for `-x debug` (they stay on).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Turns the messages on if `DTRACE_DEBUG` is set to something, as libdtrace does.
pub fn enable_from_env() {
    if std::env::var_os("DTRACE_DEBUG").is_some_and(|v| !v.is_empty()) {
        enable();
    }
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The prefix of one message.
pub fn prefix() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{} DEBUG {now}: ", crate::cli::program())
}

/// Prints a debugging message on stderr when messages are on.
macro_rules! debug {
    ($($t:tt)*) => {{
        if crate::debug::enabled() {
            warn!("{}{}", crate::debug::prefix(), format_args!($($t)*));
        }
    }};
}

/// `-x core`: dump core as udtrace exits, as dtrace does for debugging: core size
/// unlimited, then abort (udtrace never handles SIGABRT).
pub fn dump_core() -> ! {
    warn!("{} DEBUG: [ forcing coredump ]", crate::cli::program());
    use nix::sys::resource::{setrlimit, Resource, RLIM_INFINITY};
    let _ = setrlimit(Resource::RLIMIT_CORE, RLIM_INFINITY, RLIM_INFINITY);
    std::process::abort()
}
