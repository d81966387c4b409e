//! Tokens of D, lexed on demand with byte spans.
//!
//! D needs two lexing modes, as in DTrace's own lexer (`dt_lex.l`): where a program
//! item starts, probe descriptions such as `tick-1s` or `syscall::open*:entry` are one
//! token ([`Mode::Outer`]); inside predicates, bodies and declarations ordinary C-like
//! tokens are produced ([`Mode::Expr`]). The parser asks for one token at a time at a
//! byte offset and says which mode applies, so the lexer itself keeps no position.
//!
//! Control lines (`#pragma`, cpp line markers, `#error`, …) are handled here as
//! trivia; `#pragma D …` lines are collected for the parser to turn into items.

use crate::ast::{IntSuffix, Pragma};
use crate::error::{CompileError, Result, Tag};
use crate::span::Span;

/// Which of DTrace's lexer states applies at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Program outer scope: probe specifiers and declaration starts (DTrace's S2).
    Outer,
    /// Expressions, statements and declarations (DTrace's S0).
    Expr,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TokKind {
    /// An identifier or keyword; the parser decides which.
    Ident(String),
    /// A probe specifier (outer mode only), exactly as written.
    PSpec(String),
    Int {
        value: u64,
        suffix: IntSuffix,
        /// Written in decimal: DTrace's `yyintdecimal` (the text starts with 1–9).
        decimal: bool,
    },
    Char(i64),
    Str(String),
    /// `$1`, `$target`: the name without `$`.
    Macro(String),
    /// `$$1`, `$$target`: the name without `$$`.
    MacroStr(String),
    /// `@name`, or `@` alone (empty name).
    Agg(String),
    /// `` `sym`` or ``mod`sym``.
    Backquoted {
        module: Option<String>,
        name: String,
    },
    /// Operators and punctuation.
    Punct(&'static str),
    /// A `/` that closes a predicate (the next non-blank character is end of input,
    /// `;`, `{` or `/`), as DTrace decides it.
    EPred,
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: TokKind,
    pub span: Span,
}

/// Keywords that start a declaration at file scope (DTrace's S2 keyword rules).
pub const OUTER_KEYWORDS: &[&str] = &[
    "auto",
    "char",
    "const",
    "counter",
    "double",
    "enum",
    "extern",
    "float",
    "import",
    "inline",
    "int",
    "long",
    "provider",
    "register",
    "restrict",
    "self",
    "short",
    "signed",
    "static",
    "string",
    "struct",
    "this",
    "translator",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
];

/// Reserved words of D expressions (DTrace's S0 keyword rules).
pub const KEYWORDS: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "counter",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "import",
    "inline",
    "int",
    "long",
    "offsetof",
    "probe",
    "provider",
    "register",
    "restrict",
    "return",
    "self",
    "short",
    "signed",
    "sizeof",
    "static",
    "string",
    "stringof",
    "struct",
    "switch",
    "this",
    "translator",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "xlate",
];

/// Three- and two-character operators, longest first so that matching is greedy.
const LONG_PUNCT: &[&str] = &[
    "<<=", ">>=", "...", "&&", "^^", "||", "==", "!=", "<=", ">=", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=",
    "^=", "|=", "++", "--", "->",
];
const SHORT_PUNCT: &[&str] = &[
    "|", "^", "&", "<", ">", "+", "-", "*", "%", "~", "!", "?", ":", ".", "=", ",", ";", "(", ")", "[", "]", "{", "}",
];

/// A `syntax error near "x"` error for the character at `pos`.
pub fn near_char(src: &str, pos: usize) -> CompileError {
    match src.get(pos..).and_then(|s| s.chars().next()) {
        Some(c) => {
            CompileError::new(Tag::D_SYNTAX, Span::new(pos, pos + c.len_utf8()), format!("syntax error near \"{c}\""))
        }
        None => CompileError::new(Tag::D_SYNTAX, Span::new(pos, pos), "syntax error near end of input"),
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'`'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'`'
}

fn is_pspec_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b"-$:_.?*\\[]!".contains(&b)
}

fn is_pspec_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-$:_.`?*\\[]!".contains(&b)
}

/// Whitespace as DTrace's `RGX_WS`.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// Horizontal whitespace allowed before `#` on a control line.
fn is_hws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\x0b' | b'\x0c')
}

/// One word of a control line.
#[derive(Debug, Clone, PartialEq)]
enum CtlWord {
    Word(String),
    Str(String),
    Int(u64, String),
}

impl CtlWord {
    fn text(&self) -> String {
        match self {
            CtlWord::Word(s) | CtlWord::Str(s) => s.clone(),
            CtlWord::Int(_, t) => t.clone(),
        }
    }
}

