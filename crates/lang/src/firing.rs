//! What runs at the firing (docs/firing.md, "What runs where"): which clauses,
//! thread-local variables and aggregations move from the consumer to where the probe
//! fires, and the firing-time programs (`udtrace_dif`) of those clauses, per probe.
//!
//! Every program computes exactly what the consumer's evaluation would (its integer
//! semantics: 64-bit arithmetic, narrowing only where the consumer narrows), and can
//! never fault: what could (a division by a variable, a memory read) stays in the
//! consumer, and with it every clause, variable and aggregation it touches.

use std::collections::HashMap;

use udtrace_dif::layout::{AggDesc, AggFn, Layout};
use udtrace_dif::op::{self, BinOp, Op, Program, Reg, UnOp, Var, NREGS};

use crate::ast::{BinaryOp, ProbeDesc, VarScope};
use crate::ir::{Action, AggKind, Builtin, CheckedProgram, Clause, Expr, ExprKind, Place, Subr, VarRef};
use crate::types::{IntType, Type};

/// What a per-probe program is compiled for: the probe's identity (constants at the
/// firing), and for a USDT probe where its arguments are.
#[derive(Debug, Clone, Copy)]
pub struct ProbeFacts<'a> {
    pub id: u32,
    pub provider: &'a str,
    pub module: &'a str,
    pub function: &'a str,
    pub name: &'a str,
    /// A USDT probe's sites (docs/usdt.md): `argN` is read from each site's
    /// descriptor, not from the ABI's registers. `None`: a pid probe.
    pub usdt: Option<&'a [UsdtSiteArgs]>,
}

/// A USDT site's arguments as the lowering reads them: where each is at the site
/// (`udtrace_object::usdt::UsdtArg`, resolved against the site).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtSiteArgs {
    /// The site's address in its file: sites of one probe with different arguments are
    /// told apart by it within a page (a load bias is a multiple of the page).
    pub vaddr: u64,
    /// Empty where the descriptor cannot be read (every argument 0, as the consumer).
    pub args: Vec<UsdtLoc>,
}

/// One USDT argument: where it is, cut to `size` bytes and extended by `signed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsdtLoc {
    pub size: u8,
    pub signed: bool,
    pub at: UsdtAt,
}

/// Part of a register ([`udtrace_dif::op::USER_REGS`] numbering): `width` bytes (1, 2,
/// 4, 8) from bit 0, or from bit 8 when `high` (`%ah`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct URegPart {
    pub reg: u8,
    pub width: u8,
    pub high: bool,
}

/// Where a USDT argument's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsdtAt {
    Const(u64),
    Reg(URegPart),
    /// `size` bytes at `base + index * scale + disp` (a `sym(%rip)` operand: base rip,
    /// the symbol's distance from the site in `disp`); unreadable, 0.
    Mem {
        base: Option<URegPart>,
        index: Option<URegPart>,
        scale: u8,
        disp: u64,
    },
}

/// Whether a probe's clauses are placed at the firing where the script is compiled:
/// its sites are told apart ([`usdt_dispatch`]) and no argument is in memory off the
/// stack (a global, `sym(%rip)`; a pointer's target), which may be in a page the
/// process has not touched yet, which a BPF read cannot fault in (0) where the
/// consumer's read does; the frame at the stack or frame pointer was just written.
pub fn usdt_at_firing(sites: &[UsdtSiteArgs]) -> bool {
    let off_stack = |a: &UsdtLoc| match a.at {
        UsdtAt::Mem { base: Some(b), index: None, .. } => !matches!(b.reg, 6 | 7),
        UsdtAt::Mem { .. } => true,
        UsdtAt::Const(_) | UsdtAt::Reg(_) => false,
    };
    usdt_dispatch(sites).is_some() && !sites.iter().any(|s| s.args.iter().any(off_stack))
}

/// How a probe's sites' arguments are told apart at the firing: by the site's offset
/// in its page (`rip & 0xfff`), each offset with one set of arguments. `None`: they
/// cannot be (two sites with other arguments at one offset): no program reads them.
pub fn usdt_dispatch(sites: &[UsdtSiteArgs]) -> Option<Vec<(u64, &[UsdtLoc])>> {
    let mut out: Vec<(u64, &[UsdtLoc])> = Vec::new();
    for s in sites {
        let off = s.vaddr & 0xfff;
        match out.iter().find(|(o, _)| *o == off) {
            Some((_, a)) if *a != s.args.as_slice() => return None,
            Some(_) => {}
            None => out.push((off, &s.args)),
        }
    }
    Some(out)
}

impl ProbeFacts<'_> {
    fn component(&self, c: u64) -> &str {
        match c {
            0 => self.provider,
            1 => self.module,
            2 => self.function,
            _ => self.name,
        }
    }
}

/// How a key word of a firing-resident aggregation reads back as the consumer's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyWord {
    /// An integer of this size and signedness (the word holds it narrowed).
    Int { size: u8, signed: bool },
    /// A probe's identity: the word is `probe id << 2 | component` (0 provider, 1
    /// module, 2 function, 3 name); [`decode_probe_key`] splits it.
    Probe,
    /// `execname`: this word and the next ([`KeyWord::CommRest`]) hold the process's
    /// name (`udtrace_dif::op::comm_words`); one key of the consumer.
    Comm,
    /// The second word of a [`KeyWord::Comm`] key.
    CommRest,
    /// `copyinstr(argN)`: the id of a string in the string table
    /// (`udtrace_dif::op::Op::Str`), read back from the snapshot's strings.
    Str,
}

/// The most `strsize` with which strings are read at the firing (a BPF program keeps
/// the string on its 512-byte stack: `udtrace_bpf::dif::MAX_STRSIZE`); past it they
/// stay in the consumer.
pub const MAX_FIRING_STRSIZE: u64 = 256;

/// Splits a [`KeyWord::Probe`] word: (probe id, component: 0 provider .. 3 name).
pub fn decode_probe_key(word: u64) -> (u32, u8) {
    ((word >> 2) as u32, (word & 3) as u8)
}

/// One aggregation that lives at the firing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringAgg {
    /// Its id in the checked program.
    pub agg: usize,
    pub keys: Vec<KeyWord>,
}

/// Where each clause, thread-local variable and aggregation lives.
#[derive(Debug, Clone, Default)]
pub struct FiringPlan {
    /// What the programs share (the same in every process and executor).
    pub layout: Layout,
    /// Per clause: it runs at the firing (its probes' records skip it).
    pub at_firing: Vec<bool>,
    /// Per layout aggregation, in layout order.
    pub aggs: Vec<FiringAgg>,
    /// Per program aggregation: its layout index, when it lives at the firing.
    agg_index: Vec<Option<u16>>,
    /// Per thread-local variable: its slot, when it lives at the firing.
    tls_slot: Vec<Option<u16>>,
    /// Per clause-local variable: it lives at the firing (a register of its one
    /// clause's program).
    local: Vec<bool>,
    /// Consumer clauses' predicates may gate their records ([`FiringPlan::gate`]).
    gating: bool,
    /// Per program aggregation: its key words ([`key_words`]).
    key_words: Vec<Vec<KeyWord>>,
    /// Per clause at the firing: the strings it reads (argument, most bytes read), all
    /// before its first side effect. A read that faults `Emit`s and ends the clause's
    /// program; the consumer runs such a clause on the record only when one of these
    /// reads faults there too, and so reports the fault as `-x nodif` does.
    pub string_reads: Vec<Vec<(u8, u16)>>,
    /// DTrace's `strsize`, when strings can be read at the firing (else 0).
    strsize: u16,
}

