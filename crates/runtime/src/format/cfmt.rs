//! C printf(3) primitives: padding, integer and floating conversions with the flags
//! `- + space # 0`, width and precision, producing bytes exactly as printf does.

/// A conversion's flags, width and precision after `*`/`.*` have been resolved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spec {
    pub left: bool,
    pub plus: bool,
    pub space: bool,
    pub alt: bool,
    pub zero: bool,
    pub width: usize,
    pub prec: Option<usize>,
}

/// Caps widths and precisions so that a hostile format cannot exhaust memory; C's
/// printf (and so DTrace) prints fields of millions of characters, well below it.
pub const MAX_FIELD: usize = 1 << 24;

/// Pads `body` (which follows `prefix`: sign or 0x) to the width. Zero padding goes
/// between prefix and body; `zero_ok` says whether the conversion allows it.
pub fn pad(out: &mut Vec<u8>, spec: &Spec, prefix: &[u8], body: &[u8], zero_ok: bool) {
    let len = prefix.len() + body.len();
    let fill = spec.width.min(MAX_FIELD).saturating_sub(len);
    if fill == 0 {
        // (No call to copy an empty sign: most numbers have none.)
        if !prefix.is_empty() {
            out.extend_from_slice(prefix);
        }
        out.extend_from_slice(body);
    } else if spec.left {
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
        out.resize(out.len() + fill, b' ');
    } else if spec.zero && zero_ok {
        out.extend_from_slice(prefix);
        out.resize(out.len() + fill, b'0');
        out.extend_from_slice(body);
    } else {
        out.resize(out.len() + fill, b' ');
        out.extend_from_slice(prefix);
        out.extend_from_slice(body);
    }
}

/// `%s` semantics on raw bytes: precision truncates, width pads with spaces.
pub fn fmt_str(out: &mut Vec<u8>, spec: &Spec, s: &[u8]) {
    let s = match spec.prec {
        Some(p) if p < s.len() => &s[..p],
        _ => s,
    };
    pad(out, spec, b"", s, false);
}

/// `%c`.
pub fn fmt_char(out: &mut Vec<u8>, spec: &Spec, c: u8) {
    pad(out, spec, b"", &[c], false);
}

/// `%d`/`%i` on a signed value.
pub fn fmt_signed(out: &mut Vec<u8>, spec: &Spec, v: i64) {
    let sign: &[u8] = if v < 0 {
        b"-"
    } else if spec.plus {
        b"+"
    } else if spec.space {
        b" "
    } else {
        b""
    };
    if spec.prec.is_none() {
        // The common case, without allocating: digits as they are.
        let mut buf = [0u8; 20];
        pad(out, spec, sign, decimal(v.unsigned_abs(), &mut buf), true);
        return;
    }
    let digits = with_precision(v.unsigned_abs().to_string().into_bytes(), spec.prec, v == 0);
    pad(out, spec, sign, &digits, spec.prec.is_none());
}

/// A bare `%d`: `v`'s sign and digits, as [`fmt_signed`] with a default spec.
#[inline]
pub fn decimal_into(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    unsigned_into(out, v.unsigned_abs());
}

/// A bare `%u`: `v`'s digits, as [`fmt_unsigned`] in base 10 with a default spec.
#[inline]
pub fn unsigned_into(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    // Byte by byte: a few digits, where a call to copy them cost more.
    out.reserve(20);
    for &d in decimal(v, &mut buf) {
        out.push(d);
    }
}

/// The decimal digits of `v`, at the end of `buf`.
#[inline]
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// `%u %o %x %X` on an unsigned value.
pub fn fmt_unsigned(out: &mut Vec<u8>, spec: &Spec, v: u64, radix: u8) {
    if radix == 10 && spec.prec.is_none() {
        let mut buf = [0u8; 20];
        pad(out, spec, b"", decimal(v, &mut buf), true);
        return;
    }
    let mut digits = match radix {
        8 => format!("{v:o}"),
        16 => format!("{v:x}"),
        b'X' => format!("{v:X}"),
        _ => v.to_string(),
    }
    .into_bytes();
    digits = with_precision(digits, spec.prec, v == 0);
    let mut prefix: &[u8] = b"";
    if spec.alt {
        match radix {
            8 if digits.first() != Some(&b'0') => digits.insert(0, b'0'),
            16 if v != 0 => prefix = b"0x",
            b'X' if v != 0 => prefix = b"0X",
            _ => {}
        }
    }
    pad(out, spec, prefix, &digits, spec.prec.is_none());
}

