//! The in-process backend of the providers' seam ([`udtrace_providers::backend::Backend`]):
//! pid probe sites are patched in the traced process with a `jmp` to a trampoline that
//! writes the firing's record into a ring shared with udtrace (`udtrace-inproc`), so a
//! firing costs no trap and no system call. Sites that cannot be patched safely, and
//! everything else a backend does (proc probes, `pid*`, the loader hook), go to a
//! fallback backend (BPF) when there is one. See docs/inprocess.md.
//!
//! Owns: which processes carry a ring, a data page and trampolines, which sites are
//! patched, and taking the patches out again. Must not: decide what a firing means,
//! patch a process while any of its threads runs, print, or use `unsafe`.

#![forbid(unsafe_code)]

mod breakpoint;
mod firing;
mod guard;
mod process;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use firing::Buffers;
use guard::Guard;
use process::{Batch, Proc, Rings};

use udtrace_inproc::ring::Geometry;
use udtrace_inproc::trampoline::{supported_layout, CpuSource};
use udtrace_object::patch::SiteKind as PatchKind;
use udtrace_process::handoff::Server;
use udtrace_process::procfs::LoadedObject;
use udtrace_process::undertaker::Ledger;
use udtrace_providers::backend::{
    Backend, Error, ProbeOps, ProbeWork, ProfileProbe, Record, Setup, SiteTarget, Trap, PROFILE_NEEDS_BPF,
};
use udtrace_providers::pid::{PidProbe, SiteKind};
use udtrace_record::pid::{PtReg, RecordLayout, RecordPlan};
use udtrace_record::proc::{Hook, ProcPlan};

/// The in-process backend, with its fallback.
pub struct InProcess {
    record: RecordPlan,
    layout: RecordLayout,
    geometry: Geometry,
    cpu: CpuSource,
    /// Why no site can be patched at all (the records need what trampolines cannot
    /// capture yet, or children run unfollowed): every site goes to the fallback.
    off: Option<String>,
    /// Indexed by cookie: every probe whose site this is.
    cookies: Vec<Vec<SiteTarget>>,
    /// Indexed by cookie: the stash ops of its probes, when its site was placed.
    cookie_ops: Vec<u64>,
    /// Indexed by cookie: the register each string capture reads at the site
    /// (`PidProbe::string_regs`: a USDT argument's is the site's own).
    cookie_strings: Vec<Vec<Option<PtReg>>>,
    probe_ops: ProbeOps,
    /// What each probe does at the firing (docs/firing.md).
    work: ProbeWork,
    /// The buffers its programs keep their variables and aggregations in.
    buffers: Buffers,
    /// (file, file offset) → cookie.
    cookie_of: HashMap<(PathBuf, u64), u64>,
    procs: HashMap<i32, Proc>,
    rings: Rings,
    traced: HashSet<i32>,
    string_args: Vec<u8>,
    /// The argument register and size behind each buffer slot, in slot order.
    buffer_args: Vec<(u8, u32)>,
    fallback: Option<Box<dyn Backend>>,
    /// Without a fallback, why there is no BPF, and what to do (for the messages of
    /// what only BPF can do).
    no_bpf: String,
    /// Sites not patched since the last notice, by reason.
    fell_back: BTreeMap<String, usize>,
    /// Sites (and other things) not armed at all since the last notice, by reason.
    unarmed: BTreeMap<String, usize>,
    /// Of those, without a fallback, the ones a breakpoint took, by reason.
    broke: BTreeMap<String, usize>,
    /// Records of breakpoint firings, written by udtrace, not yet consumed.
    pending: Vec<Vec<u8>>,
    /// Ring records that fired while the last drain read the fallback's: they go out
    /// with the next, after the fallback's that may come before them.
    held: Merge,
    /// Where each process keeps errno (see `Backend::set_errno_tls`).
    errno_tls: HashMap<i32, (u64, i64)>,
    /// Ring drops already reported.
    drops_seen: Vec<u64>,
    /// Whether to say which sites use uprobes (`-x inprocess` given).
    explain: bool,
    /// Processes another tracer holds: udtrace cannot stop them to patch them.
    unheld: HashSet<i32>,
    /// Without BPF: process → its loader hook's address and the distance from it to
    /// `_r_debug.r_state`, watched by a hardware breakpoint in each of its threads.
    hooks: HashMap<i32, (u64, u64)>,
    /// Without BPF: the SIGTRAP guard of each process with breakpoints or a watched
    /// hook, or why it has none (see guard.rs).
    guards: HashMap<i32, Result<Guard, String>>,
    /// What is patched, told to the undertaker (who undoes it if udtrace dies).
    ledger: LedgerSlot,
    /// Where other sessions ask for sites patched here, listening from the first process
    /// set up for patching (without a fallback, to say why they cannot have them).
    handoff: Option<Server>,
    handoff_tried: bool,
    /// The probes of each site patched somewhere, (file, file offset) → probes with
    /// that site alone: what the fallback arms when the site is given up.
    patched_probes: HashMap<(PathBuf, u64), Vec<PidProbe>>,
    /// Sites another session asked for, being given up (or another tracer's uprobe
    /// took, see `landed`).
    asked: HashSet<(PathBuf, u64)>,
    /// Firings not seen at landings (another tracer's uprobe ran an entry's first
    /// instruction), by CPU: drops, reported with the rings'.
    missed: Vec<u64>,
    /// Entries whose landing was reached, said once each: (pid, entry).
    landed_at: HashSet<(i32, u64)>,
    landing_notes: Vec<String>,
    /// Sites given up: never patched again, in any process.
    given: HashSet<(PathBuf, u64)>,
    /// `pid*` probes on sites patched here, armed for every process once the sites are
    /// given up.
    pending_all: Vec<PidProbe>,
}

/// The undertaker's ledger, started at the first patch, and the processes it holds
/// patches of.
#[derive(Default)]
struct LedgerSlot {
    ledger: Option<Ledger>,
    failed: bool,
    live: HashSet<i32>,
}

impl LedgerSlot {
    /// The ledger, for a patch about to go into `pid`; `None` if it cannot start.
    fn get(&mut self, pid: i32) -> Option<&mut Ledger> {
        if self.ledger.is_none() && !self.failed {
            match Ledger::start() {
                Ok(l) => self.ledger = Some(l),
                Err(e) => {
                    self.failed = true;
                    udtrace_messages::debug!("no undertaker: {e}");
                }
            }
        }
        self.live.insert(pid);
        self.ledger.as_mut()
    }

    /// The ledger, if `pid` has patches it knows of.
    fn existing(&mut self, pid: i32) -> Option<&mut Ledger> {
        self.ledger.as_mut().filter(|_| self.live.contains(&pid))
    }

