//! The bpf backend: one generated uprobe program, armed at every site of every enabled
//! pid probe with one `uprobe_multi` link per file, filtered in the kernel by the map of
//! traced processes, and delivering records through one ring buffer.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use udtrace_bpf::codegen::{uprobe_program, ProbeMaps};
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::record::{PtReg, RecordLayout, RecordPlan, StringCapture};
use udtrace_bpf::uprobe::{attach_multi_pid, MultiLink, Site};
use udtrace_lang::capture::CapturePlan;

use crate::pidprov::{PidProbe, SiteKind};

/// What one site's firing means: a probe and where in its function the site is.
#[derive(Debug, Clone, Copy)]
pub struct SiteTarget {
    pub probe_id: u32,
    /// The process whose probe this is: a site shared by several processes' probes
    /// fires each only in its own process.
    pub pid: i32,
    pub kind: SiteKind,
    /// The site's offset in the function (a return probe's `arg0`).
    pub offset: u64,
}

pub struct Bpf {
    pub maps: ProbeMaps,
    pub layout: RecordLayout,
    /// Indexed by cookie: every probe whose site this is.
    pub cookies: Vec<Vec<SiteTarget>>,
    _program: Program,
    _links: Vec<MultiLink>,
    /// Sites the kernel refused to probe, for the warning: (file, offset).
    pub refused: Vec<(PathBuf, u64)>,
    /// Processes whose firings count.
    pub pids: Vec<i32>,
    /// The argument register (0..=5) behind each string slot of a record, in slot order.
    pub string_args: Vec<u8>,
}

/// Errors carry the whole story (verifier log included), ready for `udtrace: …`.
pub type Error = String;

const ENOTSUPP: i32 = 524;

fn ring_size(bufsize: u64) -> usize {
    // A power-of-two number of pages, between 64 KiB and 256 MiB.
    let want = bufsize.clamp(64 << 10, 256 << 20);
    want.next_power_of_two() as usize
}

fn record_plan(plan: &CapturePlan, strsize: u32) -> RecordPlan {
    RecordPlan {
        stack_bytes: plan.stack_bytes.div_ceil(8) * 8,
        strings: plan
            .strings
            .iter()
            .map(|&n| StringCapture { reg: PtReg::ARGS[usize::from(n)], max: strsize.clamp(1, udtrace_bpf::record::MAX_STRING) })
            .collect(),
    }
}

impl Bpf {
    /// Loads the program and arms every site of `probes` (each (file, offset) once).
    pub fn arm(probes: &[&PidProbe], plan: &CapturePlan, bufsize: u64, strsize: u32) -> Result<Bpf, Error> {
        let _ = udtrace_bpf::uprobe::raise_fd_limit();
        let rplan = record_plan(plan, strsize);
        let layout = RecordLayout::new(&rplan).map_err(|e| format!("cannot lay out firing records: {e}"))?;
        let maps = ProbeMaps::create(ring_size(bufsize), 65536).map_err(|e| bpf_error("create BPF maps", &e.to_string(), e.os_error()))?;
        let insns = uprobe_program(&rplan, &maps).map_err(|e| format!("cannot generate the uprobe program: {e}"))?;
        let program = Program::load(ProgramKind::UprobeMulti, "udtrace_pid", &insns)
            .map_err(|e| bpf_error("load the uprobe program", &e.to_string(), Some(e.os_error())))?;

        let mut cookies: Vec<Vec<SiteTarget>> = Vec::new();
        // One link per (process, file): breakpoints go into that process only.
        let mut by_file: BTreeMap<(i32, PathBuf), BTreeMap<u64, u64>> = BTreeMap::new();
        for p in probes {
            // Unprobeable sites were set aside when the probe was made.
            for &(offset, file_off) in &p.sites {
                let sites = by_file.entry((p.pid, p.file.clone())).or_default();
                let cookie = *sites.entry(file_off).or_insert_with(|| {
                    cookies.push(Vec::new());
                    cookies.len() as u64 - 1
                });
                cookies[cookie as usize].push(SiteTarget { probe_id: p.probe.id, pid: p.pid, kind: p.kind, offset });
            }
        }
        let mut links = Vec::new();
        let mut refused = Vec::new();
        for ((pid, file), sites) in &by_file {
            let list: Vec<Site> = sites.iter().map(|(&offset, &cookie)| Site { offset, cookie }).collect();
            attach_file(&program, file, *pid as u32, &list, &mut links, &mut refused)?;
        }
        Ok(Bpf {
            maps,
            layout,
            cookies,
            _program: program,
            _links: links,
            refused,
            pids: Vec::new(),
            string_args: plan.strings.clone(),
        })
    }

    /// Counts a process's firings from now on.
    pub fn trace_pid(&mut self, pid: i32) -> Result<(), Error> {
        self.maps.traced.insert(&(pid as u32), &1).map_err(|e| format!("cannot trace pid {pid}: {e}"))?;
        self.pids.push(pid);
        Ok(())
    }

    /// New drops per CPU since `seen` was last updated: (cpu, count).
    pub fn new_drops(&self, seen: &mut Vec<u64>) -> Vec<(usize, u64)> {
        let Ok(now) = self.maps.drops.get(0) else { return Vec::new() };
        seen.resize(now.len(), 0);
        let mut out = Vec::new();
        for (cpu, (&n, seen)) in now.iter().zip(seen.iter_mut()).enumerate() {
            if n > *seen {
                out.push((cpu, n - *seen));
                *seen = n;
            }
        }
        out
    }
}

fn bpf_error(what: &str, detail: &str, os: Option<&std::io::Error>) -> Error {
    if os.is_some_and(udtrace_bpf::is_bpf_refusal) {
        return format!(
            "failed to {what}: {detail}\nudtrace: the kernel refused BPF: run as root (or with CAP_BPF and CAP_PERFMON), and check kernel.unprivileged_bpf_disabled and lockdown"
        );
    }
    format!("failed to {what}: {detail}")
}

/// Attaches one file's sites. The kernel refuses some instructions as uprobe sites
/// (`lock`-prefixed and VEX ones in a mapped file), and one refused site fails a whole
/// link: then the list is split until the refused sites are isolated and left out.
fn attach_file(
    program: &Program,
    file: &Path,
    pid: u32,
    sites: &[Site],
    links: &mut Vec<MultiLink>,
    refused: &mut Vec<(PathBuf, u64)>,
) -> Result<(), Error> {
    match attach_multi_pid(program, file, sites, false, pid) {
        Ok(l) => {
            links.push(l);
            Ok(())
        }
        Err(e) if e.os_error().and_then(|o| o.raw_os_error()) == Some(ENOTSUPP) => {
            if sites.len() == 1 {
                refused.push((file.to_path_buf(), sites[0].offset));
                return Ok(());
            }
            let (a, b) = sites.split_at(sites.len() / 2);
            attach_file(program, file, pid, a, links, refused)?;
            attach_file(program, file, pid, b, links, refused)
        }
        Err(e) => Err(bpf_error("arm probes", &e.to_string(), e.os_error())),
    }
}

/// Which probes own each refused site, for one warning per probe.
pub fn refused_probes<'a>(refused: &[(PathBuf, u64)], probes: &[&'a PidProbe]) -> Vec<&'a PidProbe> {
    let set: HashMap<(&Path, u64), ()> = refused.iter().map(|(f, o)| ((f.as_path(), *o), ())).collect();
    probes
        .iter()
        .filter(|p| p.sites.iter().any(|&(_, fo)| set.contains_key(&(p.file.as_path(), fo))))
        .copied()
        .collect()
}
