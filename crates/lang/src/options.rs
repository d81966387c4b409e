//! The options of `-x name[=value]` and `#pragma D option name[=value]`: one table of
//! every option DTrace knows (illumos `dt_options.c`, plus the names Oracle's Linux
//! DTrace added, so that scripts written for either are accepted) and udtrace's own
//! `nofollow`. Parsing follows libdtrace's value rules; messages are libdtrace's
//! `dtrace_errmsg()` texts. No I/O.

use std::collections::BTreeMap;
use std::fmt;

/// What values an option takes. Each mirrors one of libdtrace's `dt_opt_*` parsers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A compiler switch (`dt_opt_cflags` and friends): no value may be given.
    Switch,
    /// A run-time boolean or number (`dt_opt_runtime`): no value means set (0),
    /// `yes`/`no`-style words, `""` unsets, otherwise a C integer.
    Toggle,
    /// A byte count with an optional `k`/`m`/`g`/`t` suffix (powers of 1024).
    Size,
    /// A time or rate in nanoseconds: suffixes `ns us ms s m h d` (and their long
    /// forms), or `hz` for a frequency.
    Time,
    /// One of a fixed set of words; `true` when compared without regard to case.
    Choice(&'static [&'static str], bool),
    /// Any non-empty text (paths, macro definitions).
    Text,
    /// A decimal count of at least `min` (`dt_opt_iregs`, `dt_opt_pgmax`, ...).
    Count { min: u64 },
    /// A D language version such as `2.0`.
    Version,
    /// A stability attribute triple `name/data/class` (`amin`).
    Attr,
    /// Accepted with or without a value, which is ignored (`lazyload`, `droptags`).
    Ignored,
    /// `unlimited` or a size (Oracle's `lockmem`).
    LockMem,
    /// An environment variable name without `=` (`unsetenv`).
    EnvName,
}

/// When an option may be set, as libdtrace's three option tables decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionClass {
    /// Compile-time (`_dtrace_ctoptions`): affects compilation only.
    Compile,
    /// Run-time (`_dtrace_rtoptions`): fixed once tracing starts.
    Runtime,
    /// Dynamic run-time (`_dtrace_drtoptions`): may also change while tracing, through
    /// the `setopt()` action.
    Dynamic,
}

/// One row of the option table.
#[derive(Debug, Clone, Copy)]
pub struct OptionDef {
    pub name: OptionName,
    pub text: &'static str,
    pub kind: OptionKind,
    pub class: OptionClass,
    pub help: &'static str,
}

impl OptionDef {
    /// Whether the `setopt()` action may change this option while tracing.
    pub fn runtime_settable(&self) -> bool {
        self.class == OptionClass::Dynamic
    }
}

// One macro keeps the enum and the table in step: a name cannot be added to one and
// forgotten in the other.
macro_rules! define_options {
    ($( $variant:ident = $text:literal, $kind:expr, $class:ident, $help:literal; )*) => {
        /// Every option name, as an enum so that consumers match exhaustively.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OptionName { $( #[doc = $help] $variant, )* }

        /// The option table, sorted by name.
        pub static OPTIONS: &[OptionDef] = &[
            $( OptionDef {
                name: OptionName::$variant,
                text: $text,
                kind: $kind,
                class: OptionClass::$class,
                help: $help,
            }, )*
        ];
    };
}

use OptionKind::*;

const BUFPOLICIES: &[&str] = &["ring", "fill", "switch"];
const BUFRESIZES: &[&str] = &["auto", "manual"];
const EVALTIMES: &[&str] = &["exec", "preinit", "postinit", "main"];
const LINKMODES: &[&str] = &["kernel", "primary", "dynamic", "static"];
const LINKTYPES: &[&str] = &["elf", "dof"];
const ENCODINGS: &[&str] = &["ascii", "utf8"];
const STACKFMTS: &[&str] = &["default", "folded"];
const OFORMATS: &[&str] = &["text", "json"];
const XLATEMODES: &[&str] = &["dynamic", "static"];
const STDCMODES: &[&str] = &["a", "c", "s", "t"];