    fn forked(&mut self, parent: i32, child: i32) {
        if let Some(l) = self.ledger.as_mut().filter(|_| self.live.contains(&parent)) {
            l.forked(parent, child);
            self.live.insert(child);
        }
    }

    /// `pid` carries no patch of udtrace's any more.
    fn gone(&mut self, pid: i32) {
        if let Some(l) = self.ledger.as_mut().filter(|_| self.live.remove(&pid)) {
            l.gone(pid);
        }
    }
}

impl Drop for LedgerSlot {
    fn drop(&mut self) {
        // A clean stop with every patch taken out tells the undertaker so; a process
        // still patched (udtrace ends by a path that did not release it) is left to it.
        if let Some(l) = self.ledger.take() {
            if self.live.is_empty() {
                l.close();
            }
        }
    }
}

/// Why a site given up to another session is not patched (it uses uprobes, which the
/// sessions share).
const GIVEN_UP: &str = "another session or tracer probes it too";

/// The slots of the ring each process image writes into: DTrace's `bufsize` is the
/// principal buffer of each CPU, and a process's ring takes the firings of every CPU,
/// so it holds `bufsize` × CPUs bytes of slots (a power of two of them, within
/// bounds). A slot is as large as the record the clauses need: one that reads no
/// register, string or stack is its header alone (48 bytes).
fn ring_slots(bufsize: u64, record_size: usize) -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let slot = 8 + (record_size as u64).div_ceil(8) * 8;
    let n = (bufsize.saturating_mul(cpus) / slot).clamp(1 << 10, 1 << 22);
    // The power of two at or below: never more bytes than bufsize gives.
    if n.is_power_of_two() {
        n
    } else {
        n.next_power_of_two() / 2
    }
}

