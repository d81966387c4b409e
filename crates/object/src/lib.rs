//! Facts about object files: ELF symbols and their canonical (demangled) names, the
//! module names DTrace gives objects, where inside each function the entry, return and
//! offset probe sites are (decoding), which sites can be patched with a jump to a
//! trampoline and their displaced code relocated there (`patch`), unwind tables, how
//! glibc's `errno` is reached, and the statically defined probes (USDT) objects carry
//! in `.note.stapsdt` (`usdt`).
//!
//! Bytes in, facts out: nothing here knows of a live process. The one exception to "no
//! I/O" is `debuginfo`, which reads (through `read`) an object file and its separate
//! debug file from the paths it is given: regular ELF files only, bounded, and only
//! the parts udtrace looks at. No `unsafe`.

#![forbid(unsafe_code)]

pub mod debuginfo;
pub mod elf;
pub mod errno;
pub mod modules;
pub mod patch;
mod read;
pub mod sites;
pub mod symbols;
pub mod unwind;
pub mod usdt;
