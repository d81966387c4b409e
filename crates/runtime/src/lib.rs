//! The udtrace consumer: values, variables, aggregations and DTrace's output formats.
//! No OS I/O: callers hand in firings and a writer.
//!
//! Owns: what clauses do with a firing (predicates, variables, aggregations,
//! speculations, actions) and DTrace's output byte for byte. Must not: read
//! processes or the kernel (a firing's [`Context`] does), do OS I/O besides writing
//! the output it is given, or use `unsafe`.

#![forbid(unsafe_code)]

pub mod agg;
pub mod consumer;
pub mod context;
pub mod dmem;
pub mod eval;
pub mod firing;
pub mod format;
pub mod llquantize;
pub mod oformat;
pub mod output;
mod plain;
pub mod scratch;
mod subr;
pub mod timeline;
pub mod value;

pub use consumer::{Consumer, Ecb, Effects, Output, Probe, Settings};
pub use context::Context;
pub use value::{Int, Value};
