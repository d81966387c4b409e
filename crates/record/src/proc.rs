//! The record a proc firing leaves: one per kernel hook, a fixed header and the
//! sections its plan asks for, and its parser. Task data is raw (what DTrace's
//! translators make of it, psinfo_t and lwpsinfo_t, is the proc provider's business).
//!
//! ```text
//! offset  size  field
//!      0     8  cookie: PROC_COOKIE | hook
//!      8     8  pid_tgid of the current thread
//!     16     8  ktime_get_ns
//!     24     4  cpu
//!     28     4  reserved, 0
//!     32    16  comm of the current thread
//!     48    48  a[0..6]: the hook's own values (see Hook)
//!     96        sections, each when the plan has it, in this order:
//!               current task snapshot (SNAP_SIZE), other task snapshot (SNAP_SIZE),
//!               siginfo (SIGINFO_SIZE), string (i32 length, u32 0, bytes rounded to 8),
//!               ancestors (ANCESTORS u32 process ids, parent first)
//! ```

use thiserror::Error;

use crate::pid::MAX_STRING;

/// Set in the cookie of every proc record; uprobe records' cookies are small indices.
pub const PROC_COOKIE: u64 = 1 << 62;

/// The kernel hooks. `a[]` holds, per hook:
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Hook {
    /// `sched_process_fork`, in the parent: a0 = the child's pid_tgid (tgid << 32 |
    /// tid); the other snapshot is the child.
    Fork = 1,
    /// `sys_enter_execve(at)`: the string is the path. It is read from user memory,
    /// which fails where the page is not mapped in yet (a string literal in a fork
    /// child); then the outcome's record brings it, and the path pointer waits in the
    /// `paths` map (by thread) until then.
    ExecEnter,
    /// `sys_exit_execve(at)` when it failed: a0 = the return value (−errno); the
    /// string is the path again (the kernel has read it, so its page is in now).
    ExecFail,
    /// `sched_process_exec`, in the new image: a0 = the thread id before the exec
    /// (a thread other than the leader takes the leader's); the string is the path
    /// from the kernel's copy.
    ExecDone,
    /// `sched_process_exit`, in each exiting thread: a0 = 1 when it is the last of its
    /// process, a1 = the thread's exit code, a2 = signal_struct flags, a3 = the
    /// group's exit code.
    Exit,
    /// `sys_exit_clone/clone3/fork/vfork` returning 0: the new thread's first return
    /// to user mode.
    Start,
    /// `signal_generate`, in the sender: a0 = signal, a1 = group, a2 = result
    /// (TRACE_SIGNAL_*), a3 = the siginfo pointer (0 and 1 are the kernel's "no info"
    /// and "private" markers), and where faults are told apart a4 = the receiver's
    /// pid_tgid, a5 = si_code (0 without siginfo); the other snapshot is the receiver.
    Signal,
    /// `signal_deliver` when a handler will run, in the receiver: a0 = signal, a1 =
    /// handler address, a2 = sa_flags.
    Deliver,
    /// `sys_exit_rt_sigtimedwait` with a signal taken: a0 = the signal.
    Clear,
}

impl Hook {
    pub const ALL: [Hook; 9] = [
        Hook::Fork,
        Hook::ExecEnter,
        Hook::ExecFail,
        Hook::ExecDone,
        Hook::Exit,
        Hook::Start,
        Hook::Signal,
        Hook::Deliver,
        Hook::Clear,
    ];

    fn from_u8(v: u8) -> Option<Hook> {
        Hook::ALL.iter().copied().find(|h| *h as u8 == v)
    }

    /// Whether the hook concerns a task other than the current one (its snapshot).
    pub fn has_other(self) -> bool {
        matches!(self, Hook::Fork | Hook::Signal)
    }
}

/// What a hook's records carry beyond the header: the union of what the clauses of
/// its probes read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcPlan {
    /// The current task's snapshot (curpsinfo, curlwpsinfo, ppid, uid, gid).
    pub cur: bool,
    /// The other task's snapshot (Fork, Signal: a psinfo or lwpsinfo argument).
    pub other: bool,
    /// The siginfo (Signal, Deliver).
    pub siginfo: bool,
    /// What tells a fault apart (Signal): the receiver's id and si_code.
    pub faults: bool,
    /// The process ids of the current process's ancestors (progenyof).
    pub ancestors: bool,
    /// Bytes for the exec path (ExecEnter only); 0 = none.
    pub string_max: u32,
}