impl InProcess {
    /// An in-process backend for `setup`; `fallback` (BPF, when the kernel allows it)
    /// takes what in-process probes cannot do; otherwise it is why BPF cannot be used
    /// and what to do (`the kernel refused BPF: run as root …`).
    pub fn load(setup: &Setup, fallback: Result<Box<dyn Backend>, String>) -> Result<InProcess, Error> {
        let (fallback, no_bpf) = match fallback {
            Ok(f) => (Some(f), String::new()),
            Err(why) => (None, why),
        };
        let record = setup.record_plan();
        let (layout, mut off) = match supported_layout(&record) {
            Ok(l) => (l, None),
            Err(e) => (
                RecordLayout::new(&record).map_err(|e| format!("cannot lay out firing records: {e}"))?,
                Some(e.to_string()),
            ),
        };
        if !setup.children {
            if fallback.is_none() {
                // Breakpoints or patches in an unfollowed child would kill or misname it.
                return Err(format!(
                    "-x nofollow needs uprobes for pid probes, which need BPF: {no_bpf}; without it, pid probes follow children"
                ));
            }
            off.get_or_insert_with(|| "with -x nofollow, children would run the patched code unfollowed".into());
        }
        let geometry = Geometry::new(ring_slots(setup.bufsize, layout.size), layout.size).map_err(|e| e.to_string())?;
        let cpu = if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" rdpid")) {
            CpuSource::Rdpid
        } else {
            CpuSource::Rdtscp
        };
        Ok(InProcess {
            record,
            layout,
            geometry,
            cpu,
            off,
            cookies: Vec::new(),
            cookie_ops: Vec::new(),
            cookie_strings: Vec::new(),
            probe_ops: setup.probe_ops.clone(),
            work: setup.work.clone(),
            buffers: Buffers::new(&setup.layout, setup.tables),
            cookie_of: HashMap::new(),
            procs: HashMap::new(),
            rings: Rings::default(),
            traced: HashSet::new(),
            string_args: setup.plan.strings.clone(),
            buffer_args: setup.buffer_args(),
            fallback,
            no_bpf,
            fell_back: BTreeMap::new(),
            unarmed: BTreeMap::new(),
            broke: BTreeMap::new(),
            pending: Vec::new(),
            held: Merge::default(),
            errno_tls: HashMap::new(),
            drops_seen: Vec::new(),
            explain: setup.explain,
            unheld: setup.unheld.iter().copied().collect(),
            ledger: LedgerSlot::default(),
            hooks: HashMap::new(),
            guards: HashMap::new(),
            handoff: None,
            handoff_tried: false,
            patched_probes: HashMap::new(),
            asked: HashSet::new(),
            missed: Vec::new(),
            landed_at: HashSet::new(),
            landing_notes: Vec::new(),
            given: HashSet::new(),
            pending_all: Vec::new(),
        })
    }

    /// A thread of `pid` stopped at its loader hook (`at`; `_r_debug.r_state` lies
    /// `r_state` bytes on, 0 if unknown). It goes on through the hook's instruction.
    fn hook_hit(pid: i32, at: u64, r_state: u64) -> Trap {
        if r_state == 0 {
            return Trap::Hold;
        }
        // Only a consistent link map means objects were added (or removed).
        let state = at.wrapping_add(r_state);
        match udtrace_process::procfs::read_memory(pid, state, 4).ok().and_then(|b| b.try_into().ok()) {
            Some(b) if i32::from_ne_bytes(b) != 0 => Trap::Fired,
            _ => Trap::Hold,
        }
    }

    /// Installs `pid`'s SIGTRAP guard, once, before its first breakpoint or debug
    /// register. Without it those work as well while udtrace runs; only a SIGKILL of
    /// udtrace would leave the process to die at its next hit.
    /// Without BPF, raises the semaphores of `probes` (USDT) in `pid` by writing its
    /// memory, once per image, after their sites are armed (the process is stopped);
    /// lowered at release, by the undertaker after a SIGKILL (docs/usdt.md). With BPF
    /// such probes are uprobes, and the kernel keeps their semaphores.
    fn raise_semaphores(&mut self, pid: i32, probes: &[&PidProbe], objects: &[LoadedObject]) {
        if self.fallback.is_some() {
            return;
        }
        for p in probes.iter().filter(|p| p.semaphore != 0) {
            let Some(proc) = self.procs.get_mut(&pid) else { return };
            let r = match process::data_address(pid, objects, &p.file, p.semaphore) {
                Some(at) => proc.raise(pid, at, &p.file, self.ledger.get(pid)),
                None => Err("its object's data is not mapped".to_string()),
            };
            if let Err(why) = r {
                let q = &p.probe;
                let what = format!("the semaphore of {}:{}:{}:{}: {why}", q.provider, q.module, q.function, q.name);
                *self.unarmed.entry(what).or_default() += 1;
            }
        }
    }

    fn ensure_guard(&mut self, pid: i32) {
        self.guards.entry(pid).or_insert_with(|| {
            Guard::install(pid).inspect_err(|e| {
                udtrace_messages::debug!("pid {pid}: no SIGTRAP guard: {e}");
            })
        });
    }

    fn cookie(&mut self, p: &PidProbe, offset: u64, file_off: u64) -> u64 {
        let next = self.cookies.len() as u64;
        let cookie = *self.cookie_of.entry((p.file.clone(), file_off)).or_insert(next);
        if cookie == next {
            self.cookies.push(Vec::new());
            self.cookie_ops.push(0);
            self.cookie_strings.push(vec![None; self.string_args.len()]);
        }
        // A USDT probe's registers, whichever of the site's probes has them.
        let regs = p.string_regs(offset, &self.string_args);
        for (have, r) in self.cookie_strings[cookie as usize].iter_mut().zip(regs) {
            *have = have.or(r);
        }
        let targets = &mut self.cookies[cookie as usize];
        if !targets.iter().any(|t| t.probe_id == p.probe.id) {
            targets.push(SiteTarget { probe_id: p.probe.id, pid: p.pid, kind: p.kind, offset });
        }
        self.cookie_ops[cookie as usize] |= self.probe_ops.get(p.probe.id);
        cookie
    }

    /// The record plan of the site with `cookie` where it differs from the session's:
    /// its USDT arguments' string captures read the registers the site has them in.
    fn site_record(&self, cookie: u64) -> Option<RecordPlan> {
        let regs = self.cookie_strings.get(cookie as usize)?;
        let here = |i: usize| regs.get(i).copied().flatten();
        let resolved = self.record.strings.iter().enumerate().any(|(i, c)| c.per_site && here(i).is_some());
        resolved.then(|| {
            let mut plan = self.record.clone();
            for (i, c) in plan.strings.iter_mut().enumerate().filter(|(_, c)| c.per_site) {
                if let Some(r) = here(i) {
                    (c.reg, c.per_site) = (r, false);
                }
            }
            plan
        })
    }

    /// Places a breakpoint at each site of `probes` (those the kernel cannot probe
    /// too, where `unprobeable`), counting each under its reason.
    fn break_at_all(&mut self, pid: i32, objects: &[LoadedObject], probes: &[(PidProbe, String)], unprobeable: bool) {
        if probes.is_empty() {
            return;
        }
        if self.procs.contains_key(&pid) {
            self.ensure_guard(pid);
        }
        for (p, why) in probes {
            // A breakpoint works where a uprobe cannot (lock-prefixed, VEX).
            let extra: &[(u64, u64)] = if unprobeable { &p.unprobeable } else { &[] };
            for &(offset, file_off) in p.sites.iter().chain(extra) {
                let cookie = self.cookie(p, offset, file_off);
                let site = site_of(p, offset, file_off, cookie, self.cookie_ops[cookie as usize]);
                let guard = self.guards.get_mut(&pid).and_then(|g| g.as_mut().ok());
                let placed = match self.procs.get_mut(&pid) {
                    Some(proc) => proc.break_at(pid, &site, objects, guard, self.ledger.get(pid)),
                    None => Err(why.clone()),
                };
                match placed {
                    Ok(()) => *self.broke.entry(why.clone()).or_default() += 1,
                    Err(e) => *self.unarmed.entry(format!("{why}; no breakpoint either: {e}")).or_default() += 1,
                }
            }
        }
    }

    /// Sites not patched go to the fallback; without one they stay unarmed. Either way
    /// the next notice counts them under `why`.
    fn fall_back(
        &mut self,
        pid: i32,
        objects: &[LoadedObject],
        unpatched: Vec<(PidProbe, String)>,
    ) -> Result<(), Error> {
        if unpatched.is_empty() {
            return Ok(());
        }
        if self.fallback.is_none() {
            // The slow path: a breakpoint at each site (see breakpoint.rs).
            self.break_at_all(pid, objects, &unpatched, true);
            return Ok(());
        }
        // Sites whose firings keep or read saved pointers meet the trampolines' table
        // (in the data page) only at a breakpoint: a uprobe's are in a BPF map of its
        // own, and a pointer kept at a patched entry would not be found at its return.
        // (A process without trampolines has its table nowhere: all its sites are
        // uprobes, and their map serves.)
        let has_table = self.procs.contains_key(&pid);
        // Likewise thread-local variables: a thread's live in its process's buffer,
        // which a uprobe's program cannot reach.
        let has_buffer = self.procs.get(&pid).is_some_and(|p| p.dif().is_some());
        let mut shared: Vec<(PidProbe, String)> = Vec::new();
        let mut rest: Vec<(PidProbe, String)> = Vec::new();
        for (p, why) in unpatched {
            let (mut own, mut other) = (Vec::new(), Vec::new());
            for &(offset, file_off) in &p.sites {
                let cookie = self.cookie(&p, offset, file_off);
                let tls = has_buffer && firing::uses_tls(&self.work.site(&self.cookies[cookie as usize]).program);
                if tls || (has_table && self.cookie_ops[cookie as usize] & TABLE_OPS != 0) {
                    own.push((offset, file_off));
                } else {
                    other.push((offset, file_off));
                }
            }
            if !own.is_empty() {
                shared.push((with_sites(&p, own, Vec::new()), why.clone()));
            }
            if !other.is_empty() || !p.unprobeable.is_empty() {
                rest.push((with_sites(&p, other, p.unprobeable.clone()), why));
            }
        }
        self.break_at_all(pid, objects, &shared, false);
        let unpatched = rest;
        // A uprobe inside a patch's bytes would write into them: such sites stay unarmed.
        let mut kept: Vec<(PidProbe, String)> = Vec::new();
        for (p, why) in unpatched {
            let mut sites = Vec::new();
            for &(offset, file_off) in &p.sites {
                let at = process::runtime_address(pid, objects, &p.file, file_off);
                let ok = match (self.procs.get_mut(&pid), at) {
                    (Some(proc), Some(at)) => proc.may_arm_elsewhere(at),
                    _ => Ok(()),
                };
                match ok {
                    Ok(()) => sites.push((offset, file_off)),
                    Err(e) => *self.unarmed.entry(e).or_default() += 1,
                }
            }
            // Sites the kernel cannot probe go along: the fallback reports them refused.
            if !sites.is_empty() || !p.unprobeable.is_empty() {
                kept.push((with_sites(&p, sites, p.unprobeable.clone()), why));
            }
        }
        for (p, why) in &kept {
            *self.fell_back.entry(why.clone()).or_default() += p.sites.len();
        }
        let Some(f) = self.fallback.as_mut() else { return Ok(()) };
        let probes: Vec<PidProbe> = kept.into_iter().map(|(p, _)| p).collect();
        let refs: Vec<&PidProbe> = probes.iter().collect();
        f.arm(pid, &refs)
    }
}

