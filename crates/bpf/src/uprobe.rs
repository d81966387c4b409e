//! Attaching a loaded program to user-space sites (file, offset), each with a cookie the
//! program reads back with `bpf_get_attach_cookie` to know which probe fired.
//!
//! Two ways: one uprobe_multi link for all sites of a file (one system call for
//! thousands of sites), or one perf event on the uprobe PMU plus one perf link per site
//! (kernels without uprobe_multi). Dropping the returned value detaches.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use udtrace_sys::{bpf as sys, perf};

use crate::insn::{exit, mov64_imm};
use crate::prog::{Program, ProgramKind};

/// One probe site: a file offset of an instruction, and the cookie its firings carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub offset: u64,
    pub cookie: u64,
    /// The file offset of a USDT semaphore the kernel raises in each process while the
    /// site is armed there, and lowers when it is not (0: none).
    pub ref_ctr: u64,
}

#[derive(Debug, Error)]
pub enum AttachError {
    #[error("{path}: the file name contains a NUL byte")]
    BadPath { path: PathBuf },
    #[error("a {got:?} program cannot be attached as {want:?}")]
    WrongKind { got: ProgramKind, want: ProgramKind },
    #[error("no sites to attach in {path}")]
    NoSites { path: PathBuf },
    #[error("cannot read the uprobe PMU type from {file}: {reason}")]
    Pmu { file: &'static str, reason: String },
    #[error("cannot place a uprobe in {path} at offset {offset:#x}: {source}")]
    Uprobe { path: PathBuf, offset: u64, source: io::Error },
    #[error("cannot attach a uprobe_multi link to {count} sites in {path}: {source}")]
    Multi { path: PathBuf, count: usize, source: io::Error },
    #[error("cannot attach the program to perf event {what}: {source}")]
    Link { what: String, source: io::Error },
}

impl AttachError {
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            AttachError::Uprobe { source, .. }
            | AttachError::Multi { source, .. }
            | AttachError::Link { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn c_path(path: &Path) -> Result<CString, AttachError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| AttachError::BadPath { path: path.to_path_buf() })
}

fn check_kind(prog: &Program, want: ProgramKind) -> Result<(), AttachError> {
    if prog.kind() == want {
        Ok(())
    } else {
        Err(AttachError::WrongKind { got: prog.kind(), want })
    }
}

/// Sites of one file armed through one uprobe_multi link.
#[derive(Debug)]
pub struct MultiLink {
    _link: OwnedFd,
}

/// Arms every site of `path` with one LINK_CREATE, for every process (pid 0). `ret`
/// makes them return probes (not used by udtrace, which probes return instructions).
pub fn attach_multi(prog: &Program, path: &Path, sites: &[Site], ret: bool) -> Result<MultiLink, AttachError> {
    attach_multi_pid(prog, path, sites, ret, 0)
}

/// As [`attach_multi`], but the breakpoints go only into process `pid` (0: every
/// process mapping the file). Installing into every process that maps a file like
/// libc costs seconds for thousands of sites; one process, milliseconds.
pub fn attach_multi_pid(
    prog: &Program,
    path: &Path,
    sites: &[Site],
    ret: bool,
    pid: u32,
) -> Result<MultiLink, AttachError> {
    check_kind(prog, ProgramKind::UprobeMulti)?;
    if sites.is_empty() {
        return Err(AttachError::NoSites { path: path.to_path_buf() });
    }
    let cpath = c_path(path)?;
    let offsets: Vec<u64> = sites.iter().map(|s| s.offset).collect();
    let cookies: Vec<u64> = sites.iter().map(|s| s.cookie).collect();
    let ref_ctrs: Vec<u64> = sites.iter().map(|s| s.ref_ctr).collect();
    let ref_ctrs = ref_ctrs.iter().any(|&r| r != 0).then_some(ref_ctrs.as_slice());
    let flags = if ret { sys::BPF_F_UPROBE_MULTI_RETURN } else { 0 };
    let link = sys::link_create_uprobe_multi(prog.as_fd(), &cpath, &offsets, ref_ctrs, &cookies, flags, pid)
        .map_err(|source| AttachError::Multi { path: path.to_path_buf(), count: sites.len(), source })?;
    Ok(MultiLink { _link: link })
}

const UPROBE_PMU_TYPE: &str = "/sys/bus/event_source/devices/uprobe/type";

/// The dynamic PMU type of uprobes (8 on the project's machines, but not fixed).
pub fn uprobe_pmu_type() -> Result<u32, AttachError> {
    let text = std::fs::read_to_string(UPROBE_PMU_TYPE)
        .map_err(|e| AttachError::Pmu { file: UPROBE_PMU_TYPE, reason: e.to_string() })?;
    text.trim()
        .parse()
        .map_err(|_| AttachError::Pmu { file: UPROBE_PMU_TYPE, reason: format!("unexpected contents {text:?}") })
}

/// Sites armed one perf event and one perf link each. Only the links are kept: each
/// holds its perf event open, which halves the descriptors a large probe set needs.
#[derive(Debug, Default)]
pub struct PerfLinks {
    links: Vec<OwnedFd>,
}

impl PerfLinks {
    pub fn len(&self) -> usize {
        self.links.len()
    }
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Detaches with `threads` threads closing links at once. Each perf uprobe waits out
    /// an RCU grace period when it is removed (about 0.1 s on the project's VM), so closing
    /// one by one takes minutes for a thousand sites; concurrent removals share grace
    /// periods.
    pub fn close_in_parallel(self, threads: usize) {
        let n = self.links.len();
        let threads = threads.clamp(1, n.max(1));
        let mut chunks: Vec<Vec<OwnedFd>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, l) in self.links.into_iter().enumerate() {
            chunks[i % threads].push(l);
        }
        std::thread::scope(|s| {
            for c in chunks {
                s.spawn(move || c.into_iter().for_each(drop));
            }
        });
    }
}

