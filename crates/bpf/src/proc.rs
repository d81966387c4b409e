//! The proc provider's programs: one per kernel hook (a raw tracepoint, or a syscall
//! tracepoint where Linux has no other), each writing one record (laid out by
//! `udtrace_record::proc`) into the shared ring buffer. Task data is read with
//! `bpf_probe_read_kernel` at offsets taken from the running kernel's BTF
//! ([`TaskOffsets`]). Pure: no I/O.

use thiserror::Error;

// Every offset of the record by name: the programs write exactly what the parser reads.
use udtrace_record::proc::*;

use crate::btf::{Btf, BtfError};
use crate::codegen::{emit_reserve, emit_submit, CodegenError, ProbeMaps};
use crate::insn::{
    alu64_imm, alu64_reg, helper, ld_map_fd, ldx, mov64_imm, mov64_reg, st, stx, AluOp, Asm, Cond, Insn, Reg, Size,
};
use crate::maps::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachPoints {
    /// A raw tracepoint.
    Raw(&'static str),
    /// Tracepoints of the `syscalls` group, and the field of their record the program
    /// reads (one program per tracepoint: the field's offset differs).
    Syscalls(&'static [&'static str], &'static str),
}

/// Where the hook is attached: raw tracepoint names, or syscall tracepoints.
pub fn attach_points(hook: Hook) -> AttachPoints {
    match hook {
        Hook::Fork => AttachPoints::Raw("sched_process_fork"),
        Hook::ExecDone => AttachPoints::Raw("sched_process_exec"),
        Hook::Exit => AttachPoints::Raw("sched_process_exit"),
        Hook::Signal => AttachPoints::Raw("signal_generate"),
        Hook::Deliver => AttachPoints::Raw("signal_deliver"),
        Hook::ExecEnter => AttachPoints::Syscalls(&["sys_enter_execve", "sys_enter_execveat"], "filename"),
        Hook::ExecFail => AttachPoints::Syscalls(&["sys_exit_execve", "sys_exit_execveat"], "ret"),
        Hook::Start => {
            AttachPoints::Syscalls(&["sys_exit_clone", "sys_exit_clone3", "sys_exit_fork", "sys_exit_vfork"], "ret")
        }
        Hook::Clear => AttachPoints::Syscalls(&["sys_exit_rt_sigtimedwait"], "ret"),
    }
}

/// Where the fields the programs read lie in the running kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOffsets {
    pid: i16, // then tgid
    real_parent: i16,
    group_leader: i16,
    comm: i16,
    flags: i16,
    mm: i16,
    signal: i16,
    real_cred: i16,
    start_boottime: i16,
    state: i16,
    exit_state: i16,
    exit_code: i16,
    prio: i16, // then static_prio
    policy: i16,
    cpu: i16,
    on_cpu: i16,
    sig_nr_threads: i16,
    sig_live: i16,
    sig_pgid: i16,
    sig_sid: i16,
    sig_flags: i16,
    sig_group_exit_code: i16,
    sig_tty: i16,
    pid_nr: i16,
    cred_uid: i16,     // through egid
    mm_arg_start: i16, // then arg_end
    mm_start_stack: i16,
    tty_index: i16,
    tty_driver: i16,
    driver_major: i16, // then minor_start
    bprm_filename: i16,
    ka_handler: i16,
    ka_flags: i16,
    siginfo_size: u32,
    /// Whether sched_process_exit passes group_dead (Linux 6.16 on).
    exit_group_dead: bool,
}

#[derive(Debug, Error)]
pub enum OffsetsError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error("the kernel's {0} is laid out differently from what udtrace reads")]
    Layout(&'static str),
}

impl TaskOffsets {
    /// Where `task_struct`'s `group_leader` and `comm` are: a process's name is its
    /// leader's `comm` (`execname` at the firing, `crate::dif::DifMaps::leader_comm`).
    pub fn leader_comm(&self) -> (i16, i16) {
        (self.group_leader, self.comm)
    }

    /// Where `task_struct`'s `real_parent` and `tgid` are (`ppid` at the firing,
    /// `crate::dif::DifMaps::parent`).
    pub fn parent_tgid(&self) -> (u32, u32) {
        (self.real_parent as u32, (self.pid + 4) as u32)
    }

