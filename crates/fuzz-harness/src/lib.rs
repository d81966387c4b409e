//! udtrace's handling of untrusted input, each as one function of arbitrary bytes that
//! must return (no panic, no hang, no huge allocation): the bodies of the fuzz targets
//! in `fuzz/` and of this crate's deterministic no-panic test, so that both drive the
//! same code.
//!
//! - [`elf::run`]: an object file a process maps, through everything done with one;
//! - [`record::run`]: a shared ring and its records, as a hostile traced process can
//!   write them;
//! - [`procfs::run`]: the text of `/proc` files.
//!
//! [`mutate`] is the fixed-seed mutator the no-panic tests use in place of a fuzzer.
//!
//! Must not: do I/O. No `unsafe`.

#![forbid(unsafe_code)]

pub mod elf;
pub mod mutate;
pub mod procfs;
pub mod record;

/// Reads fuzz input as a little stream of choices; past its end every read gives 0, so
/// any input, even empty, is a whole run.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_le_bytes(b)
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(self.data.len())
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}
