//! Aggregating functions and their state, with DTrace's bucket arithmetic.
//!
//! Facts (not code) from illumos: `uts/common/dtrace/dtrace.c`
//! (`dtrace_aggregate_*`, `dtrace_aggregate_llquantize_bucket`), `libdtrace/dt_cc.c`
//! (`dt_compile_agg` parameter checks), `libdtrace/dt_aggregate.c` (sorting, clear,
//! trunc) and `libdtrace/dt_consume.c` (`dt_stddev`).

use std::cmp::Ordering;
use std::collections::HashMap;

use thiserror::Error;

use udtrace_lang::Tag;

use crate::llquantize::Shape;
use crate::value::Value;

/// Number of `quantize()` buckets: 63 negative, zero, 63 positive.
pub const QUANTIZE_NBUCKETS: usize = udtrace_dif::layout::QUANTIZE_BUCKETS;
/// Index of the zero bucket.
pub const QUANTIZE_ZEROBUCKET: usize = udtrace_dif::layout::QUANTIZE_ZERO;

/// The value that labels quantize bucket `i` (DTRACE_QUANTIZE_BUCKETVAL).
pub fn quantize_bucket_value(i: usize) -> i64 {
    udtrace_dif::layout::quantize_label(i)
}

/// The bucket a value falls in: a negative value goes to the first bucket whose
/// label is >= it, a non-negative one to the last bucket whose label is <= it. One
/// definition, with the firing's (`udtrace_dif`).
pub fn quantize_bucket(val: i64) -> usize {
    udtrace_dif::layout::quantize_bucket(val)
}

/// An aggregating function with its (validated) parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggFunc {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    Stddev,
    Quantize,
    Lquantize { base: i64, limit: i64, step: i64 },
    Llquantize { factor: u16, low: u16, high: u16, nsteps: u16 },
}

/// A rejected lquantize()/llquantize() parameter set or a bad aggregation operation;
/// the text is DTrace's own message (without the trailing newline).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{1}")]
pub struct AggError(pub Tag, pub String);

impl AggFunc {
    pub fn name(&self) -> &'static str {
        match self {
            AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Avg => "avg",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Stddev => "stddev",
            AggFunc::Quantize => "quantize",
            AggFunc::Lquantize { .. } => "lquantize",
            AggFunc::Llquantize { .. } => "llquantize",
        }
    }

    /// True for the functions whose value prints as a distribution table.
    pub fn is_quantize(&self) -> bool {
        matches!(self, AggFunc::Quantize | AggFunc::Lquantize { .. } | AggFunc::Llquantize { .. })
    }

    /// Builds lquantize() from its constant arguments (`step` defaults to 1) with
    /// dt_cc.c's checks and messages.
    pub fn lquantize(base: i64, limit: i64, step: Option<i64>) -> Result<AggFunc, AggError> {
        let func = AggFunc::Lquantize { base, limit, step: step.unwrap_or(1) };
        func.validate()?;
        Ok(func)
    }

    /// Builds llquantize() from its four constant arguments with Oracle's checks.
    pub fn llquantize(args: [i64; 4]) -> Result<AggFunc, AggError> {
        let s = Shape::check(args).map_err(|(tag, m)| AggError(tag, m))?;
        Ok(AggFunc::Llquantize { factor: s.factor, low: s.lmag, high: s.hmag, nsteps: s.steps })
    }

    /// Checks lquantize()/llquantize() parameters in dt_cc.c's order; other functions
    /// have none.
    pub fn validate(&self) -> Result<(), AggError> {
        let err = |tag: Tag, s: &str| Err(AggError(tag, s.to_string()));
        match *self {
            AggFunc::Lquantize { base, limit, step } => {
                let i32r = i64::from(i32::MIN)..=i64::from(i32::MAX);
                if !i32r.contains(&base) {
                    return err(Tag::D_LQUANT_BASEVAL, "lquantize( ) argument #1 must be a 32-bit quantity");
                }
                if !i32r.contains(&limit) {
                    return err(Tag::D_LQUANT_LIMVAL, "lquantize( ) argument #2 must be a 32-bit quantity");
                }
                if limit <= base {
                    return err(
                        Tag::D_LQUANT_MISMATCH,
                        "lquantize( ) base (argument #1) must be less than limit (argument #2)",
                    );
                }
                if step <= 0 {
                    return err(
                        Tag::D_LQUANT_STEPTYPE,
                        "lquantize( ) argument #3 must be a non-zero positive integer constant",
                    );
                }
                if step > i64::from(u16::MAX) {
                    return err(Tag::D_LQUANT_STEPVAL, "lquantize( ) argument #3 must be a 16-bit quantity");
                }
                let nlevels = (limit - base) / step;
                if nlevels == 0 {
                    return err(
                        Tag::D_LQUANT_STEPLARGE,
                        "lquantize( ) step (argument #3) too large: must have at least one quantization level",
                    );
                }
                if nlevels > i64::from(u16::MAX) {
                    return err(Tag::D_LQUANT_STEPSMALL, "lquantize( ) step (argument #3) too small: number of quantization levels must be a 16-bit quantity");
                }
                Ok(())
            }
            AggFunc::Llquantize { factor, low, high, nsteps } => {
                let args = [factor, low, high, nsteps].map(i64::from);
                Shape::check(args).map(drop).map_err(|(tag, m)| AggError(tag, m))
            }
            _ => Ok(()),
        }
    }
}

