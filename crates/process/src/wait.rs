//! Waiting for traced threads with every signal named: nix's `WaitStatus` holds a
//! `Signal`, which has no real-time signals, so nix's `waitpid` reaps a real-time
//! signal's delivery stop and then fails. The thread would stay in that stop, its
//! signal lost. Here such a stop is reported as [`Wait::RealTime`].

use nix::errno::Errno;
use nix::libc;
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// What `waitpid` reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Anything nix's status can hold.
    Status(WaitStatus),
    /// The signal-delivery stop of a signal nix's `Signal` cannot name (a real-time
    /// one): the thread, the signal's number.
    RealTime(Pid, i32),
}

impl Wait {
    /// The signal of a signal-delivery stop, as a number.
    pub fn delivery_signal(&self) -> Option<i32> {
        match *self {
            Wait::Status(WaitStatus::Stopped(_, sig)) => Some(sig as i32),
            Wait::RealTime(_, sig) => Some(sig),
            _ => None,
        }
    }
}

/// `waitpid(pid or any, flags)`.
pub fn waitpid(pid: Option<Pid>, flags: WaitPidFlag) -> nix::Result<Wait> {
    let (p, status) = loop {
        match udtrace_sys::process::waitpid_raw(pid.map_or(-1, Pid::as_raw), flags.bits()) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EINVAL))),
            Ok(r) => break r,
        }
    };
    if p == 0 {
        return Ok(Wait::Status(WaitStatus::StillAlive));
    }
    let pid = Pid::from_raw(p);
    // A signal-delivery stop (no event in the high bits) of a real-time signal (the
    // kernel's 32 to 64; a syscall stop's SIGTRAP | 0x80 is not one).
    if libc::WIFSTOPPED(status) && status >> 16 == 0 && (32..=64).contains(&libc::WSTOPSIG(status)) {
        return Ok(Wait::RealTime(pid, libc::WSTOPSIG(status)));
    }
    WaitStatus::from_raw(pid, status).map(Wait::Status)
}

/// Lets ptrace-stopped thread `tid` go on, delivering signal `sig` (0: none).
pub fn cont(tid: i32, sig: i32) {
    let _ = udtrace_sys::process::ptrace_cont(tid, sig);
}
