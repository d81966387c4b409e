//! The consumer: runs the clauses enabled on a probe when it fires, in program order,
//! keeps variables, aggregations and speculations, and produces DTrace's output.
//!
//! It does no I/O of its own: output goes to the `Write` handed to each call, messages
//! for stderr are returned, and the clock and process facts come from the `Context`.

use std::collections::HashMap;
use std::io::{self, Write};
use std::rc::Rc;

use udtrace_lang::ir::{Action, AggKind, Builtin, CheckedProgram, Expr};

use crate::agg::{AggFunc, Aggregation};
use crate::context::{Context, Overlay};
use crate::eval::{EvalResult, Evaluator, Fault, Variables};
use crate::output;
use crate::value::Value;

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
    pub probe: Rc<Probe>,
}

/// Settings that change what the consumer prints (from `-q`, `-x` and pragmas).
#[derive(Debug, Clone)]
pub struct Settings {
    pub quiet: bool,
    pub strsize: usize,
    pub nspec: usize,
    pub destructive: bool,
    pub sort: output::SortOptions,
    /// Seconds east of UTC for `%Y` and `walltimestamp` printing.
    pub tz_offset: i64,
    /// dtrace's testing mode (`_DTRACE_TESTING` in the environment): records and the
    /// header lose their CPU and ID columns, which vary from run to run.
    pub testing: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            quiet: false,
            strsize: 256,
            nspec: 1,
            destructive: false,
            sort: output::SortOptions::default(),
            tz_offset: 0,
            testing: false,
        }
    }
}

/// What the session must do after a firing.
#[derive(Debug, Default)]
pub struct Effects {
    /// `exit(n)` ran: stop tracing, fire END, print, exit with n.
    pub exit: Option<i32>,
    /// Lines for stderr (`error on enabled probe …`), each without the program name.
    pub errors: Vec<String>,
    /// Commands from `system()`, in order, for the session to run.
    pub system: Vec<String>,
    /// `setopt()` requests.
    pub setopts: Vec<(String, Option<String>)>,
    /// `raise(sig)` for the current process, `stop()`.
    pub raise: Vec<i64>,
    pub stop: bool,
}

struct Speculation {
    active: bool,
    /// Output of the speculating clauses, kept until commit or discard.
    buffer: Vec<u8>,
}

pub struct Consumer {
    prog: Rc<CheckedProgram>,
    settings: Settings,
    vars: Variables,
    aggs: Vec<Aggregation>,
    specs: Vec<Speculation>,
    header_printed: bool,
    rand: u64,
    strtok: Option<(Vec<u8>, usize)>,
    by_probe: HashMap<u32, Vec<Ecb>>,
    error_ecbs: Vec<Ecb>,
    formats: output::FormatCache,
}

