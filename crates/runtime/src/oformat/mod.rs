//! The output formats (`-x oformat=`): what the consumer writes a record, an
//! aggregation, a drop or an error as. Each format is one file behind
//! [`RecordFormat`]: [`text`] is dtrace's output (the default), [`json`] one JSON
//! object a line (docs/json.md). The consumer decides what a clause records and when;
//! the format decides only how it looks.

use std::io::{self, Write};

use udtrace_lang::types::{Type, TypeTable};

use crate::agg::Aggregation;
use crate::consumer::{Probe, Settings};
use crate::context::Context;
use crate::format::flow::{FlowIndent, FlowRecord};
use crate::output::FormatCache;
use crate::value::Value;

pub mod json;
pub mod text;

/// `%a`/`%A` symbolization for printf and printa: (address, user?) to a symbol.
pub type Symbolize<'a> = &'a dyn Fn(u64, bool) -> Option<String>;

/// A drop, as dtrace's status handling reports it: `kind` is its DTRACEDROP_ tag
/// without the prefix (`PRINCIPAL`, `AGGREGATION`, `DYNAMIC`, `SPEC`, …), `cpu` the
/// CPU where it is counted per CPU, `msg` dtrace's words.
pub struct Drop<'a> {
    pub kind: &'a str,
    pub cpu: Option<u32>,
    pub count: u64,
    pub msg: &'a str,
}

/// How records look. A record is built in a buffer (`buf`) between [`begin`] and
/// [`end`], then written whole (or kept by a speculation); aggregations at exit,
/// drops and errors are written on their own.
///
/// [`begin`]: RecordFormat::begin
/// [`end`]: RecordFormat::end
pub trait RecordFormat {
    /// Opens a clause's record for a firing of `probe` on `cpu` (`ctx` gives the
    /// firing's timestamp and process). Returns whether the record needs the column
    /// header printed before the first one (text's probe line).
    fn begin(&self, buf: &mut Vec<u8>, cpu: u32, probe: &Probe, ctx: &dyn Context, s: &Settings) -> bool;
    /// Opens a record with `-F` on: text indents calls ([`crate::format::flow`]),
    /// quiet or not; other formats open it as [`RecordFormat::begin`] does.
    #[allow(clippy::too_many_arguments)]
    fn begin_flow(
        &self,
        buf: &mut Vec<u8>,
        probe: &Probe,
        r: &FlowRecord,
        flow: &mut FlowIndent,
        ctx: &dyn Context,
        s: &Settings,
    ) -> bool {
        let _ = flow;
        self.begin(buf, r.cpu, probe, ctx, s)
    }
    /// Closes the record.
    fn end(&self, buf: &mut Vec<u8>, s: &Settings);
    /// The column header before the first record with a probe line.
    fn header(&self, s: &Settings) -> &'static str;
    /// Whether system(), freopen() and ftruncate() take effect where they are in the
    /// record (text) or after it (a format whose record is one object).
    fn inline_deferred(&self) -> bool;

    fn trace(&self, buf: &mut Vec<u8>, v: &Value, s: &Settings);
    fn printf(&self, buf: &mut Vec<u8>, f: &FormatCache, fmt: &str, args: &[Value], s: &Settings, sym: Symbolize);
    #[allow(clippy::too_many_arguments)]
    fn printa(
        &self,
        buf: &mut Vec<u8>,
        f: &FormatCache,
        fmt: Option<&str>,
        aggs: &[&Aggregation],
        s: &Settings,
        sym: Symbolize,
    );
    fn print(&self, buf: &mut Vec<u8>, addr: u64, ty: &Type, data: &[u8], types: &TypeTable);
    fn tracemem(&self, buf: &mut Vec<u8>, data: &[u8]);
    /// usym(), ufunc(), umod(), uaddr() (and sym()…): `ty` is the action's type.
    fn symbol(&self, buf: &mut Vec<u8>, v: &Value, ty: &Type);
    /// stack() or ustack(): `v` is the symbolized stack.
    fn stack(&self, buf: &mut Vec<u8>, v: &Value, user: bool, s: &Settings);
    /// exit(status).
    fn exit(&self, buf: &mut Vec<u8>, status: i32);

    /// What is printed when tracing ends: the aggregations not printed by printa().
    fn finish(&self, out: &mut dyn Write, f: &FormatCache, aggs: &[&Aggregation], s: &Settings) -> io::Result<()>;
    /// A drop as its own object (text: nothing; dtrace's words go to stderr).
    fn drop_object(&self, out: &mut Vec<u8>, d: &Drop);
    /// An error of a clause as its own object (text: nothing; the message goes to
    /// stderr).
    fn error(&self, out: &mut Vec<u8>, msg: &str);
}

/// The format `-x oformat=` chose.
pub fn for_settings(s: &Settings) -> Box<dyn RecordFormat> {
    if s.json {
        Box::new(json::Json)
    } else {
        Box::new(text::Text)
    }
}
