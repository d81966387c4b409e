//! The ring every traced process writes its firings into, and udtrace's reader of it
//! (docs/inprocess.md, "Ring").
//!
//! One memfd, mapped shared in udtrace and in every traced process. Every pid record of a
//! session has the same size, so the ring is an array of fixed-size slots:
//!
//! ```text
//! offset  field (u64 each, one per cache line)
//!      0  head: next slot index to reserve (producers, lock cmpxchg)
//!     64  tail: next slot index to read (written only by udtrace)
//!    192  nslots (a power of two)
//!    256  slot_size: 8 + the record size rounded up to 8
//!   2048  drops: firings skipped because the ring was full, a u64 per CPU (the
//!         firing's CPU modulo DROP_CPUS; producers, lock inc)
//!   4096  nslots slots: u64 seq, then the record
//! ```
//!
//! A producer reserves index `h` by moving `head` from `h` to `h + 1` when
//! `h - tail < nslots`, writes the record into slot `h % nslots`, then stores `seq = h + 1`
//! last (a plain store is a release on x86). The reader takes slot `tail % nslots` while
//! its `seq == tail + 1`, then advances `tail`.

use std::time::{Duration, Instant};

use udtrace_sys::mmap::Mmap;

pub const HEADER_SIZE: usize = 4096;
pub const OFF_HEAD: usize = 0;
pub const OFF_TAIL: usize = 64;
/// The first of [`DROP_CPUS`] drop counters, one per CPU.
pub const OFF_DROPS: usize = 2048;
/// How many CPUs have a drop counter of their own; CPU n counts in n % DROP_CPUS.
pub const DROP_CPUS: usize = 256;
pub const OFF_NSLOTS: usize = 192;
pub const OFF_SLOT_SIZE: usize = 256;

/// Most slots a ring may have: the trampoline compares and masks with 32-bit immediates.
pub const MAX_SLOTS: u64 = 1 << 30;

/// How long the reader waits on a reserved slot that is never committed, while later
/// slots are, before skipping it. Its writer was most likely killed between reserving and
/// committing; a live writer is a few hundred instructions from committing, so 200 ms
/// without progress is a preempted-for-very-long or dead writer.
pub const STALL_TIMEOUT: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("ring of {0} slots: must be a power of two between 2 and 2^30")]
    Slots(u64),
    #[error("ring slots of {slot_size} bytes cannot hold {record} byte records")]
    SlotSize { slot_size: u64, record: usize },
    #[error("ring mapping of {have} bytes, its header says {want}")]
    Length { have: usize, want: u64 },
}

/// The shape of a ring: how many slots, of which size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub nslots: u64,
    pub slot_size: u64,
}

impl Geometry {
    /// A ring of `nslots` slots for records of `record_size` bytes.
    pub fn new(nslots: u64, record_size: usize) -> Result<Geometry, RingError> {
        if !nslots.is_power_of_two() || !(2..=MAX_SLOTS).contains(&nslots) {
            return Err(RingError::Slots(nslots));
        }
        Ok(Geometry { nslots, slot_size: 8 + (record_size as u64).div_ceil(8) * 8 })
    }

    /// Bytes of the whole ring: header and slots.
    pub fn size(&self) -> usize {
        HEADER_SIZE + (self.nslots * self.slot_size) as usize
    }

    /// Offset of slot index `i`'s `seq` word; the record follows it.
    pub fn slot_offset(&self, i: u64) -> usize {
        HEADER_SIZE + ((i & (self.nslots - 1)) * self.slot_size) as usize
    }

    /// Writes the header of a fresh (zeroed) ring.
    pub fn init(&self, view: &mut impl RingView) {
        view.store_release_u64(OFF_NSLOTS, self.nslots);
        view.store_release_u64(OFF_SLOT_SIZE, self.slot_size);
    }

    /// The geometry a ring's header gives, checked against the view's length and the
    /// record size.
    pub fn read(view: &impl RingView, record_size: usize) -> Result<Geometry, RingError> {
        let nslots = view.load_acquire_u64(OFF_NSLOTS);
        let slot_size = view.load_acquire_u64(OFF_SLOT_SIZE);
        let g = Geometry::new(nslots, record_size)?;
        if slot_size != g.slot_size {
            return Err(RingError::SlotSize { slot_size, record: record_size });
        }
        if view.size() != g.size() {
            return Err(RingError::Length { have: view.size(), want: g.size() as u64 });
        }
        Ok(g)
    }
}

