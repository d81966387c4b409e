//! DTrace's output formats: printf()/printa() formatting, the default record
//! output and trace(), aggregation printing and the quantize tables.

pub mod aggregation;
pub mod cfmt;
pub mod flow;
pub mod print_type;
pub mod printf;
pub mod quantize;
pub mod time;
pub mod trace;

pub use aggregation::{AggPrintOpts, SortOptions};
pub use printf::{parse_format, ArgKind, Format, FormatCtx, FormatError};
pub use trace::TraceOpts;
