//! Starting a process under ptrace from its first instruction, and the ptrace requests
//! nix does not wrap.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both are open descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the destination is the unfilled rest of `buf`.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(got)
}

/// Starts `argv` (searched in PATH) already seized with `PTRACE_SEIZE` and `options`, so
/// that its exec is reported as a ptrace event stop before the dynamic loader runs.
/// The child waits on a pipe between fork and exec until the parent has seized it.
/// Returns the pid; the caller must wait for the exec stop. Errors are the exec's own
/// (a missing program, no permission), with the child already reaped.
pub fn spawn_seized(argv: &[String], options: libc::c_int) -> io::Result<i32> {
    let args: Vec<CString> = argv
        .iter()
        .map(|a| {
            CString::new(a.as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))
        })
        .collect::<io::Result<_>>()?;
    if args.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    }
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (go_r, go_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // SAFETY: the child only makes async-signal-safe calls (read, sigprocmask, signal,
    // execvp, write, _exit) on memory prepared before the fork, so a lock another
    // thread of udtrace held at the fork (system() commands start while tracing, with
    // the backend's threads running) is never needed in it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: (child) see above; every pointer refers to memory set up before fork.
        unsafe {
            let mut b = 0u8;
            while libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) < 0 {}
            // The command starts as from a shell: no signals blocked (udtrace blocks the
            // ones it reads through a signalfd), SIGPIPE at its default (Rust ignores it).
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(err_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        }
    }
    drop(go_r);
    drop(err_w);
    let reap = |pid: i32| {
        let mut st = 0;
        // SAFETY: waiting for our own child; `st` is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut st, libc::__WALL) };
    };
    // SAFETY: PTRACE_SEIZE takes no pointers; `options` travels in the data word.
    let seized = cvt(unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, options as usize) } as libc::c_int);
    if let Err(e) = seized {
        // SAFETY: killing our own child, still blocked before its exec.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        reap(pid);
        return Err(e);
    }
    // SAFETY: writing one byte from a local.
    unsafe { libc::write(go_w.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    drop(go_w);
    // End of file: the exec succeeded and closed the pipe. Four bytes: its errno.
    let mut errno = [0u8; 4];
    if read_full(&err_r, &mut errno)? == errno.len() {
        reap(pid);
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(pid)
}

/// `fork()`, refused while this process has more than one thread: the child is then a
/// whole copy of it and may run any code (with other threads, a lock one of them held
/// at the fork would stay held in the child for ever). 0 in the child, the child's pid
/// in the parent.
pub fn fork_single_threaded() -> io::Result<i32> {
    if std::fs::read_dir("/proc/self/task")?.count() != 1 {
        return Err(io::Error::other("udtrace already runs more than one thread"));
    }
    // SAFETY: one thread (only this one could start another, and it is here), so the
    // child's copy holds no lock another thread took.
    cvt(unsafe { libc::fork() })
}

/// `waitpid(pid, flags)` with the raw status: (pid, status), pid 0 when `WNOHANG`
/// found nothing. nix decodes a status into its `Signal`, which has no real-time
/// signals: a real-time signal's stop would be reaped and then lost as an error.
pub fn waitpid_raw(pid: i32, flags: libc::c_int) -> io::Result<(i32, libc::c_int)> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer for the call's duration.
    let p = cvt(unsafe { libc::waitpid(pid, &mut status, flags) })?;
    Ok((p, status))
}

/// `PTRACE_CONT` delivering signal `sig` (any number, real-time ones too; 0 for none).
pub fn ptrace_cont(tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: PTRACE_CONT takes no pointers; the signal travels in the data word.
    cvt(unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0usize, sig as usize) } as libc::c_int).map(|_| ())
}

/// `PTRACE_DETACH` delivering signal `sig` (any number; 0 for none).
pub fn ptrace_detach(tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes no pointers; the signal travels in the data word.
    cvt(unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, sig as usize) } as libc::c_int).map(|_| ())
}

/// `PTRACE_LISTEN`: lets a seized thread in group-stop stay stopped, as if untraced,
/// while its tracer goes on; SIGCONT then wakes it with an event stop.
pub fn ptrace_listen(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_LISTEN takes no pointers.
    cvt(unsafe { libc::ptrace(libc::PTRACE_LISTEN, tid, 0usize, 0usize) } as libc::c_int).map(|_| ())
}

/// Size of the kernel's `siginfo_t` on every Linux architecture.
pub const SIGINFO_SIZE: usize = 128;

/// `PTRACE_GETSIGINFO` as raw bytes: the siginfo of the signal (or event) that put the
/// ptrace-stopped thread `tid` in its stop. The bytes can be written back with
/// [`ptrace_setsiginfo_raw`] or handed to the tracee (`rt_tgsigqueueinfo`) unchanged.
pub fn ptrace_getsiginfo_raw(tid: i32) -> io::Result<[u8; SIGINFO_SIZE]> {
    let mut buf = [0u8; SIGINFO_SIZE];
    // SAFETY: the kernel writes at most sizeof(siginfo_t) = 128 bytes to the data
    // pointer, which is `buf`, 128 bytes, alive for the call.
    cvt(unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, tid, 0usize, buf.as_mut_ptr()) } as libc::c_int)?;
    Ok(buf)
}