/// Arms each site with its own uprobe perf event on every process (`pid -1, cpu 0`).
/// Each site takes one file descriptor: see [`raise_fd_limit`].
pub fn attach_perf(prog: &Program, path: &Path, sites: &[Site]) -> Result<PerfLinks, AttachError> {
    check_kind(prog, ProgramKind::Uprobe)?;
    let pmu = uprobe_pmu_type()?;
    let cpath = c_path(path)?;
    let mut out = PerfLinks::default();
    for s in sites {
        let ev = perf::open_uprobe(pmu, &cpath, s.offset, false, -1, 0).map_err(|source| AttachError::Uprobe {
            path: path.to_path_buf(),
            offset: s.offset,
            source,
        })?;
        let link = link_perf_event(prog, &ev, s.cookie, || format!("uprobe {}:{:#x}", path.display(), s.offset))?;
        out.links.push(link);
    }
    Ok(out)
}

/// A perf link carries the cookie (PERF_EVENT_IOC_SET_BPF cannot).
pub(crate) fn link_perf_event(
    prog: &Program,
    ev: &OwnedFd,
    cookie: u64,
    what: impl Fn() -> String,
) -> Result<OwnedFd, AttachError> {
    sys::link_create_perf_event(prog.as_fd(), ev.as_fd(), cookie)
        .map_err(|source| AttachError::Link { what: what(), source })
}

/// Whether this kernel loads uprobe_multi programs (6.6 and later). Loads a two
/// instruction program; a refusal of BPF as a whole also answers false.
pub fn uprobe_multi_supported() -> bool {
    Program::load(ProgramKind::UprobeMulti, "udtrace_probe", &[mov64_imm(crate::insn::Reg::R0, 0), exit()]).is_ok()
}

/// Raises the soft open-file limit to the hard one (perf attachment needs one
/// descriptor per site); returns the limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    udtrace_sys::rlimit::raise_nofile()
}
