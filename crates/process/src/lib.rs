//! Live processes: what a process has mapped (`/proc`), starting and grabbing `-c`/`-p`
//! processes (and the descendants a `-p` process has when it is grabbed), and following process trees with ptrace (fork, vfork, exec, the holds
//! that keep a new process still until its probes are armed), holding any process's exec
//! of a new image until udtrace has seized it (`gate`), and running system calls
//! inside a stopped process to map shared memory near its code (`inject`).
//!
//! Facts about the objects a process maps come from `udtrace-object`; this crate never
//! parses an object itself. Its system calls go through `nix` and `udtrace-sys`; no
//! `unsafe` here.

#![forbid(unsafe_code)]

pub mod control;
pub mod descendants;
pub mod follow;
pub mod gate;
pub mod handoff;
pub mod inject;
pub mod procfs;
pub mod refusal;
pub mod undertaker;
pub mod wait;
pub mod watch;
