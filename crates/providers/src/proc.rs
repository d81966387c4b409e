//! The proc provider: its probes and their argument types, the kernel hook behind each,
//! which probes one hook's record fires, and the context those firings run in, which
//! translates the recorded task data into `psinfo_t`, `lwpsinfo_t` and `siginfo_t` as
//! DTrace's translators do. The structs live at addresses of their own: `curpsinfo`,
//! `args[1]` and the like point there, and reading them reads the translation.

use std::cell::RefCell;
use std::collections::HashMap;

use udtrace_lang::capture::CapturePlan;
use udtrace_lang::ir::Builtin;
use udtrace_lang::proc_types::{self, ArgType};
use udtrace_lang::types::TypeTable;
use udtrace_record::proc::{Hook, ProcFiring, ProcPlan, TaskSnap, PSARGS_SIZE, SIGINFO_SIZE};
use udtrace_runtime::{Context, Value};

/// One probe of the provider: its name, the kernel function shown as its function, the
/// hook that fires it and its arguments.
pub struct ProcProbe {
    pub name: &'static str,
    pub function: &'static str,
    pub hook: Hook,
    pub args: &'static [ArgType],
}

use ArgType::{Int, Ptr};

const LWP_PS_SIG: &[ArgType] = &[Ptr("lwpsinfo_t"), Ptr("psinfo_t"), Int("int")];

pub const MODULE: &str = "vmlinux";

/// Every probe, as DTrace's guide lists them.
pub const PROBES: &[ProcProbe] = &[
    ProcProbe { name: "create", function: "kernel_clone", hook: Hook::Fork, args: &[Ptr("psinfo_t")] },
    ProcProbe { name: "exec", function: "do_execveat_common", hook: Hook::ExecEnter, args: &[ArgType::String] },
    ProcProbe { name: "exec-failure", function: "do_execveat_common", hook: Hook::ExecFail, args: &[Int("int")] },
    ProcProbe { name: "exec-success", function: "do_execveat_common", hook: Hook::ExecDone, args: &[] },
    ProcProbe { name: "exit", function: "do_exit", hook: Hook::Exit, args: &[Int("int")] },
    ProcProbe { name: "fault", function: "force_sig_fault", hook: Hook::Signal, args: &[Int("int"), Ptr("siginfo_t")] },
    ProcProbe {
        name: "lwp-create",
        function: "kernel_clone",
        hook: Hook::Fork,
        args: &[Ptr("lwpsinfo_t"), Ptr("psinfo_t")],
    },
    ProcProbe { name: "lwp-exit", function: "do_exit", hook: Hook::Exit, args: &[] },
    ProcProbe { name: "lwp-start", function: "ret_from_fork", hook: Hook::Start, args: &[] },
    ProcProbe { name: "signal-clear", function: "sys_rt_sigtimedwait", hook: Hook::Clear, args: &[Int("int")] },
    ProcProbe { name: "signal-discard", function: "send_signal_locked", hook: Hook::Signal, args: LWP_PS_SIG },
    ProcProbe {
        name: "signal-handle",
        function: "get_signal",
        hook: Hook::Deliver,
        args: &[Int("int"), Ptr("siginfo_t"), Int("uintptr_t")],
    },
    ProcProbe { name: "signal-send", function: "send_signal_locked", hook: Hook::Signal, args: LWP_PS_SIG },
    ProcProbe { name: "start", function: "ret_from_fork", hook: Hook::Start, args: &[] },
];

pub fn probe(name: &str) -> Option<&'static ProcProbe> {
    PROBES.iter().find(|p| p.name == name)
}

/// What the records of a probe's hook carry for a clause enabled on it: the data
/// behind the arguments it reads, and the current task's where it reads that.
pub fn hook_plan(probe: &ProcProbe, clause: &CapturePlan, strsize: u32) -> ProcPlan {
    let mut plan = ProcPlan {
        cur: clause.cur_task,
        ancestors: clause.ancestors,
        faults: probe.name == "fault",
        ..ProcPlan::default()
    };
    for (i, a) in probe.args.iter().enumerate() {
        if clause.args & 1 << i == 0 {
            continue;
        }
        match a {
            Ptr("siginfo_t") => plan.siginfo = true,
            Ptr(_) => plan.other = true,
            ArgType::String => plan.string_max = strsize,
            Int(_) => {}
        }
    }
    plan
}