/// Applies an integer precision: minimum digits, and "%.0d" of zero prints nothing.
fn with_precision(digits: Vec<u8>, prec: Option<usize>, zero: bool) -> Vec<u8> {
    match prec {
        Some(0) if zero => Vec::new(),
        Some(p) if p.min(MAX_FIELD) > digits.len() => {
            let mut d = vec![b'0'; p.min(MAX_FIELD) - digits.len()];
            d.extend_from_slice(&digits);
            d
        }
        _ => digits,
    }
}

/// Floating conversions `e E f F g G`.
pub fn fmt_float(out: &mut Vec<u8>, spec: &Spec, v: f64, conv: u8) {
    let upper = conv.is_ascii_uppercase();
    let sign: &[u8] = if v.is_sign_negative() {
        b"-"
    } else if spec.plus {
        b"+"
    } else if spec.space {
        b" "
    } else {
        b""
    };
    let a = v.abs();
    if !a.is_finite() {
        let s = if a.is_nan() { "nan" } else { "inf" };
        let s = if upper { s.to_uppercase() } else { s.to_string() };
        pad(out, spec, sign, s.as_bytes(), false);
        return;
    }
    let prec = spec.prec.unwrap_or(6).min(MAX_FIELD);
    let body = match conv.to_ascii_lowercase() {
        b'e' => exp_form(a, prec, spec.alt, upper),
        b'f' => fixed_form(a, prec, spec.alt),
        _ => general_form(a, prec, spec.alt, upper),
    };
    pad(out, spec, sign, body.as_bytes(), true);
}

/// Digits past which every f64 prints zeros: its exact decimal expansion has at
/// most 1074 fractional digits (and 767 significant ones). Rust's formatter is
/// asked for no more and the rest are appended by hand: it panics past u16::MAX
/// digits, and appending zeros is cheaper than computing them.
const EXACT_DIGITS: usize = 1100;

fn fixed_form(a: f64, prec: usize, alt: bool) -> String {
    let p = prec.min(EXACT_DIGITS);
    let mut s = format!("{a:.p$}");
    s.push_str(&"0".repeat(prec - p));
    if alt && prec == 0 {
        s.push('.');
    }
    s
}

/// C's `%e`: one digit, point, `prec` digits, `e`, sign, at least two exponent digits.
fn exp_form(a: f64, prec: usize, alt: bool, upper: bool) -> String {
    let (mant, exp) = split_exp(a, prec);
    let mut s = mant;
    if alt && prec == 0 {
        s.push('.');
    }
    s.push(if upper { 'E' } else { 'e' });
    s.push(if exp < 0 { '-' } else { '+' });
    s.push_str(&format!("{:02}", exp.unsigned_abs()));
    s
}

/// Rust's `{:.prec$e}` rounds correctly; split it into mantissa and exponent.
fn split_exp(a: f64, prec: usize) -> (String, i32) {
    let p = prec.min(EXACT_DIGITS);
    let s = format!("{a:.p$e}");
    let (mut mant, exp) = match s.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse().unwrap_or(0)),
        None => (s, 0),
    };
    mant.push_str(&"0".repeat(prec - p));
    (mant, exp)
}