/// dt_pragma.c's checks of a `#pragma D` directive's form, made as the line is read
/// (before the parser sees what follows): the words each directive takes.
fn check_d_pragma(name: &str, args: &[(CtlWord, Span)], line: Span) -> Result<()> {
    let word = |i: usize| match args.get(i) {
        Some((CtlWord::Word(w), _)) => Some(w.as_str()),
        _ => None,
    };
    let fail = |tag, msg: String| Err(CompileError::new(tag, line, msg));
    match name {
        "attributes" => {
            let (Some(attr), Some(_)) = (word(0), word(1)) else {
                return fail(Tag::D_PRAGMA_MALFORM, format!("malformed #pragma {name} <attributes> <ident>"));
            };
            if !crate::options::valid_attr(attr) {
                return fail(Tag::D_PRAGMA_INVAL, format!("invalid attributes specified by #pragma {name}"));
            }
        }
        "depends_on" => {
            let (Some(class), Some(_)) = (word(0), word(1)) else {
                return fail(Tag::D_PRAGMA_MALFORM, format!("malformed #pragma {name} <class> <name>"));
            };
            if !matches!(class, "provider" | "module" | "library") {
                return fail(Tag::D_PRAGMA_INVAL, format!("invalid class {class} specified by #pragma {name}"));
            }
        }
        "binding" => {
            let (Some((CtlWord::Str(version), _)), Some(_)) = (args.first(), word(1)) else {
                return fail(Tag::D_PRAGMA_MALFORM, format!("malformed #pragma {name} <version> <ident>"));
            };
            if crate::options::parse_version(version).is_none() {
                return fail(Tag::D_PRAGMA_INVAL, format!("invalid version string specified by #pragma {name}"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The parsed line marker of one source line: `# 12 "file.d"`, `#line 12 "file.d"` or
/// `#pragma line 12`. The number is the line number of the *next* line.
pub fn line_marker(line: &str) -> Option<(u64, Option<String>)> {
    let t = line.trim_start_matches([' ', '\t', '\x0b', '\x0c']);
    let rest = t.strip_prefix('#')?;
    let (words, _) = control_words(rest, 0).ok()?;
    let mut it = words.iter().map(|(w, _)| w).peekable();
    match it.peek() {
        Some(CtlWord::Int(..)) => {}
        Some(CtlWord::Word(w)) if w == "line" => {
            it.next();
        }
        Some(CtlWord::Word(w)) if w == "pragma" => {
            it.next();
            if !matches!(it.next(), Some(CtlWord::Word(w)) if w == "line") {
                return None;
            }
        }
        _ => return None,
    }
    let n = match it.next() {
        Some(CtlWord::Int(n, _)) => *n,
        _ => return None,
    };
    let file = match it.next() {
        Some(CtlWord::Str(f)) => Some(f.clone()),
        _ => None,
    };
    Some((n, file))
}

/// Splits the text of a control line (after `#`, up to but excluding the newline)
/// into words, strings and integers as DTrace's S3 state does. `base` is the byte
/// offset of `text` in the source, for spans.
fn control_words(text: &str, base: usize) -> Result<(Vec<(CtlWord, Span)>, ())> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if is_hws(c) || c == b'\r' {
            i += 1;
        } else if c == b'"' {
            let start = i;
            let (bytes, end) = scan_quoted(text, i, b'"', base)?;
            let Some(end) = end else {
                // The control line ends inside the string.
                return Err(CompileError::new(
                    Tag::D_STR_NL,
                    Span::new(base + start, base + b.len()),
                    "newline encountered in string literal",
                ));
            };
            out.push((CtlWord::Str(bytes_to_string(bytes)), Span::new(base + start, base + end)));
            i = end;
        } else {
            let start = i;
            while i < b.len() && !is_hws(b[i]) && b[i] != b'"' && b[i] != b'\r' {
                i += 1;
            }
            let w = &text[start..i];
            let span = Span::new(base + start, base + i);
            let word = match parse_plain_int(w) {
                Some(n) => CtlWord::Int(n, w.to_string()),
                None => CtlWord::Word(w.to_string()),
            };
            out.push((word, span));
        }
    }
    Ok((out, ()))
}

/// A whole word that is a decimal, octal or hex integer (line numbers, cpp flags).
fn parse_plain_int(w: &str) -> Option<u64> {
    if !w.as_bytes().first()?.is_ascii_digit() {
        return None;
    }
    let (digits, radix) = if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        (h, 16)
    } else if w.len() > 1 && w.starts_with('0') {
        (&w[1..], 8)
    } else {
        (w, 10)
    };
    u64::from_str_radix(digits, radix).ok()
}

/// Converts decoded literal bytes to a `String`. Escapes such as `\xff` can produce
/// bytes that are not UTF-8; those become U+FFFD, since the syntax tree holds `String`.
fn bytes_to_string(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Scans a quoted literal starting at `start` (which holds `quote`), decoding C
/// escapes. Returns the bytes and the offset just past the closing quote, or `None`
/// for the end when a newline or the end of `text` came first (the caller words the
/// error). The offset of the newline is then `text.len()` or the newline position.
fn scan_quoted(text: &str, start: usize, quote: u8, _base: usize) -> Result<(Vec<u8>, Option<usize>)> {
    let b = text.as_bytes();
    let mut i = start + 1;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c == quote {
            return Ok((out, Some(i + 1)));
        }
        if c == b'\n' {
            return Ok((out, None));
        }
        if c == b'\\' && i + 1 < b.len() && b[i + 1] != b'\n' {
            i = decode_escape(b, i + 1, &mut out);
            continue;
        }
        out.push(c);
        i += 1;
    }
    Ok((out, None))
}

/// Decodes the escape whose first character (after `\`) is at `i`; returns the offset
/// after it. As DTrace's `stresc2chr` does: up to three octal digits, `\x` and all the
/// hex digits after it, C's letter escapes, `\"` and `\\`; any other escape (`\'`,
/// `\?`, `\c`) stays as written, backslash and all.
fn decode_escape(b: &[u8], i: usize, out: &mut Vec<u8>) -> usize {
    let c = b[i];
    let simple = match c {
        b'n' => Some(b'\n'),
        b't' => Some(b'\t'),
        b'v' => Some(0x0b),
        b'b' => Some(0x08),
        b'r' => Some(b'\r'),
        b'f' => Some(0x0c),
        b'a' => Some(0x07),
        _ => None,
    };
    if let Some(v) = simple {
        out.push(v);
        return i + 1;
    }
    if (b'0'..=b'7').contains(&c) {
        let mut v: u32 = 0;
        let mut j = i;
        while j < b.len() && j < i + 3 && (b'0'..=b'7').contains(&b[j]) {
            v = v * 8 + u32::from(b[j] - b'0');
            j += 1;
        }
        out.push(v as u8);
        return j;
    }
    if c == b'x' {
        let mut v: u32 = 0;
        let mut j = i + 1;
        while j < b.len() && b[j].is_ascii_hexdigit() {
            v = v.wrapping_mul(16).wrapping_add((b[j] as char).to_digit(16).unwrap_or(0));
            j += 1;
        }
        out.push(v as u8);
        return j;
    }
    if c == b'"' || c == b'\\' {
        out.push(c);
        return i + 1;
    }
    // Any other escaped character keeps its backslash; a multi-byte character is
    // copied whole.
    out.push(b'\\');
    let len = utf8_len(c);
    let end = (i + len).min(b.len());
    out.extend_from_slice(&b[i..end]);
    end
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// The D lexer over one source text.
pub struct Lexer<'a> {
    src: &'a str,
    /// `#pragma D` lines seen so far, in order, not yet taken by the parser.
    pragmas: Vec<Pragma>,
    /// Control lines starting before this offset were already processed: the parser
    /// may lex the same position twice (in both modes), and a pragma must be
    /// recorded once.
    ctl_done: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Lexer<'a> {
        Lexer { src, pragmas: Vec::new(), ctl_done: 0 }
    }

    /// The `#pragma D` lines that start before `before`, removed from the queue.
    pub fn take_pragmas(&mut self, before: usize) -> Vec<Pragma> {
        let n = self.pragmas.iter().take_while(|p| (p.span.start as usize) < before).count();
        self.pragmas.drain(..n).collect()
    }

    /// Lexes the token at or after `pos` in `mode`. `is_type` says whether an
    /// identifier names a type (builtin or declared), which decides in outer mode
    /// whether `int*x` starts a declaration or is a probe description.
    pub fn lex(&mut self, pos: usize, mode: Mode, is_type: &dyn Fn(&str) -> bool) -> Result<Token> {
        let pos = self.skip_trivia(pos, mode)?;
        let b = self.src.as_bytes();
        if pos >= b.len() {
            return Ok(Token { kind: TokKind::Eof, span: Span::new(b.len(), b.len()) });
        }
        match mode {
            Mode::Outer => self.lex_outer(pos, is_type),
            Mode::Expr => self.lex_expr(pos),
        }
    }

    fn at_line_start(&self, pos: usize) -> bool {
        let b = self.src.as_bytes();
        let mut i = pos;
        while i > 0 && is_hws(b[i - 1]) {
            i -= 1;
        }
        i == 0 || b[i - 1] == b'\n'
    }

    /// Skips whitespace, comments, `#!` lines and control lines; returns the offset
    /// of the next token.
    fn skip_trivia(&mut self, mut pos: usize, mode: Mode) -> Result<usize> {
        let b = self.src.as_bytes();
        loop {
            let Some(&c) = b.get(pos) else { return Ok(pos) };
            if is_ws(c) {
                pos += 1;
            } else if c == b'\\' && mode == Mode::Expr && b.get(pos + 1) == Some(&b'\n') {
                pos += 2; // line continuation
            } else if c == b'/' && b.get(pos + 1) == Some(&b'*') {
                pos = self.skip_block_comment(pos)?;
            } else if c == b'/' && b.get(pos + 1) == Some(&b'/') {
                pos = line_end(b, pos);
            } else if c == b'#' && self.at_line_start(pos) {
                if b.get(pos + 1) == Some(&b'!') {
                    pos = line_end(b, pos); // interpreter line
                } else {
                    pos = self.control_line(pos)?;
                }
            } else {
                return Ok(pos);
            }
        }
    }

    fn skip_block_comment(&self, start: usize) -> Result<usize> {
        let b = self.src.as_bytes();
        let mut i = start + 2;
        while i < b.len() {
            if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                return Ok(i + 2);
            }
            if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                return Err(CompileError::new(Tag::D_SYNTAX, Span::new(i, i + 2), "/* encountered inside a comment"));
            }
            i += 1;
        }
        // dtrace raises this from input() at end of file, so its line is the last
        // one (yylineno counts every newline of the comment), not the comment's.
        Err(CompileError::new(Tag::D_SYNTAX, Span::new(b.len(), b.len()), "end-of-file encountered before matching */"))
    }

    /// Processes the control line whose `#` is at `hash`; returns the offset after
    /// its newline.
    fn control_line(&mut self, hash: usize) -> Result<usize> {
        let b = self.src.as_bytes();
        let end = line_end(b, hash);
        if end >= b.len() {
            return Err(CompileError::new(
                Tag::D_SYNTAX,
                Span::new(hash, b.len()),
                "end-of-file encountered before end of control line",
            ));
        }
        let (words, _) = control_words(&self.src[hash + 1..end], hash + 1)?;
        if hash >= self.ctl_done {
            self.ctl_done = end;
            self.dispatch_control(&words, Span::new(hash, end))?;
        }
        Ok(end + 1)
    }

    /// Acts on one control line as DTrace's `dt_pragma` does.
    fn dispatch_control(&mut self, words: &[(CtlWord, Span)], line: Span) -> Result<()> {
        #[derive(PartialEq, PartialOrd)]
        enum Kind {
            Directive,
            Pragma,
            DPragma,
        }
        let mut kind = Kind::Directive;
        for (i, (word, span)) in words.iter().enumerate() {
            let name = match word {
                CtlWord::Int(..) => return check_line_args(&words[i..], "line"),
                CtlWord::Str(_) => {
                    return Err(CompileError::new(Tag::D_PRAGCTL_INVAL, *span, "invalid control directive"))
                }
                CtlWord::Word(w) => w.as_str(),
            };
            if kind == Kind::Directive && name == "pragma" {
                kind = Kind::Pragma;
                continue;
            }
            if kind == Kind::Pragma && name == "D" {
                kind = Kind::DPragma;
                continue;
            }
            let rest = &words[i + 1..];
            return match name {
                "ident" => Ok(()),
                "line" => check_line_args(rest, "line"),
                "error" => Err(error_directive(rest, line)),
                _ if kind == Kind::DPragma => {
                    check_d_pragma(name, rest, line)?;
                    let words = words[i..].iter().map(|(w, _)| w.text()).collect();
                    self.pragmas.push(Pragma { words, span: line });
                    Ok(())
                }
                // Unknown pragmas are ignored (K&R A12.8), as DTrace does.
                _ if kind == Kind::Pragma => Ok(()),
                _ => Err(CompileError::new(
                    Tag::D_PRAGCTL_INVAL,
                    Span::new(line.start as usize, span.end as usize),
                    format!("invalid control directive: #{name}"),
                )),
            };
        }
        Ok(())
    }

    fn lex_outer(&mut self, pos: usize, is_type: &dyn Fn(&str) -> bool) -> Result<Token> {
        let b = self.src.as_bytes();
        let c = b[pos];
        if c.is_ascii_digit() {
            // DTrace's S2 has no floating-point rule: `4.56` is `4` then `.56`.
            return self.lex_number(pos, false);
        }
        if matches!(c, b'{' | b'/' | b',') {
            let p = match c {
                b'{' => "{",
                b'/' => "/",
                _ => ",",
            };
            return Ok(Token { kind: TokKind::Punct(p), span: Span::new(pos, pos + 1) });
        }
        if !is_pspec_start(c) {
            return Err(near_char(self.src, pos));
        }
        let mut end = pos + 1;
        while end < b.len() && is_pspec_char(b[end]) {
            end += 1;
        }
        let run = &self.src[pos..end];
        if let Some(word) = declaration_start(run, is_type) {
            let span = Span::new(pos, pos + word.len());
            return Ok(Token { kind: TokKind::Ident(word.to_string()), span });
        }
        Ok(Token { kind: TokKind::PSpec(run.to_string()), span: Span::new(pos, end) })
    }

    fn lex_expr(&mut self, pos: usize) -> Result<Token> {
        let b = self.src.as_bytes();
        let c = b[pos];
        if is_ident_start(c) {
            return Ok(self.lex_ident(pos));
        }
        if c.is_ascii_digit() || (c == b'.' && b.get(pos + 1).is_some_and(u8::is_ascii_digit)) {
            return self.lex_number(pos, true);
        }
        match c {
            b'$' => return self.lex_macro(pos),
            b'@' => return Ok(self.lex_agg(pos)),
            b'"' => return self.lex_string(pos),
            b'\'' => return self.lex_char(pos),
            b'/' => return Ok(self.lex_slash(pos)),
            _ => {}
        }
        let rest = &self.src[pos..];
        for p in LONG_PUNCT.iter().chain(SHORT_PUNCT) {
            if rest.starts_with(p) {
                return Ok(Token { kind: TokKind::Punct(p), span: Span::new(pos, pos + p.len()) });
            }
        }
        Err(near_char(self.src, pos))
    }

    fn lex_ident(&self, pos: usize) -> Token {
        let b = self.src.as_bytes();
        let mut end = pos + 1;
        while end < b.len() && is_ident_char(b[end]) {
            end += 1;
        }
        let text = &self.src[pos..end];
        let span = Span::new(pos, end);
        let kind = match text.rfind('`') {
            None => TokKind::Ident(text.to_string()),
            Some(i) => {
                let module = &text[..i];
                TokKind::Backquoted {
                    module: (!module.is_empty()).then(|| module.trim_start_matches('`').to_string()),
                    name: text[i + 1..].to_string(),
                }
            }
        };
        Token { kind, span }
    }

    fn lex_macro(&self, pos: usize) -> Result<Token> {
        let b = self.src.as_bytes();
        let dollars = if b.get(pos + 1) == Some(&b'$') { 2 } else { 1 };
        let start = pos + dollars;
        let mut end = start;
        match b.get(start) {
            Some(d) if d.is_ascii_digit() => {
                while end < b.len() && b[end].is_ascii_digit() {
                    end += 1;
                }
            }
            Some(&c) if is_ident_start(c) => {
                while end < b.len() && is_ident_char(b[end]) {
                    end += 1;
                }
            }
            _ => return Err(near_char(self.src, pos)),
        }
        let name = self.src[start..end].to_string();
        let kind = if dollars == 2 { TokKind::MacroStr(name) } else { TokKind::Macro(name) };
        Ok(Token { kind, span: Span::new(pos, end) })
    }

    fn lex_agg(&self, pos: usize) -> Token {
        let b = self.src.as_bytes();
        let mut end = pos + 1;
        if b.get(end).is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_') {
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
        }
        Token { kind: TokKind::Agg(self.src[pos + 1..end].to_string()), span: Span::new(pos, end) }
    }

    /// `/` is division unless the next non-blank character is end of input, `;`, `{`
    /// or `/`, in which case it closes a predicate (DTrace's lookahead rule).
    fn lex_slash(&self, pos: usize) -> Token {
        let b = self.src.as_bytes();
        if b.get(pos + 1) == Some(&b'=') {
            return Token { kind: TokKind::Punct("/="), span: Span::new(pos, pos + 2) };
        }
        let mut i = pos + 1;
        while i < b.len() && is_ws(b[i]) {
            i += 1;
        }
        let kind = match b.get(i) {
            None | Some(b';' | b'{' | b'/') => TokKind::EPred,
            _ => TokKind::Punct("/"),
        };
        Token { kind, span: Span::new(pos, pos + 1) }
    }

    fn lex_string(&self, pos: usize) -> Result<Token> {
        let (mut bytes, end) = scan_quoted(self.src, pos, b'"', 0)?;
        // A D string ends at its first NUL, as the C string DTrace makes of it.
        if let Some(nul) = bytes.iter().position(|&c| c == 0) {
            bytes.truncate(nul);
        }
        match end {
            Some(end) => Ok(Token { kind: TokKind::Str(bytes_to_string(bytes)), span: Span::new(pos, end) }),
            None => Err(self.unterminated(pos, "newline encountered in string literal")),
        }
    }

    fn lex_char(&self, pos: usize) -> Result<Token> {
        let (bytes, end) = scan_quoted(self.src, pos, b'\'', 0)?;
        let Some(end) = end else {
            return Err(self.unterminated(pos, "newline encountered in character constant"));
        };
        let span = Span::new(pos, end);
        if end == pos + 2 {
            return Err(CompileError::new(Tag::D_CHR_NULL, span, "empty character constant"));
        }
        if bytes.len() > 8 {
            return Err(CompileError::new(Tag::D_CHR_OFLOW, span, "character constant is too long"));
        }
        // The first character is the most significant byte, as in DTrace.
        let value = bytes.iter().fold(0u64, |v, &c| (v << 8) | u64::from(c));
        Ok(Token { kind: TokKind::Char(value as i64), span })
    }

    /// The error for a string or character constant that is not closed: DTrace
    /// complains about the newline; at the end of input no rule of its lexer matches,
    /// so it reports the quote itself.
    fn unterminated(&self, pos: usize, newline_msg: &str) -> CompileError {
        let end = line_end(self.src.as_bytes(), pos);
        let tag = if newline_msg.contains("string") { Tag::D_STR_NL } else { Tag::D_CHR_NL };
        if end < self.src.len() {
            // dt_lex.l matches the newline too, so its line count is already past it.
            CompileError::new(tag, Span::new(end + 1, end + 1), newline_msg)
        } else {
            near_char(self.src, pos)
        }
    }

    /// Integer constants, and (where `reject_floats`) the floating-point constants D
    /// rejects.
    fn lex_number(&self, pos: usize, reject_floats: bool) -> Result<Token> {
        let b = self.src.as_bytes();
        let hex = b[pos] == b'0'
            && matches!(b.get(pos + 1), Some(b'x' | b'X'))
            && b.get(pos + 2).is_some_and(u8::is_ascii_hexdigit);
        let digits_end = if hex {
            scan_while(b, pos + 2, |c| c.is_ascii_hexdigit())
        } else {
            scan_while(b, pos, |c| c.is_ascii_digit())
        };
        let suffix_len = int_suffix_len(&b[digits_end..]);
        let int_end = digits_end + suffix_len;
        if !hex && reject_floats {
            let fp_end = float_end(b, pos);
            if fp_end > int_end {
                return Err(CompileError::new(
                    Tag::D_SYNTAX,
                    Span::new(pos, fp_end),
                    "floating-point constants are not permitted",
                ));
            }
        }
        let text = &self.src[pos..int_end];
        let span = Span::new(pos, int_end);
        let value = int_value(text, &self.src[pos..digits_end], hex, span)?;
        let suffix = int_suffix(&self.src[digits_end..int_end]);
        let decimal = b[pos] != b'0';
        Ok(Token { kind: TokKind::Int { value, suffix, decimal }, span })
    }
}

