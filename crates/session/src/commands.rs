//! system() commands of a program with `pid*`/`provider*` probes: the session runs
//! them under its follower, so that a program a command execs is held at its new image
//! and at its loader until the `pid*` descriptions are matched and armed there (a
//! command that ends within a millisecond has its probes' firings counted), as
//! DTrace's helper holds a process until its USDT probes are enabled. system() waits
//! for its command as before: the sink keeps what is written after it until it ends
//! ([`Sink::hold_commands`]).

use std::fs::File;
use std::os::fd::AsRawFd;

use udtrace_messages::note;
use udtrace_process::control::Target;

use crate::compile::io_reason;
use crate::follow::{AllProcesses, Follower, World};
use crate::sink::Sink;

/// Starts the next queued command, when none runs, held until the follower lets it go.
pub fn start_next(out: &mut Sink, f: &mut Follower, all: &mut AllProcesses, w: &mut World<'_>) {
    loop {
        let (command, stdout) = match out.next_command() {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                note!("failed to write output: {}", io_reason(&e));
                return;
            }
        };
        match start(&command, stdout.as_ref(), f, all, w) {
            Ok(pid) => {
                out.command_started(pid);
                return;
            }
            // As system(3): the command's failures are its business; udtrace's own
            // are said, and the output behind it goes on.
            Err(e) => note!("failed to run \"{command}\": {e}"),
        }
    }
}

fn start(
    command: &str,
    stdout: Option<&File>,
    f: &mut Follower,
    all: &mut AllProcesses,
    w: &mut World<'_>,
) -> Result<i32, String> {
    let argv = ["/bin/sh".to_string(), "-c".to_string(), command.to_string()];
    let mut target = with_stdout(stdout, || Target::create(&argv))?;
    if let Err(e) = w.backend.trace_pid(target.pid) {
        target.finish();
        return Err(e);
    }
    if let Err(e) = f.adopt(&mut target, w.backend, w.registry) {
        target.finish();
        return Err(e);
    }
    all.match_new(target.pid, w);
    f.tree.start(target.pid);
    Ok(target.pid)
}

/// Runs `start` with udtrace's stdout replaced by `file` (a freopen() on stdout: the
/// command writes there, as dtrace's do).
fn with_stdout<T, E: std::fmt::Display>(
    file: Option<&File>,
    start: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    let Some(file) = file else { return start().map_err(|e| e.to_string()) };
    let saved = nix::unistd::dup(1).map_err(|e| e.desc().to_string())?;
    let started = nix::unistd::dup2(file.as_raw_fd(), 1)
        .map_err(|e| e.desc().to_string())
        .and_then(|_| start().map_err(|e| e.to_string()));
    let _ = nix::unistd::dup2(saved, 1);
    let _ = nix::unistd::close(saved);
    started
}
