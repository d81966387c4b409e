//! The checker: resolves every name in the syntax tree, gives every expression its D
//! type, rejects what DTrace rejects (with DTrace's words), and lowers clauses to the
//! IR that the runtime interprets.
//!
//! Sources are checked one after another into one program, as dtrace compiles its
//! `-n`/`-s` arguments into one consumer: a variable declared or first assigned in one
//! source is known to the later ones.

mod alloca;
mod subr;

use std::collections::HashMap;
use std::rc::Rc;

use crate::ast::{self, BinaryOp, UnaryOp, VarScope};
use crate::consts;
use crate::error::{CompileError, Region, Result, Tag};
use crate::ir::{
    Action, AggInfo, AggKind, Builtin, CheckedProgram, Clause, Expr, ExprKind, Place, PragmaOption, Taint, VarInfo,
    VarRef,
};
use crate::proc_types::{self, ArgType};
use crate::span::Span;
use crate::subrs;
use crate::types::{usual_arithmetic, IntType, RecordId, Type};

mod actions;
mod decl;
mod exprs;
mod memory;
mod provider;
mod xlate;

pub use xlate::Translator;

/// The value of a macro reference (`$1`, `$$1`, `$target`, …) as the command line
/// gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MacroValue {
    Int(i64),
    Str(String),
    /// `$1` whose text is an identifier: DTrace reads it as that identifier.
    Ident(String),
}

/// Where macro references come from; the command line implements it.
pub trait MacroEnv {
    /// `reference` keeps its `$` signs: `"$1"`, `"$$1"`, `"$target"`. `Err` carries
    /// DTrace's tag and message.
    fn lookup(&self, reference: &str) -> std::result::Result<MacroValue, (Tag, String)>;
    /// Substitutes a macro reference inside one probe description field (`pid$target`).
    fn expand_field(&self, field: &str) -> std::result::Result<String, String>;
    /// A `#pragma D option name[=value]` was read (`defaultargs` changes lookups).
    fn pragma_option(&self, _name: &str) {}
}

impl MacroEnv for crate::macros::MacroArgs {
    fn lookup(&self, reference: &str) -> std::result::Result<MacroValue, (Tag, String)> {
        use crate::macros::MacroValue as M;
        match crate::macros::MacroArgs::lookup(self, reference).map_err(|e| (e.tag(), e.to_string()))? {
            v @ M::Int { .. } => Ok(MacroValue::Int(v.as_i64().unwrap_or(0))),
            M::Str(s) => Ok(MacroValue::Str(s)),
            M::Ident(s) => Ok(MacroValue::Ident(s)),
        }
    }
    fn expand_field(&self, field: &str) -> std::result::Result<String, String> {
        self.expand_description_field(field).map_err(|e| e.to_string())
    }
    fn pragma_option(&self, name: &str) {
        crate::macros::MacroArgs::pragma_option(self, name);
    }
}

pub struct Checker<'m> {
    prog: CheckedProgram,
    macros: &'m dyn MacroEnv,
    globals: HashMap<String, usize>,
    thread: HashMap<String, usize>,
    clause: HashMap<String, usize>,
    aggs: HashMap<String, usize>,
    inlines: HashMap<String, (Type, ast::Expr)>,
    /// Inlines with a key signature (`inline int sum[int a, int b] = a + b;`): the
    /// value type, the named parameters and the value.
    inline_arrays: HashMap<String, InlineArray>,
    /// Inline expansion depth, so a self-referencing inline is an error, not a hang.
    inline_depth: u32,
    /// Source bytes that inline expansions may still re-check; see [`INLINE_BUDGET`].
    inline_budget: usize,
    source: usize,
    /// Byte offsets where each line of the current source starts.
    line_starts: Vec<u32>,
    /// The typedefs the program itself declared. Built-in ones (`int8_t`, `chipid_t`…)
    /// may be declared again: DTrace keeps them in other type containers.
    own_typedefs: std::collections::HashSet<String>,
    /// `#pragma D attributes|binding` directives waiting for their identifier.
    pending_pragmas: Vec<(String, String, Span)>,
    /// The source being checked, to find the token that follows an expression.
    text: Rc<str>,
    /// The argument types of the probes a description matches, where they are typed.
    probe_args: Option<&'m ProbeArgs>,
    /// The D version compiled for (`version` option or pragma).
    version: (u32, u32, u32),
    /// Checking a D library: it may depend on other libraries.
    in_library: bool,
    /// The current clause's `args[]` types: `None` past the list or where its probes
    /// disagree; no list at all where its probes are untyped (`int64_t` args).
    clause_args: Option<Vec<Option<ArgType>>>,
    /// The current clause's first probe description, as DTrace names it in messages.
    clause_desc: String,
    /// Which variables hold alloca pointers; the scratch space size.
    alloca: alloca::AllocaState,
    /// Anonymous structs and unions of the current source, by the tag the parser
    /// made up for each.
    anon_records: HashMap<String, RecordId>,
    anon_enums: HashMap<String, crate::types::EnumId>,
    /// Names declared `extern` (or as function prototypes), with their types.
    externs: HashMap<String, Type>,
    translators: Vec<Translator>,
    /// Translator input parameters in scope while a translator member is checked:
    /// each name stands for the input expression.
    xlate_params: Vec<(String, Expr)>,
    /// The running kernel's types, imported as the program names them.
    kernel: crate::ktypes::KernelTypes,
}

/// Gives the argument types of the probes a description matches: `None` where they
/// are untyped (the pid provider, BEGIN), else one list per matched probe.
pub type ProbeArgs = dyn Fn(&ast::ProbeDesc) -> Vec<Vec<ArgType>>;

/// Each reference to an inline re-checks its value, so inlines defined in terms
/// of earlier ones (`b = a + a; c = b + b; …`) expand exponentially: 25 such lines
/// took minutes. Expansions may re-check this many bytes of source per checker,
/// far beyond what a real program needs.
const INLINE_BUDGET: usize = 1 << 20;

fn err<T>(tag: Tag, span: Span, msg: impl Into<String>) -> Result<T> {
    Err(CompileError::new(tag, span, msg))
}

fn int_ty() -> Type {
    Type::int(4, true)
}

fn mk(kind: ExprKind, ty: Type, span: Span) -> Expr {
    Expr { kind, ty, span, taint: Taint::default() }
}

/// An expression computed from `from`, whose alloca taint it inherits.
fn derived(kind: ExprKind, ty: Type, span: Span, from: Taint) -> Expr {
    Expr { kind, ty, span, taint: from }
}

/// An integer constant of type `ty`.
fn int_const(v: u64, ty: Type, span: Span) -> Expr {
    mk(ExprKind::Int(v), ty, span)
}

/// The type of a built-in variable, by name (`pid` is a `pid_t`).
pub fn builtin_var_type(name: &str) -> Option<Type> {
    builtin_var(name).map(|(_, ty)| ty)
}

fn builtin_var(name: &str) -> Option<(Builtin, Type)> {
    let u64t = Type::named_int(8, false, "uint64_t");
    let s = Type::String;
    Some(match name {
        "arg0" | "arg1" | "arg2" | "arg3" | "arg4" | "arg5" | "arg6" | "arg7" | "arg8" | "arg9" => {
            (Builtin::Arg(name.as_bytes()[3] - b'0'), Type::named_int(8, true, "int64_t"))
        }
        "caller" => (Builtin::Caller, Type::named_int(8, false, "uintptr_t")),
        "ucaller" => (Builtin::Ucaller, Type::named_int(8, false, "uint64_t")),
        "cpu" => (Builtin::Cpu, Type::named_int(4, true, "processorid_t")),
        "epid" => (Builtin::Epid, Type::named_int(4, false, "uint_t")),
        "id" => (Builtin::Id, Type::named_int(4, false, "uint_t")),
        "errno" => (Builtin::Errno, int_ty()),
        "execname" => (Builtin::Execname, s),
        "pid" => (Builtin::Pid, Type::named_int(4, true, "pid_t")),
        "ppid" => (Builtin::Ppid, Type::named_int(4, true, "pid_t")),
        "tid" => (Builtin::Tid, Type::named_int(4, true, "id_t")),
        "uid" => (Builtin::Uid, Type::named_int(4, false, "uid_t")),
        "gid" => (Builtin::Gid, Type::named_int(4, false, "gid_t")),
        "timestamp" => (Builtin::Timestamp, u64t),
        "vtimestamp" => (Builtin::Vtimestamp, u64t),
        "walltimestamp" => (Builtin::Walltimestamp, Type::named_int(8, true, "int64_t")),
        "probeprov" => (Builtin::Probeprov, s),
        "probemod" => (Builtin::Probemod, s),
        "probefunc" => (Builtin::Probefunc, s),
        "probename" => (Builtin::Probename, s),
        "stackdepth" => (Builtin::Stackdepth, Type::named_int(4, false, "uint32_t")),
        "ustackdepth" => (Builtin::Ustackdepth, Type::named_int(4, false, "uint32_t")),
        "curthread" => (Builtin::Curthread, Type::Pointer(Box::new(Type::Void))),
        // Typed by the checker: their struct types live in the program's type table.
        "curpsinfo" => (Builtin::Curpsinfo, Type::Pointer(Box::new(Type::Void))),
        "curlwpsinfo" => (Builtin::Curlwpsinfo, Type::Pointer(Box::new(Type::Void))),
        "curcpu" => (Builtin::Curcpu, Type::Pointer(Box::new(Type::Void))),
        "ipl" => (Builtin::Ipl, Type::named_int(4, false, "uint_t")),
        "cwd" => (Builtin::Cwd, s),
        "root" => (Builtin::Root, s),
        _ => return None,
    })
}

/// The `args[]` types of a clause from those of every probe it enables: `None` when
/// none are typed; a position where typed probes disagree (or some lack it) is `None`.
fn clause_arg_types(lists: impl Iterator<Item = Vec<ArgType>>) -> Option<Vec<Option<ArgType>>> {
    let lists: Vec<Vec<ArgType>> = lists.collect();
    let longest = lists.iter().map(Vec::len).max()?;
    let first = &lists[0];
    Some((0..longest).map(|i| first.get(i).copied().filter(|t| lists.iter().all(|l| l.get(i) == Some(t)))).collect())
}

/// Names that are actions: statements only, never values.
/// `#pragma D depends_on class name` in a program: udtrace's providers are there;
/// kernel modules are not; only D libraries may depend on libraries.
fn depends_on(words: &[String], span: Span, in_library: bool) -> Result<()> {
    let (class, name) = match words {
        [class, name, ..] => (class.as_str(), name.as_str()),
        _ => return err(Tag::D_PRAGMA_MALFORM, span, "malformed #pragma depends_on <class> <name>"),
    };
    let found = match class {
        "provider" => {
            matches!(name, "dtrace" | "profile" | "proc")
                || name.strip_prefix("pid").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        }
        "module" => false,
        // Libraries are loaded in dependency order before any program.
        "library" if in_library => true,
        "library" => {
            return err(Tag::D_PRAGMA_DEPEND, span, "main program may not explicitly depend on a library");
        }
        _ => {
            return err(Tag::D_PRAGMA_INVAL, span, format!("invalid class {class} specified by #pragma depends_on"));
        }
    };
    if !found {
        return err(Tag::D_PRAGMA_DEPEND, span, format!("program requires {class} {name}"));
    }
    Ok(())
}

