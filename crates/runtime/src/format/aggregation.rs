//! Printing aggregations: the default layout (at exit and for `printa(@a)`), the
//! joined layout of `printa(@a, @b)`, `printa(format, …)`, and DTrace's sort orders.
//!
//! Facts from illumos `libdtrace/dt_consume.c` (dt_print_aggs, dt_print_datum,
//! dt_print_average/stddev: " %16lld", key columns by size, strings "  %-50s") and
//! `libdtrace/dt_aggregate.c` (dt_aggregate_keycmp/valcmp/bundlecmp, the
//! aggsortkey/aggsortrev/aggsortpos/aggsortkeypos options, walk_joined zero fill).

use std::cmp::Ordering;

use super::printf::{format_into, AggValue, Format, FormatCtx, FormatError};
use super::quantize::{ll_div_u64, print_dist};
use super::trace::{print_datum, TraceOpts};
use crate::agg::{key_cmp, AggState, Aggregation};
use crate::value::Value;

/// The aggsort* options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SortOptions {
    /// aggsortkey: sort by key instead of value.
    pub key: bool,
    /// aggsortrev: reverse every comparison.
    pub rev: bool,
    /// aggsortpos: which aggregation of a multi-aggregation printa() sorts.
    pub pos: usize,
    /// aggsortkeypos: which key is compared first.
    pub keypos: usize,
}

/// Options for aggregation printing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AggPrintOpts {
    pub sort: SortOptions,
    /// strsize, stackindent and rawbytes apply to keys; `quiet` is ignored.
    pub trace: TraceOpts,
    /// `-x stackfmt=folded`: see [`print_folded`].
    pub folded: bool,
}

fn rev(o: Ordering, s: &SortOptions) -> Ordering {
    if s.rev {
        o.reverse()
    } else {
        o
    }
}

/// The entries of one aggregation in DTrace's default order: by value, ties by key
/// (or by key alone with aggsortkey), everything reversed with aggsortrev.
pub fn sorted_entries<'a>(agg: &'a Aggregation, s: &SortOptions) -> Vec<&'a (Vec<Value>, AggState)> {
    let mut v: Vec<_> = agg.entries().iter().collect();
    v.sort_by(|(ka, sa), (kb, sb)| {
        let o = if s.key {
            key_cmp(ka, kb, s.keypos)
        } else {
            sa.value_for_sort().cmp(&sb.value_for_sort()).then_with(|| key_cmp(ka, kb, s.keypos))
        };
        rev(o, s)
    });
    v
}

/// dt_print_datum for an aggregation's value, normalized.
fn print_value(out: &mut Vec<u8>, st: &AggState, normal: u64) {
    match *st {
        AggState::Count(v) | AggState::Sum(v) | AggState::Min(v) | AggState::Max(v) => {
            out.extend_from_slice(format!(" {:>16}", ll_div_u64(v, normal)).as_bytes())
        }
        AggState::Avg { count, sum } => {
            out.extend_from_slice(format!(" {:>16}", AggState::avg(count, sum, normal)).as_bytes())
        }
        AggState::Stddev { count, sum, sumsq } => {
            out.extend_from_slice(format!(" {:>16}", AggState::stddev(count, sum, sumsq, normal)).as_bytes())
        }
        _ => print_dist(out, st, normal),
    }
}

fn print_keys(out: &mut Vec<u8>, key: &[Value], o: &AggPrintOpts) {
    for k in key {
        print_datum(out, k, -50, false, &o.trace);
    }
}

/// One aggregation's entries in the default layout, sorted; no leading newline.
/// An unkeyed count prints as "                5\n" (guide: "  dtrace   …   1").
pub fn print_aggregation(agg: &Aggregation, o: &AggPrintOpts) -> Vec<u8> {
    let mut out = Vec::new();
    if o.folded && agg.entries().iter().all(|(_, st)| st.scalar().is_some()) {
        for (key, st) in sorted_entries(agg, &o.sort) {
            print_folded(&mut out, key, st.scalar().unwrap_or(0), agg.normal);
        }
        return out;
    }
    for (key, st) in sorted_entries(agg, &o.sort) {
        print_keys(&mut out, key, o);
        print_value(&mut out, st, agg.normal);
        // dt_print_aggs: with aggpercpu, each CPU's value on its own line.
        for (cpu, st) in agg.per_cpu(key).unwrap_or_default() {
            out.extend_from_slice(format!("\n    [CPU {cpu}]").as_bytes());
            print_value(&mut out, &st, agg.normal);
        }
        out.push(b'\n');
    }
    out
}

