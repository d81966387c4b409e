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
    /// A variable declaration at file scope: `int x;`, `self string s;`,
    /// `this int t;`, `int a[string, int];`
    VarDecl(VarDecl),
    /// `struct tag { members };`, `union tag { … };`, `enum tag { … };` and
    /// `typedef type name;`, possibly combined (`typedef struct s { … } s_t;`).
    TypeDecl(TypeDecl),
    /// `inline type name = expression;`
    Inline(Inline),
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

#[derive(Debug, Clone, PartialEq)]
pub struct VarDecl {
    pub scope: VarScope,
    pub ty: TypeName,
    pub name: String,
    /// `int a[string, int];` declares an associative array with these key types.
    /// Empty for scalars.
    pub keys: Vec<TypeName>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TypeDecl {
    /// The struct, union or enum defined here, if any.
    pub definition: Option<TypeDef>,
    /// `typedef <ty> <name>;` — the names introduced by a typedef, each with its full
    /// type (declarator pointers and arrays applied).
    pub typedefs: Vec<(String, TypeName)>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypeDef {
    Struct { tag: String, members: Vec<Member> },
    Union { tag: String, members: Vec<Member> },
    Enum { tag: String, values: Vec<Enumerator> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    pub ty: TypeName,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Enumerator {
    pub name: String,
    pub value: Option<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Inline {
    pub ty: TypeName,
    pub name: String,
    pub value: Expr,
    pub span: Span,
}

/// A type as written: a base type, then `*`s, then array dimensions
/// (`char buf[16]` is base `char`, no pointers, `arrays = [16]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TypeName {
    pub base: BaseType,
    pub pointers: u32,
    /// Outermost first: `int a[2][3]` is `[2, 3]`.
    pub arrays: Vec<u64>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signedness {
    /// No `signed`/`unsigned` written.
    Default,
    Signed,
    Unsigned,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BaseType {
    Void,
    Char(Signedness),
    Short(Signedness),
    Int(Signedness),
    Long(Signedness),
    LongLong(Signedness),
    Float,
    Double,
    LongDouble,
    /// `string`
    String,
    /// Any other identifier used as a type: a typedef (`uint32_t`, `size_t`,
    /// `pid_t`, or one the program declared). The checker resolves it.
    Named(String),
    /// `struct tag` (a reference; definitions are `TypeDecl`). An anonymous struct
    /// defined inline in a typedef gets the tag the parser made up for it.
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
