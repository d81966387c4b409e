//! Recursive-descent parser for D, producing [`ast::Program`].
//!
//! The grammar and the error wording follow DTrace's `dt_grammar.y` and `dt_lex.l`
//! (with the `if`/`else` statements of newer DTraces). Syntax errors read
//! `syntax error near "<token text>"` or `syntax error near end of input`, with the
//! span of that token.

use std::collections::HashSet;

use crate::ast::*;
use crate::error::{CompileError, Result, Tag};
use crate::lexer::{Lexer, Mode, TokKind, Token, KEYWORDS};
use crate::span::Span;

mod decl;

/// How a probe description with fewer than four `:`-separated fields is aligned:
/// the field its last part names (dtrace's `-P`, `-m`, `-f`, and `-n`/`-s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescAlign {
    Provider,
    Module,
    Function,
    Name,
}

/// Typedef names D knows without any declaration. An identifier in this list (or
/// declared by a `typedef` earlier in the program) is a type name: it starts a
/// declaration at file scope and makes `(name)` a cast.
pub const BUILTIN_TYPEDEFS: &[&str] = &[
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "intptr_t",
    "uintptr_t",
    "intmax_t",
    "uintmax_t",
    "size_t",
    "ssize_t",
    "off_t",
    "off64_t",
    "pid_t",
    "uid_t",
    "gid_t",
    "id_t",
    "time_t",
    "caddr_t",
    "uchar_t",
    "ushort_t",
    "uint_t",
    "ulong_t",
    "u_longlong_t",
    "longlong_t",
    "processorid_t",
    "psinfo_t",
    "lwpsinfo_t",
    "siginfo_t",
    "boolean_t",
    "hrtime_t",
    "dev_t",
    "mode_t",
    "sigset_t",
    "timespec_t",
    "timestruc_t",
    "ino_t",
    "zoneid_t",
    "taskid_t",
    "projid_t",
    "major_t",
    "minor_t",
    "ipaddr_t",
    "in_addr_t",
    "in_port_t",
    "sa_family_t",
    "u_char",
    "u_short",
    "u_int",
    "u_long",
    "unchar",
    "ushort",
    "uint",
    "ulong",
];

/// Deepest nesting of expressions, statements and type definitions accepted. Each
/// level costs a few stack frames; this keeps even debug builds on a 2 MiB thread
/// stack far from overflow.
const MAX_DEPTH: u32 = 200;

/// Parses a D program: the text of one `-n`/`-P`/`-m`/`-f` argument or one script.
/// A clause without predicate and actions (`BEGIN`) is accepted at the end of the
/// text, as dtrace accepts it in descriptions given on the command line.
/// The C base type keywords that can start a declaration such as `int*x;`.
const C_BASE_TYPES: &[&str] = &["char", "double", "float", "int", "long", "short", "signed", "unsigned", "void"];

/// Where a `#pragma D option pspec` line is, if the source has one.
fn pspec_pragma(src: &str) -> Option<usize> {
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        let words: Vec<&str> = line.trim_start().trim_start_matches('#').split_whitespace().collect();
        let option = line.trim_start().starts_with('#') && words.len() == 4 && words[..3] == ["pragma", "D", "option"];
        if option && (words[3] == "pspec" || words[3].starts_with("pspec=")) {
            return Some(at);
        }
        at += line.len();
    }
    None
}

pub fn parse_program(src: &str, align: DescAlign) -> Result<Program> {
    Parser::new(src, align, false, &mut NoSink).program()
}

/// Parses a D script (`-s`): like [`parse_program`] with `-n` alignment, but a probe
/// description must be followed by a predicate or actions, as DTrace requires of
/// scripts ("expected predicate and/or actions following probe description").
pub fn parse_script(src: &str) -> Result<Program> {
    Parser::new(src, DescAlign::Name, true, &mut NoSink).program()
}

/// Parses a program (a script when `script`) as [`parse_program`] and
/// [`parse_script`] do, handing each declaration to `sink` as soon as it is parsed:
/// DTrace acts on declarations while it parses, so that an error in a declaration
/// comes before any syntax error that follows it, and a type declared earlier in
/// another source is a type name here.
pub fn parse_with(src: &str, align: DescAlign, script: bool, sink: &mut dyn DeclSink) -> Result<Program> {
    Parser::new(src, align, script, sink).program()
}

/// What the parser tells of declarations as it reads them (the checker, in a
/// compile).
pub trait DeclSink {
    /// A declaration, definition, inline, translator or pragma is complete.
    fn item(&mut self, item: &Item) -> Result<()>;
    /// A struct, union or enum definition with this tag opens (at its `{`).
    fn open_definition(&mut self, kind: TagKind, tag: &str, open: Span) -> Result<()>;
    /// Whether `name` is a type name beyond those the source itself declares.
    fn is_type(&self, name: &str) -> bool;
    /// Whether `name` is a global identifier already (a built-in variable, function,
    /// inline, enumerator or declared variable).
    fn is_identifier(&self, _name: &str) -> bool {
        false
    }
}

/// A sink that does nothing: the caller checks the whole program afterwards.
pub struct NoSink;

impl DeclSink for NoSink {
    fn item(&mut self, _: &Item) -> Result<()> {
        Ok(())
    }
    fn open_definition(&mut self, _: TagKind, _: &str, _: Span) -> Result<()> {
        Ok(())
    }
    fn is_type(&self, _: &str) -> bool {
        false
    }
}

/// The tokens that can start a type name in an expression (casts, `sizeof`).
const TYPE_KEYWORDS: &[&str] = &[
    "void", "char", "short", "int", "long", "signed", "unsigned", "float", "double", "string", "struct", "union",
    "enum", "const", "volatile", "restrict",
];

const ASSIGN_OPS: &[(&str, Option<BinaryOp>)] = &[
    ("=", None),
    ("+=", Some(BinaryOp::Add)),
    ("-=", Some(BinaryOp::Sub)),
    ("*=", Some(BinaryOp::Mul)),
    ("/=", Some(BinaryOp::Div)),
    ("%=", Some(BinaryOp::Mod)),
    ("&=", Some(BinaryOp::BitAnd)),
    ("^=", Some(BinaryOp::BitXor)),
    ("|=", Some(BinaryOp::BitOr)),
    ("<<=", Some(BinaryOp::Shl)),
    (">>=", Some(BinaryOp::Shr)),
];

/// Binary operators with their precedence (higher binds tighter).
fn binary_op(kind: &TokKind) -> Option<(BinaryOp, u8)> {
    use BinaryOp::*;
    let TokKind::Punct(p) = kind else { return None };
    Some(match *p {
        "||" => (LogOr, 1),
        "^^" => (LogXor, 2),
        "&&" => (LogAnd, 3),
        "|" => (BitOr, 4),
        "^" => (BitXor, 5),
        "&" => (BitAnd, 6),
        "==" => (Eq, 7),
        "!=" => (Ne, 7),
        "<" => (Lt, 8),
        "<=" => (Le, 8),
        ">" => (Gt, 8),
        ">=" => (Ge, 8),
        "<<" => (Shl, 9),
        ">>" => (Shr, 9),
        "+" => (Add, 10),
        "-" => (Sub, 10),
        "*" => (Mul, 11),
        "/" => (Div, 11),
        "%" => (Mod, 11),
        _ => return None,
    })
}

fn unary_op(p: &str) -> Option<UnaryOp> {
    Some(match p {
        "-" => UnaryOp::Neg,
        "+" => UnaryOp::Plus,
        "!" => UnaryOp::Not,
        "~" => UnaryOp::BitNot,
        "*" => UnaryOp::Deref,
        "&" => UnaryOp::AddrOf,
        _ => return None,
    })
}

fn is_punct(t: &Token, p: &str) -> bool {
    matches!(t.kind, TokKind::Punct(q) if q == p)
}

fn is_word(t: &Token, w: &str) -> bool {
    matches!(&t.kind, TokKind::Ident(s) if s == w)
}

fn boxed(e: Expr) -> Box<Expr> {
    Box::new(e)
}

struct Parser<'a, 's> {
    src: &'a str,
    sink: &'s mut dyn DeclSink,
    lx: Lexer<'a>,
    /// Byte offset of the first unconsumed character.
    pos: usize,
    mode: Mode,
    /// The token at `pos` lexed in a mode, kept until either changes.
    peeked: Option<(usize, Mode, Token)>,
    typedefs: HashSet<String>,
    /// Where `#pragma D option pspec` is: after it, ambiguous text is a description.
    pspec_from: Option<usize>,
    align: DescAlign,
    script: bool,
    items: Vec<Item>,
    depth: u32,
    /// Open `(`, `[` and `{` consumed so far, for DTrace's "extra ) in input
    /// stream" and "closing ) expected in predicate before /" messages.
    parens: i32,
    brackets: i32,
    braces: i32,
    anon: u32,
    /// Identifiers DTrace's lexer has classified as such by peeking past them
    /// (`pcb_idents`): it does not peek at them again.
    idents: HashSet<String>,
    /// The last token consumed was `struct`, `union`, `enum`, `.` or `->`, after
    /// which an identifier is a tag or member name without peeking.
    after_tag_or_member: bool,
}

