//! Any bytes as an object file a process maps: parsed, its functions assembled, placed
//! in a process, decoded, planned for patching and unwound through (see
//! `udtrace_fuzz_harness::elf`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| udtrace_fuzz_harness::elf::run(data));
