//! Reading a buffer back: every thread's variables, every aggregation's rows merged by
//! key (threads' rows of a keyless aggregation into one; duplicate keyed entries into
//! one), and the drops. What udtrace does at `aggrate`, at `printa()` and at the end,
//! and what the tests compare executors by.

use std::collections::BTreeMap;

use crate::interp::{may_be_written, Memory, Words};
use crate::layout::{
    merge, string_of_words, AggPlace, BufferLayout, Layout, DROP_CPUS, KEY_READY, MAX_PROBES, OFF_AGG_DROPS,
    OFF_DYN_DROPS,
};

/// The tid word of a thread entry being retired: no thread has it, so no lookup stops
/// there, and no other reader retires it too.
pub const RETIRING: u64 = u64::MAX;

/// Retires the thread entries of threads that have ended (`ended(tid)`), where their
/// tid is among `tids` (None: every entry): their aggregation rows are merged into
/// `into` and the entries freed for other threads, zeroed. Without it a buffer that
/// forked workers share fills up with their ended threads' entries, and later threads
/// find none (dynamic-variable drops). Only ended threads are retired: a live one
/// might be adding to its row meanwhile. Returns how many were.
pub fn retire_threads(
    layout: &Layout,
    buf: &BufferLayout,
    mem: &mut dyn Memory,
    tids: Option<&[u64]>,
    ended: &dyn Fn(u64) -> bool,
    into: &mut Snapshot,
) -> usize {
    let written = mem.written();
    let entries: Vec<usize> = match tids {
        None => (0..buf.nthreads).map(|i| buf.thread_entry(i)).collect(),
        Some(t) => t.iter().flat_map(|&tid| (0..MAX_PROBES).map(move |i| buf.thread_entry(tid as usize + i))).collect(),
    };
    let mut n = 0;
    for e in entries.into_iter().filter(|&e| may_be_written(&written, e)) {
        let tid = mem.load(e);
        if tid == 0 || tid == RETIRING || tids.is_some_and(|t| !t.contains(&tid)) || !ended(tid) {
            continue;
        }
        if mem.cmpxchg(e, tid, RETIRING) != tid {
            continue;
        }
        for (a, (desc, place)) in layout.aggs.iter().zip(&buf.places).enumerate() {
            if let AggPlace::Thread { row } = *place {
                let words: Vec<u64> = (0..desc.func.words()).map(|w| mem.load(e + row + 8 * w)).collect();
                into.add(a, desc.func, Vec::new(), &words);
            }
        }
        // Zeroed before it is freed: the next thread to claim it writes only the rows'
        // initial words.
        for off in (8..buf.entry_size).step_by(8) {
            mem.store(e + off, 0);
        }
        mem.store(e, 0);
        n += 1;
    }
    n
}

/// A buffer's contents, independent of how an executor stored them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Per thread id, its thread-local slots.
    pub tls: BTreeMap<u64, Vec<u64>>,
    /// Per aggregation, key → row (keyless: the empty key). Rows without hits are left
    /// out.
    pub aggs: Vec<BTreeMap<Vec<u64>, Vec<u64>>>,
    pub agg_drops: u64,
    /// `agg_drops` by CPU (DTrace reports them so; dynamic-variable drops in all).
    pub agg_drops_by_cpu: BTreeMap<u64, u64>,
    pub dyn_drops: u64,
    /// The string table: id → the string ([`crate::layout`], "Strings").
    pub strings: BTreeMap<u64, Vec<u8>>,
}

impl Snapshot {
    pub fn empty(layout: &Layout) -> Snapshot {
        Snapshot { aggs: vec![BTreeMap::new(); layout.aggs.len()], ..Snapshot::default() }
    }

    pub fn read(layout: &Layout, buf: &BufferLayout, mem: &dyn Words) -> Snapshot {
        let mut s = Snapshot::empty(layout);
        let row = |off: usize, words: usize| (0..words).map(|w| mem.load(off + 8 * w)).collect::<Vec<u64>>();
        let written = mem.written();
        for i in 0..buf.nthreads {
            let e = buf.thread_entry(i);
            if !may_be_written(&written, e) {
                continue;
            }
            let tid = mem.load(e);
            if tid == 0 {
                continue;
            }
            let tls = row(e + 8, usize::from(layout.tls));
            s.tls.entry(tid).or_insert(tls);
            for (a, (desc, place)) in layout.aggs.iter().zip(&buf.places).enumerate() {
                if let AggPlace::Thread { row: r } = *place {
                    s.add(a, desc.func, Vec::new(), &row(e + r, desc.func.words()));
                }
            }
        }
        for (a, (desc, place)) in layout.aggs.iter().zip(&buf.places).enumerate() {
            if let AggPlace::Keyed { table, entries, entry_size } = *place {
                for i in 0..entries {
                    let e = table + i * entry_size;
                    if !may_be_written(&written, e) || mem.load(e) != KEY_READY {
                        continue;
                    }
                    let n = usize::from(desc.nkeys);
                    let key = row(e + 8, n);
                    s.add(a, desc.func, key, &row(e + 8 + 8 * n, desc.func.words()));
                }
            }
        }
        if let Some(p) = buf.strings {
            for i in 0..p.entries {
                let e = p.table + i * p.entry_size;
                if mem.load(e) == KEY_READY {
                    let words = row(e + 16, layout.string_words());
                    s.strings.entry(mem.load(e + 8)).or_insert_with(|| string_of_words(&words));
                }
            }
        }
        for c in 0..DROP_CPUS {
            s.add_agg_drops(c as u64, mem.load(OFF_AGG_DROPS + 8 * c));
            s.dyn_drops += mem.load(OFF_DYN_DROPS + 8 * c);
        }
        s
    }