/// The per-key state of one aggregating function. All arithmetic wraps, as the
/// kernel's 64-bit arithmetic does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AggState {
    Count(i64),
    Sum(i64),
    Min(i64),
    Max(i64),
    Avg {
        count: i64,
        sum: i64,
    },
    /// `sumsq` is the 128-bit sum of squares of absolute values, as the kernel keeps it.
    Stddev {
        count: u64,
        sum: i64,
        sumsq: u128,
    },
    Quantize(Vec<i64>),
    /// `bins[0]` is the underflow bin, `bins[levels + 1]` the overflow bin.
    Lquantize {
        base: i32,
        step: u16,
        levels: u16,
        bins: Vec<i64>,
    },
    Llquantize {
        factor: u16,
        low: u16,
        high: u16,
        nsteps: u16,
        bins: Vec<i64>,
    },
}

/// What DTrace sorts aggregation values by (dt_aggregate_valcmp): the scalar result,
/// or for distributions the bucket-value-weighted sum, then the weight at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SortKey {
    Scalar(i64),
    Dist { total: i128, zero: i64 },
}

impl AggState {
    /// A fresh entry about to receive its first update. min()/max() start from the
    /// kernel's initial values so the first update wins.
    pub fn new(func: &AggFunc) -> AggState {
        let mut s = AggState::zeroed(func);
        match &mut s {
            AggState::Min(v) => *v = i64::MAX,
            AggState::Max(v) => *v = i64::MIN,
            _ => {}
        }
        s
    }

    /// All-zero data, as libdtrace's bzero leaves it after clear() and as it
    /// synthesises for keys missing from one aggregation of a joined printa().
    /// lquantize/llquantize keep their parameters.
    pub fn zeroed(func: &AggFunc) -> AggState {
        match *func {
            AggFunc::Count => AggState::Count(0),
            AggFunc::Sum => AggState::Sum(0),
            AggFunc::Min => AggState::Min(0),
            AggFunc::Max => AggState::Max(0),
            AggFunc::Avg => AggState::Avg { count: 0, sum: 0 },
            AggFunc::Stddev => AggState::Stddev { count: 0, sum: 0, sumsq: 0 },
            AggFunc::Quantize => AggState::Quantize(vec![0; QUANTIZE_NBUCKETS]),
            AggFunc::Lquantize { base, limit, step } => {
                // Invalid parameters should have been refused by validate(); clamp so
                // that a bad caller still cannot make us panic.
                let base = base.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
                let step = step.clamp(1, i64::from(u16::MAX)) as u16;
                let levels = ((limit - i64::from(base)) / i64::from(step)).clamp(1, i64::from(u16::MAX)) as u16;
                AggState::Lquantize { base, step, levels, bins: vec![0; levels as usize + 2] }
            }
            AggFunc::Llquantize { factor, low, high, nsteps } => {
                let n = Shape { factor, lmag: low, hmag: high, steps: nsteps }.nbins().min(1 << 20);
                AggState::Llquantize { factor, low, high, nsteps, bins: vec![0; n] }
            }
        }
    }

