//! `-x oformat=json`: one JSON object a line (docs/json.md, the schema in
//! docs/udtrace-output.schema.json). Names and structure follow FreeBSD dtrace(1)'s
//! STRUCTURED OUTPUT where it defines them (a probe's `timestamp`, `cpu`, `id`,
//! `provider`, `module`, `function`, `name` and `output`; `value`, `message`,
//! `aggregation-name`, `aggregation-data`, `keys`, `buckets`, `stack-frames`,
//! `ustack-frames`; the DROP pseudo-probe), but each object is a line of its own with
//! a `type`, rather than one document, so a reader can follow a run as it goes.
//!
//! D strings are bytes: valid UTF-8 is written as it is (control characters, `"`
//! and `\` escaped), and each byte that is not part of valid UTF-8 as the lone
//! surrogate `\udcXX` (XX the byte), as Python's `surrogateescape` does: lossless,
//! and no such escape comes from valid UTF-8.

use std::io::{self, Write};

use udtrace_lang::ir::Builtin;
use udtrace_lang::types::{Type, TypeTable};

use super::{Drop, RecordFormat, Symbolize};
use crate::agg::{AggState, Aggregation};
use crate::consumer::{Probe, Settings};
use crate::context::Context;
use crate::format::aggregation::sorted_entries;
use crate::format::quantize::{dist_rows, ll_div_u64};
use crate::output::FormatCache;
use crate::value::Value;

pub struct Json;

/// Starts an item of a record's `output` list (a comma unless it is the first).
fn item(buf: &mut Vec<u8>) {
    if buf.last() != Some(&b'[') {
        buf.push(b',');
    }
}

/// A JSON string of D bytes (see the module's comment for bytes that are not UTF-8).
pub fn string(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.push(b'"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => buf.extend_from_slice(b"\\\""),
                '\\' => buf.extend_from_slice(b"\\\\"),
                '\n' => buf.extend_from_slice(b"\\n"),
                '\t' => buf.extend_from_slice(b"\\t"),
                '\r' => buf.extend_from_slice(b"\\r"),
                c if (c as u32) < 0x20 => buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
                c => {
                    let mut b = [0; 4];
                    buf.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        for &b in chunk.invalid() {
            buf.extend_from_slice(format!("\\udc{b:02x}").as_bytes());
        }
    }
    buf.push(b'"');
}

/// A JSON array of `items`, each written by `each`.
fn array<T>(buf: &mut Vec<u8>, items: impl IntoIterator<Item = T>, mut each: impl FnMut(&mut Vec<u8>, T)) {
    buf.push(b'[');
    for (i, x) in items.into_iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        each(buf, x);
    }
    buf.push(b']');
}

fn key(buf: &mut Vec<u8>, k: &str) {
    string(buf, k.as_bytes());
    buf.push(b':');
}

fn num(buf: &mut Vec<u8>, n: impl std::fmt::Display) {
    buf.extend_from_slice(n.to_string().as_bytes());
}

/// One frame of a symbolized stack (`module`name+0xoff`, `module`name`, or an
/// address): `symbol` always, `module`, `name` and `offset` where the text has them.
fn frame(buf: &mut Vec<u8>, f: &str) {
    buf.push(b'{');
    key(buf, "symbol");
    string(buf, f.as_bytes());
    if let Some((module, rest)) = f.split_once('`') {
        buf.push(b',');
        key(buf, "module");
        string(buf, module.as_bytes());
        let (name, offset) = match rest.rsplit_once("+0x") {
            Some((n, o)) if !o.is_empty() && o.bytes().all(|c| c.is_ascii_hexdigit()) => (n, Some(o)),
            _ => (rest, None),
        };
        buf.push(b',');
        key(buf, "name");
        string(buf, name.as_bytes());
        if let Some(o) = offset {
            buf.push(b',');
            key(buf, "offset");
            string(buf, format!("0x{o}").as_bytes());
        }
    }
    buf.push(b'}');
}

fn frames(buf: &mut Vec<u8>, list: &str, frames: &[String]) {
    buf.push(b'{');
    key(buf, list);
    array(buf, frames, |buf, f| frame(buf, f));
    buf.push(b'}');
}

