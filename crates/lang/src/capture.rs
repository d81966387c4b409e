//! Capture plans: what a firing must record in the kernel, at the instant it happens,
//! for a clause to be evaluated later in user space: the registers when it reads
//! arguments or registers, user stack bytes (for `ustack()`, `ucaller`, stack
//! arguments), the strings behind `copyinstr(argN)`, the bytes behind `copyin(argN,
//! SIZE)` and `copyinto(argN, SIZE, …)` with a constant SIZE, and `errno`; and, through
//! a [`StashPlan`], the strings and bytes behind thread-local variables that hold an
//! argument saved at an earlier firing (`self->p = arg0` at entry, `copyinstr(self->p)`
//! at return), and the reads at addresses the firing can compute ([`Chain`]). Anything
//! else a clause reads from the process is read from the live process when the
//! consumer evaluates it.

use std::collections::HashMap;
use std::rc::Rc;

use udtrace_record::pid::{op_chain, op_read, op_write, MAX_CHAINS, MAX_CHAIN_DEPTH, MAX_STASH_SLOTS};
pub use udtrace_record::pid::{ChainBin, ChainOp, PtReg};

use crate::ast::{BinaryOp, VarScope};
use crate::ir::{visit_actions, visit_expr, Action, Builtin, CheckedProgram, Clause, Expr, ExprKind, Place, Subr};
use crate::options::Options;

/// How many bytes of user stack `ustack()` copies for up to [`USTACK_FRAMES`] frames:
/// enough for the unwinder to walk a few dozen frames of ordinary C and Rust code.
pub const USTACK_BYTES: u32 = 8192;

/// DTrace's default `ustackframes`.
pub const USTACK_FRAMES: u64 = 100;

/// The most stack a firing copies (the record's limit).
pub const MAX_USTACK_BYTES: u32 = udtrace_record::pid::MAX_STACK_BYTES;

/// Bytes of stack copied for stacks of up to `frames` frames (`ustack(N)`,
/// `-x ustackframes=N`): [`USTACK_BYTES`] for every [`USTACK_FRAMES`], never fewer than
/// that (frames vary in size, and fewer asked for is no sign that they are small),
/// at most [`MAX_USTACK_BYTES`].
pub fn ustack_bytes(frames: u64) -> u32 {
    let bytes = frames.saturating_mul(u64::from(USTACK_BYTES)).div_ceil(USTACK_FRAMES).div_ceil(8) * 8;
    bytes.clamp(u64::from(USTACK_BYTES), u64::from(MAX_USTACK_BYTES)) as u32
}

/// Bytes of stack for `arg6..arg9` (return address and stack arguments).
pub const ARGS_STACK_BYTES: u32 = 64;

/// Bytes of stack for `ucaller`: at entry and return sites the word at the stack
/// pointer; at an offset inside a function, enough of its frame to unwind to the caller.
pub const UCALLER_STACK_BYTES: u32 = 512;

/// The largest `copyin(argN, SIZE)` captured at the firing; larger sizes are read from
/// the live process when the record is consumed.
pub const MAX_BUFFER_BYTES: u32 = 4096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturePlan {
    /// User stack bytes to copy from the stack pointer up.
    pub stack_bytes: u32,
    /// `copyinstr(argN)`: the argument registers (0..=5) whose strings to copy.
    pub strings: Vec<u8>,
    /// `copyin(argN, SIZE)`: (argument register 0..=5, bytes to copy), one per
    /// register, the largest size any clause asks for, sorted by register.
    pub buffers: Vec<(u8, u32)>,
    /// All the registers: `uregs[]`, stacks, strings, buffers, `args[]`. A clause that
    /// only counts or reads the probe's identity needs none, and one that reads `arg0`
    /// to `arg5` only those (`args`): its firings cost less to record and read.
    pub regs: bool,
    /// The proc provider's records: the current task's data (`curpsinfo`,
    /// `curlwpsinfo`, `ppid`, `uid`, `gid`), the probe's arguments, and the ancestry
    /// of the current process (`progenyof`).
    pub cur_task: bool,
    /// Bit n: `args[n]` (or `argn`) is read; a computed index sets them all.
    pub args: u16,
    pub ancestors: bool,
    /// `errno`: the firing thread's, read at the firing.
    pub errno: bool,
    /// `curthread`: the firing task's `struct task_struct` address.
    pub curthread: bool,
}

impl CapturePlan {
    /// The union of two plans: one record layout serves several clauses.
    pub fn merge(&mut self, other: &CapturePlan) {
        self.stack_bytes = self.stack_bytes.max(other.stack_bytes);
        self.regs |= other.regs;
        self.cur_task |= other.cur_task;
        self.args |= other.args;
        self.ancestors |= other.ancestors;
        self.errno |= other.errno;
        self.curthread |= other.curthread;
        for s in &other.strings {
            if !self.strings.contains(s) {
                self.strings.push(*s);
            }
        }
        self.strings.sort_unstable();
        for &(n, size) in &other.buffers {
            add_buffer(&mut self.buffers, n, size);
        }
    }
}

/// Adds a buffer capture: one per register, the largest size; kept sorted.
fn add_buffer(buffers: &mut Vec<(u8, u32)>, n: u8, size: u32) {
    match buffers.iter_mut().find(|b| b.0 == n) {
        Some(b) => b.1 = b.1.max(size),
        None => {
            buffers.push((n, size));
            buffers.sort_unstable();
        }
    }
}

/// The plan for one clause (predicate and actions), with the options that size its
/// stacks (`ustackframes`, `maxframes`).
pub fn plan(c: &Clause, o: &Options) -> CapturePlan {
    let mut p = CapturePlan::default();
    // Frames of a user stack: as asked (`ustack(N)`), else `ustackframes`; never more
    // than `maxframes`.
    let frames = |n: Option<u64>| ustack_bytes(n.unwrap_or(o.ustackframes).min(o.maxframes.unwrap_or(u64::MAX)));
    {
        let mut see = |e: &Expr| note(e, &mut p, &frames);
        if let Some(pred) = &c.predicate {
            visit_expr(pred, &mut see);
        }
        visit_actions(&c.actions, &mut see);
    }
    p.stack_bytes = p.stack_bytes.max(ustack_action(&c.actions, &frames));
    p.strings.sort_unstable();
    // Stacks unwind from ip/sp/bp; string and buffer captures are matched to their
    // argument.
    p.regs |= p.stack_bytes > 0 || !p.strings.is_empty() || !p.buffers.is_empty();
    p
}