/// The D version that introduced a built-in identifier (DTrace's bindings); the
/// rest have been there since 1.0.
fn ident_version(name: &str) -> (u32, u32, u32) {
    match name {
        "freopen" | "index" | "rindex" | "strchr" | "strrchr" | "strstr" | "strtok" | "substr" => (1, 1, 0),
        "func" | "mod" | "setopt" | "sym" | "uaddr" | "ucaller" | "ufunc" | "umod" | "ustackdepth" | "usym" => {
            (1, 2, 0)
        }
        "htonl" | "htonll" | "htons" | "ntohl" | "ntohll" | "ntohs" => (1, 3, 0),
        "inet_ntoa" | "inet_ntoa6" | "inet_ntop" | "link_ntop" => (1, 5, 0),
        "stddev" => (1, 6, 0),
        "llquantize" | "pcap" => (1, 6, 4),
        "print" => (2, 0, 0),
        _ => (1, 0, 0),
    }
}

/// The functions that, as statements, trace an address as a symbol (DTrace's
/// `_symaddr`/`_usymaddr` actions); in expressions they are values to print or key by.
const SYMBOL_ACTIONS: &[&str] = &["usym", "ufunc", "umod", "uaddr", "sym", "func", "mod"];

const ACTIONS: &[&str] = &[
    "trace",
    "tracemem",
    "printf",
    "printa",
    "exit",
    "clear",
    "trunc",
    "normalize",
    "denormalize",
    "setopt",
    "speculate",
    "commit",
    "discard",
    "system",
    "raise",
    "stop",
    "printm",
    "freopen",
    "ftruncate",
    "breakpoint",
    "panic",
    "chill",
    "print",
    "jstack",
    "pcap",
];

impl<'m> Checker<'m> {
    pub fn new(macros: &'m dyn MacroEnv) -> Checker<'m> {
        Checker {
            own_typedefs: std::collections::HashSet::new(),
            prog: CheckedProgram::default(),
            macros,
            globals: HashMap::new(),
            thread: HashMap::new(),
            clause: HashMap::new(),
            aggs: HashMap::new(),
            inlines: HashMap::new(),
            inline_arrays: HashMap::new(),
            inline_depth: 0,
            inline_budget: INLINE_BUDGET,
            source: 0,
            line_starts: vec![0],
            text: Rc::from(""),
            pending_pragmas: Vec::new(),
            probe_args: None,
            clause_args: None,
            clause_desc: String::new(),
            version: crate::options::D_VERSION,
            alloca: alloca::AllocaState::default(),
            in_library: false,
            anon_records: HashMap::new(),
            anon_enums: HashMap::new(),
            externs: HashMap::new(),
            translators: Vec::new(),
            kernel: crate::ktypes::KernelTypes::default(),
            xlate_params: Vec::new(),
        }
        .with_proc_types()
    }

    /// The D version to compile for (`-x version`): built-in identifiers bound to a
    /// later version are not defined.
    pub fn set_version(&mut self, version: (u32, u32, u32)) {
        self.version = version;
    }

    /// Checks a D library into the program: its declarations stay for the programs
    /// that follow; its clauses are checked, then dropped, as dtrace drops them.
    pub fn add_library(&mut self, program: &ast::Program, source: usize, text: &str) -> Result<()> {
        let clauses = self.prog.clauses.len();
        self.in_library = true;
        let r = self.add_source(program, source, text);
        self.in_library = false;
        self.prog.clauses.truncate(clauses);
        r
    }

    /// Whether `name` is a built-in variable or function of the D version compiled for.
    fn is_builtin_ident(&self, name: &str) -> bool {
        let builtin = builtin_var(name).is_some()
            || subrs::find(name).is_some()
            || ACTIONS.contains(&name)
            || AggKind::from_name(name).is_some();
        builtin && ident_version(name) <= self.version
    }

    fn with_proc_types(mut self) -> Checker<'m> {
        proc_types::install(&mut self.prog.types);
        crate::storage::install_cpuinfo(&mut self.prog.types);
        crate::net_types::install(&mut self.prog.types);
        self.install_builtin_translators();
        self
    }

    /// Types `args[]` in clauses whose probes have typed arguments.
    /// Gives the checker the kernel's types: `loader` returns the kernel's BTF, and
    /// is called the first time a program names a type D does not know.
    pub fn set_kernel_types(&mut self, loader: Box<dyn Fn() -> Option<Vec<u8>>>) {
        self.kernel = crate::ktypes::KernelTypes::new(loader);
    }

    /// `curthread`: a `struct task_struct *` where the kernel's types are known.
    fn curthread_type(&mut self) -> Option<Type> {
        let t = self.kernel.record(false, "task_struct", &mut self.prog.types)?;
        Some(Type::Pointer(Box::new(t)))
    }

    pub fn set_probe_args(&mut self, f: &'m ProbeArgs) {
        self.probe_args = Some(f);
    }

    /// Checks one source (one `-n`/`-s` argument) into the program. `source` is its
    /// index, kept on each clause so that messages can name it. Declarations are
    /// checked first and clauses after them, as DTrace acts on declarations while it
    /// parses and cooks clauses once the whole source is parsed.
    pub fn add_source(&mut self, program: &ast::Program, source: usize, text: &str) -> Result<()> {
        self.begin_source(source, text);
        for item in &program.items {
            self.declare_item(item)?;
        }
        self.add_clauses(program)
    }

