//! A shared ring written by a hostile traced process, drained and its records decoded as
//! the in-process backend does (see `udtrace_fuzz_harness::record`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| udtrace_fuzz_harness::record::run(data));
