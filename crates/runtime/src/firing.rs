//! Aggregations that live where their probes fire (docs/firing.md), read back: the
//! rows the firings left, keyed by words, become the consumer's keys and states, and
//! replace the aggregation's contents (the consumer never updates such an aggregation).

use std::collections::HashMap;
use std::rc::Rc;

use udtrace_dif::layout::merge;
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
        // One word of a name is not a key: `key_values` reads the two together.
        KeyWord::Comm | KeyWord::CommRest => Value::Str(Vec::new()),
    }
}

/// A row's key words as the consumer's key: one value per key of the aggregation
/// (an `execname` key takes two words).
pub fn key_values(kinds: &[KeyWord], words: &[u64], probe: &dyn Fn(u32) -> Option<Rc<Probe>>) -> Vec<Value> {
    let mut out = Vec::with_capacity(kinds.len());
    for (i, (&k, &w)) in kinds.iter().zip(words).enumerate() {
        match k {
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
            let key = key_values(&fa.keys, words, probe);
            match index.get(&key) {
                Some(&at) => merge(desc.func, &mut merged[at].1, row),
                None => {
                    index.insert(key.clone(), merged.len());
                    merged.push((key, row.clone()));
                }
            }
        }
        let func = agg.func;
        agg.replace(merged.into_iter().map(|(k, row)| (k, AggState::from_row(&func, &row))).collect());
    }
}
