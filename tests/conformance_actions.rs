//! Conformance of actions, aggregations, speculations and output with Oracle's
//! DTrace for Linux (its libdtrace is the reference): what each prints, the order of
//! clause execution, and the compile-time rules and errors of the action statements.

mod common;

use common::*;

/// Runs a program in DTrace's testing mode (no CPU or ID columns).
fn testing(args: &[&str]) -> Run {
    udtrace_env(args, &[("_DTRACE_TESTING", "1")])
}

/// The error line of a compile failure with `-x errtags`, without the program name.
fn tagged_error(program: &str) -> String {
    let r = run_script(&["-x", "errtags"], program);
    assert_eq!(r.code, 1, "must fail to compile: {program}\nstdout: {}", r.stdout);
    let line = r.first_error_line();
    line.split_once("prog.d: ").map_or(line, |(_, rest)| rest).to_string()
}

// ---- trace() --------------------------------------------------------------------

#[test]
fn trace_prints_integers_by_their_signedness() {
    let out = quiet(
        r#"BEGIN { trace((int8_t)-1); trace(" "); trace((int16_t)-1); trace(" "); trace((uint8_t)-1); trace(" ");
        trace((uint16_t)-1); trace(" "); trace((uint32_t)-1); trace(" "); trace((uint64_t)-1); trace(" ");
        trace((int64_t)-1); exit(0); }"#,
    );
    assert_eq!(out, "-1 -1 255 65535 4294967295 18446744073709551615 -1\n");
}