/// Bytes of a ring: udtrace's shared mapping, or a plain buffer in tests. Offsets are
/// checked by the implementation; a bad one is a bug of the reader.
pub trait RingView {
    /// Bytes of the whole view.
    fn size(&self) -> usize;
    fn load_acquire_u64(&self, off: usize) -> u64;
    fn store_release_u64(&mut self, off: usize, v: u64);
    fn bytes(&self, off: usize, len: usize) -> &[u8];
}

impl RingView for Mmap {
    fn size(&self) -> usize {
        Mmap::len(self)
    }
    #[inline]
    fn load_acquire_u64(&self, off: usize) -> u64 {
        Mmap::load_acquire_u64(self, off)
    }
    #[inline]
    fn store_release_u64(&mut self, off: usize, v: u64) {
        Mmap::store_release_u64(self, off, v)
    }
    #[inline]
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        Mmap::bytes(self, off, len)
    }
}

/// A ring in plain memory, no other writer: for tests and tools.
impl RingView for Vec<u8> {
    fn size(&self) -> usize {
        self.len()
    }
    fn load_acquire_u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self[off..off + 8].try_into().expect("8 bytes"))
    }
    fn store_release_u64(&mut self, off: usize, v: u64) {
        self[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self[off..off + len]
    }
}

/// What one drain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records handed to the callback (slots committed late among them).
    pub records: u64,
    /// Reserved slots given up on (their writer never committed, and the slot went to
    /// another writer a lap later).
    pub skipped: u64,
    /// The drain stopped at its bound with committed records left.
    pub capped: bool,
}

/// Records read between two stores of `tail`: its cache line is the producers' too,
/// and a store per record would bounce it between the CPUs at every firing.
const TAIL_EVERY: u64 = 64;

/// Slots stepped over uncommitted that are watched for a late commit, at most.
const LATE_MAX: usize = 64;

/// udtrace's side of a ring: the consumer. One per ring; the ring's `tail` is its state,
/// plus when the slot at `tail` was first seen stalled, and the slots stepped over.
#[derive(Debug)]
pub struct Reader {
    geometry: Geometry,
    record_size: usize,
    stall_timeout: Duration,
    /// The tail index that was not committed while later ones were, and since when.
    stalled: Option<(u64, Instant)>,
    /// Indexes stepped over uncommitted after the stall timeout, oldest first: a writer
    /// held off the CPU (or stopped by a tracer) that long still commits, and its record
    /// is taken then, as long as no writer has taken the slot a lap later.
    late: std::collections::VecDeque<u64>,
    skipped: u64,
    /// Records taken late, in all (for `-x debug`).
    taken_late: u64,
}

impl Reader {
    /// A reader of the ring in `view` (its header already written) holding records of
    /// `record_size` bytes.
    pub fn new(view: &impl RingView, record_size: usize) -> Result<Reader, RingError> {
        Ok(Reader {
            geometry: Geometry::read(view, record_size)?,
            record_size,
            stall_timeout: STALL_TIMEOUT,
            stalled: None,
            late: std::collections::VecDeque::new(),
            skipped: 0,
            taken_late: 0,
        })
    }

