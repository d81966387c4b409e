//! llquantize()'s bins (Oracle's `dt_cg_agg_llquantize_bin`), defined once: the
//! consumer bins with [`bucket`], and a firing-time program computes the same bin with
//! the operations [`ops`] emits (every magnitude's bounds and divisors are constants),
//! then adds to it through an [`crate::AggFn::Llquantize`] row, which only indexes.
//!
//! Bins, from 0: negative overflow, the negative magnitudes (largest first), the
//! underflow bin (|value| < factor^low) in the middle ([`Shape::bin0`]), the positive
//! magnitudes, positive overflow.

use crate::op::{BinOp, Op, Reg, UnOp};

/// The four constant parameters of one llquantize() (checked by the compiler:
/// factor ≥ 2, low ≤ high, factor^(high + 1) within 64 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub factor: u16,
    pub low: u16,
    pub high: u16,
    pub steps: u16,
}

impl Shape {
    /// `steps / factor`: the bins of a magnitude that would overlap the one below.
    pub fn steps_factor(&self) -> u64 {
        u64::from(self.steps) / u64::from(self.factor.max(1))
    }

    fn per_magnitude(&self) -> u64 {
        u64::from(self.steps).saturating_sub(self.steps_factor())
    }

    /// The underflow bin, in the middle.
    pub fn bin0(&self) -> usize {
        1 + (usize::from(self.high.saturating_sub(self.low)) + 1) * self.per_magnitude() as usize
    }

    pub fn nbins(&self) -> usize {
        2 * self.bin0() + 1
    }

    /// factor^n, saturating (the compiler's check keeps factor^(high + 1) in 64 bits).
    pub fn pow(&self, n: u32) -> u64 {
        u64::from(self.factor).saturating_pow(n)
    }

    /// The bin of a value.
    pub fn bucket(&self, value: i64) -> usize {
        let (factor, steps, sf) = (u64::from(self.factor), u64::from(self.steps), self.steps_factor());
        let bin0 = self.bin0() as i64;
        // |value| in 64 unsigned bits: INT64_MIN stays 2^63, beyond every magnitude.
        let abs = value.unsigned_abs();
        let mut max = self.pow(u32::from(self.low));
        if abs < max {
            return bin0 as usize;
        }
        let mut mag = u64::from(self.low);
        let mut ind = 0u64;
        loop {
            max = max.wrapping_mul(factor);
            if abs < max {
                ind = if mag != 0 { abs / (max / steps).max(1) } else { abs * steps / max };
                ind = ind.wrapping_sub(sf);
                break;
            }
            mag += 1;
            if mag > u64::from(self.high) {
                break;
            }
        }
        let mut pos = ((mag - u64::from(self.low)) * (steps - sf)).wrapping_add(ind).wrapping_add(1) as i64;
        if value < 0 {
            pos = pos.wrapping_neg();
        }
        pos.wrapping_add(bin0).clamp(0, self.nbins() as i64 - 1) as usize
    }

    /// Operations that leave in `d` the bin of the value in register `v` before its
    /// clamping to the table, which the row's update does ([`clamp`]); registers `d`
    /// and `d + 1` are written (`v` is read only, and may be below `d`). `at`: where
    /// the first goes in the program (jumps are to op indices). `None` when a
    /// magnitude's bound is past 64 bits.
    pub fn ops(&self, v: Reg, d: Reg, at: usize) -> Option<Vec<Op>> {
        let mut ops = self.ops_from_0(v, d)?;
        let at = u16::try_from(at).ok()?;
        for op in &mut ops {
            match op {
                Op::Jz { to, .. } | Op::Jmp { to } => *to += at,
                _ => {}
            }
        }
        Some(ops)
    }