define_options! {
    Agghist = "agghist", Toggle, Dynamic, "print aggregations as histograms";
    Aggpack = "aggpack", Toggle, Dynamic, "print aggregations packed horizontally";
    Aggpercpu = "aggpercpu", Switch, Compile, "keep aggregations per CPU";
    Aggrate = "aggrate", Time, Dynamic, "rate of aggregation reading";
    Aggsize = "aggsize", Size, Runtime, "aggregation buffer size";
    Aggsortkey = "aggsortkey", Toggle, Dynamic, "sort aggregations by key";
    Aggsortkeypos = "aggsortkeypos", Toggle, Dynamic, "position of the aggregation key to sort by";
    Aggsortpos = "aggsortpos", Toggle, Dynamic, "position of the aggregation to sort by";
    Aggsortrev = "aggsortrev", Toggle, Dynamic, "sort aggregations in reverse order";
    Aggzoom = "aggzoom", Toggle, Dynamic, "scale histogram bars to the largest bucket";
    Amin = "amin", Attr, Compile, "minimum stability attribute";
    Argref = "argref", Switch, Compile, "do not require all macro arguments to be used";
    Bpflog = "bpflog", Toggle, Runtime, "always print the BPF verifier log (Oracle)";
    Bpflogsize = "bpflogsize", Size, Runtime, "BPF verifier log size (Oracle)";
    Bufpolicy = "bufpolicy", Choice(BUFPOLICIES, false), Runtime, "buffering policy: ring, fill or switch";
    Bufresize = "bufresize", Choice(BUFRESIZES, false), Runtime, "buffer resizing policy: auto or manual";
    Bufsize = "bufsize", Size, Runtime, "principal buffer size";
    Cleanrate = "cleanrate", Time, Runtime, "dynamic variable cleaning rate";
    Core = "core", Switch, Compile, "dump core on exit (debugging)";
    Cpp = "cpp", Switch, Compile, "run the C preprocessor on script files";
    Cppargs = "cppargs", Text, Compile, "extra preprocessor arguments (Oracle)";
    Cpphdrs = "cpphdrs", Switch, Compile, "print included files when preprocessing";
    Cpppath = "cpppath", Text, Compile, "path of the C preprocessor";
    Cpu = "cpu", Toggle, Runtime, "CPU on which to enable tracing";
    Ctfpath = "ctfpath", Text, Compile, "path of the CTF archive (Oracle)";
    Ctypes = "ctypes", Text, Compile, "write C type definitions to a file";
    Debug = "debug", Switch, Compile, "print debugging messages";
    Debugassert = "debugassert", Text, Compile, "debugging assertions (Oracle)";
    Defaultargs = "defaultargs", Switch, Compile, "use 0 or \"\" for macro arguments not given";
    Define = "define", Text, Compile, "define a preprocessor symbol";
    Destructive = "destructive", Toggle, Runtime, "allow destructive actions";
    Disasm = "disasm", Toggle, Compile, "disassembler listing flags (Oracle)";
    Droptags = "droptags", Ignored, Compile, "tag drop messages with their kind";
    Dtypes = "dtypes", Text, Compile, "write D type definitions to a file";
    Dynvarsize = "dynvarsize", Size, Runtime, "dynamic variable space size";
    Empty = "empty", Switch, Compile, "permit an empty D program";
    Encoding = "encoding", Choice(ENCODINGS, false), Compile, "string encoding: ascii or utf8";
    Errtags = "errtags", Switch, Compile, "prefix compiler errors with their tags";
    Evaltime = "evaltime", Choice(EVALTIMES, false), Compile, "when to evaluate probe descriptions for -c";
    Flowindent = "flowindent", Toggle, Dynamic, "indent output by function entry and return";
    Grabanon = "grabanon", Toggle, Runtime, "claim anonymous tracing state";
    Incdir = "incdir", Text, Compile, "add a preprocessor include directory";
    Inprocess = "inprocess", Toggle, Runtime, "run pid probes inside the traced processes, the default (udtrace)";
    Iregs = "iregs", Count { min: 1 }, Compile, "number of integer registers";
    Jstackframes = "jstackframes", Toggle, Runtime, "default number of jstack() frames";
    Jstackstrsize = "jstackstrsize", Size, Runtime, "jstack() string space size";
    Kdefs = "kdefs", Switch, Compile, "require kernel symbols to be defined";
    Knodefs = "knodefs", Switch, Compile, "permit undefined kernel symbols";
    Late = "late", Choice(XLATEMODES, false), Compile, "translator mode: dynamic or static";
    Lazyload = "lazyload", Ignored, Compile, "load D libraries lazily";
    Ldpath = "ldpath", Text, Compile, "path of the link editor";
    Libdir = "libdir", Text, Compile, "add a D library directory";
    Linkmode = "linkmode", Choice(LINKMODES, false), Compile, "symbol link mode";
    Linknommap = "linknommap", Toggle, Compile, "link without mmap (Oracle)";
    Linktype = "linktype", Choice(LINKTYPES, true), Compile, "link output type: elf or dof";
    Lockmem = "lockmem", LockMem, Runtime, "locked memory limit (Oracle)";
    Maxframes = "maxframes", Toggle, Runtime, "maximum stack frames (Oracle)";
    Modpath = "modpath", Text, Compile, "kernel module path (Oracle)";
    Nodif = "nodif", Toggle, Runtime, "evaluate every clause in udtrace, none where probes fire (udtrace)";
    Nofollow = "nofollow", Toggle, Runtime, "trace only the named processes, not their children (udtrace)";
    Nolibs = "nolibs", Switch, Compile, "do not load D libraries";
    Noresolve = "noresolve", Toggle, Runtime, "do not resolve symbols (Oracle)";
    Nspec = "nspec", Toggle, Runtime, "number of speculations";
    Oformat = "oformat", Choice(OFORMATS, false), Runtime, "output format: text (dtrace's) or json, one object a line (FreeBSD)";
    Pcapsize = "pcapsize", Size, Runtime, "packet capture size (Oracle)";
    Pgmax = "pgmax", Count { min: 0 }, Compile, "maximum number of cached process handles";
    Preallocate = "preallocate", Size, Compile, "memory to preallocate (Oracle)";
    Printsize = "printsize", Size, Dynamic, "print() output size (Oracle)";
    Procfspath = "procfspath", Text, Compile, "path of /proc (Oracle)";
    Pspec = "pspec", Switch, Compile, "interpret ambiguous text as probe specifiers";
    Quiet = "quiet", Toggle, Dynamic, "output only explicitly traced data";
    Quietresize = "quietresize", Toggle, Dynamic, "do not report buffer resizing (Oracle)";
    Rawbytes = "rawbytes", Toggle, Dynamic, "print traced data as raw bytes";
    Scratchsize = "scratchsize", Size, Runtime, "scratch space size (Oracle)";
    Setenv = "setenv", Text, Compile, "set an environment variable for -c commands";
    Specsize = "specsize", Size, Runtime, "speculation buffer size";
    Stackfmt = "stackfmt", Choice(STACKFMTS, false), Runtime, "aggregations keyed by stacks: default, or folded for flame graphs (udtrace)";
    Stackframes = "stackframes", Toggle, Runtime, "default number of stack() frames";
    Stackindent = "stackindent", Toggle, Dynamic, "indentation of stack output";
    Statusrate = "statusrate", Time, Runtime, "rate of status checking";
    Stdc = "stdc", Choice(STDCMODES, false), Compile, "ISO C conformance of the preprocessor";
    Strip = "strip", Switch, Compile, "strip non-loadable sections from output";
    Strsize = "strsize", Size, Runtime, "maximum string size";
    Switchrate = "switchrate", Time, Dynamic, "rate of buffer switching";
    Syslibdir = "syslibdir", Text, Compile, "system D library directory";
    Sysslice = "sysslice", Text, Compile, "systemd slice of system services (Oracle)";
    Temporal = "temporal", Toggle, Runtime, "print trace records in time order";
    Timeline = "timeline", Text, Runtime, "write the firings as a Chrome/Perfetto trace-event timeline to a file (udtrace)";
    Tree = "tree", Count { min: 1 }, Compile, "print parse trees (debugging)";
    Tregs = "tregs", Count { min: 1 }, Compile, "number of tuple registers";
    Udefs = "udefs", Switch, Compile, "require user symbols to be defined";
    Undef = "undef", Text, Compile, "undefine a preprocessor symbol";
    Unodefs = "unodefs", Switch, Compile, "permit undefined user symbols";
    Unsetenv = "unsetenv", EnvName, Compile, "unset an environment variable for -c commands";
    Uprobes = "uprobes", Toggle, Runtime, "run pid probes as uprobes (BPF), not in the traced processes (udtrace)";
    Useruid = "useruid", Count { min: 0 }, Compile, "lowest uid of ordinary users (Oracle)";
    Ustackframes = "ustackframes", Toggle, Runtime, "default number of ustack() frames";
    Verbose = "verbose", Switch, Compile, "print intermediate code";
    Version = "version", OptionKind::Version, Compile, "D language version to compile for";
    Zdefs = "zdefs", Switch, Compile, "permit probe descriptions that match zero probes";
}

