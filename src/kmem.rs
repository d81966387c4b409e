//! Kernel memory for clauses, which run in user space after the firing: read with
//! a BPF program run on demand (see `udtrace_bpf::kmem`), loaded the first time a
//! clause dereferences a kernel address or reads `curthread`. Where BPF is not
//! allowed, every kernel read is an invalid address, as a bad read is in DTrace.

use std::sync::{Mutex, OnceLock};

use udtrace_bpf::kmem::KernelMemory;

/// x86-64's kernel half of the address space.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

static READER: OnceLock<Option<Mutex<KernelMemory>>> = OnceLock::new();

pub fn is_kernel_address(addr: u64) -> bool {
    addr >= KERNEL_START
}

fn reader() -> Option<&'static Mutex<KernelMemory>> {
    READER
        .get_or_init(|| match KernelMemory::load() {
            Ok(k) => Some(Mutex::new(k)),
            Err(e) => {
                debug!("no kernel memory reader: {e}");
                None
            }
        })
        .as_ref()
}

/// `len` bytes at a kernel address; `None` for a user address or a faulting read.
pub fn read(addr: u64, len: usize) -> Option<Vec<u8>> {
    if !is_kernel_address(addr) {
        return None;
    }
    reader()?.lock().ok()?.read(addr, len)
}

/// The NUL-terminated string at a kernel address, at most `max - 1` bytes. Read a
/// page at a time so that a string that ends before an unmapped page reads.
pub fn read_string(addr: u64, max: usize) -> Option<Vec<u8>> {
    if !is_kernel_address(addr) {
        return None;
    }
    let want = max.saturating_sub(1);
    let mut out = Vec::new();
    while out.len() < want {
        let at = addr.checked_add(out.len() as u64)?;
        let to_page_end = 4096 - (at % 4096) as usize;
        let n = to_page_end.min(want - out.len());
        let chunk = reader()?.lock().ok()?.read(at, n)?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some(out);
        }
        out.extend(chunk);
    }
    Some(out)
}

/// The `struct task_struct` of the calling thread (udtrace's own).
pub fn current_task() -> Option<u64> {
    reader()?.lock().ok()?.current_task()
}
