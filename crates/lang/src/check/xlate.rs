//! Translators: `translator out < in name > { member = expression; … };` definitions
//! and the `xlate < out > ( e )` operator, with DTrace's rules and messages
//! (`dt_node_xlator`, `dt_cook_xlator`, `dt_xlator_lookup`). A translated member is
//! checked as its defining expression with the input parameter standing for `e`, so
//! it costs what that expression costs; no translated struct is built.

use super::*;
use crate::ast::BaseType;

/// A translator the program (or udtrace itself) defines.
#[derive(Debug, Clone)]
pub struct Translator {
    pub input: Type,
    /// The struct or union it translates to.
    pub output: Type,
    pub param: String,
    pub members: Vec<(String, ast::Expr)>,
    /// The proc provider's translators from `struct task_struct *` to `psinfo_t` and
    /// `lwpsinfo_t`, which read the current task's data.
    pub builtin: Option<Builtin>,
}

/// A type name as written, for messages that name a translator's types as DTrace
/// does (typedef names kept: `lwpsinfo_t`, `struct task_struct *`).
fn written(t: &ast::TypeName) -> Option<String> {
    let mut s = match &t.base {
        BaseType::Intrinsic(n) => n.trim_end().to_string(),
        BaseType::String => "string".into(),
        BaseType::Named(n) => n.clone(),
        BaseType::Struct(tag) => format!("struct {tag}"),
        BaseType::Union(tag) => format!("union {tag}"),
        BaseType::Enum(tag) => format!("enum {tag}"),
    };
    for d in &t.derived {
        match d {
            ast::Derived::Pointer if s.ends_with('*') => s.push('*'),
            ast::Derived::Pointer => s.push_str(" *"),
            _ => return None,
        }
    }
    Some(s)
}