/// If the outer-mode word `run` starts a declaration rather than a probe description,
/// the keyword or type name to return. Follows DTrace: text with `:-.?!` or a
/// backquote, and `BEGIN`/`END`/`ERROR`, are always descriptions; otherwise the part
/// before a `*` that names a type starts a declaration (`int*x;`).
fn declaration_start<'r>(run: &'r str, is_type: &dyn Fn(&str) -> bool) -> Option<&'r str> {
    if run.contains([':', '-', '.', '?', '!', '`']) || matches!(run, "BEGIN" | "END" | "ERROR") {
        return None;
    }
    if OUTER_KEYWORDS.contains(&run) {
        return Some(run);
    }
    let head = match run.find('*') {
        Some(i) if i > 0 => &run[..i],
        _ => run,
    };
    let ident_like = head.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    (ident_like && is_type(head)).then_some(head)
}

fn line_end(b: &[u8], pos: usize) -> usize {
    b[pos..].iter().position(|&c| c == b'\n').map_or(b.len(), |i| pos + i)
}

fn scan_while(b: &[u8], mut i: usize, f: impl Fn(u8) -> bool) -> usize {
    while i < b.len() && f(b[i]) {
        i += 1;
    }
    i
}

/// Length of the longest valid integer suffix (`u`, `l`, `ul`, `lu`, `ll`, `ull`,
/// `llu`, any case) at the start of `b`.
fn int_suffix_len(b: &[u8]) -> usize {
    let n = b.iter().take(3).take_while(|c| matches!(c, b'u' | b'U' | b'l' | b'L')).count();
    (0..=n).rev().find(|&k| valid_suffix(&b[..k])).unwrap_or(0)
}

