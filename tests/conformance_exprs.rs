//! Expressions, pointers, arrays and variables as DTrace defines them: its type
//! rules for strings and pointers, its 64-bit arithmetic, its run-time fault
//! reports, D arrays and pointers into them, and the compile errors (with their
//! tags) it gives for what it rejects. Expected values are DTrace's.

mod common;

use common::*;

/// Runs a quiet program that must succeed; returns what it printed (without the
/// newline dtrace prints when tracing ends).
fn ok(program: &str) -> String {
    let r = udtrace(&["-q", "-n", program]);
    assert_eq!(r.code, 0, "status of {program}; stderr: {}", r.stderr);
    assert_eq!(r.stderr, "", "stderr of {program}");
    r.stdout.strip_suffix('\n').expect("the closing newline").to_string()
}

/// Compiles a program that must fail; returns the first line of the error with
/// its `[D_TAG]` prefix.
fn compile_error(program: &str) -> String {
    let r = udtrace(&["-xerrtags", "-n", program]);
    assert_eq!(r.code, 1, "status of {program}; stdout: {}", r.stdout);
    r.first_error_line().to_string()
}

#[test]
fn faults_name_the_clause_and_the_probe() {
    // dt_handle_err's words: the clause by its program-wide number, the probe by id.
    let r = udtrace(&["-q", "-n", "BEGIN { x = 1; } BEGIN { trace(*(int *)0); } BEGIN { exit(0); }"]);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_1 for probe ID 1 (dtrace:::BEGIN): invalid address (0x0) at BPF pc 2\n"
    );
}

#[test]
fn strings_compare_with_null() {
    // The NULL string is below every string, "" included, and equal to itself. A
    // declared global string is "" until assigned.
    let out = ok(r#"string n, m, d; BEGIN { s = "abc"; e = ""; n = NULL; m = 0;
        printf("%d %d %d %d %d %d %d\n", s == NULL, n == NULL, n < e, e > n, n == m, s != 0, d == NULL);
        exit(0); }"#);
    assert_eq!(out, "0 1 1 1 1 1 0\n");
    // whoexec.d: a thread-local string is compared with NULL, then deleted by
    // assigning it NULL, after which it reads as NULL again.
    let out = ok(r#"BEGIN { self->parent = execname; }
        BEGIN /self->parent != NULL/ { printf("set\n"); self->parent = NULL; }
        BEGIN { printf("%d\n", self->parent == NULL); exit(0); }"#);
    assert_eq!(out, "set\n1\n");
    // Assigning NULL (or 0) to a string stores the NULL string; for a thread-local
    // it deletes it.
    let out = ok(r#"string g; BEGIN { g = "x"; g = NULL; self->t = "y"; self->t = 0;
        printf("%d %d\n", g == NULL, self->t == NULL); exit(0); }"#);
    assert_eq!(out, "1 1\n");
}

#[test]
fn a_null_string_faults_when_read() {
    let r = udtrace(&["-q", "-n", "string s; BEGIN { s = NULL; trace(s[1]); } BEGIN { exit(0); }"]);
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): invalid address (0x1) at BPF pc 3\n"
    );
    let r = udtrace(&["-q", "-n", r#"string s; BEGIN { s = NULL; printf("%s", s); } BEGIN { exit(0); }"#]);
    assert!(r.stderr.contains("invalid address (0x0)"), "{}", r.stderr);
}

#[test]
fn strings_are_char_arrays() {
    // Indexing gives a char; adding an integer skips that many chars.
    let out = ok(
        r#"BEGIN { s = "ABCDEFG"; a["k"] = s; printf("%d %d %c %s %s %s\n", s[1], a["k"][2], *s, s + 2, 3 + s, s + 9);
        exit(0); }"#,
    );
    assert_eq!(out, "66 67 A CDEFG DEFG \n");
    assert_eq!(ok("BEGIN { printf(\"%c\\n\", probeprov[1]); exit(0); }"), "t\n");
}