/// Why a clause cannot run at the firing (never shown: it runs in the consumer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotHere(pub &'static str);

type R<T> = Result<T, NotHere>;

fn no<T>(why: &'static str) -> R<T> {
    Err(NotHere(why))
}

/// A variable or aggregation a clause touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Item {
    Thread(usize),
    Local(usize),
    Agg(usize),
}

impl FiringPlan {
    /// Everything in the consumer (`-x nodif`, or nothing could move).
    pub fn none(prog: &CheckedProgram) -> FiringPlan {
        FiringPlan {
            at_firing: vec![false; prog.clauses.len()],
            agg_index: vec![None; prog.aggs.len()],
            tls_slot: vec![None; prog.thread_vars.len()],
            local: vec![false; prog.clause_vars.len()],
            key_words: key_words(prog),
            ..FiringPlan::default()
        }
    }

    /// Decides where everything lives. `is_pid` says whether a probe description
    /// names pid probes (the only ones that run programs).
    pub fn new(prog: &CheckedProgram, is_pid: &dyn Fn(&ProbeDesc) -> bool) -> FiringPlan {
        FiringPlan::with_strsize(prog, is_pid, 256)
    }

    /// [`FiringPlan::new`] with DTrace's `strsize` (strings read at the firing are
    /// truncated as the consumer truncates them).
    pub fn with_strsize(prog: &CheckedProgram, is_pid: &dyn Fn(&ProbeDesc) -> bool, strsize: u64) -> FiringPlan {
        FiringPlan::with_usdt(prog, is_pid, &|_| false, strsize)
    }

