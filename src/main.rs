//! udtrace: DTrace's pid and proc providers for Linux user space, driven by D scripts.

/// `eprintln!` that never panics: a closed stderr must not turn into a crash.
macro_rules! warn {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// A message for stderr after the program name, as dtrace prints its own
/// (`dtrace: …` when udtrace runs as dtrace).
macro_rules! note {
    ($($t:tt)*) => {{
        warn!("{}: {}", crate::cli::program(), format_args!($($t)*));
    }};
}

/// `print!` that never panics (`udtrace -l | head` closes the pipe early).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

#[macro_use]
mod debug;
mod backend;
mod cli;
mod compile;
mod cpus;
mod dlibs;
mod firing;
mod follow;
mod glob;
mod kmem;
mod list;
mod pidprov;
mod preprocess;
mod probes;
mod procprov;
mod selfctx;
mod session;
mod sink;
mod stability;

fn main() {
    debug::enable_from_env();
    let cli = cli::parse_or_exit();
    if cli.options.debug {
        debug::enable();
    }
    let core = cli.options.core;
    let status = session::run(cli);
    if core {
        debug::dump_core();
    }
    std::process::exit(status);
}