    pub fn from_btf(b: &Btf) -> Result<TaskOffsets, OffsetsError> {
        let at = |s: &str, p: &str| -> Result<i16, OffsetsError> {
            let pl = b.place(s, p)?;
            i16::try_from(pl.offset).map_err(|_| OffsetsError::Layout("task data (an offset past 32 KiB)"))
        };
        let next_to = |a: i16, b: i16, size: i16, what: &'static str| {
            if b == a + size {
                Ok(())
            } else {
                Err(OffsetsError::Layout(what))
            }
        };
        let pid = at("task_struct", "pid")?;
        next_to(pid, at("task_struct", "tgid")?, 4, "task_struct (pid, tgid)")?;
        let prio = at("task_struct", "prio")?;
        next_to(prio, at("task_struct", "static_prio")?, 4, "task_struct (prio, static_prio)")?;
        let cred_uid = at("cred", "uid")?;
        for (i, f) in ["gid", "suid", "sgid", "euid", "egid"].iter().enumerate() {
            next_to(cred_uid, at("cred", f)?, 4 * (i as i16 + 1), "struct cred (ids)")?;
        }
        let arg_start = at("mm_struct", "arg_start")?;
        next_to(arg_start, at("mm_struct", "arg_end")?, 8, "mm_struct (arg_start, arg_end)")?;
        let major = at("tty_driver", "major")?;
        next_to(major, at("tty_driver", "minor_start")?, 4, "tty_driver (major, minor_start)")?;
        let pids = at("signal_struct", "pids")?;
        let pgid = b.enumerator("PIDTYPE_PGID")? as i16;
        let sid = b.enumerator("PIDTYPE_SID")? as i16;
        Ok(TaskOffsets {
            pid,
            real_parent: at("task_struct", "real_parent")?,
            group_leader: at("task_struct", "group_leader")?,
            comm: at("task_struct", "comm")?,
            flags: at("task_struct", "flags")?,
            mm: at("task_struct", "mm")?,
            signal: at("task_struct", "signal")?,
            real_cred: at("task_struct", "real_cred")?,
            start_boottime: at("task_struct", "start_boottime")?,
            state: at("task_struct", "__state")?,
            exit_state: at("task_struct", "exit_state")?,
            exit_code: at("task_struct", "exit_code")?,
            prio,
            policy: at("task_struct", "policy")?,
            cpu: at("task_struct", "thread_info.cpu")?,
            on_cpu: at("task_struct", "on_cpu")?,
            sig_nr_threads: at("signal_struct", "nr_threads")?,
            sig_live: at("signal_struct", "live")?,
            sig_pgid: pids + 8 * pgid,
            sig_sid: pids + 8 * sid,
            sig_flags: at("signal_struct", "flags")?,
            sig_group_exit_code: at("signal_struct", "group_exit_code")?,
            sig_tty: at("signal_struct", "tty")?,
            pid_nr: at("pid", "numbers[0].nr")?,
            cred_uid,
            mm_arg_start: arg_start,
            mm_start_stack: at("mm_struct", "start_stack")?,
            tty_index: at("tty_struct", "index")?,
            tty_driver: at("tty_struct", "driver")?,
            driver_major: major,
            bprm_filename: at("linux_binprm", "filename")?,
            ka_handler: at("k_sigaction", "sa.sa_handler")?,
            ka_flags: at("k_sigaction", "sa.sa_flags")?,
            siginfo_size: b.struct_size("kernel_siginfo")?.min(SIGINFO_SIZE as u32),
            exit_group_dead: b.tracepoint_arity("sched_process_exit").is_some_and(|n| n >= 2),
        })
    }
}

/// PF_KTHREAD in task_struct.flags: kernel threads have no proc life cycle of interest.
const PF_KTHREAD: i32 = 0x0020_0000;

/// Stack slots of the generated programs (offsets from the frame pointer).
const SCRATCH: i16 = -8;
const CUR_TASK: i16 = -16;
const OTHER_TASK: i16 = -24;
const SIGNAL: i16 = -32;
const TTY: i16 = -40;
const PSLEN: i16 = -48;
const KACTION: i16 = -104;
const WALK: i16 = -112;
/// a[i] is staged at A_SLOTS + 8 * i until the record exists.
const A_SLOTS: i16 = -96;

