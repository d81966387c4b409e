//! The reference executor: runs a program on a buffer ([`crate::layout`]). udtrace runs
//! it at breakpoints (a firing with the thread stopped, on the memfd it shares with the
//! process), and the tests compare the other executors with it.

use crate::layout::{
    key_hash, string_id, string_words, AggFn, AggPlace, BufferLayout, Layout, DROP_CPUS, KEY_FILLING, KEY_FREE,
    KEY_READY, MAX_PROBES, OFF_AGG_DROPS, OFF_DYN_DROPS,
};
use crate::op::{user_string, NoUserMem, Op, Program, UserMem, Var, NREGS};

/// What a firing knows about itself (what [`Op::Arg`] and [`Op::Get`] read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Firing {
    pub args: [u64; 6],
    pub pid: u64,
    pub tid: u64,
    pub cpu: u64,
    pub timestamp: u64,
    pub uid: u64,
    pub gid: u64,
    /// rax at the site ([`Var::Ret`]).
    pub ret: u64,
    pub ppid: u64,
    pub errno: u64,
    /// The process's name ([`crate::op::comm_words`]).
    pub comm: [u64; 2],
    /// The thread's registers at the site, in [`crate::op::USER_REGS`] order
    /// ([`Op::UReg`]).
    pub regs: [u64; 17],
}

impl Firing {
    pub fn get(&self, v: Var) -> u64 {
        match v {
            Var::Pid => self.pid,
            Var::Tid => self.tid,
            Var::Cpu => self.cpu,
            Var::Timestamp => self.timestamp,
            Var::Uid => self.uid,
            Var::Gid => self.gid,
            Var::Ret => self.ret,
            Var::Ppid => self.ppid,
            Var::Errno => self.errno,
            Var::Comm0 => self.comm[0],
            Var::Comm1 => self.comm[1],
        }
    }
}

/// 64-bit words of a buffer, by byte offset (8-aligned), as a reader sees them.
pub trait Words {
    fn load(&self, off: usize) -> u64;

    /// The byte ranges `[start, end)` outside which the buffer holds only zeros, where
    /// the memory can tell (a memfd's pages no one wrote are holes): readers that scan
    /// every entry skip the rest, which reading would allocate. None: all of it.
    fn written(&self) -> Option<Vec<(usize, usize)>> {
        None
    }
}

/// Whether the word at `off` may be nonzero, in `written` ([`Words::written`]).
pub fn may_be_written(written: &Option<Vec<(usize, usize)>>, off: usize) -> bool {
    written.as_ref().is_none_or(|w| w.iter().any(|&(a, b)| a <= off && off < b))
}

/// A buffer to run programs on. Other writers may share it: `fetch_add` and `cmpxchg`
/// are atomic where they do.
pub trait Memory: Words {
    fn store(&mut self, off: usize, v: u64);
    /// Adds `v`, returns the word before.
    fn fetch_add(&mut self, off: usize, v: u64) -> u64;
    /// Stores `new` if the word is `old`; returns the word before.
    fn cmpxchg(&mut self, off: usize, old: u64, new: u64) -> u64;
}

/// A buffer no one else writes (tests, tools).
impl Words for Vec<u8> {
    fn load(&self, off: usize) -> u64 {
        u64::from_le_bytes(self[off..off + 8].try_into().expect("8 bytes"))
    }
}