    /// [`FiringPlan::with_strsize`] where `is_usdt` says which descriptions name USDT
    /// probes whose arguments the programs can read (`ProbeFacts::usdt`, whatever the
    /// probes' names).
    pub fn with_usdt(
        prog: &CheckedProgram,
        is_pid: &dyn Fn(&ProbeDesc) -> bool,
        is_usdt: &dyn Fn(&ProbeDesc) -> bool,
        strsize: u64,
    ) -> FiringPlan {
        let strsize = if (1..=MAX_FIRING_STRSIZE).contains(&strsize) { strsize as u16 } else { 0 };
        let n = prog.clauses.len();
        // Items that could live at the firing at all: integer scalars; aggregations
        // of a supported function (min and max: that nothing clears or truncates).
        let mut item_ok: HashMap<Item, bool> = HashMap::new();
        for (i, v) in prog.thread_vars.iter().enumerate() {
            item_ok.insert(Item::Thread(i), v.keys.is_none() && int_shape(&v.ty).is_some());
        }
        for (i, v) in prog.clause_vars.iter().enumerate() {
            item_ok.insert(Item::Local(i), v.keys.is_none() && int_shape(&v.ty).is_some());
        }
        let words = key_words(prog);
        for (i, a) in prog.aggs.iter().enumerate() {
            let ok = words[i].len() + 2 <= NREGS && agg_fn(a.kind, &a.params).is_some();
            item_ok.insert(Item::Agg(i), ok);
        }
        let mut touched: Vec<Vec<Item>> = Vec::with_capacity(n);
        let mut capable = vec![false; n];
        let all = FiringPlan { strsize, ..FiringPlan::all_items(prog, strsize) };
        for (ci, clause) in prog.clauses.iter().enumerate() {
            let t = touched_items(clause);
            for item in pinned_items(clause) {
                // clear()/trunc() run in the consumer on what it read back, less what
                // they took (`udtrace_runtime::firing::Baseline`): rows that subtract.
                if let Item::Agg(a) = item {
                    if matches!(prog.aggs[a].kind, AggKind::Min | AggKind::Max) {
                        item_ok.insert(item, false);
                    }
                }
            }
            capable[ci] = clause_capable(clause, is_pid, is_usdt) && all.compile(prog, ci, &DUMMY).is_ok();
            touched.push(t);
        }
        // A clause-local variable lives in one clause's registers: used by two
        // clauses, it is shared through the consumer's per-firing storage.
        let mut users: HashMap<Item, usize> = HashMap::new();
        for t in &touched {
            for &item in t {
                *users.entry(item).or_default() += 1;
            }
        }
        for (item, &k) in &users {
            if matches!(item, Item::Local(_)) && k > 1 {
                item_ok.insert(*item, false);
            }
        }
        // The fixpoint: a clause runs at the firing when it can and all it touches
        // lives there; an item lives there when every clause touching it runs there.
        let mut at_firing = capable.clone();
        loop {
            let mut changed = false;
            for ci in 0..n {
                if at_firing[ci] && touched[ci].iter().any(|it| !item_ok.get(it).copied().unwrap_or(false)) {
                    at_firing[ci] = false;
                    changed = true;
                }
            }
            for ci in 0..n {
                if at_firing[ci] {
                    continue;
                }
                for it in &touched[ci] {
                    if item_ok.get(it).copied().unwrap_or(false) {
                        item_ok.insert(*it, false);
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        // Items nothing at the firing touches stay in the consumer.
        let mut used: std::collections::HashSet<Item> = std::collections::HashSet::new();
        for ci in (0..n).filter(|&ci| at_firing[ci]) {
            used.extend(touched[ci].iter().copied());
        }
        let lives = |it: Item| used.contains(&it) && item_ok.get(&it).copied().unwrap_or(false);
        let mut plan = FiringPlan::none(prog);
        plan.at_firing = at_firing;
        plan.gating = true;
        plan.strsize = strsize;
        for i in 0..prog.thread_vars.len() {
            if lives(Item::Thread(i)) {
                plan.tls_slot[i] = Some(plan.layout.tls);
                plan.layout.tls += 1;
            }
        }
        for i in 0..prog.clause_vars.len() {
            plan.local[i] = lives(Item::Local(i));
        }
        for (i, a) in prog.aggs.iter().enumerate() {
            if !lives(Item::Agg(i)) {
                continue;
            }
            let Some(func) = agg_fn(a.kind, &a.params) else { continue };
            plan.agg_index[i] = Some(plan.layout.aggs.len() as u16);
            let keys = plan.key_words[i].clone();
            if keys.contains(&KeyWord::Str) {
                plan.layout.strsize = strsize;
            }
            plan.layout.aggs.push(AggDesc { func, nkeys: keys.len() as u8 });
            plan.aggs.push(FiringAgg { agg: i, keys });
        }
        plan.string_reads = prog
            .clauses
            .iter()
            .enumerate()
            .map(|(ci, cl)| if plan.at_firing[ci] { string_reads(cl, &plan.key_words, strsize) } else { Vec::new() })
            .collect();
        plan
    }

    /// A plan that puts every item at the firing: what a clause's capability is
    /// tried against (its register use does not depend on where items live).
    fn all_items(prog: &CheckedProgram, strsize: u16) -> FiringPlan {
        let mut p = FiringPlan::none(prog);
        p.layout.strsize = strsize;
        p.at_firing = vec![true; prog.clauses.len()];
        p.tls_slot = (0..prog.thread_vars.len() as u16).map(Some).collect();
        p.layout.tls = prog.thread_vars.len() as u16;
        p.local = vec![true; prog.clause_vars.len()];
        for (i, a) in prog.aggs.iter().enumerate() {
            p.agg_index[i] = Some(p.layout.aggs.len() as u16);
            let func = agg_fn(a.kind, &a.params).unwrap_or(AggFn::Count);
            p.layout.aggs.push(AggDesc { func, nkeys: p.key_words[i].len().min(NREGS) as u8 });
        }
        p
    }

    /// Whether anything runs at the firing.
    pub fn is_empty(&self) -> bool {
        !self.at_firing.iter().any(|&b| b)
    }

    /// The program of clause `clause` on `probe`, verified against the layout; `None`
    /// when the clause runs in the consumer.
    pub fn program(&self, prog: &CheckedProgram, clause: usize, probe: &ProbeFacts) -> Option<Program> {
        if !self.at_firing.get(clause).copied().unwrap_or(false) {
            return None;
        }
        let p = self.compile(prog, clause, probe);
        debug_assert!(p.is_ok(), "a clause that could run at the firing no longer compiles: {p:?}");
        p.ok()
    }

    /// For a clause the consumer runs on `probe`: a program that asks for the record
    /// ([`Op::Emit`]) only when the clause's predicate holds, where the firing can
    /// decide it alike (docs/firing.md, "gated"); `None`: the firing always records.
    pub fn gate(
        &self,
        prog: &CheckedProgram,
        clause: usize,
        probe: &ProbeFacts,
        is_pid: &dyn Fn(&ProbeDesc) -> bool,
    ) -> Option<Program> {
        let cl = &prog.clauses[clause];
        let pred = cl.predicate.as_ref().filter(|_| self.gating)?;
        if self.at_firing.get(clause).copied().unwrap_or(false) || !cl.probes.iter().all(is_pid) {
            return None;
        }
        if reads_args(pred) && probe.usdt.is_none() && !args_at(probe.name, reads_arg0(pred)) {
            return None;
        }
        let mut g = Gen::new(self, prog, probe, true);
        let c = g.cond(pred).ok()?;
        let skip = g.jz(c);
        g.ops.push(Op::Emit);
        let end = g.ops.len();
        g.patch(skip, end);
        let p = Program { ops: g.ops };
        op::verify(&p, &self.layout).ok()?;
        Some(p)
    }

    fn compile(&self, prog: &CheckedProgram, clause: usize, probe: &ProbeFacts) -> R<Program> {
        let cl = &prog.clauses[clause];
        let mut g = Gen::new(self, prog, probe, false);
        // Clause-local variables start at 0 in each firing.
        for it in touched_items(cl) {
            if let Item::Local(id) = it {
                if !self.local.get(id).copied().unwrap_or(false) {
                    return no("a clause-local variable in the consumer");
                }
                let r = g.alloc()?;
                g.ops.push(Op::Const { d: r, v: 0 });
                g.locals.insert(id, r);
            }
        }
        let mut skip = Vec::new();
        if let Some(pred) = &cl.predicate {
            // A clause that reads strings runs in the consumer when a read faults: its
            // predicate must decide there as here, from what the record carries (as a
            // gate's).
            g.gate = reads_strings(cl, &self.key_words);
            let c = g.cond(pred)?;
            g.gate = false;
            skip.push(g.jz(c));
            g.top = c;
        }
        g.actions(&cl.actions)?;
        let end = g.ops.len();
        for at in skip {
            g.patch(at, end);
        }
        // A string read that faults ends the clause (the consumer runs it on the record).
        for at in std::mem::take(&mut g.faults) {
            if let Op::Str { d, a, max, .. } = g.ops[at] {
                g.ops[at] = Op::Str { d, a, max, fault: end as u16 };
            }
        }
        let p = Program { ops: g.ops };
        op::verify(&p, &self.layout).map_err(|_| NotHere("the program fails its checks"))?;
        Ok(p)
    }
}

const DUMMY: ProbeFacts<'static> = ProbeFacts { id: 0, provider: "", module: "", function: "", name: "", usdt: None };

/// The integer shape of a type a firing can hold: integers, enums, pointers.
fn int_shape(t: &Type) -> Option<IntType> {
    match t {
        Type::Int(_) | Type::Enum(_) | Type::Pointer(_) => t.int_shape(),
        _ => None,
    }
}

fn agg_fn(kind: AggKind, p: &[i64]) -> Option<AggFn> {
    Some(match kind {
        AggKind::Count => AggFn::Count,
        AggKind::Sum => AggFn::Sum,
        AggKind::Avg => AggFn::Avg,
        AggKind::Min => AggFn::Min,
        AggKind::Max => AggFn::Max,
        AggKind::Stddev => AggFn::Stddev,
        AggKind::Quantize => AggFn::Quantize,
        AggKind::Lquantize => {
            let (base, limit, step) = (*p.first()?, *p.get(1)?, *p.get(2)?);
            let levels = (limit - base) / step.max(1);
            AggFn::Lquantize {
                base: i32::try_from(base).ok()?,
                step: u16::try_from(step).ok()?,
                levels: u16::try_from(levels).ok().filter(|&l| l >= 1)?,
            }
        }
        AggKind::Llquantize => AggFn::Llquantize { bins: u16::try_from(llquantize_shape(p)?.nbins()).ok()? },
    })
}

/// llquantize's parameters, where a firing's row can hold its bins (a quantize row is
/// 127 words; llquantize(x, 10, 0, 6, 20) has 255 bins).
fn llquantize_shape(p: &[i64]) -> Option<udtrace_dif::llquantize::Shape> {
    let u16 = |i: usize| p.get(i).and_then(|&v| u16::try_from(v).ok());
    let s = udtrace_dif::llquantize::Shape { factor: u16(0)?, low: u16(1)?, high: u16(2)?, steps: u16(3)? };
    let fits = u64::from(s.factor).checked_pow(u32::from(s.high) + 1).is_some();
    (s.factor >= 2 && s.low <= s.high && s.steps >= 1 && fits && s.nbins() <= 1024).then_some(s)
}

/// Whether a clause's probes and actions allow it at the firing at all.
fn clause_capable(cl: &Clause, is_pid: &dyn Fn(&ProbeDesc) -> bool, is_usdt: &dyn Fn(&ProbeDesc) -> bool) -> bool {
    if cl.records_data || cl.destructive || cl.probes.is_empty() || !cl.probes.iter().all(|d| is_pid(d) || is_usdt(d)) {
        return false;
    }
    let mut args = cl.predicate.as_ref().is_some_and(reads_args);
    let mut arg0 = cl.predicate.as_ref().is_some_and(reads_arg0);
    crate::ir::visit_actions(&cl.actions, &mut |e| {
        args |= is_arg(e);
        arg0 |= is_arg0(e);
    });
    !args || cl.probes.iter().all(|d| is_usdt(d) || args_at(&d.name, arg0))
}

/// Whether a program on probes named `name` reads arguments as the consumer does:
/// the argument registers at entry and offset sites; at a return, `arg1` is the return
/// value (rax, `Var::Ret`) and `arg2`.. are 0, but `arg0` is the site's offset, which
/// a program shared by a function's return sites does not know (`arg0`: whether it is
/// read, or an index that is not a constant).
fn args_at(name: &str, arg0: bool) -> bool {
    name == "entry" || is_offset(name) || (name == "return" && !arg0)
}

/// Whether `e` is `arg0`, `args[0]` or `args[i]` of an `i` not constant.
fn is_arg0(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Builtin(Builtin::Arg(0)) => true,
        ExprKind::Args(i) => const_value(i).is_none_or(|n| n == 0),
        _ => false,
    }
}

fn reads_arg0(e: &Expr) -> bool {
    let mut arg0 = false;
    crate::ir::visit_expr(e, &mut |e| arg0 |= is_arg0(e));
    arg0
}

fn is_arg(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::Builtin(Builtin::Arg(_)) | ExprKind::Args(_))
}

fn reads_args(e: &Expr) -> bool {
    let mut args = false;
    crate::ir::visit_expr(e, &mut |e| args |= is_arg(e));
    args
}

/// A pid offset probe's name: a hexadecimal offset.
fn is_offset(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_hexdigit())
}

/// The variables and aggregations a clause reads, writes or updates.
fn touched_items(cl: &Clause) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    let mut add = |it: Item| {
        if !out.contains(&it) {
            out.push(it);
        }
    };
    let var = |r: VarRef, add: &mut dyn FnMut(Item)| match r.scope {
        VarScope::Thread => add(Item::Thread(r.id)),
        VarScope::Clause => add(Item::Local(r.id)),
        VarScope::Global => {}
    };
    let mut see = |e: &Expr| match &e.kind {
        ExprKind::Var(r) | ExprKind::VarAddr(r) | ExprKind::ArrayGet { var: r, .. } => var(*r, &mut add),
        ExprKind::Assign { target, .. } | ExprKind::IncDec { target, .. } => {
            if let Some(r) = place_var(target) {
                var(r, &mut add)
            }
        }
        _ => {}
    };
    if let Some(p) = &cl.predicate {
        crate::ir::visit_expr(p, &mut see);
    }
    crate::ir::visit_actions(&cl.actions, &mut see);
    fn aggs(actions: &[Action], out: &mut Vec<Item>) {
        for a in actions {
            match a {
                // clear() and trunc() act on the consumer's copy (`pinned_items`).
                Action::AggUpdate { agg, .. } if !out.contains(&Item::Agg(*agg)) => out.push(Item::Agg(*agg)),
                Action::If { then, otherwise, .. } => {
                    aggs(then, out);
                    aggs(otherwise, out);
                }
                _ => {}
            }
        }
    }
    aggs(&cl.actions, &mut out);
    out
}

