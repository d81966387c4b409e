//! One udtrace run, as a [`Request`] describes it: compile the D programs (with cpp
//! and the D libraries), match their probe descriptions, start or grab the processes
//! (with the descendants a grabbed process already has), arm the probes through a
//! backend, fire BEGIN, drive timers, firings, followed processes and signals until
//! `exit()`, a signal or the end of the traced processes, fire END, print what
//! remains. Exit status as dtrace's.
//!
//! Owns: the order of a run and its messages. Must not: name a backend's types (it
//! gets one through `udtrace_providers::backend::Loader`), parse the command line
//! (the binary does), or use `unsafe`.

#![forbid(unsafe_code)]

mod commands;
mod compile;
mod cpus;
mod dlibs;
mod firing;
mod follow;
mod generate;
mod list;
mod preprocess;
mod request;
mod run;
mod sink;
mod stability;
mod targets;
mod timeline;

pub use generate::{generate, Generate};
pub use request::{split_command, Align, ProgramSource, Request};
pub use run::{run, EXIT_FAILURE};
