//! `-C`: runs a script through the system C preprocessor as dtrace does, with the
//! macros DTrace for Linux predefines (`__linux`, `__unix`, `__SVR4`, `__SUNW_D=1`,
//! `__SUNW_D_64`, `__Linux`, `__amd64`, `__SUNW_D_VERSION`, and `__GNUC__` removed)
//! plus `__udtrace`, then the `-D/-U/-I` and `cppargs` arguments in command-line
//! order. cpp reads the script as `/dev/stdin` and writes its messages (and the `-H`
//! list of included files) straight to our stderr, as under dtrace. Line markers are
//! kept: the parser maps them back to the script's own lines.

use std::fmt;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use udtrace_lang::options::{self, CppArg, Options};
use udtrace_messages::debug;

/// The preprocessed text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preprocessed {
    pub text: String,
}

/// Why preprocessing failed; `Display` is libdtrace's message for the case (cpp has
/// said why on stderr already).
#[derive(Debug)]
pub enum PreprocessError {
    /// EDT_CPPENT.
    NotFound,
    /// EDT_CPPEXEC.
    Exec,
    /// EDT_CPPERR: cpp ran and failed.
    Failed,
}

impl fmt::Display for PreprocessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreprocessError::NotFound => f.write_str("Preprocessor not found"),
            PreprocessError::Exec => f.write_str("Failed to exec preprocessor"),
            PreprocessError::Failed => f.write_str("Preprocessor failed to process input program"),
        }
    }
}

impl std::error::Error for PreprocessError {}

