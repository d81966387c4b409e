//! Alloca taint, as libdtrace tracks it: which expressions and variables hold
//! pointers into scratch space, the rules on mixing them with other pointers
//! (D_ALLOCA_INCOMPAT), and stores through pointers.

use std::collections::HashSet;

use super::{err, Checker};
use crate::ast::{self, VarScope};
use crate::error::{CompileError, Result, Tag};
use crate::ir::{Expr, ExprKind, Place, Taint, VarRef};
use crate::span::Span;

/// The default `scratchsize`, in bytes available to alloca().
const DEFAULT_SCRATCHSIZE: u64 = 256;

/// The program-wide alloca state of the checker.
#[derive(Debug)]
pub(super) struct AllocaState {
    /// Variables that have held an alloca pointer (DT_IDFLG_ALLOCA).
    tainted: HashSet<(u8, usize)>,
    /// Variables that have held anything else but the constant 0 (DT_IDFLG_NONALLOCA).
    untainted: HashSet<(u8, usize)>,
    /// The scratchsize option as given.
    scratchsize: u64,
    /// The clause being checked: libdtrace reports a variable reused for both kinds
    /// of pointer while generating its code, at the clause's line.
    pub(super) clause_span: Span,
}

impl Default for AllocaState {
    fn default() -> AllocaState {
        AllocaState {
            tainted: HashSet::new(),
            untainted: HashSet::new(),
            scratchsize: DEFAULT_SCRATCHSIZE,
            clause_span: Span::new(0, 0),
        }
    }
}

fn key(r: VarRef) -> (u8, usize) {
    let scope = match r.scope {
        VarScope::Global => 0,
        VarScope::Thread => 1,
        VarScope::Clause => 2,
    };
    (scope, r.id)
}

impl AllocaState {
    pub(super) fn scratch_room(&self) -> u64 {
        crate::options::scratch_room(self.scratchsize)
    }
}

impl Checker<'_> {
    /// D_VAR_UNDEF for a variable read before anything declared or assigned it (the
    /// left operand of `+=`, say).
    pub(super) fn require_declared(&self, e: &ast::Expr) -> Result<()> {
        use ast::ExprKind as K;
        let (scope, name, prefix) = match &e.kind {
            K::Ident(n) => (VarScope::Global, n, ""),
            K::SelfVar(n) => (VarScope::Thread, n, "self->"),
            K::ThisVar(n) => (VarScope::Clause, n, "this->"),
            _ => return Ok(()),
        };
        let known =
            self.lookup_var(scope, name).is_some() || (scope == VarScope::Global && self.is_known_global_name(name));
        if known {
            return Ok(());
        }
        err(Tag::D_VAR_UNDEF, e.span, format!("{prefix}{name} has not yet been declared or assigned"))
    }

    /// Global names that are no variables but still mean something (built-ins,
    /// inlines, enumerators, constants): assignments to them have their own errors.
    fn is_known_global_name(&self, name: &str) -> bool {
        super::builtin_var(name).is_some()
            || matches!(name, "args" | "uregs" | "NULL")
            || self.inlines.contains_key(name)
            || self.prog.types.enumerators.contains_key(name)
            || crate::consts::lookup(name).is_some()
    }
}

/// The variable an assignment target stores into, if it is one (not a member or
/// memory).
fn stored_var(place: &Place) -> Option<VarRef> {
    match place {
        Place::Var(r) | Place::Array { var: r, .. } => Some(*r),
        Place::Field { .. } | Place::Mem { .. } => None,
    }
}

