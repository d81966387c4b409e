//! The consumer: runs the clauses enabled on a probe when it fires, in program order,
//! keeps variables, aggregations and speculations, and produces DTrace's output.
//!
//! It does no I/O of its own: output goes to the `Write` handed to each call, messages
//! for stderr are returned, and the clock and process facts come from the `Context`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Write};
use std::rc::Rc;

use udtrace_lang::ir::{Action, AggKind, Builtin, CheckedProgram, Expr, ExprKind};

use crate::agg::{AggFunc, Aggregation};
use crate::context::{Context, Overlay};
use crate::eval::{EvalResult, Evaluator, Fault, Variables};
use crate::format::flow::FlowRecord;
use crate::oformat::RecordFormat;
use crate::output;
use crate::scratch::Scratch;
use crate::value::Value;

mod actions;

/// A probe as the consumer sees it: its id and its four-part name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub id: u32,
    pub provider: String,
    pub module: String,
    pub function: String,
    pub name: String,
}

impl Probe {
    pub fn new(id: u32, provider: &str, module: &str, function: &str, name: &str) -> Probe {
        Probe { id, provider: provider.into(), module: module.into(), function: function.into(), name: name.into() }
    }
}

/// An enabled probe: one clause on one probe, numbered as DTrace numbers them.
#[derive(Debug, Clone)]
pub struct Ecb {
    pub epid: u32,
    pub clause: usize,
    /// DTrace's statement number, the N of `dt_clause_N` in messages and ERROR's
    /// arg2: one per probe description of each clause, in program order.
    pub stmt: usize,
    pub probe: Rc<Probe>,
}

/// Settings that change what the consumer prints (from `-q`, `-x` and pragmas).
#[derive(Debug, Clone)]
pub struct Settings {
    pub quiet: bool,
    pub strsize: usize,
    pub nspec: usize,
    /// Bytes a speculation may hold (DTrace's specsize).
    pub specsize: usize,
    /// `-x droptags`: drop messages start with `[DTRACEDROP_…] `.
    pub droptags: bool,
    pub destructive: bool,
    pub sort: output::SortOptions,
    /// Seconds east of UTC for `%Y` and `%T`, when there is no `localtime`.
    pub tz_offset: i64,
    /// The system's local time (TZ and zone files), for `%Y` and `%T`.
    pub localtime: Option<crate::format::time::LocalTime>,
    /// dtrace's testing mode (`_DTRACE_TESTING` in the environment): records and the
    /// header lose their CPU and ID columns, which vary from run to run.
    pub testing: bool,
    /// The rawbytes option: trace() dumps every datum's record in hex.
    pub rawbytes: bool,
    /// Bytes of scratch space a clause may allocate (the scratchsize option, rounded
    /// as libdtrace rounds it).
    pub scratch_room: u64,
    /// `-x aggpercpu`: aggregations also keep and print each CPU's value.
    pub aggpercpu: bool,
    /// `print()` shows at most this many bytes of an object.
    pub printsize: usize,
    /// `-x stackfmt=folded`: aggregations print folded, one line per entry.
    pub folded: bool,
    /// `-x oformat=json`: records, aggregations, drops and errors as JSON lines
    /// ([`crate::oformat::json`]).
    pub json: bool,
    /// `-F`: records' prefixes indent calls ([`crate::format::flow`]), quiet or not.
    pub flowindent: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            quiet: false,
            strsize: 256,
            nspec: 1,
            specsize: 32 << 10,
            droptags: false,
            destructive: false,
            sort: output::SortOptions::default(),
            tz_offset: 0,
            localtime: None,
            testing: false,
            rawbytes: false,
            scratch_room: 256,
            aggpercpu: false,
            printsize: udtrace_lang::options::DEFAULT_PRINTSIZE as usize,
            folded: false,
            json: false,
            flowindent: false,
        }
    }
}

/// What the session must do after a firing.
#[derive(Debug, Default)]
pub struct Effects {
    /// `exit(n)` ran: stop tracing, fire END, print, exit with n.
    pub exit: Option<i32>,
    /// Lines for stderr (`error in dt_clause_0 for probe ID …`), each without the program name.
    pub errors: Vec<String>,
    /// `setopt()` requests.
    pub setopts: Vec<(String, Option<String>)>,
    /// Signals for processes, `(pid, signal)`: `raise(sig)` for the firing's process,
    /// `stop()` as SIGSTOP.
    pub signals: Vec<(i32, i32)>,
}

impl Effects {
    /// None again, the room kept.
    fn clear(&mut self) {
        self.exit = None;
        self.errors.clear();
        self.setopts.clear();
        self.signals.clear();
    }
}

/// Where records go (stdout or the `-o` file), with the actions that act on it,
/// which take effect where they are in the output.
pub trait Output: Write {
    /// system(): runs the command with the shell, once what was written before it
    /// is flushed, and waits for it.
    fn system(&mut self, command: &str) -> io::Result<()>;
    /// freopen(): later output appends to `path`; an empty path restores the
    /// original output. `Err` is the reason it could not be opened.
    fn freopen(&mut self, path: &str) -> Result<(), String>;
    /// ftruncate(): empties the output, once what was written before is flushed.
    fn ftruncate(&mut self) -> io::Result<()>;
}

