//! The [`Bpf`] backend: its programs, maps and links, and how sites are armed (per
//! process or once for every process) and links closed (off the main thread).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use udtrace_bpf::btf::{Btf, BtfError};
use udtrace_bpf::codegen::{
    errno_entry, exec_program, hold_program, uprobe_program_work, ErrnoSource, Filter, HoldSignals, ProbeMaps,
    SiteWork, StashMaps, HELD,
};
use udtrace_bpf::dif::{DifCode, DifMaps, DifSizes, Gets};
use udtrace_bpf::insn::Insn;
use udtrace_bpf::lineage::{self, exit_program, fork_program, LineageError, TaskIds, KERNEL_FOLLOWED};
use udtrace_bpf::maps::RingBuf;
use udtrace_bpf::proc::{attach_points, proc_program, AttachPoints, SyscallField, TaskOffsets};
use udtrace_bpf::profile::{self, SampleFilter, UserRegs};
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::ringbuf::RingBufReader;
use udtrace_bpf::tracepoint::{self, RawTracepointLink, TracepointLink};
use udtrace_bpf::uprobe::{attach_multi_pid, MultiLink, Site};
use udtrace_messages::program;
use udtrace_process::{handoff, procfs};
use udtrace_providers::backend::{
    Backend, Error, ProbeOps, ProbeWork, ProfileProbe, Record, Setup, SiteTarget, Work, HOLD_SIGNAL,
    HOLD_SIGNAL_BLOCKED,
};
use udtrace_providers::pid::PidProbe;
use udtrace_record::pid::{PtReg, RecordLayout, RecordPlan};
use udtrace_record::proc::{hook_of, Hook, ProcLayout, ProcPlan};
use udtrace_record::profile::{is_profile, ProfileLayout};

/// What a site's program is made for: its filter, firing-time program, whether it
/// always records, and the register each string capture reads there.
type WorkKey = (Filter, udtrace_dif::Program, bool, Vec<Option<PtReg>>);

/// The BPF backend: see the crate's documentation.
pub struct Bpf {
    maps: ProbeMaps,
    layout: RecordLayout,
    /// Reads `maps.ring`, once it is made.
    reader: Option<RingBufReader>,
    /// Indexed by cookie: every probe whose site this is.
    cookies: Vec<Vec<SiteTarget>>,
    /// Indexed by cookie: the stash ops in the map for it (the union of its probes').
    cookie_ops: Vec<u64>,
    /// Indexed by cookie: the register each string capture reads at the site
    /// (`PidProbe::string_regs`: a USDT argument's is the site's own).
    cookie_strings: Vec<Vec<Option<PtReg>>>,
    probe_ops: ProbeOps,
    /// (file, file offset, for `pid*`) → cookie: a site has one cookie in every
    /// process, and another for the program of `pid*` probes.
    cookie_of: HashMap<(PathBuf, u64, bool), u64>,
    /// The program of sites that only record, loaded when first needed (as the
    /// in-process backend's fallback, only for a site it cannot patch).
    program: Option<Program>,
    /// The same for per-process links where the kernel keeps them to their process
    /// (`Filter::Link`; none on kernels before 6.13).
    program_link: Option<Program>,
    /// Whether per-process links' programs skip the traced map (`link_filters_process`).
    link_filters: bool,
    /// What each probe's firings compute where they fire (docs/firing.md).
    work: ProbeWork,
    /// The maps of that work; none when the session has no such work.
    dif: Option<DifMaps>,
    /// The record plan the programs write (kept to generate programs for new work).
    rplan: RecordPlan,
    /// Programs for sites that run firing-time work or write no record, by what their
    /// sites do (for `pid*`, the program, whether it records) → index in
    /// `work_programs`: sites that do the same share one.
    work_program_of: HashMap<WorkKey, usize>,
    work_programs: Vec<Program>,
    /// The loader hook, when processes are followed or `pid*` probes enabled.
    hold: Option<Hold>,
    /// For `pid*` probes: the program that records every process's firings, its
    /// links, and the notices of processes that exec'd or loaded objects.
    all: Option<AllProcs>,
    /// Processes whose firings count.
    traced: HashSet<i32>,
    /// Per file: whether it is armed per process (other processes map it too, like
    /// libc) rather than once for every process (it is only the traced ones').
    per_process: HashMap<PathBuf, bool>,
    /// Files armed for every process, with their sites.
    global: ProcLinks,
    /// What is armed in each traced process, for per-process files.
    procs: HashMap<i32, ProcLinks>,
    /// Sites the kernel refused to probe, for the warning: (file, offset).
    refused: Vec<(PathBuf, u64)>,
    /// Sites left alone, by process, because another tracer changed their code there,
    /// not yet reported.
    changed: BTreeMap<i32, usize>,
    /// Why the session tracing a process kept the sites it was asked for, by process.
    kept: HashMap<i32, String>,
    /// The argument register (0..=5) behind each string slot of a record, in slot order.
    string_args: Vec<u8>,
    /// The argument register and size behind each buffer slot, in slot order.
    buffer_args: Vec<(u8, u32)>,
    /// The proc provider's programs, by hook.
    proc: HashMap<Hook, ProcHook>,
    /// Drops per CPU already reported.
    drops_seen: Vec<u64>,
    /// The names of the processes the last exec notices told of (see `exec_names`).
    exec_names: Vec<(i32, String)>,
    /// The processes the `pid*` events told of, not yet asked for (`exec_notices`).
    notified: Vec<i32>,
    /// Traced processes udtrace does not hold (another tracer does): marked
    /// `KERNEL_FOLLOWED` in the traced map, which the kernel extends to their children.
    unheld: HashSet<i32>,
    /// The backend of an in-process one: the processes udtrace holds carry patches,
    /// which a uprobe must not go over.
    under_patches: bool,
    /// The fork and exit programs that do, while attached.
    _lineage: Option<Lineage>,
    closer: Closer,
    /// The profile probes' programs and clocks.
    profile: Option<Profiling>,
}

