//! The default (non `-q`) record output and trace()/tracemem() datum printing.
//!
//! Facts from illumos: `cmd/dtrace/dtrace.c` (chew: header "%3s %6s %32s\n",
//! prefix "%3d %6d %32s ", newline after each record unless quiet) and
//! `libdtrace/dt_consume.c` (dt_consume_cpu's per-size integer formats,
//! dt_print_bytes, dt_print_stack with the default stackindent of 14).

use crate::value::Value;

/// The column header printed before the first record unless quiet.
pub const HEADER: &str = "CPU     ID                    FUNCTION:NAME\n";

/// The header in dtrace's testing mode: "%32s\n".
pub const TESTING_HEADER: &str = "                   FUNCTION:NAME\n";

/// Default `stackindent` (libdtrace's _dtrace_stkindent).
pub const STACK_INDENT: usize = 14;

/// DTRACE_FUNCNAMELEN + DTRACE_NAMELEN + 1: chew() snprintf()s FUNCTION:NAME into a
/// buffer of this many characters plus the NUL.
const FUNC_NAME_MAX: usize = 128 + 64 + 1;

/// Options that change how data prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceOpts {
    pub quiet: bool,
    /// The strsize option: string records are this long, NUL padded.
    pub strsize: usize,
    pub stackindent: usize,
    /// The rawbytes option: always dump byte records in hex.
    pub rawbytes: bool,
}

impl Default for TraceOpts {
    fn default() -> Self {
        TraceOpts { quiet: false, strsize: 256, stackindent: STACK_INDENT, rawbytes: false }
    }
}

/// A record's prefix: "  0      1                           :BEGIN ".
pub fn record_prefix(out: &mut Vec<u8>, cpu: u32, probe_id: u32, func: &str, name: &str) {
    let mut fname = format!("{func}:{name}").into_bytes();
    fname.truncate(FUNC_NAME_MAX);
    out.extend_from_slice(format!("{cpu:>3} {probe_id:>6} ").as_bytes());
    out.resize(out.len() + 32usize.saturating_sub(fname.len()), b' ');
    out.extend_from_slice(&fname);
    out.push(b' ');
}

/// A record's prefix in dtrace's testing mode: FUNCTION:NAME only ("%32s ").
pub fn testing_prefix(out: &mut Vec<u8>, func: &str, name: &str) {
    let mut fname = format!("{func}:{name}").into_bytes();
    fname.truncate(FUNC_NAME_MAX);
    out.resize(out.len() + 32usize.saturating_sub(fname.len()), b' ');
    out.extend_from_slice(&fname);
    out.push(b' ');
}

/// What ends a record: a newline unless quiet.
pub fn record_end(out: &mut Vec<u8>, quiet: bool) {
    if !quiet {
        out.push(b'\n');
    }
}

/// A key as plain text (a folded line's frame): integers in decimal, strings as they
/// are.
pub fn datum_text(v: &Value) -> String {
    match v {
        Value::Int(i) if i.signed => i.as_i64().to_string(),
        Value::Int(i) => i.bits.to_string(),
        Value::Str(s) | Value::Bytes(s) => String::from_utf8_lossy(s).trim_end_matches('\0').to_string(),
        Value::Stack(f) => f.join(";"),
    }
}

/// The usym()/ufunc()/umod()/uaddr() (and kernel sym()…) actions: the symbol, or the
/// address in hex where none is known, left-aligned in 50 columns after two spaces
/// (dt_consume.c's "  %-50s").
pub fn symbol(out: &mut Vec<u8>, v: &Value) {
    let text = match v {
        Value::Int(i) => format!("0x{:x}", i.bits),
        Value::Str(s) | Value::Bytes(s) => String::from_utf8_lossy(s).into_owned(),
        Value::Stack(_) => String::new(),
    };
    out.extend_from_slice(format!("  {text:<50}").as_bytes());
}

/// trace(): one datum as Oracle's dt_print_trace prints it. Integers print by the
/// size and signedness of their D type ("%d"-like when quiet, right-aligned in 3, 5,
/// 10 and 19 (signed) or 20 (unsigned 64-bit) columns otherwise); strings as text;
/// structs, unions and arrays (char arrays too) as a hex dump.
pub fn trace_value(out: &mut Vec<u8>, v: &Value, o: &TraceOpts) {
    match v {
        Value::Int(i) if o.rawbytes => raw_dump(out, &i.bits.to_ne_bytes()[..usize::from(i.size).min(8)]),
        Value::Int(i) => trace_int(out, i, o.quiet),
        Value::Str(s) if o.rawbytes => {
            // The record is strsize + 1 bytes: the string, then NULs.
            let mut rec = s[..s.len().min(o.strsize)].to_vec();
            rec.resize(o.strsize + 1, 0);
            raw_dump(out, &rec);
        }
        Value::Str(s) => {
            let s = &s[..s.len().min(o.strsize)];
            if o.quiet {
                out.extend_from_slice(s);
            } else {
                out.extend_from_slice(b"  ");
                out.extend_from_slice(s);
                out.resize(out.len() + 33usize.saturating_sub(s.len()), b' ');
            }
        }
        Value::Bytes(b) => raw_dump(out, b),
        Value::Stack(_) => print_datum(out, v, -33, o.quiet, o),
    }
}