/// Output gathered in memory: system() and freopen() do nothing.
impl Output for Vec<u8> {
    fn system(&mut self, _command: &str) -> io::Result<()> {
        Ok(())
    }
    fn freopen(&mut self, _path: &str) -> Result<(), String> {
        Ok(())
    }
    fn ftruncate(&mut self) -> io::Result<()> {
        self.clear();
        Ok(())
    }
}

/// An action of a record that acts on the output, at its place in the record's data.
#[derive(Debug, Clone)]
enum Deferred {
    System(String),
    Freopen(String),
    Ftruncate,
}

#[derive(Default)]
struct Speculation {
    active: bool,
    /// commit() or discard() ran: no more data goes in, and the buffer is free again
    /// once the firing ends (when DTrace's consumer would have drained it).
    draining: bool,
    /// Output of the speculating clauses, kept until commit or discard.
    buffer: Vec<u8>,
    /// What the buffered records take in DTrace's speculation buffer.
    size: usize,
    /// How many records it holds, and whether any has a probe line (which needs the
    /// column header when it is the first record printed).
    records: usize,
    prefixed: bool,
}

/// Drop counts DTrace reports through its status: each kind is reported when it grows.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Drops {
    /// Speculated records that did not fit in specsize.
    spec: u64,
    /// speculation() with every buffer in use.
    spec_unavail: u64,
    /// speculation() with a buffer still draining.
    spec_busy: u64,
    /// Faults in ERROR clauses.
    dbl_error: u64,
}

/// How a clause's actions ended without a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// speculate() named no usable speculation, or the speculation is full: the
    /// clause stops silently and its record goes nowhere (DTrace's BPF returns).
    Abort,
}

pub struct Consumer {
    prog: Rc<CheckedProgram>,
    settings: Settings,
    vars: Variables,
    aggs: Vec<Aggregation>,
    specs: Vec<Speculation>,
    drops: Drops,
    reported: Drops,
    header_printed: bool,
    rand: u64,
    strtok: Option<(Vec<u8>, usize)>,
    scratch: Scratch,
    /// Shared so that a firing holds its clauses without copying them. Looked up at
    /// every firing: hashed by a multiply, not SipHash (probe ids are udtrace's own).
    by_probe: HashMap<u32, Rc<Vec<Ecb>>, BuildHasherDefault<ProbeIdHash>>,
    /// The probe that fired last and its clauses (a storm is mostly one probe's):
    /// found without hashing. Forgotten when a clause is enabled.
    last_probe: Option<(u32, Rc<Vec<Ecb>>)>,
    error_ecbs: Vec<Ecb>,
    formats: output::FormatCache,
    /// A record's buffers and printf's values, kept from one firing to the next.
    /// (Boxed: taken and put back at every clause, and a move of the record itself
    /// cost more than the rest of its set-up.)
    spare_record: Option<Box<Record>>,
    spare_values: Vec<Value>,
    /// exit() has run: tracing is draining. As in DTrace, no further clause runs
    /// except END's (and ERROR's for a fault in those).
    draining: bool,
    /// Per clause: it runs where its probes fire (docs/firing.md), not here.
    at_firing: Vec<bool>,
    string_reads: Vec<Vec<(u8, u16)>>,
    /// Per clause: it records data the consumer prints (not only commits or discards).
    records_data: Vec<bool>,
    /// What records look like (`-x oformat`).
    oformat: Box<dyn RecordFormat>,
    /// `-F`'s indentation across records.
    flow: crate::format::flow::FlowIndent,
    /// Drops in the output format, written at the next [`Consumer::flush_notices`].
    notices: Vec<u8>,
    /// Per clause: its plan if it is a plain clause (`-x oformat=text` only), and the
    /// buffer its records are made in ([`crate::plain`]).
    plain: Vec<Option<crate::plain::PlainClause>>,
    plain_buf: Vec<u8>,
    /// The last general firing's effects, lent to the caller ([`Consumer::fire`]), and
    /// none, a plain firing's (no `Effects` made and dropped per record).
    effects: Effects,
    no_effects: Effects,
}

/// A probe id's hash: the id times an odd constant (Fibonacci hashing), its high bits
/// spread over the whole word for the table's tag bits.
#[derive(Default)]
struct ProbeIdHash(u64);

impl Hasher for ProbeIdHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(26);
    }
}

