//! udtrace's own BPF toolkit, built on `udtrace-sys` and nothing that needs clang or
//! LLVM: an instruction emitter ([`insn`]), the uprobe program generator ([`codegen`])
//! writing the records `udtrace-record` lays out, the profile program and its CPU clocks
//! ([`profile`]), typed maps ([`maps`]), program loading
//! with the verifier log ([`prog`]), uprobe and tracepoint attachment ([`uprobe`],
//! [`tracepoint`]) and the ring buffer reader ([`ringbuf`]).
//!
//! Owns: BPF bytecode, maps, programs and links as kernel objects. Must not: know
//! what a probe or a D clause is (callers hand in plans and sites), or use `unsafe`
//! (the system calls are `udtrace-sys`'s).

#![forbid(unsafe_code)]

pub mod btf;
pub mod codegen;
pub mod dif;
pub mod insn;
pub mod kmem;
pub mod lineage;
pub mod maps;
pub mod proc;
pub mod profile;
pub mod prog;
pub mod ringbuf;
pub mod tracepoint;
pub mod uprobe;

use std::io;

/// Whether an error from the kernel means "BPF is not allowed here" (no privilege, or
/// a kernel without the bpf system call), as opposed to a bug or a bad request.
pub fn is_bpf_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOSYS))
}