/// `PTRACE_SETSIGINFO` from raw bytes (as [`ptrace_getsiginfo_raw`] returned them).
pub fn ptrace_setsiginfo_raw(tid: i32, info: &[u8; SIGINFO_SIZE]) -> io::Result<()> {
    // SAFETY: the kernel reads 128 bytes from the data pointer, which is `info`, 128
    // bytes, alive for the call; it is not written.
    cvt(unsafe { libc::ptrace(libc::PTRACE_SETSIGINFO, tid, 0usize, info.as_ptr()) } as libc::c_int).map(|_| ())
}

/// `PTRACE_GETSIGMASK`: the blocked-signal mask of the ptrace-stopped thread `tid`
/// (bit `n - 1` for signal `n`).
pub fn ptrace_getsigmask(tid: i32) -> io::Result<u64> {
    let mut mask: u64 = 0;
    // SAFETY: the kernel writes `addr` = 8 bytes (the kernel sigset size on x86-64,
    // which it checks) to the data pointer, `mask`, alive for the call.
    cvt(unsafe { libc::ptrace(libc::PTRACE_GETSIGMASK, tid, 8usize, &mut mask as *mut u64) } as libc::c_int)?;
    Ok(mask)
}

/// `PTRACE_SETSIGMASK`: sets the blocked-signal mask of the ptrace-stopped thread
/// `tid` (SIGKILL and SIGSTOP are never blocked). It also drops a mask that
/// sigsuspend/ppoll/pselect had saved to restore on return to user space, which is
/// consumed once the thread has left the stop it had when the tracer took it.
pub fn ptrace_setsigmask(tid: i32, mask: u64) -> io::Result<()> {
    // SAFETY: the kernel reads `addr` = 8 bytes from the data pointer, `mask`, alive
    // for the call.
    cvt(unsafe { libc::ptrace(libc::PTRACE_SETSIGMASK, tid, 8usize, &mask as *const u64) } as libc::c_int).map(|_| ())
}

/// `PTRACE_GETREGSET` of `NT_X86_XSTATE`: the ptrace-stopped thread's x87/SSE/AVX/...
/// state in the XSAVE layout user space sees (its `sw_reserved` bytes describe it as a
/// signal frame's do: magic, sizes, features).
pub fn ptrace_get_xstate(tid: i32) -> io::Result<Vec<u8>> {
    const NT_X86_XSTATE: usize = 0x202;
    // Larger than any XSAVE area of today (AMX included, ~11 KiB).
    let mut buf = vec![0u8; 16384];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: the kernel writes at most `iov_len` bytes to `iov_base`, which points into
    // `buf`, alive for the call, and stores the length it wrote back in `iov`.
    cvt(unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid, NT_X86_XSTATE, &mut iov as *mut libc::iovec) }
        as libc::c_int)?;
    buf.truncate(iov.iov_len);
    Ok(buf)
}

/// `tgkill(tgid, tid, sig)`: sends `sig` to one thread.
pub fn tgkill(tgid: i32, tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: tgkill takes no pointers.
    cvt(unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, sig) } as libc::c_int).map(|_| ())
}

/// `rt_tgsigqueueinfo(tgid, tid, sig, info)`: queues `sig` to one thread with the
/// siginfo `info` (raw bytes, as [`ptrace_getsiginfo_raw`] returned them), value and
/// sender kept. The kernel refuses (EPERM) a siginfo whose `si_code` is not negative,
/// or is `SI_TKILL`, unless the caller sends to its own process.
pub fn rt_tgsigqueueinfo(tgid: i32, tid: i32, sig: i32, info: &[u8; SIGINFO_SIZE]) -> io::Result<()> {
    // SAFETY: the kernel reads sizeof(siginfo_t) = 128 bytes from `info`, 128 bytes,
    // alive for the call; it is not written.
    let r = unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, tgid, tid, sig, info.as_ptr()) };
    cvt(r as libc::c_int).map(|_| ())
}

/// `sigqueue(pid, sig, value)`: queues `sig` (real-time ones too) to process `pid`
/// with `value` as its `si_value`, as a program does.
pub fn sigqueue(pid: i32, sig: i32, value: i32) -> io::Result<()> {
    let v = libc::sigval { sival_ptr: value as isize as *mut libc::c_void };
    // SAFETY: sigqueue takes the value by copy and no pointer is dereferenced.
    cvt(unsafe { libc::sigqueue(pid, sig, v) }).map(|_| ())
}

/// The calling thread's FS base (its thread pointer), as `arch_prctl(ARCH_GET_FS)`
/// reports it.
#[cfg(target_arch = "x86_64")]
pub fn fs_base() -> io::Result<u64> {
    const ARCH_GET_FS: libc::c_long = 0x1003;
    let mut base: u64 = 0;
    // SAFETY: ARCH_GET_FS writes one unsigned long to the address given, which is
    // `base`, alive and writable for the call.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_FS, &mut base as *mut u64) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(base)
    }
}
