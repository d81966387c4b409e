//! The checked program: names resolved to slots, every expression typed, every action
//! chosen. The runtime interprets this; the backends read its probe descriptions and,
//! through `capture`, what each clause needs recorded at the instant of a firing.

use std::rc::Rc;

use crate::ast::{BinaryOp, ProbeDesc, VarScope};
use crate::span::Span;
use crate::types::{BitField, Type, TypeTable};

/// A whole checked program: all sources of one udtrace invocation.
#[derive(Debug, Clone, Default)]
pub struct CheckedProgram {
    pub clauses: Vec<Clause>,
    pub globals: Vec<VarInfo>,
    pub thread_vars: Vec<VarInfo>,
    pub clause_vars: Vec<VarInfo>,
    pub aggs: Vec<AggInfo>,
    /// `#pragma D option` settings in program order; the caller validates them
    /// against its option table.
    pub options: Vec<PragmaOption>,
    pub types: TypeTable,
    /// The providers the program defines (`provider foo { probe bar(int); };`), in
    /// the order of their first definition.
    pub providers: Vec<ProviderInfo>,
}

/// A provider definition, checked.
#[derive(Debug, Clone)]
pub struct ProviderInfo {
    pub name: String,
    pub probes: Vec<ProbeInfo>,
}

/// One probe of a provider definition.
#[derive(Debug, Clone)]
pub struct ProbeInfo {
    /// The probe's name, `__` made `-` (`query-start`).
    pub name: String,
    /// As declared (`query__start`): the name its stapsdt note carries.
    pub declared: String,
    /// The types the program passes.
    pub native: Vec<Type>,
    /// The types D clauses see (the native ones unless the definition translates).
    pub translated: Vec<Type>,
}

