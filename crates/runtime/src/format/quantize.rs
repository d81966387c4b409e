//! The quantize/lquantize/llquantize tables, as illumos dt_consume.c prints them
//! (dt_print_quantize, dt_print_lquantize, dt_print_llquantize, dt_print_quantline).
//!
//! Layout facts used: header "\n%16s %41s %-9s\n"; row label "%16lld " (lquantize
//! "< base" / ">= limit" as "%16s "); bar of 40 cells, `@` depth rounded from
//! |count| * 40 / total; count column "%-9lld" of count / normal; one empty row
//! kept on each side of the data; with both signs, half-width bars around a centre
//! line. Checked against the Solaris Dynamic Tracing Guide's quantize example.

use crate::agg::{quantize_bucket_value, AggState, QUANTIZE_NBUCKETS, QUANTIZE_ZEROBUCKET};
use crate::llquantize::Shape;

const ATS: &[u8; 40] = b"@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@";
const BAR: usize = 40;

/// DTrace divides `(long long)count / normal` with an unsigned normal, so C converts
/// the count to unsigned first; we keep that (it only shows with negative counts).
pub fn ll_div_u64(v: i64, normal: u64) -> i64 {
    ((v as u64) / normal.max(1)) as i64
}

/// Writes the distribution table of a quantize-family state; other states write
/// nothing.
pub fn print_dist(out: &mut Vec<u8>, state: &AggState, normal: u64) {
    let Some(d) = dist_rows(state) else { return };
    header(out);
    for (label, c) in &d.rows {
        out.extend_from_slice(format!("{label:>16} ").as_bytes());
        quantline(out, *c, normal, &d.scale);
    }
}

/// The rows of a distribution table, as dtrace prints them: each row's label (the
/// bucket's value, or "< 0", ">= 10", "abs() < 10") and count (not normalized); and
/// what the bars are scaled against. `None` for a state that is no distribution.
pub struct DistRows {
    pub rows: Vec<(String, i64)>,
    scale: Scale,
}

pub fn dist_rows(state: &AggState) -> Option<DistRows> {
    match state {
        AggState::Quantize(b) => quantize_rows(b),
        AggState::Lquantize { base, step, levels, bins } => lquantize_rows(*base, *step, *levels, bins),
        AggState::Llquantize { factor, low, high, nsteps, bins } => {
            llquantize_rows((*factor, *low, *high, *nsteps), bins)
        }
        _ => None,
    }
}

fn header(out: &mut Vec<u8>) {
    out.extend_from_slice(
        format!("\n{:>16} {:>41} {:<9}\n", "value", "------------- Distribution -------------", "count").as_bytes(),
    );
}

/// The first and last bins to show: one empty bin either side of the data, or
/// `empty` when every bin is zero.
fn range(bins: &[i64], empty: (usize, usize)) -> (usize, usize) {
    let n = bins.len();
    let Some(first) = bins.iter().position(|&c| c != 0) else {
        return empty;
    };
    let last = bins.iter().rposition(|&c| c != 0).unwrap_or(first);
    (first.saturating_sub(1), (last + 1).min(n.saturating_sub(1)))
}

/// Totals what the bars are scaled against (sum of |count| over the shown rows).
struct Scale {
    total: u128,
    pos: bool,
    neg: bool,
}

fn scale(rows: &[i64]) -> Scale {
    Scale {
        total: rows.iter().map(|&c| u128::from(c.unsigned_abs())).sum(),
        pos: rows.iter().any(|&c| c > 0),
        neg: rows.iter().any(|&c| c < 0),
    }
}

/// round(|v| * len / total) as `(uint_t)(f + 0.5)`, done exactly in integers.
fn depth(v: i64, len: usize, total: u128) -> usize {
    if total == 0 {
        return 0;
    }
    let a = u128::from(v.unsigned_abs()) * len as u128;
    (((2 * a + total) / (2 * total)) as usize).min(len)
}