impl OptionName {
    pub fn def(self) -> &'static OptionDef {
        // The table is generated in enum order, so the discriminant is the index.
        &OPTIONS[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.def().text
    }

    /// Whether `setopt()` may change this option while tracing.
    pub fn runtime_settable(self) -> bool {
        self.def().runtime_settable()
    }
}

impl fmt::Display for OptionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Looks an option up by name (exact, case-sensitive, as `strcmp` in libdtrace).
pub fn lookup(name: &str) -> Option<&'static OptionDef> {
    OPTIONS.binary_search_by(|d| d.text.cmp(name)).ok().map(|i| &OPTIONS[i])
}

/// A parsed option value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionValue {
    /// A switch (or an ignored-value option) was given.
    Set,
    /// A toggle was turned off (`no`, `off`, `false`, `""`, ...): DTRACEOPT_UNSET.
    Unset,
    /// A number: toggles and counts as given, sizes in bytes, times in nanoseconds.
    Int(u64),
    /// A word, path, version or definition.
    Str(String),
}

/// libdtrace's option errors, worded as `dtrace_errmsg()` words them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("Invalid option name")]
    BadName { name: String },
    #[error("Invalid value for specified option")]
    BadValue { name: String, value: Option<String> },
    #[error("Version is not properly formatted or is too large")]
    VersionInvalid { name: String, value: String },
    #[error("Requested version is not supported by compiler")]
    VersionUndefined { name: String, value: String },
    /// strsize above UINT_MAX: libdtrace reports strerror(EOVERFLOW).
    #[error("Value too large for defined data type")]
    Overflow { name: String, value: String },
    /// EDT_NOREG: `iregs` below the 8 registers code is generated for.
    #[error("Insufficient registers to generate code")]
    NoRegisters { name: String, value: String },
    /// EDT_BADOPTCTX: a `#pragma D option` for an option only the command line sets.
    #[error("Option cannot be used from within a D program")]
    BadContext { name: String, value: Option<String> },
}

impl OptionError {
    pub fn name(&self) -> &str {
        match self {
            OptionError::BadName { name }
            | OptionError::BadValue { name, .. }
            | OptionError::VersionInvalid { name, .. }
            | OptionError::VersionUndefined { name, .. }
            | OptionError::Overflow { name, .. }
            | OptionError::NoRegisters { name, .. }
            | OptionError::BadContext { name, .. } => name,
        }
    }

    pub fn value(&self) -> Option<&str> {
        match self {
            OptionError::BadName { .. } => None,
            OptionError::BadValue { value, .. } | OptionError::BadContext { value, .. } => value.as_deref(),
            OptionError::VersionInvalid { value, .. }
            | OptionError::VersionUndefined { value, .. }
            | OptionError::Overflow { value, .. }
            | OptionError::NoRegisters { value, .. } => Some(value),
        }
    }

    /// dtrace(1M)'s wording for a bad `-x`: `failed to set -x NAME: MESSAGE`.
    pub fn x_flag_message(&self) -> String {
        format!("failed to set -x {}: {}", self.name(), self)
    }

    /// dt_pragma.c's wording for a bad `#pragma D option`.
    pub fn pragma_message(&self) -> String {
        match self.value() {
            None => format!("failed to set option '{}': {}", self.name(), self),
            Some(v) => format!("failed to set option '{}' to '{}': {}", self.name(), v, self),
        }
    }
}

/// Parses `name` and its optional value (the text after `=`) by the option's rules.
pub fn parse_option(name: &str, value: Option<&str>) -> Result<(OptionName, OptionValue), OptionError> {
    let def = lookup(name).ok_or_else(|| OptionError::BadName { name: name.to_string() })?;
    let bad = || OptionError::BadValue { name: name.to_string(), value: value.map(str::to_string) };
    let v = match def.kind {
        Switch => match value {
            None => OptionValue::Set,
            Some(_) => return Err(bad()),
        },
        Ignored => OptionValue::Set,
        Toggle => match value {
            None => OptionValue::Int(0),
            Some(s) => parse_toggle(s).ok_or_else(bad)?,
        },
        Size => match value {
            None => OptionValue::Int(0),
            Some(s) => OptionValue::Int(parse_size(s).ok_or_else(bad)?),
        },
        Time => match value {
            None => OptionValue::Int(0),
            Some(s) => OptionValue::Int(parse_time(s).ok_or_else(bad)?),
        },
        Choice(words, nocase) => {
            let s = value.ok_or_else(bad)?;
            let found = words.iter().find(|w| if nocase { w.eq_ignore_ascii_case(s) } else { **w == s });
            OptionValue::Str(found.ok_or_else(bad)?.to_string())
        }
        Text => match value {
            Some(s) if !s.is_empty() => OptionValue::Str(s.to_string()),
            _ => return Err(bad()),
        },
        EnvName => match value {
            Some(s) if !s.is_empty() && !s.contains('=') => OptionValue::Str(s.to_string()),
            _ => return Err(bad()),
        },
        Count { min } => {
            let n: u64 = value.and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            if n < min {
                return Err(bad());
            }
            OptionValue::Int(n)
        }
        OptionKind::Version => {
            let s = value.ok_or_else(bad)?;
            let v = parse_version(s)
                .ok_or_else(|| OptionError::VersionInvalid { name: name.to_string(), value: s.to_string() })?;
            if !DEFINED_VERSIONS.contains(&v) {
                return Err(OptionError::VersionUndefined { name: name.to_string(), value: s.to_string() });
            }
            OptionValue::Str(s.to_string())
        }
        Attr => {
            let s = value.ok_or_else(bad)?;
            if !valid_attr(s) {
                return Err(bad());
            }
            OptionValue::Str(s.to_string())
        }
        LockMem => match value {
            Some("unlimited") => OptionValue::Str("unlimited".to_string()),
            Some(s) => OptionValue::Int(parse_size(s).ok_or_else(bad)?),
            None => return Err(bad()),
        },
    };
    check_range(def.name, &v, name, value)?;
    Ok((def.name, v))
}