// Signals and codes the translation needs (Linux x86-64).
const SIGILL: u64 = 4;
const SIGTRAP: u64 = 5;
const SIGBUS: u64 = 7;
const SIGFPE: u64 = 8;
const SIGSEGV: u64 = 11;
const SIGCHLD: i32 = 17;
const SIGPOLL: i32 = 29;
const SI_KERNEL: i32 = 0x80;
const SA_SIGINFO: u64 = 4;
/// TRACE_SIGNAL_IGNORED: signal_generate's result for a signal the receiver ignores.
const TRACE_SIGNAL_IGNORED: u64 = 1;
/// signal_struct.flags: the whole group is exiting, with group_exit_code.
const SIGNAL_GROUP_EXIT: u64 = 4;

/// Whether a signal the kernel generated is the report of a machine fault: one of the
/// fault signals with a positive (kernel, non-SI_KERNEL) code, sent to the faulting
/// thread itself.
fn is_fault(f: &ProcFiring) -> bool {
    let code = f.a[5] as i64;
    matches!(f.a[0], SIGILL | SIGTRAP | SIGBUS | SIGFPE | SIGSEGV)
        && code > 0
        && code < i64::from(SI_KERNEL)
        && f.a[4] as u32 == f.tid
}

/// Whether a record is a trace trap (SIGTRAP for a single step or a hardware
/// breakpoint, TRAP_BRKPT or TRAP_TRACE) the kernel sent a thread: a debugger's doing.
pub fn is_trace_trap(f: &ProcFiring) -> bool {
    f.hook == Hook::Signal && f.a[0] == SIGTRAP && matches!(f.a[5], 1 | 2) && f.a[4] as u32 == f.tid
}

/// The probes a record fires, in the order DTrace fires them.
pub fn fired(f: &ProcFiring) -> Vec<&'static str> {
    match f.hook {
        Hook::Fork => {
            let (tgid, tid) = ((f.a[0] >> 32) as u32, f.a[0] as u32);
            vec![if tgid == tid { "create" } else { "lwp-create" }]
        }
        Hook::ExecEnter => vec!["exec"],
        Hook::ExecFail => vec!["exec-failure"],
        Hook::ExecDone => vec!["exec-success"],
        Hook::Exit if f.a[0] != 0 => vec!["lwp-exit", "exit"],
        Hook::Exit => vec!["lwp-exit"],
        Hook::Start if f.pid == f.tid => vec!["start", "lwp-start"],
        Hook::Start => vec!["lwp-start"],
        // As illumos's sigtoproc(): a signal the receiver ignores is discarded instead
        // of sent.
        Hook::Signal if f.a[2] == TRACE_SIGNAL_IGNORED => vec!["signal-discard"],
        Hook::Signal if is_fault(f) => vec!["fault", "signal-send"],
        Hook::Signal => vec!["signal-send"],
        Hook::Deliver => vec!["signal-handle"],
        Hook::Clear => vec!["signal-clear"],
    }
}

/// For the outcome of an exec (its success or failure), the thread that started it.
pub fn exec_outcome_of(f: &ProcFiring) -> Option<u32> {
    match f.hook {
        Hook::ExecDone => Some(f.a[0] as u32),
        Hook::ExecFail => Some(f.tid),
        _ => None,
    }
}

/// The exit reason DTrace's `exit` probe gives: CLD_EXITED, CLD_KILLED or CLD_DUMPED,
/// from the wait status the parent will see.
fn exit_reason(f: &ProcFiring) -> i64 {
    let status = if f.a[2] & SIGNAL_GROUP_EXIT != 0 { f.a[3] } else { f.a[1] };
    match (status & 0x7f, status & 0x80) {
        (0, _) => 1,
        (_, 0) => 2,
        _ => 3,
    }
}

/// illumos's fault code for a fault signal and its code.
fn fault_code(sig: u64, code: i64) -> i64 {
    match (sig, code) {
        (SIGILL, _) => 1,                // FLTILL
        (SIGTRAP, 2) => 4,               // TRAP_TRACE: FLTTRACE
        (SIGTRAP, _) => 3,               // FLTBPT
        (SIGSEGV, 1) => 6,               // SEGV_MAPERR: FLTBOUNDS
        (SIGSEGV, _) | (SIGBUS, _) => 5, // FLTACCESS
        (SIGFPE, 1) => 8,                // FPE_INTDIV: FLTIZDIV
        (SIGFPE, 2) => 7,                // FPE_INTOVF: FLTIOVF
        _ => 9,                          // FLTFPE
    }
}