    /// The state a firing-time row holds (`udtrace_dif::layout`: hits first, then the
    /// function's words), for an aggregation updated where its probes fire.
    pub fn from_row(func: &AggFunc, row: &[u64]) -> AggState {
        let w = |i: usize| row.get(i).copied().unwrap_or(0);
        let mut s = AggState::zeroed(func);
        match &mut s {
            AggState::Count(v) => *v = w(0) as i64,
            AggState::Sum(v) | AggState::Min(v) | AggState::Max(v) => *v = w(1) as i64,
            AggState::Avg { count, sum } => (*count, *sum) = (w(0) as i64, w(1) as i64),
            AggState::Stddev { count, sum, sumsq } => {
                (*count, *sum, *sumsq) = (w(0), w(1) as i64, u128::from(w(3)) << 64 | u128::from(w(2)))
            }
            AggState::Quantize(b) | AggState::Lquantize { bins: b, .. } | AggState::Llquantize { bins: b, .. } => {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = w(1 + i) as i64;
                }
            }
        }
        s
    }

    /// Applies one firing: `value` is the aggregated expression, `incr` the optional
    /// weight of the quantize family (1 when absent; ignored by the others).
    pub fn update(&mut self, value: i64, incr: i64) {
        match self {
            AggState::Count(c) => *c = c.wrapping_add(1),
            AggState::Sum(s) => *s = s.wrapping_add(value),
            AggState::Min(m) => *m = (*m).min(value),
            AggState::Max(m) => *m = (*m).max(value),
            AggState::Avg { count, sum } => {
                *count = count.wrapping_add(1);
                *sum = sum.wrapping_add(value);
            }
            AggState::Stddev { count, sum, sumsq } => {
                *count = count.wrapping_add(1);
                *sum = sum.wrapping_add(value);
                let a = u128::from(value.unsigned_abs());
                *sumsq = sumsq.wrapping_add(a * a);
            }
            AggState::Quantize(b) => {
                let i = quantize_bucket(value);
                b[i] = b[i].wrapping_add(incr);
            }
            AggState::Lquantize { base, step, levels, bins } => {
                // The kernel compares in 32 bits: the value is truncated first.
                let val = value as i32;
                let i = if val < *base {
                    0
                } else {
                    let level = (i64::from(val) - i64::from(*base)) / i64::from((*step).max(1));
                    if level < i64::from(*levels) {
                        level as usize + 1
                    } else {
                        *levels as usize + 1
                    }
                };
                if let Some(b) = bins.get_mut(i) {
                    *b = b.wrapping_add(incr);
                }
            }
            AggState::Llquantize { factor, low, high, nsteps, bins } => {
                let i = Shape { factor: *factor, lmag: *low, hmag: *high, steps: *nsteps }.bin(value);
                let last = bins.len().saturating_sub(1);
                if let Some(b) = bins.get_mut(i.min(last)) {
                    *b = b.wrapping_add(incr);
                }
            }
        }
    }

    /// Zeroes the data but keeps the entry (and lquantize/llquantize parameters).
    pub fn clear(&mut self) {
        match self {
            AggState::Count(v) | AggState::Sum(v) | AggState::Min(v) | AggState::Max(v) => *v = 0,
            AggState::Avg { count, sum } => (*count, *sum) = (0, 0),
            AggState::Stddev { count, sum, sumsq } => (*count, *sum, *sumsq) = (0, 0, 0),
            AggState::Quantize(b) | AggState::Lquantize { bins: b, .. } | AggState::Llquantize { bins: b, .. } => {
                b.iter_mut().for_each(|x| *x = 0)
            }
        }
    }

    /// The average as printed: sum / normal / count, 0 without data.
    pub fn avg(count: i64, sum: i64, normal: u64) -> i64 {
        if count == 0 {
            0
        } else {
            sum.wrapping_div(nonzero(normal as i64)).wrapping_div(count)
        }
    }

    /// The standard deviation as dt_stddev computes it: sqrt(avg(x^2) - avg(x)^2) in
    /// 128-bit unsigned integer arithmetic, normalized, 0 without data.
    pub fn stddev(count: u64, sum: i64, sumsq: u128, normal: u64) -> u64 {
        if count == 0 {
            return 0;
        }
        let normal = normal.max(1);
        let avg_sq = sumsq / u128::from(normal) / u128::from(normal) / u128::from(count);
        let norm_avg = sum.wrapping_div(nonzero(normal as i64)).wrapping_div(nonzero(count as i64)).unsigned_abs();
        let diff = avg_sq.wrapping_sub(u128::from(norm_avg) * u128::from(norm_avg));
        diff.isqrt() as u64
    }

    /// The scalar result of count/sum/min/max/avg/stddev (unnormalized); None for
    /// the quantize family.
    pub fn scalar(&self) -> Option<i64> {
        match *self {
            AggState::Count(v) | AggState::Sum(v) | AggState::Min(v) | AggState::Max(v) => Some(v),
            AggState::Avg { count, sum } => Some(AggState::avg(count, sum, 1)),
            AggState::Stddev { count, sum, sumsq } => Some(AggState::stddev(count, sum, sumsq, 1) as i64),
            _ => None,
        }
    }

    /// The value DTrace sorts entries by (dt_aggregate_valcmp and friends).
    pub fn value_for_sort(&self) -> SortKey {
        match self {
            AggState::Quantize(b) => {
                let mut total: i128 = 0;
                for (i, &c) in b.iter().enumerate() {
                    total = total.saturating_add(i128::from(quantize_bucket_value(i)) * i128::from(c));
                }
                SortKey::Dist { total, zero: b.get(QUANTIZE_ZEROBUCKET).copied().unwrap_or(0) }
            }
            AggState::Lquantize { base, step, levels, bins } => {
                let at = |i: usize| i128::from(bins.get(i).copied().unwrap_or(0));
                let mut b = i64::from(*base);
                let mut total = at(0) * i128::from(b - 1);
                let mut zero = if b - 1 == 0 { Some(at(0)) } else { None };
                for i in 0..*levels as usize {
                    total = total.saturating_add(at(i + 1) * i128::from(b));
                    if b == 0 && zero.is_none() {
                        zero = Some(at(i + 1));
                    }
                    b += i64::from(*step);
                }
                let top = at(*levels as usize + 1);
                total = total.saturating_add(top * i128::from(b + 1));
                if b + 1 == 0 && zero.is_none() {
                    zero = Some(top);
                }
                SortKey::Dist { total, zero: zero.unwrap_or(0) as i64 }
            }
            AggState::Llquantize { factor, low, high, nsteps, bins } => {
                let shape = Shape { factor: *factor, lmag: *low, hmag: *high, steps: *nsteps };
                let zero = bins.get(shape.bin0()).copied().unwrap_or(0);
                SortKey::Dist { total: shape.sort_sum(bins), zero }
            }
            other => SortKey::Scalar(other.scalar().unwrap_or(0)),
        }
    }
}

