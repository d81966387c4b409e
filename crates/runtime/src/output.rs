//! The consumer's window onto the output formats: record prefixes, trace(), printf and
//! printa with formats parsed once, aggregation printing at exit, and the compile-time
//! check of every format against its arguments' D types.

use std::collections::HashMap;

pub use trace::HEADER;

use udtrace_lang::ir::{Action, AggKind, CheckedProgram, ExprKind};
use udtrace_lang::types::{Type, TypeTable};
use udtrace_lang::{CompileError, Span, Tag};

use crate::agg::Aggregation;
use crate::consumer::{Probe, Settings};
use crate::format::printf::{format, AggValue, ArgType, TypeClass, ValidateOpts};
pub use crate::format::SortOptions;
use crate::format::{aggregation, trace, AggPrintOpts, Format, FormatCtx, FormatError, TraceOpts};
use crate::value::Value;

fn trace_opts(s: &Settings) -> TraceOpts {
    TraceOpts { quiet: s.quiet, strsize: s.strsize, rawbytes: s.rawbytes, ..TraceOpts::default() }
}

fn print_opts(s: &Settings) -> AggPrintOpts {
    AggPrintOpts { sort: s.sort, trace: trace_opts(s), folded: s.folded }
}

fn format_ctx(s: &Settings) -> FormatCtx<'static> {
    let zone = crate::format::time::Zone { local: s.localtime, offset_secs: s.tz_offset, name: "UTC" };
    FormatCtx { zone, strsize: s.strsize, ..FormatCtx::default() }
}

pub fn probe_prefix(out: &mut Vec<u8>, cpu: u32, p: &Probe, s: &Settings) {
    if s.testing {
        trace::testing_prefix(out, &p.function, &p.name);
    } else {
        trace::record_prefix(out, cpu, p.id, &p.function, &p.name);
    }
}

/// The column header before the first record.
pub fn header(testing: bool) -> &'static str {
    if testing {
        trace::TESTING_HEADER
    } else {
        trace::HEADER
    }
}

pub fn trace_value(out: &mut Vec<u8>, v: &Value, s: &Settings) {
    trace::trace_value(out, v, &trace_opts(s));
}

pub fn tracemem(out: &mut Vec<u8>, data: &[u8]) {
    trace::tracemem(out, data);
}

pub fn symbol(out: &mut Vec<u8>, v: &Value) {
    trace::symbol(out, v);
}

/// Parsed printf/printa formats: parsed once when the consumer starts.
pub struct FormatCache {
    formats: Vec<Format>,
    by_text: HashMap<String, usize>,
    /// (address, length, index) of each of the program's format strings, sorted: the
    /// program outlives the consumer, so its strings are found by address, without
    /// hashing the text at every firing.
    by_addr: Vec<(usize, usize, usize)>,
}

impl FormatCache {
    pub fn new(prog: &CheckedProgram) -> FormatCache {
        let mut cache = FormatCache { formats: Vec::new(), by_text: HashMap::new(), by_addr: Vec::new() };
        for c in &prog.clauses {
            each_format(&c.actions, &mut |text, _| {
                let i = match cache.by_text.get(text) {
                    Some(&i) => i,
                    None => {
                        let Ok(f) = crate::format::parse_format(text.as_bytes()) else { return };
                        cache.formats.push(f);
                        cache.by_text.insert(text.to_string(), cache.formats.len() - 1);
                        cache.formats.len() - 1
                    }
                };
                cache.by_addr.push((text.as_ptr() as usize, text.len(), i));
            });
        }
        cache.by_addr.sort_unstable();
        cache
    }

    #[inline]
    fn get(&self, fmt: &str) -> Option<&Format> {
        let key = (fmt.as_ptr() as usize, fmt.len());
        let i = match self.by_addr.binary_search_by(|&(a, l, _)| (a, l).cmp(&key)) {
            Ok(at) => self.by_addr[at].2,
            Err(_) => *self.by_text.get(fmt)?,
        };
        self.formats.get(i)
    }

