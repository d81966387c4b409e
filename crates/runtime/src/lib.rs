//! The udtrace consumer: values, variables, aggregations and DTrace's output formats.
//! No OS I/O: callers hand in firings and a writer.

pub mod agg;
pub mod format;
pub mod value;

pub use value::{Int, Value};
