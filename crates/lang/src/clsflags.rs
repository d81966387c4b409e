//! What may follow speculate() and commit() in one clause: the rules of Oracle
//! DTrace's code generator (dt_cg_clsflags), checked statement by statement in
//! program order, each error on the line of the statement that breaks the rule.
//!
//! Unlike illumos, a clause may commit several speculations, and discard() may share
//! a clause with anything. Expression statements record nothing, so they never
//! count; copyout() and copyoutstr() inside one are destructive.

use crate::ast::{Expr, ExprKind, Stmt};
use crate::error::{CompileError, Result, Tag};

/// What a statement is to the ordering rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An expression or an `if` that records nothing itself.
    None,
    Speculate,
    Commit,
    Discard,
    Aggregation,
    Exit,
    /// stop(), raise(), system(), freopen(), panic(), chill(), breakpoint(),
    /// copyout(), copyoutstr().
    Destructive,
    /// Any other action: trace(), printf(), printa(), clear(), …
    DataRecording,
}

/// DTrace's clause flags as the statements so far set them.
#[derive(Debug, Default)]
struct Flags {
    datarec: bool,
    speculate: bool,
    commit: bool,
    aggregation: bool,
    destructive: bool,
}

const DESTRUCTIVE_ACTIONS: &[&str] = &["stop", "raise", "system", "freopen", "breakpoint", "panic", "chill"];
const DESTRUCTIVE_SUBRS: &[&str] = &["copyout", "copyoutstr"];
/// Destructive actions on the kernel.
const KERNEL_ACTIONS: &[&str] = &["breakpoint", "panic", "chill"];

/// Checks a clause's statements against DTrace's speculation and commit rules.
/// `is_action` says whether a called name is an action (rather than a subroutine).
/// Returns whether the clause has destructive actions (tracing it needs `-w`).
pub fn check(stmts: &[Stmt], is_action: &dyn Fn(&str) -> bool) -> Result<bool> {
    let mut flags = Flags::default();
    walk(stmts, is_action, &mut flags)?;
    Ok(flags.destructive)
}

fn walk(stmts: &[Stmt], is_action: &dyn Fn(&str) -> bool, flags: &mut Flags) -> Result<()> {
    for s in stmts {
        match s {
            Stmt::Empty(_) => {}
            Stmt::If { cond, then, otherwise, .. } => {
                destructive_calls(cond, flags)?;
                walk(then, is_action, flags)?;
                if let Some(o) = otherwise {
                    walk(o, is_action, flags)?;
                }
            }
            Stmt::Expr(e) => match kind_of(e, is_action) {
                Kind::None => destructive_calls(e, flags)?,
                k => {
                    apply(flags, k, e)?;
                    refuse_unavailable(e)?;
                }
            },
        }
    }
    Ok(())
}

fn kind_of(e: &Expr, is_action: &dyn Fn(&str) -> bool) -> Kind {
    match &e.kind {
        ExprKind::Assign { lhs, .. } if is_aggregation(lhs) => Kind::Aggregation,
        ExprKind::Call { name, .. } if is_action(name) => match name.as_str() {
            "speculate" => Kind::Speculate,
            "commit" => Kind::Commit,
            "discard" => Kind::Discard,
            "exit" => Kind::Exit,
            n if DESTRUCTIVE_ACTIONS.contains(&n) => Kind::Destructive,
            _ => Kind::DataRecording,
        },
        _ => Kind::None,
    }
}

fn is_aggregation(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Agg(_) => true,
        ExprKind::Index { base, .. } => matches!(base.kind, ExprKind::Agg(_)),
        _ => false,
    }
}

/// copyout() and copyoutstr() in an expression statement count as destructive
/// actions; then, like DTrace's code generator meeting what it cannot generate,
/// udtrace refuses them.
fn destructive_calls(e: &Expr, flags: &mut Flags) -> Result<()> {
    if let Some(name) = DESTRUCTIVE_SUBRS.iter().find(|n| calls_any(e, &[**n])) {
        apply(flags, Kind::Destructive, e)?;
        return Err(CompileError::new(
            Tag::D_FUNC_UNDEF,
            e.span,
            format!(
                "{name}( ) cannot write to the traced process: udtrace evaluates clauses after the probe has returned"
            ),
        )
        .unlabelled());
    }
    Ok(())
}

