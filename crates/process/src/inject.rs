//! Running system calls inside a ptrace-stopped thread, and mapping shared memory into
//! its process near its code: the groundwork of in-process pid probes (probe sites
//! patched with `jmp rel32` to trampolines that write firings into a ring udtrace reads).
//!
//! # Remote system calls ([`RemoteCall`])
//!
//! The caller has the thread in a ptrace-stop (seized and interrupted, any
//! signal-delivery stop, or a syscall-exit stop). A [`RemoteCall`] saves its registers
//! and the siginfo of its stop, then for each call sets `rip` to a `syscall` instruction
//! that is already mapped executable in the process (found in the vDSO, else in any
//! executable mapping: nothing is ever written over code, so other threads running the
//! code at the thread's `rip` see nothing), `rax` = number, `rdi, rsi, rdx, r10, r8,
//! r9` = arguments, `orig_rax` = -1, and resumes it with `PTRACE_SYSCALL`: it stops at
//! the call's entry and again at its exit, with the result in `rax`. The thread must
//! have `PTRACE_O_TRACESYSGOOD` (every tracee of udtrace has it): without it a syscall
//! stop looks like any SIGTRAP and is reported as an unexpected stop.
//! [`RemoteCall::finish`] (or dropping it) puts back the registers and any scratch
//! memory exactly; the thread stays in that last syscall-exit stop.
//!
//! **Why syscall stops, not single steps.** When udtrace dies (SIGKILL), the kernel
//! detaches its tracees where they stand. A thread left in the SIGTRAP
//! signal-delivery stop of a single step then receives that SIGTRAP and dies; a
//! thread left in a syscall stop just goes on (with `PTRACE_O_TRACESYSGOOD`, which
//! udtrace always sets, the stop's code is no signal the kernel could deliver). So the
//! thread waits in a syscall-exit stop with its own registers whenever udtrace is not
//! in the middle of a call: only the few microseconds of each call itself are exposed.
//!
//! **Restart.** A thread stopped inside an interruptible system call (blocked in `read`,
//! `nanosleep`, ...) has `orig_rax` = its number and `rax` = -ERESTARTSYS (or
//! ERESTARTNOHAND, ERESTARTNOINTR, ERESTART_RESTARTBLOCK), `rip` past its `syscall`. The
//! kernel applies the restart (rax = orig_rax, rip -= 2) only when the thread leaves a
//! signal or group stop, from the registers it then has: with `orig_rax` = -1 in the
//! injected registers none is applied to them. A syscall-exit stop applies none at all,
//! so the registers put back last carry the restart already applied, as the kernel
//! would have applied it with no handler to run (`restart_syscall` for
//! ERESTART_RESTARTBLOCK: the injected calls never touch the thread's restart block):
//! the interrupted call starts again as if nothing had happened.
//!
//! **Signals.** A signal that arrives (or was already pending) while the calls run makes
//! a signal-delivery-stop before the `syscall` instruction executes. Its siginfo is kept,
//! the signal suppressed and the call resumed. At the end, with every signal but
//! SIGTRAP blocked (PTRACE_SETSIGMASK, the mask saved), the kept signals are queued
//! again by the thread to itself (`rt_tgsigqueueinfo` on its own tgid, which the kernel
//! allows with any `si_code`): they wait with their original siginfo until the caller
//! resumes the thread, which then sees them as ordinary signal-delivery-stops. A
//! process-wide signal comes back thread-directed. SIGSTOP and a foreign SIGTRAP, which
//! no mask holds back, are sent again by udtrace after the last call, as are the
//! signals of a session whose first call failed: with `rt_tgsigqueueinfo` and their
//! siginfo where the kernel allows it from another process (negative `si_code` but
//! `SI_TKILL`: a sigqueue'd signal keeps its value), else with `tgkill`. The mask is
//! only set after a call has completed: by then the thread has left its original stop,
//! and a mask that sigsuspend/ppoll/pselect saved for the return to user space is back
//! in place (PTRACE_SETSIGMASK drops a saved mask); the interrupted call restarts
//! afterwards and installs its temporary mask again.
//!
//! **The stop afterwards.** The thread ends in a syscall-exit stop. Resuming it with
//! `PTRACE_CONT` or `PTRACE_DETACH` and signal 0 behaves as from the original stop; a
//! signal given then is sent anew, process-wide, with the kernel's siginfo (`SI_KERNEL`,
//! no value): a caller that means to deliver the signal of a signal-delivery stop does
//! it from that stop, before any session in the thread (`Tree::detach_all` does). It is
//! no longer a group-stop: `PTRACE_LISTEN` does not apply. A session whose first call
//! failed before the thread left its original stop leaves it there, siginfo put back.
//!
//! # Shared memory
//!
//! The tracee needs a descriptor of the memory udtrace maps too. Two ways:
//!
//! - [`map_shared_near`]: udtrace's own descriptor, which the tracee opens as
//!   `/proc/<udtrace pid>/fd/<n>`. That open needs ptrace read access *to udtrace*: it
//!   works when both run as the same user, not for a root udtrace and a user's process
//!   (EACCES, reported as [`InjectError::FdNotReachable`]), nor across pid namespaces.
//! - [`create_shared_near`] and [`map_exec_near`]: the tracee creates a memfd (remote
//!   `memfd_create`) and udtrace opens it as `/proc/<tracee pid>/fd/<n>`, which needs
//!   only the access udtrace has anyway as the tracee's tracer. This is the one that
//!   always works; the region belongs to one process, as its ring does.
//!
//! Either way the descriptor is mapped with remote `mmap(addr, len, prot,
//! MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0)` at candidate addresses from the gaps of
//! `/proc/<pid>/maps` nearest to `near` with every byte of the region within ±2 GiB of
//! it ([`candidates_near`]), and closed in the tracee again. Trampoline regions are
//! mapped read+exec in the tracee and read+write in udtrace ([`SharedRegion::write`]):
//! the tracee can never write its own trampolines.
//!
//! Path strings and siginfo go to scratch memory of the tracee: 512 bytes below its
//! stack pointer past the 128-byte red zone (saved and restored), or, when that memory
//! cannot be written (a stack pointer at the bottom of its mapping), an anonymous page
//! mapped for the occasion and unmapped at the end.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use nix::errno::Errno;
use nix::libc;
use nix::sys::ptrace;
use nix::sys::uio::{process_vm_writev, RemoteIoVec};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::wait::Wait;
use udtrace_sys::mmap::{page_size, Mmap};
use udtrace_sys::process::{
    ptrace_get_xstate, ptrace_getsiginfo_raw, ptrace_getsigmask, ptrace_setsiginfo_raw, ptrace_setsigmask,
    rt_tgsigqueueinfo, tgkill, SIGINFO_SIZE,
};

use crate::procfs::{self, Mapping};

/// How far a `jmp rel32` reaches: every byte of a region is kept within this distance
/// of `near` (2 GiB less a page, so that a site a few bytes off `near` still reaches).
pub const REACH: u64 = (1 << 31) - 4096;