/// C's `%g`: %e or %f depending on the exponent, trailing zeros removed unless `#`.
fn general_form(a: f64, prec: usize, alt: bool, upper: bool) -> String {
    // Without `#` the zeros past the exact digits are trimmed anyway; the %e/%f
    // choice is unchanged as no f64 has a decimal exponent near EXACT_DIGITS.
    let p = match prec {
        0 => 1,
        p if !alt => p.min(EXACT_DIGITS),
        p => p,
    };
    let x = if a == 0.0 { 0 } else { split_exp(a, (p - 1).min(EXACT_DIGITS)).1 };
    let mut s = if (x as i64) < p as i64 && x >= -4 {
        fixed_form(a, (p as i64 - 1 - x as i64).max(0) as usize, alt)
    } else {
        exp_form(a, p - 1, alt, upper)
    };
    if !alt {
        let (mant, exp) = match s.find(['e', 'E']) {
            Some(i) => (s[..i].to_string(), s[i..].to_string()),
            None => (s.clone(), String::new()),
        };
        let mant = if mant.contains('.') { mant.trim_end_matches('0').trim_end_matches('.').to_string() } else { mant };
        s = mant + &exp;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(spec: Spec, v: f64, c: u8) -> String {
        let mut o = Vec::new();
        fmt_float(&mut o, &spec, v, c);
        String::from_utf8(o).unwrap()
    }

    #[test]
    fn floats_match_c() {
        let d = Spec::default();
        assert_eq!(f(d, 1.5, b'f'), "1.500000");
        assert_eq!(f(d, 1234.5, b'e'), "1.234500e+03");
        assert_eq!(f(d, 0.0001234, b'E'), "1.234000E-04");
        assert_eq!(f(d, 100000.0, b'g'), "100000");
        assert_eq!(f(d, 1000000.0, b'g'), "1e+06");
        assert_eq!(f(d, 0.0001, b'g'), "0.0001");
        assert_eq!(f(d, 0.00001, b'G'), "1E-05");
        assert_eq!(f(Spec { prec: Some(3), ..d }, 1.23456, b'g'), "1.23");
        assert_eq!(f(Spec { alt: true, ..d }, 2.0, b'g'), "2.00000");
        assert_eq!(f(Spec { width: 10, zero: true, ..d }, -1.5, b'f'), "-01.500000");
        assert_eq!(f(Spec { plus: true, ..d }, 0.0, b'e'), "+0.000000e+00");
    }

    #[test]
    fn precision_past_rust_formatter_limit() {
        // Rust's formatter panics on precisions over u16::MAX; C prints the zeros.
        let d = Spec { prec: Some(MAX_FIELD), ..Spec::default() };
        let e = f(d, 1.5, b'e');
        assert!(e.starts_with("1.5000") && e.ends_with("0e+00") && e.len() == MAX_FIELD + 6, "{}", e.len());
        assert_eq!(f(d, 1.5, b'f').len(), MAX_FIELD + 2);
        // %g of a small value asks %f for a few more digits than its precision.
        let g = Spec { prec: Some(u16::MAX as usize), alt: true, ..Spec::default() };
        assert!(f(g, 0.0001, b'g').starts_with("0.000100000"));
        // Without `#`, %g trims the zeros: a huge precision prints the exact value.
        let exact = "0.1000000000000000055511151231257827021181583404541015625";
        assert_eq!(f(Spec { prec: Some(70_000), ..Spec::default() }, 0.1, b'g'), exact);
        assert_eq!(f(Spec { prec: Some(MAX_FIELD), alt: true, ..Spec::default() }, 0.1, b'g').len(), MAX_FIELD + 2);
    }

    #[test]
    fn digits_past_exact_ones_are_zeros() {
        // Appending zeros past EXACT_DIGITS must give what full formatting gives.
        for v in [5e-324, 2.2250738585072014e-308, 0.1, 1.0 / 3.0, 1e300, 123456.789] {
            for prec in [1074, EXACT_DIGITS, 1500, 4000] {
                assert_eq!(fixed_form(v, prec, false), format!("{v:.prec$}"), "{v} {prec}");
                let (m, e) = split_exp(v, prec);
                assert_eq!(format!("{m}e{e}"), format!("{v:.prec$e}"), "{v} {prec}");
            }
        }
    }

    #[test]
    fn integers_match_c() {
        let mut o = Vec::new();
        let d = Spec::default();
        fmt_signed(&mut o, &Spec { width: 6, zero: true, ..d }, -42);
        fmt_signed(&mut o, &Spec { width: 6, prec: Some(4), zero: true, ..d }, 42);
        fmt_unsigned(&mut o, &Spec { alt: true, ..d }, 255, 16);
        fmt_unsigned(&mut o, &Spec { alt: true, ..d }, 8, 8);
        fmt_unsigned(&mut o, &Spec { alt: true, ..d }, 0, 16);
        fmt_signed(&mut o, &Spec { prec: Some(0), ..d }, 0);
        fmt_signed(&mut o, &Spec { space: true, ..d }, 7);
        assert_eq!(String::from_utf8(o).unwrap(), "-00042  00420xff0100 7");
    }
}