#[test]
fn trace_columns_follow_the_type_size() {
    let r =
        testing(&["-n", "BEGIN { trace((short)-1); trace(7); trace((unsigned long long)7); trace(-7LL); exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let data = format!(" {:>5} {:>10} {:>20} {:>19}", -1, 7, 7, -7);
    assert_eq!(r.stdout, format!("{:>32}\n{:>32} {data}\n\n", "FUNCTION:NAME", ":BEGIN"));
}

#[test]
fn trace_of_a_struct_or_char_array_is_a_hex_dump() {
    let out = quiet("struct s { char c; } st; BEGIN { st.c = '4'; trace(st); exit(0); }");
    assert_eq!(
        out,
        "\n             0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f  0123456789abcdef\n         0: 34                                               4\n\n"
    );
}

#[test]
fn trace_of_an_empty_string_prints_it() {
    let r = testing(&["-n", r#"BEGIN { trace(""); exit(0); }"#]);
    assert_eq!(r.stdout, format!("{:>32}\n{:>32}   {:33}\n\n", "FUNCTION:NAME", ":BEGIN", ""));
}

// ---- exit() ---------------------------------------------------------------------

#[test]
fn no_clause_runs_after_exit_in_the_same_firing() {
    let r = udtrace(&[
        "-q",
        "-n",
        "BEGIN { exit(3); }",
        "-n",
        r#"BEGIN { printf("after exit\n"); }"#,
        "-n",
        r#"END { printf("end\n"); }"#,
    ]);
    assert_eq!(r.code, 3);
    assert_eq!(r.stdout, "end\n\n");
}

#[test]
fn every_end_clause_runs_after_exit_in_end() {
    let out =
        udtrace(&["-q", "-n", r#"END { printf("a\n"); exit(0); } END { printf("b\n"); }"#, "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.stdout, "a\nb\n\n");
}

// ---- speculations -----------------------------------------------------------------

#[test]
fn one_clause_may_commit_several_speculations() {
    let out = quiet(
        r#"#pragma D option nspec=3
        BEGIN { i = speculation(); j = speculation(); k = speculation(); }
        BEGIN { speculate(i); printf("i\n"); }
        BEGIN { speculate(j); printf("j\n"); }
        BEGIN { speculate(k); printf("k\n"); }
        BEGIN { commit(k); commit(j); commit(i); }
        BEGIN { exit(0); }"#,
    );
    assert_eq!(out, "k\nj\ni\n\n");
}

#[test]
fn a_commit_only_clause_prints_no_probe_line() {
    let r = testing(&[
        "-n",
        "BEGIN { s = speculation(); } BEGIN { speculate(s); } BEGIN { commit(s); } BEGIN { exit(0); }",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The speculated (empty) record and exit's record: the commit clause prints nothing.
    assert_eq!(r.stdout, format!("{:>32}\n{:>32} \n{:>32} \n\n", "FUNCTION:NAME", ":BEGIN", ":BEGIN"));
}

#[test]
fn discarded_data_never_prints() {
    let out = quiet(
        r#"BEGIN { s = speculation(); } BEGIN { speculate(s); printf("hidden\n"); }
        BEGIN { discard(s); printf("shown\n"); } BEGIN { exit(0); }"#,
    );
    assert_eq!(out, "shown\n\n");
}

#[test]
fn speculate_on_no_speculation_ends_the_clause_silently() {
    for id in ["0", "-1", "3456710", "1"] {
        let r = udtrace(&[
            "-q",
            "-n",
            &format!(
                r#"BEGIN {{ speculate({id}); n++; printf("not here\n"); }} BEGIN {{ printf("%d\n", n); exit(0); }}"#
            ),
        ]);
        assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "0\n\n", ""), "speculate({id})");
    }
}

#[test]
fn commit_past_nspec_is_an_illegal_operation() {
    let r = udtrace(&["-q", "-n", "BEGIN { commit(2); } ERROR { printf(\"fault %d\\n\", arg4); exit(1); }"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "fault 3\n\n");
    assert!(r.stderr.contains("illegal operation"), "{}", r.stderr);
    // 0 and a free speculation are nothing to commit or discard.
    let out = quiet("BEGIN { commit(0); discard(1); } BEGIN { exit(0); }");
    assert_eq!(out, "\n");
}

#[test]
fn failed_speculations_are_reported_as_drops() {
    let r = udtrace(&[
        "-q",
        "-n",
        r#"BEGIN { a = speculation(); b = speculation(); c = speculation(); printf("%d %d %d\n", a, b, c); exit(0); }"#,
    ]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout, "1 0 0\n\n");
    assert_eq!(r.stderr, "udtrace: 2 failed speculations (no speculative buffer available)\n");
}

#[test]
fn a_speculation_freed_by_commit_is_busy_until_the_firing_ends() {
    let r = udtrace(&[
        "-q",
        "-n",
        r#"BEGIN { a = speculation(); commit(a); b = speculation(); }
        tick-1ms { c = speculation(); printf("%d %d %d\n", a, b, c); exit(0); }"#,
    ]);
    assert_eq!(r.stdout, "1 0 1\n\n");
    assert_eq!(r.stderr, "udtrace: 1 failed speculation (available buffer(s) still busy)\n");
}

/// A speculation holds specsize bytes of DTrace's records: a clause whose data does
/// not fit stops there; a record that does not fit what is already held is dropped.
#[test]
fn specsize_limits_what_a_speculation_holds() {
    let prog = r#"BEGIN { s = speculation(); }
        BEGIN { speculate(s); printf("%d %d\n", 1LL, 2LL); n++; }
        BEGIN { speculate(s); printf("%d\n", 3LL); n++; }
        BEGIN { commit(s); }
        BEGIN { printf("n=%d\n", n); exit(0); }"#;
    let run = |size: &str| udtrace(&["-q", "-x", &format!("specsize={size}"), "-n", prog]);
    // 16 bytes of header, 8 a datum: the first clause needs 32 bytes, the second 24.
    let r = run("31");
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("3\nn=1\n\n", "udtrace: 1 speculative drop\n"));
    let r = run("55");
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("1 2\nn=2\n\n", "udtrace: 1 speculative drop\n"));
    let r = run("56");
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("1 2\n3\nn=2\n\n", ""));
}

#[test]
fn droptags_name_the_kind_of_drop() {
    let r = udtrace(&[
        "-q",
        "-x",
        "droptags",
        "-x",
        "specsize=20",
        "-n",
        r#"BEGIN { s = speculation(); speculate(s); trace("too long for 20 bytes"); } BEGIN { exit(0); }"#,
    ]);
    assert_eq!(r.stderr, "udtrace: [DTRACEDROP_SPEC] 1 speculative drop\n");
}

// ---- what may follow speculate() and commit() -------------------------------------

#[test]
fn speculation_rules_report_the_offending_statement() {
    let cases = [
        (
            "BEGIN {\n speculate(1);\n\n @a = count();\n}",
            "[D_AGG_SPEC] line 4: aggregating actions may not follow speculate( )",
        ),
        (
            "BEGIN {\n commit(1);\n @a = count();\n}",
            "[D_AGG_COMM] line 3: aggregating actions may not follow commit( )",
        ),
        (
            "BEGIN {\n trace(1);\n commit(1);\n}",
            "[D_COMM_DREC] line 3: commit( ) may not follow data-recording action(s)",
        ),
        (
            "BEGIN {\n @a = count();\n commit(1);\n}",
            "[D_COMM_DREC] line 3: commit( ) may not follow data-recording action(s)",
        ),
        ("BEGIN {\n commit(1);\n exit(0);\n}", "[D_DREC_COMM] line 3: data-recording actions may not follow commit( )"),
        ("BEGIN {\n commit(1);\n speculate(1);\n}", "[D_SPEC_COMM] line 3: speculate( ) may not follow commit( )"),
        (
            "BEGIN {\n speculate(1);\n speculate(1);\n}",
            "[D_SPEC_SPEC] line 3: speculate( ) may not follow speculate( )",
        ),
        (
            "BEGIN {\n trace(1);\n speculate(1);\n}",
            "[D_SPEC_DREC] line 3: speculate( ) may not follow data-recording action(s)",
        ),
        (
            "BEGIN {\n speculate(1);\n raise(9);\n}",
            "[D_ACT_SPEC] line 3: destructive actions may not follow speculate( )",
        ),
        ("BEGIN {\n speculate(1);\n exit(0);\n}", "[D_EXIT_SPEC] line 3: exit( ) may not follow speculate( )"),
    ];
    for (prog, want) in cases {
        assert_eq!(tagged_error(prog), format!("{want}"), "{prog}");
    }
}

#[test]
fn statements_that_may_share_a_clause_with_speculations() {
    // Expressions record nothing; discard() goes with anything; commits may repeat.
    let out = quiet(
        r#"BEGIN { x = 1; s = speculation(); speculate(s); x++; printf("%d\n", x); }
        BEGIN { commit(s); x++; commit(s); discard(s); }
        BEGIN { discard(s); printf("x=%d\n", x); exit(0); }"#,
    );
    assert_eq!(out, "2\nx=3\n\n");
}

// ---- errors in clauses ------------------------------------------------------------

#[test]
fn faults_name_the_clause_and_the_probe() {
    let r = udtrace(&["-q", "-n", "BEGIN { x = 1; } BEGIN { commit(5); } BEGIN { exit(0); }"]);
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_1 for probe ID 1 (dtrace:::BEGIN): illegal operation at BPF pc 2\n"
    );
}

#[test]
fn a_fault_in_an_error_clause_is_a_double_error_drop() {
    let r = udtrace(&["-q", "-x", "droptags", "-n", "BEGIN { commit(5); } ERROR { commit(7); } BEGIN { exit(0); }"]);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): illegal operation at BPF pc 2",
            "udtrace: [DTRACEDROP_DBLERROR] 1 error in ERROR probe enabling",
        ]
    );
}

