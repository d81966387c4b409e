//! DTrace's type-compatibility rules for operators and assignments
//! (dt_node_is_ptrcompat, dt_node_is_argcompat, the relational and conditional
//! operators of dt_parser.c), and D's strings used as the char arrays they are:
//! compared with NULL, indexed, offset.

use super::{err, fold, int_const, int_ty, is_stringish, mk, same_kind, Checker};
use crate::ast::{self, BinaryOp};
use crate::error::{Result, Tag};
use crate::ir::{Expr, ExprKind};
use crate::span::Span;
use crate::types::{usual_arithmetic, Type};

/// Integers as DTrace's dt_node_is_integer sees them (enums and symbolic
/// addresses included).
pub(super) fn is_integer(t: &Type) -> bool {
    t.is_integer() || matches!(t, Type::Symbol { .. })
}

/// The type a pointer, array or string refers to (a string is an array of char).
fn referenced(t: &Type) -> Option<Type> {
    match t {
        Type::Pointer(r) | Type::Array(r, _) => Some((**r).clone()),
        Type::String => Some(Type::int(1, true)),
        _ => None,
    }
}

fn is_zero_constant(e: &Expr) -> bool {
    is_integer(&e.ty) && fold(e) == Some(0)
}

impl Checker<'_> {
    /// dt_node_is_ptrcompat: two pointers (or arrays) to compatible types, either a
    /// void pointer, or a pointer and the integer constant 0. The more specific
    /// pointer type when they are compatible.
    pub(super) fn ptr_compat(&self, l: &Expr, r: &Expr) -> Option<Type> {
        let (li, ri) = (is_integer(&l.ty), is_integer(&r.ty));
        let non_null_int = |is_int: bool, e: &Expr| is_int && !is_zero_constant(e);
        if (li && ri) || non_null_int(li, l) || non_null_int(ri, r) {
            return None;
        }
        let (lt, rt) = match (li, ri) {
            (true, _) => (&r.ty, &r.ty),
            (_, true) => (&l.ty, &l.ty),
            _ => (&l.ty, &r.ty),
        };
        let (lref, rref) = (referenced(lt)?, referenced(rt)?);
        if !(lref.is_void() || rref.is_void() || lref == rref) {
            return None;
        }
        Some(if rref.is_void() { lt.clone() } else { rt.clone() })
    }

    /// dt_node_is_argcompat: whether a value may be assigned to (or passed as) `to`.
    /// `dynamic` is a thread-local or associative array element, which DTrace
    /// also lets a literal 0 be assigned to (that deletes it).
    pub(super) fn arg_compat(&self, to: &Type, v: &Expr, dynamic: bool) -> bool {
        let to_expr = mk(ExprKind::Int(1), to.clone(), v.span);
        let ok = match to {
            _ if is_integer(to) && is_integer(&v.ty) => true,
            _ if is_stringish(to) && is_stringish(&v.ty) => true,
            Type::Stack { .. } => same_kind(to, &v.ty),
            Type::Struct(_) | Type::Union(_) => *to == v.ty,
            _ => self.ptr_compat(&to_expr, v).is_some(),
        };
        ok || (dynamic && matches!(v.kind, ExprKind::Int(0)))
    }

    /// The relational operators' type rules, then the comparison: strings compare
    /// as strcmp() does (NULL below every string), everything else as integers.
    pub(super) fn comparison(&mut self, op: BinaryOp, l: Expr, r: Expr, span: Span) -> Result<Expr> {
        let strings = (is_stringish(&l.ty) && is_stringish(&r.ty)) && (l.ty.is_string() || r.ty.is_string());
        let compatible = (l.ty == r.ty && !matches!(l.ty, Type::Struct(_) | Type::Union(_)))
            || (is_integer(&l.ty) && is_integer(&r.ty))
            || strings
            || self.ptr_compat(&l, &r).is_some();
        if !compatible {
            return self.incompatible(&l.ty, op.symbol(), &r.ty, span);
        }
        if l.ty.is_string() || r.ty.is_string() {
            let l = self.convert(l, &Type::String);
            let r = self.convert(r, &Type::String);
            return Ok(mk(ExprKind::StrCmp { op, lhs: Box::new(l), rhs: Box::new(r) }, int_ty(), span));
        }
        let (l, r) = (self.decay(l), self.decay(r));
        let shape = usual_arithmetic(&int_shape(&l.ty), &int_shape(&r.ty));
        if let (Some(a), Some(b)) = (fold(&l), fold(&r)) {
            return Ok(int_const(u64::from(super::compare(op, a, b, shape.signed)), int_ty(), span));
        }
        Ok(mk(ExprKind::Binary { op, lhs: Box::new(l), rhs: Box::new(r), signed: shape.signed }, int_ty(), span))
    }

    /// The type of `c ? t : o` (dt_cook_op3): the same type, promoted integers, a
    /// string, or the more specific of two compatible pointers.
    pub(super) fn conditional_type(&self, t: &Expr, o: &Expr, span: Span) -> Result<Type> {
        if t.ty == o.ty {
            return Ok(t.ty.clone());
        }
        if is_integer(&t.ty) && is_integer(&o.ty) {
            return Ok(Type::Int(usual_arithmetic(&int_shape(&t.ty), &int_shape(&o.ty))));
        }
        if is_stringish(&t.ty) && is_stringish(&o.ty) && (t.ty.is_string() || o.ty.is_string()) {
            return Ok(Type::String);
        }
        match self.ptr_compat(t, o) {
            Some(Type::Array(elem, _)) => Ok(Type::Pointer(elem)),
            Some(ty) => Ok(ty),
            None => err(Tag::D_OP_INCOMPAT, span, "operator ?: operands must have compatible types"),
        }
    }

    /// `c ? t : o` whose condition is an integer constant is the chosen operand
    /// alone: dt_node_op3 folds it while parsing, so the other operand is never
    /// checked, and an action there is a statement of its own
    /// (`OPT_x ? printf(...) : 1;`). `None` when the condition is not constant.
    pub(super) fn folded_conditional<'e>(
        &mut self,
        cond: &ast::Expr,
        then: &'e ast::Expr,
        otherwise: &'e ast::Expr,
    ) -> Result<Option<&'e ast::Expr>> {
        let c = self.expr(cond)?;
        if !is_integer(&c.ty) {
            return Ok(None);
        }
        Ok(fold(&c).map(|v| if v != 0 { then } else { otherwise }))
    }

    /// `s[i]` on a string: the char at offset `i` (D strings are char arrays).
    pub(super) fn string_index(&mut self, base: Expr, index: &[ast::Expr], span: Span) -> Result<Expr> {
        if index.len() != 1 {
            return err(
                Tag::D_ARR_BADREF,
                span,
                format!("cannot access {} as an associative array", self.type_name(&base.ty)),
            );
        }
        let i = self.rvalue(&index[0])?;
        if !is_integer(&i.ty) {
            return err(Tag::D_OP_INCOMPAT, span, "operands have incompatible types: \"string\" + \"string\"");
        }
        let i = self.convert(i, &Type::int(8, true));
        Ok(mk(ExprKind::StrChar { base: Box::new(base), index: Box::new(i) }, Type::int(1, true), span))
    }

    /// `s + n`, `n + s`, `s - n`: D treats strings as pointers to their chars here;
    /// the result is the string that starts `n` chars in.
    pub(super) fn string_offset(&mut self, op: BinaryOp, l: Expr, r: Expr, span: Span) -> Result<Expr> {
        let (s, n) = match (l.ty.is_string(), r.ty.is_string()) {
            (true, false) if is_integer(&r.ty) => (l, r),
            (false, true) if is_integer(&l.ty) && op == BinaryOp::Add => (r, l),
            _ => return self.incompatible(&l.ty, op.symbol(), &r.ty, span),
        };
        let mut n = self.convert(n, &Type::int(8, true));
        if op == BinaryOp::Sub {
            let span = n.span;
            n = mk(ExprKind::Neg(Box::new(n)), Type::int(8, true), span);
        }
        Ok(mk(ExprKind::StrOffset { base: Box::new(s), offset: Box::new(n) }, Type::String, span))
    }
}