impl ProcPlan {
    pub fn merge(&mut self, o: &ProcPlan) {
        self.cur |= o.cur;
        self.other |= o.other;
        self.siginfo |= o.siginfo;
        self.faults |= o.faults;
        self.ancestors |= o.ancestors;
        self.string_max = self.string_max.max(o.string_max);
    }
}

// The header.
pub const OFF_COOKIE: usize = 0;
pub const OFF_PID_TGID: usize = 8;
pub const OFF_KTIME: usize = 16;
pub const OFF_CPU: usize = 24;
pub const OFF_FLAGS: usize = 28;
pub const OFF_COMM: usize = 32;
pub const OFF_A: usize = 48;
pub const NUM_A: usize = 6;
pub const HEADER: usize = OFF_A + NUM_A * 8;

// A task snapshot: raw task data, translated in user space.
pub const SNAP_TASK: usize = 0;
pub const SNAP_TID: usize = 8; // tid, then tgid
pub const SNAP_PPID: usize = 16;
pub const SNAP_PGID: usize = 20;
pub const SNAP_SID: usize = 24;
pub const SNAP_NLWP: usize = 28;
pub const SNAP_CRED: usize = 32; // uid gid suid sgid euid egid
pub const SNAP_START: usize = 56;
pub const SNAP_FNAME: usize = 64;
pub const SNAP_STATE: usize = 80;
pub const SNAP_EXIT_STATE: usize = 84;
pub const SNAP_PRIO: usize = 88; // prio, then static_prio
pub const SNAP_POLICY: usize = 96;
pub const SNAP_CPU: usize = 100;
pub const SNAP_ON_CPU: usize = 104;
// 108..112: unused
pub const SNAP_TTY: usize = 112;
pub const SNAP_TTY_INDEX: usize = 120;
pub const SNAP_TTY_MAJOR: usize = 124; // major, then minor_start
pub const SNAP_ARGS: usize = 132; // psargs bytes read (0: none)
pub const SNAP_ARG_START: usize = 136; // arg_start, then arg_end
pub const SNAP_START_STACK: usize = 152; // mm->start_stack, where argc is
pub const SNAP_ARGC: usize = 160; // the u64 there (0 when unreadable)
pub const SNAP_PSARGS: usize = 168;
/// DTrace's PRARGSZ: pr_psargs holds this many bytes, NUL included.
pub const PSARGS_SIZE: usize = 80;
pub const SNAP_SIZE: usize = SNAP_PSARGS + PSARGS_SIZE;

pub const SIGINFO_SIZE: usize = 48;
pub const ANCESTORS: usize = 16;

/// Offsets of a hook's record under a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcLayout {
    pub hook: Hook,
    /// a4 and a5 of Signal records are filled.
    pub faults: bool,
    pub cur: Option<usize>,
    pub other: Option<usize>,
    pub siginfo: Option<usize>,
    /// (offset of the length word, max bytes)
    pub string: Option<(usize, u32)>,
    pub ancestors: Option<usize>,
    pub size: usize,
}

impl ProcLayout {
    pub fn new(hook: Hook, plan: &ProcPlan) -> ProcLayout {
        let mut off = HEADER;
        let mut take = |on: bool, size: usize| {
            on.then(|| {
                let at = off;
                off += size;
                at
            })
        };
        let cur = take(plan.cur, SNAP_SIZE);
        let other = take(plan.other && hook.has_other(), SNAP_SIZE);
        let siginfo = take(plan.siginfo && matches!(hook, Hook::Signal | Hook::Deliver), SIGINFO_SIZE);
        let max = plan.string_max.clamp(1, MAX_STRING);
        let execs = matches!(hook, Hook::ExecEnter | Hook::ExecFail | Hook::ExecDone);
        let string = take(execs && plan.string_max > 0, 8 + (max as usize).div_ceil(8) * 8).map(|o| (o, max));
        let ancestors = take(plan.ancestors, ANCESTORS * 4);
        ProcLayout {
            hook,
            faults: plan.faults && hook == Hook::Signal,
            cur,
            other,
            siginfo,
            string,
            ancestors,
            size: off,
        }
    }
}

/// A task as a snapshot recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskSnap {
    pub task: u64,
    pub tid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    pub nlwp: u32,
    pub uid: u32,
    pub gid: u32,
    pub euid: u32,
    pub egid: u32,
    /// ns since boot (CLOCK_BOOTTIME)
    pub start_boottime: u64,
    /// The process's name (its leader's comm).
    pub fname: [u8; 16],
    pub state: u32,
    pub exit_state: u32,
    pub prio: i32,
    pub static_prio: i32,
    pub policy: u32,
    pub cpu: u32,
    pub on_cpu: u32,
    /// The controlling tty (0: none), its index, its driver's major and first minor.
    pub tty: u64,
    pub tty_index: u32,
    pub tty_major: u32,
    pub tty_minor_start: u32,
    pub arg_start: u64,
    pub arg_end: u64,
    /// Where argc lies at the bottom of the initial stack, and its value when it could
    /// be read (with psargs).
    pub start_stack: u64,
    pub argc: Option<u64>,
    /// The first bytes of the argument strings, when they could be read.
    pub psargs: Option<Vec<u8>>,
}