impl<'a, 's> Parser<'a, 's> {
    fn new(src: &'a str, align: DescAlign, script: bool, sink: &'s mut dyn DeclSink) -> Parser<'a, 's> {
        Parser {
            pspec_from: pspec_pragma(src),
            src,
            sink,
            lx: Lexer::new(src),
            pos: 0,
            mode: Mode::Outer,
            peeked: None,
            typedefs: HashSet::new(),
            align,
            script,
            items: Vec::new(),
            depth: 0,
            parens: 0,
            brackets: 0,
            braces: 0,
            anon: 0,
            idents: HashSet::new(),
            after_tag_or_member: false,
        }
    }

    // ---- token plumbing -------------------------------------------------------

    fn is_type_name(&self, name: &str) -> bool {
        BUILTIN_TYPEDEFS.contains(&name) || self.typedefs.contains(name) || self.sink.is_type(name)
    }

    fn lex_at(&mut self, pos: usize) -> Result<Token> {
        let typedefs = &self.typedefs;
        let sink = &*self.sink;
        // dt_type_lookup knows the C base types (`int*x;`) as well as typedefs; after
        // `#pragma D option pspec` ambiguous text is always a probe description.
        let is_type = |s: &str| {
            C_BASE_TYPES.contains(&s) || BUILTIN_TYPEDEFS.contains(&s) || typedefs.contains(s) || sink.is_type(s)
        };
        let t = self.lx.lex(pos, self.mode, &is_type)?;
        let after_pspec = self.pspec_from.is_some_and(|p| t.span.start as usize > p);
        if after_pspec && self.mode == Mode::Outer && matches!(t.kind, TokKind::Ident(_)) {
            return self.lx.lex(pos, self.mode, &|_| false);
        }
        Ok(t)
    }

    fn peek(&mut self) -> Result<Token> {
        if let Some((p, m, t)) = &self.peeked {
            if *p == self.pos && *m == self.mode {
                return Ok(t.clone());
            }
        }
        let t = self.lex_at(self.pos)?;
        self.peeked = Some((self.pos, self.mode, t.clone()));
        Ok(t)
    }

    /// The token after the next one (same mode).
    fn peek2(&mut self) -> Result<Token> {
        let t = self.peek()?;
        self.lex_at(t.span.end as usize)
    }

    fn bump(&mut self) -> Result<Token> {
        let t = self.peek()?;
        if self.lexer_peeks_past(&t) && self.peek_says_identifier(&t) {
            if let TokKind::Ident(w) = &t.kind {
                self.idents.insert(w.clone());
            }
        }
        self.after_tag_or_member = match &t.kind {
            TokKind::Ident(w) => matches!(w.as_str(), "struct" | "union" | "enum"),
            TokKind::Punct(p) => matches!(*p, "." | "->"),
            _ => false,
        };
        self.pos = t.span.end as usize;
        if let TokKind::Punct(p) = t.kind {
            match p {
                "(" => self.parens += 1,
                ")" => self.parens -= 1,
                "[" => self.brackets += 1,
                "]" => self.brackets -= 1,
                "{" => self.braces += 1,
                "}" => self.braces -= 1,
                _ => {}
            }
        }
        Ok(t)
    }

    fn peek_punct(&mut self, p: &str) -> Result<bool> {
        Ok(is_punct(&self.peek()?, p))
    }

    /// Consumes `p` if it is next.
    fn eat(&mut self, p: &str) -> Result<Option<Token>> {
        if self.peek_punct(p)? {
            return self.bump().map(Some);
        }
        Ok(None)
    }

    fn expect(&mut self, p: &str) -> Result<Token> {
        let t = self.peek()?;
        if is_punct(&t, p) {
            return self.bump();
        }
        Err(self.unexpected(&t))
    }

    /// The syntax error for an unexpected token, in DTrace's words.
    fn unexpected(&self, t: &Token) -> CompileError {
        let msg = match &t.kind {
            TokKind::Eof => "syntax error near end of input".to_string(),
            TokKind::Punct(")") if self.parens <= 0 => "extra ) in input stream".into(),
            TokKind::Punct("]") if self.brackets <= 0 => "extra ] in input stream".into(),
            TokKind::Punct("}") if self.braces <= 0 => "extra } in input stream".into(),
            TokKind::EPred if self.parens > 0 => "closing ) expected in predicate before /".into(),
            TokKind::EPred if self.brackets > 0 => "closing ] expected in predicate before /".into(),
            _ => {
                // A peek past an identifier leaves flex's yytext running on to the
                // end of the line, which is what DTrace then quotes.
                let end = if self.lexer_peeks_past(t) { self.src.len() } else { t.span.end as usize };
                let text = self.src.get(t.span.start as usize..end).unwrap_or("");
                let text = text.split('\n').next().unwrap_or("");
                format!("syntax error near \"{text}\"")
            }
        };
        let span = match t.kind {
            // dt_lex.l reads ahead to the next non-blank character to tell the end of
            // a predicate from a division, and finds the missing ) or ] there: its
            // line count is at that character.
            TokKind::EPred if self.parens > 0 || self.brackets > 0 => {
                let end = t.span.end as usize;
                let rest = self.src.get(end..).unwrap_or("");
                let at = end + (rest.len() - rest.trim_start().len());
                Span::new(at, at)
            }
            _ => t.span,
        };
        CompileError::new(Tag::D_SYNTAX, span, msg)
    }

    /// Whether DTrace's lexer peeks at the characters after this token to decide
    /// whether it is an identifier or a type name (`id_or_type`): an identifier in
    /// an expression or declaration that it does not know yet.
    fn lexer_peeks_past(&self, t: &Token) -> bool {
        let TokKind::Ident(w) = &t.kind else { return false };
        self.mode == Mode::Expr
            && !self.after_tag_or_member
            && !KEYWORDS.contains(&w.as_str())
            && !self.idents.contains(w)
            && !self.sink.is_identifier(w)
    }

    /// What that peek decides: an identifier when an assignment, an increment, an
    /// index or the end of a statement or declarator follows.
    fn peek_says_identifier(&self, t: &Token) -> bool {
        let rest = self.src[t.span.end as usize..].trim_start();
        let mut chars = rest.chars();
        let (c0, c1) = (chars.next(), chars.next());
        match c0 {
            Some(c @ ('+' | '-')) => c1 == Some(c),
            Some('=') => c1 != Some('='),
            Some('[' | ';') => true,
            Some(',') => self.parens == 0,
            _ => false,
        }
    }