fn nonzero(v: i64) -> i64 {
    if v == 0 {
        1
    } else {
        v
    }
}

/// An aggregation variable: its entries in insertion order, and its normalization.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    pub name: String,
    pub func: AggFunc,
    entries: Vec<(Vec<Value>, AggState)>,
    index: HashMap<Vec<Value>, usize>,
    /// Divisor applied at print time (normalize()); 1 when not normalized.
    pub normal: u64,
    /// Set by the caller once printa() has shown this aggregation: dtrace then
    /// leaves it out of the print at exit (DTRACE_AGD_PRINTED).
    pub printed: bool,
    /// `-x aggpercpu`: each key's state on each CPU as well, in `cpu_ids` order.
    per_cpu: Option<PerCpu>,
    /// Living at the firing: the rows read back and what clear()/trunc() took away
    /// (`crate::firing::Baseline`).
    pub(crate) firing: Option<crate::firing::Baseline>,
}

/// An aggregation's states kept per CPU (DTRACE_A_PERCPU).
#[derive(Debug, Clone, PartialEq)]
struct PerCpu {
    cpu_ids: Vec<u32>,
    states: HashMap<Vec<Value>, Vec<AggState>>,
}

impl Aggregation {
    pub fn new(name: &str, func: AggFunc) -> Aggregation {
        Aggregation {
            name: name.to_string(),
            func,
            entries: Vec::new(),
            index: HashMap::new(),
            normal: 1,
            printed: false,
            per_cpu: None,
            firing: None,
        }
    }