/// Aggregations a clause empties (`clear`, `trunc`): at the firing only when their
/// rows subtract (`FiringPlan::new`).
fn pinned_items(cl: &Clause) -> Vec<Item> {
    fn walk(actions: &[Action], out: &mut Vec<Item>) {
        for a in actions {
            match a {
                Action::Clear(agg) | Action::Trunc { agg, .. } => out.push(Item::Agg(*agg)),
                Action::If { then, otherwise, .. } => {
                    walk(then, out);
                    walk(otherwise, out);
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&cl.actions, &mut out);
    out
}

fn place_var(p: &Place) -> Option<VarRef> {
    match p {
        Place::Var(r) | Place::Array { var: r, .. } => Some(*r),
        Place::Field { base, .. } => place_var(base),
        Place::Mem { .. } => None,
    }
}

/// The size and sign of the value the consumer's evaluation gives `e` (which decide
/// how it narrows as a key and how compound assignments compute), where known.
fn value_shape(e: &Expr, prog: &CheckedProgram) -> Option<IntType> {
    match &e.kind {
        ExprKind::Ternary { then, otherwise, .. } => {
            let (a, b) = (value_shape(then, prog)?, value_shape(otherwise, prog)?);
            (a.size == b.size && a.signed == b.signed).then_some(a)
        }
        ExprKind::Comma(_, b) => value_shape(b, prog),
        ExprKind::Var(r) => {
            let info = match r.scope {
                VarScope::Thread => &prog.thread_vars[r.id],
                VarScope::Clause => &prog.clause_vars[r.id],
                VarScope::Global => return None,
            };
            int_shape(&info.ty)
        }
        _ => int_shape(&e.ty).or_else(|| e.ty.int_shape()),
    }
}

/// The value of a constant integer expression, as the consumer computes it.
fn const_value(e: &Expr) -> Option<u64> {
    match &e.kind {
        ExprKind::Int(v) => Some(wrap(&e.ty, *v)),
        ExprKind::Cast(x) if int_shape(&e.ty).is_some() => Some(wrap(&e.ty, const_value(x)?)),
        ExprKind::Neg(x) => Some(wrap(&e.ty, const_value(x)?.wrapping_neg())),
        _ => None,
    }
}

fn wrap(t: &Type, v: u64) -> u64 {
    t.int_shape().map_or(v, |s| s.wrap(v))
}

/// The code generator of one clause on one probe. Registers are a stack: an
/// expression's value goes in the register allocated for it, its temporaries above.
struct Gen<'a> {
    plan: &'a FiringPlan,
    prog: &'a CheckedProgram,
    probe: &'a ProbeFacts<'a>,
    ops: Vec<Op>,
    top: Reg,
    /// Clause-local variables' registers.
    locals: HashMap<usize, Reg>,
    /// Only what a record carries as the firing saw it: a gate's predicate reads no
    /// variable and no `timestamp` or `cpu` (the record reads them at another instant).
    gate: bool,
    /// The `Op::Str`s whose fault goes to the clause's end (patched there).
    faults: Vec<usize>,
    /// Inside an `if`'s branches (a string read there is not here: the consumer
    /// could not tell whether the firing reached it).
    depth: u32,
}

impl<'a> Gen<'a> {
    /// A generator for one clause on one probe; `gate`: its predicate only, for a
    /// consumer clause's gate.
    fn new(plan: &'a FiringPlan, prog: &'a CheckedProgram, probe: &'a ProbeFacts<'a>, gate: bool) -> Gen<'a> {
        Gen { plan, prog, probe, ops: Vec::new(), top: 0, locals: HashMap::new(), gate, faults: Vec::new(), depth: 0 }
    }
}

impl Gen<'_> {
    fn alloc(&mut self) -> R<Reg> {
        if usize::from(self.top) >= NREGS {
            return no("more registers than a program has");
        }
        self.top += 1;
        Ok(self.top - 1)
    }

    /// A `Jz` to be patched: its index.
    fn jz(&mut self, a: Reg) -> usize {
        self.ops.push(Op::Jz { a, to: 0 });
        self.ops.len() - 1
    }

    fn jmp(&mut self) -> usize {
        self.ops.push(Op::Jmp { to: 0 });
        self.ops.len() - 1
    }

    fn patch(&mut self, at: usize, to: usize) {
        let to = to as u16;
        match &mut self.ops[at] {
            Op::Jz { to: t, .. } | Op::Jmp { to: t } => *t = to,
            _ => {}
        }
    }

    /// Narrows `d` to `t` as the consumer's `int_of` does.
    fn narrow(&mut self, d: Reg, t: &Type) {
        if let Some(s) = t.int_shape().filter(|s| s.size < 8) {
            self.ops.push(Op::Ext { d, a: d, bits: s.size * 8, signed: s.signed });
        }
    }

    fn actions(&mut self, actions: &[Action]) -> R<()> {
        for a in actions {
            let mark = self.top;
            match a {
                Action::Eval(e) => {
                    self.expr(e)?;
                }
                Action::AggUpdate { agg, keys, args } => self.agg(*agg, keys, args)?,
                Action::If { cond, then, otherwise } => {
                    let c = self.cond(cond)?;
                    let to_else = self.jz(c);
                    self.top = mark;
                    self.depth += 1;
                    self.actions(then)?;
                    let to_end = self.jmp();
                    let els = self.ops.len();
                    self.patch(to_else, els);
                    self.actions(otherwise)?;
                    self.depth -= 1;
                    let end = self.ops.len();
                    self.patch(to_end, end);
                }
                Action::Nop => {}
                _ => return no("an action of the consumer"),
            }
            self.top = mark;
        }
        Ok(())
    }

    fn agg(&mut self, agg: usize, keys: &[Expr], args: &[Expr]) -> R<()> {
        let Some(index) = self.plan.agg_index.get(agg).copied().flatten() else {
            return no("an aggregation in the consumer");
        };
        let info = &self.prog.aggs[agg];
        let base = self.top;
        let words = self.plan.key_words.get(agg).cloned().unwrap_or_default();
        let mut at = 0;
        let mut strings = Vec::new();
        for (k, t) in keys.iter().zip(&info.keys) {
            let d = self.alloc()?;
            if words.get(at) == Some(&KeyWord::Str) {
                at += 1;
                let (n, max) = string_key(k, self.plan.strsize)
                    .ok_or(NotHere("a string key other than copyinstr(argN) where another clause keys by it"))?;
                // Rerunning the clause in the consumer after a fault must repeat nothing,
                // and reach the read as the firing did.
                if self.ops.iter().any(|o| matches!(o, Op::TlsStore { .. } | Op::Agg { .. })) {
                    return no("a string read after a side effect");
                }
                if self.depth > 0 {
                    return no("a string read inside an if");
                }
                self.arg(n, d)?;
                self.faults.push(self.ops.len());
                self.ops.push(Op::Str { d, a: d, max, fault: 0 });
                strings.push(d);
                continue;
            }
            if words.get(at) == Some(&KeyWord::Comm) {
                if !is_execname(k) {
                    return no("a string key other than execname where another clause keys by it");
                }
                self.comm(d, 0)?;
                let d1 = self.alloc()?;
                self.comm(d1, 1)?;
                at += 2;
                continue;
            }
            at += 1;
            match int_shape(t) {
                Some(s) => {
                    // The consumer narrows a key by its value's own shape.
                    match value_shape(k, self.prog) {
                        Some(v) if v.size == s.size && v.signed == s.signed => {}
                        _ => return no("a key whose value's shape is not its type's"),
                    }
                    self.expr_into(k, d)?;
                    self.narrow(d, t);
                }
                None => {
                    let c = probe_component(k).ok_or(NotHere("a string key other than the probe's identity"))?;
                    self.ops.push(Op::Const { d, v: u64::from(self.probe.id) << 2 | c });
                }
            }
        }
        let kind = info.kind;
        let val = self.alloc()?;
        match (kind, args.first()) {
            (AggKind::Count, _) | (_, None) => self.ops.push(Op::Const { d: val, v: 0 }),
            (_, Some(v)) => self.expr_into(v, val)?,
        }
        let val = match kind {
            AggKind::Llquantize => self.llquantize_bin(val, &info.params)?,
            _ => val,
        };
        let incr = self.alloc()?;
        match args.get(1) {
            Some(i) if matches!(kind, AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize) => {
                self.expr_into(i, incr)?
            }
            Some(_) => return no("an extra aggregation argument"),
            None => self.ops.push(Op::Const { d: incr, v: 1 }),
        }
        // A string the table could not keep (id 0, an aggregation drop counted): no
        // update.
        let skips: Vec<usize> = strings.iter().map(|&s| self.jz(s)).collect();
        self.ops.push(Op::Agg { agg: index, keys: if keys.is_empty() { 0 } else { base }, val, incr });
        let end = self.ops.len();
        for at in skips {
            self.patch(at, end);
        }
        Ok(())
    }

    /// `d` = word `i` of `execname` (never in a gate, which must decide as the consumer
    /// does: a BPF firing reads the name live, the consumer once, docs/firing.md).
    fn comm(&mut self, d: Reg, i: u8) -> R<()> {
        if self.gate {
            return no("execname in a gate");
        }
        self.ops.push(Op::Get { d, v: if i == 0 { Var::Comm0 } else { Var::Comm1 } });
        Ok(())
    }

    /// `execname op "constant"` (either side): `==` and `!=` by words, `<` and the
    /// like on the words read big-endian (bytes in order, unsigned, as the consumer
    /// compares strings).
    fn comm_cmp(&mut self, op: BinaryOp, lhs: &Expr, rhs: &Expr, d: Reg) -> R<()> {
        use BinaryOp as B;
        let (konst, op) = match (is_execname(lhs), is_execname(rhs)) {
            (true, false) => (self.string(rhs)?, op),
            // `"c" < execname` is `execname > "c"`.
            (false, true) => {
                let mirrored = match op {
                    B::Lt => B::Gt,
                    B::Le => B::Ge,
                    B::Gt => B::Lt,
                    B::Ge => B::Le,
                    op => op,
                };
                (self.string(lhs)?, mirrored)
            }
            _ => return no("a comparison of strings"),
        };
        let konst = &konst[..konst.iter().position(|&c| c == 0).unwrap_or(konst.len())];
        // Longer than any name: a name equal to its first 15 bytes is a prefix (less).
        let long = konst.len() >= udtrace_dif::op::COMM_BYTES;
        let want = udtrace_dif::op::comm_words(konst);
        if matches!(op, B::Eq | B::Ne) {
            if long {
                self.ops.push(Op::Const { d, v: u64::from(op == B::Ne) });
                return Ok(());
            }
            let (w, c) = (self.alloc()?, self.alloc()?);
            self.comm(d, 0)?;
            self.ops.push(Op::Const { d: c, v: want[0] });
            self.ops.push(Op::Bin { op: BinOp::Xor, d, a: d, b: c });
            self.comm(w, 1)?;
            self.ops.push(Op::Const { d: c, v: want[1] });
            self.ops.push(Op::Bin { op: BinOp::Xor, d: w, a: w, b: c });
            self.ops.push(Op::Bin { op: BinOp::Or, d, a: d, b: w });
            self.ops.push(Op::Const { d: c, v: 0 });
            let bin = if op == B::Eq { BinOp::Eq } else { BinOp::Ne };
            self.ops.push(Op::Bin { op: bin, d, a: d, b: c });
            return Ok(());
        }
        let be = |w: u64| u64::from_be_bytes(w.to_le_bytes());
        // lt = n0 < c0 || (n0 == c0 && n1 < c1); eq = n0 == c0 && n1 == c1.
        let (n0, n1, c, eq) = (self.alloc()?, self.alloc()?, self.alloc()?, self.alloc()?);
        self.comm(n0, 0)?;
        self.swap_bytes(n0)?;
        self.comm(n1, 1)?;
        self.swap_bytes(n1)?;
        self.ops.push(Op::Const { d: c, v: be(want[0]) });
        self.ops.push(Op::Bin { op: BinOp::LtU, d, a: n0, b: c });
        self.ops.push(Op::Bin { op: BinOp::Eq, d: eq, a: n0, b: c });
        self.ops.push(Op::Const { d: c, v: be(want[1]) });
        self.ops.push(Op::Bin { op: BinOp::LtU, d: n0, a: n1, b: c });
        self.ops.push(Op::Bin { op: BinOp::And, d: n0, a: n0, b: eq });
        self.ops.push(Op::Bin { op: BinOp::Or, d, a: d, b: n0 });
        self.ops.push(Op::Bin { op: BinOp::Eq, d: n1, a: n1, b: c });
        self.ops.push(Op::Bin { op: BinOp::And, d: eq, a: eq, b: n1 });
        // less: lt, or eq when the constant is longer (the name is its prefix); less
        // or equal: lt or eq either way.
        match op {
            B::Lt | B::Ge => {
                if long {
                    self.ops.push(Op::Bin { op: BinOp::Or, d, a: d, b: eq });
                }
                if op == B::Ge {
                    self.ops.push(Op::Un { op: UnOp::Not, d, a: d });
                }
            }
            _ => {
                self.ops.push(Op::Bin { op: BinOp::Or, d, a: d, b: eq });
                if op == B::Gt {
                    self.ops.push(Op::Un { op: UnOp::Not, d, a: d });
                }
            }
        }
        Ok(())
    }

    /// Reverses the bytes of `r` (little-endian words of a name, read in order).
    fn swap_bytes(&mut self, r: Reg) -> R<()> {
        let (out, t, k) = (self.alloc()?, self.alloc()?, self.alloc()?);
        self.ops.push(Op::Const { d: out, v: 0 });
        for i in 0..8u64 {
            self.ops.push(Op::Const { d: k, v: 8 * i });
            self.ops.push(Op::Bin { op: BinOp::ShrU, d: t, a: r, b: k });
            self.ops.push(Op::Const { d: k, v: 0xff });
            self.ops.push(Op::Bin { op: BinOp::And, d: t, a: t, b: k });
            self.ops.push(Op::Const { d: k, v: 56 - 8 * i });
            self.ops.push(Op::Bin { op: BinOp::Shl, d: t, a: t, b: k });
            self.ops.push(Op::Bin { op: BinOp::Or, d: out, a: out, b: t });
        }
        self.ops.push(Op::Mov { d: r, a: out });
        self.top -= 3;
        Ok(())
    }

    /// The llquantize bin of the value in `val` (`udtrace_dif::llquantize`), in a new
    /// register.
    fn llquantize_bin(&mut self, val: Reg, params: &[i64]) -> R<Reg> {
        let shape = llquantize_shape(params).ok_or(NotHere("llquantize with more bins than a row holds"))?;
        let d = self.alloc()?;
        self.alloc()?;
        let ops = shape.ops(val, d, self.ops.len()).ok_or(NotHere("llquantize past 64 bits"))?;
        self.ops.extend(ops);
        self.top = d + 1;
        Ok(d)
    }

    /// A register that is nonzero when `e` is true (D's truth: a nonzero integer, a
    /// nonempty string).
    fn cond(&mut self, e: &Expr) -> R<Reg> {
        if e.ty.is_string() {
            let s = self.string(e)?;
            let d = self.alloc()?;
            self.ops.push(Op::Const { d, v: u64::from(!s.is_empty()) });
            return Ok(d);
        }
        self.expr(e)
    }

    /// A string known when the program is compiled: a literal or the probe's
    /// identity.
    fn string(&self, e: &Expr) -> R<Vec<u8>> {
        match &e.kind {
            ExprKind::Str(s) => Ok(s.to_vec()),
            _ => match probe_component(e) {
                Some(c) => Ok(self.probe.component(c).as_bytes().to_vec()),
                None => no("a string"),
            },
        }
    }

    fn expr(&mut self, e: &Expr) -> R<Reg> {
        let d = self.alloc()?;
        self.expr_into(e, d)?;
        Ok(d)
    }

    /// Computes `e` into `d` (allocated), its temporaries above it.
    fn expr_into(&mut self, e: &Expr, d: Reg) -> R<()> {
        let mark = self.top;
        self.expr_kind(e, d)?;
        self.top = mark;
        Ok(())
    }

    fn expr_kind(&mut self, e: &Expr, d: Reg) -> R<()> {
        if e.ty.is_string() || (int_shape(&e.ty).is_none() && !matches!(e.kind, ExprKind::Comma(..))) {
            return no("a value other than an integer");
        }
        match &e.kind {
            ExprKind::Int(v) => self.ops.push(Op::Const { d, v: wrap(&e.ty, *v) }),
            ExprKind::Var(r) => self.load(*r, d)?,
            ExprKind::Builtin(b) => self.builtin(*b, &e.ty, d)?,
            ExprKind::Args(i) => match const_value(i) {
                Some(n) if n <= 5 => {
                    self.arg(n as u8, d)?;
                    self.narrow(d, &e.ty);
                }
                _ => return no("an argument past the sixth, or not a constant index"),
            },
            ExprKind::Neg(x) => {
                self.expr_into(x, d)?;
                self.ops.push(Op::Un { op: UnOp::Neg, d, a: d });
                self.narrow(d, &e.ty);
            }
            ExprKind::BitNot(x) => {
                self.expr_into(x, d)?;
                self.ops.push(Op::Un { op: UnOp::BitNot, d, a: d });
                self.narrow(d, &e.ty);
            }
            ExprKind::Not(x) => {
                let c = self.cond(x)?;
                self.ops.push(Op::Un { op: UnOp::Not, d, a: c });
            }
            ExprKind::Binary { op, lhs, rhs, signed } => {
                self.expr_into(lhs, d)?;
                self.binary(*op, d, rhs, *signed)?;
            }
            ExprKind::StrCmp { op, lhs, rhs } if is_execname(lhs) || is_execname(rhs) => {
                self.comm_cmp(*op, lhs, rhs, d)?
            }
            ExprKind::StrCmp { op, lhs, rhs } => {
                let (a, b) = (self.string(lhs)?, self.string(rhs)?);
                self.ops.push(Op::Const { d, v: u64::from(op.holds(a.cmp(&b))) });
            }
            ExprKind::Logical { op, lhs, rhs } => self.logical(*op, lhs, rhs, d)?,
            ExprKind::Ternary { cond, then, otherwise } => {
                let c = self.cond(cond)?;
                let to_else = self.jz(c);
                self.top = d + 1;
                self.expr_into(then, d)?;
                let to_end = self.jmp();
                let els = self.ops.len();
                self.patch(to_else, els);
                self.expr_into(otherwise, d)?;
                let end = self.ops.len();
                self.patch(to_end, end);
            }
            ExprKind::Assign { target: Place::Var(r), op, value } => self.assign(*r, *op, value, &e.ty, d)?,
            ExprKind::IncDec { target: Place::Var(r), increment, prefix } => {
                if e.ty.pointee().is_some() {
                    return no("pointer arithmetic");
                }
                let t = self.alloc()?;
                self.load(*r, t)?;
                self.ops.push(Op::Const { d, v: 1 });
                let op = if *increment { BinOp::Add } else { BinOp::Sub };
                self.ops.push(Op::Bin { op, d, a: t, b: d });
                self.narrow(d, &e.ty);
                self.store(*r, d)?;
                if !*prefix {
                    self.ops.push(Op::Mov { d, a: t });
                }
            }
            ExprKind::Cast(x) => {
                if int_shape(&x.ty).is_none() {
                    return no("a cast from a non-integer");
                }
                self.expr_into(x, d)?;
                self.narrow(d, &e.ty);
            }
            ExprKind::Comma(a, b) => {
                self.expr(a)?;
                self.top = d + 1;
                self.expr_into(b, d)?;
            }
            _ => return no("an expression of the consumer"),
        }
        Ok(())
    }

    fn builtin(&mut self, b: Builtin, t: &Type, d: Reg) -> R<()> {
        let var = match b {
            Builtin::Arg(n) if n <= 5 => {
                self.arg(n, d)?;
                self.narrow(d, t);
                return Ok(());
            }
            Builtin::Id => {
                self.ops.push(Op::Const { d, v: wrap(t, u64::from(self.probe.id)) });
                return Ok(());
            }
            Builtin::Pid => Var::Pid,
            Builtin::Tid => Var::Tid,
            Builtin::Cpu | Builtin::Timestamp | Builtin::Vtimestamp if self.gate => {
                return no("cpu or timestamp in a gate")
            }
            Builtin::Cpu => Var::Cpu,
            // The consumer's vtimestamp is the record's clock (pid records carry no
            // thread CPU time): the firing's is the same.
            Builtin::Timestamp | Builtin::Vtimestamp => Var::Timestamp,
            Builtin::Uid => Var::Uid,
            Builtin::Gid => Var::Gid,
            // The record's is as a snapshot saw it, or as last read: not a gate's.
            Builtin::Ppid if self.gate => return no("ppid in a gate"),
            Builtin::Ppid => Var::Ppid,
            Builtin::Errno => Var::Errno,
            _ => return no("a built-in variable of the consumer"),
        };
        self.ops.push(Op::Get { d, v: var });
        self.narrow(d, t);
        Ok(())
    }

    /// d = argument `n` (0..=5) as the consumer reads it on this probe (`args_at`).
    fn arg(&mut self, n: u8, d: Reg) -> R<()> {
        if let Some(sites) = self.probe.usdt {
            return self.usdt_arg(sites, n, d);
        }
        let op = match (self.probe.name, n) {
            ("return", 0) => return no("a return probe's arg0 (the site's offset)"),
            ("return", 1) => Op::Get { d, v: Var::Ret },
            ("return", _) => Op::Const { d, v: 0 },
            _ => Op::Arg { d, n },
        };
        self.ops.push(op);
        Ok(())
    }

    /// d = a USDT probe's argument `n` as `UsdtSite::arg` decodes it in the consumer;
    /// sites with other arguments chosen by the firing's offset in its page.
    fn usdt_arg(&mut self, sites: &[UsdtSiteArgs], n: u8, d: Reg) -> R<()> {
        let groups = usdt_dispatch(sites).ok_or(NotHere("USDT sites of one probe told apart by no page offset"))?;
        let loc = |args: &[UsdtLoc]| args.get(usize::from(n)).copied();
        if groups.iter().all(|(_, a)| loc(a) == loc(groups[0].1)) {
            return self.usdt_loc(groups.first().and_then(|(_, a)| loc(a)), d);
        }
        let mark = self.top;
        let (off, c) = (self.alloc()?, self.alloc()?);
        self.ops.push(Op::UReg { d: off, r: op::UREG_IP });
        self.ops.push(Op::Const { d: c, v: 0xfff });
        self.ops.push(Op::Bin { op: BinOp::And, d: off, a: off, b: c });
        let mut ends = Vec::new();
        for (o, args) in &groups {
            self.ops.push(Op::Const { d: c, v: *o });
            self.ops.push(Op::Bin { op: BinOp::Eq, d: c, a: c, b: off });
            let next = self.jz(c);
            self.usdt_loc(loc(args), d)?;
            ends.push(self.jmp());
            let here = self.ops.len();
            self.patch(next, here);
        }
        // No site at this offset (never: the probe fires only at its sites).
        self.ops.push(Op::Const { d, v: 0 });
        let end = self.ops.len();
        for j in ends {
            self.patch(j, end);
        }
        self.top = mark;
        Ok(())
    }

    /// d = the argument at `loc` (none: 0), cut and extended as its descriptor says.
    fn usdt_loc(&mut self, loc: Option<UsdtLoc>, d: Reg) -> R<()> {
        let Some(loc) = loc else {
            self.ops.push(Op::Const { d, v: 0 });
            return Ok(());
        };
        let mark = self.top;
        match loc.at {
            UsdtAt::Const(v) => self.ops.push(Op::Const { d, v }),
            UsdtAt::Reg(p) => self.ureg_part(p, d)?,
            UsdtAt::Mem { base, index, scale, disp } => {
                let t = self.alloc()?;
                self.ops.push(Op::Const { d, v: disp });
                if let Some(b) = base {
                    self.ureg_part(b, t)?;
                    self.ops.push(Op::Bin { op: BinOp::Add, d, a: d, b: t });
                }
                if let Some(i) = index {
                    self.ureg_part(i, t)?;
                    let k = self.alloc()?;
                    self.ops.push(Op::Const { d: k, v: u64::from(scale) });
                    self.ops.push(Op::Bin { op: BinOp::Mul, d: t, a: t, b: k });
                    self.ops.push(Op::Bin { op: BinOp::Add, d, a: d, b: t });
                }
                self.ops.push(Op::Load { d, a: d, size: loc.size.clamp(1, 8) });
            }
        }
        if loc.size < 8 {
            self.ops.push(Op::Ext { d, a: d, bits: loc.size * 8, signed: loc.signed });
        }
        self.top = mark;
        Ok(())
    }

    /// d = a register's part (`RegPart::value`).
    fn ureg_part(&mut self, p: URegPart, d: Reg) -> R<()> {
        self.ops.push(Op::UReg { d, r: p.reg });
        if p.high {
            let mark = self.top;
            let k = self.alloc()?;
            self.ops.push(Op::Const { d: k, v: 8 });
            self.ops.push(Op::Bin { op: BinOp::ShrU, d, a: d, b: k });
            self.top = mark;
        }
        if p.width < 8 {
            self.ops.push(Op::Ext { d, a: d, bits: p.width * 8, signed: false });
        }
        Ok(())
    }

    fn load(&mut self, r: VarRef, d: Reg) -> R<()> {
        self.var(r, d, false)
    }

    fn store(&mut self, r: VarRef, a: Reg) -> R<()> {
        self.var(r, a, true)
    }

    /// Loads variable `r` into `reg`, or stores `reg` into it.
    fn var(&mut self, r: VarRef, reg: Reg, store: bool) -> R<()> {
        if self.gate {
            return no("a variable in a gate");
        }
        let op = match r.scope {
            VarScope::Thread => match self.plan.tls_slot.get(r.id).copied().flatten() {
                Some(slot) if store => Op::TlsStore { slot, a: reg },
                Some(slot) => Op::TlsLoad { d: reg, slot },
                None => return no("a thread-local variable in the consumer"),
            },
            VarScope::Clause => match self.locals.get(&r.id) {
                Some(&v) if store => Op::Mov { d: v, a: reg },
                Some(&v) => Op::Mov { d: reg, a: v },
                None => return no("a clause-local variable in the consumer"),
            },
            VarScope::Global => return no("a global variable"),
        };
        self.ops.push(op);
        Ok(())
    }

    fn assign(&mut self, r: VarRef, op: Option<BinaryOp>, value: &Expr, t: &Type, d: Reg) -> R<()> {
        // A variable holds what its assignments narrowed it to: only one whose type
        // is the assignment's reads back as the consumer's would.
        let info = match r.scope {
            VarScope::Thread => &self.prog.thread_vars[r.id],
            VarScope::Clause => &self.prog.clause_vars[r.id],
            VarScope::Global => return no("a global variable"),
        };
        match (int_shape(&info.ty), int_shape(t)) {
            (Some(a), Some(b)) if a.size == b.size && a.signed == b.signed => {}
            _ => return no("an assignment of another type than the variable's"),
        }
        match op {
            None => self.expr_into(value, d)?,
            Some(op) => {
                // `x op= v` reads x before evaluating v, as the consumer does.
                self.load(r, d)?;
                let signed = t.int_shape().is_some_and(|s| s.signed)
                    || value_shape(value, self.prog).ok_or(NotHere("a value of unknown sign"))?.signed;
                self.binary(op, d, value, signed)?;
            }
        }
        self.narrow(d, t);
        self.store(r, d)
    }

    /// `d = d op rhs`, as the consumer's `binary` computes it (64 bits, not narrowed).
    fn binary(&mut self, op: BinaryOp, d: Reg, rhs: &Expr, signed: bool) -> R<()> {
        use BinaryOp as B;
        if matches!(op, B::Div | B::Mod) {
            let Some(c) = const_value(rhs) else { return no("a division by a variable") };
            return self.divide(op == B::Mod, d, c, signed);
        }
        let b = self.expr(rhs)?;
        let (bin, a, b) = match op {
            B::Add => (BinOp::Add, d, b),
            B::Sub => (BinOp::Sub, d, b),
            B::Mul => (BinOp::Mul, d, b),
            B::BitAnd => (BinOp::And, d, b),
            B::BitOr => (BinOp::Or, d, b),
            B::BitXor => (BinOp::Xor, d, b),
            B::Shl => (BinOp::Shl, d, b),
            B::Shr => (if signed { BinOp::ShrS } else { BinOp::ShrU }, d, b),
            B::Eq => (BinOp::Eq, d, b),
            B::Ne => (BinOp::Ne, d, b),
            B::Lt => (if signed { BinOp::LtS } else { BinOp::LtU }, d, b),
            B::Le => (if signed { BinOp::LeS } else { BinOp::LeU }, d, b),
            B::Gt => (if signed { BinOp::LtS } else { BinOp::LtU }, b, d),
            B::Ge => (if signed { BinOp::LeS } else { BinOp::LeU }, b, d),
            _ => return no("an operator of the consumer"),
        };
        self.ops.push(Op::Bin { op: bin, d, a, b });
        Ok(())
    }

    /// Division by a constant as the consumer's `arith64`: signed, on magnitudes,
    /// the result negated when the signs differ (so a remainder takes the sign of
    /// both operands, not C's).
    fn divide(&mut self, rem: bool, d: Reg, c: u64, signed: bool) -> R<()> {
        if c == 0 {
            return no("a division by zero (a fault)");
        }
        if !signed {
            self.ops.push(Op::Div { d, a: d, imm: c, signed: false, rem });
            return Ok(());
        }
        let c = c as i64;
        if c == -1 {
            // |a| / 1 negated when a ≥ 0, and |a| when a < 0: -a either way; the
            // remainder is 0.
            self.ops.push(if rem { Op::Const { d, v: 0 } } else { Op::Un { op: UnOp::Neg, d, a: d } });
            return Ok(());
        }
        // C's truncating quotient is arith64's; C's remainder has the dividend's
        // sign, arith64's the product of both: negate it for a negative divisor.
        self.ops.push(Op::Div { d, a: d, imm: c as u64, signed: true, rem });
        if rem && c < 0 {
            self.ops.push(Op::Un { op: UnOp::Neg, d, a: d });
        }
        Ok(())
    }

    fn logical(&mut self, op: BinaryOp, lhs: &Expr, rhs: &Expr, d: Reg) -> R<()> {
        let a = self.cond(lhs)?;
        match op {
            BinaryOp::LogAnd | BinaryOp::LogOr => {
                // d = the answer if rhs is not evaluated; skip it when lhs decides.
                let decided = if op == BinaryOp::LogAnd {
                    self.ops.push(Op::Const { d, v: 0 });
                    a
                } else {
                    self.ops.push(Op::Const { d, v: 1 });
                    self.ops.push(Op::Un { op: UnOp::Not, d: a, a });
                    a
                };
                let skip = self.jz(decided);
                self.top = d + 1;
                let b = self.cond(rhs)?;
                self.ops.push(Op::Un { op: UnOp::Not, d: b, a: b });
                self.ops.push(Op::Un { op: UnOp::Not, d, a: b });
                let end = self.ops.len();
                self.patch(skip, end);
            }
            _ => {
                let b = self.cond(rhs)?;
                self.ops.push(Op::Un { op: UnOp::Not, d: a, a });
                self.ops.push(Op::Un { op: UnOp::Not, d: b, a: b });
                self.ops.push(Op::Bin { op: BinOp::Ne, d, a, b });
            }
        }
        Ok(())
    }
}

