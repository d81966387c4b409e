//! The syntax tree of a D program, as written. The parser builds it; the checker
//! (`check`) resolves names and types over it. Every node carries the byte span of its
//! source text so that every later error can point at a line and a column.

use crate::span::Span;

/// A whole D program: the items of every `-n`/`-s` source, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `probe-descriptions [/predicate/] [{ statements }]`
    Clause(Clause),
    /// `#pragma D option name[=value]` and the other `#pragma D` control directives.
    Pragma(Pragma),
    /// A struct, union or enum definition. One nested in another definition's members
    /// or in a declaration's specifiers is its own item, ahead of what contains it.
    Define(TypeDef),
    /// A declaration at file scope: variables (`int x;`, `self string s;`,
    /// `int a[string, int];`), typedefs, externs and prototypes, and declarations of
    /// nothing but a type (`struct s;`, `extern int;`).
    Decl(Decl),
    /// `inline type name = expression;`
    Inline(Inline),
    /// `translator output < input name > { member = expression; … };`
    Translator(Translator),
    /// `provider name { probe name(args) [: (translated args)]; … };`
    Provider(ProviderDef),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Clause {
    pub probes: Vec<ProbeDesc>,
    pub predicate: Option<Expr>,
    /// `None` when the clause has no braces at all (`-n BEGIN`): the default action,
    /// which traces the probe. `Some(vec![])` for `BEGIN {}`.
    pub body: Option<Vec<Stmt>>,
    pub span: Span,
}

