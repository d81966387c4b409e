//! The context of probes that fire in udtrace itself (BEGIN, END, ERROR, timers):
//! built-ins describe the udtrace process, as they describe dtrace in DTrace.

use std::cell::RefCell;

use nix::time::{clock_gettime, ClockId};
use nix::unistd::{getegid, geteuid, getgid, getpgrp, getpid, getppid, getsid, gettid, getuid};

use udtrace_lang::ir::Builtin;
use udtrace_lang::types::{SymKind, TypeTable};
use udtrace_process::procfs;
use udtrace_runtime::{Context, Value};

use crate::pid_context::Procs;
use crate::proc::{Clocks, CurrentFromProc};

pub struct SelfContext {
    pub pid: i64,
    pub ppid: i64,
    pub pgid: i64,
    pub sid: i64,
    pub uid: i64,
    pub gid: i64,
    pub euid: i64,
    pub egid: i64,
    execname: String,
}

fn ns(clock: ClockId) -> u64 {
    clock_gettime(clock).map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64).unwrap_or(0)
}

impl Default for SelfContext {
    fn default() -> SelfContext {
        SelfContext::new()
    }
}

impl SelfContext {
    pub fn new() -> SelfContext {
        let execname = std::fs::read_to_string("/proc/self/comm")
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| "udtrace".into());
        SelfContext {
            pid: i64::from(getpid().as_raw()),
            ppid: i64::from(getppid().as_raw()),
            pgid: i64::from(getpgrp().as_raw()),
            sid: getsid(None).map(|s| i64::from(s.as_raw())).unwrap_or(0),
            uid: i64::from(getuid().as_raw()),
            gid: i64::from(getgid().as_raw()),
            euid: i64::from(geteuid().as_raw()),
            egid: i64::from(getegid().as_raw()),
            execname,
        }
    }

    /// The CPU this thread runs on now.
    pub fn cpu(&self) -> u32 {
        nix::sched::sched_getcpu().map(|c| c as u32).unwrap_or(0)
    }

    /// A seed for `rand()`.
    pub fn seed(&self) -> u64 {
        ns(ClockId::CLOCK_MONOTONIC) ^ ((self.pid as u64) << 32)
    }
}

impl Context for SelfContext {
    fn builtin(&self, b: Builtin) -> Option<Value> {
        Some(match b {
            Builtin::Pid => Value::int(self.pid),
            Builtin::Ppid => Value::int(self.ppid),
            Builtin::Tid => Value::int(i64::from(gettid().as_raw())),
            Builtin::Uid => Value::int(self.uid),
            Builtin::Gid => Value::int(self.gid),
            Builtin::Execname => Value::str(&self.execname),
            Builtin::Timestamp => Value::int(ns(ClockId::CLOCK_MONOTONIC) as i64),
            Builtin::Vtimestamp => Value::int(ns(ClockId::CLOCK_THREAD_CPUTIME_ID) as i64),
            Builtin::Walltimestamp => Value::int(ns(ClockId::CLOCK_REALTIME) as i64),
            Builtin::Cpu => Value::int(i64::from(self.cpu())),
            Builtin::Errno => Value::int(0),
            Builtin::Cwd => Value::str(&std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default()),
            Builtin::Root => Value::str("/"),
            _ => return None,
        })
    }

    /// DTrace's BEGIN, END and ERROR are probes in dtrace itself, whose registers
    /// uregs[] reads; no probe fires in udtrace for them, so its registers read 0,
    /// except `R_FS`, which DTrace reads from the task (its FS base), not the frame.
    fn register(&self, n: u64) -> Option<u64> {
        const R_FS: u64 = 23;
        match n {
            R_FS => Some(udtrace_sys::process::fs_base().unwrap_or(0)),
            _ => (n <= 25).then_some(0),
        }
    }

    fn progenyof(&self, pid: i64) -> bool {
        // Walk our own ancestry through /proc.
        let mut cur = self.pid;
        for _ in 0..4096 {
            if cur == pid {
                return true;
            }
            if cur <= 1 {
                return false;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{cur}/stat")) else { return false };
            let Some(after) = stat.rfind(')') else { return false };
            match stat[after + 1..].split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                Some(pp) => cur = pp,
                None => return false,
            }
        }
        false
    }
}

