//! The program of a `profile-N` probe: run at each overflow of a CPU's clock (a perf
//! event per CPU), in the context of the thread it interrupted, it writes one sample
//! record (`udtrace_record::profile`) into the pid ring: the thread's ids, its user
//! registers and stack (read from the top of its kernel stack when it was in the
//! kernel), the kernel PC (0 in user mode) and the task's name.

use std::os::fd::{AsFd, OwnedFd};

use udtrace_record::pid::{self as record, PtReg};
use udtrace_record::profile::{ProfileLayout, COMM_LEN, PROFILE_COOKIE};
use udtrace_sys::perf;

use crate::codegen::{emit_reserve, emit_stack, emit_submit, CodegenError, ProbeMaps, RB_FORCE_WAKEUP};
use crate::insn::{alu64_imm, helper, ldx, mov64_imm, mov64_reg, st, stx, AluOp, Asm, Cond, Insn, Reg, Size};
use crate::maps::HashMap;
use crate::prog::Program;
#[cfg(doc)]
use crate::prog::ProgramKind;
use crate::uprobe::AttachError;

/// Bytes of x86-64 `struct pt_regs`.
const PT_REGS: i32 = (record::NUM_REGS * 8) as i32;

/// Where a task's user registers are: its `struct pt_regs` sits at the top of its
/// kernel stack (`task_pt_regs`).
#[derive(Debug, Clone, Copy)]
pub struct UserRegs {
    /// Offset of `task_struct.stack` (from the kernel's BTF).
    pub task_stack: u32,
    /// From the stack's base to the end of its `pt_regs`: THREAD_SIZE less the padding
    /// kept above them.
    pub top: u32,
}

/// Which samples a program keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SampleFilter {
    /// Every thread's, the idle task's too.
    All,
    /// Only these processes' (tgids).
    Pids(Vec<u32>),
}