fn trace_int(out: &mut Vec<u8>, i: &crate::value::Int, quiet: bool) {
    let text = if i.signed {
        match i.size {
            1 => (i.bits as i8).to_string(),
            2 => (i.bits as i16).to_string(),
            4 => (i.bits as i32).to_string(),
            _ => (i.bits as i64).to_string(),
        }
    } else {
        match i.size {
            1 => (i.bits as u8).to_string(),
            2 => (i.bits as u16).to_string(),
            4 => (i.bits as u32).to_string(),
            _ => i.bits.to_string(),
        }
    };
    if quiet {
        out.extend_from_slice(text.as_bytes());
        return;
    }
    let width = match (i.size, i.signed) {
        (1, _) => 3,
        (2, _) => 5,
        (4, _) => 10,
        (_, true) => 19,
        _ => 20,
    };
    out.extend_from_slice(format!(" {text:>width$}").as_bytes());
}

/// tracemem(): always a hex dump.
pub fn tracemem(out: &mut Vec<u8>, bytes: &[u8]) {
    raw_dump(out, bytes);
}

/// The integer as DTrace reads it back from a record of its size: 8 bytes signed,
/// 4 bytes as int, 2 and 1 bytes zero-extended (the record is read unsigned).
pub fn int_by_size(v: &Value) -> Option<i64> {
    let Value::Int(i) = v else { return None };
    Some(match i.size {
        1 => i64::from(i.bits as u8),
        2 => i64::from(i.bits as u16),
        4 => i64::from(i.bits as u32 as i32),
        _ => i.bits as i64,
    })
}

/// dt_print_datum for a non-aggregation record in non-quiet layout: integers
/// right-aligned in 3/5/8/16 columns by size, stacks on their own lines, and
/// anything else through dt_print_bytes with `width` (-33 for trace(), -50 for
/// aggregation keys).
pub fn print_datum(out: &mut Vec<u8>, v: &Value, width: i32, quiet: bool, o: &TraceOpts) {
    match v {
        Value::Int(i) => {
            let w = match i.size {
                1 => 3,
                2 => 5,
                4 => 8,
                _ => 16,
            };
            let n = int_by_size(v).unwrap_or(0);
            out.extend_from_slice(format!(" {n:>w$}").as_bytes());
        }
        Value::Stack(frames) => {
            super::printf::print_stack(out, frames, o.stackindent, |o, f| o.extend_from_slice(f.as_bytes()))
        }
        Value::Str(s) => {
            // A string record is strsize bytes: the string, then NUL padding.
            let n = s.len().min(o.strsize);
            print_bytes(out, &s[..n], n < o.strsize, o.strsize - n, width, quiet, o.rawbytes);
        }
        Value::Bytes(b) => {
            let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
            let n = b.len();
            // Trailing NULs are the "terminating byte" dt_print_bytes looks for.
            let (body, nul) = if end < n { (&b[..end], true) } else { (&b[..], false) };
            print_bytes(out, body, nul, n - end, width, quiet, o.rawbytes);
        }
    }
}

/// isprint, isspace, or the two printable control characters \b and \a.
fn printable(c: u8) -> bool {
    (0x20..=0x7e).contains(&c) || matches!(c, b'\t' | b'\n' | 11 | 12 | b'\r' | 8 | 7)
}

/// dt_print_bytes on a record made of `body`, then (if `nul`) `pad` NUL bytes:
/// printable text ending in NULs prints as a string, everything else as hex.
fn print_bytes(out: &mut Vec<u8>, body: &[u8], nul: bool, pad: usize, width: i32, quiet: bool, raw: bool) {
    let all = || {
        let mut v = body.to_vec();
        v.resize(body.len() + pad, 0);
        v
    };
    if body.is_empty() && pad == 0 {
        return;
    }
    if raw || !body.iter().all(|&c| printable(c)) || (nul && body.is_empty()) {
        raw_dump(out, &all());
        return;
    }
    let w = width.unsigned_abs() as usize;
    if !nul {
        // All printable with no terminator: "  %-*s".
        out.extend_from_slice(b"  ");
        out.extend_from_slice(body);
        out.resize(out.len() + w.saturating_sub(body.len()), b' ');
    } else if quiet {
        out.extend_from_slice(body);
    } else if width < 0 {
        out.extend_from_slice(b"  ");
        out.extend_from_slice(body);
        out.resize(out.len() + w.saturating_sub(body.len()), b' ');
    } else {
        out.push(b' ');
        out.resize(out.len() + w.saturating_sub(body.len()), b' ');
        out.extend_from_slice(body);
    }
}

