//! The kernel memory reader the providers use for clauses that read kernel data:
//! `udtrace_bpf::kmem`'s program, run on demand.

use udtrace_bpf::kmem::KernelMemory;
use udtrace_providers::kernel::KernelReader;

struct Reader(KernelMemory);

impl KernelReader for Reader {
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.0.read(addr, len)
    }

    fn current_task(&self) -> Option<u64> {
        self.0.current_task()
    }
}

/// Loads the reader (for `udtrace_providers::kernel::set_source`).
pub fn kernel_reader() -> Result<Box<dyn KernelReader>, String> {
    KernelMemory::load().map(|k| Box::new(Reader(k)) as Box<dyn KernelReader>).map_err(|e| e.to_string())
}
