//! Hardware execution breakpoints: x86 debug register 0, set in a stopped thread through
//! ptrace. Unlike an `int3`, nothing is written to the process's memory, so a kernel
//! uprobe on the same instruction (another tracer's, or another udtrace's loader hook)
//! neither hides the hit nor erases the breakpoint when it is removed. The CPU stops
//! the thread before the instruction runs; the kernel sets the resume flag, so the
//! thread goes on through it once continued.
//!
//! Debug registers belong to a thread: a new thread or a forked child starts without
//! them, exec clears them, and detaching leaves them (a thread reaching one untraced
//! would die of SIGTRAP), so the caller sets them on every thread and clears them
//! before letting go.

use nix::errno::Errno;
use nix::libc;
use nix::sys::ptrace;
use nix::unistd::Pid;

/// `si_code` of a SIGTRAP raised by a debug register.
const TRAP_HWBKPT: i32 = 4;

fn debugreg(n: usize) -> ptrace::AddressType {
    (std::mem::offset_of!(libc::user, u_debugreg) + n * 8) as ptrace::AddressType
}

/// Stops thread `tid` (ptrace-stopped) whenever it is about to execute `addr`.
pub fn set(tid: i32, addr: u64) -> Result<(), Errno> {
    let p = Pid::from_raw(tid);
    ptrace::write_user(p, debugreg(0), addr as libc::c_long)?;
    // DR7: L0 (bit 0) enables register 0; R/W0 = 00 (execute) and LEN0 = 00 (1 byte).
    ptrace::write_user(p, debugreg(7), 1)
}

/// Takes the breakpoint out of thread `tid` (ptrace-stopped).
pub fn clear(tid: i32) -> Result<(), Errno> {
    ptrace::write_user(Pid::from_raw(tid), debugreg(7), 0)
}

/// Whether thread `tid`'s SIGTRAP stop came from a debug register.
pub fn is_hit(tid: i32) -> bool {
    ptrace::getsiginfo(Pid::from_raw(tid)).is_ok_and(|i| i.si_code == TRAP_HWBKPT)
}