/// The highest user address with 4-level paging (and the default with 5-level).
const USER_TOP: u64 = 0x7fff_ffff_f000;

/// Room left free below the main stack, which grows down into the gap (its rlimit is
/// 8 MiB by default).
const STACK_ROOM: u64 = 16 << 20;

/// Bytes of scratch memory for path strings and siginfo.
const SCRATCH: u64 = 512;

/// Signal stops tolerated while one `syscall` instruction is run.
const MAX_STOPS: usize = 64;

/// Candidate addresses tried before /proc/<pid>/maps is read again.
const MAX_TRIES: usize = 16;

// The kernel's restart codes (include/linux/errno.h), as a stopped thread's rax holds them.
const ERESTARTSYS: i64 = -512;
const ERESTARTNOINTR: i64 = -513;
const ERESTARTNOHAND: i64 = -514;
const ERESTART_RESTARTBLOCK: i64 = -516;

const MFD_CLOEXEC: u64 = 0x1;
/// Linux 6.3: the memfd may be mapped executable (refused under vm.memfd_noexec = 2).
const MFD_EXEC: u64 = 0x10;

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// A ptrace request failed; ESRCH means the thread is not in a ptrace-stop of ours.
    #[error("thread {tid}: {op}: {errno}")]
    Ptrace { tid: i32, op: &'static str, errno: Errno },
    #[error("thread {tid}: {op}: {source}")]
    Io { tid: i32, op: &'static str, source: io::Error },
    #[error("thread {tid} ended during a remote system call")]
    Gone { tid: i32 },
    #[error("thread {tid}: no `syscall` instruction in the process's executable memory")]
    NoSyscallInstruction { tid: i32 },
    #[error("thread {tid}: unexpected stop while stepping a remote system call: {what}")]
    UnexpectedStop { tid: i32, what: String },
    /// The remote system call returned -errno.
    #[error("thread {tid}: remote {call}: {errno}")]
    Remote { tid: i32, call: &'static str, errno: Errno },
    /// The tracee may not open udtrace's descriptor (it has no ptrace access to
    /// udtrace: another user, another pid namespace). Use [`create_shared_near`].
    #[error("thread {tid}: the process cannot open {path}: {errno}")]
    FdNotReachable { tid: i32, path: String, errno: Errno },
    #[error("no free range of {len:#x} bytes within ±2 GiB of {near:#x}")]
    NoRoom { len: u64, near: u64 },
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
}

type Result<T> = std::result::Result<T, InjectError>;

/// Memory protection of a remote mapping (`PROT_*` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prot(u32);

impl Prot {
    pub const NONE: Prot = Prot(0);
    pub const READ: Prot = Prot(libc::PROT_READ as u32);
    pub const WRITE: Prot = Prot(libc::PROT_WRITE as u32);
    pub const EXEC: Prot = Prot(libc::PROT_EXEC as u32);

    pub fn bits(self) -> u32 {
        self.0
    }

    pub fn contains(self, other: Prot) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Prot {
    type Output = Prot;
    fn bitor(self, rhs: Prot) -> Prot {
        Prot(self.0 | rhs.0)
    }
}

/// Where the scratch memory is.
#[derive(Debug)]
enum Scratch {
    /// Below the red zone; the bytes that were there.
    Stack { addr: u64, saved: Vec<u8> },
    /// An anonymous page mapped for the session.
    Page { addr: u64 },
}

impl Scratch {
    fn addr(&self) -> u64 {
        match self {
            Scratch::Stack { addr, .. } | Scratch::Page { addr } => *addr,
        }
    }
}

/// A session of remote system calls in one ptrace-stopped thread. Everything is put
/// back by [`RemoteCall::finish`], or by drop (errors then ignored).
#[derive(Debug)]
pub struct RemoteCall {
    tid: i32,
    /// The thread's process (tgid).
    pid: i32,
    saved_regs: libc::user_regs_struct,
    saved_siginfo: Option<[u8; SIGINFO_SIZE]>,
    /// A `syscall` instruction (0f 05) mapped executable.
    syscall_at: u64,
    /// The signal frame that takes the thread back to its registers if udtrace dies
    /// in the middle of a call; `None` where it could not be set up.
    way_back: Option<WayBack>,
    scratch: Option<Scratch>,
    /// Siginfo of signals taken out of the queue by the steps, to queue again.
    deferred: Vec<[u8; SIGINFO_SIZE]>,
    /// The thread's signal mask while the deferred signals are queued again.
    saved_sigmask: Option<u64>,
    /// A call has completed.
    stepped: bool,
    /// The thread has left the stop the session began in (for a syscall stop).
    left: bool,
    gone: bool,
    finished: bool,
}

impl RemoteCall {
    /// Starts a session in `tid`, which must be in a ptrace-stop under the caller's
    /// control.
    pub fn new(tid: i32) -> Result<RemoteCall> {
        if tid <= 0 {
            return Err(InjectError::Invalid("thread id"));
        }
        let p = Pid::from_raw(tid);
        let saved_regs =
            ptrace::getregs(p).map_err(|errno| InjectError::Ptrace { tid, op: "PTRACE_GETREGS", errno })?;
        let pid = procfs::status_numbers(tid, "Tgid:")
            .and_then(|v| v.first().copied())
            .map(|v| v as i32)
            .ok_or(InjectError::Io { tid, op: "reading Tgid", source: io::Error::other("no Tgid in status") })?;
        // Group-stops of PTRACE_ATTACHed threads have no siginfo; nothing to put back.
        let saved_siginfo = ptrace_getsiginfo_raw(tid).ok();
        let way_back = WayBack::set_up(pid, tid, &saved_regs);
        let syscall_at = match &way_back {
            Some(w) => w.syscall_ret,
            None => find_syscall_instruction(pid).ok_or(InjectError::NoSyscallInstruction { tid })?,
        };
        Ok(RemoteCall {
            tid,
            pid,
            saved_regs,
            saved_siginfo,
            syscall_at,
            way_back,
            scratch: None,
            deferred: Vec::new(),
            saved_sigmask: None,
            stepped: false,
            left: false,
            gone: false,
            finished: false,
        })
    }

    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// The process (tgid) of the thread.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The registers the thread had when the session started.
    pub fn saved_regs(&self) -> &libc::user_regs_struct {
        &self.saved_regs
    }

    /// The address of the `syscall` instruction the calls are stepped through.
    pub fn syscall_address(&self) -> u64 {
        self.syscall_at
    }

    /// Runs system call `nr` with `args` in the thread; returns its raw result (-errno
    /// on failure).
    pub fn syscall(&mut self, nr: i64, args: [u64; 6]) -> Result<i64> {
        if self.gone || self.finished {
            return Err(InjectError::Gone { tid: self.tid });
        }
        let first = !self.stepped;
        let out = self.step(self.call_registers(nr, args))?;
        if first {
            if let Some(w) = &self.way_back {
                // Leaving the original stop put back a mask that sigsuspend, ppoll or
                // pselect had replaced: that one is the thread's own.
                if let Ok(mask) = ptrace_getsigmask(self.tid) {
                    let _ = self.write_remote(w.frame + SIGMASK_AT, &mask.to_ne_bytes());
                }
            }
        }
        Ok(out.rax as i64)
    }

    fn call_registers(&self, nr: i64, args: [u64; 6]) -> libc::user_regs_struct {
        let mut r = self.saved_regs;
        r.rax = nr as u64;
        r.orig_rax = u64::MAX;
        r.rip = self.syscall_at;
        r.rdi = args[0];
        r.rsi = args[1];
        r.rdx = args[2];
        r.r10 = args[3];
        r.r8 = args[4];
        r.r9 = args[5];
        if let Some(w) = &self.way_back {
            // `syscall; ret` returns to the frame's first word: rt_sigreturn.
            r.rsp = w.frame;
        }
        r
    }

    /// Whether a tracer's death in the middle of a call leaves the thread whole (see
    /// [`WayBack`]): where the process has glibc's code and the stack has room.
    pub fn has_way_back(&self) -> bool {
        self.way_back.is_some()
    }

    /// For tests of the way back: sets up call `nr` and leaves the thread at its
    /// syscall-entry stop, the session forgotten, as udtrace killed at that moment
    /// would. The caller's end (the tracer's death) is what lets the thread go.
    #[doc(hidden)]
    pub fn abandon_in_call(mut self, nr: i64, args: [u64; 6]) -> Result<()> {
        let regs = self.call_registers(nr, args);
        let p = Pid::from_raw(self.tid);
        ptrace::setregs(p, regs).map_err(self.ptrace_err("PTRACE_SETREGS"))?;
        ptrace::syscall(p, None).map_err(self.ptrace_err("PTRACE_SYSCALL"))?;
        match waitpid(p, Some(WaitPidFlag::__WALL)).map_err(self.ptrace_err("waitpid"))? {
            WaitStatus::PtraceSyscall(_) => {
                self.finished = true;
                std::mem::forget(self);
                Ok(())
            }
            other => Err(InjectError::UnexpectedStop { tid: self.tid, what: format!("{other:?}") }),
        }
    }

    /// As [`RemoteCall::syscall`], a failure as [`InjectError::Remote`] named `call`.
    pub fn checked(&mut self, call: &'static str, nr: i64, args: [u64; 6]) -> Result<u64> {
        let r = self.syscall(nr, args)?;
        if (-4095..0).contains(&r) {
            Err(InjectError::Remote { tid: self.tid, call, errno: Errno::from_raw(-r as i32) })
        } else {
            Ok(r as u64)
        }
    }

    fn ptrace_err(&self, op: &'static str) -> impl Fn(Errno) -> InjectError {
        let tid = self.tid;
        move |errno| InjectError::Ptrace { tid, op, errno }
    }

    /// Sets `regs` and runs the `syscall` instruction between a syscall-entry and a
    /// syscall-exit stop (`PTRACE_SYSCALL`); the registers at the exit stop.
    fn step(&mut self, regs: libc::user_regs_struct) -> Result<libc::user_regs_struct> {
        let p = Pid::from_raw(self.tid);
        ptrace::setregs(p, regs).map_err(self.ptrace_err("PTRACE_SETREGS"))?;
        let mut entered = false;
        for _ in 0..MAX_STOPS {
            ptrace::syscall(p, None).map_err(self.ptrace_err("PTRACE_SYSCALL"))?;
            let st = crate::wait::waitpid(Some(p), WaitPidFlag::__WALL).map_err(self.ptrace_err("waitpid"))?;
            // Whatever the stop, the thread has left the one the session began in.
            self.left = true;
            let signal = st.delivery_signal();
            match st {
                Wait::Status(WaitStatus::PtraceSyscall(_)) => {
                    let now = ptrace::getregs(p).map_err(self.ptrace_err("PTRACE_GETREGS"))?;
                    if now.rip != self.syscall_at + 2 {
                        return Err(InjectError::UnexpectedStop {
                            tid: self.tid,
                            what: format!("a system call stop at {:#x}", now.rip),
                        });
                    }
                    if entered {
                        self.stepped = true;
                        return Ok(now);
                    }
                    entered = true;
                }
                // Real-time signals too, which nix cannot name.
                Wait::Status(WaitStatus::Stopped(..)) | Wait::RealTime(..) => {
                    let sig = signal.unwrap_or(0);
                    let now = ptrace::getregs(p).map_err(self.ptrace_err("PTRACE_GETREGS"))?;
                    if entered || now.rip != self.syscall_at {
                        return Err(InjectError::UnexpectedStop {
                            tid: self.tid,
                            what: format!("signal {sig} at {:#x}", now.rip),
                        });
                    }
                    // A signal dequeued before the instruction ran: kept for later, and
                    // suppressed by going on with signal 0. (No siginfo: a group-stop.)
                    if let Ok(info) = ptrace_getsiginfo_raw(self.tid) {
                        self.deferred.push(info);
                    }
                }
                // PTRACE_EVENT_STOP (group-stop or interrupt of a seized thread): go on.
                Wait::Status(WaitStatus::PtraceEvent(..) | WaitStatus::Continued(_)) => {}
                Wait::Status(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                    self.gone = true;
                    return Err(InjectError::Gone { tid: self.tid });
                }
                Wait::Status(WaitStatus::StillAlive) => {}
            }
        }
        Err(InjectError::UnexpectedStop { tid: self.tid, what: format!("more than {MAX_STOPS} signal stops") })
    }

    /// The registers to leave the thread with: the saved ones, and once it has left its
    /// original stop, with the restart of an interrupted system call applied (the stop
    /// it ends in, a syscall-exit stop, applies none).
    fn registers_to_restore(&self) -> libc::user_regs_struct {
        if self.left {
            restarted(&self.saved_regs)
        } else {
            self.saved_regs
        }
    }

    /// The address of the session's scratch memory ([`SCRATCH`] bytes, 16-aligned).
    fn scratch(&mut self) -> Result<u64> {
        if let Some(s) = &self.scratch {
            return Ok(s.addr());
        }
        let below = scratch_below(self.saved_regs.rsp);
        if let Some(addr) = below {
            if let Ok(saved) = procfs::read_memory(self.pid, addr, SCRATCH as usize) {
                if saved.len() == SCRATCH as usize && self.write_remote(addr, &saved).is_ok() {
                    self.scratch = Some(Scratch::Stack { addr, saved });
                    return Ok(addr);
                }
            }
        }
        let page = page_size() as u64;
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let addr = self.checked("mmap", libc::SYS_mmap, [0, page, prot, flags, u64::MAX, 0])?;
        self.scratch = Some(Scratch::Page { addr });
        Ok(addr)
    }

    fn write_remote(&self, addr: u64, data: &[u8]) -> Result<()> {
        let remote = [RemoteIoVec { base: addr as usize, len: data.len() }];
        let n = process_vm_writev(Pid::from_raw(self.pid), &[io::IoSlice::new(data)], &remote)
            .map_err(|e| InjectError::Io { tid: self.tid, op: "process_vm_writev", source: e.into() })?;
        if n != data.len() {
            return Err(InjectError::Io {
                tid: self.tid,
                op: "process_vm_writev",
                source: io::Error::other("short write"),
            });
        }
        Ok(())
    }

    /// Writes `data` to the scratch memory at `off`; its remote address.
    fn put_scratch(&mut self, off: u64, data: &[u8]) -> Result<u64> {
        if off + data.len() as u64 > SCRATCH {
            return Err(InjectError::Invalid("scratch data too long"));
        }
        let addr = self.scratch()? + off;
        self.write_remote(addr, data)?;
        Ok(addr)
    }

    /// Writes a NUL-terminated copy of `s` to the scratch memory; its remote address.
    fn put_cstr(&mut self, s: &str) -> Result<u64> {
        if s.as_bytes().contains(&0) {
            return Err(InjectError::Invalid("string with a NUL byte"));
        }
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.put_scratch(0, &b)
    }

    /// Remote `close(fd)`.
    pub fn close(&mut self, fd: i32) -> Result<()> {
        self.checked("close", libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]).map(|_| ())
    }

    /// Remote `munmap(addr, len)`.
    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<()> {
        self.checked("munmap", libc::SYS_munmap, [addr, len, 0, 0, 0, 0]).map(|_| ())
    }

    /// Opens udtrace's descriptor `fd` in the tracee through `/proc/<udtrace>/fd/<n>`;
    /// the tracee's descriptor (close-on-exec).
    pub fn open_our_fd(&mut self, fd: BorrowedFd<'_>, writable: bool) -> Result<i32> {
        let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
        let at = self.put_cstr(&path)?;
        let mode = if writable { libc::O_RDWR } else { libc::O_RDONLY };
        let flags = (mode | libc::O_CLOEXEC) as u64;
        let r = self.syscall(libc::SYS_openat, [libc::AT_FDCWD as u64, at, flags, 0, 0, 0])?;
        match r {
            r if r >= 0 => Ok(r as i32),
            r if r == -(libc::EACCES as i64) || r == -(libc::EPERM as i64) || r == -(libc::ENOENT as i64) => {
                Err(InjectError::FdNotReachable { tid: self.tid, path, errno: Errno::from_raw(-r as i32) })
            }
            r => Err(InjectError::Remote { tid: self.tid, call: "openat", errno: Errno::from_raw(-r as i32) }),
        }
    }

    /// Creates a memfd of `len` bytes in the tracee (executable when `exec`) and opens
    /// it in udtrace through `/proc/<pid>/fd/<n>`: udtrace's descriptor and the
    /// tracee's (close-on-exec, which the caller closes when it has mapped it).
    pub fn create_memfd(&mut self, name: &str, len: u64, exec: bool) -> Result<(OwnedFd, i32)> {
        let at = self.put_cstr(name)?;
        let mut r = -(libc::EINVAL as i64);
        if exec {
            r = self.syscall(libc::SYS_memfd_create, [at, MFD_CLOEXEC | MFD_EXEC, 0, 0, 0, 0])?;
        }
        // Before Linux 6.3 MFD_EXEC is unknown (EINVAL) and every memfd is executable.
        if r == -(libc::EINVAL as i64) {
            r = self.syscall(libc::SYS_memfd_create, [at, MFD_CLOEXEC, 0, 0, 0, 0])?;
        }
        if r < 0 {
            return Err(InjectError::Remote { tid: self.tid, call: "memfd_create", errno: Errno::from_raw(-r as i32) });
        }
        let remote_fd = r as i32;
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(format!("/proc/{}/fd/{remote_fd}", self.pid))
            .and_then(|f| f.set_len(len).map(|_| f));
        match opened {
            Ok(f) => Ok((OwnedFd::from(f), remote_fd)),
            Err(source) => {
                let _ = self.close(remote_fd);
                Err(InjectError::Io { tid: self.tid, op: "opening the tracee's memfd", source })
            }
        }
    }

    /// Maps the tracee's descriptor `remote_fd` (`len` bytes from offset 0, shared)
    /// within ±2 GiB of `near`; the address.
    pub fn map_fd_near(&mut self, remote_fd: i32, len: u64, near: u64, prot: Prot) -> Result<u64> {
        let min_addr = std::fs::read_to_string("/proc/sys/vm/mmap_min_addr")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65536u64);
        for _round in 0..2 {
            let maps = procfs::read_maps(self.pid).map_err(|source| InjectError::Io {
                tid: self.tid,
                op: "reading maps",
                source,
            })?;
            let cands = candidates_near(&maps, len, near, min_addr.max(page_size() as u64));
            if cands.is_empty() {
                break;
            }
            if let Some(addr) = self.map_fd_first(remote_fd, len, &cands, prot)? {
                return Ok(addr);
            }
        }
        Err(InjectError::NoRoom { len, near })
    }

    /// Maps `remote_fd` (`len` bytes) at the first of `addrs` (page-aligned) where
    /// nothing is mapped yet; `NoRoom` when none is free.
    pub fn map_fd_at(&mut self, remote_fd: i32, len: u64, addrs: &[u64], prot: Prot) -> Result<u64> {
        self.map_fd_first(remote_fd, len, addrs, prot)?
            .ok_or(InjectError::NoRoom { len, near: addrs.first().copied().unwrap_or(0) })
    }

    /// [`Self::map_fd_at`], `None` when no address is free.
    fn map_fd_first(&mut self, remote_fd: i32, len: u64, addrs: &[u64], prot: Prot) -> Result<Option<u64>> {
        let flags = (libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE) as u64;
        for &addr in addrs.iter().take(MAX_TRIES) {
            let r = self.syscall(libc::SYS_mmap, [addr, len, prot.bits() as u64, flags, remote_fd as u64, 0])?;
            if r as u64 == addr {
                return Ok(Some(addr));
            }
            if r >= 0 {
                // A kernel before 4.17 takes MAP_FIXED_NOREPLACE as a mere hint.
                let _ = self.munmap(r as u64, len);
                continue;
            }
            // EEXIST: another thread mapped something there meanwhile.
            if r != -(libc::EEXIST as i64) {
                return Err(InjectError::Remote { tid: self.tid, call: "mmap", errno: Errno::from_raw(-r as i32) });
            }
        }
        Ok(None)
    }

    /// Blocks every signal but SIGTRAP (saving the mask) and queues the deferred
    /// signals again, to the thread, from the thread itself, so that they wait with their
    /// siginfo until the caller resumes it. SIGSTOP and SIGTRAP, which no mask holds
    /// back (another step would take them at once), are returned to be sent by udtrace
    /// ([`resend`]) once no step is left. The mask is set with ptrace, which needs no step: only
    /// after a first step, when a mask that sigsuspend/ppoll/pselect had saved is
    /// already back in place (PTRACE_SETSIGMASK would drop it).
    fn requeue_signals(&mut self) -> Result<Vec<[u8; SIGINFO_SIZE]>> {
        let mut late = Vec::new();
        if self.deferred.is_empty() {
            return Ok(late);
        }
        if !self.stepped {
            // No call completed (an error): the mask must not be touched; the signals
            // are sent by udtrace, in arrival order (the list is reversed).
            late.extend(self.deferred.drain(..).rev());
            return Ok(late);
        }
        let old = ptrace_getsigmask(self.tid).map_err(|source| InjectError::Io {
            tid: self.tid,
            op: "PTRACE_GETSIGMASK",
            source,
        })?;
        ptrace_setsigmask(self.tid, !(1u64 << (libc::SIGTRAP - 1))).map_err(|source| InjectError::Io {
            tid: self.tid,
            op: "PTRACE_SETSIGMASK",
            source,
        })?;
        self.saved_sigmask = Some(old);
        let mut first_err = None;
        // Signals arriving meanwhile can only be SIGSTOP and SIGTRAP: bounded.
        for _ in 0..MAX_STOPS {
            let Some(info) = self.deferred.pop() else { break };
            let sig = signo(&info);
            if sig == libc::SIGSTOP || sig == libc::SIGTRAP {
                late.push(info);
            } else if let Err(e) = self.queue_signal(sig, &info) {
                first_err.get_or_insert(e);
            }
        }
        late.extend(self.deferred.drain(..).rev());
        first_err.map_or(Ok(late), Err)
    }

    /// Remote `rt_tgsigqueueinfo` of the thread to itself with `info`.
    fn queue_signal(&mut self, signo: i32, info: &[u8; SIGINFO_SIZE]) -> Result<()> {
        let at = self.put_scratch(0, info)?;
        let args = [self.pid as u64, self.tid as u64, signo as u64, at, 0, 0];
        self.checked("rt_tgsigqueueinfo", libc::SYS_rt_tgsigqueueinfo, args).map(|_| ())
    }

    fn restore(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        let mut first_err: Option<InjectError> = None;
        if !self.gone {
            // The deferred list is popped from its end: queue in arrival order.
            self.deferred.reverse();
            let mut late = match self.requeue_signals() {
                Ok(late) => late,
                Err(e) => {
                    first_err.get_or_insert(e);
                    Vec::new()
                }
            };
            match self.scratch.take() {
                Some(Scratch::Stack { addr, saved }) => {
                    if let Err(e) = self.write_remote(addr, &saved) {
                        first_err.get_or_insert(e);
                    }
                }
                Some(Scratch::Page { addr }) => {
                    if let Err(e) = self.munmap(addr, page_size() as u64) {
                        first_err.get_or_insert(e);
                    }
                }
                None => {}
            }
            // A SIGSTOP during the munmap's step.
            late.append(&mut self.deferred);
            if let Some(mask) = self.saved_sigmask.take() {
                if let Err(source) = ptrace_setsigmask(self.tid, mask) {
                    first_err.get_or_insert(InjectError::Io { tid: self.tid, op: "PTRACE_SETSIGMASK", source });
                }
            }
            let p = Pid::from_raw(self.tid);
            if let Err(e) = ptrace::setregs(p, self.registers_to_restore()) {
                first_err.get_or_insert(InjectError::Ptrace { tid: self.tid, op: "PTRACE_SETREGS", errno: e });
            }
            // The siginfo belongs to the original stop, which only a session that never
            // ran a call is still in.
            if let Some(info) = self.saved_siginfo.as_ref().filter(|_| !self.left) {
                if let Err(e) = ptrace_setsiginfo_raw(self.tid, info) {
                    first_err.get_or_insert(InjectError::Io { tid: self.tid, op: "PTRACE_SETSIGINFO", source: e });
                }
            }
            // Only now that the thread has its registers does it no longer need the frame.
            if let Some(w) = self.way_back.take() {
                if let Err(e) = self.write_remote(w.bottom, &w.saved) {
                    first_err.get_or_insert(e);
                }
            }
            for info in late {
                if let Err(source) = resend(self.pid, self.tid, &info) {
                    first_err.get_or_insert(InjectError::Io { tid: self.tid, op: "sending a signal again", source });
                }
            }
        }
        self.finished = true;
        first_err.map_or(Ok(()), Err)
    }

    /// Puts everything back: kept signals queued again, scratch memory, registers,
    /// siginfo. The thread stays stopped for the caller.
    pub fn finish(mut self) -> Result<()> {
        self.restore()
    }
}

impl Drop for RemoteCall {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

/// The signal number of raw siginfo bytes.
fn signo(info: &[u8; SIGINFO_SIZE]) -> i32 {
    i32::from_ne_bytes([info[0], info[1], info[2], info[3]])
}

/// Sends a signal taken from the thread back to it from udtrace: with its siginfo where
/// the kernel lets another process set it (`rt_tgsigqueueinfo`: a sigqueue'd signal
/// keeps its value and sender), else with `tgkill` (siginfo from udtrace). A standard
/// signal sent twice while the thread is stopped is merged, as it would have been.
fn resend(pid: i32, tid: i32, info: &[u8; SIGINFO_SIZE]) -> io::Result<()> {
    match rt_tgsigqueueinfo(pid, tid, signo(info), info) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => tgkill(pid, tid, signo(info)),
        r => r,
    }
}

/// Where scratch memory goes on a stack: past the 128-byte red zone below `rsp`.
fn scratch_below(rsp: u64) -> Option<u64> {
    rsp.checked_sub(128 + SCRATCH).map(|a| a & !15)
}

/// `regs` with the restart of an interrupted system call applied, as the kernel applies
/// it when a thread leaves a signal or group stop with no handler to run: rip back on
/// the `syscall` instruction, rax its number again (`restart_syscall` for
/// ERESTART_RESTARTBLOCK), and no restart pending any more.
fn restarted(regs: &libc::user_regs_struct) -> libc::user_regs_struct {
    let mut r = *regs;
    if (r.orig_rax as i64) < 0 {
        return r;
    }
    match r.rax as i64 {
        ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => r.rax = r.orig_rax,
        ERESTART_RESTARTBLOCK => r.rax = libc::SYS_restart_syscall as u64,
        _ => return r,
    }
    r.rip -= 2;
    r.orig_rax = u64::MAX;
    r
}

// The x86-64 signal frame as rt_sigreturn reads it (arch/x86/include/asm/sigframe.h,
// uapi asm/sigcontext.h): the return address, then `struct ucontext` { flags, link,
// stack_t (24 bytes), sigcontext (256 bytes), sigset }, then siginfo (128 bytes).
const UC_AT: u64 = 8;
const UC_STACK_FLAGS_AT: u64 = UC_AT + 16 + 8;
const MCONTEXT_AT: u64 = UC_AT + 40;
const FPSTATE_AT: u64 = MCONTEXT_AT + 184;
const SIGMASK_AT: u64 = UC_AT + 40 + 256;
const FRAME_LEN: u64 = SIGMASK_AT + 8 + 128;
/// `sw_reserved` of an XSAVE area (in a signal frame: magic1, extended size, features,
/// xstate size).
const SW_RESERVED_AT: usize = 464;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// An invalid `ss_flags`: sigaltstack refuses it (EINVAL, which rt_sigreturn ignores),
/// so the thread's alternate signal stack, which udtrace cannot read, stays as it is.
const SS_FLAGS_KEEP: u32 = 3;

/// `syscall; ret`.
const SYSCALL_RET: [u8; 3] = [0x0f, 0x05, 0xc3];
/// glibc's signal return (`__restore_rt`): `mov rax, 15; syscall`, i.e. rt_sigreturn.
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// A thread's way back to its own registers that needs no tracer: a signal frame
/// below its stack pointer holding them (restart applied), its signal mask and its
/// x87/SSE/AVX state, and the process's own code to return through. During a call the
/// thread's `rsp` points at the frame and `rip` at a `syscall; ret`: whatever moment
/// udtrace dies at, the thread finishes the call, returns into rt_sigreturn and goes
/// on exactly where it was (a memfd or mapping the call made stays behind).
#[derive(Debug)]
struct WayBack {
    /// The `syscall; ret` the calls run through.
    syscall_ret: u64,
    /// The frame's first word (the address of rt_sigreturn's code).
    frame: u64,
    /// The lowest byte written, and the bytes that were there.
    bottom: u64,
    saved: Vec<u8>,
}

impl WayBack {
    /// Writes the frame for `tid` (ptrace-stopped, registers `regs`); `None` where the
    /// process has no such code (no glibc), the state is not XSAVE's, or the stack
    /// has no room: the calls then run without a way back.
    fn set_up(pid: i32, tid: i32, regs: &libc::user_regs_struct) -> Option<WayBack> {
        let (syscall_ret, sigreturn) = gadgets(pid)?;
        let mut xstate = ptrace_get_xstate(tid).ok()?;
        // Below the XSAVE header there is no state: a regset too short is no XSAVE's.
        let xsize = xstate.len() as u64;
        if xsize < 576 {
            return None;
        }
        // ptrace keeps XCR0 where a signal frame keeps its description (magic1,
        // extended size, features, xstate size), which rt_sigreturn checks.
        let xcr0: [u8; 8] = xstate[SW_RESERVED_AT..SW_RESERVED_AT + 8].try_into().ok()?;
        let mut sw = [0u8; 48];
        sw[0..4].copy_from_slice(&FP_XSTATE_MAGIC1.to_ne_bytes());
        sw[4..8].copy_from_slice(&(xsize as u32 + 4).to_ne_bytes());
        sw[8..16].copy_from_slice(&xcr0);
        sw[16..20].copy_from_slice(&(xsize as u32).to_ne_bytes());
        xstate[SW_RESERVED_AT..SW_RESERVED_AT + 48].copy_from_slice(&sw);
        let top = scratch_below(regs.rsp)?;
        // XRSTOR wants the area 64-byte aligned; magic2 follows it.
        let fx = top.checked_sub(xsize + 4)? & !63;
        let frame = fx.checked_sub(FRAME_LEN)? & !15;
        let len = (top - frame) as usize;
        let saved = procfs::read_memory(pid, frame, len).ok().filter(|b| b.len() == len)?;

        let mut b = vec![0u8; len];
        let mut put = |at: u64, v: &[u8]| b[at as usize..at as usize + v.len()].copy_from_slice(v);
        put(0, &sigreturn.to_ne_bytes());
        put(UC_STACK_FLAGS_AT, &SS_FLAGS_KEEP.to_ne_bytes());
        let r = restarted(regs);
        let gprs = [
            r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, r.rdx, r.rax, r.rcx,
            r.rsp, r.rip, r.eflags,
        ];
        for (i, v) in gprs.iter().enumerate() {
            put(MCONTEXT_AT + 8 * i as u64, &v.to_ne_bytes());
        }
        // cs, gs, fs, ss (uc_flags 0: the kernel puts the user ss back itself).
        put(MCONTEXT_AT + 144, &(r.cs as u16).to_ne_bytes());
        put(FPSTATE_AT, &fx.to_ne_bytes());
        put(SIGMASK_AT, &ptrace_getsigmask(tid).ok()?.to_ne_bytes());
        put(fx - frame, &xstate[..xsize as usize]);
        put(fx - frame + xsize, &FP_XSTATE_MAGIC2.to_ne_bytes());

        let remote = [RemoteIoVec { base: frame as usize, len }];
        let n = process_vm_writev(Pid::from_raw(pid), &[io::IoSlice::new(&b)], &remote).ok()?;
        if n != len {
            let _ = process_vm_writev(Pid::from_raw(pid), &[io::IoSlice::new(&saved[..n])], &remote);
            return None;
        }
        Some(WayBack { syscall_ret, frame, bottom: frame, saved })
    }
}

/// The addresses of a `syscall; ret` and of glibc's signal return in `pid`'s code,
/// searched in its loader and libc first. The offsets found are kept per file, so a
/// process's next session (and the next process with the same libraries) only reads
/// its maps.
fn gadgets(pid: i32) -> Option<(u64, u64)> {
    /// A mapping's file (path, inode, offset) and the offsets of both in it.
    type Found = ((String, u64, u64), (Option<u64>, Option<u64>));
    static FOUND: std::sync::Mutex<Vec<Found>> = std::sync::Mutex::new(Vec::new());
    let maps = procfs::read_maps(pid).ok()?;
    let mut exec: Vec<&Mapping> = maps
        .iter()
        .filter(|m| m.exec && m.inode != 0 && m.path.as_deref().is_some_and(|p| p.starts_with('/')))
        .collect();
    let rank = |m: &&Mapping| {
        let p = m.path.as_deref().unwrap_or("");
        if p.contains("/ld-linux") {
            0
        } else if p.contains("/libc.so") {
            1
        } else {
            2
        }
    };
    exec.sort_by_key(rank);
    let (mut syscall_ret, mut sigreturn) = (None, None);
    for m in exec {
        let key = (m.path.clone().unwrap_or_default(), m.inode, m.offset);
        let known = FOUND.lock().ok().and_then(|f| f.iter().find(|(k, _)| *k == key).map(|(_, v)| *v));
        let (a, b) = match known {
            Some(v) => v,
            None => {
                let Some([a, b]) = first_in_mapping(pid, m, [&SYSCALL_RET, &SIGRETURN]) else { continue };
                let v = (a, b);
                if let Ok(mut f) = FOUND.lock() {
                    f.push((key, v));
                }
                v
            }
        };
        syscall_ret = syscall_ret.or(a.map(|o| m.start + o));
        sigreturn = sigreturn.or(b.map(|o| m.start + o));
        if let (Some(a), Some(b)) = (syscall_ret, sigreturn) {
            return Some((a, b));
        }
    }
    None
}

/// The offsets in mapping `m` of `pid` of the first occurrence of each pattern (in what
/// could be read); `None` when none of it can be. A chunk at a time, overlapping by a pattern's length: a
/// mapping may be of any size.
fn first_in_mapping<const N: usize>(pid: i32, m: &Mapping, patterns: [&[u8]; N]) -> Option<[Option<u64>; N]> {
    const CHUNK: u64 = 1 << 20;
    let overlap = patterns.iter().map(|p| p.len()).max().unwrap_or(1).saturating_sub(1) as u64;
    let mut found = [None; N];
    let mut at = m.start;
    while at < m.end && found.iter().any(Option::is_none) {
        let len = (m.end - at).min(CHUNK + overlap) as usize;
        let Some(code) = procfs::read_memory(pid, at, len).ok().filter(|c| !c.is_empty()) else {
            // Unreadable from the start: nothing is known of it.
            if at == m.start {
                return None;
            }
            break;
        };
        for (f, pat) in found.iter_mut().zip(patterns) {
            if f.is_none() {
                // memmem: a compare per position was 2% of udtrace's start-up (ld.so is
                // searched whole for the signal return, which is libc's).
                *f = memchr::memmem::find(&code, pat).map(|i| at - m.start + i as u64);
            }
        }
        at += CHUNK;
    }
    Some(found)
}

/// The first `syscall` instruction (0f 05) in the process's executable memory: the
/// vDSO's first, then the other executable mappings'. `[vsyscall]` is never used
/// (executing it anywhere but its entry points faults).
pub fn find_syscall_instruction(pid: i32) -> Option<u64> {
    let maps = procfs::read_maps(pid).ok()?;
    let mut exec: Vec<&Mapping> =
        maps.iter().filter(|m| m.exec && m.path.as_deref() != Some("[vsyscall]") && m.start < USER_TOP).collect();
    exec.sort_by_key(|m| m.path.as_deref() != Some("[vdso]"));
    let mem = File::open(format!("/proc/{pid}/mem")).ok();
    const CHUNK: u64 = 1 << 20;
    for m in exec {
        let mut at = m.start;
        while at < m.end {
            let len = (m.end - at).min(CHUNK) as usize;
            let bytes = match procfs::read_memory(pid, at, len) {
                Ok(b) if !b.is_empty() => b,
                _ => {
                    let mut b = vec![0u8; len];
                    match mem.as_ref().map(|f| f.read_at(&mut b, at)) {
                        Some(Ok(n)) if n > 0 => {
                            b.truncate(n);
                            b
                        }
                        _ => break,
                    }
                }
            };
            if let Some(i) = bytes.windows(2).position(|w| w == [0x0f, 0x05]) {
                return Some(at + i as u64);
            }
            // One byte of overlap so that an instruction across chunks is found.
            at += (bytes.len() as u64).saturating_sub(1).max(1);
        }
    }
    None
}

/// Page-aligned addresses where `len` bytes (a multiple of the page size) fit in the
/// gaps of `maps`, every byte within [`REACH`] of `near`, nearest first. In a gap
/// just above `[heap]` the region goes to the top (brk grows up into the gap), in a gap
/// below `[stack]` to the bottom and [`STACK_ROOM`] away from the stack; elsewhere as
/// close to `near` as the gap allows.
pub fn candidates_near(maps: &[Mapping], len: u64, near: u64, min_addr: u64) -> Vec<u64> {
    let page = page_size() as u64;
    if len == 0 || len > REACH {
        return Vec::new();
    }
    let mut sorted: Vec<&Mapping> = maps.iter().filter(|m| m.start < USER_TOP).collect();
    sorted.sort_by_key(|m| m.start);
    let win_lo = near.saturating_sub(REACH).max(min_addr);
    let win_hi = near.saturating_add(REACH).min(USER_TOP);
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut gaps: Vec<(u64, u64, Option<&Mapping>, Option<&Mapping>)> = Vec::new();
    let mut prev: Option<&Mapping> = None;
    for &m in &sorted {
        let gs = prev.map_or(0, |p| p.end);
        if m.start > gs {
            gaps.push((gs, m.start, prev, Some(m)));
        }
        if prev.is_none_or(|p| m.end > p.end) {
            prev = Some(m);
        }
    }
    let last_end = sorted.iter().map(|m| m.end).max().unwrap_or(0);
    gaps.push((last_end, USER_TOP, sorted.last().copied(), None));
    for (gs, ge, below, above) in gaps {
        let is =
            |m: Option<&Mapping>, name: &str| m.and_then(|m| m.path.as_deref()).is_some_and(|p| p.starts_with(name));
        let mut lo = gs.max(win_lo);
        let mut hi = ge.min(win_hi);
        if is(above, "[stack") {
            hi = hi.min(ge.saturating_sub(STACK_ROOM));
        }
        lo = lo.div_ceil(page) * page;
        hi = hi / page * page;
        if hi < lo || hi - lo < len {
            continue;
        }
        let top = hi - len;
        let addr = if is(below, "[heap]") {
            top
        } else if is(above, "[stack") {
            lo
        } else {
            (near / page * page).clamp(lo, top)
        };
        let dist = if addr >= near { addr + len - near } else { near - addr };
        out.push((dist, addr));
    }
    out.sort_unstable();
    out.dedup_by_key(|c| c.1);
    out.into_iter().map(|c| c.1).collect()
}

/// A memory region mapped shared in a tracee and in udtrace.
#[derive(Debug)]
pub struct SharedRegion {
    /// Where the tracee has it.
    pub remote_addr: u64,
    pub len: u64,
    /// udtrace's descriptor of the memory.
    pub fd: OwnedFd,
    /// udtrace's read-write view of it.
    pub view: Mmap,
}

impl SharedRegion {
    /// Writes `data` at offset `off` (trampoline code, ring control words).
    pub fn write(&self, off: u64, data: &[u8]) -> io::Result<()> {
        let off = usize::try_from(off).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset"))?;
        self.view.write_bytes(off, data)
    }

    /// Bytes of udtrace's view; `None` out of bounds.
    pub fn read(&self, off: u64, len: u64) -> Option<&[u8]> {
        let off = usize::try_from(off).ok()?;
        let len = usize::try_from(len).ok()?;
        off.checked_add(len).filter(|&e| e <= self.view.len())?;
        Some(self.view.bytes(off, len))
    }
}

fn page_len(len: u64) -> Result<u64> {
    let page = page_size() as u64;
    if len == 0 || len > REACH {
        return Err(InjectError::Invalid("length must be between 1 byte and 2 GiB"));
    }
    Ok(len.div_ceil(page) * page)
}

fn check_prot(prot: Prot) -> Result<()> {
    if prot.bits() & !(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u32 != 0 {
        return Err(InjectError::Invalid("protection bits"));
    }
    Ok(())
}

/// Runs one system call in `tid` (in a ptrace-stop under the caller's control) and
/// puts everything back; the raw result (-errno on failure).
pub fn remote_syscall(tid: i32, nr: i64, args: [u64; 6]) -> Result<i64> {
    let mut call = RemoteCall::new(tid)?;
    let r = call.syscall(nr, args);
    let fin = call.finish();
    let r = r?;
    fin?;
    Ok(r)
}

/// Runs `f` in a session of `tid` and puts everything back, also when `f` fails (its
/// error is returned first).
fn with_session<T>(tid: i32, f: impl FnOnce(&mut RemoteCall) -> Result<T>) -> Result<T> {
    let mut call = RemoteCall::new(tid)?;
    let r = f(&mut call);
    let fin = call.finish();
    let r = r?;
    fin?;
    Ok(r)
}

/// Maps udtrace's descriptor `fd` (`len` bytes from offset 0, shared, `prot`) into the
/// process of `tid` within ±2 GiB of `near`; the remote address. The tracee opens
/// `/proc/<udtrace>/fd/<n>`, which needs it to have ptrace access to udtrace (same
/// user, same pid namespace): else [`InjectError::FdNotReachable`], and
/// [`create_shared_near`] is the way.
pub fn map_shared_near(tid: i32, fd: BorrowedFd<'_>, len: u64, near: u64, prot: Prot) -> Result<u64> {
    check_prot(prot)?;
    let len = page_len(len)?;
    with_session(tid, |call| {
        let remote_fd = call.open_our_fd(fd, prot.contains(Prot::WRITE))?;
        let mapped = call.map_fd_near(remote_fd, len, near, prot);
        let closed = call.close(remote_fd);
        let addr = mapped?;
        closed?;
        Ok(addr)
    })
}

/// Where a new region goes: as near an address as there is room, or at the first free
/// one of some page-aligned addresses.
enum Place<'a> {
    Near(u64),
    At(&'a [u64]),
}

fn create_near(tid: i32, name: &str, len: u64, near: u64, prot: Prot) -> Result<SharedRegion> {
    create(tid, name, len, Place::Near(near), prot)
}

fn create(tid: i32, name: &str, len: u64, place: Place<'_>, prot: Prot) -> Result<SharedRegion> {
    with_session(tid, |call| create_in(call, name, len, place, prot))
}

/// [`create_shared_near`] in a session already open: a process's set-up makes its
/// regions in one session (each session costs reading its maps and a signal frame).
pub fn create_shared_near_in(call: &mut RemoteCall, len: u64, near: u64, prot: Prot) -> Result<SharedRegion> {
    create_in(call, "udtrace-shared", len, Place::Near(near), prot)
}

fn create_in(call: &mut RemoteCall, name: &str, len: u64, place: Place<'_>, prot: Prot) -> Result<SharedRegion> {
    check_prot(prot)?;
    let len = page_len(len)?;
    let exec = prot.contains(Prot::EXEC);
    let tid = call.tid();
    {
        let (fd, remote_fd) = call.create_memfd(name, len, exec)?;
        let mapped = match place {
            Place::Near(near) => call.map_fd_near(remote_fd, len, near, prot),
            Place::At(addrs) => call.map_fd_at(remote_fd, len, addrs, prot),
        };
        let closed = call.close(remote_fd);
        let remote_addr = mapped?;
        let view = closed.and_then(|_| {
            Mmap::map(fd.as_fd(), len as usize, 0, true).map_err(|source| InjectError::Io {
                tid,
                op: "mapping the memfd in udtrace",
                source,
            })
        });
        match view {
            Ok(view) => Ok(SharedRegion { remote_addr, len, fd, view }),
            Err(e) => {
                let _ = call.munmap(remote_addr, len);
                Err(e)
            }
        }
    }
}

/// A new memfd of `len` bytes (rounded up to pages) created by the process of `tid`,
/// mapped there with `prot` within ±2 GiB of `near` and read-write in udtrace. Works
/// whenever udtrace may trace the process.
pub fn create_shared_near(tid: i32, len: u64, near: u64, prot: Prot) -> Result<SharedRegion> {
    create_near(tid, "udtrace-shared", len, near, prot)
}

/// A region for trampolines: read+exec in the process of `tid`, within ±2 GiB of
/// `near`, and read-write in udtrace, which writes the code through
/// [`SharedRegion::write`].
pub fn map_exec_near(tid: i32, len: u64, near: u64) -> Result<SharedRegion> {
    create_near(tid, "udtrace-trampolines", len, near, Prot::READ | Prot::EXEC)
}

/// [`map_exec_near`], at the first of `addrs` (page-aligned) where nothing is mapped:
/// for a trampoline whose address a patch's bytes dictate.
pub fn map_exec_at(tid: i32, len: u64, addrs: &[u64]) -> Result<SharedRegion> {
    create(tid, "udtrace-trampolines", len, Place::At(addrs), Prot::READ | Prot::EXEC)
}

/// Remote `munmap(addr, len)` in the process of `tid`.
pub fn unmap(tid: i32, addr: u64, len: u64) -> Result<()> {
    let page = page_size() as u64;
    if !addr.is_multiple_of(page) {
        return Err(InjectError::Invalid("address not page-aligned"));
    }
    let len = page_len(len)?;
    with_session(tid, |call| call.munmap(addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, path: Option<&str>) -> Mapping {
        Mapping { start, end, read: true, write: false, exec: false, offset: 0, inode: 0, path: path.map(String::from) }
    }

    #[test]
    fn candidates_stay_in_reach_and_avoid_heap_and_stack() {
        let exe = 0x5555_5555_4000u64;
        let maps = vec![
            map(exe, exe + 0x5000, Some("/bin/prog")),
            map(exe + 0x100_0000, exe + 0x102_1000, Some("[heap]")),
            map(0x7fff_f7d0_0000, 0x7fff_f7f0_0000, Some("/lib/libc.so.6")),
            map(0x7fff_fffd_e000, 0x7fff_ffff_f000, Some("[stack]")),
        ];
        let len = 0x10000;
        let c = candidates_near(&maps, len, exe + 0x1000, 0x10000);
        assert!(!c.is_empty());
        for &a in &c {
            assert_eq!(a % 4096, 0);
            assert!(a + len <= exe + 0x1000 + REACH && a >= exe + 0x1000 - REACH, "{a:#x}");
            for m in &maps {
                assert!(a + len <= m.start || a >= m.end, "{a:#x} overlaps {m:?}");
            }
        }
        // Nearest: right below the executable.
        assert_eq!(c[0], exe - len);
        // Between the executable and the heap next to the executable; above the heap
        // only at the far end of the reach.
        assert!(c.contains(&(exe + 0x5000)));
        assert!(c.iter().filter(|&&a| a > exe + 0x102_1000).all(|&a| a > exe + 0x7000_0000));
        // Near libc: not within STACK_ROOM of the stack.
        let c = candidates_near(&maps, len, 0x7fff_f7e0_0000, 0x10000);
        assert!(c.iter().all(|&a| a + len <= 0x7fff_fffd_e000 - STACK_ROOM));
        assert_eq!(c[0], 0x7fff_f7d0_0000 - len);
    }

    #[test]
    fn no_candidates_for_bad_lengths() {
        assert!(candidates_near(&[], 0, 0x1000_0000, 0x10000).is_empty());
        assert!(candidates_near(&[], 1 << 32, 0x1000_0000, 0x10000).is_empty());
        // Near address 0: only what lies above mmap_min_addr.
        let c = candidates_near(&[], 4096, 0, 0x10000);
        assert_eq!(c, vec![0x10000]);
    }
}