    /// Keeps each key's state on each of these CPUs as well (`-x aggpercpu`).
    pub fn keep_per_cpu(&mut self, cpu_ids: Vec<u32>) {
        self.per_cpu = Some(PerCpu { cpu_ids, states: HashMap::new() });
    }

    /// The key's state on each CPU, in CPU order, when kept per CPU: a CPU on which
    /// it never fired has the function's initial state (min's is INT64_MAX).
    pub fn per_cpu(&self, key: &[Value]) -> Option<Vec<(u32, AggState)>> {
        let pc = self.per_cpu.as_ref()?;
        let fresh = AggState::new(&self.func);
        let states = pc.states.get(key);
        Some(
            pc.cpu_ids
                .iter()
                .enumerate()
                .map(|(i, &id)| (id, states.and_then(|v| v.get(i)).cloned().unwrap_or_else(|| fresh.clone())))
                .collect(),
        )
    }

    /// Aggregates one firing on `cpu` under `key`.
    pub fn update_on(&mut self, cpu: u32, key: &[Value], value: i64, incr: i64) {
        self.update(key, value, incr);
        let func = &self.func;
        if let Some(pc) = self.per_cpu.as_mut() {
            if let Some(i) = pc.cpu_ids.iter().position(|&c| c == cpu) {
                let n = pc.cpu_ids.len();
                let states = pc.states.entry(key.to_vec()).or_insert_with(|| vec![AggState::new(func); n]);
                states[i].update(value, incr);
            }
        }
    }

    /// Aggregates one firing under `key` (empty for an unkeyed aggregation).
    pub fn update(&mut self, key: &[Value], value: i64, incr: i64) {
        let i = match self.index.get(key) {
            Some(&i) => i,
            None => {
                self.entries.push((key.to_vec(), AggState::new(&self.func)));
                self.index.insert(key.to_vec(), self.entries.len() - 1);
                self.entries.len() - 1
            }
        };
        self.entries[i].1.update(value, incr);
    }

    /// Replaces every entry (an aggregation updated at the firing, read back).
    pub fn replace(&mut self, entries: Vec<(Vec<Value>, AggState)>) {
        self.entries = entries;
        self.reindex();
    }

    pub fn entries(&self) -> &[(Vec<Value>, AggState)] {
        &self.entries
    }

    pub fn get(&self, key: &[Value]) -> Option<&AggState> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// clear(): every value becomes zero, keys stay.
    pub fn clear(&mut self) {
        if let Some(f) = self.firing.as_mut() {
            f.cleared(self.entries.iter().map(|(k, _)| k));
        }
        self.entries.iter_mut().for_each(|(_, s)| s.clear());
        if let Some(pc) = self.per_cpu.as_mut() {
            pc.states.values_mut().flatten().for_each(AggState::clear);
        }
    }