/// The limits libdtrace puts on some options' values beyond their syntax.
fn check_range(option: OptionName, v: &OptionValue, name: &str, value: Option<&str>) -> Result<(), OptionError> {
    let OptionValue::Int(n) = *v else { return Ok(()) };
    let text = || value.unwrap_or_default().to_string();
    match option {
        // A string must hold at least the 2-byte null-string marker.
        OptionName::Strsize if n < 2 => {
            Err(OptionError::BadValue { name: name.to_string(), value: value.map(str::to_string) })
        }
        OptionName::Strsize if n > u64::from(u32::MAX) => {
            Err(OptionError::Overflow { name: name.to_string(), value: text() })
        }
        // Code is generated for exactly 8 integer registers.
        OptionName::Iregs if n > 8 => {
            Err(OptionError::BadValue { name: name.to_string(), value: value.map(str::to_string) })
        }
        OptionName::Iregs if n < 8 => Err(OptionError::NoRegisters { name: name.to_string(), value: text() }),
        _ => Ok(()),
    }
}

/// Whether a D program may set the option with `#pragma D option`: those that
/// configure the preprocessor or the process (paths, locked memory) are for the
/// command line only, as in libdtrace.
pub fn settable_in_program(option: OptionName) -> bool {
    use OptionName as N;
    !matches!(
        option,
        N::Cppargs
            | N::Cpphdrs
            | N::Cpppath
            | N::Ctfpath
            | N::Define
            | N::Incdir
            | N::Ldpath
            | N::Lockmem
            | N::Modpath
            | N::Procfspath
            | N::Stdc
            | N::Undef
    )
}

/// Splits `name=value` as dtrace(1M) does for `-x` and dt_pragma.c for `#pragma D option`.
pub fn parse_assignment(text: &str) -> Result<(OptionName, OptionValue), OptionError> {
    match text.split_once('=') {
        Some((n, v)) => parse_option(n, Some(v)),
        None => parse_option(text, None),
    }
}

/// Parses an unsigned C integer as `strtoull(s, &end, 0)` does (decimal, `0x` hex or
/// leading-`0` octal) and returns it with the unparsed rest. `None` when no digit is
/// found or the value overflows (ERANGE).
fn c_ulong_prefix(s: &str) -> Option<(u64, &str)> {
    let t = s.strip_prefix('+').unwrap_or(s);
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if h.starts_with(|c: char| c.is_ascii_hexdigit()) {
            (16, h)
        } else {
            // "0x" with no hex digit: strtoull reads just the 0.
            return Some((0, &t[1..]));
        }
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    let end = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let n = u64::from_str_radix(&digits[..end], radix).ok()?;
    Some((n, &digits[end..]))
}

/// `dt_opt_runtime`: yes/no-style words (any case), `""` to unset, else a C integer
/// below 2^63.
fn parse_toggle(s: &str) -> Option<OptionValue> {
    const COUPLES: &[(&str, &str)] = &[
        ("yes", "no"),
        ("enable", "disable"),
        ("enabled", "disabled"),
        ("true", "false"),
        ("on", "off"),
        ("set", "unset"),
    ];
    if s.is_empty() {
        return Some(OptionValue::Unset);
    }
    for (pos, neg) in COUPLES {
        if pos.eq_ignore_ascii_case(s) {
            return Some(OptionValue::Int(1));
        }
        if neg.eq_ignore_ascii_case(s) {
            return Some(OptionValue::Unset);
        }
    }
    match c_ulong_prefix(s)? {
        (n, "") if n <= i64::MAX as u64 => Some(OptionValue::Int(n)),
        _ => None,
    }
}

/// `dt_optval_parse`: a C integer with an optional k/m/g/t suffix (either case),
/// multiplied by powers of 1024.
pub fn parse_size(s: &str) -> Option<u64> {
    let (body, mul): (&str, u64) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        't' | 'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    match c_ulong_prefix(body)? {
        (n, "") => n.checked_mul(mul).filter(|v| *v <= i64::MAX as u64),
        _ => None,
    }
}

const NANOSEC: u64 = 1_000_000_000;

/// `dt_opt_rate`: a C integer with an optional unit (any case). No unit means
/// nanoseconds; `hz` gives a frequency, converted to its period (0hz stays 0).
pub fn parse_time(s: &str) -> Option<u64> {
    const UNITS: &[(&str, u64)] = &[
        ("ns", 1),
        ("nsec", 1),
        ("us", 1_000),
        ("usec", 1_000),
        ("ms", 1_000_000),
        ("msec", 1_000_000),
        ("s", NANOSEC),
        ("sec", NANOSEC),
        ("m", 60 * NANOSEC),
        ("min", 60 * NANOSEC),
        ("h", 3600 * NANOSEC),
        ("hour", 3600 * NANOSEC),
        ("d", 86400 * NANOSEC),
        ("day", 86400 * NANOSEC),
    ];
    let (n, rest) = c_ulong_prefix(s)?;
    if n > i64::MAX as u64 {
        return None;
    }
    if rest.is_empty() {
        return Some(n);
    }
    if rest.eq_ignore_ascii_case("hz") {
        return Some(NANOSEC.checked_div(n).unwrap_or(0));
    }
    let (_, mul) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(rest))?;
    n.checked_mul(*mul).filter(|v| *v <= i64::MAX as u64)
}