/// `*(fp + dst) = *(u64 *)(*(fp + base) + off)`: one pointer hop, faults read as 0.
fn read_ptr(a: &mut Asm, dst: i16, base: i16, off: i16) {
    a.push(ldx(Size::DW, Reg::R3, Reg::R10, base));
    a.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(off)));
    a.read_to_stack(helper::PROBE_READ_KERNEL, dst, 8);
}

/// `record[at..at + size] = *(*(fp + base) + off)` (zeros where it faults).
fn read_into(a: &mut Asm, at: usize, size: i32, base: i16, off: i16) {
    a.push(ldx(Size::DW, Reg::R3, Reg::R10, base));
    a.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(off)));
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, at as i32));
    a.push(mov64_imm(Reg::R2, size));
    a.call(helper::PROBE_READ_KERNEL);
}

/// Whose user memory a snapshot may read its psargs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UserRead {
    /// The task runs in the current address space, or a copy of it (a fork child).
    Yes,
    /// Only when the task belongs to the current process.
    IfSameProcess,
}

/// Writes the current task's snapshot to `record + base` (R8 the record), for a pid
/// probe's record. Uses the stack at `fp - 48` and above.
pub(crate) fn emit_current_snapshot(a: &mut Asm, o: &TaskOffsets, base: usize) {
    a.call(helper::GET_CURRENT_TASK);
    a.push(stx(Size::DW, Reg::R10, CUR_TASK, Reg::R0));
    emit_snapshot(a, o, CUR_TASK, base, UserRead::Yes);
}

/// Writes the snapshot of the task whose pointer is at `fp + task` to `record + base`.
fn emit_snapshot(a: &mut Asm, o: &TaskOffsets, task: i16, base: usize, user: UserRead) {
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, task));
    a.push(stx(Size::DW, Reg::R8, (base + SNAP_TASK) as i16, Reg::R1));
    read_into(a, base + SNAP_TID, 8, task, o.pid);
    read_ptr(a, SCRATCH, task, o.real_parent);
    read_into(a, base + SNAP_PPID, 4, SCRATCH, o.pid + 4);
    read_ptr(a, SIGNAL, task, o.signal);
    read_into(a, base + SNAP_NLWP, 4, SIGNAL, o.sig_nr_threads);
    read_ptr(a, SCRATCH, SIGNAL, o.sig_pgid);
    read_into(a, base + SNAP_PGID, 4, SCRATCH, o.pid_nr);
    read_ptr(a, SCRATCH, SIGNAL, o.sig_sid);
    read_into(a, base + SNAP_SID, 4, SCRATCH, o.pid_nr);
    read_ptr(a, TTY, SIGNAL, o.sig_tty);
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, TTY));
    a.push(stx(Size::DW, Reg::R8, (base + SNAP_TTY) as i16, Reg::R1));
    read_into(a, base + SNAP_TTY_INDEX, 4, TTY, o.tty_index);
    read_ptr(a, SCRATCH, TTY, o.tty_driver);
    read_into(a, base + SNAP_TTY_MAJOR, 8, SCRATCH, o.driver_major);
    read_ptr(a, SCRATCH, task, o.real_cred);
    read_into(a, base + SNAP_CRED, 24, SCRATCH, o.cred_uid);
    read_into(a, base + SNAP_START, 8, task, o.start_boottime);
    read_ptr(a, SCRATCH, task, o.group_leader);
    read_into(a, base + SNAP_FNAME, 16, SCRATCH, o.comm);
    read_into(a, base + SNAP_STATE, 4, task, o.state);
    read_into(a, base + SNAP_EXIT_STATE, 4, task, o.exit_state);
    read_into(a, base + SNAP_PRIO, 8, task, o.prio);
    read_into(a, base + SNAP_POLICY, 4, task, o.policy);
    read_into(a, base + SNAP_CPU, 4, task, o.cpu);
    read_into(a, base + SNAP_ON_CPU, 4, task, o.on_cpu);
    read_ptr(a, SCRATCH, task, o.mm);
    read_into(a, base + SNAP_ARG_START, 16, SCRATCH, o.mm_arg_start);
    read_into(a, base + SNAP_START_STACK, 8, SCRATCH, o.mm_start_stack);
    a.push(st(Size::DW, Reg::R8, (base + SNAP_ARGC) as i16, 0));

    // psargs: the first bytes of the argument strings, from user memory.
    let skip = a.label();
    a.push(st(Size::W, Reg::R8, (base + SNAP_ARGS) as i16, 0));
    if user == UserRead::IfSameProcess {
        a.push(ldx(Size::W, Reg::R1, Reg::R8, (base + SNAP_TID + 4) as i16));
        a.push(mov64_reg(Reg::R2, Reg::R7));
        a.push(alu64_imm(AluOp::Rsh, Reg::R2, 32));
        a.jmp_reg(Cond::Ne, Reg::R1, Reg::R2, skip);
    }
    a.push(ldx(Size::DW, Reg::R2, Reg::R8, (base + SNAP_ARG_START + 8) as i16));
    a.push(ldx(Size::DW, Reg::R3, Reg::R8, (base + SNAP_ARG_START) as i16));
    a.push(alu64_reg(AluOp::Sub, Reg::R2, Reg::R3));
    let bounded = a.label();
    a.jmp_imm(Cond::Le, Reg::R2, PSARGS_SIZE as i32, bounded);
    a.push(mov64_imm(Reg::R2, PSARGS_SIZE as i32));
    a.bind(bounded);
    a.jmp_imm(Cond::Eq, Reg::R2, 0, skip);
    a.push(stx(Size::DW, Reg::R10, PSLEN, Reg::R2));
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, (base + SNAP_PSARGS) as i32));
    a.call(helper::PROBE_READ_USER);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, skip);
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, PSLEN));
    a.push(stx(Size::W, Reg::R8, (base + SNAP_ARGS) as i16, Reg::R1));
    // argc: the word at the bottom of the initial stack (argv and envp follow it).
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, (base + SNAP_ARGC) as i32));
    a.push(mov64_imm(Reg::R2, 8));
    a.push(ldx(Size::DW, Reg::R3, Reg::R8, (base + SNAP_START_STACK) as i16));
    a.call(helper::PROBE_READ_USER);
    a.bind(skip);
}

