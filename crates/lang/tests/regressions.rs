//! Inputs that once crashed, hung or exhausted the compiler front end, found by
//! fuzzing (see `fuzz/`) or by probing what the fuzzer's findings suggested.
//! Each must now compile or fail with an error, quickly and without a panic.

use udtrace_lang::check::Checker;
use udtrace_lang::diag::{render, Origin, Style};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::parser::parse_script;

/// Parses and checks `src` as a script; the rendered error, if any.
fn compile(src: &str) -> Result<(), String> {
    let origin = Origin::Script("t.d".into());
    let program = parse_script(src).map_err(|e| render(&e, &origin, src, Style::default()))?;
    let macros = MacroArgs::new(vec!["t.d".into()]);
    let mut checker = Checker::new(&macros);
    checker.add_source(&program, 0, src).map_err(|e| render(&e, &origin, src, Style::default()))
}

#[test]
fn long_chains_are_rejected_not_a_stack_overflow() {
    // `x = 1+1+…+1` with 4,000 terms overflowed the 8 MiB main stack in the
    // checker (release build) and overflowed Drop with more.
    let src = format!("BEGIN {{ x = {}1; }}", "1+".repeat(4000));
    let e = compile(&src).unwrap_err();
    assert!(e.contains("expression nesting too deep"), "{e}");
}

#[test]
fn deepest_accepted_expressions_check_on_a_test_thread() {
    // The longest chain or deepest nesting the parser accepts must also check in a
    // debug build on a 2 MiB test thread: the checker once took 12 KiB a level.
    let shapes: [(&str, &str, &str); 7] = [
        ("x = ", "1 + ", "1"),
        ("x = ", "1 || ", "1"),
        ("x = ", "!", "1"),
        ("x = ", "(int)", "1"),
        ("x = ", "1 ? 1 : ", "1"),
        ("", "x = ", "1"),
        ("", "if (1) ", "x = 1"),
    ];
    for (head, link, tail) in shapes {
        let src = |n: usize| format!("BEGIN {{ {head}{}{tail}; }}", link.repeat(n));
        let deepest = (1..400).rev().find(|&n| parse_script(&src(n)).is_ok()).unwrap();
        assert!(deepest > 100, "{link:?}: only {deepest} accepted");
        compile(&src(deepest)).unwrap_or_else(|e| panic!("{link:?} x{deepest}: {e}"));
    }
}

#[test]
fn inlines_built_from_inlines_do_not_expand_exponentially() {
    // Each inline doubling the previous one: 40 lines used to take hours.
    let mut src = String::from("inline int a0 = 1;\n");
    for i in 1..40 {
        src += &format!("inline int a{i} = a{p} + a{p};\n", p = i - 1);
    }
    src += "BEGIN { x = a39; }\n";
    let start = std::time::Instant::now();
    let e = compile(&src).unwrap_err();
    assert!(e.contains("expands to too large an expression"), "{e}");
    assert!(start.elapsed().as_secs() < 5, "{:?}", start.elapsed());
    // Modest reuse is unaffected.
    let ok = "inline int a = 1;\ninline int b = a + a;\ninline int c = b * b;\nBEGIN { x = c + c + b; }\n";
    compile(ok).unwrap();
}

#[test]
fn struct_too_large_for_64_bits_is_an_error() {
    // Panicked on overflow while laying out the member after the array. Dimensions
    // are at most 32 bits, so it takes two big members to overflow.
    let e = compile(
        "struct t { char a[4294967295][4294967295]; };\nstruct s { struct t x; struct t y; int b; };\nBEGIN { y = offsetof(struct s, b); }",
    )
    .unwrap_err();
    assert!(e.contains("struct s is too large"), "{e}");
    let e = compile("struct s { char a[18446744073709551615]; int b; };").unwrap_err();
    assert!(e.contains("cannot be represented in any built-in integral type"), "{e}");
}
