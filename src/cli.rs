//! dtrace(1M)'s command line. One table of flags drives both parsing and `--help`.
//! Parsing is getopt-style like dtrace's: short flags cluster (`-qn 'BEGIN {}'`,
//! `-xquiet`), a flag's argument may be attached or the next word, and operands may
//! appear between flags; operands become the macro arguments `$1`, `$2`, ... .
//! Probe descriptions and scripts keep their command-line order.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use udtrace_lang::options::{self, CppArg, OptionName, Options, D_VERSION_STRING};
use udtrace_messages::{program, set_program, PROGRAM};
use udtrace_session::{Align, ProgramSource, Request};

/// Exit status for bad usage, as dtrace's `E_USAGE`.
pub const EXIT_USAGE: i32 = 2;

/// Whether udtrace implements a flag dtrace has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    Yes,
    /// Accepted by the parser but refused with this reason.
    No(&'static str),
}

/// One command-line flag.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub short: char,
    /// The argument's name in the usage text, if the flag takes one.
    pub arg: Option<&'static str>,
    /// Whether the flag names probes (listed on their own usage lines).
    pub probe: bool,
    pub help: &'static str,
    pub support: Support,
}

const fn flag(short: char, arg: Option<&'static str>, help: &'static str) -> Flag {
    Flag { short, arg, probe: false, help, support: Support::Yes }
}

const fn probe_flag(short: char, arg: &'static str, help: &'static str) -> Flag {
    Flag { short, arg: Some(arg), probe: true, help, support: Support::Yes }
}

const fn unsupported(short: char, arg: Option<&'static str>, why: &'static str) -> Flag {
    Flag { short, arg, probe: false, help: "", support: Support::No(why) }
}

/// Every flag dtrace(1M) accepts (its getopt string
/// `3:6:aAb:Bc:CD:ef:FGhHi:I:lL:m:n:o:p:P:qs:SU:vVwx:X:Z`), in its help order.
/// `-h` and `-G` are dtrace's: a header of provider definitions, the object a build
/// links (docs/usdt-header.md); help is `--help`.
pub static FLAGS: &[Flag] = &[
    // -32 and -64 reach getopt as `-3 2` and `-6 4`.
    unsupported('3', Some("2"), "32-bit D programs are not supported"),
    flag('6', Some("4"), "generate 64-bit D programs (the only kind)"),
    unsupported('a', None, "anonymous tracing is not supported"),
    unsupported('A', None, "anonymous tracing is not supported"),
    flag('b', Some("bufsz"), "set trace buffer size"),
    unsupported('B', None, "buffered output handlers are not supported"),
    flag('c', Some("cmd"), "run specified command and exit upon its completion"),
    flag('C', None, "run cpp(1) preprocessor on script files"),
    flag('D', Some("name[=def]"), "define symbol when invoking preprocessor"),
    flag('e', None, "exit after compiling request but prior to enabling probes"),
    probe_flag('f', "[[ provider: ] module: ] func", "enable or list probes matching the specified function name"),
    flag('F', None, "coalesce trace output by function"),
    flag('G', None, "generate the ELF file a build instrumented for DTrace links (empty)"),
    flag('h', None, "generate a header file with definitions for static probes"),
    flag('H', None, "print included files when invoking preprocessor"),
    probe_flag('i', "probe-id", "enable or list probes matching the specified probe id"),
    flag('I', Some("path"), "add include directory to preprocessor search path"),
    flag('l', None, "list probes matching specified criteria"),
    flag('L', Some("path"), "add library directory to library search path"),
    probe_flag('m', "[ provider: ] module", "enable or list probes matching the specified module name"),
    probe_flag(
        'n',
        "[[[ provider: ] module: ] func: ] name",
        "enable or list probes matching the specified probe name",
    ),
    flag('o', Some("output"), "set output file"),
    flag('p', Some("pid"), "grab specified process-ID and cache its symbol tables"),
    probe_flag('P', "provider", "enable or list probes matching the specified provider name"),
    flag('q', None, "set quiet mode (only output explicitly traced data)"),
    flag('s', Some("script"), "enable or list probes according to the specified D script"),
    flag('S', None, "print D compiler intermediate code"),
    flag('U', Some("name"), "undefine symbol when invoking preprocessor"),
    flag('v', None, "set verbose mode (report stability attributes, arguments)"),
    flag('V', None, "report DTrace API version"),
    flag('w', None, "permit destructive actions"),
    flag('x', Some("opt[=val]"), "enable or modify compiler and tracing options"),
    flag('X', Some("a|c|s|t"), "specify ISO C conformance settings for preprocessor"),
    flag('Z', None, "permit probe descriptions that match zero probes"),
];

