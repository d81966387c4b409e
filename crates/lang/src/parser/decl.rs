//! Declarations: specifiers, C declarators (pointers, arrays, functions, grouping
//! parentheses), struct/union/enum definitions with bit-fields, inlines and
//! translators, following DTrace's `dt_grammar.y` and the specifier rules of
//! `dt_decl.c`. Each declaration is handed to the parser's [`DeclSink`] as soon as it
//! is complete, as DTrace acts on declarations while it parses.

use super::*;

/// Which storage classes a list of specifiers may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SpecCtx {
    /// A file-scope declaration: any class, `self` and `this` included.
    File,
    /// A function or key parameter: the C classes (DTrace rejects most of them later).
    Param,
    /// A type name or a member: no storage class.
    Type,
}

/// What a declarator may be: named (declarations, members), abstract (type names)
/// or either (parameters).
#[derive(Clone, Copy, PartialEq, Eq)]
enum DeclMode {
    Named,
    Abstract,
    Either,
}

/// The kind of type the specifiers name so far (`dd_kind` in `dt_decl.c`).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum SpecKind {
    #[default]
    Unknown,
    Integer,
    Float,
    Typedef,
    Tagged(TagKind),
}

/// Declaration specifiers as DTrace accumulates them: one type specifier, any
/// number of size and sign attributes, qualifiers and one storage class. Impossible
/// combinations are rejected as they are read, with `dt_decl_check`'s tags.
#[derive(Default)]
pub(super) struct Specs {
    pub class: Option<StorageClass>,
    class_span: Option<Span>,
    kind: SpecKind,
    /// `char`, `int`, `void`, `float`, `double`, `string`, a typedef name or a tag.
    name: Option<String>,
    short: bool,
    long: bool,
    longlong: bool,
    signed: bool,
    unsigned: bool,
    qualified: bool,
    /// The first and last specifier tokens.
    span: Option<Span>,
}

impl Specs {
    fn any_type(&self) -> bool {
        self.kind != SpecKind::Unknown
            || self.name.is_some()
            || self.short
            || self.long
            || self.longlong
            || self.signed
            || self.unsigned
            || self.qualified
    }

    fn extend(&mut self, span: Span) {
        self.span = Some(self.span.map_or(span, |s| s.to(span)));
    }

    /// `dt_decl_check`: size and sign attributes only go with the types they fit.
    fn check(&self, span: Span) -> Result<()> {
        if self.kind == SpecKind::Unknown {
            return Ok(());
        }
        let sized = self.short || self.long || self.longlong;
        if self.name.as_deref() == Some("char") && sized {
            return Err(CompileError::new(
                Tag::D_DECL_CHARATTR,
                span,
                "invalid type declaration: short and long may not be used with char type",
            ));
        }
        if self.name.as_deref() == Some("void") && (sized || self.signed || self.unsigned) {
            return Err(CompileError::new(
                Tag::D_DECL_VOIDATTR,
                span,
                "invalid type declaration: attributes may not be used with void type",
            ));
        }
        if self.kind != SpecKind::Integer && (self.signed || self.unsigned) {
            return Err(CompileError::new(
                Tag::D_DECL_SIGNINT,
                span,
                "invalid type declaration: signed and unsigned may only be used with integer type",
            ));
        }
        if !matches!(self.kind, SpecKind::Integer | SpecKind::Float) && (self.long || self.longlong) {
            return Err(CompileError::new(
                Tag::D_DECL_LONGINT,
                span,
                "invalid type declaration: long and long long may only be used with integer or floating-point type",
            ));
        }
        Ok(())
    }

    /// `dt_decl_spec`: a second type specifier is an invalid combination.
    fn spec(&mut self, kind: SpecKind, name: Option<String>, span: Span) -> Result<()> {
        if self.name.is_some() || self.kind != SpecKind::Unknown {
            return Err(CompileError::new(Tag::D_DECL_COMBO, span, "invalid type combination"));
        }
        self.kind = kind;
        self.name = name;
        self.check(span)
    }