impl Consumer {
    /// `seed` feeds `rand()`; `ecbs` are all enabled probes (those on the `ERROR`
    /// probe, provider `dtrace` name `ERROR`, run when a clause faults).
    pub fn new(prog: Rc<CheckedProgram>, settings: Settings, ecbs: Vec<Ecb>, seed: u64) -> Consumer {
        let vars = Variables::new(&prog.globals, &prog.clause_vars, &prog.types, settings.strsize);
        let aggs = prog.aggs.iter().map(|a| Aggregation::new(&a.name, agg_func(a.kind, &a.params))).collect::<Vec<_>>();
        let specs = (0..settings.nspec).map(|_| Speculation::default()).collect();
        let mut by_probe: HashMap<u32, Rc<Vec<Ecb>>, BuildHasherDefault<ProbeIdHash>> = HashMap::default();
        let mut error_ecbs = Vec::new();
        for e in ecbs {
            if e.probe.provider == "dtrace" && e.probe.name == "ERROR" {
                error_ecbs.push(e.clone());
            }
            Rc::make_mut(by_probe.entry(e.probe.id).or_default()).push(e);
        }
        // A clause that only commits or discards records nothing the consumer prints.
        let records_data = prog.clauses.iter().map(|c| c.records_data && !commit_discard_only(&c.actions)).collect();
        let formats = output::FormatCache::new(&prog);
        let scratch = Scratch::new(settings.scratch_room);
        let oformat = crate::oformat::for_settings(&settings);
        let plain = match settings.json {
            false => {
                let of = |(c, &data)| crate::plain::PlainClause::of(c, data, &formats);
                prog.clauses.iter().zip(&records_data).map(of).collect()
            }
            true => Vec::new(),
        };
        Consumer {
            prog,
            settings,
            vars,
            aggs,
            specs,
            drops: Drops::default(),
            reported: Drops::default(),
            header_printed: false,
            rand: seed | 1,
            strtok: None,
            scratch,
            by_probe,
            last_probe: None,
            flow: Default::default(),
            error_ecbs,
            formats,
            spare_record: None,
            spare_values: Vec::new(),
            draining: false,
            at_firing: Vec::new(),
            string_reads: Vec::new(),
            records_data,
            oformat,
            notices: Vec::new(),
            plain,
            plain_buf: Vec::new(),
            effects: Effects::default(),
            no_effects: Effects::default(),
        }
    }

    /// How many clauses run as plain clauses.
    pub fn plain_clauses(&self) -> usize {
        self.plain.iter().flatten().count()
    }

    /// Runs every clause the general way, plain ones too (for tests that compare the
    /// two ways' output).
    pub fn without_plain_clauses(&mut self) {
        self.plain.clear();
    }

    /// The strings each clause at the firing reads there (`FiringPlan::string_reads`):
    /// a record skips the clause unless one of them faults on it (the firing's read
    /// faulted and asked for the record: the clause runs here and reports the fault).
    pub fn set_string_reads(&mut self, reads: Vec<Vec<(u8, u16)>>) {
        self.string_reads = reads;
    }

    /// Whether every string clause `clause` reads at the firing reads on this record.
    fn strings_read(&self, clause: usize, ctx: &dyn Context) -> bool {
        let Some(reads) = self.string_reads.get(clause) else { return true };
        reads.iter().all(|&(n, max)| {
            let addr = match ctx.builtin(udtrace_lang::ir::Builtin::Arg(n)) {
                Some(Value::Int(i)) => i.bits,
                _ => 0,
            };
            max > 0 && ctx.read_string(addr, usize::from(max)).is_some()
        })
    }

    /// The clauses that run where their probes fire: a firing's record skips them.
    pub fn set_at_firing(&mut self, at_firing: Vec<bool>) {
        self.at_firing = at_firing;
    }

    /// Whether a clause enabled on this probe prints aggregations (`printa()`): what
    /// lives at the firing is read back before it fires.
    pub fn prints_aggregations(&self, probe_id: u32) -> bool {
        let ecbs = self.by_probe.get(&probe_id).map_or(&[][..], |l| l.as_slice());
        ecbs.iter().any(|e| printa_in(&self.prog.clauses[e.clause].actions))
    }

    /// Aggregation `id` (by the checked program's numbering), to be replaced with
    /// what the firings left.
    pub fn aggregation_mut(&mut self, id: usize) -> Option<&mut Aggregation> {
        self.aggs.get_mut(id)
    }

    /// Whether exit() has run.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Whether a clause on this probe may still run: DTrace's clauses check the
    /// activity state, which exit() moves to draining, and only END's expect that.
    fn may_run(&self, probe: &Probe) -> bool {
        !self.draining || (probe.provider == "dtrace" && matches!(probe.name.as_str(), "END" | "ERROR"))
    }

    /// Describes the machine's CPUs, for `curcpu`.
    pub fn set_cpus(&mut self, cpus: Vec<crate::dmem::CpuInfo>) {
        if self.settings.aggpercpu {
            let ids: Vec<u32> = cpus.iter().map(|c| c.id.max(0) as u32).collect();
            self.aggs.iter_mut().for_each(|a| a.keep_per_cpu(ids.clone()));
        }
        self.vars.cpus = cpus;
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn settings_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }

