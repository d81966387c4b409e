//! A foreign tracer for the tier of real programs (tests/real_foreign.rs): another
//! process that puts a kernel uprobe on a function while udtrace traces it, as
//! bpftrace or perf would, through udtrace's own BPF crate (so that the tests do not
//! depend on either being installed). Built by Cargo as an example with the tests.
//!
//!   foreign_uprobe FILE FUNCTION PID
//!
//! Attaches a uprobe whose program counts hits at the entry of FUNCTION in FILE, in
//! process PID only (a uprobe on every process mapping libc would put its breakpoint
//! under the in-process patches of other tests running meanwhile), prints "attached
//! FUNCTION at FILE+0xOFFSET", then waits for stdin to reach its end, detaches and
//! prints "detached after N hits". Exit status 0; 3 when the kernel refuses BPF
//! (the message says so), 1 on any other failure.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use udtrace_bpf::insn::{atomic_add, mov64_imm, Asm, Cond, Reg, Size};
use udtrace_bpf::maps::PerCpuArray;
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::uprobe::{attach_multi_pid, Site};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, file, function, pid] = args.as_slice() else {
        eprintln!("usage: foreign_uprobe FILE FUNCTION PID");
        return ExitCode::from(2);
    };
    match run(Path::new(file), function, pid) {
        Ok(()) => ExitCode::SUCCESS,
        Err((refused, e)) => {
            eprintln!("foreign_uprobe: {}{e}", if refused { "the kernel refused BPF: " } else { "" });
            ExitCode::from(if refused { 3 } else { 1 })
        }
    }
}

/// An error, and whether it is the kernel refusing BPF.
type Failure = (bool, String);

fn failed(e: impl std::fmt::Display) -> Failure {
    (false, e.to_string())
}

fn run(file: &Path, function: &str, pid: &str) -> Result<(), Failure> {
    let pid: u32 = pid.parse().map_err(|_| failed(format!("bad pid {pid}")))?;
    let object = udtrace_object::debuginfo::load(file).map_err(failed)?;
    let f = object
        .table()
        .functions()
        .iter()
        .find(|f| f.name == function)
        .ok_or_else(|| failed(format!("no function {function} in {}", file.display())))?;
    let offset = object.file_offset(f.addr).ok_or_else(|| failed(format!("{function} is not in the file")))?;

    let hits = PerCpuArray::<u64>::create("foreign_hits", 1)
        .map_err(|e| (e.os_error().is_some_and(udtrace_bpf::is_bpf_refusal), e.to_string()))?;
    // hits[0] += 1 on the firing CPU, as any counting tracer does.
    let mut a = Asm::new();
    a.push(udtrace_bpf::insn::st(Size::W, Reg::R10, -4, 0));
    a.map_lookup(hits.raw_fd(), -4);
    let done = a.label();
    a.jmp_imm(Cond::Eq, Reg::R0, 0, done);
    a.push(mov64_imm(Reg::R1, 1));
    a.push(atomic_add(Size::DW, Reg::R0, 0, Reg::R1));
    a.bind(done);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    let insns = a.finish().map_err(failed)?;
    let prog = Program::load(ProgramKind::UprobeMulti, "foreign_count", &insns)
        .map_err(|e| (udtrace_bpf::is_bpf_refusal(e.os_error()), e.to_string()))?;
    let link = attach_multi_pid(&prog, file, &[Site { offset, cookie: 0, ref_ctr: 0 }], false, pid).map_err(failed)?;
    println!("attached {function} at {}+{offset:#x}", file.display());
    std::io::stdout().flush().map_err(failed)?;

    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).map_err(failed)?;
    drop(link);
    println!("detached after {} hits", hits.sum(0).map_err(failed)?);
    Ok(())
}
