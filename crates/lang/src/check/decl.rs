//! Declarations: types the program defines (structs, unions with bit-fields, enums),
//! variables, typedefs, externs and prototypes, inlines. The rules and messages are
//! those of DTrace's `dt_decl.c` and `dt_node_decl`, which act on each declaration as
//! the parser completes it; the parser hands them over one by one ([`DeclSink`]).

use super::*;
use crate::ast::{BaseType, Derived, StorageClass, TagKind, TypeBody};
use crate::parser::DeclSink;
use crate::types::{intrinsic, MemberDef};

impl DeclSink for Checker<'_> {
    fn item(&mut self, item: &ast::Item) -> Result<()> {
        self.declare_item(item)
    }

    fn open_definition(&mut self, kind: TagKind, tag: &str, open: Span) -> Result<()> {
        self.check_redefinition(kind, tag, open)
    }

    fn is_type(&self, name: &str) -> bool {
        self.prog.types.typedefs.contains_key(name) || self.kernel.has_typedef(name)
    }

    fn is_identifier(&self, name: &str) -> bool {
        self.is_global_identifier(name)
    }
}

/// dt_node_is_posconst: a non-zero integer constant, positive if signed.
fn positive_constant(e: &Expr) -> Option<u64> {
    let v = fold(e)?;
    let signed = e.ty.int_shape().is_some_and(|s| s.signed);
    (v != 0 && (!signed || (v as i64) > 0)).then_some(v)
}

/// The bits of an integer type's encoding (`cte_bits`).
fn int_bits(t: &Type) -> Option<u64> {
    match t {
        Type::Int(i) => Some(u64::from(i.size) * 8),
        _ => None,
    }
}