    /// Starts checking a source whose declarations then come one by one through
    /// [`Checker::declare_item`] (as the parser reads them), and whose clauses come through
    /// [`Checker::add_clauses`].
    pub fn begin_source(&mut self, source: usize, text: &str) {
        self.source = source;
        self.line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i as u32 + 1)).collect();
        self.text = Rc::from(text);
        self.anon_records.clear();
        self.anon_enums.clear();
    }

    /// Checks the clauses of a source whose declarations were declared already.
    pub fn add_clauses(&mut self, program: &ast::Program) -> Result<()> {
        self.unused_pragmas()?;
        for item in &program.items {
            if let ast::Item::Clause(c) = item {
                let clause = self.clause(c)?;
                self.prog.clauses.push(clause);
            }
        }
        Ok(())
    }

    /// Moves an error raised for the operator node `span` itself to the token that
    /// follows it: DTrace allocates an operator's node when the parser reduces it,
    /// after reading that token, and reports the node's errors at its line.
    fn at_reduction(&self, mut e: CompileError, span: Span) -> CompileError {
        if e.span == span && e.line_at.is_none() {
            e.line_at = Some(next_token_start(&self.text, span.end as usize) as u32);
        }
        e
    }

    /// dt_cook_op2's D_OP_INCOMPAT: `operands have incompatible types: "l" op "r"`.
    /// Out of line: it is reached from the recursive checking of every operator.
    #[cold]
    #[inline(never)]
    fn incompatible<T>(&self, l: &Type, op: &str, r: &Type, span: Span) -> Result<T> {
        let msg = format!("operands have incompatible types: \"{}\" {op} \"{}\"", self.type_name(l), self.type_name(r));
        err(Tag::D_OP_INCOMPAT, span, msg)
    }

    /// A key of an associative array or aggregation: dt_idcook_assc refuses a void
    /// key (an action's value) and a dynamic one.
    fn assoc_key(&mut self, k: &ast::Expr, i: usize, what: &str) -> Result<Expr> {
        let v = self.rvalue(k)?;
        check_key(k, &v, i, what)?;
        Ok(v)
    }

    /// dt_idpragma: an `attributes` or `binding` directive whose identifier the
    /// program's declarations never defined is an error, once they are all read.
    fn unused_pragmas(&mut self) -> Result<()> {
        for (kind, name, span) in std::mem::take(&mut self.pending_pragmas) {
            if !self.is_global_ident(&name) {
                return Err(
                    CompileError::new(Tag::D_PRAGMA_UNUSED, span, format!("unused #pragma {kind}")).unlabelled()
                );
            }
        }
        Ok(())
    }

    /// Whether `name` is one of DTrace's global identifiers: a variable, inline,
    /// built-in variable, enumerator, constant or function.
    fn is_global_ident(&self, name: &str) -> bool {
        self.global_identifier_kind(name).is_some() || matches!(name, "NULL" | "args" | "uregs")
    }

    fn line_of(&self, span: Span) -> u32 {
        self.line_starts.partition_point(|&s| s <= span.start) as u32
    }

    pub fn finish(self) -> CheckedProgram {
        self.prog
    }

    /// The program checked so far (the clause count tells how many a source added).
    pub fn program(&self) -> &CheckedProgram {
        &self.prog
    }

    // ---- declarations ----------------------------------------------------------

    fn pragma(&mut self, p: &ast::Pragma) -> Result<()> {
        let Some(first) = p.words.first() else {
            return err(Tag::D_PRAGCTL_INVAL, p.span, "invalid control directive: #pragma D");
        };
        match first.as_str() {
            "option" => {
                if p.words.len() < 2 {
                    return err(Tag::D_PRAGMA_MALFORM, p.span, "malformed #pragma option <option>=<val>");
                }
                if p.words.len() > 2 {
                    return err(Tag::D_PRAGMA_MALFORM, p.span, "superfluous arguments specified for #pragma option");
                }
                for w in &p.words[1..] {
                    let (name, value) = match w.split_once('=') {
                        Some((n, v)) => (n.to_string(), Some(v.to_string())),
                        None => (w.clone(), None),
                    };
                    self.macros.pragma_option(&name);
                    // The version applies to what follows it, as the pragma is read.
                    if let Some(v) = value.as_deref().filter(|_| name == "version") {
                        if let Some(v) = crate::options::parse_version(v) {
                            self.version = self.version.min(v);
                        }
                    }
                    self.note_pragma_option(&name, value.as_deref());
                    self.prog.options.push(PragmaOption { name, value, source: self.source, span: p.span });
                }
                Ok(())
            }
            "depends_on" => depends_on(&p.words[1..], p.span, self.in_library),
            // Stability and binding directives have no effect here (the lexer checked
            // their form).
            "attributes" | "binding" => {
                // dt_pragma.c defers a directive naming no identifier yet; the name
                // must be defined by the end of the program's declarations.
                if let Some(name) = p.words.get(2).filter(|n| *n != "provider" && !self.in_library) {
                    self.pending_pragmas.push((first.to_string(), name.clone(), p.span));
                }
                Ok(())
            }
            "error" | "line" | "ident" => Ok(()),
            other => err(Tag::D_PRAGMA_INVAL, p.span, format!("invalid D pragma: {other}")),
        }
    }

    /// Evaluates a constant integer expression (aggregation parameters, sizes).
    fn const_int(&mut self, e: &ast::Expr) -> Result<i64> {
        let x = self.expr(e)?;
        match fold(&x) {
            Some(v) => Ok(v as i64),
            None => err(Tag::D_DECL_ENCONST, e.span, "expression must be an integer constant"),
        }
    }

    fn type_name(&self, t: &Type) -> String {
        self.prog.types.name(t)
    }

    // ---- clauses ---------------------------------------------------------------

    fn clause(&mut self, c: &ast::Clause) -> Result<Clause> {
        let probes = c.probes.iter().map(|p| self.probe_desc(p)).collect::<Result<Vec<_>>>()?;
        self.resolve_macros(c)?;
        self.alloca.clause_span = c.probes.first().map_or(c.span, |p| p.span);
        self.clause_args = self.probe_args.and_then(|f| clause_arg_types(probes.iter().flat_map(f)));
        if self.clause_args.is_none() && probes.iter().all(exprs::is_begin_or_end) {
            // BEGIN and END have no arguments at all.
            self.clause_args = Some(Vec::new());
        }
        self.clause_desc = probes.first().map_or(String::new(), exprs::desc_string);
        // dt_cook_clause: the actions first, since they usually create the variables
        // a predicate tests; if they use one the predicate creates (`/x++/`), the
        // predicate first.
        let (predicate, (actions, records_data, destructive)) = match &c.predicate {
            None => (None, self.clause_actions(c)?),
            Some(p) => match self.clause_actions(c) {
                Ok(a) => (Some(self.clause_predicate(p, c.span)?), a),
                Err(e) if matches!(e.tag, Tag::D_IDENT_UNDEF | Tag::D_VAR_UNDEF) => {
                    let pred = self.clause_predicate(p, c.span)?;
                    (Some(pred), self.clause_actions(c)?)
                }
                Err(e) => return Err(e),
            },
        };
        Ok(Clause { source: self.source, probes, predicate, actions, records_data, destructive, span: c.span })
    }

    /// The predicate. dt_cook_clause raises D_PRED_SCALAR itself, at the line of the
    /// clause node, which the parser makes at the clause's end.
    fn clause_predicate(&mut self, p: &ast::Expr, clause: Span) -> Result<Expr> {
        let (start, end) = (clause.start as usize, clause.end as usize);
        let at_end = Span::new(end.saturating_sub(1).max(start), end);
        let not_scalar = || {
            err(Tag::D_PRED_SCALAR, at_end, "predicate result must be of scalar type")
                .map_err(|e: CompileError| e.in_region(Region::Predicate))
        };
        if is_agg_target(p) {
            return not_scalar();
        }
        let e = self.rvalue(p).map_err(|e| e.in_region(Region::Predicate))?;
        if !e.ty.is_scalar() {
            return not_scalar();
        }
        Ok(e)
    }

    /// The clause's actions, whether it records data, and whether it is destructive.
    fn clause_actions(&mut self, c: &ast::Clause) -> Result<(Vec<Action>, bool, bool)> {
        Ok(match &c.body {
            None => (Vec::new(), true, false),
            Some(stmts) => {
                let actions = self.stmts(stmts).map_err(|e| e.in_region(Region::ActionList))?;
                let destructive = crate::clsflags::check(stmts, &|name| {
                    ACTIONS.contains(&name) || SYMBOL_ACTIONS.contains(&name) || name == "stack" || name == "ustack"
                })?;
                let records = stmts.is_empty() || actions.iter().any(records_data);
                (actions, records, destructive)
            }
        })
    }

    /// Substitutes macro variables inside a probe description's fields.
    fn probe_desc(&mut self, p: &ast::ProbeDesc) -> Result<ast::ProbeDesc> {
        let mut out = p.clone();
        for field in [&mut out.provider, &mut out.module, &mut out.function, &mut out.name] {
            if field.contains('$') {
                *field = self.macros.expand_field(field).map_err(|m| {
                    CompileError::new(
                        Tag::D_PDESC_INVAL,
                        p.span,
                        format!("invalid probe description \"{}\": {m}", p.text),
                    )
                })?;
            }
        }
        Ok(out)
    }

    fn stmts(&mut self, stmts: &[ast::Stmt]) -> Result<Vec<Action>> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s {
                ast::Stmt::Empty(_) => {}
                ast::Stmt::Expr(e) => out.push(self.statement(e)?),
                ast::Stmt::If { cond, then, otherwise, .. } => {
                    let c = self.rvalue(cond)?;
                    if !c.ty.is_scalar() && !c.ty.is_string() {
                        return err(Tag::D_OP_SCALAR, cond.span, "if-statement condition must be of scalar type");
                    }
                    let then = self.stmts(then)?;
                    let otherwise = match otherwise {
                        Some(o) => self.stmts(o)?,
                        None => Vec::new(),
                    };
                    out.push(Action::If { cond: c, then, otherwise });
                }
            }
        }
        Ok(out)
    }

    /// One expression statement: an action call, an aggregation, or an expression.
    fn statement(&mut self, e: &ast::Expr) -> Result<Action> {
        if let ast::ExprKind::Ternary { cond, then, otherwise } = &e.kind {
            if let Some(chosen) = self.folded_conditional(cond, then, otherwise)? {
                return self.statement(chosen);
            }
        }
        match &e.kind {
            ast::ExprKind::Call { name, name_span, args } if ACTIONS.contains(&name.as_str()) => {
                self.action(name, *name_span, args, e.span)
            }
            ast::ExprKind::Call { name, name_span, args } if name == "stack" || name == "ustack" => {
                let frames = self.stack_args(name, *name_span, args)?;
                Ok(Action::Stack { user: name == "ustack", frames })
            }
            ast::ExprKind::Call { name, .. } if SYMBOL_ACTIONS.contains(&name.as_str()) => {
                Ok(Action::Symbol(self.expr(e)?))
            }
            ast::ExprKind::Assign { lhs, .. } if actions::multi_dim_agg(lhs).is_some() => {
                let name = actions::multi_dim_agg(lhs).unwrap_or_default();
                err(
                    Tag::D_AGG_MDIM,
                    lhs.span,
                    format!("improper attempt to reference @{name} as a multi-dimensional array"),
                )
            }
            ast::ExprKind::Assign { op, lhs, rhs } if is_agg_target(lhs) => {
                if op.is_some() {
                    return err(
                        Tag::D_AGG_FUNC,
                        e.span,
                        "aggregations may only be assigned the result of an aggregating function",
                    );
                }
                self.agg_update(lhs, rhs)
            }
            _ if is_agg_target(e) => {
                let name = match &e.kind {
                    ast::ExprKind::Index { base, .. } => &**base,
                    _ => e,
                };
                let ast::ExprKind::Agg(n) = &name.kind else { unreachable!("is_agg_target checked the shape") };
                if !self.aggs.contains_key(n) && matches!(e.kind, ast::ExprKind::Agg(_)) {
                    return err(Tag::D_IDENT_UNDEF, e.span, format!("failed to resolve @{n}: Unknown variable name"));
                }
                err(Tag::D_AGG_NULL, e.span, format!("expression has null effect: @{n}"))
            }
            _ => Ok(Action::Eval(self.expr(e)?)),
        }
    }

    // ---- expressions -----------------------------------------------------------

    /// An expression whose value is used (arrays of char become strings when needed
    /// later; aggregations and void are rejected by the caller's context).
    fn rvalue(&mut self, e: &ast::Expr) -> Result<Expr> {
        let x = self.expr(e)?;
        if x.ty.is_void() && !matches!(x.kind, ExprKind::Call(..)) && !is_action_call(e) {
            return err(Tag::D_OP_INCOMPAT, e.span, "void expression may not be used as a value");
        }
        Ok(x)
    }

    /// A `char[N]` value (a struct member, say) used where a string is expected.
    fn string_if_char_array(&self, e: Expr) -> Expr {
        match &e.ty {
            Type::Array(inner, _) if matches!(**inner, Type::Int(ref i) if i.size == 1) => {
                let span = e.span;
                mk(ExprKind::Cast(Box::new(e)), Type::String, span)
            }
            _ => e,
        }
    }

    /// Checks one expression. Each kind's work lives in its own method so that
    /// this frame, which every level of a nested expression repeats, stays small
    /// (a debug build kept all the arms' locals here: 12 KiB per level).
    pub fn expr(&mut self, e: &ast::Expr) -> Result<Expr> {
        use ast::ExprKind as K;
        // Operators report their errors at the token after them (dt_grammar.y's
        // reduction); one wrapper here keeps each arm's frame small.
        let reduced = matches!(
            e.kind,
            K::Unary { .. } | K::Binary { .. } | K::Assign { .. } | K::Ternary { .. } | K::Cast { .. }
        );
        let r = self.expr_kind(e);
        if reduced {
            r.map_err(|err| self.at_reduction(err, e.span))
        } else {
            r
        }
    }

    fn expr_kind(&mut self, e: &ast::Expr) -> Result<Expr> {
        use ast::ExprKind as K;
        let span = e.span;
        match &e.kind {
            K::Int { value, suffix, decimal } => {
                let ty = int_literal_type(*value, *suffix, *decimal, span)?;
                Ok(int_const(*value, ty, span))
            }
            // A character constant is an int, or a long when its bytes do not fit one.
            K::Char(c) => {
                let ty = int_literal_type(*c as u64, ast::IntSuffix::None, true, span)?;
                Ok(int_const(*c as u64, ty, span))
            }
            K::Str(s) => Ok(mk(ExprKind::Str(Rc::from(s.as_bytes())), Type::String, span)),
            K::Ident(name) => self.ident(name, span),
            K::Backquoted { module, name } => backquoted(module.as_deref(), name, span),
            K::Macro(name) => self.macro_ref(name, false, span),
            K::MacroStr(name) => self.macro_ref(name, true, span),
            K::SelfVar(name) => self.scoped_var(VarScope::Thread, name, span),
            K::ThisVar(name) => self.scoped_var(VarScope::Clause, name, span),
            K::Agg(name) => aggregation_operand(name, span),
            K::Unary { op, operand } => self.unary(*op, operand, span),
            K::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, span),
            K::Assign { op, lhs, rhs } => {
                if is_agg_target(lhs) {
                    return err(Tag::D_AGG_FUNC, span, "aggregating function may only be used as a statement");
                }
                self.assign(*op, lhs, rhs, span)
            }
            K::Ternary { cond, then, otherwise } => self.ternary(cond, then, otherwise, span),
            K::IncDec { increment, prefix, operand } => self.incdec(*increment, *prefix, operand, span),
            K::Call { name, name_span, args } => self.call(name, *name_span, args, span),
            K::Index { base, index } => self.index(base, index, span),
            K::Member { base, field } => self.dot(base, field, span),
            K::Arrow { base, field } => self.arrow(base, field, span),
            K::Xlate { ty, operand } => self.bare_xlate(ty, operand, span),
            K::Cast { ty, operand } => self.cast_expr(ty, operand, span),
            K::SizeofType(t) => self.sizeof_type(t, span),
            K::SizeofExpr(x) => self.sizeof_expr(x, span),
            K::Offsetof { ty, member } => self.offsetof(ty, member, span),
            K::Stringof(x) => self.stringof(x, span),
            K::Comma { lhs, rhs } => self.comma(lhs, rhs, span),
        }
    }

    fn comma(&mut self, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Result<Expr> {
        let l = self.expr(lhs)?;
        let r = self.expr(rhs)?;
        if is_action_call(lhs) || is_action_call(rhs) {
            return err(Tag::D_OP_ACT, span, "operator , operands cannot be actions");
        }
        let (ty, taint) = (r.ty.clone(), r.taint);
        Ok(derived(ExprKind::Comma(Box::new(l), Box::new(r)), ty, span, taint))
    }

    /// DTrace substitutes `$1`, `$target`… as it reads the text, so an undefined
    /// reference is reported before any other error of its clause.
    fn resolve_macros(&self, c: &ast::Clause) -> Result<()> {
        let mut refs = Vec::new();
        if let Some(p) = &c.predicate {
            macro_refs(p, &mut refs);
        }
        stmt_macro_refs(c.body.as_deref().unwrap_or_default(), &mut refs);
        for (reference, span) in refs {
            if let Err((tag, m)) = self.macros.lookup(&reference) {
                return Err(CompileError::new(tag, span, m).unlabelled());
            }
        }
        Ok(())
    }

    fn macro_ref(&mut self, name: &str, quoted: bool, span: Span) -> Result<Expr> {
        let reference = format!("{}{name}", if quoted { "$$" } else { "$" });
        match self.macros.lookup(&reference) {
            Ok(MacroValue::Int(v)) if quoted => {
                Ok(mk(ExprKind::Str(Rc::from(v.to_string().as_bytes())), Type::String, span))
            }
            Ok(MacroValue::Int(v)) => {
                let ty = if i32::try_from(v).is_ok() { int_ty() } else { Type::int(8, true) };
                Ok(int_const(v as u64, ty, span))
            }
            Ok(MacroValue::Str(s)) => Ok(mk(ExprKind::Str(Rc::from(s.as_bytes())), Type::String, span)),
            Ok(MacroValue::Ident(s)) => self.ident(&s, span),
            // dt_lex.l resolves macro references while parsing.
            Err((tag, m)) => Err(CompileError::new(tag, span, m).unlabelled()),
        }
    }

    fn ternary(&mut self, cond: &ast::Expr, then: &ast::Expr, otherwise: &ast::Expr, span: Span) -> Result<Expr> {
        if let Some(chosen) = self.folded_conditional(cond, then, otherwise)? {
            let mut v = self.expr(chosen)?;
            v.span = span;
            return Ok(v);
        }
        let c = self.rvalue(cond)?;
        if !c.ty.is_scalar() {
            return err(Tag::D_OP_SCALAR, cond.span, "operator ?: expression must be of scalar type");
        }
        let t = self.rvalue(then)?;
        let o = self.rvalue(otherwise)?;
        if is_action_call(then) || is_action_call(otherwise) {
            return err(Tag::D_OP_ACT, span, "action cannot be used in a conditional context");
        }
        let ty = self.conditional_type(&t, &o, span)?;
        let t = self.convert(t, &ty);
        let o = self.convert(o, &ty);
        // libdtrace: the result is an alloca pointer when the first branch is, and
        // may not be stored when only one branch is.
        let taint =
            Taint { alloca: t.taint.alloca, mixed: t.taint.alloca != o.taint.alloca || t.taint.mixed || o.taint.mixed };
        Ok(derived(ExprKind::Ternary { cond: Box::new(c), then: Box::new(t), otherwise: Box::new(o) }, ty, span, taint))
    }

    fn incdec(&mut self, increment: bool, prefix: bool, operand: &ast::Expr, span: Span) -> Result<Expr> {
        let op = if increment { "++" } else { "--" };
        let (place, ty) = self.place(operand, Some(&Type::named_int(8, true, "int64_t")), op)?;
        if !ty.is_scalar() {
            return err(Tag::D_OP_SCALAR, span, format!("operator {op} requires operand of scalar type"));
        }
        let taint = match &place {
            Place::Var(r) | Place::Array { var: r, .. } => self.var_taint(*r),
            Place::Field { .. } | Place::Mem { .. } => Taint::default(),
        };
        Ok(derived(ExprKind::IncDec { target: place, increment, prefix }, ty, span, taint))
    }

    /// A pointer to a named type of the program (the proc provider's structs).
    fn pointer_to(&self, typedef: &str) -> Type {
        Type::Pointer(Box::new(self.prog.types.typedefs.get(typedef).cloned().unwrap_or(Type::Void)))
    }

    /// The type of `args[i]`: the probes' own where they are typed and `i` is a
    /// constant, else `int64_t`.
    fn arg_type(&self, i: &Expr, span: Span) -> Result<Type> {
        let untyped = Type::named_int(8, true, "int64_t");
        let Some(list) = &self.clause_args else { return Ok(untyped) };
        let ExprKind::Int(n) = i.kind else { return Ok(untyped) };
        match list.get(n as usize) {
            Some(Some(ArgType::Int(name))) => {
                Ok(self.prog.types.typedefs.get(*name).cloned().unwrap_or_else(|| match *name {
                    "int" => Type::int(4, true),
                    "char" => Type::int(1, true),
                    _ => untyped.clone(),
                }))
            }
            Some(Some(ArgType::String)) => Ok(Type::String),
            Some(Some(ArgType::Ptr(name))) => Ok(self.pointer_to(name)),
            Some(None) => {
                err(Tag::D_ARGS_TYPE, span, format!("args[{n}] has different types in the probes this clause enables"))
            }
            None => err(
                Tag::D_ARGS_IDX,
                span,
                format!("index {} is out of range for {} args[ ]", n as i64, self.clause_desc),
            ),
        }
    }

    /// `base.field`, translated members included.
    fn dot(&mut self, base: &ast::Expr, field: &str, span: Span) -> Result<Expr> {
        if let Some((ty, operand)) = self.as_xlate(base) {
            return self.xlate_member(&ty, &operand, field, ".", span);
        }
        let b = self.rvalue(base)?;
        self.member(b, field, span, ".")
    }

    fn arrow(&mut self, base: &ast::Expr, field: &str, span: Span) -> Result<Expr> {
        if let Some((ty, operand)) = self.as_xlate(base) {
            return self.xlate_member(&ty, &operand, field, "->", span);
        }
        let b = self.rvalue(base)?;
        let Some(pointee) = (match &b.ty {
            Type::Pointer(t) => Some((**t).clone()),
            _ => None,
        }) else {
            return err(Tag::D_OP_PTR, span, "operator -> must be applied to a pointer");
        };
        if !matches!(pointee, Type::Struct(_) | Type::Union(_)) {
            return err(
                Tag::D_OP_SOU,
                span,
                format!(
                    "operator -> cannot be applied to pointer to type \"{}\"; must be applied to a struct or union pointer",
                    self.type_name(&pointee)
                ),
            );
        }
        let loaded = mk(ExprKind::Load(Box::new(b)), pointee, span);
        self.member(loaded, field, span, "->")
    }

    fn cast_expr(&mut self, ty: &ast::TypeName, operand: &ast::Expr, span: Span) -> Result<Expr> {
        let to = self.resolve_type(ty)?;
        if is_action_call(operand) && to.is_void() {
            // A void cast would keep an action's void value: refuse the action.
            let name = match &operand.kind {
                ast::ExprKind::Call { name, .. } => name.as_str(),
                _ => "",
            };
            return err(
                Tag::D_OP_ACT,
                operand.span,
                format!("{name}( ) may not be used in an expression: it is an action"),
            );
        }
        if let ast::ExprKind::Xlate { ty: xt, operand: xo } = &operand.kind {
            let what = self.xlate_kind(xt, xo, operand.span)?;
            let to = self.type_name(&to);
            return err(Tag::D_CAST_INVAL, span, format!("invalid cast expression: \"{what}\" to \"{to}\""));
        }
        let v = self.rvalue(operand)?;
        self.cast(v, to, span)
    }

    fn sizeof_type(&mut self, t: &ast::TypeName, span: Span) -> Result<Expr> {
        let ty = self.resolve_type(t)?;
        match self.prog.types.size_of(&ty) {
            Some(n) => Ok(int_const(n, Type::named_int(8, false, "size_t"), span)),
            None => err(Tag::D_SIZEOF_TYPE, span, "cannot apply sizeof to an operand of unknown size"),
        }
    }

    fn sizeof_expr(&mut self, x: &ast::Expr, span: Span) -> Result<Expr> {
        // dt_node_op1 folds the size of a string constant: its length and the NUL.
        if let ast::ExprKind::Str(s) = &x.kind {
            return Ok(int_const(s.len() as u64 + 1, Type::named_int(8, false, "size_t"), span));
        }
        let v = self.expr(x)?;
        if matches!(v.kind, ExprKind::BitField { .. }) {
            return err(Tag::D_SIZEOF_BITFIELD, span, "cannot apply sizeof to a bit-field");
        }
        match self.prog.types.size_of(&v.ty) {
            Some(n) => Ok(int_const(n, Type::named_int(8, false, "size_t"), span)),
            None => err(Tag::D_SIZEOF_TYPE, span, "cannot apply sizeof to an operand of unknown size"),
        }
    }

    fn offsetof(&mut self, ty: &ast::TypeName, member: &str, span: Span) -> Result<Expr> {
        let t = self.resolve_type(ty)?;
        let id = match t {
            Type::Struct(id) | Type::Union(id) if self.prog.types.records[id].complete => id,
            _ => return err(Tag::D_OFFSETOF_TYPE, span, "offsetof operand must be a struct or union type"),
        };
        match self.prog.types.field(id, member) {
            Some(f) if f.bits.is_some() => {
                err(Tag::D_OFFSETOF_BITFIELD, span, format!("cannot take offset of a bit-field: {member}"))
            }
            Some(f) => Ok(int_const(f.offset, Type::named_int(8, false, "size_t"), span)),
            None => err(Tag::D_UNKNOWN, span, format!("failed to determine offset of {member}: Member name not found")),
        }
    }

    fn stringof(&mut self, x: &ast::Expr, span: Span) -> Result<Expr> {
        if is_action_call(x) {
            return err(Tag::D_STRINGOF_TYPE, span, "cannot apply stringof to a value of type void");
        }
        let v = self.rvalue(x)?;
        if !v.ty.is_scalar() && !v.ty.is_string() && !matches!(v.ty, Type::Array(..)) {
            return err(
                Tag::D_STRINGOF_TYPE,
                span,
                format!("cannot apply stringof to a value of type {}", self.type_name(&v.ty)),
            );
        }
        let taint = v.taint;
        Ok(derived(ExprKind::Cast(Box::new(v)), Type::String, span, taint))
    }

    fn ident(&mut self, name: &str, span: Span) -> Result<Expr> {
        if let Some(v) = self.xlate_param(name, span) {
            return Ok(v);
        }
        if let Some(&id) = self.globals.get(name) {
            let info = &self.prog.globals[id];
            if info.keys.is_some() {
                return err(
                    Tag::D_IDENT_BADREF,
                    span,
                    format!("associative array '{name}' may not be referenced as scalar"),
                );
            }
            let r = VarRef { scope: VarScope::Global, id };
            return Ok(derived(ExprKind::Var(r), info.ty.clone(), span, self.var_taint(r)));
        }
        if let Some((b, ty)) = builtin_var(name) {
            let ty = match b {
                Builtin::Curpsinfo => self.pointer_to("psinfo_t"),
                Builtin::Curlwpsinfo => self.pointer_to("lwpsinfo_t"),
                Builtin::Curcpu => self.pointer_to("cpuinfo_t"),
                Builtin::Curthread => self.curthread_type().unwrap_or(ty),
                _ => ty,
            };
            return Ok(mk(ExprKind::Builtin(b), ty, span));
        }
        if let Some((ty, value)) = self.inlines.get(name).cloned() {
            if self.inline_depth > 64 {
                return err(Tag::D_UNKNOWN, span, format!("inline {name} is defined in terms of itself"));
            }
            let cost = value.span.range().len().max(1);
            if cost > self.inline_budget {
                return err(Tag::D_UNKNOWN, span, format!("inline {name} expands to too large an expression"));
            }
            self.inline_budget -= cost;
            self.inline_depth += 1;
            let v = self.rvalue(&value);
            self.inline_depth -= 1;
            let v = v?;
            // dt_node_ident: an inline whose value is an integer constant is that
            // constant, of the constant's own type (`sizeof (NULL)` is 4).
            let mut v = if fold(&v).is_some() && v.ty.is_integer() { v } else { self.convert(v, &ty) };
            v.span = span;
            return Ok(v);
        }
        if let Some(&(id, v)) = self.prog.types.enumerators.get(name) {
            return Ok(int_const(v as u64, Type::Enum(id), span));
        }
        if name == "NULL" {
            // libdtrace hard-wires "inline long NULL = 0;", and an inline integer
            // constant has the constant's type: int.
            return Ok(int_const(0, int_ty(), span));
        }
        if let Some(v) = consts::lookup(name) {
            return Ok(int_const(v as u64, int_ty(), span));
        }
        if name == "args" || name == "uregs" {
            return err(Tag::D_IDENT_BADREF, span, format!("{name}[ ] may not be referenced without an index"));
        }
        if subrs::find(name).is_some() || ACTIONS.contains(&name) || AggKind::from_name(name).is_some() {
            return err(
                Tag::D_IDENT_BADREF,
                span,
                format!("{name}( ) may not be used as a variable: it is a function"),
            );
        }
        err(Tag::D_IDENT_UNDEF, span, format!("failed to resolve {name}: Unknown variable name"))
    }

    fn scoped_var(&mut self, scope: VarScope, name: &str, span: Span) -> Result<Expr> {
        let (map, list, prefix) = match scope {
            VarScope::Thread => (&self.thread, &self.prog.thread_vars, "self->"),
            _ => (&self.clause, &self.prog.clause_vars, "this->"),
        };
        match map.get(name) {
            Some(&id) => {
                let info = &list[id];
                if info.keys.is_some() {
                    return err(
                        Tag::D_ARR_BADREF,
                        span,
                        format!("associative array {prefix}{name} may not be used without a key"),
                    );
                }
                let r = VarRef { scope, id };
                Ok(derived(ExprKind::Var(r), info.ty.clone(), span, self.var_taint(r)))
            }
            None => err(Tag::D_VAR_UNDEF, span, format!("{prefix}{name} has not yet been declared or assigned")),
        }
    }

    /// Declares a variable implicitly, by its first assignment.
    fn declare(&mut self, scope: VarScope, name: &str, ty: Type, keys: Option<Vec<Type>>) -> VarRef {
        let (map, list) = match scope {
            VarScope::Global => (&mut self.globals, &mut self.prog.globals),
            VarScope::Thread => (&mut self.thread, &mut self.prog.thread_vars),
            VarScope::Clause => (&mut self.clause, &mut self.prog.clause_vars),
        };
        let id = list.len();
        map.insert(name.to_string(), id);
        list.push(VarInfo { name: name.to_string(), ty, keys });
        VarRef { scope, id }
    }

    fn lookup_var(&self, scope: VarScope, name: &str) -> Option<usize> {
        match scope {
            VarScope::Global => self.globals.get(name),
            VarScope::Thread => self.thread.get(name),
            VarScope::Clause => self.clause.get(name),
        }
        .copied()
    }

    fn var_info(&self, r: VarRef) -> &VarInfo {
        match r.scope {
            VarScope::Global => &self.prog.globals[r.id],
            VarScope::Thread => &self.prog.thread_vars[r.id],
            VarScope::Clause => &self.prog.clause_vars[r.id],
        }
    }

    /// Resolves an assignment target. `implicit` is the type to declare an unknown
    /// variable with (the assigned value's type); `None` means it must exist.
    fn place(&mut self, target: &ast::Expr, implicit: Option<&Type>, op: &str) -> Result<(Place, Type)> {
        use ast::ExprKind as K;
        let named = |k: &K| -> Option<(VarScope, String)> {
            match k {
                K::Ident(n) => Some((VarScope::Global, n.clone())),
                K::SelfVar(n) => Some((VarScope::Thread, n.clone())),
                K::ThisVar(n) => Some((VarScope::Clause, n.clone())),
                _ => None,
            }
        };
        if let Some((scope, name)) = named(&target.kind) {
            if scope == VarScope::Global && self.lookup_var(scope, &name).is_none() {
                if builtin_var(&name).is_some() || name == "args" || name == "uregs" {
                    return err(
                        Tag::D_OP_WRITE,
                        target.span,
                        format!("operator {op} can only be applied to a writable variable"),
                    );
                }
                if self.inlines.contains_key(&name)
                    || self.prog.types.enumerators.contains_key(&name)
                    || consts::lookup(&name).is_some()
                {
                    return err(
                        Tag::D_OP_LVAL,
                        target.span,
                        format!("operator {op} requires modifiable lvalue as an operand"),
                    );
                }
            }
            let r = match self.lookup_var(scope, &name) {
                Some(id) => VarRef { scope, id },
                None => match implicit {
                    Some(t) => self.declare(scope, &name, implicit_type(t), None),
                    None => {
                        let prefix = match scope {
                            VarScope::Global => "",
                            VarScope::Thread => "self->",
                            VarScope::Clause => "this->",
                        };
                        return err(
                            Tag::D_IDENT_UNDEF,
                            target.span,
                            format!("failed to resolve {prefix}{name}: Unknown variable name"),
                        );
                    }
                },
            };
            let info = self.var_info(r);
            if info.keys.is_some() {
                return err(
                    Tag::D_ARR_BADREF,
                    target.span,
                    format!("associative array {name} may not be used without a key"),
                );
            }
            return Ok((Place::Var(r), info.ty.clone()));
        }
        if let K::Index { base, index } = &target.kind {
            if let Some((scope, name)) = named(&base.kind) {
                if scope != VarScope::Clause && builtin_var(&name).is_none() && name != "args" && name != "uregs" {
                    let existing = self.lookup_var(scope, &name);
                    let is_assoc = existing.map(|id| self.var_info(VarRef { scope, id }).keys.is_some());
                    if is_assoc != Some(false) {
                        let mut keys = Vec::new();
                        for (i, k) in index.iter().enumerate() {
                            let k = self.assoc_key(k, i, "associative array")?;
                            keys.push(self.string_if_char_array(k));
                        }
                        let r = match existing {
                            Some(id) => VarRef { scope, id },
                            None => match implicit {
                                Some(t) => {
                                    let kt = keys.iter().map(|k| implicit_type(&k.ty)).collect();
                                    self.declare(scope, &name, implicit_type(t), Some(kt))
                                }
                                None => {
                                    return err(
                                        Tag::D_IDENT_UNDEF,
                                        base.span,
                                        format!("failed to resolve {name}: Unknown variable name"),
                                    )
                                }
                            },
                        };
                        let keys = self.check_keys(r, &name, keys, target.span)?;
                        let ty = self.var_info(r).ty.clone();
                        return Ok((Place::Array { var: r, keys }, ty));
                    }
                }
            }
        }
        if let K::Member { base, field } = &target.kind {
            // A member of a struct or union variable is an lvalue when the variable is.
            if named(&base.kind).is_some() || matches!(base.kind, K::Index { .. } | K::Member { .. }) {
                let (bplace, bty) = self.place(base, None, op)?;
                if let Type::Struct(id) | Type::Union(id) = bty {
                    if let Some(f) = self.prog.types.field(id, field).cloned() {
                        let place = Place::Field {
                            base: Box::new(bplace),
                            record: bty.clone(),
                            offset: f.offset,
                            ty: f.ty.clone(),
                            bits: f.bits,
                        };
                        return Ok((place, f.ty));
                    }
                    return err(
                        Tag::D_TYPE_MEMBER,
                        target.span,
                        format!("{field} is not a member of {}", self.type_name(&bty)),
                    );
                }
            }
        }
        if let K::Index { base, .. } = &target.kind {
            self.reject_local_assoc(base)?;
        }
        if let Some(found) = self.memory_place(target, op)? {
            return Ok(found);
        }
        self.not_an_lvalue(target, op)
    }

    fn check_keys(&self, r: VarRef, name: &str, keys: Vec<Expr>, span: Span) -> Result<Vec<Expr>> {
        let proto = self.var_info(r).keys.clone().unwrap_or_default();
        if proto.len() != keys.len() {
            return err(Tag::D_PROTO_LEN, span, proto_len(name, "[ ]", "key", keys.len(), proto.len(), proto.len()));
        }
        let mut out = Vec::with_capacity(keys.len());
        for (i, (k, p)) in keys.into_iter().zip(&proto).enumerate() {
            if !same_kind(p, &k.ty) {
                return err(
                    Tag::D_PROTO_ARG,
                    k.span,
                    format!(
                        "{name}[ ] key #{} is incompatible with prototype:\n\tprototype: {}\n\t      key: {}",
                        i + 1,
                        self.type_name(p),
                        self.type_name(&k.ty)
                    ),
                );
            }
            out.push(self.convert(k, p));
        }
        Ok(out)
    }

    fn assign(&mut self, op: Option<BinaryOp>, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Result<Expr> {
        if op.is_some() {
            // dt_cook_op2 reads the left operand of `op=` first.
            self.require_declared(lhs)?;
        }
        if op.is_none() {
            if let Some(e) = self.string_element_store(lhs, rhs, span)? {
                return Ok(e);
            }
        }
        let value = self.rvalue(rhs)?;
        if value.ty.is_void() {
            return err(Tag::D_OP_INCOMPAT, rhs.span, "operator = cannot be applied to a void expression");
        }
        let opsym = op.map(|o| format!("{}=", o.symbol())).unwrap_or_else(|| "=".into());
        let implicit = if op.is_none() { Some(value.ty.clone()) } else { None };
        let (place, ty) = self.place(lhs, implicit.as_ref(), &opsym)?;
        if let Some(o) = op {
            // dt_node_op2 refuses `/= 0` and `%= 0` as it refuses `/ 0`.
            if matches!(o, BinaryOp::Div | BinaryOp::Mod) && value.ty.is_arithmetic() && fold(&value) == Some(0) {
                return err(Tag::D_DIV_ZERO, span, "expression contains division by zero");
            }
            // dt_cook_op2 refuses a string on either side of `+=`/`-=` before it
            // looks at the left side's size.
            if matches!(o, BinaryOp::Add | BinaryOp::Sub) && (ty.is_string() || value.ty.is_string()) {
                return self.incompatible(&ty, &opsym, &value.ty, span);
            }
            if matches!(o, BinaryOp::Add | BinaryOp::Sub)
                && !(ty.is_integer() && value.ty.is_integer())
                && (!ty.is_pointer() || ty.pointee().is_some_and(Type::is_void))
            {
                return err(
                    Tag::D_OP_VFPTR,
                    span,
                    format!("operator {opsym} requires left-hand scalar operand of known size"),
                );
            }
            if !ty.is_scalar() || !value.ty.is_arithmetic() {
                return self.incompatible(&ty, &opsym, &value.ty, span);
            }
            let int_only = matches!(
                o,
                BinaryOp::Mod | BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr
            );
            if int_only && ty.is_pointer() {
                return err(Tag::D_OP_INT, span, format!("operator {opsym} requires operands of integral type"));
            }
        } else {
            let dynamic = matches!(place, Place::Array { .. } | Place::Var(VarRef { scope: VarScope::Thread, .. }));
            self.check_assignable(&ty, &value, &opsym, span, dynamic)?;
        }
        let value = if op.is_none() { self.convert(value, &ty) } else { value };
        self.note_store(&place, &value, span)?;
        let taint = value.taint;
        Ok(derived(ExprKind::Assign { target: place, op, value: Box::new(value) }, ty, span, taint))
    }

    /// `s[i] = c` where `s` is a string variable: a string is a `char` array in DTrace,
    /// so its element is an lvalue (DTraceToolkit's j_classflow.d cuts a class name with
    /// `this->class[arg2] = '\0'`). Stored as `s = <s with byte i set to c>`.
    fn string_element_store(&mut self, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Result<Option<Expr>> {
        use ast::ExprKind as K;
        let K::Index { base, index } = &lhs.kind else { return Ok(None) };
        let (scope, name) = match &base.kind {
            K::Ident(n) => (VarScope::Global, n),
            K::SelfVar(n) => (VarScope::Thread, n),
            K::ThisVar(n) => (VarScope::Clause, n),
            _ => return Ok(None),
        };
        let Some(id) = self.lookup_var(scope, name) else { return Ok(None) };
        let info = self.var_info(VarRef { scope, id });
        if index.len() != 1 || info.keys.is_some() || !info.ty.is_string() {
            return Ok(None);
        }
        let current = self.rvalue(base)?;
        let at = self.rvalue(&index[0])?;
        let value = self.rvalue(rhs)?;
        for e in [&at, &value] {
            if !e.ty.is_integer() {
                return self.incompatible(&Type::int(1, true), "=", &e.ty, e.span);
            }
        }
        let (place, _) = self.place(base, None, "=")?;
        let set = derived(
            ExprKind::Call(crate::ir::Subr::StrSetChar, vec![current, at, value]),
            Type::String,
            span,
            Taint::default(),
        );
        self.note_store(&place, &set, span)?;
        Ok(Some(derived(
            ExprKind::Assign { target: place, op: None, value: Box::new(set) },
            Type::String,
            span,
            Taint::default(),
        )))
    }

    /// DTrace's assignment rules (dt_cook_op2, DT_TOK_ASGN): no assigning to arrays,
    /// and the value must be argument-compatible with the target. `dynamic` targets
    /// (thread-locals, associative array elements) also take a literal 0.
    fn check_assignable(&self, to: &Type, v: &Expr, op: &str, span: Span, dynamic: bool) -> Result<()> {
        if let Type::Array(..) = to {
            return err(
                Tag::D_OP_ARRFUN,
                span,
                format!("operator {op} may not be applied to operand of type \"{}\"", self.type_name(to)),
            );
        }
        if self.arg_compat(to, v, dynamic) {
            return Ok(());
        }
        self.incompatible(to, op, &v.ty, span)
    }

    /// Converts a checked value to `ty` where the conversion is implicit (assignment,
    /// arguments, keys).
    fn convert(&self, v: Expr, ty: &Type) -> Expr {
        if v.ty == *ty {
            return v;
        }
        let v = if ty.is_pointer() { self.decay(v) } else { v };
        if ty.is_pointer() && v.ty.is_string() {
            // A string where a `char *` is wanted: its address (a temporary copy).
            let span = v.span;
            return mk(ExprKind::Cast(Box::new(v)), ty.clone(), span);
        }
        match ty {
            Type::String if !v.ty.is_string() => {
                let (span, taint) = (v.span, v.taint);
                derived(ExprKind::Cast(Box::new(v)), Type::String, span, taint)
            }
            Type::Int(_) | Type::Enum(_) if v.ty.is_scalar() => {
                let (span, taint) = (v.span, v.taint);
                if let Some(c) = fold(&v) {
                    let shape = ty.int_shape().unwrap();
                    return int_const(shape.wrap(c), ty.clone(), span);
                }
                derived(ExprKind::Cast(Box::new(v)), ty.clone(), span, taint)
            }
            _ => {
                let mut v = v;
                if v.ty.is_scalar() && ty.is_scalar() {
                    v.ty = ty.clone();
                }
                v
            }
        }
    }

    fn cast(&mut self, v: Expr, to: Type, span: Span) -> Result<Expr> {
        let v = if to.is_scalar() { self.decay(v) } else { v };
        // A struct or union cast to its own type is itself (translators do this).
        if v.ty == to && matches!(to, Type::Struct(_) | Type::Union(_)) {
            return Ok(v);
        }
        let ok = match &to {
            Type::Void => true,
            Type::String => is_stringish(&v.ty) || v.ty.is_scalar(),
            t if t.is_scalar() => v.ty.is_scalar(),
            _ => false,
        };
        if !ok {
            return err(
                Tag::D_CAST_INVAL,
                span,
                format!("invalid cast expression: \"{}\" to \"{}\"", self.type_name(&v.ty), self.type_name(&to)),
            );
        }
        if let (Some(c), Some(shape)) = (fold(&v), to.int_shape()) {
            return Ok(int_const(shape.wrap(c), to, span));
        }
        // libdtrace: "You cannot cast away allocaness."
        let taint = v.taint;
        Ok(derived(ExprKind::Cast(Box::new(v)), to, span, taint))
    }

    fn unary(&mut self, op: UnaryOp, operand: &ast::Expr, span: Span) -> Result<Expr> {
        if is_agg_target(operand) {
            return unary_on_aggregation(op, span);
        }
        let v = self.rvalue(operand)?;
        let sym = op_sym(op);
        match op {
            UnaryOp::Neg | UnaryOp::Plus | UnaryOp::BitNot => {
                if !v.ty.is_arithmetic() {
                    let (tag, what) = if op == UnaryOp::BitNot {
                        (Tag::D_OP_INT, "integral")
                    } else {
                        (Tag::D_OP_ARITH, "arithmetic")
                    };
                    return err(tag, span, format!("operator {sym} requires an operand of {what} type"));
                }
                let shape = crate::types::promote(&v.ty.int_shape().unwrap());
                let ty = Type::Int(shape.clone());
                if let Some(c) = fold(&v) {
                    let r = match op {
                        UnaryOp::Neg => c.wrapping_neg(),
                        UnaryOp::BitNot => !c,
                        _ => c,
                    };
                    return Ok(int_const(shape.wrap(r), ty, span));
                }
                let v = self.convert(v, &ty);
                let taint = v.taint;
                Ok(match op {
                    UnaryOp::Neg => derived(ExprKind::Neg(Box::new(v)), ty, span, taint),
                    UnaryOp::BitNot => derived(ExprKind::BitNot(Box::new(v)), ty, span, taint),
                    _ => v,
                })
            }
            UnaryOp::Not => {
                if !v.ty.is_scalar() {
                    return err(Tag::D_OP_SCALAR, span, "operator ! requires an operand of scalar type");
                }
                if let Some(c) = fold(&v).filter(|_| v.ty.is_integer()) {
                    return Ok(int_const(u64::from(c == 0), int_ty(), span));
                }
                Ok(mk(ExprKind::Not(Box::new(v)), int_ty(), span))
            }
            UnaryOp::Deref => {
                if v.ty.is_string() {
                    let zero = int_const(0, Type::int(8, true), span);
                    return Ok(mk(
                        ExprKind::StrChar { base: Box::new(v), index: Box::new(zero) },
                        Type::int(1, true),
                        span,
                    ));
                }
                let Some(t) = v.ty.pointee().cloned() else {
                    return err(Tag::D_DEREF_NONPTR, span, "cannot dereference non-pointer type");
                };
                if t.is_void() {
                    return err(Tag::D_DEREF_VOID, span, "cannot dereference pointer to void");
                }
                Ok(mk(ExprKind::Load(Box::new(v)), t, span))
            }
            UnaryOp::AddrOf if matches!(v.kind, ExprKind::BitField { .. }) => {
                err(Tag::D_ADDROF_BITFIELD, span, "cannot take address of bit-field")
            }
            UnaryOp::AddrOf => match v.kind {
                ExprKind::Load(_) => match self.address_of(&v) {
                    Some(addr) => Ok(derived(addr.kind, Type::Pointer(Box::new(v.ty)), span, addr.taint)),
                    None => err(Tag::D_ADDROF_LVAL, span, "unacceptable operand for unary & operator"),
                },
                ExprKind::Field { .. } => match self.address_of(&v) {
                    Some(addr) => Ok(mk(addr.kind, Type::Pointer(Box::new(v.ty)), span)),
                    None => err(Tag::D_ADDROF_VAR, span, "cannot take address of dynamic object"),
                },
                ExprKind::Var(_) | ExprKind::ArrayGet { .. } => {
                    err(Tag::D_ADDROF_VAR, span, "cannot take address of dynamic variable")
                }
                _ => err(Tag::D_ADDROF_LVAL, span, "unacceptable operand for unary & operator"),
            },
        }
    }

    fn binary(&mut self, op: BinaryOp, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Result<Expr> {
        use BinaryOp::*;
        if is_agg_target(lhs) || is_agg_target(rhs) {
            return self.agg_operand(op, lhs, rhs, span);
        }
        let l = self.rvalue(lhs)?;
        let r = self.rvalue(rhs)?;
        match op {
            LogAnd | LogOr | LogXor => {
                for x in [&l, &r] {
                    if !x.ty.is_scalar() {
                        return err(
                            Tag::D_OP_SCALAR,
                            span,
                            format!("operator {} requires operands of scalar type", op.symbol()),
                        );
                    }
                }
                // dt_node_op2 folds logical operators on integer constants, so that
                // `OPT_a && OPT_b ? @x[k] = count() : 1;` (inline flags, as
                // DTraceToolkit writes them) selects its statement at compile time.
                if let (Some(a), Some(b)) = (fold(&l), fold(&r)) {
                    let (a, b) = (a != 0, b != 0);
                    let v = match op {
                        LogAnd => a && b,
                        LogOr => a || b,
                        _ => a != b,
                    };
                    return Ok(int_const(u64::from(v), int_ty(), span));
                }
                Ok(mk(ExprKind::Logical { op, lhs: Box::new(l), rhs: Box::new(r) }, int_ty(), span))
            }
            Lt | Le | Gt | Ge | Eq | Ne => self.comparison(op, l, r, span),
            Add | Sub if l.ty.is_string() || r.ty.is_string() => self.string_offset(op, l, r, span),
            _ => self.arith(op, l, r, span),
        }
    }

    /// A binary operator with an aggregation operand: DTrace cooks `@a` to the
    /// dynamic type, which it names "aggregation" and which fails every operator's
    /// type rule, each with its own message.
    fn agg_operand(&mut self, op: BinaryOp, lhs: &ast::Expr, rhs: &ast::Expr, span: Span) -> Result<Expr> {
        use BinaryOp::*;
        let name = |this: &mut Self, e: &ast::Expr| -> Result<String> {
            if is_agg_target(e) {
                return Ok("aggregation".to_string());
            }
            let v = this.rvalue(e)?;
            Ok(this.type_name(&v.ty))
        };
        let l = name(self, lhs)?;
        let r = name(self, rhs)?;
        let sym = op.symbol();
        let (tag, msg) = match op {
            LogAnd | LogOr | LogXor => (Tag::D_OP_SCALAR, format!("operator {sym} requires operands of scalar type")),
            Mul | Div => (Tag::D_OP_ARITH, format!("operator {sym} requires operands of arithmetic type")),
            Mod | BitAnd | BitOr | BitXor | Shl | Shr => {
                (Tag::D_OP_INT, format!("operator {sym} requires operands of integral type"))
            }
            Add | Sub | Lt | Le | Gt | Ge | Eq | Ne => {
                (Tag::D_OP_INCOMPAT, format!("operands have incompatible types: \"{l}\" {sym} \"{r}\""))
            }
        };
        err(tag, span, msg)
    }

    fn arith(&mut self, op: BinaryOp, l: Expr, r: Expr, span: Span) -> Result<Expr> {
        use BinaryOp::*;
        let integral = matches!(op, Mod | BitAnd | BitOr | BitXor | Shl | Shr);
        // Pointer arithmetic: pointer ± integer scales by the pointee size;
        // pointer - pointer gives an element count.
        // A void pointer is no pointer here (dt_node_is_vfptr): it takes a cast first.
        let object_pointer = |t: &Type| t.pointee().is_some_and(|p| !p.is_void());
        if matches!(op, Add | Sub) && (object_pointer(&l.ty) || object_pointer(&r.ty)) {
            return self.pointer_arith(op, l, r, span);
        }
        for x in [&l, &r] {
            if !x.ty.is_arithmetic() {
                if matches!(op, Add | Sub) {
                    return self.incompatible(&l.ty, op.symbol(), &r.ty, span);
                }
                let (tag, kind) = if integral { (Tag::D_OP_INT, "integral") } else { (Tag::D_OP_ARITH, "arithmetic") };
                return err(tag, span, format!("operator {} requires operands of {kind} type", op.symbol()));
            }
        }
        let (ls, rs) = (l.ty.int_shape().unwrap(), r.ty.int_shape().unwrap());
        let shape = if matches!(op, Shl | Shr) { crate::types::promote(&ls) } else { usual_arithmetic(&ls, &rs) };
        if matches!(op, Div | Mod) && fold(&r) == Some(0) {
            // dt_node_op2 raises this while parsing, outside any clause region.
            return Err(CompileError::new(Tag::D_DIV_ZERO, span, "expression contains division by zero").unlabelled());
        }
        let ty = Type::Int(shape.clone());
        if let (Some(a), Some(b)) = (fold(&l), fold(&r)) {
            if let Some(v) = const_arith(op, a, b, &shape) {
                return Ok(int_const(v, ty, span));
            }
        }
        let l = self.convert(l, &ty);
        let r = if matches!(op, Shl | Shr) { r } else { self.convert(r, &ty) };
        let taint = l.taint.or(r.taint);
        Ok(derived(ExprKind::Binary { op, lhs: Box::new(l), rhs: Box::new(r), signed: shape.signed }, ty, span, taint))
    }

    fn pointer_arith(&mut self, op: BinaryOp, l: Expr, r: Expr, span: Span) -> Result<Expr> {
        let (l, r) = (self.decay(l), self.decay(r));
        let long = Type::int(8, true);
        let size_of = |this: &Self, t: &Type| this.prog.types.size_of(t.pointee().unwrap()).unwrap_or(1).max(1);
        match (l.ty.pointee().is_some(), r.ty.pointee().is_some()) {
            (true, true) if op == BinaryOp::Sub => {
                if l.taint.alloca != r.taint.alloca {
                    return err(
                        Tag::D_OP_INCOMPAT,
                        span,
                        format!(
                            "adding or subtracting pointers to alloca and non-alloca space is meaningless: \"{}\" - \"{}\"",
                            self.type_name(&l.ty),
                            self.type_name(&r.ty)
                        ),
                    );
                }
                let n = size_of(self, &l.ty);
                let diff =
                    mk(ExprKind::Binary { op, lhs: Box::new(l), rhs: Box::new(r), signed: true }, long.clone(), span);
                let n = int_const(n, long.clone(), span);
                Ok(mk(
                    ExprKind::Binary { op: BinaryOp::Div, lhs: Box::new(diff), rhs: Box::new(n), signed: true },
                    long,
                    span,
                ))
            }
            (true, false) | (false, true) => {
                let (p, i) = if l.ty.pointee().is_some() { (l, r) } else { (r, l) };
                if !i.ty.is_arithmetic() {
                    return err(
                        Tag::D_OP_INCOMPAT,
                        span,
                        format!("operator {} requires an integral operand with a pointer", op.symbol()),
                    );
                }
                let ty = match &p.ty {
                    Type::Array(t, _) => Type::Pointer(t.clone()),
                    t => t.clone(),
                };
                let n = int_const(size_of(self, &p.ty), long.clone(), span);
                let i = self.convert(i, &long);
                let scaled = mk(
                    ExprKind::Binary { op: BinaryOp::Mul, lhs: Box::new(i), rhs: Box::new(n), signed: true },
                    long,
                    span,
                );
                let taint = p.taint.or(scaled.taint);
                Ok(derived(
                    ExprKind::Binary { op, lhs: Box::new(p), rhs: Box::new(scaled), signed: false },
                    ty,
                    span,
                    taint,
                ))
            }
            _ => self.incompatible(&l.ty, op.symbol(), &r.ty, span),
        }
    }

    fn member(&mut self, base: Expr, field: &str, span: Span, op: &str) -> Result<Expr> {
        let (Type::Struct(id) | Type::Union(id)) = base.ty else {
            return err(
                Tag::D_OP_SOU,
                span,
                format!(
                    "operator {op} cannot be applied to type \"{}\"; must be applied to a struct or union",
                    self.type_name(&base.ty)
                ),
            );
        };
        if !self.prog.types.records[id].complete {
            let name = self.incomplete_name(&base.ty, None);
            return err(
                Tag::D_OP_INCOMPLETE,
                span,
                format!("operator {op} cannot be applied to a forward declaration: no {name} definition is available"),
            );
        }
        let Some(f) = self.prog.types.field(id, field).cloned() else {
            return err(Tag::D_TYPE_MEMBER, span, format!("{field} is not a member of {}", self.type_name(&base.ty)));
        };
        if crate::proc_types::unconverted(&self.prog.types.records[id].tag, field) {
            let msg = format!("translator does not define conversion for member: {field}");
            return err(Tag::D_XLATE_NOCONV, span, msg);
        }
        let unit = match base.kind {
            // Traced memory: read the member at its own address.
            ExprKind::Load(addr) => {
                let ptr = derived(addr.kind, Type::int(8, false), addr.span, addr.taint);
                let ptr = derived(ExprKind::NonNull(Box::new(ptr)), Type::int(8, false), addr.span, addr.taint);
                let off = int_const(f.offset, Type::int(8, false), span);
                let at = derived(
                    ExprKind::Binary { op: BinaryOp::Add, lhs: Box::new(ptr), rhs: Box::new(off), signed: false },
                    Type::Pointer(Box::new(f.ty.clone())),
                    span,
                    addr.taint,
                );
                mk(ExprKind::Load(Box::new(at)), f.ty.clone(), span)
            }
            _ => mk(ExprKind::Field { base: Box::new(base), offset: f.offset }, f.ty.clone(), span),
        };
        Ok(match f.bits {
            Some(bits) => mk(ExprKind::BitField { unit: Box::new(unit), bits }, f.ty, span),
            None => unit,
        })
    }

    fn index(&mut self, base: &ast::Expr, index: &[ast::Expr], span: Span) -> Result<Expr> {
        use ast::ExprKind as K;
        match &base.kind {
            K::Agg(n) => {
                return err(
                    Tag::D_AGG_MDIM,
                    span,
                    format!("aggregation @{n} may not be used as an operand; use printa( ) to print it"),
                )
            }
            K::Ident(n) if (n == "args" || n == "uregs") && !self.globals.contains_key(n) => {
                if index.len() != 1 {
                    return err(Tag::D_ARGS_IDX, span, format!("{n}[ ] takes exactly one index"));
                }
                let i = self.rvalue(&index[0])?;
                if !i.ty.is_arithmetic() {
                    return err(Tag::D_PROTO_ARG, i.span, format!("{n}[ ] index must be of integral type"));
                }
                let (kind, ty) = if n == "args" {
                    let ty = self.arg_type(&i, span)?;
                    (ExprKind::Args(Box::new(i)), ty)
                } else {
                    self.uregs_index(&i, span)?;
                    (ExprKind::Uregs(Box::new(i)), Type::named_int(8, false, "uint64_t"))
                };
                return Ok(mk(kind, ty, span));
            }
            K::Ident(n) if !self.globals.contains_key(n) && self.inline_arrays.contains_key(n) => {
                return self.inline_array_ref(n, index, span);
            }
            K::ThisVar(_) => self.reject_local_assoc(base)?,
            K::Ident(n) | K::SelfVar(n) => {
                let scope = if matches!(base.kind, K::Ident(_)) { VarScope::Global } else { VarScope::Thread };
                if let Some(id) = self.lookup_var(scope, n) {
                    let r = VarRef { scope, id };
                    if self.var_info(r).keys.is_some() {
                        let mut keys = Vec::new();
                        for (i, k) in index.iter().enumerate() {
                            let k = self.assoc_key(k, i, "associative array")?;
                            keys.push(self.string_if_char_array(k));
                        }
                        let keys = self.check_keys(r, n, keys, span)?;
                        let ty = self.var_info(r).ty.clone();
                        return Ok(derived(ExprKind::ArrayGet { var: r, keys }, ty, span, self.var_taint(r)));
                    }
                } else if builtin_var(n).is_none() {
                    let prefix = if scope == VarScope::Thread { "self->" } else { "" };
                    return err(
                        Tag::D_IDENT_UNDEF,
                        base.span,
                        format!("failed to resolve {prefix}{n}: Unknown variable name"),
                    );
                }
            }
            _ => {}
        }
        // Pointer or array indexing reads traced memory.
        let b = self.rvalue(base)?;
        if b.ty.is_string() {
            return self.string_index(b, index, span);
        }
        if let Type::Array(..) = b.ty {
            return self.array_element(b, index, span);
        }
        let Some(elem) = b.ty.pointee().cloned() else {
            return err(
                Tag::D_OP_ARRFUN,
                span,
                format!("operator [ ] cannot be applied to operand of type \"{}\"", self.type_name(&b.ty)),
            );
        };
        if index.len() != 1 {
            return err(Tag::D_OP_ARRFUN, span, "operator [ ] takes exactly one index for a pointer or array");
        }
        let i = self.rvalue(&index[0])?;
        let at = self.pointer_arith(BinaryOp::Add, b, i, span)?;
        Ok(mk(ExprKind::Load(Box::new(at)), elem, span))
    }

    fn call(&mut self, name: &str, name_span: Span, args: &[ast::Expr], span: Span) -> Result<Expr> {
        // A function of a later D version than the one compiled for is not defined.
        if ident_version(name) > self.version && !self.globals.contains_key(name) {
            return err(Tag::D_FUNC_UNDEF, name_span, format!("undefined function name: {name}"));
        }
        if ACTIONS.contains(&name) {
            // DTrace cooks an action in an expression as a call of a void function
            // (its prototype checked), and the operator around it rejects the void
            // value with its own message.
            self.action(name, name_span, args, span)?;
            return Ok(mk(ExprKind::Str(Rc::from(&b"void"[..])), Type::Void, span));
        }
        if AggKind::from_name(name).is_some() {
            return err(
                Tag::D_CG_EXPR,
                name_span,
                format!("{name}( ) may only be used as the value of an aggregation"),
            );
        }
        let Some((subr, proto)) = subrs::find(name) else {
            if builtin_var(name).is_some() || self.globals.contains_key(name) {
                return err(
                    Tag::D_FUNC_IDKIND,
                    name_span,
                    format!("scalar '{name}' may not be referenced as a function"),
                );
            }
            return err(Tag::D_FUNC_UNDEF, name_span, format!("undefined function name: {name}"));
        };
        self.subr_call(name, name_span, subr, &proto, args, span)
    }
}

/// DTrace's prototype-length message: `strlen( ) prototype mismatch: 2 args passed, 1 expected`.
/// With optional arguments it says `at least` the required count, as DTrace does.
fn proto_len(name: &str, suffix: &str, what: &str, passed: usize, min: usize, max: usize) -> String {
    let plural = if passed == 1 { " " } else { "s " };
    let (bound, limit) = match () {
        _ if min == max => ("", min),
        _ if passed > max => ("at most ", max),
        _ => ("at least ", min),
    };
    format!("{name}{suffix} prototype mismatch: {passed} {what}{plural}passed, {bound}{limit} expected")
}

fn op_sym(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "-",
        UnaryOp::Plus => "+",
        UnaryOp::Not => "!",
        UnaryOp::BitNot => "~",
        UnaryOp::Deref => "*",
        UnaryOp::AddrOf => "&",
    }
}

/// A call of an action (`printf(...)`), which is a statement, never a value.
fn is_action_call(e: &ast::Expr) -> bool {
    matches!(&e.kind, ast::ExprKind::Call { name, .. } if ACTIONS.contains(&name.as_str()))
}

fn is_agg_target(e: &ast::Expr) -> bool {
    match &e.kind {
        ast::ExprKind::Agg(_) => true,
        ast::ExprKind::Index { base, .. } => matches!(base.kind, ast::ExprKind::Agg(_)),
        _ => false,
    }
}

/// Strings, and what converts to one (`char *`, `char[N]`).
fn is_stringish(t: &Type) -> bool {
    t.is_string() || t.is_char_pointer_or_array()
}

/// The type an implicitly declared variable gets from its first value: char arrays
/// and pointers to char become strings, integers narrower than int keep their type.
fn implicit_type(t: &Type) -> Type {
    if t.is_char_pointer_or_array() && matches!(t, Type::Array(..)) {
        Type::String
    } else {
        t.clone()
    }
}

/// Whether a value of type `b` may be stored where `a` is expected (keys).
fn same_kind(a: &Type, b: &Type) -> bool {
    match (a, b) {
        (Type::String, t) | (t, Type::String) => is_stringish(t),
        (Type::Stack { user: x }, Type::Stack { user: y }) => x == y,
        (x, y) if x.is_scalar() && y.is_scalar() => true,
        (x, y) => x == y,
    }
}

/// dt_node_int: an integer constant has the first of DTrace's integer types (int,
/// unsigned int, long, unsigned long, long long, unsigned long long) its suffix
/// allows that holds it; decimal constants and `u` suffixes skip every other one
/// (decimal: only signed types; `u`: only unsigned ones).
fn int_literal_type(v: u64, suffix: ast::IntSuffix, decimal: bool, span: Span) -> Result<Type> {
    use ast::IntSuffix::*;
    const TYPES: [(&str, u8, bool, u64); 6] = [
        ("int", 4, true, i32::MAX as u64),
        ("unsigned int", 4, false, u32::MAX as u64),
        ("long", 8, true, i64::MAX as u64),
        ("unsigned long", 8, false, u64::MAX),
        ("long long", 8, true, i64::MAX as u64),
        ("unsigned long long", 8, false, u64::MAX),
    ];
    let (first, unsigned) = match suffix {
        None => (0, false),
        U => (1, true),
        L => (2, false),
        UL => (3, true),
        LL => (4, false),
        ULL => (5, true),
    };
    let step = if decimal || unsigned { 2 } else { 1 };
    match TYPES[first..].iter().step_by(step).find(|t| v <= t.3) {
        Some(&(name, size, signed, _)) if name == "int" || name == "long" => Ok(Type::int(size, signed)),
        Some(&(name, size, signed, _)) => Ok(Type::named_int(size, signed, name)),
        Option::None => err(
            Tag::D_INT_OFLOW,
            span,
            format!("integer constant 0x{v:x} cannot be represented in any built-in integral type"),
        ),
    }
}

/// The value of a constant expression, if it is one.
pub fn fold(e: &Expr) -> Option<u64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v),
        _ => None,
    }
}

