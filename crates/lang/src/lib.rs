//! The D language for udtrace: lexing, parsing, types and checking. No I/O: text in,
//! a checked program or a located error out.
//!
//! Owns: D's syntax, types, checking, errors (DTrace's tags and messages), options
//! the capture plans that say what a firing must record, and what runs at the firing
//! (`firing`: clauses lowered to `udtrace_dif` programs). Must not: do I/O, know
//! of processes or backends, or use `unsafe`.

#![forbid(unsafe_code)]

pub mod ast;
pub mod capture;
pub mod check;
pub mod clsflags;
pub mod consts;
pub mod diag;
pub mod error;
pub mod errtags;
pub mod firing;
pub mod ir;
pub mod ktypes;
pub mod lexer;
pub mod macros;
pub mod net_types;
pub mod options;
pub mod parser;
pub mod proc_types;
pub mod span;
pub mod storage;
pub mod subrs;
pub mod types;
pub mod vartab;

pub use error::{CompileError, Tag};
pub use span::Span;
