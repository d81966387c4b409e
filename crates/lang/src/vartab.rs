//! The variables each clause uses, as `-S` lists them: DTrace prints, after each
//! clause's code, a table of the variables the code refers to (dt_dis_difo): name,
//! where its storage is, kind, scope, whether it is read and written, and its type.
//! udtrace interprets clauses instead of compiling them to BPF, so it has no code to
//! show; it prints the same variable table, with the storage layout it really uses
//! (DTrace's, see `storage`), and with statement numbers where DTrace gives the
//! instruction range.

use std::fmt::Write;

use crate::ast::VarScope;
use crate::ir::{Action, Builtin, CheckedProgram, Clause, Expr, ExprKind, Place, VarRef};
use crate::storage;
use crate::types::{Type, TypeTable};

/// One variable a clause refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Use {
    var: Var,
    read: bool,
    written: bool,
    /// First and last statement (1 = the predicate) that use it.
    first: usize,
    last: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    User(VarRef),
    Builtin(Builtin),
}

/// The uses found so far, in order of first use, and the statement being walked.
struct Walk {
    uses: Vec<Use>,
    stmt: usize,
}

impl Walk {
    fn note(&mut self, var: Var, read: bool, written: bool) {
        let stmt = self.stmt;
        match self.uses.iter_mut().find(|u| u.var == var) {
            Some(u) => {
                u.read |= read;
                u.written |= written;
                u.last = stmt;
            }
            None => self.uses.push(Use { var, read, written, first: stmt, last: stmt }),
        }
    }

    fn actions(&mut self, list: &[Action]) {
        for a in list {
            self.stmt += 1;
            self.action(a);
        }
    }

    fn action(&mut self, a: &Action) {
        match a {
            Action::Eval(e)
            | Action::Trace(e)
            | Action::Exit(e)
            | Action::Speculate(e)
            | Action::Commit(e)
            | Action::Discard(e)
            | Action::Raise(e)
            | Action::Print { addr: e, .. } => self.expr(e),
            Action::Tracemem { addr, dsize, .. } => {
                self.expr(addr);
                dsize.iter().for_each(|d| self.expr(d));
            }
            Action::Printf { args, .. } | Action::System { args, .. } => args.iter().for_each(|e| self.expr(e)),
            Action::AggUpdate { keys, args, .. } => keys.iter().chain(args).for_each(|e| self.expr(e)),
            Action::Trunc { keep: Some(e), .. } | Action::Normalize { factor: e, .. } => self.expr(e),
            Action::If { cond, then, otherwise } => {
                self.expr(cond);
                then.iter().chain(otherwise).for_each(|a| self.action(a));
            }
            _ => {}
        }
    }

    /// An assignment target: a variable is written; storage reached through a
    /// variable (a member, an element) reads the variable for its address.
    fn place(&mut self, p: &Place, read_too: bool) {
        match p {
            Place::Var(r) => self.note(Var::User(*r), read_too, true),
            Place::Array { var, keys } => {
                keys.iter().for_each(|k| self.expr(k));
                self.note(Var::User(*var), read_too, true);
            }
            Place::Field { base, .. } => self.by_reference(base),
            Place::Mem { addr, .. } => self.expr(addr),
        }
    }

    /// A member of a by-reference variable: DTrace reads the variable (its address)
    /// to store into the member.
    fn by_reference(&mut self, p: &Place) {
        match p {
            Place::Var(r) => self.note(Var::User(*r), true, false),
            Place::Array { var, keys } => {
                keys.iter().for_each(|k| self.expr(k));
                self.note(Var::User(*var), true, false);
            }
            Place::Field { base, .. } => self.by_reference(base),
            Place::Mem { addr, .. } => self.expr(addr),
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Var(r) | ExprKind::VarAddr(r) => self.note(Var::User(*r), true, false),
            ExprKind::ArrayGet { var, keys } => {
                keys.iter().for_each(|k| self.expr(k));
                self.note(Var::User(*var), true, false);
            }
            ExprKind::Builtin(b) => self.note(Var::Builtin(*b), true, false),
            ExprKind::Assign { target, op, value } => {
                self.expr(value);
                self.place(target, op.is_some());
            }
            ExprKind::IncDec { target, .. } => self.place(target, true),
            ExprKind::Args(x)
            | ExprKind::Uregs(x)
            | ExprKind::Neg(x)
            | ExprKind::BitNot(x)
            | ExprKind::NonNull(x)
            | ExprKind::Not(x)
            | ExprKind::Cast(x)
            | ExprKind::Load(x)
            | ExprKind::IndexCheck { index: x, .. }
            | ExprKind::Field { base: x, .. }
            | ExprKind::BitField { unit: x, .. } => self.expr(x),
            ExprKind::Binary { lhs, rhs, .. }
            | ExprKind::StrCmp { lhs, rhs, .. }
            | ExprKind::Logical { lhs, rhs, .. }
            | ExprKind::StrChar { base: lhs, index: rhs }
            | ExprKind::StrOffset { base: lhs, offset: rhs }
            | ExprKind::Comma(lhs, rhs) => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::Ternary { cond, then, otherwise } => {
                self.expr(cond);
                self.expr(then);
                self.expr(otherwise);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| self.expr(a)),
            ExprKind::Int(_) | ExprKind::Str(_) => {}
        }
    }
}

