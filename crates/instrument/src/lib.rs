//! The application side of USDT: what a program instrumented for DTrace is built
//! with. `udtrace -h -s provider.d` makes a C header of the provider definitions
//! ([`header`]), whose probe macros put systemtap's `.note.stapsdt` notes and
//! semaphores in the program itself, so that it builds with a plain C compiler;
//! `udtrace -G` writes the object such builds link ([`object`]), empty, since the
//! header leaves it nothing to do (docs/usdt-header.md).
//!
//! Owns: the header's text (C and assembler for the stapsdt ABI) and the `-G`
//! object's bytes. Must not: do I/O (the session writes the files), parse D (it is
//! handed `udtrace_lang`'s checked providers), or use `unsafe`.

#![forbid(unsafe_code)]

pub mod header;
pub mod object;

pub use header::{header, Error};