#[test]
fn setopt_errors_are_reported_and_tracing_goes_on() {
    let r = udtrace(&[
        "-q",
        "-n",
        r#"BEGIN { setopt("nosuchoption"); setopt("quiet", "sometimes"); setopt("bufsize", "1m"); printf("on\n"); exit(0); }"#,
    ]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout, "on\n\n");
    let pre = "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): couldn't set option";
    assert_eq!(
        r.stderr,
        format!(
            "{pre} \"nosuchoption\" to \"1\": Invalid option name\n\n\
             {pre} \"quiet\" to \"sometimes\": Invalid value for specified option\n\n\
             {pre} \"bufsize\" to \"1m\": Operation illegal when tracing is active\n\n"
        )
    );
}

// ---- destructive actions -------------------------------------------------------------

#[test]
fn destructive_actions_need_w() {
    for action in [r#"system("true")"#, r#"freopen("/dev/null")"#, "raise(0)", "stop()"] {
        let r = udtrace(&["-q", "-n", &format!("BEGIN {{ {action}; exit(0); }}")]);
        assert_eq!(r.code, 1, "{action}");
        assert_eq!(r.stderr, "udtrace: could not enable tracing: Destructive actions not allowed\n", "{action}");
    }
}

#[test]
fn system_output_comes_in_order_with_traced_output() {
    let r = udtrace(&[
        "-wq",
        "-n",
        r#"BEGIN { printf("one "); system("echo %d %s", 2, "two"); printf("three\n"); }
           BEGIN { system("echo four"); exit(0); }"#,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "one 2 two\nthree\nfour\n\n");
}

#[test]
fn system_runs_only_for_records_that_are_kept() {
    // A fault discards the clause's record, and with it the command.
    let r = udtrace(&["-wq", "-n", r#"int z; BEGIN { system("echo no"); x = 1 / z; } BEGIN { exit(0); }"#]);
    assert_eq!(r.stdout, "\n");
}

#[test]
fn freopen_sends_later_output_to_a_file_until_restored() {
    let dir = temp_dir();
    let file = dir.join("out.txt");
    let f = file.to_str().unwrap();
    let r = udtrace(&[
        "-wq",
        "-n",
        &format!(
            r#"BEGIN {{ printf("a\n"); freopen("{f}"); printf("b\n"); }}
               BEGIN {{ printf("c\n"); freopen(""); printf("d\n"); exit(0); }}"#
        ),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "a\nd\n\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "b\nc\n");
}

#[test]
fn freopen_of_a_directory_fails_and_output_stays() {
    let r = udtrace(&["-wq", "-n", r#"BEGIN { freopen("%s", "/"); printf("here\n"); exit(0); }"#]);
    assert_eq!(r.stdout, "here\n\n");
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): couldn't freopen() \"/\": Is a directory\n"
    );
    assert_eq!(
        tagged_error(r#"BEGIN { freopen("."); }"#),
        r#"[D_FREOPEN_INVALID] line 1: freopen( ) argument #1 cannot be ".""#
    );
}

#[test]
fn raise_signals_the_firing_process() {
    // BEGIN fires in udtrace itself, as in DTrace: raise(SIGTERM) ends it like ^C
    // (with the newline dtrace prints at an interrupt), and so does SIGHUP.
    for sig in [15, 1] {
        let program =
            format!(r#"BEGIN {{ raise({sig}); }} tick-10s {{ printf("too late\n"); }} END {{ printf("end\n"); }}"#);
        let r = udtrace(&["-wq", "-n", &program]);
        assert_eq!((r.code, r.stdout.as_str()), (0, "\nend\n\n"), "signal {sig}: {}", r.stderr);
        assert!(r.elapsed < std::time::Duration::from_secs(9), "{:?}", r.elapsed);
    }
}

#[test]
fn kernel_actions_are_errors() {
    for a in ["panic()", "chill(10)", "breakpoint()"] {
        let name = &a[..a.find('(').unwrap()];
        assert_eq!(
            tagged_error(&format!("BEGIN {{ {a}; }}")),
            format!("[D_UNKNOWN] line 1: {name}( ) is not available: udtrace traces user space only")
        );
    }
}

// ---- arguments of actions -------------------------------------------------------------

#[test]
fn actions_and_aggregations_as_arguments_get_their_actions_errors() {
    let cases = [
        ("BEGIN { trace(trace(1)); }", "[D_TRACE_VOID] line 1: trace( ) may not be applied to a void expression"),
        ("BEGIN { @a = count(); trace(@a); }", "[D_TRACE_DYN] line 1: trace( ) may not be applied to a dynamic expression"),
        (
            "BEGIN { exit(exit(0)); }",
            "[D_PROTO_ARG] line 1: exit( ) argument #1 is incompatible with prototype:\n\tprototype: int\n\t argument: void",
        ),
        (
            "BEGIN { @a = count(); trunc(@a, @a); }",
            "[D_PROTO_ARG] line 1: trunc( ) argument #2 is incompatible with prototype:\n\tprototype: int64_t\n\t argument: aggregation",
        ),
        (
            "BEGIN { clear(count()); }",
            "[D_CLEAR_AGGARG] line 1: clear( ) argument #1 is incompatible with prototype:\n\tprototype: aggregation\n\t argument: void",
        ),
        ("BEGIN { @[trace(0)] = count(); }", "[D_KEY_TYPE] line 1: void expression may not be used as aggregation index: key #1"),
        (
            r#"BEGIN { printf("%d", printf("")); }"#,
            "[D_PRINTF_ARG_TYPE] line 1: printf( ) argument #2 is incompatible with conversion #1 prototype:\n\tconversion: %d\n\t prototype: char, short, int, long, or long long\n\t  argument: void",
        ),
        (
            r#"BEGIN { @a = count(); printf("%d %d", 1, @a); }"#,
            "[D_PRINTF_ARG_TYPE] line 1: printf( ) argument #3 is incompatible with conversion #2 prototype:\n\tconversion: %d\n\t prototype: char, short, int, long, or long long\n\t  argument: aggregation",
        ),
    ];
    for (prog, want) in cases {
        let r = run_script(&["-x", "errtags"], prog);
        let got = r.stderr.split_once("prog.d: ").map_or(r.stderr.as_str(), |(_, m)| m).trim_end();
        assert_eq!(got, want, "{prog}");
    }
}

#[test]
fn action_prototypes_as_dtrace_declares_them() {
    let cases = [
        (
            "BEGIN { printf(1); }",
            "[D_PROTO_ARG] line 1: printf( ) argument #1 is incompatible with prototype:\n\tprototype: string\n\t argument: int",
        ),
        (
            "BEGIN { setopt(1); }",
            "[D_PROTO_ARG] line 1: setopt( ) argument #1 is incompatible with prototype:\n\tprototype: char *\n\t argument: int",
        ),
        (
            r#"BEGIN { setopt("quiet", "1", "2"); }"#,
            "[D_PROTO_LEN] line 1: setopt( ) prototype mismatch: 3 args passed, at most 2 expected",
        ),
        ("BEGIN { setopt(); }", "[D_PROTO_LEN] line 1: setopt( ) prototype mismatch: 0 args passed, at least 1 expected"),
        (
            r#"BEGIN { tracemem(0, "x"); }"#,
            "[D_PROTO_ARG] line 1: tracemem( ) argument #2 is incompatible with prototype:\n\tprototype: size_t\n\t argument: string",
        ),
        (
            "BEGIN { tracemem(0, 1, 2, 3); }",
            "[D_PROTO_LEN] line 1: tracemem( ) prototype mismatch: 4 args passed, at most 3 expected",
        ),
        (
            "BEGIN { print(1); }",
            "[D_PROTO_ARG] line 1: print( ) argument #1 is incompatible with prototype:\n\tprototype: void *\n\t argument: int",
        ),
    ];
    for (prog, want) in cases {
        let r = run_script(&["-x", "errtags"], prog);
        let got = r.stderr.split_once("prog.d: ").map_or(r.stderr.as_str(), |(_, m)| m).trim_end();
        assert_eq!(got, want, "{prog}");
    }
}

#[test]
fn aggregation_statement_errors() {
    assert_eq!(
        tagged_error("BEGIN { @[0][1] = count(); }"),
        "[D_AGG_MDIM] line 1: improper attempt to reference @ as a multi-dimensional array"
    );
    assert_eq!(tagged_error("BEGIN { @ = f(); }"), "[D_FUNC_UNDEF] line 1: undefined function name: f");
    assert_eq!(tagged_error("BEGIN { @a; }"), "[D_IDENT_UNDEF] line 1: failed to resolve @a: Unknown variable name");
    assert_eq!(tagged_error("BEGIN { @a[1]; }"), "[D_AGG_NULL] line 1: expression has null effect: @a");
}

// ---- quantize family -------------------------------------------------------------------

/// Oracle's llquantize(): negative values mirror positive ones around the underflow
/// bin, which reads "0" when factor^lmag is 1, and fewer steps than the factor work.
#[test]
fn llquantize_tables() {
    let out = quiet("BEGIN { @ = llquantize(-5, 4, 0, 1, 2); @ = llquantize(0, 4, 0, 1, 2); @ = llquantize(9, 4, 0, 1, 2, 3); exit(0); }");
    let want = concat!(
        "\n\n",
        "           value  ------------- Distribution ------------- count    \n",
        "              -8 |                                         0        \n",
        "              -4 |@@@@@@@@                                 1        \n",
        "              -2 |                                         0        \n",
        "              -1 |                                         0        \n",
        "               0 |@@@@@@@@                                 1        \n",
        "               1 |                                         0        \n",
        "               2 |                                         0        \n",
        "               4 |                                         0        \n",
        "               8 |@@@@@@@@@@@@@@@@@@@@@@@@                 3        \n",
        "           >= 16 |                                         0        \n",
        "\n",
    );
    assert_eq!(out, want);
}

#[test]
fn llquantize_parameter_rules() {
    assert_eq!(
        tagged_error("BEGIN { @ = llquantize(1, 10, 0, 6, 0); }"),
        "[D_LLQUANT_STEPTYPE] line 1: llquantize( ) argument #4 must be a non-zero positive integer constant"
    );
    assert_eq!(
        tagged_error("BEGIN { @ = llquantize(1, 10, 0, 6, 3); }"),
        "[D_LLQUANT_STEPVAL] line 1: llquantize() argument #4 (steps) must evenly divide argument #1 (factor) when steps<factor"
    );
    assert_eq!(
        tagged_error("BEGIN { @ = lquantize(1, 10, 10); }"),
        "[D_LQUANT_MISMATCH] line 1: lquantize( ) base (argument #1) must be less than limit (argument #2)"
    );
    assert_eq!(
        tagged_error("BEGIN { @ = lquantize(1, 0, 100, 0); }"),
        "[D_LQUANT_STEPTYPE] line 1: lquantize( ) argument #3 must be a non-zero positive integer constant"
    );
}

#[test]
fn quantize_shows_the_top_bucket() {
    let out = quiet("BEGIN { @ = quantize(0x4000000000000000, 3); exit(0); }");
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows[3], format!("{:>16} |{:40} 0        ", 1u64 << 61, ""));
    assert_eq!(rows[4], format!("{:>16} |{} 3        ", 1u64 << 62, "@".repeat(40)));
}

// ---- printf() ----------------------------------------------------------------------------

#[test]
fn printf_conversions_are_dtraces() {
    assert_eq!(
        tagged_error(r#"BEGIN { printf("%**d"); }"#),
        "[D_SYNTAX] line 1: format conversion #1 has more than one '*' specified for the output width"
    );
    assert_eq!(tagged_error(r#"BEGIN { printf("%z"); }"#), "[D_SYNTAX] line 1: format conversion #1 is undefined: %z");
    // z is no length modifier in D: the conversion is "z" itself.
    assert_eq!(
        tagged_error(r#"BEGIN { printf("%zu", 1); }"#),
        "[D_SYNTAX] line 1: format conversion #1 is undefined: %z"
    );
}

#[test]
fn printf_prints_floating_point_variables() {
    let out = quiet(r#"double d; float f; BEGIN { printf("%e|%f|%g|%E|%G\n", d, f, d, f, d); exit(0); }"#);
    assert_eq!(out, "0.000000e+00|0.000000|0|0.000000E+00|0\n\n");
}

#[test]
fn printf_widths_of_millions() {
    let out = quiet(r#"BEGIN { printf("%2000000d|%.1500000d\n", 1, 2); exit(0); }"#);
    assert_eq!(out.len(), 2_000_000 + 1 + 1_500_000 + 2);
    assert!(out.starts_with(&" ".repeat(1000)) && out.ends_with("02\n\n"));
}

#[test]
fn times_print_in_the_local_zone() {
    let r = udtrace_env(
        &["-q", "-n", r#"BEGIN { printf("%T|%T|%Y\n", (uint64_t)0, 1062609821000000000, (uint64_t)0); exit(0); }"#],
        &[("TZ", "America/Los_Angeles")],
    );
    // %T's year is strftime's %G, the ISO week-based year (1970 for Dec 31, 1969).
    assert_eq!(r.stdout, "Wed, 31 Dec 1970 16:00:00 PST|Wed, 03 Sep 2003 10:23:41 PDT|1969 Dec 31 16:00:00\n\n");
}

#[test]
fn aggregation_keys_take_the_type_of_their_first_use() {
    let out = quiet("BEGIN { @[(int32_t)1, 2] = count(); @[(int64_t)1, 2] = count(); exit(0); }");
    assert_eq!(out, format!("\n{:>9}{:>9}{:>17}\n", 1, 2, 2));
}
