//! Subroutines that work on memory (scratch space and the traced process's) and the
//! address-formatting ones: alloca(), copyin(), copyinto(), bcopy(), inet_ntoa(),
//! inet_ntoa6(), inet_ntop(), link_ntop(), and the loads and stores of scratch
//! space that alloca-tainted pointers make.

use udtrace_lang::ir::{Expr, Subr};
use udtrace_lang::types::Type;

use crate::eval::{as_u64, int_of, value_from_bytes, EvalResult, Evaluator, Fault};
use crate::value::Value;

/// DTrace's address families and link types (net.d).
const AF_INET: i64 = 2;
const AF_INET6: i64 = 10;
const ARPHRD_ETHER: i64 = 1;
const ARPHRD_INFINIBAND: i64 = 32;

impl Evaluator<'_> {
    /// The subroutines of this module; `None` for the others.
    pub(crate) fn memory_subr(&mut self, subr: Subr, args: &[Expr], ty: &Type) -> EvalResult<Option<Value>> {
        Ok(Some(match subr {
            Subr::Alloca => {
                let size = as_u64(&self.eval(&args[0])?);
                int_of(ty, self.scratch.alloc(size)?)
            }
            Subr::Copyin => {
                let src = as_u64(&self.eval(&args[0])?);
                let size = self.copy_size(&args[1])?;
                let at = self.scratch.alloc(size)?;
                let data = self.read_bytes(src, size as usize)?;
                self.scratch.write(at, &data)?;
                int_of(ty, at)
            }
            Subr::Copyinto => {
                let src = as_u64(&self.eval(&args[0])?);
                let size = self.copy_size(&args[1])?;
                let dst = as_u64(&self.eval(&args[2])?);
                self.scratch.check(dst, size)?;
                let data = self.read_bytes(src, size as usize)?;
                self.scratch.write(dst, &data)?;
                Value::Int(crate::value::Int::i64(0))
            }
            Subr::Bcopy => {
                let src = self.eval(&args[0])?;
                let dst = as_u64(&self.eval(&args[1])?);
                let size = self.copy_size(&args[2])?;
                let data = self.bcopy_source(&args[0], src, size)?;
                self.scratch.check(dst, size)?;
                self.scratch.write(dst, &data)?;
                Value::Int(crate::value::Int::i64(0))
            }
            Subr::InetNtoa => {
                let b = self.pointed_bytes(&args[0], 4)?;
                Value::Str(ipv4(&b).into_bytes())
            }
            Subr::InetNtoa6 => {
                let b = self.pointed_bytes(&args[0], 16)?;
                let strict = match args.get(1) {
                    Some(a) => as_u64(&self.eval(a)?) != 0,
                    None => false,
                };
                self.clamped(ipv6(&b, strict))
            }
            Subr::InetNtop => {
                let af = as_u64(&self.eval(&args[0])?) as i64;
                let text = match af {
                    AF_INET => ipv4(&self.pointed_bytes(&args[1], 4)?),
                    AF_INET6 => ipv6(&self.pointed_bytes(&args[1], 16)?, true),
                    _ => return Err(Fault::IllegalOperation),
                };
                self.clamped(text)
            }
            Subr::LinkNtop => {
                let kind = as_u64(&self.eval(&args[0])?) as i64;
                let len = match kind {
                    ARPHRD_ETHER => 6,
                    ARPHRD_INFINIBAND => 20,
                    _ => return Err(Fault::IllegalOperation),
                };
                let b = self.pointed_bytes(&args[1], len)?;
                let text = b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":");
                self.clamped(text)
            }
            // No socket buffer lives in a traced process: whatever pcap() is given is
            // no packet's address.
            Subr::Pcap => return Err(Fault::BadAddress(as_u64(&self.eval(&args[0])?))),
            _ => return Ok(None),
        }))
    }

    /// A string result cut to strsize.
    fn clamped(&self, text: String) -> Value {
        let mut b = text.into_bytes();
        b.truncate(self.strsize);
        Value::Str(b)
    }

    /// The size argument of a copy: negative or beyond the scratch space is a bad size.
    fn copy_size(&mut self, e: &Expr) -> EvalResult<u64> {
        let size = as_u64(&self.eval(e)?);
        if size as i64 >= 0 && size <= self.scratch.room() {
            Ok(size)
        } else {
            Err(Fault::BadSize(size))
        }
    }

    /// The `size` bytes bcopy() copies from: scratch space, a D string or array (its
    /// storage, NUL padded), or the traced process's memory.
    fn bcopy_source(&mut self, e: &Expr, v: Value, size: u64) -> EvalResult<Vec<u8>> {
        let n = size as usize;
        match v {
            Value::Int(i) if e.taint.alloca => self.scratch.read(i.bits, size),
            Value::Int(i) if i.bits == 0 => Err(Fault::BadAddress(0)),
            Value::Int(i) => self.read_bytes(i.bits, n),
            Value::Str(mut b) | Value::Bytes(mut b) => {
                b.resize(n, 0);
                Ok(b)
            }
            Value::Stack(_) => Err(Fault::IllegalOperation),
        }
    }

    /// The `len` bytes a pointer argument points to: in scratch space, in a D variable
    /// (an array held by value), or in the traced process.
    /// The address a pointer expression holds and the `len` bytes there (`print()`),
    /// the expression evaluated once.
    pub(crate) fn pointed_object(&mut self, e: &Expr, len: usize) -> EvalResult<(u64, Vec<u8>)> {
        match self.eval(e)? {
            Value::Int(i) if e.taint.alloca => Ok((i.bits, self.scratch.read(i.bits, len as u64)?)),
            Value::Int(i) => Ok((i.bits, self.read_bytes(i.bits, len)?)),
            _ => Err(Fault::IllegalOperation),
        }
    }

    pub(crate) fn pointed_bytes(&mut self, e: &Expr, len: usize) -> EvalResult<Vec<u8>> {
        match self.eval(e)? {
            Value::Int(i) if e.taint.alloca => self.scratch.read(i.bits, len as u64),
            Value::Int(i) => self.read_bytes(i.bits, len),
            Value::Str(mut b) | Value::Bytes(mut b) => {
                b.resize(len, 0);
                Ok(b)
            }
            Value::Stack(_) => Err(Fault::IllegalOperation),
        }
    }

    /// How many bytes of scratch space a value of `ty` takes (a string: its first byte
    /// at least, the rest up to what is allocated).
    pub(crate) fn scratch_size_of(&self, ty: &Type) -> u64 {
        if ty.is_string() {
            return 1;
        }
        self.types.size_of(ty).unwrap_or(1)
    }

    /// Reads a `ty` from scratch space at offset `at`.
    pub(crate) fn load_scratch(&self, at: u64, ty: &Type) -> EvalResult<Value> {
        if ty.is_string() {
            return Ok(Value::Str(self.scratch.read_str(at, self.strsize)?));
        }
        let data = self.scratch.read(at, self.scratch_size_of(ty))?;
        Ok(value_from_bytes(&data, ty))
    }

    /// The string an alloca-tainted `char *` points to.
    pub(crate) fn scratch_string(&self, at: u64) -> EvalResult<Value> {
        Ok(Value::Str(self.scratch.read_str(at, self.strsize)?))
    }

    /// Writes `v` as a `ty` into scratch space at offset `at`, already checked for the
    /// type's size; a string takes its NUL too, as far as the allocation reaches.
    pub(crate) fn store_scratch(&mut self, at: u64, ty: &Type, v: Value) {
        let size = self.scratch_size_of(ty) as usize;
        let data = match v {
            Value::Int(i) => i.bits.to_le_bytes()[..size.min(8)].to_vec(),
            Value::Str(mut s) if ty.is_string() => {
                s.truncate(self.strsize);
                s.push(0);
                s
            }
            Value::Str(mut b) | Value::Bytes(mut b) => {
                b.resize(size, 0);
                b
            }
            Value::Stack(_) => vec![0; size],
        };
        let room = self.scratch.available(at);
        // The store was checked for its type's size; a string's tail is cut to fit.
        let _ = self.scratch.write(at, &data[..data.len().min(room)]);
    }
}

