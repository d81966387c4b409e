//! The session's side of the work done where probes fire (docs/firing.md): what the
//! firings left is read back into the consumer's aggregations at `aggrate`, before a
//! `printa()` and at the end, with its drops reported.

use std::rc::Rc;
use std::time::{Duration, Instant};

use udtrace_lang::firing::FiringPlan;
use udtrace_messages::note;
use udtrace_providers::backend::Backend;
use udtrace_providers::pid::is_pid_provider;
use udtrace_providers::registry::Registry;
use udtrace_runtime::consumer::printa_in;
use udtrace_runtime::oformat::Drop;
use udtrace_runtime::Consumer;

use crate::compile::Compiled;

pub struct Firings {
    plan: Rc<FiringPlan>,
    aggrate: Duration,
    last: Instant,
    /// A clause the consumer runs on pid records prints aggregations: read back
    /// before each batch of records.
    printed_by_records: bool,
    /// Drops reported so far (snapshots give totals).
    reported: (u64, u64),
    /// Aggregation drops reported so far, by CPU.
    reported_agg: std::collections::BTreeMap<u64, u64>,
    droptags: bool,
}

impl Firings {
    pub fn new(c: &Compiled) -> Firings {
        let plan = Rc::clone(&c.firing);
        let printed_by_records = c.program.clauses.iter().enumerate().any(|(i, cl)| {
            !plan.at_firing[i] && cl.probes.iter().any(|d| is_pid_provider(&d.provider)) && printa_in(&cl.actions)
        });
        Firings {
            plan,
            aggrate: Duration::from_nanos(c.options.aggrate.max(1)),
            last: Instant::now(),
            printed_by_records,
            reported: (0, 0),
            reported_agg: Default::default(),
            droptags: c.options.other.contains_key(&udtrace_lang::options::OptionName::Droptags),
        }
    }

    /// Whether anything lives at the firing to be read back.
    fn active(&self) -> bool {
        !self.plan.layout.aggs.is_empty()
    }

    /// Whether `aggrate` has passed since the last read.
    pub fn due(&self) -> bool {
        self.active() && self.last.elapsed() >= self.aggrate
    }

    /// Whether records about to be consumed may print aggregations.
    pub fn before_records(&self) -> bool {
        self.active() && self.printed_by_records
    }

    /// Reads what the firings left into `consumer`, and reports new drops.
    pub fn refresh(
        &mut self,
        consumer: &mut Consumer,
        backend: Option<&mut (dyn Backend + 'static)>,
        registry: &Registry,
    ) {
        if !self.active() {
            return;
        }
        self.last = Instant::now();
        let Some(backend) = backend else { return };
        let snap = backend.firing_snapshot();
        udtrace_runtime::firing::load(consumer, &self.plan, &snap, &|id| registry.by_id(id));
        // DTrace's words: aggregation drops by CPU, dynamic-variable drops in all.
        let tag = |t: &str| if self.droptags { format!("[{t}] ") } else { String::new() };
        for (&cpu, &now) in &snap.agg_drops_by_cpu {
            let was = self.reported_agg.get(&cpu).copied().unwrap_or(0);
            if now > was {
                let n = now - was;
                let msg = format!("{n} aggregation drop{} on CPU {cpu}", if n == 1 { "" } else { "s" });
                note!("{}{msg}", tag("DTRACEDROP_AGGREGATION"));
                consumer.note_drop(&Drop { kind: "AGGREGATION", cpu: Some(cpu as u32), count: n, msg: &msg });
                self.reported_agg.insert(cpu, now);
            }
        }
        let (agg, dynamic) = (snap.agg_drops, snap.dyn_drops);
        if dynamic > self.reported.1 {
            let n = dynamic - self.reported.1;
            let msg = format!("{n} dynamic variable drop{}", if n == 1 { "" } else { "s" });
            note!("{}{msg}", tag("DTRACEDROP_DYNAMIC"));
            consumer.note_drop(&Drop { kind: "DYNAMIC", cpu: None, count: n, msg: &msg });
        }
        self.reported = (self.reported.0.max(agg), self.reported.1.max(dynamic));
    }
}