impl Consumer {
    /// `seed` feeds `rand()`; `ecbs` are all enabled probes (those on the `ERROR`
    /// probe, provider `dtrace` name `ERROR`, run when a clause faults).
    pub fn new(prog: Rc<CheckedProgram>, settings: Settings, ecbs: Vec<Ecb>, seed: u64) -> Consumer {
        let vars = Variables::new(&prog.globals, &prog.clause_vars, &prog.types);
        let aggs = prog.aggs.iter().map(|a| Aggregation::new(&a.name, agg_func(a.kind, &a.params))).collect::<Vec<_>>();
        let specs = (0..settings.nspec).map(|_| Speculation { active: false, buffer: Vec::new() }).collect();
        let mut by_probe: HashMap<u32, Vec<Ecb>> = HashMap::new();
        let mut error_ecbs = Vec::new();
        for e in ecbs {
            if e.probe.provider == "dtrace" && e.probe.name == "ERROR" {
                error_ecbs.push(e.clone());
            }
            by_probe.entry(e.probe.id).or_default().push(e);
        }
        let formats = output::FormatCache::new(&prog);
        Consumer {
            prog,
            settings,
            vars,
            aggs,
            specs,
            header_printed: false,
            rand: seed | 1,
            strtok: None,
            by_probe,
            error_ecbs,
            formats,
        }
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
    pub fn enable(&mut self, clause: usize, probe: Rc<Probe>) {
        let epid = self.by_probe.values().flatten().map(|e| e.epid).max().unwrap_or(0) + 1;
        let list = self.by_probe.entry(probe.id).or_default();
        if list.iter().any(|o| o.clause == clause) {
            return;
        }
        let at = list.iter().position(|o| o.clause > clause).unwrap_or(list.len());
        list.insert(at, Ecb { epid, clause, probe });
    }

    /// Whether any clause is enabled on this probe.
    pub fn is_enabled(&self, probe_id: u32) -> bool {
        self.by_probe.contains_key(&probe_id)
    }

    /// Runs every clause enabled on `probe_id`, in program order.
    pub fn fire(&mut self, probe_id: u32, cpu: u32, ctx: &dyn Context, out: &mut dyn Write) -> io::Result<Effects> {
        let mut fx = Effects::default();
        let Some(ecbs) = self.by_probe.get(&probe_id).cloned() else {
            return Ok(fx);
        };
        self.vars.reset_clause_locals();
        for ecb in &ecbs {
            if let Err((fault, action)) = self.run_ecb(ecb, cpu, ctx, out, &mut fx)? {
                self.report_fault(ecb, fault, action, cpu, ctx, out, &mut fx)?;
            }
        }
        Ok(fx)
    }

    #[allow(clippy::too_many_arguments)]
    fn report_fault(
        &mut self,
        ecb: &Ecb,
        fault: Fault,
        action: usize,
        cpu: u32,
        ctx: &dyn Context,
        out: &mut dyn Write,
        fx: &mut Effects,
    ) -> io::Result<()> {
        let p = &ecb.probe;
        let place = if action == 0 { "predicate".to_string() } else { format!("action #{action}") };
        fx.errors.push(format!(
            "error on enabled probe ID {} (ID {}: {}:{}:{}:{}): {} in {place}",
            ecb.epid,
            p.id,
            p.provider,
            p.module,
            p.function,
            p.name,
            fault.describe()
        ));
        // A fault inside an ERROR clause is not reported through ERROR again.
        if p.provider == "dtrace" && p.name == "ERROR" {
            return Ok(());
        }
        let args = [0, i64::from(ecb.epid), action as i64, -1, fault.code(), fault.address() as i64];
        let error_args = |b: Builtin| match b {
            Builtin::Arg(n) if (n as usize) < args.len() => Some(Value::int(args[n as usize])),
            _ => None,
        };
        let ectx = Overlay { inner: ctx, builtins: &error_args };
        for e in self.error_ecbs.clone() {
            if let Err((f, a)) = self.run_ecb(&e, cpu, &ectx, out, fx)? {
                let p = &e.probe;
                fx.errors.push(format!(
                    "error on enabled probe ID {} (ID {}: {}:{}:{}:{}): {} in action #{a}",
                    e.epid,
                    p.id,
                    p.provider,
                    p.module,
                    p.function,
                    p.name,
                    f.describe()
                ));
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
        out: &mut dyn Write,
        fx: &mut Effects,
    ) -> io::Result<Result<(), (Fault, usize)>> {
        let prog = Rc::clone(&self.prog);
        let clause = &prog.clauses[ecb.clause];
        let p = &ecb.probe;
        let identity = |b: Builtin| {
            Some(match b {
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
        let pctx = Overlay { inner: ctx, builtins: &identity };
        if let Some(pred) = &clause.predicate {
            match self.eval(pred, &pctx) {
                Ok(v) if !truthy(&v) => return Ok(Ok(())),
                Ok(_) => {}
                Err(f) => return Ok(Err((f, 0))),
            }
        }
        let mut rec = Record { data: Vec::new(), spec: None, dropped: false, committed: Vec::new() };
        // dtrace(1M) prints the header and the prefix before the record's data, with
        // the quiet setting of that moment.
        let prefixed = clause.records_data && !self.settings.quiet;
        if prefixed {
            output::probe_prefix(&mut rec.data, cpu, &ecb.probe, &self.settings);
        }
        let mut counter = 0;
        let result = self.actions(&clause.actions, &pctx, &mut rec, fx, &mut counter);
        if clause.records_data && !self.settings.quiet {
            rec.data.push(b'\n');
        }
        // DTrace discards a faulting clause's record; the error line replaces it.
        if let Err(f) = result {
            return Ok(Err(f));
        }
        // speculate() to a speculation that is not active drops the record.
        if rec.dropped {
            return Ok(Ok(()));
        }
        match rec.spec {
            Some(id) => {
                if let Some(s) = self.specs.get_mut(id) {
                    s.buffer.extend_from_slice(&rec.data);
                }
            }
            None if clause.records_data => {
                // chew() considers the header once, at the first record, quiet or not.
                if !self.header_printed && prefixed {
                    out.write_all(output::header(self.settings.testing).as_bytes())?;
                }
                self.header_printed = true;
                out.write_all(&rec.data)?;
            }
            None => out.write_all(&rec.data)?,
        }
        // Committed records are copied in after the committing clause's own record.
        out.write_all(&rec.committed)?;
        Ok(Ok(()))
    }

    fn eval(&mut self, e: &Expr, ctx: &dyn Context) -> EvalResult<Value> {
        let prog = Rc::clone(&self.prog);
        let nspec = self.specs.len();
        let specs = &mut self.specs;
        let mut alloc = || -> i64 {
            match specs.iter().position(|s| !s.active) {
                Some(i) if i < nspec => {
                    specs[i].active = true;
                    specs[i].buffer.clear();
                    i as i64 + 1
                }
                _ => 0,
            }
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
        };
        ev.eval(e)
    }

    fn actions(
        &mut self,
        actions: &[Action],
        ctx: &dyn Context,
        rec: &mut Record,
        fx: &mut Effects,
        counter: &mut usize,
    ) -> Result<(), (Fault, usize)> {
        for a in actions {
            *counter += 1;
            let n = *counter;
            self.action(a, ctx, rec, fx, counter).map_err(|f| (f, n))?;
        }
        Ok(())
    }

    fn action(
        &mut self,
        a: &Action,
        ctx: &dyn Context,
        rec: &mut Record,
        fx: &mut Effects,
        counter: &mut usize,
    ) -> EvalResult<()> {
        match a {
            Action::Eval(e) => {
                self.eval(e, ctx)?;
            }
            Action::Trace(e) => {
                let v = self.eval(e, ctx)?;
                output::trace_value(&mut rec.data, &v, &self.settings);
            }
            Action::Tracemem { addr, size, dsize } => {
                let v = self.eval(addr, ctx)?;
                let mut data = match v {
                    Value::Int(i) => ctx.read_memory(i.bits, *size as usize).ok_or(Fault::BadAddress(i.bits))?,
                    Value::Str(mut s) | Value::Bytes(mut s) => {
                        s.resize(*size as usize, 0);
                        s
                    }
                    Value::Stack(_) => Vec::new(),
                };
                if let Some(d) = dsize {
                    if let Value::Int(i) = self.eval(d, ctx)? {
                        data.truncate(i.bits.min(*size) as usize);
                    }
                }
                output::tracemem(&mut rec.data, &data);
            }
            Action::Printf { format, args, .. } => {
                let vals = args.iter().map(|e| self.eval(e, ctx)).collect::<EvalResult<Vec<_>>>()?;
                let sym = |addr: u64, _user: bool| ctx.symbol(addr, udtrace_lang::types::SymKind::Addr);
                let text = self.formats.printf(format, &vals, &self.settings, &sym);
                rec.data.extend_from_slice(&text);
            }
            Action::System { format, args, .. } => {
                let vals = args.iter().map(|e| self.eval(e, ctx)).collect::<EvalResult<Vec<_>>>()?;
                let sym = |addr: u64, _user: bool| ctx.symbol(addr, udtrace_lang::types::SymKind::Addr);
                let text = self.formats.printf(format, &vals, &self.settings, &sym);
                fx.system.push(String::from_utf8_lossy(&text).into_owned());
            }
            Action::Printa { format, aggs } => {
                for &id in aggs {
                    self.aggs[id].printed = true;
                }
                let list: Vec<&Aggregation> = aggs.iter().map(|&i| &self.aggs[i]).collect();
                let fmt = format.as_ref().map(|(f, _)| f.as_ref());
                let text = self.formats.printa(fmt, &list, &self.settings);
                rec.data.extend_from_slice(&text);
            }
            Action::AggUpdate { agg, keys, args } => {
                let keys = keys.iter().map(|k| self.eval(k, ctx)).collect::<EvalResult<Vec<_>>>()?;
                let vals = args.iter().map(|e| self.eval(e, ctx).map(|v| int(&v))).collect::<EvalResult<Vec<_>>>()?;
                let kind = self.prog.aggs[*agg].kind;
                let (value, incr) = match kind {
                    AggKind::Count => (0, 1),
                    AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => {
                        (vals[0], vals.get(1).copied().unwrap_or(1))
                    }
                    _ => (vals[0], 1),
                };
                self.aggs[*agg].update(&keys, value, incr);
            }
            Action::Exit(e) => {
                let v = self.eval(e, ctx)?;
                fx.exit.get_or_insert(int(&v) as i32);
            }
            Action::Clear(id) => self.aggs[*id].clear(),
            Action::Trunc { agg, keep } => {
                let n = match keep {
                    Some(k) => int(&self.eval(k, ctx)?),
                    None => 0,
                };
                self.aggs[*agg].trunc(n);
            }
            Action::Normalize { agg, factor } => {
                let f = int(&self.eval(factor, ctx)?);
                if f <= 0 || self.aggs[*agg].normalize(f as u64).is_err() {
                    return Err(Fault::IllegalOperation);
                }
            }
            Action::Denormalize(id) => self.aggs[*id].denormalize(),
            Action::Setopt { name, value } => {
                // dtrace(1M) applies setopt() as it consumes the record, so the rest of
                // the record (its trailing newline) and later records see the change.
                self.setopt(name, value.as_deref());
                fx.setopts.push((name.clone(), value.clone()));
            }
            Action::Speculate(e) => {
                // dtrace_speculation_buffer: an id past nspec is an illegal operation;
                // 0 or an inactive speculation has no buffer, so the data is dropped.
                let v = int(&self.eval(e, ctx)?);
                match self.spec_index(v)? {
                    Some(i) if self.specs[i].active => rec.spec = Some(i),
                    _ => rec.dropped = true,
                }
            }
            Action::Commit(e) | Action::Discard(e) => {
                let v = int(&self.eval(e, ctx)?);
                if let Some(i) = self.spec_index(v)? {
                    let s = &mut self.specs[i];
                    if matches!(a, Action::Commit(_)) {
                        rec.committed.extend_from_slice(&s.buffer);
                    }
                    s.buffer.clear();
                    s.active = false;
                }
            }
            Action::Stack { user, frames } => {
                let frames = ctx.stack(*user, *frames);
                output::trace_value(&mut rec.data, &Value::Stack(frames), &self.settings);
            }
            Action::If { cond, then, otherwise } => {
                let c = self.eval(cond, ctx)?;
                let branch = if truthy(&c) { then } else { otherwise };
                self.actions(branch, ctx, rec, fx, counter).map_err(|(f, _)| f)?;
            }
            Action::Raise(e) => {
                let sig = int(&self.eval(e, ctx)?);
                fx.raise.push(sig);
            }
            Action::Stop => fx.stop = true,
            Action::Nop => {}
        }
        Ok(())
    }

    /// The buffer index of speculation `id`: `None` for 0 (no speculation), an
    /// illegal operation past nspec (ids are unsigned, so negatives are too).
    fn spec_index(&self, id: i64) -> EvalResult<Option<usize>> {
        match id {
            0 => Ok(None),
            i if i > 0 && (i as usize) <= self.specs.len() => Ok(Some(i as usize - 1)),
            _ => Err(Fault::IllegalOperation),
        }
    }

    /// Applies a `setopt()` to the options that change printing, with libdtrace's
    /// value rules (a bare or numeric value sets a toggle; "no", "off", "" unset it).
    /// Options that do not parse or are not printing options are left alone.
    fn setopt(&mut self, name: &str, value: Option<&str>) {
        use udtrace_lang::options::{parse_option, OptionName as N, OptionValue as V};
        let Ok((opt, v)) = parse_option(name, value) else {
            return;
        };
        let on = v != V::Unset;
        let int = match v {
            V::Int(n) => n as usize,
            _ => 0,
        };
        let s = &mut self.settings;
        match opt {
            N::Quiet => s.quiet = on,
            N::Aggsortkey => s.sort.key = on,
            N::Aggsortrev => s.sort.rev = on,
            N::Aggsortpos => s.sort.pos = int,
            N::Aggsortkeypos => s.sort.keypos = int,
            _ => {}
        }
    }

    /// What dtrace prints when tracing ends: a newline, then every aggregation not
    /// already printed with `printa`, in the order they were declared.
    pub fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(b"\n")?;
        let list: Vec<&Aggregation> = self.aggs.iter().collect();
        let text = self.formats.print_all(&list, &self.settings);
        out.write_all(&text)
    }
}

/// Output of one clause firing, headed for stdout or a speculation buffer.
struct Record {
    data: Vec<u8>,
    spec: Option<usize>,
    /// speculate() named no active speculation: the record goes nowhere.
    dropped: bool,
    /// Output of speculations committed by this clause, which follows its record.
    committed: Vec<u8>,
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