    /// trunc(@a, n): keeps the n entries with the largest values (ties: larger key),
    /// or with negative n the |n| smallest; trunc(@a) is trunc(@a, 0).
    pub fn trunc(&mut self, n: i64) {
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_by(|&a, &b| {
            let (ka, sa) = &self.entries[a];
            let (kb, sb) = &self.entries[b];
            sa.value_for_sort().cmp(&sb.value_for_sort()).then_with(|| key_cmp(ka, kb, 0))
        });
        if n >= 0 {
            order.reverse();
        }
        let keep = (n.unsigned_abs()).min(order.len() as u64) as usize;
        let mut kept = vec![false; self.entries.len()];
        for &i in &order[..keep] {
            kept[i] = true;
        }
        if let Some(f) = self.firing.as_mut() {
            f.truncated(self.entries.iter().zip(&kept).filter(|(_, &k)| !k).map(|((k, _), _)| k));
        }
        let mut i = 0;
        self.entries.retain(|_| {
            i += 1;
            kept[i - 1]
        });
        self.reindex();
    }

    /// normalize(@a, n). DTrace refuses a zero normal and falls back to 1.
    pub fn normalize(&mut self, normal: u64) -> Result<(), AggError> {
        if normal == 0 {
            self.normal = 1;
            return Err(AggError(Tag::D_UNKNOWN, "bad normalization value".to_string()));
        }
        self.normal = normal;
        Ok(())
    }

    pub fn denormalize(&mut self) {
        self.normal = 1;
    }

    fn reindex(&mut self) {
        self.index = self.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
        if let Some(pc) = self.per_cpu.as_mut() {
            pc.states.retain(|k, _| self.index.contains_key(k));
        }
    }
}

// Key order is a property of aggregations (their sorting and printing both use it):
// it lives here so that `format` depends on `agg` and never the other way.

