//! The udtrace consumer: values, variables, aggregations and DTrace's output formats.
//! No OS I/O: callers hand in firings and a writer.

pub mod agg;
pub mod consumer;
pub mod context;
pub mod dmem;
pub mod eval;
pub mod format;
pub mod llquantize;
pub mod output;
pub mod scratch;
mod subr;
pub mod value;

pub use consumer::{Consumer, Ecb, Effects, Output, Probe, Settings};
pub use context::Context;
pub use value::{Int, Value};