#[test]
fn pointers_and_integers_need_casts() {
    // dt_node_is_ptrcompat: an integer meets a pointer only as the constant 0.
    assert_eq!(
        compile_error("int *p; BEGIN { x = 1; p = x; }"),
        "udtrace: failed to compile script ... [D_OP_INCOMPAT] in action list: operands have incompatible types: \"int *\" = \"int\""
            .replace("failed to compile script ... ", "invalid probe specifier int *p; BEGIN { x = 1; p = x; }: ")
    );
    assert_eq!(ok("int *p; BEGIN { p = 0; printf(\"%d\\n\", p == NULL); exit(0); }"), "1\n");
    let e = compile_error("int *p; long *q; BEGIN { trace(p == q); }");
    assert!(
        e.ends_with("[D_OP_INCOMPAT] in action list: operands have incompatible types: \"int *\" == \"long *\""),
        "{e}"
    );
}

#[test]
fn arithmetic_is_64_bit_until_stored() {
    // Intermediate results keep all 64 bits: only the store narrows to int.
    let out = ok(r#"BEGIN { i = 25920; i = i - (i + (i * 3) + i) * i / i * i; printf("%d\n", i);
        j = 100000; printf("%d\n", j * j / j); exit(0); }"#);
    assert_eq!(out, "935761216\n100000\n");
}

#[test]
fn signed_division_negates_magnitudes() {
    // dt_cg_arithmetic_op: |l| op |r|, negated when the signs differ.
    let out = ok("BEGIN { x = 19; y = 5; printf(\"%d %d %d %d %d %d\\n\", x / -y, x % -y, -x / y, -x % y, -x / -y, -x % -y); exit(0); }");
    assert_eq!(out, "-3 -4 -3 -4 3 4\n");
}

#[test]
fn compound_assignment_reads_its_target_first() {
    let out = ok("BEGIN { i = 4; i += i++ + --i + ++i - ++i * i; printf(\"%d\\n\", i); exit(0); }");
    assert_eq!(out, "-19\n");
}

#[test]
fn a_constant_condition_chooses_a_statement() {
    // DTraceToolkit's `OPT_x ? printf(...) : 1;`: a constant condition is folded
    // while parsing, so the chosen operand is a statement of its own.
    let out = ok(r#"inline int OPT_indent = 1; inline int OPT_no = 0;
        BEGIN { OPT_indent ? printf("%*s|\n", 3, "") : 1; OPT_no ? printf("no\n") : printf("else\n"); exit(0); }"#);
    assert_eq!(out, "   |\nelse\n");
    let e = compile_error("BEGIN { x = 1; x ? printf(\"a\") : 1; }");
    assert!(e.ends_with("[D_OP_ACT] in action list: action cannot be used in a conditional context"), "{e}");
}

#[test]
fn a_storage_class_alone_declares_int() {
    assert_eq!(
        ok("self x, y; this z; BEGIN { self->x = 1; this->z = 2; printf(\"%d %d\\n\", self->x, this->z); exit(0); }"),
        "1 2\n"
    );
    let e = compile_error("self x; BEGIN { self->x = execname; }");
    assert!(
        e.contains("[D_OP_INCOMPAT]") && e.ends_with("operands have incompatible types: \"int\" = \"string\""),
        "{e}"
    );
}

#[test]
fn inline_definitions_are_checked_against_their_type() {
    let e = compile_error("inline int i = \"x\"; BEGIN { trace(i); }");
    assert!(e.ends_with("[D_OP_INCOMPAT] inline i definition uses incompatible types: \"int\" = \"string\""), "{e}");
}

#[test]
fn d_arrays_have_addresses() {
    // A D array decays to a pointer to its storage; pointers index, add and
    // dereference it, and stores through them change the array.
    let out = ok(r#"int a[5]; int *p; BEGIN { a[0] = 100; a[4] = 500; p = a; q = &a[1];
        p[1] = 200; *(p + 2) = 300; u = (uintptr_t)&a[0]; r = (int *)(u + 12); *r = 400;
        printf("%d %d %d %d %d %d %d\n", a[0], a[1], a[2], a[3], a[4], *q, q - p); exit(0); }"#);
    assert_eq!(out, "100 200 300 400 500 200 1\n");
    // Clause-local and thread-local arrays too; a void pointer takes a cast first.
    let out = ok(r#"this int l[3]; self int t[3]; void *v;
        BEGIN { this->l[2] = 7; self->t[1] = 8; v = &this->l[2]; p = &self->t[0];
        printf("%d %d %d\n", *(int *)v, p[1], this->l[0]); exit(0); }"#);
    assert_eq!(out, "7 8 0\n");
}

#[test]
fn array_indexes_are_bounds_checked() {
    // A constant index is checked when compiling, any other when it runs.
    let e = compile_error("int a[5]; BEGIN { a[5] = 1; }");
    assert!(e.ends_with("[D_ARR_BOUNDS] in action list: index outside array bounds: 5, max is 5"), "{e}");
    let r = udtrace(&["-q", "-n", "int a[5]; BEGIN { i = 8; a[i] = 1; } BEGIN { exit(0); }"]);
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): index out of bounds (8) at BPF pc 3\n"
    );
    // Arrays of one element anchor variable-length data: never checked.
    assert_eq!(ok("int a[1]; BEGIN { a[0] = 5; this->i = 0; trace(a[this->i]); exit(0); }"), "5");
    assert!(ok("int a[1]; BEGIN { this->i = 1; trace(a[this->i]); exit(0); }").parse::<i64>().is_ok());
}