#[derive(Debug, Clone)]
pub struct PragmaOption {
    pub name: String,
    pub value: Option<String>,
    pub source: usize,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub struct VarInfo {
    pub name: String,
    pub ty: Type,
    /// Key types of an associative array; `None` for a scalar.
    pub keys: Option<Vec<Type>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarRef {
    pub scope: VarScope,
    pub id: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    Stddev,
    Quantize,
    Lquantize,
    Llquantize,
}

impl AggKind {
    pub fn from_name(name: &str) -> Option<AggKind> {
        Some(match name {
            "count" => AggKind::Count,
            "sum" => AggKind::Sum,
            "avg" => AggKind::Avg,
            "min" => AggKind::Min,
            "max" => AggKind::Max,
            "stddev" => AggKind::Stddev,
            "quantize" => AggKind::Quantize,
            "lquantize" => AggKind::Lquantize,
            "llquantize" => AggKind::Llquantize,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            AggKind::Count => "count",
            AggKind::Sum => "sum",
            AggKind::Avg => "avg",
            AggKind::Min => "min",
            AggKind::Max => "max",
            AggKind::Stddev => "stddev",
            AggKind::Quantize => "quantize",
            AggKind::Lquantize => "lquantize",
            AggKind::Llquantize => "llquantize",
        }
    }
}

#[derive(Debug, Clone)]
pub struct AggInfo {
    /// Without the `@`; empty for the anonymous `@`.
    pub name: String,
    pub kind: AggKind,
    /// Constant parameters: lquantize `[base, limit, step]`, llquantize
    /// `[factor, low, high, nsteps]`, empty otherwise.
    pub params: Vec<i64>,
    pub keys: Vec<Type>,
    /// Where it was first used, for messages.
    pub span: Span,
    /// The line of that first use in its source.
    pub line: u32,
}

/// One clause: probe descriptions (macros substituted), predicate, actions.
#[derive(Debug, Clone)]
pub struct Clause {
    /// Index of the `-n`/`-s`/… source it came from.
    pub source: usize,
    pub probes: Vec<ProbeDesc>,
    pub predicate: Option<Expr>,
    pub actions: Vec<Action>,
    /// DTrace prints a `CPU ID FUNCTION:NAME` line (without `-q`) for a firing of a
    /// clause that records data; a clause whose statements are all aggregations
    /// records none.
    pub records_data: bool,
    /// It has destructive actions (system(), raise(), copyout(), …): tracing needs
    /// `-w` to enable it.
    pub destructive: bool,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub enum Action {
    /// An expression evaluated for its effect (assignments, `++`, …).
    Eval(Expr),
    Trace(Expr),
    Tracemem {
        addr: Expr,
        size: u64,
        dsize: Option<Expr>,
    },
    /// `print(p)`: the object `p` points to, of type `ty`, member by member.
    Print {
        addr: Expr,
        ty: Type,
    },
    Printf {
        format: Rc<str>,
        format_span: Span,
        args: Vec<Expr>,
    },
    Printa {
        format: Option<(Rc<str>, Span)>,
        aggs: Vec<usize>,
    },
    AggUpdate {
        agg: usize,
        keys: Vec<Expr>,
        args: Vec<Expr>,
    },
    Exit(Expr),
    Clear(usize),
    Trunc {
        agg: usize,
        keep: Option<Expr>,
    },
    Normalize {
        agg: usize,
        factor: Expr,
    },
    Denormalize(usize),
    Setopt {
        name: String,
        value: Option<String>,
    },
    Speculate(Expr),
    Commit(Expr),
    Discard(Expr),
    /// `usym()`, `ufunc()`, `umod()`, `uaddr()`, `sym()`, `func()`, `mod()` as actions:
    /// trace the address as a symbol (its expression has a `Type::Symbol`).
    Symbol(Expr),
    /// `stack()`/`ustack()` as actions: trace the stack.
    Stack {
        user: bool,
        frames: Option<u32>,
    },
    If {
        cond: Expr,
        then: Vec<Action>,
        otherwise: Vec<Action>,
    },
    /// `system(fmt, …)` (destructive; needs `-w`).
    System {
        format: Rc<str>,
        format_span: Span,
        args: Vec<Expr>,
    },
    /// `freopen(fmt, …)` (destructive): later output appends to the file named; an
    /// empty name restores the original output.
    Freopen {
        format: Rc<str>,
        format_span: Span,
        args: Vec<Expr>,
    },
    Raise(Expr),
    Stop,
    /// `ftruncate()`: empties the output file, at this place in the output.
    Ftruncate,
    /// `printm`, … accepted for compatibility but doing nothing here.
    Nop,
}

#[derive(Debug, Clone)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Type,
    pub span: Span,
    /// Whether the value derives from an `alloca()` pointer (see [`Taint`]).
    pub taint: Taint,
}

/// DTrace's alloca taint. A pointer that `alloca()` (or `copyin()`) returned is an
/// offset into the clause's scratch space, and so is everything computed from it;
/// memory accesses through a tainted pointer go to scratch space, checked against
/// what the clause allocated, and all others to the traced process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Taint {
    pub alloca: bool,
    /// A `?:` with one alloca and one non-alloca branch: no variable may hold it,
    /// since whether it is an offset would depend on the branch taken.
    pub mixed: bool,
}

impl Taint {
    pub const ALLOCA: Taint = Taint { alloca: true, mixed: false };

    pub fn or(self, other: Taint) -> Taint {
        Taint { alloca: self.alloca || other.alloca, mixed: self.mixed || other.mixed }
    }
}

/// Built-in variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    Arg(u8),
    Caller,
    Ucaller,
    Cpu,
    Epid,
    Id,
    Errno,
    Execname,
    Pid,
    Ppid,
    Tid,
    Uid,
    Gid,
    Timestamp,
    Vtimestamp,
    Walltimestamp,
    Probeprov,
    Probemod,
    Probefunc,
    Probename,
    Stackdepth,
    Ustackdepth,
    Curthread,
    /// The proc provider's `psinfo_t *` and `lwpsinfo_t *` of the current thread.
    Curpsinfo,
    Curlwpsinfo,
    /// `cpuinfo_t *` of the CPU the probe fired on.
    Curcpu,
    Ipl,
    Cwd,
    Root,
}

/// Subroutines: calls that compute a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subr {
    Strlen,
    Strjoin,
    Substr,
    Index,
    Rindex,
    Strstr,
    Strchr,
    Strrchr,
    Strtok,
    Basename,
    Dirname,
    Lltostr,
    Strtoll,
    Toupper,
    Tolower,
    Rand,
    Speculation,
    Copyinstr,
    Copyin,
    Progenyof,
    Htons,
    Htonl,
    Htonll,
    Ntohs,
    Ntohl,
    Ntohll,
    /// `stack()`/`ustack()` used as a value (an aggregation key).
    Stack {
        user: bool,
    },
    /// `usym()`, `ufunc()`, …: only the type changes.
    Symbol,
    Alloca,
    Bcopy,
    Copyinto,
    Copyout,
    Copyoutstr,
    Cleanpath,
    Getmajor,
    Getminor,
    InetNtoa,
    InetNtoa6,
    InetNtop,
    LinkNtop,
    /// `pcap(skb, proto)`: there are no socket buffers to capture in user space.
    Pcap,
    /// `s[i] = c` on a string variable `s`: the string with its byte `i` set to `c`
    /// (a NUL cuts it there), which the assignment stores back into `s`.
    StrSetChar,
    /// Subroutines on kernel objects (`mutex_owned()`, `d_path()`, …): DTrace's
    /// prototypes are checked, but a program cannot use them here.
    Kernel,
}

