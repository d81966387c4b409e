//! Compile errors, end to end: every broken script in `tests/errors/` must fail with
//! exit status 1, DTrace's message for it, and a caret snippet at the right line and
//! column. Each script starts with its expectation:
//!
//! ```text
//! /* expect: <message, with \n, \t and *\/ escaped> @ <line>:<column> */
//! ```
//!
//! The messages are DTrace's (illumos libdtrace), prefixed as dtrace(1M) prints them:
//! `udtrace: failed to compile script <path>: line N: <message>`. A few more cases
//! check the `-n` forms, where DTrace names the clause region instead of a line.

mod util;

use std::path::{Path, PathBuf};

use util::{run_args, run_args_tty, Output, TempDir};

struct Expect {
    message: String,
    line: usize,
    column: usize,
}

fn parse_expect(path: &Path, text: &str) -> Expect {
    let first = text.lines().next().unwrap_or_default();
    let body = first
        .strip_prefix("/* expect: ")
        .and_then(|s| s.strip_suffix(" */"))
        .unwrap_or_else(|| panic!("{}: first line must be `/* expect: MSG @ L:C */`", path.display()));
    let (msg, place) = body.rsplit_once(" @ ").expect("` @ L:C` in the expect line");
    let (line, column) = place.split_once(':').expect("L:C");
    Expect {
        message: msg.replace("*\\/", "*/").replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\"),
        line: line.parse().expect("line number"),
        column: column.parse().expect("column number"),
    }
}

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/errors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/errors")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "d"))
        .collect();
    files.sort();
    files
}

/// The caret's column (1-based, in characters of the source line) in a rendered
/// snippet for line `line`, or why it cannot be found.
fn caret_column(stderr: &str, line: usize) -> Result<usize, String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let prefix = format!("{line} | ");
    let src_at = lines
        .iter()
        .position(|l| l.starts_with(&prefix))
        .ok_or_else(|| format!("no source line `{prefix}…` in the snippet"))?;
    let caret = lines.get(src_at + 1).filter(|l| l.contains('^')).ok_or("no caret line under the source line")?;
    let bar = caret.find("| ").ok_or("caret line without a gutter")? + 2;
    let width = caret.find('^').unwrap() - bar;
    // Back from display width to characters: the snippet shows a tab as 4 spaces.
    let src = &lines[src_at][prefix.len()..];
    let mut w = 0;
    for (i, c) in src.chars().enumerate() {
        if w >= width {
            return Ok(i + 1);
        }
        w += if c == '\t' { 4 } else { 1 };
    }
    Ok(src.chars().count() + 1 + (width - w))
}

/// Everything wrong with one run against its expectation, or nothing.
fn check(path: &Path, out: &Output, want: &Expect) -> Vec<String> {
    let shown = path.display().to_string();
    let mut bad = Vec::new();
    if out.status != 1 {
        bad.push(format!("exit status {} (want 1)", out.status));
    }
    let want_msg = format!("udtrace: failed to compile script {shown}: line {}: {}", want.line, want.message);
    let want_first = want_msg.lines().next().unwrap_or_default();
    if out.first_err_line() != want_first {
        bad.push(format!("first stderr line\n   got: {}\n  want: {want_first}", out.first_err_line()));
    }
    // The whole message is what comes before the snippet.
    let got_msg: Vec<&str> = out.stderr.lines().take_while(|l| !l.starts_with("  --> ")).collect();
    if got_msg.join("\n") != want_msg {
        bad.push(format!("message\n   got: {:?}\n  want: {want_msg:?}", got_msg.join("\n")));
    }
    let want_loc = format!("  --> {shown}:{}:{}", want.line, want.column);
    if !out.stderr.lines().any(|l| l == want_loc) {
        bad.push(format!("no `{want_loc}` line"));
    }
    match caret_column(&out.stderr, want.line) {
        Ok(c) if c == want.column => {}
        Ok(c) => bad.push(format!("caret under column {c} (want {})", want.column)),
        // Errors at the end of input point past the last line: no source to underline.
        Err(_) if want.column == 1 && !out.stderr.contains(&format!("\n{} | ", want.line)) => {}
        Err(e) => bad.push(e),
    }
    bad
}