/// Records of the rings and breakpoints of one drain, copied, to go out in time order
/// among the fallback's (see `InProcess::consume`).
#[derive(Default)]
struct Merge {
    arena: Vec<u8>,
    /// The arena's twin, for [`Merge::compact`]: both keep their room from one drain
    /// to the next, so that a drain allocates nothing.
    spare: Vec<u8>,
    /// (ktime, start, length) of each record in `arena`; those from `next` on are
    /// still to go out, sorted by time (stably: a ring's own order stays).
    records: Vec<(u64, usize, usize)>,
    next: usize,
    /// The latest ktime read.
    latest: u64,
    /// The rings were read only in part ([`MERGE_BATCH`]): records earlier than
    /// `latest` may still be in them.
    partial: bool,
}

/// What [`Merge::next_until`]'s records go out through, parsed.
type EmitUntil<'a> = dyn Fn(&mut Merge, Option<u64>, bool, &mut dyn FnMut(Record<'_>)) + 'a;

/// Hands a record of the fallback's to `each`, after the rings' records earlier than
/// it (the rings read again first when it is later than all of theirs read so far).
/// Whether it was a pid firing.
fn merge_fallback(
    record: Record<'_>,
    rings: &mut Rings,
    ours: &mut Merge,
    layout: &RecordLayout,
    emit_until: &EmitUntil<'_>,
    each: &mut dyn FnMut(Record<'_>),
) -> bool {
    let pid = if let Record::Pid { firing, .. } = &record {
        if ours.partial || ours.latest < firing.ktime {
            rings.drain_upto(usize::MAX, |b| ours.keep(layout, b));
            ours.partial = false;
            ours.sort();
        }
        emit_until(ours, Some(firing.ktime), false, each);
        true
    } else {
        false
    };
    each(record);
    pid
}

/// Bytes of ring records copied per drain, at most, before the fallback's are merged
/// with them: the copy stays small (udtrace's memory does not grow with the rings),
/// and the session drains again at once while records are left (`backlog`).
const MERGE_BATCH: usize = 1 << 20;

impl Merge {
    /// Copies a record. Only its time is read here: it is parsed when it goes out.
    fn keep(&mut self, layout: &RecordLayout, bytes: &[u8]) {
        const KTIME: std::ops::Range<usize> = udtrace_record::pid::OFF_KTIME..udtrace_record::pid::OFF_KTIME + 8;
        let Some(ktime) = bytes.get(KTIME).filter(|_| bytes.len() == layout.size) else { return };
        let ktime = u64::from_ne_bytes(ktime.try_into().expect("8 bytes"));
        self.records.push((ktime, self.arena.len(), bytes.len()));
        self.arena.extend_from_slice(bytes);
        self.latest = self.latest.max(ktime);
    }

    fn sort(&mut self) {
        self.records[self.next..].sort_by_key(|r| r.0);
    }

    /// The next record, if it is not later than `t` (with `below`, earlier than it).
    fn next_until(&mut self, t: Option<u64>, below: bool) -> Option<&[u8]> {
        let &(ktime, at, len) = self.records.get(self.next)?;
        if t.is_some_and(|t| ktime > t || (below && ktime == t)) {
            return None;
        }
        self.next += 1;
        Some(&self.arena[at..at + len])
    }

    /// Keeps only the records still to go out.
    fn compact(&mut self) {
        self.spare.clear();
        self.latest = 0;
        let mut kept = 0;
        for i in self.next..self.records.len() {
            let (ktime, at, len) = self.records[i];
            self.records[kept] = (ktime, self.spare.len(), len);
            self.spare.extend_from_slice(&self.arena[at..at + len]);
            self.latest = self.latest.max(ktime);
            kept += 1;
        }
        self.records.truncate(kept);
        self.next = 0;
        std::mem::swap(&mut self.arena, &mut self.spare);
    }
}

/// The stash ops that use the per-thread table: stores, and reads of saved pointers
/// (chains that start from arguments alone do not): every bit below the chains'.
const TABLE_OPS: u64 = udtrace_record::pid::op_chain(0) - 1;

fn patch_kind(k: SiteKind) -> PatchKind {
    match k {
        SiteKind::Entry => PatchKind::Entry,
        SiteKind::Return => PatchKind::Return,
        // A USDT site (a nop) is patched as an offset: the jump takes the instructions
        // after it too, relocated (docs/usdt.md). A profile probe is never a site.
        SiteKind::Offset(_) | SiteKind::Profile | SiteKind::Usdt(_) => PatchKind::Offset,
    }
}

/// The site at `offset` in `p`'s function (file offset `file_off`).
fn site_of(p: &PidProbe, offset: u64, file_off: u64, cookie: u64, stash_ops: u64) -> process::Site<'_> {
    process::Site {
        file: &p.file,
        file_off,
        offset,
        func_size: p.func_size,
        kind: patch_kind(p.kind),
        cookie,
        stash_ops,
    }
}

/// `p` with only `sites` and `unprobeable`.
fn with_sites(p: &PidProbe, sites: Vec<(u64, u64)>, unprobeable: Vec<(u64, u64)>) -> PidProbe {
    PidProbe { sites, unprobeable, ..p.clone() }
}

impl Backend for InProcess {
    fn enable_proc(&mut self, hooks: &[(Hook, ProcPlan)]) -> Result<(), Error> {
        match self.fallback.as_mut() {
            Some(f) => f.enable_proc(hooks),
            None if hooks.is_empty() => Ok(()),
            None => Err(bpf_needed("the proc provider", &self.no_bpf)),
        }
    }

    fn enable_profile(&mut self, probes: &[ProfileProbe], stack_bytes: u32) -> Result<(), Error> {
        match self.fallback.as_mut() {
            Some(f) => f.enable_profile(probes, stack_bytes),
            None if probes.is_empty() => Ok(()),
            None => Err(format!("{PROFILE_NEEDS_BPF}: {}", self.no_bpf)),
        }
    }

    fn trace_pid(&mut self, pid: i32) -> Result<(), Error> {
        self.traced.insert(pid);
        match self.fallback.as_mut() {
            Some(f) => f.trace_pid(pid),
            None => Ok(()),
        }
    }

    fn untrace(&mut self, pid: i32) {
        self.traced.remove(&pid);
        if let Some(f) = self.fallback.as_mut() {
            f.untrace(pid);
        }
    }