#[test]
fn stores_need_d_memory() {
    // The traced process's memory is read-only: a store through a pointer to it is
    // a bad address.
    let r = udtrace(&["-q", "-n", "BEGIN { p = (int *)64; *p = 3; } BEGIN { exit(0); }"]);
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): invalid address (0x40) at BPF pc 3\n"
    );
}

#[test]
fn pointer_and_array_errors_are_dtraces() {
    let cases = [
        ("int a[3]; int b[3]; BEGIN { a = b; }", "[D_OP_ARRFUN] in action list: operator = may not be applied to operand of type \"int [3]\""),
        ("void *p; BEGIN { trace(*p); }", "[D_DEREF_VOID] in action list: cannot dereference pointer to void"),
        ("void *p; BEGIN { trace(p + 1); }", "[D_OP_INCOMPAT] in action list: operands have incompatible types: \"void *\" + \"int\""),
        ("struct s { int a; }; struct s x; BEGIN { x->a = 1; }", "[D_OP_PTR] in action list: operator -> must be applied to a pointer"),
        ("int *p; BEGIN { p->a = 1; }", "[D_OP_SOU] in action list: operator -> cannot be applied to pointer to type \"int\"; must be applied to a struct or union pointer"),
        ("struct s { int a; }; struct s *p; BEGIN { p.a = 1; }", "[D_OP_SOU] in action list: operator . cannot be applied to type \"struct s *\"; must be applied to a struct or union"),
        ("int x[5]; BEGIN { x[1, 2] = 2; }", "[D_ARR_BADREF] in action list: cannot access scalar x as an associative array"),
        ("BEGIN { this->x[1] = 2; }", "[D_ARR_LOCAL] in action list: local variables may not be used as associative arrays: x"),
    ];
    for (program, want) in cases {
        let e = compile_error(program);
        assert!(e.ends_with(want), "{program}: {e}");
    }
}

#[test]
fn a_predicate_may_use_what_its_actions_create() {
    // dt_cook_clause cooks the actions first: `x` exists when the predicate is checked.
    assert_eq!(ok("BEGIN /x == 0/ { printf(\"%d\\n\", x++); exit(0); }"), "0\n");
}