    /// Enables a clause on a probe that appeared while tracing (a followed process
    /// exec'd or mapped a new object), unless it already is. Clauses on one probe stay
    /// in program order.
    pub fn enable(&mut self, clause: usize, stmt: usize, probe: Rc<Probe>) {
        // (Its list would be copied on write, the copy unseen by the cache.)
        self.last_probe = None;
        let epid = self.by_probe.values().flat_map(|l| l.iter()).map(|e| e.epid).max().unwrap_or(0) + 1;
        let list = Rc::make_mut(self.by_probe.entry(probe.id).or_default());
        if list.iter().any(|o| o.clause == clause) {
            return;
        }
        let at = list.iter().position(|o| o.clause > clause).unwrap_or(list.len());
        list.insert(at, Ecb { epid, clause, stmt, probe });
    }

    /// Whether clause `clause` is enabled on this probe.
    pub fn is_enabled_clause(&self, probe_id: u32, clause: usize) -> bool {
        self.by_probe.get(&probe_id).is_some_and(|l| l.iter().any(|e| e.clause == clause))
    }

    /// Whether any clause is enabled on this probe.
    pub fn is_enabled(&self, probe_id: u32) -> bool {
        self.by_probe.contains_key(&probe_id)
    }

    /// Runs every clause enabled on `probe_id`, in program order; what the session
    /// must do after it is lent until the next call.
    // (Inlined into the drain loop, the general way in a function of its own: a plain
    // firing does not set up the general way's large frame.)
    #[inline]
    pub fn fire(&mut self, probe_id: u32, cpu: u32, ctx: &dyn Context, out: &mut dyn Output) -> io::Result<&Effects> {
        // The probe that fired last, its first clauses plain: they run here, and the
        // general way takes over at the first that is not (or whose firing lacks a
        // field). Nothing of the firing's state is reset for them: they read none,
        // and the general way resets it before a clause that could.
        let mut from = 0;
        if !self.draining && !self.settings.flowindent {
            if let Some((id, _)) = &self.last_probe {
                if *id == probe_id {
                    match self.plain_firing(cpu, ctx, out)? {
                        None => return Ok(&self.no_effects),
                        Some(k) => from = k,
                    }
                }
            }
        }
        let mut fx = std::mem::take(&mut self.effects);
        fx.clear();
        let r = self.fire_from(probe_id, from, cpu, ctx, out, &mut fx);
        self.effects = fx;
        r.map(|()| &self.effects)
    }

    /// [`Consumer::fire`]'s general way, from the `from`th clause of the probe.
    #[inline(never)]
    fn fire_from(
        &mut self,
        probe_id: u32,
        from: usize,
        cpu: u32,
        ctx: &dyn Context,
        out: &mut dyn Output,
        fx: &mut Effects,
    ) -> io::Result<()> {
        let ecbs = match &self.last_probe {
            Some((id, ecbs)) if *id == probe_id => Rc::clone(ecbs),
            _ => {
                let Some(ecbs) = self.by_probe.get(&probe_id).cloned() else {
                    return Ok(());
                };
                self.last_probe = Some((probe_id, Rc::clone(&ecbs)));
                ecbs
            }
        };
        self.vars.reset_clause_locals();
        // strtok()'s saved string lasts for one probe firing.
        self.strtok = None;
        for ecb in ecbs.iter().skip(from) {
            if !self.may_run(&ecb.probe) {
                break;
            }
            if self.at_firing.get(ecb.clause).copied().unwrap_or(false) && self.strings_read(ecb.clause, ctx) {
                continue;
            }
            if let Err((fault, action)) = self.run_ecb(ecb, cpu, ctx, out, fx)? {
                self.report_fault(ecb, fault, action, cpu, ctx, out, fx)?;
            }
        }
        self.release_drained();
        if !fx.errors.is_empty() {
            self.write_errors(out, &fx.errors)?;
        }
        Ok(())
    }

    /// Runs the last probe's clauses from the first while they are plain; the index of
    /// the first left to the general way, `None` when none is.
    fn plain_firing(&mut self, cpu: u32, ctx: &dyn Context, out: &mut dyn Output) -> io::Result<Option<usize>> {
        let Some((_, ecbs)) = &self.last_probe else { return Ok(Some(0)) };
        for (k, ecb) in ecbs.iter().enumerate() {
            let Some(Some(plan)) = self.plain.get(ecb.clause) else { return Ok(Some(k)) };
            if self.at_firing.get(ecb.clause).copied().unwrap_or(false) {
                return Ok(Some(k));
            }
            // As run_ecb_into: the record opened and ended by the format, the header
            // considered at the first record.
            let buf = &mut self.plain_buf;
            buf.clear();
            let prefixed = self.oformat.begin(buf, cpu, &ecb.probe, ctx, &self.settings);
            if !plan.run(buf, ctx) {
                return Ok(Some(k));
            }
            self.oformat.end(buf, &self.settings);
            if !self.header_printed && prefixed {
                out.write_all(self.oformat.header(&self.settings).as_bytes())?;
            }
            self.header_printed = true;
            out.write_all(buf)?;
        }
        Ok(None)
    }

    /// Speculations committed or discarded in the firing that just ended are free for
    /// speculation() again.
    fn release_drained(&mut self) {
        for s in self.specs.iter_mut().filter(|s| s.draining) {
            *s = Speculation::default();
        }
    }

