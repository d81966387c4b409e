//! The session's side of the work done where probes fire (docs/firing.md): what the
//! firings left is read back into the consumer's aggregations at `aggrate`, before a
//! `printa()` and at the end, with its drops reported; and for a backend that runs no
//! programs, the programs run here on its records.

use std::rc::Rc;
use std::time::{Duration, Instant};

use udtrace_dif::interp::{self, Firing, Memory};
use udtrace_dif::layout::BufferLayout;
use udtrace_dif::snapshot::Snapshot;
use udtrace_lang::firing::FiringPlan;
use udtrace_lang::ir::Builtin;
use udtrace_messages::note;
use udtrace_providers::backend::{Backend, ProbeWork};
use udtrace_providers::pid::is_pid_provider;
use udtrace_providers::registry::Registry;
use udtrace_runtime::consumer::printa_in;
use udtrace_runtime::{Consumer, Context, Value};

use crate::compile::Compiled;

pub struct Firings {
    plan: Rc<FiringPlan>,
    emulator: Option<Emulator>,
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

/// The programs run on records, with a buffer of udtrace's own.
struct Emulator {
    work: ProbeWork,
    buf: BufferLayout,
    mem: Vec<u8>,
}

/// Bytes the emulator's thread table and keyed tables may take, each (pages untouched
/// until used).
const EMULATED_TABLE: usize = 64 << 20;

impl Firings {
    pub fn new(c: &Compiled, backend: Option<&mut (dyn Backend + 'static)>) -> Firings {
        let plan = Rc::clone(&c.firing);
        // A backend that keeps no firing state answers the seam's default, a snapshot
        // of no aggregation: it runs no programs and records every firing. (With no
        // aggregation at the firing, what programs do is never seen.)
        let runs_none = backend.is_some_and(|b| b.firing_snapshot().aggs.len() != plan.layout.aggs.len());
        let emulator = (!plan.layout.aggs.is_empty() && runs_none).then(|| {
            let layout = &plan.layout;
            let widest = layout.aggs.iter().map(|a| 8 * (1 + usize::from(a.nkeys) + a.func.words())).max().unwrap_or(8);
            // Thread entries are never given back (a forking daemon's children each
            // take theirs): room for many.
            let entry = BufferLayout::new(layout, 1, 1).entry_size;
            let threads = (EMULATED_TABLE / entry).clamp(4096, 1 << 17);
            let buf = BufferLayout::new(layout, threads, (EMULATED_TABLE / widest).clamp(1024, 1 << 16));
            let mut mem = vec![0u8; buf.size];
            for (o, v) in buf.header() {
                mem.store(o, v);
            }
            Emulator { work: c.work.clone(), buf, mem }
        });
        let printed_by_records = c.program.clauses.iter().enumerate().any(|(i, cl)| {
            !plan.at_firing[i] && cl.probes.iter().any(|d| is_pid_provider(&d.provider)) && printa_in(&cl.actions)
        });
        Firings {
            plan,
            emulator,
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

    /// Runs probe `probe_id`'s program on a record's firing, when the backend did not.
    pub fn on_record(&mut self, probe_id: u32, ctx: &dyn Context) {
        let Some(e) = self.emulator.as_mut() else { return };
        let program = e.work.get(probe_id).program;
        if program.ops.is_empty() {
            return;
        }
        let get = |b: Builtin| match ctx.builtin(b) {
            Some(Value::Int(i)) => i.bits,
            _ => 0,
        };
        let f = Firing {
            args: [0, 1, 2, 3, 4, 5].map(|n| get(Builtin::Arg(n))),
            pid: get(Builtin::Pid),
            tid: get(Builtin::Tid),
            cpu: get(Builtin::Cpu),
            timestamp: get(Builtin::Timestamp),
            uid: get(Builtin::Uid),
            gid: get(Builtin::Gid),
        };
        interp::run(&program, &self.plan.layout, &e.buf, &f, &mut e.mem);
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
        let snap = match (&self.emulator, backend) {
            (Some(e), _) => Snapshot::read(&self.plan.layout, &e.buf, &e.mem),
            (None, Some(b)) => b.firing_snapshot(),
            (None, None) => return,
        };
        udtrace_runtime::firing::load(consumer, &self.plan, &snap, &|id| registry.by_id(id));
        // DTrace's words: aggregation drops by CPU, dynamic-variable drops in all.
        let tag = |t: &str| if self.droptags { format!("[{t}] ") } else { String::new() };
        for (&cpu, &now) in &snap.agg_drops_by_cpu {
            let was = self.reported_agg.get(&cpu).copied().unwrap_or(0);
            if now > was {
                let n = now - was;
                note!(
                    "{}{n} aggregation drop{} on CPU {cpu}",
                    tag("DTRACEDROP_AGGREGATION"),
                    if n == 1 { "" } else { "s" }
                );
                self.reported_agg.insert(cpu, now);
            }
        }
        let (agg, dynamic) = (snap.agg_drops, snap.dyn_drops);
        if dynamic > self.reported.1 {
            let n = dynamic - self.reported.1;
            note!("{}{n} dynamic variable drop{}", tag("DTRACEDROP_DYNAMIC"), if n == 1 { "" } else { "s" });
        }
        self.reported = (self.reported.0.max(agg), self.reported.1.max(dynamic));
    }
}