fn find_flag(c: char) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.short == c)
}

/// What udtrace was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compile, enable and trace (dtrace's default; with `-e`, compile only).
    Exec,
    /// `-l`: list matching probes.
    List,
    /// `-V`.
    Version,
    /// `--help`.
    Help,
    /// `-h`: write a header of the programs' provider definitions.
    Header,
    /// `-G`: write the object a build instrumented for DTrace links.
    Link,
}

/// Everything the command line says: the mode, and the run it asks for (read through
/// `Deref`, so that parsing fills the request in place).
#[derive(Debug, Clone)]
pub struct Cli {
    pub mode: Mode,
    pub request: Request,
}

impl std::ops::Deref for Cli {
    type Target = Request;
    fn deref(&self) -> &Request {
        &self.request
    }
}

impl std::ops::DerefMut for Cli {
    fn deref_mut(&mut self) -> &mut Request {
        &mut self.request
    }
}

impl Cli {
    /// What the session is asked to do (`-V` and `--help` are answered before).
    pub fn request(self) -> Request {
        Request { list: self.mode == Mode::List, ..self.request }
    }
}

/// A command-line mistake: one message, then the usage text, exit status 2; or,
/// where dtrace reports the mistake with `fatal()`/`dfatal()` (an option that cannot
/// be set, a pid that is not a number), the message alone with exit status 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    /// Without the `udtrace: ` prefix; empty when only the usage is to be shown
    /// (dtrace run with no arguments).
    pub message: String,
    /// dtrace's `fatal()`: no usage text, exit status 1.
    pub fatal: bool,
}

/// Exit status of dtrace's `fatal()`/`dfatal()` (`E_ERROR`).
pub const EXIT_ERROR: i32 = 1;

impl UsageError {
    fn new(message: impl Into<String>) -> UsageError {
        UsageError { message: message.into(), fatal: false }
    }

    fn fatal(message: impl Into<String>) -> UsageError {
        UsageError { message: message.into(), fatal: true }
    }

    /// The text for stderr: the message line, then the synopsis (the whole usage,
    /// every flag's line included, when there is no message: dtrace run without
    /// arguments prints its `usage()`, which has them).
    pub fn report(&self) -> String {
        if self.message.is_empty() {
            help_text()
        } else if self.fatal {
            format!("{}: {}\n", program(), self.message)
        } else {
            format!("{}: {}\n{}", program(), self.message, synopsis_text())
        }
    }

    pub fn exit_code(&self) -> i32 {
        if self.fatal {
            EXIT_ERROR
        } else {
            EXIT_USAGE
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", program(), self.message)
    }
}

impl std::error::Error for UsageError {}

/// dtrace's `-V` line with our name: `udtrace: Oracle D 2.0`.
pub fn version_line() -> String {
    format!("{}: {D_VERSION_STRING}", program())
}

/// dtrace sorts its flag letters alphabetically, lower case before upper.
fn sorted_flags() -> Vec<&'static Flag> {
    let mut v: Vec<&Flag> =
        FLAGS.iter().filter(|f| f.support == Support::Yes && f.short.is_ascii_alphabetic()).collect();
    v.sort_by_key(|f| (f.short.to_ascii_lowercase(), f.short.is_ascii_uppercase()));
    v
}