/// What samples for the profile probes.
struct Profiling {
    layout: ProfileLayout,
    /// Probe ids, by the index each program writes into its records' cookies.
    ids: Vec<u32>,
    seen: udtrace_bpf::maps::HashMap<u64, u32>,
    _programs: Vec<Program>,
    _clocks: Vec<std::os::fd::OwnedFd>,
}

/// The kernel's BTF, read once for the run: several programs take offsets from it.
fn kernel_btf() -> Result<&'static Btf, BtfError> {
    static BTF: OnceLock<Result<Btf, BtfError>> = OnceLock::new();
    BTF.get_or_init(Btf::vmlinux).as_ref().map_err(Clone::clone)
}

/// Where the kernel keeps a task's user registers: `task_pt_regs`, at the top of its
/// kernel stack (THREAD_SIZE, 16 KiB on x86-64 without KASAN, less 16 bytes of padding
/// on a kernel that enters through FRED), whose base the task's BTF names.
fn user_regs() -> Result<UserRegs, Error> {
    let btf = kernel_btf().map_err(|e| e.to_string())?;
    let task_stack = btf.place("task_struct", "stack").map_err(|e| e.to_string())?.offset;
    let fred = std::fs::read_to_string("/proc/cpuinfo")
        .is_ok_and(|c| c.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "fred")));
    Ok(UserRegs { task_stack, top: 16384 - if fred { 16 } else { 0 } })
}

/// One proc hook: the layout of its records and its attachments.
struct ProcHook {
    layout: ProcLayout,
    _links: Vec<ProcLink>,
}