/// One entry folded, as flame graph tools read stacks (Brendan Gregg's
/// stackcollapse output): every key a frame, a stack's frames outermost first and
/// without their offsets (`libc.so.6`write+0x16` is `libc.so.6`write`), joined by
/// `;`, then a space and the value.
fn print_folded(out: &mut Vec<u8>, key: &[Value], value: i64, normal: u64) {
    let mut frames: Vec<String> = Vec::new();
    for k in key {
        match k {
            Value::Stack(stack) => frames.extend(stack.iter().rev().map(|f| match f.rsplit_once("+0x") {
                Some((func, off)) if off.bytes().all(|c| c.is_ascii_hexdigit()) => func.to_string(),
                _ => f.clone(),
            })),
            other => frames.push(super::trace::datum_text(other)),
        }
    }
    out.extend_from_slice(frames.join(";").as_bytes());
    out.extend_from_slice(format!(" {}\n", ll_div_u64(value, normal)).as_bytes());
}

/// `printa(@a)` without a format: a newline, then the entries.
pub fn printa(agg: &Aggregation, o: &AggPrintOpts) -> Vec<u8> {
    let mut out = vec![b'\n'];
    out.extend(print_aggregation(agg, o));
    out
}

/// What dtrace prints for aggregations at exit (dtrace_aggregate_print): every
/// aggregation not yet shown by printa(), in declaration order (reversed with
/// aggsortrev), entries sorted, with nothing between aggregations. dtrace(1)
/// itself prints one "\n" before this, whether or not there are aggregations.
pub fn print_all(aggs: &[&Aggregation], o: &AggPrintOpts) -> Vec<u8> {
    let mut order: Vec<&&Aggregation> = aggs.iter().filter(|a| !a.printed).collect();
    if o.sort.rev {
        order.reverse();
    }
    order.into_iter().flat_map(|a| print_aggregation(a, o)).collect()
}

/// One key of a multi-aggregation printa() with each aggregation's state for it
/// (zeroed data where an aggregation lacks the key, as walk_joined fills in).
struct Bundle<'a> {
    key: &'a [Value],
    states: Vec<(AggState, u64)>,
}

/// dtrace_aggregate_walk_joined: the union of keys, sorted by the values of the
/// aggregation at aggsortpos (then the following ones), ties by key.
fn bundles<'a>(aggs: &[&'a Aggregation], s: &SortOptions) -> Vec<Bundle<'a>> {
    let mut keys: Vec<&'a [Value]> = Vec::new();
    for a in aggs {
        for (k, _) in a.entries() {
            keys.push(k);
        }
    }
    keys.sort_by(|a, b| key_cmp(a, b, s.keypos));
    keys.dedup_by(|a, b| key_cmp(a, b, s.keypos) == Ordering::Equal);
    let mut out: Vec<Bundle> = keys
        .into_iter()
        .map(|key| Bundle {
            key,
            states: aggs
                .iter()
                .map(|a| {
                    let st = a.get(key).cloned().unwrap_or_else(|| AggState::zeroed(&a.func));
                    (st, a.normal)
                })
                .collect(),
        })
        .collect();
    let n = aggs.len();
    let pos = if s.pos >= n { 0 } else { s.pos };
    out.sort_by(|a, b| {
        let vals = || {
            (0..n)
                .map(|i| (i + pos) % n)
                .map(|i| a.states[i].0.value_for_sort().cmp(&b.states[i].0.value_for_sort()))
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        };
        let o = if s.key {
            key_cmp(a.key, b.key, s.keypos).then_with(vals)
        } else {
            vals().then_with(|| key_cmp(a.key, b.key, s.keypos))
        };
        rev(o, s)
    });
    out
}

