//! Aggregations that live where their probes fire (docs/firing.md), read back: the
//! rows the firings left, keyed by words, become the consumer's keys and states, and
//! replace the aggregation's contents (the consumer never updates such an aggregation).

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use udtrace_dif::layout::{merge, subtract, AggFn};
use udtrace_dif::snapshot::Snapshot;
use udtrace_lang::firing::{decode_probe_key, FiringPlan, KeyWord};
use udtrace_lang::types::IntType;

use crate::agg::AggState;
use crate::consumer::{Consumer, Probe};
use crate::value::{Int, Value};

/// A key word as the consumer's key: an integer narrowed to its type, or the part of
/// a probe's identity it names (`probe` finds the probe by id).
pub fn key_value(kind: KeyWord, word: u64, probe: &dyn Fn(u32) -> Option<Rc<Probe>>) -> Value {
    match kind {
        KeyWord::Int { size, signed } => {
            Value::Int(Int { bits: IntType::plain(size, signed).wrap(word), size, signed })
        }
        KeyWord::Probe => {
            let (id, part) = decode_probe_key(word);
            let name = probe(id).map(|p| {
                match part {
                    0 => p.provider.clone(),
                    1 => p.module.clone(),
                    2 => p.function.clone(),
                    _ => p.name.clone(),
                }
                .into_bytes()
            });
            Value::Str(name.unwrap_or_default())
        }
        // One word of a name is not a key: `key_values` reads the two together; a
        // string's id reads back from the snapshot's strings (`key_values`).
        KeyWord::Comm | KeyWord::CommRest | KeyWord::Str => Value::Str(Vec::new()),
    }
}

/// A row's key words as the consumer's key: one value per key of the aggregation
/// (an `execname` key takes two words; a string's id is its string in `strings`).
pub fn key_values(
    kinds: &[KeyWord],
    words: &[u64],
    strings: &BTreeMap<u64, Vec<u8>>,
    probe: &dyn Fn(u32) -> Option<Rc<Probe>>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(kinds.len());
    for (i, (&k, &w)) in kinds.iter().zip(words).enumerate() {
        match k {
            KeyWord::Str => out.push(Value::Str(strings.get(&w).cloned().unwrap_or_default())),
            KeyWord::Comm => {
                let next = words.get(i + 1).copied().unwrap_or(0);
                out.push(Value::Str(udtrace_dif::op::comm_name([w, next])));
            }
            KeyWord::CommRest => {}
            _ => out.push(key_value(k, w, probe)),
        }
    }
    out
}

/// Replaces every firing-resident aggregation of `consumer` with what `snap` holds.
/// Rows whose keys read back alike (`probefunc` of a function's entry and return
/// probes) merge.
pub fn load(consumer: &mut Consumer, plan: &FiringPlan, snap: &Snapshot, probe: &dyn Fn(u32) -> Option<Rc<Probe>>) {
    for (i, fa) in plan.aggs.iter().enumerate() {
        let (Some(rows), Some(desc)) = (snap.aggs.get(i), plan.layout.aggs.get(i)) else { continue };
        let Some(agg) = consumer.aggregation_mut(fa.agg) else { continue };
        let mut merged: Vec<(Vec<Value>, Vec<u64>)> = Vec::with_capacity(rows.len());
        let mut index: HashMap<Vec<Value>, usize> = HashMap::with_capacity(rows.len());
        for (words, row) in rows {
            let key = key_values(&fa.keys, words, &snap.strings, probe);
            match index.get(&key) {
                Some(&at) => merge(desc.func, &mut merged[at].1, row),
                None => {
                    index.insert(key.clone(), merged.len());
                    merged.push((key, row.clone()));
                }
            }
        }
        let func = agg.func;
        let base = agg.firing.get_or_insert_with(Baseline::default);
        let entries = merged
            .into_iter()
            .filter_map(|(k, row)| {
                let shown = base.since(desc.func, &k, &row);
                base.raw.insert(k.clone(), row);
                Some((k, AggState::from_row(&func, &shown?)))
            })
            .collect();
        agg.replace(entries);
    }
}

/// What `clear()` and `trunc()` took from an aggregation that lives at the firing:
/// the firings' rows only grow, so the consumer shows each key's rows less what they
/// were when it was last cleared or truncated away (as DTrace's consumer, which zeroes
/// or drops its own copy and adds what the buffers gather after). Only for functions
/// whose rows subtract (not min or max: `FiringPlan::new` keeps those in the consumer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Baseline {
    /// The rows last read back, by key.
    raw: HashMap<Vec<Value>, Vec<u64>>,
    /// Per key cleared or truncated: its rows then, and whether it still shows (cleared:
    /// at zero) or not (truncated away: until a firing updates it again).
    base: HashMap<Vec<Value>, (Vec<u64>, bool)>,
}

impl Baseline {
    /// The row the consumer shows for `key` whose firings left `row`; `None`: it was
    /// truncated away and nothing updated it since.
    fn since(&self, func: AggFn, key: &[Value], row: &[u64]) -> Option<Vec<u64>> {
        let Some((base, shown)) = self.base.get(key) else { return Some(row.to_vec()) };
        let mut d = row.to_vec();
        subtract(func, &mut d, base);
        (*shown || d.first().is_some_and(|&h| h != 0)).then_some(d)
    }

    /// `clear()` of these keys: they show at zero.
    pub(crate) fn cleared<'a>(&mut self, keys: impl Iterator<Item = &'a Vec<Value>>) {
        for k in keys {
            let row = self.raw.get(k).cloned().unwrap_or_default();
            self.base.insert(k.clone(), (row, true));
        }
    }

    /// `trunc()` removed these keys.
    pub(crate) fn truncated<'a>(&mut self, keys: impl Iterator<Item = &'a Vec<Value>>) {
        for k in keys {
            let row = self.raw.get(k).cloned().unwrap_or_default();
            self.base.insert(k.clone(), (row, false));
        }
    }
}