/// One firing in udtrace itself (BEGIN, END, ERROR, timers): as in DTrace, where these
/// fire in dtrace's own context, `curpsinfo` and `curlwpsinfo` describe udtrace, and
/// `copyin()` reads its memory. `timestamp` and `vtimestamp` are read once per firing;
/// `walltimestamp` reads the clock at each use, as DTrace's does (successive reads in
/// one clause advance).
pub struct SelfFiring<'a> {
    pub me: &'a SelfContext,
    /// The program's types, which lay out psinfo_t and lwpsinfo_t.
    pub types: &'a TypeTable,
    pub clocks: Clocks,
    timestamp: i64,
    vtimestamp: i64,
    /// `$target` (the first `-c`/`-p` process) and what udtrace knows of processes:
    /// `%A` in printf and printa symbolizes integers against it, as DTrace does.
    target: Option<(&'a RefCell<Procs>, u32)>,
}

impl<'a> SelfFiring<'a> {
    /// The context of a firing that starts now.
    pub fn now(me: &'a SelfContext, types: &'a TypeTable, clocks: Clocks) -> SelfFiring<'a> {
        SelfFiring {
            me,
            types,
            clocks,
            timestamp: ns(ClockId::CLOCK_MONOTONIC) as i64,
            vtimestamp: ns(ClockId::CLOCK_THREAD_CPUTIME_ID) as i64,
            target: None,
        }
    }

    /// With `$target` for user addresses.
    pub fn with_target(mut self, procs: &'a RefCell<Procs>, pid: Option<u32>) -> SelfFiring<'a> {
        self.target = pid.map(|p| (procs, p));
        self
    }
}

impl Context for SelfFiring<'_> {
    fn builtin(&self, b: Builtin) -> Option<Value> {
        match b {
            Builtin::Timestamp => Some(Value::int(self.timestamp)),
            Builtin::Vtimestamp => Some(Value::int(self.vtimestamp)),
            Builtin::Curpsinfo | Builtin::Curlwpsinfo => CurrentFromProc::builtin(b),
            // udtrace's own probes fire in udtrace's own thread.
            Builtin::Curthread => crate::kernel::current_task().map(|t| Value::int(t as i64)),
            _ => self.me.builtin(b),
        }
    }

    fn read_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if CurrentFromProc::covers(addr) {
            let (pid, tid) = (self.me.pid as u32, gettid().as_raw() as u32);
            let cur = CurrentFromProc::from_proc(pid, tid, self.me.cpu(), &self.me.execname, self.types, self.clocks);
            return cur.read(addr, len);
        }
        if crate::kernel::is_kernel_address(addr) {
            return crate::kernel::read(addr, len);
        }
        let data = procfs::read_memory(self.me.pid as i32, addr, len).ok()?;
        (data.len() == len).then_some(data)
    }

    fn read_string(&self, addr: u64, max: usize) -> Option<Vec<u8>> {
        if addr == 0 {
            return None;
        }
        if crate::kernel::is_kernel_address(addr) && !CurrentFromProc::covers(addr) {
            return crate::kernel::read_string(addr, max);
        }
        let data = procfs::read_memory(self.me.pid as i32, addr, max.saturating_sub(1)).ok()?;
        Some(data.split(|&c| c == 0).next().unwrap_or_default().to_vec())
    }

    fn register(&self, n: u64) -> Option<u64> {
        self.me.register(n)
    }

    fn progenyof(&self, pid: i64) -> bool {
        self.me.progenyof(pid)
    }

    fn symbol(&self, addr: u64, kind: SymKind) -> Option<String> {
        if crate::kernel::is_kernel_address(addr) {
            return crate::kernel::symbol(addr, kind);
        }
        let (procs, pid) = self.target?;
        procs.borrow_mut().symbol(pid, addr, kind)
    }
}