    /// `dt_decl_attr`: a second `long` makes `long long`.
    fn attr(&mut self, word: &str, span: Span) -> Result<()> {
        match word {
            "short" => self.short = true,
            "long" if self.long => {
                self.long = false;
                self.longlong = true;
            }
            "long" => self.long = true,
            "signed" => self.signed = true,
            "unsigned" => self.unsigned = true,
            _ => self.qualified = true,
        }
        self.check(span)
    }

    /// The base type, named as `dt_decl_type` composes the names of intrinsics: the
    /// attributes in a fixed order, then the specifier unless `int` follows a size.
    fn base(&self) -> BaseType {
        match self.kind {
            SpecKind::Tagged(TagKind::Struct) => BaseType::Struct(self.name.clone().unwrap_or_default()),
            SpecKind::Tagged(TagKind::Union) => BaseType::Union(self.name.clone().unwrap_or_default()),
            SpecKind::Tagged(TagKind::Enum) => BaseType::Enum(self.name.clone().unwrap_or_default()),
            SpecKind::Typedef if self.name.as_deref() == Some("string") => BaseType::String,
            SpecKind::Typedef => BaseType::Named(self.name.clone().unwrap_or_default()),
            SpecKind::Unknown | SpecKind::Integer | SpecKind::Float => {
                let mut n = String::new();
                for (on, word) in [
                    (self.signed, "signed "),
                    (self.unsigned, "unsigned "),
                    (self.short, "short "),
                    (self.long, "long "),
                    (self.longlong, "long long "),
                ] {
                    if on {
                        n.push_str(word);
                    }
                }
                let sized = self.short || self.long || self.longlong;
                let attrs = sized || self.signed || self.unsigned || self.qualified;
                match &self.name {
                    Some(name) if self.kind != SpecKind::Integer || !sized => n.push_str(name),
                    None if !attrs => n.push_str("int"),
                    _ => {}
                }
                BaseType::Intrinsic(n)
            }
        }
    }
}

/// A declarator: the declared name (if any) and what it derives from the base type.
struct Declarator {
    name: Option<(String, Span)>,
    derived: Vec<Derived>,
}

/// What a prototype's parameters may be (`dt_decl_prototype`'s flags).
#[derive(Clone, Copy)]
struct ProtoRules {
    kind: &'static str,
    varargs: bool,
    void: bool,
}

const FUNCTION_PROTO: ProtoRules = ProtoRules { kind: "function", varargs: true, void: true };
const ARRAY_PROTO: ProtoRules = ProtoRules { kind: "array", varargs: false, void: false };
/// dt_node_probe's `DT_DP_VOID | DT_DP_ANON` and `DT_DP_VOID`.
const PROBE_INPUT: ProtoRules = ProtoRules { kind: "probe input", varargs: false, void: true };
const PROBE_OUTPUT: ProtoRules = ProtoRules { kind: "probe output", varargs: false, void: true };

/// Whether a parameter is `void` alone.
fn is_void(t: &TypeName) -> bool {
    t.derived.is_empty() && t.base == BaseType::Intrinsic("void".into())
}

/// Whether a parameter is an associative array (DTrace's dynamic type).
fn is_dynamic(t: &TypeName) -> bool {
    matches!(t.derived.last(), Some(Derived::Assoc(_)))
}

