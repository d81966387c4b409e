//! DTrace's type system end to end: declarations of every kind D allows (with their
//! errors and tags), bit-fields laid out and read as DTrace's CTF does, enums,
//! character and string constants, `sizeof`/`offsetof` corner cases and
//! user-defined translators. Expected values follow DTrace's rules (dt_decl.c,
//! dt_parser.c, libctf's member layout), not udtrace's own output.

mod common;

use common::*;

/// Runs a quiet script that must succeed; returns its stdout.
fn script_ok(text: &str) -> String {
    let r = run_script(&["-q"], text);
    assert_eq!(r.code, 0, "exit status; stderr: {}", r.stderr);
    r.stdout
}

/// Compiles a script with `-x errtags` that must fail; returns the error line after
/// the script's name: `[TAG] line N: message`.
fn script_err(text: &str) -> String {
    let r = run_script(&["-xerrtags", "-e"], text);
    assert_eq!(r.code, 1, "exit status; stdout: {}", r.stdout);
    let line = r.first_error_line();
    let at = line.find("prog.d: ").map_or(0, |i| i + "prog.d: ".len());
    line[at..].to_string()
}

#[test]
fn bit_fields_sign_extend_and_truncate_to_their_width() {
    let out = script_ok(
        "struct bf { int a : 3; unsigned int b : 3; long c : 40; unsigned char d : 1; } v;\n\
         BEGIN {\n\
         \tv.a = 7; v.b = 7; v.c = 0x8000000001; v.d = 3;\n\
         \tprintf(\"%d %d %d %d\\n\", v.a, v.b, v.c, v.d);\n\
         \tv.a = 9; v.b = 9;\n\
         \tprintf(\"%d %d %d\\n\", v.a, v.b, v.a + v.b);\n\
         \texit(0);\n\
         }\n",
    );
    // 7 in 3 signed bits is -1; 0x8000000001 in 40 bits has the sign bit set; 9 keeps
    // its low three bits (1) in both.
    assert_eq!(out, "-1 7 -549755813887 1\n1 1 2\n\n");
}

#[test]
fn bit_fields_do_not_disturb_their_neighbours() {
    let out = script_ok(
        "struct bf { int a : 4; int b : 4; char c; } v;\n\
         BEGIN { v.c = 'x'; v.a = -1; v.b = 5; v.a++; printf(\"%d %d %c\\n\", v.a, v.b, v.c); exit(0); }\n",
    );
    assert_eq!(out, "0 5 x\n\n");
}

#[test]
fn structs_are_laid_out_as_ctf_lays_out_d_declarations() {
    // libctf puts each member at the first byte after the previous one's bits,
    // aligned for its type (a bit-field's type is the power-of-two bytes holding its
    // width); a struct ends with its last member, without tail padding.
    let out = script_ok(
        "struct a { int x : 1; } va;\n\
         struct b { int x : 1; int y : 3; } vb;\n\
         struct c { int x : 20; int y : 3; int z : 12; } vc;\n\
         struct d { char c; long l; short s; } vd;\n\
         struct e { short s; struct d inner; } ve;\n\
         union u { char c; int i; long l[2]; } vu;\n\
         BEGIN {\n\
         \tprintf(\"%d %d %d %d %d %d\\n\", sizeof(va), sizeof(vb), sizeof(vc), sizeof(vd), sizeof(ve), sizeof(vu));\n\
         \tprintf(\"%d %d %d\\n\", offsetof(struct d, l), offsetof(struct d, s), offsetof(struct e, inner));\n\
         \texit(0);\n\
         }\n",
    );
    // struct e's inner struct is aligned as its first member (a char).
    assert_eq!(out, "1 2 6 18 20 16\n8 16 2\n\n");
}

