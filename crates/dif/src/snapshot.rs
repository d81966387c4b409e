//! Reading a buffer back: every thread's variables, every aggregation's rows merged by
//! key (threads' rows of a keyless aggregation into one; duplicate keyed entries into
//! one), and the drops. What udtrace does at `aggrate`, at `printa()` and at the end,
//! and what the tests compare executors by.

use std::collections::BTreeMap;

use crate::interp::Words;
use crate::layout::{merge, AggPlace, BufferLayout, Layout, DROP_CPUS, KEY_READY, OFF_AGG_DROPS, OFF_DYN_DROPS};

/// A buffer's contents, independent of how an executor stored them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Per thread id, its thread-local slots.
    pub tls: BTreeMap<u64, Vec<u64>>,
    /// Per aggregation, key → row (keyless: the empty key). Rows without hits are left
    /// out.
    pub aggs: Vec<BTreeMap<Vec<u64>, Vec<u64>>>,
    pub agg_drops: u64,
    pub dyn_drops: u64,
}

impl Snapshot {
    pub fn empty(layout: &Layout) -> Snapshot {
        Snapshot { aggs: vec![BTreeMap::new(); layout.aggs.len()], ..Snapshot::default() }
    }

    pub fn read(layout: &Layout, buf: &BufferLayout, mem: &dyn Words) -> Snapshot {
        let mut s = Snapshot::empty(layout);
        let row = |off: usize, words: usize| (0..words).map(|w| mem.load(off + 8 * w)).collect::<Vec<u64>>();
        for i in 0..buf.nthreads {
            let e = buf.thread_entry(i);
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
                    if mem.load(e) != KEY_READY {
                        continue;
                    }
                    let n = usize::from(desc.nkeys);
                    let key = row(e + 8, n);
                    s.add(a, desc.func, key, &row(e + 8 + 8 * n, desc.func.words()));
                }
            }
        }
        for c in 0..DROP_CPUS {
            s.agg_drops += mem.load(OFF_AGG_DROPS + 8 * c);
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
        self.agg_drops += other.agg_drops;
        self.dyn_drops += other.dyn_drops;
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
    use crate::layout::{AggDesc, AggFn};

    #[test]
    fn snapshots_merge_by_key() {
        let layout = Layout {
            tls: 1,
            aggs: vec![AggDesc { func: AggFn::Max, nkeys: 1 }, AggDesc { func: AggFn::Count, nkeys: 0 }],
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
}