/// Whether the clause reads the process's memory where the firing captures none of it:
/// `copyinstr`, `copyin` or `copyinto` of an address that is not an argument register
/// (nor a thread-local variable `stash` keeps whole), or of a size not constant or over
/// [`MAX_BUFFER_BYTES`]. Those are read from the live process when the record is
/// consumed.
pub fn reads_live_memory(c: &Clause, stash: &StashPlan) -> bool {
    let mut live = false;
    let kept = |args: &[Expr]| stashed_var(args).and_then(|v| stash.slot_of(v)).is_some_and(|s| stash.whole[s]);
    walk_reads(c, &mut |e, locals| {
        if stash.chained(e, locals) {
            return;
        }
        live |= match &e.kind {
            ExprKind::Call(Subr::Copyinstr, args) => captured_string(args).is_none() && !kept(args),
            ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => {
                captured_buffer(args).is_none() && !(kept(args) && constant_size(args).is_some())
            }
            _ => false,
        }
    });
    live
}

/// The values of clause-local variables (`this->x`) a chain may start from: the last
/// plain assignment of each, made at the clause's top level before the read, with the
/// values of the variables it read then.
type Locals = HashMap<usize, Rc<Local>>;

#[derive(Debug)]
struct Local {
    value: Expr,
    before: Locals,
}

/// Calls `f` on each read of the process's memory in the clause (predicate, then the
/// actions in order), with what the clause-local variables hold there.
fn walk_reads(c: &Clause, f: &mut dyn FnMut(&Expr, &Locals)) {
    let none = Locals::new();
    if let Some(pred) = &c.predicate {
        visit_expr(pred, &mut |e| {
            if is_read(e) {
                f(e, &none)
            }
        });
    }
    let mut locals = Locals::new();
    walk_actions(&c.actions, &mut locals, f);
}

fn walk_actions(actions: &[Action], locals: &mut Locals, f: &mut dyn FnMut(&Expr, &Locals)) {
    for a in actions {
        if let Action::If { cond, then, otherwise } = a {
            visit_expr(cond, &mut |e| {
                if is_read(e) {
                    f(e, locals)
                }
            });
            // What a branch assigns is known in it, and not after it.
            let mut changed = Vec::new();
            for branch in [then, otherwise] {
                let mut inner = locals.clone();
                walk_actions(branch, &mut inner, f);
                changed.extend(
                    inner.iter().filter(|(k, v)| !locals.get(k).is_some_and(|o| Rc::ptr_eq(o, v))).map(|(k, _)| *k),
                );
                changed.extend(locals.keys().filter(|k| !inner.contains_key(k)).copied());
            }
            for k in changed {
                locals.remove(&k);
            }
            continue;
        }
        let one = std::slice::from_ref(a);
        let before = locals.clone();
        let mut assigned = Vec::new();
        visit_actions(one, &mut |e| {
            if is_read(e) {
                f(e, locals);
            }
            match &e.kind {
                ExprKind::Assign { target: Place::Var(v), .. } | ExprKind::IncDec { target: Place::Var(v), .. }
                    if v.scope == VarScope::Clause =>
                {
                    assigned.push(v.id)
                }
                _ => {}
            }
        });
        for v in assigned {
            locals.remove(&v);
        }
        if let Action::Eval(Expr { kind: ExprKind::Assign { target: Place::Var(v), op: None, value }, .. }) = a {
            if v.scope == VarScope::Clause {
                locals.insert(v.id, Rc::new(Local { value: (**value).clone(), before }));
            }
        }
    }
}