impl Memory for Vec<u8> {
    fn store(&mut self, off: usize, v: u64) {
        self[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    fn fetch_add(&mut self, off: usize, v: u64) -> u64 {
        let old = self.load(off);
        self.store(off, old.wrapping_add(v));
        old
    }
    fn cmpxchg(&mut self, off: usize, old: u64, new: u64) -> u64 {
        let cur = self.load(off);
        if cur == old {
            self.store(off, new);
        }
        cur
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Done, and an [`Op::Emit`] ran: the firing writes its record.
    Emit,
    /// The thread table had no entry for the thread: nothing was done (a
    /// dynamic-variable drop, counted in the buffer).
    NoThreadEntry,
}

/// Runs `p` for firing `f`. `p` must have passed [`crate::op::verify`] against `layout`.
/// An aggregation whose keyed table is full drops that update (counted) and the program
/// goes on.
pub fn run(p: &Program, layout: &Layout, buf: &BufferLayout, f: &Firing, mem: &mut dyn Memory) -> Outcome {
    run_reading(p, layout, buf, f, mem, &NoUserMem)
}

/// [`run`], with the process's memory `user` for [`Op::Str`].
pub fn run_reading(
    p: &Program,
    layout: &Layout,
    buf: &BufferLayout,
    f: &Firing,
    mem: &mut dyn Memory,
    user: &dyn UserMem,
) -> Outcome {
    let entry = if p.uses_thread_entry(layout) {
        match thread_entry(buf, layout, f.tid, mem) {
            Some(e) => Some(e),
            None => {
                drop_on(mem, OFF_DYN_DROPS, f.cpu);
                return Outcome::NoThreadEntry;
            }
        }
    } else {
        None
    };
    let mut r = [0u64; NREGS];
    let mut pc = 0;
    let mut emit = false;
    while let Some(&op) = p.ops.get(pc) {
        pc += 1;
        match op {
            Op::Const { d, v } => r[usize::from(d)] = v,
            Op::Arg { d, n } => r[usize::from(d)] = f.args[usize::from(n)],
            Op::Get { d, v } => r[usize::from(d)] = f.get(v),
            Op::Mov { d, a } => r[usize::from(d)] = r[usize::from(a)],
            Op::Bin { op, d, a, b } => r[usize::from(d)] = op.apply(r[usize::from(a)], r[usize::from(b)]),
            Op::Div { d, a, imm, signed, rem } => r[usize::from(d)] = Op::divide(r[usize::from(a)], imm, signed, rem),
            Op::Un { op, d, a } => r[usize::from(d)] = op.apply(r[usize::from(a)]),
            Op::Ext { d, a, bits, signed } => r[usize::from(d)] = Op::extend(r[usize::from(a)], bits, signed),
            Op::Jz { a, to } => {
                if r[usize::from(a)] == 0 {
                    pc = usize::from(to);
                }
            }
            Op::Jmp { to } => pc = usize::from(to),
            Op::TlsLoad { d, slot } => {
                r[usize::from(d)] = entry.map_or(0, |e| mem.load(e + BufferLayout::tls_offset(slot)));
            }
            Op::TlsStore { slot, a } => {
                if let Some(e) = entry {
                    mem.store(e + BufferLayout::tls_offset(slot), r[usize::from(a)]);
                }
            }
            Op::Emit => emit = true,
            Op::UReg { d, r: n } => r[usize::from(d)] = f.regs[usize::from(n)],
            Op::Load { d, a, size } => r[usize::from(d)] = load(user, r[usize::from(a)], size),
            Op::Str { d, a, max, fault } => match user_string(user, r[usize::from(a)], usize::from(max)) {
                Some(s) => {
                    r[usize::from(d)] = string_entry(buf, layout, &s, mem).unwrap_or_else(|| {
                        drop_on(mem, OFF_AGG_DROPS, f.cpu);
                        0
                    });
                }
                None => {
                    emit = true;
                    pc = usize::from(fault);
                }
            },
            Op::Agg { agg, keys, val, incr } => {
                let desc = layout.aggs[usize::from(agg)];
                let (v, w) = (r[usize::from(val)], r[usize::from(incr)]);
                match buf.places[usize::from(agg)] {
                    AggPlace::Thread { row } => {
                        if let Some(e) = entry {
                            update_own(desc.func, e + row, v, w, mem);
                        }
                    }
                    AggPlace::Keyed { .. } => {
                        let k0 = usize::from(keys);
                        let key = &r[k0..k0 + usize::from(desc.nkeys)];
                        match keyed_entry(buf, layout, usize::from(agg), key, mem) {
                            Some(row) => update_shared(desc.func, row, v, w, mem),
                            None => drop_on(mem, OFF_AGG_DROPS, f.cpu),
                        }
                    }
                }
            }
        }
    }
    if emit {
        Outcome::Emit
    } else {
        Outcome::Done
    }
}

/// [`Op::Load`]: the `size` bytes at `addr`, zero-extended, or 0 when one is unreadable.
pub fn load(user: &dyn UserMem, addr: u64, size: u8) -> u64 {
    let mut b = [0u8; 8];
    let n = usize::from(size).min(8);
    if user.read(addr, &mut b[..n]) < n {
        return 0;
    }
    u64::from_le_bytes(b)
}

fn drop_on(mem: &mut dyn Memory, base: usize, cpu: u64) {
    mem.fetch_add(base + 8 * (cpu as usize % DROP_CPUS), 1);
}

fn init_row(func: AggFn, row: usize, mem: &mut dyn Memory) {
    if let Some((w, v)) = func.init() {
        mem.store(row + 8 * w, v);
    }
}

/// The thread's entry (claimed, and its rows set up, on its first firing).
pub fn thread_entry(buf: &BufferLayout, layout: &Layout, tid: u64, mem: &mut dyn Memory) -> Option<usize> {
    for i in 0..MAX_PROBES {
        let e = buf.thread_entry(tid as usize + i);
        let mut cur = mem.load(e);
        if cur == 0 {
            cur = mem.cmpxchg(e, 0, tid);
            if cur == 0 {
                for (a, p) in layout.aggs.iter().zip(&buf.places) {
                    if let AggPlace::Thread { row } = *p {
                        init_row(a.func, e + row, mem);
                    }
                }
                return Some(e);
            }
        }
        if cur == tid {
            return Some(e);
        }
    }
    None
}

/// The row of `key` in aggregation `agg`'s keyed table (made when new).
pub fn keyed_entry(
    buf: &BufferLayout,
    layout: &Layout,
    agg: usize,
    key: &[u64],
    mem: &mut dyn Memory,
) -> Option<usize> {
    let AggPlace::Keyed { table, entries, entry_size } = buf.places[agg] else { return None };
    let h = key_hash(key) as usize;
    for i in 0..MAX_PROBES {
        let e = table + ((h + i) & (entries - 1)) * entry_size;
        let mut status = mem.load(e);
        if status == KEY_FREE {
            status = mem.cmpxchg(e, KEY_FREE, KEY_FILLING);
            if status == KEY_FREE {
                for (j, &k) in key.iter().enumerate() {
                    mem.store(e + 8 + 8 * j, k);
                }
                let row = e + 8 + 8 * key.len();
                init_row(layout.aggs[agg].func, row, mem);
                mem.store(e, KEY_READY);
                return Some(row);
            }
        }
        if status == KEY_READY && key.iter().enumerate().all(|(j, &k)| mem.load(e + 8 + 8 * j) == k) {
            return Some(e + 8 + 8 * key.len());
        }
    }
    None
}

/// The id of string `s` (fewer than `layout.strsize` bytes) in the string table, its
/// entry made when new; None when the table has no room for it or holds another string
/// under its id.
pub fn string_entry(buf: &BufferLayout, layout: &Layout, s: &[u8], mem: &mut dyn Memory) -> Option<u64> {
    let place = buf.strings?;
    let words = string_words(s, layout.string_words());
    let id = string_id(&words);
    for i in 0..MAX_PROBES {
        let e = place.table + ((id as usize).wrapping_add(i) & (place.entries - 1)) * place.entry_size;
        let mut status = mem.load(e);
        if status == KEY_FREE {
            status = mem.cmpxchg(e, KEY_FREE, KEY_FILLING);
            if status == KEY_FREE {
                mem.store(e + 8, id);
                for (j, &w) in words.iter().enumerate() {
                    mem.store(e + 16 + 8 * j, w);
                }
                mem.store(e, KEY_READY);
                return Some(id);
            }
        }
        if status == KEY_READY && mem.load(e + 8) == id {
            let same = words.iter().enumerate().all(|(j, &w)| mem.load(e + 16 + 8 * j) == w);
            return same.then_some(id);
        }
    }
    None
}

/// An update of a row only this thread writes.
fn update_own(func: AggFn, row: usize, v: u64, w: u64, mem: &mut dyn Memory) {
    let add = |mem: &mut dyn Memory, word: usize, x: u64| {
        let o = mem.load(row + 8 * word);
        mem.store(row + 8 * word, o.wrapping_add(x));
    };
    add(mem, 0, 1);
    match func {
        AggFn::Count => {}
        AggFn::Sum | AggFn::Avg => add(mem, 1, v),
        AggFn::Min | AggFn::Max => {
            let cur = mem.load(row + 8) as i64;
            let better = if func == AggFn::Min { (v as i64) < cur } else { (v as i64) > cur };
            if better {
                mem.store(row + 8, v);
            }
        }
        AggFn::Stddev => {
            add(mem, 1, v);
            let sq = u128::from((v as i64).unsigned_abs()).pow(2);
            let lo = mem.load(row + 16);
            let (nlo, carry) = lo.overflowing_add(sq as u64);
            mem.store(row + 16, nlo);
            add(mem, 3, ((sq >> 64) as u64).wrapping_add(u64::from(carry)));
        }
        AggFn::Quantize | AggFn::Lquantize { .. } | AggFn::Llquantize { .. } => {
            let b = func.bucket(v).unwrap_or(0);
            add(mem, b, w);
        }
    }
}

/// An update of a row any thread may write: every word with an atomic operation.
fn update_shared(func: AggFn, row: usize, v: u64, w: u64, mem: &mut dyn Memory) {
    mem.fetch_add(row, 1);
    match func {
        AggFn::Count => {}
        AggFn::Sum | AggFn::Avg => {
            mem.fetch_add(row + 8, v);
        }
        AggFn::Min | AggFn::Max => {
            let mut cur = mem.load(row + 8);
            loop {
                let better = if func == AggFn::Min { (v as i64) < cur as i64 } else { (v as i64) > cur as i64 };
                if !better {
                    break;
                }
                let seen = mem.cmpxchg(row + 8, cur, v);
                if seen == cur {
                    break;
                }
                cur = seen;
            }
        }
        AggFn::Stddev => {
            mem.fetch_add(row + 8, v);
            let sq = u128::from((v as i64).unsigned_abs()).pow(2);
            let lo = mem.fetch_add(row + 16, sq as u64);
            let carry = lo.overflowing_add(sq as u64).1;
            mem.fetch_add(row + 24, ((sq >> 64) as u64).wrapping_add(u64::from(carry)));
        }
        AggFn::Quantize | AggFn::Lquantize { .. } | AggFn::Llquantize { .. } => {
            let b = func.bucket(v).unwrap_or(0);
            mem.fetch_add(row + 8 * b, w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{AggDesc, OFF_THREADS};
    use crate::op::{verify, BinOp};
    use crate::snapshot::Snapshot;
    use std::collections::BTreeMap;

    /// entry: `self->ts = timestamp;` return: `/self->ts/ { @q = quantize(timestamp -
    /// self->ts); @c[arg0 & 1] = count(); self->ts = 0; }`
    fn latency() -> (Layout, Program, Program) {
        let layout = Layout {
            tls: 1,
            aggs: vec![AggDesc { func: AggFn::Quantize, nkeys: 0 }, AggDesc { func: AggFn::Count, nkeys: 1 }],
            strsize: 0,
        };
        let entry = Program { ops: vec![Op::Get { d: 0, v: Var::Timestamp }, Op::TlsStore { slot: 0, a: 0 }] };
        let ret = Program {
            ops: vec![
                Op::TlsLoad { d: 0, slot: 0 },
                Op::Jz { a: 0, to: 12 },
                Op::Get { d: 1, v: Var::Timestamp },
                Op::TlsLoad { d: 2, slot: 0 },
                Op::Bin { op: BinOp::Sub, d: 1, a: 1, b: 2 },
                Op::Const { d: 3, v: 1 },
                Op::Agg { agg: 0, keys: 0, val: 1, incr: 3 },
                Op::Arg { d: 4, n: 0 },
                Op::Bin { op: BinOp::And, d: 4, a: 4, b: 3 },
                Op::Agg { agg: 1, keys: 4, val: 3, incr: 3 },
                Op::Const { d: 5, v: 0 },
                Op::TlsStore { slot: 0, a: 5 },
            ],
        };
        verify(&entry, &layout).unwrap();
        verify(&ret, &layout).unwrap();
        (layout, entry, ret)
    }

    #[test]
    fn the_latency_idiom_pairs_entries_and_returns_per_thread() {
        let (layout, entry, ret) = latency();
        let buf = BufferLayout::new(&layout, 64, 64);
        let mut mem = vec![0u8; buf.size];
        for (o, v) in buf.header() {
            mem.store(o, v);
        }
        let mut f = Firing { pid: 7, tid: 100, timestamp: 1000, ..Firing::default() };
        // A return with no entry before it: the predicate fails.
        assert_eq!(run(&ret, &layout, &buf, &f, &mut mem), Outcome::Done);
        for (tid, dt) in [(100, 5u64), (101, 17), (100, 1)] {
            f.tid = tid;
            f.timestamp = 1000;
            run(&entry, &layout, &buf, &f, &mut mem);
            f.timestamp += dt;
            f.args[0] = dt;
            run(&ret, &layout, &buf, &f, &mut mem);
        }
        let snap = Snapshot::read(&layout, &buf, &mem);
        let q = &snap.aggs[0][&vec![]];
        assert_eq!(q[0], 3);
        assert_eq!(q[1 + crate::layout::quantize_bucket(5)], 1);
        assert_eq!(q[1 + crate::layout::quantize_bucket(17)], 1);
        assert_eq!(q[1 + crate::layout::quantize_bucket(1)], 1);
        assert_eq!(snap.aggs[1][&vec![1]], vec![3]);
        assert_eq!(snap.tls[&100], vec![0]);
        assert_eq!(snap.tls[&101], vec![0]);
        assert_eq!(mem.load(OFF_THREADS + (100 % 64) * buf.entry_size), 100);
    }

    /// `@[copyinstr(arg0)] = count()`, the fault going past the update.
    fn count_by_string(max: u16) -> (Layout, Program) {
        let layout = Layout { tls: 0, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 1 }], strsize: 8 };
        let p = Program {
            ops: vec![
                Op::Arg { d: 0, n: 0 },
                Op::Str { d: 0, a: 0, max, fault: 4 },
                Op::Jz { a: 0, to: 4 },
                Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 },
            ],
        };
        verify(&p, &layout).unwrap();
        (layout, p)
    }

    #[test]
    fn strings_key_by_id_truncate_and_fault_to_the_record() {
        use crate::gen::{UserPages, USER_BASE};
        let (layout, p) = count_by_string(8);
        let user = UserPages::new(&[
            (USER_BASE, b"abc\0".to_vec()),
            (USER_BASE + 8, b"abcdefghij\0".to_vec()),
            (USER_BASE + 4096 - 3, b"xyz".to_vec()),
        ]);
        let buf = BufferLayout::new(&layout, 4, 16);
        let mut mem = vec![0u8; buf.size];
        let mut fire = |addr: u64| {
            let f = Firing { args: [addr, 0, 0, 0, 0, 0], cpu: 1, ..Firing::default() };
            run_reading(&p, &layout, &buf, &f, &mut mem, &user)
        };
        assert_eq!(fire(USER_BASE), Outcome::Done);
        assert_eq!(fire(USER_BASE), Outcome::Done);
        // Past strsize: its first strsize - 1 bytes, as the consumer keeps them.
        assert_eq!(fire(USER_BASE + 8), Outcome::Done);
        assert_eq!(fire(USER_BASE + 11), Outcome::Done);
        // 0, an unmapped page, and no NUL before one: faults, for the consumer.
        for bad in [0, USER_BASE + 4096, USER_BASE + 4096 - 3] {
            assert_eq!(fire(bad), Outcome::Emit, "{bad:x}");
        }
        let snap = Snapshot::read(&layout, &buf, &mem);
        let by_string: BTreeMap<Vec<u8>, u64> =
            snap.aggs[0].iter().map(|(k, row)| (snap.strings[&k[0]].clone(), row[0])).collect();
        assert_eq!(
            by_string,
            BTreeMap::from([(b"abc".to_vec(), 2), (b"abcdefg".to_vec(), 1), (b"defghij".to_vec(), 1)])
        );
        assert_eq!(snap.agg_drops, 0);
        // copyinstr(arg0, 3): two bytes.
        let (_, p3) = count_by_string(3);
        let f = Firing { args: [USER_BASE + 4096 - 3, 0, 0, 0, 0, 0], ..Firing::default() };
        assert_eq!(run_reading(&p3, &layout, &buf, &f, &mut mem, &user), Outcome::Done);
        assert!(Snapshot::read(&layout, &buf, &mem).strings.values().any(|s| s == b"xy"));
    }

    #[test]
    fn a_string_under_anothers_id_or_a_full_table_drops() {
        use crate::gen::{UserPages, USER_BASE};
        use crate::layout::{string_id, string_words};
        let (layout, p) = count_by_string(8);
        let user = UserPages::new(&[(USER_BASE, b"a\0b\0c\0".to_vec())]);
        let buf = BufferLayout::new(&layout, 4, 1);
        let mut mem = vec![0u8; buf.size];
        // Another string already holds "a"'s id (a collision): never merged with it.
        let t = buf.strings.unwrap().table;
        mem.store(t, KEY_READY);
        mem.store(t + 8, string_id(&string_words(b"a", 1)));
        mem.store(t + 16, u64::from_le_bytes(*b"zz\0\0\0\0\0\0"));
        let f = Firing { args: [USER_BASE, 0, 0, 0, 0, 0], cpu: 3, ..Firing::default() };
        assert_eq!(run_reading(&p, &layout, &buf, &f, &mut mem, &user), Outcome::Done);
        // A table of one entry, full.
        let f = Firing { args: [USER_BASE + 2, 0, 0, 0, 0, 0], cpu: 3, ..Firing::default() };
        assert_eq!(run_reading(&p, &layout, &buf, &f, &mut mem, &user), Outcome::Done);
        let snap = Snapshot::read(&layout, &buf, &mem);
        assert!(snap.aggs[0].is_empty());
        assert_eq!(snap.agg_drops_by_cpu, BTreeMap::from([(3, 2)]));
    }

    #[test]
    fn full_tables_count_drops() {
        let layout = Layout { tls: 0, aggs: vec![AggDesc { func: AggFn::Sum, nkeys: 1 }], strsize: 0 };
        let buf = BufferLayout::new(&layout, 1, 1);
        let mut mem = vec![0u8; buf.size];
        let p = Program { ops: vec![Op::Arg { d: 0, n: 0 }, Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 }] };
        for k in [5, 5, 6, 7] {
            let f = Firing { args: [k, 0, 0, 0, 0, 0], cpu: 1, ..Firing::default() };
            run(&p, &layout, &buf, &f, &mut mem);
        }
        let snap = Snapshot::read(&layout, &buf, &mem);
        assert_eq!(snap.aggs[0][&vec![5]], vec![2, 10]);
        assert_eq!(snap.agg_drops, 2);
    }
}
