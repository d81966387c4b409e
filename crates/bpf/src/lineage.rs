//! Following a process's children in the kernel, for processes udtrace may not hold
//! with ptrace (another tracer, a debugger, holds them): at `sched_process_fork` a new
//! process whose parent is traced joins the traced map before it runs its first
//! instruction, with its parent's mark; at `sched_process_exit` a process whose last
//! thread ends with such a mark leaves it; at `sched_process_exec` one that runs a new
//! image is told, for its probes to be armed. Each change goes to user space as a
//! `udtrace_record::lineage` record in the firings' ring (so it comes before any firing
//! of the child), for what the kernel cannot do (per-process links, symbols).
//!
//! Only marks of [`KERNEL_FOLLOWED`] are touched: processes held with ptrace are
//! followed by their tracer, which adds and removes them itself.

use thiserror::Error;

use crate::btf::{Btf, BtfError};
use crate::codegen::CodegenError;
use crate::insn::{
    alu64_imm, helper, ld_imm64, ld_map_fd, ldx, mov64_imm, mov64_reg, st, stx, AluOp, Asm, Cond, Insn, Label, Reg,
    Size,
};
use crate::maps::{HashMap, RingBuf};
use udtrace_record::lineage;

/// The traced map's value for a process followed in the kernel (held ones have 1).
pub const KERNEL_FOLLOWED: u32 = 2;

#[derive(Debug, Error)]
pub enum LineageError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error("the kernel's task_struct is laid out differently from what udtrace reads")]
    Layout,
    #[error(transparent)]
    Codegen(#[from] CodegenError),
}

/// Where `pid` and `tgid` are in `task_struct`.
#[derive(Debug, Clone, Copy)]
pub struct TaskIds {
    pid: i32,
    tgid: i32,
}

impl TaskIds {
    pub fn from_btf(b: &Btf) -> Result<TaskIds, LineageError> {
        let off = |f: &str| -> Result<i32, LineageError> {
            let p = b.place("task_struct", f)?;
            if p.size != 4 {
                return Err(LineageError::Layout);
            }
            i32::try_from(p.offset).map_err(|_| LineageError::Layout)
        };
        Ok(TaskIds { pid: off("pid")?, tgid: off("tgid")? })
    }
}

/// Writes the lineage record at `fp - 32 .. fp - 16` to `ring`.
fn emit_event(a: &mut Asm, ring: &RingBuf) {
    a.push_wide(ld_map_fd(Reg::R1, ring.raw_fd()));
    a.push(mov64_reg(Reg::R2, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R2, -32));
    a.push(mov64_imm(Reg::R3, lineage::SIZE as i32));
    a.push(mov64_imm(Reg::R4, 0));
    a.call(helper::RINGBUF_OUTPUT);
}

/// Stores the current process's id at `fp + slot`, and leaves it in R0.
fn emit_current_tgid(a: &mut Asm, slot: i16) {
    a.call(helper::GET_CURRENT_PID_TGID);
    a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
    a.push(stx(Size::W, Reg::R10, slot, Reg::R0));
}

/// Jumps to `out` unless the process whose id is at `fp + slot` is in the traced map
/// with the [`KERNEL_FOLLOWED`] mark.
fn emit_unless_kernel_followed(a: &mut Asm, traced: &HashMap<u32, u32>, slot: i16, out: Label) {
    a.map_lookup(traced.raw_fd(), slot);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, out);
    a.push(ldx(Size::W, Reg::R1, Reg::R0, 0));
    a.jmp_imm(Cond::Ne, Reg::R1, KERNEL_FOLLOWED as i32, out);
}

/// Writes a lineage record of `kind` to `events`: the process id at `fp + pid`, the
/// child's at `fp + child` (0 without).
fn emit_record(a: &mut Asm, events: &RingBuf, kind: u64, pid: i16, child: Option<i16>) {
    emit_cookie(a, kind);
    a.push(ldx(Size::W, Reg::R1, Reg::R10, pid));
    a.push(stx(Size::W, Reg::R10, -24, Reg::R1));
    match child {
        Some(c) => {
            a.push(ldx(Size::W, Reg::R1, Reg::R10, c));
            a.push(stx(Size::W, Reg::R10, -20, Reg::R1));
        }
        None => {
            a.push(st(Size::W, Reg::R10, -20, 0));
        }
    }
    emit_event(a, events);
}

/// Ends a program at `out`, returning 0.
fn finish(mut a: Asm, out: Label) -> Result<Vec<Insn>, LineageError> {
    a.bind(out);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    Ok(a.finish().map_err(CodegenError::from)?)
}

