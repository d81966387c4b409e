//! The default output of a run: the header and record lines, the notices, quiet
//! mode, `-o`, exit status, END, the timer provider and run-time faults.
//!
//! Layouts come from dtrace(1M) and libdtrace (dt_consume.c): header "%3s %6s %32s\n",
//! record prefix "%3d %6d %32s ", a newline after each record unless quiet, and one
//! more newline when tracing ends.

mod common;

use common::*;

/// The BEGIN record line of probe 1 on `cpu`, with `data` after the prefix.
fn begin_line(cpu: u32, data: &str) -> String {
    format!("{cpu:>3} {:>6} {:>32} {data}\n", 1, ":BEGIN")
}

#[test]
fn printf_in_begin_default_mode() {
    let r = udtrace(&["-n", r#"BEGIN { printf("%s %d\n", "hello", 42); exit(0); }"#]);
    assert_eq!(r.code, 0);
    // dc_name is the -n text cut at the first '{', trailing space kept.
    assert_eq!(r.stderr, "udtrace: description 'BEGIN ' matched 1 probe\n");
    let lines: Vec<&str> = r.stdout.split_inclusive('\n').collect();
    assert_eq!(lines[0], HEADER);
    let (cpu, rest) = split_cpu(lines[1]);
    assert!(cpu < ncpus(), "cpu {cpu}");
    assert_eq!(rest, "      1                           :BEGIN hello 42\n");
    // printf's own newline, the record's newline, then the one printed at exit.
    assert_eq!(r.stdout, format!("{HEADER}{}\n\n", begin_line(cpu, "hello 42")));
}

#[test]
fn printf_in_begin_quiet_mode() {
    let r = udtrace(&["-q", "-n", r#"BEGIN { printf("%s %d\n", "hello", 42); exit(0); }"#]);
    // Quiet: no header, no prefix, no notice; dtrace still ends with a newline.
    assert_eq!(r.ok(), "hello 42\n\n");
}

#[test]
fn quiet_pragma_and_x_option_are_quiet_too() {
    let r = udtrace(&["-x", "quiet", "-n", r#"BEGIN { printf("x\n"); exit(0); }"#]);
    assert_eq!(r.ok(), "x\n\n");
    let r = run_script(&[], "#pragma D option quiet\nBEGIN { printf(\"y\\n\"); exit(0); }\n");
    assert_eq!(r.ok(), "y\n\n");
}

#[test]
fn script_notice_names_the_script() {
    let p = write_temp("named.d", "BEGIN { exit(0); }\nEND { }\n");
    let path = p.to_str().unwrap();
    let r = udtrace(&["-s", path]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stderr, format!("udtrace: script '{path}' matched 2 probes\n"));
}

#[test]
fn tick_probe_counts_about_a_second() {
    let r = udtrace(&["-q", "-n", r#"tick-10ms { n++; } tick-1s { printf("%d\n", n); exit(0); }"#]);
    let out = r.ok();
    let n: u32 = out.strip_suffix("\n\n").expect("count then the final newline").parse().unwrap();
    // 100 ticks of 10 ms in a second, less whatever timer slack loses.
    assert!((90..=101).contains(&n), "tick-10ms fired {n} times in tick-1s");
    let secs = r.elapsed.as_secs_f64();
    assert!((0.8..3.0).contains(&secs), "run took {secs} s");
}

#[test]
fn profile_probe_names_match_and_fire() {
    // profile-N fires on every CPU: at least one firing before the tick ends it.
    let r = udtrace(&["-q", "-n", r#"profile-97hz { n++; } tick-200ms { printf("%d\n", n > 0); exit(0); }"#]);
    assert_eq!(r.ok(), "1\n\n");
}

#[test]
fn only_data_recording_clauses_print_a_record_line() {
    // Assignments and aggregations record nothing: no line. exit() records an int.
    let r = udtrace(&[
        "-n",
        "BEGIN { x = 1; self->y = 2; this->z = 3; i++; } BEGIN { @a = count(); @b[1] = sum(3); } BEGIN { exit(0); }",
    ]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.split_inclusive('\n').collect();
    assert_eq!(lines[0], HEADER);
    let (cpu, _) = split_cpu(lines[1]);
    // The two aggregations print at exit, unkeyed count then keyed sum (int key: %8d).
    let want = format!("{HEADER}{}\n{:>17}\n {:>8} {:>16}\n", begin_line(cpu, ""), 1, 1, 3);
    assert_eq!(r.stdout, want);
}

#[test]
fn an_empty_clause_prints_a_record_line() {
    // An empty action list still records the EPID, so "BEGIN {}" has its line.
    let r = udtrace(&["-n", "BEGIN { } BEGIN { x = 1; exit(0); }"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stderr, "udtrace: description 'BEGIN ' matched 2 probes\n");
    let (cpu, _) = split_cpu(r.stdout.lines().nth(1).unwrap());
    assert_eq!(r.stdout, format!("{HEADER}{}{}\n", begin_line(cpu, ""), begin_line(cpu, "")));
}

#[test]
fn an_aggregation_only_program_prints_no_header() {
    // The header comes with the first record; a run without records has none. The
    // run ends when the -c command exits, so no exit() record is needed.
    let r = udtrace(&["-c", "sleep 0.1", "-n", "BEGIN { @ = count(); x = 1; } tick-20ms { @ = count(); }"]);
    assert_eq!(r.code, 0);
    let n: u64 = r.stdout.strip_prefix('\n').and_then(|s| s.strip_suffix('\n')).unwrap().trim_start().parse().unwrap();
    assert!(n >= 1, "{:?}", r.stdout);
    assert_eq!(r.stdout, format!("\n{n:>17}\n"));
}

#[test]
fn output_file_appends() {
    let dir = temp_dir();
    let file = dir.join("out.txt");
    std::fs::write(&file, "old\n").unwrap();
    let f = file.to_str().unwrap();
    for _ in 0..2 {
        let r = udtrace(&["-o", f, "-n", r#"BEGIN { trace("x"); exit(0); }"#]);
        assert_eq!(r.code, 0);
        assert_eq!(r.stdout, "", "-o takes the trace output");
        // Notices still go to stderr.
        assert_eq!(r.stderr, "udtrace: description 'BEGIN ' matched 1 probe\n");
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Each run's CPU column is its own.
    let one = |line: &str| {
        let (cpu, _) = split_cpu(line);
        // A string traced by default prints as "  %-33s".
        format!("{HEADER}{}\n", begin_line(cpu, &format!("  {:<33}", "x")))
    };
    assert_eq!(text, format!("old\n{}{}", one(lines[2]), one(lines[5])));
}

#[test]
fn exit_status_is_the_exit_action_value() {
    let r = udtrace(&["-q", "-n", "BEGIN { exit(3); }"]);
    assert_eq!(r.code, 3);
    assert_eq!(r.stdout, "\n");
    assert_eq!(udtrace(&["-q", "-n", "BEGIN { exit(0); }"]).code, 0);
    // The first exit() of a firing decides.
    assert_eq!(udtrace(&["-q", "-n", "BEGIN { exit(5); } BEGIN { exit(6); }"]).code, 5);
}

#[test]
fn a_compile_error_exits_1() {
    let r = udtrace(&["-n", "BEGIN { trace(nosuchvar); }"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { trace(nosuchvar); }: in action list: failed to resolve nosuchvar: Unknown variable name"
    );
}

#[test]
fn a_description_that_matches_nothing_is_an_error() {
    let r = udtrace(&["-n", "nosuch:::probe { }"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier nosuch:::probe { }: probe description nosuch:::probe does not match any probes"
    );
}

#[test]
fn end_runs_after_exit() {
    let out = quiet(r#"BEGIN { printf("begin\n"); exit(0); } END { printf("end\n"); }"#);
    assert_eq!(out, "begin\nend\n\n");
    // exit() does not stop the rest of its clause, but no other clause of the firing
    // runs after it (DTrace's clauses check the activity state, now draining).
    let out =
        quiet(r#"BEGIN { printf("a\n"); exit(0); printf("b\n"); } BEGIN { printf("c\n"); } END { printf("d\n"); }"#);
    assert_eq!(out, "a\nb\nd\n\n");
}

#[test]
fn end_record_line_uses_probe_2() {
    let r = udtrace(&["-n", "BEGIN { exit(0); } END { trace(7); }"]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.split_inclusive('\n').collect();
    let (cpu, _) = split_cpu(lines[1]);
    let (cpu2, _) = split_cpu(lines[2]);
    // trace() of an int: " %10d" after the prefix's own trailing space.
    let end = format!("{cpu2:>3} {:>6} {:>32}  {:>10}\n", 2, ":END", 7);
    assert_eq!(r.stdout, format!("{HEADER}{}{end}\n", begin_line(cpu, "")));
}

#[test]
fn divide_by_zero_reports_and_tracing_goes_on() {
    // z is a global int: 0. The faulting clause is dt_clause_0, on probe 1 (BEGIN).
    let r = udtrace(&[
        "-q",
        "-n",
        r#"int z; BEGIN { trace(1 / z); } BEGIN { printf("goes on\n"); exit(0); } ERROR { printf("fault probe=%d clause=%d type=%d\n", arg1, arg2, arg4); }"#,
    ]);
    assert_eq!(r.code, 0);
    // Errors are not notices: -q does not hide them.
    assert_eq!(r.stderr, "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): divide-by-zero at BPF pc 2\n");
    // ERROR fires at the fault, before the next clause; arg4 is DTRACEFLT_DIVZERO (4).
    assert_eq!(r.stdout, "fault probe=1 clause=0 type=4\ngoes on\n\n");
}

#[test]
fn a_fault_discards_the_clause_record() {
    // The faulting clause's printf output before the fault is dropped with its record.
    let r = udtrace(&["-q", "-n", r#"int z; BEGIN { printf("lost\n"); trace(5 % z); } BEGIN { exit(0); }"#]);
    assert_eq!(r.stdout, "\n");
    assert_eq!(r.stderr, "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): divide-by-zero at BPF pc 3\n");
}

#[test]
fn a_fault_in_the_predicate_is_at_the_start_of_the_clause() {
    let r = udtrace(&["-q", "-n", r#"int z; BEGIN / 1 / z / { } BEGIN { exit(0); }"#]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stderr, "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): divide-by-zero at BPF pc 1\n");
}

#[test]
fn constant_division_by_zero_is_a_compile_error() {
    // dt_node_op2 rejects it while parsing, so no clause region is named.
    let r = udtrace(&["-n", "BEGIN { x = 1 / 0; }"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { x = 1 / 0; }: expression contains division by zero"
    );
}

/// dtrace's testing mode (`_DTRACE_TESTING` set, as DTrace's own test suite runs it)
/// drops the CPU and ID columns from the header and every record.
#[test]
fn testing_mode_drops_cpu_and_id() {
    let r = udtrace_env(&["-n", "BEGIN { trace(7); exit(0); }"], &[("_DTRACE_TESTING", "t")]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout, format!("{:>32}\n{:>32} {:>11}\n\n", "FUNCTION:NAME", ":BEGIN", 7));
}

/// `-F` indents calls as dtrace's flowindent does: entries open a level, returns
/// close it, other probes show `| function:name` at the level; the header and every
/// record are printed quiet or not (`_DTRACE_TESTING` drops the CPU column, as
/// dtrace's testing mode does). `probes chain 1` calls chain_a → chain_b → chain_c
/// once.
#[test]
fn flowindent_nests_entries_and_returns() {
    let target = format!("{}/probes chain 1", env!("UDTRACE_FIXTURES"));
    let script = "BEGIN { } pid$target::chain_*:entry, pid$target::chain_*:return { } \
                  pid$target::chain_b:return { printf(\"b done\"); } pid$target::chain_c:entry { trace(arg0); }";
    let r = udtrace_env(&["-qF", "-n", script, "-c", &target], &[("_DTRACE_TESTING", "t")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pad = |s: &str| format!("{s:<41} ");
    let want = [
        format!("{:<41}\n", "FUNCTION"),
        pad("| :BEGIN"),
        pad(" -> chain_a"),
        pad("   -> chain_b"),
        pad("     -> chain_c"),
        // A second clause's record of the same firing opens no level.
        format!("{}6", pad("      | chain_c:entry")),
        pad("     <- chain_c"),
        // Of two clauses on chain_b's return, the last one's record closes the level.
        pad("    | chain_b:return"),
        format!("{}b done", pad("   <- chain_b")),
        pad(" <- chain_a"),
    ]
    .concat();
    // The program's own line is in the same stdout.
    let trace = r.stdout.replacen("chain 1 sink=6\n", "", 1);
    assert_eq!(trace.strip_suffix('\n').unwrap_or(&trace), want, "{}", r.stderr);
}
