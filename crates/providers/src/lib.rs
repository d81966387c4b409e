//! udtrace's providers: which probes exist and what their firings mean. The probe
//! [`registry`] (dtrace's BEGIN/END/ERROR, profile timers, proc, pid), the pid
//! provider ([`pid`]: descriptions matched against what a process has mapped, each
//! probe with its sites), the proc provider ([`proc`]: probes, kernel hooks and
//! DTrace's translators), and the context each firing runs in: [`pid_context`] from a
//! pid record, [`proc`] from a proc record, [`self_context`] for probes that fire in
//! udtrace itself. [`stack_cuts`] counts the user stacks unwound short, for the line
//! the session prints at the end. [`backend`] is the seam to whatever runs the probes.
//! [`usdt`]: the statically defined probes objects carry (`postgresql$target:::…`),
//! kept with the pid provider's, whose machinery (following, arming) they share.
//!
//! Owns: probe matching, sites to arm, the meaning of records. Must not: name a
//! backend's types (BPF programs, maps, links, rings), use `unsafe`, or print
//! (errors go back to the caller; only `-x debug` lines are written here).

#![forbid(unsafe_code)]

pub mod backend;
pub mod glob;
pub mod kernel;
pub mod pid;
pub mod pid_context;
pub mod proc;
pub mod registry;
pub mod self_context;
pub mod stack_cuts;
pub mod usdt;