/// Which part of the probe's identity `e` is (0 provider, 1 module, 2 function,
/// 3 name), if it is one.
fn probe_component(e: &Expr) -> Option<u64> {
    match e.kind {
        ExprKind::Builtin(Builtin::Probeprov) => Some(0),
        ExprKind::Builtin(Builtin::Probemod) => Some(1),
        ExprKind::Builtin(Builtin::Probefunc) => Some(2),
        ExprKind::Builtin(Builtin::Probename) => Some(3),
        _ => None,
    }
}

fn is_execname(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::Builtin(Builtin::Execname))
}

/// `copyinstr(argN)` or `copyinstr(argN, LEN)` (N ≤ 5, LEN a constant): the argument
/// and the most bytes read, the NUL included (`min(LEN, strsize)`, as the consumer
/// reads; a LEN of 0 always faults: not here). None with no `strsize` at the firing.
fn string_key(e: &Expr, strsize: u16) -> Option<(u8, u16)> {
    let ExprKind::Call(Subr::Copyinstr, args) = &e.kind else { return None };
    let ExprKind::Builtin(Builtin::Arg(n)) = args.first()?.kind else { return None };
    let max = match args.get(1) {
        None => u64::from(strsize),
        Some(len) => match len.kind {
            ExprKind::Int(v) => v.min(u64::from(strsize)),
            _ => return None,
        },
    };
    (n <= 5 && max > 0).then_some((n, max as u16))
}

