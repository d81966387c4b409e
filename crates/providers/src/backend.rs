//! The seam between the session and a backend: what a backend must do for the pid
//! and proc providers, whatever runs the probes (BPF programs in the kernel today,
//! trampolines inside the traced process next). A backend arms and disarms the sites
//! of pid probes for a set of processes, reports each firing with the data its capture
//! plan asked for (in the records `udtrace_record` lays out), and is told of forks,
//! execs and new objects. The session drives it through [`Backend`] alone.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use udtrace_lang::capture::{CapturePlan, ChainCap as LangCap, StashPlan};
use udtrace_record::pid::{
    BufferCapture, ChainCap, Firing, PlanError, PtReg, RecordLayout, RecordPlan, StashCaptures, StringCapture,
    MAX_BUFFER, MAX_STRING,
};
use udtrace_record::proc::{Hook, ProcFiring, ProcPlan};
use udtrace_record::profile::Sample;

use crate::pid::{PidProbe, SiteKind};

/// Errors carry the whole story (a verifier log, a hint), ready for `udtrace: …`.
pub type Error = String;

/// The signal a thread held at the loader hook is stopped with: ignored by default, so
/// that a process left with one pending (udtrace killed) is not disturbed.
pub const HOLD_SIGNAL: i32 = nix::libc::SIGURG;

/// The signal a thread that blocks [`HOLD_SIGNAL`] is held with instead (PostgreSQL
/// blocks SIGURG in every process, and a blocked signal would stay pending, never
/// stopping the thread): it cannot be blocked, caught or ignored, and a traced thread
/// stops for its tracer before it takes effect. Only a process udtrace holds is sent it;
/// one left with it pending (udtrace killed in that instant) would stop.
pub const HOLD_SIGNAL_BLOCKED: i32 = nix::libc::SIGSTOP;

/// Both hold signals: a delivery stop of either may be a hold ([`Backend::take_hold`]).
pub const HOLD_SIGNALS: [i32; 2] = [HOLD_SIGNAL, HOLD_SIGNAL_BLOCKED];

/// A string capture's code in [`CapturePlan::strings`] (and `Record::Pid`'s
/// `string_args`): 0..=5 the argument registers; from [`USDT_STRING`] on, a USDT
/// argument's register, known per site (rdi here).
pub fn string_reg(code: u8) -> PtReg {
    PtReg::ARGS.get(usize::from(code)).copied().unwrap_or(PtReg::Di)
}

/// The first string capture code that names a USDT argument: `USDT_STRING + n` reads
/// the string at the register argument n is in at the firing's site, whichever it is
/// there (resolved per site, [`crate::pid::PidProbe::string_regs`]), for probes found
/// at start and later alike (docs/usdt.md).
pub const USDT_STRING: u8 = 64;

/// What one site's firing means: a probe and where in its function the site is.
#[derive(Debug, Clone, Copy)]
pub struct SiteTarget {
    pub probe_id: u32,
    /// The process whose probe this is: a site shared by several processes' probes
    /// fires each only in its own process (0: every process, for `pid*`).
    pub pid: i32,
    pub kind: SiteKind,
    /// The site's offset in the function (a return probe's `arg0`).
    pub offset: u64,
}