/// The D versions libdtrace defines, as (major, minor, micro): DTrace for Linux's
/// (up to 1.6.4, then 2.0 and 2.0.1), and illumos's 1.7 to 1.13, which scripts
/// written for illumos may name.
const DEFINED_VERSIONS: &[(u32, u32, u32)] = &[
    (1, 0, 0),
    (1, 1, 0),
    (1, 2, 0),
    (1, 2, 1),
    (1, 2, 2),
    (1, 3, 0),
    (1, 4, 0),
    (1, 4, 1),
    (1, 5, 0),
    (1, 6, 0),
    (1, 6, 1),
    (1, 6, 2),
    (1, 6, 3),
    (1, 6, 4),
    (1, 7, 0),
    (1, 7, 1),
    (1, 8, 0),
    (1, 8, 1),
    (1, 9, 0),
    (1, 9, 1),
    (1, 10, 0),
    (1, 11, 0),
    (1, 12, 0),
    (1, 12, 1),
    (1, 13, 0),
    (2, 0, 0),
    (2, 0, 1),
];

/// The D version udtrace implements (DTrace for Linux's latest), and the text `-V`
/// prints after the program name.
pub const D_VERSION: (u32, u32, u32) = (2, 0, 1);
pub const D_VERSION_STRING: &str = "Oracle D 2.0";

/// The D version encoded as libdtrace's `DT_VERSION_NUMBER` (the value of the
/// preprocessor's `__SUNW_D_VERSION`).
pub fn version_number((major, minor, micro): (u32, u32, u32)) -> u32 {
    ((major & 0xff) << 24) | ((minor & 0xfff) << 12) | (micro & 0xfff)
}

/// `dt_version_str2num`: up to three dot-separated decimal numbers.
pub fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let mut n = [0u32; 3];
    let mut i = 0;
    for c in s.chars() {
        if let Some(d) = c.to_digit(10) {
            n[i] = n[i].checked_mul(10)?.checked_add(d)?;
        } else if c == '.' && i < 2 {
            i += 1;
        } else {
            return None;
        }
    }
    if n[0] > 0xff || n[1] > 0xfff || n[2] > 0xfff {
        return None;
    }
    Some((n[0], n[1], n[2]))
}

/// `dtrace_str2attr`: up to `name/data/class`, stability names then a class name.
pub fn valid_attr(s: &str) -> bool {
    const STABILITY: &[&str] =
        &["Internal", "Private", "Obsolete", "External", "Unstable", "Evolving", "Stable", "Standard"];
    const CLASS: &[&str] = &["Unknown", "CPU", "Platform", "Group", "ISA", "Common"];
    if s.is_empty() {
        return true;
    }
    let parts: Vec<&str> = s.split('/').collect();
    if parts.len() > 3 {
        return false;
    }
    parts.iter().enumerate().all(|(i, p)| {
        let names = if i < 2 { STABILITY } else { CLASS };
        names.iter().any(|n| n.eq_ignore_ascii_case(p))
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufPolicy {
    Ring,
    Fill,
    Switch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufResize {
    Auto,
    Manual,
}

/// When `-c` commands are stopped for probe descriptions to be evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalTime {
    Exec,
    Preinit,
    Postinit,
    Main,
}

/// A preprocessor argument from `-D`, `-U`, `-I`, their options or `cppargs`, kept
/// in order because cpp applies them in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CppArg {
    Define(String),
    Undef(String),
    Include(String),
    /// One word of `cppargs`, passed as it is.
    Raw(String),
}

/// Every setting, starting from the values dtrace(1M) runs with: libdtrace's and the
/// (Linux) DTrace kernel's defaults, plus the `bufsize=4m`, `aggsize=4m`,
/// `temporal=yes` that dtrace(1M) sets before reading its flags. Times are nanoseconds
/// and sizes bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub aggrate: u64,
    pub aggsize: u64,
    pub bufsize: u64,
    pub bufpolicy: BufPolicy,
    pub bufresize: BufResize,
    pub cleanrate: u64,
    /// `None`: every CPU.
    pub cpu: Option<u64>,
    pub destructive: bool,
    pub dynvarsize: u64,
    pub flowindent: bool,
    pub grabanon: bool,
    pub jstackframes: u64,
    pub jstackstrsize: u64,
    pub nspec: u64,
    pub quiet: bool,
    pub rawbytes: bool,
    /// Bytes of scratch space for alloca() as given; see [`scratch_room`].
    pub scratchsize: u64,
    pub specsize: u64,
    pub stackframes: u64,
    pub stackindent: u64,
    /// `-x stackfmt=folded`: aggregations print one line per entry, its stacks' frames
    /// root first joined by `;`, then the value (flame graph tools' input).
    pub folded: bool,
    /// `-x oformat=json`: records, aggregations, drops and errors as JSON objects,
    /// one a line (docs/json.md); `text` (the default) is dtrace's output.
    pub json: bool,
    pub statusrate: u64,
    pub strsize: u64,
    /// `print()`'s bytes: at most this many of the object are shown.
    pub printsize: u64,
    pub switchrate: u64,
    pub temporal: bool,
    pub ustackframes: u64,
    /// `maxframes` (Oracle): no stack has more frames, whatever its call asks.
    pub maxframes: Option<u64>,

    pub agghist: bool,
    pub aggpack: bool,
    pub aggpercpu: bool,
    pub aggsortkey: bool,
    pub aggsortkeypos: u64,
    pub aggsortpos: u64,
    pub aggsortrev: bool,
    pub aggzoom: bool,

    pub argref: bool,
    /// `tregs`: the tuple registers code is generated for; a tuple may have one
    /// element more.
    pub tregs: u64,
    /// D library directories: `syslibdir`, then `-L`/`libdir` ones in order.
    pub libdirs: Vec<String>,
    pub syslibdir: Option<String>,
    pub nolibs: bool,
    /// `core`: dump core at exit (debugging udtrace itself).
    pub core: bool,
    /// `debug`: print udtrace's debugging messages on stderr.
    pub debug: bool,
    pub cpp: bool,
    pub cpphdrs: bool,
    pub cpppath: Option<String>,
    /// `-D`, `-U`, `-I` and the define/undef/incdir options, in order.
    pub cpp_args: Vec<CppArg>,
    pub defaultargs: bool,
    pub empty: bool,
    pub errtags: bool,
    pub evaltime: EvalTime,
    pub stdc: String,
    pub verbose: bool,
    pub version: Option<String>,
    pub zdefs: bool,
    /// udtrace: follow only the named processes, not their children (DTrace's own
    /// behaviour).
    pub nofollow: bool,
    /// udtrace: no clause runs where its probes fire (docs/firing.md); every firing is
    /// a record the consumer evaluates, as before udtrace had programs.
    pub nodif: bool,
    /// udtrace: `-x inprocess` was given (pid probes run inside the traced processes,
    /// the default; with it, udtrace says which sites could not be patched).
    pub inprocess: bool,
    /// udtrace: pid probes are uprobes (BPF), not patched into the traced processes.
    pub uprobes: bool,
    /// udtrace: `-x timeline=FILE`, where every firing of the enabled probes is
    /// written as a trace event (docs/timeline.md).
    pub timeline: Option<String>,

    /// Options udtrace accepts but does not act on, with their last value.
    pub other: BTreeMap<OptionName, OptionValue>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            aggrate: NANOSEC,
            aggsize: 4 << 20,
            bufsize: 4 << 20,
            bufpolicy: BufPolicy::Switch,
            bufresize: BufResize::Auto,
            cleanrate: 9_900_990,
            cpu: None,
            destructive: false,
            dynvarsize: 1 << 20,
            flowindent: false,
            grabanon: false,
            jstackframes: 50,
            jstackstrsize: 512,
            nspec: 1,
            quiet: false,
            rawbytes: false,
            scratchsize: 256,
            specsize: 32 << 10,
            stackframes: 20,
            stackindent: 14,
            folded: false,
            json: false,
            statusrate: NANOSEC,
            strsize: 256,
            printsize: DEFAULT_PRINTSIZE,
            switchrate: NANOSEC,
            temporal: true,
            ustackframes: 100,
            maxframes: None,
            agghist: false,
            aggpack: false,
            aggpercpu: false,
            aggsortkey: false,
            aggsortkeypos: 0,
            aggsortpos: 0,
            aggsortrev: false,
            aggzoom: false,
            argref: false,
            tregs: 8,
            libdirs: Vec::new(),
            syslibdir: None,
            nolibs: false,
            core: false,
            debug: false,
            cpp: false,
            cpphdrs: false,
            cpppath: None,
            cpp_args: Vec::new(),
            defaultargs: false,
            empty: false,
            errtags: false,
            evaltime: EvalTime::Postinit,
            stdc: "a".to_string(),
            verbose: false,
            version: None,
            zdefs: false,
            nofollow: false,
            nodif: false,
            inprocess: false,
            uprobes: false,
            timeline: None,
            other: BTreeMap::new(),
        }
    }
}