fn compare(op: BinaryOp, a: u64, b: u64, signed: bool) -> bool {
    use std::cmp::Ordering;
    let ord = if signed { (a as i64).cmp(&(b as i64)) } else { a.cmp(&b) };
    match op {
        BinaryOp::Lt => ord == Ordering::Less,
        BinaryOp::Le => ord != Ordering::Greater,
        BinaryOp::Gt => ord == Ordering::Greater,
        BinaryOp::Ge => ord != Ordering::Less,
        BinaryOp::Eq => ord == Ordering::Equal,
        _ => ord != Ordering::Equal,
    }
}

/// Integer arithmetic on constants, as dt_node_op2 folds it: in 64 bits, the result
/// keeps the operands' promoted type but not its width (so `10 * 1000000000` is ten
/// billion where it meets a 64-bit value, and wraps only where stored or recorded in
/// an `int`). `shape` gives signedness; `None` on division by zero.
pub fn const_arith(op: BinaryOp, a: u64, b: u64, shape: &IntType) -> Option<u64> {
    use BinaryOp::*;
    let s = shape.signed;
    let v = match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div if b == 0 => return None,
        Mod if b == 0 => return None,
        Div if s => (a as i64).wrapping_div(b as i64) as u64,
        Div => a / b,
        Mod if s => (a as i64).wrapping_rem(b as i64) as u64,
        Mod => a % b,
        BitAnd => a & b,
        BitOr => a | b,
        BitXor => a ^ b,
        Shl => a.wrapping_shl(b as u32),
        Shr if s => ((a as i64).wrapping_shr(b as u32)) as u64,
        Shr => a.wrapping_shr(b as u32),
        _ => return None,
    };
    Some(v)
}