/// Stores a lineage cookie of `kind` at `fp - 32`.
fn emit_cookie(a: &mut Asm, kind: u64) {
    a.push_wide(ld_imm64(Reg::R1, lineage::LINEAGE_COOKIE | kind));
    a.push(stx(Size::DW, Reg::R10, -32, Reg::R1));
}

/// Reads the 4-byte field at `off` of the task whose pointer is in R7 to `fp + slot`;
/// jumps to `out` when the read fails.
fn read_task_id(a: &mut Asm, off: i32, slot: i16, out: Label) {
    a.push(mov64_reg(Reg::R3, Reg::R7));
    a.push(alu64_imm(AluOp::Add, Reg::R3, off));
    a.read_to_stack(helper::PROBE_READ_KERNEL, slot, 4);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, out);
}

/// The RAW_TRACEPOINT program for `sched_process_fork(parent, child)`: runs in the
/// parent before the child is woken, so a child it adds fires from its first
/// instruction on.
pub fn fork_program(ids: TaskIds, traced: &HashMap<u32, u32>, events: &RingBuf) -> Result<Vec<Insn>, LineageError> {
    let mut a = Asm::new();
    let out = a.label();
    a.push(ldx(Size::DW, Reg::R7, Reg::R1, 8)); // the child's task
    read_task_id(&mut a, ids.tgid, -8, out);
    read_task_id(&mut a, ids.pid, -4, out);
    // A new thread of the parent (its tgid is the parent's) changes nothing.
    a.push(ldx(Size::W, Reg::R1, Reg::R10, -8));
    a.push(ldx(Size::W, Reg::R2, Reg::R10, -4));
    a.jmp_reg(Cond::Ne, Reg::R1, Reg::R2, out);
    emit_current_tgid(&mut a, -12);
    emit_unless_kernel_followed(&mut a, traced, -12, out);
    a.push(st(Size::W, Reg::R10, -16, KERNEL_FOLLOWED as i32));
    a.map_update(traced.raw_fd(), -8, -16);
    emit_record(&mut a, events, lineage::FORKED, -12, Some(-8));
    finish(a, out)
}

/// The RAW_TRACEPOINT program for `sched_process_exec`, in the process that exec'd:
/// a kernel-followed one is told (its new image is matched and armed after the fact).
pub fn exec_program(traced: &HashMap<u32, u32>, events: &RingBuf) -> Result<Vec<Insn>, LineageError> {
    let mut a = Asm::new();
    let out = a.label();
    emit_current_tgid(&mut a, -8);
    emit_unless_kernel_followed(&mut a, traced, -8, out);
    emit_record(&mut a, events, lineage::EXECED, -8, None);
    finish(a, out)
}

/// In the loader hook's program: writes a `Loaded` record for the process whose id is
/// at `fp + pid` to `events` (it uses `fp - 32 .. fp - 16`).
pub fn emit_loaded(a: &mut Asm, events: &RingBuf, pid: i16) {
    emit_record(a, events, lineage::LOADED, pid, None);
}

/// The RAW_TRACEPOINT program for `sched_process_exit`, in the exiting thread. With
/// `group_dead` (the tracepoint's second argument, where the kernel passes it) the
/// process ends with its last thread; without it, with its first (a process whose
/// first thread exits early is let go early).
pub fn exit_program(traced: &HashMap<u32, u32>, events: &RingBuf, group_dead: bool) -> Result<Vec<Insn>, LineageError> {
    let mut a = Asm::new();
    let out = a.label();
    let ending = a.label();
    if group_dead {
        a.push(ldx(Size::DW, Reg::R2, Reg::R1, 8));
        a.push(alu64_imm(AluOp::And, Reg::R2, 0xff));
        a.jmp_imm(Cond::Eq, Reg::R2, 0, out);
        a.call(helper::GET_CURRENT_PID_TGID);
        a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
        a.ja(ending);
    } else {
        a.call(helper::GET_CURRENT_PID_TGID);
        a.push(mov64_reg(Reg::R1, Reg::R0));
        a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
        a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
        a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
        a.jmp_reg(Cond::Ne, Reg::R0, Reg::R1, out);
    }
    a.bind(ending);
    a.push(stx(Size::W, Reg::R10, -8, Reg::R0));
    emit_unless_kernel_followed(&mut a, traced, -8, out);
    // Out of the map at once: its pid may name another process soon.
    a.push_wide(ld_map_fd(Reg::R1, traced.raw_fd()));
    a.push(mov64_reg(Reg::R2, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R2, -8));
    a.call(helper::MAP_DELETE_ELEM);
    emit_record(&mut a, events, lineage::EXITED, -8, None);
    finish(a, out)
}