/// The bytes a clause may allocate for a `scratchsize` option: libdtrace rounds the
/// option up to 8 bytes after adding the 8 bytes that stand for NULL, and takes them
/// off again.
pub fn scratch_room(scratchsize: u64) -> u64 {
    if scratchsize == 0 {
        return 0;
    }
    scratchsize.saturating_add(8).div_ceil(8).saturating_mul(8) - 8
}

impl Options {
    /// The D library directories in the order dtrace searches them.
    pub fn library_dirs(&self) -> Vec<String> {
        if self.nolibs {
            return Vec::new();
        }
        self.syslibdir.iter().chain(&self.libdirs).cloned().collect()
    }

    /// Parses and applies one option, as `-x name=value` or `#pragma D option`.
    pub fn set(&mut self, name: &str, value: Option<&str>) -> Result<OptionName, OptionError> {
        let (n, v) = parse_option(name, value)?;
        self.apply(n, v.clone());
        Ok(n)
    }

    /// Parses and applies one `#pragma D option`, refusing the options a D program
    /// may not set.
    pub fn set_from_program(&mut self, name: &str, value: Option<&str>) -> Result<OptionName, OptionError> {
        let (n, v) = parse_option(name, value)?;
        if !settable_in_program(n) {
            return Err(OptionError::BadContext { name: name.to_string(), value: value.map(str::to_string) });
        }
        self.apply(n, v.clone());
        Ok(n)
    }