    fn ops_from_0(&self, v: Reg, d: Reg) -> Option<Vec<Op>> {
        let t = d + 1;
        let (steps, sf) = (u64::from(self.steps), self.steps_factor());
        let mut ops = Vec::new();
        let mut to_sign = Vec::new();
        // d = |v|: -v when v < 0 (wrapping: i64::MIN stays 2^63).
        ops.push(Op::Const { d: t, v: 0 });
        ops.push(Op::Bin { op: BinOp::LtS, d: t, a: v, b: t });
        ops.push(Op::Mov { d, a: v });
        let positive = ops.len();
        ops.push(Op::Jz { a: t, to: 0 });
        ops.push(Op::Un { op: UnOp::Neg, d, a: v });
        let at = ops.len() as u16;
        ops[positive] = Op::Jz { a: t, to: at };
        // Below factor^low: the underflow bin (0 before the sign and bin0).
        let mut bound = u64::from(self.factor).checked_pow(u32::from(self.low))?;
        let mut next = self.below(&mut ops, d, t, bound);
        ops.push(Op::Const { d, v: 0 });
        to_sign.push(ops.len());
        ops.push(Op::Jmp { to: 0 });
        for mag in self.low..=self.high {
            let at = ops.len() as u16;
            ops[next] = Op::Jz { a: t, to: at };
            bound = bound.checked_mul(u64::from(self.factor))?;
            next = self.below(&mut ops, d, t, bound);
            if mag != 0 {
                ops.push(Op::Div { d, a: d, imm: (bound / steps).max(1), signed: false, rem: false });
            } else {
                ops.push(Op::Const { d: t, v: steps });
                ops.push(Op::Bin { op: BinOp::Mul, d, a: d, b: t });
                ops.push(Op::Div { d, a: d, imm: bound, signed: false, rem: false });
            }
            let first = (u64::from(mag - self.low) * (steps - sf)).wrapping_add(1).wrapping_sub(sf);
            ops.push(Op::Const { d: t, v: first });
            ops.push(Op::Bin { op: BinOp::Add, d, a: d, b: t });
            to_sign.push(ops.len());
            ops.push(Op::Jmp { to: 0 });
        }
        // Past every magnitude: overflow.
        let at = ops.len() as u16;
        ops[next] = Op::Jz { a: t, to: at };
        ops.push(Op::Const { d, v: (u64::from(self.high - self.low) + 1) * (steps - sf) + 1 });
        let sign = ops.len() as u16;
        for j in to_sign {
            ops[j] = Op::Jmp { to: sign };
        }
        // Negative values mirror: d = bin0 + (v < 0 ? -d : d).
        ops.push(Op::Const { d: t, v: 0 });
        ops.push(Op::Bin { op: BinOp::LtS, d: t, a: v, b: t });
        let keep = ops.len();
        ops.push(Op::Jz { a: t, to: 0 });
        ops.push(Op::Un { op: UnOp::Neg, d, a: d });
        let at = ops.len() as u16;
        ops[keep] = Op::Jz { a: t, to: at };
        ops.push(Op::Const { d: t, v: self.bin0() as u64 });
        ops.push(Op::Bin { op: BinOp::Add, d, a: d, b: t });
        Some(ops)
    }

    /// t = (d < bound), then a `Jz t` to patch: its index.
    fn below(&self, ops: &mut Vec<Op>, d: Reg, t: Reg, bound: u64) -> usize {
        ops.push(Op::Const { d: t, v: bound });
        ops.push(Op::Bin { op: BinOp::LtU, d: t, a: d, b: t });
        ops.push(Op::Jz { a: t, to: 0 });
        ops.len() - 1
    }
}

/// The row word (after hits) a computed bin adds to: the bin, taken signed, within the
/// table's `bins`.
pub fn clamp(bin: u64, bins: u16) -> usize {
    (bin as i64).clamp(0, i64::from(bins.max(1)) - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{run, Firing, Memory};
    use crate::layout::{AggDesc, AggFn, BufferLayout, Layout};
    use crate::op::{verify, Program};
    use crate::snapshot::Snapshot;

    fn values() -> Vec<i64> {
        let mut v = vec![0, 1, -1, i64::MIN, i64::MAX, i64::MIN + 1];
        for e in 0..64 {
            let p = 1u64 << e;
            for x in [p - 1, p, p + 1, p / 3 * 2] {
                v.push(x as i64);
                v.push((x as i64).wrapping_neg());
            }
        }
        for p in [10i64, 100, 1000, 10_000, 1_000_000, 1_000_000_000] {
            for x in [p - 1, p, p + 1, p * 5, p * 5 + 1, p * 9 + 9] {
                v.extend([x, -x]);
            }
        }
        v
    }

    #[test]
    fn the_programs_bin_as_the_consumer_does() {
        let shapes = [
            Shape { factor: 10, low: 0, high: 6, steps: 20 },
            Shape { factor: 10, low: 2, high: 4, steps: 10 },
            Shape { factor: 2, low: 0, high: 62, steps: 4 },
            Shape { factor: 3, low: 1, high: 5, steps: 7 },
            Shape { factor: 16, low: 0, high: 3, steps: 16 },
            Shape { factor: 1000, low: 0, high: 5, steps: 1000 },
            Shape { factor: 7, low: 0, high: 0, steps: 1 },
        ];
        for s in shapes {
            let bins = s.nbins() as u16;
            let layout =
                Layout { tls: 0, aggs: vec![AggDesc { func: AggFn::Llquantize { bins }, nkeys: 0 }], strsize: 0 };
            let buf = BufferLayout::new(&layout, 1, 1);
            let mut ops = vec![Op::Arg { d: 0, n: 0 }];
            ops.extend(s.ops(0, 1, 1).expect("within 64 bits"));
            ops.push(Op::Const { d: 3, v: 1 });
            ops.push(Op::Agg { agg: 0, keys: 0, val: 1, incr: 3 });
            let p = Program { ops };
            assert_eq!(verify(&p, &layout), Ok(()));
            for v in values() {
                let mut mem = vec![0u8; buf.size];
                for (o, w) in buf.header() {
                    mem.store(o, w);
                }
                let f = Firing { args: [v as u64, 0, 0, 0, 0, 0], tid: 1, ..Firing::default() };
                run(&p, &layout, &buf, &f, &mut mem);
                let row = &Snapshot::read(&layout, &buf, &mem).aggs[0][&vec![]];
                let want = s.bucket(v);
                let got: Vec<usize> = (1..row.len()).filter(|&i| row[i] != 0).collect();
                assert_eq!(row[1 + want], 1, "{s:?} value {v}: want bin {want}, got {got:?}");
                assert_eq!(row.iter().sum::<u64>(), 2, "{s:?} value {v}");
            }
        }
    }
}
