//! Compile errors as DTrace reports them: which check comes first when an
//! expression breaks several rules, and the line an error is reported at (DTrace
//! reports an operator's errors at the line of the token after the operator's last
//! operand, which its parser had read when it built the operator's node).

mod common;

use common::*;

/// The first error line of a script (`-s`) that must fail to compile, with its tag,
/// after the script's path.
fn script_error(text: &str) -> String {
    let r = run_script(&["-xerrtags"], text);
    assert_eq!(r.code, 1, "status of {text}; stdout: {}", r.stdout);
    let line = r.first_error_line();
    let at = line.find(".d: ").map(|i| i + 4).unwrap_or(0);
    line[at..].to_string()
}

/// The first error line of a `-n` program that must fail to compile.
fn compile_error(program: &str) -> String {
    let r = udtrace(&["-xerrtags", "-n", program]);
    assert_eq!(r.code, 1, "status of {program}; stdout: {}", r.stdout);
    let line = r.first_error_line();
    let at = line.find(": [").map(|i| i + 2).unwrap_or(0);
    line[at..].to_string()
}

#[test]
fn operator_errors_are_reported_at_the_token_after_the_operator() {
    // The predicate's closing `/` is read with the blank lines after it: the
    // operator is reported at the line of the `{`.
    assert_eq!(
        script_error("BEGIN\n/\"a\" & \"b\"/\n\n{\n\texit(0);\n}\n"),
        "[D_OP_INT] line 4: operator & requires operands of integral type"
    );
    assert_eq!(
        script_error("BEGIN\n/\"a\" && \"b\"/\n{\n\texit(0);\n}\n"),
        "[D_OP_SCALAR] line 3: operator && requires operands of scalar type"
    );
    // A statement without its `;`: the `}` on the next line is that token.
    assert_eq!(
        script_error("BEGIN\n{\n\tx = \"s\" * 2\n}\n"),
        "[D_OP_ARITH] line 4: operator * requires operands of arithmetic type"
    );
    // An error of an operand stays at the operand's own line.
    assert_eq!(
        script_error("BEGIN\n{\n\tx = 1 +\n\t    nosuch\n\t    ;\n}\n"),
        "[D_IDENT_UNDEF] line 4: failed to resolve nosuch: Unknown variable name"
    );
}

#[test]
fn an_action_in_an_expression_is_a_void_value_for_the_operator_to_refuse() {
    assert_eq!(
        compile_error("BEGIN { p = 123 + -trace(0); }"),
        "[D_OP_ARITH] in action list: operator - requires an operand of arithmetic type"
    );
    // The action's arguments are checked against its prototype first.
    assert_eq!(
        compile_error("BEGIN { a = \"x\"; c = a == \"x\" ? printf(\"y\") : trace(); }"),
        "[D_PROTO_LEN] in action list: trace( ) prototype mismatch: 0 args passed, 1 expected"
    );
    assert_eq!(
        compile_error("BEGIN { c = timestamp ? trace(1) : trace(2); }"),
        "[D_OP_ACT] in action list: action cannot be used in a conditional context"
    );
    assert_eq!(
        compile_error("BEGIN { x = (trace(1), 2); }"),
        "[D_OP_ACT] in action list: operator , operands cannot be actions"
    );
    assert_eq!(
        compile_error("BEGIN { x[trace(1)] = 1; }"),
        "[D_KEY_TYPE] in action list: void expression may not be used as associative array index: key #1"
    );
}

#[test]
fn a_string_on_either_side_of_plus_equals_is_incompatible() {
    assert_eq!(
        compile_error("BEGIN { a = 3; a += \"foobar\"; }"),
        "[D_OP_INCOMPAT] in action list: operands have incompatible types: \"int\" += \"string\""
    );
    assert_eq!(
        compile_error("BEGIN { a = (void *)0; a -= 1; }"),
        "[D_OP_VFPTR] in action list: operator -= requires left-hand scalar operand of known size"
    );
}

#[test]
fn only_an_identifier_can_be_called() {
    // `tick-1()` is `tick - 1()`: the call's designator is the constant 1.
    assert_eq!(compile_error("BEGIN { @ = tick-1(); }"), "[D_FUNC_IDENT] function designator is not of function type");
    assert_eq!(
        script_error("BEGIN\n{\n\tx = (1 + 2)(\n\t3);\n}\n"),
        "[D_FUNC_IDENT] line 4: function designator is not of function type"
    );
}

#[test]
fn a_lone_backquote_names_no_symbol() {
    assert_eq!(
        compile_error("BEGIN { trace(sizeof(`)); }"),
        "[D_IDENT_UNDEF] in action list: failed to resolve `: Unknown symbol name"
    );
}

