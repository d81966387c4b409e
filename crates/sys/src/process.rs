//! Starting a process under ptrace from its first instruction.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// Spawns `argv` with `PTRACE_TRACEME` set between fork and exec, so the child stops
/// with SIGTRAP right after its exec, before the dynamic loader runs. The caller must
/// `waitpid` for that stop. Errors are the exec's (a missing program, no permission).
pub fn spawn_traced(argv: &[String]) -> io::Result<Child> {
    let (prog, args) = argv.split_first().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    // SAFETY: the closure runs in the forked child before exec and only makes one
    // async-signal-safe system call (ptrace(PTRACE_TRACEME)); it touches no locks and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, std::ptr::null_mut::<libc::c_void>(), std::ptr::null_mut::<libc::c_void>()) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}
