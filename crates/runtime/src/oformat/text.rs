//! `-x oformat=text`, the default: dtrace's own output, byte for byte (the layouts
//! are in `format/` and `output.rs`; this file only routes the consumer's records
//! there).

use std::io::{self, Write};

use udtrace_lang::types::{Type, TypeTable};

use super::{Drop, RecordFormat, Symbolize};
use crate::agg::Aggregation;
use crate::consumer::{Probe, Settings};
use crate::context::Context;
use crate::format::flow::{self, FlowIndent, FlowRecord};
use crate::output::{self, FormatCache};
use crate::value::Value;

pub struct Text;

impl RecordFormat for Text {
    fn begin(&self, buf: &mut Vec<u8>, cpu: u32, probe: &Probe, _ctx: &dyn Context, s: &Settings) -> bool {
        // dtrace(1M) prints the prefix before the record's data, with the quiet
        // setting of that moment.
        if s.quiet {
            return false;
        }
        output::probe_prefix(buf, cpu, probe, s);
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn begin_flow(
        &self,
        buf: &mut Vec<u8>,
        _probe: &Probe,
        r: &FlowRecord,
        flow: &mut FlowIndent,
        _ctx: &dyn Context,
        s: &Settings,
    ) -> bool {
        // chew() prints the indented prefix whether quiet or not.
        flow.prefix(buf, r, s.testing);
        true
    }

    fn end(&self, buf: &mut Vec<u8>, s: &Settings) {
        if !s.quiet {
            buf.push(b'\n');
        }
    }

    fn header(&self, s: &Settings) -> &'static str {
        match (s.flowindent, s.testing) {
            (true, false) => flow::HEADER,
            (true, true) => flow::TESTING_HEADER,
            (false, testing) => output::header(testing),
        }
    }

    fn inline_deferred(&self) -> bool {
        true
    }

    fn trace(&self, buf: &mut Vec<u8>, v: &Value, s: &Settings) {
        output::trace_value(buf, v, s);
    }

    fn printf(&self, buf: &mut Vec<u8>, f: &FormatCache, fmt: &str, args: &[Value], s: &Settings, sym: Symbolize) {
        f.printf_into(buf, fmt, args, s, sym);
    }

    fn printa(
        &self,
        buf: &mut Vec<u8>,
        f: &FormatCache,
        fmt: Option<&str>,
        aggs: &[&Aggregation],
        s: &Settings,
        sym: Symbolize,
    ) {
        buf.extend_from_slice(&f.printa(fmt, aggs, s, sym));
    }

    fn print(&self, buf: &mut Vec<u8>, addr: u64, ty: &Type, data: &[u8], types: &TypeTable) {
        crate::format::print_type::print_type(buf, addr, ty, data, types);
    }

    fn tracemem(&self, buf: &mut Vec<u8>, data: &[u8]) {
        output::tracemem(buf, data);
    }

    fn symbol(&self, buf: &mut Vec<u8>, v: &Value, _ty: &Type) {
        output::symbol(buf, v);
    }

    fn stack(&self, buf: &mut Vec<u8>, v: &Value, _user: bool, s: &Settings) {
        output::trace_value(buf, v, s);
    }

    fn exit(&self, _buf: &mut Vec<u8>, _status: i32) {}

    fn finish(&self, out: &mut dyn Write, f: &FormatCache, aggs: &[&Aggregation], s: &Settings) -> io::Result<()> {
        out.write_all(b"\n")?;
        out.write_all(&f.print_all(aggs, s))
    }

    fn drop_object(&self, _out: &mut Vec<u8>, _d: &Drop) {}

    fn error(&self, _out: &mut Vec<u8>, _msg: &str) {}
}
