//! The record of a change to the traced processes made in the kernel, for processes
//! followed without ptrace (another tracer holds them): a traced process forked a new
//! one, which now fires too, or the last thread of one exited. It shares the ring with
//! the firings, so it comes before every firing of the child it announces.
//!
//! ```text
//!   offset size
//!      0     8  cookie: LINEAGE_COOKIE | kind (1 forked, 2 exited, 3 exec'd,
//!                 4 loaded objects)
//!      8     4  pid (the parent, for a fork)
//!     12     4  the child (0 for an exit or an exec)
//! ```

/// Tells a lineage record from the others: a pid record's cookie is a small index,
/// a proc record's has bit 62 and a profile sample's bit 61.
pub const LINEAGE_COOKIE: u64 = 1 << 60;
pub const FORKED: u64 = 1;
pub const EXITED: u64 = 2;
pub const EXECED: u64 = 3;
pub const LOADED: u64 = 4;
pub const SIZE: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lineage {
    Forked {
        parent: i32,
        child: i32,
    },
    Exited {
        pid: i32,
    },
    /// It runs a new image, whose probes udtrace has yet to arm.
    Execed {
        pid: i32,
    },
    /// Its dynamic loader has mapped (or unmapped) objects, whose probes udtrace has
    /// yet to arm.
    Loaded {
        pid: i32,
    },
}

/// The lineage record in `rec`, or `None` when `rec` is another kind of record.
pub fn parse(rec: &[u8]) -> Option<Lineage> {
    let cookie = u64::from_ne_bytes(rec.get(..8)?.try_into().ok()?);
    if cookie & !7 != LINEAGE_COOKIE {
        return None;
    }
    let word = |at: usize| rec.get(at..at + 4).and_then(|b| b.try_into().ok()).map(i32::from_ne_bytes);
    let (pid, child) = (word(8)?, word(12)?);
    match cookie & 7 {
        FORKED => Some(Lineage::Forked { parent: pid, child }),
        EXITED => Some(Lineage::Exited { pid }),
        EXECED => Some(Lineage::Execed { pid }),
        LOADED => Some(Lineage::Loaded { pid }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cookie: u64, pid: i32, child: i32) -> Vec<u8> {
        [cookie.to_ne_bytes().as_slice(), &pid.to_ne_bytes(), &child.to_ne_bytes()].concat()
    }

    #[test]
    fn records_read_back_as_written() {
        assert_eq!(parse(&rec(LINEAGE_COOKIE | FORKED, 41, 42)), Some(Lineage::Forked { parent: 41, child: 42 }));
        assert_eq!(parse(&rec(LINEAGE_COOKIE | EXITED, 41, 0)), Some(Lineage::Exited { pid: 41 }));
        assert_eq!(parse(&rec(LINEAGE_COOKIE | EXECED, 41, 0)), Some(Lineage::Execed { pid: 41 }));
        assert_eq!(parse(&rec(LINEAGE_COOKIE | LOADED, 41, 0)), Some(Lineage::Loaded { pid: 41 }));
        assert_eq!(parse(&rec(LINEAGE_COOKIE | 5, 41, 0)), None);
        assert_eq!(parse(&rec(crate::proc::PROC_COOKIE | LINEAGE_COOKIE | FORKED, 1, 2)), None);
        assert_eq!(parse(&rec(7, 1, 2)), None);
        assert_eq!(parse(&rec(LINEAGE_COOKIE | FORKED, 1, 2)[..12]), None);
    }
}