/// The addresses of the translated structs of a firing.
const IMAGES: u64 = 0xffff_ff7f_0000_0000;
const CUR_PSINFO: u64 = IMAGES;
const CUR_LWPSINFO: u64 = IMAGES + 0x1000;
const ARG_PSINFO: u64 = IMAGES + 0x2000;
const ARG_LWPSINFO: u64 = IMAGES + 0x3000;
const SIGINFO: u64 = IMAGES + 0x4000;
const PATH: u64 = IMAGES + 0x5000;

/// Clock offsets that turn the kernel's times into wall-clock times.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clocks {
    /// CLOCK_REALTIME − CLOCK_MONOTONIC (ktime), ns.
    pub wall: i64,
    /// CLOCK_REALTIME − CLOCK_BOOTTIME (task start times), ns.
    pub boot: i64,
}

/// A struct image being filled, member by member, at the offsets the D type has.
struct Image<'t> {
    types: &'t TypeTable,
    record: &'static str,
    bytes: Vec<u8>,
}

impl<'t> Image<'t> {
    fn new(types: &'t TypeTable, record: &'static str) -> Image<'t> {
        let size = proc_types::size_of(types, record).unwrap_or(0) as usize;
        Image { types, record, bytes: vec![0; size] }
    }
    fn put(&mut self, member: &str, bytes: &[u8]) {
        if let Some(off) = proc_types::offset_of(self.types, self.record, member) {
            let off = off as usize;
            if let Some(dst) = self.bytes.get_mut(off..off + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
    }
    fn u32(&mut self, member: &str, v: u32) {
        self.put(member, &v.to_ne_bytes());
    }
    fn u64(&mut self, member: &str, v: u64) {
        self.put(member, &v.to_ne_bytes());
    }
    /// A `timestruc_t` member.
    fn time(&mut self, member: &str, ns: i64) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&ns.div_euclid(1_000_000_000).to_ne_bytes());
        b[8..].copy_from_slice(&ns.rem_euclid(1_000_000_000).to_ne_bytes());
        self.put(member, &b);
    }
    /// A char array member: `s` cut to leave room for the NUL.
    fn chars(&mut self, member: &str, s: &[u8], size: usize) {
        let n = s.len().min(size - 1);
        let mut b = vec![0u8; size];
        b[..n].copy_from_slice(&s[..n]);
        self.put(member, &b);
    }
}

fn cstr(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// Argument strings as `pr_psargs` shows them: joined by spaces, at most PRARGSZ − 1
/// bytes.
fn join_args(raw: &[u8]) -> Vec<u8> {
    let mut end = raw.len();
    while end > 0 && raw[end - 1] == 0 {
        end -= 1;
    }
    raw[..end].iter().take(PSARGS_SIZE - 1).map(|&c| if c == 0 { b' ' } else { c }).collect()
}

/// Linux's dev_t encoding (glibc's makedev).
fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (u64::from(major), u64::from(minor));
    (ma & 0xffff_f000) << 32 | (ma & 0xfff) << 8 | (mi & 0xffff_ff00) << 12 | (mi & 0xff)
}

/// The argument strings of a snapshot: as recorded, or from /proc while the process
/// lives (the kernel keeps no copy; a task other than the current one's memory cannot
/// be read where it fires). `whole` tells whether they are complete.
fn args_of(t: &TaskSnap) -> Option<(Vec<u8>, bool)> {
    if let Some(p) = &t.psargs {
        let whole = t.arg_end.saturating_sub(t.arg_start) as usize <= p.len();
        return Some((p.clone(), whole));
    }
    let raw = std::fs::read(format!("/proc/{}/cmdline", t.tgid)).ok()?;
    (!raw.is_empty()).then_some((raw, true))
}

fn psinfo(types: &TypeTable, t: &TaskSnap, clocks: Clocks) -> Vec<u8> {
    let mut i = Image::new(types, "psinfo_t");
    i.u32("pr_nlwp", t.nlwp);
    i.u32("pr_pid", t.tgid);
    i.u32("pr_ppid", t.ppid);
    i.u32("pr_pgid", t.pgid);
    i.u32("pr_sid", t.sid);
    i.u32("pr_uid", t.uid);
    i.u32("pr_euid", t.euid);
    i.u32("pr_gid", t.gid);
    i.u32("pr_egid", t.egid);
    i.u64("pr_addr", t.task);
    i.u64(
        "pr_ttydev",
        if t.tty == 0 { u64::MAX } else { makedev(t.tty_major, t.tty_minor_start.wrapping_add(t.tty_index)) },
    );
    i.time("pr_start", t.start_boottime as i64 + clocks.boot);
    let fname = cstr(&t.fname).to_vec();
    i.chars("pr_fname", &fname, proc_types::PRFNSZ as usize);
    let (psargs, counted) = match args_of(t) {
        Some((raw, whole)) => (join_args(&raw), whole.then(|| cstr_count(&raw))),
        None => (fname, None),
    };
    i.chars("pr_psargs", &psargs, proc_types::PRARGSZ as usize);
    // argc, argv and envp as the initial stack lays them out; else what the strings say.
    match t.argc.filter(|&n| n < 1 << 20) {
        Some(argc) => {
            i.u32("pr_argc", argc as u32);
            i.u64("pr_argv", t.start_stack + 8);
            i.u64("pr_envp", t.start_stack + 8 * (argc + 2));
        }
        None => i.u32("pr_argc", counted.unwrap_or(0)),
    }
    i.put("pr_dmodel", &[2]); // PR_MODEL_LP64
    i.bytes
}