/// Whether the actions include `ustack()` as a statement (inside `if` too).
/// The stack bytes the user stacks the actions trace (`ustack()` as a statement)
/// need, by the frames each asks for (`bytes`); 0 when they trace none.
fn ustack_action(list: &[Action], bytes: &dyn Fn(Option<u64>) -> u32) -> u32 {
    list.iter()
        .map(|a| match a {
            Action::Stack { user: true, frames } => bytes(frames.map(u64::from)),
            Action::If { then, otherwise, .. } => ustack_action(then, bytes).max(ustack_action(otherwise, bytes)),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// What one expression node (its children are visited on their own) asks a firing to
/// record.
fn note(e: &Expr, p: &mut CapturePlan, frames: &dyn Fn(Option<u64>) -> u32) {
    match &e.kind {
        ExprKind::Builtin(Builtin::Arg(n)) => {
            // arg0..arg5 are recorded alone (`args`); the rest are on the stack.
            p.args |= 1 << n;
            if *n >= 6 {
                p.regs = true;
                p.stack_bytes = p.stack_bytes.max(ARGS_STACK_BYTES);
            }
        }
        ExprKind::Args(i) => {
            p.regs = true;
            p.args |= match i.kind {
                ExprKind::Int(n) if n < 16 => 1 << n,
                _ => u16::MAX,
            };
            p.stack_bytes = p.stack_bytes.max(ARGS_STACK_BYTES);
        }
        ExprKind::Uregs(_) => p.regs = true,
        ExprKind::Builtin(Builtin::Curpsinfo | Builtin::Curlwpsinfo | Builtin::Ppid | Builtin::Uid | Builtin::Gid) => {
            p.cur_task = true
        }
        ExprKind::Builtin(Builtin::Errno) => p.errno = true,
        ExprKind::Builtin(Builtin::Curthread) => p.curthread = true,
        ExprKind::Builtin(Builtin::Ucaller) => p.stack_bytes = p.stack_bytes.max(UCALLER_STACK_BYTES),
        ExprKind::Builtin(Builtin::Ustackdepth) => p.stack_bytes = p.stack_bytes.max(frames(None)),
        ExprKind::Call(Subr::Progenyof, _) => p.ancestors = true,
        ExprKind::Call(Subr::Stack { user: true }, args) => {
            let n = args.first().and_then(|a| match a.kind {
                ExprKind::Int(n) => Some(n),
                _ => None,
            });
            p.stack_bytes = p.stack_bytes.max(frames(n));
        }
        ExprKind::Call(Subr::Copyinstr, args) => {
            if let Some(n) = captured_string(args).filter(|n| !p.strings.contains(n)) {
                p.strings.push(n);
            }
        }
        ExprKind::Cast(x) if stringof(e) => {
            if let Some(n) = captured_string(std::slice::from_ref(x)).filter(|n| !p.strings.contains(n)) {
                p.strings.push(n);
            }
        }
        ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => {
            if let Some((n, size)) = captured_buffer(args) {
                add_buffer(&mut p.buffers, n, size);
            }
        }
        _ => {}
    }
}

/// The argument register whose string the firing captures for `copyinstr(args)`:
/// `argN` with N in 0..=5.
fn captured_string(args: &[Expr]) -> Option<u8> {
    match args.first().map(|a| &a.kind) {
        Some(ExprKind::Builtin(Builtin::Arg(n))) if *n < 6 => Some(*n),
        _ => None,
    }
}

/// The (argument register, size) the firing captures for `copyin(args)` or
/// `copyinto(args)`: `argN` with N in 0..=5 and a constant size up to
/// [`MAX_BUFFER_BYTES`].
fn captured_buffer(args: &[Expr]) -> Option<(u8, u32)> {
    match args {
        [src, size, ..] => match (&src.kind, &size.kind) {
            (ExprKind::Builtin(Builtin::Arg(n)), ExprKind::Int(size))
                if *n < 6 && (1..=u64::from(MAX_BUFFER_BYTES)).contains(size) =>
            {
                Some((*n, *size as u32))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Addresses saved at one firing and read at a later one of the same thread:
/// `self->p = argN` in one pid clause, `copyinstr(self->p)` or `copyin(self->p, SIZE)`
/// in another. A backend keeps, per thread, each such variable's last argument (its
/// slot), and a firing whose clauses read the variable records that address and the
/// memory behind it. The consumer takes a capture only when the variable's value,
/// evaluated in D, is the address captured: a predicate that skipped the assignment, or
/// another assignment, makes the read a live one again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StashPlan {
    /// The thread-local variables stashed, by id; the index is the slot.
    pub vars: Vec<usize>,
    /// Per slot: every assignment to the variable in the program stores an argument
    /// register (stashed) or a constant (0, to clear it), so its reads are all captured.
    pub whole: Vec<bool>,
    /// (slot, argument register 0..=5), each once: what firings store.
    pub writes: Vec<(u8, u8)>,
    /// Slots whose strings are captured.
    pub strings: Vec<u8>,
    /// (slot, size): the bytes captured behind a slot, the largest constant size asked.
    pub buffers: Vec<(u8, u32)>,
    /// Per clause of the program: what its firings do (`udtrace_record::pid`'s
    /// [`op_write`], [`op_read`] and [`op_chain`] bits).
    pub clause_ops: Vec<u64>,
    /// Reads at addresses computed at the firing ([`Chain`]), each run where its
    /// clause's ops have its bit.
    pub chains: Vec<Chain>,
    /// The memory the chains capture, by `cap` index.
    pub chain_caps: Vec<ChainCap>,
}

/// A read whose address a firing computes from its registers, saved pointers and the
/// memory it reads on the way (`copyin(arg0 + 8, 16)`, `copyinstr(*(uintptr_t
/// *)copyin(arg1 + 8, 8))`, a pointer member of a struct copied in): a small stack
/// program every backend runs at the firing, recording each read's address and bytes.
/// The consumer takes a capture only where the address it computes is the captured
/// one, so anything the firing computed differently ends as a live read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub ops: Vec<ChainOp>,
}

/// What a chain captures: a string (its bytes are `strsize`) or `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainCap {
    Str,
    Buf(u32),
    /// A size known at the firing, up to `strsize` bytes.
    Upto,
}

impl StashPlan {
    pub fn slot_of(&self, var: usize) -> Option<usize> {
        self.vars.iter().position(|&v| v == var)
    }

    pub fn is_empty(&self) -> bool {
        self.vars.is_empty() && self.chains.is_empty()
    }

    /// Whether `e`, a read of the process's memory (see [`reads_live_memory`]), is
    /// captured at the firing by a chain whose saved pointers, if any, are whole.
    fn chained(&self, e: &Expr, locals: &Locals) -> bool {
        let mut c =
            ChainCompiler { stash: self, locals: locals.clone(), ops: Vec::new(), caps: Vec::new(), slots: Vec::new() };
        // A read of a size known only at the firing may be longer than was captured.
        if c.read(e).is_none()
            || !c.slots.iter().all(|&s| self.whole[usize::from(s)])
            || c.caps.contains(&ChainCap::Upto)
        {
            return false;
        }
        // Its chain, or one that makes this read on its way.
        let ops = strip_caps(&c.ops);
        let ops = ops.strip_suffix(&[ChainOp::Drop]).unwrap_or(&ops);
        self.chains.iter().any(|ch| strip_caps(&ch.ops).starts_with(ops))
    }
}

/// The stash plan of a program whose pid clauses are those `pid_clause` picks.
pub fn stash_plan(prog: &CheckedProgram, pid_clause: impl Fn(&Clause) -> bool) -> StashPlan {
    let plan = stash_plan_of(prog, &pid_clause, None);
    // A variable an address was computed from gets a slot only where a chain uses it.
    let used: Vec<usize> = plan
        .vars
        .iter()
        .enumerate()
        .filter(|&(slot, _)| {
            plan.strings.contains(&(slot as u8))
                || plan.buffers.iter().any(|b| usize::from(b.0) == slot)
                || plan.chains.iter().any(|c| c.ops.contains(&ChainOp::Slot(slot as u8)))
        })
        .map(|(_, &v)| v)
        .collect();
    if used.len() == plan.vars.len() {
        return plan;
    }
    stash_plan_of(prog, &pid_clause, Some(&used))
}

/// The stash plan, its candidate variables `only` those (else every variable a read
/// goes through).
fn stash_plan_of(prog: &CheckedProgram, pid_clause: &dyn Fn(&Clause) -> bool, only: Option<&[usize]>) -> StashPlan {
    // Variables some pid clause reads memory behind.
    let mut read: Vec<usize> = Vec::new();
    for c in prog.clauses.iter().filter(|c| pid_clause(c)) {
        each_expr(c, &mut |e| {
            if let Some(v) = read_var(e).filter(|v| !read.contains(v)) {
                read.push(v);
            }
            // And those an address computed at the firing starts from.
            if is_read(e) && read_var(e).is_none() {
                visit_expr(e, &mut |x| match &x.kind {
                    ExprKind::Var(v) if v.scope == VarScope::Thread && !read.contains(&v.id) => read.push(v.id),
                    _ => {}
                });
            }
        });
    }
    if let Some(only) = only {
        read.retain(|v| only.contains(v));
    }
    // Of those, the ones some pid clause stores an argument in.
    let mut vars: Vec<usize> = Vec::new();
    let mut whole: Vec<bool> = Vec::new();
    let mut writes: Vec<(u8, u8)> = Vec::new();
    let mut clause_writes: Vec<Vec<(usize, u8)>> = vec![Vec::new(); prog.clauses.len()];
    // Variables a clause reads through before it stores them: that read wants the
    // earlier value, and a firing reads after it stores (see the backends).
    let mut read_first: Vec<usize> = Vec::new();
    for (ci, c) in prog.clauses.iter().enumerate() {
        let pid = pid_clause(c);
        let (mut stored, mut first): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        each_expr(c, &mut |e| {
            if let Some(v) = read_var(e).filter(|v| !stored.contains(v)) {
                first.push(v);
            }
            match &e.kind {
                ExprKind::Assign { target: Place::Var(v), value, .. }
                    if !matches!(bare(value).kind, ExprKind::Int(_)) =>
                {
                    stored.push(v.id)
                }
                _ => {}
            }
        });
        read_first.extend(first.into_iter().filter(|v| stored.contains(v)));
        each_expr(c, &mut |e| {
            if let ExprKind::IncDec { target: Place::Var(v), .. } = &e.kind {
                if v.scope == VarScope::Thread {
                    clause_writes[ci].push((v.id, u8::MAX));
                }
            }
            let ExprKind::Assign { target: Place::Var(v), op, value } = &e.kind else { return };
            if v.scope != VarScope::Thread || !read.contains(&v.id) {
                return;
            }
            let reg = match (op, &bare(value).kind) {
                (None, ExprKind::Builtin(Builtin::Arg(n))) if *n < 6 && pid => *n,
                (None, ExprKind::Args(i)) if pid => match i.kind {
                    ExprKind::Int(n) if n < 6 => n as u8,
                    _ => u8::MAX,
                },
                (None, ExprKind::Int(_)) => return,
                _ => u8::MAX,
            };
            clause_writes[ci].push((v.id, reg));
        });
    }
    for cw in &clause_writes {
        for &(var, reg) in cw {
            if !read.contains(&var) {
                continue;
            }
            let slot = match vars.iter().position(|&v| v == var) {
                Some(s) => s,
                None if vars.len() < MAX_STASH_SLOTS && reg != u8::MAX => {
                    vars.push(var);
                    whole.push(true);
                    vars.len() - 1
                }
                None => continue,
            };
            if reg != u8::MAX && !writes.contains(&(slot as u8, reg)) {
                writes.push((slot as u8, reg));
            }
        }
    }
    for &v in &read_first {
        if let Some(s) = vars.iter().position(|&x| x == v) {
            whole[s] = false;
        }
    }
    // A variable also assigned from anything else is not whole.
    for cw in &clause_writes {
        for &(var, reg) in cw {
            if let (Some(s), u8::MAX) = (vars.iter().position(|&v| v == var), reg) {
                whole[s] = false;
            }
        }
    }
    let mut plan = StashPlan { vars, whole, writes, ..StashPlan::default() };
    plan.clause_ops = prog
        .clauses
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            if !pid_clause(c) {
                return 0;
            }
            let mut ops = 0u64;
            for &(var, reg) in &clause_writes[ci] {
                if let Some(slot) = plan.slot_of(var) {
                    if let Some(i) = plan.writes.iter().position(|&w| w == (slot as u8, reg)) {
                        ops |= op_write(i);
                    }
                }
            }
            // Reads at computed addresses: one chain each (the same read twice, once;
            // a read that another's chain makes on its way, none).
            let mut found: Vec<(Vec<ChainOp>, Vec<ChainCap>, Vec<u8>)> = Vec::new();
            walk_reads(c, &mut |e, locals| {
                if read_var(e).is_some() || arg_capture(e) {
                    return;
                }
                let mut cc = ChainCompiler {
                    stash: &plan,
                    locals: locals.clone(),
                    ops: Vec::new(),
                    caps: Vec::new(),
                    slots: Vec::new(),
                };
                if cc.read(e).is_some() {
                    found.push((cc.ops, cc.caps, cc.slots));
                }
            });
            let inside = |a: &[ChainOp], b: &[ChainOp]| {
                let a = strip_caps(a);
                let a = a.strip_suffix(&[ChainOp::Drop]).unwrap_or(&a);
                let b = strip_caps(b);
                a.len() < b.len() && b.starts_with(a)
            };
            for (i, (chain_ops, caps, slots)) in found.iter().enumerate() {
                if found.iter().enumerate().any(|(j, other)| j != i && inside(chain_ops, &other.0)) {
                    continue;
                }
                let base = plan.chain_caps.len() as u8;
                let chain: Vec<ChainOp> = chain_ops.iter().map(|op| op.map_cap(|cap| cap + base)).collect();
                let k = match plan.chains.iter().position(|ch| strip_caps(&ch.ops) == strip_caps(&chain)) {
                    Some(k) => k,
                    None if plan.chains.len() < MAX_CHAINS && plan.chain_caps.len() + caps.len() <= 255 => {
                        plan.chain_caps.extend(caps);
                        plan.chains.push(Chain { ops: chain });
                        plan.chains.len() - 1
                    }
                    None => continue,
                };
                ops |= op_chain(k);
                for &slot in slots {
                    ops |= op_read(usize::from(slot));
                }
            }
            each_expr(c, &mut |e| {
                let (var, size) = match &e.kind {
                    ExprKind::Cast(x) if stringof(e) => (stashed_var(std::slice::from_ref(x)), None),
                    ExprKind::Call(Subr::Copyinstr, args) => (stashed_var(args), None),
                    ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => {
                        let Some(size) = constant_size(args) else { return };
                        (stashed_var(args), Some(size))
                    }
                    _ => return,
                };
                let Some(slot) = var.and_then(|v| plan.slot_of(v)) else { return };
                ops |= op_read(slot);
                match size {
                    None if !plan.strings.contains(&(slot as u8)) => plan.strings.push(slot as u8),
                    None => {}
                    Some(size) => add_buffer(&mut plan.buffers, slot as u8, size),
                }
            });
            ops
        })
        .collect();
    plan.strings.sort_unstable();
    plan
}

/// A chain's ops without their capture numbers (two reads of the same address
/// expression are one chain).
fn strip_caps(ops: &[ChainOp]) -> Vec<ChainOp> {
    ops.iter().map(|op| op.map_cap(|_| 0)).collect()
}

/// Whether `e` reads the process's memory: `copyinstr`, `copyin`, `copyinto`,
/// `stringof` of an integer.
fn is_read(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Call(Subr::Copyinstr | Subr::Copyin | Subr::Copyinto, _)) || stringof(e)
}

/// Whether the firing's argument captures take read `e` (`copyinstr(argN)`, …).
fn arg_capture(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Call(Subr::Copyinstr, args) => captured_string(args).is_some(),
        ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => captured_buffer(args).is_some(),
        ExprKind::Cast(x) => stringof(e) && captured_string(std::slice::from_ref(x)).is_some(),
        _ => false,
    }
}