    /// DTrace's drop messages for drops since the last call (without the program
    /// name), as its status handler words them.
    pub fn drop_notes(&mut self) -> Vec<String> {
        let (now, was) = (self.drops, self.reported);
        self.reported = now;
        let kinds: [(u64, u64, &str, &str, &str); 4] = [
            (now.spec, was.spec, "DTRACEDROP_SPEC", "speculative drop", ""),
            (
                now.spec_busy,
                was.spec_busy,
                "DTRACEDROP_SPECBUSY",
                "failed speculation",
                " (available buffer(s) still busy)",
            ),
            (
                now.spec_unavail,
                was.spec_unavail,
                "DTRACEDROP_SPECUNAVAIL",
                "failed speculation",
                " (no speculative buffer available)",
            ),
            (now.dbl_error, was.dbl_error, "DTRACEDROP_DBLERROR", "error", " in ERROR probe enabling"),
        ];
        let notes: Vec<(&str, u64, String)> = kinds
            .iter()
            .filter(|k| k.0 > k.1)
            .map(|&(n, o, tag, what, why)| {
                let plural = if n - o > 1 { "s" } else { "" };
                (tag, n - o, format!("{} {what}{plural}{why}", n - o))
            })
            .collect();
        notes
            .into_iter()
            .map(|(tag, count, msg)| {
                let kind = tag.trim_start_matches("DTRACEDROP_");
                self.note_drop(&crate::oformat::Drop { kind, cpu: None, count, msg: &msg });
                if self.settings.droptags {
                    format!("[{tag}] {msg}")
                } else {
                    msg
                }
            })
            .collect()
    }

    /// A drop the session counted (a full ring, aggregation or dynamic-variable
    /// space): kept as an object of the output format until [`Consumer::flush_notices`]
    /// (text has none; its words go to stderr).
    pub fn note_drop(&mut self, d: &crate::oformat::Drop) {
        self.oformat.drop_object(&mut self.notices, d);
    }

    /// Writes the drops noted since the last call.
    pub fn flush_notices(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.notices.is_empty() {
            return Ok(());
        }
        out.write_all(&self.notices)?;
        self.notices.clear();
        Ok(())
    }

    /// A firing's error messages as objects of the output format (text has none;
    /// the session prints them on stderr).
    fn write_errors(&self, out: &mut dyn Output, errors: &[String]) -> io::Result<()> {
        let mut buf = Vec::new();
        errors.iter().for_each(|e| self.oformat.error(&mut buf, e));
        if buf.is_empty() {
            return Ok(());
        }
        out.write_all(&buf)
    }

    /// Reports a fault as dtrace does and fires the ERROR probe's clauses.
    #[allow(clippy::too_many_arguments)]
    fn report_fault(
        &mut self,
        ecb: &Ecb,
        fault: Fault,
        action: usize,
        cpu: u32,
        ctx: &dyn Context,
        out: &mut dyn Output,
        fx: &mut Effects,
    ) -> io::Result<()> {
        fx.errors.push(fault_message(ecb, fault, action));
        // A fault inside an ERROR clause is not reported through ERROR again.
        let p = &ecb.probe;
        if p.provider == "dtrace" && p.name == "ERROR" {
            return Ok(());
        }
        // DTrace's ERROR arguments: (unused), the faulting probe, the clause (its
        // statement id), the place in the clause, the fault and its value.
        let args = [0, i64::from(p.id), ecb.stmt as i64, fault_pc(action), fault.code(), fault.address() as i64];
        let error_args = |b: Builtin| match b {
            Builtin::Arg(n) if (n as usize) < args.len() => Some(Value::int(args[n as usize])),
            _ => None,
        };
        let ectx = Overlay { inner: ctx, builtins: error_args };
        for e in self.error_ecbs.clone() {
            // A fault in an ERROR clause is counted, not reported (a double error).
            if self.run_ecb(&e, cpu, &ectx, out, fx)?.is_err() {
                self.drops.dbl_error += 1;
            }
        }
        Ok(())
    }

    /// Runs one clause. The inner `Err` is a fault with the index of the faulting
    /// action (0 = the predicate).
    fn run_ecb(
        &mut self,
        ecb: &Ecb,
        cpu: u32,
        ctx: &dyn Context,
        out: &mut dyn Output,
        fx: &mut Effects,
    ) -> io::Result<Result<(), (Fault, usize)>> {
        // One record's buffers serve every clause: no allocation per firing.
        let mut rec = self.spare_record.take().unwrap_or_default();
        rec.reset();
        let r = self.run_ecb_into(ecb, cpu, ctx, out, fx, &mut rec);
        self.spare_record = Some(rec);
        r
    }