    pub fn with_stall_timeout(mut self, t: Duration) -> Reader {
        self.stall_timeout = t;
        self
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Firings the producers dropped because the ring was full, in all.
    pub fn drops(&self, view: &impl RingView) -> u64 {
        self.drops_by_cpu(view).iter().fold(0u64, |a, &d| a.saturating_add(d))
    }

    /// Firings the producers dropped because the ring was full, by the CPU they ran on
    /// (CPU n counted at n % [`DROP_CPUS`]).
    pub fn drops_by_cpu(&self, view: &impl RingView) -> [u64; DROP_CPUS] {
        std::array::from_fn(|cpu| view.load_acquire_u64(OFF_DROPS + 8 * cpu))
    }

    /// Slots reserved and not read yet (bounded by a lap: the writers' words).
    pub fn unread(&self, view: &impl RingView) -> u64 {
        let used = view.load_acquire_u64(OFF_HEAD).saturating_sub(view.load_acquire_u64(OFF_TAIL));
        used.min(self.geometry.nslots)
    }

    /// Whether the ring is at least half full: the consumer should drain again at once.
    pub fn backlog(&self, view: &impl RingView) -> bool {
        let used = view.load_acquire_u64(OFF_HEAD).saturating_sub(view.load_acquire_u64(OFF_TAIL));
        // Not `used * 2`: head and tail are the writers' to scribble on, used may be huge.
        used >= self.geometry.nslots / 2
    }

    /// Reserved slots given up so far because they were never committed.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Records committed after the stall timeout, taken late.
    pub fn taken_late(&self) -> u64 {
        self.taken_late
    }

    /// Gives up the slots still watched for a late commit (their writers are gone),
    /// counting them as skipped.
    pub fn give_up_late(&mut self) {
        self.skipped += self.late.len() as u64;
        self.late.clear();
    }

    /// Hands over the slots stepped over that have been committed since, and gives up
    /// those a writer a lap later has taken (or would take: the watch list is bounded).
    fn take_late(&mut self, view: &impl RingView, each: &mut impl FnMut(&[u8]), d: &mut Drained) {
        let n = self.geometry.nslots;
        // Index i + nslots, the slot's next lap, is reserved.
        let lapped = |i: u64| view.load_acquire_u64(OFF_HEAD) > i.saturating_add(n);
        let mut kept = std::collections::VecDeque::with_capacity(self.late.len());
        while let Some(i) = self.late.pop_front() {
            let slot = self.geometry.slot_offset(i);
            if !lapped(i) && view.load_acquire_u64(slot) == i + 1 {
                // Copied, then checked again: a writer of the next lap may have reserved
                // the slot meanwhile and be writing into it.
                let rec = view.bytes(slot + 8, self.record_size).to_vec();
                if !lapped(i) && view.load_acquire_u64(slot) == i + 1 {
                    each(&rec);
                    d.records += 1;
                    self.taken_late += 1;
                    continue;
                }
            }
            if lapped(i) || kept.len() + self.late.len() >= LATE_MAX {
                self.skipped += 1;
                d.skipped += 1;
            } else {
                kept.push_back(i);
            }
        }
        self.late = kept;
    }

    /// How many committed records from the tail on, at most `max`, may be handed over
    /// as they lie in time order: the u64 at `at` of each record (its time) never
    /// decreases and is below `before`. `None` when one decreases (the records must be
    /// sorted) or slots wait to be taken late: [`Self::drain_upto`] with the count then
    /// hands over exactly those records.
    pub fn sorted_run(&self, view: &impl RingView, at: usize, before: u64, max: u64) -> Option<u64> {
        if !self.late.is_empty() {
            return None;
        }
        let g = self.geometry;
        let tail = view.load_acquire_u64(OFF_TAIL);
        let limit = view.load_acquire_u64(OFF_HEAD).min(tail.saturating_add(g.nslots)).min(tail.saturating_add(max));
        let (mut n, mut last) = (0, 0);
        for i in tail..limit {
            let slot = g.slot_offset(i);
            if view.load_acquire_u64(slot) != i + 1 {
                break;
            }
            let b = view.bytes(slot + 8 + at, 8);
            let t = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
            if t < last {
                return None;
            }
            if t >= before {
                break;
            }
            (n, last) = (n + 1, t);
        }
        Some(n)
    }

    /// Hands every committed record, in slot order, to `each`, and frees its slot.
    pub fn drain(&mut self, view: &mut impl RingView, each: impl FnMut(&[u8])) -> Drained {
        self.drain_at(view, Instant::now(), each)
    }

    /// [`Self::drain`] with the time given, for the stall timeout.
    pub fn drain_at(&mut self, view: &mut impl RingView, now: Instant, each: impl FnMut(&[u8])) -> Drained {
        self.drain_upto(view, now, u64::MAX, each)
    }

    /// [`Self::drain_at`], stopping after `max` records.
    pub fn drain_upto(
        &mut self,
        view: &mut impl RingView,
        now: Instant,
        max: u64,
        mut each: impl FnMut(&[u8]),
    ) -> Drained {
        let g = self.geometry;
        let mut d = Drained::default();
        if !self.late.is_empty() {
            self.take_late(view, &mut each, &mut d);
        }
        let mut tail = view.load_acquire_u64(OFF_TAIL);
        // Records reserved by now, no more: writers faster than the consumer must not
        // keep it here (the session's timers would never run). Never more than a lap,
        // which is all a writer keeping to the protocol can have reserved: a hostile one
        // could otherwise keep committing ahead of us and hold us here forever.
        let limit = view.load_acquire_u64(OFF_HEAD).min(tail.saturating_add(g.nslots));
        let mut stored = tail;
        while tail < limit {
            if d.records >= max {
                d.capped = true;
                break;
            }
            let slot = g.slot_offset(tail);
            if view.load_acquire_u64(slot) == tail + 1 {
                // A writer's records are in its reservation order: one it committed
                // late goes before its next.
                if !self.late.is_empty() {
                    if stored != tail {
                        view.store_release_u64(OFF_TAIL, tail);
                        stored = tail;
                    }
                    self.take_late(view, &mut each, &mut d);
                }
                each(view.bytes(slot + 8, self.record_size));
                tail += 1;
                // Release: the slot's bytes are read before a producer may reuse it.
                if tail - stored >= TAIL_EVERY {
                    view.store_release_u64(OFF_TAIL, tail);
                    stored = tail;
                }
                d.records += 1;
                self.stalled = None;
                continue;
            }
            if stored != tail {
                view.store_release_u64(OFF_TAIL, tail);
                stored = tail;
            }
            // Not committed: empty, a writer at work, or a dead writer. Only the last
            // stalls the ring, and it shows as later slots committed behind it.
            let head = view.load_acquire_u64(OFF_HEAD);
            let end = head.min(tail.saturating_add(g.nslots));
            let later = (tail + 1..end).any(|i| view.load_acquire_u64(g.slot_offset(i)) == i + 1);
            if !later {
                break;
            }
            match self.stalled {
                Some((t, since)) if t == tail => {
                    if now.saturating_duration_since(since) < self.stall_timeout {
                        break;
                    }
                    self.late.push_back(tail);
                    tail += 1;
                    view.store_release_u64(OFF_TAIL, tail);
                    self.stalled = None;
                }
                _ => {
                    self.stalled = Some((tail, now));
                    break;
                }
            }
        }
        if stored != tail {
            view.store_release_u64(OFF_TAIL, tail);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REC: usize = 20;

    fn ring(nslots: u64) -> (Vec<u8>, Geometry) {
        let g = Geometry::new(nslots, REC).unwrap();
        let mut v = vec![0u8; g.size()];
        g.init(&mut v);
        (v, g)
    }

    /// The producer's protocol, as a trampoline runs it; `commit: false` leaves the slot
    /// reserved and unwritten, as a writer killed in between does.
    fn produce(v: &mut Vec<u8>, g: Geometry, tag: u8, commit: bool) -> bool {
        let h = v.load_acquire_u64(OFF_HEAD);
        if h - v.load_acquire_u64(OFF_TAIL) >= g.nslots {
            // As a firing on CPU 1.
            let d = v.load_acquire_u64(OFF_DROPS + 8);
            v.store_release_u64(OFF_DROPS + 8, d + 1);
            return false;
        }
        v.store_release_u64(OFF_HEAD, h + 1);
        let s = g.slot_offset(h);
        if commit {
            v[s + 8..s + 8 + REC].fill(tag);
            v.store_release_u64(s, h + 1);
        }
        true
    }

    #[test]
    fn sorted_runs_are_handed_over_in_place() {
        let (mut v, g) = ring(8);
        let mut r = Reader::new(&v, REC).unwrap();
        // Each record's tag is its time (the u64 at 0, tag in every byte).
        for tag in [1, 2, 2, 5] {
            assert!(produce(&mut v, g, tag, true));
        }
        let t = |tag: u8| u64::from_ne_bytes([tag; 8]);
        assert_eq!(r.sorted_run(&v, 0, u64::MAX, 8), Some(4));
        assert_eq!(r.sorted_run(&v, 0, u64::MAX, 3), Some(3));
        assert_eq!(r.sorted_run(&v, 0, t(5), 8), Some(3), "stops before the time given");
        let mut got = Vec::new();
        let d = r.drain_upto(&mut v, Instant::now(), 3, |rec| got.push(rec[0]));
        assert_eq!((got, d.capped), (vec![1, 2, 2], true));
        // A time that decreases: the records must be sorted (copied).
        assert!(produce(&mut v, g, 3, true));
        assert_eq!(r.sorted_run(&v, 0, u64::MAX, 8), None);
        // An uncommitted slot ends a run.
        assert_eq!(drain(&mut r, &mut v, Instant::now()).0, vec![5, 3]);
        assert!(produce(&mut v, g, 6, true) && produce(&mut v, g, 0, false) && produce(&mut v, g, 7, true));
        assert_eq!(r.sorted_run(&v, 0, u64::MAX, 8), Some(1));
    }

    fn drain(r: &mut Reader, v: &mut Vec<u8>, now: Instant) -> (Vec<u8>, Drained) {
        let mut got = Vec::new();
        let d = r.drain_at(v, now, |rec| {
            assert_eq!(rec.len(), REC);
            assert!(rec.iter().all(|&b| b == rec[0]), "torn record");
            got.push(rec[0]);
        });
        (got, d)
    }

    #[test]
    fn geometry() {
        let g = Geometry::new(64, 208).unwrap();
        assert_eq!(g.slot_size, 216);
        assert_eq!(g.size(), 4096 + 64 * 216);
        assert_eq!(g.slot_offset(65), 4096 + 216);
        assert_eq!(Geometry::new(48, 208), Err(RingError::Slots(48)));
        assert_eq!(Geometry::new(1, 208), Err(RingError::Slots(1)));
        assert_eq!(Geometry::new(8, 20).unwrap().slot_size, 32);
        let (v, _) = ring(8);
        assert!(matches!(Reader::new(&v, 40), Err(RingError::SlotSize { .. })));
        assert!(matches!(Reader::new(&v[..v.len() - 8].to_vec(), REC), Err(RingError::Length { .. })));
    }

    #[test]
    fn a_bounded_drain_takes_that_many_and_frees_their_slots() {
        let (mut v, g) = ring(256);
        let mut r = Reader::new(&v, REC).unwrap();
        let now = Instant::now();
        for tag in 1..=200u8 {
            assert!(produce(&mut v, g, tag, true));
        }
        let mut got = Vec::new();
        let d = r.drain_upto(&mut v, now, 150, |rec| got.push(rec[0]));
        assert_eq!(d, Drained { records: 150, skipped: 0, capped: true });
        // Every slot read is free again, though the tail is stored every TAIL_EVERY.
        assert_eq!(v.load_acquire_u64(OFF_TAIL), 150);
        assert_eq!(r.unread(&v), 50);
        let d = r.drain_upto(&mut v, now, 150, |rec| got.push(rec[0]));
        assert_eq!(d, Drained { records: 50, skipped: 0, capped: false });
        assert_eq!(got, (1..=200u8).collect::<Vec<_>>());
        assert_eq!(v.load_acquire_u64(OFF_TAIL), 200);
    }

    #[test]
    fn in_order_with_wrap_around() {
        let (mut v, g) = ring(4);
        let mut r = Reader::new(&v, REC).unwrap();
        let now = Instant::now();
        let mut want = Vec::new();
        for round in 0..5u8 {
            for k in 0..3 {
                let tag = round * 3 + k + 1;
                assert!(produce(&mut v, g, tag, true));
                want.push(tag);
            }
            let (got, d) = drain(&mut r, &mut v, now);
            assert_eq!(got, want[want.len() - 3..]);
            assert_eq!(d, Drained { records: 3, skipped: 0, capped: false });
        }
        assert_eq!(v.load_acquire_u64(OFF_TAIL), 15);
        assert_eq!(r.drops(&v), 0);
        // Nothing more: the slot at tail holds seq of a previous lap.
        assert_eq!(drain(&mut r, &mut v, now).1, Drained::default());
    }

    #[test]
    fn full_ring_drops() {
        let (mut v, g) = ring(4);
        let mut r = Reader::new(&v, REC).unwrap();
        for tag in 1..=6 {
            produce(&mut v, g, tag, true);
        }
        assert_eq!(r.drops(&v), 2);
        // `produce` counts its drops as a firing on CPU 1 does.
        let by_cpu = r.drops_by_cpu(&v);
        assert_eq!((by_cpu[0], by_cpu[1], by_cpu.iter().sum::<u64>()), (0, 2, 2));
        let (got, _) = drain(&mut r, &mut v, Instant::now());
        assert_eq!(got, [1, 2, 3, 4]);
        assert!(produce(&mut v, g, 7, true));
        assert_eq!(drain(&mut r, &mut v, Instant::now()).0, [7]);
    }

    #[test]
    fn uncommitted_slot_waits_then_is_skipped() {
        let (mut v, g) = ring(8);
        let mut r = Reader::new(&v, REC).unwrap();
        let t0 = Instant::now();
        produce(&mut v, g, 1, true);
        produce(&mut v, g, 2, false); // its writer dies
                                      // Alone, an uncommitted slot is a writer at work: no stall clock.
        assert_eq!(drain(&mut r, &mut v, t0).0, [1]);
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT * 2).0, []);
        produce(&mut v, g, 3, true);
        produce(&mut v, g, 4, true);
        // Later slots committed: the clock starts now, the slot is skipped after it.
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT * 3).0, []);
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT * 3 + STALL_TIMEOUT / 2).0, []);
        let (got, d) = drain(&mut r, &mut v, t0 + STALL_TIMEOUT * 4);
        assert_eq!(got, [3, 4]);
        // Stepped over, watched for a late commit; given up once a writer a lap later
        // takes its slot.
        assert_eq!(d, Drained { records: 2, skipped: 0, capped: false });
        assert_eq!(r.skipped(), 0);
        // The ring goes on across laps.
        for tag in 5..=20 {
            produce(&mut v, g, tag, true);
            assert_eq!(drain(&mut r, &mut v, t0).0, [tag]);
        }
        assert_eq!(r.skipped(), 1);
    }

    #[test]
    fn a_slot_committed_after_the_stall_timeout_is_read_late() {
        let (mut v, g) = ring(8);
        let mut r = Reader::new(&v, REC).unwrap();
        let t0 = Instant::now();
        produce(&mut v, g, 1, false); // index 0: its writer is held off the CPU
        produce(&mut v, g, 2, true);
        assert_eq!(drain(&mut r, &mut v, t0).0, []);
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT * 2).0, [2]);
        // It commits at last, and its next record follows: read in its order.
        let s = g.slot_offset(0);
        v[s + 8..s + 8 + REC].fill(1);
        v.store_release_u64(s, 1);
        produce(&mut v, g, 3, true);
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT * 2).0, [1, 3]);
        assert_eq!(r.skipped(), 0);
        // A slot stepped over whose writer never comes back is given up when the
        // ring is let go.
        produce(&mut v, g, 4, false);
        produce(&mut v, g, 5, true);
        assert_eq!(drain(&mut r, &mut v, t0).0, []);
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT).0, [5]);
        r.give_up_late();
        assert_eq!(r.skipped(), 1);
    }

    #[test]
    fn hostile_positions_neither_panic_nor_hold_the_reader() {
        let (mut v, g) = ring(4);
        let mut r = Reader::new(&v, REC).unwrap();
        // Found by fuzzing: head far ahead of tail made backlog() overflow, a tail near
        // the end of u64 made drain() overflow.
        v.store_release_u64(OFF_HEAD, u64::MAX);
        assert!(r.backlog(&v));
        v.store_release_u64(OFF_TAIL, u64::MAX - 2);
        assert_eq!(drain(&mut r, &mut v, Instant::now()).1, Drained::default());
        // A writer that commits each slot just before the reader looks at it, forever:
        // one drain reads one lap at most, then returns.
        v.store_release_u64(OFF_TAIL, 0);
        let mut racing = Racing(v, std::cell::Cell::new(0));
        let mut reads = 0;
        let d = r.drain_at(&mut racing, Instant::now(), |_| reads += 1);
        assert_eq!((d.records, reads), (g.nslots, g.nslots));
    }

    /// A ring whose next slot always reads as committed: each slot load gives the next
    /// index's seq (the reader stores `tail` only now and then).
    struct Racing(Vec<u8>, std::cell::Cell<u64>);

    impl RingView for Racing {
        fn size(&self) -> usize {
            self.0.size()
        }
        fn load_acquire_u64(&self, off: usize) -> u64 {
            match off {
                HEADER_SIZE.. => {
                    self.1.set(self.1.get() + 1);
                    self.1.get()
                }
                _ => self.0.load_acquire_u64(off),
            }
        }
        fn store_release_u64(&mut self, off: usize, v: u64) {
            self.0.store_release_u64(off, v)
        }
        fn bytes(&self, off: usize, len: usize) -> &[u8] {
            self.0.bytes(off, len)
        }
    }

    #[test]
    fn late_commit_before_timeout_is_read() {
        let (mut v, g) = ring(8);
        let mut r = Reader::new(&v, REC).unwrap();
        let t0 = Instant::now();
        produce(&mut v, g, 1, false);
        produce(&mut v, g, 2, true);
        assert_eq!(drain(&mut r, &mut v, t0).0, []);
        // The slow writer commits slot 0 (index 0, seq 1).
        let s = g.slot_offset(0);
        v[s + 8..s + 8 + REC].fill(1);
        v.store_release_u64(s, 1);
        assert_eq!(drain(&mut r, &mut v, t0 + STALL_TIMEOUT / 2).0, [1, 2]);
        assert_eq!(r.skipped(), 0);
    }
}