/// What a backend is made for, decided once the programs are compiled.
#[derive(Debug, Clone)]
pub struct Setup {
    /// What every firing's record carries: the union of the pid clauses' needs.
    pub plan: CapturePlan,
    /// DTrace's `bufsize` (per CPU).
    pub bufsize: u64,
    /// DTrace's `strsize`: the most bytes captured of a string argument.
    pub strsize: u32,
    /// Processes are followed: the loader hook holds them when they map objects.
    pub follow: bool,
    /// `pid*` probes are enabled: every process's firings count, and the backend
    /// reports processes that exec or load objects ([`Backend::exec_notices`]).
    pub all: bool,
    /// Children of followed processes are followed too (not `-x nofollow`): a child
    /// is held at its fork, so what the parent has armed can be taken out of it.
    pub children: bool,
    /// pid probes run inside the traced processes where they can (not `-x uprobes`,
    /// and no USDT probe where BPF is allowed: docs/usdt.md).
    pub inprocess: bool,
    /// `-x uprobes` was asked for (said when it cannot be honoured).
    pub uprobes: bool,
    /// `-x inprocess` was asked for: say which sites use uprobes instead.
    pub explain: bool,
    /// Processes udtrace may not stop (another tracer holds them with ptrace): their
    /// probes are uprobes, armed while they run, and with `children` the kernel adds
    /// the processes they fork ([`Record::Lineage`]).
    pub unheld: Vec<i32>,
    /// Addresses saved at one firing for a later one's reads (docs/pid-provider.md,
    /// "Saved pointers").
    pub stash: StashPlan,
    /// Which firings save and which read them, per probe.
    pub probe_ops: ProbeOps,
    /// The thread-local variables and aggregations that live at the firing
    /// (docs/firing.md), the same for every site's program.
    pub layout: udtrace_dif::Layout,
    /// What each probe's firings compute where they fire, and whether they still
    /// need a record.
    pub work: ProbeWork,
    /// Thread entries and keys per keyed aggregation of the buffers and maps that
    /// hold them (`udtrace_dif::layout::table_sizes`, from `dynvarsize` and `aggsize`).
    pub tables: (usize, usize),
}

/// What the clauses enabled on one probe do at the firing (docs/firing.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    /// The clauses that run at the firing, in order, compiled for this probe.
    pub program: udtrace_dif::Program,
    /// Some clause enabled on the probe runs in the consumer: the firing writes its
    /// record (after the program).
    pub record: bool,
}

impl Default for Work {
    /// A probe nothing was said of: recorded, as every probe was before.
    fn default() -> Work {
        Work { program: udtrace_dif::Program::default(), record: true }
    }
}

/// Per probe, its [`Work`]. The session adds each clause's as it enables the clause,
/// before it arms the probe; a backend reads a site's with [`ProbeWork::site`].
/// Made with [`ProbeWork::recording_every_firing`], every probe records besides
/// its program (`-x timeline`, docs/timeline.md).
#[derive(Debug, Clone, Default)]
pub struct ProbeWork(Rc<RefCell<HashMap<u32, Work>>>, bool);

impl ProbeWork {
    /// Work whose every probe's firings write their records, whatever runs where: the
    /// timeline needs each firing's pid, tid and timestamp.
    pub fn recording_every_firing() -> ProbeWork {
        ProbeWork(Rc::default(), true)
    }

    /// Enables one more clause on `probe_id`: its program (empty when it runs in the
    /// consumer) runs after the clauses enabled before it; `record`: it runs in the
    /// consumer.
    pub fn add(&self, probe_id: u32, program: &udtrace_dif::Program, record: bool) {
        let mut map = self.0.borrow_mut();
        let w = map.entry(probe_id).or_insert(Work { program: udtrace_dif::Program::default(), record: false });
        w.program.append(program);
        w.record |= record || self.1;
    }

    pub fn get(&self, probe_id: u32) -> Work {
        self.0.borrow().get(&probe_id).cloned().unwrap_or_default()
    }

    /// What a site's firing does: its targets' programs in order (each run only in
    /// its own process when the target names one), and a record if any target needs one.
    pub fn site(&self, targets: &[SiteTarget]) -> Work {
        let mut site = Work { program: udtrace_dif::Program::default(), record: false };
        let shared = targets.iter().any(|t| t.pid != targets[0].pid);
        for t in targets {
            let w = self.get(t.probe_id);
            site.record |= w.record;
            if w.program.ops.is_empty() {
                continue;
            }
            if shared && t.pid != 0 {
                site.program.append_for_pid(&w.program, t.pid as u64, 0);
            } else {
                site.program.append(&w.program);
            }
        }
        site
    }
}