/// One proc record, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcFiring {
    pub hook: Hook,
    pub pid: u32,
    pub tid: u32,
    pub ktime: u64,
    pub cpu: u32,
    pub comm: [u8; 16],
    pub a: [u64; NUM_A],
    pub cur: Option<TaskSnap>,
    pub other: Option<TaskSnap>,
    pub siginfo: Option<[u8; SIGINFO_SIZE]>,
    /// The exec path; `Err(errno)` where it could not be read.
    pub string: Option<Result<Vec<u8>, i32>>,
    pub ancestors: Option<[u32; ANCESTORS]>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProcRecordError {
    #[error("not a proc record")]
    NotProc,
    #[error("proc record of {got} bytes, expected {want}")]
    Size { got: usize, want: usize },
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// The hook of a record, when it is a proc record.
pub fn hook_of(rec: &[u8]) -> Option<Hook> {
    let cookie = u64::from_ne_bytes(rec.get(..8)?.try_into().ok()?);
    if cookie & PROC_COOKIE == 0 {
        return None;
    }
    Hook::from_u8((cookie & 0xff) as u8)
}

/// The task snapshot at `base` of a record (a proc record's, or a pid record's).
pub fn snapshot(b: &[u8], base: usize) -> TaskSnap {
    let at = |o: usize| u32_at(b, base + o);
    let args = at(SNAP_ARGS) as usize;
    TaskSnap {
        task: u64_at(b, base + SNAP_TASK),
        tid: at(SNAP_TID),
        tgid: at(SNAP_TID + 4),
        ppid: at(SNAP_PPID),
        pgid: at(SNAP_PGID),
        sid: at(SNAP_SID),
        nlwp: at(SNAP_NLWP),
        uid: at(SNAP_CRED),
        gid: at(SNAP_CRED + 4),
        euid: at(SNAP_CRED + 16),
        egid: at(SNAP_CRED + 20),
        start_boottime: u64_at(b, base + SNAP_START),
        fname: b[base + SNAP_FNAME..base + SNAP_FNAME + 16].try_into().expect("16 bytes"),
        state: at(SNAP_STATE),
        exit_state: at(SNAP_EXIT_STATE),
        prio: at(SNAP_PRIO) as i32,
        static_prio: at(SNAP_PRIO + 4) as i32,
        policy: at(SNAP_POLICY),
        cpu: at(SNAP_CPU),
        on_cpu: at(SNAP_ON_CPU),
        tty: u64_at(b, base + SNAP_TTY),
        tty_index: at(SNAP_TTY_INDEX),
        tty_major: at(SNAP_TTY_MAJOR),
        tty_minor_start: at(SNAP_TTY_MAJOR + 4),
        arg_start: u64_at(b, base + SNAP_ARG_START),
        arg_end: u64_at(b, base + SNAP_ARG_START + 8),
        start_stack: u64_at(b, base + SNAP_START_STACK),
        argc: (args > 0).then(|| u64_at(b, base + SNAP_ARGC)),
        psargs: (args > 0 && args <= PSARGS_SIZE).then(|| b[base + SNAP_PSARGS..base + SNAP_PSARGS + args].to_vec()),
    }
}

impl ProcLayout {
    pub fn parse(&self, b: &[u8]) -> Result<ProcFiring, ProcRecordError> {
        if b.len() != self.size {
            return Err(ProcRecordError::Size { got: b.len(), want: self.size });
        }
        if hook_of(b) != Some(self.hook) {
            return Err(ProcRecordError::NotProc);
        }
        let pid_tgid = u64_at(b, OFF_PID_TGID);
        let mut a = [0u64; NUM_A];
        for (i, v) in a.iter_mut().enumerate() {
            *v = u64_at(b, OFF_A + 8 * i);
        }
        let string = self.string.map(|(off, max)| {
            let n = u32_at(b, off) as i32;
            if n < 0 {
                // Saturating: i32::MIN is no errno, but a record may say it.
                Err(n.saturating_neg())
            } else {
                let n = (n as usize).min(max as usize);
                let bytes = &b[off + 8..off + 8 + n];
                Ok(bytes.iter().position(|&c| c == 0).map_or(bytes, |z| &bytes[..z]).to_vec())
            }
        });
        Ok(ProcFiring {
            hook: self.hook,
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            ktime: u64_at(b, OFF_KTIME),
            cpu: u32_at(b, OFF_CPU),
            comm: b[OFF_COMM..OFF_COMM + 16].try_into().expect("16 bytes"),
            a,
            cur: self.cur.map(|o| snapshot(b, o)),
            other: self.other.map(|o| snapshot(b, o)),
            siginfo: self.siginfo.map(|o| b[o..o + SIGINFO_SIZE].try_into().expect("siginfo bytes")),
            string,
            ancestors: self.ancestors.map(|o| {
                let mut out = [0u32; ANCESTORS];
                for (i, v) in out.iter_mut().enumerate() {
                    *v = u32_at(b, o + 4 * i);
                }
                out
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_hold_what_the_plan_asks() {
        let none = ProcLayout::new(Hook::Signal, &ProcPlan::default());
        assert_eq!(none.size, HEADER);
        let all = ProcPlan { cur: true, other: true, siginfo: true, faults: true, ancestors: true, string_max: 256 };
        let sig = ProcLayout::new(Hook::Signal, &all);
        assert_eq!(sig.cur, Some(HEADER));
        assert_eq!(sig.other, Some(HEADER + SNAP_SIZE));
        assert_eq!(sig.siginfo, Some(HEADER + 2 * SNAP_SIZE));
        assert_eq!(sig.string, None, "only exec has a path");
        assert_eq!(sig.size, HEADER + 2 * SNAP_SIZE + SIGINFO_SIZE + 4 * ANCESTORS);
        let exec = ProcLayout::new(Hook::ExecEnter, &all);
        assert_eq!(exec.other, None);
        assert_eq!(exec.string, Some((HEADER + SNAP_SIZE, 256)));
        assert!(exec.size.is_multiple_of(8));
    }

    #[test]
    fn records_parse_back() {
        let plan = ProcPlan { other: true, ..ProcPlan::default() };
        let l = ProcLayout::new(Hook::Fork, &plan);
        let mut b = vec![0u8; l.size];
        b[..8].copy_from_slice(&(PROC_COOKIE | Hook::Fork as u64).to_ne_bytes());
        b[8..16].copy_from_slice(&(42u64 << 32 | 43).to_ne_bytes());
        b[32..36].copy_from_slice(b"sh\0\0");
        let base = l.other.unwrap();
        b[base + SNAP_TID..base + SNAP_TID + 8].copy_from_slice(&(50u64 << 32 | 50).to_ne_bytes());
        b[base + SNAP_ARGS..base + SNAP_ARGS + 4].copy_from_slice(&5u32.to_ne_bytes());
        b[base + SNAP_PSARGS..base + SNAP_PSARGS + 5].copy_from_slice(b"a\0b\0c");
        assert_eq!(hook_of(&b), Some(Hook::Fork));
        let f = l.parse(&b).unwrap();
        assert_eq!((f.pid, f.tid), (42, 43));
        assert_eq!(&f.comm[..3], b"sh\0");
        let o = f.other.unwrap();
        assert_eq!((o.tid, o.tgid), (50, 50));
        assert_eq!(o.psargs.as_deref(), Some(&b"a\0b\0c"[..]));
        assert!(l.parse(&b[..l.size - 8]).is_err());
        assert_eq!(hook_of(&[0u8; 8]), None, "a uprobe record's cookie");
    }

    #[test]
    fn string_results() {
        let plan = ProcPlan { string_max: 8, ..ProcPlan::default() };
        let l = ProcLayout::new(Hook::ExecEnter, &plan);
        let (off, _) = l.string.unwrap();
        let mut b = vec![0u8; l.size];
        b[..8].copy_from_slice(&(PROC_COOKIE | Hook::ExecEnter as u64).to_ne_bytes());
        b[off..off + 4].copy_from_slice(&(-2i32).to_ne_bytes());
        assert_eq!(l.parse(&b).unwrap().string, Some(Err(2)));
        // Found by fuzzing: a result of i32::MIN overflowed negating it.
        b[off..off + 4].copy_from_slice(&i32::MIN.to_ne_bytes());
        assert_eq!(l.parse(&b).unwrap().string, Some(Err(i32::MAX)));
        // A length past the capture is cut at it.
        b[off..off + 4].copy_from_slice(&1000i32.to_ne_bytes());
        b[off + 8..off + 16].copy_from_slice(b"/bin/shX");
        assert_eq!(l.parse(&b).unwrap().string, Some(Ok(b"/bin/shX".to_vec())));
    }
}