fn valid_suffix(s: &[u8]) -> bool {
    let lower: Vec<u8> = s.iter().map(u8::to_ascii_lowercase).collect();
    matches!(&lower[..], b"" | b"u" | b"l" | b"ul" | b"lu" | b"ll" | b"ull" | b"llu")
}

fn int_suffix(s: &str) -> IntSuffix {
    let lower = s.to_ascii_lowercase();
    match lower.as_str() {
        "u" => IntSuffix::U,
        "l" => IntSuffix::L,
        "ul" | "lu" => IntSuffix::UL,
        "ll" => IntSuffix::LL,
        "ull" | "llu" => IntSuffix::ULL,
        _ => IntSuffix::None,
    }
}

/// End of the longest match of DTrace's floating-point pattern at `pos` (or `pos` if
/// none): `digits [.] digits* [e[+-]digits] [fFlL]` or `. digits …`.
fn float_end(b: &[u8], pos: usize) -> usize {
    let mut i = scan_while(b, pos, |c| c.is_ascii_digit());
    let int_digits = i > pos;
    if b.get(i) == Some(&b'.') {
        let j = scan_while(b, i + 1, |c| c.is_ascii_digit());
        if int_digits || j > i + 1 {
            i = j;
        }
    }
    if i == pos {
        return pos;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let k = scan_while(b, j, |c| c.is_ascii_digit());
        if k > j {
            i = k;
        }
    }
    if matches!(b.get(i), Some(b'f' | b'F' | b'l' | b'L')) {
        i += 1;
    }
    i
}