/// Turns a read and the address expressions under it into a [`Chain`].
struct ChainCompiler<'a> {
    stash: &'a StashPlan,
    /// What `this->` variables hold where the read is.
    locals: Locals,
    ops: Vec<ChainOp>,
    /// This chain's captures, numbered from 0.
    caps: Vec<ChainCap>,
    /// The stash slots it reads.
    slots: Vec<u8>,
}

impl ChainCompiler<'_> {
    /// A top-level read: the address, then the capture.
    fn read(&mut self, e: &Expr) -> Option<()> {
        match &e.kind {
            ExprKind::Call(Subr::Copyinstr, args) => {
                self.value(args.first()?)?;
                self.caps.push(ChainCap::Str);
                self.ops.push(ChainOp::Str { cap: (self.caps.len() - 1) as u8 });
            }
            ExprKind::Cast(x) if stringof(e) => {
                self.value(x)?;
                self.caps.push(ChainCap::Str);
                self.ops.push(ChainOp::Str { cap: (self.caps.len() - 1) as u8 });
            }
            ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => {
                self.copyin(args)?;
                self.ops.push(ChainOp::Drop);
            }
            _ => return None,
        }
        (self.depth() == Some(0)).then_some(())
    }

    /// `copyin(A, SIZE)` with SIZE constant: A, then the capture; the capture's
    /// number.
    fn copyin(&mut self, args: &[Expr]) -> Option<u8> {
        self.value(args.first()?)?;
        let Some(size) = constant_size(args) else {
            // A size known at the firing: as much of it as `strsize` bytes hold.
            self.value(args.get(1)?)?;
            self.caps.push(ChainCap::Upto);
            let cap = (self.caps.len() - 1) as u8;
            self.ops.push(ChainOp::CopyinUpto { cap });
            return Some(cap);
        };
        self.caps.push(ChainCap::Buf(size));
        let cap = (self.caps.len() - 1) as u8;
        self.ops.push(ChainOp::Copyin { cap });
        Some(cap)
    }

    /// Code that pushes the value of `e`.
    fn value(&mut self, e: &Expr) -> Option<()> {
        match &e.kind {
            ExprKind::Int(n) => self.ops.push(ChainOp::Const(*n)),
            ExprKind::Builtin(Builtin::Arg(n)) if *n < 6 => self.ops.push(ChainOp::Arg(PtReg::ARGS[usize::from(*n)])),
            ExprKind::Args(i) => match i.kind {
                ExprKind::Int(n) if n < 6 => self.ops.push(ChainOp::Arg(PtReg::ARGS[n as usize])),
                _ => return None,
            },
            ExprKind::Var(v) if v.scope == VarScope::Clause => self.local(v.id, |c, x| c.value(x))?,
            ExprKind::Var(v) if v.scope == VarScope::Thread => {
                let slot = self.stash.slot_of(v.id)? as u8;
                if !self.slots.contains(&slot) {
                    self.slots.push(slot);
                }
                self.ops.push(ChainOp::Slot(slot));
            }
            // Only conversions that keep all 64 bits.
            ExprKind::Cast(x) if e.ty.int_shape()?.size == 8 && x.ty.int_shape()?.size == 8 => self.value(x)?,
            ExprKind::NonNull(x) => self.value(x)?,
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let bin = match op {
                    BinaryOp::Add => ChainBin::Add,
                    BinaryOp::Sub => ChainBin::Sub,
                    BinaryOp::Mul => ChainBin::Mul,
                    BinaryOp::BitAnd => ChainBin::And,
                    BinaryOp::BitOr => ChainBin::Or,
                    BinaryOp::Shl => ChainBin::Shl,
                    BinaryOp::Shr if !matches!(e.ty.int_shape(), Some(i) if i.signed) => ChainBin::Shr,
                    _ => return None,
                };
                if e.ty.int_shape()?.size != 8 {
                    return None;
                }
                self.value(lhs)?;
                self.value(rhs)?;
                self.ops.push(ChainOp::Bin(bin));
            }
            ExprKind::Load(p) => {
                let shape = e.ty.int_shape()?;
                let (cap, off) = self.scratch(p)?;
                let ChainCap::Buf(size) = self.caps[usize::from(cap)] else { return None };
                if off.checked_add(u64::from(shape.size))? > u64::from(size) {
                    return None;
                }
                self.ops.push(ChainOp::Field { cap, off: off as u32, size: shape.size, signed: shape.signed });
            }
            _ => return None,
        }
        if self.depth()? > MAX_CHAIN_DEPTH {
            return None;
        }
        Some(())
    }

    /// A pointer into what a `copyin()` of the chain copied, at a constant offset:
    /// the copy is captured (its pointer dropped: loads read the capture).
    fn scratch(&mut self, p: &Expr) -> Option<(u8, u64)> {
        match &p.kind {
            ExprKind::Var(v) if v.scope == VarScope::Clause => self.local(v.id, |c, x| c.scratch(x)),
            ExprKind::Cast(x) | ExprKind::NonNull(x) => self.scratch(x),
            ExprKind::Binary { op: BinaryOp::Add, lhs, rhs, .. } => match rhs.kind {
                ExprKind::Int(off) => self.scratch(lhs).and_then(|(cap, o)| Some((cap, o.checked_add(off)?))),
                _ => None,
            },
            ExprKind::Call(Subr::Copyin, args) => {
                let cap = self.copyin(args)?;
                self.ops.push(ChainOp::Drop);
                Some((cap, 0))
            }
            _ => None,
        }
    }

    /// `f` on the value of `this->` variable `id`, with the variables as they were when
    /// it was assigned.
    fn local<T>(&mut self, id: usize, f: impl FnOnce(&mut Self, &Expr) -> Option<T>) -> Option<T> {
        let l = Rc::clone(self.locals.get(&id)?);
        let now = std::mem::replace(&mut self.locals, l.before.clone());
        let r = f(self, &l.value);
        self.locals = now;
        r
    }

    /// The operand stack's depth after the ops so far (None if it underflows).
    fn depth(&self) -> Option<usize> {
        let mut d: usize = 0;
        for op in &self.ops {
            d = match op {
                ChainOp::Const(_) | ChainOp::Arg(_) | ChainOp::Slot(_) | ChainOp::Field { .. } => d + 1,
                ChainOp::Bin(_) => d.checked_sub(1)?,
                ChainOp::Copyin { .. } => d,
                ChainOp::CopyinUpto { .. } => d.checked_sub(1)?,
                ChainOp::Drop | ChainOp::Str { .. } => d.checked_sub(1)?,
            };
        }
        Some(d)
    }
}