/// Actions on the kernel (breakpoint(), panic(), chill()) pass the checks of their
/// arguments and the ordering rules, then are refused: a user-space tracer cannot
/// take them.
fn refuse_unavailable(e: &Expr) -> Result<()> {
    match &e.kind {
        ExprKind::Call { name, .. } if KERNEL_ACTIONS.contains(&name.as_str()) => Err(CompileError::new(
            Tag::D_UNKNOWN,
            e.span,
            format!("{name}( ) is not available: udtrace traces user space only"),
        )
        .unlabelled()),
        _ => Ok(()),
    }
}

/// Whether the expression calls one of `names` anywhere inside.
fn calls_any(e: &Expr, names: &[&str]) -> bool {
    let any = |xs: &[&Expr]| xs.iter().any(|x| calls_any(x, names));
    match &e.kind {
        ExprKind::Call { name, args, .. } => names.contains(&name.as_str()) || args.iter().any(|a| calls_any(a, names)),
        ExprKind::Unary { operand, .. } | ExprKind::IncDec { operand, .. } | ExprKind::Cast { operand, .. } => {
            calls_any(operand, names)
        }
        ExprKind::Binary { lhs, rhs, .. } | ExprKind::Assign { lhs, rhs, .. } | ExprKind::Comma { lhs, rhs } => {
            any(&[lhs, rhs])
        }
        ExprKind::Ternary { cond, then, otherwise } => any(&[cond, then, otherwise]),
        ExprKind::Index { base, index } => calls_any(base, names) || index.iter().any(|i| calls_any(i, names)),
        ExprKind::Member { base, .. } | ExprKind::Arrow { base, .. } => calls_any(base, names),
        ExprKind::SizeofExpr(x) | ExprKind::Stringof(x) => calls_any(x, names),
        _ => false,
    }
}

fn fail(tag: Tag, e: &Expr, msg: &str) -> Result<()> {
    Err(CompileError::new(tag, e.span, msg).unlabelled())
}

/// dt_cg_clsflags for one statement.
fn apply(f: &mut Flags, kind: Kind, e: &Expr) -> Result<()> {
    match kind {
        Kind::None => return Ok(()),
        Kind::Commit => {
            if f.datarec || f.aggregation {
                return fail(Tag::D_COMM_DREC, e, "commit( ) may not follow data-recording action(s)");
            }
            f.commit = true;
            return Ok(());
        }
        Kind::Discard => return Ok(()),
        Kind::Speculate => {
            if f.speculate {
                return fail(Tag::D_SPEC_SPEC, e, "speculate( ) may not follow speculate( )");
            }
            if f.commit {
                return fail(Tag::D_SPEC_COMM, e, "speculate( ) may not follow commit( )");
            }
            if f.datarec || f.aggregation {
                return fail(Tag::D_SPEC_DREC, e, "speculate( ) may not follow data-recording action(s)");
            }
            f.speculate = true;
            return Ok(());
        }
        Kind::Aggregation => {
            if f.commit {
                return fail(Tag::D_AGG_COMM, e, "aggregating actions may not follow commit( )");
            }
            if f.speculate {
                return fail(Tag::D_AGG_SPEC, e, "aggregating actions may not follow speculate( )");
            }
            f.aggregation = true;
            return Ok(());
        }
        Kind::Exit | Kind::Destructive | Kind::DataRecording => {}
    }
    if kind == Kind::Destructive {
        f.destructive = true;
    }
    if f.speculate && kind == Kind::Destructive {
        return fail(Tag::D_ACT_SPEC, e, "destructive actions may not follow speculate( )");
    }
    if f.speculate && kind == Kind::Exit {
        return fail(Tag::D_EXIT_SPEC, e, "exit( ) may not follow speculate( )");
    }
    if f.commit {
        return fail(Tag::D_DREC_COMM, e, "data-recording actions may not follow commit( )");
    }
    f.datarec = true;
    Ok(())
}