/// Per probe, the stash ops ([`StashPlan::clause_ops`]) of the clauses enabled on it.
/// The session adds them as it enables clauses, before it arms the probe; a backend
/// reads them as it arms a site (the union over the site's probes).
#[derive(Debug, Clone, Default)]
pub struct ProbeOps(Rc<RefCell<HashMap<u32, u64>>>);

impl ProbeOps {
    pub fn add(&self, probe_id: u32, ops: u64) {
        if ops != 0 {
            *self.0.borrow_mut().entry(probe_id).or_default() |= ops;
        }
    }

    pub fn get(&self, probe_id: u32) -> u64 {
        self.0.borrow().get(&probe_id).copied().unwrap_or(0)
    }
}

impl Setup {
    /// What each pid firing's record holds, as every backend lays it out.
    pub fn record_plan(&self) -> RecordPlan {
        let mut plan = self.full_record_plan();
        // Buffers too large for one record together (with a big stack capture) are read
        // from the process when consumed instead, the largest first, rather than fail.
        while matches!(RecordLayout::new(&plan), Err(PlanError::TooLarge(_))) && !plan.buffers.is_empty() {
            let largest = (0..plan.buffers.len()).max_by_key(|&i| plan.buffers[i].size).unwrap_or(0);
            plan.buffers.remove(largest);
        }
        if matches!(RecordLayout::new(&plan), Err(PlanError::TooLarge(_))) {
            plan.stash.chains.clear();
            plan.stash.chain_caps.clear();
        }
        while matches!(RecordLayout::new(&plan), Err(PlanError::TooLarge(_))) && !plan.stash.buffers.is_empty() {
            let largest = (0..plan.stash.buffers.len()).max_by_key(|&i| plan.stash.buffers[i].1).unwrap_or(0);
            plan.stash.buffers.remove(largest);
        }
        plan
    }

    /// The buffers the record captures: (argument register 0..=5, size) per slot, in
    /// slot order (those [`Setup::record_plan`] left out are read when consumed).
    pub fn buffer_args(&self) -> Vec<(u8, u32)> {
        let arg = |r: PtReg| PtReg::ARGS.iter().position(|&a| a == r).unwrap_or(0) as u8;
        self.record_plan().buffers.iter().map(|b| (arg(b.reg), b.size)).collect()
    }

    fn full_record_plan(&self) -> RecordPlan {
        RecordPlan {
            stack_bytes: self.plan.stack_bytes.div_ceil(8) * 8,
            strings: self
                .plan
                .strings
                .iter()
                .map(|&n| StringCapture {
                    reg: string_reg(n),
                    max: self.strsize.clamp(1, MAX_STRING),
                    per_site: n >= USDT_STRING,
                })
                .collect(),
            buffers: self
                .plan
                .buffers
                .iter()
                .map(|&(n, size)| BufferCapture { reg: PtReg::ARGS[usize::from(n)], size })
                .collect(),
            regs: self.plan.regs,
            arg_regs: arg_regs(self.plan.args),
            errno: self.plan.errno,
            curthread: self.plan.curthread,
            task: self.plan.cur_task,
            stash: StashCaptures {
                slots: self.stash.vars.len() as u8,
                writes: self.stash.writes.iter().map(|&(slot, n)| (slot, PtReg::ARGS[usize::from(n)])).collect(),
                strings: self.stash.strings.iter().map(|&slot| (slot, self.strsize.clamp(1, MAX_STRING))).collect(),
                buffers: self.stash.buffers.clone(),
                chains: self.stash.chains.iter().map(|c| c.ops.clone()).collect(),
                chain_caps: self
                    .stash
                    .chain_caps
                    .iter()
                    .map(|&c| match c {
                        LangCap::Str => ChainCap::Str(self.strsize.clamp(1, MAX_STRING)),
                        LangCap::Buf(n) => ChainCap::Buf(n),
                        LangCap::Upto => ChainCap::Buf(self.strsize.clamp(1, MAX_BUFFER)),
                    })
                    .collect(),
            },
        }
    }
}