enum ProcLink {
    Raw(#[allow(dead_code)] tracepoint::RawTracepointLink),
    Syscall(#[allow(dead_code)] TracepointLink),
}

/// The program on the dynamic loader's debug hook (the threads it signalled are in the
/// traced map, `HELD` set) and the loaders it is armed in (for every process).
struct Hold {
    program: Program,
    links: HashMap<PathBuf, MultiLink>,
}

struct AllProcs {
    program: Program,
    links: ProcLinks,
    events: RingBuf,
    /// Reads `events`.
    notices: RingBufReader,
    _exec: TracepointLink,
}

/// Links and the sites they arm, per file.
#[derive(Default)]
struct ProcLinks {
    sites: BTreeMap<PathBuf, Vec<Site>>,
    links: Vec<MultiLink>,
}

/// Closes links off the main thread. Removing a uprobe waits for an RCU grace period
/// (50–100 ms here): closing the links of every exiting child in line would stall
/// tracing. Links closed at once share grace periods, so each batch is closed by as
/// many threads as it has links (up to a bound). The thread starts with the first
/// links closed while tracing: most sessions close all theirs at the end only, where
/// nothing is left to stall.
#[derive(Default)]
struct Closer {
    tx: Option<std::sync::mpsc::Sender<Vec<MultiLink>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const CLOSE_THREADS: usize = 32;

/// How long a session that patched sites in-process may take to give them up: it stops
/// the processes carrying them, at most a second each.
const HANDOFF_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Closer {
    fn start(&mut self) {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<MultiLink>>();
        self.thread = std::thread::Builder::new()
            .name("udtrace-closer".into())
            .spawn(move || {
                while let Ok(mut batch) = rx.recv() {
                    batch.extend(rx.try_iter().flatten());
                    close_all(batch);
                }
            })
            .ok();
        self.tx = Some(tx);
    }

    fn close(&mut self, links: Vec<MultiLink>) {
        if links.is_empty() {
            return;
        }
        if self.tx.is_none() {
            self.start();
        }
        if let Some(tx) = &self.tx {
            // Without the thread (it could not start) the links close here.
            let _ = tx.send(links);
        }
    }

    /// The session's last links: after those the thread started, or here.
    fn close_last(&mut self, links: Vec<MultiLink>) {
        match &self.tx {
            Some(tx) => drop(tx.send(links)),
            None => close_all(links),
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The plain recording program for `filter` (`program`, or `program_link` for
/// `Filter::Link`), loaded by [`Bpf::by_program`].
fn plain<'a>(program: &'a Option<Program>, link: &'a Option<Program>, filter: Filter) -> Result<&'a Program, Error> {
    let p = if filter == Filter::Link { link } else { program };
    p.as_ref().ok_or_else(|| "the uprobe program is not loaded".into())
}

/// Closes links concurrently, so that their grace periods overlap.
fn close_all(links: Vec<MultiLink>) {
    let n = links.len();
    if n <= 1 {
        return;
    }
    let threads = n.min(CLOSE_THREADS);
    let mut chunks: Vec<Vec<MultiLink>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, l) in links.into_iter().enumerate() {
        chunks[i % threads].push(l);
    }
    std::thread::scope(|s| {
        for c in chunks {
            s.spawn(move || drop(c));
        }
    });
}

const ENOTSUPP: i32 = 524;

fn ring_size(bufsize: u64) -> usize {
    // DTrace's bufsize is per CPU; the one ring serves them all. A power-of-two number
    // of pages, between 64 KiB and 256 MiB.
    let cpus = udtrace_bpf::maps::possible_cpus().unwrap_or(1).max(1) as u64;
    let want = bufsize.saturating_mul(cpus).clamp(64 << 10, 256 << 20);
    want.next_power_of_two() as usize
}

/// The uprobe program for `filter`. When its records capture stacks, strings or
/// buffers it is loaded sleepable where the kernel allows, so that one on a page the
/// process has not touched yet is faulted in rather than lost (docs/pid-provider.md);
/// else as before.
fn load_uprobe_program(plan: &RecordPlan, maps: &ProbeMaps, filter: Filter, name: &str) -> Result<Program, Error> {
    load_work_program(plan, maps, filter, name, SiteWork::default())
}

/// As [`load_uprobe_program`], for sites that do `work`.
fn load_work_program(
    plan: &RecordPlan,
    maps: &ProbeMaps,
    filter: Filter,
    name: &str,
    work: SiteWork<'_>,
) -> Result<Program, Error> {
    let gen = |sleepable| {
        uprobe_program_work(plan, maps, filter, sleepable, work)
            .map_err(|e| format!("cannot generate the uprobe program: {e}"))
    };
    let reads = plan.stack_bytes > 0 || !plan.strings.is_empty() || !plan.buffers.is_empty() || !plan.stash.is_empty();
    // A program's string keys are faulted in as records' strings are (a page the
    // process has not touched would otherwise read as a fault, and the firing be lost).
    let strings =
        work.dif.is_some_and(|c| c.program.ops.iter().any(|op| matches!(op, udtrace_dif::op::Op::Str { .. })));
    if (work.record && reads) || strings {
        match Program::load_sleepable(ProgramKind::UprobeMulti, name, &gen(true)?) {
            Ok(p) => return Ok(p),
            Err(e) => udtrace_messages::debug!("{name} not sleepable: {e}"),
        }
    }
    Program::load(ProgramKind::UprobeMulti, name, &gen(false)?)
        .map_err(|e| bpf_error("load the uprobe program", &e.to_string(), Some(e.os_error())))
}

/// Where errno is read from: the offset of a thread's pointer in the kernel's
/// task_struct comes from its BTF. Without BTF errno reads 0.
fn errno_source() -> Option<ErrnoSource> {
    let btf = kernel_btf().ok()?;
    let fsbase = btf.place("task_struct", "thread.fsbase").ok()?.offset;
    // `pid*` processes are never heard of again when they end: LRU makes room.
    let tls = udtrace_bpf::maps::HashMap::create_lru("udtrace_errno", 65536).ok()?;
    Some(ErrnoSource { tls, fsbase })
}

impl Bpf {
    /// Reads the `pid*` events ring: the processes told of wait in `notified`, the
    /// names execs gave them in `exec_names`.
    fn read_notices(&mut self) {
        let Some(a) = &mut self.all else { return };
        let (pids, names) = (&mut self.notified, &mut self.exec_names);
        a.notices.consume(|b| {
            if let Some(p) = b.get(..4) {
                let pid = i32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
                if let Some(comm) = b.get(8..udtrace_bpf::codegen::EXEC_NOTICE_SIZE) {
                    let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
                    names.push((pid, String::from_utf8_lossy(&comm[..end]).into_owned()));
                }
            }
        });
    }

    /// Creates the maps and loads the programs; nothing is armed yet. `follow` adds the
    /// loader hook program; `all` the program for `pid*` probes and the exec notices.
    pub fn load(setup: &Setup) -> Result<Bpf, Error> {
        let Setup { plan, bufsize, follow, all, .. } = setup;
        let (bufsize, follow, all) = (*bufsize, *follow, *all);
        let _ = udtrace_bpf::uprobe::raise_fd_limit();
        let rplan = setup.record_plan();
        let layout = RecordLayout::new(&rplan).map_err(|e| format!("cannot lay out firing records: {e}"))?;
        let maps_err = |e: udtrace_bpf::maps::MapError| bpf_error("create BPF maps", &e.to_string(), e.os_error());
        let mut maps = ProbeMaps::create(ring_size(bufsize), 65536).map_err(maps_err)?;
        if rplan.errno {
            maps.errno = errno_source();
        }
        if !rplan.stash.is_empty() {
            maps.stash = Some(StashMaps::create(65536, 65536).map_err(maps_err)?);
        }
        // curpsinfo and the like as the kernel has them at each firing; without the
        // kernel's BTF, from /proc as before.
        if rplan.task {
            maps.task = kernel_btf().ok().and_then(|b| udtrace_bpf::proc::TaskOffsets::from_btf(b).ok());
        }
        // A record that does not fit the ring is refused now, not at the first site.
        if layout.size + 8 > maps.ring_size() {
            let e = udtrace_bpf::codegen::CodegenError::RingTooSmall { record: layout.size, ring: maps.ring_size() };
            return Err(format!("cannot generate the uprobe program: {e}"));
        }
        // In-process, the fallback's sites are few or none.
        let program = match setup.inprocess {
            true => None,
            false => Some(load_uprobe_program(&rplan, &maps, Filter::Traced, "udtrace_pid")?),
        };
        let all = if all {
            let program = load_uprobe_program(&rplan, &maps, Filter::AllBut(std::process::id()), "udtrace_pidall")?;
            let events = RingBuf::create("udtrace_events", 256 << 10).map_err(maps_err)?;
            let insns = exec_program(&events).map_err(|e| format!("cannot generate the exec program: {e}"))?;
            let exec = Program::load(ProgramKind::Tracepoint, "udtrace_exec", &insns)
                .map_err(|e| bpf_error("load the exec program", &e.to_string(), Some(e.os_error())))?;
            let link = tracepoint::attach(&exec, "sched", "sched_process_exec", 0)
                .map_err(|e| format!("failed to watch execs: {e}"))?;
            let notices = RingBufReader::new(&events).map_err(|e| e.to_string())?;
            Some(AllProcs { program, links: ProcLinks::default(), events, notices, _exec: link })
        } else {
            None
        };
        // Processes another tracer holds are told of in the firings' ring when they load
        // objects (lineage records).
        let unheld = !setup.unheld.is_empty();
        let hold = if follow || all.is_some() || unheld {
            let lineage = if unheld { Some(maps.ring().map_err(maps_err)?) } else { None };
            // Without the kernel's BTF the blocked mask is not known: SIGURG always.
            let blocked = kernel_btf().ok().and_then(|b| b.place("task_struct", "blocked").ok());
            let signals =
                HoldSignals { signal: HOLD_SIGNAL, when_blocked: blocked.map(|p| (HOLD_SIGNAL_BLOCKED, p.offset)) };
            let insns = hold_program(&maps.traced, signals, all.as_ref().map(|a| &a.events), lineage)
                .map_err(|e| format!("cannot generate the loader hook program: {e}"))?;
            let program = Program::load(ProgramKind::UprobeMulti, "udtrace_hold", &insns)
                .map_err(|e| bpf_error("load the loader hook program", &e.to_string(), Some(e.os_error())))?;
            Some(Hold { program, links: HashMap::new() })
        } else {
            None
        };
        let lineage = if setup.children && !setup.unheld.is_empty() { Some(follow_in_kernel(&maps)?) } else { None };
        // Always: a program that keeps nothing still gates records (Emit), and its code
        // names the drop counters.
        let dif = Some(
            DifMaps::create(&setup.layout, DifSizes { threads: setup.tables.0 as u32, keys: setup.tables.1 as u32 })
                .map_err(maps_err)?,
        );
        let reader = maps.ring_made().map(RingBufReader::new).transpose().map_err(|e| e.to_string())?;
        Ok(Bpf {
            unheld: setup.unheld.iter().copied().collect(),
            under_patches: setup.inprocess,
            _lineage: lineage,
            maps,
            layout,
            reader,
            cookies: Vec::new(),
            cookie_ops: Vec::new(),
            cookie_strings: Vec::new(),
            probe_ops: setup.probe_ops.clone(),
            cookie_of: HashMap::new(),
            program,
            program_link: None,
            link_filters: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .is_ok_and(|r| udtrace_bpf::codegen::link_filters_process(&r)),
            work: setup.work.clone(),
            dif,
            rplan,
            work_program_of: HashMap::new(),
            work_programs: Vec::new(),
            hold,
            all,
            traced: HashSet::new(),
            per_process: HashMap::new(),
            global: ProcLinks::default(),
            procs: HashMap::new(),
            refused: Vec::new(),
            string_args: plan.strings.clone(),
            buffer_args: setup.buffer_args(),
            proc: HashMap::new(),
            drops_seen: Vec::new(),
            exec_names: Vec::new(),
            notified: Vec::new(),
            changed: BTreeMap::new(),
            kept: HashMap::new(),
            closer: Closer::default(),
            profile: None,
        })
    }

    /// The cookie of probe `p`'s site at `file_off` (`offset` in its function), with `p`
    /// among the probes it fires; `all`: in the program of `pid*` probes.
    fn site_cookie(&mut self, p: &PidProbe, offset: u64, file_off: u64, all: bool) -> u64 {
        let next = self.cookies.len() as u64;
        let cookie = *self.cookie_of.entry((p.file.clone(), file_off, all)).or_insert(next);
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
            targets.push(SiteTarget { probe_id: p.probe.id, pid: if all { 0 } else { p.pid }, kind: p.kind, offset });
        }
        // What the site's firings stash and read, before it is attached.
        let ops = self.cookie_ops[cookie as usize] | self.probe_ops.get(p.probe.id);
        if ops != self.cookie_ops[cookie as usize] {
            if let Some(stash) = &self.maps.stash {
                match stash.ops.insert(&cookie, &ops) {
                    Ok(()) => self.cookie_ops[cookie as usize] = ops,
                    // The map is full: these firings' saved pointers are read live.
                    Err(e) => udtrace_messages::debug!("stash ops of site {cookie}: {e}"),
                }
            }
        }
        cookie
    }

    /// The program of the site with `cookie` (`all`: of `pid*` probes), made when it is
    /// the first site doing what it does: an index in `work_programs`, or `None` for
    /// the plain recording program.
    fn site_program(&mut self, cookie: u64, filter: Filter) -> Result<Option<usize>, Error> {
        let targets = self.cookies.get(cookie as usize).map_or(&[][..], |t| t.as_slice());
        let Work { program, record } = self.work.site(targets);
        let strings = self.cookie_strings.get(cookie as usize).cloned().unwrap_or_default();
        // The plain program reads the plan's registers and no USDT argument's.
        let plain = self.rplan.strings.iter().map(|c| Some(c.reg).filter(|_| !c.per_site)).collect::<Vec<_>>();
        if program.ops.is_empty() && record && strings == plain {
            return Ok(None);
        }
        let key = (filter, program, record, strings);
        if let Some(&i) = self.work_program_of.get(&key) {
            return Ok(Some(i));
        }
        if key.1.reads(udtrace_dif::Var::Comm0) || key.1.reads(udtrace_dif::Var::Comm1) {
            // `execname` is the process's name, its group leader's: where the kernel
            // keeps it, read from BTF once (without BTF, the firing thread's name).
            if let Some(maps) = self.dif.as_mut().filter(|m| m.leader_comm.is_none()) {
                maps.leader_comm =
                    kernel_btf().ok().and_then(|b| TaskOffsets::from_btf(b).ok()).map(|o| o.leader_comm());
            }
        }
        if key.1.reads(udtrace_dif::Var::Ppid) {
            // `ppid`: the task's real_parent and its tgid, from BTF once, when first read
            // (start-up reads no BTF a script does not need).
            if let Some(maps) = self.dif.as_mut().filter(|m| m.parent.is_none()) {
                maps.parent = kernel_btf().ok().and_then(|b| TaskOffsets::from_btf(b).ok()).map(|o| o.parent_tgid());
            }
        }
        let dif = match (&self.dif, key.1.ops.is_empty()) {
            (_, true) => None,
            (Some(maps), false) => Some(DifCode {
                program: &key.1,
                maps,
                gets: Gets::Firing,
                errno: self.maps.errno.as_ref(),
                sleepable: false,
            }),
            (None, false) => {
                return Err("a probe's firing-time work names no thread-local variable or aggregation".into())
            }
        };
        let work = SiteWork { dif, record, strings: Some(&key.3) };
        let p = load_work_program(&self.rplan, &self.maps, filter, "udtrace_pidwork", work)?;
        self.work_programs.push(p);
        let i = self.work_programs.len() - 1;
        self.work_program_of.insert(key, i);
        Ok(Some(i))
    }

    /// `sites` by the program each needs ([`Bpf::site_program`]).
    fn by_program(&mut self, sites: &[Site], filter: Filter) -> Result<BTreeMap<Option<usize>, Vec<Site>>, Error> {
        let mut out: BTreeMap<Option<usize>, Vec<Site>> = BTreeMap::new();
        for s in sites {
            out.entry(self.site_program(s.cookie, filter)?).or_default().push(*s);
        }
        if out.contains_key(&None) {
            let (plain, name) = match filter {
                Filter::Traced => (&mut self.program, "udtrace_pid"),
                Filter::Link => (&mut self.program_link, "udtrace_pidlink"),
                // The `pid*` program, loaded with the backend.
                Filter::AllBut(_) => return self.ready().map(|()| out),
            };
            if plain.is_none() {
                *plain = Some(load_uprobe_program(&self.rplan, &self.maps, filter, name)?);
            }
        }
        self.ready()?;
        Ok(out)
    }

    /// The filter of the programs on `pid`'s own links (`pid` 0: every process's).
    fn link_filter(&self, pid: u32) -> Filter {
        if pid != 0 && self.link_filters {
            Filter::Link
        } else {
            Filter::Traced
        }
    }

    /// Makes the ring's reader once a program made the ring.
    fn ready(&mut self) -> Result<(), Error> {
        if let (None, Some(ring)) = (&self.reader, self.maps.ring_made()) {
            self.reader = Some(RingBufReader::new(ring).map_err(|e| e.to_string())?);
        }
        Ok(())
    }

    /// Takes out of `sites` of `file` those whose code another tracer changed in one of
    /// `pids` (none: every traced process that maps it): a uprobe there would make the
    /// kernel run the file's instruction over the other tracer's jump, and its removal
    /// would write the file's byte into it. A uprobe of another session (an `int3`) is
    /// no change: uprobes at one place share it. A tracer that is a udtrace session
    /// which patched them in-process is asked to give them up first (handoff.rs).
    fn leave_changed(&mut self, file: &Path, pids: &[i32], sites: &mut Vec<Site>) {
        let owners: Vec<i32> = if pids.is_empty() { self.traced.iter().copied().collect() } else { pids.to_vec() };
        let maps: Vec<(i32, Vec<procfs::Mapping>)> =
            owners.into_iter().filter_map(|p| procfs::read_maps(p).ok().map(|m| (p, m))).collect();
        // Opened once for all the sites: code_change reads each one's bytes from it.
        let Ok(f) = std::fs::File::open(file) else { return };
        // Per site, the first process where the code was changed.
        let first_changed = |s: &Site| {
            maps.iter().find(|(p, m)| procfs::code_changed(*p, m, &f, s.offset) == Some(true)).map(|(p, _)| *p)
        };
        let mut asks: BTreeMap<i32, Vec<(i32, u64)>> = BTreeMap::new();
        let mut changed_in: Vec<Option<i32>> = Vec::with_capacity(sites.len());
        for s in sites.iter() {
            let mut first = None;
            for (p, m) in &maps {
                if let Some((addr, true)) = procfs::code_change(*p, m, &f, s.offset) {
                    first = first.or(Some(*p));
                    if let Some(tracer) = procfs::tracer_pid(*p).filter(|&t| t != std::process::id() as i32) {
                        asks.entry(tracer).or_default().push((*p, addr));
                    }
                }
            }
            changed_in.push(first);
        }
        if !asks.is_empty() {
            for (tracer, asked) in asks {
                if let Err(e) = handoff::ask(tracer, &asked, HANDOFF_WAIT) {
                    udtrace_messages::debug!("udtrace (pid {tracer}) kept {} sites: {e}", asked.len());
                    // Said in the notice only when a session answered: others do not listen.
                    if let handoff::AskError::Kept(why) = e {
                        for (p, _) in asked {
                            self.kept.insert(p, why.clone());
                        }
                    }
                }
            }
            // What was given up is the file's code again.
            changed_in = sites.iter().map(first_changed).collect();
        }
        let changed = &mut self.changed;
        let mut decided = changed_in.into_iter();
        sites.retain(|_| match decided.next().flatten() {
            Some(p) => {
                *changed.entry(p).or_default() += 1;
                false
            }
            None => true,
        });
    }

    /// Decided once per file: a file that processes udtrace does not trace have mapped
    /// is armed per process, so that their breakpoints cost them nothing (a system-wide
    /// uprobe on libc would trap in every process). So is a file that both a process
    /// another tracer holds and one udtrace holds map, when the latter carry in-process
    /// patches: the first's uprobes would go over the patches in the others (a daemon
    /// udtrace holds, one of whose workers is under a debugger). Any other file is armed
    /// once for every process: children and later execs of it need no arming of their
    /// own, and the kernel filter leaves out processes that are not traced.
    fn is_per_process(&mut self, file: &Path) -> bool {
        if let Some(&p) = self.per_process.get(file) {
            return p;
        }
        let (traced, unheld) = (&self.traced, &self.unheld);
        let path = file.to_string_lossy();
        let maps = |pid: &i32| {
            std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| procfs::maps_mention(&m, &path))
        };
        let p = procfs::mapped_by_any(&path, |pid| traced.contains(&pid))
            || (self.under_patches
                && unheld.iter().any(maps)
                && traced.iter().filter(|p| !unheld.contains(p)).any(maps));
        self.per_process.insert(file.to_path_buf(), p);
        p
    }
}

impl Backend for Bpf {
    fn enable_profile(&mut self, probes: &[ProfileProbe], stack_bytes: u32) -> Result<(), Error> {
        if probes.is_empty() {
            return Ok(());
        }
        let layout = ProfileLayout::new(stack_bytes).map_err(|e| format!("cannot lay out profile samples: {e}"))?;
        let regs = user_regs().map_err(|e| format!("cannot find the user registers of sampled threads: {e}"))?;
        let seen = udtrace_bpf::maps::HashMap::create_lru("udtrace_sampled", 65536)
            .map_err(|e| bpf_error("create BPF maps", &e.to_string(), e.os_error()))?;
        let mut p = Profiling { layout, ids: Vec::new(), seen, _programs: Vec::new(), _clocks: Vec::new() };
        for (i, probe) in probes.iter().enumerate() {
            udtrace_messages::debug!(
                "profile probe {}: every {} ns on CPUs {:?}, processes {:?}",
                probe.probe_id,
                probe.period_ns,
                probe.cpus,
                probe.pids
            );
            let filter = match &probe.pids {
                Some(pids) => SampleFilter::Pids(pids.clone()),
                None => SampleFilter::All,
            };
            let insns = profile::program(&p.layout, &self.maps, &p.seen, i as u32, &filter, regs)
                .map_err(|e| format!("cannot generate the profile program: {e}"))?;
            let prog = Program::load(ProgramKind::PerfEvent, "udtrace_profile", &insns)
                .map_err(|e| bpf_error("load the profile program", &e.to_string(), Some(e.os_error())))?;
            let clocks = profile::attach_cpu_clocks(&prog, probe.period_ns, &probe.cpus)
                .map_err(|e| bpf_error("sample the CPUs", &e.to_string(), e.os_error()))?;
            p.ids.push(probe.probe_id);
            p._programs.push(prog);
            p._clocks.extend(clocks);
        }
        self.profile = Some(p);
        self.ready()
    }

    fn enable_proc(&mut self, hooks: &[(Hook, ProcPlan)]) -> Result<(), Error> {
        if hooks.is_empty() {
            return Ok(());
        }
        let btf = kernel_btf().map_err(|e| {
            format!("{e}\n{}: the proc provider needs a kernel with BTF (CONFIG_DEBUG_INFO_BTF)", program())
        })?;
        let offsets = TaskOffsets::from_btf(btf).map_err(|e| format!("cannot use the kernel's task data: {e}"))?;
        let paths = udtrace_bpf::maps::HashMap::create("udtrace_paths", 65536)
            .map_err(|e| bpf_error("create BPF maps", &e.to_string(), e.os_error()))?;
        for &(hook, plan) in hooks {
            let layout = ProcLayout::new(hook, &plan);
            let gen_err = |e: udtrace_bpf::codegen::CodegenError| format!("cannot generate the proc program: {e}");
            let load_err = |e: udtrace_bpf::prog::LoadError| {
                bpf_error("load the proc program", &e.to_string(), Some(e.os_error()))
            };
            let mut links = Vec::new();
            match attach_points(hook) {
                AttachPoints::Raw(name) => {
                    let insns = proc_program(&layout, &offsets, &self.maps, &paths, None).map_err(gen_err)?;
                    let prog = Program::load(ProgramKind::RawTracepoint, "udtrace_proc", &insns).map_err(load_err)?;
                    let link = tracepoint::attach_raw(&prog, name)
                        .map_err(|e| format!("failed to enable proc probes on {name}: {e}"))?;
                    links.push(ProcLink::Raw(link));
                }
                AttachPoints::Syscalls(names, field) => {
                    for name in names {
                        let fmt = tracepoint::format("syscalls", name)
                            .map_err(|e| format!("failed to enable proc probes: {e}"))?;
                        let Some(f) = fmt.field(field) else {
                            return Err(format!("failed to enable proc probes: syscalls:{name} has no field {field}"));
                        };
                        let insns = proc_program(
                            &layout,
                            &offsets,
                            &self.maps,
                            &paths,
                            Some(SyscallField { offset: f.offset as i16 }),
                        )
                        .map_err(gen_err)?;
                        let prog = Program::load(ProgramKind::Tracepoint, "udtrace_proc", &insns).map_err(load_err)?;
                        let link = tracepoint::attach(&prog, "syscalls", name, 0)
                            .map_err(|e| format!("failed to enable proc probes on {name}: {e}"))?;
                        links.push(ProcLink::Syscall(link));
                    }
                }
            }
            self.proc.insert(hook, ProcHook { layout, _links: links });
        }
        self.ready()
    }

    fn trace_pid(&mut self, pid: i32) -> Result<(), Error> {
        let mark = if self.unheld.contains(&pid) { KERNEL_FOLLOWED } else { 1 };
        self.maps.traced.insert(&(pid as u32), &mark).map_err(|e| format!("cannot trace pid {pid}: {e}"))?;
        self.traced.insert(pid);
        Ok(())
    }

    fn untrace(&mut self, pid: i32) {
        let _ = self.maps.traced.remove(&(pid as u32));
        if let Some(src) = &self.maps.errno {
            let _ = src.tls.remove(&(pid as u32));
        }
        self.traced.remove(&pid);
    }

    fn arm(&mut self, pid: i32, probes: &[&PidProbe]) -> Result<(), Error> {
        let mut new: BTreeMap<PathBuf, Vec<Site>> = BTreeMap::new();
        for p in probes {
            // Unprobeable sites were set aside when the probe was made: refused here.
            self.refused.extend(p.unprobeable.iter().map(|&(_, fo)| (p.file.clone(), fo)));
            for &(offset, file_off) in &p.sites {
                let cookie = self.site_cookie(p, offset, file_off, false);
                let list = new.entry(p.file.clone()).or_default();
                if !list.iter().any(|s| s.offset == file_off) {
                    list.push(Site { offset: file_off, cookie, ref_ctr: p.semaphore });
                }
            }
        }
        for (file, mut sites) in new {
            let per_process = self.is_per_process(&file);
            let links = if per_process { self.procs.get(&pid) } else { Some(&self.global) };
            let armed = links.and_then(|l| l.sites.get(&file));
            sites.retain(|s| !armed.is_some_and(|a| a.iter().any(|o| o.offset == s.offset)));
            // Only what is about to be armed: a global file's sites are checked in every
            // traced process that maps it.
            let owner = [pid];
            self.leave_changed(&file, if per_process { &owner } else { &[] }, &mut sites);
            if sites.is_empty() {
                continue;
            }
            sites.sort_by_key(|s| s.offset);
            let owner = if per_process { pid as u32 } else { 0 };
            let filter = self.link_filter(owner);
            let groups = self.by_program(&sites, filter)?;
            let links = if per_process { self.procs.entry(pid).or_default() } else { &mut self.global };
            for (prog, group) in &groups {
                let program = match prog {
                    Some(i) => &self.work_programs[*i],
                    None => plain(&self.program, &self.program_link, filter)?,
                };
                attach_file(program, &file, owner, group, &mut links.links, &mut self.refused)?;
            }
            links.sites.entry(file).or_default().extend(sites);
        }
        Ok(())
    }

    fn arm_all(&mut self, probes: &[&PidProbe]) -> Result<(), Error> {
        if self.all.is_none() {
            return Ok(());
        }
        let mut new: BTreeMap<PathBuf, Vec<Site>> = BTreeMap::new();
        for p in probes {
            self.refused.extend(p.unprobeable.iter().map(|&(_, fo)| (p.file.clone(), fo)));
            for &(offset, file_off) in &p.sites {
                let cookie = self.site_cookie(p, offset, file_off, true);
                let list = new.entry(p.file.clone()).or_default();
                if !list.iter().any(|s| s.offset == file_off) {
                    list.push(Site { offset: file_off, cookie, ref_ctr: p.semaphore });
                }
            }
        }
        // A uprobe for every process goes into processes others trace too: not over the
        // code another tracer patched (another udtrace's in-process probes).
        let held = procfs::all_pids().unwrap_or_default().into_iter().filter(|&p| procfs::tracer_pid(p).is_some());
        let held: Vec<(i32, String)> =
            held.filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/maps")).ok().map(|m| (p, m))).collect();
        for (file, sites) in new.iter_mut() {
            let path = file.to_string_lossy();
            let owners: Vec<i32> =
                held.iter().filter(|(_, m)| procfs::maps_mention(m, &path)).map(|&(p, _)| p).collect();
            if !owners.is_empty() {
                self.leave_changed(file, &owners, sites);
            }
        }
        for (file, mut sites) in new {
            let Some(all) = &self.all else { return Ok(()) };
            let armed = all.links.sites.get(&file);
            sites.retain(|s| !armed.is_some_and(|a| a.iter().any(|o| o.offset == s.offset)));
            if sites.is_empty() {
                continue;
            }
            sites.sort_by_key(|s| s.offset);
            let groups = self.by_program(&sites, Filter::AllBut(std::process::id()))?;
            let Some(all) = &mut self.all else { return Ok(()) };
            for (prog, group) in &groups {
                let program = prog.map_or(&all.program, |i| &self.work_programs[i]);
                attach_file(program, &file, 0, group, &mut all.links.links, &mut self.refused)?;
            }
            all.links.sites.entry(file).or_default().extend(sites);
        }
        Ok(())
    }

    fn arm_hook(&mut self, _pid: i32, file: &Path, offset: u64, r_state: u64) -> Result<Option<u64>, Error> {
        let Some(hold) = &mut self.hold else { return Ok(None) };
        if hold.links.contains_key(file) {
            return Ok(None);
        }
        let link = attach_multi_pid(&hold.program, file, &[Site { offset, cookie: r_state, ref_ctr: 0 }], false, 0)
            .map_err(|e| bpf_error("arm the loader hook", &e.to_string(), e.os_error()))?;
        hold.links.insert(file.to_path_buf(), link);
        Ok(None)
    }

    fn take_hold(&self, tid: i32) -> bool {
        self.hold.is_some() && self.maps.traced.remove(&(tid as u32 | HELD)).unwrap_or(false)
    }

    fn drop_hooks(&mut self) {
        if let Some(h) = &mut self.hold {
            h.links.clear();
        }
    }

    fn reads_errno(&self) -> bool {
        self.maps.errno.is_some()
    }

    fn set_errno_tls(&mut self, pid: i32, tls: Option<(u64, i64)>) {
        if let Some(src) = &self.maps.errno {
            let _ = match tls {
                Some((slot, offset)) => src.tls.insert(&(pid as u32), &errno_entry(slot, offset)).map(|_| true),
                None => src.tls.remove(&(pid as u32)),
            };
        }
    }

    fn fork(&mut self, parent: i32, child: i32) -> Result<(), Error> {
        if self.unheld.contains(&parent) {
            self.unheld.insert(child);
        }
        self.trace_pid(child)?;
        // The same memory layout: errno is where the parent's is.
        if let Some(src) = &self.maps.errno {
            if let Ok(Some(v)) = src.tls.get(&(parent as u32)) {
                let _ = src.tls.insert(&(child as u32), &v);
            }
        }
        let Some(p) = self.procs.get(&parent) else { return Ok(()) };
        let sites = p.sites.clone();
        let filter = self.link_filter(child as u32);
        for (file, list) in sites {
            let groups = self.by_program(&list, filter)?;
            let links = self.procs.entry(child).or_default();
            for (prog, group) in &groups {
                let program = match prog {
                    Some(i) => &self.work_programs[*i],
                    None => plain(&self.program, &self.program_link, filter)?,
                };
                attach_file(program, &file, child as u32, group, &mut links.links, &mut self.refused)?;
            }
            links.sites.insert(file, list);
        }
        Ok(())
    }

    fn exit(&mut self, pid: i32) {
        // A process's links stay until it ends: they follow the process (not its
        // image), so a library it maps again after exec is armed again by the kernel.
        if let Some(p) = self.procs.remove(&pid) {
            self.closer.close(p.links);
        }
        self.untrace(pid);
        self.unheld.remove(&pid);
    }

    fn notices(&mut self) -> Vec<String> {
        let changed = std::mem::take(&mut self.changed);
        changed
            .into_iter()
            .map(|(pid, n)| {
                // Not named when it is this udtrace: its own patch (of the in-process
                // backend it backs) is there.
                let mut by = procfs::tracer(pid)
                    .filter(|&(t, _)| t != std::process::id() as i32)
                    .map_or(String::new(), |(t, name)| format!("; it is traced by {name} (pid {t})"));
                // A tracer that listens for such requests (another udtrace) said why not.
                if let Some(why) = self.kept.remove(&pid) {
                    by.push_str(&format!(", which kept {}: {why}", if n == 1 { "it" } else { "them" }));
                }
                let plural = if n == 1 { "" } else { "s" };
                format!("pid {pid}: {n} probe site{plural} not armed: another tracer changed the code there{by}")
            })
            .collect()
    }

    fn refused(&self) -> &[(PathBuf, u64)] {
        &self.refused
    }

    fn exec(&mut self, _pid: i32) {
        // Nothing to do: the kernel drops uprobes with the mappings they were in, and
        // links made per process stay with the process (its libraries, mapped again
        // by the new image, are armed again by the kernel).
    }

    fn wait_fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds: Vec<BorrowedFd<'_>> = self.maps.ring_made().map(AsFd::as_fd).into_iter().collect();
        if let Some(a) = &self.all {
            fds.push(a.events.as_fd());
        }
        fds
    }

    fn consume(&mut self, each: &mut dyn FnMut(Record<'_>)) {
        let (proc, layout, cookies) = (&self.proc, &self.layout, &self.cookies);
        let (string_args, buffer_args) = (&self.string_args, &self.buffer_args);
        let profile = &self.profile;
        let Some(reader) = self.reader.as_mut() else { return };
        reader.consume(|bytes| {
            if let Some(l) = udtrace_record::lineage::parse(bytes) {
                each(Record::Lineage(l));
                return;
            }
            if is_profile(bytes) {
                let Some(p) = profile else { return };
                if let Ok(sample) = p.layout.parse(bytes) {
                    if let Some(&probe_id) = p.ids.get(sample.probe as usize) {
                        each(Record::Profile { sample, probe_id });
                    }
                }
                return;
            }
            if let Some(hook) = hook_of(bytes) {
                if let Some(f) = proc.get(&hook).and_then(|h| h.layout.parse(bytes).ok()) {
                    each(Record::Proc(f));
                }
                return;
            }
            // Lent where it was parsed: a move of the ~300-byte firing cost 10% of a record.
            let parsed = layout.parse(bytes);
            let Ok(firing) = &parsed else { return };
            let Some(sites) = cookies.get(firing.cookie as usize) else { return };
            each(Record::Pid { firing, sites, string_args, buffer_args });
        });
    }

    fn exec_notices(&mut self) -> Vec<i32> {
        self.read_notices();
        std::mem::take(&mut self.notified)
    }

    fn exec_names(&mut self) -> Vec<(i32, String)> {
        self.read_notices();
        std::mem::take(&mut self.exec_names)
    }

    fn firing_snapshot(&mut self) -> udtrace_dif::snapshot::Snapshot {
        let Some(dif) = &self.dif else { return udtrace_dif::snapshot::Snapshot::default() };
        dif.snapshot().unwrap_or_else(|e| {
            udtrace_messages::debug!("cannot read the firing-time maps: {e}");
            udtrace_dif::snapshot::Snapshot::empty(&dif.layout)
        })
    }

    fn new_drops(&mut self) -> Vec<(usize, u64)> {
        let Ok(now) = self.maps.drops.get(0) else { return Vec::new() };
        let seen = &mut self.drops_seen;
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

impl Drop for Bpf {
    fn drop(&mut self) {
        self.proc.clear();
        // Every link at once: one after the other, each would wait out a grace period.
        let mut all = std::mem::take(&mut self.global.links);
        for (_, p) in self.procs.drain() {
            all.extend(p.links);
        }
        if let Some(h) = &mut self.hold {
            all.extend(h.links.drain().map(|(_, l)| l));
        }
        if let Some(a) = &mut self.all {
            all.append(&mut a.links.links);
        }
        self.closer.close_last(all);
    }
}

/// The programs following unheld processes' children in the kernel, and their links.
struct Lineage {
    _programs: [Program; 3],
    _links: [RawTracepointLink; 3],
}

/// Loads and attaches the fork, exit and exec programs of [`udtrace_bpf::lineage`].
fn follow_in_kernel(maps: &ProbeMaps) -> Result<Lineage, Error> {
    let btf = kernel_btf().map_err(|e| format!("cannot follow children in the kernel: {e}"))?;
    let ids = TaskIds::from_btf(btf).map_err(|e| format!("cannot follow children in the kernel: {e}"))?;
    let gen = |e: LineageError| format!("cannot generate the fork and exit programs: {e}");
    let group_dead = btf.tracepoint_arity("sched_process_exit").is_some_and(|n| n >= 2);
    let ring = maps.ring().map_err(|e| bpf_error("create BPF maps", &e.to_string(), e.os_error()))?;
    let fork = fork_program(ids, &maps.traced, ring).map_err(gen)?;
    let exit = exit_program(&maps.traced, ring, group_dead).map_err(gen)?;
    let exec = lineage::exec_program(&maps.traced, ring).map_err(gen)?;
    let load = |name: &str, insns: &[Insn]| {
        Program::load(ProgramKind::RawTracepoint, name, insns)
            .map_err(|e| bpf_error("load the fork and exit programs", &e.to_string(), Some(e.os_error())))
    };
    let (fork, exit, exec) = (load("udtrace_fork", &fork)?, load("udtrace_exit", &exit)?, load("udtrace_exec", &exec)?);
    let attach = |p: &Program, name: &str| {
        tracepoint::attach_raw(p, name).map_err(|e| format!("cannot follow children in the kernel: {e}"))
    };
    let links = [
        attach(&fork, "sched_process_fork")?,
        attach(&exit, "sched_process_exit")?,
        attach(&exec, "sched_process_exec")?,
    ];
    Ok(Lineage { _programs: [fork, exit, exec], _links: links })
}

fn bpf_error(what: &str, detail: &str, os: Option<&std::io::Error>) -> Error {
    if os.is_some_and(udtrace_bpf::is_bpf_refusal) {
        return format!(
            "failed to {what}: {detail}; the kernel refused BPF: run as root (or with CAP_BPF and CAP_PERFMON), and check kernel.unprivileged_bpf_disabled and lockdown"
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