    /// Merges `other` (another buffer's or executor's, for the same layout) into this
    /// one: rows by key, thread-local variables by thread (a thread is in one process:
    /// the first seen is kept), drops added.
    pub fn merge(&mut self, layout: &Layout, other: &Snapshot) {
        if self.aggs.len() < layout.aggs.len() {
            self.aggs.resize(layout.aggs.len(), BTreeMap::new());
        }
        for (tid, tls) in &other.tls {
            self.tls.entry(*tid).or_insert_with(|| tls.clone());
        }
        for (a, (desc, rows)) in layout.aggs.iter().zip(&other.aggs).enumerate() {
            for (key, row) in rows {
                self.add(a, desc.func, key.clone(), row);
            }
        }
        for (&cpu, &n) in &other.agg_drops_by_cpu {
            self.add_agg_drops(cpu, n);
        }
        self.dyn_drops += other.dyn_drops;
        for (id, st) in &other.strings {
            self.strings.entry(*id).or_insert_with(|| st.clone());
        }
    }

    /// Counts `n` aggregation drops on `cpu`.
    pub fn add_agg_drops(&mut self, cpu: u64, n: u64) {
        if n > 0 {
            self.agg_drops += n;
            *self.agg_drops_by_cpu.entry(cpu).or_default() += n;
        }
    }

    /// Merges one row (an executor's thread, CPU or duplicate entry) into aggregation
    /// `agg` at `key`.
    pub fn add(&mut self, agg: usize, func: crate::layout::AggFn, key: Vec<u64>, row: &[u64]) {
        if row.first().copied().unwrap_or(0) == 0 {
            return;
        }
        match self.aggs[agg].get_mut(&key) {
            Some(into) => merge(func, into, row),
            None => {
                self.aggs[agg].insert(key, row.to_vec());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{run, Firing};
    use crate::layout::{AggDesc, AggFn};
    use crate::op::{Op, Program};

    #[test]
    fn snapshots_merge_by_key() {
        let layout = Layout {
            tls: 1,
            aggs: vec![AggDesc { func: AggFn::Max, nkeys: 1 }, AggDesc { func: AggFn::Count, nkeys: 0 }],
            strsize: 0,
        };
        let mut a = Snapshot::empty(&layout);
        a.add(0, AggFn::Max, vec![1], &[1, 5]);
        a.tls.insert(10, vec![3]);
        a.agg_drops = 1;
        let mut b = Snapshot::empty(&layout);
        b.add(0, AggFn::Max, vec![1], &[2, 9]);
        b.add(0, AggFn::Max, vec![2], &[1, 4]);
        b.add(1, AggFn::Count, vec![], &[7]);
        b.tls.insert(11, vec![4]);
        b.dyn_drops = 2;
        a.merge(&layout, &b);
        assert_eq!(a.aggs[0][&vec![1]], vec![3, 9]);
        assert_eq!(a.aggs[0][&vec![2]], vec![1, 4]);
        assert_eq!(a.aggs[1][&vec![]], vec![7]);
        assert_eq!(a.tls.len(), 2);
        assert_eq!((a.agg_drops, a.dyn_drops), (1, 2));
        let mut none = Snapshot::default();
        none.merge(&layout, &b);
        assert_eq!(none.aggs[1][&vec![]], vec![7]);
    }

    #[test]
    fn ended_threads_entries_are_retired_and_their_counts_kept() {
        let layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Max, nkeys: 0 }], strsize: 0 };
        let buf = BufferLayout::new(&layout, 4, 1);
        let mut mem = vec![0u8; buf.size];
        let p = Program {
            ops: vec![
                Op::Arg { d: 0, n: 0 },
                Op::TlsStore { slot: 0, a: 0 },
                Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 },
            ],
        };
        let mut retired = Snapshot::empty(&layout);
        // Far more threads than entries, each ending before the next starts.
        for tid in 1..100u64 {
            let f = Firing { args: [tid * 10, 0, 0, 0, 0, 0], tid, ..Firing::default() };
            assert_eq!(run(&p, &layout, &buf, &f, &mut mem), crate::interp::Outcome::Done, "tid {tid}");
            let n = retire_threads(&layout, &buf, &mut mem, Some(&[tid]), &|t| t == tid, &mut retired);
            assert_eq!(n, 1);
        }
        // A live thread is left alone.
        let f = Firing { args: [5, 0, 0, 0, 0, 0], tid: 500, ..Firing::default() };
        run(&p, &layout, &buf, &f, &mut mem);
        assert_eq!(retire_threads(&layout, &buf, &mut mem, None, &|t| t != 500, &mut retired), 0);
        let mut all = Snapshot::read(&layout, &buf, &mem);
        all.merge(&layout, &retired);
        assert_eq!(all.aggs[0][&vec![]], vec![100, 990]);
        assert_eq!(all.tls.len(), 1, "the ended threads' variables are gone");
        assert_eq!(all.dyn_drops, 0);
    }
}