/// `dt_decl_prototype`: the checks DTrace makes of a parameter list as it parses it.
/// `inputs`: for a probe's output prototype, the input prototype its names refer to.
fn check_prototype(params: &[Param], inputs: Option<&[Param]>, rules: ProtoRules, close: Span) -> Result<()> {
    let mut voids = 0;
    for (i, p) in params.iter().enumerate() {
        let n = i + 1;
        let name = p.name.as_deref().unwrap_or("(anonymous)");
        let Some(ty) = &p.ty else {
            if !rules.varargs {
                return Err(CompileError::new(
                    Tag::D_DECL_PROTO_VARARGS,
                    close,
                    format!("{} prototype may not use a variable-length argument list", rules.kind),
                ));
            }
            continue;
        };
        if is_dynamic(ty) {
            return Err(CompileError::new(
                Tag::D_DECL_PROTO_TYPE,
                close,
                format!(
                    "{} prototype may not use parameter of type dynamic variable: {name}, parameter #{n}",
                    rules.kind
                ),
            ));
        }
        let void = is_void(ty);
        voids += usize::from(void);
        if void && !rules.void {
            return Err(CompileError::new(
                Tag::D_DECL_PROTO_TYPE,
                close,
                format!("{} prototype may not use parameter of type void: {name}, parameter #{n}", rules.kind),
            ));
        }
        if void && p.name.is_some() {
            return Err(CompileError::new(
                Tag::D_DECL_PROTO_NAME,
                close,
                format!("void parameter may not have a name: {name}"),
            ));
        }
        // dt_decl_protoform: a parameter of a list of its own is declared once; one of a
        // probe's output prototype names an input parameter (any number of times:
        // `(int j, int i, int i, int j)` maps the inputs to four outputs).
        match inputs {
            None if p.name.is_some() && params[..i].iter().any(|q| q.name == p.name) => {
                return Err(CompileError::new(
                    Tag::D_DECL_PROTO_FORM,
                    close,
                    format!("parameter is already declared in {} prototype: {name}, parameter #{n}", rules.kind),
                ));
            }
            Some(inputs) if p.name.is_some() && !inputs.iter().any(|q| q.name == p.name) => {
                return Err(CompileError::new(
                    Tag::D_DECL_PROTO_FORM,
                    close,
                    format!("parameter is not declared in {} prototype: {name}, parameter #{n}", rules.kind),
                ));
            }
            // The output prototype's parameters are named (no DT_DP_ANON).
            Some(_) if p.name.is_none() && !void => {
                return Err(CompileError::new(
                    Tag::D_DECL_PROTO_NAME,
                    close,
                    format!("parameter declaration requires a name: parameter #{n}"),
                ));
            }
            _ => {}
        }
    }
    if voids != 0 && params.len() > 1 {
        return Err(CompileError::new(Tag::D_DECL_PROTO_VOID, close, "void must be sole parameter"));
    }
    Ok(())
}

impl Parser<'_, '_> {
    fn type_words(w: &str) -> bool {
        TYPE_KEYWORDS.contains(&w)
    }

    /// Hands a complete item to the sink and keeps it.
    pub(super) fn emit(&mut self, item: Item) -> Result<()> {
        self.sink.item(&item)?;
        self.items.push(item);
        Ok(())
    }

    /// `type_name`: specifiers, then an abstract declarator (casts, `sizeof`,
    /// `offsetof`, `xlate`, translator types).
    pub(super) fn type_name(&mut self) -> Result<TypeName> {
        let specs = self.specifiers(SpecCtx::Type)?;
        let Some(start) = specs.span.filter(|_| specs.any_type()) else {
            let t = self.peek()?;
            return Err(self.unexpected(&t));
        };
        let d = self.declarator(DeclMode::Abstract)?;
        let span = start.to(Span::new(self.pos, self.pos));
        Ok(TypeName { base: specs.base(), derived: d.derived, span })
    }