/// How many NUL-terminated strings `raw` holds (a last one may lack its NUL).
fn cstr_count(raw: &[u8]) -> u32 {
    let nuls = raw.iter().filter(|&&c| c == 0).count() as u32;
    nuls + u32::from(raw.last().is_some_and(|&c| c != 0))
}

// Linux task states (include/linux/sched.h), as lwpsinfo_t's pr_state and pr_sname.
const TASK_INTERRUPTIBLE: u32 = 1;
const TASK_UNINTERRUPTIBLE: u32 = 2;
const TASK_STOPPED: u32 = 4;
const TASK_TRACED: u32 = 8;
const EXIT_DEAD: u32 = 16;
const EXIT_ZOMBIE: u32 = 32;
const TASK_NEW: u32 = 0x800;

fn state(t: &TaskSnap) -> (u8, u8) {
    if t.exit_state & (EXIT_ZOMBIE | EXIT_DEAD) != 0 {
        (3, b'Z')
    } else if t.state & TASK_NEW != 0 {
        (5, b'I')
    } else if t.state & (TASK_STOPPED | TASK_TRACED) != 0 {
        (4, b'T')
    } else if t.state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE) != 0 {
        (1, b'S')
    } else if t.on_cpu != 0 {
        (6, b'O')
    } else {
        (2, b'R')
    }
}

/// Scheduling classes by policy, named as DTrace names them where it has the class.
fn class_name(policy: u32) -> &'static [u8] {
    match policy {
        0 | 3 => b"TS",
        1 | 2 => b"RT",
        5 => b"IDLE",
        6 => b"DL",
        _ => b"EXT",
    }
}

fn lwpsinfo(types: &TypeTable, t: &TaskSnap, name: &[u8], clocks: Clocks) -> Vec<u8> {
    let mut i = Image::new(types, "lwpsinfo_t");
    i.u32("pr_lwpid", t.tid);
    i.u64("pr_addr", t.task);
    let (st, sname) = state(t);
    i.put("pr_state", &[st]);
    i.put("pr_sname", &[sname]);
    // nice + 20, as illumos's NZERO-based pr_nice.
    i.put("pr_nice", &[(t.static_prio - 100).clamp(0, 39) as u8]);
    // High values are high priority in DTrace; Linux counts the other way (0..139).
    i.u32("pr_pri", (139 - t.prio).max(0) as u32);
    i.time("pr_start", t.start_boottime as i64 + clocks.boot);
    i.chars("pr_clname", class_name(t.policy), proc_types::PRCLSZ as usize);
    i.chars("pr_name", cstr(name), proc_types::PRFNSZ as usize);
    i.u32("pr_onpro", t.cpu);
    i.u32("pr_bindpro", u32::MAX);
    i.u32("pr_bindpset", u32::MAX);
    i.bytes
}

fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// siginfo_t from the kernel's (UAPI layout: signo, errno, code, then a union whose
/// member the signal and code select).
fn siginfo(types: &TypeTable, f: &ProcFiring, raw: &[u8; SIGINFO_SIZE]) -> Vec<u8> {
    let mut i = Image::new(types, "siginfo_t");
    let (signo, errno, code) = (i32_at(raw, 0), i32_at(raw, 4), i32_at(raw, 8));
    if f.hook == Hook::Signal && f.a[3] <= 1 {
        // No siginfo: 0 is a signal from user space (SI_USER), 1 one from the kernel.
        i.u32("si_signo", f.a[0] as u32);
        if f.a[3] == 0 {
            i.u32("si_pid", f.pid);
            i.u32("si_uid", f.cur.as_ref().map_or(0, |c| c.uid));
        } else {
            i.u32("si_code", SI_KERNEL as u32);
        }
        return i.bytes;
    }
    i.u32("si_signo", signo as u32);
    i.u32("si_errno", errno as u32);
    i.u32("si_code", code as u32);
    let word = |off: usize| u64::from_ne_bytes(raw[off..off + 8].try_into().expect("8 bytes"));
    if code <= 0 {
        i.u32("si_pid", i32_at(raw, 16) as u32);
        i.u32("si_uid", i32_at(raw, 20) as u32);
        i.u64("si_value", word(24));
    } else if signo == SIGCHLD {
        i.u32("si_pid", i32_at(raw, 16) as u32);
        i.u32("si_uid", i32_at(raw, 20) as u32);
        i.u32("si_status", i32_at(raw, 24) as u32);
    } else if matches!(signo as u64, SIGILL | SIGTRAP | SIGBUS | SIGFPE | SIGSEGV) && code != SI_KERNEL {
        i.u64("si_addr", word(16));
    } else if signo == SIGPOLL {
        i.u64("si_band", word(16));
        i.u32("si_fd", i32_at(raw, 24) as u32);
    }
    i.bytes
}