#[test]
fn error_corpus() {
    let files = corpus();
    assert!(files.len() >= 40, "the corpus has only {} cases", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read case");
        let want = parse_expect(path, &text);
        let out = run_args_tty(&[Path::new("-s"), path.as_path()]);
        let bad = check(path, &out, &want);
        if !bad.is_empty() {
            failures.push(format!("{}:\n  {}\n  stderr:\n{}", path.display(), bad.join("\n  "), out.stderr));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n\n{}", failures.len(), files.len(), failures.join("\n"));
}

/// The corpus checker itself must notice a wrong expectation, or the corpus proves
/// nothing.
#[test]
fn corpus_checker_catches_wrong_expectations() {
    let dir = TempDir::new("errors-self");
    let path = dir.write("x.d", "BEGIN\n{\n    x = ;\n}\n");
    let out = run_args_tty(&[Path::new("-s"), path.as_path()]);
    let right = Expect { message: "syntax error near \";\"".into(), line: 3, column: 9 };
    assert_eq!(check(&path, &out, &right), Vec::<String>::new());
    for wrong in [
        Expect { message: "syntax error near \"x\"".into(), line: 3, column: 9 },
        Expect { message: "syntax error near \";\"".into(), line: 2, column: 9 },
        Expect { message: "syntax error near \";\"".into(), line: 3, column: 5 },
    ] {
        assert!(!check(&path, &out, &wrong).is_empty());
    }
}

/// `-n` descriptions: DTrace prints the whole argument and, for errors found while
/// cooking a clause, the region (`in action list:` / `in predicate:`) instead of a line.
#[test]
fn description_errors_name_the_region() {
    let cases: &[(&str, &str)] = &[
        ("BEGIN { trace(y) }", "in action list: failed to resolve y: Unknown variable name"),
        ("BEGIN { x = \"a\" == 1; }", "in action list: operands have incompatible types: \"string\" == \"int\""),
        ("BEGIN /execname/ { }", "in predicate: predicate result must be of scalar type"),
        ("BEGIN /y > 1/ { }", "in predicate: failed to resolve y: Unknown variable name"),
        (
            "BEGIN { trace(strlen(\"a\", \"b\")); }",
            "in action list: strlen( ) prototype mismatch: 2 args passed, 1 expected",
        ),
        ("BEGIN { @a = count(); @a; }", "in action list: expression has null effect: @a"),
        // Syntax errors and probe matching happen outside clause cooking: no region.
        ("BEGIN {", "syntax error near end of input"),
        ("BEGIN { x = ; }", "syntax error near \";\""),
        ("foo:::bar", "probe description foo:::bar does not match any probes"),
        // printf formats are checked per statement after cooking: no region either.
        (
            "BEGIN { printf(\"%d %d\\n\", 1); }",
            "printf( ) prototype mismatch: conversion #2 (%d) is missing a corresponding value argument",
        ),
    ];
    for (spec, msg) in cases {
        let out = run_args(&["-n", spec]);
        assert_eq!(out.status, 1, "{spec}: {}", out.stderr);
        assert_eq!(out.first_err_line(), format!("udtrace: invalid probe specifier {spec}: {msg}"), "{spec}");
    }
}

#[test]
fn description_error_snippet_points_into_the_argument() {
    let out = run_args_tty(&["-n", "BEGIN { x = 1 + ; }"]);
    assert_eq!(out.status, 1);
    assert!(out.stderr.contains("  --> <description>:1:17\n"), "{}", out.stderr);
}

/// Redirected stderr gets exactly dtrace's one line: no excerpt, which is for a
/// person at a terminal.
#[test]
fn redirected_errors_are_one_line() {
    let out = run_args(&["-n", "BEGIN { x = 1 + ; }"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!("{}: invalid probe specifier BEGIN {{ x = 1 + ; }}: syntax error near \";\"\n", util::NAME)
    );
}

/// `-x errtags` puts DTrace's tag before the place, for scripts and descriptions.
#[test]
fn errtags_prefix_every_compile_error() {
    let dir = TempDir::new("errtags");
    let path = dir.write("x.d", "BEGIN\n{\n\ttrace();\n}\n");
    let out = run_args(&[Path::new("-xerrtags"), Path::new("-s"), path.as_path()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!(
            "{}: failed to compile script {}: [D_PROTO_LEN] line 3: trace( ) prototype mismatch: 0 args passed, 1 expected\n",
            util::NAME,
            path.display()
        )
    );
    let out = run_args(&["-xerrtags", "-n", "BEGIN { x = y; }"]);
    assert_eq!(
        out.first_err_line(),
        format!("{}: invalid probe specifier BEGIN {{ x = y; }}: [D_IDENT_UNDEF] in action list: failed to resolve y: Unknown variable name", util::NAME)
    );
    let out = run_args(&["-xerrtags", "-n", "nosuch:::probe"]);
    assert_eq!(
        out.first_err_line(),
        format!("{}: invalid probe specifier nosuch:::probe: [D_PDESC_ZERO] probe description nosuch:::probe does not match any probes", util::NAME)
    );
}

/// `-Z` makes a description that matches nothing acceptable; without it the script
/// fails at that description's line.
#[test]
fn zdefs_allows_unmatched_descriptions_in_scripts() {
    let dir = TempDir::new("errors-zdefs");
    let path = dir.write("z.d", "BEGIN { exit(0); }\n\nnosuch:::probe { }\n");
    let out = run_args(&[Path::new("-s"), path.as_path()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.first_err_line(),
        format!(
            "udtrace: failed to compile script {}: line 3: probe description nosuch:::probe does not match any probes",
            path.display()
        )
    );
    let out = run_args(&[Path::new("-Z"), Path::new("-q"), Path::new("-s"), path.as_path()]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

/// A script without clauses is DTrace's D_EMPTY, raised with xyerror() after the
/// whole file was read: the line is the lexer's, one past the last newline.
#[test]
fn empty_script() {
    let dir = TempDir::new("errors-empty");
    let path = dir.write("empty.d", "/* nothing here */\n");
    let out = run_args(&[Path::new("-s"), path.as_path()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.first_err_line(),
        format!("udtrace: failed to compile script {}: line 2: empty D program translation unit", path.display())
    );
}

#[test]
fn missing_script_file() {
    let out = run_args(&["-s", "/nonexistent/udtrace-test.d"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: failed to open /nonexistent/udtrace-test.d: No such file or directory\n");
}

/// Errors in the second of several programs name that program.
#[test]
fn error_in_a_later_program() {
    let dir = TempDir::new("errors-later");
    let good = dir.write("good.d", "BEGIN { exit(0); }\n");
    let bad = dir.write("bad.d", "BEGIN\n{\n    x = \"s\" * 2;\n}\n");
    let out = run_args(&[Path::new("-s"), good.as_path(), Path::new("-s"), bad.as_path()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.first_err_line(),
        format!(
            "udtrace: failed to compile script {}: line 3: operator * requires operands of arithmetic type",
            bad.display()
        )
    );
}

/// Messages start with the base name of argv[0], as dtrace's do: linked as
/// `dtrace`, udtrace says `dtrace:`.
#[test]
fn program_name_follows_argv0() {
    let dir = TempDir::new("argv0");
    let link = dir.path().join("dtrace");
    std::os::unix::fs::symlink(util::bin(), &link).expect("symlink");
    let out = util::run(std::process::Command::new(&link).args(["-n", "BEGIN { x = ; }"]));
    assert_eq!(out.status, 1);
    assert_eq!(out.first_err_line(), "dtrace: invalid probe specifier BEGIN { x = ; }: syntax error near \";\"");
    let out = util::run(std::process::Command::new(&link).arg("-V"));
    assert_eq!(out.stdout, "dtrace: Oracle D 2.0\n");
}