    fn arm(&mut self, pid: i32, probes: &[&PidProbe]) -> Result<(), Error> {
        if probes.iter().all(|p| p.sites.is_empty() && p.unprobeable.is_empty()) {
            return Ok(());
        }
        let mut unpatched: Vec<(PidProbe, String)> = Vec::new();
        if self.unheld.contains(&pid) {
            if self.fallback.is_none() {
                return Err(format!(
                    "pid {pid} is held by another tracer, and without BPF udtrace can only probe a process \
                     it holds: run as root (or with CAP_BPF and CAP_PERFMON)"
                ));
            }
            let why = "another tracer holds the process: udtrace cannot stop it to patch it".to_string();
            unpatched.extend(probes.iter().map(|p| ((*p).clone(), why.clone())));
            return self.fall_back(pid, &Batch::of(pid, probes).objects, unpatched);
        }
        // With BPF, a USDT probe behind a semaphore is a uprobe: the kernel raises the
        // semaphore in each process it is armed in and lowers it when the link goes,
        // however udtrace ends. Without, it is armed here and udtrace raises it
        // (`raise_semaphores`, docs/usdt.md).
        if self.fallback.is_some() && probes.iter().any(|p| p.semaphore != 0) {
            let (gated, rest): (Vec<&PidProbe>, Vec<&PidProbe>) = probes.iter().partition(|p| p.semaphore != 0);
            let why = "a USDT probe behind a semaphore: the kernel raises it for a uprobe".to_string();
            let gated = gated.into_iter().map(|p| (p.clone(), why.clone())).collect();
            self.fall_back(pid, &Batch::of(pid, probes).objects, gated)?;
            return self.arm(pid, &rest);
        }
        let ready = match self.off.clone() {
            Some(why) => {
                // Without a fallback the sites become breakpoints, which need the process
                // set up (their out-of-line copies live in its trampoline regions).
                match self.fallback.is_none().then(|| self.ensure_proc(pid)) {
                    Some(Err(e)) => Err(e),
                    _ => Err(why),
                }
            }
            None => self.ensure_proc(pid).and_then(|_| process::all_stopped(pid)),
        };
        let batch = Batch::of(pid, probes);
        if let Err(why) = ready {
            unpatched.extend(probes.iter().map(|p| ((*p).clone(), why.clone())));
            let r = self.fall_back(pid, &batch.objects, unpatched);
            self.raise_semaphores(pid, probes, &batch.objects);
            return r;
        }
        // Without BPF, a landing (an entry patched over its first byte) is guarded as a
        // breakpoint is: after udtrace is killed, a thread there goes on.
        if self.fallback.is_none() && self.procs.contains_key(&pid) {
            self.ensure_guard(pid);
        }
        for p in probes {
            // Why → (sites, sites the kernel cannot probe) not patched.
            type Left = (Vec<(u64, u64)>, Vec<(u64, u64)>);
            let mut refused: BTreeMap<String, Left> = BTreeMap::new();
            let all = p.sites.iter().map(|&s| (s, false)).chain(p.unprobeable.iter().map(|&s| (s, true)));
            for ((offset, file_off), unprobeable) in all {
                let cookie = self.cookie(p, offset, file_off);
                let site = site_of(p, offset, file_off, cookie, self.cookie_ops[cookie as usize]);
                let key = (p.file.clone(), file_off);
                let work = self.work.site(&self.cookies[cookie as usize]);
                let own = self.site_record(cookie);
                let record = own.as_ref().unwrap_or(&self.record);
                let r = match self.procs.get_mut(&pid) {
                    _ if self.given.contains(&key) => Err(GIVEN_UP.to_string()),
                    Some(proc) => {
                        let guard = self.guards.get_mut(&pid).and_then(|g| g.as_mut().ok());
                        let work = (&work, &self.buffers);
                        proc.patch(pid, &site, &batch, record, self.geometry, work, guard, self.ledger.get(pid))
                    }
                    None => Err("the process is gone".to_string()),
                };
                match r {
                    Ok(()) if !unprobeable => {
                        let probes = self.patched_probes.entry(key).or_default();
                        if !probes.iter().any(|q| q.probe.id == p.probe.id) {
                            probes.push(with_sites(p, vec![(offset, file_off)], Vec::new()));
                        }
                    }
                    Ok(()) => {}
                    Err(why) => {
                        let left = refused.entry(why).or_default();
                        if unprobeable { &mut left.1 } else { &mut left.0 }.push((offset, file_off));
                    }
                }
            }
            for (why, (sites, unprobeable)) in refused {
                unpatched.push((with_sites(p, sites, unprobeable), why));
            }
        }
        let r = self.fall_back(pid, &batch.objects, unpatched);
        self.raise_semaphores(pid, probes, &batch.objects);
        r
    }

    fn arm_all(&mut self, probes: &[&PidProbe]) -> Result<(), Error> {
        if self.fallback.is_none() {
            return match probes.is_empty() {
                true => Ok(()),
                false => Err(bpf_needed("pid* probes (every process)", &self.no_bpf)),
            };
        }
        // A uprobe for every process would go over this session's own patches there:
        // those sites are given up first (hand_over), and armed for every process then.
        let mut now: Vec<&PidProbe> = Vec::new();
        for &p in probes {
            let patched: Vec<(PathBuf, u64)> = p
                .sites
                .iter()
                .map(|&(_, fo)| (p.file.clone(), fo))
                .filter(|key| self.procs.values().any(|proc| proc.has_site(key)))
                .collect();
            if patched.is_empty() {
                now.push(p);
            } else {
                self.asked.extend(patched);
                self.pending_all.push(p.clone());
            }
        }
        self.fallback.as_mut().map_or(Ok(()), |f| f.arm_all(&now))
    }

    fn refused(&self) -> &[(PathBuf, u64)] {
        self.fallback.as_ref().map_or(&[], |f| f.refused())
    }

    fn arm_hook(&mut self, pid: i32, file: &Path, offset: u64, r_state: u64) -> Result<Option<u64>, Error> {
        if let Some(f) = self.fallback.as_mut() {
            return f.arm_hook(pid, file, offset, r_state);
        }
        // Without BPF, a hardware breakpoint on the hook holds the process. Not an
        // int3: a kernel uprobe there (any BPF tracer's loader hook, system-wide) would
        // take its hits, and erase it when removed.
        let objects = udtrace_process::procfs::objects_of(pid).unwrap_or_default();
        match process::runtime_address(pid, &objects, file, offset) {
            Some(at) => {
                self.ensure_guard(pid);
                self.hooks.insert(pid, (at, r_state));
                Ok(Some(at))
            }
            None => {
                *self
                    .unarmed
                    .entry(format!("the loader hook of pid {pid} (libraries it loads later): its loader is not mapped"))
                    .or_default() += 1;
                Ok(None)
            }
        }
    }

