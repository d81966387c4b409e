//! The guard of a process with breakpoints or a loader-hook debug register (no BPF):
//! `udtrace_inproc::guard`'s SIGTRAP handler, installed so that once udtrace is killed
//! a thread reaching one of them goes on as if untraced. Installed before the first
//! breakpoint or debug register goes in; the process's own action is put back when
//! udtrace lets it go.

use std::os::unix::fs::FileExt;

use nix::libc;

use udtrace_inproc::guard::{
    self as code, ACTION_SIZE, ENTRY_SIZE, GUARD_LEN, OFF_ACTION, OFF_COUNT, OFF_OLD, OFF_TABLE,
};
use udtrace_process::inject::{self, RemoteCall};
use udtrace_process::procfs;

use crate::process::{mem, ready_tid, stopped_tid};

const PAGE: u64 = 4096;

/// A guard in one process image (its copy in a forked child is the child's).
#[derive(Debug, Clone)]
pub struct Guard {
    base: u64,
    count: u64,
}

impl Guard {
    /// Installs the guard in `pid` (a thread of it stopped): its system calls run in
    /// one session of that thread. Refused when the process handles SIGTRAP itself: its
    /// handler stays.
    pub fn install(pid: i32) -> Result<Guard, String> {
        let (tid, _) = ready_tid(pid)?;
        let mut call = RemoteCall::new(tid).map_err(|e| format!("cannot install its SIGTRAP guard: {e}"))?;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64;
        let mapped = call.checked("mmap", libc::SYS_mmap, [0, GUARD_LEN, rw, flags, u64::MAX, 0]);
        let installed = mapped.map_err(|e| e.to_string()).and_then(|base| {
            let filled = Self::fill(pid, &mut call, base);
            if filled.is_err() {
                let _ = call.munmap(base, GUARD_LEN);
            }
            filled.map(|()| base)
        });
        let finished = call.finish();
        let base = installed.map_err(|e| format!("cannot install its SIGTRAP guard: {e}"))?;
        finished.map_err(|e| format!("cannot install its SIGTRAP guard: {e}"))?;
        Ok(Guard { base, count: 0 })
    }

    fn fill(pid: i32, call: &mut RemoteCall, base: u64) -> Result<(), String> {
        let (bytes, restorer) = code::code(base).map_err(|e| format!("cannot assemble it: {e}"))?;
        let m = mem(pid)?;
        m.write_all_at(&bytes, base).map_err(|e| format!("cannot write it: {e}"))?;
        m.write_all_at(&code::action(base, restorer), base + OFF_ACTION)
            .map_err(|e| format!("cannot write it: {e}"))?;
        // The kernel writes the old action into the page, still writable.
        let (trap, size) = (libc::SIGTRAP as u64, 8);
        let mut sys = |name, nr, args| call.checked(name, nr, args).map(|_| ()).map_err(|e| e.to_string());
        sys("rt_sigaction", libc::SYS_rt_sigaction, [trap, base + OFF_ACTION, base + OFF_OLD, size, 0, 0])?;
        let old = procfs::read_memory(pid, base + OFF_OLD, ACTION_SIZE).unwrap_or_default();
        if !code::is_default(&old) {
            sys("rt_sigaction", libc::SYS_rt_sigaction, [trap, base + OFF_OLD, 0, size, 0, 0])?;
            return Err("it handles SIGTRAP itself".into());
        }
        let (rx, r) = ((libc::PROT_READ | libc::PROT_EXEC) as u64, libc::PROT_READ as u64);
        sys("mprotect", libc::SYS_mprotect, [base, PAGE, rx, 0, 0, 0])?;
        sys("mprotect", libc::SYS_mprotect, [base + PAGE, GUARD_LEN - PAGE, r, 0, 0, 0])
    }

    /// Adds a breakpoint (the `int3` at `at`, its out-of-line copy at `copy`) to the
    /// table: before the `int3` is written, so that a hit always finds its entry.
    pub fn add(&mut self, pid: i32, at: u64, copy: u64) -> Result<(), String> {
        if self.count >= code::capacity() {
            return Err("its SIGTRAP guard's table is full".into());
        }
        let m = mem(pid)?;
        m.write_all_at(&code::entry(at, copy), self.base + OFF_TABLE + self.count * ENTRY_SIZE)
            .and_then(|()| m.write_all_at(&(self.count + 1).to_ne_bytes(), self.base + OFF_COUNT))
            .map_err(|e| format!("cannot write its SIGTRAP guard's table: {e}"))?;
        self.count += 1;
        Ok(())
    }

    /// Puts the process's own SIGTRAP action back (every breakpoint and debug register
    /// is out, or about to be: a thread of it is stopped).
    pub fn remove(&self, pid: i32) -> Result<(), String> {
        let tid = stopped_tid(pid)?;
        match inject::remote_syscall(
            tid,
            libc::SYS_rt_sigaction,
            [libc::SIGTRAP as u64, self.base + OFF_OLD, 0, 8, 0, 0],
        ) {
            Ok(r) if r < 0 => Err(format!("rt_sigaction: errno {}", -r)),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
}