/// `printa(@a, @b, …)` without a format: a newline, then per key the key columns
/// and each aggregation's value column.
pub fn printa_joined(aggs: &[&Aggregation], o: &AggPrintOpts) -> Vec<u8> {
    if aggs.len() == 1 {
        return printa(aggs[0], o);
    }
    let mut out = vec![b'\n'];
    for b in bundles(aggs, &o.sort) {
        print_keys(&mut out, b.key, o);
        for (st, normal) in &b.states {
            print_value(&mut out, st, *normal);
        }
        out.push(b'\n');
    }
    out
}

/// `printa(format, @a, …)`: each entry (or joined key) formatted with the keys as
/// the conversions' arguments and `%@` taking the aggregations' values in turn.
pub fn printa_fmt(
    fmt: &Format,
    aggs: &[&Aggregation],
    ctx: &FormatCtx,
    o: &AggPrintOpts,
) -> Result<Vec<u8>, FormatError> {
    let mut out = Vec::new();
    match aggs {
        [] => {}
        [a] => {
            for (key, st) in sorted_entries(a, &o.sort) {
                let v = [AggValue { state: st, normal: a.normal }];
                format_into(&mut out, fmt, key, &v, ctx)?;
            }
        }
        _ => {
            for b in bundles(aggs, &o.sort) {
                let v: Vec<AggValue> = b.states.iter().map(|(s, n)| AggValue { state: s, normal: *n }).collect();
                format_into(&mut out, fmt, b.key, &v, ctx)?;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::AggFunc;
    use crate::format::printf::parse_format;
    use crate::value::Int;

    fn agg(func: AggFunc, data: &[(&[Value], i64)]) -> Aggregation {
        let mut a = Aggregation::new("a", func);
        for (k, v) in data {
            a.update(k, *v, 1);
        }
        a
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    fn s(x: &str) -> Value {
        Value::str(x)
    }

    #[test]
    fn unkeyed_scalars() {
        let o = AggPrintOpts::default();
        let c = agg(AggFunc::Count, &[(&[], 0), (&[], 0), (&[], 0)]);
        assert_eq!(text(print_aggregation(&c, &o)), "                3\n");
        let sum = agg(AggFunc::Sum, &[(&[], -7), (&[], 2)]);
        assert_eq!(text(printa(&sum, &o)), "\n               -5\n");
        let avg = agg(AggFunc::Avg, &[(&[], 1), (&[], 2), (&[], 4)]);
        assert_eq!(text(print_aggregation(&avg, &o)), "                2\n");
        let min = agg(AggFunc::Min, &[(&[], 3), (&[], -9)]);
        let max = agg(AggFunc::Max, &[(&[], 3), (&[], -9)]);
        assert_eq!(text(print_aggregation(&min, &o)), "               -9\n");
        assert_eq!(text(print_aggregation(&max, &o)), "                3\n");
        let sd =
            agg(AggFunc::Stddev, &[(&[], 2), (&[], 4), (&[], 4), (&[], 4), (&[], 5), (&[], 5), (&[], 7), (&[], 9)]);
        assert_eq!(text(print_aggregation(&sd, &o)), "                2\n");
    }

    #[test]
    fn keyed_count_sorted_by_value() {
        // Layout of the guide's "@counts[execname] = count()" output.
        let c = agg(
            AggFunc::Count,
            &[
                (&[s("sed")], 0),
                (&[s("cat")], 0),
                (&[s("dtrace")], 0),
                (&[s("cat")], 0),
                (&[s("sed")], 0),
                (&[s("sed")], 0),
            ],
        );
        let want = format!("  {:<50} {:>16}\n  {:<50} {:>16}\n  {:<50} {:>16}\n", "dtrace", 1, "cat", 2, "sed", 3);
        assert_eq!(text(print_aggregation(&c, &AggPrintOpts::default())), want);
        let o = AggPrintOpts { sort: SortOptions { key: true, ..Default::default() }, ..Default::default() };
        let t = text(print_aggregation(&c, &o));
        assert!(t.starts_with("  cat "));
        let o = AggPrintOpts { sort: SortOptions { rev: true, ..Default::default() }, ..Default::default() };
        assert!(text(print_aggregation(&c, &o)).starts_with("  sed "));
    }

    #[test]
    fn integer_keys_by_size_and_ties() {
        let k = |v: i64, size: u8| Value::Int(Int { bits: v as u64, size, signed: true });
        let c = agg(AggFunc::Sum, &[(&[k(-1, 4)], 5), (&[k(1, 4)], 5), (&[k(7, 1)], 1)]);
        // Ties break on the key read as unsigned: 1 before -1 (0xffffffff).
        let want = format!(" {:>3} {:>16}\n {:>8} {:>16}\n {:>8} {:>16}\n", 7, 1, 1, 5, -1, 5);
        assert_eq!(text(print_aggregation(&c, &AggPrintOpts::default())), want);
        let two = agg(AggFunc::Count, &[(&[k(2, 2), Value::int(9)], 0)]);
        assert_eq!(text(print_aggregation(&two, &AggPrintOpts::default())), format!(" {:>5} {:>16} {:>16}\n", 2, 9, 1));
    }

    #[test]
    fn keypos_changes_key_order() {
        let c = agg(AggFunc::Count, &[(&[s("a"), s("z")], 0), (&[s("b"), s("y")], 0)]);
        let o = AggPrintOpts { sort: SortOptions { keypos: 1, ..Default::default() }, ..Default::default() };
        assert!(text(print_aggregation(&c, &o)).starts_with("  b "));
        assert!(text(print_aggregation(&c, &AggPrintOpts::default())).starts_with("  a "));
    }

    #[test]
    fn keyed_quantize() {
        let q = agg(AggFunc::Quantize, &[(&[s("bash")], 3)]);
        let t = text(print_aggregation(&q, &AggPrintOpts::default()));
        let want = format!(
            "  {:<50}\n           value  ------------- Distribution ------------- count    \n{:>16} |{:40} 0        \n{:>16} |{} 1        \n{:>16} |{:40} 0        \n\n",
            "bash", 1, "", 2, "@".repeat(40), 4, ""
        );
        assert_eq!(t, want);
    }

    #[test]
    fn normalized_values() {
        let mut c = agg(AggFunc::Sum, &[(&[s("x")], 1000)]);
        c.normalize(10).unwrap();
        assert_eq!(text(print_aggregation(&c, &AggPrintOpts::default())), format!("  {:<50} {:>16}\n", "x", 100));
        c.denormalize();
        assert!(text(print_aggregation(&c, &AggPrintOpts::default())).ends_with(" 1000\n"));
        let f = parse_format(b"%s %@d\n").unwrap();
        c.normalize(4).unwrap();
        let t = printa_fmt(&f, &[&c], &FormatCtx::default(), &AggPrintOpts::default()).unwrap();
        assert_eq!(text(t), "x 250\n");
    }

    #[test]
    fn print_all_skips_printed_and_keeps_order() {
        let a = agg(AggFunc::Count, &[(&[], 0)]);
        let mut b = agg(AggFunc::Sum, &[(&[], 5)]);
        let o = AggPrintOpts::default();
        assert_eq!(text(print_all(&[&a, &b], &o)), "                1\n                5\n");
        let r = AggPrintOpts { sort: SortOptions { rev: true, ..Default::default() }, ..o };
        assert_eq!(text(print_all(&[&a, &b], &r)), "                5\n                1\n");
        b.printed = true;
        assert_eq!(text(print_all(&[&a, &b], &o)), "                1\n");
    }

    #[test]
    fn printa_with_format() {
        let c = agg(AggFunc::Count, &[(&[s("read")], 0), (&[s("write")], 0), (&[s("write")], 0)]);
        let f = parse_format(b"%-20s %@d\n").unwrap();
        let t = printa_fmt(&f, &[&c], &FormatCtx::default(), &AggPrintOpts::default()).unwrap();
        assert_eq!(text(t), "read                 1\nwrite                2\n");
        let two = agg(AggFunc::Sum, &[(&[s("p"), Value::int(3)], 10), (&[s("q"), Value::int(1)], 2)]);
        let f = parse_format(b"%s:%d=%@u;").unwrap();
        let t = printa_fmt(&f, &[&two], &FormatCtx::default(), &AggPrintOpts::default()).unwrap();
        assert_eq!(text(t), "q:1=2;p:3=10;");
        let q = agg(AggFunc::Quantize, &[(&[s("k")], 1)]);
        let f = parse_format(b"%s%@d").unwrap();
        let t = text(printa_fmt(&f, &[&q], &FormatCtx::default(), &AggPrintOpts::default()).unwrap());
        assert!(t.starts_with("k\n           value  ----"));
    }

    #[test]
    fn joined_printa() {
        let a = agg(AggFunc::Count, &[(&[s("x")], 0), (&[s("y")], 0), (&[s("y")], 0)]);
        let b = agg(AggFunc::Sum, &[(&[s("y")], 7), (&[s("z")], 1)]);
        let o = AggPrintOpts::default();
        let f = parse_format(b"%s %@d %@d\n").unwrap();
        let t = text(printa_fmt(&f, &[&a, &b], &FormatCtx::default(), &o).unwrap());
        // Sorted by @a's value (z has 0 there), then by key.
        assert_eq!(t, "z 0 1\nx 1 0\ny 2 7\n");
        let p = AggPrintOpts { sort: SortOptions { pos: 1, ..Default::default() }, ..o };
        let t = text(printa_fmt(&f, &[&a, &b], &FormatCtx::default(), &p).unwrap());
        assert_eq!(t, "x 1 0\nz 0 1\ny 2 7\n");
        let t = text(printa_joined(&[&a, &b], &o));
        assert_eq!(
            t,
            format!(
                "\n  {:<50} {:>16} {:>16}\n  {:<50} {:>16} {:>16}\n  {:<50} {:>16} {:>16}\n",
                "z", 0, 1, "x", 1, 0, "y", 2, 7
            )
        );
        // Extra %@ conversions repeat the last aggregation.
        let f = parse_format(b"%s %@d %@d %@d\n").unwrap();
        let t = text(printa_fmt(&f, &[&a, &b], &FormatCtx::default(), &o).unwrap());
        assert!(t.ends_with("y 2 7 7\n"));
    }

    #[test]
    fn stack_keys() {
        let st = Value::Stack(vec!["a.out`f+0x4".into(), "a.out`main+0x10".into()]);
        let c = agg(AggFunc::Count, &[(std::slice::from_ref(&st), 0)]);
        assert_eq!(
            text(print_aggregation(&c, &AggPrintOpts::default())),
            "\n              a.out`f+0x4\n              a.out`main+0x10\n                1\n"
        );
    }

    #[test]
    fn folded_stacks_are_one_line_root_first_without_offsets() {
        let st = |f: &[&str]| Value::Stack(f.iter().map(|s| s.to_string()).collect());
        let a = st(&["a.out`f+0x4", "a.out`main+0x10", "libc.so.6`__libc_start_main+0x80"]);
        let b = st(&["a.out`g", "a.out`main+0x18", "0x7f00dead"]);
        let c = agg(AggFunc::Count, &[(&[s("x"), a.clone()], 0), (&[s("x"), a], 0), (&[s("y"), b], 0)]);
        let o = AggPrintOpts { folded: true, ..Default::default() };
        assert_eq!(
            text(print_aggregation(&c, &o)),
            "y;0x7f00dead;a.out`main;a.out`g 1\nx;libc.so.6`__libc_start_main;a.out`main;a.out`f 2\n"
        );
        // A distribution has no single value: the default layout.
        let q = agg(AggFunc::Quantize, &[(&[s("k")], 1)]);
        assert!(text(print_aggregation(&q, &o)).contains("value  ----"));
    }
}