/// Calls `f` on every expression of the clause's predicate and actions.
fn each_expr(c: &Clause, f: &mut dyn FnMut(&Expr)) {
    if let Some(pred) = &c.predicate {
        visit_expr(pred, f);
    }
    visit_actions(&c.actions, f);
}

/// `e` without its casts.
fn bare(mut e: &Expr) -> &Expr {
    while let ExprKind::Cast(x) = &e.kind {
        e = x;
    }
    e
}

/// Whether `e` is `stringof(x)` (or `(string)x`) of an integer or pointer `x`: the
/// string at that address in the process.
fn stringof(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Cast(x) if e.ty.is_string() && x.ty.is_scalar() && !x.taint.alloca)
}

/// The thread-local variable whose memory `copyinstr`, `copyin`, `copyinto` or
/// `stringof` reads.
fn read_var(e: &Expr) -> Option<usize> {
    match &e.kind {
        ExprKind::Cast(x) if stringof(e) => stashed_var(std::slice::from_ref(x)),
        ExprKind::Call(Subr::Copyinstr, args) => stashed_var(args),
        ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => constant_size(args).and(stashed_var(args)),
        _ => None,
    }
}

/// The thread-local variable a read's address is (casts aside).
fn stashed_var(args: &[Expr]) -> Option<usize> {
    match &bare(args.first()?).kind {
        ExprKind::Var(v) if v.scope == VarScope::Thread => Some(v.id),
        _ => None,
    }
}

