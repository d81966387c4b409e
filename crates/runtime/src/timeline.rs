//! The timeline (`-x timeline=FILE`, docs/timeline.md): every firing of the enabled
//! probes as a Chrome/Perfetto trace event, written as it is consumed.
//!
//! A pid probe's `entry` and the `return` of the same function on the same thread make
//! a complete slice (`"ph":"X"`), nested as the calls were; every other firing (a proc
//! probe, an offset or USDT probe, a return whose entry was not seen) is an instant
//! (`"ph":"i"`, on its thread). Processes and threads are named by metadata events
//! written at the end, when every process and its parent are known. Timestamps are the
//! records' (`timestamp`, CLOCK_MONOTONIC nanoseconds), in microseconds with three
//! decimals, as the format counts time.
//!
//! It does no I/O of its own: it writes to the writer it is given, and the session tells
//! it the parents of processes (the followed tree) and the names of those that never
//! fired.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};
use std::rc::Rc;

use udtrace_lang::ir::Builtin;

use crate::consumer::Probe;
use crate::context::Context;
use crate::value::Value;

/// A call whose entry fired and whose return has not yet.
struct Open {
    probe: Rc<Probe>,
    ts: u64,
}

#[derive(Default)]
struct Process {
    name: String,
    parent: Option<u32>,
    threads: BTreeSet<u32>,
}

/// What the timeline has written, by kind (for `-x debug` and tests of this module).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub slices: u64,
    pub instants: u64,
    /// Slices closed at the end (or by an outer return) without their return.
    pub unfinished: u64,
}

pub struct Timeline {
    out: Box<dyn Write>,
    /// An event was written: the next one needs a comma.
    wrote: bool,
    processes: BTreeMap<u32, Process>,
    /// Per thread, the calls open on it, outermost first.
    stacks: HashMap<u32, Vec<Open>>,
    /// Per thread, its process and last firing's timestamp: where its unfinished
    /// calls end.
    last: HashMap<u32, (u32, u64)>,
    counts: Counts,
}

/// Whether a provider is the pid provider's (`pid`, `pid123`): its `entry` and
/// `return` probes pair up.
fn is_pid(provider: &str) -> bool {
    provider.strip_prefix("pid").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
}

fn int(ctx: &dyn Context, b: Builtin) -> u64 {
    match ctx.builtin(b) {
        Some(Value::Int(i)) => i.bits,
        _ => 0,
    }
}

fn name_of(ctx: &dyn Context) -> String {
    match ctx.builtin(Builtin::Execname) {
        Some(Value::Str(s)) => String::from_utf8_lossy(&s).into_owned(),
        _ => String::new(),
    }
}

/// A JSON string, escaped as `-x oformat=json` escapes its strings.
fn json_str(out: &mut String, s: &str) {
    let mut quoted = Vec::with_capacity(s.len() + 2);
    crate::oformat::json::string(&mut quoted, s.as_bytes());
    // Escapes are ASCII and the rest is `s`'s own UTF-8.
    out.push_str(&String::from_utf8_lossy(&quoted));
}

/// Nanoseconds as the format's microseconds, exactly (three decimals).
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