fn spaces(n: usize) -> Vec<u8> {
    vec![b' '; n]
}

/// One row's bar and count (dt_print_quantline, ASCII encoding).
fn quantline(out: &mut Vec<u8>, v: i64, normal: u64, s: &Scale) {
    let count = ll_div_u64(v, normal);
    if !s.neg {
        let d = if s.pos { depth(v, BAR, s.total) } else { 0 };
        out.push(b'|');
        out.extend_from_slice(&ATS[..d]);
        out.extend_from_slice(&spaces(BAR - d));
        out.extend_from_slice(format!(" {count:<9}\n").as_bytes());
    } else if !s.pos {
        let d = depth(v, BAR, s.total);
        out.extend_from_slice(&spaces(BAR - d));
        out.extend_from_slice(&ATS[..d]);
        out.extend_from_slice(format!("| {count:<9}\n").as_bytes());
    } else {
        let half = BAR / 2;
        let d = depth(v, half, s.total);
        if v <= 0 {
            out.extend_from_slice(&spaces(half - d));
            out.extend_from_slice(&ATS[..d]);
            out.push(b'|');
            out.extend_from_slice(&spaces(half));
        } else {
            out.extend_from_slice(&spaces(half));
            out.push(b'|');
            out.extend_from_slice(&ATS[..d]);
            out.extend_from_slice(&spaces(half - d));
        }
        out.extend_from_slice(format!(" {count:<9}\n").as_bytes());
    }
}

fn quantize_rows(bins: &[i64]) -> Option<DistRows> {
    if bins.len() != QUANTIZE_NBUCKETS {
        return None;
    }
    // No data (cleared, or negative weights cancelled out): show -1, 0 and 1.
    let empty = (QUANTIZE_ZEROBUCKET - 1, QUANTIZE_ZEROBUCKET + 1);
    let (first, last) = range(bins, empty);
    let scale = scale(&bins[first..=last]);
    let rows = (first..=last).map(|i| (quantize_bucket_value(i).to_string(), bins[i])).collect();
    Some(DistRows { rows, scale })
}

fn lquantize_rows(base: i32, step: u16, levels: u16, bins: &[i64]) -> Option<DistRows> {
    let levels = levels as usize;
    if bins.len() != levels + 2 {
        return None;
    }
    let (first, last) = range(bins, (0, 2.min(levels + 1)));
    let scale = scale(&bins[first..=last]);
    let rows = (first..=last)
        .map(|i| {
            // DTrace computes labels in C int arithmetic.
            let label = if i == 0 {
                format!("< {base}")
            } else if i == levels + 1 {
                format!(">= {}", base.wrapping_add((levels as i32).wrapping_mul(i32::from(step))))
            } else {
                base.wrapping_add(((i - 1) as i32).wrapping_mul(i32::from(step))).to_string()
            };
            (label, bins[i])
        })
        .collect();
    Some(DistRows { rows, scale })
}