    /// Declaration specifiers in any order. Struct, union and enum definitions among
    /// them are handed to the sink as they complete.
    pub(super) fn specifiers(&mut self, ctx: SpecCtx) -> Result<Specs> {
        let mut s = Specs::default();
        loop {
            let t = self.peek()?;
            let w = match &t.kind {
                TokKind::Ident(w) => w.clone(),
                _ => break,
            };
            let class = match w.as_str() {
                "auto" => Some(StorageClass::Auto),
                "register" => Some(StorageClass::Register),
                "static" => Some(StorageClass::Static),
                "extern" => Some(StorageClass::Extern),
                "typedef" => Some(StorageClass::Typedef),
                "self" if ctx == SpecCtx::File => Some(StorageClass::Thread),
                "this" if ctx == SpecCtx::File => Some(StorageClass::Clause),
                _ => None,
            };
            if let Some(class) = class {
                if ctx == SpecCtx::Type {
                    break;
                }
                if s.class.is_some() {
                    return Err(CompileError::new(
                        Tag::D_DECL_CLASS,
                        t.span,
                        "only one storage class allowed in a declaration",
                    ));
                }
                s.class = Some(class);
                s.class_span = Some(t.span);
                s.extend(t.span);
                self.bump()?;
                continue;
            }
            match w.as_str() {
                "const" | "volatile" | "restrict" | "signed" | "unsigned" | "short" | "long" => {
                    s.attr(&w, t.span)?;
                }
                "void" | "char" | "int" => s.spec(SpecKind::Integer, Some(w.clone()), t.span)?,
                "float" | "double" => s.spec(SpecKind::Float, Some(w.clone()), t.span)?,
                "string" => s.spec(SpecKind::Typedef, Some(w.clone()), t.span)?,
                "struct" | "union" | "enum" => {
                    s.extend(t.span);
                    let kind = match w.as_str() {
                        "struct" => TagKind::Struct,
                        "union" => TagKind::Union,
                        _ => TagKind::Enum,
                    };
                    self.nested(|p| p.tagged_type(kind, &mut s))?;
                    s.extend(Span::new(self.pos, self.pos));
                    continue;
                }
                _ if !KEYWORDS.contains(&w.as_str()) && self.is_type_name(&w) => {
                    // After a type specifier a type name is the declared identifier,
                    // as DTrace's lexer returns it (`typedef int foo; int foo;`).
                    if s.name.is_some() {
                        break;
                    }
                    s.spec(SpecKind::Typedef, Some(w.clone()), t.span)?;
                }
                _ => break,
            }
            s.extend(t.span);
            self.bump()?;
        }
        if s.class_span.is_some() && !s.any_type() {
            // A storage class alone declares an int (`extern x;`).
            s.kind = SpecKind::Integer;
        }
        Ok(s)
    }

    /// After `struct`/`union`/`enum` (not yet consumed): a tag reference or a
    /// definition, which goes to the sink before the enclosing declaration.
    fn tagged_type(&mut self, kind: TagKind, s: &mut Specs) -> Result<()> {
        let kw = self.bump()?;
        let t = self.peek()?;
        let tag = match &t.kind {
            TokKind::Ident(name) if !KEYWORDS.contains(&name.as_str()) => Some(name.clone()),
            // A module-scoped tag (`struct D`s`, `struct can`dev_rcv_lists`).
            TokKind::Backquoted { .. } => Some(self.src[t.span.range()].to_string()),
            _ => None,
        };
        if tag.is_some() {
            self.bump()?;
        }
        let open = self.peek()?;
        let defines = is_punct(&open, "{");
        if !defines && tag.is_none() {
            return Err(self.unexpected(&open));
        }
        let named = tag.is_some();
        let tag = tag.unwrap_or_else(|| {
            self.anon += 1;
            format!("__anon{}", self.anon)
        });
        s.spec(SpecKind::Tagged(kind), Some(tag.clone()), if defines { open.span } else { kw.span })?;
        if !defines {
            return Ok(());
        }
        self.bump()?;
        if named {
            self.sink.open_definition(kind, &tag, open.span)?;
        }
        // A definition costs more stack per level than an expression does: it counts
        // twice towards the nesting limit.
        let body = self.nested(|p| match kind {
            TagKind::Enum => p.enumerators().map(TypeBody::Enumerators),
            _ => p.members().map(TypeBody::Members),
        })?;
        self.emit(Item::Define(TypeDef { kind, tag, named, body, open: open.span }))
    }

    /// Struct or union members up to and including `}`.
    fn members(&mut self) -> Result<Vec<Member>> {
        let mut members = Vec::new();
        loop {
            let specs = self.specifiers(SpecCtx::Type)?;
            if !specs.any_type() {
                let t = self.peek()?;
                return Err(self.unexpected(&t));
            }
            let base = specs.base();
            let start = specs.span.unwrap_or_default();
            loop {
                let (name, derived) = if self.peek_punct(":")? {
                    (None, Vec::new())
                } else {
                    let d = self.declarator(DeclMode::Named)?;
                    (d.name.map(|(n, _)| n), d.derived)
                };
                let bits = if self.eat(":")?.is_some() { Some(self.conditional()?) } else { None };
                let end = self.peek()?.span;
                let ty = TypeName { base: base.clone(), derived, span: start.to(end) };
                members.push(Member { name, ty, bits, end });
                if self.eat(",")?.is_none() {
                    break;
                }
            }
            self.expect(";")?;
            if self.eat("}")?.is_some() {
                return Ok(members);
            }
        }
    }

