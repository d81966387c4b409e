//! Macro arguments (`$0`..`$N`, `$$N`) and macro variables (`$pid`, `$target`, ...)
//! as DTrace's lexer (`dt_lex.l`) and probe-description parser (`dtrace_xstr2desc`)
//! substitute them. Pure: the caller fills in the process facts.

use std::cell::Cell;

use crate::errtags::Tag;

/// What a macro reference stands for, decided as `dt_lex.l` decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MacroValue {
    /// An integer token. `negative` is a leading `-` (the parser negates, as for a
    /// literal); `suffix` is any text after the digits (`u`, `l`, ...) for the parser
    /// to type or reject; `decimal` is false for octal and hex, which C types
    /// differently.
    Int { value: u64, negative: bool, suffix: String, decimal: bool },
    /// A string token (escape sequences already converted).
    Str(String),
    /// An identifier (or type name) token: `$1` given as `foo` reads as `foo`.
    Ident(String),
}

impl MacroValue {
    fn int(value: u64) -> MacroValue {
        MacroValue::Int { value, negative: false, suffix: String::new(), decimal: true }
    }

    /// The integer's value as D computes it (wrapping, like the negation of a u64
    /// literal), if this is an integer.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            MacroValue::Int { value, negative, .. } => {
                let v = *value as i64;
                Some(if *negative { v.wrapping_neg() } else { v })
            }
            _ => None,
        }
    }
}

/// Macro errors, worded as libdtrace words them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MacroError {
    /// D_MACRO_UNDEF, for `$N`/`$$N` past the arguments given (without `defaultargs`).
    #[error("macro argument {0} is not defined")]
    ArgUndefined(String),
    /// D_MACRO_UNDEF, for `$name` that is no macro variable.
    #[error("macro variable {0} is not defined")]
    VarUndefined(String),
    /// D_MACRO_OFLOW.
    #[error("macro argument {reference} constant {text} results in integer overflow")]
    Overflow { reference: String, text: String },
    /// D_MACRO_UNUSED: the last argument was never referenced (unless `argref`).
    #[error("extraneous argument '{arg}' (${index} is not referenced)")]
    Extraneous { arg: String, index: usize },
    /// EDT_BADSPCV, for a bad `$` reference inside a probe description.
    #[error("Undefined macro variable in probe description")]
    BadDescriptionVariable(String),
    /// Not a macro reference at all (no leading `$`).
    #[error("{0} is not a macro reference")]
    NotAReference(String),
}

impl MacroError {
    /// DTrace's error tag (shown with `-x errtags`).
    pub fn tag(&self) -> Tag {
        match self {
            MacroError::ArgUndefined(_) | MacroError::VarUndefined(_) => Tag::D_MACRO_UNDEF,
            MacroError::Overflow { .. } => Tag::D_MACRO_OFLOW,
            MacroError::Extraneous { .. } => Tag::D_MACRO_UNUSED,
            MacroError::BadDescriptionVariable(_) | MacroError::NotAReference(_) => Tag::D_PDESC_INVAL,
        }
    }
}

/// The macro arguments of one program and the process facts behind the macro
/// variables. `args[0]` is `$0`: the script's path for `-s`, else udtrace's argv[0].
#[derive(Debug, Clone, Default)]
pub struct MacroArgs {
    pub args: Vec<String>,
    /// `-x defaultargs`: references past the arguments read as `0` / `""`.
    pub defaultargs: bool,
    /// `-x argref`: an unreferenced last argument is not an error.
    pub argref: bool,
    /// The first `-c`/`-p` process; `$target` is 0 without one, as in DTrace.
    pub target: Option<i64>,
    pub pid: i64,
    pub ppid: i64,
    pub pgid: i64,
    pub sid: i64,
    pub uid: i64,
    pub gid: i64,
    pub euid: i64,
    pub egid: i64,
    /// Which arguments have been referenced, for [`MacroArgs::check_unused`].
    referenced: Vec<Cell<bool>>,
    /// `#pragma D option defaultargs` / `argref` in the program being compiled: they
    /// hold from the pragma on, for that program only.
    pragma_defaultargs: Cell<bool>,
    pragma_argref: Cell<bool>,
}

impl MacroArgs {
    pub fn new(args: Vec<String>) -> MacroArgs {
        let referenced = args.iter().map(|_| Cell::new(false)).collect();
        MacroArgs { args, referenced, ..MacroArgs::default() }
    }

