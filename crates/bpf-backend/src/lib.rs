//! The BPF backend of the providers' seam ([`udtrace_providers::backend::Backend`]):
//! one generated uprobe program armed at every site of every enabled pid probe (one
//! more per distinct firing-time work, docs/firing.md) with one `uprobe_multi` link per
//! (process, file, program), filtered in the kernel by the map of traced processes; the proc provider's programs on tracepoints; a program on the
//! dynamic loader's debug hook that holds followed processes when they map objects;
//! all delivering records through one ring buffer. Also the kernel memory reader the
//! providers use ([`kernel_reader`]).
//!
//! Owns: which BPF programs, maps and links exist, and when. Must not: decide what a
//! firing means (the providers do), print, or use `unsafe` (`udtrace-sys` does).

#![forbid(unsafe_code)]

mod backend;
mod kernel_memory;

pub use backend::Bpf;
pub use kernel_memory::kernel_reader;

/// Whether the kernel lets udtrace use BPF (a map can be made): without privilege it
/// refuses, and pid probes then run in-process.
pub fn available() -> bool {
    match udtrace_bpf::maps::HashMap::<u32, u32>::create("udtrace_probe", 1) {
        Ok(_) => true,
        Err(e) => !e.os_error().is_some_and(udtrace_bpf::is_bpf_refusal),
    }
}