impl Checker<'_> {
    /// The proc provider's translators, so that `xlate <psinfo_t> (curthread)` works
    /// and may not be declared again, as in DTrace's procfs.d.
    pub(super) fn install_builtin_translators(&mut self) {
        let task = Type::Pointer(Box::new(Type::Struct(self.prog.types.record_tag(false, "task_struct"))));
        for (name, b) in [("psinfo_t", Builtin::Curpsinfo), ("lwpsinfo_t", Builtin::Curlwpsinfo)] {
            if let Some(output) = self.prog.types.typedefs.get(name).cloned() {
                self.translators.push(Translator {
                    input: task.clone(),
                    output,
                    param: "T".into(),
                    members: Vec::new(),
                    builtin: Some(b),
                });
            }
        }
    }

    /// dt_node_xlator and dt_cook_xlator: a translator to a struct or union, each
    /// member defined once with a value that could be assigned to it.
    pub(super) fn define_translator(&mut self, t: &ast::Translator) -> Result<()> {
        let output = self.resolve_type(&t.output)?;
        let input = self.resolve_type(&t.input)?;
        let end = Span::new(t.span.end.saturating_sub(1) as usize, t.span.end as usize);
        if self.translators.iter().any(|x| x.input == input && x.output == output) {
            let from = written(&t.input).unwrap_or_else(|| self.type_name(&input));
            let to = written(&t.output).unwrap_or_else(|| self.type_name(&output));
            return err(Tag::D_XLATE_REDECL, end, format!("translator from {from} to {to} has already been declared"));
        }
        let id = match &output {
            Type::Struct(id) | Type::Union(id) if self.prog.types.records[*id].complete => *id,
            Type::Struct(_) | Type::Union(_) => {
                let name = self.incomplete_name(&output, None);
                return err(Tag::D_XLATE_SOU, end, format!("incomplete struct/union/enum {name}"));
            }
            _ => return err(Tag::D_XLATE_SOU, end, "translator output type must be a struct or union"),
        };
        let placeholder = int_const(0, input.clone(), t.head_end);
        for m in &t.members {
            let Some(field) = self.prog.types.field(id, &m.name).cloned() else {
                return err(
                    Tag::D_XLATE_MEMB,
                    end,
                    format!("translator member {} is not a member of {}", m.name, self.type_name(&output)),
                );
            };
            let v = self.with_xlate_param(&t.param, placeholder.clone(), |c| c.rvalue(&m.value))?;
            if !self.arg_compatible(&field.ty, &v) {
                return err(
                    Tag::D_XLATE_INCOMPAT,
                    end,
                    format!(
                        "translator member {} definition uses incompatible types: \"{}\" = \"{}\"",
                        m.name,
                        self.type_name(&field.ty),
                        self.type_name(&v.ty)
                    ),
                );
            }
        }
        let members = t.members.iter().map(|m| (m.name.clone(), m.value.clone())).collect();
        self.translators.push(Translator { input, output, param: t.param.clone(), members, builtin: None });
        Ok(())
    }

    /// Checks `f` with the translator parameter `name` standing for `value`.
    pub(super) fn with_xlate_param<T>(
        &mut self,
        name: &str,
        value: Expr,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        self.xlate_params.push((name.to_string(), value));
        let r = f(self);
        self.xlate_params.pop();
        r
    }

    /// The expression a translator parameter stands for, if `name` is one in scope.
    pub(super) fn xlate_param(&self, name: &str, span: Span) -> Option<Expr> {
        let (_, v) = self.xlate_params.iter().rev().find(|(n, _)| n == name)?;
        let mut v = v.clone();
        v.span = span;
        Some(v)
    }

    /// dt_node_is_argcompat: whether `v` may be passed where `want` is expected.
    pub(super) fn arg_compatible(&self, want: &Type, v: &Expr) -> bool {
        let have = &v.ty;
        if want.is_integer() && have.is_integer() {
            return true;
        }
        if is_stringish(want) && is_stringish(have) {
            return true;
        }
        match (want, have) {
            (Type::Stack { user: a }, Type::Stack { user: b }) => a == b,
            (Type::Symbol { user: a, .. }, Type::Symbol { user: b, .. }) => a == b,
            (Type::Struct(_) | Type::Union(_) | Type::Function(_), _) => want == have,
            _ => self.pointer_compatible(want, v),
        }
    }

    /// dt_node_is_ptrcompat, simplified: pointers (or arrays) to the same type or to
    /// void, or a pointer and the integer constant zero.
    fn pointer_compatible(&self, want: &Type, v: &Expr) -> bool {
        match (want.pointee(), v.ty.pointee()) {
            (Some(a), Some(b)) => a.is_void() || b.is_void() || a == b,
            (Some(_), None) => v.ty.is_integer() && fold(v) == Some(0),
            _ => false,
        }
    }

    /// dt_xlator_lookup: a translator to `dst` from exactly `v`'s type, or else from
    /// a type `v` could be passed as.
    fn find_translator(&self, v: &Expr, dst: &Type) -> Option<usize> {
        if !matches!(dst, Type::Struct(_) | Type::Union(_)) {
            return None;
        }
        let xs = &self.translators;
        xs.iter()
            .position(|x| x.output == *dst && x.input == v.ty)
            .or_else(|| xs.iter().position(|x| x.output == *dst && self.arg_compatible(&x.input, v)))
    }

    /// Checks `xlate < ty > ( operand )`: the translator and whether the result is a
    /// pointer to translated data.
    fn xlate_operand(&mut self, ty: &ast::TypeName, operand: &ast::Expr, span: Span) -> Result<(usize, Expr, bool)> {
        let target = self.resolve_type(ty)?;
        let v = self.rvalue(operand)?;
        let (dst, ptr) = match &target {
            Type::Pointer(t) => ((**t).clone(), true),
            t => (t.clone(), false),
        };
        match self.find_translator(&v, &dst) {
            Some(x) => Ok((x, v, ptr)),
            None => err(
                Tag::D_XLATE_NONE,
                span,
                format!(
                    "cannot translate from \"{}\" to \"{}\"",
                    self.type_name(&v.ty),
                    written(ty).unwrap_or_else(|| self.type_name(&target))
                ),
            ),
        }
    }

    /// `xlate <T> (e).m` and `xlate <T *> (e)->m`: the translator's definition of `m`
    /// with its parameter standing for `e`.
    pub(super) fn xlate_member(
        &mut self,
        ty: &ast::TypeName,
        operand: &ast::Expr,
        field: &str,
        op: &str,
        span: Span,
    ) -> Result<Expr> {
        let (x, v, ptr) = self.xlate_operand(ty, operand, span)?;
        if ptr != (op == "->") {
            let what = if ptr { "pointer to translated data" } else { "translated data" };
            return err(Tag::D_OP_SOU, span, format!("operator {op} cannot be applied to {what}"));
        }
        let xl = self.translators[x].clone();
        let (Type::Struct(id) | Type::Union(id)) = xl.output else {
            unreachable!("translators translate to structs and unions")
        };
        let defined = xl.members.iter().find(|(n, _)| n == field);
        let field_type = self.prog.types.field(id, field).map(|f| f.ty.clone());
        let (Some(fty), true) = (field_type, xl.builtin.is_some() || defined.is_some()) else {
            return err(
                Tag::D_XLATE_NOCONV,
                span,
                format!("translator does not define conversion for member: {field}"),
            );
        };
        if let Some(b) = xl.builtin {
            return self.builtin_xlate_member(b, v, field, span);
        }
        let Some((_, def)) = defined else { unreachable!("checked above") };
        let input = self.convert(v, &xl.input);
        let value = self.with_xlate_param(&xl.param, input, |c| c.rvalue(def))?;
        let mut value = self.convert(value, &fty);
        value.span = span;
        Ok(value)
    }

    /// A member of the proc provider's translation of the current task: that of
    /// `curpsinfo` or `curlwpsinfo`. Another task's data is out of reach, but its
    /// address is the input itself.
    fn builtin_xlate_member(&mut self, b: Builtin, v: Expr, field: &str, span: Span) -> Result<Expr> {
        if field == "pr_addr" {
            let t = Type::named_int(8, false, "uintptr_t");
            return Ok(mk(ExprKind::Cast(Box::new(v)), t, span));
        }
        if !matches!(v.kind, ExprKind::Builtin(Builtin::Curthread)) {
            return err(
                Tag::D_XLATE_NONE,
                span,
                "only the current thread (curthread) can be translated here: other tasks' data is not available to user-space tracing",
            );
        }
        let name = if b == Builtin::Curpsinfo { "psinfo_t" } else { "lwpsinfo_t" };
        let ptr = mk(ExprKind::Builtin(b), self.pointer_to(name), span);
        let loaded = mk(ExprKind::Load(Box::new(ptr.clone())), ptr.ty.pointee().cloned().unwrap_or(Type::Void), span);
        self.member(loaded, field, span, "->")
    }

    /// The `xlate` an expression is, directly or as an inline that stands for one.
    pub(super) fn as_xlate(&self, e: &ast::Expr) -> Option<(ast::TypeName, ast::Expr)> {
        let e = match &e.kind {
            ast::ExprKind::Ident(n) if !self.globals.contains_key(n) => &self.inlines.get(n)?.1,
            _ => e,
        };
        match &e.kind {
            ast::ExprKind::Xlate { ty, operand } => Some((ty.clone(), (**operand).clone())),
            _ => None,
        }
    }

    /// A bare `xlate <T> (e)`: translated data only has members to use.
    pub(super) fn bare_xlate(&mut self, ty: &ast::TypeName, operand: &ast::Expr, span: Span) -> Result<Expr> {
        let what = self.xlate_kind(ty, operand, span)?;
        err(Tag::D_OP_DYN, span, format!("{what} may only be used with operator . or ->"))
    }

    /// Checks a bare `xlate <T> (e)` (the translator must exist) and says what it is,
    /// for the messages of operators that do not apply to it.
    pub(super) fn xlate_kind(&mut self, ty: &ast::TypeName, operand: &ast::Expr, span: Span) -> Result<&'static str> {
        let (_, _, ptr) = self.xlate_operand(ty, operand, span)?;
        Ok(if ptr { "pointer to translated data" } else { "translated data" })
    }
}