    /// Applies a `#pragma D option` of the program being compiled, if it concerns
    /// macro arguments (as dtrace sets the compile's flags as it reads the pragma).
    pub fn pragma_option(&self, name: &str) {
        match name {
            "defaultargs" => self.pragma_defaultargs.set(true),
            "argref" => self.pragma_argref.set(true),
            _ => {}
        }
    }

    fn defaultargs(&self) -> bool {
        self.defaultargs || self.pragma_defaultargs.get()
    }

    fn mark(&self, i: usize) {
        if let Some(c) = self.referenced.get(i) {
            c.set(true);
        }
    }

    /// Whether argument `i` has been referenced by a lookup or a description.
    pub fn is_referenced(&self, i: usize) -> bool {
        self.referenced.get(i).is_some_and(Cell::get)
    }

    /// The value of a macro variable by name (without `$`), as an integer.
    pub fn variable(&self, name: &str) -> Option<i64> {
        Some(match name {
            "egid" => self.egid,
            "euid" => self.euid,
            "gid" => self.gid,
            "pid" => self.pid,
            "pgid" => self.pgid,
            "ppid" => self.ppid,
            "sid" => self.sid,
            "target" => self.target.unwrap_or(0),
            "uid" => self.uid,
            // Solaris projects and tasks do not exist on Linux; DTrace for Linux
            // dropped them, so they are undefined here too.
            _ => return None,
        })
    }

    /// Resolves a reference as written in D text: `$3`, `$$3`, `$pid`, `$$target`.
    /// Marks argument references as used.
    pub fn lookup(&self, reference: &str) -> Result<MacroValue, MacroError> {
        let (quoted, body) = match reference.strip_prefix("$$") {
            Some(b) => (true, b),
            None => match reference.strip_prefix('$') {
                Some(b) => (false, b),
                None => return Err(MacroError::NotAReference(reference.to_string())),
            },
        };
        if body.is_empty() {
            return Err(MacroError::NotAReference(reference.to_string()));
        }
        if body.bytes().all(|b| b.is_ascii_digit()) {
            let i: usize = body.parse().unwrap_or(usize::MAX);
            let text = match self.args.get(i) {
                Some(v) => {
                    self.mark(i);
                    v.as_str()
                }
                None if self.defaultargs() => {
                    if quoted {
                        ""
                    } else {
                        "0"
                    }
                }
                None => return Err(MacroError::ArgUndefined(reference.to_string())),
            };
            if quoted {
                return Ok(MacroValue::Str(unescape(text)));
            }
            return classify(reference, text);
        }
        let v = self.variable(body).ok_or_else(|| MacroError::VarUndefined(reference.to_string()))?;
        Ok(if quoted {
            // libdtrace formats macro variables as unsigned ids for `$$`.
            MacroValue::Str((v as u32).to_string())
        } else {
            MacroValue::int(v as u64)
        })
    }

    /// Substitutes the macro reference in one field of a probe description
    /// (`pid$target`, `$1`, `$$1`), as `dtrace_xstr2desc` does: the text from the first
    /// `$` to the end of the field is the reference; `$$` reads like `$`. Arguments
    /// past those given are an error even with `defaultargs`, as in DTrace.
    pub fn expand_description_field(&self, field: &str) -> Result<String, MacroError> {
        let Some(at) = field.find('$') else {
            return Ok(field.to_string());
        };
        let (head, mut var) = field.split_at(at);
        let bad = || MacroError::BadDescriptionVariable(field.to_string());
        if var.len() > 2 && var.as_bytes()[1] == b'$' {
            var = &var[1..];
        }
        let name = &var[1..];
        let value = if name.starts_with(|c: char| c.is_ascii_digit()) {
            // A number then literal text: `$1foo` reads argument 1 followed by "foo".
            let end = name.find(|c: char| !c.is_ascii_digit()).unwrap_or(name.len());
            let i: usize = name[..end].parse().map_err(|_| bad())?;
            let arg = self.args.get(i).ok_or_else(bad)?;
            self.mark(i);
            format!("{arg}{}", &name[end..])
        } else {
            // Variables are printed as libdtrace's `%d` of the id.
            (self.variable(name).ok_or_else(bad)? as i32).to_string()
        };
        Ok(format!("{head}{value}"))
    }