/// A task as /proc shows it now: for `curpsinfo` in probes whose records carry no
/// task data (the pid provider's). The thread is taken as running on `cpu`, as it was
/// at its firing.
pub fn snapshot_from_proc(pid: u32, tid: u32, cpu: u32) -> Option<TaskSnap> {
    if pid == 0 {
        // /proc has no pid 0, but a profile probe samples the idle task: DTrace's
        // `sched`, whose psinfo exists (DTraceToolkit's pridist.d keys on it).
        return Some(idle_snapshot(cpu));
    }
    let (_, f) = udtrace_process::procfs::task_stat(pid as i32, tid as i32).ok()?;
    let (comm, leader) = udtrace_process::procfs::task_stat(pid as i32, pid as i32).ok()?;
    let num = |v: &[String], i: usize| v.get(i).and_then(|x| x.parse::<i64>().ok()).unwrap_or(0);
    let mut fname = [0u8; 16];
    let n = comm.len().min(15);
    fname[..n].copy_from_slice(&comm.as_bytes()[..n]);
    let uids = udtrace_process::procfs::status_numbers(pid as i32, "Uid:").unwrap_or_default();
    let gids = udtrace_process::procfs::status_numbers(pid as i32, "Gid:").unwrap_or_default();
    let id = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0) as u32;
    // Fields after comm: 0 state, 1 ppid, 2 pgrp, 3 session, 4 tty_nr, 15 priority,
    // 16 nice, 17 num_threads, 19 starttime (ticks), 25 startstack, 36 processor,
    // 38 policy, 45 arg_start, 46 arg_end.
    let tty_nr = num(&f, 4) as u64;
    let start_stack = num(&leader, 25) as u64;
    // The initial stack starts with argc, then argv[] (what pr_argv and pr_envp point to).
    let argc = (start_stack != 0)
        .then(|| udtrace_process::procfs::read_memory(pid as i32, start_stack, 8).ok())
        .flatten()
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_ne_bytes);
    // USER_HZ, in which /proc counts start times: 100 on every Linux architecture.
    let hz = 100;
    Some(TaskSnap {
        task: 0,
        tid,
        tgid: pid,
        ppid: num(&f, 1) as u32,
        pgid: num(&f, 2) as u32,
        sid: num(&f, 3) as u32,
        nlwp: num(&f, 17) as u32,
        uid: id(&uids, 0),
        euid: id(&uids, 1),
        gid: id(&gids, 0),
        egid: id(&gids, 1),
        start_boottime: (num(&leader, 19) as u64).saturating_mul(1_000_000_000 / hz),
        fname,
        state: 0,
        exit_state: 0,
        prio: num(&f, 15) as i32 + 100,
        static_prio: num(&f, 16) as i32 + 120,
        policy: num(&f, 38) as u32,
        cpu,
        on_cpu: 1,
        tty: u64::from(tty_nr != 0),
        tty_index: 0,
        tty_major: ((tty_nr >> 8) & 0xfff) as u32,
        tty_minor_start: ((tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00)) as u32,
        arg_start: num(&leader, 45) as u64,
        arg_end: num(&leader, 46) as u64,
        start_stack,
        argc,
        psargs: None,
    })
}

/// The idle task of `cpu` (pid 0, `swapper/N`): what the kernel's `init_task` holds,
/// the nice-0 priority, no parent, no arguments.
fn idle_snapshot(cpu: u32) -> TaskSnap {
    let mut fname = [0u8; 16];
    let name = format!("swapper/{cpu}");
    let n = name.len().min(15);
    fname[..n].copy_from_slice(&name.as_bytes()[..n]);
    TaskSnap { nlwp: 1, fname, prio: 120, static_prio: 120, cpu, on_cpu: 1, ..TaskSnap::default() }
}

