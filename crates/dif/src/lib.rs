//! The firing-time language (udtrace's DIF): what a clause computes at the instant a
//! probe fires, so that predicates, thread-local variables and aggregations need no
//! record and no consumer (docs/firing.md).
//!
//! One definition, three executors: a program ([`op`]) is a short list of operations on
//! sixteen 64-bit registers with forward jumps only (it always ends, in at most as many
//! steps as it has operations). Its storage ([`layout`]) is a buffer of per-thread
//! entries (thread-local variables, aggregations without keys) and shared keyed tables
//! (aggregations with keys), laid out here byte for byte. The x86 compiler
//! (`udtrace-inproc`) runs it in trampolines, the BPF compiler (`udtrace-bpf`) in uprobe
//! programs (on maps with the same meaning), and [`interp`] here at breakpoints. The
//! interpreter is the reference: the others are tested against it.
//!
//! Owns: the operations and their meaning, their checks ([`op::verify`]), the storage
//! layout and the arithmetic of aggregation buckets (also used by the consumer), the
//! interpreter, and reading a buffer back ([`snapshot`]). Must not: do I/O, use `unsafe`,
//! or know about D's syntax, BPF or x86.

#![forbid(unsafe_code)]

pub mod gen;
pub mod interp;
pub mod layout;
pub mod llquantize;
pub mod op;
pub mod snapshot;

pub use layout::{AggDesc, AggFn, BufferLayout, Layout};
pub use op::{BinOp, Op, Program, Reg, UnOp, Var, VerifyError, NREGS};