impl Checker<'_> {
    /// Checks one item of a source other than a clause: DTrace acts on declarations
    /// as it parses them. Clauses are checked by [`Checker::add_clauses`].
    pub fn declare_item(&mut self, item: &ast::Item) -> Result<()> {
        match item {
            ast::Item::Clause(_) => Ok(()),
            ast::Item::Pragma(p) => self.pragma(p),
            ast::Item::Define(d) => self.define(d),
            ast::Item::Decl(d) => self.decl(d),
            ast::Item::Inline(i) => self.inline(i),
            ast::Item::Translator(t) => self.define_translator(t),
            ast::Item::Provider(p) => self.define_provider(p),
        }
    }

    fn inline(&mut self, i: &ast::Inline) -> Result<()> {
        if let Some(previous) = self.global_identifier_kind(&i.name) {
            return err(
                Tag::D_DECL_IDRED,
                i.span,
                format!("identifier redefined: {}\n\t current: inline definition\n\tprevious: {previous}", i.name),
            );
        }
        if let Some((Derived::Assoc(params), inner)) = i.ty.derived.split_last() {
            return self.inline_array(i, params, inner);
        }
        let ty = self.resolve_type(&i.ty)?;
        // Check the value now so errors point at the definition. Translated data
        // only has members: the inline stands for the xlate where one is used.
        if let ast::ExprKind::Xlate { ty: xt, operand } = &i.value.kind {
            self.xlate_kind(xt, operand, i.value.span)?;
            self.inlines.insert(i.name.clone(), (ty, i.value.clone()));
            return Ok(());
        }
        let v = self.expr(&i.value)?;
        if !self.arg_compat(&ty, &v, false) {
            return err(
                Tag::D_OP_INCOMPAT,
                i.span,
                format!(
                    "inline {} definition uses incompatible types: \"{}\" = \"{}\"",
                    i.name,
                    self.type_name(&ty),
                    self.type_name(&v.ty)
                ),
            );
        }
        self.inlines.insert(i.name.clone(), (ty, i.value.clone()));
        Ok(())
    }

    /// `inline T name[T1 p1, …] = value;`: the value is checked where the inline is
    /// indexed, with each parameter standing for its key.
    fn inline_array(&mut self, i: &ast::Inline, params: &[ast::Param], inner: &[Derived]) -> Result<()> {
        let base = self.base_type(&i.ty.base, i.ty.span)?;
        let ty = self.derive(base, inner)?;
        let mut named = Vec::with_capacity(params.len());
        for p in params {
            let (Some(t), Some(n)) = (&p.ty, &p.name) else {
                return err(
                    Tag::D_DECL_ARRNULL,
                    p.span,
                    format!("inline declaration requires array tuple signature: {}", i.name),
                );
            };
            named.push((n.clone(), self.resolve_type(t)?));
        }
        let def = super::InlineArray { ty, params: named, value: i.value.clone() };
        self.inline_arrays.insert(i.name.clone(), def);
        Ok(())
    }

    /// `name[k1, …]` of an inline with a key signature: its value with the keys,
    /// converted to the parameters' types, in place of the parameters.
    pub(super) fn inline_array_ref(&mut self, name: &str, keys: &[ast::Expr], span: Span) -> Result<Expr> {
        let def = self.inline_arrays[name].clone();
        if keys.len() != def.params.len() {
            let n = def.params.len();
            return err(Tag::D_PROTO_LEN, span, super::proto_len(name, "[ ]", "key", keys.len(), n, n));
        }
        let mut bound = Vec::with_capacity(keys.len());
        for (k, (pname, pty)) in keys.iter().zip(&def.params) {
            let v = self.rvalue(k)?;
            bound.push((pname.clone(), self.convert(v, pty)));
        }
        if self.inline_depth > 64 {
            return err(Tag::D_UNKNOWN, span, format!("inline {name} is defined in terms of itself"));
        }
        self.inline_depth += 1;
        let v = self.with_bound_params(&bound, &def.value);
        self.inline_depth -= 1;
        let mut v = self.convert(v?, &def.ty);
        v.span = span;
        Ok(v)
    }

    fn with_bound_params(&mut self, params: &[(String, Expr)], value: &ast::Expr) -> Result<Expr> {
        match params.split_first() {
            None => self.rvalue(value),
            Some(((n, v), rest)) => self.with_xlate_param(n, v.clone(), |c| c.with_bound_params(rest, value)),
        }
    }

    // ---- types ------------------------------------------------------------------

    /// The type a type name denotes. Associative array signatures are only for
    /// variable declarations ([`Checker::decl_type`]).
    pub fn resolve_type(&mut self, t: &ast::TypeName) -> Result<Type> {
        let base = self.base_type(&t.base, t.span)?;
        self.derive(base, &t.derived)
    }

    /// The type a declaration gives a variable, and its key types if it declares an
    /// associative array (the outermost derivation is a key signature).
    fn decl_type(&mut self, t: &ast::TypeName) -> Result<(Type, Option<Vec<Type>>)> {
        let base = self.base_type(&t.base, t.span)?;
        match t.derived.split_last() {
            Some((Derived::Assoc(params), inner)) => {
                let value = self.derive(base, inner)?;
                let mut keys = Vec::with_capacity(params.len());
                for p in params {
                    if let Some(ty) = &p.ty {
                        keys.push(self.resolve_type(ty)?);
                    }
                }
                Ok((value, Some(keys)))
            }
            _ => Ok((self.derive(base, &t.derived)?, None)),
        }
    }

    fn base_type(&mut self, base: &BaseType, span: Span) -> Result<Type> {
        let unknown =
            |name: &str| err(Tag::D_UNKNOWN, span, format!("failed to resolve type {name}: Unknown type name"));
        Ok(match base {
            BaseType::Intrinsic(name) => match intrinsic(name) {
                Some(t) => t,
                None => return unknown(name),
            },
            BaseType::String => Type::String,
            BaseType::Named(n) => match self.prog.types.typedefs.get(n) {
                Some(t) => t.clone(),
                None => match self.kernel.typedef(n, &mut self.prog.types) {
                    Some(t) => t,
                    None => return unknown(n),
                },
            },
            BaseType::Struct(tag) => Type::Struct(self.record_by_tag(false, tag)),
            BaseType::Union(tag) => Type::Union(self.record_by_tag(true, tag)),
            BaseType::Enum(tag) => match self.anon_enums.get(tag) {
                Some(&id) => Type::Enum(id),
                None => self.kernel_enum(tag).unwrap_or_else(|| Type::Enum(self.prog.types.enum_tag(local_tag(tag)))),
            },
        })
    }

    /// The struct or union a tag names: an anonymous one of this source, one of the
    /// program's (`D` and `C` scope the program's own), or a forward declaration (a
    /// tag of a kernel module, which user-space tracing has no types for).
    fn record_by_tag(&mut self, is_union: bool, tag: &str) -> RecordId {
        if let Some(&id) = self.anon_records.get(tag) {
            return id;
        }
        if let Some(Type::Struct(id) | Type::Union(id)) = self.kernel_record(is_union, tag) {
            return id;
        }
        self.prog.types.record_tag(is_union, local_tag(tag))
    }

    /// A tag the program has not defined, from the kernel's types: unscoped or scoped
    /// to the kernel (`vmlinux`task_struct`), as DTrace searches the kernel's CTF.
    fn kernel_record(&mut self, is_union: bool, tag: &str) -> Option<Type> {
        let t = &self.prog.types;
        let tags = if is_union { &t.union_tags } else { &t.struct_tags };
        let local = tags.get(local_tag(tag)).is_some_and(|&id| t.records[id].complete);
        if local || (tag.contains('`') && crate::ktypes::kernel_scoped(tag).is_none()) {
            return None;
        }
        self.kernel.record(is_union, tag, &mut self.prog.types)
    }

    fn kernel_enum(&mut self, tag: &str) -> Option<Type> {
        let t = &self.prog.types;
        let local = t.enum_tags.get(local_tag(tag)).is_some_and(|&id| t.enums[id].defined);
        if local || (tag.contains('`') && crate::ktypes::kernel_scoped(tag).is_none()) {
            return None;
        }
        self.kernel.enumeration(tag, &mut self.prog.types)
    }

    /// Applies declarator derivations to a base type, innermost first.
    fn derive(&mut self, mut ty: Type, derived: &[Derived]) -> Result<Type> {
        for (i, d) in derived.iter().enumerate() {
            ty = match d {
                Derived::Pointer => Type::Pointer(Box::new(ty)),
                Derived::Function(_) => Type::Function(Box::new(ty)),
                Derived::Array(dim, close) => {
                    if ty.is_void() {
                        return err(Tag::D_DECL_VOIDOBJ, *close, "cannot declare array of void");
                    }
                    let n = match dim {
                        Some(e) => self.array_dimension(e, *close)?,
                        None => 0,
                    };
                    Type::Array(Box::new(ty), n)
                }
                Derived::Assoc(_) => {
                    let span = derived[i + 1..]
                        .iter()
                        .find_map(|d| match d {
                            Derived::Array(_, close) => Some(*close),
                            _ => None,
                        })
                        .unwrap_or_default();
                    return err(Tag::D_DECL_DYNOBJ, span, "cannot declare array of associative arrays");
                }
            };
        }
        Ok(ty)
    }

    /// dt_decl_array: a dimension is a positive integral constant that fits 32 bits.
    fn array_dimension(&mut self, e: &ast::Expr, close: Span) -> Result<u64> {
        let v = self.expr(e)?;
        let Some(n) = positive_constant(&v) else {
            return err(
                Tag::D_DECL_ARRSUB,
                close,
                "positive integral constant expression or tuple signature expected as array declaration subscript",
            );
        };
        if n > u64::from(u32::MAX) {
            return err(Tag::D_DECL_ARRBIG, close, "array dimension too big");
        }
        Ok(n)
    }

    /// The name DTrace gives an incomplete type in its messages: a tag never
    /// defined is a forward declaration, which libctf names `struct`.
    pub(super) fn incomplete_name(&self, t: &Type, defining: Option<RecordId>) -> String {
        match t {
            Type::Struct(id) | Type::Union(id) if Some(*id) != defining => {
                format!("struct {}", self.prog.types.records[*id].tag)
            }
            other => self.type_name(other),
        }
    }

    /// Whether a type is a forward declaration or a struct or union without members:
    /// what nothing can be declared of.
    fn is_incomplete(&self, t: &Type) -> bool {
        match t {
            Type::Struct(id) | Type::Union(id) => {
                let r = &self.prog.types.records[*id];
                !r.complete || r.size == 0
            }
            Type::Enum(id) => !self.prog.types.enums[*id].defined,
            Type::Array(inner, _) => self.is_incomplete(inner),
            _ => false,
        }
    }

    // ---- struct, union and enum definitions -----------------------------------

    /// dt_decl_sou / dt_decl_enum: a tag already defined may not be defined again.
    fn check_redefinition(&mut self, kind: TagKind, tag: &str, open: Span) -> Result<()> {
        let tag = local_tag(tag);
        let t = &self.prog.types;
        let defined = match kind {
            TagKind::Enum => t.enum_tags.get(tag).is_some_and(|&id| !t.enums[id].values.is_empty()),
            TagKind::Struct => t.struct_tags.get(tag).is_some_and(|&id| t.records[id].complete),
            TagKind::Union => t.union_tags.get(tag).is_some_and(|&id| t.records[id].complete),
        };
        if defined {
            return err(Tag::D_DECL_TYPERED, open, format!("type redeclared: {} {tag}", kind.keyword()));
        }
        Ok(())
    }

    fn define(&mut self, d: &ast::TypeDef) -> Result<()> {
        if d.named {
            self.check_redefinition(d.kind, &d.tag, d.open)?;
        }
        match &d.body {
            TypeBody::Members(members) => self.define_record(d, members),
            TypeBody::Enumerators(values) => self.define_enum(d, values),
        }
    }

    fn define_record(&mut self, d: &ast::TypeDef, members: &[ast::Member]) -> Result<()> {
        let is_union = d.kind == TagKind::Union;
        let id = if d.named {
            // A definition is the program's own, never the kernel's type of that tag.
            self.prog.types.record_tag(is_union, local_tag(&d.tag))
        } else {
            let id = self.prog.types.anonymous_record(is_union);
            self.anon_records.insert(d.tag.clone(), id);
            id
        };
        let mut defs: Vec<MemberDef> = Vec::with_capacity(members.len());
        for m in members {
            if let Some(def) = self.record_member(m, id)? {
                if def.name.is_some() && defs.iter().any(|o| o.name == def.name) {
                    let name = def.name.unwrap_or_default();
                    return err(
                        Tag::D_UNKNOWN,
                        m.end,
                        format!("failed to define member '{name}': Duplicate member or variable name"),
                    );
                }
                defs.push(def);
            }
        }
        if self.prog.types.define_record(id, defs).is_none() {
            let kw = d.kind.keyword();
            return err(Tag::D_UNKNOWN, d.open, format!("{kw} {} is too large: its size overflows 64 bits", d.tag));
        }
        Ok(())
    }

    /// dt_decl_member: one member of the record `within`, or `None` for an unnamed
    /// bit-field of width zero (which only ends the current storage unit in C).
    fn record_member(&mut self, m: &ast::Member, within: RecordId) -> Result<Option<MemberDef>> {
        let idname = m.name.as_deref().unwrap_or("(anon)");
        let (ty, keys) = self.decl_type(&m.ty)?;
        if let Some(n) = m.name.as_deref().filter(|n| n.contains('`')) {
            return err(Tag::D_DECL_SCOPE, m.end, format!("D scoping operator may not be used in a member name ({n})"));
        }
        if keys.is_some() {
            return err(Tag::D_DECL_DYNOBJ, m.end, format!("cannot have dynamic member: {idname}"));
        }
        if self.is_incomplete(&ty) && !matches!(ty, Type::Array(..)) {
            let name = self.incomplete_name(&ty, Some(within));
            return err(Tag::D_DECL_INCOMPLETE, m.end, format!("incomplete struct/union/enum {name}: {idname}"));
        }
        if self.prog.types.size_of(&ty).unwrap_or(0) == 0 {
            return err(Tag::D_DECL_VOIDOBJ, m.end, format!("cannot have void member: {idname}"));
        }
        let Some(bits) = &m.bits else {
            return Ok(Some(MemberDef { name: m.name.clone(), ty, bits: None }));
        };
        let width = self.expr(bits)?;
        if m.name.is_none() && fold(&width) == Some(0) {
            return Ok(None);
        }
        let Some(width) = positive_constant(&width) else {
            return err(Tag::D_DECL_BFCONST, m.end, "positive integral constant expression expected as bit-field size");
        };
        let Some(limit) = int_bits(&ty) else {
            return err(Tag::D_DECL_BFTYPE, m.end, format!("invalid type for bit-field: {idname}"));
        };
        if width > limit {
            return err(Tag::D_DECL_BFSIZE, m.end, format!("bit-field too big for type: {idname}"));
        }
        Ok(Some(MemberDef { name: m.name.clone(), ty, bits: Some(width as u8) }))
    }

    fn define_enum(&mut self, d: &ast::TypeDef, values: &[ast::Enumerator]) -> Result<()> {
        let id = if d.named {
            self.prog.types.enum_tag(local_tag(&d.tag))
        } else {
            let id = self.prog.types.anonymous_enum();
            self.anon_enums.insert(d.tag.clone(), id);
            id
        };
        let mut last: i32 = -1;
        for e in values {
            let value = self.enumerator_value(e, id, last)?;
            if self.prog.types.enums[id].values.iter().any(|(n, _)| *n == e.name) {
                return err(
                    Tag::D_UNKNOWN,
                    e.end,
                    format!("failed to define enumerator '{}': Duplicate member or variable name", e.name),
                );
            }
            if self.is_global_identifier(&e.name) {
                return err(Tag::D_DECL_IDRED, e.end, format!("identifier redeclared: {}", e.name));
            }
            self.prog.types.enums[id].values.push((e.name.clone(), i64::from(value)));
            self.prog.types.enumerators.insert(e.name.clone(), (id, i64::from(value)));
            last = value;
        }
        self.prog.types.enums[id].defined = true;
        Ok(())
    }

    /// dt_decl_enumerator: the previous value plus one, or an integer constant that
    /// fits an int; an earlier enumerator of the same enum may be named.
    fn enumerator_value(&mut self, e: &ast::Enumerator, id: crate::types::EnumId, last: i32) -> Result<i32> {
        if e.name.contains('`') {
            return err(
                Tag::D_DECL_SCOPE,
                e.end,
                format!("D scoping operator may not be used in an enumerator name ({})", e.name),
            );
        }
        let Some(v) = &e.value else {
            return Ok(last.wrapping_add(1));
        };
        if let ast::ExprKind::Ident(n) = &v.kind {
            if let Some((_, val)) = self.prog.types.enums[id].values.iter().find(|(name, _)| name == n) {
                return Ok(*val as i32);
            }
        }
        let x = self.expr(v)?;
        let Some(c) = fold(&x).filter(|_| x.ty.is_integer()) else {
            return err(
                Tag::D_DECL_ENCONST,
                e.end,
                format!("enumerator '{}' must be assigned to an integral constant expression", e.name),
            );
        };
        i32::try_from(c as i64).or_else(|_| {
            err(Tag::D_DECL_ENOFLOW, e.end, format!("enumerator '{}' value overflows INT_MAX ({})", e.name, i32::MAX))
        })
    }

    /// Whether `name` is already a global identifier of the program: a variable, a
    /// built-in, an inline, an enumerator, a function or a D constant.
    fn is_global_identifier(&self, name: &str) -> bool {
        self.globals.contains_key(name)
            || builtin_var(name).is_some()
            || self.inlines.contains_key(name)
            || self.prog.types.enumerators.contains_key(name)
            || crate::subrs::find(name).is_some()
            || ACTIONS.contains(&name)
            || AggKind::from_name(name).is_some()
            || consts::lookup(name).is_some()
    }

    // ---- declarations -----------------------------------------------------------

    /// dt_node_decl: what a declaration declares depends on its storage class.
    fn decl(&mut self, d: &ast::Decl) -> Result<()> {
        let Some(name) = &d.name else {
            let ty = self.resolve_type(&d.ty)?;
            if !matches!(ty, Type::Struct(_) | Type::Union(_) | Type::Enum(_)) || !d.ty.derived.is_empty() {
                return err(Tag::D_DECL_USELESS, d.end, "useless declaration");
            }
            return Ok(());
        };
        if name.contains('`') {
            return err(
                Tag::D_DECL_SCOPE,
                d.end,
                format!("D scoping operator may not be used in a declaration name ({name})"),
            );
        }
        let (ty, keys) = self.decl_type(&d.ty)?;
        let mut class = d.class;
        if matches!(ty, Type::Function(_)) && matches!(class, None | Some(StorageClass::Static)) {
            class = Some(StorageClass::Extern);
        }
        match class {
            Some(StorageClass::Auto | StorageClass::Register | StorageClass::Static) => {
                err(Tag::D_DECL_BADCLASS, d.end, "specified storage class not appropriate in D")
            }
            Some(StorageClass::Extern) => {
                self.externs.insert(name.clone(), ty);
                Ok(())
            }
            Some(StorageClass::Typedef) => self.typedef(name, ty, d.end),
            Some(StorageClass::Thread) => self.var_decl(VarScope::Thread, name, ty, keys, d),
            Some(StorageClass::Clause) => self.var_decl(VarScope::Clause, name, ty, keys, d),
            None => self.var_decl(VarScope::Global, name, ty, keys, d),
        }
    }

    fn typedef(&mut self, name: &str, ty: Type, at: Span) -> Result<()> {
        if self.globals.contains_key(name) {
            return err(Tag::D_DECL_IDRED, at, format!("global variable identifier redeclared: {name}"));
        }
        if let Some(old) = self.prog.types.typedefs.get(name) {
            // A system header (`-C` with <stdint.h>) typedefs `int8_t` again: the
            // program's typedef then shadows the built-in one, which is kept when
            // it is of the same size (its name reads better in messages).
            if self.in_library || self.own_typedefs.contains(name) {
                return err(Tag::D_DECL_IDRED, at, format!("typedef redeclared: {name}"));
            }
            let size = |t: &Type| self.prog.types.size_of(t);
            if size(old).is_some() && size(old) == size(&ty) {
                return Ok(());
            }
        }
        if !self.in_library {
            self.own_typedefs.insert(name.to_string());
        }
        self.prog.types.typedefs.insert(name.to_string(), ty);
        Ok(())
    }

    fn var_decl(
        &mut self,
        scope: VarScope,
        name: &str,
        ty: Type,
        keys: Option<Vec<Type>>,
        d: &ast::Decl,
    ) -> Result<()> {
        let at = d.end;
        if matches!(d.ty.derived.last(), Some(Derived::Array(None, _))) {
            return err(
                Tag::D_DECL_ARRNULL,
                at,
                format!("array declaration requires array dimension or tuple signature: {name}"),
            );
        }
        // Built-ins are globals: `self int trace;` (DTraceToolkit's rfileio.d) names a
        // thread-local variable and shadows nothing, as in dt_node_decl.
        if scope == VarScope::Global && self.is_builtin_ident(name) {
            return err(Tag::D_DECL_IDRED, at, format!("built-in identifier redeclared: {name}"));
        }
        if self.prog.types.typedefs.contains_key(name) {
            return err(Tag::D_DECL_IDRED, at, format!("typedef identifier redeclared: {name}"));
        }
        if keys.is_some() && scope == VarScope::Clause {
            return err(
                Tag::D_DECL_LOCASSC,
                at,
                format!("associative arrays may not be declared as local variables: {name}"),
            );
        }
        if let Some(id) = self.lookup_var(scope, name) {
            return self.redeclaration(VarRef { scope, id }, name, &ty, keys.as_deref(), at);
        }
        if ty.is_void() {
            return err(Tag::D_DECL_VOIDOBJ, at, format!("cannot have void object: {name}"));
        }
        if self.is_incomplete(&ty) {
            let tn = self.incomplete_name(&ty, None);
            return err(Tag::D_DECL_INCOMPLETE, at, format!("incomplete struct/union/enum {tn}: {name}"));
        }
        let (map, list) = match scope {
            VarScope::Global => (&mut self.globals, &mut self.prog.globals),
            VarScope::Thread => (&mut self.thread, &mut self.prog.thread_vars),
            VarScope::Clause => (&mut self.clause, &mut self.prog.clause_vars),
        };
        map.insert(name.to_string(), list.len());
        list.push(VarInfo { name: name.to_string(), ty, keys });
        Ok(())
    }

    /// A variable declared again must be declared the same way.
    fn redeclaration(&self, r: VarRef, name: &str, ty: &Type, keys: Option<&[Type]>, at: Span) -> Result<()> {
        let prev = self.var_info(r);
        let kind = |k: bool| if k { "associative array" } else { "scalar" };
        if prev.keys.is_some() != keys.is_some() || prev.ty != *ty {
            return err(
                Tag::D_DECL_IDRED,
                at,
                format!(
                    "identifier redeclared: {name}\n\t current: {} {}\n\tprevious: {} {}",
                    kind(keys.is_some()),
                    self.type_name(ty),
                    kind(prev.keys.is_some()),
                    self.type_name(&prev.ty)
                ),
            );
        }
        let (Some(old), Some(new)) = (&prev.keys, keys) else { return Ok(()) };
        for (i, (a, b)) in new.iter().zip(old).enumerate() {
            if a != b {
                return err(
                    Tag::D_DECL_IDRED,
                    at,
                    format!(
                        "identifier redeclared: {name}\n\t current: associative array, key #{n} of type {}\n\tprevious: associative array, key #{n} of type {}",
                        self.type_name(a),
                        self.type_name(b),
                        n = i + 1
                    ),
                );
            }
        }
        if old.len() != new.len() {
            return err(
                Tag::D_DECL_IDRED,
                at,
                format!(
                    "identifier redeclared: {name}\n\t current: associative array of {}, tuple length {}\n\tprevious: associative array of {}, tuple length {}",
                    self.type_name(ty),
                    new.len(),
                    self.type_name(&prev.ty),
                    old.len()
                ),
            );
        }
        Ok(())
    }
}

/// A tag without the `D` or `C` module scope, which name the program's own types.
fn local_tag(tag: &str) -> &str {
    match tag.split_once('`') {
        Some(("D" | "C", name)) => name,
        _ => tag,
    }
}
