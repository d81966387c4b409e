//! Any bytes as the text of /proc files through udtrace's parsers (see
//! `udtrace_fuzz_harness::procfs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| udtrace_fuzz_harness::procfs::run(data));