    /// Applies an already parsed option.
    pub fn apply(&mut self, name: OptionName, value: OptionValue) {
        use OptionName as N;
        // A toggle is on unless explicitly unset; its number is 0 when given bare.
        let on = value != OptionValue::Unset;
        let int = match &value {
            OptionValue::Int(n) => Some(*n),
            _ => None,
        };
        let text = match &value {
            OptionValue::Str(s) => Some(s.clone()),
            _ => None,
        };
        // Numeric toggles fall back to their default when unset, as the kernel does
        // for DTRACEOPT_UNSET.
        let dflt = Options::default();
        match name {
            N::Aggrate => self.aggrate = int.unwrap_or(dflt.aggrate),
            N::Aggsize => self.aggsize = int.unwrap_or(dflt.aggsize),
            N::Bufsize => self.bufsize = int.unwrap_or(dflt.bufsize),
            N::Bufpolicy => {
                self.bufpolicy = match text.as_deref() {
                    Some("ring") => BufPolicy::Ring,
                    Some("fill") => BufPolicy::Fill,
                    _ => BufPolicy::Switch,
                }
            }
            N::Bufresize => {
                self.bufresize = match text.as_deref() {
                    Some("manual") => BufResize::Manual,
                    _ => BufResize::Auto,
                }
            }
            N::Cleanrate => self.cleanrate = int.unwrap_or(dflt.cleanrate),
            N::Cpu => self.cpu = int,
            N::Destructive => self.destructive = on,
            N::Dynvarsize => self.dynvarsize = int.unwrap_or(dflt.dynvarsize),
            N::Flowindent => self.flowindent = on,
            N::Grabanon => self.grabanon = on,
            N::Jstackframes => self.jstackframes = int.unwrap_or(dflt.jstackframes),
            N::Jstackstrsize => self.jstackstrsize = int.unwrap_or(dflt.jstackstrsize),
            N::Nspec => self.nspec = int.unwrap_or(dflt.nspec),
            N::Quiet => self.quiet = on,
            N::Rawbytes => self.rawbytes = on,
            N::Scratchsize => self.scratchsize = int.unwrap_or(dflt.scratchsize),
            N::Specsize => self.specsize = int.unwrap_or(dflt.specsize),
            N::Stackframes => self.stackframes = int.unwrap_or(dflt.stackframes),
            N::Stackindent => self.stackindent = int.unwrap_or(dflt.stackindent),
            N::Stackfmt => self.folded = text.as_deref() == Some("folded"),
            N::Oformat => self.json = text.as_deref() == Some("json"),
            N::Statusrate => self.statusrate = int.unwrap_or(dflt.statusrate),
            N::Strsize => self.strsize = int.unwrap_or(dflt.strsize),
            N::Printsize => self.printsize = printsize(int),
            N::Switchrate => self.switchrate = int.unwrap_or(dflt.switchrate),
            N::Temporal => self.temporal = on,
            N::Ustackframes => self.ustackframes = int.unwrap_or(dflt.ustackframes),
            N::Maxframes => self.maxframes = int,
            N::Agghist => self.agghist = on,
            N::Aggpack => self.aggpack = on,
            N::Aggpercpu => self.aggpercpu = true,
            N::Aggsortkey => self.aggsortkey = on,
            N::Aggsortkeypos => self.aggsortkeypos = int.unwrap_or(0),
            N::Aggsortpos => self.aggsortpos = int.unwrap_or(0),
            N::Aggsortrev => self.aggsortrev = on,
            N::Aggzoom => self.aggzoom = on,
            N::Argref => self.argref = true,
            N::Core => self.core = true,
            N::Tregs => self.tregs = int.unwrap_or(dflt.tregs),
            N::Libdir => self.libdirs.extend(text),
            N::Syslibdir => self.syslibdir = text,
            N::Nolibs => self.nolibs = true,
            N::Debug => self.debug = true,
            N::Cpp => self.cpp = true,
            N::Cpphdrs => self.cpphdrs = true,
            N::Cpppath => self.cpppath = text,
            N::Define => self.cpp_args.extend(text.map(CppArg::Define)),
            N::Undef => self.cpp_args.extend(text.map(CppArg::Undef)),
            N::Incdir => self.cpp_args.extend(text.map(CppArg::Include)),
            // Split at white space, as dt_opt_cpp_args does.
            N::Cppargs => {
                let words = text.unwrap_or_default();
                self.cpp_args.extend(
                    words
                        .split(['\x0c', '\n', '\r', '\t', '\x0b', ' '])
                        .filter(|w| !w.is_empty())
                        .map(|w| CppArg::Raw(w.to_string())),
                );
            }
            N::Defaultargs => self.defaultargs = true,
            N::Empty => self.empty = true,
            N::Errtags => self.errtags = true,
            N::Evaltime => {
                self.evaltime = match text.as_deref() {
                    Some("exec") => EvalTime::Exec,
                    Some("preinit") => EvalTime::Preinit,
                    Some("main") => EvalTime::Main,
                    _ => EvalTime::Postinit,
                }
            }
            N::Stdc => self.stdc = text.unwrap_or_else(|| "a".to_string()),
            N::Verbose => self.verbose = true,
            N::Version => self.version = text,
            N::Zdefs => self.zdefs = true,
            N::Nofollow => self.nofollow = on,
            N::Nodif => self.nodif = on,
            N::Inprocess => self.inprocess = on,
            N::Uprobes => self.uprobes = on,
            N::Timeline => self.timeline = text,
            _ => {
                self.other.insert(name, value);
            }
        }
    }
}

/// `print()`'s default byte limit.
pub const DEFAULT_PRINTSIZE: u64 = 8192;

