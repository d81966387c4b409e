//! What a firing leaves for the consumer: the byte layout of a pid firing's record
//! ([`pid`]: registers, user stack bytes, strings, errno, as its capture plan asks),
//! of a proc firing's ([`proc`]: task snapshots) and of a profile sample's
//! ([`profile`]: a pid record, the kernel PC, the task's name), with their parsers. Every
//! backend writes these records (the BPF programs today, in-process trampolines next),
//! so the providers read firings without knowing which backend made them.
//!
//! Owns: layouts and parsing. Must not: do I/O, use `unsafe`, or know how a record is
//! written (no BPF, no kernel interfaces).

#![forbid(unsafe_code)]

pub mod lineage;
pub mod pid;
pub mod proc;
pub mod profile;
