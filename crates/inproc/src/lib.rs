//! The in-process pid backend's firing path (docs/inprocess.md): a probe site's first
//! bytes become a `jmp rel32` to a trampoline in the traced process, which writes the
//! firing's record (`udtrace_record::pid`, the bytes the BPF backend writes) into a ring
//! shared with udtrace, then runs the displaced code and jumps back.
//!
//! Owns: the ring's layout and protocol and udtrace's reader of it ([`ring`]), the
//! trampoline's machine code ([`trampoline`]), the SIGTRAP handler that keeps breakpoints
//! harmless once udtrace is gone ([`guard`]), finding the vDSO clock ([`vdso`]).
//!
//! Must not: touch a process (mapping, writing code, stopping threads are the backend's,
//! through `udtrace-sys` and `udtrace-process`), decide which sites to patch
//! (`udtrace_object::patch` does), or interpret records. No `unsafe`.

#![forbid(unsafe_code)]

pub mod dif;
pub mod guard;
pub mod ring;
pub mod trampoline;
pub mod vdso;