    /// Enumerators up to and including `}`.
    fn enumerators(&mut self) -> Result<Vec<Enumerator>> {
        let mut values = Vec::new();
        loop {
            let t = self.peek()?;
            let name = match &t.kind {
                TokKind::Ident(n) if !KEYWORDS.contains(&n.as_str()) => n.clone(),
                TokKind::Backquoted { .. } => self.src[t.span.range()].to_string(),
                _ => return Err(self.unexpected(&t)),
            };
            self.bump()?;
            let value = if self.eat("=")?.is_some() { Some(self.conditional()?) } else { None };
            let end = self.peek()?.span;
            values.push(Enumerator { name, value, end });
            if self.eat(",")?.is_none() {
                self.expect("}")?;
                return Ok(values);
            }
        }
    }

    /// Whether a `(` in a declarator groups (`(*fp)`) rather than opens a parameter
    /// list (`(int, char)`, `()`).
    fn paren_groups(&mut self, mode: DeclMode) -> Result<bool> {
        if mode == DeclMode::Named {
            return Ok(true);
        }
        let next = self.peek2()?;
        Ok(match &next.kind {
            TokKind::Punct(p) => matches!(*p, "*" | "(" | "["),
            TokKind::Ident(w) => mode == DeclMode::Either && !KEYWORDS.contains(&w.as_str()) && !self.is_type_name(w),
            TokKind::Backquoted { .. } => mode == DeclMode::Either,
            _ => false,
        })
    }

    /// A declarator: `*`s (each with optional qualifiers), a name or a parenthesized
    /// declarator, then array and function suffixes. What it derives is listed from
    /// the base type outwards, as C reads declarators inside out.
    fn declarator(&mut self, mode: DeclMode) -> Result<Declarator> {
        self.nested(|p| p.declarator_inner(mode))
    }

    fn declarator_inner(&mut self, mode: DeclMode) -> Result<Declarator> {
        let mut pointers = 0;
        while self.eat("*")?.is_some() {
            pointers += 1;
            while let TokKind::Ident(w) = self.peek()?.kind {
                if !matches!(w.as_str(), "const" | "volatile" | "restrict") {
                    break;
                }
                self.bump()?;
            }
        }
        let t = self.peek()?;
        let mut name = None;
        let mut inner = None;
        match &t.kind {
            TokKind::Ident(w) if mode != DeclMode::Abstract && !KEYWORDS.contains(&w.as_str()) => {
                name = Some((w.clone(), t.span));
                self.bump()?;
            }
            TokKind::Backquoted { .. } if mode != DeclMode::Abstract => {
                name = Some((self.src[t.span.range()].to_string(), t.span));
                self.bump()?;
            }
            TokKind::Punct("(") if self.paren_groups(mode)? => {
                self.bump()?;
                let d = self.declarator(mode)?;
                self.expect(")")?;
                name = d.name.clone();
                inner = Some(d);
            }
            _ if mode == DeclMode::Named => return Err(self.unexpected(&t)),
            _ => {}
        }
        let mut suffixes = Vec::new();
        loop {
            if self.peek_punct("[")? {
                suffixes.push(self.array_suffix()?);
            } else if self.peek_punct("(")? {
                self.bump()?;
                let params = if self.peek_punct(")")? { Vec::new() } else { self.parameters()? };
                let close = self.expect(")")?;
                check_prototype(&params, None, FUNCTION_PROTO, close.span)?;
                suffixes.push(Derived::Function(params));
            } else {
                break;
            }
        }
        let mut derived = vec![Derived::Pointer; pointers];
        derived.extend(suffixes.into_iter().rev());
        if let Some(d) = inner {
            derived.extend(d.derived);
        }
        Ok(Declarator { name, derived })
    }

