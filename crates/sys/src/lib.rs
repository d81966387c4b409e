//! Every `unsafe` block of udtrace lives in this crate, each with its reason. The rest
//! of the workspace calls these safe wrappers.
//!
//! Owns: the raw system calls (`bpf(2)`, `perf_event_open`, `mmap`, starting a traced
//! process). Must not: hold policy (what to load, when to attach): callers decide.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod bpf;
pub mod mmap;
pub mod mount;
pub mod perf;
pub mod process;
pub mod rlimit;
pub mod selfpatch;
pub mod time;
