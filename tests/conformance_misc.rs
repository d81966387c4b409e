//! Odds and ends of DTrace's behaviour, end to end: the kernel's short type names,
//! statement numbers in fault messages, walltimestamp's clock, and how long dtrace
//! takes to notice exit() under slow status and switch rates.

mod common;

use std::time::Duration;

use common::{quiet, run_script, udtrace};

// ---- <linux/types.h> names, which DTrace finds in the kernel's CTF ----------------

#[test]
fn kernel_short_type_names_are_types() {
    assert_eq!(quiet(r#"BEGIN { printf("%d\n", (uint)-12345); exit(0); }"#), "4294954951\n\n");
    assert_eq!(
        quiet(
            r#"BEGIN { printf("%d %d %d %d\n", sizeof (uint), sizeof (ulong), sizeof (ushort), sizeof (unchar)); exit(0); }"#
        ),
        "4 8 2 1\n\n"
    );
    assert_eq!(
        quiet(
            r#"BEGIN { printf("%d %d %d %d\n", sizeof (u_int), sizeof (u_long), sizeof (u_short), sizeof (u_char)); exit(0); }"#
        ),
        "4 8 2 1\n\n"
    );
}

// ---- dt_clause_N: one statement per probe description ----------------------------

#[test]
fn fault_messages_number_statements_per_probe_description() {
    // The first clause has three descriptions, so it is statements 0, 1 and 2, and
    // the faulting clause is statement 3.
    let r = run_script(
        &["-q"],
        "BEGIN, ERROR, END { printf(\"%s\\n\", probename); }\n\
         BEGIN { *((int *)0); }\n\
         BEGIN, ERROR { exit(0); }\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "BEGIN\nERROR\nEND\n\n");
    assert!(
        r.stderr.contains("error in dt_clause_3 for probe ID 1 (dtrace:::BEGIN): invalid address (0x0)"),
        "{}",
        r.stderr
    );
}

#[test]
fn error_arg2_is_the_statement_number() {
    let r = run_script(
        &["-q"],
        "END, BEGIN /0/ { }\n\
         BEGIN { *((int *)0); }\n\
         ERROR { printf(\"%d\\n\", arg2); exit(0); }\n",
    );
    assert_eq!(r.stdout, "2\n\n", "{}", r.stderr);
}

// ---- walltimestamp reads the clock at each use -----------------------------------

#[test]
fn walltimestamp_advances_within_a_clause() {
    let out = quiet(
        "BEGIN { a = walltimestamp; b = walltimestamp; c = walltimestamp; \
         printf(\"%d %d\\n\", b >= a && c >= b, c > a); exit(0); }",
    );
    assert_eq!(out, "1 1\n\n");
}

// ---- exit() is noticed at dtrace's next status check, then one buffer switch ----

#[test]
fn a_slow_switchrate_delays_end_after_exit() {
    let r = udtrace(&["-xswitchrate=3sec", "-qn", "BEGIN { exit(0); } END { printf(\"end\\n\"); }"]);
    assert_eq!(r.stdout, "end\n\n", "{}", r.stderr);
    assert!(r.elapsed >= Duration::from_millis(2900), "took {:?}", r.elapsed);
}

#[test]
fn a_slow_statusrate_delays_end_to_the_next_status_check() {
    // exit() at about 1 s; status checks at 0 s and 3 s (after BEGIN).
    let r = udtrace(&[
        "-xstatusrate=3sec",
        "-qn",
        "BEGIN { t = timestamp; } tick-1sec { exit(0); } \
         END { printf(\"%d\\n\", (timestamp - t) / 1000000000); }",
    ]);
    assert_eq!(r.stdout, "3\n\n", "{}", r.stderr);
}

#[test]
fn exit_in_begin_is_noticed_at_the_first_status_check() {
    let r = udtrace(&["-xstatusrate=10sec", "-qn", "BEGIN { exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(5), "took {:?}", r.elapsed);
}

#[test]
fn default_rates_do_not_delay_exit() {
    let r = udtrace(&["-qn", "tick-10ms { exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_millis(900), "took {:?}", r.elapsed);
}

// ---- folded integer constants keep all 64 bits until stored or recorded ---------

#[test]
fn folded_constants_are_not_cut_to_int_where_they_meet_64_bit_values() {
    let out = quiet(
        "BEGIN { t = timestamp; printf(\"%d\\n\", (t + 10 * 1000000000) - t); \
         @s = sum(10 * 1000000000); @m = min(-5 * 1000000000); exit(0); }",
    );
    assert_eq!(out, "10000000000\n\n      10000000000\n      -5000000000\n");
}

#[test]
fn folded_constants_recorded_as_int_are_cut_to_int() {
    // printf records an int argument in four bytes, as DTrace does.
    assert_eq!(quiet("BEGIN { printf(\"%d\\n\", 0x7fffffff + 1); exit(0); }"), "-2147483648\n\n");
    assert_eq!(quiet("BEGIN { x = 10 * 1000000000; printf(\"%d\\n\", x); exit(0); }"), "1410065408\n\n");
}

// ---- printa's %@T and %@Y are in local time, as printf's %T and %Y ---------------

#[test]
fn printa_time_conversions_use_the_local_zone() {
    let r = common::udtrace_env(
        &[
            "-qn",
            "BEGIN { @t = min(1075064400 * 1000000000); printa(\"%@T\\n\", @t); printa(\"%@Y\\n\", @t); exit(0); }",
        ],
        &[("TZ", "America/Los_Angeles")],
    );
    assert_eq!(r.stdout, "Sun, 25 Jan 2004 13:00:00 PST\n2004 Jan 25 13:00:00\n\n", "{}", r.stderr);
}

// ---- -x aggpercpu: each CPU's value after the aggregated one ---------------------

#[test]
fn aggpercpu_prints_each_cpus_value() {
    let r =
        udtrace(&["-xaggpercpu", "-xcpu=0", "-qn", "BEGIN { @c = count(); @m = min(5); @s[1] = sum(7); exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().filter(|l| !l.is_empty()).collect();
    let ncpu = common::ncpus() as usize;
    assert_eq!(lines.len(), 3 * (1 + ncpu), "{}", r.stdout);
    assert_eq!(lines[0].trim(), "1");
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["[CPU", "0]", "1"]);
    // A CPU where the clause never ran shows the function's initial value.
    let min_at = 1 + ncpu;
    assert_eq!(lines[min_at].trim(), "5");
    if ncpu > 1 {
        assert_eq!(lines[min_at + 2].split_whitespace().nth(2), Some("9223372036854775807"));
        assert_eq!(lines[2].split_whitespace().nth(2), Some("0"));
    }
    let sum_at = 2 * (1 + ncpu);
    assert_eq!(lines[sum_at].split_whitespace().collect::<Vec<_>>(), ["1", "7"]);
    assert_eq!(lines[sum_at + 1].split_whitespace().collect::<Vec<_>>(), ["[CPU", "0]", "7"]);
}

// ---- reads past a translated struct through a cast do not fault ------------------

#[test]
fn a_cast_may_read_past_curlwpsinfos_member() {
    // DTrace keeps the translated struct in scratch memory; the byte read is not
    // defined, but the read succeeds.
    let r = udtrace(&["-qn", "BEGIN { trace(((char *)curlwpsinfo->pr_name)[32]); exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
}