    /// Expands every field of a `provider:module:function:name` description.
    pub fn expand_description(&self, desc: &str) -> Result<String, MacroError> {
        let fields: Result<Vec<String>, MacroError> =
            desc.split(':').map(|f| self.expand_description_field(f)).collect();
        Ok(fields?.join(":"))
    }

    /// Forgets which arguments were referenced: dtrace checks each program on the
    /// command line on its own.
    pub fn start_program(&self) {
        self.referenced.iter().for_each(|c| c.set(false));
        self.pragma_defaultargs.set(false);
        self.pragma_argref.set(false);
    }

    /// DTrace's check after compiling: the last argument must have been used,
    /// unless `argref` is set. Call once all references have been resolved.
    pub fn check_unused(&self) -> Result<(), MacroError> {
        let n = self.args.len();
        if n > 1 && !self.argref && !self.pragma_argref.get() && !self.is_referenced(n - 1) {
            return Err(MacroError::Extraneous { arg: self.args[n - 1].clone(), index: n - 1 });
        }
        Ok(())
    }
}

/// `dt_lex.l`'s reading of a `$N` argument: a string unless it is an integer or an
/// identifier (libdtrace's `strbadidnum`); a quoted string loses its quotes.
fn classify(reference: &str, text: &str) -> Result<MacroValue, MacroError> {
    if bad_ident_or_num(text) {
        let len = text.len();
        let inner = if len != 1 && text.starts_with('"') && text.ends_with('"') { &text[1..len - 1] } else { text };
        return Ok(MacroValue::Str(unescape(inner)));
    }
    let first = text.chars().next().unwrap_or(' ');
    if first.is_ascii_digit() || first == '-' || first == '+' {
        let (negative, digits) = match first {
            '-' => (true, &text[1..]),
            '+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (value, suffix) = c_ulong_prefix(digits)
            .ok_or_else(|| MacroError::Overflow { reference: reference.to_string(), text: digits.to_string() })?;
        return Ok(MacroValue::Int { value, negative, suffix: suffix.to_string(), decimal: !digits.starts_with('0') });
    }
    Ok(MacroValue::Ident(text.to_string()))
}

/// True when `s` is neither a whole C integer nor made only of identifier characters
/// (letters, digits, `_`, and the scoping backquote).
fn bad_ident_or_num(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    let t = s.strip_prefix(['-', '+']).unwrap_or(s);
    if t.starts_with(|c: char| c.is_ascii_digit()) {
        if let Some((_, "")) = c_ulong_prefix(t) {
            return false;
        }
    }
    !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '`')
}

/// `strtoull(s, &end, 0)` on unsigned digits: value and the rest. `None` on overflow.
/// Text without a leading digit reads as 0 with nothing consumed.
fn c_ulong_prefix(s: &str) -> Option<(u64, &str)> {
    let (radix, digits) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.starts_with(|c: char| c.is_ascii_hexdigit()) {
            (16, h)
        } else {
            return Some((0, &s[1..]));
        }
    } else if s.starts_with('0') {
        (8, s)
    } else {
        (10, s)
    };
    let end = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    if end == 0 {
        // strtoull consumed nothing: the whole text is the rest.
        return Some((0, s));
    }
    let n = u64::from_str_radix(&digits[..end], radix).ok()?;
    Some((n, &digits[end..]))
}