impl Timeline {
    /// Starts the file: the object and its event array, closed by [`Timeline::finish`].
    pub fn new(mut out: Box<dyn Write>) -> io::Result<Timeline> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"clock\":\"CLOCK_MONOTONIC\",\"tracer\":\"udtrace\"},\n\"traceEvents\":[\n")?;
        Ok(Timeline {
            out,
            wrote: false,
            processes: BTreeMap::new(),
            stacks: HashMap::new(),
            last: HashMap::new(),
            counts: Counts::default(),
        })
    }

    fn event(&mut self, e: &str) -> io::Result<()> {
        if self.wrote {
            self.out.write_all(b",\n")?;
        }
        self.wrote = true;
        self.out.write_all(e.as_bytes())
    }

    /// Whether process `pid` is on the timeline.
    pub fn knows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// Puts process `pid` on the timeline (a parent that never fired), named `name`.
    pub fn add_process(&mut self, pid: u32, name: String) {
        self.processes.entry(pid).or_default().name = name;
    }

    /// Process `pid` is a child of `parent` (both on the timeline).
    pub fn set_parent(&mut self, pid: u32, parent: u32) {
        if pid != parent {
            self.processes.entry(pid).or_default().parent = Some(parent);
        }
    }

    /// The slices and instants written so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// One firing of `probe` in the context the consumer runs it in. `other`: the
    /// other process a proc firing names (the child of `create`, the target of
    /// `signal-send`). `returns`: for a pid `entry`, whether its function's `return`
    /// is enabled too (else the entry is an instant: nothing would end its slice).
    /// Returns whether the firing's process is new to the timeline (the session then
    /// tells its parent).
    pub fn firing(
        &mut self,
        probe: &Rc<Probe>,
        ctx: &dyn Context,
        other: Option<u32>,
        returns: bool,
    ) -> io::Result<bool> {
        let pid = int(ctx, Builtin::Pid) as u32;
        let tid = int(ctx, Builtin::Tid) as u32;
        let ts = int(ctx, Builtin::Timestamp);
        let new = !self.processes.contains_key(&pid);
        let proc = self.processes.entry(pid).or_default();
        // A proc firing's name is the task's at that instant (a new one after exec).
        if new || probe.provider == "proc" {
            proc.name = name_of(ctx);
        }
        proc.threads.insert(tid);
        self.last.insert(tid, (pid, ts));
        let pairs = is_pid(&probe.provider);
        if pairs && returns && probe.name == "entry" {
            self.stacks.entry(tid).or_default().push(Open { probe: Rc::clone(probe), ts });
            return Ok(new);
        }
        if pairs && probe.name == "return" {
            let stack = self.stacks.entry(tid).or_default();
            let at = stack.iter().rposition(|o| o.probe.function == probe.function && o.probe.module == probe.module);
            if let Some(at) = at {
                // Calls opened after it and not returned from (a longjmp, an unwind)
                // end with it.
                let closed: Vec<Open> = stack.drain(at..).collect();
                for (i, o) in closed.iter().enumerate().rev() {
                    self.slice(pid, tid, o, ts, i != 0)?;
                }
                return Ok(new);
            }
        }
        self.instant(pid, tid, probe, ts, other)?;
        Ok(new)
    }

    fn slice(&mut self, pid: u32, tid: u32, o: &Open, end: u64, unfinished: bool) -> io::Result<()> {
        let mut e = String::with_capacity(160);
        // The module is the category: viewers that fold `args` into a slice's label
        // (speedscope) keep the function's name alone.
        e.push_str("{\"ph\":\"X\",\"cat\":");
        json_str(&mut e, &o.probe.module);
        e.push_str(",\"name\":");
        json_str(&mut e, &o.probe.function);
        e.push_str(&format!(
            ",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{}",
            micros(o.ts),
            micros(end.saturating_sub(o.ts))
        ));
        if unfinished {
            e.push_str(",\"args\":{\"unfinished\":true}");
            self.counts.unfinished += 1;
        }
        e.push('}');
        self.counts.slices += 1;
        self.event(&e)
    }

    fn instant(&mut self, pid: u32, tid: u32, probe: &Probe, ts: u64, other: Option<u32>) -> io::Result<()> {
        let mut e = String::with_capacity(160);
        e.push_str("{\"ph\":\"i\",\"s\":\"t\",\"cat\":");
        json_str(&mut e, if is_pid(&probe.provider) { "pid" } else { &probe.provider });
        e.push_str(",\"name\":");
        // A proc probe by its name alone (its function is the kernel's hook).
        let name = match probe.provider.as_str() {
            "proc" => format!("proc:::{}", probe.name),
            _ => format!("{}:{}:{}:{}", probe.provider, probe.module, probe.function, probe.name),
        };
        json_str(&mut e, &name);
        e.push_str(&format!(",\"pid\":{pid},\"tid\":{tid},\"ts\":{}", micros(ts)));
        if let Some(o) = other {
            let key = match probe.name.as_str() {
                "create" => "child",
                "signal-send" => "to",
                _ => "other",
            };
            e.push_str(&format!(",\"args\":{{\"{key}\":{o}}}"));
            if probe.name == "create" {
                // A child is its parent's copy until it execs (or fires under its own name).
                let name = self.processes.get(&pid).map(|p| p.name.clone()).unwrap_or_default();
                let child = self.processes.entry(o).or_default();
                if child.name.is_empty() {
                    child.name = name;
                }
                child.parent.get_or_insert(pid);
            }
        }
        e.push('}');
        self.counts.instants += 1;
        self.event(&e)
    }

    /// Ends the file: calls still open end at their thread's last firing (marked
    /// `unfinished`), then the processes' and threads' names, their parents, and their
    /// order (each process right after its parent, children by pid).
    pub fn finish(mut self) -> io::Result<Counts> {
        let mut open: Vec<(u32, Vec<Open>)> = self.stacks.drain().collect();
        open.sort_by_key(|(tid, _)| *tid);
        for (tid, stack) in open {
            let Some(&(pid, end)) = self.last.get(&tid) else { continue };
            for o in stack.iter().rev() {
                self.slice(pid, tid, o, end, true)?;
            }
        }
        let order = self.tree_order();
        let procs = std::mem::take(&mut self.processes);
        for (index, (pid, _depth)) in order.into_iter().enumerate() {
            let Some(p) = procs.get(&pid) else { continue };
            let mut name = String::new();
            // The format has no parent process: the parent is in the name and the
            // labels, and the sort index puts a child below its parent.
            let shown = match p.parent.and_then(|q| procs.get(&q).map(|pp| (q, pp))) {
                Some((q, pp)) => format!("{} (child of {} {q})", p.name, pp.name),
                None => p.name.clone(),
            };
            json_str(&mut name, &shown);
            self.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{name}}}}}"
            ))?;
            self.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"args\":{{\"sort_index\":{index}}}}}"
            ))?;
            if let Some(q) = p.parent {
                self.event(&format!(
                    "{{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":{pid},\"args\":{{\"labels\":\"parent {q}\"}}}}"
                ))?;
            }
            for &tid in &p.threads {
                let mut tname = String::new();
                json_str(&mut tname, &p.name);
                self.event(&format!(
                    "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{tname}}}}}"
                ))?;
            }
        }
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.counts)
    }

    /// Every process with its depth, each parent before its children (children by
    /// pid), roots by pid. A parent not on the timeline makes its child a root.
    fn tree_order(&self) -> Vec<(u32, usize)> {
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let mut roots = Vec::new();
        for (&pid, p) in &self.processes {
            match p.parent.filter(|q| self.processes.contains_key(q)) {
                Some(q) => children.entry(q).or_default().push(pid),
                None => roots.push(pid),
            }
        }
        let mut order = Vec::with_capacity(self.processes.len());
        let mut seen = BTreeSet::new();
        let mut todo: Vec<(u32, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
        while let Some((pid, depth)) = todo.pop() {
            if !seen.insert(pid) {
                continue;
            }
            order.push((pid, depth));
            if let Some(c) = children.get(&pid) {
                todo.extend(c.iter().rev().map(|&k| (k, depth + 1)));
            }
        }
        // A cycle (a pid reused as its own ancestor's parent) has no root: listed last.
        for &pid in self.processes.keys() {
            if !seen.contains(&pid) {
                order.push((pid, 0));
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fired {
        pid: u32,
        tid: u32,
        ts: u64,
        name: &'static str,
    }

    impl Context for Fired {
        fn builtin(&self, b: Builtin) -> Option<Value> {
            Some(match b {
                Builtin::Pid => Value::int(i64::from(self.pid)),
                Builtin::Tid => Value::int(i64::from(self.tid)),
                Builtin::Timestamp => Value::int(self.ts as i64),
                Builtin::Execname => Value::str(self.name),
                _ => return None,
            })
        }
    }

    /// A shared buffer the timeline writes into, read back by the test.
    #[derive(Clone, Default)]
    struct Shared(Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn pairs_nest_and_unmatched_returns_are_instants() {
        let buf = Shared::default();
        let mut t = Timeline::new(Box::new(buf.clone())).unwrap();
        let p = |f: &str, n: &str| Rc::new(Probe::new(1, "pid7", "a.out", f, n));
        let at = |ts| Fired { pid: 7, tid: 8, ts, name: "d\"q" };
        assert!(t.firing(&p("outer", "entry"), &at(1_000), None, true).unwrap());
        assert!(!t.firing(&p("inner", "entry"), &at(2_000), None, true).unwrap());
        t.firing(&p("inner", "return"), &at(3_500), None, true).unwrap();
        t.firing(&p("lost", "return"), &at(4_000), None, true).unwrap();
        t.firing(&p("outer", "return"), &at(5_000), None, true).unwrap();
        t.firing(&p("open", "entry"), &at(6_000), None, true).unwrap();
        t.firing(&p("open2", "entry"), &at(6_500), None, true).unwrap();
        // `open2` never returns: `open`'s return ends it.
        t.firing(&p("open", "return"), &at(7_000), None, true).unwrap();
        t.firing(&p("never", "entry"), &at(8_000), None, true).unwrap();
        t.firing(&p("x", "entry"), &at(9_000), None, true).unwrap();
        // An entry whose return is not enabled is an instant.
        t.firing(&p("alone", "entry"), &at(9_500), None, false).unwrap();
        let c = t.finish().unwrap();
        assert_eq!(c, Counts { slices: 6, instants: 2, unfinished: 3 });
        let text = String::from_utf8(buf.0.borrow().clone()).unwrap();
        assert!(text.contains(r#""name":"inner","pid":7,"tid":8,"ts":2.000,"dur":1.500"#), "{text}");
        assert!(text.contains(r#""name":"outer","pid":7,"tid":8,"ts":1.000,"dur":4.000"#), "{text}");
        assert!(text.contains(r#""name":"pid7:a.out:lost:return""#), "{text}");
        assert!(text.contains(r#""name":"pid7:a.out:alone:entry","pid":7,"tid":8,"ts":9.500}"#), "{text}");
        assert!(
            text.contains(r#""name":"never","pid":7,"tid":8,"ts":8.000,"dur":1.500,"args":{"unfinished":true}"#),
            "{text}"
        );
        assert!(text.contains(r#""args":{"name":"d\"q"}"#), "{text}");
        assert!(text.starts_with('{') && text.ends_with("]}\n"));
    }

    #[test]
    fn children_follow_their_parents() {
        let mut t = Timeline::new(Box::new(io::sink())).unwrap();
        for pid in [9, 3, 5, 4] {
            t.add_process(pid, format!("p{pid}"));
        }
        t.set_parent(5, 3);
        t.set_parent(4, 9);
        t.set_parent(9, 3);
        assert_eq!(t.tree_order(), vec![(3, 0), (5, 1), (9, 1), (4, 2)]);
    }
}