/// dt_print_llquantize: the bins with data and one either side (the two around the
/// underflow bin when none has data); bins no value can reach have no row.
fn llquantize_rows(params: (u16, u16, u16, u16), bins: &[i64]) -> Option<DistRows> {
    let (factor, lmag, hmag, steps) = params;
    let shape = Shape { factor, lmag, hmag, steps };
    let n = shape.nbins();
    if bins.len() != n {
        return None;
    }
    let bin0 = shape.bin0();
    let (first, last) = match bins.iter().position(|&c| c != 0) {
        None => (bin0 + 1, bin0 + 1),
        Some(f) => (f, bins.iter().rposition(|&c| c != 0).unwrap_or(f)),
    };
    let scale = scale(&bins[first..=last]);
    let first = first.saturating_sub(1);
    let last = (last + 1).min(n - 1);
    let labels = shape.labels(first < bin0);
    let pad = shape.ghost_pad();
    // A first or last row on a bin no value reaches borrows the label of the
    // nearest labelled bin beyond it (within the ghost bins).
    let ghost = |i: usize, toward_edge: &dyn Fn(usize, usize) -> Option<usize>| -> Option<String> {
        labels[i]
            .clone()
            .or_else(|| (1..pad).find_map(|k| toward_edge(i, k).and_then(|j| labels.get(j).cloned().flatten())))
    };
    let mut rows = Vec::new();
    for (i, &c) in bins.iter().enumerate().take(last + 1).skip(first) {
        let label = if i == first && pad > 0 {
            ghost(i, &|i, k| i.checked_sub(k))
        } else if i == last && pad > 0 {
            ghost(i, &|i, k| Some(i + k))
        } else {
            labels[i].clone()
        };
        if let Some(label) = label {
            rows.push((label, c));
        }
    }
    Some(DistRows { rows, scale })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::AggFunc;

    fn table(func: AggFunc, vals: &[(i64, i64)], normal: u64) -> String {
        let mut s = AggState::new(&func);
        for &(v, w) in vals {
            s.update(v, w);
        }
        let mut o = Vec::new();
        print_dist(&mut o, &s, normal);
        String::from_utf8(o).unwrap()
    }

    const HDR: &str = "\n           value  ------------- Distribution ------------- count    \n";

    #[test]
    fn quantize_single_value() {
        let t = table(AggFunc::Quantize, &[(5, 1)], 1);
        let want = format!(
            "{HDR}{:>16} |{:40} 0        \n{:>16} |{} 1        \n{:>16} |{:40} 0        \n",
            2,
            "",
            4,
            "@".repeat(40),
            8,
            ""
        );
        assert_eq!(t, want);
    }

    #[test]
    fn quantize_guide_shape() {
        // Shape of the guide's quantize example: counts 1, 0, 2, 3 at 1..8.
        let t = table(AggFunc::Quantize, &[(1, 1), (4, 2), (8, 3)], 1);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows[1], "           value  ------------- Distribution ------------- count    ");
        assert_eq!(rows[2], "               0 |                                         0        ");
        assert_eq!(rows[3], "               1 |@@@@@@@                                  1        ");
        assert_eq!(rows[4], "               2 |                                         0        ");
        assert_eq!(rows[5], "               4 |@@@@@@@@@@@@@                            2        ");
        assert_eq!(rows[6], "               8 |@@@@@@@@@@@@@@@@@@@@                     3        ");
        assert_eq!(rows[7], "              16 |                                         0        ");
        assert_eq!(rows.len(), 8);
    }

    #[test]
    fn quantize_matches_guide_example() {
        // The "gnome-terminal" table of the DTrace guide's wrquantize.d example.
        let t = table(AggFunc::Quantize, &[(8192, 5), (16384, 5), (32768, 4), (65536, 1)], 1);
        let want = concat!(
            "\n           value  ------------- Distribution ------------- count    \n",
            "            4096 |                                         0        \n",
            "            8192 |@@@@@@@@@@@@@                            5        \n",
            "           16384 |@@@@@@@@@@@@@                            5        \n",
            "           32768 |@@@@@@@@@@@                              4        \n",
            "           65536 |@@@                                      1        \n",
            "          131072 |                                         0        \n",
        );
        assert_eq!(t, want);
    }

    #[test]
    fn quantize_zero_and_empty() {
        let t = table(AggFunc::Quantize, &[(0, 1)], 1);
        assert!(t.contains("              -1 |                                         0        \n               0 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 1        \n               1 |"));
        let e = table(AggFunc::Quantize, &[(4, 1), (4, -1)], 1);
        let rows: Vec<&str> = e.lines().collect();
        assert_eq!(rows.len(), 5);
        assert!(rows[2].starts_with("              -1 |"));
        assert!(rows[4].starts_with("               1 |"));
    }

    #[test]
    fn quantize_negative_values_share_axis() {
        let t = table(AggFunc::Quantize, &[(-3, 1), (3, 1)], 1);
        let rows: Vec<&str> = t.lines().collect();
        // Counts are all positive: a normal left-anchored bar.
        assert_eq!(rows[2], "              -4 |                                         0        ");
        assert_eq!(rows[3], "              -2 |@@@@@@@@@@@@@@@@@@@@                     1        ");
        assert_eq!(rows[4], "              -1 |                                         0        ");
        assert_eq!(rows[5], "               0 |                                         0        ");
        assert_eq!(rows[7], "               2 |@@@@@@@@@@@@@@@@@@@@                     1        ");
    }

    #[test]
    fn negative_counts_draw_both_sides() {
        let t = table(AggFunc::Quantize, &[(1, -1), (2, 3)], 1);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows[3], format!("{:>16} {:15}{}|{:20} {:<9}", 1, "", "@".repeat(5), "", -1));
        assert_eq!(rows[4], format!("{:>16} {:20}|{}{:5} {:<9}", 2, "", "@".repeat(15), "", 3));
        let only_neg = table(AggFunc::Quantize, &[(1, -2)], 1);
        assert!(only_neg.contains(&format!("{:>16} {}| {:<9}\n", 1, "@".repeat(40), -2)));
    }

    #[test]
    fn quantize_normalized_counts() {
        let t = table(AggFunc::Quantize, &[(16, 10)], 5);
        assert!(t.contains(&format!("{:>16} |{} 2        \n", 16, "@".repeat(40))));
    }

    #[test]
    fn lquantize_rows() {
        let f = AggFunc::lquantize(0, 100, Some(10)).unwrap();
        let t = table(f, &[(-5, 1), (15, 2), (150, 1)], 1);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows[2], "             < 0 |@@@@@@@@@@                               1        ");
        assert_eq!(rows[3], "               0 |                                         0        ");
        assert_eq!(rows[4], "              10 |@@@@@@@@@@@@@@@@@@@@                     2        ");
        assert_eq!(rows[12], "              90 |                                         0        ");
        assert_eq!(rows[13], "          >= 100 |@@@@@@@@@@                               1        ");
        assert_eq!(rows.len(), 14);
        let single = table(f, &[(55, 1)], 1);
        let rows: Vec<&str> = single.lines().collect();
        assert_eq!(&rows[2][..17], "              40 ");
        assert_eq!(&rows[4][..17], "              60 ");
        let empty = table(f, &[], 1);
        assert!(empty.contains("             < 0 |"));
        assert!(empty.contains("\n              10 |"));
    }

    #[test]
    fn llquantize_rows() {
        let f = AggFunc::llquantize([10, 0, 2, 10]).unwrap();
        let t = table(f, &[(0, 1), (5, 1), (250, 2), (5000, 1)], 1);
        let rows: Vec<&str> = t.lines().collect();
        // Oracle's layout: the underflow bin ("0" when factor^lmag is 1) sits in
        // the middle, after the negative bins (one shown, empty).
        assert_eq!(rows[2], "              -1 |                                         0        ");
        assert_eq!(rows[3], "               0 |@@@@@@@@                                 1        ");
        assert_eq!(rows[4], "               1 |                                         0        ");
        assert_eq!(rows[8], "               5 |@@@@@@@@                                 1        ");
        let at200 = rows.iter().position(|r| r.starts_with("             200 ")).unwrap();
        assert_eq!(rows[at200], format!("{:>16} |{}{:24} 2        ", 200, "@".repeat(16), ""));
        assert_eq!(rows.last().unwrap(), &"         >= 1000 |@@@@@@@@                                 1        ");
        let mid = table(f, &[(300, 1)], 1);
        let rows: Vec<&str> = mid.lines().collect();
        assert_eq!(rows.len(), 5);
        assert_eq!(&rows[2][..17], "             200 ");
        assert_eq!(&rows[4][..17], "             400 ");
    }
}