/// C escape sequences to characters, as libdtrace's `stresc2chr`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = it.next() else {
            out.push('\\');
            break;
        };
        match e {
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match it.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            it.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from((v & 0xff) as u8));
            }
            'x' => {
                let mut v = 0u32;
                while let Some(d) = it.peek().and_then(|c| c.to_digit(16)) {
                    v = (v * 16 + d) & 0xff;
                    it.next();
                }
                out.push(char::from(v as u8));
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> MacroArgs {
        MacroArgs::new(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn integers() {
        let m = args(&["x.d", "42", "-7", "0x10", "010", "5u"]);
        assert_eq!(m.lookup("$1").unwrap(), MacroValue::int(42));
        assert_eq!(m.lookup("$2").unwrap().as_i64(), Some(-7));
        let hex = m.lookup("$3").unwrap();
        assert_eq!(hex.as_i64(), Some(16));
        assert!(matches!(hex, MacroValue::Int { decimal: false, .. }));
        assert_eq!(m.lookup("$4").unwrap().as_i64(), Some(8));
        assert!(matches!(m.lookup("$5").unwrap(), MacroValue::Int { value: 5, ref suffix, .. } if suffix == "u"));
    }

    #[test]
    fn identifiers_and_strings() {
        let m = args(&["x.d", "foo", "hello world", "\"quoted\"", "1.5", "", "a`b", "tab\\t"]);
        assert_eq!(m.lookup("$1").unwrap(), MacroValue::Ident("foo".into()));
        assert_eq!(m.lookup("$2").unwrap(), MacroValue::Str("hello world".into()));
        assert_eq!(m.lookup("$3").unwrap(), MacroValue::Str("quoted".into()));
        assert_eq!(m.lookup("$4").unwrap(), MacroValue::Str("1.5".into()));
        assert_eq!(m.lookup("$5").unwrap(), MacroValue::Str("".into()));
        assert_eq!(m.lookup("$6").unwrap(), MacroValue::Ident("a`b".into()));
        assert_eq!(m.lookup("$7").unwrap(), MacroValue::Str("tab\t".into()));
        assert_eq!(m.lookup("$0").unwrap(), MacroValue::Str("x.d".into()));
    }

    #[test]
    fn double_dollar_is_always_a_string() {
        let m = args(&["x.d", "42", "foo", "a\\nb"]);
        assert_eq!(m.lookup("$$1").unwrap(), MacroValue::Str("42".into()));
        assert_eq!(m.lookup("$$2").unwrap(), MacroValue::Str("foo".into()));
        assert_eq!(m.lookup("$$3").unwrap(), MacroValue::Str("a\nb".into()));
    }

    #[test]
    fn undefined_arguments() {
        let m = args(&["x.d", "1"]);
        assert_eq!(m.lookup("$3").unwrap_err().to_string(), "macro argument $3 is not defined");
        assert_eq!(m.lookup("$$3").unwrap_err().to_string(), "macro argument $$3 is not defined");
        let mut d = args(&["x.d"]);
        d.defaultargs = true;
        // "0" reads like the literal 0, which C counts as octal.
        assert_eq!(d.lookup("$3").unwrap().as_i64(), Some(0));
        assert_eq!(d.lookup("$$3").unwrap(), MacroValue::Str(String::new()));
    }

    #[test]
    fn overflow() {
        let m = args(&["x.d", "99999999999999999999999"]);
        assert_eq!(
            m.lookup("$1").unwrap_err().to_string(),
            "macro argument $1 constant 99999999999999999999999 results in integer overflow"
        );
    }

    #[test]
    fn variables() {
        let mut m = args(&["x.d"]);
        m.pid = 100;
        m.ppid = 1;
        assert_eq!(m.lookup("$pid").unwrap().as_i64(), Some(100));
        assert_eq!(m.lookup("$$ppid").unwrap(), MacroValue::Str("1".into()));
        assert_eq!(m.lookup("$target").unwrap().as_i64(), Some(0));
        m.target = Some(4242);
        assert_eq!(m.lookup("$target").unwrap().as_i64(), Some(4242));
        assert_eq!(m.lookup("$nosuch").unwrap_err().to_string(), "macro variable $nosuch is not defined");
    }

    #[test]
    fn descriptions() {
        let mut m = args(&["x.d", "libc.so.6", "malloc"]);
        m.target = Some(77);
        assert_eq!(m.expand_description("pid$target:$1:$$2:entry").unwrap(), "pid77:libc.so.6:malloc:entry");
        assert_eq!(m.expand_description("pid$1x:::").unwrap(), "pidlibc.so.6x:::");
        assert_eq!(
            m.expand_description("pid$9:::").unwrap_err().to_string(),
            "Undefined macro variable in probe description"
        );
        assert!(m.expand_description("pid$bogus:::").is_err());
    }

    #[test]
    fn unused_last_argument() {
        let m = args(&["x.d", "1", "2"]);
        m.lookup("$1").unwrap();
        assert_eq!(m.check_unused().unwrap_err().to_string(), "extraneous argument '2' ($2 is not referenced)");
        m.lookup("$2").unwrap();
        assert!(m.check_unused().is_ok());
        let mut r = args(&["x.d", "1"]);
        r.argref = true;
        assert!(r.check_unused().is_ok());
        assert!(args(&["x.d"]).check_unused().is_ok());
    }
}