/// The value of an integer constant; `text` is the whole token (for messages),
/// `digits` the part without suffix.
fn int_value(text: &str, digits: &str, hex: bool, span: Span) -> Result<u64> {
    let (body, radix) = if hex {
        (&digits[2..], 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (&digits[1..], 8)
    } else {
        (digits, 10)
    };
    let mut value: u64 = 0;
    for c in body.chars() {
        let Some(d) = c.to_digit(radix) else {
            return Err(CompileError::new(
                Tag::D_INT_DIGIT,
                span,
                format!("constant {text} contains invalid digit {c}"),
            ));
        };
        value = value.checked_mul(u64::from(radix)).and_then(|v| v.checked_add(u64::from(d))).ok_or_else(|| {
            CompileError::new(Tag::D_INT_OFLOW, span, format!("constant {text} results in integer overflow"))
        })?;
    }
    Ok(value)
}

/// Validates the arguments of a line directive: `<line> [ ["file"] state… ]`.
fn check_line_args(args: &[(CtlWord, Span)], name: &str) -> Result<()> {
    let ok = match args {
        [(CtlWord::Int(..), _)] => true,
        [(CtlWord::Int(..), _), (CtlWord::Str(_), _), flags @ ..] => {
            flags.iter().all(|(w, _)| matches!(w, CtlWord::Int(..)))
        }
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let span = match (args.first(), args.last()) {
        (Some((_, a)), Some((_, z))) => a.to(*z),
        _ => Span::default(),
    };
    Err(CompileError::new(Tag::D_PRAGMA_MALFORM, span, format!("malformed #{name} <line> [ [\"file\"] state ]")))
}

/// `#error words…` stops compilation with the words, as DTrace prints them.
fn error_directive(args: &[(CtlWord, Span)], line: Span) -> CompileError {
    let mut msg = String::from("#error: ");
    for (w, _) in args {
        if !matches!(w, CtlWord::Int(..)) {
            msg.push_str(&w.text());
            msg.push(' ');
        }
    }
    CompileError::new(Tag::D_PRAGERR, line, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_types(_: &str) -> bool {
        false
    }

    fn lex_all(src: &str, mode: Mode) -> Result<Vec<TokKind>> {
        let mut lx = Lexer::new(src);
        let mut pos = 0;
        let mut out = Vec::new();
        loop {
            let t = lx.lex(pos, mode, &no_types)?;
            if t.kind == TokKind::Eof {
                return Ok(out);
            }
            pos = t.span.end as usize;
            out.push(t.kind);
        }
    }

    fn expr(src: &str) -> Vec<TokKind> {
        lex_all(src, Mode::Expr).unwrap()
    }

    fn err(src: &str, mode: Mode) -> (String, std::ops::Range<usize>) {
        let e = lex_all(src, mode).unwrap_err();
        (e.message, e.span.range())
    }

    fn int(value: u64, suffix: IntSuffix) -> TokKind {
        TokKind::Int { value, suffix, decimal: false }
    }

    fn dec(value: u64, suffix: IntSuffix) -> TokKind {
        TokKind::Int { value, suffix, decimal: true }
    }

    #[test]
    fn integers() {
        assert_eq!(
            expr("017 0x1F 42"),
            vec![int(15, IntSuffix::None), int(31, IntSuffix::None), dec(42, IntSuffix::None)]
        );
        assert_eq!(
            expr("1u 2UL 3lu 4ll 5ULL 6llu 7L"),
            vec![
                dec(1, IntSuffix::U),
                dec(2, IntSuffix::UL),
                dec(3, IntSuffix::UL),
                dec(4, IntSuffix::LL),
                dec(5, IntSuffix::ULL),
                dec(6, IntSuffix::ULL),
                dec(7, IntSuffix::L)
            ]
        );
        assert_eq!(expr("18446744073709551615"), vec![dec(u64::MAX, IntSuffix::None)]);
        assert_eq!(expr("0"), vec![int(0, IntSuffix::None)]);
    }

    #[test]
    fn integer_errors() {
        assert_eq!(
            err("x = 18446744073709551616;", Mode::Expr),
            ("constant 18446744073709551616 results in integer overflow".into(), 4..24)
        );
        assert_eq!(err("089", Mode::Expr), ("constant 089 contains invalid digit 8".into(), 0..3));
        assert_eq!(err("a + 1.5", Mode::Expr), ("floating-point constants are not permitted".into(), 4..7));
        assert_eq!(err("2e10", Mode::Expr).1, 0..4);
        assert_eq!(err("10f", Mode::Expr).1, 0..3);
        assert_eq!(err(".5", Mode::Expr).1, 0..2);
    }

    #[test]
    fn strings_and_chars() {
        assert_eq!(expr(r#""a\tb\n\\\"\x41\101""#), vec![TokKind::Str("a\tb\n\\\"AA".into())]);
        assert_eq!(expr(r#""" "x""#), vec![TokKind::Str("".into()), TokKind::Str("x".into())]);
        // DTrace's escapes: a NUL ends a string; `\?` and `\'` keep their backslash;
        // `\x` takes every hex digit; octal takes at most three digits.
        assert_eq!(expr(r#""ab\0cd""#), vec![TokKind::Str("ab".into())]);
        assert_eq!(expr(r#""\?\'\c""#), vec![TokKind::Str("\\?\\'\\c".into())]);
        assert_eq!(expr(r#""\x0041\0101""#), vec![TokKind::Str("A\u{8}1".into())]);
        assert_eq!(
            expr(r"'a' '\n' 'ab' '\'' '\\'"),
            vec![
                TokKind::Char(97),
                TokKind::Char(10),
                TokKind::Char(0x6162),
                TokKind::Char(0x5c27),
                TokKind::Char(0x5c)
            ]
        );
    }

    #[test]
    fn literal_errors() {
        // Reported after the newline, where dt_lex.l's line count is.
        assert_eq!(err("\"abc\nx\"", Mode::Expr), ("newline encountered in string literal".into(), 5..5));
        assert_eq!(err("x \"abc", Mode::Expr), ("syntax error near \"\"\"".into(), 2..3));
        assert_eq!(err("''", Mode::Expr), ("empty character constant".into(), 0..2));
        assert_eq!(err("'abcdefghi'", Mode::Expr), ("character constant is too long".into(), 0..11));
        assert_eq!(err("'a\n'", Mode::Expr), ("newline encountered in character constant".into(), 3..3));
    }

    #[test]
    fn comments() {
        assert_eq!(
            expr("a /* x */ b // c\n d"),
            vec![TokKind::Ident("a".into()), TokKind::Ident("b".into()), TokKind::Ident("d".into())]
        );
        assert_eq!(err("a /* x", Mode::Expr), ("end-of-file encountered before matching */".into(), 6..6));
        assert_eq!(err("a /* x /* y */", Mode::Expr), ("/* encountered inside a comment".into(), 7..9));
    }

    #[test]
    fn operators_and_predicate_slash() {
        assert_eq!(
            expr("a<<=b>>c->d"),
            vec![
                TokKind::Ident("a".into()),
                TokKind::Punct("<<="),
                TokKind::Ident("b".into()),
                TokKind::Punct(">>"),
                TokKind::Ident("c".into()),
                TokKind::Punct("->"),
                TokKind::Ident("d".into())
            ]
        );
        assert_eq!(expr("a / b")[1], TokKind::Punct("/"));
        assert_eq!(expr("a /\n {")[1], TokKind::EPred);
        assert_eq!(expr("a/")[1], TokKind::EPred);
        assert_eq!(expr("a /= b")[1], TokKind::Punct("/="));
    }

    #[test]
    fn special_tokens() {
        assert_eq!(
            expr("$1 $target $$2 @ @cnt `sym libc`malloc"),
            vec![
                TokKind::Macro("1".into()),
                TokKind::Macro("target".into()),
                TokKind::MacroStr("2".into()),
                TokKind::Agg("".into()),
                TokKind::Agg("cnt".into()),
                TokKind::Backquoted { module: None, name: "sym".into() },
                TokKind::Backquoted { module: Some("libc".into()), name: "malloc".into() }
            ]
        );
        assert_eq!(err("a $ b", Mode::Expr), ("syntax error near \"$\"".into(), 2..3));
        assert_eq!(err("a é", Mode::Expr), ("syntax error near \"é\"".into(), 2..4));
        assert_eq!(err("a # b", Mode::Expr), ("syntax error near \"#\"".into(), 2..3));
    }

    #[test]
    fn outer_mode() {
        let out = |s: &str| lex_all(s, Mode::Outer).unwrap();
        assert_eq!(out("tick-1s"), vec![TokKind::PSpec("tick-1s".into())]);
        assert_eq!(
            out("pid$target:libc.so.6:malloc:entry,BEGIN"),
            vec![
                TokKind::PSpec("pid$target:libc.so.6:malloc:entry".into()),
                TokKind::Punct(","),
                TokKind::PSpec("BEGIN".into())
            ]
        );
        assert_eq!(
            out("syscall::open*:entry/"),
            vec![TokKind::PSpec("syscall::open*:entry".into()), TokKind::Punct("/")]
        );
        assert_eq!(out("int"), vec![TokKind::Ident("int".into())]);
        assert_eq!(out("foo*"), vec![TokKind::PSpec("foo*".into())]);
        let mut lx = Lexer::new("uint32_t*x");
        let t = lx.lex(0, Mode::Outer, &|s| s == "uint32_t").unwrap();
        assert_eq!((t.kind, t.span.range()), (TokKind::Ident("uint32_t".into()), 0..8));
        assert_eq!(err("BEGIN ;", Mode::Outer), ("syntax error near \";\"".into(), 6..7));
    }

    #[test]
    fn control_lines() {
        let mut lx = Lexer::new(
            "#!/usr/bin/env -S udtrace -s\n#pragma D option quiet\n# 12 \"x.d\"\n#pragma ident \"x\"\nBEGIN",
        );
        let t = lx.lex(0, Mode::Outer, &no_types).unwrap();
        assert_eq!(t.kind, TokKind::PSpec("BEGIN".into()));
        let p = lx.take_pragmas(t.span.start as usize);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].words, vec!["option".to_string(), "quiet".to_string()]);
        // Lexing the same place again records nothing twice.
        lx.lex(0, Mode::Expr, &no_types).unwrap();
        assert!(lx.take_pragmas(usize::MAX).is_empty());
    }

    #[test]
    fn control_line_errors() {
        assert_eq!(err("#include <stdio.h>\n", Mode::Outer), ("invalid control directive: #include".into(), 0..8));
        assert_eq!(err("  #define X 1\n", Mode::Outer), ("invalid control directive: #define".into(), 2..9));
        assert_eq!(
            err("#pragma D option quiet", Mode::Outer),
            ("end-of-file encountered before end of control line".into(), 0..22)
        );
        assert_eq!(err("#error stop here\n", Mode::Outer).0, "#error: stop here ");
        assert_eq!(err("#line x\n", Mode::Outer), ("malformed #line <line> [ [\"file\"] state ]".into(), 6..7));
        assert!(lex_all("#\n#pragma weak x\n", Mode::Outer).unwrap().is_empty());
    }

    #[test]
    fn line_markers() {
        assert_eq!(line_marker("# 12 \"x.d\" 1"), Some((12, Some("x.d".into()))));
        assert_eq!(line_marker("#line 7"), Some((7, None)));
        assert_eq!(line_marker("  #pragma line 3 \"y\""), Some((3, Some("y".into()))));
        assert_eq!(line_marker("#pragma D option quiet"), None);
        assert_eq!(line_marker("x = 1;"), None);
    }
}