    /// Enters one level of nesting; fails past [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let t = self.peek()?;
            return Err(CompileError::new(Tag::D_SYNTAX, t.span, "expression nesting too deep"));
        }
        Ok(())
    }

    /// Counts one link of a left-leaning chain (`a + b + c`, `a, b`, `a[1].b->c`)
    /// as a level of nesting: the checker, the evaluator and even `Drop` recurse
    /// once per link, so a long chain is as deep as nested parentheses. The loop
    /// that builds the chain resets the depth when it returns; errors end the parse.
    fn enter_link(&mut self) -> Result<()> {
        self.enter()
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.enter()?;
        let r = f(self);
        self.depth -= 1;
        r
    }

    // ---- program items ----------------------------------------------------------

    fn program(mut self) -> Result<Program> {
        loop {
            self.mode = Mode::Outer;
            let t = self.peek()?;
            self.flush_pragmas(t.span.start as usize)?;
            match &t.kind {
                TokKind::Eof => break,
                TokKind::PSpec(_) | TokKind::Int { .. } => {
                    let c = self.clause()?;
                    self.items.push(Item::Clause(c));
                }
                TokKind::Ident(_) => self.declaration()?,
                _ => return Err(self.unexpected(&t)),
            }
        }
        Ok(Program { items: self.items })
    }

    fn flush_pragmas(&mut self, before: usize) -> Result<()> {
        for p in self.lx.take_pragmas(before) {
            self.emit(Item::Pragma(p))?;
        }
        Ok(())
    }

    fn clause(&mut self) -> Result<Clause> {
        let first = self.bump()?;
        let mut probes = vec![self.probe_desc(&first)?];
        while self.eat(",")?.is_some() {
            let t = self.peek()?;
            if !matches!(t.kind, TokKind::PSpec(_) | TokKind::Int { .. }) {
                return Err(self.unexpected(&t));
            }
            self.bump()?;
            probes.push(self.probe_desc(&t)?);
        }
        let mut end = probes.last().map_or(first.span, |p| p.span);
        let mut predicate = None;
        if self.eat("/")?.is_some() {
            self.mode = Mode::Expr;
            let e = self.expr()?;
            let t = self.peek()?;
            if t.kind != TokKind::EPred {
                return Err(self.unexpected(&t));
            }
            self.bump()?;
            end = t.span;
            predicate = Some(e);
        }
        let t = self.peek()?;
        let body = if is_punct(&t, "{") {
            self.bump()?;
            self.mode = Mode::Expr;
            let (stmts, close) = self.block_rest()?;
            end = close;
            Some(stmts)
        } else if let Some(p) = &predicate {
            return Err(CompileError::new(
                Tag::D_SYNTAX,
                p.span,
                "expected actions { } following probe description and predicate",
            ));
        } else if self.script {
            // dt_grammar.y reduces a bare description on any other token and, reading
            // a file, refuses it there.
            return Err(CompileError::new(
                Tag::D_SYNTAX,
                first.span.to(end),
                "expected predicate and/or actions following probe description",
            ));
        } else if matches!(t.kind, TokKind::Eof | TokKind::PSpec(_) | TokKind::Int { .. } | TokKind::Ident(_)) {
            // On the command line a bare description is a clause (`-n BEGIN`), and
            // what follows starts the next item (`-n 'BEGIN END'` is two clauses).
            None
        } else {
            return Err(self.unexpected(&t));
        };
        Ok(Clause { probes, predicate, body, span: first.span.to(end) })
    }

    /// Splits a probe description into its four fields, aligned as `self.align` says;
    /// an integer is a probe id (dt_node_pdesc_by_id), allowed only where a name is.
    fn probe_desc(&self, t: &Token) -> Result<ProbeDesc> {
        let text = match &t.kind {
            TokKind::PSpec(text) => text,
            TokKind::Int { value, .. } => return self.probe_id(*value, t.span),
            _ => return Err(self.unexpected(t)),
        };
        // dtrace_xstr2desc reads fields from the right and stops at the start of the
        // text: a leading `:` ends the description rather than adding an empty field.
        let parts: Vec<&str> = text.strip_prefix(':').unwrap_or(text).split(':').collect();
        let last = match self.align {
            DescAlign::Provider => 0,
            DescAlign::Module => 1,
            DescAlign::Function => 2,
            DescAlign::Name => 3,
        };
        if parts.len() > last + 1 {
            return Err(CompileError::new(
                Tag::D_PDESC_INVAL,
                t.span,
                format!("invalid probe description \"{text}\": Overspecified probe description"),
            ));
        }
        let mut fields: [String; 4] = Default::default();
        for (k, part) in parts.iter().rev().enumerate() {
            fields[last - k] = (*part).to_string();
        }
        let [provider, module, function, name] = fields;
        Ok(ProbeDesc { text: text.clone(), provider, module, function, name, id: None, span: t.span })
    }

    /// A probe description given as a probe id; the caller resolves it to a name.
    fn probe_id(&self, value: u64, span: Span) -> Result<ProbeDesc> {
        let id = u32::try_from(value).map_err(|_| {
            CompileError::new(Tag::D_PDESC_INVAL, span, format!("identifier {value} exceeds maximum probe id"))
        })?;
        let field = match self.align {
            DescAlign::Provider => Some("providers"),
            DescAlign::Module => Some("modules"),
            DescAlign::Function => Some("functions"),
            DescAlign::Name => None,
        };
        if let Some(field) = field {
            return Err(CompileError::new(
                Tag::D_PDESC_INVAL,
                span,
                format!("probe identifier {value} not permitted when specifying {field}"),
            ));
        }
        let text = value.to_string();
        let none = String::new;
        Ok(ProbeDesc { text, provider: none(), module: none(), function: none(), name: none(), id: Some(id), span })
    }

    // ---- statements -------------------------------------------------------------

    /// Statements up to and including the closing `}` (the `{` is consumed).
    /// Returns them with the span of the `}`.
    fn block_rest(&mut self) -> Result<(Vec<Stmt>, Span)> {
        let mut stmts = Vec::new();
        loop {
            let t = self.peek()?;
            if is_punct(&t, "}") {
                self.bump()?;
                return Ok((stmts, t.span));
            }
            if is_punct(&t, ";") || is_word(&t, "if") {
                stmts.push(self.statement()?);
                continue;
            }
            let e = self.expr()?;
            let next = self.peek()?;
            if is_punct(&next, ";") {
                self.bump()?;
            } else if !is_punct(&next, "}") {
                // Only the last statement of a block may omit its `;`.
                return Err(self.unexpected(&next));
            }
            stmts.push(Stmt::Expr(e));
        }
    }

    /// One statement that must be complete: `;`, `expr;` or `if …`.
    fn statement(&mut self) -> Result<Stmt> {
        let t = self.peek()?;
        if is_punct(&t, ";") {
            self.bump()?;
            return Ok(Stmt::Empty(t.span));
        }
        if is_word(&t, "if") {
            return self.nested(|p| p.if_statement());
        }
        let e = self.expr()?;
        self.expect(";")?;
        Ok(Stmt::Expr(e))
    }

    fn if_statement(&mut self) -> Result<Stmt> {
        let kw = self.bump()?;
        self.expect("(")?;
        let cond = self.expr()?;
        self.expect(")")?;
        let (then, mut end) = self.statement_or_block()?;
        let mut otherwise = None;
        if is_word(&self.peek()?, "else") {
            self.bump()?;
            let (stmts, e) = self.statement_or_block()?;
            otherwise = Some(stmts);
            end = e;
        }
        Ok(Stmt::If { cond, then, otherwise, span: kw.span.to(end) })
    }

    fn statement_or_block(&mut self) -> Result<(Vec<Stmt>, Span)> {
        if let Some(open) = self.eat("{")? {
            let (stmts, close) = self.block_rest()?;
            return Ok((stmts, open.span.to(close)));
        }
        let start = self.peek()?.span;
        let s = self.statement()?;
        let end = Span::new(self.pos, self.pos);
        Ok((vec![s], start.to(end)))
    }

    // ---- expressions ------------------------------------------------------------

    /// `expression`: assignment expressions joined by the comma operator.
    fn expr(&mut self) -> Result<Expr> {
        let base = self.depth;
        let mut lhs = self.assign()?;
        while self.eat(",")?.is_some() {
            let rhs = self.assign()?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Comma { lhs: boxed(lhs), rhs: boxed(rhs) }, span };
            self.enter_link()?;
        }
        self.depth = base;
        Ok(lhs)
    }

    /// `assignment_expression`: the left side of an assignment is a unary
    /// expression, so a unary expression is parsed first and the rest of a
    /// conditional expression continues from it when no assignment follows.
    fn assign(&mut self) -> Result<Expr> {
        self.nested(|p| {
            let first = p.unary()?;
            let t = p.peek()?;
            let op = match &t.kind {
                TokKind::Punct(s) => ASSIGN_OPS.iter().find(|(o, _)| o == s).map(|(_, op)| *op),
                _ => None,
            };
            if let Some(op) = op {
                if matches!(first.kind, ExprKind::Cast { .. }) {
                    return Err(p.unexpected(&t));
                }
                p.bump()?;
                let rhs = p.assign()?;
                let span = first.span.to(rhs.span);
                let kind = ExprKind::Assign { op, lhs: boxed(first), rhs: boxed(rhs) };
                return Ok(Expr { kind, span });
            }
            let lhs = p.binary_from(first, 1)?;
            p.ternary_from(lhs)
        })
    }

    /// `conditional_expression`
    fn conditional(&mut self) -> Result<Expr> {
        self.nested(|p| {
            let first = p.unary()?;
            let lhs = p.binary_from(first, 1)?;
            p.ternary_from(lhs)
        })
    }

    fn ternary_from(&mut self, cond: Expr) -> Result<Expr> {
        if self.eat("?")?.is_none() {
            return Ok(cond);
        }
        let then = self.expr()?;
        self.expect(":")?;
        let otherwise = self.conditional()?;
        let span = cond.span.to(otherwise.span);
        let kind = ExprKind::Ternary { cond: boxed(cond), then: boxed(then), otherwise: boxed(otherwise) };
        Ok(Expr { kind, span })
    }

    /// Precedence climbing over the binary operators, starting from an operand
    /// already parsed.
    fn binary_from(&mut self, mut lhs: Expr, min_prec: u8) -> Result<Expr> {
        let base = self.depth;
        loop {
            let t = self.peek()?;
            let (op, prec) = match binary_op(&t.kind) {
                Some((op, prec)) if prec >= min_prec => (op, prec),
                _ => {
                    self.depth = base;
                    return Ok(lhs);
                }
            };
            self.bump()?;
            let first = self.unary()?;
            let rhs = self.binary_from(first, prec + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary { op, lhs: boxed(lhs), rhs: boxed(rhs) }, span };
            self.enter_link()?;
        }
    }

    /// Whether the token after the next one starts a type name: `(type)` is a cast.
    fn type_follows(&mut self) -> Result<bool> {
        let t = self.peek2()?;
        Ok(self.starts_type(&t))
    }

    /// `cast_expression` (which includes `unary_expression`).
    fn unary(&mut self) -> Result<Expr> {
        self.nested(|p| p.unary_inner())
    }

    fn unary_inner(&mut self) -> Result<Expr> {
        let t = self.peek()?;
        match &t.kind {
            TokKind::Punct(s) if unary_op(s).is_some() => {
                self.bump()?;
                let operand = self.unary()?;
                let span = t.span.to(operand.span);
                let op = unary_op(s).unwrap_or(UnaryOp::Plus);
                Ok(Expr { kind: ExprKind::Unary { op, operand: boxed(operand) }, span })
            }
            TokKind::Punct(s @ ("++" | "--")) => {
                self.bump()?;
                let operand = self.unary()?;
                let span = t.span.to(operand.span);
                let kind = ExprKind::IncDec { increment: *s == "++", prefix: true, operand: boxed(operand) };
                Ok(Expr { kind, span })
            }
            TokKind::Ident(w) if w == "sizeof" => self.sizeof(t),
            TokKind::Ident(w) if w == "stringof" => {
                self.bump()?;
                let operand = self.unary()?;
                let span = t.span.to(operand.span);
                Ok(Expr { kind: ExprKind::Stringof(boxed(operand)), span })
            }
            TokKind::Punct("(") if self.type_follows()? => {
                self.bump()?;
                let ty = self.type_name()?;
                self.expect(")")?;
                let operand = self.unary()?;
                let span = t.span.to(operand.span);
                Ok(Expr { kind: ExprKind::Cast { ty, operand: boxed(operand) }, span })
            }
            _ => self.postfix(),
        }
    }

    fn sizeof(&mut self, kw: Token) -> Result<Expr> {
        self.bump()?;
        let t = self.peek()?;
        if is_punct(&t, "(") && self.type_follows()? {
            self.bump()?;
            let ty = self.type_name()?;
            let close = self.expect(")")?;
            return Ok(Expr { kind: ExprKind::SizeofType(ty), span: kw.span.to(close.span) });
        }
        let operand = self.unary()?;
        let span = kw.span.to(operand.span);
        Ok(Expr { kind: ExprKind::SizeofExpr(boxed(operand)), span })
    }

    fn postfix(&mut self) -> Result<Expr> {
        let base = self.depth;
        let mut e = self.primary()?;
        loop {
            let t = self.peek()?;
            let TokKind::Punct(p) = t.kind else {
                self.depth = base;
                return Ok(e);
            };
            e = match p {
                "[" => {
                    self.bump()?;
                    let index = self.arguments()?;
                    let close = self.expect("]")?;
                    let span = e.span.to(close.span);
                    Expr { kind: ExprKind::Index { base: boxed(e), index }, span }
                }
                "(" => self.call(e, &t)?,
                "." | "->" => {
                    self.bump()?;
                    let (field, fspan) = self.member_name()?;
                    let span = e.span.to(fspan);
                    let kind = match (&e.kind, p) {
                        (ExprKind::Ident(s), "->") if s == "self" => ExprKind::SelfVar(field),
                        (ExprKind::Ident(s), "->") if s == "this" => ExprKind::ThisVar(field),
                        (_, "->") => ExprKind::Arrow { base: boxed(e), field },
                        _ => ExprKind::Member { base: boxed(e), field },
                    };
                    Expr { kind, span }
                }
                "++" | "--" => {
                    self.bump()?;
                    let span = e.span.to(t.span);
                    let kind = ExprKind::IncDec { increment: p == "++", prefix: false, operand: boxed(e) };
                    Expr { kind, span }
                }
                _ => {
                    self.depth = base;
                    return Ok(e);
                }
            };
            self.enter_link()?;
        }
    }

    /// `name(args)`: only a plain identifier can be called in D; dt_node_func refuses
    /// any other designator once the call is read.
    fn call(&mut self, callee: Expr, open: &Token) -> Result<Expr> {
        let name = match &callee.kind {
            ExprKind::Ident(n) if n == "self" || n == "this" => return Err(self.unexpected(open)),
            ExprKind::Ident(n) => Some(n.clone()),
            _ => None,
        };
        self.bump()?;
        let args = if self.peek_punct(")")? { Vec::new() } else { self.arguments()? };
        let close = self.expect(")")?;
        let Some(name) = name else {
            let e = CompileError::new(Tag::D_FUNC_IDENT, close.span, "function designator is not of function type");
            return Err(e.unlabelled());
        };
        let span = callee.span.to(close.span);
        Ok(Expr { kind: ExprKind::Call { name, name_span: callee.span, args }, span })
    }

    /// `argument_expression_list`: one or more assignment expressions.
    fn arguments(&mut self) -> Result<Vec<Expr>> {
        let mut args = vec![self.assign()?];
        while self.eat(",")?.is_some() {
            args.push(self.assign()?);
        }
        Ok(args)
    }

    /// The name after `.` or `->`: any identifier, keywords included (DTrace lexes
    /// it in its identifier-only state).
    fn member_name(&mut self) -> Result<(String, Span)> {
        let t = self.peek()?;
        match t.kind {
            TokKind::Ident(name) => {
                self.bump()?;
                Ok((name, t.span))
            }
            _ => Err(self.unexpected(&t)),
        }
    }

    fn primary(&mut self) -> Result<Expr> {
        let t = self.peek()?;
        let kind = match &t.kind {
            TokKind::Ident(w) if w == "offsetof" => return self.offsetof(t),
            TokKind::Ident(w) if w == "xlate" => return self.xlate(t),
            TokKind::Ident(w) if w == "self" || w == "this" => ExprKind::Ident(w.clone()),
            TokKind::Ident(w) if KEYWORDS.contains(&w.as_str()) => return Err(self.unexpected(&t)),
            TokKind::Ident(w) => ExprKind::Ident(w.clone()),
            TokKind::Int { value, suffix, decimal } => {
                ExprKind::Int { value: *value, suffix: *suffix, decimal: *decimal }
            }
            TokKind::Char(c) => ExprKind::Char(*c),
            TokKind::Str(s) => ExprKind::Str(s.clone()),
            TokKind::Macro(m) => ExprKind::Macro(m.clone()),
            TokKind::MacroStr(m) => ExprKind::MacroStr(m.clone()),
            TokKind::Agg(a) => ExprKind::Agg(a.clone()),
            TokKind::Backquoted { module, name } => ExprKind::Backquoted { module: module.clone(), name: name.clone() },
            TokKind::Punct("(") => {
                self.bump()?;
                let inner = self.expr()?;
                let close = self.expect(")")?;
                return Ok(Expr { kind: inner.kind, span: t.span.to(close.span) });
            }
            _ => return Err(self.unexpected(&t)),
        };
        self.bump()?;
        Ok(Expr { kind, span: t.span })
    }

    fn offsetof(&mut self, kw: Token) -> Result<Expr> {
        self.bump()?;
        self.expect("(")?;
        let ty = self.type_name()?;
        self.expect(",")?;
        let t = self.peek()?;
        let member = match &t.kind {
            TokKind::Ident(m) if !KEYWORDS.contains(&m.as_str()) => m.clone(),
            _ => return Err(self.unexpected(&t)),
        };
        self.bump()?;
        let close = self.expect(")")?;
        Ok(Expr { kind: ExprKind::Offsetof { ty, member }, span: kw.span.to(close.span) })
    }

    /// `xlate < type > ( expression )`
    fn xlate(&mut self, kw: Token) -> Result<Expr> {
        self.bump()?;
        self.expect("<")?;
        let ty = self.type_name()?;
        self.expect(">")?;
        self.expect("(")?;
        let operand = self.expr()?;
        let close = self.expect(")")?;
        Ok(Expr { kind: ExprKind::Xlate { ty, operand: boxed(operand) }, span: kw.span.to(close.span) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(src: &str) -> Program {
        match parse_program(src, DescAlign::Name) {
            Ok(p) => p,
            Err(e) => panic!("{src:?}: {} at {:?}", e.message, e.span.range()),
        }
    }

    fn err(src: &str) -> (String, std::ops::Range<usize>) {
        match parse_program(src, DescAlign::Name) {
            Err(e) => (e.message, e.span.range()),
            Ok(_) => ("parsed".into(), 0..0),
        }
    }

    /// A type name rendered compactly: the base, then each derivation from the base
    /// outwards (`int*[3]` is an array of three pointers to int).
    fn ty(t: &TypeName) -> String {
        let mut s = match &t.base {
            BaseType::Intrinsic(n) => n.trim_end().to_string(),
            BaseType::String => "string".into(),
            BaseType::Named(n) => n.clone(),
            BaseType::Struct(n) => format!("struct {n}"),
            BaseType::Union(n) => format!("union {n}"),
            BaseType::Enum(n) => format!("enum {n}"),
        };
        for d in &t.derived {
            match d {
                Derived::Pointer => s.push('*'),
                Derived::Array(Some(n), _) => s.push_str(&format!("[{}]", sx(n))),
                Derived::Array(None, _) => s.push_str("[]"),
                Derived::Assoc(keys) | Derived::Function(keys) => {
                    let k: Vec<String> = keys.iter().map(|p| p.ty.as_ref().map_or("...".into(), ty)).collect();
                    let (open, close) = if matches!(d, Derived::Assoc(_)) { ('[', ']') } else { ('(', ')') };
                    s.push_str(&format!("{open}{}{close}", k.join(", ")));
                }
            }
        }
        s
    }

    /// A compact prefix rendering of an expression, for asserting tree shapes.
    fn sx(e: &Expr) -> String {
        use ExprKind::*;
        match &e.kind {
            Int { value, .. } => value.to_string(),
            Char(c) => format!("'{c}'"),
            Str(s) => format!("{s:?}"),
            Ident(n) => n.clone(),
            Backquoted { module, name } => format!("{}`{name}", module.clone().unwrap_or_default()),
            Macro(m) => format!("${m}"),
            MacroStr(m) => format!("$${m}"),
            SelfVar(n) => format!("self->{n}"),
            ThisVar(n) => format!("this->{n}"),
            Agg(n) => format!("@{n}"),
            Unary { op, operand } => format!("({op:?} {})", sx(operand)),
            Binary { op, lhs, rhs } => format!("({} {} {})", op.symbol(), sx(lhs), sx(rhs)),
            Assign { op, lhs, rhs } => {
                let o = op.map_or("=".to_string(), |o| format!("{}=", o.symbol()));
                format!("({o} {} {})", sx(lhs), sx(rhs))
            }
            Ternary { cond, then, otherwise } => {
                format!("(? {} {} {})", sx(cond), sx(then), sx(otherwise))
            }
            IncDec { increment, prefix, operand } => {
                let op = if *increment { "++" } else { "--" };
                if *prefix {
                    format!("({op}pre {})", sx(operand))
                } else {
                    format!("({op}post {})", sx(operand))
                }
            }
            Call { name, args, .. } => {
                let a: Vec<String> = args.iter().map(sx).collect();
                format!("{name}({})", a.join(", "))
            }
            Index { base, index } => {
                let a: Vec<String> = index.iter().map(sx).collect();
                format!("{}[{}]", sx(base), a.join(", "))
            }
            Member { base, field } => format!("(. {} {field})", sx(base)),
            Arrow { base, field } => format!("(-> {} {field})", sx(base)),
            Cast { ty: t, operand } => format!("(cast {} {})", ty(t), sx(operand)),
            SizeofType(t) => format!("(sizeof-type {})", ty(t)),
            SizeofExpr(e) => format!("(sizeof {})", sx(e)),
            Offsetof { ty: t, member } => format!("(offsetof {} {member})", ty(t)),
            Stringof(e) => format!("(stringof {})", sx(e)),
            Xlate { ty: t, operand } => format!("(xlate {} {})", ty(t), sx(operand)),
            Comma { lhs, rhs } => format!("(, {} {})", sx(lhs), sx(rhs)),
        }
    }

    fn clause(p: &Program, i: usize) -> &Clause {
        match &p.items[i] {
            Item::Clause(c) => c,
            other => panic!("not a clause: {other:?}"),
        }
    }

    /// The single expression statement of `BEGIN { <src>; }`, rendered.
    fn e(src: &str) -> String {
        let text = format!("BEGIN {{ {src}; }}");
        let p = prog(&text);
        match clause(&p, 0).body.as_deref() {
            Some([Stmt::Expr(x)]) => sx(x),
            other => panic!("{src}: {other:?}"),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(e("a + b * c"), "(+ a (* b c))");
        assert_eq!(e("a - b - c"), "(- (- a b) c)");
        assert_eq!(e("a / b % c"), "(% (/ a b) c)");
        assert_eq!(e("a = b = c"), "(= a (= b c))");
        assert_eq!(e("a += b -= c"), "(+= a (-= b c))");
        assert_eq!(e("x <<= 2"), "(<<= x 2)");
        assert_eq!(e("a || b ^^ c && d"), "(|| a (^^ b (&& c d)))");
        assert_eq!(e("a | b ^ c & d"), "(| a (^ b (& c d)))");
        assert_eq!(e("a == b < c << d + e"), "(== a (< b (<< c (+ d e))))");
        assert_eq!(e("a != b == c"), "(== (!= a b) c)");
        assert_eq!(e("a ? b : c ? d : e"), "(? a b (? c d e))");
        assert_eq!(e("a ? b, c : d"), "(? a (, b c) d)");
        assert_eq!(e("x = a ? b : c"), "(= x (? a b c))");
        assert_eq!(e("a, b = c"), "(, a (= b c))");
        assert_eq!(e("(a + b) * c"), "(* (+ a b) c)");
    }

    #[test]
    fn unary_and_postfix() {
        assert_eq!(e("-a * b"), "(* (Neg a) b)");
        assert_eq!(e("!a++"), "(Not (++post a))");
        assert_eq!(e("*p->x"), "(Deref (-> p x))");
        assert_eq!(e("&a[1]"), "(AddrOf a[1])");
        assert_eq!(e("~+x"), "(BitNot (Plus x))");
        assert_eq!(e("--x"), "(--pre x)");
        assert_eq!(e("x--"), "(--post x)");
        assert_eq!(e("- -1"), "(Neg (Neg 1))");
        assert_eq!(e("x.y.z"), "(. (. x y) z)");
        assert_eq!(e("a[1, 2][3]"), "a[1, 2][3]");
        assert_eq!(e("p->string"), "(-> p string)");
        assert_eq!(e("a / b"), "(/ a b)");
    }

    #[test]
    fn casts_sizeof_and_friends() {
        assert_eq!(e("(int)x + 1"), "(+ (cast int x) 1)");
        assert_eq!(e("(x) + 1"), "(+ x 1)");
        assert_eq!(e("(uint32_t)*p"), "(cast uint32_t (Deref p))");
        assert_eq!(e("(struct foo *)arg0"), "(cast struct foo* arg0)");
        assert_eq!(e("(unsigned long long)x"), "(cast unsigned long long x)");
        assert_eq!(e("(char)a[0]"), "(cast char a[0])");
        assert_eq!(e("(string)(int)x"), "(cast string (cast int x))");
        assert_eq!(e("sizeof(int) + sizeof x"), "(+ (sizeof-type int) (sizeof x))");
        assert_eq!(e("sizeof(x)"), "(sizeof x)");
        assert_eq!(e("sizeof (char *)"), "(sizeof-type char*)");
        assert_eq!(e("sizeof (int (*)(void))"), "(sizeof-type int(void)*)");
        assert_eq!(e("(long short)0"), "(cast short long 0)");
        assert_eq!(e("stringof(a)"), "(stringof a)");
        assert_eq!(e("stringof a + b"), "(+ (stringof a) b)");
        assert_eq!(e("offsetof(struct s, f)"), "(offsetof struct s f)");
    }

    #[test]
    fn primaries() {
        assert_eq!(e("self->x = this->y"), "(= self->x this->y)");
        assert_eq!(e("self->a->b"), "(-> self->a b)");
        assert_eq!(e("self->a[1]"), "self->a[1]");
        assert_eq!(e("@a[execname, pid] = count()"), "(= @a[execname, pid] count())");
        assert_eq!(e("@ = quantize(x)"), "(= @ quantize(x))");
        assert_eq!(e("$1 + $target"), "(+ $1 $target)");
        assert_eq!(e("$$1"), "$$1");
        assert_eq!(e("`sym + libc`malloc"), "(+ `sym libc`malloc)");
        assert_eq!(e("'a'"), "'97'");
        assert_eq!(e("\"s\\n\""), "\"s\\n\"");
        assert_eq!(e("f()"), "f()");
        assert_eq!(e("printf(\"%d %d\", a, b = 2)"), "printf(\"%d %d\", a, (= b 2))");
        assert_eq!(e("NULL"), "NULL");
        assert_eq!(e("0x10 + 010"), "(+ 16 8)");
    }

    #[test]
    fn spans() {
        let p = prog("BEGIN { x = a + b * c; }");
        let Some([Stmt::Expr(x)]) = clause(&p, 0).body.as_deref() else { panic!() };
        assert_eq!(x.span.range(), 8..21);
        let ExprKind::Assign { rhs, .. } = &x.kind else { panic!() };
        assert_eq!(rhs.span.range(), 12..21);
        let p = prog("BEGIN { f(1, (2)); }");
        let Some([Stmt::Expr(x)]) = clause(&p, 0).body.as_deref() else { panic!() };
        let ExprKind::Call { name_span, args, .. } = &x.kind else { panic!() };
        assert_eq!((x.span.range(), name_span.range()), (8..17, 8..9));
        assert_eq!(args[1].span.range(), 13..16);
        assert_eq!(clause(&p, 0).span.range(), 0..20);
    }

    #[test]
    fn statements() {
        let p = prog("BEGIN { trace(1) }");
        assert!(matches!(clause(&p, 0).body.as_deref(), Some([Stmt::Expr(_)])));
        let p = prog("BEGIN { a; b }");
        assert_eq!(clause(&p, 0).body.as_ref().map(Vec::len), Some(2));
        let p = prog("BEGIN { ; }");
        assert!(matches!(clause(&p, 0).body.as_deref(), Some([Stmt::Empty(_)])));
        let p = prog("BEGIN {}");
        assert_eq!(clause(&p, 0).body, Some(vec![]));
        let p = prog("BEGIN { a;; }");
        assert!(matches!(clause(&p, 0).body.as_deref(), Some([Stmt::Expr(_), Stmt::Empty(_)])));
    }

    #[test]
    fn if_else() {
        let p = prog("BEGIN { if (x) a = 1; else { b = 2; c = 3; } d = 4 }");
        let body = clause(&p, 0).body.as_ref().unwrap();
        assert_eq!(body.len(), 2);
        let Stmt::If { cond, then, otherwise, span } = &body[0] else { panic!() };
        assert_eq!(sx(cond), "x");
        assert_eq!(then.len(), 1);
        assert_eq!(otherwise.as_ref().map(Vec::len), Some(2));
        assert_eq!(span.range(), 8..44);
        // A dangling else belongs to the nearest if.
        let p = prog("BEGIN { if (a) if (b) x; else y; }");
        let body = clause(&p, 0).body.as_ref().unwrap();
        let Stmt::If { then, otherwise: None, .. } = &body[0] else { panic!("{body:?}") };
        assert!(matches!(&then[0], Stmt::If { otherwise: Some(_), .. }));
        let p = prog("BEGIN { if (a) { } }");
        let body = clause(&p, 0).body.as_ref().unwrap();
        assert!(matches!(&body[0], Stmt::If { then, otherwise: None, .. } if then.is_empty()));
        let p = prog("BEGIN { if (a) ; else if (b) x; else { y } }");
        assert_eq!(clause(&p, 0).body.as_ref().map(Vec::len), Some(1));
    }

    fn descs(src: &str, align: DescAlign) -> Vec<[String; 4]> {
        let p = parse_program(src, align).unwrap();
        clause(&p, 0)
            .probes
            .iter()
            .map(|d| [d.provider.clone(), d.module.clone(), d.function.clone(), d.name.clone()])
            .collect()
    }

    fn d4(a: &str, b: &str, c: &str, d: &str) -> [String; 4] {
        [a.into(), b.into(), c.into(), d.into()]
    }

    #[test]
    fn probe_descriptions() {
        assert_eq!(descs("BEGIN", DescAlign::Name), vec![d4("", "", "", "BEGIN")]);
        assert_eq!(descs("read:entry", DescAlign::Name), vec![d4("", "", "read", "entry")]);
        assert_eq!(descs("tick-1s { }", DescAlign::Name), vec![d4("", "", "", "tick-1s")]);
        assert_eq!(descs("profile-997hz{}", DescAlign::Name), vec![d4("", "", "", "profile-997hz")]);
        assert_eq!(
            descs("pid$target:libc.so.6:malloc:entry", DescAlign::Name),
            vec![d4("pid$target", "libc.so.6", "malloc", "entry")]
        );
        assert_eq!(descs("syscall::open*:entry /x/ {}", DescAlign::Name), vec![d4("syscall", "", "open*", "entry")]);
        assert_eq!(descs("pid123:a.out:main:4", DescAlign::Name), vec![d4("pid123", "a.out", "main", "4")]);
        assert_eq!(descs(":::", DescAlign::Name), vec![d4("", "", "", "")]);
        assert_eq!(
            descs("BEGIN,\n  syscall::read:entry ,END\n{}", DescAlign::Name),
            vec![d4("", "", "", "BEGIN"), d4("syscall", "", "read", "entry"), d4("", "", "", "END")]
        );
        let p = prog("proc:::exec-success { }");
        assert_eq!(clause(&p, 0).probes[0].text, "proc:::exec-success");
        assert_eq!(clause(&p, 0).probes[0].span.range(), 0..19);
        // Other alignments (-f, -m, -P).
        assert_eq!(descs("malloc", DescAlign::Function), vec![d4("", "", "malloc", "")]);
        assert_eq!(descs("libc:malloc", DescAlign::Function), vec![d4("", "libc", "malloc", "")]);
        assert_eq!(descs("pid1:libc:malloc", DescAlign::Function), vec![d4("pid1", "libc", "malloc", "")]);
        assert_eq!(descs("libc", DescAlign::Module), vec![d4("", "libc", "", "")]);
        assert_eq!(descs("syscall", DescAlign::Provider), vec![d4("syscall", "", "", "")]);
    }

    #[test]
    fn clause_shapes() {
        let p = prog("BEGIN");
        assert_eq!(clause(&p, 0).body, None);
        let p = prog("syscall::read:entry /pid == $target/ { @[probefunc] = count(); }");
        let c = clause(&p, 0);
        assert_eq!(sx(c.predicate.as_ref().unwrap()), "(== pid $target)");
        let p = prog("BEGIN /a / b/ { }");
        assert_eq!(sx(clause(&p, 0).predicate.as_ref().unwrap()), "(/ a b)");
        let p = prog("BEGIN /x/ /* why */ { }");
        assert!(clause(&p, 0).predicate.is_some());
        let p = prog("BEGIN {} END { exit(0); } tick-1s { }");
        assert_eq!(p.items.len(), 3);
    }

    fn decl(item: &Item) -> (Option<StorageClass>, String, String) {
        let Item::Decl(d) = item else { panic!("{item:?}") };
        (d.class, ty(&d.ty), d.name.clone().unwrap_or_default())
    }

    fn define(item: &Item) -> &TypeDef {
        let Item::Define(d) = item else { panic!("{item:?}") };
        d
    }

    #[test]
    fn variable_declarations() {
        let p = prog("int x;\nunsigned long long y;\nself int t;\nthis string s;\nint a[string, int];\nchar buf[16];\nint *p, **q;\nuint64_t*u;\nconst static int c;\nlong double d; signed char sc; short int si; unsigned u2;\nextern e;\nint *m[2][3];\nint (*fp)(int, ...);");
        let v: Vec<_> = p.items.iter().map(decl).collect();
        assert_eq!(v[0], (None, "int".into(), "x".into()));
        assert_eq!(v[1], (None, "unsigned long long".into(), "y".into()));
        assert_eq!(v[2], (Some(StorageClass::Thread), "int".into(), "t".into()));
        assert_eq!(v[3], (Some(StorageClass::Clause), "string".into(), "s".into()));
        assert_eq!(v[4], (None, "int[string, int]".into(), "a".into()));
        assert_eq!(v[5], (None, "char[16]".into(), "buf".into()));
        assert_eq!(v[6].1, "int*");
        assert_eq!(v[7], (None, "int**".into(), "q".into()));
        assert_eq!(v[8], (None, "uint64_t*".into(), "u".into()));
        assert_eq!(v[9], (Some(StorageClass::Static), "int".into(), "c".into()));
        assert_eq!(v[10].1, "long double");
        assert_eq!(v[11].1, "signed char");
        assert_eq!(v[12].1, "short");
        assert_eq!(v[13].1, "unsigned");
        assert_eq!(v[14], (Some(StorageClass::Extern), "int".into(), "e".into()));
        assert_eq!(v[15].1, "int*[3][2]", "an array of two arrays of three pointers");
        assert_eq!(v[16].1, "int(int, ...)*", "a pointer to a function");
        let Item::Decl(d) = &p.items[0] else { panic!() };
        assert_eq!((d.name_span.range(), d.end.range()), (4..5, 5..6));
    }

    #[test]
    fn type_declarations() {
        let p = prog("struct s { int a; char b[8]; struct t *p; int c : 3, : 0; };");
        let d = define(&p.items[0]);
        assert_eq!((d.kind, d.tag.as_str(), d.named), (TagKind::Struct, "s", true));
        let TypeBody::Members(members) = &d.body else { panic!() };
        let m: Vec<(Option<String>, String, Option<String>)> =
            members.iter().map(|m| (m.name.clone(), ty(&m.ty), m.bits.as_ref().map(sx))).collect();
        assert_eq!(
            m,
            vec![
                (Some("a".into()), "int".into(), None),
                (Some("b".into()), "char[8]".into(), None),
                (Some("p".into()), "struct t*".into(), None),
                (Some("c".into()), "int".into(), Some("3".into())),
                (None, "int".into(), Some("0".into())),
            ]
        );
        assert_eq!(decl(&p.items[1]), (None, "struct s".into(), String::new()));
        let p = prog("union u { int a; long b; };");
        assert_eq!(define(&p.items[0]).kind, TagKind::Union);
        let p = prog("enum e { A, B = 3, C };");
        let d = define(&p.items[0]);
        let TypeBody::Enumerators(values) = &d.body else { panic!() };
        let v: Vec<(String, Option<String>)> =
            values.iter().map(|v| (v.name.clone(), v.value.as_ref().map(sx))).collect();
        assert_eq!(v, vec![("A".into(), None), ("B".into(), Some("3".into())), ("C".into(), None)]);
    }

    #[test]
    fn typedefs() {
        let p = prog("typedef unsigned int myint_t;\nmyint_t x;\nmyint_t *y;\nBEGIN { z = (myint_t)1; }");
        assert_eq!(decl(&p.items[0]), (Some(StorageClass::Typedef), "unsigned int".into(), "myint_t".into()));
        assert_eq!(decl(&p.items[1]).1, "myint_t");
        assert_eq!(decl(&p.items[2]).1, "myint_t*");
        let Some([Stmt::Expr(x)]) = clause(&p, 3).body.as_deref() else { panic!() };
        assert_eq!(sx(x), "(= z (cast myint_t 1))");

        let p = prog("typedef struct s { int a; } s_t, *s_p;");
        assert_eq!(define(&p.items[0]).tag, "s");
        assert_eq!(decl(&p.items[1]), (Some(StorageClass::Typedef), "struct s".into(), "s_t".into()));
        assert_eq!(decl(&p.items[2]).1, "struct s*");

        let p = prog("typedef struct { int a; } anon_t; typedef enum { X } e_t;");
        assert_eq!((define(&p.items[0]).tag.as_str(), define(&p.items[0]).named), ("__anon1", false));
        assert_eq!(decl(&p.items[1]).1, "struct __anon1");
        assert_eq!(define(&p.items[2]).tag, "__anon2");

        // A nested definition becomes its own item, ahead of the enclosing one.
        let p = prog("struct o { struct i { int x; } in; int y; };");
        assert_eq!(p.items.len(), 3);
        assert_eq!(define(&p.items[0]).tag, "i");
        // typedef int foo; struct s { foo foo; };
        let p = prog("typedef int foo; struct s { foo foo; };");
        let TypeBody::Members(members) = &define(&p.items[1]).body else { panic!() };
        assert_eq!((members[0].name.as_deref(), ty(&members[0].ty).as_str()), (Some("foo"), "foo"));
    }

    #[test]
    fn pspec_pragma_makes_ambiguous_text_a_description() {
        assert_eq!(pspec_pragma("#pragma D option pspec\n\nint*x\n"), Some(0));
        let p = parse_script("#pragma D option pspec\n\nint*x\n");
        assert!(matches!(&p, Err(e) if e.message.contains("expected predicate")), "{p:?}");
        let p = parse_script("int*x;\n");
        assert!(p.is_ok(), "{p:?}");
    }

    #[test]
    fn inlines_translators_providers() {
        let p = prog("inline int LIMIT = 3 * 4;\ninline string NAME = \"x\";");
        let Item::Inline(i) = &p.items[0] else { panic!() };
        assert_eq!((i.name.as_str(), ty(&i.ty), sx(&i.value)), ("LIMIT", "int".into(), "(* 3 4)".into()));
        assert_eq!(i.span.range(), 0..25);
        let Item::Inline(i) = &p.items[1] else { panic!() };
        assert_eq!((ty(&i.ty), sx(&i.value)), ("string".into(), "\"x\"".into()));
        let p = prog("translator struct x < int *p > { a = p[0]; b = 2; };\nprovider foo { probe bar(int, char *); };\nBEGIN { y = xlate<struct x *>(z)->a; }");
        assert_eq!(p.items.len(), 3);
        let Item::Translator(t) = &p.items[0] else { panic!() };
        assert_eq!(
            (ty(&t.output), ty(&t.input), t.param.as_str(), t.members.len()),
            ("struct x".into(), "int*".into(), "p", 2)
        );
        let Item::Provider(pr) = &p.items[1] else { panic!() };
        assert_eq!((pr.name.as_str(), pr.probes.len(), pr.probes[0].name.as_str()), ("foo", 1, "bar"));
        let args: Vec<String> = pr.probes[0].native.iter().map(|a| ty(a.ty.as_ref().unwrap())).collect();
        assert_eq!((args, pr.probes[0].translated.is_none()), (vec!["int".to_string(), "char*".to_string()], true));
        let Some([Stmt::Expr(x)]) = clause(&p, 2).body.as_deref() else { panic!() };
        assert_eq!(sx(x), "(= y (-> (xlate struct x* z) a))");
        let p = prog("provider p { probe a__b(void) : (); probe c(int x) : (long x); };");
        let Item::Provider(pr) = &p.items[0] else { panic!() };
        assert_eq!((pr.probes[0].name.as_str(), pr.probes[0].native.len()), ("a__b", 0));
        assert_eq!(pr.probes[0].translated.as_ref().map(Vec::len), Some(0));
        assert_eq!(pr.probes[1].translated.as_ref().map(|t| t[0].name.clone()), Some(Some("x".to_string())));
        // An output prototype names input parameters, each any number of times
        // (DTrace's test/triggers/usdt-tst-argmap-prov.d).
        let p = prog("provider test_prov { probe place(int i, int j) : (int j, int i, int i, int j); };");
        let Item::Provider(pr) = &p.items[0] else { panic!() };
        let names: Vec<String> =
            pr.probes[0].translated.iter().flatten().map(|a| a.name.clone().unwrap_or_default()).collect();
        assert_eq!(names, ["j", "i", "i", "j"]);
    }

    #[test]
    fn declaration_errors() {
        let cases: &[(&str, &str)] = &[
            ("long char x;", "invalid type declaration: short and long may not be used with char type"),
            ("short void x;", "invalid type declaration: attributes may not be used with void type"),
            (
                "unsigned struct s { int i; };",
                "invalid type declaration: signed and unsigned may only be used with integer type",
            ),
            (
                "long struct s { int i; };",
                "invalid type declaration: long and long long may only be used with integer or floating-point type",
            ),
            ("int char x;", "invalid type combination"),
            ("static extern int x;", "only one storage class allowed in a declaration"),
            ("int f(static int);", "inappropriate storage class for function or associative array parameter"),
            ("int f(void v);", "void parameter may not have a name: v"),
            ("int f(int, void);", "void must be sole parameter"),
            ("int a[...];", "array prototype may not use a variable-length argument list"),
            (
                "int f(int a[int]);",
                "function prototype may not use parameter of type dynamic variable: a, parameter #1",
            ),
            ("int a[void];", "array prototype may not use parameter of type void: (anonymous), parameter #1"),
            ("int f(int x, int x);", "parameter is already declared in function prototype: x, parameter #2"),
            (
                "provider p { probe a(int x, int x); };",
                "parameter is already declared in probe input prototype: x, parameter #2",
            ),
            (
                "provider p { probe a(int x) : (int x, int y); };",
                "parameter is not declared in probe output prototype: y, parameter #2",
            ),
            ("provider p { probe a(int x) : (int x, int); };", "parameter declaration requires a name: parameter #2"),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter(|(src, msg)| err(src).0 != *msg)
            .map(|(src, _)| format!("{src:?} gave {:?}", err(src)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn pragmas_and_comments() {
        let p = prog("#!/usr/bin/env -S udtrace -s\n#pragma D option quiet\n#pragma D option bufsize=4m\n#pragma ident \"x\"\n# 3 \"x.d\"\n// c\n/* c */ BEGIN { x = 1; /* y */ }\n#pragma D depends_on module foo\n");
        let words: Vec<Vec<String>> = p
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Pragma(p) => Some(p.words.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            words,
            vec![
                vec!["option".to_string(), "quiet".into()],
                vec!["option".to_string(), "bufsize=4m".into()],
                vec!["depends_on".to_string(), "module".into(), "foo".into()],
            ]
        );
        assert!(matches!(p.items[2], Item::Clause(_)));
        assert_eq!(p.items.len(), 4);
    }

    #[test]
    fn script_mode() {
        assert!(parse_script("BEGIN { }").is_ok());
        let e = parse_script("BEGIN, END").unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.span.range()),
            ("expected predicate and/or actions following probe description", 0..10)
        );
    }

    #[test]
    fn syntax_errors() {
        let near = |t: &str| format!("syntax error near \"{t}\"");
        let cases: &[(&str, String, std::ops::Range<usize>)] = &[
            ("BEGIN {", "syntax error near end of input".into(), 7..7),
            ("BEGIN { x = ; }", near(";"), 12..13),
            // DTrace's lexer peeks past an identifier it does not know, which leaves
            // the rest of the line in the text it quotes.
            ("BEGIN { x = 1 y = 2; }", near("y = 2; }"), 14..15),
            ("BEGIN { x = 1; y = 2 x = 3; }", near("x"), 21..22),
            ("typedef pint new_int;", near("new_int;"), 13..20),
            ("BEGIN { trace(offsetof(vnode_t, m)); }", near("vnode_t, m)); }"), 23..30),
            ("BEGIN ;", near(";"), 6..7),
            ("BEGIN { foo(; }", near(";"), 12..13),
            ("BEGIN { x = (1 + 2; }", near(";"), 18..19),
            ("BEGIN { x = 1); }", "extra ) in input stream".into(), 13..14),
            ("BEGIN { x = a]; }", "extra ] in input stream".into(), 13..14),
            ("BEGIN { } }", near("}"), 10..11),
            ("BEGIN /x {", near("{"), 9..10),
            ("BEGIN /(x/ { }", "closing ) expected in predicate before /".into(), 11..11),
            ("BEGIN /a[x/ { }", "closing ] expected in predicate before /".into(), 12..12),
            ("BEGIN /x/", "expected actions { } following probe description and predicate".into(), 7..8),
            ("a:b:c:d:e", "invalid probe description \"a:b:c:d:e\": Overspecified probe description".into(), 0..9),
            ("BEGIN { x = 1 + ; }", near(";"), 16..17),
            ("BEGIN { if x { } }", near("x { } }"), 11..12),
            ("BEGIN { if (x) trace(1) }", near("}"), 24..25),
            ("BEGIN { else; }", near("else"), 8..12),
            ("int 3;", near("3"), 4..5),
            ("int int x;", "invalid type combination".into(), 4..7),
            ("struct s x", "syntax error near end of input".into(), 10..10),
            ("inline int x 3;", near("3"), 13..14),
            ("BEGIN { (int)x = 1; }", near("="), 15..16),
            ("BEGIN { x->; }", near(";"), 11..12),
            ("BEGIN { a[] = 1; }", near("]"), 10..11),
            ("BEGIN { int x; }", near("int"), 8..11),
            ("BEGIN { x = sizeof(int; }", near(";"), 22..23),
            ("BEGIN } END", near("}"), 6..7),
            ("BEGIN, {}", near("{"), 7..8),
            ("BEGIN { 1(2); }", "function designator is not of function type".into(), 11..12),
            ("BEGIN { x = a ? b; }", near(";"), 17..18),
            ("BEGIN { self->x[; }", near(";"), 16..17),
            ("int a[string, 3];", near("3"), 14..15),
            ("BEGIN { x = \"a\" \"b\"; }", near("\"b\""), 16..19),
            ("BEGIN { printf(\"%d\\n\", 1) } x {", "syntax error near end of input".into(), 31..31),
            ("BEGIN { x = offsetof(struct s, 1); }", near("1"), 31..32),
            ("BEGIN { x = (struct { })y; }", near("}"), 22..23),
            ("enum e { A, };", near("}"), 12..13),
            ("struct s { };", near("}"), 11..12),
            ("BEGIN { x = y\n+; }", near(";"), 15..16),
            ("BEGIN\n#define X 1\n{}", "invalid control directive: #define".into(), 6..13),
            ("BEGIN { x = 08; }", "constant 08 contains invalid digit 8".into(), 12..14),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter(|(src, msg, span)| err(src) != (msg.clone(), span.clone()))
            .map(|(src, _, _)| format!("{src:?} gave {:?}", err(src)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn bare_descriptions_end_their_clause() {
        // dt_grammar.y: on the command line a description without predicate or
        // actions is a whole clause, so the next word starts another.
        let p = parse_program("BEGIN END { exit(0); }", DescAlign::Name).unwrap();
        let clauses: Vec<&Clause> = p
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Clause(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(clauses.len(), 2);
        assert_eq!(clauses[0].body, None);
        assert_eq!(clauses[1].probes[0].name, "END");
        // In a script, it must have a predicate or actions whatever follows.
        for src in ["BEGIN\nint i;\n{ }", "BEGIN\nexit(0);\n}", "define X 5\n"] {
            let e = parse_script(src).unwrap_err();
            assert_eq!(e.message, "expected predicate and/or actions following probe description", "{src}");
            assert_eq!(e.span.start, 0, "{src}");
        }
    }

    #[test]
    fn probe_ids() {
        let p = parse_program("4-2", DescAlign::Name).unwrap();
        let descs: Vec<(Option<u32>, String)> = p
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Clause(c) => Some((c.probes[0].id, c.probes[0].name.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(descs, vec![(Some(4), String::new()), (None, "-2".to_string())]);
        let e = parse_program("4.56", DescAlign::Function).unwrap_err();
        assert_eq!(e.message, "probe identifier 4 not permitted when specifying functions");
        let e = parse_program("4294967296", DescAlign::Name).unwrap_err();
        assert_eq!(e.message, "identifier 4294967296 exceeds maximum probe id");
    }

    #[test]
    fn leading_colon_adds_no_field() {
        let p = parse_program("::read:", DescAlign::Function).unwrap();
        let Some(Item::Clause(c)) = p.items.first() else { panic!("no clause") };
        let d = &c.probes[0];
        assert_eq!((d.provider.as_str(), d.module.as_str(), d.function.as_str()), ("", "read", ""));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = |open: &str, n: usize| format!("BEGIN {{ x = {}a; }}", open.repeat(n));
        for src in [
            deep("(", 10_000),
            deep("!", 10_000),
            deep("-", 10_000),
            deep("(int)", 10_000),
            deep("sizeof ", 10_000),
            deep("a = ", 10_000),
            deep("a ? b : ", 10_000),
            deep("f(", 10_000),
            deep("a[", 10_000),
        ] {
            assert_eq!(err(&src).0, "expression nesting too deep");
        }
        let ifs = format!("BEGIN {{ {} x; }}", "if (1) ".repeat(10_000));
        assert_eq!(err(&ifs).0, "expression nesting too deep");
        let structs = format!("{} int x; {};", "struct a { ".repeat(10_000), "} y; }".repeat(10_000));
        assert_eq!(err(&structs).0, "expression nesting too deep");
        // Left-leaning chains are as deep for the checker and for Drop: 100,000
        // links overflowed the stack after parsing.
        let chain = |link: &str, n: usize| format!("BEGIN {{ x = a{}; }}", link.repeat(n));
        for src in [
            chain(" + a", 100_000),
            chain(" || a", 100_000),
            chain(", a", 100_000),
            chain(".b", 100_000),
            chain("->b", 100_000),
            chain("[1]", 100_000),
            chain("++", 100_000),
        ] {
            assert_eq!(err(&src).0, "expression nesting too deep");
        }
        assert!(parse_program(&chain(" + a", 150), DescAlign::Name).is_ok());
        // Moderate nesting is fine.
        assert_eq!(e(&format!("{}a{}", "(".repeat(60), ")".repeat(60))), "a");
    }

    #[test]
    fn never_panics_on_prefixes_and_garbage() {
        let src = "#pragma D option quiet\ntypedef struct s { int a; char b[4]; } s_t;\ninline int N = 3;\nself int t[string];\nsyscall::read:entry, pid$target:libc.so.6:malloc:entry\n/pid == $1 && (self->x[\"k\"] ^^ 'ab')/\n{\n\t@a[execname, probefunc] = count();\n\tif (x > 0x10ul) { y = (s_t *)arg0; } else z = `sym;\n\tprintf(\"%s\\n\", stringof(sizeof(int)));\n}\nEND { trace(1) }\n";
        for (i, _) in src.char_indices() {
            let _ = parse_program(&src[..i], DescAlign::Name);
            let _ = parse_program(&src[i..], DescAlign::Name);
        }
        for s in [
            "é{",
            "BEGIN { é }",
            "\u{0}",
            "BEGIN { x = '\\",
            "BEGIN { \"\\",
            "#",
            "# ",
            "#\"",
            "@@",
            "$$",
            "`",
            "BEGIN { ` }",
            "a``b",
            "BEGIN { x = 0x; }",
            "BEGIN { x = 1e; }",
        ] {
            let _ = parse_program(s, DescAlign::Name);
        }
    }
}
