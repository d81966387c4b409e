//! Actions: trace() of every integer size and of strings in both modes, tracemem(),
//! printf() conversions and flags, speculations, and setopt().
//!
//! trace() layout (Oracle's dt_consume.c dt_print_trace): integers by size and
//! signedness, " %3hhd", " %5hd", " %10d", " %19ld" (unsigned " %3hhu" … " %20lu"),
//! strings "  %-33s"; quiet mode prints the bare value.

mod common;

use common::*;

const INTS: &str = r#"trace((char)-1); trace((unsigned char)200); trace((short)-1); trace((unsigned short)7);
    trace(-1); trace((unsigned)-1); trace(1); trace((long long)-1); trace((unsigned long long)-1); trace(1LL << 40);
    trace("str");"#;

#[test]
fn trace_every_integer_size_default_mode() {
    let r = udtrace(&["-n", &format!("BEGIN {{ {INTS} exit(0); }}")]);
    assert_eq!(r.code, 0);
    let line = r.stdout.lines().nth(1).unwrap();
    let (cpu, _) = split_cpu(line);
    let data = [
        "  -1".to_string(),
        " 200".into(),
        "    -1".into(),
        "     7".into(),
        format!(" {:>10}", -1),
        format!(" {:>10}", u32::MAX),
        format!(" {:>10}", 1),
        format!(" {:>19}", -1),
        format!(" {:>20}", u64::MAX),
        format!(" {:>19}", 1u64 << 40),
        format!("  {:<33}", "str"),
    ]
    .concat();
    assert_eq!(r.stdout, format!("{HEADER}{cpu:>3} {:>6} {:>32} {data}\n\n", 1, ":BEGIN"));
}

#[test]
fn trace_every_integer_size_quiet_mode() {
    let out = quiet(&format!("BEGIN {{ {INTS} exit(0); }}"));
    // Quiet: "%d" / "%lld" with no separators, strings bare.
    assert_eq!(out, format!("-1200-17-1{}1-1{}{}str\n", u32::MAX, u64::MAX, 1u64 << 40));
}

#[test]
fn tracemem_dumps_hex_and_ascii() {
    // A string is not memory to dump (D_TRACEMEM_ADDR): fill scratch space instead.
    let out = quiet(
        "BEGIN { this->p = (uint64_t *)alloca(24); this->p[0] = 0x6867666564636261; \
         this->p[1] = 0x706f6e6d6c6b6a69; this->p[2] = 0x74737271; tracemem(this->p, 20); exit(0); }",
    );
    let want = concat!(
        "\n             0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f  0123456789abcdef\n",
        "         0: 61 62 63 64 65 66 67 68 69 6a 6b 6c 6d 6e 6f 70  abcdefghijklmnop\n",
        "        10: 71 72 73 74                                      qrst\n",
        "\n",
    );
    assert_eq!(out, want);
}

