//! llquantize() as Oracle's DTrace lays it out (dt_cg.c's bin computation,
//! dt_consume.c's labels, dt_aggregate.c's sort value), with its parameter checks.
//!
//! Values are binned by magnitude: for factor 10, 10-99 is magnitude 1, 100-999
//! magnitude 2, and so on from `lmag` to `hmag`; each magnitude is cut into `steps`
//! linear bins, less the `steps / factor` that would overlap the magnitude below.
//! Negative values mirror positive ones: the bins run from negative overflow, through
//! the negative magnitudes, the underflow bin (|value| < factor^lmag) in the middle,
//! the positive magnitudes, to positive overflow.

use udtrace_lang::Tag;

/// The four constant parameters of one llquantize().
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub factor: u16,
    pub lmag: u16,
    pub hmag: u16,
    pub steps: u16,
}

impl Shape {
    /// The same parameters as the firing's table (`udtrace_dif::llquantize`), which
    /// defines the bins: their number, the underflow bin and a value's bin are its.
    fn bins(&self) -> udtrace_dif::llquantize::Shape {
        udtrace_dif::llquantize::Shape { factor: self.factor, low: self.lmag, high: self.hmag, steps: self.steps }
    }

    fn steps_factor(&self) -> u64 {
        self.bins().steps_factor()
    }

    /// The underflow bin, in the middle of the table.
    pub fn bin0(&self) -> usize {
        self.bins().bin0()
    }

    pub fn nbins(&self) -> usize {
        self.bins().nbins()
    }

    fn pow(&self, n: u32) -> u64 {
        self.bins().pow(n)
    }

    /// The bin of a value (dt_cg_agg_llquantize_bin): one definition, with the
    /// firing's.
    pub fn bin(&self, value: i64) -> usize {
        self.bins().bucket(value)
    }

    /// Each bin's label as dt_print_llquantize writes it (later labels of a bin win,
    /// as its snprintf()s do); bins no value can reach have none. `negatives_shown`
    /// is whether the table shows bins below the underflow bin, which then reads
    /// "abs() < N".
    pub fn labels(&self, negatives_shown: bool) -> Vec<Option<String>> {
        let n = self.nbins() as i64;
        let bin0 = self.bin0() as i64;
        let (factor, steps, sf) = (u64::from(self.factor), u64::from(self.steps), self.steps_factor() as i64);
        let mut c: Vec<Option<String>> = vec![None; n as usize];
        let mut put = |i: i64, s: String| {
            if (0..n).contains(&i) {
                c[i as usize] = Some(s);
            }
        };
        let scale = self.pow(u32::from(self.lmag));
        let zero = if scale == 1 {
            "0".to_string()
        } else if !negatives_shown {
            format!("< {scale}")
        } else {
            format!("abs() < {scale}")
        };
        put(bin0, zero);
        put(bin0 - 1, format!("-{scale}"));
        put(bin0 + 1, format!("{scale}"));
        let mut mag = u32::from(self.lmag);
        let mut i: i64 = 1;
        if self.lmag == 0 && steps > factor {
            for step in 2..=factor {
                i += sf;
                put(bin0 - i, format!("-{step}"));
                put(bin0 + i, format!("{step}"));
            }
            mag += 1;
        }
        let mut scale = self.pow(mag + 1) / steps.max(1);
        while mag <= u32::from(self.hmag) {
            for step in (sf as u64 + 1)..=steps {
                i += 1;
                put(bin0 - i, format!("-{}", step.wrapping_mul(scale)));
                put(bin0 + i, format!("{}", step.wrapping_mul(scale)));
            }
            scale = scale.wrapping_mul(factor);
            mag += 1;
        }
        let top = self.pow(u32::from(self.hmag) + 1);
        put(0, format!("<= -{top}"));
        put(n - 1, format!(">= {top}"));
        c
    }

    /// The "ghost bins" of dt_print_llquantize: with lmag 0 and more steps than the
    /// factor, the first magnitude has bins no value reaches.
    pub fn ghost_pad(&self) -> usize {
        if self.lmag == 0 && self.steps > self.factor {
            self.steps_factor() as usize
        } else {
            0
        }
    }