/// [`snapshot_from_proc`] of process `pid`'s main thread with its arguments, kept for
/// when the process has gone.
pub fn snapshot_with_args(pid: u32) -> Option<TaskSnap> {
    let mut s = snapshot_from_proc(pid, pid, 0)?;
    s.psargs = std::fs::read(format!("/proc/{pid}/cmdline")).ok().filter(|a| !a.is_empty());
    Some(s)
}

/// `curpsinfo`/`curlwpsinfo` of a pid probe firing, translated from /proc when read:
/// the addresses the built-ins give, and the struct bytes behind them.
pub struct CurrentFromProc<'a> {
    /// The task as the kernel had it at the firing, where the backend took it (BPF):
    /// what is given then, its arguments from /proc or `cached` only where its read of
    /// them failed.
    pub at_firing: Option<&'a TaskSnap>,
    /// The argument strings at the firing, where the backend read them.
    pub psargs: Option<&'a [u8]>,
    /// What the process told of itself at the firing.
    pub own: Option<&'a udtrace_record::pid::OwnTask>,
    /// The process as udtrace last read it (when it was held at its start, exec or
    /// grab, or first seen): what is given once /proc has no more of it.
    pub cached: Option<&'a TaskSnap>,
    /// `cached` was read at the process's last hold (udtrace follows it), not when
    /// first seen: it is what the process ran at the firing.
    pub held: bool,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub comm: &'a str,
    pub types: &'a TypeTable,
    pub clocks: Clocks,
}

impl<'a> CurrentFromProc<'a> {
    /// A thread known only by its ids and name: read from /proc when asked.
    pub fn from_proc(pid: u32, tid: u32, cpu: u32, comm: &'a str, types: &'a TypeTable, clocks: Clocks) -> Self {
        CurrentFromProc {
            at_firing: None,
            psargs: None,
            own: None,
            cached: None,
            held: false,
            pid,
            tid,
            cpu,
            comm,
            types,
            clocks,
        }
    }

    pub fn builtin(b: Builtin) -> Option<Value> {
        match b {
            Builtin::Curpsinfo => Some(Value::int(CUR_PSINFO as i64)),
            Builtin::Curlwpsinfo => Some(Value::int(CUR_LWPSINFO as i64)),
            _ => None,
        }
    }

    pub fn covers(addr: u64) -> bool {
        matches!(addr & !0xfff, CUR_PSINFO | CUR_LWPSINFO)
    }

    /// The bytes at `addr` when it lies in one of the two structs.
    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let base = addr & !0xfff;
        let live = || snapshot_from_proc(self.pid, self.tid, self.cpu);
        let cached = self.cached.map(|c| TaskSnap { tid: self.tid, cpu: self.cpu, ..c.clone() });
        let mut snap = match (self.at_firing, cached) {
            (Some(s), _) => s.clone(),
            (None, cached) => match (live(), cached) {
                // Read while the process was held before this firing (a followed process is
                // read again at each exec): its image and arguments then. Live, it may have
                // exec'd since, or exited.
                (Some(l), Some(c)) if self.held => TaskSnap { nlwp: l.nlwp, ..c },
                (Some(l), _) => l,
                (None, c) => c?,
            },
        };
        if let Some(a) = self.psargs {
            snap.psargs = Some(a.to_vec());
        }
        if let Some(o) = self.own {
            (snap.uid, snap.gid, snap.euid, snap.egid) = (o.uid, o.gid, o.euid, o.egid);
            (snap.ppid, snap.pgid, snap.sid) = (o.ppid, o.pgid, o.sid);
        }
        // A zombie still has its stat, but no arguments any more.
        if snap.psargs.is_none() {
            let live = std::fs::read(format!("/proc/{}/cmdline", self.pid)).ok().filter(|a| !a.is_empty());
            snap.psargs = live.or_else(|| self.cached.and_then(|c| c.psargs.clone()));
        }
        let img = match base {
            CUR_PSINFO => psinfo(self.types, &snap, self.clocks),
            CUR_LWPSINFO => lwpsinfo(self.types, &snap, self.comm.as_bytes(), self.clocks),
            _ => return None,
        };
        // DTrace translates the struct into scratch memory, which a cast may read past
        // (((char *)curlwpsinfo->pr_name)[32]) without a fault: the rest of the page
        // reads as zeros here.
        let mut img = img;
        img.resize(img.len().max(0x1000), 0);
        let off = (addr - base) as usize;
        img.get(off..off + len).map(<[u8]>::to_vec)
    }
}