/// Whether an action records data (and so, without `-q`, prints a trace line).
fn records_data(a: &Action) -> bool {
    match a {
        // Expression statements have a zero-size result and aggregations go to their own
        // buffer: neither records anything (dtrace_ecb_resize leaves such ECBs empty).
        Action::Eval(_) | Action::AggUpdate { .. } | Action::Stop | Action::Raise(_) | Action::Nop => false,
        Action::If { then, otherwise, .. } => then.iter().chain(otherwise).any(records_data),
        _ => true,
    }
}

/// The macro references (`$1`, `$$1`, `$target`) in statements, in text order.
fn stmt_macro_refs(stmts: &[ast::Stmt], out: &mut Vec<(String, Span)>) {
    for s in stmts {
        match s {
            ast::Stmt::Expr(e) => macro_refs(e, out),
            ast::Stmt::If { cond, then, otherwise, .. } => {
                macro_refs(cond, out);
                stmt_macro_refs(then, out);
                stmt_macro_refs(otherwise.as_deref().unwrap_or_default(), out);
            }
            ast::Stmt::Empty(_) => {}
        }
    }
}

/// The macro references in an expression, in text order.
fn macro_refs(e: &ast::Expr, out: &mut Vec<(String, Span)>) {
    use ast::ExprKind as K;
    match &e.kind {
        K::Macro(m) => out.push((format!("${m}"), e.span)),
        K::MacroStr(m) => out.push((format!("$${m}"), e.span)),
        K::Int { .. }
        | K::Char(_)
        | K::Str(_)
        | K::Ident(_)
        | K::Backquoted { .. }
        | K::SelfVar(_)
        | K::ThisVar(_)
        | K::Agg(_)
        | K::SizeofType(_)
        | K::Offsetof { .. } => {}
        K::Unary { operand: x, .. }
        | K::IncDec { operand: x, .. }
        | K::Cast { operand: x, .. }
        | K::SizeofExpr(x)
        | K::Stringof(x)
        | K::Member { base: x, .. }
        | K::Arrow { base: x, .. }
        | K::Xlate { operand: x, .. } => macro_refs(x, out),
        K::Binary { lhs, rhs, .. } | K::Assign { lhs, rhs, .. } | K::Comma { lhs, rhs } => {
            macro_refs(lhs, out);
            macro_refs(rhs, out);
        }
        K::Ternary { cond, then, otherwise } => {
            for x in [cond, then, otherwise] {
                macro_refs(x, out);
            }
        }
        K::Call { args, .. } => args.iter().for_each(|a| macro_refs(a, out)),
        K::Index { base, index } => {
            macro_refs(base, out);
            index.iter().for_each(|a| macro_refs(a, out));
        }
    }
}