    fn trap(&mut self, pid: i32, tid: i32) -> Trap {
        if let Some(&(at, r_state)) = self.hooks.get(&pid) {
            if udtrace_process::watch::is_hit(tid) {
                return Self::hook_hit(pid, at, r_state);
            }
        }
        let Some(p) = self.procs.get(&pid) else { return Trap::NotOurs };
        let (cookie, regs) = match p.trap(tid) {
            None => return Trap::NotOurs,
            Some(process::Hit::Breakpoint(cookie, regs)) => (cookie, regs),
            Some(process::Hit::Landing(l)) => {
                self.landed(pid, tid, &l);
                return Trap::Fired;
            }
        };
        let work = self.cookies.get(cookie as usize).map(|t| self.work.site(t)).unwrap_or_default();
        let mut emit = false;
        if !work.program.ops.is_empty() {
            // The site's program, on the process's buffer, as its trampoline would (with
            // the ids its data page holds).
            let (uid, gid) = p.ids();
            let f = udtrace_dif::interp::Firing {
                args: [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9],
                pid: pid as u64,
                tid: tid as u64,
                cpu: u64::from(breakpoint::cpu_of(pid, tid)),
                timestamp: breakpoint::monotonic_ns(),
                uid,
                gid,
                ret: regs.rax,
                ppid: if work.program.reads(udtrace_dif::Var::Ppid) { firing::ppid_of(pid) } else { 0 },
                errno: match self.errno_tls.get(&pid) {
                    Some(&tls) if work.program.reads(udtrace_dif::Var::Errno) => {
                        process::errno_of(pid, tid, tls).map_or(0, |e| i64::from(e) as u64)
                    }
                    _ => 0,
                },
                comm: p.comm(),
                // A USDT site's operands (`Op::UReg`), `rip` at the site.
                regs: [
                    regs.rax, regs.rbx, regs.rcx, regs.rdx, regs.rsi, regs.rdi, regs.rbp, regs.rsp, regs.r8, regs.r9,
                    regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15, regs.rip,
                ],
            };
            emit = self.buffers.run(&work.program, &f, p.dif()) == udtrace_dif::interp::Outcome::Emit;
        }
        if work.record || emit {
            let errno = self.errno_tls.get(&pid).and_then(|&tls| process::errno_of(pid, tid, tls));
            let stash_ops = self.cookie_ops.get(cookie as usize).copied().unwrap_or(0);
            let site = breakpoint::Fired { cookie, stash_ops, data_page: p.data_page() };
            let own = self.site_record(cookie);
            let plan = own.as_ref().unwrap_or(&self.record);
            self.pending.push(breakpoint::record(&self.layout, plan, site, pid, tid, &regs, errno));
        }
        Trap::Fired
    }

    fn take_hold(&self, tid: i32) -> bool {
        self.fallback.as_ref().is_some_and(|f| f.take_hold(tid))
    }

    fn drop_hooks(&mut self) {
        if let Some(f) = self.fallback.as_mut() {
            f.drop_hooks();
        }
    }

    fn reads_errno(&self) -> bool {
        self.record.errno || self.fallback.as_ref().is_some_and(|f| f.reads_errno())
    }

    fn set_errno_tls(&mut self, pid: i32, tls: Option<(u64, i64)>) {
        match tls {
            Some(t) => self.errno_tls.insert(pid, t),
            None => self.errno_tls.remove(&pid),
        };
        if let Some(p) = self.procs.get(&pid).filter(|_| self.record.errno) {
            p.set_errno(pid, tls);
        }
        if let Some(f) = self.fallback.as_mut() {
            f.set_errno_tls(pid, tls);
        }
    }

    fn fork(&mut self, parent: i32, child: i32) -> Result<(), Error> {
        self.traced.insert(child);
        if self.unheld.contains(&parent) {
            self.unheld.insert(child);
        }
        // Its threads watch the hook where its parent's do (see Tree::watch).
        if let Some(&h) = self.hooks.get(&parent) {
            self.hooks.insert(child, h);
        }
        // And it has its parent's SIGTRAP action and a copy of its guard.
        if let Some(g) = self.guards.get(&parent).cloned() {
            self.guards.insert(child, g);
        }
        if let Some(p) = self.procs.get(&parent) {
            // The child has the parent's memory: its patches, trampolines and ring (shared
            // mappings), and a copy of the data page, which must name the child.
            match p.forked(parent, child, &mut self.rings) {
                Ok(Some(c)) => {
                    self.procs.insert(child, c);
                    self.ledger.forked(parent, child);
                }
                Ok(None) => {}
                Err(why) => {
                    // Its firings would name its parent: it runs unpatched instead.
                    p.unpatch(child);
                    *self
                        .unarmed
                        .entry(format!("the sites of pid {child}, which runs unpatched: {why}"))
                        .or_default() += 1;
                }
            }
        }
        match self.fallback.as_mut() {
            Some(f) => f.fork(parent, child),
            None => Ok(()),
        }
    }

    fn unloaded(&mut self, pid: i32) {
        if let Some(proc) = self.procs.get_mut(&pid) {
            let objects = udtrace_process::procfs::objects_of(pid).unwrap_or_default();
            proc.forget_unmapped(pid, &objects, self.ledger.existing(pid));
        }
    }

    fn exec(&mut self, pid: i32) {
        // The old image's patches, trampolines, ring and data page are gone with it, and
        // its SIGTRAP handler (exec resets handled signals to their default).
        self.hooks.remove(&pid);
        self.guards.remove(&pid);
        if let Some(p) = self.procs.remove(&pid) {
            p.gone(&mut self.rings);
        }
        self.ledger.gone(pid);
        if let Some(f) = self.fallback.as_mut() {
            f.exec(pid);
        }
    }

    fn exit(&mut self, pid: i32) {
        self.unheld.remove(&pid);
        self.errno_tls.remove(&pid);
        self.hooks.remove(&pid);
        self.guards.remove(&pid);
        if let Some(p) = self.procs.remove(&pid) {
            p.gone(&mut self.rings);
        }
        self.ledger.gone(pid);
        self.traced.remove(&pid);
        // Its main thread's entry in the buffer it shared (other threads' at the next
        // scan, below).
        self.buffers.retire(Some(&[pid as u64]));
        if let Some(f) = self.fallback.as_mut() {
            f.exit(pid);
        }
    }

    fn release(&mut self, pid: i32) {
        self.hooks.remove(&pid);
        if let Some(p) = self.procs.remove(&pid) {
            p.unpatch(pid);
            p.gone(&mut self.rings);
        }
        self.ledger.gone(pid);
        // The breakpoints are out and the debug registers are cleared next: the
        // process's own SIGTRAP action goes back.
        if let Some(Ok(g)) = self.guards.remove(&pid) {
            if let Err(e) = g.remove(pid) {
                udtrace_messages::debug!("pid {pid}: SIGTRAP action not restored: {e}");
            }
        }
        if let Some(f) = self.fallback.as_mut() {
            f.release(pid);
        }
    }

