//! A TRACEPOINT program on sched:sched_process_fork counts our own forks, reading the
//! parent pid at the offset the format file gives.

mod common;

use std::process::Command;

use udtrace_bpf::insn::{
    alu64_imm, helper, ld_map_fd, ldx, mov64_imm, mov64_reg, st, stx, AluOp, Asm, Cond, Reg, Size,
};
use udtrace_bpf::maps::PerCpuArray;
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::tracepoint;

#[test]
fn fork_tracepoint_fires_for_our_children() {
    if !common::bpf_available("tracepoint") {
        return;
    }
    let fmt = tracepoint::format("sched", "sched_process_fork").unwrap();
    let parent = fmt.field("parent_pid").expect("parent_pid field");
    assert_eq!(parent.size, 4);
    let counts = PerCpuArray::<u64>::create("udtrace_forks", 1).unwrap();

    // The event's parent_pid is the forking thread's id, and tests run on threads.
    let tid = std::fs::read_link("/proc/thread-self").unwrap();
    let tid: i32 = tid.file_name().unwrap().to_str().unwrap().parse().unwrap();

    // if (ctx->parent_pid == our tid) counts[0]++
    let mut a = Asm::new();
    let out = a.label();
    a.push(ldx(Size::W, Reg::R6, Reg::R1, parent.offset as i16));
    a.jmp_imm(Cond::Ne, Reg::R6, tid, out);
    a.push(st(Size::W, Reg::R10, -4, 0));
    a.push_wide(ld_map_fd(Reg::R1, counts.raw_fd()));
    a.push(mov64_reg(Reg::R2, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R2, -4));
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, out);
    a.push(ldx(Size::DW, Reg::R1, Reg::R0, 0));
    a.push(alu64_imm(AluOp::Add, Reg::R1, 1));
    a.push(stx(Size::DW, Reg::R0, 0, Reg::R1));
    a.bind(out);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    let prog =
        Program::load(ProgramKind::Tracepoint, "udtrace_fork", &a.finish().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    let link = tracepoint::attach(&prog, "sched", "sched_process_fork", 0).unwrap();
    for _ in 0..3 {
        Command::new("true").status().unwrap();
    }
    drop(link);
    Command::new("true").status().unwrap();
    // Exactly this thread's three spawns, none after detaching.
    assert_eq!(counts.sum(0).unwrap(), 3);
}