/// The context of one proc probe firing.
pub struct ProcCtx<'a> {
    pub f: &'a ProcFiring,
    /// The probe firing (its arguments depend on it).
    pub probe: &'static str,
    pub types: &'a TypeTable,
    pub clocks: Clocks,
    /// Translations made so far, by address.
    images: RefCell<HashMap<u64, Vec<u8>>>,
}

impl<'a> ProcCtx<'a> {
    pub fn new(f: &'a ProcFiring, probe: &'static str, types: &'a TypeTable, clocks: Clocks) -> ProcCtx<'a> {
        ProcCtx { f, probe, types, clocks, images: RefCell::new(HashMap::new()) }
    }

    fn arg(&self, n: u8) -> u64 {
        let f = self.f;
        let sig = f.a[0];
        let v: Option<u64> = match (self.probe, n) {
            ("create", 0) => Some(ARG_PSINFO),
            ("exec", 0) => Some(PATH),
            ("exec-failure", 0) => Some((f.a[0] as i64).wrapping_neg() as u64),
            ("exit", 0) => Some(exit_reason(f) as u64),
            ("fault", 0) => Some(fault_code(sig, f.a[5] as i64) as u64),
            ("fault", 1) => Some(SIGINFO),
            ("lwp-create", 0) => Some(ARG_LWPSINFO),
            ("lwp-create", 1) => Some(ARG_PSINFO),
            ("signal-send" | "signal-discard", 0) => Some(ARG_LWPSINFO),
            ("signal-send" | "signal-discard", 1) => Some(ARG_PSINFO),
            ("signal-send" | "signal-discard", 2) => Some(sig),
            ("signal-handle", 0) => Some(sig),
            // The siginfo only for handlers that asked for it, as DTrace gives it.
            ("signal-handle", 1) => Some(if f.a[2] & SA_SIGINFO != 0 { SIGINFO } else { 0 }),
            ("signal-handle", 2) => Some(f.a[1]),
            ("signal-clear", 0) => Some(sig),
            _ => None,
        };
        v.unwrap_or(0)
    }

    /// The translated struct an address lies in, and the offset there.
    fn at(&self, addr: u64) -> Option<(Vec<u8>, usize)> {
        let base = addr & !0xfff;
        if !(IMAGES..=PATH).contains(&base) {
            return None;
        }
        Some((self.image(base)?, (addr - base) as usize))
    }

    /// The bytes of the struct at `base`, translated on first use.
    fn image(&self, base: u64) -> Option<Vec<u8>> {
        if let Some(b) = self.images.borrow().get(&base) {
            return Some(b.clone());
        }
        let f = self.f;
        let b = match base {
            CUR_PSINFO => psinfo(self.types, f.cur.as_ref()?, self.clocks),
            CUR_LWPSINFO => lwpsinfo(self.types, f.cur.as_ref()?, &f.comm, self.clocks),
            ARG_PSINFO => psinfo(self.types, f.other.as_ref()?, self.clocks),
            ARG_LWPSINFO => {
                let o = f.other.as_ref()?;
                lwpsinfo(self.types, o, &o.fname, self.clocks)
            }
            SIGINFO => siginfo(self.types, f, f.siginfo.as_ref()?),
            PATH => {
                let mut s = f.string.as_ref()?.as_ref().ok()?.clone();
                s.push(0);
                s
            }
            _ => return None,
        };
        self.images.borrow_mut().insert(base, b.clone());
        Some(b)
    }
}

impl Context for ProcCtx<'_> {
    fn builtin(&self, b: Builtin) -> Option<Value> {
        let f = self.f;
        let cur = f.cur.as_ref();
        Some(match b {
            Builtin::Arg(n) => Value::int(self.arg(n) as i64),
            Builtin::Pid => Value::int(i64::from(f.pid)),
            Builtin::Tid => Value::int(i64::from(f.tid)),
            Builtin::Cpu => Value::int(i64::from(f.cpu)),
            Builtin::Timestamp | Builtin::Vtimestamp => Value::int(f.ktime as i64),
            Builtin::Walltimestamp => Value::int(f.ktime as i64 + self.clocks.wall),
            Builtin::Execname => Value::Str(cstr(&f.comm).to_vec()),
            Builtin::Ppid => Value::int(i64::from(cur?.ppid)),
            Builtin::Uid => Value::int(i64::from(cur?.uid)),
            Builtin::Gid => Value::int(i64::from(cur?.gid)),
            Builtin::Curpsinfo => Value::int(CUR_PSINFO as i64),
            Builtin::Curlwpsinfo => Value::int(CUR_LWPSINFO as i64),
            Builtin::Errno => Value::int(0),
            _ => return None,
        })
    }

