//! Arrays and pointers: D variables have addresses (`&a[2]`, an array decaying to a
//! pointer), indexing is pointer arithmetic with DTrace's bounds checks, and a
//! dereference is an lvalue that can be assigned when it is D memory.

use super::{err, fold, int_const, mk, Checker};
use crate::ast::{self, BinaryOp};
use crate::error::{Result, Tag};
use crate::ir::{Expr, ExprKind, Place};
use crate::span::Span;
use crate::types::Type;

fn u64_ty() -> Type {
    Type::int(8, false)
}

impl Checker<'_> {
    /// The address of an object: a variable with storage (not a dynamic one: an
    /// associative array element has none to point at), a member of one, or
    /// something read from memory at an address.
    pub(super) fn address_of(&self, e: &Expr) -> Option<Expr> {
        match &e.kind {
            ExprKind::Var(r) if self.var_info(*r).keys.is_none() => Some(mk(ExprKind::VarAddr(*r), u64_ty(), e.span)),
            ExprKind::Load(addr) => Some(without_null_check((**addr).clone())),
            ExprKind::Field { base, offset } => {
                let b = self.address_of(base)?;
                let off = int_const(*offset, u64_ty(), e.span);
                let kind = ExprKind::Binary { op: BinaryOp::Add, lhs: Box::new(b), rhs: Box::new(off), signed: false };
                Some(mk(kind, u64_ty(), e.span))
            }
            _ => None,
        }
    }

    /// An array used as a value where C would use its address (indexing, pointer
    /// arithmetic, comparison, assignment to a pointer): a pointer to its first
    /// element. An array with no address (held in an associative array element)
    /// stays a value.
    pub(super) fn decay(&self, e: Expr) -> Expr {
        let Type::Array(elem, _) = &e.ty else { return e };
        match self.address_of(&e) {
            Some(addr) => Expr { kind: addr.kind, ty: Type::Pointer(elem.clone()), span: e.span, taint: addr.taint },
            None => e,
        }
    }

    /// `a[i]` on an array: D_ARR_BOUNDS for a constant index past the end, a run-time
    /// check for any other (arrays of 0 or 1 elements are left unchecked: they
    /// are the usual anchors of variable-length data), then `*(a + i)`.
    pub(super) fn array_element(&mut self, base: Expr, index: &[ast::Expr], span: Span) -> Result<Expr> {
        let Type::Array(elem, n) = base.ty.clone() else { unreachable!("called on arrays") };
        if index.len() != 1 {
            return err(
                Tag::D_ARR_BADREF,
                span,
                format!("cannot access {} as an associative array", self.node_name(&base)),
            );
        }
        let mut i = self.rvalue(&index[0])?;
        if n > 1 {
            match fold(&i) {
                Some(v) if v >= n => {
                    return err(Tag::D_ARR_BOUNDS, span, format!("index outside array bounds: {v}, max is {n}"));
                }
                Some(_) => {}
                None => {
                    let ty = i.ty.clone();
                    i = mk(ExprKind::IndexCheck { index: Box::new(i), len: n }, ty, span);
                }
            }
        }
        let base = self.decay(base);
        if let Type::Array(..) = base.ty {
            // No address: only a constant index can pick the element out of the value.
            let Some(k) = fold(&i) else {
                return err(
                    Tag::D_UNKNOWN,
                    span,
                    "an array held in an associative array element can only be indexed by a constant",
                );
            };
            let size = self.prog.types.size_of(&elem).unwrap_or(0);
            let offset = k.wrapping_mul(size);
            return Ok(mk(ExprKind::Field { base: Box::new(base), offset }, *elem, span));
        }
        let at = self.pointer_arith(BinaryOp::Add, base, i, span)?;
        Ok(mk(ExprKind::Load(Box::new(at)), *elem, span))
    }

    /// DTrace's dt_node_name for a variable: "scalar x", "array x", else the type.
    fn node_name(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::Var(r) => format!("scalar {}", self.var_info(*r).name),
            _ => format!("type {}", self.type_name(&e.ty)),
        }
    }

    /// What an assignment target that is no lvalue gets: the errors of reading it
    /// (`p.x` on a pointer is D_OP_SOU, `s->x` on a struct D_OP_PTR), else D_OP_LVAL.
    pub(super) fn not_an_lvalue(&mut self, target: &ast::Expr, op: &str) -> Result<(Place, Type)> {
        if matches!(target.kind, ast::ExprKind::Member { .. } | ast::ExprKind::Arrow { .. }) {
            self.expr(target)?;
        }
        err(Tag::D_OP_LVAL, target.span, format!("operator {op} requires modifiable lvalue as an operand"))
    }

    /// `this->x[k]` on an undeclared `this->x`: clause-locals cannot be associative
    /// arrays (D_ARR_LOCAL).
    pub(super) fn reject_local_assoc(&self, base: &ast::Expr) -> Result<()> {
        if let ast::ExprKind::ThisVar(name) = &base.kind {
            if self.lookup_var(crate::ast::VarScope::Clause, name).is_none() {
                return err(
                    Tag::D_ARR_LOCAL,
                    base.span,
                    format!("local variables may not be used as associative arrays: {name}"),
                );
            }
        }
        Ok(())
    }

    /// `uregs[i]`: the index is an integer constant (dt_idops_regs) naming one of the
    /// 26 registers regs.d defines (dt_cg_uregs).
    pub(super) fn uregs_index(&self, i: &Expr, span: Span) -> Result<()> {
        let Some(n) = fold(i) else {
            return err(
                Tag::D_PROTO_ARG,
                i.span,
                format!(
                    "uregs[ ] argument #1 is incompatible with prototype:\n\tprototype: integer constant\n\t argument: {}",
                    self.type_name(&i.ty)
                ),
            );
        };
        if n > 25 {
            return err(Tag::D_UNKNOWN, span, format!("uregs[]: index out of bounds ({})", n as i64));
        }
        Ok(())
    }
}

/// `&p->m` reads nothing, so a NULL `p` gives the member's offset (`offsetof`),
/// not a fault: the address without the check `->` puts on `p`.
fn without_null_check(addr: Expr) -> Expr {
    match addr.kind {
        ExprKind::Binary { op: BinaryOp::Add, lhs, rhs, signed } => {
            let lhs = match lhs.kind {
                ExprKind::NonNull(p) => p,
                _ => lhs,
            };
            Expr { kind: ExprKind::Binary { op: BinaryOp::Add, lhs, rhs, signed }, ..addr }
        }
        _ => addr,
    }
}
