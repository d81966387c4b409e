//! Why a process cannot be traced, in words a user can act on: /proc is read before
//! ptrace is asked (a kernel thread, a zombie, a pid /proc does not list) and again
//! after ptrace refused (another tracer, another user, a process that is not dumpable).
//! DTrace for Linux prints strerror alone ("Operation not permitted"); the reason is
//! what tells a user whether running as root would help.

use std::os::unix::fs::MetadataExt;

use nix::errno::Errno;

use crate::procfs;

/// Linux's PF_KTHREAD, in the flags field of /proc/PID/stat.
const PF_KTHREAD: u64 = 0x0020_0000;
/// CAP_SYS_PTRACE's bit in /proc/PID/status's CapEff.
const CAP_SYS_PTRACE: u32 = 19;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// DTrace's strerror(ESRCH).
    #[error("No such process")]
    NoProcess,
    #[error("{comm} is a kernel thread: it has no user code to probe")]
    KernelThread { comm: String },
    #[error("zombie process: it has exited, and its parent has not reaped it")]
    Zombie,
    #[error("cannot grab udtrace itself")]
    Itself,
    #[error("process is traced by pid {tracer} ({comm}): a process has one tracer at a time")]
    Traced { tracer: i32, comm: String },
    #[error(
        "Operation not permitted: it runs as uid {owner}, udtrace as uid {me}; tracing another \
         user's process needs root or CAP_SYS_PTRACE"
    )]
    OtherUser { owner: u64, me: u64 },
    #[error(
        "Operation not permitted: it is not dumpable (set-user-ID, or it asked not to be traced); \
         tracing it needs root or CAP_SYS_PTRACE"
    )]
    NotDumpable,
    #[error(
        "Operation not permitted: kernel.yama.ptrace_scope is {scope}, which lets only \
         {allowed} trace it"
    )]
    Yama { scope: u32, allowed: &'static str },
    /// A /proc mounted for another PID namespace names other processes than ptrace's
    /// pids: acting on both would touch the wrong process.
    #[error(
        "/proc belongs to another PID namespace than udtrace's (udtrace is pid {mine} here, \
         /proc/self says {procs}): mount this namespace's /proc (unshare --mount-proc)"
    )]
    ForeignProc { mine: i32, procs: i32 },
    /// What the system call said, as strerror words it.
    #[error("{}", .0.desc())]
    Os(Errno),
}

/// Whether /proc names processes by the pids udtrace's system calls use: it does not
/// when udtrace runs in a PID namespace under a /proc mounted for another one.
pub fn check_proc() -> Result<(), Refusal> {
    let mine = std::process::id() as i32;
    let procs = std::fs::read_link("/proc/self").ok().and_then(|p| p.to_str()?.parse::<i32>().ok());
    match procs {
        Some(procs) if procs != mine => Err(Refusal::ForeignProc { mine, procs }),
        _ => Ok(()),
    }
}

/// What /proc says against tracing `pid` before ptrace is asked; `None` when nothing.
pub fn before_grab(pid: i32) -> Option<Refusal> {
    if let Err(r) = check_proc() {
        return Some(r);
    }
    if pid <= 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Some(Refusal::NoProcess);
    }
    if pid == std::process::id() as i32 {
        return Some(Refusal::Itself);
    }
    if let Some(comm) = kernel_thread(pid) {
        return Some(Refusal::KernelThread { comm });
    }
    if zombie(pid) {
        return Some(Refusal::Zombie);
    }
    None
}

/// `pid`'s name when it is a kernel thread (PF_KTHREAD: no memory of its own, no code
/// in user space).
pub fn kernel_thread(pid: i32) -> Option<String> {
    let (comm, fields) = procfs::task_stat(pid, pid).ok()?;
    // Fields after the name start at the state (field 3): flags are field 9.
    let flags: u64 = fields.get(6)?.parse().ok()?;
    (flags & PF_KTHREAD != 0).then_some(comm)
}

/// Whether every thread of `pid` has exited (a process whose first thread alone exited
/// still runs, and shows Z for that thread).
fn zombie(pid: i32) -> bool {
    let dead = |tid: i32| {
        procfs::task_stat(pid, tid)
            .ok()
            .and_then(|(_, f)| f.first()?.chars().next())
            .is_none_or(|state| state == 'Z' || state == 'X')
    };
    procfs::tasks(pid).is_ok_and(|tids| tids.into_iter().all(dead))
}

/// Why ptrace refused `pid` with `e`, as precisely as /proc tells.
pub fn after_refusal(pid: i32, e: Errno) -> Refusal {
    if let Some(r) = before_grab(pid) {
        // It exited, or turned zombie, meanwhile.
        return r;
    }
    if e != Errno::EPERM {
        return Refusal::Os(e);
    }
    if let Some((tracer, comm)) = procfs::tracer(pid) {
        return Refusal::Traced { tracer, comm };
    }
    if has_cap_sys_ptrace() {
        return Refusal::Os(e);
    }
    let me = procfs::status_numbers(std::process::id() as i32, "Uid:").and_then(|v| v.first().copied());
    let theirs = procfs::status_numbers(pid, "Uid:").unwrap_or_default();
    if let Some(me) = me {
        // The kernel wants the tracer's uid to be the target's real, effective and
        // saved uid alike.
        if let Some(&owner) = theirs.iter().take(3).find(|&&u| u != me) {
            return Refusal::OtherUser { owner, me };
        }
        // A process that is not dumpable has its /proc files owned by root.
        let owner = std::fs::metadata(format!("/proc/{pid}/status")).map(|m| u64::from(m.uid()));
        if me != 0 && owner.is_ok_and(|o| o == 0) {
            return Refusal::NotDumpable;
        }
    }
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|s| s.trim().parse().ok()) {
        Some(1) => Refusal::Yama { scope: 1, allowed: "its ancestors, or root or CAP_SYS_PTRACE," },
        Some(2) => Refusal::Yama { scope: 2, allowed: "root or CAP_SYS_PTRACE" },
        Some(scope @ 3..) => Refusal::Yama { scope, allowed: "no one (until reboot)" },
        _ => Refusal::Os(e),
    }
}

fn has_cap_sys_ptrace() -> bool {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hex = text.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap_or("0").trim();
    u64::from_str_radix(hex, 16).is_ok_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// Why /proc/`pid` could not be read (its maps, its executable) with `e`.
pub fn unreadable(pid: i32, e: &std::io::Error) -> Refusal {
    if let Some(r) = before_grab(pid).filter(|r| *r != Refusal::Itself) {
        return r;
    }
    match e.raw_os_error().map(Errno::from_raw) {
        // /proc answers EACCES where ptrace would answer EPERM, for the same reasons.
        Some(Errno::EACCES | Errno::EPERM) => after_refusal(pid, Errno::EPERM),
        Some(errno) => Refusal::Os(errno),
        None => Refusal::Os(Errno::UnknownErrno),
    }
}

/// The initial PID namespace's inode number (the kernel's PROC_PID_INIT_INO).
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// Whether udtrace runs in the host's PID namespace, whose pids BPF helpers give.
pub fn in_initial_pid_namespace() -> bool {
    // /proc/thread-self names this thread whatever namespace /proc was mounted for.
    std::fs::metadata("/proc/thread-self/ns/pid").map_or(true, |m| m.ino() == INITIAL_PID_NAMESPACE)
}
