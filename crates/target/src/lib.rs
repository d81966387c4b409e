//! Target processes: what a live process has mapped, the functions each object holds,
//! where inside each function the entry, return and offset probe sites are, and the
//! control of `-c`/`-p` processes.
//!
//! `elf`, `symbols`, `sites` and `modules` are pure (bytes in, facts out); `procfs`,
//! `debuginfo` and `control` do the I/O.

pub mod control;
pub mod debuginfo;
pub mod elf;
pub mod errno;
pub mod follow;
pub mod modules;
pub mod procfs;
pub mod sites;
pub mod symbols;
pub mod unwind;