/// The registers a record holds for the clauses' `arg0`..`arg5` (bit n of `args`):
/// their registers at entry and offset probes, and rax for a return probe's `arg1`.
fn arg_regs(args: u16) -> u32 {
    let mut regs = 0;
    for (n, r) in PtReg::ARGS.iter().enumerate() {
        if args & (1 << n) != 0 {
            regs |= r.bit();
        }
    }
    if args & 0b10 != 0 {
        regs |= PtReg::Ax.bit();
    }
    regs
}

/// Why a backend without BPF samples nothing for `profile-N` (followed by why there is
/// no BPF).
pub const PROFILE_NEEDS_BPF: &str = "profile probes need BPF to sample other processes";

/// Why there is no BPF when the kernel refuses it, and what to do.
pub const BPF_REFUSED: &str = "the kernel refused BPF: run as root (or with CAP_BPF and CAP_PERFMON)";

/// Why there is no BPF when udtrace runs in a PID namespace below the host's: BPF
/// helpers give the host's pids, which are not the ones udtrace knows its processes by
/// (its pid filters would drop every firing).
pub const BPF_OTHER_PID_NAMESPACE: &str =
    "BPF sees the host's pids, and udtrace runs in another PID namespace: run udtrace in the host's PID namespace";

/// A `profile-N` probe to sample with: a perf event on each of `cpus` every
/// `period_ns` of CPU time, in the context of the thread it interrupts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileProbe {
    pub probe_id: u32,
    pub period_ns: u64,
    pub cpus: Vec<i32>,
    /// Only these processes' samples are recorded (every clause of the probe has a
    /// predicate `pid == N`); `None`: every thread's.
    pub pids: Option<Vec<u32>>,
}

