//! The compile pipeline of src/compile.rs minus the probe registry: parse, check,
//! pragmas, format validation, and rendering of whichever error comes first.
#![no_main]

use libfuzzer_sys::fuzz_target;

use udtrace_lang::check::Checker;
use udtrace_lang::diag::{render, Origin, Style};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::options::Options;
use udtrace_lang::parser::{parse_program, parse_script, DescAlign};
use udtrace_lang::{CompileError, Tag};

/// One compile of `src`; any error is rendered, as the binary would print it.
fn compile(src: &str, script: bool, align: DescAlign, macros: &MacroArgs) {
    let origin = if script { Origin::Script("fuzz.d".into()) } else { Origin::Description };
    let show = |e: &CompileError| assert!(!render(e, &origin, src, Style { errtags: true, excerpt: true }).is_empty());
    let parsed = if script { parse_script(src) } else { parse_program(src, align) };
    let program = match parsed {
        Ok(p) => p,
        Err(e) => return show(&e),
    };
    let mut checker = Checker::new(macros);
    if let Err(e) = checker.add_source(&program, 0, src) {
        return show(&e);
    }
    let _ = macros.check_unused();
    let checked = checker.finish();
    let mut options = Options::default();
    for o in &checked.options {
        if let Err(e) = options.set(&o.name, o.value.as_deref()) {
            return show(&CompileError::new(Tag::D_PRAGMA_OPTSET, o.span, e.pragma_message()));
        }
    }
    if let Err((_, e)) = udtrace_runtime::output::validate_formats(&checked, macros.target.is_some()) {
        show(&e);
    }
}

/// Macro arguments as `-s fuzz.d 42 main -7 '"s"'` gives them, under either policy
/// for missing and unused arguments.
fn macros(lenient: bool) -> MacroArgs {
    let args = ["fuzz.d", "42", "main", "-7", "\"s\""];
    let mut m = MacroArgs::new(args.iter().map(|s| s.to_string()).collect());
    m.defaultargs = lenient;
    m.argref = lenient;
    m.target = (!lenient).then_some(1234);
    m.pid = 99;
    m
}

fuzz_target!(|data: &[u8]| {
    // The binary reads scripts lossily, so invalid UTF-8 never reaches the parser.
    let src = String::from_utf8_lossy(data);
    compile(&src, true, DescAlign::Name, &macros(false));
    compile(&src, true, DescAlign::Name, &macros(true));
    for align in [DescAlign::Provider, DescAlign::Module, DescAlign::Function, DescAlign::Name] {
        compile(&src, false, align, &macros(align == DescAlign::Name));
    }
});