/// How DTrace orders two values of one key position: integers by size then as
/// unsigned numbers of that size (so -1 sorts after 1), strings and bytes by bytes.
/// Stacks compare by their rendered frames (DTrace compares raw PCs).
fn value_cmp(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Int(_) => 0,
            Value::Str(_) => 1,
            Value::Bytes(_) => 2,
            Value::Stack(_) => 3,
        }
    }
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => {
            let m = |i: &crate::value::Int| match i.size {
                1 => i.bits & 0xff,
                2 => i.bits & 0xffff,
                4 => i.bits & 0xffff_ffff,
                _ => i.bits,
            };
            x.size.cmp(&y.size).then(m(x).cmp(&m(y)))
        }
        (Value::Str(x), Value::Str(y)) | (Value::Bytes(x), Value::Bytes(y)) => x.cmp(y),
        (Value::Stack(x), Value::Stack(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// dt_aggregate_keycmp: keys compared in order, starting at `keypos` and wrapping
/// (a keypos beyond the keys means 0).
pub fn key_cmp(a: &[Value], b: &[Value], keypos: usize) -> Ordering {
    let n = a.len().min(b.len());
    let keypos = if keypos >= n { 0 } else { keypos };
    for k in 0..n {
        let i = (k + keypos) % n;
        let o = value_cmp(&a[i], &b[i]);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_buckets() {
        assert_eq!(quantize_bucket_value(0), -(1 << 62));
        assert_eq!(quantize_bucket_value(62), -1);
        assert_eq!(quantize_bucket_value(64), 1);
        assert_eq!(quantize_bucket_value(126), 1 << 62);
        assert_eq!(quantize_bucket(0), 63);
        assert_eq!(quantize_bucket(1), 64);
        assert_eq!(quantize_bucket(2), 65);
        assert_eq!(quantize_bucket(3), 65);
        assert_eq!(quantize_bucket(4), 66);
        assert_eq!(quantize_bucket(-1), 62);
        assert_eq!(quantize_bucket(-2), 61);
        assert_eq!(quantize_bucket(-3), 61);
        assert_eq!(quantize_bucket(-4), 60);
        assert_eq!(quantize_bucket(i64::MAX), 126);
        assert_eq!(quantize_bucket(i64::MIN), 0);
    }

    #[test]
    fn lquantize_checks() {
        assert!(AggFunc::lquantize(0, 100, Some(10)).is_ok());
        assert_eq!(
            AggFunc::lquantize(10, 0, None).unwrap_err().1,
            "lquantize( ) base (argument #1) must be less than limit (argument #2)"
        );
        assert_eq!(
            AggFunc::lquantize(0, 10, Some(20)).unwrap_err().1,
            "lquantize( ) step (argument #3) too large: must have at least one quantization level"
        );
        assert_eq!(
            AggFunc::lquantize(0, 10, Some(0)).unwrap_err().1,
            "lquantize( ) argument #3 must be a non-zero positive integer constant"
        );
        assert_eq!(
            AggFunc::lquantize(0, 1 << 40, None).unwrap_err().1,
            "lquantize( ) argument #2 must be a 32-bit quantity"
        );
        assert_eq!(
            AggFunc::lquantize(0, 100000, Some(1)).unwrap_err().1,
            "lquantize( ) step (argument #3) too small: number of quantization levels must be a 16-bit quantity"
        );
    }

    #[test]
    fn llquantize_checks() {
        assert!(AggFunc::llquantize([10, 0, 6, 20]).is_ok());
        // Fewer steps than the factor is fine when they divide it (Oracle's rule).
        assert!(AggFunc::llquantize([4, 0, 1, 2]).is_ok());
        assert_eq!(
            AggFunc::llquantize([1, 0, 6, 20]).unwrap_err().1,
            "llquantize( ) argument #1 must be an unsigned 16-bit quantity greater than or equal to 2"
        );
        assert_eq!(
            AggFunc::llquantize([10, 6, 5, 20]).unwrap_err().1,
            "llquantize( ) argument #3 (high magnitude) must be at least argument #2 (low magnitude)"
        );
        assert_eq!(
            AggFunc::llquantize([10, 0, 30, 10]).unwrap_err().1,
            "llquantize( ) argument #3 (high magnitude) will cause overflow of 64 bits"
        );
    }

    #[test]
    fn scalar_functions() {
        let mut s = AggState::new(&AggFunc::Min);
        s.update(5, 1);
        s.update(-3, 1);
        assert_eq!(s.scalar(), Some(-3));
        s.clear();
        assert_eq!(s.scalar(), Some(0));
        let mut a = AggState::new(&AggFunc::Avg);
        for v in [1, 2, 4] {
            a.update(v, 1);
        }
        assert_eq!(a.scalar(), Some(2)); // 7 / 3, integer division
        let mut d = AggState::new(&AggFunc::Stddev);
        for v in [2, 4, 4, 4, 5, 5, 7, 9] {
            d.update(v, 1);
        }
        assert_eq!(d.scalar(), Some(2));
    }

    #[test]
    fn lquantize_update_truncates_to_32_bits() {
        let f = AggFunc::lquantize(0, 10, None).unwrap();
        let mut s = AggState::new(&f);
        s.update((1i64 << 32) + 5, 1);
        s.update(-1, 1);
        s.update(100, 2);
        match s {
            AggState::Lquantize { bins, .. } => {
                assert_eq!(bins[6], 1);
                assert_eq!(bins[0], 1);
                assert_eq!(bins[11], 2);
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn trunc_keeps_top_and_bottom() {
        let mut a = Aggregation::new("a", AggFunc::Sum);
        for (k, v) in [("a", 1), ("b", 5), ("c", 3)] {
            a.update(&[Value::str(k)], v, 1);
        }
        let mut top = a.clone();
        top.trunc(2);
        let keys: Vec<_> = top.entries().iter().map(|(k, _)| k[0].clone()).collect();
        assert_eq!(keys, vec![Value::str("b"), Value::str("c")]);
        a.trunc(-1);
        assert_eq!(a.entries()[0].0[0], Value::str("a"));
        assert_eq!(a.get(&[Value::str("a")]), Some(&AggState::Sum(1)));
    }
}