#[derive(Debug, Clone)]
pub enum ExprKind {
    /// An integer constant, already wrapped to the expression's type.
    Int(u64),
    Str(Rc<[u8]>),
    Var(VarRef),
    /// `a[k…]` for an associative array (global or `self->`).
    ArrayGet {
        var: VarRef,
        keys: Vec<Expr>,
    },
    Builtin(Builtin),
    /// `args[i]`
    Args(Box<Expr>),
    /// `uregs[i]`
    Uregs(Box<Expr>),
    Neg(Box<Expr>),
    BitNot(Box<Expr>),
    /// A pointer that `->` reads through: a NULL one faults at address 0, as
    /// DTrace checks the pointer before adding the member's offset.
    NonNull(Box<Expr>),
    Not(Box<Expr>),
    /// Arithmetic, bitwise, shifts and integer comparisons, computed in `shape`
    /// (the operands' converted type). Pointer arithmetic is already scaled.
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        signed: bool,
    },
    /// String comparisons: strcmp semantics.
    StrCmp {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `&&`, `||`, `^^` (short-circuit where C does).
    Logical {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    Assign {
        target: Place,
        op: Option<BinaryOp>,
        value: Box<Expr>,
    },
    IncDec {
        target: Place,
        increment: bool,
        prefix: bool,
    },
    /// A conversion to `ty`: integer truncation/extension, or a `char *` read as a string.
    Cast(Box<Expr>),
    Call(Subr, Vec<Expr>),
    /// Reads `ty` from the traced process's memory at the address `addr` evaluates to.
    Load(Box<Expr>),
    /// A member of a struct value held in a D variable (the base is bytes).
    Field {
        base: Box<Expr>,
        offset: u64,
    },
    /// A bit-field: its bits of the storage unit `unit` reads, sign-extended from
    /// the field's width when the field's type is signed.
    BitField {
        unit: Box<Expr>,
        bits: BitField,
    },
    Comma(Box<Expr>, Box<Expr>),
    /// `s[i]` (and `*s`) on a string: the char at offset `index`.
    StrChar {
        base: Box<Expr>,
        index: Box<Expr>,
    },
    /// The address of a (non-dynamic) variable's storage in D memory.
    VarAddr(VarRef),
    /// An array index checked at run time: `index` itself, or a fault
    /// ("index out of bounds") when it is not below `len`.
    IndexCheck {
        index: Box<Expr>,
        len: u64,
    },
    /// `s + n`: the string starting `offset` chars into `base`.
    StrOffset {
        base: Box<Expr>,
        offset: Box<Expr>,
    },
}

/// Something that can be assigned.
#[derive(Debug, Clone)]
pub enum Place {
    Var(VarRef),
    Array {
        var: VarRef,
        keys: Vec<Expr>,
    },
    /// A member of a struct or union held in a D variable (`s.x`, `a[k].x`):
    /// `ty` at byte `offset` of `base`, whose type is `record`.
    Field {
        base: Box<Place>,
        record: Type,
        offset: u64,
        ty: Type,
        /// For a bit-field, its bits within the `ty`-sized unit at `offset`.
        bits: Option<BitField>,
    },
    /// Memory through a pointer (`*p`, `p[i]`, `p->m`): scratch space when `addr` is
    /// alloca-tainted, else D's own memory (variables); traced memory cannot be
    /// written.
    Mem {
        addr: Box<Expr>,
        ty: Type,
    },
}

/// Calls `f` on every expression of `actions` (nested ones too), outer first.
pub fn visit_actions(actions: &[Action], f: &mut dyn FnMut(&Expr)) {
    for a in actions {
        match a {
            Action::Eval(e)
            | Action::Trace(e)
            | Action::Symbol(e)
            | Action::Exit(e)
            | Action::Speculate(e)
            | Action::Commit(e)
            | Action::Discard(e)
            | Action::Raise(e)
            | Action::Normalize { factor: e, .. } => visit_expr(e, f),
            Action::Print { addr, .. } => visit_expr(addr, f),
            Action::Tracemem { addr, dsize, .. } => {
                visit_expr(addr, f);
                dsize.iter().for_each(|e| visit_expr(e, f));
            }
            Action::Printf { args, .. } | Action::System { args, .. } | Action::Freopen { args, .. } => {
                args.iter().for_each(|e| visit_expr(e, f));
            }
            Action::AggUpdate { keys, args, .. } => keys.iter().chain(args).for_each(|e| visit_expr(e, f)),
            Action::Trunc { keep, .. } => keep.iter().for_each(|e| visit_expr(e, f)),
            Action::If { cond, then, otherwise } => {
                visit_expr(cond, f);
                visit_actions(then, f);
                visit_actions(otherwise, f);
            }
            Action::Printa { .. }
            | Action::Clear(_)
            | Action::Denormalize(_)
            | Action::Setopt { .. }
            | Action::Stack { .. }
            | Action::Ftruncate
            | Action::Stop
            | Action::Nop => {}
        }
    }
}

/// Calls `f` on `e` and every expression inside it, outer first.
pub fn visit_expr(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Str(_) | ExprKind::Var(_) | ExprKind::Builtin(_) | ExprKind::VarAddr(_) => {}
        ExprKind::ArrayGet { keys, .. } => keys.iter().for_each(|k| visit_expr(k, f)),
        ExprKind::Args(x)
        | ExprKind::Uregs(x)
        | ExprKind::Neg(x)
        | ExprKind::BitNot(x)
        | ExprKind::NonNull(x)
        | ExprKind::Not(x)
        | ExprKind::Cast(x)
        | ExprKind::Load(x)
        | ExprKind::Field { base: x, .. }
        | ExprKind::BitField { unit: x, .. }
        | ExprKind::IndexCheck { index: x, .. } => visit_expr(x, f),
        ExprKind::Binary { lhs, rhs, .. }
        | ExprKind::StrCmp { lhs, rhs, .. }
        | ExprKind::Logical { lhs, rhs, .. }
        | ExprKind::Comma(lhs, rhs)
        | ExprKind::StrChar { base: lhs, index: rhs }
        | ExprKind::StrOffset { base: lhs, offset: rhs } => {
            visit_expr(lhs, f);
            visit_expr(rhs, f);
        }
        ExprKind::Ternary { cond, then, otherwise } => {
            for x in [cond, then, otherwise] {
                visit_expr(x, f);
            }
        }
        ExprKind::Assign { target, value, .. } => {
            visit_place(target, f);
            visit_expr(value, f);
        }
        ExprKind::IncDec { target, .. } => visit_place(target, f),
        ExprKind::Call(_, args) => args.iter().for_each(|a| visit_expr(a, f)),
    }
}

fn visit_place(p: &Place, f: &mut dyn FnMut(&Expr)) {
    match p {
        Place::Var(_) => {}
        Place::Array { keys, .. } => keys.iter().for_each(|k| visit_expr(k, f)),
        Place::Field { base, .. } => visit_place(base, f),
        Place::Mem { addr, .. } => visit_expr(addr, f),
    }
}