/// One probe description as written, split at unescaped `:` into up to four fields.
/// Fewer than four fields are right-aligned as dtrace does: `BEGIN` is
/// `("", "", "", "BEGIN")`, `syscall::read:entry` is all four.
/// Macro variables inside a description (`pid$target`, `$1`) are kept verbatim here;
/// the checker substitutes them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeDesc {
    /// The whole description text, exactly as written (for messages).
    pub text: String,
    pub provider: String,
    pub module: String,
    pub function: String,
    pub name: String,
    /// A description written as a probe id (`-i 3`, or `3 { … }` in a program): the
    /// fields are empty until the id is resolved to its probe's name.
    pub id: Option<u32>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pragma {
    /// The words after `#pragma D`: `["option", "quiet"]`, `["option", "bufsize=4m"]`,
    /// `["depends_on", "module", "foo"]`. The checker validates them.
    pub words: Vec<String>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarScope {
    Global,
    /// `self` (thread-local)
    Thread,
    /// `this` (clause-local)
    Clause,
}

/// The storage class of a declaration, D's `self` and `this` included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageClass {
    Auto,
    Register,
    Static,
    Extern,
    Typedef,
    /// `self`
    Thread,
    /// `this`
    Clause,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decl {
    pub class: Option<StorageClass>,
    /// The declared type, declarator applied (`int *a[2]` is an array of pointers).
    pub ty: TypeName,
    /// The declared name; `None` for a declaration of a type alone (`struct s;`).
    pub name: Option<String>,
    /// Where the name is, or the declaration's end when there is none.
    pub name_span: Span,
    /// The token after the declarator (`;` or `,`), where DTrace reports errors in the
    /// declaration: it acts on a declarator once it has read the token after it.
    pub end: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TypeDef {
    pub kind: TagKind,
    /// The tag, or the one the parser made up for an anonymous definition.
    pub tag: String,
    /// Whether the tag was written (`struct s { … }`) or made up (`struct { … }`).
    pub named: bool,
    pub body: TypeBody,
    /// The opening `{`, where DTrace checks a redefinition.
    pub open: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagKind {
    Struct,
    Union,
    Enum,
}

impl TagKind {
    pub fn keyword(self) -> &'static str {
        match self {
            TagKind::Struct => "struct",
            TagKind::Union => "union",
            TagKind::Enum => "enum",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypeBody {
    Members(Vec<Member>),
    Enumerators(Vec<Enumerator>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// `None` for an unnamed bit-field (`int : 3;`).
    pub name: Option<String>,
    pub ty: TypeName,
    /// The bit-field width expression (`int a : 3;`).
    pub bits: Option<Expr>,
    /// The token after the member's declarator (`;` or `,`): DTrace reports errors in
    /// a member there.
    pub end: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Enumerator {
    pub name: String,
    pub value: Option<Expr>,
    /// The token after the enumerator (`,` or `}`), where DTrace reports its errors.
    pub end: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Translator {
    pub output: TypeName,
    pub input: TypeName,
    /// The input parameter's name.
    pub param: String,
    pub members: Vec<XlateMember>,
    /// The `>` closing the input declaration: DTrace checks the translator there.
    pub head_end: Span,
    pub span: Span,
}

/// A provider definition: the probes a program instrumented for DTrace declares
/// (what `-h` makes a header of).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderDef {
    pub name: String,
    pub probes: Vec<ProbeDef>,
    pub span: Span,
}

/// `probe name(native args) [: (translated args)];`
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeDef {
    /// As written (`query__start`; the probe's name is `query-start`).
    pub name: String,
    /// The arguments the program passes.
    pub native: Vec<Param>,
    /// The arguments D clauses see, when the definition translates them.
    pub translated: Option<Vec<Param>>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct XlateMember {
    pub name: String,
    pub value: Expr,
    /// The `;` ending the member, where DTrace reports its errors.
    pub end: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Inline {
    pub ty: TypeName,
    pub name: String,
    pub value: Expr,
    pub span: Span,
}

/// A type as written: the base its specifiers name, then what its declarator derives
/// from it, innermost first: `int *a[3]` is base `int`, derived `[Pointer, Array(3)]`
/// (an array of three pointers to int).
#[derive(Debug, Clone, PartialEq)]
pub struct TypeName {
    pub base: BaseType,
    pub derived: Vec<Derived>,
    pub span: Span,
}

impl TypeName {
    pub fn new(base: BaseType, span: Span) -> TypeName {
        TypeName { base, derived: Vec::new(), span }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Derived {
    Pointer,
    /// `[N]`: the dimension as written (a constant expression); `[]` has none. The
    /// span is the closing `]`, where DTrace checks the dimension.
    Array(Option<Box<Expr>>, Span),
    /// `[type, …]`: an associative array's key signature.
    Assoc(Vec<Param>),
    /// `(params)`: a function returning the type so far.
    Function(Vec<Param>),
}

/// A parameter of a function prototype or an associative array's key signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// `None` for `...`.
    pub ty: Option<TypeName>,
    pub name: Option<String>,
    pub span: Span,
}

/// The type the declaration specifiers name.
#[derive(Debug, Clone, PartialEq)]
pub enum BaseType {
    /// A C intrinsic by the name DTrace composes for it from the specifiers:
    /// `int`, `unsigned char`, `long long `, `long double`, `void`, or a name no type
    /// has (`short long `), which the checker reports.
    Intrinsic(String),
    /// `string`
    String,
    /// Any other identifier used as a type: a typedef (`uint32_t`, `size_t`,
    /// `pid_t`, or one the program declared). The checker resolves it.
    Named(String),
    /// `struct tag` (a reference; definitions are their own items). An anonymous
    /// struct defined inline gets the tag the parser made up for it. A tag may be
    /// scoped by a module (`D`s`).
    Struct(String),
    Union(String),
    Enum(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// `expr;` — includes assignments, aggregation updates and action calls.
    Expr(Expr),
    /// `if (cond) stmt [else stmt]` — the extension newer DTraces accept.
    If { cond: Expr, then: Vec<Stmt>, otherwise: Option<Vec<Stmt>>, span: Span },
    /// `;` alone
    Empty(Span),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntSuffix {
    None,
    U,
    L,
    UL,
    LL,
    ULL,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// Integer constant, already converted from decimal, octal (`017`) or hex.
    Int {
        value: u64,
        suffix: IntSuffix,
        /// Written in decimal (not octal or hex): C gives such a constant a signed
        /// type unless suffixed `u`.
        decimal: bool,
    },
    /// Character constant `'a'`, `'\n'`: the value of the (possibly multi-)char constant.
    Char(i64),
    /// String literal with escapes already decoded (`"a\tb"` → bytes a, TAB, b).
    Str(String),
    /// A plain identifier: a global variable, a built-in (`pid`, `timestamp`, `arg0`),
    /// an enumerator, an inline, a D constant (`SIGINT`), or a type name where the
    /// grammar is ambiguous.
    Ident(String),
    /// `` `sym`` or ``mod`sym`` — a kernel/module symbol reference.
    Backquoted {
        module: Option<String>,
        name: String,
    },
    /// `$1`, `$target`, `$pid`, …: the name without `$`.
    Macro(String),
    /// `$$1`, `$$target`: the macro argument forced to a string.
    MacroStr(String),
    /// `self->name`
    SelfVar(String),
    /// `this->name`
    ThisVar(String),
    /// `@name` (the name is empty for plain `@`).
    Agg(String),
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `lhs = rhs` (`op == None`) or `lhs op= rhs`.
    Assign {
        op: Option<BinaryOp>,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// `++x`, `--x`, `x++`, `x--`.
    IncDec {
        increment: bool,
        prefix: bool,
        operand: Box<Expr>,
    },
    /// `name(args)` — subroutines, actions and aggregating functions. The callee is
    /// always a plain identifier in D.
    Call {
        name: String,
        name_span: Span,
        args: Vec<Expr>,
    },
    /// `base[i, j, …]`: associative array lookup, aggregation key, array or pointer
    /// index, `args[N]`, `uregs[R]`.
    Index {
        base: Box<Expr>,
        index: Vec<Expr>,
    },
    /// `e.field`
    Member {
        base: Box<Expr>,
        field: String,
    },
    /// `e->field` (other than `self->`/`this->`)
    Arrow {
        base: Box<Expr>,
        field: String,
    },
    /// `(type) e`
    Cast {
        ty: TypeName,
        operand: Box<Expr>,
    },
    SizeofType(TypeName),
    SizeofExpr(Box<Expr>),
    /// `offsetof(type, member)`
    Offsetof {
        ty: TypeName,
        member: String,
    },
    /// `stringof(e)` / `stringof e`
    Stringof(Box<Expr>),
    /// `xlate < type > ( e )`: `e` translated by a translator to `type`.
    Xlate {
        ty: TypeName,
        operand: Box<Expr>,
    },
    /// `e1, e2` — the comma operator.
    Comma {
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `-`
    Neg,
    /// `+`
    Plus,
    /// `!`
    Not,
    /// `~`
    BitNot,
    /// `*e`
    Deref,
    /// `&e`
    AddrOf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Mul,
    Div,
    Mod,
    Add,
    Sub,
    Shl,
    Shr,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    LogAnd,
    /// `^^`, D's logical exclusive or
    LogXor,
    LogOr,
}

impl BinaryOp {
    /// Whether a comparison holds of operands ordered `ord` (any operator other than
    /// `<`, `<=`, `>`, `>=`, `==` is `!=`).
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            BinaryOp::Lt => ord == Less,
            BinaryOp::Le => ord != Greater,
            BinaryOp::Gt => ord == Greater,
            BinaryOp::Ge => ord != Less,
            BinaryOp::Eq => ord == Equal,
            _ => ord != Equal,
        }
    }

    /// The operator as written, for messages.
    pub fn symbol(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Mul => "*",
            Div => "/",
            Mod => "%",
            Add => "+",
            Sub => "-",
            Shl => "<<",
            Shr => ">>",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Eq => "==",
            Ne => "!=",
            BitAnd => "&",
            BitXor => "^",
            BitOr => "|",
            LogAnd => "&&",
            LogXor => "^^",
            LogOr => "||",
        }
    }
}