/// The macros predefined before the user's `-D/-U` (which may therefore undo them).
pub fn predefines() -> Vec<String> {
    let mut v: Vec<String> = [
        "-D__linux",
        "-D__unix",
        "-D__SVR4",
        "-D__SUNW_D=1",
        // D is not GNU C: headers must not take GCC-only paths.
        "-U__GNUC__",
        "-D__SUNW_D_64",
        // DTrace defines `__` + uname's sysname.
        "-D__Linux",
        "-D__udtrace",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if cfg!(target_arch = "x86_64") {
        v.push("-D__amd64".to_string());
    }
    v
}

/// The arguments after the preprocessor's name.
pub fn cpp_args(options: &Options) -> Vec<String> {
    let mut v = predefines();
    for a in &options.cpp_args {
        v.push(match a {
            CppArg::Define(d) => format!("-D{d}"),
            CppArg::Undef(u) => format!("-U{u}"),
            CppArg::Include(i) => format!("-I{i}"),
            CppArg::Raw(w) => w.clone(),
        });
    }
    // `-x version=` lowers the version the program sees, as dt_reduce does.
    let version = options.version.as_deref().and_then(options::parse_version).unwrap_or(options::D_VERSION);
    v.push(format!("-D__SUNW_D_VERSION=0x{:08x}", options::version_number(version)));
    // DTrace for Linux maps -Xa to C99 and -Xs to traditional cpp; -Xc/-Xt add nothing.
    match options.stdc.as_str() {
        "a" => v.push("-std=c99".to_string()),
        "s" => v.push("-traditional-cpp".to_string()),
        _ => {}
    }
    if options.cpphdrs {
        v.push("-H".to_string());
    }
    v.push("/dev/stdin".to_string());
    v
}

/// Runs `source` (a script's text) through cpp.
pub fn preprocess(source: &str, options: &Options) -> Result<Preprocessed, PreprocessError> {
    // cpp would choke on `#!`: blank that line but keep its newline so that line
    // numbers stay right, as dtrace does.
    let body = match source.strip_prefix("#!") {
        Some(rest) => match rest.find('\n') {
            Some(nl) => &rest[nl..],
            None => "",
        },
        None => source,
    };
    let args = cpp_args(options);

    // An explicit cpppath is used alone; otherwise cpp, then gcc's preprocessor.
    let candidates: Vec<(String, Vec<String>)> = match &options.cpppath {
        Some(p) => vec![(p.clone(), vec![])],
        None => vec![("cpp".to_string(), vec![]), ("gcc".to_string(), vec!["-E".into(), "-x".into(), "c".into()])],
    };
    for (cpp, pre) in candidates {
        match run(&cpp, &pre, &args, body) {
            Err(PreprocessError::NotFound) => continue,
            other => return other,
        }
    }
    Err(PreprocessError::NotFound)
}

fn run(cpp: &str, pre: &[String], args: &[String], input: &str) -> Result<Preprocessed, PreprocessError> {
    // dtrace runs the preprocessor under its base name (`cat: invalid option`).
    let name = Path::new(cpp).file_name().map_or_else(|| cpp.to_string(), |n| n.to_string_lossy().into_owned());
    debug!("running {cpp} {} {}", pre.join(" "), args.join(" "));
    let mut child = Command::new(cpp)
        .arg0(name)
        .args(pre)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| {
            if error.kind() == std::io::ErrorKind::NotFound {
                PreprocessError::NotFound
            } else {
                PreprocessError::Exec
            }
        })?;
    // Feed stdin from another thread: cpp may fill its stdout pipe before it has
    // read all its input.
    let mut stdin = child.stdin.take();
    let data = input.as_bytes().to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            // A cpp that exits early closes the pipe; its status tells the story.
            let _ = s.write_all(&data);
        }
    });
    let out = child.wait_with_output().map_err(|_| PreprocessError::Exec)?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(PreprocessError::Failed);
    }
    Ok(Preprocessed { text: String::from_utf8_lossy(&out.stdout).into_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("udtrace-cpp-{tag}-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The non-marker, non-blank lines of cpp output.
    fn code(p: &Preprocessed) -> Vec<String> {
        p.text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(|l| l.trim().to_string()).collect()
    }

    #[test]
    fn defines_includes_and_markers() {
        let dir = TempDir::new("inc");
        std::fs::write(dir.0.join("limits.h"), "#define LIMIT 42\n").unwrap();
        let src = "#!/usr/bin/env -S udtrace -Cs\n#include \"limits.h\"\n#define TWICE(x) ((x) * 2)\nBEGIN { trace(TWICE(LIMIT)); }\n";
        // As under dtrace, cpp reads /dev/stdin: a quoted include is found through -I.
        let o = Options { cpp_args: vec![CppArg::Include(dir.0.to_string_lossy().into_owned())], ..Options::default() };
        let p = preprocess(src, &o).unwrap();
        assert_eq!(code(&p), vec!["BEGIN { trace(((42) * 2)); }"]);
        // A marker names the script's stand-in and says the clause is on its line 4.
        let name = "/dev/stdin";
        let lines: Vec<&str> = p.text.lines().collect();
        let clause = lines.iter().position(|l| l.starts_with("BEGIN")).unwrap();
        let marker = lines[..clause].iter().rev().find(|l| l.starts_with("# ")).unwrap();
        let mut line: usize = marker.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(marker.contains(name), "{marker}");
        // Count the lines between that marker and the clause.
        let mpos = lines[..clause].iter().rposition(|l| l.starts_with("# ")).unwrap();
        line += clause - mpos - 1;
        assert_eq!(line, 4);
        assert!(p.text.contains("limits.h"));
    }

    #[test]
    fn predefined_macros() {
        let src = "\
#if defined(__linux) && defined(__unix) && defined(__SVR4) && __SUNW_D == 1 && defined(__udtrace)
linux_ok
#endif
#ifndef __GNUC__
no_gnuc
#endif
#if __SUNW_D_VERSION == 0x02000001
version_ok
#endif
#ifdef __SUNW_D_64
lp64
#endif
";
        let p = preprocess(src, &Options::default()).unwrap();
        assert_eq!(code(&p), vec!["linux_ok", "no_gnuc", "version_ok", "lp64"]);

        let mut o = Options::default();
        o.set("version", Some("1.6.1")).unwrap();
        let p = preprocess("__SUNW_D_VERSION\n", &o).unwrap();
        assert_eq!(code(&p), vec!["0x01006001"]);
    }

    #[test]
    fn user_arguments_in_order() {
        let o = Options {
            cpp_args: vec![
                CppArg::Define("A=1".into()),
                CppArg::Undef("A".into()),
                CppArg::Define("B=2".into()),
                CppArg::Undef("__linux".into()),
            ],
            ..Options::default()
        };
        let src = "\
#ifdef A
a
#endif
B
#ifndef __linux
nolinux
#endif
";
        let p = preprocess(src, &o).unwrap();
        assert_eq!(code(&p), vec!["2", "nolinux"]);
        let args = cpp_args(&o);
        let d = args.iter().position(|a| a == "-DA=1").unwrap();
        let u = args.iter().position(|a| a == "-UA").unwrap();
        assert!(d < u);
        // The user's -U__linux comes after the predefinition so that it wins.
        let pre = args.iter().position(|a| a == "-D__linux").unwrap();
        let un = args.iter().position(|a| a == "-U__linux").unwrap();
        assert!(pre < un);
    }

    #[test]
    fn include_path_flag() {
        let dir = TempDir::new("ipath");
        std::fs::write(dir.0.join("probes.h"), "#define FN malloc\n").unwrap();
        let o = Options { cpp_args: vec![CppArg::Include(dir.0.to_string_lossy().into_owned())], ..Options::default() };
        let p = preprocess("#include <probes.h>\npid$target::FN:entry {}\n", &o).unwrap();
        assert_eq!(code(&p), vec!["pid$target::malloc:entry {}"]);
    }

    #[test]
    fn cpp_errors_are_returned() {
        let e = preprocess("#error no way\n", &Options::default()).unwrap_err();
        assert_eq!(e.to_string(), "Preprocessor failed to process input program");
        let o = Options { cpppath: Some("/nonexistent/cpp".into()), ..Options::default() };
        let e = preprocess("x\n", &o).unwrap_err();
        assert_eq!(e.to_string(), "Preprocessor not found");
    }

    #[test]
    fn cppargs_are_split_into_words() {
        let mut o = Options::default();
        o.set("cppargs", Some(" -DA=1\t-DB=2 ")).unwrap();
        let p = preprocess("A B\n", &o).unwrap();
        assert_eq!(code(&p), vec!["1 2"]);
    }
}
