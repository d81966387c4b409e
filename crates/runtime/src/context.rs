//! What a firing knows about the world: built-in variables, registers, the traced
//! process's memory and stack. Backends implement `Context`; the consumer only asks.

use udtrace_lang::ir::Builtin;
use udtrace_lang::types::SymKind;

use crate::value::Value;

pub trait Context {
    /// The value of a built-in variable, or `None` where this firing has none (it then
    /// reads as zero or the empty string).
    fn builtin(&self, b: Builtin) -> Option<Value>;

    /// [`Context::builtin`]'s integer, where it gives one: a record's field (`arg0`)
    /// read without building a `Value` at every layer. `None` is "ask `builtin`".
    fn builtin_int(&self, b: Builtin) -> Option<u64> {
        match self.builtin(b) {
            Some(Value::Int(i)) => Some(i.bits),
            _ => None,
        }
    }

    /// `uregs[n]`; `None` is an illegal index (or no registers at all).
    fn register(&self, _n: u64) -> Option<u64> {
        None
    }

    /// Bytes of the traced process's memory captured for this firing.
    fn read_memory(&self, _addr: u64, _len: usize) -> Option<Vec<u8>> {
        None
    }

    /// A NUL-terminated string at `addr`, at most `max - 1` bytes.
    fn read_string(&self, _addr: u64, _max: usize) -> Option<Vec<u8>> {
        None
    }

    /// The symbolized stack, innermost frame first.
    fn stack(&self, _user: bool, _frames: Option<u32>) -> Vec<String> {
        Vec::new()
    }

    /// Whether the current process descends from (or is) `pid`.
    fn progenyof(&self, _pid: i64) -> bool {
        false
    }

    /// A user address as `usym`/`ufunc`/`umod`/`uaddr` print it (`libc.so.6`malloc`),
    /// or `None` where nothing is known about it.
    fn symbol(&self, _addr: u64, _kind: SymKind) -> Option<String> {
        None
    }
}

/// A context that answers some built-ins itself and passes everything else to
/// `inner`: the probe's identity over a backend's context, the ERROR probe's
/// arguments over the faulting firing's.
// Generic over the closure, not `dyn`: the probe's identity is asked at every builtin a
// clause reads, and a call through a pointer to learn that `arg0` is not one of its
// built-ins cost 5% of a printf record.
pub struct Overlay<'a, F: Fn(Builtin) -> Option<Value>> {
    pub inner: &'a dyn Context,
    pub builtins: F,
}

impl<F: Fn(Builtin) -> Option<Value>> Context for Overlay<'_, F> {
    #[inline]
    fn builtin(&self, b: Builtin) -> Option<Value> {
        match (self.builtins)(b) {
            Some(v) => Some(v),
            None => self.inner.builtin(b),
        }
    }
    #[inline]
    fn builtin_int(&self, b: Builtin) -> Option<u64> {
        match (self.builtins)(b) {
            Some(Value::Int(i)) => Some(i.bits),
            Some(_) => None,
            None => self.inner.builtin_int(b),
        }
    }
    fn register(&self, n: u64) -> Option<u64> {
        self.inner.register(n)
    }
    fn read_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.inner.read_memory(addr, len)
    }
    fn read_string(&self, addr: u64, max: usize) -> Option<Vec<u8>> {
        self.inner.read_string(addr, max)
    }
    fn stack(&self, user: bool, frames: Option<u32>) -> Vec<String> {
        self.inner.stack(user, frames)
    }
    fn progenyof(&self, pid: i64) -> bool {
        self.inner.progenyof(pid)
    }
    fn symbol(&self, addr: u64, kind: SymKind) -> Option<String> {
        self.inner.symbol(addr, kind)
    }
}