/// Stages a5 = si_code of the siginfo in raw argument 1 (UAPI layout: at 8); the
/// kernel's "no info" markers (0, 1) fault and read as 0.
fn emit_si_code(a: &mut Asm) {
    a.push(mov64_reg(Reg::R1, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R1, i32::from(A_SLOTS + 8 * 5)));
    a.push(mov64_imm(Reg::R2, 4));
    raw_arg(a, Reg::R3, 1);
    a.push(alu64_imm(AluOp::Add, Reg::R3, 8));
    a.call(helper::PROBE_READ_KERNEL);
    a.push(ldx(Size::W, Reg::R1, Reg::R10, A_SLOTS + 8 * 5));
    a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
    a.push(alu64_imm(AluOp::Arsh, Reg::R1, 32));
    stage(a, 5, Reg::R1);
}

/// Stages `a[i] = reg` before the record exists.
fn stage(a: &mut Asm, i: usize, reg: Reg) {
    a.push(stx(Size::DW, Reg::R10, A_SLOTS + 8 * i as i16, reg));
}

/// Reads the u64 argument `n` of a raw tracepoint into `reg`.
fn raw_arg(a: &mut Asm, reg: Reg, n: i16) {
    a.push(ldx(Size::DW, reg, Reg::R6, 8 * n));
}

/// Leaves when the task at `fp + task` is a kernel thread.
fn skip_kthread(a: &mut Asm, task: i16, o: &TaskOffsets, out: crate::insn::Label) {
    read_ptr(a, SCRATCH, task, o.flags);
    a.push(ldx(Size::W, Reg::R1, Reg::R10, SCRATCH));
    a.jmp_imm(Cond::Set, Reg::R1, PF_KTHREAD, out);
}