/// Where the first token at or after `from` starts: white space and comments are
/// skipped, as the lexer skips them reading its next token.
fn next_token_start(text: &str, from: usize) -> usize {
    let b = text.as_bytes();
    let mut i = from.min(b.len());
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b[i..].starts_with(b"/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |j| i + 2 + j + 2);
        } else if b[i..].starts_with(b"//") {
            i = text[i..].find('\n').map_or(b.len(), |j| i + j);
        } else if b[i..].starts_with(b"/") && !b[i..].starts_with(b"/=") {
            // dt_lex.l reads past the white space after a `/` to tell a division
            // from the end of a predicate, counting the lines it passes.
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            return j;
        } else {
            return i;
        }
    }
}

/// dt_idcook_assc's key check: `curpsinfo`, whose inline is a translation, is of
/// dynamic type there, named by its kind; a void key is an action's value.
pub(crate) fn check_key(k: &ast::Expr, v: &Expr, i: usize, what: &str) -> Result<()> {
    let kind = match &k.kind {
        ast::ExprKind::Ident(n) if matches!(n.as_str(), "curpsinfo" | "curlwpsinfo") => "scalar",
        _ if v.ty.is_void() => "void",
        _ => return Ok(()),
    };
    err(Tag::D_KEY_TYPE, k.span, format!("{kind} expression may not be used as {what} index: key #{}", i + 1))
}

