//! `-x timeline=FILE` (docs/timeline.md): opens the file and hands the runtime's
//! timeline each firing the consumer runs, with what the session knows of processes
//! and the consumer does not: the followed tree's parents, the names of processes
//! that never fired.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter};

use udtrace_process::follow::Tree;
use udtrace_providers::pid_context::Procs;
use udtrace_providers::registry::Registry;
use udtrace_record::proc::{Hook, ProcFiring};
use udtrace_runtime::timeline::Timeline;
use udtrace_runtime::{Consumer, Context, Probe};

use crate::compile::io_reason;

pub struct Recorder {
    timeline: Timeline,
    /// Per pid `entry` probe that fired: whether its function's `return` is enabled.
    returns: HashMap<u32, bool>,
    /// (provider, module, function) → the `return` probe, of the first `seen` probes.
    return_ids: HashMap<(String, String, String), u32>,
    seen: usize,
    path: String,
    /// The first write that failed: the timeline stops there, reported at the end.
    failed: Option<io::Error>,
}

/// The timeline the options ask for, its file created (truncated) now, before tracing.
pub fn open(path: Option<&str>) -> Result<Option<Recorder>, String> {
    let Some(path) = path else { return Ok(None) };
    let failed = |e: io::Error| format!("failed to open timeline file '{path}': {}", io_reason(&e));
    let file = File::create(path).map_err(failed)?;
    let timeline = Timeline::new(Box::new(BufWriter::with_capacity(1 << 16, file))).map_err(failed)?;
    Ok(Some(Recorder {
        timeline,
        returns: HashMap::new(),
        return_ids: HashMap::new(),
        seen: 0,
        path: path.to_string(),
        failed: None,
    }))
}

/// What the session knows of a firing's world that the timeline asks.
#[derive(Clone, Copy)]
pub struct Known<'a> {
    pub registry: &'a Registry,
    /// Which probes are enabled (whether an entry's return is).
    pub consumer: &'a Consumer,
    /// The followed tree: processes' parents.
    pub tree: Option<&'a Tree>,
    /// Names of processes that never fired.
    pub procs: &'a RefCell<Procs>,
}

/// The other process a proc firing names: the new process of a fork (always in the
/// record), else the other task's process where the record holds it (a signal's target).
pub fn other_process(f: &ProcFiring) -> Option<u32> {
    match f.hook {
        Hook::Fork => Some((f.a[0] >> 32) as u32),
        _ => f.other.as_ref().map(|o| o.tgid),
    }
}

impl Recorder {
    /// A firing of probe `id`, run by the consumer in `ctx`. `proc`: a proc probe's
    /// firing, with the other process it names; it fires for every process on the
    /// machine, and only those of the traced tree (or already on the timeline) are
    /// kept when there is a tree.
    pub fn firing(&mut self, id: u32, ctx: &dyn Context, proc: Option<Option<u32>>, known: &Known<'_>) {
        let Known { registry, consumer, tree, procs } = *known;
        if self.failed.is_some() {
            return;
        }
        let Some(probe) = registry.by_id(id) else { return };
        let pid = match ctx.builtin(udtrace_lang::ir::Builtin::Pid) {
            Some(udtrace_runtime::Value::Int(i)) => i.bits as u32,
            _ => 0,
        };
        if proc.is_some() && tree.is_some_and(|t| t.root_of(pid as i32).is_none()) && !self.timeline.knows(pid) {
            return;
        }
        let other = proc.flatten();
        let returns = probe.name == "entry" && self.returns_enabled(&probe, registry, consumer);
        match self.timeline.firing(&probe, ctx, other, returns) {
            Ok(true) => self.link(pid, tree, procs),
            Ok(false) => {}
            Err(e) => self.failed = Some(e),
        }
    }

    /// Whether the `return` probe of an `entry` probe's function is enabled: only then
    /// does the entry open a slice. Found once per entry probe.
    fn returns_enabled(&mut self, entry: &Probe, registry: &Registry, consumer: &Consumer) -> bool {
        if let Some(&r) = self.returns.get(&entry.id) {
            return r;
        }
        let key = (entry.provider.clone(), entry.module.clone(), entry.function.clone());
        // Probes found since the last look (a new image's) join the index.
        let all = registry.all();
        if !self.return_ids.contains_key(&key) && all.len() > self.seen {
            for p in all[self.seen..].iter().filter(|p| p.name == "return") {
                let k = (p.provider.clone(), p.module.clone(), p.function.clone());
                self.return_ids.entry(k).or_insert(p.id);
            }
            self.seen = all.len();
        }
        let r = self.return_ids.get(&key).is_some_and(|&id| consumer.is_enabled(id));
        self.returns.insert(entry.id, r);
        r
    }

    /// Puts a process new to the timeline under its parent in the followed tree, and
    /// that parent under its own, up to a process already there or the tree's root.
    fn link(&mut self, pid: u32, tree: Option<&Tree>, procs: &RefCell<Procs>) {
        let Some(tree) = tree else { return };
        let mut p = pid;
        while let Some(q) = tree.parent_of(p as i32).map(|q| q as u32) {
            let known = self.timeline.knows(q);
            if !known {
                self.timeline.add_process(q, procs.borrow_mut().execname(q));
            }
            self.timeline.set_parent(p, q);
            if known {
                break;
            }
            p = q;
        }
    }

    /// Ends the file; `Err` is the message for a write that failed.
    pub fn finish(self) -> Result<(), String> {
        let failed = |e: io::Error| format!("failed to write timeline file '{}': {}", self.path, io_reason(&e));
        if let Some(e) = self.failed {
            return Err(failed(e));
        }
        let counts = self.timeline.finish().map_err(failed)?;
        udtrace_messages::debug!(
            "timeline: {} slices ({} unfinished), {} instants",
            counts.slices,
            counts.unfinished,
            counts.instants
        );
        Ok(())
    }
}
