//! Values that D expressions produce and that actions record.

/// A D integer: 64 bits of two's-complement storage plus the size and signedness of its
/// D type, which decide how `trace()` prints it and how `%d`/`%u` read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Int {
    /// The value, sign- or zero-extended to 64 bits according to `signed`.
    pub bits: u64,
    /// Size in bytes of the D type: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
}

impl Int {
    pub fn i64(v: i64) -> Int {
        Int { bits: v as u64, size: 8, signed: true }
    }
    pub fn u64(v: u64) -> Int {
        Int { bits: v, size: 8, signed: false }
    }
    pub fn as_i64(self) -> i64 {
        self.bits as i64
    }
}

/// One recorded datum.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    Int(Int),
    /// A D string: bytes up to (not including) the terminating NUL. Not necessarily UTF-8:
    /// strings copied from traced processes are printed byte for byte.
    Str(Vec<u8>),
    /// Raw memory: `tracemem()`, or a struct/array value traced whole.
    Bytes(Vec<u8>),
    /// A stack already symbolized, innermost frame first, one rendered line per frame
    /// (`libc.so.6`malloc+0x1a`); `ustack()`/`stack()` keys and `trace()` arguments.
    Stack(Vec<String>),
}

impl Value {
    pub fn int(v: i64) -> Value {
        Value::Int(Int::i64(v))
    }
    pub fn str(s: &str) -> Value {
        Value::Str(s.as_bytes().to_vec())
    }
}
