//! Any text through every parser entry point: each must return, Ok or Err.
#![no_main]

use libfuzzer_sys::fuzz_target;

use udtrace_lang::parser::{parse_program, parse_script, DescAlign};

fuzz_target!(|data: &[u8]| {
    // The binary reads scripts lossily, so invalid UTF-8 never reaches the parser.
    let src = String::from_utf8_lossy(data);
    let _ = parse_script(&src);
    for align in [DescAlign::Provider, DescAlign::Module, DescAlign::Function, DescAlign::Name] {
        let _ = parse_program(&src, align);
    }
});