#[test]
fn a_translated_process_pointer_is_no_key() {
    assert_eq!(
        compile_error("BEGIN { @a[curpsinfo] = count(); }"),
        "[D_KEY_TYPE] in action list: scalar expression may not be used as aggregation index: key #1"
    );
    // Its members are ordinary keys.
    let r = udtrace(&["-q", "-n", "BEGIN { @a[curpsinfo->pr_pid] = count(); exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_pragma_for_an_identifier_never_defined_is_unused() {
    assert_eq!(
        script_error(
            "void myfunc(int, int);\n\n#pragma D attributes Stable/Stable/Common myfunc\n\nBEGIN\n{\n\texit(0);\n}\n"
        ),
        "[D_PRAGMA_UNUSED] line 3: unused #pragma attributes"
    );
    assert_eq!(
        script_error("#pragma D binding \"1.0\" later\nBEGIN { later = 1; exit(0); }\n"),
        "[D_PRAGMA_UNUSED] line 1: unused #pragma binding"
    );
    // An inline defined after the directive is what it names.
    let r = run_script(
        &["-q"],
        "#pragma D attributes Stable/Stable/Common myinline\ninline int myinline = 3;\nBEGIN { trace(myinline); exit(0); }\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_system_header_may_typedef_a_builtin_type_again() {
    // <stdint.h> through `-C`: DTrace keeps its own int8_t… in another container.
    let r = run_script(&["-q"], "typedef signed char int8_t;\nBEGIN { x = (int8_t)257; trace(x); exit(0); }\n");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "1");
    // A program's own typedef may not be declared twice.
    assert_eq!(
        script_error("typedef int myint;\ntypedef int myint;\nBEGIN { exit(0); }\n"),
        "[D_DECL_IDRED] line 2: typedef redeclared: myint"
    );
}

#[test]
fn an_inline_with_a_key_signature_stands_for_its_value_with_the_keys() {
    let r = run_script(
        &["-q"],
        "struct s { int s_x; };\ntranslator struct s < int T > { s_x = T + 1; };\n\
         inline int add[int x, int y] = x + y;\n\
         inline int next[int x] = (xlate < struct s > (x)).s_x;\n\
         inline char low[int x] = x;\n\
         BEGIN { printf(\"%d %d %d\\n\", add[10, 20], next[123], low[257]); exit(0); }\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "30 124 1");
    assert_eq!(
        compile_error("inline int add[int x, int y] = x + y; BEGIN { trace(add[1]); }"),
        "[D_PROTO_LEN] in action list: add[ ] prototype mismatch: 1 key passed, 2 expected"
    );
}

#[test]
fn maps_too_small_for_one_entry_cannot_be_enabled() {
    // libdtrace sizes its maps as the option's bytes over the largest entry.
    for (option, program) in
        [("aggsize=8", "BEGIN { @ = count(); exit(0); }"), ("dynvarsize=15", "BEGIN { a[1] = 1; exit(0); }")]
    {
        let r = udtrace(&["-q", "-x", option, "-n", program]);
        assert_eq!(r.code, 1, "{option}: {}", r.stdout);
        assert_eq!(r.first_error_line(), "udtrace: could not enable tracing: Enabling exceeds size of buffer");
    }
    // One entry fits: the program runs.
    let r = udtrace(&["-q", "-x", "dynvarsize=1024", "-x", "strsize=512", "-n", "BEGIN { a[\"k\"] = 1; exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Thread-local scalars are not counted: DTrace runs them in a tiny dynvarsize.
    let r = udtrace(&["-q", "-x", "dynvarsize=5", "-n", "BEGIN { self->a = 1; trace(self->a); exit(0); }"]);
    assert_eq!((r.code, r.stdout.trim()), (0, "1"), "{}", r.stderr);
}

#[test]
fn a_type_name_before_a_star_starts_a_declaration() {
    // dt_lex.l settles `int*x` at the start of an item in favour of the type.
    let r = run_script(&["-q"], "int*x;\nBEGIN { printf(\"%d\\n\", x == NULL); exit(0); }\n");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "1");
    assert_eq!(script_error("int*x\n"), "[D_SYNTAX] line 2: syntax error near end of input");
}

#[test]
fn an_anonymous_struct_is_named_as_libctf_names_it() {
    assert_eq!(
        compile_error("struct { int a; } arg; BEGIN { trace(arg + 1); }"),
        "[D_OP_INCOMPAT] in action list: operands have incompatible types: \"struct \" + \"int\""
    );
}
