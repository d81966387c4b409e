//! Reading kernel memory from user space without /proc/kcore: a raw-tracepoint
//! program, never attached, run on demand with BPF_PROG_TEST_RUN. Its context (the
//! "tracepoint arguments" the test run passes) says what to do: copy `len` bytes at
//! a kernel address into a one-element array map with `bpf_probe_read_kernel`, or
//! store the calling thread's `task_struct` address (`bpf_get_current_task`).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use thiserror::Error;

use udtrace_sys::bpf::{self as sys, MapSpec};

use crate::insn::{helper, ldx, mov64_imm, mov64_reg, st, stx, Asm, Cond, Reg, Size};
use crate::prog::{LoadError, Program, ProgramKind};

/// The most bytes one run copies; longer reads take several runs.
pub const CHUNK: usize = 4096;

const BPF_MAP_TYPE_ARRAY: u32 = 2;
const OP_READ: u64 = 0;
const OP_CURRENT_TASK: u64 = 1;

#[derive(Debug, Error)]
pub enum KmemError {
    #[error("cannot create the kernel memory reader's map: {0}")]
    Map(std::io::Error),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("cannot assemble the kernel memory reader: {0}")]
    Asm(String),
}

/// A loaded reader of kernel memory.
pub struct KernelMemory {
    prog: Program,
    map: OwnedFd,
}

fn program(map_fd: i32) -> Result<Vec<crate::insn::Insn>, KmemError> {
    let mut a = Asm::new();
    let out = a.label();
    let task = a.label();
    a.push(mov64_reg(Reg::R6, Reg::R1));
    a.push(st(Size::W, Reg::R10, -4, 0));
    a.map_lookup(map_fd, -4);
    a.push(mov64_reg(Reg::R7, Reg::R0));
    a.push(mov64_imm(Reg::R0, -1));
    a.jmp_imm(Cond::Eq, Reg::R7, 0, out);
    a.push(ldx(Size::DW, Reg::R3, Reg::R6, 16));
    a.jmp_imm(Cond::Eq, Reg::R3, OP_CURRENT_TASK as i32, task);
    a.push(ldx(Size::DW, Reg::R2, Reg::R6, 8));
    a.push(mov64_imm(Reg::R0, -1));
    a.jmp_imm(Cond::Gt, Reg::R2, CHUNK as i32, out);
    a.push(mov64_reg(Reg::R1, Reg::R7));
    a.push(ldx(Size::DW, Reg::R3, Reg::R6, 0));
    a.call(helper::PROBE_READ_KERNEL);
    a.ja(out);
    a.bind(task);
    a.call(helper::GET_CURRENT_TASK);
    a.push(stx(Size::DW, Reg::R7, 0, Reg::R0));
    a.push(mov64_imm(Reg::R0, 0));
    a.bind(out);
    a.exit();
    a.finish().map_err(|e| KmemError::Asm(e.to_string()))
}

impl KernelMemory {
    pub fn load() -> Result<KernelMemory, KmemError> {
        let spec = MapSpec {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: CHUNK as u32,
            max_entries: 1,
            flags: 0,
            name: "udtrace_kmem",
        };
        let map = sys::map_create(&spec).map_err(KmemError::Map)?;
        let insns = program(map.as_raw_fd())?;
        let prog = Program::load(ProgramKind::RawTracepoint, "udtrace_kmem", &insns)?;
        Ok(KernelMemory { prog, map })
    }

    /// One run: `(addr, len, op)` as the program's context; `None` if it failed.
    fn run(&self, addr: u64, len: usize, op: u64) -> Option<Vec<u8>> {
        let mut ctx = [0u8; 24];
        ctx[..8].copy_from_slice(&addr.to_ne_bytes());
        ctx[8..16].copy_from_slice(&(len as u64).to_ne_bytes());
        ctx[16..].copy_from_slice(&op.to_ne_bytes());
        let ret = sys::prog_test_run_ctx(self.prog.as_fd(), &ctx).ok()?;
        if ret != 0 {
            return None;
        }
        let mut value = vec![0u8; CHUNK];
        sys::map_lookup_elem(self.map.as_fd(), &0u32.to_ne_bytes(), 4, &mut value, CHUNK).ok()?;
        value.truncate(len);
        Some(value)
    }

    /// `len` bytes of kernel memory at `addr`; `None` if any of them cannot be read.
    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(CHUNK);
            out.extend(self.run(addr.checked_add(out.len() as u64)?, n, OP_READ)?);
        }
        Some(out)
    }

    /// The calling thread's `struct task_struct` address.
    pub fn current_task(&self) -> Option<u64> {
        let v = self.run(0, 8, OP_CURRENT_TASK)?;
        Some(u64::from_ne_bytes(v[..8].try_into().ok()?))
    }
}