/// The flags synopsis (`Usage: udtrace [-64] [-CeF...] [-b bufsz] ...`), printed
/// after a usage error; built from the flag table.
pub fn synopsis_text() -> String {
    let flags = sorted_flags();
    let bare: String = flags.iter().filter(|f| f.arg.is_none()).map(|f| f.short).collect();
    let mut groups = vec!["[-64]".to_string(), format!("[-{bare}]")];
    groups.extend(flags.iter().filter(|f| !f.probe).filter_map(|f| f.arg.map(|a| format!("[-{} {a}]", f.short))));
    // Wrap the synopsis as dtrace does: continuation lines start with a tab.
    let mut out = format!("Usage: {}", program());
    let mut width = out.len();
    for g in groups {
        if width + 1 + g.len() > 72 {
            out.push_str("\n\t");
            width = 8;
        } else {
            out.push(' ');
            width += 1;
        }
        out.push_str(&g);
        width += g.len();
    }
    out.push('\n');
    out
}

/// dtrace's usage text: the synopsis, the probe-naming flags and the clause grammar.
pub fn usage_text() -> String {
    let mut out = synopsis_text();
    out.push('\n');
    let predact = "[[ predicate ] action ]";
    for c in ['P', 'm', 'f', 'n', 'i'] {
        if let Some(f) = find_flag(c) {
            let arg = f.arg.unwrap_or_default();
            out.push_str(&format!("\t[-{c} {arg} {predact}]"));
            if c == 'i' {
                out.push_str(" [ args ... ]");
            }
            out.push('\n');
        }
    }
    out.push('\n');
    out.push_str("\tpredicate -> '/' D-expression '/'\n");
    out.push_str("\t   action -> '{' D-statements '}'\n");
    out
}

/// dtrace's whole `usage()`: the synopsis, the clause grammar and one line per flag.
/// `--help` prints it on stdout; udtrace run without arguments, on stderr.
pub fn help_text() -> String {
    let mut out = usage_text();
    out.push_str("\n\t-64 generate 64-bit D programs (the default)\n\n");
    for f in sorted_flags() {
        out.push_str(&format!("\t-{}  {}\n", f.short, f.help));
    }
    out
}

fn utf8(flag: char, v: OsString) -> Result<String, UsageError> {
    v.into_string().map_err(|v| UsageError::new(format!("-{flag} {}: not valid UTF-8", v.to_string_lossy())))
}

/// Sets options from `DTRACE_OPT_<NAME>` environment variables, as dtrace does
/// before it reads its flags (so flags override them). Bad values are ignored.
fn apply_env_options(options: &mut Options, env: impl IntoIterator<Item = (OsString, OsString)>) {
    for (k, v) in env {
        let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else { continue };
        let Some(name) = k.strip_prefix("DTRACE_OPT_") else { continue };
        let name = name.to_ascii_lowercase();
        if options::lookup(&name).is_some() && k == format!("DTRACE_OPT_{}", name.to_ascii_uppercase()) {
            let _ = options.set(&name, Some(v));
        }
    }
}

