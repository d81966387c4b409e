//! Kernel memory for clauses, which run in user space after the firing: a clause that
//! dereferences a kernel address or reads `curthread` reads through a [`KernelReader`]
//! that a backend provides (the BPF backend runs a program on demand). It is made the
//! first time it is needed; where none can be made, every kernel read is an invalid
//! address, as a bad read is in DTrace.

use std::sync::{Mutex, OnceLock};

use udtrace_messages::debug;

/// x86-64's kernel half of the address space.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Reads kernel memory for the consumer.
pub trait KernelReader: Send {
    /// `len` bytes at a kernel address; `None` when the read faults.
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>>;
    /// The `struct task_struct` of the calling thread (udtrace's own).
    fn current_task(&self) -> Option<u64>;
}

/// Makes a reader, or says why it cannot.
pub type ReaderSource = fn() -> Result<Box<dyn KernelReader>, String>;

static SOURCE: OnceLock<ReaderSource> = OnceLock::new();
static READER: OnceLock<Option<Mutex<Box<dyn KernelReader>>>> = OnceLock::new();

/// Says where kernel reads come from; only the first call counts. Without a source,
/// kernel addresses read as invalid.
pub fn set_source(source: ReaderSource) {
    let _ = SOURCE.set(source);
}

pub fn is_kernel_address(addr: u64) -> bool {
    addr >= KERNEL_START
}

fn reader() -> Option<&'static Mutex<Box<dyn KernelReader>>> {
    READER
        .get_or_init(|| match SOURCE.get().map(|make| make()) {
            Some(Ok(k)) => Some(Mutex::new(k)),
            Some(Err(e)) => {
                debug!("no kernel memory reader: {e}");
                None
            }
            None => None,
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
