//! Kernel memory for clauses, which run in user space after the firing: a clause that
//! dereferences a kernel address or reads `curthread` reads through a [`KernelReader`]
//! that a backend provides (the BPF backend runs a program on demand). It is made the
//! first time it is needed; where none can be made, every kernel read is an invalid
//! address, as a bad read is in DTrace.

use std::sync::{Mutex, OnceLock};

use udtrace_lang::types::SymKind;
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

/// The kernel's text symbols from /proc/kallsyms (addresses are shown to root only),
/// sorted by address: (address, name, module: "vmlinux" or the module's name).
fn kallsyms() -> &'static [(u64, String, String)] {
    static TABLE: OnceLock<Vec<(u64, String, String)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let mut v = parse_kallsyms(&text);
        v.sort_unstable_by_key(|s| s.0);
        debug!("{} kernel text symbols", v.len());
        v
    })
}

/// The text symbols (`t`, `T`, `w`, `W`) of /proc/kallsyms lines with an address.
fn parse_kallsyms(text: &str) -> Vec<(u64, String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok().filter(|&a| a != 0)?;
            let kind = f.next()?;
            if !matches!(kind, "t" | "T" | "w" | "W") {
                return None;
            }
            let name = f.next()?.to_string();
            let module = f.next().map_or("vmlinux", |m| m.trim_start_matches('[').trim_end_matches(']')).to_string();
            Some((addr, name, module))
        })
        .collect()
}

/// A kernel address as DTrace's `sym()`, `func()` and `mod()` print it on Linux:
/// `vmlinux`find_vma` (DTrace prints kernel functions without their offset) or the
/// module alone; `None` when no symbol is known (the address prints in hex).
pub fn symbol(addr: u64, kind: SymKind) -> Option<String> {
    lookup(kallsyms(), addr, kind)
}

fn lookup(table: &[(u64, String, String)], addr: u64, kind: SymKind) -> Option<String> {
    let i = table.partition_point(|s| s.0 <= addr).checked_sub(1)?;
    let (start, name, module) = &table[i];
    Some(match kind {
        SymKind::Mod => module.clone(),
        SymKind::Addr => format!("{module}`{name}+0x{:x}", addr - start),
        SymKind::Sym | SymKind::Func => format!("{module}`{name}"),
    })
}

#[cfg(test)]
mod kallsyms_tests {
    use super::*;

    #[test]
    fn kernel_addresses_name_their_function_and_module() {
        let mut t = parse_kallsyms(
            "ffffffff81000000 T _stext\nffffffff81234560 t find_vma\n0000000000000000 T hidden\n\
             ffffffff81240000 d some_data\nffffffffc0400000 t nf_hook [nf_tables]\n",
        );
        t.sort_unstable_by_key(|s| s.0);
        assert_eq!(t.len(), 3);
        assert_eq!(lookup(&t, 0xffffffff81234571, SymKind::Func).as_deref(), Some("vmlinux`find_vma"));
        assert_eq!(lookup(&t, 0xffffffff81234571, SymKind::Addr).as_deref(), Some("vmlinux`find_vma+0x11"));
        assert_eq!(lookup(&t, 0xffffffffc0400010, SymKind::Mod).as_deref(), Some("nf_tables"));
        assert_eq!(lookup(&t, 0xffffffff80000000, SymKind::Sym), None);
    }
}