    fn notices(&mut self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        // Sites on uprobes behave the same, only slower: said when -x inprocess asked.
        let fell_back = std::mem::take(&mut self.fell_back);
        for (why, n) in fell_back.into_iter().filter(|_| self.explain) {
            let plural = if n == 1 { "" } else { "s" };
            let verb = if n == 1 { "uses" } else { "use" };
            out.push(format!("{n} probe site{plural} {verb} uprobes, not in-process probes: {why}"));
        }
        for (why, n) in std::mem::take(&mut self.unarmed) {
            // Keys naming what is not armed ("the loader hook of …") stand alone.
            if why.starts_with("the ") {
                out.push(format!("not armed: {why}"));
            } else {
                let plural = if n == 1 { "" } else { "s" };
                out.push(format!("{n} probe site{plural} not armed: {why}"));
            }
        }
        out.append(&mut self.landing_notes);
        for (why, n) in std::mem::take(&mut self.broke) {
            let plural = if n == 1 { "" } else { "s" };
            out.push(format!(
                "{n} probe site{plural} use{} breakpoints (slow), not in-process probes: {why}",
                if n == 1 { "s" } else { "" }
            ));
        }
        if let Some(f) = self.fallback.as_mut() {
            out.extend(f.notices());
        }
        out
    }

    fn wait_fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds = self.fallback.as_ref().map(|f| f.wait_fds()).unwrap_or_default();
        fds.extend(self.handoff.as_ref().map(|h| h.fd()));
        fds
    }

    fn handoff_asked(&mut self) -> Vec<i32> {
        let sites = self.handoff.as_mut().map(|s| s.take()).unwrap_or_default();
        if self.fallback.is_none() {
            if let (false, Some(server)) = (sites.is_empty(), self.handoff.as_mut()) {
                server.answer(&Err(format!("it has nothing else to probe them with: {}", self.no_bpf)));
            }
            return Vec::new();
        }
        // Sites the kernel cannot probe stay patched: the asker's uprobe is refused there.
        for (pid, addr) in sites {
            let Some(key) = self.procs.get(&pid).and_then(|p| p.site_at(addr)) else { continue };
            if self.patched_probes.contains_key(&key) {
                self.asked.insert(key);
            }
        }
        let carriers = self.carriers_of(&self.asked);
        if carriers.is_empty() && (self.handoff.as_ref().is_some_and(|s| s.waiting()) || !self.pending_all.is_empty()) {
            // Nothing of this session's there (any more): done at once.
            self.hand_over(&[]);
        }
        carriers
    }

    fn hand_over(&mut self, paused: &[i32]) {
        let asked = std::mem::take(&mut self.asked);
        let carriers = self.carriers_of(&asked);
        // All or none: a file armed for every process would get a uprobe in a process
        // still carrying the patch, over its jump.
        let outcome = match carriers.iter().find(|&&pid| !paused.contains(&pid) || process::all_stopped(pid).is_err()) {
            Some(pid) => Err(format!("pid {pid} did not stop")),
            None => Ok(()),
        };
        if outcome.is_ok() {
            self.given.extend(asked.iter().cloned());
            for pid in carriers {
                let mut unpatched: Vec<(PidProbe, String)> = Vec::new();
                for key in &asked {
                    let Some(proc) = self.procs.get_mut(&pid).filter(|p| p.has_site(key)) else { continue };
                    match proc.unpatch_site(pid, key, self.ledger.get(pid)) {
                        Ok(()) => unpatched.extend(
                            self.patched_probes
                                .get(key)
                                .into_iter()
                                .flatten()
                                .map(|p| (p.clone(), GIVEN_UP.to_string())),
                        ),
                        Err(e) => udtrace_messages::debug!("pid {pid}: site not given up: {e}"),
                    }
                }
                let objects = udtrace_process::procfs::objects_of(pid).unwrap_or_default();
                if let Err(e) = self.fall_back(pid, &objects, unpatched) {
                    udtrace_messages::note!("pid {pid}: {e}");
                }
            }
            // pid* probes waiting for these sites: every process now has the file's code.
            let all = std::mem::take(&mut self.pending_all);
            let refs: Vec<&PidProbe> = all.iter().collect();
            if let Some(Err(e)) = self.fallback.as_mut().map(|f| f.arm_all(&refs)) {
                udtrace_messages::note!("{e}");
            }
        } else if !self.pending_all.is_empty() {
            // Tried again at the next look.
            self.asked = asked;
        }
        if let Some(s) = self.handoff.as_mut() {
            s.answer(&outcome);
        }
    }

    fn consume(&mut self, each: &mut dyn FnMut(Record<'_>)) {
        let (layout, cookies) = (&self.layout, &self.cookies);
        let (string_args, buffer_args) = (&self.string_args, &self.buffer_args);
        // A thread's firings come from up to three places: its process's ring, the
        // breakpoints udtrace handled, and the fallback's uprobes. The clauses must see
        // them in the order they happened (`self->ts` stored at an entry that is a
        // uprobe, read at a return that is patched), so they go out by time: the
        // breakpoints' records and the rings', copied and sorted, each before the first
        // of the fallback's that is later.
        // - A fallback record later than every ring record read so far has the rings
        //   read again first: a firing of its thread before it was committed before it.
        // - Ring records that fired after the fallback's were first read (from `t0`
        //   on) wait for the next drain: a fallback record before them may not have
        //   been there to read. (A thread that has stopped, at an exit or an exec,
        //   fires nothing meanwhile: its records all go out before its event is
        //   dealt with.)
        let mut ours = std::mem::take(&mut self.held);
        for bytes in std::mem::take(&mut self.pending) {
            ours.keep(layout, &bytes);
        }
        let emit = |bytes: &[u8], each: &mut dyn FnMut(Record<'_>)| {
            // Lent where it was parsed: a move of the ~300-byte firing cost 10% of a
            // record.
            let parsed = layout.parse(bytes);
            let Ok(firing) = &parsed else { return };
            let Some(sites) = cookies.get(firing.cookie as usize) else { return };
            each(Record::Pid { firing, sites, string_args, buffer_args });
        };
        let emit_until = |ours: &mut Merge, t: Option<u64>, below: bool, each: &mut dyn FnMut(Record<'_>)| {
            while let Some(bytes) = ours.next_until(t, below) {
                emit(bytes, each);
            }
        };
        // The rings are read a batch at a time (udtrace's copy of them stays small), up
        // to what they held when this drain began: writers faster than the consumer
        // must not keep it here.
        let budget = self.rings.unread();
        let mut read = 0;
        loop {
            let rings = &mut self.rings;
            // Read in place, not copied, where nothing is to be merged with them: one
            // ring, nothing held over, no breakpoint's record, none of the fallback's
            // now (its first has the rings copied as below), and the ring's next records
            // already in time order (as the copy's sort would leave them) and, with a
            // fallback, earlier than `t0`. The copy cost 10-17% of a record.
            if ours.records.is_empty() {
                let t0 = self.fallback.is_some().then(breakpoint::monotonic_ns);
                let mut merged = false;
                if let Some(f) = self.fallback.as_mut() {
                    f.consume(&mut |r| merged |= merge_fallback(r, rings, &mut ours, layout, &emit_until, each));
                }
                if merged {
                    emit_until(&mut ours, t0, true, each);
                    ours.compact();
                    break;
                }
                if let Some(n) = rings.in_order(MERGE_BATCH, t0.unwrap_or(u64::MAX)) {
                    let more = rings.drain_in_order(n, |b| emit(b, each));
                    read += n;
                    if !more || read >= budget {
                        break;
                    }
                    continue;
                }
            }
            let had = ours.records.len();
            ours.partial = !rings.drain_upto(MERGE_BATCH, |b| ours.keep(layout, b));
            read += (ours.records.len() - had) as u64;
            ours.sort();
            match self.fallback.as_mut() {
                None => emit_until(&mut ours, None, false, each),
                Some(f) => {
                    let t0 = breakpoint::monotonic_ns();
                    f.consume(&mut |r| {
                        merge_fallback(r, rings, &mut ours, layout, &emit_until, each);
                    });
                    emit_until(&mut ours, Some(t0), true, each);
                }
            }
            ours.compact();
            if !ours.partial || read >= budget {
                break;
            }
        }
        self.held = ours;
    }

    fn backlog(&self) -> bool {
        self.rings.backlog() || self.fallback.as_ref().is_some_and(|f| f.backlog())
    }

    fn exec_notices(&mut self) -> Vec<i32> {
        self.fallback.as_mut().map(|f| f.exec_notices()).unwrap_or_default()
    }

    fn exec_names(&mut self) -> Vec<(i32, String)> {
        self.fallback.as_mut().map(|f| f.exec_names()).unwrap_or_default()
    }

    fn new_drops(&mut self) -> Vec<(usize, u64)> {
        // Once a second: the buffers' entries of threads that ended are freed.
        self.buffers.retire(None);
        // Breakpoints another tracer's uprobe took and gave back.
        for (&pid, p) in &self.procs {
            for at in p.lost_breakpoints(pid) {
                self.landing_notes.push(format!(
                    "pid {pid}: another tracer's uprobe took udtrace's breakpoint at {at:#x} and, gone, put the \
                     instruction back: the breakpoint is set again, its firings meanwhile were lost"
                ));
            }
        }
        let mut out = self.fallback.as_mut().map(|f| f.new_drops()).unwrap_or_default();
        // The rings are per process; their trampolines count drops by CPU. Firings taken
        // by another tracer's uprobe at a landing are drops too.
        let mut now = self.rings.drops();
        if now.len() < self.missed.len() {
            now.resize(self.missed.len(), 0);
        }
        for (n, m) in now.iter_mut().zip(&self.missed) {
            *n += m;
        }
        self.drops_seen.resize(now.len(), 0);
        for (cpu, (&n, seen)) in now.iter().zip(self.drops_seen.iter_mut()).enumerate() {
            if n > *seen {
                match out.iter_mut().find(|(c, _)| *c == cpu) {
                    Some((_, d)) => *d += n - *seen,
                    None => out.push((cpu, n - *seen)),
                }
                *seen = n;
            }
        }
        out.sort_unstable();
        out
    }

    fn firing_snapshot(&mut self) -> udtrace_dif::snapshot::Snapshot {
        // Every process's buffer (those of ended processes too), udtrace's own for
        // breakpoints without one, and the fallback's maps.
        let mut s = self.buffers.snapshot();
        if let Some(f) = self.fallback.as_mut() {
            s.merge(&self.buffers.layout, &f.firing_snapshot());
        }
        s
    }
}