/// One firing, as the backend reports it.
// Each is handed once, by value, to a callback; none is stored (so a proc firing, the
// largest, is not boxed: that would allocate per firing). A pid firing is lent, not
// moved: it is built once where it is parsed.
#[allow(clippy::large_enum_variant)]
pub enum Record<'a> {
    /// A pid probe site fired: every probe whose site it is, the argument register
    /// (0..=5) behind each string the record captured, in order, and the argument
    /// register and size of each buffer it captured (`CapturePlan::buffers`).
    Pid { firing: &'a Firing<'a>, sites: &'a [SiteTarget], string_args: &'a [u8], buffer_args: &'a [(u8, u32)] },
    /// A proc hook fired.
    Proc(ProcFiring),
    /// A profile probe sampled a thread.
    Profile { sample: Sample<'a>, probe_id: u32 },
    /// The kernel followed a process udtrace does not hold ([`Setup::unheld`]): a
    /// child of it fires from now on, or it ended. Comes before the child's firings.
    Lineage(udtrace_record::lineage::Lineage),
}

/// A backend for the pid and proc providers.
pub trait Backend {
    /// Enables the proc provider's hooks, each recording what its plan asks.
    fn enable_proc(&mut self, hooks: &[(Hook, ProcPlan)]) -> Result<(), Error>;

    /// Starts sampling for `probes`, each sample with `stack_bytes` of the interrupted
    /// thread's user stack. Only a backend with BPF can.
    fn enable_profile(&mut self, probes: &[ProfileProbe], _stack_bytes: u32) -> Result<(), Error> {
        if probes.is_empty() {
            return Ok(());
        }
        Err(format!("{PROFILE_NEEDS_BPF}: {BPF_REFUSED}"))
    }

    /// Counts process `pid`'s firings from now on.
    fn trace_pid(&mut self, pid: i32) -> Result<(), Error>;

    /// Stops counting a process's firings (and holding it at the loader hook).
    fn untrace(&mut self, pid: i32);

    /// Arms every site of `probes` in process `pid` (sites already armed there stay
    /// as they are). Each probe's `pid` is the process whose probe it is.
    fn arm(&mut self, pid: i32, probes: &[&PidProbe]) -> Result<(), Error>;

    /// Arms `pid*` probes for every process (each site once).
    fn arm_all(&mut self, probes: &[&PidProbe]) -> Result<(), Error>;

    /// Sites that could not be armed, for the warning: (file, file offset).
    fn refused(&self) -> &[(PathBuf, u64)];

    /// Arms the loader hook (`_dl_debug_state` at `offset` in the loader `file`, mapped
    /// in process `pid`, which is stopped): a traced process that calls it with the
    /// link map consistent is held, with [`HOLD_SIGNAL`] ([`HOLD_SIGNAL_BLOCKED`] when
    /// the thread blocks it) or at a breakpoint
    /// ([`Backend::trap`]). `r_state`: the distance from the hook to `_r_debug.r_state`
    /// (0 if unknown). A backend may arm it once for every process.
    ///
    /// `Some(address)`: the backend hears of the hook through a hardware breakpoint at
    /// that address, which the caller sets in every thread of `pid`, its new threads
    /// and its forked children; their SIGTRAP stops there go to [`Backend::trap`].
    fn arm_hook(&mut self, pid: i32, file: &Path, offset: u64, r_state: u64) -> Result<Option<u64>, Error>;

    /// Thread `tid` of `pid` stopped with SIGTRAP: a breakpoint of this backend (a
    /// firing it recorded, or the loader hook), or not its own.
    fn trap(&mut self, _pid: i32, _tid: i32) -> Trap {
        Trap::NotOurs
    }

    /// Whether thread `tid` was held by the loader hook (and forgets it).
    fn take_hold(&self, tid: i32) -> bool;

    /// Removes every loader hook (before the processes are let go).
    fn drop_hooks(&mut self);

    /// Whether firings read errno (then processes' errno locations are wanted).
    fn reads_errno(&self) -> bool;

    /// Where process `pid`'s threads keep errno: the address of the GOT slot holding
    /// its TLS offset (0: none), and the offset itself; `None`: not known (yet).
    fn set_errno_tls(&mut self, pid: i32, tls: Option<(u64, i64)>);

    /// A child of a traced process, held before its first instruction: its firings
    /// count from then on, and it gets its parent's sites.
    fn fork(&mut self, parent: i32, child: i32) -> Result<(), Error>;

    /// A traced process, held, runs a new image now: sites in the old one are gone
    /// with its mappings. What the new image brings is armed with [`Backend::arm`].
    fn exec(&mut self, pid: i32);

    /// Process `pid` (held at its loader hook) unloaded objects: what was placed in
    /// their code is gone with it, and the same object loaded again is armed anew.
    /// Sites the kernel keeps (uprobes, by file) need nothing.
    fn unloaded(&mut self, _pid: i32) {}

    /// A traced process ended.
    fn exit(&mut self, pid: i32);

    /// Every thread of process `pid` is stopped and udtrace is about to let it go: take
    /// out what was placed in it (patched code), so that it runs on untouched.
    fn release(&mut self, _pid: i32) {}

    /// Another session asked for sites this one patched (udtrace_process::handoff): the
    /// processes carrying them, which must be stopped before [`Backend::hand_over`].
    /// Empty when nothing was asked.
    fn handoff_asked(&mut self) -> Vec<i32> {
        Vec::new()
    }

    /// Gives up the sites asked for in the processes `paused` (every thread stopped),
    /// probing them otherwise, and answers the askers. `paused` lacks a process of
    /// [`Backend::handoff_asked`] that did not stop.
    fn hand_over(&mut self, _paused: &[i32]) {}

    /// What the backend has to say since the last call, one line each (sites that
    /// fell back to another mechanism, and why).
    fn notices(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// What to wait on for firings and notices (besides a short timer: firings need
    /// not wake the session).
    fn wait_fds(&self) -> Vec<BorrowedFd<'_>>;

    /// Hands every firing recorded since the last call to `each`, in order.
    fn consume(&mut self, each: &mut dyn FnMut(Record<'_>));

    /// Whether records are piling up: the session drains again without waiting.
    fn backlog(&self) -> bool {
        false
    }

    /// For `pid*` probes: processes that exec'd or loaded objects since the last call.
    fn exec_notices(&mut self) -> Vec<i32>;

    /// The names processes took at the execs [`Backend::exec_notices`] last told of, in
    /// order: `execname` for a process that ended before udtrace looked at it.
    fn exec_names(&mut self) -> Vec<(i32, String)> {
        Vec::new()
    }

    /// Firings lost since the last call, per CPU: (cpu, count).
    fn new_drops(&mut self) -> Vec<(usize, u64)>;

    /// What the programs of [`Setup::work`] have left so far, in every process,
    /// buffer and map, merged ([`udtrace_dif::snapshot::Snapshot`]; its drops are
    /// totals since the start).
    fn firing_snapshot(&mut self) -> udtrace_dif::snapshot::Snapshot {
        udtrace_dif::snapshot::Snapshot::default()
    }
}

/// What a SIGTRAP stop was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trap {
    /// Not a breakpoint of the backend's: the signal is the process's.
    NotOurs,
    /// A probe fired; the thread goes on.
    Fired,
    /// The loader hook, with the link map consistent: new objects may be mapped.
    Hold,
}

/// Makes the backend for a session.
pub type Loader<'a> = &'a dyn Fn(&Setup) -> Result<Box<dyn Backend>, Error>;

/// Which probes own each refused site, for one warning per probe.
pub fn refused_probes<'a>(refused: &[(PathBuf, u64)], probes: &[&'a PidProbe]) -> Vec<&'a PidProbe> {
    let set: HashMap<(&Path, u64), ()> = refused.iter().map(|(f, o)| ((f.as_path(), *o), ())).collect();
    probes
        .iter()
        .filter(|p| p.sites.iter().chain(&p.unprobeable).any(|&(_, fo)| set.contains_key(&(p.file.as_path(), fo))))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(plan: CapturePlan) -> Setup {
        Setup {
            plan,
            bufsize: 4 << 20,
            strsize: 256,
            follow: false,
            all: false,
            children: true,
            inprocess: true,
            uprobes: false,
            explain: false,
            unheld: Vec::new(),
            stash: StashPlan::default(),
            probe_ops: ProbeOps::default(),
            layout: udtrace_dif::Layout::default(),
            work: ProbeWork::default(),
            tables: (4096, 4096),
        }
    }

    #[test]
    fn buffers_too_large_for_one_record_are_read_when_consumed() {
        let small = CapturePlan { buffers: vec![(0, 64), (1, 4096)], regs: true, ..CapturePlan::default() };
        assert_eq!(setup(small).record_plan().buffers.len(), 2);
        // With the largest stack capture, six 4 KiB buffers cannot all fit in a record:
        // the largest go, the record is laid out.
        let big = CapturePlan {
            stack_bytes: 16384,
            buffers: (0..6).map(|n| (n, 4096 - u32::from(n))).collect(),
            regs: true,
            ..CapturePlan::default()
        };
        let s = setup(big);
        let plan = s.record_plan();
        assert!(RecordLayout::new(&plan).is_ok());
        // The slots the consumer is told of are those the record has.
        let args: Vec<u8> = s.buffer_args().iter().map(|b| b.0).collect();
        assert_eq!(args.len(), plan.buffers.len());
        assert!(args.iter().zip(&plan.buffers).all(|(&n, b)| PtReg::ARGS[usize::from(n)] == b.reg));
        assert!(!plan.buffers.is_empty() && plan.buffers.len() < 6, "{:?}", plan.buffers);
        assert!(plan.buffers.iter().all(|b| b.size < 4096), "the largest went first: {:?}", plan.buffers);
    }
}