fn pf(fmt: &str, args: &str) -> String {
    let out = quiet(&format!(r#"BEGIN {{ printf("{fmt}", {args}); exit(0); }}"#));
    out.strip_suffix('\n').expect("final newline").to_string()
}

#[test]
fn printf_integer_conversions() {
    assert_eq!(
        pf("[%d][%i][%u][%x][%X][%o][%c][%%]", "-5, 42, -1, 255, 255, 8, 65"),
        "[-5][42][4294967295][ff][FF][10][A][%]"
    );
    // %d of an unsigned type prints it unsigned.
    assert_eq!(pf("[%d]", "(unsigned)-1"), "[4294967295]");
    assert_eq!(
        pf(
            "[%hd][%ld][%lld][%lu][%llx][%hx]",
            "(short)70000, (long)-1, (long long)-1, (unsigned long)-1, (long long)-1, (short)-1"
        ),
        "[4464][-1][-1][18446744073709551615][ffffffffffffffff][ffff]"
    );
}

#[test]
fn printf_flags_widths_and_precisions() {
    assert_eq!(
        pf(
            "[%5d][%-5d][%05d][%+d][% d][%#x][%#o][%.3s][%10s][%-10s][%-*s][%*d][%.2d][%8.3x]",
            r#"42, 42, 42, 42, 42, 255, 8, "abcdef", "hi", "hi", 6, "ab", 4, 7, 3, 255"#
        ),
        "[   42][42   ][00042][+42][ 42][0xff][010][abc][        hi][hi        ][ab    ][   7][03][     0ff]"
    );
    assert_eq!(pf("[%c%c][%5c][%-3c]", "'A', 66, 67, 68"), "[AB][    C][D  ]");
}

#[test]
fn printf_pointers_and_addresses() {
    // %p prints the address in hex, no prefix; %a an unknown address as 0x...
    assert_eq!(pf("[%p][%a]", "(void *)0x1234, 0x1234"), "[1234][0x1234]");
}

#[test]
fn printf_escaped_strings() {
    let out = pf("[%S]", r#""a\tb\n\\\"""#);
    // strchr2esc escapes each character, then the string's terminating NUL as \0.
    assert!(out.starts_with(r#"[a\tb\n\\\"\0"#), "{out:?}");
    assert!(out.ends_with(']'));
}

#[test]
fn printf_time() {
    // One 365-day year after the epoch, in UTC.
    let r = udtrace_env(
        &["-q", "-n", r#"BEGIN { printf("[%Y]\n", (int64_t)1000000000 * 86400 * 365); exit(0); }"#],
        &[("TZ", "UTC")],
    );
    assert_eq!(r.ok(), "[1971 Jan  1 00:00:00]\n\n");
}

#[test]
fn printf_float_conversions_need_floats() {
    // D has no floating-point values, so %e/%f/%g never accept an int.
    for conv in ["e", "f", "g"] {
        let prog = format!(r#"BEGIN {{ printf("%{conv}", 1); }}"#);
        let r = udtrace(&["-n", &prog]);
        assert_eq!(r.code, 1);
        let want = format!(
            "udtrace: invalid probe specifier {prog}: printf( ) argument #2 is incompatible with conversion #1 prototype:\n\
             \tconversion: %{conv}\n\t prototype: float, double, or long double\n\t  argument: int\n"
        );
        assert!(r.stderr.starts_with(&want), "{}", r.stderr);
    }
}

#[test]
fn printf_user_symbol_needs_a_target() {
    let prog = r#"BEGIN { printf("%A", 1); }"#;
    let r = udtrace(&["-n", prog]);
    assert_eq!(r.code, 1);
    let want = format!(
        "udtrace: invalid probe specifier {prog}: printf( ) argument #2 is incompatible with conversion #1 prototype:\n\
         \tconversion: %A\n\t prototype: pointer or integer (with -p/-c) or _usymaddr (without -p/-c)\n\t  argument: int\n"
    );
    assert!(r.stderr.starts_with(&want), "{}", r.stderr);
}

#[test]
fn kernel_symbol_conversion_refuses_a_user_symbol() {
    // %a is for kernel addresses (dt_printf.c pfcheck_kaddr): a ufunc() value, of
    // DTrace's type _usymaddr, is refused, in printf and in printa on such a key.
    for (act, prog) in [
        ("printf", r#"BEGIN { printf("%a", ufunc(0)); }"#),
        ("printa", r#"BEGIN { @[ufunc(0)] = count(); printa("%a %@d", @); }"#),
    ] {
        let r = udtrace(&["-n", prog]);
        assert_eq!(r.code, 1);
        let want = format!(
            "udtrace: invalid probe specifier {prog}: {act}( ) argument #2 is incompatible with conversion #1 prototype:\n\
             \tconversion: %a\n\t prototype: pointer or integer\n\t  argument: _usymaddr\n"
        );
        assert_eq!(r.stderr, want);
    }
}

#[test]
fn printf_argument_count_is_checked() {
    let r = udtrace(&["-n", r#"BEGIN { printf("%d %d\n", 1); }"#]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        r#"udtrace: invalid probe specifier BEGIN { printf("%d %d\n", 1); }: printf( ) prototype mismatch: conversion #2 (%d) is missing a corresponding value argument"#
    );
    let r = udtrace(&["-n", r#"BEGIN { printf("hi\n", 1); }"#]);
    assert_eq!(
        r.first_error_line(),
        r#"udtrace: invalid probe specifier BEGIN { printf("hi\n", 1); }: printf( ) prototype mismatch: only 0 arguments required by this format string"#
    );
}

#[test]
fn committed_speculations_print_and_discarded_ones_do_not() {
    // commit() and discard() may not share a clause with data-recording actions.
    let prog = r#"BEGIN { a = speculation(); b = speculation(); }
        BEGIN { speculate(a); printf("kept\n"); }
        BEGIN { speculate(b); printf("dropped\n"); }
        BEGIN { printf("plain\n"); }
        BEGIN { commit(a); }
        BEGIN { discard(b); }
        BEGIN { exit(0); }"#;
    let r = udtrace(&["-q", "-x", "nspec=2", "-n", prog]);
    assert_eq!(r.ok(), "plain\nkept\n\n");
}

#[test]
fn speculation_ids_run_out_at_nspec() {
    // The default nspec is 1: a second active speculation is not available (0).
    let r =
        udtrace(&["-q", "-n", r#"BEGIN { a = speculation(); b = speculation(); printf("%d %d\n", a, b); exit(0); }"#]);
    assert_eq!(r.stdout, "1 0\n\n");
    assert_eq!(r.stderr, "udtrace: 1 failed speculation (no speculative buffer available)\n");
}

#[test]
fn setopt_quiet_takes_effect_from_its_record() {
    // Quiet from the start; setopt turns it off while BEGIN's record is consumed,
    // so that record ends with a newline. The header was due at the first record
    // (quiet then), so it never appears.
    let r = udtrace(&["-q", "-n", r#"BEGIN { setopt("quiet", "no"); exit(0); } END { trace(5); }"#]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.split_inclusive('\n').collect();
    assert_eq!(lines[0], "\n");
    let (cpu, _) = split_cpu(lines[1]);
    assert_eq!(r.stdout, format!("\n{cpu:>3} {:>6} {:>32}  {:>10}\n\n", 2, ":END", 5));
}

#[test]
fn setopt_without_a_value_sets_a_toggle() {
    // A bare setopt("quiet") (or a number) sets it: END prints quietly.
    let r = udtrace(&["-n", r#"BEGIN { setopt("quiet"); exit(0); } END { printf("end\n"); }"#]);
    let lines: Vec<&str> = r.stdout.split_inclusive('\n').collect();
    assert_eq!(lines[0], HEADER);
    let (cpu, _) = split_cpu(lines[1]);
    // BEGIN's record: prefix (not yet quiet), no newline (quiet by then).
    assert_eq!(r.stdout, format!("{HEADER}{cpu:>3} {:>6} {:>32} end\n\n", 1, ":BEGIN"));
    let r = udtrace(&["-n", r#"BEGIN { setopt("quiet", "0"); } BEGIN { exit(0); } END { printf("end\n"); }"#]);
    assert!(r.stdout.ends_with(":BEGIN end\n\n"), "{:?}", r.stdout);
}

#[test]
fn setopt_aggsortkey_changes_later_printing() {
    let out = quiet(
        r#"BEGIN { @["b"] = sum(1); @["a"] = sum(2); printa("%s ", @); setopt("aggsortkey"); }
           BEGIN { printa("%s ", @); printf("\n"); exit(0); }"#,
    );
    assert_eq!(out, "b a a b \n\n");
}

#[test]
fn speculate_without_an_active_speculation_drops_the_record() {
    // No buffer for speculation 0 (or an inactive one, or one past nspec): the
    // clause stops and its data goes nowhere, without an error.
    let out = quiet(r#"BEGIN { speculate(0); printf("lost\n"); } BEGIN { printf("kept\n"); exit(0); }"#);
    assert_eq!(out, "kept\n\n");
    let r = udtrace(&["-q", "-n", r#"BEGIN { speculate(5); printf("x"); } BEGIN { exit(0); }"#]);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("\n", ""));
}

#[test]
fn committed_records_follow_the_committing_record() {
    let r = udtrace(&[
        "-n",
        r#"BEGIN { a = speculation(); } BEGIN { speculate(a); printf("kept"); } BEGIN { commit(a); } BEGIN { exit(0); }"#,
    ]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.split_inclusive('\n').collect();
    let line = |i: usize, data: &str| {
        let (cpu, _) = split_cpu(lines[i]);
        format!("{cpu:>3} {:>6} {:>32} {data}\n", 1, ":BEGIN")
    };
    // The commit clause prints nothing itself: the speculated record, then exit's.
    let want = format!("{HEADER}{}{}\n", line(1, "kept"), line(2, ""));
    assert_eq!(r.stdout, want);
}

#[test]
fn speculation_action_order_is_checked() {
    // dt_cg_clsflags's rules, raised while compiling statements (no region label).
    for (body, msg) in [
        (r#"printf("x"); commit(1);"#, "commit( ) may not follow data-recording action(s)"),
        ("commit(1); exit(0);", "data-recording actions may not follow commit( )"),
        ("@a = count(); commit(1);", "commit( ) may not follow data-recording action(s)"),
        ("commit(1); @a = count();", "aggregating actions may not follow commit( )"),
        ("trace(1); speculate(1);", "speculate( ) may not follow data-recording action(s)"),
        ("speculate(1); speculate(1);", "speculate( ) may not follow speculate( )"),
        ("speculate(1); @a = count();", "aggregating actions may not follow speculate( )"),
        ("speculate(1); exit(0);", "exit( ) may not follow speculate( )"),
    ] {
        let prog = format!("BEGIN {{ {body} }}");
        let r = udtrace(&["-n", &prog]);
        assert_eq!(r.code, 1, "{prog}");
        assert_eq!(r.first_error_line(), format!("udtrace: invalid probe specifier {prog}: {msg}"));
    }
    // Assignments and discard() record nothing, so they may surround these.
    let out = quiet("BEGIN { x = 1; speculate(0); y = 2; } BEGIN { commit(0); discard(0); z = 3; } BEGIN { exit(0); }");
    assert_eq!(out, "\n");
}