    /// dt_aggregate_llquantizedsum, scaled by `steps` to stay in integers: what
    /// aggregations of one shape sort by.
    pub fn sort_sum(&self, bins: &[i64]) -> i128 {
        let at = |i: i64| i128::from(bins.get(i as usize).copied().unwrap_or(0));
        let bin0 = self.bin0() as i64;
        let (factor, steps, sf) =
            (i128::from(self.factor), i128::from(self.steps), i128::from(self.steps / self.factor));
        let diff = |i: i64| at(bin0 + i) - at(bin0 - i);
        let mut total = steps.saturating_mul(i128::from(self.pow(u32::from(self.lmag)))).saturating_mul(diff(1));
        let mut i: i64 = 1;
        let mut lmag = i128::from(self.lmag);
        if self.lmag == 0 && steps > factor {
            for step in 2..=factor {
                i += sf as i64;
                total = total.saturating_add((steps * step).saturating_mul(diff(i)));
            }
            lmag = 1;
        }
        // scale = factor^(lmag+1) / steps; times steps: factor^(lmag+1).
        let mut scaled = i128::from(self.pow(lmag as u32 + 1));
        for _ in lmag..=i128::from(self.hmag) {
            for step in (sf + 1)..=steps {
                i += 1;
                total = total.saturating_add(step.saturating_mul(scaled).saturating_mul(diff(i)));
            }
            scaled = scaled.saturating_mul(factor);
        }
        total
    }