/// Parses the command line; `args` starts with argv[0]; `env` is the environment.
pub fn parse_args(
    args: impl IntoIterator<Item = OsString>,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Cli, UsageError> {
    let mut args = args.into_iter();
    let argv0 = args.next().map(|a| a.to_string_lossy().into_owned()).unwrap_or_else(|| PROGRAM.to_string());
    let rest: Vec<OsString> = args.collect();
    if rest.is_empty() {
        // dtrace with no arguments prints its usage and exits 2.
        return Err(UsageError::new(""));
    }

    let mut parser = lexopt::Parser::from_args(rest);
    // getopt keeps `=` in `-D=x`; lexopt would strip it.
    parser.set_short_equals(false);

    let mut cli = Cli {
        mode: Mode::Exec,
        request: Request {
            argv0,
            list: false,
            programs: Vec::new(),
            commands: Vec::new(),
            pids: Vec::new(),
            verbose: false,
            output: None,
            exit_after_compile: false,
            macro_args: Vec::new(),
            options: Options::default(),
        },
    };
    apply_env_options(&mut cli.options, env);
    let mut modes: Vec<char> = Vec::new();
    let mut help = false;

    // Sets an option as a flag would, reporting failures in dtrace's words
    // (`failed to set -b 4q: Invalid value for specified option`).
    let setopt = |o: &mut Options, flag: char, name: &str, value: Option<&str>| {
        o.set(name, value).map(|_| ()).map_err(|e| {
            let shown = match (flag, value) {
                ('x', _) => e.name().to_string(),
                (_, Some(v)) => v.to_string(),
                (_, None) => String::new(),
            };
            let what = if shown.is_empty() { format!("-{flag}") } else { format!("-{flag} {shown}") };
            UsageError::fatal(format!("failed to set {what}: {e}"))
        })
    };

    loop {
        let arg = match parser.next() {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(lexopt::Error::MissingValue { option }) => {
                let c = option.as_deref().and_then(|o| o.trim_start_matches('-').chars().next()).unwrap_or('?');
                return Err(UsageError::new(format!("option requires an argument -- {c}")));
            }
            Err(e) => return Err(UsageError::new(e.to_string())),
        };
        let c = match arg {
            lexopt::Arg::Value(v) => {
                let v = v
                    .into_string()
                    .map_err(|v| UsageError::new(format!("{}: not valid UTF-8", v.to_string_lossy())))?;
                cli.macro_args.push(v);
                continue;
            }
            lexopt::Arg::Long("help") => {
                help = true;
                continue;
            }
            lexopt::Arg::Long("version") => {
                modes.push('V');
                continue;
            }
            lexopt::Arg::Long(l) => {
                return Err(UsageError::new(format!("illegal option -- -{l}")));
            }
            lexopt::Arg::Short(c) => c,
        };
        let Some(f) = find_flag(c) else {
            return Err(UsageError::new(format!("illegal option -- {c}")));
        };
        let value = if f.arg.is_some() {
            let v = parser.value().map_err(|_| UsageError::new(format!("option requires an argument -- {c}")))?;
            Some(v)
        } else {
            None
        };
        // `-32` and `-64` are getopt's `-3 2` and `-6 4`; anything else after -3/-6
        // gets dtrace's own message.
        if let ('3' | '6', Some(v)) = (c, &value) {
            let want = if c == '3' { "2" } else { "4" };
            if v.as_os_str() != want {
                return Err(UsageError::new(format!("illegal option -- {c}{}", v.to_string_lossy())));
            }
        }
        if let Support::No(why) = f.support {
            let shown = match c {
                '3' => "-32".to_string(),
                _ => format!("-{c}"),
            };
            return Err(UsageError::new(format!("{shown}: {why}")));
        }
        match c {
            '6' => {}
            'P' | 'm' | 'f' | 'n' | 'i' => {
                let text = utf8(c, value.unwrap_or_default())?;
                let align = match c {
                    'P' => Align::Provider,
                    'm' => Align::Module,
                    'f' => Align::Function,
                    _ => Align::Name,
                };
                cli.programs.push(ProgramSource::Description { text, align });
            }
            's' => cli.programs.push(ProgramSource::Script(PathBuf::from(value.unwrap_or_default()))),
            'c' => cli.commands.push(utf8(c, value.unwrap_or_default())?),
            'p' => {
                let v = utf8(c, value.unwrap_or_default())?;
                // dtrace: strtol, `fatal("invalid pid: %s")` if that leaves text over;
                // any number is then grabbed, so `-p 0` fails as a missing process.
                let pid = v.parse::<i32>().map_err(|_| UsageError::fatal(format!("invalid pid: {v}")))?;
                cli.pids.push(pid);
            }
            'o' => cli.output = value.map(PathBuf::from),
            'x' => {
                let v = utf8(c, value.unwrap_or_default())?;
                let (name, val) = match v.split_once('=') {
                    Some((n, val)) => (n, Some(val)),
                    None => (v.as_str(), None),
                };
                setopt(&mut cli.options, 'x', name, val)?;
            }
            'b' => setopt(&mut cli.options, 'b', "bufsize", Some(&utf8(c, value.unwrap_or_default())?))?,
            'X' => setopt(&mut cli.options, 'X', "stdc", Some(&utf8(c, value.unwrap_or_default())?))?,
            'L' => setopt(&mut cli.options, 'L', "libdir", Some(&utf8(c, value.unwrap_or_default())?))?,
            'D' => cli.options.cpp_args.push(CppArg::Define(utf8(c, value.unwrap_or_default())?)),
            'U' => cli.options.cpp_args.push(CppArg::Undef(utf8(c, value.unwrap_or_default())?)),
            'I' => cli.options.cpp_args.push(CppArg::Include(utf8(c, value.unwrap_or_default())?)),
            'q' => cli.options.quiet = true,
            'F' => cli.options.flowindent = true,
            'w' => cli.options.destructive = true,
            'C' => cli.options.cpp = true,
            'H' => cli.options.cpphdrs = true,
            'S' => cli.options.verbose = true,
            'Z' => cli.options.zdefs = true,
            'e' => cli.exit_after_compile = true,
            'v' => cli.verbose = true,
            'l' | 'V' | 'h' | 'G' => modes.push(c),
            _ => unreachable!("flag -{c} is in the table but not handled"),
        }
    }

    // Help wins over everything, as help should; dtrace itself has no help flag.
    if help {
        cli.mode = Mode::Help;
        return Ok(cli);
    }
    if modes.len() > 1 {
        return Err(UsageError::new("only one of the [-GhlV] options can be specified at a time"));
    }
    match modes.first() {
        Some('l') => {
            cli.mode = Mode::List;
            // dtrace: -l implies -Z.
            cli.options.apply(OptionName::Zdefs, options::OptionValue::Set);
        }
        Some('V') => cli.mode = Mode::Version,
        Some('h') => cli.mode = Mode::Header,
        Some('G') => cli.mode = Mode::Link,
        _ => {}
    }
    Ok(cli)
}

/// For main: parses the process's arguments, prints help, the version or a usage
/// error and exits where dtrace would; otherwise returns the command line.
pub fn parse_or_exit() -> Cli {
    if let Some(argv0) = std::env::args_os().next() {
        set_program(&argv0);
    }
    match parse_args(std::env::args_os(), std::env::vars_os()) {
        Ok(cli) => match cli.mode {
            Mode::Help => {
                out!("{}", help_text());
                std::process::exit(0);
            }
            Mode::Version => {
                out!("{}\n", version_line());
                std::process::exit(0);
            }
            Mode::Exec | Mode::List | Mode::Header | Mode::Link => cli,
        },
        Err(e) => {
            {
                use std::io::Write as _;
                let _ = write!(std::io::stderr(), "{}", e.report());
            }
            std::process::exit(e.exit_code());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udtrace_lang::options::BufPolicy;
    use udtrace_session::split_command;

    fn parse(v: &[&str]) -> Result<Cli, UsageError> {
        parse_args(std::iter::once("udtrace").chain(v.iter().copied()).map(OsString::from), [])
    }

    fn desc(text: &str, align: Align) -> ProgramSource {
        ProgramSource::Description { text: text.to_string(), align }
    }

    #[test]
    fn clusters() {
        let c = parse(&["-qn", "BEGIN { exit(0); }"]).unwrap();
        assert!(c.options.quiet);
        assert_eq!(c.programs, vec![desc("BEGIN { exit(0); }", Align::Name)]);

        let c = parse(&["-qs", "x.d"]).unwrap();
        assert!(c.options.quiet);
        assert_eq!(c.programs, vec![ProgramSource::Script("x.d".into())]);

        let c = parse(&["-xquiet", "-xbufsize=1m", "-x", "switchrate=10hz", "-nBEGIN"]).unwrap();
        assert!(c.options.quiet);
        assert_eq!(c.options.bufsize, 1 << 20);
        assert_eq!(c.options.switchrate, 100_000_000);
        assert_eq!(c.programs, vec![desc("BEGIN", Align::Name)]);

        let c = parse(&["-CZwFqs", "y.d"]).unwrap();
        assert!(c.options.cpp && c.options.zdefs && c.options.destructive);
        assert!(c.options.flowindent && c.options.quiet);
    }

    #[test]
    fn program_order_is_kept() {
        let c =
            parse(&["-n", "BEGIN", "-s", "a.d", "-P", "proc", "-m", "libc", "-f", "malloc", "-i", "42", "-s", "b.d"])
                .unwrap();
        assert_eq!(
            c.programs,
            vec![
                desc("BEGIN", Align::Name),
                ProgramSource::Script("a.d".into()),
                desc("proc", Align::Provider),
                desc("libc", Align::Module),
                desc("malloc", Align::Function),
                desc("42", Align::Name),
                ProgramSource::Script("b.d".into()),
            ]
        );
    }

    #[test]
    fn macro_args_after_script() {
        // What `#!/usr/bin/env -S udtrace -s` produces.
        let c = parse(&["-s", "./trace.d", "1234", "foo"]).unwrap();
        assert_eq!(c.macro_args, vec!["1234", "foo"]);
        assert_eq!(c.macro_argv(&c.programs[0]), vec!["./trace.d", "1234", "foo"]);
        // `#!/usr/sbin/dtrace -qs` style: the flags arrive as one word.
        let c = parse(&["-qs", "./t.d", "a"]).unwrap();
        assert!(c.options.quiet);
        assert_eq!(c.macro_args, vec!["a"]);
        // Operands may sit between flags, as with dtrace's getopt loop.
        let c = parse(&["-n", "BEGIN{}", "x", "-q", "y"]).unwrap();
        assert!(c.options.quiet);
        assert_eq!(c.macro_args, vec!["x", "y"]);
        assert_eq!(c.macro_argv(&c.programs[0])[0], "udtrace");
        // After `--` everything is an operand, even `-5`.
        let c = parse(&["-s", "t.d", "--", "-5", "-q"]).unwrap();
        assert_eq!(c.macro_args, vec!["-5", "-q"]);
        assert!(!c.options.quiet);
    }

    #[test]
    fn processes() {
        let c = parse(&["-p", "123", "-p456", "-c", "ls -l /tmp", "-n", "BEGIN"]).unwrap();
        assert_eq!(c.pids, vec![123, 456]);
        assert_eq!(c.commands, vec!["ls -l /tmp"]);
        assert_eq!(split_command(&c.commands[0]), vec!["ls", "-l", "/tmp"]);
        for bad in ["abc", "12x", ""] {
            let e = parse(&["-p", bad]).unwrap_err();
            assert_eq!(e.message, format!("invalid pid: {bad}"));
            assert_eq!(e.exit_code(), 1);
            assert_eq!(e.report(), format!("udtrace: invalid pid: {bad}\n"));
        }
        // Numbers that name no process fail later, when udtrace grabs them.
        assert_eq!(parse(&["-p", "0"]).unwrap().pids, vec![0]);
        assert_eq!(parse(&["-p", "-3"]).unwrap().pids, vec![-3]);
    }

    #[test]
    fn bad_usage() {
        let e = parse(&["-k"]).unwrap_err();
        assert_eq!(e.to_string(), "udtrace: illegal option -- k");
        assert!(e.report().contains("Usage: udtrace"));
        assert_eq!(parse(&["-n"]).unwrap_err().message, "option requires an argument -- n");
        assert_eq!(parse(&["-qs"]).unwrap_err().message, "option requires an argument -- s");
        assert_eq!(parse(&["--frobnicate"]).unwrap_err().message, "illegal option -- -frobnicate");
        assert_eq!(parse(&[]).unwrap_err().message, "");
        assert!(parse(&[]).unwrap_err().report().starts_with("Usage: udtrace"));
        assert_eq!(
            parse(&["-l", "-V"]).unwrap_err().message,
            "only one of the [-GhlV] options can be specified at a time"
        );
        assert_eq!(parse(&["-A"]).unwrap_err().message, "-A: anonymous tracing is not supported");
        assert_eq!(parse(&["-32"]).unwrap_err().message, "-32: 32-bit D programs are not supported");
        assert_eq!(parse(&["-35"]).unwrap_err().message, "illegal option -- 35");
        assert!(parse(&["-64", "-n", "BEGIN"]).is_ok());
    }

    #[test]
    fn x_validation() {
        let e = parse(&["-x", "foo"]).unwrap_err();
        assert_eq!(e.message, "failed to set -x foo: Invalid option name");
        // dtrace's dfatal(): the message alone, exit status 1.
        assert_eq!(e.exit_code(), 1);
        assert!(!e.report().contains("Usage:"));
        assert_eq!(
            parse(&["-xbufsize=lots"]).unwrap_err().message,
            "failed to set -x bufsize: Invalid value for specified option"
        );
        assert_eq!(
            parse(&["-b", "4q"]).unwrap_err().message,
            "failed to set -b 4q: Invalid value for specified option"
        );
        assert_eq!(parse(&["-X", "z"]).unwrap_err().message, "failed to set -X z: Invalid value for specified option");
        let c = parse(&["-b", "16m", "-x", "bufpolicy=ring", "-xnofollow", "-n", "BEGIN"]).unwrap();
        assert_eq!(c.options.bufsize, 16 << 20);
        assert_eq!(c.options.bufpolicy, BufPolicy::Ring);
        assert!(c.options.nofollow);
    }

    #[test]
    fn preprocessor_flags_in_order() {
        let c = parse(&["-C", "-DX=1", "-I", "/inc", "-U", "Y", "-D", "Z", "-H", "-s", "a.d"]).unwrap();
        assert_eq!(
            c.options.cpp_args,
            vec![
                CppArg::Define("X=1".into()),
                CppArg::Include("/inc".into()),
                CppArg::Undef("Y".into()),
                CppArg::Define("Z".into()),
            ]
        );
        assert!(c.options.cpphdrs);
        // getopt keeps a leading '=' in an attached argument.
        let c = parse(&["-D=x", "-n", "BEGIN"]).unwrap();
        assert_eq!(c.options.cpp_args, vec![CppArg::Define("=x".into())]);
    }

    #[test]
    fn options_from_the_environment() {
        let env = |k: &str, v: &str| (OsString::from(k), OsString::from(v));
        let args = ["udtrace", "-n", "BEGIN"].map(OsString::from);
        let c = parse_args(
            args.clone(),
            [env("DTRACE_OPT_STRSIZE", "512"), env("DTRACE_OPT_BUFSIZE", "lots"), env("DTRACE_OPT_quiet", "")],
        )
        .unwrap();
        assert_eq!(c.options.strsize, 512);
        // A bad value is ignored; a name not in upper case is no option variable.
        assert_eq!(c.options.bufsize, Options::default().bufsize);
        assert!(!c.options.quiet);
        // The command line wins.
        let args = ["udtrace", "-xstrsize=64", "-n", "BEGIN"].map(OsString::from);
        assert_eq!(parse_args(args, [env("DTRACE_OPT_STRSIZE", "512")]).unwrap().options.strsize, 64);
    }

    #[test]
    fn modes() {
        assert_eq!(parse(&["-V"]).unwrap().mode, Mode::Version);
        assert_eq!(parse(&["-h", "-s", "p.d"]).unwrap().mode, Mode::Header);
        assert_eq!(parse(&["-G", "-s", "p.d", "a.o"]).unwrap().mode, Mode::Link);
        assert_eq!(parse(&["--help"]).unwrap().mode, Mode::Help);
        assert_eq!(parse(&["-h", "--help"]).unwrap().mode, Mode::Help);
        assert_eq!(
            parse(&["-h", "-G", "-s", "p.d"]).unwrap_err().message,
            "only one of the [-GhlV] options can be specified at a time"
        );
        let c = parse(&["-l", "-P", "proc"]).unwrap();
        assert_eq!(c.mode, Mode::List);
        assert!(c.options.zdefs);
        let c = parse(&["-e", "-v", "-o", "out.txt", "-S", "-n", "BEGIN"]).unwrap();
        assert!(c.exit_after_compile && c.verbose && c.options.verbose);
        assert_eq!(c.output, Some(PathBuf::from("out.txt")));
        assert_eq!(version_line(), "udtrace: Oracle D 2.0");
    }

    #[test]
    fn help_comes_from_the_table() {
        let h = help_text();
        for f in FLAGS.iter().filter(|f| f.support == Support::Yes && f.short.is_ascii_alphabetic()) {
            assert!(h.contains(&format!("\t-{}  {}\n", f.short, f.help)), "-{}", f.short);
        }
        assert!(!h.contains("-A  "));
        let u = usage_text();
        assert!(u.starts_with("Usage: udtrace [-64] [-CeFGhHlqSvVwZ] [-b bufsz]"), "{u}");
        assert!(u.contains("\t[-n [[[ provider: ] module: ] func: ] name [[ predicate ] action ]]\n"));
        assert!(u.contains("\t[-i probe-id [[ predicate ] action ]] [ args ... ]\n"));
    }
}