/// A dotted quad from four bytes in network order.
fn ipv4(b: &[u8]) -> String {
    format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
}

/// An IPv6 address as DTrace prints it: the longest run of two or more zero words
/// collapsed to `::`; addresses with a six-word zero prefix (other than `::` and
/// `::1`) and IPv4-mapped ones as a dotted quad, prefixed with `::` or `::ffff:`
/// when `strict`.
fn ipv6(b: &[u8], strict: bool) -> String {
    let w: Vec<u16> = b.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
    let quad = || ipv4(&b[12..16]);
    if w[..5].iter().all(|&x| x == 0) {
        if w[5] == 0xffff {
            return if strict { format!("::ffff:{}", quad()) } else { quad() };
        }
        let compatible = w[5] == 0 && (w[6] != 0 || w[7] > 1);
        if compatible {
            return if strict { format!("::{}", quad()) } else { quad() };
        }
    }
    let (start, len) = longest_zero_run(&w);
    let hex = |ws: &[u16]| ws.iter().map(|x| format!("{x:x}")).collect::<Vec<_>>().join(":");
    if len < 2 {
        return hex(&w);
    }
    format!("{}::{}", hex(&w[..start]), hex(&w[start + len..]))
}

/// The first longest run of zero words: (start, length).
fn longest_zero_run(w: &[u16]) -> (usize, usize) {
    let (mut best, mut run_start, mut run) = ((0, 0), 0, 0);
    for (i, &x) in w.iter().enumerate() {
        if x == 0 {
            if run == 0 {
                run_start = i;
            }
            run += 1;
            if run > best.1 {
                best = (run_start, run);
            }
        } else {
            run = 0;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(bytes: &[(usize, u8)], strict: bool) -> String {
        let mut b = [0u8; 16];
        for &(i, v) in bytes {
            b[i] = v;
        }
        ipv6(&b, strict)
    }

    #[test]
    fn ipv6_as_dtrace_prints_it() {
        let a = [(0, 0xfe), (1, 0x80), (8, 2), (9, 0x14), (10, 0x4f), (11, 0xff), (12, 0xfe), (13, 0x0b)];
        let mut full = a.to_vec();
        full.extend([(14, 0x76), (15, 0xc8)]);
        assert_eq!(v6(&full, false), "fe80::214:4fff:fe0b:76c8");
        assert_eq!(v6(&[(15, 1)], false), "::1");
        assert_eq!(v6(&[], false), "::");
        assert_eq!(v6(&[(12, 0x7f), (15, 1)], false), "127.0.0.1");
        assert_eq!(v6(&[(12, 0x7f), (15, 1)], true), "::127.0.0.1");
        assert_eq!(v6(&[(10, 0xff), (11, 0xff), (12, 0x7f), (15, 1)], true), "::ffff:127.0.0.1");
        assert_eq!(v6(&[(10, 0xff), (11, 0xfe), (12, 0x7f), (15, 1)], false), "::fffe:7f00:1");
        let tail: Vec<_> = (0..16).map(|i| (i, 0xffu8)).collect();
        assert_eq!(v6(&tail, false), "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
        let mut h: Vec<_> =
            [0xfe, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 2, 0x14].iter().copied().enumerate().collect();
        assert_eq!(v6(&h, false), "fe12:3456:789a:bcde:214::");
        h.extend([(10, 0x4f), (11, 0xff), (12, 0xfe), (13, 0x0b)]);
        assert_eq!(v6(&h, false), "fe12:3456:789a:bcde:214:4fff:fe0b:0");
    }
}
