//! Loading programs into the kernel, with the verifier's log when it refuses one.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use thiserror::Error;

use udtrace_sys::bpf::{self as sys, ProgSpec};

use crate::insn::{encode, Insn};

const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
const BPF_F_SLEEPABLE: u32 = 1 << 4;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

/// What a program is loaded for; the kernel checks helpers and context against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramKind {
    /// A uprobe attached through a perf event (one site per link).
    Uprobe,
    /// A uprobe attached through a uprobe_multi link (many sites per link). The kernel
    /// accepts such a program only on uprobe_multi links.
    UprobeMulti,
    Tracepoint,
    /// A raw tracepoint: its context is the tracepoint's arguments (task pointers and
    /// all), not the formatted record.
    RawTracepoint,
    /// A perf event's overflow (the CPU clock): its context is the interrupted
    /// registers.
    PerfEvent,
}

impl ProgramKind {
    fn types(self) -> (u32, u32) {
        match self {
            ProgramKind::Uprobe => (BPF_PROG_TYPE_KPROBE, 0),
            ProgramKind::UprobeMulti => (BPF_PROG_TYPE_KPROBE, sys::BPF_TRACE_UPROBE_MULTI),
            ProgramKind::Tracepoint => (BPF_PROG_TYPE_TRACEPOINT, 0),
            ProgramKind::RawTracepoint => (BPF_PROG_TYPE_RAW_TRACEPOINT, 0),
            ProgramKind::PerfEvent => (BPF_PROG_TYPE_PERF_EVENT, 0),
        }
    }
}

#[derive(Debug, Error)]
pub enum LoadError {
    /// The verifier (or the kernel before it) refused the program; `log` is its account.
    #[error("the kernel refused BPF program {name}: {source}{}", if log.is_empty() { String::new() } else { format!("\nverifier log:\n{log}") })]
    Refused { name: String, source: io::Error, log: String },
}

impl LoadError {
    pub fn os_error(&self) -> &io::Error {
        match self {
            LoadError::Refused { source, .. } => source,
        }
    }

    pub fn log(&self) -> &str {
        match self {
            LoadError::Refused { log, .. } => log,
        }
    }
}

/// The log buffer for a refused program; verifier logs of our programs are far smaller.
const LOG_SIZE: usize = 4 << 20;

/// A program loaded in the kernel; unloaded when dropped and no link holds it.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    kind: ProgramKind,
}

impl Program {
    /// Loads with license "GPL" (the helpers udtrace uses require it). The first attempt
    /// runs without a log, which keeps loading fast; a refusal is retried with the log on.
    pub fn load(kind: ProgramKind, name: &str, insns: &[Insn]) -> Result<Program, LoadError> {
        Program::load_flags(kind, name, insns, 0)
    }

    /// As [`Program::load`], sleepable (BPF_F_SLEEPABLE): it may fault user pages in
    /// (`bpf_copy_from_user`). Uprobe programs only, on kernels that allow it.
    pub fn load_sleepable(kind: ProgramKind, name: &str, insns: &[Insn]) -> Result<Program, LoadError> {
        Program::load_flags(kind, name, insns, BPF_F_SLEEPABLE)
    }

    fn load_flags(kind: ProgramKind, name: &str, insns: &[Insn], flags: u32) -> Result<Program, LoadError> {
        let (prog_type, expected_attach_type) = kind.types();
        let code = encode(insns);
        let mut spec = ProgSpec {
            prog_type,
            expected_attach_type,
            insns: &code,
            license: c"GPL",
            name,
            log_level: 0,
            log: &mut [],
            flags,
        };
        match sys::prog_load(&mut spec) {
            Ok(fd) => return Ok(Program { fd, kind }),
            // Without privilege there is no verifier log to show.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOSYS)) => {
                return Err(LoadError::Refused { name: name.to_string(), source: e, log: String::new() })
            }
            Err(_) => {}
        }
        let mut log = vec![0u8; LOG_SIZE];
        spec.log_level = 1;
        spec.log = &mut log;
        match sys::prog_load(&mut spec) {
            Ok(fd) => Ok(Program { fd, kind }),
            Err(source) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let log = String::from_utf8_lossy(&log[..end]).trim_end().to_string();
                Err(LoadError::Refused { name: name.to_string(), source, log })
            }
        }
    }

    pub fn kind(&self) -> ProgramKind {
        self.kind
    }
}

impl AsFd for Program {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
