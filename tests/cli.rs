//! The command line, end to end: flags, program order, options, preprocessing, macro
//! arguments, interpreter scripts, exit statuses. Expected texts are dtrace(1M)'s
//! (usr/src/cmd/dtrace/dtrace.c) with our program name.

mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use util::{run, run_args, udtrace, TempDir};

/// DTrace's version line (`dtrace -V`): the D language version, under our name.
const VERSION: &str = "udtrace: Oracle D 2.0\n";

#[test]
fn clustered_q_and_n() {
    let out = run_args(&["-qn", "BEGIN { printf(\"a\\n\"); exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    // Quiet: no header, no "matched" notice; dtrace ends with one newline of its own.
    assert_eq!(out.stdout, "a\n\n");
    assert_eq!(out.stderr, "");
}

#[test]
fn clustered_q_and_s() {
    let dir = TempDir::new("cli-qs");
    let s = dir.write("a.d", "BEGIN\n{\n    printf(\"from script\\n\");\n    exit(0);\n}\n");
    let out = run_args(&[Path::new("-qs"), s.as_path()]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "from script\n\n");
    assert_eq!(out.stderr, "");
}

/// Programs run in command-line order whatever their kind: BEGIN clauses fire in the
/// order their `-n`/`-s` appear.
#[test]
fn mixed_n_and_s_keep_their_order() {
    let dir = TempDir::new("cli-order");
    let s = dir.write("s.d", "BEGIN { printf(\"s\\n\"); }\n");
    let s = s.to_str().unwrap();
    let out =
        run_args(&["-q", "-n", "BEGIN { printf(\"n1\\n\"); }", "-s", s, "-n", "BEGIN { printf(\"n2\\n\"); exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "n1\ns\nn2\n\n");
    let out = run_args(&["-q", "-s", s, "-n", "BEGIN { printf(\"n1\\n\"); exit(0); }"]);
    assert_eq!(out.stdout, "s\nn1\n\n");
}

/// Without -q, dtrace reports each program's matches on stderr in order, each named
/// by its text cut at the first `{`, `/` or `;`.
#[test]
fn matched_notices() {
    let dir = TempDir::new("cli-notices");
    let s = dir.write("t.d", "BEGIN, END { }\n");
    let s = s.to_str().unwrap();
    let out = run_args(&["-n", "BEGIN /1/ { exit(0); }", "-s", s]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stderr,
        format!("udtrace: description 'BEGIN ' matched 1 probe\nudtrace: script '{s}' matched 2 probes\n")
    );
    assert!(out.stdout.starts_with("CPU     ID                    FUNCTION:NAME\n"), "{}", out.stdout);
}

/// dtrace's `dfatal("failed to set -x %s")`: the message alone, exit status 1.
#[test]
fn unknown_x_option() {
    let out = run_args(&["-x", "unknownopt", "-n", "BEGIN"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: failed to set -x unknownopt: Invalid option name\n");
    let out = run_args(&["-xbufsize=lots", "-n", "BEGIN"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: failed to set -x bufsize: Invalid value for specified option\n");
}

#[test]
fn x_quiet_is_q() {
    let prog = "BEGIN { printf(\"a\\n\"); exit(0); }";
    let loud = run_args(&["-n", prog]);
    assert_eq!(loud.status, 0);
    assert!(loud.stdout.starts_with("CPU "), "{}", loud.stdout);
    assert!(loud.stderr.contains("matched 1 probe"));
    let quiet = run_args(&["-x", "quiet", "-n", prog]);
    assert_eq!(quiet.status, 0, "{}", quiet.stderr);
    assert_eq!(quiet.stdout, "a\n\n");
    assert_eq!(quiet.stderr, "");
}

#[test]
fn e_compiles_without_running() {
    let out = run_args(&["-e", "-n", "BEGIN { printf(\"ran\\n\"); exit(3); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    // dtrace -e reports no matches: exec_prog() only counts them.
    assert_eq!(out.stderr, "");
    // It still compiles: errors are errors.
    let out = run_args(&["-e", "-n", "BEGIN { x = ; }"]);
    assert_eq!(out.status, 1);
}

#[test]
fn exit_value_is_the_status() {
    let out = run_args(&["-qn", "BEGIN { exit(3); }"]);
    assert_eq!(out.status, 3);
}

#[test]
fn version() {
    let out = run_args(&["-V"]);
    assert_eq!(out.status, 0);
    assert_eq!(out.stdout, VERSION);
    assert_eq!(out.stderr, "");
}

/// `--help`: the usage and one line per flag, on stdout. (`-h` is dtrace's header
/// generation: tests/usdt_header.rs.)
#[test]
fn help() {
    let out = run_args(&["--help"]);
    assert_eq!(out.status, 0);
    assert!(out.stdout.starts_with("Usage: udtrace "), "{}", out.stdout);
    assert!(out.stdout.contains("\tpredicate -> '/' D-expression '/'\n"));
    assert!(out.stdout.contains("\t-q  set quiet mode (only output explicitly traced data)\n"));
    assert!(out.stdout.contains("\t-h  generate a header file with definitions for static probes\n"));
}

/// dtrace with no arguments prints its usage on stderr and exits with E_USAGE.
#[test]
fn no_arguments() {
    let out = run_args::<&str>(&[]);
    assert_eq!(out.status, 2);
    assert_eq!(out.stdout, "");
    assert!(out.stderr.starts_with("Usage: udtrace "), "{}", out.stderr);
    assert!(out.stderr.contains("\t[-n [[[ provider: ] module: ] func: ] name [[ predicate ] action ]]\n"));
    // dtrace's usage() lists every flag, -h and -G with their dtrace meaning.
    assert!(out.stderr.contains("\t-h  generate a header file with definitions for static probes\n"));
    assert!(out.stderr.contains("\t-G  generate the ELF file a build instrumented for DTrace links (empty)\n"));
    assert_eq!(out.stderr, run_args(&["--help"]).stdout, "the same text as --help");
}

/// getopt's complaint, then the usage, exit status 2.
#[test]
fn bad_flags() {
    let out = run_args(&["-k", "-n", "BEGIN"]);
    assert_eq!(out.status, 2);
    let mut lines = out.stderr.lines();
    assert_eq!(lines.next(), Some("udtrace: illegal option -- k"));
    assert!(lines.next().is_some_and(|l| l.starts_with("Usage: udtrace ")), "{}", out.stderr);

    let out = run_args(&["-n"]);
    assert_eq!(out.status, 2);
    assert_eq!(out.first_err_line(), "udtrace: option requires an argument -- n");

    let out = run_args(&["-l", "-V"]);
    assert_eq!(out.status, 2);
    assert_eq!(out.first_err_line(), "udtrace: only one of the [-GhlV] options can be specified at a time");
}

/// `-p` takes a number (dtrace: `fatal("invalid pid: %s")`); a number that is no
/// live process fails when it is grabbed.
#[test]
fn bad_pids() {
    let out = run_args(&["-p", "abc", "-n", "BEGIN"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: invalid pid: abc\n");
    let out = run_args(&["-p", "0", "-n", "BEGIN"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: No such process\n");
}

/// `-o` appends (dtrace opens it with "a") and leaves stdout empty.
#[test]
fn output_file() {
    let dir = TempDir::new("cli-o");
    let file = dir.path().join("out.txt");
    let file_s = file.to_str().unwrap();
    for _ in 0..2 {
        let out = run_args(&["-q", "-o", file_s, "-n", "BEGIN { printf(\"to file\\n\"); exit(0); }"]);
        assert_eq!(out.status, 0, "{}", out.stderr);
        assert_eq!(out.stdout, "");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "to file\n\nto file\n\n");
    let out = run_args(&["-q", "-o", "/nonexistent/dir/out.txt", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: failed to open output file '/nonexistent/dir/out.txt': No such file or directory\n"
    );
}

/// -C runs the preprocessor with -D and -I; without -C a `#include` is an error.
#[test]
fn preprocessor() {
    let dir = TempDir::new("cli-cpp");
    dir.write("inc/defs.h", "#define GREETING \"hello\"\n");
    let s = dir
        .write("cpp.d", "#include \"defs.h\"\n\nBEGIN\n{\n    printf(\"%s %d\\n\", GREETING, VAL);\n    exit(0);\n}\n");
    let inc = dir.path().join("inc");
    let mut cmd = udtrace(&[
        Path::new("-q"),
        Path::new("-C"),
        Path::new("-D"),
        Path::new("VAL=42"),
        Path::new("-I"),
        &inc,
        Path::new("-s"),
        &s,
    ]);
    let out = run(&mut cmd);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "hello 42\n\n");

    // Not preprocessed: `#include` is no D control directive.
    let out = run_args(&[Path::new("-q"), Path::new("-s"), s.as_path()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.first_err_line(),
        format!("udtrace: failed to compile script {}: line 1: invalid control directive: #include", s.display())
    );

    // Line numbers after cpp are the original file's.
    let bad = dir.write("bad.d", "#include \"defs.h\"\n\nBEGIN\n{\n    x = ;\n}\n");
    let out = run_args(&[Path::new("-C"), Path::new("-I"), inc.as_path(), Path::new("-s"), bad.as_path()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.first_err_line(),
        format!("udtrace: failed to compile script {}: line 5: syntax error near \";\"", bad.display())
    );
}

/// Operands after the program are `$1..$9` (integers or identifiers) and `$$1..`
/// (always strings); `$0` is the script's path.
#[test]
fn macro_arguments() {
    let dir = TempDir::new("cli-macros");
    let s = dir.write("m.d", "BEGIN\n{\n    printf(\"%d %s %s %s\\n\", $1 + 1, $$2, $$1, $$0);\n    exit(0);\n}\n");
    let s = s.to_str().unwrap();
    let out = run_args(&["-q", "-s", s, "41", "foo"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("42 foo 41 {s}\n\n"));

    // More operands than the program references: the last one is extraneous.
    let out = run_args(&["-q", "-s", s, "41", "foo", "bar"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.first_err_line(),
        format!("udtrace: failed to compile script {s}: line 6: extraneous argument 'bar' ($3 is not referenced)")
    );
    let out = run_args(&["-q", "-n", "BEGIN { exit(0); }", "extra"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier BEGIN { exit(0); }: extraneous argument 'extra' ($1 is not referenced)\n"
    );

    // -x defaultargs: missing arguments are 0 and "".
    let out = run_args(&["-q", "-x", "defaultargs", "-s", s]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("1   {s}\n\n"));
}

/// A script whose first line is `#!/usr/bin/env -S udtrace -s` runs directly, its
/// operands becoming macro arguments; the `#!` line is no D.
#[test]
fn interpreter_line() {
    let dir = TempDir::new("cli-shebang");
    let s = dir.write(
        "hello.d",
        "#!/usr/bin/env -S udtrace -qs\n\nBEGIN\n{\n    printf(\"hello %s\\n\", $$1);\n    exit(0);\n}\n",
    );
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin_dir = util::bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(&s);
    cmd.arg("world").env("PATH", path);
    let out = run(&mut cmd);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "hello world\n\n");
    assert_eq!(out.stderr, "");
}

/// -Z: a description matching nothing is reported as matching 0 probes, not refused.
#[test]
fn zdefs() {
    let out = run_args(&["-n", "nosuch:::probe", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier nosuch:::probe: probe description nosuch:::probe does not match any probes\n"
    );
    let out = run_args(&["-Z", "-n", "nosuch:::probe", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stderr,
        "udtrace: description 'nosuch:::probe' matched 0 probes\nudtrace: description 'BEGIN ' matched 1 probe\n"
    );
}

/// Probes that match nothing at all, without -Z: dtrace's "no probes specified".
#[test]
fn no_programs() {
    let out = run_args(&["-q"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: no probes specified\n");
}

/// -w permits destructive actions, with dtrace's notice once tracing starts.
#[test]
fn destructive_flag() {
    let out = run_args(&["-w", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stderr, "udtrace: description 'BEGIN ' matched 1 probe\nudtrace: allowing destructive actions\n");
    let out = run_args(&["-qw", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0);
    assert_eq!(out.stderr, "");
}

#[test]
fn flowindent_flag_prints_its_prefix_even_quiet() {
    // dtrace's chew(): with flowindent the header and the record's indented prefix
    // are printed whether quiet or not (tests/output.rs checks the nesting).
    let out = run_args(&["-qF", "-n", "BEGIN { printf(\"x\\n\"); exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let (header, record) = out.stdout.split_once('\n').unwrap_or_default();
    assert_eq!(header, format!("{:>3} {:<41}", "CPU", "FUNCTION"), "{:?}", out.stdout);
    let (cpu, rest) = record.split_at(4.min(record.len()));
    assert!(cpu.trim().parse::<u32>().is_ok(), "{:?}", out.stdout);
    assert_eq!(rest, format!("{:<41} x\n\n", "| :BEGIN"), "{:?}", out.stdout);
}

/// A pragma sets an option as -x does.
#[test]
fn pragma_quiet() {
    let dir = TempDir::new("cli-pragma");
    let s = dir.write("p.d", "#pragma D option quiet\nBEGIN { printf(\"p\\n\"); exit(0); }\n");
    let out = run_args(&[Path::new("-s"), s.as_path()]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "p\n\n");
    assert_eq!(out.stderr, "");
}

#[test]
fn a_hangup_stays_ignored_under_nohup() {
    // udtrace ends at SIGHUP as at SIGTERM, unless started with it ignored.
    let out = run(std::process::Command::new("nohup").arg(util::bin()).args([
        "-wq",
        "-n",
        r#"BEGIN { raise(1); } tick-200ms { exit(3); } END { printf("end\n"); }"#,
    ]));
    assert_eq!((out.status, out.stdout.as_str()), (3, "end\n\n"), "{}", out.stderr);
}

/// The progress line while arming (docs/design.md, "Progress while arming"): 3,705-odd
/// entry probes in libc; `run_args_tty` shows the line without the 200 ms delay.
const MANY_PROBES: &str = "pid$target:libc::entry { @ = count(); }";

#[test]
fn arming_shows_a_progress_line_on_a_terminal_and_erases_it() {
    let target = format!("{} chain 1", util::fixture("probes"));
    let out = util::run_args_tty(&["-n", MANY_PROBES, "-c", &target]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let shown = out.stderr.as_str();
    let matched: usize = shown
        .lines()
        .find_map(|l| {
            l.strip_prefix("udtrace: description 'pid$target:libc::entry ' matched ")?.strip_suffix(" probes")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{shown:?}"));
    assert!(matched > 1000, "{shown:?}");
    // Drawn after erasing the line, and erased (erase-line; carriage returns are
    // removed from what `script` recorded) before anything else is written.
    let line = format!("\x1b[Karming {},{:03} probes in 1 process…\x1b[K", matched / 1000, matched % 1000);
    assert!(shown.contains(&line), "{shown:?}");
    let rest = &shown[shown.rfind("arming").unwrap()..];
    assert!(rest.split_once('…').is_some_and(|(_, after)| after.starts_with("\x1b[K")), "{shown:?}");
    assert!(rest.contains("chain 1 sink=6\n"), "{shown:?}");
}

#[test]
fn no_progress_line_off_a_terminal_or_with_q() {
    let target = format!("{} chain 1", util::fixture("probes"));
    let piped = run_args(&["-n", MANY_PROBES, "-c", &target]);
    assert_eq!(piped.status, 0, "{}", piped.stderr);
    assert!(piped.stderr.contains("matched") && !piped.stderr.contains("arming"), "{:?}", piped.stderr);
    assert!(!piped.stderr.contains('\x1b') && !piped.stdout.contains('\x1b'), "{piped:?}");
    let quiet = util::run_args_tty(&["-q", "-n", MANY_PROBES, "-c", &target]);
    assert_eq!(quiet.status, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("arming") && !quiet.stderr.contains('\x1b'), "{:?}", quiet.stderr);
    assert!(quiet.stderr.contains("chain 1 sink=6\n"), "{:?}", quiet.stderr);
}
