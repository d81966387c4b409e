//! Shared by the integration tests: the BPF refusal policy, serialisation of tests that
//! probe this process, and finding our own functions' file offsets.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use object::{Object, ObjectSegment, ObjectSymbol};

use udtrace_bpf::is_bpf_refusal;
use udtrace_bpf::maps::HashMap;

/// The one place the policy lives: a test needing BPF skips (with a printed reason)
/// only when the kernel refuses BPF and UDTRACE_REQUIRE_BPF is not 1; any other failure
/// to create a map fails the test.
pub fn bpf_available(test: &str) -> bool {
    match HashMap::<u32, u32>::create("udtrace_check", 1) {
        Ok(_) => true,
        Err(e) => {
            let refused = e.os_error().is_some_and(is_bpf_refusal);
            let required = std::env::var("UDTRACE_REQUIRE_BPF").is_ok_and(|v| v == "1");
            if refused && !required {
                eprintln!("skipping {test}: the kernel refuses BPF ({e}); run as root to test");
                false
            } else {
                panic!("{test}: BPF is unavailable: {e}");
            }
        }
    }
}

/// Tests in one binary run on parallel threads of one process; a probe on a function of
/// this process would see the calls of every test, so those tests take turns.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// This test binary and the file offset of `symbol` in it (its address translated
/// through the loadable segment that holds it).
pub fn own_function(symbol: &str) -> (PathBuf, u64) {
    let exe = std::env::current_exe().expect("current_exe");
    let data = std::fs::read(&exe).expect("read own executable");
    let file = object::File::parse(&*data).expect("parse own executable");
    let addr =
        file.symbols().find(|s| s.name() == Ok(symbol)).unwrap_or_else(|| panic!("no symbol {symbol}")).address();
    let off = file
        .segments()
        .find_map(|seg| {
            let (foff, fsize) = seg.file_range();
            (addr >= seg.address() && addr < seg.address() + fsize).then(|| addr - seg.address() + foff)
        })
        .unwrap_or_else(|| panic!("{symbol} at {addr:#x} is in no segment"));
    (exe, off)
}