    fn run_ecb_into(
        &mut self,
        ecb: &Ecb,
        cpu: u32,
        ctx: &dyn Context,
        out: &mut dyn Output,
        fx: &mut Effects,
        rec: &mut Record,
    ) -> io::Result<Result<(), (Fault, usize)>> {
        let prog = Rc::clone(&self.prog);
        let clause = &prog.clauses[ecb.clause];
        let p = &ecb.probe;
        // A clause reads `timestamp` once and keeps it (DTrace caches it in the
        // clause's state; walltimestamp and vtimestamp advance).
        let timestamp: std::cell::OnceCell<Option<Value>> = std::cell::OnceCell::new();
        let identity = |b: Builtin| {
            Some(match b {
                Builtin::Timestamp => return timestamp.get_or_init(|| ctx.builtin(b)).clone(),
                Builtin::Probeprov => Value::str(&p.provider),
                Builtin::Probemod => Value::str(&p.module),
                Builtin::Probefunc => Value::str(&p.function),
                Builtin::Probename => Value::str(&p.name),
                Builtin::Id => Value::int(i64::from(p.id)),
                Builtin::Epid => Value::int(i64::from(ecb.epid)),
                Builtin::Cpu => Value::int(i64::from(cpu)),
                _ => return None,
            })
        };
        let pctx = Overlay { inner: ctx, builtins: identity };
        // Each clause starts with empty scratch space.
        self.scratch.reset();
        self.vars.reset_temporaries();
        if let Some(pred) = &clause.predicate {
            match self.eval(pred, &pctx) {
                Ok(v) if !truthy(&v) => return Ok(Ok(())),
                Ok(_) => {}
                Err(f) => return Ok(Err((f, 0))),
            }
        }
        let records_data = self.records_data[ecb.clause];
        // The format opens the record (text: the probe line, unless quiet) and says
        // whether it needs the column header.
        let prefixed = records_data
            && match self.settings.flowindent {
                true => {
                    let last_on_probe = self.last_recording_on_probe(ecb);
                    let r = FlowRecord {
                        cpu,
                        probe_id: p.id,
                        epid: ecb.epid,
                        provider: &p.provider,
                        function: &p.function,
                        name: &p.name,
                        last_on_probe,
                    };
                    self.oformat.begin_flow(&mut rec.data, p, &r, &mut self.flow, &pctx, &self.settings)
                }
                false => self.oformat.begin(&mut rec.data, cpu, &ecb.probe, &pctx, &self.settings),
            };
        let mut counter = 0;
        let result = self.actions(&clause.actions, &pctx, rec, fx, &mut counter);
        if records_data {
            self.oformat.end(&mut rec.data, &self.settings);
        }
        match result {
            // DTrace discards a faulting clause's record; the error line replaces it.
            Err(f) => return Ok(Err(f)),
            Ok(Flow::Abort) => return Ok(Ok(())),
            Ok(Flow::Continue) => {}
        }
        // (Guarded: an extend from an empty list is still a call per record.)
        if !rec.lib_errors.is_empty() {
            fx.errors.extend(rec.lib_errors.iter().map(|e| lib_error_message(ecb, e)));
        }
        match rec.spec {
            Some(id) => self.speculate_record(id, rec, prefixed),
            None if records_data => {
                // chew() considers the header once, at the first record, quiet or not.
                if !self.header_printed && prefixed {
                    out.write_all(self.oformat.header(&self.settings).as_bytes())?;
                }
                self.header_printed = true;
                self.write_record(out, rec, ecb, fx)?;
            }
            None => self.write_record(out, rec, ecb, fx)?,
        }
        // Committed records are copied in after the committing clause's own record.
        // (Never an empty write: a copy of nothing from an unallocated buffer's
        // dangling address costs libc's AVX-512 memmove a fault-suppression assist.)
        if !rec.committed.is_empty() {
            out.write_all(&rec.committed)?;
        }
        Ok(Ok(()))
    }

    /// Whether no clause enabled on `ecb`'s probe after it records data (`-F`: the
    /// last record of a return probe's firing closes the level).
    fn last_recording_on_probe(&self, ecb: &Ecb) -> bool {
        let Some(ecbs) = self.by_probe.get(&ecb.probe.id) else { return true };
        let mut later = ecbs.iter().skip_while(|e| e.epid != ecb.epid).skip(1);
        !later.any(|e| self.records_data.get(e.clause).copied().unwrap_or(false))
    }

    /// Writes a record's data, taking its system() and freopen() actions where they
    /// are in it, as DTrace's consumer does.
    fn write_record(&self, out: &mut dyn Output, rec: &Record, ecb: &Ecb, fx: &mut Effects) -> io::Result<()> {
        let mut at = 0;
        for (end, d) in &rec.deferred {
            // (A format whose record is one object puts them after it: `end` is past
            // the data.)
            let end = (*end).min(rec.data.len());
            out.write_all(&rec.data[at..end])?;
            at = end;
            match d {
                Deferred::System(cmd) => {
                    out.flush()?;
                    out.system(cmd)?;
                }
                Deferred::Ftruncate => {
                    out.flush()?;
                    out.ftruncate()?;
                }
                Deferred::Freopen(path) => {
                    if let Err(why) = out.freopen(path) {
                        fx.errors.push(lib_error_message(ecb, &format!("couldn't freopen() \"{path}\": {why}")));
                    }
                }
            }
        }
        out.write_all(&rec.data[at..])
    }

