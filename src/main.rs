//! udtrace: DTrace's pid and proc providers for Linux user space, driven by D scripts.
//! The binary is the command line and its wiring: parse the flags, pick the backend,
//! hand the run to `udtrace-session`, exit with its status.

#![forbid(unsafe_code)]

/// `print!` that never panics (`udtrace -l | head` closes the pipe early).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

mod cli;

use udtrace_bpf_backend::Bpf;
use udtrace_inproc_backend::InProcess;
use udtrace_providers::backend::{Backend, Error, Setup, BPF_OTHER_PID_NAMESPACE, BPF_REFUSED};

/// The undertaker's life: a hang-up or interrupt of the terminal udtrace ran in must
/// not end it before udtrace does.
fn undertaker() -> i32 {
    use nix::sys::signal::{SigSet, Signal};
    let mut quiet = SigSet::empty();
    quiet.add(Signal::SIGHUP);
    quiet.add(Signal::SIGINT);
    let _ = quiet.thread_block();
    udtrace_process::undertaker::serve(std::io::stdin().lock());
    0
}

/// The backend for pid and proc probes: pid probes run inside the traced processes,
/// with BPF (where the kernel allows it) for what they cannot do and for the other
/// providers; `-x uprobes` makes every pid probe a uprobe.
fn load_backend(setup: &Setup) -> Result<Box<dyn Backend>, Error> {
    let bpf = if !udtrace_process::refusal::in_initial_pid_namespace() {
        Err(BPF_OTHER_PID_NAMESPACE.to_string())
    } else if !udtrace_bpf_backend::available() {
        Err(BPF_REFUSED.to_string())
    } else {
        Ok(())
    };
    if bpf.is_ok() && !setup.inprocess {
        return Ok(Box::new(Bpf::load(setup)?));
    }
    if let (Err(why), true) = (&bpf, setup.uprobes) {
        // `-x uprobes` cannot be honoured: say so rather than run otherwise unseen.
        udtrace_messages::note!("-x uprobes ignored: {why}; pid probes run inside the traced processes");
    }
    let fallback = match bpf {
        Ok(()) => Ok(Box::new(Bpf::load(setup)?) as Box<dyn Backend>),
        Err(why) => Err(why),
    };
    Ok(Box::new(InProcess::load(setup, fallback)?))
}

fn main() {
    // Started by udtrace itself to undo its patches if it dies (crates/process's
    // undertaker): nothing else of the command line applies.
    if std::env::var_os(udtrace_process::undertaker::UNDERTAKER_ENV).is_some() {
        std::process::exit(undertaker());
    }
    // Started by udtrace to hold execs of new images for `pid*` (crates/process's gate).
    if std::env::var_os(udtrace_process::gate::GATE_ENV).is_some() {
        std::process::exit(udtrace_process::gate::keeper_main());
    }
    udtrace_messages::enable_debug_from_env();
    let cli = cli::parse_or_exit();
    if cli.options.debug {
        udtrace_messages::enable_debug();
    }
    let generate = match cli.mode {
        cli::Mode::Header => Some(udtrace_session::Generate::Header),
        cli::Mode::Link => Some(udtrace_session::Generate::Object),
        _ => None,
    };
    if let Some(what) = generate {
        std::process::exit(udtrace_session::generate(cli.request(), what));
    }
    if cli.mode == cli::Mode::Exec && !cli.request.exit_after_compile {
        // While udtrace has one thread: the undertaker a first patch needs, forked now
        // rather than exec'd then.
        udtrace_process::undertaker::start_early();
    }
    let core = cli.options.core;
    udtrace_providers::kernel::set_source(udtrace_bpf_backend::kernel_reader);
    let status = udtrace_session::run(cli.request(), &load_backend);
    udtrace_process::undertaker::end_early();
    if core {
        dump_core();
    }
    std::process::exit(status);
}

/// `-x core`: dump core as udtrace exits, as dtrace does for debugging: core size
/// unlimited, then abort (udtrace never handles SIGABRT).
fn dump_core() -> ! {
    udtrace_messages::warn!("{} DEBUG: [ forcing coredump ]", udtrace_messages::program());
    use nix::sys::resource::{setrlimit, Resource, RLIM_INFINITY};
    let _ = setrlimit(Resource::RLIMIT_CORE, RLIM_INFINITY, RLIM_INFINITY);
    std::process::abort()
}