impl Checker<'_> {
    /// The scratchsize option in effect (from the command line); pragmas later in the
    /// program change it as the checker meets them.
    pub fn set_scratchsize(&mut self, bytes: u64) {
        self.alloca.scratchsize = bytes;
    }

    /// Follows `#pragma D option scratchsize=…`, which applies to what comes after it.
    pub(super) fn note_pragma_option(&mut self, name: &str, value: Option<&str>) {
        if name != "scratchsize" {
            return;
        }
        if let Ok((_, crate::options::OptionValue::Int(n))) = crate::options::parse_option(name, value) {
            self.alloca.scratchsize = n;
        }
    }

    /// The taint of a read of variable `r`.
    pub(super) fn var_taint(&self, r: VarRef) -> Taint {
        Taint { alloca: self.alloca.tainted.contains(&key(r)), mixed: false }
    }

    /// Records what an assignment stores into a variable, and refuses what libdtrace
    /// refuses: a `?:` of mixed pointers, and one variable holding both alloca and
    /// other pointers. Strings are stored by value and carry no taint.
    pub(super) fn note_store(&mut self, place: &Place, value: &Expr, span: Span) -> Result<()> {
        let Some(r) = stored_var(place) else { return Ok(()) };
        if value.taint.mixed && matches!(place, Place::Var(_)) {
            return err(
                Tag::D_ALLOCA_INCOMPAT,
                span,
                "ternary conditional with alloca and non-alloca branches cannot be assigned to a variable",
            );
        }
        let k = key(r);
        let clash = if value.taint.alloca && !value.ty.is_string() {
            self.alloca.tainted.insert(k);
            self.alloca.untainted.contains(&k)
        } else if matches!(value.kind, ExprKind::Int(0)) {
            false
        } else {
            self.alloca.untainted.insert(k);
            self.alloca.tainted.contains(&k)
        };
        if clash {
            let name = self.var_info(r).name.clone();
            return Err(CompileError::new(
                Tag::D_ALLOCA_INCOMPAT,
                self.alloca.clause_span,
                format!("{name}: cannot reuse the same identifier for both alloca and non-alloca allocations"),
            ));
        }
        Ok(())
    }

    /// A store through a pointer: `*p = v`, `p[i] = v`, `p->m = v`. libdtrace lets a
    /// program write only through a pointer held in a D variable (or such a pointer
    /// plus an offset); the runtime lets it write only to scratch space.
    pub(super) fn memory_place(&mut self, target: &ast::Expr, op: &str) -> Result<Option<(Place, crate::types::Type)>> {
        if !is_pointer_access(target) {
            return Ok(None);
        }
        let e = self.expr(target)?;
        let ExprKind::Load(addr) = e.kind else { return Ok(None) };
        if indexes_d_array(&addr) {
            return Ok(None);
        }
        if !writable_pointer(target) {
            return err(
                Tag::D_OP_WRITE,
                target.span,
                format!("operator {op} can only be applied to a writable variable"),
            );
        }
        Ok(Some((Place::Mem { addr, ty: e.ty.clone() }, e.ty)))
    }
}

/// Whether an address indexes an array held by a D variable rather than memory.
fn indexes_d_array(addr: &Expr) -> bool {
    match &addr.kind {
        ExprKind::Binary { lhs, .. } if matches!(lhs.ty, crate::types::Type::Array(..)) => {
            !matches!(lhs.kind, ExprKind::Load(_))
        }
        _ => false,
    }
}

/// Whether a target expression reads memory through a pointer (or through a member
/// of what a pointer points to).
fn is_pointer_access(e: &ast::Expr) -> bool {
    use ast::ExprKind as K;
    match &e.kind {
        K::Unary { op: ast::UnaryOp::Deref, .. } | K::Arrow { .. } => true,
        K::Index { base, .. } => !matches!(base.kind, K::Agg(_)),
        K::Member { base, .. } => is_pointer_access(base),
        _ => false,
    }
}

/// DT_NF_WRITABLE for a dereference: the pointer is a D variable, or a D variable
/// plus something (`p[i]` is `*(p + i)`); members inherit it from their base.
fn writable_pointer(e: &ast::Expr) -> bool {
    use ast::ExprKind as K;
    let is_var = |x: &ast::Expr| matches!(x.kind, K::Ident(_) | K::SelfVar(_) | K::ThisVar(_) | K::Index { .. });
    match &e.kind {
        K::Unary { op: ast::UnaryOp::Deref, operand } => {
            is_var(operand) || matches!(&operand.kind, K::Binary { op: ast::BinaryOp::Add, lhs, .. } if is_var(lhs))
        }
        K::Index { base, .. } => is_var(base) || writable_pointer(base),
        K::Arrow { base, .. } => is_var(base) || writable_pointer(base),
        K::Member { base, .. } => writable_pointer(base),
        _ => false,
    }
}