/// An inline with a key signature.
#[derive(Debug, Clone)]
struct InlineArray {
    ty: Type,
    params: Vec<(String, Type)>,
    value: ast::Expr,
}

/// A unary operator on a bare `@a`: DTrace types it as <DYN>, which no unary
/// operator accepts. Kept out of `unary` so that its frame, repeated at every
/// level of a nested expression, stays small in debug builds.
#[cold]
#[inline(never)]
fn unary_on_aggregation(op: UnaryOp, span: Span) -> Result<Expr> {
    // DTrace types a bare `@a` as <DYN>, which no unary operator accepts.
    let (tag, msg) = match op {
        UnaryOp::Neg | UnaryOp::Plus => {
            (Tag::D_OP_ARITH, format!("operator {} requires an operand of arithmetic type", op_sym(op)))
        }
        UnaryOp::BitNot => (Tag::D_OP_INT, "operator ~ requires an operand of integral type".to_string()),
        UnaryOp::Not => (Tag::D_OP_SCALAR, "operator ! requires an operand of scalar type".to_string()),
        UnaryOp::Deref => (Tag::D_DEREF_NONPTR, "cannot dereference non-pointer type".to_string()),
        UnaryOp::AddrOf => (Tag::D_ADDROF_VAR, "cannot take address of dynamic variable".to_string()),
    };
    err(tag, span, msg)
}

/// A backquoted symbol: udtrace resolves no kernel symbol; a lone backquote (which
/// dt_lex.l reads as an identifier) names none at all.
#[cold]
#[inline(never)]
fn backquoted(module: Option<&str>, name: &str, span: Span) -> Result<Expr> {
    let msg = if name.is_empty() {
        format!("failed to resolve {}`: Unknown symbol name", module.unwrap_or_default())
    } else {
        format!("failed to resolve `{name}: kernel symbols are not available in user-space tracing")
    };
    err(Tag::D_IDENT_UNDEF, span, msg)
}

#[cold]
#[inline(never)]
fn aggregation_operand(name: &str, span: Span) -> Result<Expr> {
    err(Tag::D_OP_DYN, span, format!("aggregation @{name} may not be used as an operand; use printa( ) to print it"))
}