/// Whether clause `cl` keys an aggregation by a string read at the firing.
fn reads_strings(cl: &Clause, words: &[Vec<KeyWord>]) -> bool {
    !string_reads(cl, words, 1).is_empty()
}

/// The strings clause `cl` reads at the firing: its string keys, in order.
fn string_reads(cl: &Clause, words: &[Vec<KeyWord>], strsize: u16) -> Vec<(u8, u16)> {
    let mut out = Vec::new();
    fn walk(actions: &[Action], words: &[Vec<KeyWord>], strsize: u16, out: &mut Vec<(u8, u16)>) {
        for a in actions {
            match a {
                Action::AggUpdate { agg, keys, .. } => {
                    let w = words.get(*agg).map(Vec::as_slice).unwrap_or_default();
                    let mut at = 0;
                    for k in keys {
                        match w.get(at) {
                            Some(KeyWord::Str) => out.extend(string_key(k, strsize)),
                            Some(KeyWord::Comm) => at += 1,
                            _ => {}
                        }
                        at += 1;
                    }
                }
                Action::If { then, otherwise, .. } => {
                    walk(then, words, strsize, out);
                    walk(otherwise, words, strsize, out);
                }
                _ => {}
            }
        }
    }
    walk(&cl.actions, words, strsize, &mut out);
    out
}

