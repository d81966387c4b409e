//! Where `__vdso_clock_gettime` is in a vDSO image, the clock every trampoline calls.
//! Pure: the caller reads the image (the same for every process of a kernel) and adds
//! the process's vDSO base.

use udtrace_object::elf::{self, ElfError};

#[derive(Debug, thiserror::Error)]
pub enum VdsoError {
    #[error("vDSO image: {0}")]
    Elf(#[from] ElfError),
    #[error("the vDSO has no {0}")]
    NoSymbol(&'static str),
}

/// Offset of `__vdso_clock_gettime` from the start of the vDSO image (its load base).
pub fn clock_gettime_offset(image: &[u8]) -> Result<u64, VdsoError> {
    const NAME: &str = "__vdso_clock_gettime";
    let info = elf::parse(image)?;
    // The image is mapped from its first loadable segment's address on (0 on x86-64).
    let base = info.segments.iter().map(|s| s.vaddr).min().unwrap_or(0);
    info.symbols.iter().find(|s| s.defined && s.name == NAME).map(|s| s.addr - base).ok_or(VdsoError::NoSymbol(NAME))
}