    /// dt_cg_agg_llquantize's checks, in its order: tag name and message.
    pub fn check(args: [i64; 4]) -> Result<Shape, (Tag, String)> {
        let [factor, lmag, hmag, steps] = args.map(|a| a as u64);
        let u16max = u64::from(u16::MAX);
        if factor > u16max || factor < 2 {
            return Err((
                Tag::D_LLQUANT_FACTORVAL,
                "llquantize( ) argument #1 must be an unsigned 16-bit quantity greater than or equal to 2".into(),
            ));
        }
        if lmag > u16max {
            return Err((
                Tag::D_LLQUANT_LMAGVAL,
                "llquantize( ) argument #2 must be an unsigned 16-bit quantity".into(),
            ));
        }
        if hmag > u16max {
            return Err((
                Tag::D_LLQUANT_HMAGVAL,
                "llquantize( ) argument #3 must be an unsigned 16-bit quantity".into(),
            ));
        }
        if hmag < lmag {
            return Err((
                Tag::D_LLQUANT_HMAGVAL,
                "llquantize( ) argument #3 (high magnitude) must be at least argument #2 (low magnitude)".into(),
            ));
        }
        if (factor as f64).powf(hmag as f64 + 1.0) > u64::MAX as f64 {
            return Err((
                Tag::D_LLQUANT_HMAGVAL,
                "llquantize( ) argument #3 (high magnitude) will cause overflow of 64 bits".into(),
            ));
        }
        if args[3] <= 0 {
            return Err((
                Tag::D_LLQUANT_STEPTYPE,
                "llquantize( ) argument #4 must be a non-zero positive integer constant".into(),
            ));
        }
        if steps > u16max {
            return Err((
                Tag::D_LLQUANT_STEPVAL,
                "llquantize( ) argument #4 must be an unsigned 16-bit quantity".into(),
            ));
        }
        if steps < factor && factor % steps != 0 {
            return Err((
                Tag::D_LLQUANT_STEPVAL,
                "llquantize() argument #4 (steps) must evenly divide argument #1 (factor) when steps<factor".into(),
            ));
        }
        if steps > factor {
            if steps % factor != 0 {
                return Err((
                    Tag::D_LLQUANT_STEPVAL,
                    "llquantize() argument #4 (steps) must be a multiple of argument #1 (factor) when steps>factor"
                        .into(),
                ));
            }
            let power = (factor as u128).pow(lmag as u32 + 1);
            if lmag == 0 && (factor * factor) % steps != 0 {
                return Err((
                    Tag::D_LLQUANT_STEPVAL,
                    "llquantize() argument #4 (steps) must evenly divide the square of argument #1 (factor) when steps>factor and lmag==0".into(),
                ));
            }
            if lmag > 0 && !power.is_multiple_of(u128::from(steps)) {
                return Err((
                    Tag::D_LLQUANT_STEPVAL,
                    "llquantize() argument #4 (steps) must evenly divide pow(argument #1 (factor), lmag (argument #2) + 1) when steps>factor and lmag>0".into(),
                ));
            }
        }
        Ok(Shape { factor: factor as u16, lmag: lmag as u16, hmag: hmag as u16, steps: steps as u16 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(factor: u16, lmag: u16, hmag: u16, steps: u16) -> Shape {
        Shape { factor, lmag, hmag, steps }
    }

    #[test]
    fn bins_mirror_around_underflow() {
        // factor 10, magnitudes 0..2, 10 steps: 9 bins per magnitude (1-9, 10-90,
        // 100-900) each side, underflow (0) in the middle.
        let s = shape(10, 0, 2, 10);
        assert_eq!(s.bin0(), 28);
        assert_eq!(s.nbins(), 57);
        assert_eq!(s.bin(0), 28);
        assert_eq!(s.bin(1), 29);
        assert_eq!(s.bin(9), 37);
        assert_eq!(s.bin(10), 38);
        assert_eq!(s.bin(99), 46);
        assert_eq!(s.bin(100), 47);
        assert_eq!(s.bin(999), 55);
        assert_eq!(s.bin(1000), 56);
        assert_eq!(s.bin(-1), 27);
        assert_eq!(s.bin(-1000), 0);
        assert_eq!(s.bin(i64::MIN), 0);
        let l = s.labels(false);
        assert_eq!(l[28].as_deref(), Some("0"));
        assert_eq!(l[38].as_deref(), Some("10"));
        assert_eq!(l[47].as_deref(), Some("100"));
        assert_eq!(l[56].as_deref(), Some(">= 1000"));
        assert_eq!(l[0].as_deref(), Some("<= -1000"));
        assert_eq!(l[27].as_deref(), Some("-1"));
    }

    #[test]
    fn fewer_steps_than_the_factor() {
        // factor 4, magnitudes 0..1, 2 steps: 0-3 is underflow... bins 1-2, 2-3?
        let s = shape(4, 0, 1, 2);
        assert_eq!(s.bin0(), 5);
        assert_eq!(s.bin(0), 5);
        assert_eq!(s.bin(1), 6);
        assert_eq!(s.bin(2), 7);
        assert_eq!(s.bin(4), 8);
        assert_eq!(s.bin(8), 9);
        assert_eq!(s.bin(16), 10);
        let l = s.labels(true);
        let shown: Vec<&str> = l.iter().map(|x| x.as_deref().unwrap_or("-")).collect();
        assert_eq!(shown, ["<= -16", "-8", "-4", "-2", "-1", "0", "1", "2", "4", "8", ">= 16"]);
    }

    #[test]
    fn checks_in_oracle_order() {
        assert!(Shape::check([10, 0, 6, 20]).is_ok());
        assert!(Shape::check([4, 0, 1, 2]).is_ok());
        assert_eq!(Shape::check([1, 0, 6, 20]).unwrap_err().0, Tag::D_LLQUANT_FACTORVAL);
        assert_eq!(Shape::check([10, 6, 5, 20]).unwrap_err().0, Tag::D_LLQUANT_HMAGVAL);
        assert_eq!(Shape::check([10, 0, 6, 0]).unwrap_err().0, Tag::D_LLQUANT_STEPTYPE);
        assert_eq!(Shape::check([10, 0, 6, -1]).unwrap_err().0, Tag::D_LLQUANT_STEPTYPE);
        assert_eq!(Shape::check([10, 0, 6, 3]).unwrap_err().0, Tag::D_LLQUANT_STEPVAL);
        assert_eq!(Shape::check([10, 0, 30, 10]).unwrap_err().0, Tag::D_LLQUANT_HMAGVAL);
    }
}