    /// Adds a speculated clause's record to its speculation, unless that would take
    /// the speculation past specsize (a speculative drop, as DTrace's consumer counts).
    fn speculate_record(&mut self, id: usize, rec: &Record, prefixed: bool) {
        let Some(s) = self.specs.get_mut(id) else { return };
        if s.size + rec.size > self.settings.specsize {
            self.drops.spec += 1;
            return;
        }
        s.size += rec.size;
        s.records += 1;
        s.prefixed |= prefixed;
        s.buffer.extend_from_slice(&rec.data);
    }

    /// The output of a committed speculation, its records printed as if they had
    /// just been consumed (the column header first if none was printed yet).
    fn committed_output(&mut self, i: usize) -> Vec<u8> {
        let s = &mut self.specs[i];
        let mut out = Vec::new();
        if s.records > 0 && !self.header_printed {
            if s.prefixed {
                out.extend_from_slice(self.oformat.header(&self.settings).as_bytes());
            }
            self.header_printed = true;
        }
        out.append(&mut s.buffer);
        out
    }

    /// A value an action records: a string must be readable, so the NULL string
    /// (or NULL plus an offset) faults at its address, as DTrace's record copy does.
    fn eval_datum(&mut self, e: &Expr, ctx: &dyn Context) -> EvalResult<Value> {
        let (v, narrowed) = match e.kind {
            // A builtin (`arg0`, `pid`…) is read as the evaluator would, without one,
            // an integer already narrowed to its type.
            ExprKind::Builtin(b) if !matches!(b, Builtin::Curcpu) => {
                // (An integer as `builtin_value` narrows it, without a `Value` built
                // and copied at each context's layer.)
                if !e.ty.is_string() {
                    if let Some(bits) = ctx.builtin_int(b) {
                        return Ok(crate::eval::int_of(&e.ty, bits));
                    }
                }
                (crate::eval::builtin_value(ctx, b, &e.ty, &self.prog.types), true)
            }
            _ => (self.eval(e, ctx)?, false),
        };
        match crate::eval::string_address(&v) {
            Some(a) if e.ty.is_string() => Err(Fault::BadAddress(a)),
            _ if narrowed => Ok(v),
            _ => Ok(crate::eval::narrow(v)),
        }
    }

    fn eval(&mut self, e: &Expr, ctx: &dyn Context) -> EvalResult<Value> {
        self.eval_with(ctx, |ev| ev.eval(e))
    }

    /// Runs `f` with an evaluator over this consumer's state.
    fn eval_with<T>(&mut self, ctx: &dyn Context, f: impl FnOnce(&mut Evaluator) -> EvalResult<T>) -> EvalResult<T> {
        let prog = Rc::clone(&self.prog);
        let specs = &mut self.specs;
        let drops = &mut self.drops;
        // dt_speculation(): the first free buffer; none free is a failed speculation,
        // "busy" when one is still draining.
        let mut alloc = || -> i64 {
            if let Some(i) = specs.iter().position(|s| !s.active && !s.draining) {
                specs[i] = Speculation { active: true, ..Speculation::default() };
                return i as i64 + 1;
            }
            if specs.iter().any(|s| s.draining) {
                drops.spec_busy += 1;
            } else {
                drops.spec_unavail += 1;
            }
            0
        };
        let mut ev = Evaluator {
            types: &prog.types,
            globals: &prog.globals,
            thread_vars: &prog.thread_vars,
            clause_vars: &prog.clause_vars,
            vars: &mut self.vars,
            ctx,
            strsize: self.settings.strsize,
            rand: &mut self.rand,
            strtok: &mut self.strtok,
            speculation: &mut alloc,
            scratch: &mut self.scratch,
        };
        f(&mut ev)
    }

    /// What dtrace prints when tracing ends: a newline, then every aggregation not
    /// already printed with `printa`, in the order they were declared.
    pub fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.flush_notices(out)?;
        let list: Vec<&Aggregation> = self.aggs.iter().collect();
        self.oformat.finish(out, &self.formats, &list, &self.settings)
    }

    /// Where in a record's data system(), freopen() and ftruncate() take effect:
    /// here, or after the record in a format whose record is one object.
    fn deferred_at(&self, rec: &Record) -> usize {
        if self.oformat.inline_deferred() {
            rec.data.len()
        } else {
            usize::MAX
        }
    }
}

/// Whether these actions print aggregations (`printa()`) or empty them (`clear()`,
/// `trunc()`): what the firings left must be read back before.
pub fn printa_in(actions: &[Action]) -> bool {
    actions.iter().any(|a| match a {
        Action::Printa { .. } | Action::Clear(_) | Action::Trunc { .. } => true,
        Action::If { then, otherwise, .. } => printa_in(then) || printa_in(otherwise),
        _ => false,
    })
}

/// dtrace's message for an error of a library action (a failed setopt() or
/// freopen()) as its consumer meets the record: the clause and the probe, no place.
fn lib_error_message(ecb: &Ecb, what: &str) -> String {
    let p = &ecb.probe;
    format!(
        "error in dt_clause_{} for probe ID {} ({}:{}:{}:{}): {what}",
        ecb.stmt, p.id, p.provider, p.module, p.function, p.name
    )
}

