//! Where a program's variables and aggregations live, and what their words mean.
//!
//! **Aggregation state** is a row of 64-bit words, the first the number of updates
//! ("hits": an entry with none is absent, as a key DTrace never saw), then per function:
//!
//! ```text
//! count      hits
//! sum        hits, sum
//! min, max   hits, value            (value starts at i64::MAX / i64::MIN)
//! avg        hits, sum
//! stddev     hits, sum, sumsq low, sumsq high   (sumsq: 128 bits, of |value|²)
//! quantize   hits, 127 buckets
//! lquantize  hits, levels + 2 bins  (underflow, levels, overflow)
//! llquantize hits, bins             (the program computes the bin: crate::llquantize)
//! ```
//!
//! Rows of the same key merge word by word ([`merge`]): added, min/max compared.
//!
//! **The buffer** (in-process and at breakpoints: a memfd shared by the process, its
//! forked children and udtrace; BPF keeps the same rows in maps):
//!
//! ```text
//! offset  field
//!      0  u64  MAGIC
//!      8  u64  nthreads (a power of two)
//!     16  u64  thread entry size in bytes
//!   2048  u64 × 128  aggregation drops (a keyed table full), CPU n at n % 128
//!   3072  u64 × 128  dynamic-variable drops (the thread table full), CPU n at n % 128
//!   4096  thread table: nthreads entries of [tid, tls × Layout::tls, keyless rows],
//!         each rounded up to whole cache lines (64 bytes)
//!         keyed tables, one per aggregation with keys, in aggregation order:
//!         nentries(agg) entries of [status, keys × nkeys, row]
//!         the string table (when Layout::strsize > 0): nentries entries of
//!         [status, id, the string's bytes NUL-padded to strsize rounded up to words]
//! ```
//!
//! **Strings** (`copyinstr` keys, [`crate::op::Op::Str`]): a string's id is
//! [`string_id`], the hash of its NUL-padded words with the low bit set (never 0, the
//! id of no string). Its entry is found from the id as a keyed entry is (and claimed
//! alike: status 0 → 1 → 2); an entry with the id and the same bytes is the string's,
//! one with the id and other bytes a collision (an aggregation drop, never a merged
//! key). Two threads filling entries of one id at once may each make one; readers keep
//! either (same bytes), so two strings can share an id only if they collide and are
//! first seen at the same instant.
//!
//! A thread finds its entry from `tid & (nthreads - 1)`, looking at most
//! [`MAX_PROBES`] entries on (wrapping): the one whose first word is its tid, or a free
//! one (0) it claims with a compare-and-swap, writing the rows' initial words
//! ([`AggFn::init`]) before using it. Only that thread writes its entry afterwards
//! (plain stores; udtrace reads it at any time, word by word). A keyed aggregation's
//! entry is found from [`key_hash`] the same way: `status` 2 is a published entry
//! (keys and initial words written), 0 free (claimed by a compare-and-swap to 1, then
//! filled, then 2), 1 being filled by another thread, passed over (two entries may then
//! hold the same key: readers merge them). Its rows are updated with atomic operations
//! (any thread of any process sharing the buffer). A firing that finds no entry is
//! counted as a drop on its CPU and does nothing else.

/// First word of a buffer.
pub const MAGIC: u64 = u64::from_le_bytes(*b"UDTDIF01");
pub const OFF_NTHREADS: usize = 8;
pub const OFF_ENTRY_SIZE: usize = 16;
pub const OFF_AGG_DROPS: usize = 2048;
pub const OFF_DYN_DROPS: usize = 3072;
/// CPUs with a drop counter of their own (CPU n counts at n % DROP_CPUS).
pub const DROP_CPUS: usize = 128;
pub const OFF_THREADS: usize = 4096;
/// Thread entries are a whole number of these bytes (no two threads share a line).
pub const CACHE_LINE: usize = 64;
/// Entries looked at, from the hashed one, before a firing gives up (a drop).
pub const MAX_PROBES: usize = 16;