    /// `[N]`, `[]` or an associative array's key signature `[type, …]`.
    fn array_suffix(&mut self) -> Result<Derived> {
        self.bump()?;
        let t = self.peek()?;
        if is_punct(&t, "]") {
            let close = self.bump()?;
            return Ok(Derived::Array(None, close.span));
        }
        if is_punct(&t, "...") || self.starts_type(&t) {
            let params = self.parameters()?;
            let close = self.expect("]")?;
            check_prototype(&params, None, ARRAY_PROTO, close.span)?;
            return Ok(Derived::Assoc(params));
        }
        let dim = self.conditional()?;
        let close = self.expect("]")?;
        Ok(Derived::Array(Some(boxed(dim)), close.span))
    }

    /// `parameter_type_list`: parameter declarations, possibly ending in `...`.
    fn parameters(&mut self) -> Result<Vec<Param>> {
        let mut params = Vec::new();
        loop {
            if let Some(dots) = self.eat("...")? {
                params.push(Param { ty: None, name: None, span: dots.span });
                break;
            }
            params.push(self.parameter()?);
            if self.eat(",")?.is_none() {
                break;
            }
        }
        Ok(params)
    }

    fn parameter(&mut self) -> Result<Param> {
        let specs = self.specifiers(SpecCtx::Param)?;
        let Some(start) = specs.span.filter(|_| specs.any_type() || specs.class.is_some()) else {
            let t = self.peek()?;
            return Err(self.unexpected(&t));
        };
        let d = self.declarator(DeclMode::Either)?;
        let end = self.peek()?.span;
        if !matches!(specs.class, None | Some(StorageClass::Register)) {
            return Err(CompileError::new(
                Tag::D_DECL_PARMCLASS,
                end,
                "inappropriate storage class for function or associative array parameter",
            ));
        }
        let span = start.to(Span::new(self.pos, self.pos));
        let ty = TypeName { base: specs.base(), derived: d.derived, span };
        Ok(Param { ty: Some(ty), name: d.name.map(|(n, _)| n), span })
    }

    // ---- file-scope declarations ------------------------------------------------

    /// A file-scope declaration: variables, typedefs, externs, prototypes,
    /// struct/union/enum definitions, inlines, translators, providers.
    pub(super) fn declaration(&mut self) -> Result<()> {
        self.mode = Mode::Expr;
        let t = self.peek()?;
        match &t.kind {
            TokKind::Ident(w) if w == "inline" => return self.inline(t),
            TokKind::Ident(w) if w == "translator" => return self.translator(t),
            TokKind::Ident(w) if w == "provider" => return self.provider(t),
            _ => {}
        }
        let specs = self.specifiers(SpecCtx::File)?;
        if !specs.any_type() {
            let t = self.peek()?;
            return Err(self.unexpected(&t));
        }
        let base = specs.base();
        let start = specs.span.unwrap_or(t.span);
        if let Some(semi) = self.eat(";")? {
            let ty = TypeName::new(base, start);
            let decl = Decl { class: specs.class, ty, name: None, name_span: semi.span, end: semi.span };
            return self.emit(Item::Decl(decl));
        }
        loop {
            let d = self.declarator(DeclMode::Named)?;
            let end = self.peek()?.span;
            let (name, name_span) = d.name.unwrap_or_default();
            if specs.class == Some(StorageClass::Typedef) {
                self.typedefs.insert(name.clone());
            }
            let ty = TypeName { base: base.clone(), derived: d.derived, span: start.to(name_span) };
            let decl = Decl { class: specs.class, ty, name: Some(name), name_span, end };
            self.emit(Item::Decl(decl))?;
            if self.eat(",")?.is_none() {
                break;
            }
        }
        self.expect(";")?;
        Ok(())
    }