/// Output of one clause firing, headed for stdout or a speculation buffer.
#[derive(Default)]
struct Record {
    data: Vec<u8>,
    spec: Option<usize>,
    /// Output of speculations committed by this clause, which follows its record.
    committed: Vec<u8>,
    /// Errors of the library actions (setopt()) reported as the record is consumed.
    lib_errors: Vec<String>,
    /// system() and freopen(), each with the length of the data before it.
    deferred: Vec<(usize, Deferred)>,
    /// The bytes this record takes in DTrace's buffers: the header, then each datum
    /// at its alignment (what specsize limits).
    size: usize,
}

/// The header of a DTrace output record, before its first datum.
const RECORD_HEADER: usize = 16;

impl Record {
    /// Empty again, its buffers kept.
    fn reset(&mut self) {
        self.data.clear();
        self.spec = None;
        self.committed.clear();
        self.lib_errors.clear();
        self.deferred.clear();
        self.size = RECORD_HEADER;
    }

    fn add(&mut self, size: usize, align: usize) {
        // (An alignment is 1 or an integer's size, a power of two: a mask, not a
        // division, per datum.)
        let at = match align.max(1) {
            a if a.is_power_of_two() => (self.size + a - 1) & !(a - 1),
            a => self.size.next_multiple_of(a),
        };
        self.size = at + size;
    }

    /// Accounts for one recorded value as DTrace stores it: integers at their size,
    /// strings as strsize + 1 bytes, other data at its length.
    fn add_datum(&mut self, v: &Value, strsize: usize) {
        match v {
            Value::Int(i) => self.add(usize::from(i.size), usize::from(i.size)),
            Value::Str(_) => self.add(strsize + 1, 1),
            Value::Bytes(b) => self.add(b.len(), 1),
            Value::Stack(f) => self.add(8 * (f.len() + 1), 8),
        }
    }
}

/// Whether a clause's only records are commit() and discard(): DTrace's consumer
/// prints nothing for it, not even the probe line.
fn commit_discard_only(actions: &[Action]) -> bool {
    fn visit(actions: &[Action], seen: &mut bool) -> bool {
        actions.iter().all(|a| match a {
            Action::Commit(_) | Action::Discard(_) => {
                *seen = true;
                true
            }
            Action::Eval(_) | Action::AggUpdate { .. } | Action::Nop => true,
            Action::If { then, otherwise, .. } => visit(then, seen) && visit(otherwise, seen),
            _ => false,
        })
    }
    let mut seen = false;
    visit(actions, &mut seen) && seen
}

/// The process a firing happened in (for udtrace's own probes, udtrace).
fn firing_pid(ctx: &dyn Context) -> i32 {
    match ctx.builtin(Builtin::Pid) {
        Some(Value::Int(i)) => i.bits as i32,
        _ => std::process::id() as i32,
    }
}

/// SIGSTOP on Linux.
const fn libc_sigstop() -> i32 {
    19
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Int(i) => i.bits != 0,
        Value::Str(s) | Value::Bytes(s) => !s.is_empty(),
        Value::Stack(s) => !s.is_empty(),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => i.bits as i64,
        _ => 0,
    }
}

/// The runtime's aggregating function for a checked aggregation.
pub fn agg_func(kind: AggKind, p: &[i64]) -> AggFunc {
    match kind {
        AggKind::Count => AggFunc::Count,
        AggKind::Sum => AggFunc::Sum,
        AggKind::Avg => AggFunc::Avg,
        AggKind::Min => AggFunc::Min,
        AggKind::Max => AggFunc::Max,
        AggKind::Stddev => AggFunc::Stddev,
        AggKind::Quantize => AggFunc::Quantize,
        AggKind::Lquantize => AggFunc::Lquantize { base: p[0], limit: p[1], step: p[2] },
        AggKind::Llquantize => {
            AggFunc::Llquantize { factor: p[0] as u16, low: p[1] as u16, high: p[2] as u16, nsteps: p[3] as u16 }
        }
    }
}

/// Where in its clause a fault happened, for ERROR's `arg3` and the message: DTrace
/// gives the BPF instruction offset; udtrace interprets clauses, so it counts the
/// clause's parts in order: the predicate is 1, the first action 2, and so on.
fn fault_pc(action: usize) -> i64 {
    action as i64 + 1
}

/// dtrace's message for a fault: `error in dt_clause_N for probe ID P (desc): fault
/// at BPF pc N`, clauses numbered from 0 in program order.
fn fault_message(ecb: &Ecb, fault: Fault, action: usize) -> String {
    let p = &ecb.probe;
    format!(
        "error in dt_clause_{} for probe ID {} ({}:{}:{}:{}): {} at BPF pc {}",
        ecb.stmt,
        p.id,
        p.provider,
        p.module,
        p.function,
        p.name,
        fault.describe(),
        fault_pc(action)
    )
}