#[test]
fn dash_s_lists_each_clauses_variables_with_their_storage() {
    // Offsets are those of DTrace's layout: each variable aligned to its size
    // (strings to 1, structs to 8), thread-locals in storage of their own.
    let r = udtrace(&[
        "-Se",
        "-n",
        "char c; int i; self int t[2]; BEGIN { i = 1; t = c; self->t[1] = 2; trace(pid); s = \"\"; u = s; }",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let table: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(table[1], "Variables of clause :::BEGIN, <dt_clause_0>:");
    assert_eq!(table[2], "NAME             ID   OFFSET KND SCP RANGE       FLAG TYPE");
    let row = |name: &str| {
        let line = table.iter().find(|l| l.starts_with(&format!("{name} "))).expect(name);
        line.split_whitespace().skip(2).collect::<Vec<_>>().join(" ")
    };
    assert_eq!(row("i"), "4 scl glb [2-2] w D type (integer) (size 4)");
    assert_eq!(row("c"), "0 scl glb [3-3] r D type (integer) (size 1)");
    assert_eq!(row("t"), "8 scl glb [3-3] w D type (integer) (size 1)");
    assert_eq!(row("pid"), "scl glb [5-5] r D type (integer) (size 4)");
    assert_eq!(row("s"), "9 scl glb [6-7] r/w string (unknown) by ref (size 256)");
    assert_eq!(row("u"), "265 scl glb [7-7] w string (unknown) by ref (size 256)");
    let tls = table.iter().find(|l| l.contains(" tls ")).expect("self->t");
    assert!(tls.ends_with("0      scl tls [4-4]       r    D type (array) by ref (size 8)"), "{tls}");
}

/// Compiles a script file that must fail; returns the first line of the error
/// (`line N:` counts from the script's first line).
fn script_error(text: &str) -> String {
    let r = run_script(&["-xerrtags"], text);
    assert_eq!(r.code, 1, "status; stdout: {}", r.stdout);
    let line = r.first_error_line();
    line[line.find('[').expect("a tag")..].to_string()
}

#[test]
fn errors_name_the_line_dtraces_lexer_is_on() {
    // A newline in a literal is seen after the lexer has counted it; a predicate's
    // closing / is judged at the next non-blank character; D_PRED_SCALAR comes
    // from the clause, at its end.
    assert_eq!(
        script_error("BEGIN\n{\n\tx = 'a\n';\n}\n"),
        "[D_CHR_NL] line 4: newline encountered in character constant"
    );
    assert_eq!(
        script_error("BEGIN\n{\n\tx = \"a\n\";\n}\n"),
        "[D_STR_NL] line 4: newline encountered in string literal"
    );
    assert_eq!(script_error("BEGIN\n/args[0/\n{\n}\n"), "[D_SYNTAX] line 3: closing ] expected in predicate before /");
    assert_eq!(
        script_error("int a[4];\nBEGIN\n/a/\n{\n\texit(0);\n}\n"),
        "[D_PRED_SCALAR] line 6: predicate result must be of scalar type"
    );
}

#[test]
fn declarations_are_checked_as_dtrace_checks_them() {
    let cases = [
        ("int a[];\n", "[D_DECL_ARRNULL] line 1: array declaration requires array dimension or tuple signature: a"),
        ("int a[-7];\n", "[D_DECL_ARRSUB] line 1: positive integral constant expression or tuple signature expected as array declaration subscript"),
        ("int a[88294967295];\n", "[D_DECL_ARRBIG] line 1: array dimension too big"),
        ("int x[void, char];\n", "[D_DECL_PROTO_TYPE] line 1: array prototype may not use parameter of type void: (anonymous), parameter #1"),
        ("self this int x;\n", "[D_DECL_CLASS] line 1: only one storage class allowed in a declaration"),
        ("inline int foo = 1;\ninline int foo = 8;\n", "[D_DECL_IDRED] line 2: identifier redefined: foo"),
        ("inline int rand = 7;\n", "[D_DECL_IDRED] line 1: identifier redefined: rand"),
    ];
    for (decl, want) in cases {
        assert_eq!(script_error(&format!("{decl}BEGIN {{ exit(0); }}\n")), want, "{decl}");
    }
    let r = run_script(&["-xerrtags"], "inline int rand = 7;\nBEGIN { exit(0); }\n");
    assert!(r.stderr.contains("\n\t current: inline definition\n\tprevious: function \n"), "{}", r.stderr);
}

#[test]
fn uregs_take_constant_register_numbers() {
    // Oracle's x86_64 numbering: struct pt_regs in order.
    assert_eq!(
        ok("BEGIN { printf(\"%d %d %d %d %d\\n\", R_R15, R_PC, R_SP, R_EAX, R_TRAPNO); exit(0); }"),
        "0 16 19 10 25\n"
    );
    let e = compile_error("BEGIN { trace(uregs[42]); }");
    assert!(e.ends_with("[D_UNKNOWN] in action list: uregs[]: index out of bounds (42)"), "{e}");
    let r = udtrace(&["-xerrtags", "-n", "BEGIN { i = R_SP; trace(uregs[i]); }"]);
    assert!(r.stderr.contains("[D_PROTO_ARG] in action list: uregs[ ] argument #1 is incompatible with prototype:\n\tprototype: integer constant\n\t argument: int\n"), "{}", r.stderr);
}

#[test]
fn string_searches_that_fail_give_null() {
    assert_eq!(
        ok(
            r#"BEGIN { printf("%d %d %d\n", strchr("abc", 'z') == NULL, strstr("abc", "z") == NULL, strrchr("abc", 'b') == NULL); exit(0); }"#
        ),
        "1 1 0\n"
    );
}

#[test]
fn a_clause_reads_the_timestamp_once() {
    assert_eq!(
        ok("BEGIN { this->a = timestamp; this->b = timestamp; printf(\"%d\\n\", this->b - this->a); exit(0); }"),
        "0\n"
    );
}

#[test]
fn integers_are_not_promoted_to_int() {
    // dt_type_promote: the operand type of higher rank (bits, then unsignedness),
    // with no promotion to int first; the sum is recorded at that type's size.
    let out = ok("unsigned char C; signed char c; short s; BEGIN { C = -2; c = 3; s = -1;
        printf(\"%d %d %d %d\\n\", C + c, c + c, s + C, -c); exit(0); }");
    assert_eq!(out, "1 6 253 -3\n");
}

#[test]
fn curcpu_points_at_the_cpus_cpuinfo() {
    let out =
        ok("BEGIN { printf(\"%d %d %d\\n\", curcpu->cpu_id == cpu, curcpu->cpu_pset, curcpu != NULL); exit(0); }");
    assert_eq!(out, "1 0 1\n");
}

#[test]
fn a_string_used_as_a_char_pointer_has_an_address() {
    // DTrace's temporary strings: the copy lasts for the clause.
    let out = ok("char *s; BEGIN { s = probeprov; printf(\"%c %c %s\\n\", s[0], *(s + 1), stringof(s)); exit(0); }");
    assert_eq!(out, "d t dtrace\n");
}

#[test]
fn begin_and_end_have_no_args() {
    let e = compile_error("BEGIN { trace(args[0]); }");
    assert!(e.ends_with("[D_ARGS_IDX] in action list: index 0 is out of range for :::BEGIN args[ ]"), "{e}");
}

#[test]
fn uregs_in_udtraces_own_probes_read_zero() {
    // No probe fires in udtrace for BEGIN: there are no registers to read.
    assert_eq!(ok("BEGIN { printf(\"%x %x\\n\", uregs[R_PC], uregs[R_TRAPNO]); exit(0); }"), "0 0\n");
}

#[test]
fn logical_operators_on_constants_select_an_action_at_compile_time() {
    // DTraceToolkit's option flags are inline constants; `A && B ? action : 1;`
    // must fold so that the action stands as a statement (or vanishes).
    let p = "inline int A = 1; inline int B = 0;
             BEGIN { A && B ? @never = count() : 1; A || B ? printf(\"or\") : 1;
                     A ^^ B ? printf(\" xor\") : 1; !B ? printf(\" not\") : 1;
                     !A ? printf(\" never\") : 1; exit(0); }";
    assert_eq!(ok(p), "or xor not");
}

#[test]
fn thread_and_clause_variables_may_take_built_in_names() {
    // Built-ins are globals; `self int trace;` (DTraceToolkit's rfileio.d) shadows nothing.
    assert_eq!(ok("self int trace; this int pid; BEGIN { self->trace = 2; this->pid = 3; trace(self->trace + this->pid); exit(0); }"), "5");
    let e = compile_error("int trace; BEGIN { exit(0); }");
    assert!(e.ends_with("[D_DECL_IDRED] built-in identifier redeclared: trace"), "{e}");
}

#[test]
fn char_arrays_and_jstack_are_aggregation_keys() {
    // pr_psargs is char [80]: a string key. jstack() is ustack() (no JVM helpers).
    let out =
        ok("BEGIN { @a[curpsinfo->pr_fname] = count(); @b[jstack()] = count(); printa(\"%s %@d\\n\", @a); exit(0); }");
    assert!(out.starts_with("udtrace 1\n"), "{out}");
}