/// The integer shape of an integer or pointer operand.
fn int_shape(t: &Type) -> crate::types::IntType {
    t.int_shape().unwrap_or_else(|| crate::types::IntType::new(8, false, "uintptr_t"))
}

impl Checker<'_> {
    /// What a name in D's global identifier namespace already is, as DTrace
    /// describes it in "previous:" (dt_idkind_name, then "inline" for inlines).
    pub(super) fn global_identifier_kind(&self, name: &str) -> Option<String> {
        if self.inlines.contains_key(name) || crate::consts::lookup(name).is_some() {
            return Some("scalar inline".into());
        }
        if self.inline_arrays.contains_key(name) {
            return Some("array inline".into());
        }
        let kind = if let Some(&id) = self.globals.get(name) {
            if self.prog.globals[id].keys.is_some() {
                "associative array"
            } else {
                "scalar"
            }
        } else if super::builtin_var_type(name).is_some() {
            "scalar"
        } else if super::ACTIONS.contains(&name) {
            "tracing function"
        } else if crate::ir::AggKind::from_name(name).is_some() {
            "aggregating function"
        } else if crate::subrs::find(name).is_some() {
            "function"
        } else if self.prog.types.enumerators.contains_key(name) {
            "enumerator"
        } else {
            return None;
        };
        Some(format!("{kind} "))
    }
}

/// Whether a probe description names the dtrace provider's BEGIN or END probe.
pub(super) fn is_begin_or_end(p: &ast::ProbeDesc) -> bool {
    matches!(p.provider.as_str(), "" | "dtrace")
        && p.module.is_empty()
        && p.function.is_empty()
        && matches!(p.name.as_str(), "BEGIN" | "END")
}

/// dtrace_desc2str: `provider:module:function:name`.
pub(super) fn desc_string(p: &ast::ProbeDesc) -> String {
    format!("{}:{}:{}:{}", p.provider, p.module, p.function, p.name)
}