/// Status words of a keyed entry.
pub const KEY_FREE: u64 = 0;
pub const KEY_FILLING: u64 = 1;
pub const KEY_READY: u64 = 2;

pub const QUANTIZE_BUCKETS: usize = 127;
pub const QUANTIZE_ZERO: usize = 63;

/// An aggregating function with its constant parameters, as a row needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggFn {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Stddev,
    Quantize,
    /// `levels` = (limit - base) / step, at least 1.
    Lquantize {
        base: i32,
        step: u16,
        levels: u16,
    },
    /// llquantize: `bins` words after hits; the program computes the bin
    /// ([`crate::llquantize::Shape::ops`]), the update clamps it to the table.
    Llquantize {
        bins: u16,
    },
}

impl AggFn {
    /// Words in a row, hits included.
    pub fn words(self) -> usize {
        match self {
            AggFn::Count => 1,
            AggFn::Sum | AggFn::Min | AggFn::Max | AggFn::Avg => 2,
            AggFn::Stddev => 4,
            AggFn::Quantize => 1 + QUANTIZE_BUCKETS,
            AggFn::Lquantize { levels, .. } => 1 + usize::from(levels) + 2,
            AggFn::Llquantize { bins } => 1 + usize::from(bins),
        }
    }

    /// Words a fresh row starts with other than 0: (word index, value).
    pub fn init(self) -> Option<(usize, u64)> {
        match self {
            AggFn::Min => Some((1, i64::MAX as u64)),
            AggFn::Max => Some((1, i64::MIN as u64)),
            _ => None,
        }
    }

    /// The word (index in the row) a value adds `incr` to, for the quantize family.
    pub fn bucket(self, value: u64) -> Option<usize> {
        match self {
            AggFn::Quantize => Some(1 + quantize_bucket(value as i64)),
            AggFn::Lquantize { base, step, levels } => Some(1 + lquantize_bucket(value, base, step, levels)),
            AggFn::Llquantize { bins } => Some(1 + crate::llquantize::clamp(value, bins)),
            _ => None,
        }
    }
}

/// The quantize bucket of a value: 63 for 0; 64 + ⌊log2 v⌋ for v > 0; 62 − ⌊log2 |v|⌋ for
/// v < 0, at least 0 (DTrace's power-of-two buckets, labelled by `quantize_label`).
pub fn quantize_bucket(v: i64) -> usize {
    if v == 0 {
        QUANTIZE_ZERO
    } else if v > 0 {
        64 + (63 - v.leading_zeros() as usize)
    } else {
        let log = 63 - v.unsigned_abs().leading_zeros() as usize;
        62usize.saturating_sub(log)
    }
}

/// The value that labels quantize bucket `i`.
pub fn quantize_label(i: usize) -> i64 {
    if i < QUANTIZE_ZERO {
        -(1i64 << (QUANTIZE_ZERO - 1 - i))
    } else if i == QUANTIZE_ZERO {
        0
    } else {
        1i64 << (i - QUANTIZE_ZERO - 1).min(62)
    }
}

/// The lquantize bin of a value, compared in 32 bits as the kernel does: 0 below
/// `base`, `levels + 1` at or past the limit.
pub fn lquantize_bucket(value: u64, base: i32, step: u16, levels: u16) -> usize {
    let v = i64::from(value as i32);
    let base = i64::from(base);
    if v < base {
        return 0;
    }
    let level = (v - base) / i64::from(step.max(1));
    if level < i64::from(levels) {
        level as usize + 1
    } else {
        usize::from(levels) + 1
    }
}

/// One aggregation as a program updates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AggDesc {
    pub func: AggFn,
    /// Key registers (0: one row per thread, summed by the reader).
    pub nkeys: u8,
}

/// What every site's program of a session shares: thread-local variables (slots) and
/// aggregations (ids), the same in every process and executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Layout {
    pub tls: u16,
    pub aggs: Vec<AggDesc>,
    /// Bytes of a string's entry in the string table (DTrace's `strsize`: at most
    /// `strsize - 1` characters and a NUL); 0 when no program reads strings.
    pub strsize: u16,
}