/// A recorded value: an integer as a number (by its D type's signedness), a string as
/// a string (at most strsize bytes), raw memory as `{"bytes": hex}`, a stack as
/// `{"stack-frames": [...]}`.
fn value(buf: &mut Vec<u8>, v: &Value, strsize: usize) {
    match v {
        Value::Int(i) if i.signed => num(buf, i.bits as i64),
        Value::Int(i) => num(buf, i.bits),
        Value::Str(s) => string(buf, &s[..s.len().min(strsize)]),
        Value::Bytes(b) => {
            buf.push(b'{');
            key(buf, "bytes");
            string(buf, hex(b).as_bytes());
            buf.push(b'}');
        }
        Value::Stack(f) => frames(buf, "stack-frames", f),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `{"aggregation-name": …, "aggregation-data": [{"keys": […], "count": n}, …]}`,
/// entries in dtrace's order, values normalized; a distribution's entry has
/// `buckets`, the rows dtrace prints: `value` and `count`, and the text `label`
/// where the row's label is no plain number ("< 0", ">= 10").
fn aggregation(buf: &mut Vec<u8>, agg: &Aggregation, s: &Settings) {
    key(buf, "aggregation-name");
    string(buf, agg.name.as_bytes());
    buf.push(b',');
    key(buf, "aggregation-data");
    let n = agg.normal;
    array(buf, sorted_entries(agg, &s.sort), |buf, (keys, st)| {
        buf.push(b'{');
        key(buf, "keys");
        array(buf, keys.iter(), |buf, k| value(buf, k, s.strsize));
        buf.push(b',');
        match *st {
            AggState::Count(v) => scalar(buf, "count", ll_div_u64(v, n)),
            AggState::Sum(v) => scalar(buf, "sum", ll_div_u64(v, n)),
            AggState::Min(v) => scalar(buf, "min", ll_div_u64(v, n)),
            AggState::Max(v) => scalar(buf, "max", ll_div_u64(v, n)),
            AggState::Avg { count, sum } => scalar(buf, "avg", AggState::avg(count, sum, n)),
            AggState::Stddev { count, sum, sumsq } => {
                key(buf, "stddev");
                num(buf, AggState::stddev(count, sum, sumsq, n));
            }
            _ => buckets(buf, st, n),
        }
        buf.push(b'}');
    });
}

fn scalar(buf: &mut Vec<u8>, name: &str, v: i64) {
    key(buf, name);
    num(buf, v);
}

fn buckets(buf: &mut Vec<u8>, st: &AggState, normal: u64) {
    key(buf, "buckets");
    array(buf, dist_rows(st).map(|d| d.rows).unwrap_or_default(), |buf, (label, c)| {
        buf.push(b'{');
        // The number in the label: "-8", "< 0" (underflow), ">= 10" (overflow),
        // "abs() < 10" (llquantize's bucket around zero).
        let number = label.rsplit(' ').next().unwrap_or(&label);
        key(buf, "value");
        num(buf, number.parse::<i64>().unwrap_or(0));
        if number.len() != label.len() {
            buf.push(b',');
            key(buf, "label");
            string(buf, label.as_bytes());
        }
        buf.push(b',');
        key(buf, "count");
        num(buf, ll_div_u64(c, normal));
        buf.push(b'}');
    });
}

fn int_builtin(ctx: &dyn Context, b: Builtin) -> Option<u64> {
    match ctx.builtin(b) {
        Some(Value::Int(i)) => Some(i.bits),
        _ => None,
    }
}

impl RecordFormat for Json {
    fn begin(&self, buf: &mut Vec<u8>, cpu: u32, p: &Probe, ctx: &dyn Context, _s: &Settings) -> bool {
        buf.extend_from_slice(b"{\"type\":\"probe\",");
        if let Some(t) = int_builtin(ctx, Builtin::Timestamp) {
            scalar(buf, "timestamp", t as i64);
            buf.push(b',');
        }
        scalar(buf, "cpu", i64::from(cpu));
        buf.push(b',');
        scalar(buf, "id", i64::from(p.id));
        for (k, v) in [("provider", &p.provider), ("module", &p.module), ("function", &p.function), ("name", &p.name)] {
            buf.push(b',');
            key(buf, k);
            string(buf, v.as_bytes());
        }
        for (k, b) in [("pid", Builtin::Pid), ("tid", Builtin::Tid)] {
            if let Some(v) = int_builtin(ctx, b) {
                buf.push(b',');
                scalar(buf, k, v as i64);
            }
        }
        if let Some(Value::Str(e)) = ctx.builtin(Builtin::Execname) {
            buf.push(b',');
            key(buf, "execname");
            string(buf, &e);
        }
        buf.extend_from_slice(b",\"output\":[");
        false
    }

    fn end(&self, buf: &mut Vec<u8>, _s: &Settings) {
        buf.extend_from_slice(b"]}\n");
    }

    fn header(&self, _s: &Settings) -> &'static str {
        ""
    }

    fn inline_deferred(&self) -> bool {
        false
    }

    fn trace(&self, buf: &mut Vec<u8>, v: &Value, s: &Settings) {
        item(buf);
        buf.push(b'{');
        key(buf, "value");
        value(buf, v, s.strsize);
        buf.push(b'}');
    }

    fn printf(&self, buf: &mut Vec<u8>, f: &FormatCache, fmt: &str, args: &[Value], s: &Settings, sym: Symbolize) {
        let mut text = Vec::new();
        f.printf_into(&mut text, fmt, args, s, sym);
        item(buf);
        buf.push(b'{');
        key(buf, "message");
        string(buf, &text);
        buf.push(b',');
        key(buf, "args");
        array(buf, args, |buf, a| value(buf, a, s.strsize));
        buf.push(b'}');
    }

    fn printa(
        &self,
        buf: &mut Vec<u8>,
        _f: &FormatCache,
        _fmt: Option<&str>,
        aggs: &[&Aggregation],
        s: &Settings,
        _sym: Symbolize,
    ) {
        for a in aggs {
            item(buf);
            buf.push(b'{');
            aggregation(buf, a, s);
            buf.push(b'}');
        }
    }

    fn print(&self, buf: &mut Vec<u8>, addr: u64, ty: &Type, data: &[u8], types: &TypeTable) {
        let mut text = Vec::new();
        crate::format::print_type::print_type(&mut text, addr, ty, data, types);
        item(buf);
        buf.push(b'{');
        key(buf, "print");
        string(buf, &text);
        buf.push(b',');
        key(buf, "type-name");
        string(buf, types.name(ty).as_bytes());
        buf.push(b'}');
    }

    fn tracemem(&self, buf: &mut Vec<u8>, data: &[u8]) {
        item(buf);
        buf.push(b'{');
        key(buf, "tracemem");
        string(buf, hex(data).as_bytes());
        buf.push(b'}');
    }

    fn symbol(&self, buf: &mut Vec<u8>, v: &Value, ty: &Type) {
        let name = match ty {
            Type::Symbol { user: true, kind } => format!("u{kind}"),
            Type::Symbol { user: false, kind } => kind.to_string(),
            _ => "sym".to_string(),
        };
        item(buf);
        buf.push(b'{');
        key(buf, &name);
        match v {
            Value::Int(i) => string(buf, format!("0x{:x}", i.bits).as_bytes()),
            Value::Str(s) | Value::Bytes(s) => string(buf, s),
            Value::Stack(_) => string(buf, b""),
        }
        buf.push(b'}');
    }

    fn stack(&self, buf: &mut Vec<u8>, v: &Value, user: bool, _s: &Settings) {
        let Value::Stack(f) = v else { return };
        item(buf);
        frames(buf, if user { "ustack-frames" } else { "stack-frames" }, f);
    }

    fn exit(&self, buf: &mut Vec<u8>, status: i32) {
        item(buf);
        buf.push(b'{');
        scalar(buf, "exit", i64::from(status));
        buf.push(b'}');
    }

    fn finish(&self, out: &mut dyn Write, _f: &FormatCache, aggs: &[&Aggregation], s: &Settings) -> io::Result<()> {
        // As text: the aggregations printa() did not print, in declaration order
        // (reversed with aggsortrev); an empty one prints nothing there, nor here.
        let mut order: Vec<&&Aggregation> = aggs.iter().filter(|a| !a.printed && !a.is_empty()).collect();
        if s.sort.rev {
            order.reverse();
        }
        let mut buf = Vec::new();
        for a in order {
            buf.extend_from_slice(b"{\"type\":\"aggregation\",");
            aggregation(&mut buf, a, s);
            buf.extend_from_slice(b"}\n");
        }
        out.write_all(&buf)
    }

    fn drop_object(&self, out: &mut Vec<u8>, d: &Drop) {
        // FreeBSD's DROP pseudo-probe.
        out.extend_from_slice(b"{\"type\":\"drop\",\"cpu\":");
        num(out, d.cpu.map_or(-1, i64::from));
        out.extend_from_slice(
            b",\"id\":-1,\"provider\":\"dtrace\",\"module\":\"INTERNAL\",\"function\":\"INTERNAL\",\"name\":\"DROP\",",
        );
        scalar(out, "count", d.count as i64);
        out.push(b',');
        key(out, "kind");
        string(out, d.kind.as_bytes());
        out.push(b',');
        key(out, "msg");
        string(out, d.msg.as_bytes());
        out.extend_from_slice(b"}\n");
    }

    fn error(&self, out: &mut Vec<u8>, msg: &str) {
        out.extend_from_slice(b"{\"type\":\"error\",");
        key(out, "msg");
        string(out, msg.as_bytes());
        out.extend_from_slice(b"}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(bytes: &[u8]) -> String {
        let mut b = Vec::new();
        string(&mut b, bytes);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn strings_escape_controls_and_bytes_that_are_not_utf8() {
        assert_eq!(s(b"a\"b\\c\n\x01"), r#""a\"b\\c\n\u0001""#);
        assert_eq!(s("é→".as_bytes()), "\"é→\"");
        // A lone byte of a sequence, then a byte that never starts one.
        assert_eq!(s(b"x\xc3y\xff"), r#""x\udcc3y\udcff""#);
    }

    #[test]
    fn frames_split_module_name_offset() {
        let mut b = Vec::new();
        frames(&mut b, "ustack-frames", &["probes`chain_b+0x9".into(), "probes`main".into(), "0x7f00".into()]);
        assert_eq!(
            String::from_utf8(b).unwrap(),
            concat!(
                r#"{"ustack-frames":[{"symbol":"probes`chain_b+0x9","module":"probes","name":"chain_b","offset":"0x9"},"#,
                r#"{"symbol":"probes`main","module":"probes","name":"main"},{"symbol":"0x7f00"}]}"#
            )
        );
    }
}
