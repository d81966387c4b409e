//! DTrace's command line, options, preprocessor and program flow, end to end: what
//! dtrace (DTrace for Linux 2.0, `cmd/dtrace.c` and libdtrace) prints and how it
//! exits, under our program name.

mod util;

use std::path::Path;

use util::{run, run_args, udtrace, TempDir};

fn err(out: &util::Output) -> &str {
    out.first_err_line()
}

// ---- probe descriptions given as ids (-i, or a number in a program) ------------

#[test]
fn a_probe_id_names_its_probe() {
    // Probe 1 is dtrace:::BEGIN, 2 END.
    let out = run_args(&["-qi", "1 { printf(\"begin\\n\"); exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "begin\n\n");
    let out = run_args(&["-l", "-i", "2"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out
        .stdout
        .lines()
        .nth(1)
        .unwrap_or("")
        .ends_with(" dtrace                                                     END"));
}

#[test]
fn unknown_probe_ids_are_description_errors() {
    let out = run_args(&["-i", "0"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier 0: invalid probe identifier 0: Unknown probe identifier\n"
    );
    // `-i` is not checked on the command line: "-3" is a description of that name.
    let out = run_args(&["-i", "-3"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: invalid probe specifier -3: probe description :::-3 does not match any probes\n");
}

#[test]
fn a_number_then_a_name_are_two_clauses() {
    // dt_grammar.y: `2-2` reads as the probe id 2 and the description `-2`.
    let out = run_args(&["-i", "2-2"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: invalid probe specifier 2-2: probe description :::-2 does not match any probes\n");
    // Listing goes on past a description that matches nothing, and succeeds.
    let out = run_args(&["-li", "2-2"]);
    assert_eq!(out.status, 0);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    assert_eq!(out.stderr, "udtrace: failed to match :::-2: No probe matches description\n");
}

#[test]
fn probe_ids_only_where_names_go() {
    let out = run_args(&["-f", "4.56"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier 4.56: probe identifier 4 not permitted when specifying functions\n"
    );
    let out = run_args(&["-n", "4294967296"]);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier 4294967296: identifier 4294967296 exceeds maximum probe id\n"
    );
}

#[test]
fn a_leading_colon_ends_the_description() {
    // dtrace_xstr2desc stops at the start of the text: `::read:` as a function
    // description is module `read`, not an overspecified description.
    let out = run_args(&["-f", "::read:"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier ::read:: probe description :read:: does not match any probes\n"
    );
}

// ---- macro arguments -----------------------------------------------------------

#[test]
fn every_program_must_use_the_last_argument() {
    // Each program on the command line is checked on its own, under its own name.
    let out = run_args(&["-i", "1", "10", "-i", "2"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: invalid probe specifier 1: extraneous argument '10' ($1 is not referenced)\n");
}

#[test]
fn an_undefined_macro_argument_comes_before_other_errors() {
    let dir = TempDir::new("conf-macro");
    let s = dir.write("m.d", "BEGIN\n{\n\tprint(\"%d %d\\n\", $1, $2);\n}\n");
    let out = run_args(&[Path::new("-xerrtags"), Path::new("-s"), &s]);
    assert_eq!(out.status, 1);
    assert_eq!(
        err(&out),
        format!(
            "udtrace: failed to compile script {}: [D_MACRO_UNDEF] line 3: macro argument $1 is not defined",
            s.display()
        )
    );
}

// ---- scripts -------------------------------------------------------------------

#[test]
fn a_script_description_needs_a_predicate_or_actions() {
    let dir = TempDir::new("conf-bare");
    for text in ["BEGIN\nint i;\n{\n}\n", "BEGIN\n\texit(0);\n}\n", "define VALUE 5\n"] {
        let s = dir.write("bare.d", text);
        let out = run_args(&[Path::new("-s"), &s]);
        assert_eq!(out.status, 1);
        assert_eq!(
            err(&out),
            format!(
                "udtrace: failed to compile script {}: line 1: expected predicate and/or actions following probe description",
                s.display()
            )
        );
    }
    // On the command line a bare description is a clause of its own.
    let out = run_args(&["-qn", "END BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

// ---- the ERROR probe -----------------------------------------------------------

#[test]
fn faults_are_reported_with_their_clause_and_probe() {
    let out = run_args(&[
        "-qn",
        "ERROR { printf(\"%d %d %d %d\\n\", arg1, arg2, arg4, arg5); exit(0); } BEGIN { *(char *)16; }",
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    // arg1 the probe (BEGIN), arg2 the clause (the second), arg4 DTRACEFLT_BADADDR,
    // arg5 the address.
    assert_eq!(out.stdout, "1 1 1 16\n\n");
    assert_eq!(
        out.stderr,
        "udtrace: error in dt_clause_1 for probe ID 1 (dtrace:::BEGIN): invalid address (0x10) at BPF pc 2\n"
    );
}

#[test]
fn fault_codes_are_named() {
    let out = run_args(&[
        "-qn",
        "BEGIN { printf(\"%d %d %d %d\\n\", DTRACEFLT_UNKNOWN, DTRACEFLT_BADADDR, DTRACEFLT_DIVZERO, DTRACEFLT_BADSTACK); exit(0); }",
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "0 1 4 9\n\n");
}

// ---- versions ------------------------------------------------------------------

#[test]
fn the_d_version_is_dtrace_for_linux_s() {
    let out = run_args(&["-V"]);
    assert_eq!(out.stdout, "udtrace: Oracle D 2.0\n");
    let out = run_args(&["-xversion=2.0", "-qn", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = run_args(&["-C", "-qn", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

#[test]
fn identifiers_of_later_versions_are_free_names() {
    // strstr() came with D 1.1: a 1.0 program may name a variable so.
    let out = run_args(&["-qn", "#pragma D option version=1.0\nint strstr; BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = run_args(&["-qn", "int strstr; BEGIN { exit(0); }"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier int strstr; BEGIN { exit(0); }: built-in identifier redeclared: strstr\n"
    );
}

// ---- options -------------------------------------------------------------------

#[test]
fn path_options_are_for_the_command_line_only() {
    let dir = TempDir::new("conf-optset");
    for opt in ["ldpath", "cpppath", "lockmem"] {
        let s = dir.write("o.d", &format!("#pragma D option {opt}=1\nBEGIN {{ exit(0); }}\n"));
        let out = run_args(&[Path::new("-xerrtags"), Path::new("-s"), &s]);
        assert_eq!(out.status, 1, "{opt}");
        assert_eq!(
            err(&out),
            format!(
                "udtrace: failed to compile script {}: [D_PRAGMA_OPTSET] line 1: failed to set option '{opt}' to '1': Option cannot be used from within a D program",
                s.display()
            )
        );
    }
}

#[test]
fn option_values_have_dtrace_s_limits() {
    let out = run_args(&["-xstrsize=1", "-n", "BEGIN"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: failed to set -x strsize: Invalid value for specified option\n");
    let out = run_args(&["-xiregs=7", "-n", "BEGIN"]);
    assert_eq!(out.stderr, "udtrace: failed to set -x iregs: Insufficient registers to generate code\n");
    let out = run_args(&["-xiregs=9", "-n", "BEGIN"]);
    assert_eq!(out.stderr, "udtrace: failed to set -x iregs: Invalid value for specified option\n");
    let out = run_args(&["-xiregs=8", "-qn", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

#[test]
fn options_come_from_the_environment_too() {
    let out = run(udtrace(&["-n", "BEGIN { exit(0); }"]).env("DTRACE_OPT_QUIET", "yes"));
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "\n");
    assert_eq!(out.stderr, "");
}

#[test]
fn the_cpu_option_places_begin_end_and_ticks() {
    for p in ["BEGIN", "tick-10ms", "profile-10ms"] {
        let out = run_args(&["-xcpu=0", "-qn", &format!("{p} {{ trace(cpu); exit(0); }}")]);
        assert_eq!(out.status, 0, "{p}: {}", out.stderr);
        assert_eq!(out.stdout, "0\n", "{p}");
    }
}

#[test]
fn enabling_fails_on_a_buffer_without_room_for_a_fault() {
    let prog = "BEGIN { exit(0); } ERROR { exit(1); }";
    let out = run_args(&["-b59", "-n", prog]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: description 'BEGIN ' matched 2 probes\nudtrace: could not enable tracing: Enabling exceeds size of buffer\n"
    );
    let out = run_args(&["-q", "-b64", "-n", prog]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let out = run_args(&["-q", "-xbufsize=0", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.stderr, "udtrace: could not enable tracing: Enabling exceeds size of buffer\n");
}

#[test]
fn destructive_actions_need_w() {
    let out = run_args(&["-qn", "BEGIN { system(\"true\"); exit(0); }"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: could not enable tracing: Destructive actions not allowed\n");
}

// ---- the preprocessor ------------------------------------------------------------

#[test]
fn cpp_reads_the_script_as_stdin_and_speaks_for_itself() {
    let dir = TempDir::new("conf-cpp");
    let s = dir.write("bad.d", "\n#else\nBEGIN { exit(0); }\n");
    let out = run_args(&[Path::new("-xcppargs=-fno-diagnostics-show-caret -fno-show-column"), Path::new("-Cs"), &s]);
    assert_eq!(out.status, 1);
    let lines: Vec<&str> = out.stderr.lines().collect();
    // cpp's own words first, then dtrace's.
    assert_eq!(lines.first().copied(), Some("/dev/stdin:2: error: #else without #if"), "{}", out.stderr);
    assert_eq!(
        lines.last().copied().unwrap_or(""),
        format!("udtrace: failed to compile script {}: Preprocessor failed to process input program", s.display())
    );
}

#[test]
fn quoted_includes_are_found_through_include_paths() {
    let dir = TempDir::new("conf-inc");
    dir.write("sub/v.h", "#define V 7\n");
    let s = dir.write("v.d", "#include \"v.h\"\nBEGIN { trace(V); exit(0); }\n");
    let out = run_args(&[Path::new("-qCs"), &s]);
    assert_eq!(out.status, 1, "found without -I: {}", out.stderr);
    let inc = dir.path().join("sub");
    let out = run_args(&[Path::new("-q"), Path::new("-I"), &inc, Path::new("-Cs"), &s]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "7\n");
}

#[test]
fn cpp_runs_under_its_base_name() {
    let dir = TempDir::new("conf-cpppath");
    let s = dir.write("c.d", "BEGIN { exit(0); }\n");
    let out = run_args(&[Path::new("-xcpppath=/bin/cat"), Path::new("-Cs"), &s]);
    assert_eq!(out.status, 1);
    assert!(out.stderr.starts_with("cat: "), "{}", out.stderr);
}

// ---- BEGIN's process, and the processes udtrace starts ---------------------------

#[test]
fn begin_sees_udtrace_s_own_process() {
    let out = run_args(&[
        "-qn",
        "BEGIN { printf(\"%d %d %s\\n\", curpsinfo->pr_pid == pid, curlwpsinfo->pr_lwpid == tid, curpsinfo->pr_fname); exit(0); }",
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "1 1 udtrace\n\n");
}

/// Whether a process of this pid is still alive (not a zombie).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn a_created_process_dies_with_udtrace_whatever_the_way_out() {
    for prog in ["BEGIN { exit(0); }", "tick-50ms { exit(0); }", "BEGIN { *(int *)0; } tick-50ms { exit(0); }"] {
        let out = run_args(&["-c", "sleep 100", "-qn", &format!("BEGIN {{ printf(\"%d\\n\", $target); }} {prog}")]);
        assert_eq!(out.status, 0, "{prog}: {}", out.stderr);
        let pid = out.stdout.lines().next().unwrap_or("").to_string();
        assert!(!pid.is_empty() && !alive(&pid), "{prog}: sleep {pid} outlived udtrace");
    }
}

#[test]
fn a_missing_process_is_no_such_process() {
    let out = run_args(&["-p", "2147483647", "-n", "BEGIN"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: No such process\n");
}

// ---- pragmas ---------------------------------------------------------------------

#[test]
fn pragmas_are_checked_as_they_are_read() {
    let dir = TempDir::new("conf-pragma");
    let cases = [
        // The pragma's error comes before the syntax error that follows it.
        (
            "inline int foo\n#pragma D attributes bad/attrs foo\nBEGIN { }\n",
            "[D_PRAGMA_INVAL] line 2: invalid attributes specified by #pragma attributes",
        ),
        (
            "#pragma D attributes Stable\nBEGIN { }\n",
            "[D_PRAGMA_MALFORM] line 1: malformed #pragma attributes <attributes> <ident>",
        ),
        (
            "#pragma D depends_on library x.d\nBEGIN { }\n",
            "[D_PRAGMA_DEPEND] line 1: main program may not explicitly depend on a library",
        ),
        (
            "#pragma D depends_on provider syscall\nBEGIN { }\n",
            "[D_PRAGMA_DEPEND] line 1: program requires provider syscall",
        ),
        (
            "#pragma D depends_on thing x\nBEGIN { }\n",
            "[D_PRAGMA_INVAL] line 1: invalid class thing specified by #pragma depends_on",
        ),
    ];
    for (text, want) in cases {
        let s = dir.write("p.d", text);
        let out = run_args(&[Path::new("-xerrtags"), Path::new("-s"), &s]);
        assert_eq!(out.status, 1, "{text}");
        assert_eq!(err(&out), format!("udtrace: failed to compile script {}: {want}", s.display()));
    }
    let s = dir.write("ok.d", "#pragma D depends_on provider proc\nBEGIN { exit(0); }\n");
    let out = run_args(&[Path::new("-qs"), &s]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

#[test]
fn an_empty_program_with_the_empty_option_matches_nothing() {
    let out = run_args(&["-xempty", "-n", "int x;"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: description 'int x' matched 0 probes\nudtrace: no probes matched\n");
}

// ---- D libraries -------------------------------------------------------------------

#[test]
fn libraries_define_what_programs_use_in_dependency_order() {
    let dir = TempDir::new("conf-libs");
    dir.write("lib/a.d", "#pragma D depends_on library b.d\ninline int foo = bar + 1;\n");
    dir.write("lib/b.d", "inline int bar = 41;\n");
    dir.write("lib/notes.txt", "not a library\n");
    let lib = dir.path().join("lib");
    let out = run(udtrace(&[Path::new("-L"), &lib, Path::new("-qn"), Path::new("BEGIN { trace(foo); exit(0); }")])
        .env("DTRACE_DEBUG", "1"));
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "42\n");
    // The sort's debugging lines name the libraries in finishing order.
    let sorted: Vec<&str> = out.stderr.lines().filter(|l| l.contains(" sorted (")).collect();
    assert_eq!(sorted.len(), 2, "{}", out.stderr);
    assert!(sorted[0].contains("/lib/a.d") && sorted[1].contains("/lib/b.d"), "{}", out.stderr);
    // -x nolibs leaves them out.
    let out =
        run_args(&[Path::new("-L"), &lib, Path::new("-xnolibs"), Path::new("-qn"), Path::new("BEGIN { trace(foo); }")]);
    assert_eq!(out.status, 1);
}

#[test]
fn broken_libraries_fail_every_program() {
    let dir = TempDir::new("conf-badlibs");
    dir.write("cycle/a.d", "#pragma D depends_on library b.d\n");
    dir.write("cycle/b.d", "#pragma D depends_on library a.d\n");
    dir.write("missing/a.d", "#pragma D depends_on library gone.d\n");
    dir.write("faulty/f.d", "BEGIN\n{\n\tnonexistent_action();\n}\n");
    let prog = "BEGIN { exit(0); }";
    for (sub, want) in [
        ("cycle", "Cyclic dependency detected: "),
        ("missing", "Invalid library dependency in "),
        ("faulty", "/faulty/f.d\", line 3: undefined function name: nonexistent_action"),
    ] {
        let lib = dir.path().join(sub);
        let out = run_args(&[Path::new("-L"), &lib, Path::new("-e"), Path::new("-n"), Path::new(prog)]);
        assert_eq!(out.status, 1, "{sub}");
        let line = err(&out);
        assert!(line.starts_with(&format!("udtrace: invalid probe specifier {prog}: ")), "{line}");
        assert!(line.contains(want), "{sub}: {line}");
    }
}

// ---- debugging -----------------------------------------------------------------------

#[test]
fn debug_messages_on_request() {
    let out = run_args(&["-xdebug", "-qn", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0);
    let line = out.stderr.lines().next().unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.get(..2), Some(&["udtrace", "DEBUG"][..]), "{line}");
    assert!(words.get(2).and_then(|t| t.trim_end_matches(':').parse::<u64>().ok()).is_some_and(|t| t > 0), "{line}");
    let out = run_args(&["-qn", "BEGIN { exit(0); }"]);
    assert_eq!(out.stderr, "");
}

// ---- -v ------------------------------------------------------------------------------

#[test]
fn verbose_reports_each_program_s_stability() {
    let block = |title: &str, a: [&str; 3]| {
        format!(
            "\n\t{title}\n\t\tIdentifier Names: {}\n\t\tData Semantics:   {}\n\t\tDependency Class: {}\n",
            a[0], a[1], a[2]
        )
    };
    let report = |name: &str, desc: [&str; 3], stmt: [&str; 3]| {
        format!(
            "\nStability attributes for description {name}:\n{}{}\n",
            block("Minimum Probe Description Attributes", desc),
            block("Minimum Statement Attributes", stmt)
        )
    };
    // Without a provider the description is Unstable; naming dtrace makes it Stable.
    let out = run_args(&["-qv", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let common = ["Stable", "Stable", "Common"];
    assert_eq!(out.stdout, report("BEGIN ", ["Unstable", "Unstable", "Common"], common) + "\n");
    let out = run_args(&["-qv", "-n", "dtrace:::BEGIN { trace(probeprov); exit(0); }"]);
    assert_eq!(out.stdout, report("dtrace:::BEGIN ", common, common) + "dtrace\n");
    // The profile provider's names are Evolving, and so is probename there.
    let out = run_args(&["-qve", "-n", "profile:::tick-1s { trace(probename); }"]);
    let evolving = ["Evolving", "Evolving", "Common"];
    assert_eq!(out.stdout, report("profile:::tick-1s ", evolving, evolving));
}

#[test]
fn tuples_fit_the_tuple_registers() {
    // Eight tuple registers by default: nine keys fit, ten do not.
    let out = run_args(&["-qn", "BEGIN { a[1, 2, 3, 4, 5, 6, 7, 8, 9] = 1; exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let prog = "BEGIN { a[1, 2, 3, 4, 5, 6, 7, 8, 9, 10] = 1; exit(0); }";
    let out = run_args(&["-qn", prog]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!("udtrace: invalid probe specifier {prog}: Insufficient tuple registers to generate code\n")
    );
    let prog = "BEGIN { @[1, 2, 3, 4, 5, 6, 7] = count(); exit(0); }";
    assert_eq!(run_args(&["-xtregs=5", "-qn", prog]).status, 1);
    assert_eq!(run_args(&["-xtregs=6", "-qn", prog]).status, 0);
}

#[test]
fn macro_pragmas_hold_from_where_they_are_read() {
    let dir = TempDir::new("conf-macropragma");
    let s = dir.write("d.d", "#pragma D option defaultargs\nBEGIN { printf(\"%d [%s]\\n\", $1, $$2); exit(0); }\n");
    let out = run_args(&[Path::new("-qs"), &s]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "0 []\n\n");
    let s = dir.write("a.d", "#pragma D option argref\nBEGIN { exit(0); }\n");
    let out = run_args(&[Path::new("-qs"), &s, Path::new("unused")]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    // Only for the program that says so.
    let out = run_args(&[
        Path::new("-q"),
        Path::new("-s"),
        &s,
        Path::new("-n"),
        Path::new("BEGIN { exit(0); }"),
        Path::new("x"),
    ]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: invalid probe specifier BEGIN { exit(0); }: extraneous argument 'x' ($1 is not referenced)\n"
    );
    let s = dir.write("m.d", "#pragma D option quiet bufsize=1m\nBEGIN { exit(0); }\n");
    let out = run_args(&[Path::new("-s"), &s]);
    assert_eq!(
        err(&out),
        format!(
            "udtrace: failed to compile script {}: line 1: superfluous arguments specified for #pragma option",
            s.display()
        )
    );
}

#[test]
fn the_output_file_is_opened_before_anything_is_reported() {
    let out = run_args(&["-n", "BEGIN", "-o", "/nonexistent/dir/out"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: failed to open output file '/nonexistent/dir/out': No such file or directory\n");
    // -l lists into it too.
    let dir = TempDir::new("conf-ofile");
    let file = dir.path().join("list.txt");
    let out = run_args(&[Path::new("-l"), Path::new("-n"), Path::new("dtrace:::END"), Path::new("-o"), &file]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    let listed = std::fs::read_to_string(&file).unwrap();
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.lines().nth(1).unwrap().ends_with(" END"), "{listed}");
}

#[test]
fn the_cpu_must_be_online() {
    let out = run_args(&["-xcpu=100000", "-qn", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, "udtrace: could not enable tracing: CPU 100000 is not online\n");
}

#[test]
fn functions_of_later_versions_are_undefined() {
    let prog = "BEGIN { trace(strstr(\"ab\", \"b\")); exit(0); }";
    let out = run_args(&["-xversion=1.0", "-qn", prog]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!("udtrace: invalid probe specifier {prog}: in action list: undefined function name: strstr\n")
    );
    let out = run_args(&["-xversion=1.1", "-qn", prog]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}