impl Layout {
    /// Words of a string in its entry (and in [`string_id`]).
    pub fn string_words(&self) -> usize {
        usize::from(self.strsize).div_ceil(8)
    }
}

/// The id of string `s` (fewer than `strsize` bytes, no NUL) in a layout of `words`
/// string words ([`Layout::string_words`]): [`key_hash`] of its NUL-padded words, with
/// the low bit set.
pub fn string_id(words: &[u64]) -> u64 {
    key_hash(words) | 1
}

/// A string's NUL-padded words.
pub fn string_words(s: &[u8], words: usize) -> Vec<u64> {
    let mut b = vec![0u8; 8 * words];
    let n = s.len().min(b.len());
    b[..n].copy_from_slice(&s[..n]);
    b.chunks(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

/// The string back from its words (up to the first NUL).
pub fn string_of_words(words: &[u64]) -> Vec<u8> {
    let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    b.truncate(b.iter().position(|&c| c == 0).unwrap_or(b.len()));
    b
}

/// The hash of a key (its words in order) that picks a keyed entry.
pub fn key_hash(keys: &[u64]) -> u64 {
    let mut h: u64 = HASH_SEED;
    for &k in keys {
        h = (h ^ k).wrapping_mul(HASH_MUL);
        h ^= h >> 29;
    }
    // splitmix64's finisher: every bit of every key reaches the low bits that pick the
    // entry (without it, keys differing only above bit ~40 all hashed alike there).
    h ^= h >> 30;
    h = h.wrapping_mul(HASH_FINISH[0]);
    h ^= h >> 27;
    h = h.wrapping_mul(HASH_FINISH[1]);
    h ^ (h >> 31)
}

/// [`key_hash`]'s start and its multiplier per key word (the executors emit the same
/// arithmetic).
pub const HASH_SEED: u64 = 0x243f_6a88_85a3_08d3;
pub const HASH_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// The multipliers of [`key_hash`]'s finisher.
pub const HASH_FINISH: [u64; 2] = [0xbf58_476d_1ce4_e5b9, 0x94d0_49bb_1331_11eb];

/// How many thread entries and keys per keyed aggregation a buffer (or a BPF map)
/// holds, from DTrace's options: `dynvarsize` bytes of thread-local variables (each
/// thread's slots; at least 256 threads, at most 65,536) and `aggsize` bytes per keyed
/// aggregation (its widest entry; at least 1, at most 2^20 keys). Powers of two, rounded
/// down: a size is a most, as DTrace's are.
pub fn table_sizes(layout: &Layout, aggsize: u64, dynvarsize: u64) -> (usize, usize) {
    let floor2 = |n: u64| if n == 0 { 1 } else { 1u64 << (63 - n.leading_zeros()) };
    // An entry takes a cache line at least (BufferLayout::new).
    let per_thread = (8 + 8 * u64::from(layout.tls)).max(CACHE_LINE as u64);
    let threads = floor2(dynvarsize / per_thread).clamp(256, 1 << 16) as usize;
    let widest = layout
        .aggs
        .iter()
        .filter(|a| a.nkeys > 0)
        .map(|a| 8 + 8 * u64::from(a.nkeys) + 8 * a.func.words() as u64)
        .chain((layout.strsize > 0).then(|| 16 + 8 * layout.string_words() as u64))
        .max()
        .unwrap_or(8);
    let keys = floor2(aggsize / widest).clamp(1, 1 << 20) as usize;
    (threads, keys)
}

/// A [`Layout`] placed in a buffer: every offset the executors and readers use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferLayout {
    pub nthreads: usize,
    /// Bytes per thread entry.
    pub entry_size: usize,
    /// Per aggregation: where its row is in a thread entry (keyless), or its keyed
    /// table (offset in the buffer, entries, bytes per entry).
    pub places: Vec<AggPlace>,
    /// The string table (when the layout has strings).
    pub strings: Option<StringPlace>,
    /// The buffer's size in bytes.
    pub size: usize,
}

/// The string table: `entries` entries of `entry_size` bytes from `table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringPlace {
    pub table: usize,
    pub entries: usize,
    pub entry_size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggPlace {
    /// Byte offset of the row in a thread entry.
    Thread { row: usize },
    /// A keyed table: the row is at `8 + 8 * nkeys` in each entry.
    Keyed { table: usize, entries: usize, entry_size: usize },
}

impl BufferLayout {
    /// `nthreads` and `keyed_entries` (per keyed aggregation) are rounded up to powers
    /// of two.
    pub fn new(layout: &Layout, nthreads: usize, keyed_entries: usize) -> BufferLayout {
        let nthreads = nthreads.max(1).next_power_of_two();
        let keyed_entries = keyed_entries.max(1).next_power_of_two();
        let mut entry_size = 8 + 8 * usize::from(layout.tls);
        let mut places = Vec::with_capacity(layout.aggs.len());
        for a in &layout.aggs {
            if a.nkeys == 0 {
                places.push(AggPlace::Thread { row: entry_size });
                entry_size += 8 * a.func.words();
            } else {
                places.push(AggPlace::Keyed { table: 0, entries: keyed_entries, entry_size: 0 });
            }
        }
        // Whole cache lines: threads' tids are often consecutive, and entries sharing a
        // line would make every firing of one thread a cache miss for the other.
        let entry_size = entry_size.div_ceil(CACHE_LINE) * CACHE_LINE;
        let mut off = OFF_THREADS + nthreads * entry_size;
        for (p, a) in places.iter_mut().zip(&layout.aggs) {
            if let AggPlace::Keyed { table, entries, entry_size } = p {
                *table = off;
                *entry_size = 8 + 8 * usize::from(a.nkeys) + 8 * a.func.words();
                off += *entries * *entry_size;
            }
        }
        let strings = (layout.strsize > 0).then(|| {
            let p = StringPlace { table: off, entries: keyed_entries, entry_size: 16 + 8 * layout.string_words() };
            off += p.entries * p.entry_size;
            p
        });
        let page = 4096;
        BufferLayout { nthreads, entry_size, places, strings, size: off.div_ceil(page) * page }
    }

    /// The initial header words: (offset, value).
    pub fn header(&self) -> [(usize, u64); 3] {
        [(0, MAGIC), (OFF_NTHREADS, self.nthreads as u64), (OFF_ENTRY_SIZE, self.entry_size as u64)]
    }

    pub fn thread_entry(&self, i: usize) -> usize {
        OFF_THREADS + (i & (self.nthreads - 1)) * self.entry_size
    }

    /// Byte offset of thread-local slot `slot` in a thread entry.
    pub fn tls_offset(slot: u16) -> usize {
        8 + 8 * usize::from(slot)
    }
}

/// Merges row `from` into row `into` (same function): what readers do with the rows of
/// threads, CPUs, processes and duplicate keyed entries.
pub fn merge(func: AggFn, into: &mut [u64], from: &[u64]) {
    let (Some(&h), Some(&g)) = (from.first(), into.first()) else { return };
    if h == 0 {
        return;
    }
    match func {
        AggFn::Min | AggFn::Max => {
            let (a, b) = (into[1] as i64, from[1] as i64);
            let better = if func == AggFn::Min { b < a } else { b > a };
            if g == 0 || better {
                into[1] = b as u64;
            }
            into[0] = g.wrapping_add(h);
        }
        AggFn::Stddev => {
            into[0] = g.wrapping_add(h);
            into[1] = into[1].wrapping_add(from[1]);
            let sq = (u128::from(into[3]) << 64 | u128::from(into[2]))
                .wrapping_add(u128::from(from[3]) << 64 | u128::from(from[2]));
            into[2] = sq as u64;
            into[3] = (sq >> 64) as u64;
        }
        _ => {
            for (a, b) in into.iter_mut().zip(from) {
                *a = a.wrapping_add(*b);
            }
        }
    }
}

/// Takes row `base` (an earlier state of the same row) from `row`: what was added
/// since, for the functions whose words only add (not min or max, whose rows do not
/// subtract: `row` is left as it is). Stddev's sum of squares borrows across its words.
pub fn subtract(func: AggFn, row: &mut [u64], base: &[u64]) {
    match func {
        AggFn::Min | AggFn::Max => {}
        AggFn::Stddev if row.len() >= 4 && base.len() >= 4 => {
            row[0] = row[0].wrapping_sub(base[0]);
            row[1] = row[1].wrapping_sub(base[1]);
            let sq = (u128::from(row[3]) << 64 | u128::from(row[2]))
                .wrapping_sub(u128::from(base[3]) << 64 | u128::from(base[2]));
            row[2] = sq as u64;
            row[3] = (sq >> 64) as u64;
        }
        _ => {
            for (a, b) in row.iter_mut().zip(base) {
                *a = a.wrapping_sub(*b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_buckets_hold_their_labels() {
        for i in 0..QUANTIZE_BUCKETS {
            let l = quantize_label(i);
            assert_eq!(quantize_bucket(l), i, "label {l}");
        }
        assert_eq!(quantize_bucket(i64::MIN), 0);
        assert_eq!(quantize_bucket(i64::MAX), 126);
        assert_eq!(quantize_bucket(3), 65);
        assert_eq!(quantize_bucket(-3), 61);
    }

    #[test]
    fn keys_apart_in_high_bits_hash_apart_in_low_bits() {
        let low: std::collections::HashSet<u64> = (0..64u64).map(|i| key_hash(&[i << 40]) & 63).collect();
        assert!(low.len() > 32, "{} of 64 low values", low.len());
    }

    #[test]
    fn tables_are_sized_by_dtraces_options() {
        let layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 1 }], strsize: 0 };
        assert_eq!(table_sizes(&layout, 4 << 20, 1 << 20), (1 << 14, 1 << 17));
        assert_eq!(table_sizes(&layout, 1024, 4096), (256, 32));
        assert_eq!(table_sizes(&Layout::default(), 0, 0), (256, 1));
    }

    #[test]
    fn rows_merge() {
        let mut a = [2, 5];
        merge(AggFn::Min, &mut a, &[1, 3]);
        assert_eq!(a, [3, 3]);
        merge(AggFn::Min, &mut a, &[0, 1]);
        assert_eq!(a, [3, 3]);
        let mut s = [1, 1, u64::MAX, 0];
        merge(AggFn::Stddev, &mut s, &[1, 2, 1, 0]);
        assert_eq!(s, [2, 3, 0, 1]);
        subtract(AggFn::Stddev, &mut s, &[1, 1, u64::MAX, 0]);
        assert_eq!(s, [1, 2, 1, 0]);
    }

    #[test]
    fn a_buffer_places_keyless_rows_in_thread_entries() {
        let layout = Layout {
            tls: 2,
            aggs: vec![
                AggDesc { func: AggFn::Count, nkeys: 0 },
                AggDesc { func: AggFn::Sum, nkeys: 2 },
                AggDesc { func: AggFn::Quantize, nkeys: 0 },
            ],
            strsize: 0,
        };
        let b = BufferLayout::new(&layout, 1000, 100);
        assert_eq!(b.nthreads, 1024);
        assert_eq!(b.entry_size, (24 + 8 + 8 * 128usize).div_ceil(64) * 64);
        assert_eq!(b.places[0], AggPlace::Thread { row: 24 });
        assert_eq!(b.places[2], AggPlace::Thread { row: 32 });
        assert_eq!(
            b.places[1],
            AggPlace::Keyed { table: OFF_THREADS + 1024 * b.entry_size, entries: 128, entry_size: 8 + 16 + 16 }
        );
        assert_eq!(b.size % 4096, 0);
    }
}