#[test]
fn bit_field_errors_are_dtraces() {
    let cases = [
        (
            "struct s { int a : 0; };",
            "[D_DECL_BFCONST] line 1: positive integral constant expression expected as bit-field size",
        ),
        (
            "struct s { int a : -2; };",
            "[D_DECL_BFCONST] line 1: positive integral constant expression expected as bit-field size",
        ),
        ("struct s { char a : 9; };", "[D_DECL_BFSIZE] line 1: bit-field too big for type: a"),
        ("struct s { double : 2; };", "[D_DECL_BFTYPE] line 1: invalid type for bit-field: (anon)"),
        (
            "struct s { int a : 2; } v;\nBEGIN { trace(sizeof (v.a)); }",
            "[D_SIZEOF_BITFIELD] line 2: cannot apply sizeof to a bit-field",
        ),
        (
            "struct s { int a : 2; } v;\nBEGIN { trace(&v.a); }",
            "[D_ADDROF_BITFIELD] line 2: cannot take address of bit-field",
        ),
        (
            "struct s { int a : 2; };\nBEGIN { trace(offsetof(struct s, a)); }",
            "[D_OFFSETOF_BITFIELD] line 2: cannot take offset of a bit-field: a",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(script_err(src), want, "{src}");
    }
    // An unnamed zero-width bit-field is allowed and takes no room.
    assert_eq!(script_ok("struct s { int a : 2; int : 0; } v; BEGIN { printf(\"%d\", sizeof (v)); exit(0); }"), "1\n");
}

#[test]
fn declarations_of_every_kind_compile() {
    let out = script_ok(
        "extern int e1, *e2, **e3;\n\
         extern e4;\n\
         extern unsigned long long e5;\n\
         extern long double e6;\n\
         extern int a1[], a2[3][4];\n\
         extern int f1(void), *f2(int, char *), f3(int, ...);\n\
         extern int (*fp)(void), *(*afp[2])(int);\n\
         extern struct never_defined e7;\n\
         extern enum never_defined e8;\n\
         int f4(long);\n\
         typedef int (*handler_t)(int);\n\
         handler_t h;\n\
         self int t; this long l; int assoc[string, int];\n\
         BEGIN { printf(\"%d %d\", sizeof (h), sizeof (int (*)(void))); exit(0); }\n",
    );
    assert_eq!(out, "8 8\n");
}

#[test]
fn declaration_errors_are_dtraces() {
    let cases = [
        ("long char c;", "[D_DECL_CHARATTR] line 1: invalid type declaration: short and long may not be used with char type"),
        ("short void v;", "[D_DECL_VOIDATTR] line 1: invalid type declaration: attributes may not be used with void type"),
        (
            "signed struct s\n{ int i; };",
            "[D_DECL_SIGNINT] line 2: invalid type declaration: signed and unsigned may only be used with integer type",
        ),
        (
            "long union u\n{ int i; };",
            "[D_DECL_LONGINT] line 2: invalid type declaration: long and long long may only be used with integer or floating-point type",
        ),
        ("BEGIN { x = (short long)0; }", "[D_UNKNOWN] line 1: failed to resolve type short long : Unknown type name"),
        ("int int x;", "[D_DECL_COMBO] line 1: invalid type combination"),
        ("static int x;", "[D_DECL_BADCLASS] line 1: specified storage class not appropriate in D"),
        ("register x;", "[D_DECL_BADCLASS] line 1: specified storage class not appropriate in D"),
        ("extern static int x;", "[D_DECL_CLASS] line 1: only one storage class allowed in a declaration"),
        ("extern int;", "[D_DECL_USELESS] line 1: useless declaration"),
        ("int `x;", "[D_DECL_SCOPE] line 1: D scoping operator may not be used in a declaration name (`x)"),
        ("this int a[int];", "[D_DECL_LOCASSC] line 1: associative arrays may not be declared as local variables: a"),
        ("int a[];", "[D_DECL_ARRNULL] line 1: array declaration requires array dimension or tuple signature: a"),
        (
            "int a[0];",
            "[D_DECL_ARRSUB] line 1: positive integral constant expression or tuple signature expected as array declaration subscript",
        ),
        ("void v;", "[D_DECL_VOIDOBJ] line 1: cannot have void object: v"),
        ("int f(register int, auto int);", "[D_DECL_PARMCLASS] line 1: inappropriate storage class for function or associative array parameter"),
        ("int f(void x);", "[D_DECL_PROTO_NAME] line 1: void parameter may not have a name: x"),
        ("int f(void, int);", "[D_DECL_PROTO_VOID] line 1: void must be sole parameter"),
        ("int a[int, ...];", "[D_DECL_PROTO_VARARGS] line 1: array prototype may not use a variable-length argument list"),
        (
            "int f(int k[string]);",
            "[D_DECL_PROTO_TYPE] line 1: function prototype may not use parameter of type dynamic variable: k, parameter #1",
        ),
        ("typedef int t;\ntypedef char t;", "[D_DECL_IDRED] line 2: typedef redeclared: t"),
        ("typedef int t;\nint t;", "[D_DECL_IDRED] line 2: typedef identifier redeclared: t"),
        ("int pid;", "[D_DECL_IDRED] line 1: built-in identifier redeclared: pid"),
        (
            "int x;\nlong x;",
            "[D_DECL_IDRED] line 2: identifier redeclared: x",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(script_err(src), want, "{src}");
    }
}

#[test]
fn struct_and_union_errors_are_dtraces() {
    let cases = [
        ("struct s { int a; };\nstruct s { int b; };", "[D_DECL_TYPERED] line 2: type redeclared: struct s"),
        (
            "struct s { int x;\n char x; };",
            "[D_UNKNOWN] line 2: failed to define member 'x': Duplicate member or variable name",
        ),
        ("struct s { struct t m; };", "[D_DECL_INCOMPLETE] line 1: incomplete struct/union/enum struct t: m"),
        // A forward tag is a struct to libctf, whatever it was declared as.
        ("union s { union t m; };", "[D_DECL_INCOMPLETE] line 1: incomplete struct/union/enum struct t: m"),
        ("union r { union r m; };", "[D_DECL_INCOMPLETE] line 1: incomplete struct/union/enum union r: m"),
        ("struct s { int f(); };", "[D_DECL_VOIDOBJ] line 1: cannot have void member: f"),
        ("struct s { int a[int]; };", "[D_DECL_DYNOBJ] line 1: cannot have dynamic member: a"),
        // (A tag neither the program nor the kernel defines: this kernel has a struct s.)
        ("struct no_such_tag v;", "[D_DECL_INCOMPLETE] line 1: incomplete struct/union/enum struct no_such_tag: v"),
        (
            "BEGIN { trace(offsetof(struct nothing, x)); }",
            "[D_OFFSETOF_TYPE] line 1: offsetof operand must be a struct or union type",
        ),
        (
            "struct s { int a; };\nBEGIN { trace(offsetof(struct s, b)); }",
            "[D_UNKNOWN] line 2: failed to determine offset of b: Member name not found",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(script_err(src), want, "{src}");
    }
}

#[test]
fn declarations_are_checked_as_they_are_read() {
    // DTrace acts on a declaration when it has parsed it: its error comes before a
    // syntax error further on, and before any error in an earlier clause.
    assert_eq!(
        script_err("struct a { struct b x; };\nBEGIN { x = ; }"),
        "[D_DECL_INCOMPLETE] line 1: incomplete struct/union/enum struct b: x"
    );
    assert_eq!(
        script_err("BEGIN { y = z; }\nenum e { A = \"no\" };"),
        "[D_DECL_ENCONST] line 2: enumerator 'A' must be assigned to an integral constant expression"
    );
    // A declaration later in the program is known to the clauses before it.
    assert_eq!(
        script_ok(
            "BEGIN { v.x = 2; printf(\"%d\", v.x + B); exit(0); }\nstruct s { int x; } v;\nenum e { A = 40, B };"
        ),
        "43\n"
    );
}

#[test]
fn module_scoped_tags() {
    // `D` scopes the program's own types; another module's types are forward
    // declarations here (no kernel types in user space), which pointers may use.
    let out = script_ok(
        "struct s { int x; int y; };\n\
         BEGIN { p = (struct mod`unknown *)0; printf(\"%d %d\", offsetof(struct D`s, y), sizeof (struct C`s)); exit(0); }\n",
    );
    assert_eq!(out, "4 8\n");
}

#[test]
fn enums_count_on_and_stay_within_int() {
    let out = script_ok(
        "enum e { A = -2, B, C = 10, D, E = C, F = 2147483647, G = -2147483648 };\n\
         BEGIN { printf(\"%d %d %d %d %d %d\", B, D, E, F, G, sizeof (enum e)); exit(0); }\n",
    );
    assert_eq!(out, "-1 11 10 2147483647 -2147483648 4\n");
    let cases = [
        (
            "enum e {\n\tbig = 2147483648\n};",
            "[D_DECL_ENOFLOW] line 3: enumerator 'big' value overflows INT_MAX (2147483647)",
        ),
        (
            "enum e { small = -2147483649 };",
            "[D_DECL_ENOFLOW] line 1: enumerator 'small' value overflows INT_MAX (2147483647)",
        ),
        (
            "enum e { A, B, A };",
            "[D_UNKNOWN] line 1: failed to define enumerator 'A': Duplicate member or variable name",
        ),
        ("enum e { A };\nenum f { A };", "[D_DECL_IDRED] line 2: identifier redeclared: A"),
        ("enum e { pid };", "[D_DECL_IDRED] line 1: identifier redeclared: pid"),
        ("enum e { A };\nenum e { B };", "[D_DECL_TYPERED] line 2: type redeclared: enum e"),
    ];
    for (src, want) in cases {
        assert_eq!(script_err(src), want, "{src}");
    }
}

#[test]
fn character_constants_are_ints_of_their_bytes() {
    // The first character is the most significant byte; DTrace's escapes keep the
    // backslash of `\'`, `\?` and unknown escapes; octal takes three digits at most.
    let out = script_ok(
        r#"BEGIN {
	printf("%d %d %d %d\n", 'a', 'ab', '\x41\101', '\0101');
	printf("%d %d %d\n", '\'', '\?', '\q');
	printf("%d %d %d\n", sizeof ('a'), sizeof ('abcd'), sizeof ('abcde'));
	exit(0);
}
"#,
    );
    assert_eq!(out, "97 24930 16705 2097\n23591 23615 23665\n4 4 8\n\n");
}

#[test]
fn string_constants_end_at_nul_and_keep_unknown_escapes() {
    let out = script_ok(
        r#"BEGIN {
	printf("[%s] [%s] [%s]\n", "ab\0cd", "\?\'\q", "\x41\x00042");
	printf("%d %d\n", sizeof ("hello"), sizeof (""));
	exit(0);
}
"#,
    );
    assert_eq!(out, "[ab] [\\?\\'\\q] [AB]\n6 1\n\n");
}

#[test]
fn integer_constants_take_dtraces_types() {
    // Decimal constants are signed unless suffixed u; octal and hex ones may be
    // unsigned; an inline integer constant keeps its constant's type.
    let out = script_ok(
        "inline long L = 5;\n\
         BEGIN { printf(\"%d %d %d %d %d\", sizeof (2147483648), sizeof (0x80000000), sizeof (L), -2147483648 < 0, 0x80000000 > 0); exit(0); }\n",
    );
    assert_eq!(out, "8 4 4 1 1\n");
    assert_eq!(
        script_err("BEGIN { x = 18446744073709551615; }"),
        "[D_INT_OFLOW] line 1: integer constant 0xffffffffffffffff cannot be represented in any built-in integral type"
    );
}

const XLATORS: &str = "struct in { int i; char c; };\n\
struct out { long o; char oc; int twice; };\n\
translator struct out < struct in *p > { o = p->i; oc = p->c; twice = p->i * 2; };\n\
translator struct out < struct in v > { o = v.i + 100; oc = v.c; };\n\
struct in f;\n";

#[test]
fn translators_translate_members_by_value_and_through_pointers() {
    let out = script_ok(&format!(
        "{XLATORS}BEGIN {{\n\
         \tf.i = 21; f.c = 'z';\n\
         \tprintf(\"%d %c %d\\n\", xlate <struct out> (f).o, xlate <struct out> (f).oc, xlate <struct out *> (f)->o);\n\
         \texit(0);\n\
         }}\n"
    ));
    assert_eq!(out, "121 z 121\n\n");
}

#[test]
fn translator_errors_are_dtraces() {
    let cases = [
        (
            format!("{XLATORS}translator struct out < struct in *q > {{ o = 1; }};"),
            "[D_XLATE_REDECL] line 6: translator from struct in * to struct out has already been declared",
        ),
        (
            "struct in { int i; };\ntranslator int < struct in *p > { };".to_string(),
            "[D_XLATE_SOU] line 2: translator output type must be a struct or union",
        ),
        (
            "struct in { int i; };\ntranslator struct none < struct in *p > { };".to_string(),
            "[D_XLATE_SOU] line 2: incomplete struct/union/enum struct none",
        ),
        (
            "struct in { int i; };\nstruct out { int o; };\ntranslator struct out < struct in *p > {\n\tx = p->i;\n};".to_string(),
            "[D_XLATE_MEMB] line 5: translator member x is not a member of struct out",
        ),
        (
            "struct in { int i; };\nstruct out { char *o; };\ntranslator struct out < struct in *p > {\n\to = p->i;\n};".to_string(),
            "[D_XLATE_INCOMPAT] line 5: translator member o definition uses incompatible types: \"char *\" = \"int\"",
        ),
        (
            format!("{XLATORS}BEGIN {{ trace(xlate <struct out> (1).o); }}"),
            "[D_XLATE_NONE] line 6: cannot translate from \"int\" to \"struct out\"",
        ),
        (
            format!("{XLATORS}BEGIN {{ trace((uintptr_t)xlate <struct out *> ((struct in *)0)); }}"),
            "[D_CAST_INVAL] line 6: invalid cast expression: \"pointer to translated data\" to \"uintptr_t\"",
        ),
        (
            format!("{XLATORS}BEGIN {{ trace(xlate <struct out> (f).twice); }}"),
            "[D_XLATE_NOCONV] line 6: translator does not define conversion for member: twice",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(script_err(&src), want, "{src}");
    }
}

#[test]
fn translator_syntax_follows_dtraces_grammar() {
    // The input goes in angle brackets; parentheses make the output a function type.
    assert_eq!(
        script_err(
            "struct in { int i; };\nstruct out { int o; };\ntranslator struct out (struct in *p)\n{ o = p->i; };"
        ),
        "[D_SYNTAX] line 4: syntax error near \"{\""
    );
    // Braces after the output type define it (again).
    assert_eq!(
        script_err("struct out { int o; };\ntranslator struct out\n{ int o; };"),
        "[D_DECL_TYPERED] line 3: type redeclared: struct out"
    );
}
