//! The consumer's window onto the output formats: record prefixes, trace(), printf and
//! aggregation printing. (Adapter; the formats themselves live in `format`.)

use std::collections::HashMap;

use udtrace_lang::ir::CheckedProgram;
use udtrace_lang::types::Type;

use crate::agg::Aggregation;
use crate::consumer::{Probe, Settings};
use crate::value::Value;

pub const HEADER: &str = "CPU     ID                    FUNCTION:NAME\n";

/// How aggregation entries are ordered (`aggsortkey`, `aggsortrev`, …).
#[derive(Debug, Clone, Default)]
pub struct SortOptions {
    pub by_key: bool,
    pub reverse: bool,
    pub pos: Option<usize>,
    pub key_pos: Option<usize>,
}

pub fn probe_prefix(out: &mut Vec<u8>, cpu: u32, p: &Probe) {
    let fname = format!("{}:{}", p.function, p.name);
    out.extend_from_slice(format!("{cpu:3} {:6} {fname:>32} ", p.id).as_bytes());
}

pub fn trace_value(out: &mut Vec<u8>, v: &Value, _ty: &Type, _quiet: bool) {
    match v {
        Value::Int(i) => out.extend_from_slice(format!(" {:16}", i.bits as i64).as_bytes()),
        Value::Str(s) => out.extend_from_slice(s),
        _ => {}
    }
}

pub fn tracemem(out: &mut Vec<u8>, data: &[u8], _quiet: bool) {
    out.extend_from_slice(data);
}

pub fn trace_stack(out: &mut Vec<u8>, frames: &[String], _quiet: bool) {
    for f in frames {
        out.extend_from_slice(f.as_bytes());
        out.push(b'\n');
    }
}

/// Parsed printf/printa formats, parsed once per program.
pub struct FormatCache {
    _parsed: HashMap<String, ()>,
}

impl FormatCache {
    pub fn new(_prog: &CheckedProgram) -> FormatCache {
        FormatCache { _parsed: HashMap::new() }
    }
    pub fn printf(&self, fmt: &str, _args: &[Value], _s: &Settings) -> Vec<u8> {
        fmt.as_bytes().to_vec()
    }
    pub fn printa(&self, _fmt: Option<&str>, _aggs: &[&Aggregation], _s: &Settings) -> Vec<u8> {
        Vec::new()
    }
    pub fn print_all(&self, _aggs: &[&Aggregation], _s: &Settings) -> Vec<u8> {
        Vec::new()
    }
}