/// The variables a clause uses, in order of first use.
fn uses(c: &Clause) -> Vec<Use> {
    let mut w = Walk { uses: Vec::new(), stmt: 1 };
    if let Some(p) = &c.predicate {
        w.expr(p);
    }
    w.actions(&c.actions);
    w.uses
}

/// A built-in variable's name.
fn builtin_name(b: Builtin) -> String {
    let name = match b {
        Builtin::Arg(n) => return format!("arg{n}"),
        Builtin::Caller => "caller",
        Builtin::Ucaller => "ucaller",
        Builtin::Cpu => "cpu",
        Builtin::Epid => "epid",
        Builtin::Id => "id",
        Builtin::Errno => "errno",
        Builtin::Execname => "execname",
        Builtin::Pid => "pid",
        Builtin::Ppid => "ppid",
        Builtin::Tid => "tid",
        Builtin::Uid => "uid",
        Builtin::Gid => "gid",
        Builtin::Timestamp => "timestamp",
        Builtin::Vtimestamp => "vtimestamp",
        Builtin::Walltimestamp => "walltimestamp",
        Builtin::Probeprov => "probeprov",
        Builtin::Probemod => "probemod",
        Builtin::Probefunc => "probefunc",
        Builtin::Probename => "probename",
        Builtin::Stackdepth => "stackdepth",
        Builtin::Ustackdepth => "ustackdepth",
        Builtin::Curthread => "curthread",
        Builtin::Curpsinfo => "curpsinfo",
        Builtin::Curlwpsinfo => "curlwpsinfo",
        Builtin::Curcpu => "curcpu",
        Builtin::Ipl => "ipl",
        Builtin::Cwd => "cwd",
        Builtin::Root => "root",
    };
    name.to_string()
}

/// dt_dis_typestr: the kind of storage and the C kind of the type, by reference
/// for strings, arrays, structs and unions, and the size.
fn type_description(ty: &Type, types: &TypeTable, strsize: u64) -> String {
    let size = storage::storage_size(ty, types, strsize);
    let (kind, ckind, by_ref) = match ty {
        Type::String => ("string", "unknown", true),
        Type::Pointer(_) => ("D type", "pointer", false),
        Type::Array(..) => ("D type", "array", true),
        Type::Struct(_) => ("D type", "struct", true),
        Type::Union(_) => ("D type", "union", true),
        Type::Enum(_) => ("D type", "enum", false),
        Type::Float(_) => ("D type", "float", false),
        _ => ("D type", "integer", false),
    };
    let by_ref = if by_ref { " by ref" } else { "" };
    format!("{kind} ({ckind}){by_ref} (size {size})")
}

/// The variable table of every clause, as `-S` prints it after each clause's
/// (here absent) code. `strsize` sizes string storage.
pub fn listing(prog: &CheckedProgram, strsize: u64) -> String {
    let globals = storage::layout(&prog.globals, &prog.types, strsize);
    let locals = storage::layout(&prog.clause_vars, &prog.types, strsize);
    let mut out = String::new();
    for (n, c) in prog.clauses.iter().enumerate() {
        let desc = c
            .probes
            .first()
            .map_or(String::new(), |p| format!("{}:{}:{}:{}", p.provider, p.module, p.function, p.name));
        let _ = writeln!(out, "\nVariables of clause {desc}, <dt_clause_{n}>:");
        let list = uses(c);
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "{:<16} {:<4} {:<6} {:<3} {:<3} {:<11} {:<4} TYPE",
            "NAME", "ID", "OFFSET", "KND", "SCP", "RANGE", "FLAG"
        );
        for u in &list {
            let (name, id, offset, kind, scope, ty) = match u.var {
                Var::Builtin(b) => {
                    let name = builtin_name(b);
                    let ty = crate::check::builtin_var_type(&name).unwrap_or(Type::int(8, true));
                    (name, String::from("-"), String::new(), "scl", "glb", ty)
                }
                Var::User(r) => {
                    let (info, slot, scope) = match r.scope {
                        VarScope::Global => (&prog.globals[r.id], globals[r.id], "glb"),
                        VarScope::Thread => (&prog.thread_vars[r.id], None, "tls"),
                        VarScope::Clause => (&prog.clause_vars[r.id], locals[r.id], "loc"),
                    };
                    let offset = match (r.scope, slot) {
                        (VarScope::Thread, _) => "0".to_string(),
                        (_, Some(s)) => s.offset.to_string(),
                        (_, None) => String::new(),
                    };
                    let kind = if info.keys.is_some() { "arr" } else { "scl" };
                    (info.name.clone(), format!("{:x}", r.id), offset, kind, scope, info.ty.clone())
                }
            };
            let flags = match (u.read, u.written) {
                (true, true) => "r/w",
                (true, false) => "r",
                (false, true) => "w",
                (false, false) => "",
            };
            let range = format!("[{}-{}]", u.first, u.last);
            let ty = type_description(&ty, &prog.types, strsize);
            let _ = writeln!(out, "{name:<16} {id:<4} {offset:<6} {kind:<3} {scope:<3} {range:<11} {flags:<4} {ty}");
        }
    }
    out
}