/// The exec path into the string section at `base`: from user memory at the exec's
/// start (its pointer kept in `paths` for the outcome), again from user memory when it
/// failed, from the kernel's copy when it succeeded.
fn emit_path(a: &mut Asm, hook: Hook, base: usize, max: u32, fld: i16, o: &TaskOffsets, paths: &HashMap<u32, u64>) {
    let key = |a: &mut Asm, reg: Reg| {
        a.push(mov64_reg(reg, Reg::R10));
        a.push(alu64_imm(AluOp::Add, reg, i32::from(SCRATCH)));
    };
    let read = |a: &mut Asm, helper_id: i32| {
        a.push(mov64_reg(Reg::R1, Reg::R8));
        a.push(alu64_imm(AluOp::Add, Reg::R1, (base + 8) as i32));
        a.push(mov64_imm(Reg::R2, max as i32));
        a.call(helper_id);
        a.push(stx(Size::W, Reg::R8, base as i16, Reg::R0));
    };
    a.push(st(Size::W, Reg::R8, (base + 4) as i16, 0));
    // No path: the length word holds -ENOENT.
    a.push(st(Size::W, Reg::R8, base as i16, -2));
    let done = a.label();
    match hook {
        Hook::ExecEnter => {
            a.push(ldx(Size::DW, Reg::R3, Reg::R6, fld));
            a.push(stx(Size::DW, Reg::R10, PSLEN, Reg::R3));
            read(a, helper::PROBE_READ_USER_STR);
            a.push(stx(Size::W, Reg::R10, SCRATCH, Reg::R7));
            a.map_update(paths.raw_fd(), SCRATCH, PSLEN);
        }
        Hook::ExecFail | Hook::ExecDone => {
            // The thread's id before the exec: a0 for ExecDone, the current one else.
            if hook == Hook::ExecDone {
                a.push(ldx(Size::DW, Reg::R1, Reg::R10, A_SLOTS));
                a.push(stx(Size::W, Reg::R10, SCRATCH, Reg::R1));
            } else {
                a.push(stx(Size::W, Reg::R10, SCRATCH, Reg::R7));
            }
            a.map_lookup(paths.raw_fd(), SCRATCH);
            a.jmp_imm(Cond::Eq, Reg::R0, 0, done);
            if hook == Hook::ExecFail {
                a.push(ldx(Size::DW, Reg::R3, Reg::R0, 0));
                read(a, helper::PROBE_READ_USER_STR);
            } else {
                raw_arg(a, Reg::R3, 2);
                a.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(o.bprm_filename)));
                a.push(stx(Size::DW, Reg::R10, PSLEN, Reg::R3));
                read_ptr(a, PSLEN, PSLEN, 0);
                a.push(ldx(Size::DW, Reg::R3, Reg::R10, PSLEN));
                read(a, helper::PROBE_READ_KERNEL_STR);
            }
            a.push_wide(ld_map_fd(Reg::R1, paths.raw_fd()));
            key(a, Reg::R2);
            a.call(helper::MAP_DELETE_ELEM);
        }
        _ => {}
    }
    a.bind(done);
}

/// The field of a syscall tracepoint's record a program reads: its offset there.
#[derive(Debug, Clone, Copy)]
pub struct SyscallField {
    pub offset: i16,
}