impl InProcess {
    /// A thread came to the landing of an entry patched over its first byte: another
    /// tracer's uprobe there ran the first instruction (or it ran whole again, the
    /// uprobe gone) and this firing was not seen. With the uprobe still there, the site
    /// is given up to a uprobe of udtrace's own, which shares the place (at the next
    /// look, all threads stopped); without BPF it stays, each call a landing. Gone, the
    /// jump is written back.
    fn landed(&mut self, pid: i32, tid: i32, l: &process::Landing) {
        let cpu = breakpoint::cpu_of(pid, tid) as usize;
        if self.missed.len() <= cpu {
            self.missed.resize(cpu + 1, 0);
        }
        self.missed[cpu] += 1;
        if self.landed_at.insert((pid, l.entry)) {
            self.landing_notes.push(format!(
                "pid {pid}: another tracer's uprobe is on the first byte of a function udtrace patched (at {:#x}): \
                 the firings it takes are counted as drops{}",
                l.entry,
                if self.fallback.is_some() { "; the entry is a uprobe of udtrace's from now on" } else { "" }
            ));
        }
        let Some(p) = self.procs.get(&pid) else { return };
        match p.after_landing(pid, l) {
            Ok(true) if self.fallback.is_some() => {
                if let Some(key) = p.site_at(l.entry) {
                    self.asked.insert(key);
                }
            }
            Ok(_) => {}
            Err(e) => udtrace_messages::debug!("pid {pid}: after a landing at {:#x}: {e}", l.entry),
        }
    }

    /// The processes carrying one of the sites `keys`.
    fn carriers_of(&self, keys: &HashSet<(PathBuf, u64)>) -> Vec<i32> {
        self.procs.iter().filter(|(_, p)| keys.iter().any(|k| p.has_site(k))).map(|(&pid, _)| pid).collect()
    }

    /// Sets process `pid` up for patching (once): its ring, data page and clock.
    fn ensure_proc(&mut self, pid: i32) -> Result<(), String> {
        if self.procs.contains_key(&pid) {
            return Ok(());
        }
        let p = Proc::set_up(pid, self.geometry, self.layout.size, self.cpu, &mut self.rings, &mut self.buffers)?;
        self.procs.insert(pid, p);
        // Another session may come to probe the sites patched here: it asks for them.
        if !self.handoff_tried {
            self.handoff_tried = true;
            self.handoff = Server::listen().inspect_err(|e| udtrace_messages::debug!("no handoff socket: {e}")).ok();
        }
        Ok(())
    }
}

/// One line: what cannot be enabled, why there is no BPF, what to do, what still works.
fn bpf_needed(what: &str, no_bpf: &str) -> Error {
    format!("{what} cannot be enabled without BPF: {no_bpf}; pid probes on -c/-p processes work without it")
}
