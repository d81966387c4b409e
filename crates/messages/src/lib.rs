//! udtrace's messages on stderr, as dtrace words its own: every one starts with the
//! program name (the base name of argv[0], so `dtrace:` when udtrace is installed as
//! dtrace), and `-x debug` (or `DTRACE_DEBUG` in the environment) adds libdtrace-style
//! debugging lines, `udtrace DEBUG <unix time>: message`.
//!
//! Owns: the program name, [`warn!`], [`note!`], [`debug!`] and the progress line on
//! a terminal ([`progress`]). Must not: write anything but messages on stderr (traced
//! output goes through the consumer's writer), panic when stderr is closed, or use
//! `unsafe`.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

pub mod progress;

/// Our name when argv[0] gives none.
pub const PROGRAM: &str = "udtrace";

static PROGRAM_NAME: OnceLock<String> = OnceLock::new();

static DEBUG: AtomicBool = AtomicBool::new(false);

/// The name every message starts with: the base name of argv[0], as dtrace's
/// (`dtrace:` when installed or linked as dtrace).
pub fn program() -> &'static str {
    PROGRAM_NAME.get().map_or(PROGRAM, String::as_str)
}

/// Takes the program name from argv[0]; only the first call counts.
pub fn set_program(argv0: &std::ffi::OsStr) {
    let base = std::path::Path::new(argv0).file_name().map(|b| b.to_string_lossy().into_owned());
    if let Some(b) = base.filter(|b| !b.is_empty()) {
        let _ = PROGRAM_NAME.set(b);
    }
}

/// Turns the debugging messages on, for `-x debug` (they stay on).
pub fn enable_debug() {
    DEBUG.store(true, Ordering::Relaxed);
}

/// Turns the debugging messages on if `DTRACE_DEBUG` is set to something, as
/// libdtrace does.
pub fn enable_debug_from_env() {
    if std::env::var_os("DTRACE_DEBUG").is_some_and(|v| !v.is_empty()) {
        enable_debug();
    }
}

pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// The prefix of one debugging message.
pub fn debug_prefix() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{} DEBUG {now}: ", program())
}

/// `eprintln!` that never panics: a closed stderr must not turn into a crash. A
/// progress line on the terminal is erased first.
#[macro_export]
macro_rules! warn {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _line = $crate::progress::hold_stderr();
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// A message for stderr after the program name, as dtrace prints its own
/// (`dtrace: …` when udtrace runs as dtrace).
#[macro_export]
macro_rules! note {
    ($($t:tt)*) => {{
        $crate::warn!("{}: {}", $crate::program(), format_args!($($t)*));
    }};
}

/// A debugging message on stderr, when they are on.
#[macro_export]
macro_rules! debug {
    ($($t:tt)*) => {{
        if $crate::debug_enabled() {
            $crate::warn!("{}{}", $crate::debug_prefix(), format_args!($($t)*));
        }
    }};
}