/// dt_opt_printsize: a size in 1..=65536, rounded up to 8 bytes; anything else is the
/// default.
pub fn printsize(v: Option<u64>) -> u64 {
    match v {
        Some(n) if (1..=65536).contains(&n) => n.div_ceil(8) * 8,
        _ => DEFAULT_PRINTSIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_matches_enum() {
        for (i, d) in OPTIONS.iter().enumerate() {
            assert_eq!(d.name as usize, i, "{}", d.text);
            if i > 0 {
                assert!(OPTIONS[i - 1].text < d.text, "{} out of order", d.text);
            }
        }
        for n in [
            "aggpercpu",
            "aggrate",
            "aggsize",
            "aggsortkey",
            "aggsortkeypos",
            "aggsortpos",
            "aggsortrev",
            "bufpolicy",
            "bufresize",
            "bufsize",
            "cleanrate",
            "cpu",
            "defaultargs",
            "destructive",
            "dynvarsize",
            "flowindent",
            "grabanon",
            "jstackframes",
            "jstackstrsize",
            "nspec",
            "quiet",
            "rawbytes",
            "specsize",
            "stackframes",
            "stackindent",
            "statusrate",
            "strsize",
            "switchrate",
            "temporal",
            "ustackframes",
            "zdefs",
            "aggzoom",
            "evaltime",
            "version",
            "nofollow",
        ] {
            assert!(lookup(n).is_some(), "{n}");
        }
    }

    #[test]
    fn scratch_room_rounds_as_libdtrace() {
        assert_eq!(scratch_room(256), 256);
        assert_eq!(scratch_room(51), 56);
        assert_eq!(scratch_room(9), 16);
        assert_eq!(scratch_room(8), 8);
        assert_eq!(scratch_room(0), 0);
    }

    #[test]
    fn unknown_option() {
        let e = parse_option("foo", None).unwrap_err();
        assert_eq!(e.to_string(), "Invalid option name");
        assert_eq!(e.x_flag_message(), "failed to set -x foo: Invalid option name");
        assert_eq!(e.pragma_message(), "failed to set option 'foo': Invalid option name");
        // Names are case-sensitive, as in libdtrace.
        assert!(parse_option("Quiet", None).is_err());
    }

    #[test]
    fn bad_value_messages() {
        let e = parse_option("bufsize", Some("lots")).unwrap_err();
        assert_eq!(e.x_flag_message(), "failed to set -x bufsize: Invalid value for specified option");
        assert_eq!(e.pragma_message(), "failed to set option 'bufsize' to 'lots': Invalid value for specified option");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4m"), Some(4 << 20));
        assert_eq!(parse_size("4M"), Some(4 << 20));
        assert_eq!(parse_size("16k"), Some(16 << 10));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("1t"), Some(1 << 40));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("0x10"), Some(16));
        assert_eq!(parse_size("010"), Some(8));
        assert_eq!(parse_size("4mb"), None);
        assert_eq!(parse_size("m"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999t"), None);
        assert_eq!(parse_option("bufsize", Some("8m")).unwrap(), (OptionName::Bufsize, OptionValue::Int(8 << 20)));
    }

    #[test]
    fn times_and_rates() {
        assert_eq!(parse_time("10"), Some(10));
        assert_eq!(parse_time("10ns"), Some(10));
        assert_eq!(parse_time("5us"), Some(5_000));
        assert_eq!(parse_time("5USEC"), Some(5_000));
        assert_eq!(parse_time("250ms"), Some(250_000_000));
        assert_eq!(parse_time("2s"), Some(2 * NANOSEC));
        assert_eq!(parse_time("1min"), Some(60 * NANOSEC));
        assert_eq!(parse_time("1m"), Some(60 * NANOSEC));
        assert_eq!(parse_time("1h"), Some(3600 * NANOSEC));
        assert_eq!(parse_time("1day"), Some(86400 * NANOSEC));
        assert_eq!(parse_time("10hz"), Some(100_000_000));
        assert_eq!(parse_time("97Hz"), Some(NANOSEC / 97));
        assert_eq!(parse_time("0hz"), Some(0));
        assert_eq!(parse_time("5parsecs"), None);
        assert_eq!(parse_time("hz"), None);
    }

    #[test]
    fn toggles() {
        assert_eq!(parse_option("quiet", None).unwrap().1, OptionValue::Int(0));
        assert_eq!(parse_option("quiet", Some("yes")).unwrap().1, OptionValue::Int(1));
        assert_eq!(parse_option("quiet", Some("OFF")).unwrap().1, OptionValue::Unset);
        assert_eq!(parse_option("quiet", Some("")).unwrap().1, OptionValue::Unset);
        assert_eq!(parse_option("stackframes", Some("40")).unwrap().1, OptionValue::Int(40));
        assert!(parse_option("stackframes", Some("forty")).is_err());
        assert!(parse_option("stackframes", Some("-1")).is_err());
    }

    #[test]
    fn switches_take_no_value() {
        assert_eq!(parse_option("zdefs", None).unwrap(), (OptionName::Zdefs, OptionValue::Set));
        assert!(parse_option("zdefs", Some("1")).is_err());
        assert!(parse_option("defaultargs", Some("yes")).is_err());
    }

    #[test]
    fn choices_versions_counts() {
        assert_eq!(parse_option("bufpolicy", Some("ring")).unwrap().1, OptionValue::Str("ring".into()));
        assert!(parse_option("bufpolicy", Some("RING")).is_err());
        assert!(parse_option("bufpolicy", None).is_err());
        assert!(parse_option("linktype", Some("ELF")).is_ok());
        assert!(parse_option("evaltime", Some("main")).is_ok());
        assert!(parse_option("evaltime", Some("later")).is_err());
        assert!(parse_option("version", Some("1.13")).is_ok());
        assert!(parse_option("version", Some("1.2.1")).is_ok());
        assert!(parse_option("version", Some("2.0")).is_ok());
        assert_eq!(
            parse_option("version", Some("1.x")).unwrap_err().to_string(),
            "Version is not properly formatted or is too large"
        );
        assert_eq!(
            parse_option("version", Some("1.99")).unwrap_err().to_string(),
            "Requested version is not supported by compiler"
        );
        assert!(parse_option("iregs", Some("0")).is_err());
        assert!(parse_option("iregs", Some("8")).is_ok());
        assert!(parse_option("pgmax", Some("0")).is_ok());
        assert!(parse_option("amin", Some("Stable/Evolving/Common")).is_ok());
        assert!(parse_option("amin", Some("Rocksolid")).is_err());
        assert!(parse_option("unsetenv", Some("A=B")).is_err());
        assert!(parse_option("lockmem", Some("unlimited")).is_ok());
        assert_eq!(
            parse_option("strsize", Some("8g")).unwrap_err().to_string(),
            "Value too large for defined data type"
        );
    }

    #[test]
    fn runtime_settable() {
        assert!(OptionName::Quiet.runtime_settable());
        assert!(OptionName::Switchrate.runtime_settable());
        assert!(OptionName::Aggzoom.runtime_settable());
        assert!(!OptionName::Bufsize.runtime_settable());
        assert!(!OptionName::Zdefs.runtime_settable());
        assert!(!OptionName::Nofollow.runtime_settable());
    }

    #[test]
    fn options_defaults_and_set() {
        let mut o = Options::default();
        assert_eq!(o.bufsize, 4 << 20);
        assert_eq!(o.strsize, 256);
        assert_eq!(o.stackframes, 20);
        assert_eq!(o.ustackframes, 100);
        assert_eq!(o.switchrate, NANOSEC);
        assert_eq!(o.aggrate, NANOSEC);
        assert!(!o.quiet);
        o.set("quiet", None).unwrap();
        assert!(o.quiet);
        o.set("quiet", Some("no")).unwrap();
        assert!(!o.quiet);
        o.set("bufsize", Some("1m")).unwrap();
        assert_eq!(o.bufsize, 1 << 20);
        o.set("switchrate", Some("10hz")).unwrap();
        assert_eq!(o.switchrate, 100_000_000);
        o.set("nofollow", None).unwrap();
        assert!(o.nofollow);
        o.set("define", Some("X=1")).unwrap();
        o.set("undef", Some("Y")).unwrap();
        o.set("incdir", Some("/tmp")).unwrap();
        assert_eq!(
            o.cpp_args,
            vec![CppArg::Define("X=1".into()), CppArg::Undef("Y".into()), CppArg::Include("/tmp".into())]
        );
        o.set("lazyload", None).unwrap();
        assert_eq!(o.other.get(&OptionName::Lazyload), Some(&OptionValue::Set));
        assert!(o.set("bogus", None).is_err());
        assert_eq!(parse_assignment("bufsize=2k").unwrap(), (OptionName::Bufsize, OptionValue::Int(2048)));
    }

    #[test]
    fn version_number_encoding() {
        assert_eq!(version_number(D_VERSION), 0x0200_0001);
        assert_eq!(version_number((1, 13, 0)), 0x0100_d000);
        assert_eq!(parse_version("1.13"), Some((1, 13, 0)));
        assert_eq!(parse_version("1.2.3.4"), None);
    }
}
