//! The D language end to end: C integer semantics, operators, variables of every
//! scope, associative arrays, declarations, macro arguments and NULL. Expected
//! values follow C's conversion rules, which D keeps, and DTrace's documented
//! behaviour.

mod common;

use common::*;

/// Runs `printf(fmt, args)` in BEGIN and returns its output (without the final newline).
fn p(decls: &str, fmt: &str, args: &str) -> String {
    let out = quiet(&format!(r#"{decls} BEGIN {{ printf("{fmt}", {args}); exit(0); }}"#));
    out.strip_suffix('\n').expect("the final newline").to_string()
}

#[test]
fn casts_truncate_and_extend() {
    // Conversions to a narrower type keep the low bits; signed ones sign-extend.
    assert_eq!(
        p("", "%d %d %d %d", "(char)300, (unsigned char)-1, (short)70000, (unsigned short)-1"),
        "44 255 4464 65535"
    );
    assert_eq!(p("", "%d %d", "(int)4294967297, (long long)(int)-1"), "1 -1");
    assert_eq!(p("", "%d %d", "(unsigned)(unsigned char)-1, (int)(char)200"), "255 -56");
}

#[test]
fn usual_arithmetic_conversions_in_comparisons() {
    // int vs unsigned int: -1 becomes UINT_MAX, so it is not below 1u.
    assert_eq!(p("", "%d %d", "-1 < 1u, -1 < 1"), "0 1");
    // unsigned char promotes to int, which keeps -1 negative.
    assert_eq!(p("", "%d", "(unsigned char)1 > -1"), "1");
    // int vs unsigned long: converted to the 64-bit unsigned type.
    assert_eq!(p("", "%d", "-1 < 1ul"), "0");
    assert_eq!(p("", "%d", "(char)-1 == -1"), "1");
}

#[test]
fn sizes_of_types_and_expressions() {
    assert_eq!(
        p(
            "",
            "%d %d %d %d %d %d",
            "sizeof (char), sizeof (short), sizeof (int), sizeof (long), sizeof (long long), sizeof (void *)"
        ),
        "1 2 4 8 8 8"
    );
    // int + long is long; a constant is int unless it needs more.
    assert_eq!(p("", "%d %d %d %d", "sizeof (1), sizeof (1L), sizeof (1u + 1L), sizeof (4294967296)"), "4 8 8 8");
}

#[test]
fn division_and_remainder_truncate_toward_zero() {
    assert_eq!(p("", "%d %d %d %d", "-7 / 2, -7 % 2, 7 / -2, 7 % -2"), "-3 -1 -3 1");
    assert_eq!(p("", "%u %u", "(unsigned)-8 / 2, (unsigned)-8 % 5"), "2147483644 3");
}

#[test]
fn shifts() {
    // >> of a signed value is arithmetic, of an unsigned one logical.
    assert_eq!(p("", "%d %d %u %d", "1 << 4, -16 >> 2, (unsigned)0x80000000 >> 31, 0x100 >> 4"), "16 -4 1 16");
    assert_eq!(p("", "%llx", "1LL << 40"), "10000000000");
}

#[test]
fn bitwise_and_logical_operators() {
    assert_eq!(p("", "%x %x %x %x", "0xf0 | 0x0f, 0xff & 0x3c, 0xff ^ 0x0f, ~0 & 0xff"), "ff 3c f0 ff");
    assert_eq!(p("", "%d %d %d %d", "1 ^^ 0, 1 ^^ 1, 0 ^^ 0, 2 ^^ 0"), "1 0 0 1");
    assert_eq!(p("", "%d %d %d %d", "1 && 2, 0 || 0, !5, !0"), "1 0 0 1");
}

#[test]
fn conditional_operator() {
    assert_eq!(p("", "%d %d %s", "1 ? 5 : 6, 0 ? 5 : 6, 3 > 2 ? \"big\" : \"small\""), "5 6 big");
    assert_eq!(p("", "%d", "0 ? 1 : 2 ? 3 : 4"), "3");
}

#[test]
fn increment_and_decrement() {
    // Arguments are evaluated left to right.
    let out = quiet(r#"BEGIN { x = 5; printf("%d %d %d %d %d %d\n", x++, x, ++x, x--, --x, x); exit(0); }"#);
    assert_eq!(out, "5 6 7 7 5 5\n\n");
    // A variable first seen under ++ is an int64_t starting at 0.
    let out = quiet(r#"BEGIN { n++; n++; printf("%d %d\n", n, sizeof (n)); exit(0); }"#);
    assert_eq!(out, "2 8\n\n");
}

#[test]
fn compound_assignment() {
    let out = quiet(
        r#"BEGIN { x = 5; x += 3; x -= 1; x *= 4; x /= 3; x %= 5; x <<= 3; x >>= 1; x |= 1; x &= 7; x ^= 2;
           printf("%d\n", x); exit(0); }"#,
    );
    // 5 → 8 → 7 → 28 → 9 → 4 → 32 → 16 → 17 → 1 → 3
    assert_eq!(out, "3\n\n");
}

#[test]
fn assignment_wraps_to_the_variable_type() {
    let out = quiet(r#"char c; BEGIN { c = 127; c++; printf("%d\n", c); exit(0); }"#);
    assert_eq!(out, "-128\n\n");
    let out = quiet(r#"unsigned short u; BEGIN { u = 0; u--; printf("%d\n", u); exit(0); }"#);
    assert_eq!(out, "65535\n\n");
}

#[test]
fn string_comparison() {
    assert_eq!(
        p(
            "",
            "%d %d %d %d %d %d",
            r#""abc" < "abd", "b" > "abc", "abc" == "abc", "abc" != "abd", "" < "a", "abc" <= "ab""#
        ),
        "1 1 1 1 1 0"
    );
    let out = quiet(r#"BEGIN { s = "x"; t = strjoin("x", ""); printf("%d\n", s == t); exit(0); }"#);
    assert_eq!(out, "1\n\n");
}

#[test]
fn thread_local_variables_persist_across_probes() {
    // BEGIN and END fire in the same (tracer) thread.
    assert_eq!(quiet(r#"BEGIN { self->n = 7; exit(0); } END { printf("%d\n", self->n); }"#), "7\n\n");
    // Never assigned at run time: reads 0.
    assert_eq!(quiet(r#"BEGIN /0/ { self->q = 5; } BEGIN { printf("%d\n", self->q); exit(0); }"#), "0\n\n");
}

#[test]
fn clause_local_variables_are_shared_by_the_clauses_of_one_firing() {
    assert_eq!(quiet(r#"BEGIN { this->a = 5; } BEGIN { printf("%d\n", this->a * 2); exit(0); }"#), "10\n\n");
}

#[test]
fn reading_an_unassigned_variable_is_a_compile_error() {
    let r = udtrace(&["-n", "BEGIN { trace(self->never); }"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { trace(self->never); }: in action list: self->never has not yet been declared or assigned"
    );
}

#[test]
fn associative_arrays_with_tuple_keys() {
    let out = quiet(
        r#"BEGIN { a[1, "x"] = 5; a[2, "y"] = 6; a[1, "y"] = 7;
           printf("%d %d %d %d\n", a[1, "x"], a[2, "y"], a[1, "y"], a[2, "x"]); exit(0); }"#,
    );
    // A missing element reads as 0.
    assert_eq!(out, "5 6 7 0\n\n");
}

#[test]
fn assigning_zero_deletes_an_element() {
    let out = quiet(r#"BEGIN { a["k"] = 5; a["k"] = 0; a["j"] = 1; printf("%d %d\n", a["k"], a["j"]); exit(0); }"#);
    assert_eq!(out, "0 1\n\n");
    // Thread-local arrays and string values too.
    let out =
        quiet(r#"BEGIN { self->m["a"] = "one"; s["b"] = "two"; printf("%s %s\n", self->m["a"], s["b"]); exit(0); }"#);
    assert_eq!(out, "one two\n\n");
}

#[test]
fn associative_array_key_count_must_match() {
    let r = udtrace(&["-n", "BEGIN { a[1, 2] = 3; trace(a[1]); }"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { a[1, 2] = 3; trace(a[1]); }: in action list: a[ ] prototype mismatch: 1 key passed, 2 expected"
    );
}

#[test]
fn struct_and_union_layout() {
    let decls = "struct foo { int a; char b; long c; }; union u { int i; char c[8]; long l; };";
    // C layout: c is 8-aligned, so b (at 4) is followed by padding.
    assert_eq!(
        p(decls, "%d %d %d %d %d", "sizeof (struct foo), offsetof(struct foo, a), offsetof(struct foo, b), offsetof(struct foo, c), sizeof (union u)"),
        "16 0 4 8 8"
    );
    let decls = "struct s { char name[10]; short v; int w; }; typedef struct s s_t;";
    assert_eq!(p(decls, "%d %d %d", "sizeof (s_t), offsetof(s_t, v), offsetof(struct s, w)"), "16 10 12");
}

#[test]
fn enums_typedefs_and_inlines() {
    let decls = "enum color { RED, GREEN = 5, BLUE }; typedef unsigned char byte_t; \
                 inline int seven = 7; inline int fourteen = seven * 2; inline string hi = \"hi\";";
    assert_eq!(
        p(decls, "%d %d %d %d %d %d %s", "RED, GREEN, BLUE, sizeof (byte_t), seven, fourteen, hi"),
        "0 5 6 1 7 14 hi"
    );
    // A typedef'd unsigned type wraps like its base type.
    assert_eq!(p("typedef unsigned char byte_t;", "%d", "(byte_t)257"), "1");
}

#[test]
fn stringof_and_string_conversions() {
    assert_eq!(p("", "%s|%s", r#"stringof("abc"), stringof(1 > 0 ? "y" : "n")"#), "abc|y");
    // A char array converts to a string up to its NUL.
    let out = quiet(r#"BEGIN { printf("%d\n", strlen(stringof("hello"))); exit(0); }"#);
    assert_eq!(out, "5\n\n");
}

#[test]
fn if_else_chains() {
    let prog = r#"BEGIN { x = $1 - 5;
        if (x < 0) { printf("neg\n"); } else if (x == 0) { printf("zero\n"); } else { printf("pos\n"); }
        if (x) printf("nonzero\n");
        exit(0); }"#;
    for (arg, want) in [("2", "neg\nnonzero\n\n"), ("5", "zero\n\n"), ("9", "pos\nnonzero\n\n")] {
        let r = udtrace(&["-q", "-n", prog, arg]);
        assert_eq!(r.ok(), want, "x = {arg}");
    }
}

#[test]
fn macro_arguments() {
    // $N is an integer when it looks like one; $$N is always a string.
    let r = udtrace(&[
        "-q",
        "-n",
        r#"BEGIN { printf("%d %s %s %d\n", $1 + 1, $$2, $$1, $3); exit(0); }"#,
        "41",
        "hello",
        "0x10",
    ]);
    assert_eq!(r.ok(), "42 hello 41 16\n\n");
}

#[test]
fn a_missing_macro_argument_is_an_error() {
    // dt_lex.l raises it while parsing: no "in action list:" label.
    let r = udtrace(&["-n", "BEGIN { trace($3); }", "a", "b"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { trace($3); }: macro argument $3 is not defined"
    );
}

#[test]
fn an_unused_macro_argument_is_an_error() {
    let r = udtrace(&["-n", "BEGIN { trace($$1); }", "a", "extra"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { trace($$1); }: extraneous argument 'extra' ($2 is not referenced)"
    );
}

#[test]
fn target_is_zero_without_a_process() {
    assert_eq!(p("", "%d", "$target"), "0");
    // With -c it is the command's process id.
    let r = udtrace(&["-q", "-c", "sleep 0.1", "-n", r#"BEGIN { printf("%d\n", $target > 0); }"#]);
    assert_eq!(r.stdout, "1\n\n");
    assert_eq!(r.code, 0);
}

#[test]
fn null_is_an_int_zero() {
    // libdtrace hard-wires "inline long NULL = 0", but an inline whose value is an
    // integer constant is that constant, whose type is int (DTrace's sizeof tests).
    assert_eq!(p("", "%d %d", "NULL, sizeof (NULL)"), "0 4");
    let out = quiet(r#"BEGIN { ptr = (int *)NULL; printf("%d %d\n", ptr == NULL, ptr != NULL); exit(0); }"#);
    assert_eq!(out, "1 0\n\n");
}

#[test]
fn predicates_select_clauses() {
    let out = quiet(r#"BEGIN /1 > 2/ { printf("no\n"); } BEGIN /"a" < "b"/ { printf("yes\n"); } BEGIN { exit(0); }"#);
    assert_eq!(out, "yes\n\n");
}

#[test]
fn struct_members_of_d_variables_are_assignable() {
    // The DTrace guide's rwinfo.d pattern: members of array elements, with ++ and +=.
    let out = quiet(
        r#"struct callinfo { uint64_t ts; uint64_t calls; int small; };
           struct callinfo i[string];
           BEGIN { i["read"].ts = 5; i["read"].calls++; i["read"].calls++; i["read"].small = -3; i["w"].calls += 7;
                   printf("%d %d %d %d %d\n", i["read"].ts, i["read"].calls, i["read"].small, i["w"].calls, i["x"].calls);
                   exit(0); }"#,
    );
    assert_eq!(out, "5 2 -3 7 0\n\n");
    // Global and thread-local struct variables, and members of members.
    let out = quiet(
        r#"struct in { short a; int b; }; struct out { int k; struct in n; };
           struct out o; self struct in t;
           BEGIN { o.n.a = 70000; o.k = 1; o.n.b = 2; o.k++; self->t.b = 9;
                   printf("%d %d %d %d %d %d\n", o.n.a, o.k, o.n.b, sizeof (o), self->t.a, self->t.b); exit(0); }"#,
    );
    // 70000 wraps to the short member: 4464.
    assert_eq!(out, "4464 2 2 12 0 9\n\n");
}

#[test]
fn an_element_of_a_string_variable_is_assignable() {
    // A string is a char array: `s[i] = c` sets a byte of a variable of every scope; a
    // NUL cuts the string there (DTraceToolkit's j_classflow.d: `this->class[arg2] =
    // '\0'`), a byte just past the end lengthens it, one further out is behind the NUL.
    let out = quiet(
        r#"BEGIN { this->s = "abcdef"; this->s[3] = '\0'; g = "hello"; g[0] = 'H'; g[5] = '!';
           self->t = "ab"; self->t[9] = 'X'; printf("%s %s %s\n", this->s, g, self->t); exit(0); }"#,
    );
    assert_eq!(out, "abc Hello! ab\n\n");
}