/// The constant size of `copyin(addr, SIZE)`, when captured.
fn constant_size(args: &[Expr]) -> Option<u32> {
    match args.get(1).map(|s| &s.kind) {
        Some(ExprKind::Int(size)) if (1..=u64::from(MAX_BUFFER_BYTES)).contains(size) => Some(*size as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Checker;
    use crate::macros::MacroArgs;
    use crate::parser::{parse_program, DescAlign};

    fn clause_of(src: &str) -> Clause {
        let prog = parse_program(src, DescAlign::Name).expect("parses");
        let macros = MacroArgs::new(vec!["udtrace".into()]);
        let mut c = Checker::new(&macros);
        c.add_source(&prog, 0, src).expect("checks");
        c.finish().clauses.swap_remove(0)
    }

    fn program_of(src: &str) -> CheckedProgram {
        let prog = parse_program(src, DescAlign::Name).expect("parses");
        let macros = MacroArgs::new(vec!["udtrace".into()]);
        let mut c = Checker::new(&macros);
        c.add_source(&prog, 0, src).expect("checks");
        c.finish()
    }

    fn stash_of(src: &str) -> StashPlan {
        stash_plan(&program_of(src), |c| c.probes.iter().any(|d| d.provider.starts_with("pid")))
    }

    #[test]
    fn arguments_saved_for_a_later_firing_are_stashed() {
        let src = "pid1::open:entry { self->path = arg0; self->buf = (uintptr_t)arg1; }
                   pid1::open:return /self->path/ { printf(\"%s\", copyinstr(self->path)); self->path = 0; }
                   pid1::read:return { tracemem(copyin(self->buf, 16), 16); trace(*(int *)copyin(self->buf, 4)); }";
        let s = stash_of(src);
        assert_eq!(s.vars.len(), 2);
        assert_eq!(s.whole, vec![true, true]);
        assert_eq!(s.writes, vec![(0, 0), (1, 1)]);
        assert_eq!(s.strings, vec![0]);
        assert_eq!(s.buffers, vec![(1, 16)]);
        let w = op_write(0) | op_write(1);
        assert_eq!(s.clause_ops, vec![w, op_read(0), op_read(1)]);
        let prog = program_of(src);
        assert!(!reads_live_memory(&prog.clauses[1], &s));
        assert!(!reads_live_memory(&prog.clauses[2], &s));
        assert!(reads_live_memory(&prog.clauses[1], &StashPlan::default()));
    }

    #[test]
    fn variables_assigned_otherwise_are_read_live_too() {
        // Also assigned a computed address: stashed where it is an argument, but its
        // reads may need the live process.
        let src = "pid1::f:entry { self->p = arg0; } pid1::g:entry { self->p = arg1 + 8; }
                   pid1::f:return { trace(copyinstr(self->p)); }";
        let s = stash_of(src);
        assert_eq!((s.vars.len(), s.whole.clone(), s.writes.clone()), (1, vec![false], vec![(0, 0)]));
        assert!(reads_live_memory(&program_of(src).clauses[2], &s));
        // Incremented: the same.
        assert_eq!(
            stash_of("pid1::f:entry { self->p = arg0; self->p++; } pid1::f:return { trace(copyinstr(self->p)); }")
                .whole,
            vec![false]
        );
        // Never stored from an argument, or never read through: nothing stashed.
        assert!(
            stash_of("pid1::f:entry { self->p = arg0 + 1; } pid1::f:return { trace(copyinstr(self->p)); }").is_empty()
        );
        assert!(stash_of("pid1::f:entry { self->p = arg0; } pid1::f:return { trace(self->p); }").is_empty());
        // stringof() of a saved pointer is captured as copyinstr() is.
        let s = stash_of("pid1::f:entry { self->p = arg0; } pid1::f:return { trace(stringof(self->p)); }");
        assert_eq!((s.strings.clone(), s.whole.clone()), (vec![0], vec![true]));
        // Read, then stored again, in one clause: the read wants the earlier value.
        let s = stash_of("self uintptr_t p; pid1::f:entry { trace(copyinstr(self->p)); self->p = arg0; }");
        assert_eq!((s.writes.clone(), s.whole.clone()), (vec![(0, 0)], vec![false]));
        // Stored, then read: the read is of what was stored.
        assert_eq!(stash_of("pid1::f:entry { self->p = arg0; trace(copyinstr(self->p)); }").whole, vec![true]);
        // Stored in a clause of another provider: not a pid argument.
        assert!(stash_of("BEGIN { self->p = arg0; } pid1::f:return { trace(copyinstr(self->p)); }").is_empty());
        // A size known only at the firing: captured up to strsize, still read live
        // when longer.
        let src = "pid1::f:entry { self->p = arg0; } pid1::f:return { trace(copyin(self->p, arg1)); }";
        let s = stash_of(src);
        assert_eq!(
            s.chains[0].ops,
            vec![ChainOp::Slot(0), ChainOp::Arg(PtReg::Si), ChainOp::CopyinUpto { cap: 0 }, ChainOp::Drop]
        );
        assert!(reads_live_memory(&program_of(src).clauses[1], &s));
    }

    #[test]
    fn clause_local_variables_are_followed_into_chains() {
        use ChainOp::*;
        let src = "struct s { int a; char *name; };
                   pid1::f:entry { this->s = (struct s *)copyin(arg0, sizeof (struct s)); trace(copyinstr((uintptr_t)this->s->name)); }";
        let s = stash_of(src);
        assert_eq!(s.chains.len(), 1, "{:?}", s.chains);
        assert_eq!(
            s.chains[0].ops,
            vec![
                Arg(PtReg::Di),
                Copyin { cap: 0 },
                Drop,
                Field { cap: 0, off: 8, size: 8, signed: false },
                Str { cap: 1 }
            ]
        );
        assert!(!reads_live_memory(&program_of(src).clauses[0], &s));
        // Its earlier value where it is assigned again from itself.
        let s = stash_of("pid1::f:entry { this->p = arg0; this->p = this->p + 8; trace(copyinstr(this->p)); }");
        assert_eq!(s.chains[0].ops, vec![Arg(PtReg::Di), Const(8), Bin(ChainBin::Add), Str { cap: 0 }]);
        // Assigned in a branch: unknown after it.
        let src = "pid1::f:entry { this->p = arg0; if (arg1) { this->p = arg2; } trace(copyinstr(this->p)); }";
        let s = stash_of(src);
        assert!(s.chains.is_empty(), "{:?}", s.chains);
        assert!(reads_live_memory(&program_of(src).clauses[0], &s));
    }

    #[test]
    fn reads_at_computed_addresses_become_chains() {
        use ChainOp::*;
        let src = "struct s { int a; char *name; };
                   pid1::f:entry { trace(copyinstr(*(uintptr_t *)copyin(arg1 + 8, 8))); }
                   pid1::g:entry { trace(copyinstr((uintptr_t)((struct s *)copyin(arg0, sizeof (struct s)))->name)); }
                   pid1::g:return { trace(copyinstr(*(uintptr_t *)copyin(arg1 + 8, 8))); trace(copyin(arg2 + 4, 4)); }";
        let s = stash_of(src);
        assert_eq!(s.chains.len(), 3, "{:?}", s.chains);
        assert_eq!(
            s.chains[0].ops,
            vec![
                Arg(PtReg::Si),
                Const(8),
                Bin(ChainBin::Add),
                Copyin { cap: 0 },
                Drop,
                Field { cap: 0, off: 0, size: 8, signed: false },
                Str { cap: 1 }
            ]
        );
        assert_eq!(
            s.chains[1].ops,
            vec![
                Arg(PtReg::Di),
                Copyin { cap: 2 },
                Drop,
                Field { cap: 2, off: 8, size: 8, signed: false },
                Str { cap: 3 }
            ]
        );
        assert_eq!(s.chains[2].ops, vec![Arg(PtReg::Dx), Const(4), Bin(ChainBin::Add), Copyin { cap: 4 }, Drop]);
        assert_eq!(
            s.chain_caps,
            vec![ChainCap::Buf(8), ChainCap::Str, ChainCap::Buf(16), ChainCap::Str, ChainCap::Buf(4)]
        );
        // The same read in two clauses is one chain; the copyin a chain makes on its
        // way is none of its own.
        assert_eq!(s.clause_ops, vec![op_chain(0), op_chain(1), op_chain(0) | op_chain(2)]);
        let prog = program_of(src);
        assert!(prog.clauses.iter().all(|c| !reads_live_memory(c, &s)));
        // A saved pointer a chain starts from is stashed.
        let s = stash_of("pid1::f:entry { self->argv = arg1; } pid1::f:return { trace(copyinstr(*(uintptr_t *)copyin(self->argv + 8, 8))); }");
        assert_eq!(s.chains[0].ops[0], Slot(0));
        assert_eq!(s.clause_ops[1], op_chain(0) | op_read(0));
        // A size known at the firing: up to strsize bytes captured, and the read still
        // counted live (it may be longer).
        let src = "pid1::f:entry { trace(stringof(copyin(arg1, arg2))); }";
        let s = stash_of(src);
        assert_eq!(s.chains[0].ops, vec![Arg(PtReg::Si), Arg(PtReg::Dx), CopyinUpto { cap: 0 }, Drop]);
        assert_eq!(s.chain_caps, vec![ChainCap::Upto]);
        assert!(reads_live_memory(&program_of(src).clauses[0], &s));
        // What no chain can compute is read live: a variable offset, a 32-bit
        // conversion.
        for src in [
            "pid1::f:entry { trace(copyinstr(((uintptr_t *)copyin(arg0, 16))[arg1])); }",
            "pid1::f:entry { trace(copyinstr((int)arg0 + 1)); }",
        ] {
            let s = stash_of(src);
            assert!(s.chains.is_empty(), "{src}: {:?}", s.chains);
            assert!(reads_live_memory(&program_of(src).clauses[0], &s), "{src}");
        }
    }

    fn plan_of(src: &str) -> CapturePlan {
        plan(&clause_of(src), &Options::default())
    }

    #[test]
    fn stacks_are_copied_by_the_frames_asked_for() {
        let with = |src: &str, ustackframes: u64, maxframes: Option<u64>| {
            plan(&clause_of(src), &Options { ustackframes, maxframes, ..Options::default() }).stack_bytes
        };
        // 8 KiB per 100 frames, never less, at most the record's 16 KiB.
        assert_eq!(with("BEGIN { ustack(); }", 100, None), 8192);
        assert_eq!(with("BEGIN { ustack(); }", 5, None), 8192);
        assert_eq!(with("BEGIN { ustack(); }", 150, None), 12288);
        assert_eq!(with("BEGIN { @[ustack()] = count(); }", 200, None), 16384);
        assert_eq!(with("BEGIN { trace(ustackdepth); }", 1000, None), 16384);
        assert_eq!(with("BEGIN { ustack(); }", u64::MAX, None), 16384);
        assert_eq!(with("BEGIN { ustack(); }", 101, None), 8280);
        // ustack(N) asks for N frames, whatever ustackframes says; maxframes caps all.
        assert_eq!(with("BEGIN { @[ustack(150)] = count(); }", 100, None), 12288);
        assert_eq!(with("BEGIN { if (arg0) { ustack(50); } else { ustack(200); } }", 100, None), 16384);
        assert_eq!(with("BEGIN { ustack(200); }", 100, Some(100)), 8192);
        assert_eq!(with("BEGIN { ustack(); }", 200, Some(150)), 12288);
        // ucaller keeps its few bytes.
        assert_eq!(with("BEGIN { trace(ucaller); }", 200, None), UCALLER_STACK_BYTES);
    }

    #[test]
    fn plans_follow_what_clauses_read() {
        assert_eq!(plan_of("BEGIN { x = 1; @ = count(); }"), CapturePlan::default());
        assert_eq!(plan_of("BEGIN { x = arg0; }"), CapturePlan { args: 1, ..CapturePlan::default() });
        assert!(plan_of("BEGIN { x = uregs[R_SP]; }").regs);
        assert!(plan_of("BEGIN { @[ustack()] = count(); }").regs);
        let p = plan_of("BEGIN /progenyof(1)/ { trace(curpsinfo->pr_pid); }");
        assert!(p.cur_task && p.ancestors && p.args == 0);
        assert_eq!(plan_of("pid1::f:entry { trace(args[2]); trace(arg1); }").args, 0b110);
        assert_eq!(plan_of("pid1::f:entry { trace(args[arg0]); }").args, u16::MAX);
        assert_eq!(plan_of("BEGIN { printf(\"%s\", copyinstr(arg1)); }").strings, vec![1]);
        assert_eq!(plan_of("BEGIN /copyinstr(arg0) == \"a\"/ { @[copyinstr(arg2)] = count(); }").strings, vec![0, 2]);
        assert_eq!(plan_of("BEGIN { @[ustack()] = count(); }").stack_bytes, USTACK_BYTES);
        assert_eq!(plan_of("BEGIN { ustack(); }").stack_bytes, USTACK_BYTES);
        assert_eq!(plan_of("BEGIN { trace(arg7); }").stack_bytes, ARGS_STACK_BYTES);
        // stringof() of an argument is its string too.
        assert_eq!(plan_of("BEGIN { trace(stringof(arg3)); }").strings, vec![3]);
        assert!(plan_of("BEGIN { trace(stringof(\"abc\")); }").strings.is_empty());
        // A computed address is read from the live process instead.
        assert!(plan_of("BEGIN { trace(copyinstr(arg0 + 8)); }").strings.is_empty());
    }

    #[test]
    fn reads_of_computed_addresses_are_told_apart() {
        let live = |src: &str| reads_live_memory(&clause_of(src), &StashPlan::default());
        assert!(!live("BEGIN { trace(copyinstr(arg0)); trace(*(int *)copyin(arg1, 4)); }"));
        assert!(live("BEGIN { trace(copyinstr(arg0 + 8)); }"));
        assert!(live("BEGIN /copyinstr(arg0 + arg1) != \"\"/ { }"));
        assert!(live("BEGIN { trace(*(int *)copyin(arg1, arg2)); }"));
        assert!(!live("BEGIN { trace(arg0); }"));
    }

    #[test]
    fn constant_copyins_of_arguments_are_captured() {
        let p = plan_of("BEGIN { trace(*(int *)copyin(arg1, 4)); }");
        assert_eq!(p.buffers, vec![(1, 4)]);
        assert!(p.regs && p.strings.is_empty());
        // One capture per register, the largest size; sorted by register.
        let p = plan_of("BEGIN / *(int *)copyin(arg2, 4) == 1 / { tracemem(copyin(arg0, 16), 16); trace(*(long *)copyin(arg2, sizeof (long))); }");
        assert_eq!(p.buffers, vec![(0, 16), (2, 8)]);
        assert_eq!(plan_of("BEGIN { copyinto(arg3, 12, alloca(12)); }").buffers, vec![(3, 12)]);
        let big = "#pragma D option scratchsize=8192\nBEGIN { trace(*(char *)copyin(arg0, 4096)); }";
        assert_eq!(plan_of(big).buffers, vec![(0, 4096)]);
        // Computed sizes and addresses, sizes past the bound, stack arguments: read
        // when consumed.
        for src in [
            "BEGIN { trace(*(char *)copyin(arg0, arg1)); }",
            "BEGIN { trace(*(char *)copyin(arg0 + 8, 4)); }",
            "#pragma D option scratchsize=8192\nBEGIN { trace(*(char *)copyin(arg0, 4097)); }",
            "BEGIN { trace(*(char *)copyin(arg6, 4)); }",
        ] {
            assert!(plan_of(src).buffers.is_empty(), "{src}");
        }
        // Clauses merged: per register the largest.
        let mut p = plan_of("BEGIN { trace(*(char *)copyin(arg0, 8)); }");
        p.merge(&plan_of("BEGIN { trace(*(char *)copyin(arg0, 32)); trace(*(char *)copyin(arg5, 2)); }"));
        p.merge(&plan_of("BEGIN { trace(*(char *)copyin(arg0, 16)); }"));
        assert_eq!(p.buffers, vec![(0, 32), (5, 2)]);
    }
}
