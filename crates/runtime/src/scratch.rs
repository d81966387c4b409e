//! Scratch space: the memory `alloca()` hands out, one clause at a time. Pointers into
//! it are offsets, as in DTrace: the first 8 bytes stand for NULL, so the first
//! allocation is at 8 and everything below is an invalid address. Each clause starts
//! with an empty scratch space; accesses are checked against what it has allocated.

use crate::eval::Fault;

/// Bytes below the first allocation: offset 0 is NULL.
const NULL_GUARD: usize = 8;

#[derive(Debug)]
pub struct Scratch {
    /// What the current clause has allocated (its length is the end of the last
    /// allocation), zeroed as it grows.
    mem: Vec<u8>,
    /// The end of the space: the NULL guard plus the scratchsize.
    limit: u64,
}

impl Scratch {
    /// Scratch space for `room` bytes of allocations (the scratchsize option, as
    /// libdtrace rounds it).
    pub fn new(room: u64) -> Scratch {
        Scratch { mem: vec![0; NULL_GUARD], limit: room.saturating_add(NULL_GUARD as u64) }
    }

    /// Empties the space for the next clause.
    pub fn reset(&mut self) {
        self.mem.truncate(NULL_GUARD);
    }

    /// The most one allocation (or copy) may take.
    pub fn room(&self) -> u64 {
        self.limit - NULL_GUARD as u64
    }

    fn top(&self) -> usize {
        self.mem.len()
    }

    /// alloca(size): the offset of `size` fresh bytes, 8-byte aligned.
    pub fn alloc(&mut self, size: u64) -> Result<u64, Fault> {
        let at = self.top() as u64;
        let end = at.checked_add(size).and_then(|e| e.checked_add(7)).map(|e| e & !7);
        match end {
            Some(end) if end <= self.limit && at + NULL_GUARD as u64 <= self.limit => {
                self.mem.resize(end as usize, 0);
                Ok(at)
            }
            _ => Err(Fault::NoScratch),
        }
    }

    /// Checks an access of `size` bytes at offset `at`, as dt_cg_alloca_access_check
    /// does: the start must lie in what is allocated, then the whole access.
    pub fn check(&self, at: u64, size: u64) -> Result<usize, Fault> {
        let top = self.top() as u64;
        if at < NULL_GUARD as u64 || at >= top {
            return Err(Fault::BadAddress(at));
        }
        if size > top - at {
            return Err(Fault::BadSize(size));
        }
        Ok(at as usize)
    }

    pub fn read(&self, at: u64, size: u64) -> Result<Vec<u8>, Fault> {
        let start = self.check(at, size)?;
        Ok(self.mem[start..start + size as usize].to_vec())
    }

    pub fn write(&mut self, at: u64, data: &[u8]) -> Result<(), Fault> {
        let start = self.check(at, data.len() as u64)?;
        self.mem[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Allocated bytes from offset `at` on.
    pub fn available(&self, at: u64) -> usize {
        (self.top() as u64).saturating_sub(at) as usize
    }

    /// The string at offset `at`: up to its NUL, the end of what is allocated, or
    /// `max` bytes.
    pub fn read_str(&self, at: u64, max: usize) -> Result<Vec<u8>, Fault> {
        let start = self.check(at, 0)?;
        let avail = &self.mem[start..];
        let end = avail.iter().position(|&c| c == 0).unwrap_or(avail.len()).min(max);
        Ok(avail[..end].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_offsets_from_8() {
        let mut s = Scratch::new(256);
        assert_eq!(s.alloc(1), Ok(8));
        assert_eq!(s.alloc(0), Ok(16));
        assert_eq!(s.alloc(0), Ok(16));
        assert_eq!(s.alloc(10), Ok(16));
        assert_eq!(s.alloc(300), Err(Fault::NoScratch));
        s.reset();
        assert_eq!(s.alloc(1), Ok(8));
    }

    #[test]
    fn accesses_are_checked_as_dtrace_checks_them() {
        let mut s = Scratch::new(256);
        let p = s.alloc(15).unwrap();
        assert_eq!(s.check(p - 1, 1), Err(Fault::BadAddress(7)));
        assert_eq!(s.check(p + 16, 1), Err(Fault::BadAddress(24)));
        assert_eq!(s.check(p + 15, 2), Err(Fault::BadSize(2)));
        assert_eq!(s.check(p + 15, 1), Ok(23));
        assert_eq!(s.check(0, 1), Err(Fault::BadAddress(0)));
        s.write(p, b"ab\0").unwrap();
        assert_eq!(s.read_str(p, 256).unwrap(), b"ab");
        assert_eq!(s.read_str(p, 1).unwrap(), b"a");
    }

    #[test]
    fn a_huge_scratchsize_costs_only_what_is_allocated() {
        let mut s = Scratch::new(1 << 40);
        assert_eq!(s.alloc(16), Ok(8));
        assert_eq!(s.mem.len(), 24);
        assert_eq!(s.alloc(u64::MAX), Err(Fault::NoScratch));
    }

    #[test]
    fn filling_the_space_exactly_is_allowed() {
        let mut s = Scratch::new(8);
        assert_eq!(s.alloc(8), Ok(8));
        assert_eq!(s.alloc(1), Err(Fault::NoScratch));
    }
}