    /// `fmt` as a [`crate::format::printf::PlainFormat`], if it is one.
    pub fn plain(&self, fmt: &str) -> Option<crate::format::printf::PlainFormat> {
        self.get(fmt)?.plain()
    }

    /// [`FormatCache::printf`] appended to `out` (nothing on a run-time error).
    pub fn printf_into(
        &self,
        out: &mut Vec<u8>,
        fmt: &str,
        args: &[Value],
        s: &Settings,
        symbolize: &dyn Fn(u64, bool) -> Option<String>,
    ) {
        let Some(f) = self.get(fmt) else { return };
        let start = out.len();
        if crate::format::printf::format_into(
            out,
            f,
            args,
            &[],
            &FormatCtx { symbolize: Some(symbolize), ..format_ctx(s) },
        )
        .is_err()
        {
            out.truncate(start);
        }
    }

    /// printf's output; a run-time format error prints nothing (it was checked when
    /// compiling, so only impossible values get here).
    /// `symbolize` turns addresses into symbols for `%a`/`%A` (address, user?).
    pub fn printf(
        &self,
        fmt: &str,
        args: &[Value],
        s: &Settings,
        symbolize: &dyn Fn(u64, bool) -> Option<String>,
    ) -> Vec<u8> {
        match self.get(fmt) {
            Some(f) => format(f, args, &FormatCtx { symbolize: Some(symbolize), ..format_ctx(s) }).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// `symbolize` as for [`FormatCache::printf`].
    pub fn printa(
        &self,
        fmt: Option<&str>,
        aggs: &[&Aggregation],
        s: &Settings,
        symbolize: &dyn Fn(u64, bool) -> Option<String>,
    ) -> Vec<u8> {
        let o = print_opts(s);
        match fmt.and_then(|f| self.get(f)) {
            Some(f) => {
                let ctx = FormatCtx { symbolize: Some(symbolize), ..format_ctx(s) };
                aggregation::printa_fmt(f, aggs, &ctx, &o).unwrap_or_default()
            }
            None => aggregation::printa_joined(aggs, &o),
        }
    }

    pub fn print_all(&self, aggs: &[&Aggregation], s: &Settings) -> Vec<u8> {
        aggregation::print_all(aggs, &print_opts(s))
    }
}

/// Calls `f` with every printf/printa/system format string in these actions.
fn each_format(actions: &[Action], f: &mut dyn FnMut(&str, Span)) {
    for a in actions {
        match a {
            Action::Printf { format, format_span, .. }
            | Action::System { format, format_span, .. }
            | Action::Freopen { format, format_span, .. } => f(format, *format_span),
            Action::Printa { format: Some((format, span)), .. } => f(format, *span),
            Action::If { then, otherwise, .. } => {
                each_format(then, f);
                each_format(otherwise, f);
            }
            _ => {}
        }
    }
}

/// A type as dt_printf_validate names it: stack() and ustack() are both "stack".
fn format_type_name(prog: &CheckedProgram, t: &Type) -> String {
    match t {
        Type::Stack { .. } => "stack".into(),
        t => prog.types.name(t),
    }
}

/// An argument's type as dt_printf_validate names it. A void placeholder for a
/// void or aggregation operand (see the checker's action operands) carries the
/// name to report as its text.
fn arg_type_name(prog: &CheckedProgram, e: &udtrace_lang::ir::Expr) -> String {
    match (&e.ty, &e.kind) {
        (Type::Void, ExprKind::Str(name)) => String::from_utf8_lossy(name).into_owned(),
        (t, _) => format_type_name(prog, t),
    }
}

fn class_of(ty: &Type, types: &TypeTable) -> TypeClass {
    let _ = types;
    match ty {
        Type::Int(i) => TypeClass::Int { size: i.size, signed: i.signed },
        Type::Enum(_) => TypeClass::Int { size: 4, signed: true },
        Type::Float(_) => TypeClass::Float,
        Type::String => TypeClass::Str,
        Type::Array(t, _) if matches!(**t, Type::Int(ref i) if i.size == 1) => TypeClass::CharArray,
        Type::Pointer(_) => TypeClass::Pointer,
        Type::Stack { .. } => TypeClass::Stack,
        Type::Symbol { user: true, .. } => TypeClass::USymAddr,
        Type::Symbol { user: false, .. } => TypeClass::SymAddr,
        _ => TypeClass::Other,
    }
}

/// Checks every format string of the program against its arguments, with DTrace's
/// messages. Returns the failing clause's source index with the error.
pub fn validate_formats(prog: &CheckedProgram, have_target: bool) -> Result<(), (usize, CompileError)> {
    for c in &prog.clauses {
        validate_actions(prog, &c.actions, have_target).map_err(|e| (c.source, e))?;
    }
    Ok(())
}

fn validate_actions(prog: &CheckedProgram, actions: &[Action], have_target: bool) -> Result<(), CompileError> {
    let err = |span: Span, e: FormatError| match e {
        FormatError::Compile(tag, m) => CompileError::new(tag, span, m),
        FormatError::Runtime(m) => CompileError::new(Tag::D_UNKNOWN, span, m),
    };
    for a in actions {
        match a {
            Action::Printf { format, format_span, args }
            | Action::System { format, format_span, args }
            | Action::Freopen { format, format_span, args } => {
                let func = match a {
                    Action::Printf { .. } => "printf",
                    Action::System { .. } => "system",
                    _ => "freopen",
                };
                let f = crate::format::parse_format(format.as_bytes()).map_err(|e| err(*format_span, e))?;
                let names: Vec<String> = args.iter().map(|e| arg_type_name(prog, e)).collect();
                let types: Vec<ArgType> = args
                    .iter()
                    .zip(&names)
                    .map(|(e, n)| ArgType { class: class_of(&e.ty, &prog.types), name: n })
                    .collect();
                let o = ValidateOpts { func, foff: 1, aggregation: None, exact_len: true, have_target };
                f.validate(&types, &o).map_err(|e| err(*format_span, e))?;
            }
            Action::Printa { format: Some((format, span)), aggs } => {
                let f = crate::format::parse_format(format.as_bytes()).map_err(|e| err(*span, e))?;
                let agg = &prog.aggs[aggs[0]];
                let names: Vec<String> = agg.keys.iter().map(|t| format_type_name(prog, t)).collect();
                let types: Vec<ArgType> = agg
                    .keys
                    .iter()
                    .zip(&names)
                    .map(|(t, n)| ArgType { class: class_of(t, &prog.types), name: n })
                    .collect();
                let o = ValidateOpts {
                    func: "printa",
                    foff: 1,
                    aggregation: Some(agg.kind == AggKind::Count),
                    exact_len: false,
                    have_target,
                };
                f.validate(&types, &o).map_err(|e| err(*span, e))?;
            }
            // lquantize()/llquantize() parameters get dt_cc.c's checks at compile time,
            // not only when the consumer builds the aggregation.
            Action::AggUpdate { agg, .. } => {
                let a = &prog.aggs[*agg];
                let checked = match (a.kind, a.params.as_slice()) {
                    (AggKind::Lquantize, &[base, limit, step]) => {
                        crate::agg::AggFunc::lquantize(base, limit, Some(step)).map(drop)
                    }
                    (AggKind::Llquantize, &[f, lo, hi, n]) => crate::agg::AggFunc::llquantize([f, lo, hi, n]).map(drop),
                    _ => Ok(()),
                };
                checked.map_err(|e| CompileError::new(e.0, a.span, e.1))?;
            }
            Action::If { then, otherwise, .. } => {
                validate_actions(prog, then, have_target)?;
                validate_actions(prog, otherwise, have_target)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A value's printable form for `%a`-less contexts: the aggregation value of one
/// entry, for callers that need it outside printa.
pub fn agg_value<'a>(agg: &'a Aggregation, key: &[Value]) -> Option<AggValue<'a>> {
    agg.get(key).map(|state| AggValue { state, normal: agg.normal })
}
