//! What one run is asked to do, as the command line said it: the programs in order,
//! the processes to create or grab, the options.

use std::path::PathBuf;

use udtrace_lang::options::Options;

/// Which part of a probe description a `-P/-m/-f/-n` text fills when it names fewer
/// than four fields: `-f foo` means `:::foo:` ... e.g. `*:*:foo:*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Provider,
    Module,
    Function,
    Name,
}

/// One program on the command line, in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramSource {
    /// `-P`, `-m`, `-f`, `-n` or `-i`: a description, possibly followed by a
    /// predicate and actions, compiled as a probe specifier aligned as `align` says.
    /// `-i` is `-n` (dtrace compiles both as names): a number there is a probe id.
    Description { text: String, align: Align },
    /// `-s`: a D script file.
    Script(PathBuf),
}

/// One run: everything the session needs from the command line.
#[derive(Debug, Clone)]
pub struct Request {
    /// argv[0] as given: `$0` for programs that are not scripts.
    pub argv0: String,
    /// `-l`: list the matching probes instead of tracing.
    pub list: bool,
    /// `-P -m -f -n -i -s`, in order.
    pub programs: Vec<ProgramSource>,
    /// `-c` commands, unsplit (see [`split_command`]).
    pub commands: Vec<String>,
    /// `-p` process ids.
    pub pids: Vec<i32>,
    /// `-v`: report stability attributes and arguments.
    pub verbose: bool,
    /// `-o`: output file (dtrace appends to it).
    pub output: Option<PathBuf>,
    /// `-e`: exit after compiling.
    pub exit_after_compile: bool,
    /// Operands: the macro arguments `$1`, `$2`, ... .
    pub macro_args: Vec<String>,
    /// Every setting: `-x`, and the flags that are options in disguise (`-q` quiet,
    /// `-F` flowindent, `-w` destructive, `-b` bufsize, `-C` cpp, `-S` verbose,
    /// `-H` cpphdrs, `-Z` zdefs, `-D/-U/-I` cpp_args, `-X` stdc, `-L` libdir), applied
    /// in command-line order; `-l` implies `zdefs` as in dtrace.
    pub options: Options,
}

impl Request {
    /// The full argument vector a program sees (`$0` first): a script's `$0` is its
    /// path, other programs get argv[0], as in dtrace.
    pub fn macro_argv(&self, source: &ProgramSource) -> Vec<String> {
        let zero = match source {
            ProgramSource::Script(p) => p.to_string_lossy().into_owned(),
            _ => self.argv0.clone(),
        };
        std::iter::once(zero).chain(self.macro_args.iter().cloned()).collect()
    }
}

/// Splits a `-c` command into words at whitespace, as dtrace's `make_argv`: no
/// quoting, so an argument with spaces needs a wrapper script.
pub fn split_command(cmd: &str) -> Vec<String> {
    let words: Vec<String> =
        cmd.split(['\x0c', '\n', '\r', '\t', '\x0b', ' ']).filter(|w| !w.is_empty()).map(str::to_string).collect();
    if words.is_empty() {
        vec![cmd.to_string()]
    } else {
        words
    }
}