/// The program for `hook` under `layout`. Syscall hooks need the offset of their
/// field (`filename` or `ret`) in the tracepoint's record.
/// `paths` holds exec path pointers by thread between an exec and its outcome.
pub fn proc_program(
    layout: &ProcLayout,
    o: &TaskOffsets,
    maps: &ProbeMaps,
    paths: &HashMap<u32, u64>,
    field: Option<SyscallField>,
) -> Result<Vec<Insn>, CodegenError> {
    let hook = layout.hook;
    if layout.size + 8 > maps.ring_size() {
        return Err(CodegenError::RingTooSmall { record: layout.size, ring: maps.ring_size() });
    }
    let mut a = Asm::new();
    let out = a.label();
    a.push(mov64_reg(Reg::R6, Reg::R1));
    for i in 0..NUM_A {
        a.push(st(Size::DW, Reg::R10, A_SLOTS + 8 * i as i16, 0));
    }
    a.call(helper::GET_CURRENT_TASK);
    a.push(stx(Size::DW, Reg::R10, CUR_TASK, Reg::R0));
    a.push(stx(Size::DW, Reg::R10, OTHER_TASK, Reg::R0));
    let fld = field.map_or(16, |f| f.offset);

    // Filter and stage the hook's values; leave early for events that are not ours.
    match hook {
        Hook::Fork => {
            raw_arg(&mut a, Reg::R1, 1);
            a.push(stx(Size::DW, Reg::R10, OTHER_TASK, Reg::R1));
            skip_kthread(&mut a, OTHER_TASK, o, out);
            read_ptr(&mut a, SCRATCH, OTHER_TASK, o.pid);
            // pid then tgid, little-endian: tgid << 32 | tid.
            a.push(ldx(Size::DW, Reg::R1, Reg::R10, SCRATCH));
            stage(&mut a, 0, Reg::R1);
        }
        Hook::ExecEnter => {}
        Hook::ExecDone => {
            raw_arg(&mut a, Reg::R1, 1);
            a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
            a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
            stage(&mut a, 0, Reg::R1);
        }
        Hook::ExecFail => {
            a.push(ldx(Size::DW, Reg::R1, Reg::R6, fld));
            a.jmp_imm(Cond::Sge, Reg::R1, 0, out);
            stage(&mut a, 0, Reg::R1);
        }
        Hook::Start => {
            a.push(ldx(Size::DW, Reg::R1, Reg::R6, fld));
            a.jmp_imm(Cond::Ne, Reg::R1, 0, out);
        }
        Hook::Clear => {
            a.push(ldx(Size::DW, Reg::R1, Reg::R6, fld));
            a.jmp_imm(Cond::Sle, Reg::R1, 0, out);
            stage(&mut a, 0, Reg::R1);
        }
        Hook::Exit => {
            skip_kthread(&mut a, CUR_TASK, o, out);
            read_ptr(&mut a, SIGNAL, CUR_TASK, o.signal);
            if o.exit_group_dead {
                raw_arg(&mut a, Reg::R1, 1);
                a.push(alu64_imm(AluOp::And, Reg::R1, 0xff));
            } else {
                // Without the argument: the live count has already dropped to 0.
                read_ptr(&mut a, SCRATCH, SIGNAL, o.sig_live);
                let done = a.label();
                a.push(ldx(Size::W, Reg::R2, Reg::R10, SCRATCH));
                a.push(mov64_imm(Reg::R1, 0));
                a.jmp_imm(Cond::Ne, Reg::R2, 0, done);
                a.push(mov64_imm(Reg::R1, 1));
                a.bind(done);
            }
            stage(&mut a, 0, Reg::R1);
            read_ptr(&mut a, SCRATCH, CUR_TASK, o.exit_code);
            a.push(ldx(Size::W, Reg::R1, Reg::R10, SCRATCH));
            stage(&mut a, 1, Reg::R1);
            read_ptr(&mut a, SCRATCH, SIGNAL, o.sig_flags);
            a.push(ldx(Size::W, Reg::R1, Reg::R10, SCRATCH));
            stage(&mut a, 2, Reg::R1);
            read_ptr(&mut a, SCRATCH, SIGNAL, o.sig_group_exit_code);
            a.push(ldx(Size::W, Reg::R1, Reg::R10, SCRATCH));
            stage(&mut a, 3, Reg::R1);
        }
        Hook::Signal => {
            for (i, n) in [(0, 0), (1, 3), (2, 4), (3, 1)] {
                raw_arg(&mut a, Reg::R1, n);
                stage(&mut a, i, Reg::R1);
            }
            // sig, group and result are ints: keep their low halves, sign-extended.
            for i in 0..3 {
                a.push(ldx(Size::W, Reg::R1, Reg::R10, A_SLOTS + 8 * i));
                a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
                a.push(alu64_imm(AluOp::Arsh, Reg::R1, 32));
                stage(&mut a, i as usize, Reg::R1);
            }
            raw_arg(&mut a, Reg::R1, 2);
            a.push(stx(Size::DW, Reg::R10, OTHER_TASK, Reg::R1));
            if layout.faults {
                read_ptr(&mut a, SCRATCH, OTHER_TASK, o.pid);
                a.push(ldx(Size::DW, Reg::R1, Reg::R10, SCRATCH));
                stage(&mut a, 4, Reg::R1);
                emit_si_code(&mut a);
            }
        }
        Hook::Deliver => {
            raw_arg(&mut a, Reg::R1, 2);
            a.push(stx(Size::DW, Reg::R10, KACTION, Reg::R1));
            read_ptr(&mut a, SCRATCH, KACTION, o.ka_handler);
            a.push(ldx(Size::DW, Reg::R1, Reg::R10, SCRATCH));
            // SIG_DFL (0) and SIG_IGN (1) run no handler.
            a.jmp_imm(Cond::Le, Reg::R1, 1, out);
            stage(&mut a, 1, Reg::R1);
            read_ptr(&mut a, SCRATCH, KACTION, o.ka_flags);
            a.push(ldx(Size::DW, Reg::R1, Reg::R10, SCRATCH));
            stage(&mut a, 2, Reg::R1);
            raw_arg(&mut a, Reg::R1, 0);
            a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
            a.push(alu64_imm(AluOp::Arsh, Reg::R1, 32));
            stage(&mut a, 0, Reg::R1);
            raw_arg(&mut a, Reg::R1, 1);
            stage(&mut a, 3, Reg::R1);
        }
    }

    // The record.
    emit_reserve(&mut a, maps, layout.size, out)?;
    a.push_wide(crate::insn::ld_imm64(Reg::R1, PROC_COOKIE | hook as u64));
    a.push(stx(Size::DW, Reg::R8, OFF_COOKIE as i16, Reg::R1));
    a.call(helper::GET_CURRENT_PID_TGID);
    a.push(mov64_reg(Reg::R7, Reg::R0));
    a.push(stx(Size::DW, Reg::R8, OFF_PID_TGID as i16, Reg::R0));
    a.call(helper::KTIME_GET_NS);
    a.push(stx(Size::DW, Reg::R8, OFF_KTIME as i16, Reg::R0));
    a.call(helper::GET_SMP_PROCESSOR_ID);
    a.push(stx(Size::W, Reg::R8, OFF_CPU as i16, Reg::R0));
    a.push(st(Size::W, Reg::R8, OFF_FLAGS as i16, 0));
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, OFF_COMM as i32));
    a.push(mov64_imm(Reg::R2, 16));
    a.call(helper::GET_CURRENT_COMM);
    for i in 0..NUM_A {
        a.push(ldx(Size::DW, Reg::R1, Reg::R10, A_SLOTS + 8 * i as i16));
        a.push(stx(Size::DW, Reg::R8, (OFF_A + 8 * i) as i16, Reg::R1));
    }
    if let Some(base) = layout.cur {
        emit_snapshot(&mut a, o, CUR_TASK, base, UserRead::Yes);
    }
    if let Some(base) = layout.other {
        let user = if hook == Hook::Fork { UserRead::Yes } else { UserRead::IfSameProcess };
        emit_snapshot(&mut a, o, OTHER_TASK, base, user);
    }
    if let Some(base) = layout.siginfo {
        // Fault-reading "no info" markers (0, 1) leaves zeros, as wanted.
        a.push(ldx(Size::DW, Reg::R3, Reg::R10, A_SLOTS + 8 * 3));
        a.push(mov64_reg(Reg::R1, Reg::R8));
        a.push(alu64_imm(AluOp::Add, Reg::R1, base as i32));
        a.push(mov64_imm(Reg::R2, o.siginfo_size as i32));
        a.call(helper::PROBE_READ_KERNEL);
        if (o.siginfo_size as usize) < SIGINFO_SIZE {
            for off in (o.siginfo_size as usize..SIGINFO_SIZE).step_by(4) {
                a.push(st(Size::W, Reg::R8, (base + off) as i16, 0));
            }
        }
    }
    if let Some((base, max)) = layout.string {
        emit_path(&mut a, hook, base, max, fld, o, paths);
    }
    if let Some(base) = layout.ancestors {
        // Parent first; past init the chain repeats init's parent (0).
        let mut from = CUR_TASK;
        for i in 0..ANCESTORS {
            read_ptr(&mut a, SCRATCH, from, o.real_parent);
            read_into(&mut a, base + 4 * i, 4, SCRATCH, o.pid + 4);
            a.push(ldx(Size::DW, Reg::R1, Reg::R10, SCRATCH));
            a.push(stx(Size::DW, Reg::R10, WALK, Reg::R1));
            from = WALK;
        }
    }

    emit_submit(&mut a, maps)?;

    a.bind(out);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    Ok(a.finish()?)
}