    /// `inline type name = expression;`
    fn inline(&mut self, kw: Token) -> Result<()> {
        self.bump()?;
        let specs = self.specifiers(SpecCtx::Type)?;
        if !specs.any_type() {
            let t = self.peek()?;
            return Err(self.unexpected(&t));
        }
        let start = specs.span.unwrap_or(kw.span);
        let d = self.declarator(DeclMode::Named)?;
        self.expect("=")?;
        let value = self.assign()?;
        let semi = self.expect(";")?;
        let (name, name_span) = d.name.unwrap_or_default();
        let ty = TypeName { base: specs.base(), derived: d.derived, span: start.to(name_span) };
        let span = kw.span.to(semi.span);
        self.emit(Item::Inline(Inline { ty, name, value, span }))
    }

    /// `translator output < input name > { member = expression; … };`
    fn translator(&mut self, kw: Token) -> Result<()> {
        self.bump()?;
        let output = self.type_name()?;
        self.expect("<")?;
        let input = self.type_name()?;
        let t = self.peek()?;
        let param = match &t.kind {
            TokKind::Ident(n) if !KEYWORDS.contains(&n.as_str()) => n.clone(),
            _ => return Err(self.unexpected(&t)),
        };
        self.bump()?;
        let head_end = self.expect(">")?.span;
        self.expect("{")?;
        let mut members = Vec::new();
        while self.eat("}")?.is_none() {
            let t = self.peek()?;
            let name = match &t.kind {
                TokKind::Ident(n) if !KEYWORDS.contains(&n.as_str()) => n.clone(),
                _ => return Err(self.unexpected(&t)),
            };
            self.bump()?;
            self.expect("=")?;
            let value = self.assign()?;
            let end = self.expect(";")?.span;
            members.push(XlateMember { name, value, end });
        }
        let semi = self.expect(";")?;
        let span = kw.span.to(semi.span);
        self.emit(Item::Translator(Translator { output, input, param, members, head_end, span }))
    }

    /// `provider name { probe name(args) [: (args)]; … };` (dt_grammar.y's
    /// `provider_definition`).
    fn provider(&mut self, kw: Token) -> Result<()> {
        self.bump()?;
        let t = self.bump()?;
        let name = match &t.kind {
            TokKind::Ident(n) if !KEYWORDS.contains(&n.as_str()) => n.clone(),
            _ => return Err(self.unexpected(&t)),
        };
        self.expect("{")?;
        let mut probes = Vec::new();
        while self.eat("}")?.is_none() {
            let t = self.bump()?;
            if !matches!(&t.kind, TokKind::Ident(w) if w == "probe") {
                return Err(self.unexpected(&t));
            }
            let n = self.bump()?;
            let probe = match &n.kind {
                TokKind::Ident(p) if !KEYWORDS.contains(&p.as_str()) => p.clone(),
                _ => return Err(self.unexpected(&n)),
            };
            let native = self.probe_prototype(None)?;
            let translated = match self.eat(":")? {
                Some(_) => Some(self.probe_prototype(Some(&native))?),
                None => None,
            };
            let semi = self.expect(";")?;
            probes.push(ProbeDef { name: probe, native, translated, span: t.span.to(semi.span) });
        }
        let semi = self.expect(";")?;
        self.emit(Item::Provider(ProviderDef { name, probes, span: kw.span.to(semi.span) }))
    }

    /// A probe's `( parameters )`, its input prototype or (`inputs` given) its output
    /// one; `(void)` is no parameter.
    fn probe_prototype(&mut self, inputs: Option<&[Param]>) -> Result<Vec<Param>> {
        self.expect("(")?;
        let params = if self.peek_punct(")")? { Vec::new() } else { self.parameters()? };
        let close = self.expect(")")?;
        let rules = if inputs.is_some() { PROBE_OUTPUT } else { PROBE_INPUT };
        check_prototype(&params, inputs, rules, close.span)?;
        Ok(params.into_iter().filter(|p| !p.ty.as_ref().is_some_and(is_void)).collect())
    }

    /// Whether `t` starts a type name inside an expression.
    pub(super) fn starts_type(&self, t: &Token) -> bool {
        match &t.kind {
            TokKind::Ident(w) => Self::type_words(w) || self.is_type_name(w),
            _ => false,
        }
    }
}