    fn read_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let Some((img, off)) = self.at(addr) else {
            return crate::kernel::read(addr, len);
        };
        img.get(off..off + len).map(<[u8]>::to_vec)
    }

    fn read_string(&self, addr: u64, max: usize) -> Option<Vec<u8>> {
        let Some((img, off)) = self.at(addr) else {
            return crate::kernel::read_string(addr, max);
        };
        let s = cstr(img.get(off..)?);
        Some(s[..s.len().min(max.saturating_sub(1))].to_vec())
    }

    fn progenyof(&self, ancestor: i64) -> bool {
        if i64::from(self.f.pid) == ancestor {
            return true;
        }
        self.f.ancestors.is_some_and(|a| a.iter().any(|&p| p != 0 && i64::from(p) == ancestor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn firing(hook: Hook) -> ProcFiring {
        ProcFiring {
            hook,
            pid: 10,
            tid: 10,
            ktime: 0,
            cpu: 0,
            comm: *b"sh\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
            a: [0; 6],
            cur: None,
            other: None,
            siginfo: None,
            string: None,
            ancestors: None,
        }
    }

    /// A profile sample of the idle task (pid 0, which /proc does not list) reads a
    /// psinfo and an lwpsinfo, as DTraceToolkit's pridist.d and priclass.d do.
    #[test]
    fn the_idle_task_has_a_psinfo() {
        let mut types = TypeTable::default();
        proc_types::install(&mut types);
        let cur = CurrentFromProc::from_proc(0, 0, 1, "swapper/1", &types, Clocks::default());
        let at = |record: &str, member: &str, base: u64, len: usize| {
            let off = proc_types::offset_of(&types, record, member).unwrap();
            cur.read(base + off, len).unwrap_or_else(|| panic!("{record}.{member} unreadable"))
        };
        assert_eq!(at("psinfo_t", "pr_pid", CUR_PSINFO, 4), 0u32.to_ne_bytes());
        assert_eq!(&at("psinfo_t", "pr_fname", CUR_PSINFO, 10), b"swapper/1\0");
        assert_eq!(&at("lwpsinfo_t", "pr_clname", CUR_LWPSINFO, 3), b"TS\0");
        // Nice 0: 139 - 120.
        assert_eq!(at("lwpsinfo_t", "pr_pri", CUR_LWPSINFO, 4), 19u32.to_ne_bytes());
    }

    #[test]
    fn which_probes_fire() {
        let mut f = firing(Hook::Fork);
        f.a[0] = 11 << 32 | 11;
        assert_eq!(fired(&f), ["create"]);
        f.a[0] = 11 << 32 | 12;
        assert_eq!(fired(&f), ["lwp-create"]);
        let mut f = firing(Hook::Exit);
        assert_eq!(fired(&f), ["lwp-exit"]);
        f.a[0] = 1;
        assert_eq!(fired(&f), ["lwp-exit", "exit"]);
        let mut f = firing(Hook::Start);
        assert_eq!(fired(&f), ["start", "lwp-start"]);
        f.tid = 12;
        assert_eq!(fired(&f), ["lwp-start"]);
        let mut f = firing(Hook::Signal);
        f.a = [SIGSEGV, 0, 0, 0xffff_0000, 10 << 32 | 10, 1];
        assert_eq!(fired(&f), ["fault", "signal-send"]);
        f.a[5] = 0; // kill(2)'ed SIGSEGV: no fault
        f.a[2] = TRACE_SIGNAL_IGNORED;
        assert_eq!(fired(&f), ["signal-discard"]);
    }

    #[test]
    fn exit_reasons() {
        let mut f = firing(Hook::Exit);
        f.a = [1, 3 << 8, 0, 0, 0, 0];
        assert_eq!(exit_reason(&f), 1);
        f.a = [1, 0, SIGNAL_GROUP_EXIT, 9, 0, 0];
        assert_eq!(exit_reason(&f), 2);
        f.a = [1, 0, SIGNAL_GROUP_EXIT, 6 | 0x80, 0, 0];
        assert_eq!(exit_reason(&f), 3);
    }

    #[test]
    fn psargs_join_and_cut() {
        assert_eq!(join_args(b"ls\0-l\0a b\0"), b"ls -l a b");
        assert_eq!(join_args(&[b'x'; 80]).len(), 79);
        assert_eq!(cstr_count(b"ls\0-l\0"), 2);
    }
}