/// The hex and ASCII dump: a column header, then 16 bytes a row.
fn raw_dump(out: &mut Vec<u8>, b: &[u8]) {
    if b.is_empty() {
        return;
    }
    out.extend_from_slice(b"\n           ");
    for d in "0123456789abcdef".chars() {
        out.extend_from_slice(format!("  {d}").as_bytes());
    }
    out.extend_from_slice(b"  0123456789abcdef\n");
    for (row, chunk) in b.chunks(16).enumerate() {
        out.extend_from_slice(format!("     {:5x}:", row * 16).as_bytes());
        for c in chunk {
            out.extend_from_slice(format!(" {c:02x}").as_bytes());
        }
        out.resize(out.len() + 3 * (16 - chunk.len()), b' ');
        out.extend_from_slice(b"  ");
        out.extend(chunk.iter().map(|&c| if (b' '..=b'~').contains(&c) { c } else { b'.' }));
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Int;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut o = Vec::new();
        f(&mut o);
        String::from_utf8(o).unwrap()
    }

    fn int(bits: u64, size: u8, signed: bool) -> Value {
        Value::Int(Int { bits, size, signed })
    }

    #[test]
    fn header_and_prefix() {
        assert_eq!(HEADER, "CPU     ID                    FUNCTION:NAME\n");
        assert_eq!(TESTING_HEADER, format!("{:>32}\n", "FUNCTION:NAME"));
        let mut out = Vec::new();
        testing_prefix(&mut out, "", "BEGIN");
        assert_eq!(out, format!("{:>32} ", ":BEGIN").into_bytes());
        assert_eq!(s(|o| record_prefix(o, 0, 1, "", "BEGIN")), "  0      1                           :BEGIN ");
        assert_eq!(
            s(|o| record_prefix(o, 3, 75432, "malloc", "entry")),
            "  3  75432                     malloc:entry "
        );
        let long = "f".repeat(40);
        assert_eq!(s(|o| record_prefix(o, 12, 7, &long, "return")), format!(" 12      7 {long}:return "));
    }

    #[test]
    fn trace_integers_by_type() {
        let d = TraceOpts::default();
        let q = TraceOpts { quiet: true, ..d };
        assert_eq!(s(|o| trace_value(o, &Value::int(-5), &d)), format!(" {:>19}", -5));
        assert_eq!(s(|o| trace_value(o, &int(u64::MAX, 8, false), &d)), " 18446744073709551615");
        assert_eq!(s(|o| trace_value(o, &int(u32::MAX as u64, 4, false), &d)), " 4294967295");
        assert_eq!(s(|o| trace_value(o, &int(-1i64 as u64, 4, true), &d)), format!(" {:>10}", -1));
        assert_eq!(s(|o| trace_value(o, &int(-1i64 as u64, 2, true), &d)), "    -1");
        assert_eq!(s(|o| trace_value(o, &int(0xffff, 2, false), &d)), " 65535");
        assert_eq!(s(|o| trace_value(o, &int(-1i64 as u64, 1, true), &d)), "  -1");
        assert_eq!(s(|o| trace_value(o, &Value::int(-5), &q)), "-5");
        assert_eq!(s(|o| trace_value(o, &int(-1i64 as u64, 1, true), &q)), "-1");
        assert_eq!(s(|o| trace_value(o, &int(0xff, 1, false), &q)), "255");
    }

    #[test]
    fn trace_strings() {
        let d = TraceOpts::default();
        let q = TraceOpts { quiet: true, ..d };
        assert_eq!(s(|o| trace_value(o, &Value::str("hello"), &d)), format!("  {:<33}", "hello"));
        assert_eq!(s(|o| trace_value(o, &Value::str("hello"), &q)), "hello");
        assert_eq!(s(|o| trace_value(o, &Value::str(""), &d)), format!("  {:<33}", ""));
        // Strings are cut at strsize.
        let small = TraceOpts { strsize: 3, ..q };
        assert_eq!(s(|o| trace_value(o, &Value::str("hello"), &small)), "hel");
    }

    #[test]
    fn trace_struct_bytes_as_hex() {
        assert_eq!(
            s(|o| trace_value(o, &Value::Bytes(b"4".to_vec()), &TraceOpts::default())),
            "\n             0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f  0123456789abcdef\n         0: 34                                               4\n"
        );
    }

    #[test]
    fn tracemem_dump() {
        let bytes: Vec<u8> = (0x41..0x41 + 20).collect();
        assert_eq!(
            s(|o| tracemem(o, &bytes)),
            "\n             0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f  0123456789abcdef\n         0: 41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f 50  ABCDEFGHIJKLMNOP\n        10: 51 52 53 54                                      QRST\n"
        );
    }

    #[test]
    fn stacks_indent() {
        let st = Value::Stack(vec!["a.out`main+0x1".into(), "libc.so.6`__libc_start_main+0x80".into()]);
        assert_eq!(
            s(|o| trace_value(o, &st, &TraceOpts::default())),
            "\n              a.out`main+0x1\n              libc.so.6`__libc_start_main+0x80\n"
        );
    }
}