/// Per aggregation, the words of its key: an integer or a probe's identity a word
/// each; a string key that some clause gives as `execname` two ([`KeyWord::Comm`]:
/// the clauses giving it anything else there then stay in the consumer).
fn key_words(prog: &CheckedProgram) -> Vec<Vec<KeyWord>> {
    type Seen = std::collections::HashSet<(usize, usize)>;
    let (mut comm, mut strs) = (Seen::new(), Seen::new());
    fn walk(actions: &[Action], comm: &mut Seen, strs: &mut Seen) {
        for a in actions {
            match a {
                Action::AggUpdate { agg, keys, .. } => {
                    for (k, e) in keys.iter().enumerate() {
                        if is_execname(e) {
                            comm.insert((*agg, k));
                        }
                        if string_key(e, 1).is_some() {
                            strs.insert((*agg, k));
                        }
                    }
                }
                Action::If { then, otherwise, .. } => {
                    walk(then, comm, strs);
                    walk(otherwise, comm, strs);
                }
                _ => {}
            }
        }
    }
    for cl in &prog.clauses {
        walk(&cl.actions, &mut comm, &mut strs);
    }
    prog.aggs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut out = Vec::new();
            for (k, t) in a.keys.iter().enumerate() {
                match int_shape(t) {
                    Some(s) => out.push(KeyWord::Int { size: s.size, signed: s.signed }),
                    None if strs.contains(&(i, k)) => out.push(KeyWord::Str),
                    None if comm.contains(&(i, k)) => out.extend([KeyWord::Comm, KeyWord::CommRest]),
                    None => out.push(KeyWord::Probe),
                }
            }
            out
        })
        .collect()
}