/// The program for profile probe number `index` (its cookie), writing records of
/// `layout` into `maps.ring`. `seen`: the processes sampled so far, by tgid (high
/// word) and the first 4 bytes of the thread's name (an exec changes them); a sample
/// not in it wakes udtrace at once, so that it reads what the process has mapped while
/// the process still runs (others wait for the ring to fill or the consumer's timer).
pub fn program(
    layout: &ProfileLayout,
    maps: &ProbeMaps,
    seen: &HashMap<u64, u32>,
    index: u32,
    filter: &SampleFilter,
    regs: UserRegs,
) -> Result<Vec<Insn>, CodegenError> {
    if layout.size + 8 > maps.ring_size() {
        return Err(CodegenError::RingTooSmall { record: layout.size, ring: maps.ring_size() });
    }
    let off = |o: usize| o as i16;
    let mut a = Asm::new();
    let out = a.label();
    a.push(mov64_reg(Reg::R6, Reg::R1));
    a.call(helper::GET_CURRENT_PID_TGID);
    a.push(mov64_reg(Reg::R7, Reg::R0));
    if let SampleFilter::Pids(pids) = filter {
        let keep = a.label();
        a.push(mov64_reg(Reg::R1, Reg::R7));
        a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
        for &pid in pids {
            a.jmp_imm(Cond::Eq, Reg::R1, pid as i32, keep);
        }
        a.ja(out);
        a.bind(keep);
    }
    emit_reserve(&mut a, maps, layout.size, out)?;
    a.push(stx(Size::DW, Reg::R8, off(record::OFF_PID_TGID), Reg::R7));
    // The cookie, as two words: PROFILE_COOKIE | index.
    a.push(st(Size::W, Reg::R8, off(record::OFF_COOKIE), index as i32));
    a.push(st(Size::W, Reg::R8, off(record::OFF_COOKIE + 4), (PROFILE_COOKIE >> 32) as i32));
    a.call(helper::KTIME_GET_NS);
    a.push(stx(Size::DW, Reg::R8, off(record::OFF_KTIME), Reg::R0));
    a.call(helper::GET_SMP_PROCESSOR_ID);
    a.push(stx(Size::W, Reg::R8, off(record::OFF_CPU), Reg::R0));
    a.push(st(Size::W, Reg::R8, off(record::OFF_FLAGS), 0));
    a.push(st(Size::DW, Reg::R8, off(record::OFF_STACK_LEN), 0));

    let user = a.label();
    let zero = a.label();
    let regs_done = a.label();
    a.push(ldx(Size::DW, Reg::R1, Reg::R6, PtReg::Cs.offset() as i16));
    a.push(alu64_imm(AluOp::And, Reg::R1, 3));
    a.jmp_imm(Cond::Ne, Reg::R1, 0, user);
    // In the kernel: its PC, and the thread's user registers from its kernel stack.
    a.push(ldx(Size::DW, Reg::R1, Reg::R6, PtReg::Ip.offset() as i16));
    a.push(stx(Size::DW, Reg::R8, off(layout.off_kernel_pc), Reg::R1));
    a.call(helper::GET_CURRENT_TASK);
    a.push(mov64_reg(Reg::R3, Reg::R0));
    a.push(alu64_imm(AluOp::Add, Reg::R3, regs.task_stack as i32));
    a.read_to_stack(helper::PROBE_READ_KERNEL, -8, 8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, zero);
    a.push(ldx(Size::DW, Reg::R3, Reg::R10, -8));
    a.jmp_imm(Cond::Eq, Reg::R3, 0, zero);
    a.push(alu64_imm(AluOp::Add, Reg::R3, regs.top as i32 - PT_REGS));
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, record::OFF_REGS as i32));
    a.push(mov64_imm(Reg::R2, PT_REGS));
    // A failed read leaves zeros.
    a.call(helper::PROBE_READ_KERNEL);
    a.ja(regs_done);
    a.bind(zero);
    for i in 0..record::NUM_REGS {
        a.push(st(Size::DW, Reg::R8, off(record::OFF_REGS + i * 8), 0));
    }
    a.ja(regs_done);
    // In user mode: the interrupted registers are the user's.
    a.bind(user);
    a.push(st(Size::DW, Reg::R8, off(layout.off_kernel_pc), 0));
    for i in 0..record::NUM_REGS {
        a.push(ldx(Size::DW, Reg::R1, Reg::R6, (i * 8) as i16));
        a.push(stx(Size::DW, Reg::R8, off(record::OFF_REGS + i * 8), Reg::R1));
    }
    a.bind(regs_done);

    let base = &layout.base;
    if base.stack_bytes > 0 {
        // A perf event program cannot sleep: a page not present ends the copy.
        let sp = (Reg::R8, off(record::OFF_REGS + PtReg::Sp.offset()));
        emit_stack(&mut a, base.stack_bytes, base.off_stack, sp, false)?;
    }
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, layout.off_comm as i32));
    a.push(mov64_imm(Reg::R2, COMM_LEN as i32));
    a.call(helper::GET_CURRENT_COMM);
    let known = a.label();
    // The key, at fp-8: the pid_tgid's tgid word stays, the tid word becomes the name's.
    a.push(stx(Size::DW, Reg::R10, -8, Reg::R7));
    a.push(ldx(Size::W, Reg::R1, Reg::R8, off(layout.off_comm)));
    a.push(stx(Size::W, Reg::R10, -8, Reg::R1));
    a.map_lookup(seen.raw_fd(), -8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, known);
    a.push(st(Size::W, Reg::R10, -12, 0));
    a.map_update(seen.raw_fd(), -8, -12);
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(mov64_imm(Reg::R2, RB_FORCE_WAKEUP));
    a.call(helper::RINGBUF_SUBMIT);
    a.ja(out);
    a.bind(known);
    emit_submit(&mut a, maps)?;
    a.bind(out);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    Ok(a.finish()?)
}

/// Runs `prog` (a [`ProgramKind::PerfEvent`] program) on every overflow of the clock of
/// each of `cpus`, every `period_ns` of CPU time. The events stop when the returned
/// descriptors close.
pub fn attach_cpu_clocks(prog: &Program, period_ns: u64, cpus: &[i32]) -> Result<Vec<OwnedFd>, AttachError> {
    let mut out = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let what = || format!("the clock of CPU {cpu}");
        let ev = perf::open_cpu_clock(period_ns, cpu).map_err(|source| AttachError::Link { what: what(), source })?;
        perf::set_bpf(ev.as_fd(), prog.as_fd()).map_err(|source| AttachError::Link { what: what(), source })?;
        perf::enable(ev.as_fd()).map_err(|source| AttachError::Link { what: what(), source })?;
        out.push(ev);
    }
    Ok(out)
}
