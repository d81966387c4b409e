//! One udtrace run: compile, report matches, fire BEGIN, drive timers and signals
//! until `exit()`, a signal or the end of the traced processes, fire END, print what
//! remains. Exit status as dtrace's: the `exit()` value, 1 on failure.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use udtrace_lang::capture::{self, CapturePlan};
use udtrace_lang::ir::Builtin;
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::types::TypeTable;
use udtrace_messages::progress::Progress;
use udtrace_messages::{debug, note};
use udtrace_process::follow::Event;
use udtrace_process::procfs;
use udtrace_providers::backend::{
    refused_probes, Backend, Loader, ProfileProbe, Record, Setup, SiteTarget, USDT_STRING,
};
use udtrace_providers::pid::{is_pid_provider, is_usdt_provider, PidProbe, SiteKind};
use udtrace_providers::pid_context::{FiringCtx, Procs};
use udtrace_providers::proc::{self as procprov, Clocks, ProcCtx};
use udtrace_providers::registry::{self as probes, Registry, TimerKind};
use udtrace_providers::self_context::{SelfContext, SelfFiring};
use udtrace_record::lineage::Lineage;
use udtrace_record::proc::{Hook, ProcFiring, ProcPlan};
use udtrace_runtime::consumer::Settings;
use udtrace_runtime::Context;
use udtrace_runtime::{Consumer, Effects, Output, Probe};

use crate::compile::{self, io_reason, Compiled};
use crate::firing::Firings;
use crate::follow::{AllProcesses, Follower, KernelFollower, World};
use crate::list;
use crate::request::Request;
use crate::sink::Sink;
use crate::targets::Targets;

pub const EXIT_FAILURE: i32 = 1;

/// Stack bytes a USDT firing records for its arguments in memory (`-4@112(%rsp)`,
/// `-4@-136(%rbp)`): read at the firing, before the frame changes.
const USDT_STACK_BYTES: u32 = 1024;
/// How often firings are read from the ring buffer when it does not fill up.
const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
const BUSY_DRAIN_INTERVAL: Duration = Duration::from_millis(1);

fn fail(msg: &str) -> i32 {
    note!("{msg}");
    EXIT_FAILURE
}

fn macro_args(req: &Request, targets: &Targets, me: &SelfContext) -> MacroArgs {
    let argv = match req.programs.first() {
        Some(p) => req.macro_argv(p),
        None => std::iter::once(req.argv0.clone()).chain(req.macro_args.iter().cloned()).collect(),
    };
    let mut m = MacroArgs::new(argv);
    m.defaultargs = req.options.defaultargs;
    m.argref = req.options.argref;
    m.target = targets.first_pid();
    m.pid = me.pid;
    m.ppid = me.ppid;
    m.pgid = me.pgid;
    m.sid = me.sid;
    m.uid = me.uid;
    m.gid = me.gid;
    m.euid = me.euid;
    m.egid = me.egid;
    m
}

/// Runs what `req` asks, with the backend `load` makes (when probes need one);
/// returns the exit status.
pub fn run(req: Request, load: Loader<'_>) -> i32 {
    // Signals are taken through a signalfd so that the loop can wait for timers,
    // signals and the end of traced processes in one poll.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    // A hangup (the terminal closed, a supervisor's stop) ends tracing as SIGTERM does;
    // its default action would kill udtrace without taking its probes out. Under
    // `nohup` it stays ignored: blocked, it would be queued for the signalfd instead.
    let ignored = procfs::status_signals(std::process::id() as i32, "SigIgn:").unwrap_or(0);
    if ignored & (1 << (Signal::SIGHUP as u32 - 1)) == 0 {
        mask.add(Signal::SIGHUP);
    }
    // Followed processes' ptrace events are noticed through SIGCHLD.
    mask.add(Signal::SIGCHLD);
    // A terminal's stop (^Z) stops udtrace once the exec gate is closed (see `suspend`):
    // stopped with it open, udtrace would cost every new image's exec on the machine the
    // gate's limit.
    mask.add(Signal::SIGTSTP);
    if let Err(e) = mask.thread_block() {
        return fail(&format!("failed to block signals: {e}"));
    }
    let sfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(s) => s,
        Err(e) => return fail(&format!("failed to create signalfd: {e}")),
    };

    let me = SelfContext::new();
    let mut targets = match Targets::start(&req) {
        Ok(t) => t,
        Err(m) => return fail(&m),
    };
    let macros = macro_args(&req, &targets, &me);
    let mut registry = Registry::default();
    let compiled = match compile::compile(&req, &macros, &mut registry) {
        Ok(c) => c,
        Err(f) => {
            targets.finish();
            return fail(&f.0);
        }
    };
    // -S: dtrace shows each clause's compiled code and the variables it uses; udtrace
    // has no compiled code, and shows the variables.
    if req.options.verbose {
        let table = udtrace_lang::vartab::listing(&compiled.program, compiled.options.strsize);
        eprint!("{table}");
    }
    if compiled.options.debug {
        udtrace_messages::enable_debug();
    }
    // dtrace opens the -o file once the programs are compiled, before it reports
    // on them.
    let mut out = match open_output(&req) {
        Ok(o) => o,
        Err(m) => {
            targets.finish();
            return fail(&m);
        }
    };
    let timeline = match crate::timeline::open(compiled.options.timeline.as_deref()) {
        Ok(t) => t,
        Err(m) => {
            targets.finish();
            return fail(&m);
        }
    };
    if req.list {
        let status = list::list(&req, &compiled, &mut registry, &mut out);
        targets.finish();
        return status;
    }
    if req.verbose {
        let _ = io::Write::write_all(&mut out, stability_reports(&compiled).as_bytes());
        let _ = io::Write::flush(&mut out);
    }
    if req.exit_after_compile {
        targets.finish();
        return 0;
    }
    let quiet = compiled.options.quiet;
    if !quiet {
        for s in &compiled.sources {
            let plural = if s.matched == 1 { "" } else { "s" };
            note!("{} '{}' matched {} probe{plural}", s.kind, s.name, s.matched);
        }
    }
    let total: usize = compiled.sources.iter().map(|s| s.matched).sum();
    if total == 0 && !compiled.options.zdefs {
        targets.finish();
        let what = if compiled.sources.is_empty() { "specified" } else { "matched" };
        return fail(&format!("no probes {what}"));
    }
    if let Err(why) = compile::enable_check(&compiled) {
        targets.finish();
        return fail(&format!("could not enable tracing: {why}"));
    }
    // dtrace's notice once tracing starts with -w (or `destructive` set).
    if compiled.options.destructive && !quiet {
        note!("allowing destructive actions");
    }
    // What already runs below a `-p` process (a daemon's workers) is traced as what it
    // forks later will be; `-x nofollow` keeps to the process itself, as DTrace does.
    if !compiled.options.nofollow {
        targets.grab_descendants(&crate::follow::described(&compiled, &targets.pids()));
    }
    let mut consumer =
        Consumer::new(Rc::clone(&compiled.program), settings(&compiled), compiled.ecbs.clone(), me.seed());
    consumer.set_cpus(crate::cpus::online());
    consumer.set_at_firing(compiled.firing.at_firing.clone());
    consumer.set_string_reads(compiled.firing.string_reads.clone());
    // Remember traced processes while they are held: some exit before their firings
    // are consumed.
    let procs = RefCell::new(Procs::new(wall_offset(), registry.pid.objects().clone()));
    let Armed { mut backend, mut follower, mut all, kernel, sampled } =
        match arm(&compiled, &mut registry, &mut targets, load, &mut consumer, &procs) {
            Ok(b) => b,
            Err(m) => {
                targets.finish();
                return fail(&m);
            }
        };
    debug!("{} enablings armed; firing BEGIN", compiled.ecbs.len());
    if all.is_some() && follower.is_some() {
        out.hold_commands();
    }
    let mut world = Tracing {
        backend: backend.as_deref_mut(),
        follower: follower.as_mut(),
        all: all.as_mut(),
        kernel,
        registry: &mut registry,
        procs: &procs,
        sampled,
        timeline,
    };
    let result = trace(&compiled, &me, &mut targets, &sfd, &mut world, &mut consumer, &mut out);
    if let (Some(f), Some(b)) = (follower.as_mut(), backend.as_deref_mut()) {
        f.finish(b);
    }
    targets.finish();
    match result {
        Ok(status) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => fail(&format!("failed to write output: {}", io_reason(&e))),
    }
}

/// The output: the `-o` file (appended to, as dtrace opens it), or stdout.
fn open_output(req: &Request) -> Result<Sink, String> {
    let Some(path) = &req.output else {
        return Ok(Sink::new(Box::new(io::BufWriter::with_capacity(crate::sink::BUFFER, io::stdout())), true));
    };
    let failed = |e: io::Error| format!("failed to open output file '{}': {}", path.display(), io_reason(&e));
    let file = OpenOptions::new().create(true).append(true).open(path).map_err(failed)?;
    Sink::to_file(file).map_err(failed)
}

/// `-v`: the stability report of every program, in order.
fn stability_reports(c: &Compiled) -> String {
    c.sources
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let clauses: Vec<_> = c.program.clauses.iter().filter(|cl| cl.source == i).cloned().collect();
            crate::stability::report(s.kind, &s.name, &clauses)
        })
        .collect()
}

/// What tracing runs with once armed.
#[derive(Default)]
struct Armed {
    backend: Option<Box<dyn Backend>>,
    /// The follower of the `-c`/`-p` processes udtrace holds.
    follower: Option<Follower>,
    /// The `pid*` watcher.
    all: Option<AllProcesses>,
    /// What matches new images of the processes another tracer holds.
    kernel: Option<KernelFollower>,
    /// The profile probes the backend samples (the others fire in udtrace's context).
    sampled: HashSet<u32>,
}

/// Arms the enabled pid probes, if any, and starts tracing their processes; `-c`/`-p`
/// processes with pid descriptions, and the descendants grabbed with them, are adopted
/// by a follower (held until released), or by the kernel when another tracer holds
/// them.
fn arm(
    c: &Compiled,
    registry: &mut Registry,
    targets: &mut Targets,
    load: Loader<'_>,
    consumer: &mut Consumer,
    procs: &RefCell<Procs>,
) -> Result<Armed, String> {
    // The roots of the processes udtrace holds, and of those it does not (another
    // tracer holds them), descendants included.
    let (mut held, mut unheld_roots): (Vec<i32>, Vec<i32>) = (Vec::new(), Vec::new());
    for t in &targets.list {
        if t.tracer.is_none() { &mut held } else { &mut unheld_roots }.push(t.pid);
    }
    for d in &targets.descendants {
        if d.target.tracer.is_none() { &mut held } else { &mut unheld_roots }.push(d.root);
    }
    let mut all = AllProcesses::new(c);
    let mut follower = Follower::new(c, &held, all.is_some());
    let enabled: HashSet<u32> = c.ecbs.iter().filter(|e| registry.pid.owns(e.probe.id)).map(|e| e.probe.id).collect();
    let strsize = c.options.strsize.min(u64::from(u32::MAX)) as u32;
    let proc_hooks = proc_hook_plans(c, strsize);
    let (profile, profile_stack) = profile_probes(c);
    // Descriptions of an unheld target that match nothing yet (-Z) may match what it
    // execs: the kernel must follow it.
    let unheld_pids: Vec<i32> = targets
        .list
        .iter()
        .filter(|t| t.tracer.is_some())
        .map(|t| t.pid)
        .chain(targets.unheld_descendants().map(|(pid, _)| pid))
        .collect();
    // Without following, still there for the objects the processes load.
    let mut kernel = KernelFollower::new(c, &unheld_roots);
    if enabled.is_empty()
        && follower.is_none()
        && kernel.is_none()
        && all.is_none()
        && proc_hooks.is_empty()
        && profile.is_empty()
    {
        return Ok(Armed::default());
    }
    // `pid*` probes (owner 0) are armed for every process, apart.
    let probes: Vec<&PidProbe> =
        registry.pid.probes().iter().filter(|p| p.pid != 0 && enabled.contains(&p.probe.id)).collect();
    // Every clause with a pid description may be enabled on probes found later.
    let mut plan = CapturePlan::default();
    for clause in c.program.clauses.iter().filter(|cl| cl.probes.iter().any(|d| is_pid_provider(&d.provider))) {
        plan.merge(&capture::plan(clause, &c.options));
    }
    // A USDT clause's arguments are decoded in the consumer from the registers and the
    // stack below the frame (docs/usdt.md); its captures of argument registers would
    // read the wrong ones.
    // The probes a clause is enabled on.
    let ids_of = |clause: &udtrace_lang::ir::Clause| -> Vec<u32> {
        c.ecbs.iter().filter(|e| std::ptr::eq(&c.program.clauses[e.clause], clause)).map(|e| e.probe.id).collect()
    };
    for clause in c.program.clauses.iter().filter(|cl| cl.probes.iter().any(|d| is_usdt_provider(&d.provider))) {
        let mut usdt = capture::plan(clause, &c.options);
        // `copyinstr(argN)`: the string at the register argument N is in at each site,
        // whichever it is there (resolved per site as it is armed, found at start or
        // later); an argument in memory is read when consumed.
        let regs: Vec<u8> = usdt.strings.iter().map(|&n| USDT_STRING + n).collect();
        usdt.strings = regs;
        usdt.buffers.clear();
        usdt.regs = true;
        // Arguments in the frame are read from the stack recorded with the firing. A
        // clause that reads arguments and has no probe yet (-Z: a library loaded later,
        // as libjvm.so is by java) keeps the stack too: its sites' descriptors are not
        // known now, and the frame is gone by the time the record is consumed.
        let ids = ids_of(clause);
        if (ids.is_empty() && usdt.args != 0) || registry.pid.usdt_reads_stack(ids.into_iter()) {
            usdt.stack_bytes = usdt.stack_bytes.max(USDT_STACK_BYTES);
        }
        plan.merge(&usdt);
    }
    let has_usdt = registry.pid.probes().iter().any(|p| matches!(p.kind, SiteKind::Usdt(_)));
    let setup = Setup {
        plan,
        bufsize: c.options.bufsize,
        strsize,
        follow: follower.is_some(),
        all: all.is_some(),
        children: !c.options.nofollow,
        // USDT probes are uprobes (the kernel keeps their semaphores, docs/usdt.md):
        // with them, every site is.
        inprocess: !c.options.uprobes && !has_usdt,
        uprobes: c.options.uprobes,
        explain: c.options.inprocess,
        unheld: unheld_pids,
        stash: c.stash.clone(),
        probe_ops: c.probe_ops.clone(),
        layout: c.firing.layout.clone(),
        work: c.work.clone(),
        tables: udtrace_dif::layout::table_sizes(&c.firing.layout, c.options.aggsize, c.options.dynvarsize),
    };
    let mut pids: Vec<i32> = probes.iter().map(|p| p.pid).chain(targets.pids()).collect();
    pids.sort_unstable();
    pids.dedup();
    // On a terminal, a line says what is being armed when it takes long (docs/design.md,
    // "Progress while arming"); it is erased when this returns.
    let progress = Progress::start(!c.options.quiet, udtrace_messages::progress::delay());
    progress.set(probes.len(), pids.len() + targets.descendants.len());
    let mut backend = load(&setup)?;
    backend.enable_proc(&proc_hooks)?;
    let sampled = match backend.enable_profile(&profile, profile_stack) {
        Ok(()) => profile.iter().map(|p| p.probe_id).collect(),
        Err(e) => {
            note!("{e}; they fire in udtrace's own context");
            HashSet::new()
        }
    };
    // Traced first: arming decides per file whether processes beyond these map it.
    for pid in pids.iter().chain(targets.descendants.iter().map(|d| &d.target.pid)) {
        backend.trace_pid(*pid)?;
    }
    for &pid in &pids {
        let mine: Vec<&PidProbe> = probes.iter().filter(|p| p.pid == pid).copied().collect();
        backend.arm(pid, &mine)?;
    }
    // Probes with sites the kernel refuses (checked up front, or refused when attached)
    // that no backend armed otherwise.
    let mut unarmed: Vec<&PidProbe> = Vec::new();
    for p in refused_probes(backend.refused(), &probes) {
        if !unarmed.iter().any(|u| u.probe.id == p.probe.id) {
            unarmed.push(p);
        }
    }
    for p in unarmed.iter().take(5) {
        let q = &p.probe;
        note!(
            "failed to enable {}:{}:{}:{}: the kernel cannot place a uprobe on its instruction{}",
            q.provider,
            q.module,
            q.function,
            q.name,
            if p.sites.is_empty() { "" } else { " at some of its sites" }
        );
    }
    if unarmed.len() > 5 {
        note!("... and {} more probes on instructions the kernel cannot probe", unarmed.len() - 5);
    }
    if let Some(f) = follower.as_mut() {
        for t in targets.list.iter_mut().filter(|t| t.tracer.is_none()) {
            f.adopt(t, backend.as_mut(), registry)?;
        }
    }
    if let Some(k) = kernel.as_mut() {
        for t in targets.list.iter().filter(|t| t.tracer.is_some()) {
            if let Err(e) = k.adopt(t.pid, backend.as_mut(), registry) {
                note!("pid {}: {e}: objects it loads later are not armed", t.pid);
            }
        }
    }
    adopt_descendants(
        targets,
        follower.as_mut(),
        kernel.as_mut(),
        &mut World { backend: backend.as_mut(), registry, consumer, procs },
    );
    let unheld =
        targets.list.iter().filter(|t| pids.contains(&t.pid)).chain(targets.descendants.iter().map(|d| &d.target));
    for t in unheld {
        if let Some((tracer, name)) = &t.tracer {
            let follow = if c.options.nofollow {
                "; objects it loads are armed when udtrace reads of them (their first firings are missed)"
            } else {
                "; the kernel follows the processes it forks, the programs they exec and the objects they \
                 load, armed when udtrace reads of them (probes in shared libraries of a child, in a new \
                 program or in a new object miss their first firings)"
            };
            note!("pid {} is traced by {name} (pid {tracer}): its probes are armed without stopping it{follow}", t.pid);
        }
    }
    if let Some(a) = all.as_mut() {
        a.start(c, backend.as_mut(), registry)?;
        a.open_gate(registry);
        // `pid*` sites the targets carry patches at are given up to uprobes now, while
        // the targets are held.
        if let Some(f) = follower.as_mut() {
            hand_over_sites(f, backend.as_mut());
        }
    }
    for n in backend.notices() {
        note!("{n}");
    }
    Ok(Armed { backend: Some(backend), follower, all, kernel, sampled })
}

/// Takes on the descendants grabbed with the targets, as processes that have just
/// exec'd: the held ones join the follower's tree, those another tracer holds are
/// followed by the kernel. One that cannot be followed is let go.
fn adopt_descendants(
    targets: &mut Targets,
    mut follower: Option<&mut Follower>,
    mut kernel: Option<&mut KernelFollower>,
    w: &mut World<'_>,
) {
    for d in &mut targets.descendants {
        let pid = d.target.pid;
        if d.target.tracer.is_some() {
            if let Some(k) = kernel.as_deref_mut() {
                k.adopt_descendant(d.root, pid, w);
            }
            continue;
        }
        let adopted = match follower.as_deref_mut() {
            Some(f) => f.adopt_descendant(&mut d.target, d.parent, d.root, w),
            None => Err("no probe follows it".to_string()),
        };
        if let Err(e) = adopted {
            note!("failed to follow pid {pid}: {e}");
            d.target.release();
        }
    }
}

/// The enabled `profile-N` probes, sampled on every online CPU (the one `-x cpu` names),
/// with the user stack bytes their clauses need.
fn profile_probes(c: &Compiled) -> (Vec<ProfileProbe>, u32) {
    let cpus: Vec<i32> = match c.options.cpu {
        Some(n) => vec![n.min(i32::MAX as u64) as i32],
        None => crate::cpus::online().iter().map(|c| c.id).collect(),
    };
    let mut out: Vec<ProfileProbe> = Vec::new();
    let mut plan = CapturePlan::default();
    for e in c.ecbs.iter().filter(|e| e.probe.provider == "profile") {
        let Some((TimerKind::Profile, period_ns)) = probes::timer_period(&e.probe.name) else { continue };
        let clause = &c.program.clauses[e.clause];
        plan.merge(&capture::plan(clause, &c.options));
        // Samples of other processes cost nothing in user space when every clause on
        // the probe keeps only named processes; other CPUs are not sampled at all when
        // every clause keeps only named CPUs.
        let pred = clause.predicate.as_ref();
        let pid = pred.and_then(|p| named(p, Builtin::Pid));
        let cpu = pred.and_then(|p| named(p, Builtin::Cpu)).map(|c| c as i32);
        let clause_cpus: Vec<i32> = cpus.iter().copied().filter(|&c| cpu.is_none_or(|n| n == c)).collect();
        match out.iter_mut().find(|p| p.probe_id == e.probe.id) {
            Some(p) => {
                match (&mut p.pids, pid) {
                    (Some(pids), Some(pid)) => pids.push(pid),
                    (pids, _) => *pids = None,
                }
                for c in clause_cpus {
                    if !p.cpus.contains(&c) {
                        p.cpus.push(c);
                    }
                }
            }
            None => out.push(ProfileProbe {
                probe_id: e.probe.id,
                period_ns,
                cpus: clause_cpus,
                pids: pid.map(|p| vec![p]),
            }),
        }
    }
    (out, plan.stack_bytes.div_ceil(8) * 8)
}

/// The value of built-in `b` a predicate keeps alone: `pid == N` (`$target` is a
/// constant by now), `cpu == N`, or such a term of a `&&`.
fn named(e: &udtrace_lang::ir::Expr, b: Builtin) -> Option<u32> {
    use udtrace_lang::ast::BinaryOp;
    use udtrace_lang::ir::ExprKind;
    fn bare(mut e: &udtrace_lang::ir::Expr) -> &ExprKind {
        while let ExprKind::Cast(x) = &e.kind {
            e = x;
        }
        &e.kind
    }
    match &e.kind {
        ExprKind::Binary { op: BinaryOp::Eq, lhs, rhs, .. } => match (bare(lhs), bare(rhs)) {
            (ExprKind::Builtin(x), ExprKind::Int(n)) | (ExprKind::Int(n), ExprKind::Builtin(x)) if *x == b => {
                u32::try_from(*n).ok()
            }
            _ => None,
        },
        ExprKind::Logical { op: BinaryOp::LogAnd, lhs, rhs } => named(lhs, b).or_else(|| named(rhs, b)),
        _ => None,
    }
}

/// The proc hooks the enabled proc probes need, each with what its records must carry
/// for the clauses on its probes.
fn proc_hook_plans(c: &Compiled, strsize: u32) -> Vec<(Hook, ProcPlan)> {
    let mut plans: BTreeMap<Hook, ProcPlan> = BTreeMap::new();
    for e in c.ecbs.iter().filter(|e| e.probe.provider == "proc") {
        let Some(p) = procprov::probe(&e.probe.name) else { continue };
        let clause = capture::plan(&c.program.clauses[e.clause], &c.options);
        plans.entry(p.hook).or_default().merge(&procprov::hook_plan(p, &clause, strsize));
    }
    // An exec's path that could not be read at its start comes with its outcome.
    if let Some(max) = plans.get(&Hook::ExecEnter).map(|p| p.string_max).filter(|&m| m > 0) {
        for h in [Hook::ExecDone, Hook::ExecFail] {
            plans.entry(h).or_default().string_max = max;
        }
    }
    plans.into_iter().collect()
}

/// The enabled proc probes' ids by name.
fn proc_ids(c: &Compiled) -> HashMap<&'static str, u32> {
    c.ecbs
        .iter()
        .filter(|e| e.probe.provider == "proc")
        .filter_map(|e| procprov::probe(&e.probe.name).map(|p| (p.name, e.probe.id)))
        .collect()
}

/// What tracing drives besides the consumer.
struct Tracing<'a> {
    backend: Option<&'a mut (dyn Backend + 'static)>,
    follower: Option<&'a mut Follower>,
    all: Option<&'a mut AllProcesses>,
    /// What matches new images of the processes another tracer holds.
    kernel: Option<KernelFollower>,
    registry: &'a mut Registry,
    /// What is known of the traced processes, for their firings' context.
    procs: &'a RefCell<Procs>,
    /// Profile probes the backend samples.
    sampled: HashSet<u32>,
    /// `-x timeline=FILE`: every firing the consumer runs is also a trace event.
    timeline: Option<crate::timeline::Recorder>,
}

fn settings(c: &Compiled) -> Settings {
    let o = &c.options;
    Settings {
        quiet: o.quiet,
        strsize: o.strsize.max(1) as usize,
        nspec: o.nspec.max(1) as usize,
        specsize: o.specsize.min(usize::MAX as u64) as usize,
        droptags: o.other.contains_key(&udtrace_lang::options::OptionName::Droptags),
        destructive: o.destructive,
        sort: udtrace_runtime::output::SortOptions {
            key: o.aggsortkey,
            rev: o.aggsortrev,
            pos: o.aggsortpos as usize,
            keypos: o.aggsortkeypos as usize,
        },
        tz_offset: 0,
        localtime: Some(local_time),
        testing: std::env::var_os("_DTRACE_TESTING").is_some(),
        rawbytes: o.rawbytes,
        scratch_room: udtrace_lang::options::scratch_room(o.scratchsize),
        aggpercpu: o.aggpercpu,
        printsize: o.printsize as usize,
        folded: o.folded,
        json: o.json,
        flowindent: o.flowindent,
    }
}

/// A timer probe enabled by the program, with its next deadline.
struct Timer {
    probe: Rc<Probe>,
    kind: TimerKind,
    period: Duration,
    next: Instant,
}

fn timers(c: &Compiled, start: Instant, sampled: &HashSet<u32>) -> Vec<Timer> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for e in &c.ecbs {
        if e.probe.provider != "profile" || seen.contains(&e.probe.id) || sampled.contains(&e.probe.id) {
            continue;
        }
        seen.push(e.probe.id);
        if let Some((kind, ns)) = probes::timer_period(&e.probe.name) {
            let period = Duration::from_nanos(ns);
            out.push(Timer { probe: Rc::clone(&e.probe), kind, period, next: start + period });
        }
    }
    out
}

fn trace(
    c: &Compiled,
    me: &SelfContext,
    targets: &mut Targets,
    sfd: &SignalFd,
    w: &mut Tracing<'_>,
    consumer: &mut Consumer,
    out: &mut Sink,
) -> io::Result<i32> {
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u32;
    let mut status = 0;
    let mut done = false;
    let mut signalled = false;

    let procs = w.procs;
    let clocks = Clocks { wall: procs.borrow().wall_offset, boot: boot_offset() };
    procs.borrow_mut().share(w.registry.pid.objects());
    // BEGIN, END and timers: `%A` symbolizes against $target, the first -c/-p process.
    let target = targets.pids().first().map(|&p| p as u32);
    let fire = |consumer: &mut Consumer, id: u32, cpu: u32, out: &mut Sink| -> io::Result<Option<i32>> {
        let ctx = SelfFiring::now(me, &c.program.types, clocks).with_target(procs, target);
        let fx = consumer.fire(id, cpu, &ctx, out)?;
        out.flush()?;
        Ok(apply(fx))
    };
    for t in &targets.list {
        let objects = procfs::objects_of(t.pid).unwrap_or_default();
        if let Some(b) = w.backend.as_deref_mut() {
            crate::follow::locate_errno(t.pid, &objects, b, w.registry);
        }
        procs.borrow_mut().remember(t.pid as u32, objects);
        if w.follower.is_none() {
            // Not held when it loads libraries: read again when an address calls for it.
            procs.borrow_mut().unfollowed(t.pid as u32);
        }
    }
    // `-x cpu`: probes fire on that CPU only; BEGIN, END and ticks run there.
    let only_cpu = c.options.cpu.map(|n| n.min(u64::from(u32::MAX)) as u32);
    let here = || only_cpu.unwrap_or_else(|| me.cpu());
    if let Some(s) = fire(consumer, probes::BEGIN, here(), out)? {
        status = s;
        done = true;
    }
    // As dtrace: BEGIN has fired and probes are armed; now the processes may run.
    match w.follower.as_deref_mut() {
        Some(f) => {
            let adopted = targets.descendants.iter().map(|d| d.target.pid);
            targets.pids().into_iter().chain(adopted).for_each(|pid| f.tree.start(pid));
        }
        None => targets.release(),
    }
    let started = Instant::now();
    let begin_exited = done;
    let mut timers = timers(c, started, &w.sampled);

    let mut last_drop_check = Instant::now();
    let ustackframes = c.options.ustackframes.min(u64::from(u32::MAX)) as u32;
    let mut sink = Drain {
        procs,
        ustackframes,
        maxframes: c.options.maxframes.map_or(u32::MAX, |m| m.min(u64::from(u32::MAX)) as u32),
        proc_ids: proc_ids(c),
        types: &c.program.types,
        clocks,
        pending_exec: HashMap::new(),
        only_cpu,
        kernel_roots: targets.unheld_descendants().collect(),
        firings: Firings::new(c),
        busy: false,
    };
    while !done {
        let now = Instant::now();
        let next = timers.iter().map(|t| t.next).min();
        let mut wait = next.map(|n| n.saturating_duration_since(now));
        if !targets.is_empty() && w.follower.is_none() {
            // Process exit is noticed by polling; 50 ms keeps the tail short.
            wait = Some(wait.map_or(Duration::from_millis(50), |w| w.min(Duration::from_millis(50))));
        }
        if w.backend.is_some() {
            // Firings do not wake us (see the uprobe program): drain on a timer.
            // While firings flow, a ring of bufsize × CPUs bytes fills in a few ms of
            // a hot function: drain every millisecond then, not every DRAIN_INTERVAL.
            let interval = if w.backend.as_deref().is_some_and(|b| b.backlog()) {
                Duration::ZERO
            } else if sink.busy {
                BUSY_DRAIN_INTERVAL
            } else {
                DRAIN_INTERVAL
            };
            wait = Some(wait.map_or(interval, |w| w.min(interval)));
        }
        let timeout = match wait {
            Some(w) => {
                PollTimeout::try_from(w.as_millis().min(60_000) as i32 + i32::from(w.subsec_nanos() % 1_000_000 != 0))
                    .unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        if let Some(b) = w.backend.as_deref() {
            fds.extend(b.wait_fds().into_iter().map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
        }
        if let Some(fd) = w.all.as_deref().and_then(|a| a.wait_fd()) {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        let polled = poll(&mut fds, timeout);
        drop(fds);
        match polled {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
        // Execs the gate holds wait in the kernel: before anything else.
        gated(&sink, consumer, w);
        if let Some(s) = sink.drain(consumer, w, out)? {
            status = s;
            break;
        }
        if sink.firings.due() {
            sink.firings.refresh(consumer, w.backend.as_deref_mut(), w.registry);
        }
        if let Some(b) = w.backend.as_deref_mut() {
            for n in b.notices() {
                note!("{n}");
            }
            if last_drop_check.elapsed() >= Duration::from_secs(1) {
                report_drops(b, consumer);
                last_drop_check = Instant::now();
            }
        }
        let interrupted = read_signals(sfd, w);
        if interrupted {
            // dtrace prints a newline on the first interrupt, even when quiet, but not
            // in testing mode, where it would land at a random place in the output,
            // nor between JSON lines.
            if !consumer.settings().testing && !consumer.settings().json {
                out.write_all(b"\n")?;
            }
            signalled = true;
            break;
        }
        if w.all.is_some() {
            if let Some(s) = all_events(&mut sink, consumer, w, out)? {
                status = s;
                break;
            }
        }
        if w.follower.is_some() {
            hand_over(w);
            if let Some(s) = follow_events(&mut sink, consumer, w, targets, out)? {
                status = s;
                break;
            }
            start_commands(w, consumer, procs, out);
            // Processes another tracer holds below a held root end on their own.
            let roots = !targets.is_empty();
            if roots && w.follower.as_deref().is_some_and(|f| f.tree.is_empty()) && !sink.kernel_children_run() {
                targets.reap(c.options.quiet);
                break;
            }
            targets.reap(c.options.quiet);
        }
        let now = Instant::now();
        for t in timers.iter_mut() {
            if t.next > now {
                continue;
            }
            let cpus = match (t.kind, only_cpu) {
                (TimerKind::Profile, None) => 0..ncpu,
                _ => here()..here() + 1,
            };
            if consumer.prints_aggregations(t.probe.id) {
                sink.firings.refresh(consumer, w.backend.as_deref_mut(), w.registry);
            }
            for cpu in cpus {
                if let Some(s) = fire(consumer, t.probe.id, cpu, out)? {
                    status = s;
                    done = true;
                }
            }
            t.next += t.period;
            // After a long stall, skip ahead rather than fire a burst of catch-ups.
            if t.next + t.period < now {
                t.next = now + t.period;
            }
            if done {
                break;
            }
        }
        report_consumer_drops(consumer);
        consumer.flush_notices(out)?;
        if w.follower.is_none() && !targets.is_empty() && targets.reap(c.options.quiet) && !sink.kernel_children_run() {
            break;
        }
    }
    // An interrupt does not wait for system() commands: they run on, let go.
    match signalled {
        true => out.drop_commands()?,
        false => wait_commands(&mut sink, consumer, w, targets, sfd, out)?,
    }
    // No exec may wait for a main thread that no longer looks.
    if let Some(a) = w.all.as_deref_mut() {
        a.close_gate();
    }
    if consumer.is_draining() {
        // An exit() in BEGIN is seen at the first status check, before the loop.
        let since = (!begin_exited).then(|| started.elapsed());
        let delay = exit_notice_delay(c.options.statusrate, c.options.switchrate, since);
        wait_unless_signalled(sfd, delay)?;
    }
    // Firings still in the ring happened before the end: they come before END.
    if let Some(s) = sink.drain(consumer, w, out)? {
        status = s;
    }
    if let Some(s) = sink.flush_execs(consumer, out)? {
        status = s;
    }
    if let Some(Err(m)) = w.timeline.take().map(|t| t.finish()) {
        note!("{m}");
        status = status.max(1);
    }
    if let Some(b) = w.backend.as_deref_mut() {
        report_drops(b, consumer);
        for n in b.notices() {
            note!("{n}");
        }
    }
    // END may printa(), and the end prints every aggregation: what the firings left
    // is read once more.
    sink.firings.refresh(consumer, w.backend.as_deref_mut(), w.registry);
    if let Some(s) = fire(consumer, probes::END, here(), out)? {
        status = s;
    }
    report_consumer_drops(consumer);
    for n in procs.borrow_mut().stack_notes() {
        note!("{n}");
    }
    consumer.finish(out)?;
    out.flush()?;
    Ok(status)
}

/// Reads the signals queued for udtrace: true when one asks it to stop tracing
/// (SIGCHLD only tells of followed processes). A terminal's stop suspends it.
fn read_signals(sfd: &SignalFd, w: &mut Tracing<'_>) -> bool {
    let mut interrupted = false;
    let mut stop = false;
    while let Ok(Some(info)) = sfd.read_signal() {
        match info.ssi_signo {
            n if n == Signal::SIGCHLD as u32 => {}
            n if n == Signal::SIGTSTP as u32 => stop = true,
            _ => interrupted = true,
        }
    }
    if stop && !interrupted {
        suspend(w);
    }
    interrupted
}

/// Stops udtrace as the terminal asked (SIGTSTP, blocked to be read here), the exec
/// gate closed meanwhile: while udtrace is stopped, no exec on the machine waits for it
/// at all. Opened again (a new keeper) when udtrace is continued.
fn suspend(w: &mut Tracing<'_>) {
    let was_open = w.all.as_deref().is_some_and(|a| a.wait_fd().is_some());
    if let Some(a) = w.all.as_deref_mut() {
        a.close_gate();
    }
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
    if was_open {
        if let Some(a) = w.all.as_deref_mut() {
            a.open_gate(w.registry);
        }
    }
}

/// Rates up to this are not waited for after exit(): a second's lag on every exit()
/// would buy nothing but DTrace's latency.
const RATE_NOT_WAITED: u64 = 1_000_000_000;

/// How long after exit() dtrace fires END: its consumer notices the draining state at
/// its next status check (the first right after BEGIN, then every `statusrate`), and
/// then reads the buffers once more, waiting a whole `switchrate`. Only rates slower
/// than 1 s (DTrace's default status rate) are waited for. `since` is the time from
/// the first status check to exit(), `None` when exit() came before it (in BEGIN).
fn exit_notice_delay(statusrate: u64, switchrate: u64, since: Option<Duration>) -> Duration {
    let mut delay = Duration::ZERO;
    if let Some(since) = since.filter(|_| statusrate > RATE_NOT_WAITED) {
        let since = since.as_nanos();
        let rate = u128::from(statusrate);
        let next_check = since.div_ceil(rate) * rate;
        delay += Duration::from_nanos((next_check - since).min(u128::from(u64::MAX)) as u64);
    }
    if switchrate > RATE_NOT_WAITED {
        delay += Duration::from_nanos(switchrate);
    }
    delay
}

/// Sleeps for `delay`, or until a signal (an interrupt, the end of a child) arrives.
fn wait_unless_signalled(sfd: &SignalFd, delay: Duration) -> io::Result<()> {
    let until = Instant::now() + delay;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let ms = left.as_millis().clamp(1, 60_000) as i32;
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => return Ok(()),
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// Handles what followed processes did since the last look. Firings are consumed
/// before each event, so they are interpreted with what the process was when they
/// happened. Returns the exit status when a firing asked to stop.
fn follow_events(
    sink: &mut Drain<'_>,
    consumer: &mut Consumer,
    w: &mut Tracing<'_>,
    targets: &mut Targets,
    out: &mut Sink,
) -> io::Result<Option<i32>> {
    // A thread at one of the backend's breakpoints is dealt with while its stop is
    // unreaped (see Tree::poll); its firing is consumed with the next event's.
    let backend = &mut w.backend;
    let mut at_breakpoint =
        |pid, tid| backend.as_deref_mut().is_some_and(|b| b.trap(pid, tid) == udtrace_providers::backend::Trap::Fired);
    let Some(events) = w.follower.as_deref_mut().map(|f| f.tree.poll(&mut at_breakpoint)) else { return Ok(None) };
    let mut stop = None;
    for ev in events {
        if let Some(s) = sink.drain(consumer, w, out)? {
            stop.get_or_insert(s);
        }
        if let Event::Exited { pid, status } = ev {
            targets.exited(pid, status);
            out.ended(pid);
        }
        let (Some(f), Some(backend)) = (w.follower.as_deref_mut(), w.backend.as_deref_mut()) else { break };
        let mut world = World { backend, registry: &mut *w.registry, consumer: &mut *consumer, procs: sink.procs };
        f.handle(ev, &mut world, w.all.as_deref_mut());
    }
    Ok(stop)
}

/// Starts the next system() command queued, if none runs (see `commands`); its shell
/// is matched against the `pid*` descriptions as a new image is, before it runs.
fn start_commands(w: &mut Tracing<'_>, consumer: &mut Consumer, procs: &RefCell<Procs>, out: &mut Sink) {
    let (Some(f), Some(b), Some(a)) = (w.follower.as_deref_mut(), w.backend.as_deref_mut(), w.all.as_deref_mut())
    else {
        return;
    };
    let mut world = World { backend: b, registry: &mut *w.registry, consumer, procs };
    crate::commands::start_next(out, f, a, &mut world);
}

/// Tracing ends (exit(), the traced processes' end) while system() commands are queued
/// or run: they are waited for, held and armed as before, as system() waits; an
/// interrupt leaves those not started yet.
fn wait_commands(
    sink: &mut Drain<'_>,
    consumer: &mut Consumer,
    w: &mut Tracing<'_>,
    targets: &mut Targets,
    sfd: &SignalFd,
    out: &mut Sink,
) -> io::Result<()> {
    while out.commands_pending() {
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(10u8)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
        let interrupted = read_signals(sfd, w);
        if interrupted || w.follower.is_none() {
            return out.drop_commands();
        }
        gated(sink, consumer, w);
        sink.drain(consumer, w, out)?;
        if w.all.is_some() {
            all_events(sink, consumer, w, out)?;
        }
        follow_events(sink, consumer, w, targets, out)?;
        start_commands(w, consumer, sink.procs, out);
    }
    Ok(())
}

/// Gives up the sites another session asked for (udtrace_process::handoff): the
/// processes carrying them are stopped meanwhile, as for any change of their code.
fn hand_over(w: &mut Tracing<'_>) {
    if let (Some(f), Some(b)) = (w.follower.as_deref_mut(), w.backend.as_deref_mut()) {
        hand_over_sites(f, b);
    }
}

fn hand_over_sites(f: &mut Follower, b: &mut dyn Backend) {
    let asked = b.handoff_asked();
    if asked.is_empty() {
        return;
    }
    let paused: Vec<i32> = asked.iter().copied().filter(|&pid| f.tree.pause_others(pid)).collect();
    b.hand_over(&paused);
    for pid in asked {
        f.tree.unpause(pid);
    }
}

/// The execs the `pid*` exec gate holds (see `AllProcesses::gated`).
fn gated(sink: &Drain<'_>, consumer: &mut Consumer, w: &mut Tracing<'_>) {
    if let (Some(a), Some(backend)) = (w.all.as_deref_mut(), w.backend.as_deref_mut()) {
        let mut world = World { backend, registry: &mut *w.registry, consumer, procs: sink.procs };
        a.gated(&mut world);
    }
}

/// Processes that exec'd or loaded objects, for `pid*` descriptions: what they bring
/// is matched and armed (firings before are consumed first).
fn all_events(
    sink: &mut Drain<'_>,
    consumer: &mut Consumer,
    w: &mut Tracing<'_>,
    out: &mut dyn Output,
) -> io::Result<Option<i32>> {
    let pids = w.backend.as_deref_mut().map(|b| b.exec_notices()).unwrap_or_default();
    if pids.is_empty() {
        return Ok(None);
    }
    // Stopped first: consuming the firings can take a while.
    let held: Vec<_> =
        pids.into_iter().map(|pid| (pid, w.all.as_deref().and_then(|a| a.seize(pid, w.registry)))).collect();
    let stop = sink.drain(consumer, w, out)?;
    for (pid, brief) in held {
        let (Some(a), Some(backend)) = (w.all.as_deref_mut(), w.backend.as_deref_mut()) else { break };
        let mut world = World { backend, registry: &mut *w.registry, consumer: &mut *consumer, procs: sink.procs };
        a.look_at(pid, brief, &mut world);
    }
    Ok(stop)
}

/// Consumes the backend's records: each firing runs the clauses of its probes.
struct Drain<'p> {
    procs: &'p RefCell<Procs>,
    ustackframes: u32,
    maxframes: u32,
    /// The enabled proc probes, by name.
    proc_ids: HashMap<&'static str, u32>,
    /// The program's types: the proc provider's structs are laid out by them.
    types: &'p TypeTable,
    clocks: Clocks,
    /// exec records waiting for their path, which their outcome brings (by thread).
    pending_exec: HashMap<u32, ProcFiring>,
    /// `-x cpu`: firings on other CPUs are not traced.
    only_cpu: Option<u32>,
    /// Children the kernel follows for processes another tracer holds, with the root
    /// whose probes they fire (see [`Record::Lineage`]).
    kernel_roots: HashMap<i32, i32>,
    /// What runs where probes fire, read back into the consumer.
    firings: Firings,
    /// The last drain had records: firings are flowing.
    busy: bool,
}

impl Drain<'_> {
    /// Fires the exec records still waiting for their path (their outcome never came).
    fn flush_execs(&mut self, consumer: &mut Consumer, out: &mut dyn Output) -> io::Result<Option<i32>> {
        let mut status = None;
        for (_, f) in std::mem::take(&mut self.pending_exec) {
            if self.only_cpu.is_some_and(|c| c != f.cpu) {
                continue;
            }
            for (id, name) in enabled_probes(&f, &self.proc_ids) {
                let fx = consumer.fire(id, f.cpu, &ProcCtx::new(&f, name, self.types, self.clocks), out)?;
                status = status.or(apply(fx));
            }
        }
        Ok(status)
    }

    fn drain(&mut self, consumer: &mut Consumer, w: &mut Tracing<'_>, out: &mut dyn Output) -> io::Result<Option<i32>> {
        // The names execs gave processes, before their firings (a process that ended
        // is no longer in /proc to tell).
        if w.all.is_some() {
            for (pid, name) in w.backend.as_deref_mut().map(|b| b.exec_names()).unwrap_or_default() {
                self.procs.borrow_mut().exec_named(pid as u32, name);
            }
        }
        if self.firings.before_records() {
            self.firings.refresh(consumer, w.backend.as_deref_mut(), w.registry);
        }
        let Some(b) = w.backend.as_deref_mut() else { return Ok(None) };
        let usdt_sites = &w.registry.pid;
        // Processes that ended well before this drain: it consumes their last firings.
        let retired = self.procs.borrow_mut().take_retiring();
        let tree = w.follower.as_deref().map(|f| &f.tree);
        let (procs, ustackframes, maxframes) = (self.procs, self.ustackframes, self.maxframes);
        let (proc_ids, types, clocks, pending) = (&self.proc_ids, self.types, self.clocks, &mut self.pending_exec);
        let kernel_roots = &mut self.kernel_roots;
        let mut lineage: Vec<Lineage> = Vec::new();
        let mut result: io::Result<Option<i32>> = Ok(None);
        let only_cpu = self.only_cpu;
        let (registry, mut timeline) = (&*w.registry, w.timeline.as_mut());
        // `proc`: a proc firing, with the other process it names (the timeline's).
        let mut run = |consumer: &mut Consumer, id: u32, cpu: u32, ctx: &dyn Context, proc: Option<Option<u32>>| {
            if only_cpu.is_some_and(|c| c != cpu) {
                return;
            }
            if let Some(t) = timeline.as_deref_mut() {
                let known = crate::timeline::Known { registry, consumer, tree, procs };
                t.firing(id, ctx, proc, &known);
            }
            match consumer.fire(id, cpu, ctx, out) {
                Ok(fx) => {
                    if let (Some(s), Ok(r)) = (apply(fx), result.as_mut()) {
                        r.get_or_insert(s);
                    }
                }
                Err(e) => result = Err(e),
            }
        };
        let mut records = 0u64;
        // The root of the process whose firing came last (Lineage records change roots).
        let mut last_owner: Option<(u32, i32)> = None;
        b.consume(&mut |record| {
            records += 1;
            match record {
                // A trace trap in a process udtrace follows is udtrace's own doing (a
                // single-step to run a system call in it): no other debugger can be attached.
                Record::Proc(f)
                    if procprov::is_trace_trap(&f) && tree.is_some_and(|t| t.root_of(f.pid as i32).is_some()) => {}
                Record::Proc(f) => {
                    let mut fire = |f: &ProcFiring| {
                        for (id, name) in enabled_probes(f, proc_ids) {
                            let other = Some(crate::timeline::other_process(f));
                            run(consumer, id, f.cpu, &ProcCtx::new(f, name, types, clocks), other);
                        }
                    };
                    if let Some(thread) = procprov::exec_outcome_of(&f) {
                        if let Some(mut exec) = pending.remove(&thread) {
                            exec.string = f.string.clone().or(exec.string);
                            fire(&exec);
                        }
                    }
                    if f.hook == Hook::ExecEnter && matches!(f.string, Some(Err(_))) {
                        pending.insert(f.tid, f);
                    } else {
                        fire(&f);
                    }
                }
                Record::Profile { sample, probe_id } => {
                    let f = &sample.firing;
                    procs.borrow_mut().sampled(f.pid, f.tid, sample.comm);
                    let site = SiteTarget { probe_id, pid: 0, kind: SiteKind::Profile, offset: sample.kernel_pc };
                    let ctx = FiringCtx {
                        f,
                        site,
                        procs,
                        string_args: &[],
                        buffer_args: &[],
                        ustackframes,
                        maxframes,
                        noted: Cell::new(false),
                        types,
                        clocks,
                        usdt: None,
                    };
                    run(consumer, probe_id, f.cpu, &ctx, None);
                }
                Record::Lineage(l) => {
                    last_owner = None;
                    if let Lineage::Forked { parent, child } = l {
                        let root = kernel_roots.get(&parent).copied().unwrap_or(parent);
                        kernel_roots.insert(child, root);
                        procs.borrow_mut().inherit(child as u32, parent as u32);
                    }
                    lineage.push(l);
                }
                Record::Pid { firing: f, sites, string_args, buffer_args } => {
                    // A site shared by several roots' probes fires each only in its own tree.
                    // (The last process's, kept: runs of one process's firings look it up once.)
                    let owner = match last_owner {
                        Some((pid, owner)) if pid == f.pid => owner,
                        _ => {
                            let owner = tree
                                .and_then(|t| t.root_of(f.pid as i32))
                                .or_else(|| kernel_roots.get(&(f.pid as i32)).copied())
                                .unwrap_or(f.pid as i32);
                            last_owner = Some((f.pid, owner));
                            owner
                        }
                    };
                    for site in sites.iter().filter(|s| s.pid == owner || s.pid == 0) {
                        let usdt = match site.kind {
                            SiteKind::Usdt(_) => usdt_sites.usdt_site(site.probe_id, site.offset),
                            _ => None,
                        };
                        let ctx = FiringCtx {
                            f,
                            site: *site,
                            procs,
                            string_args,
                            buffer_args,
                            ustackframes,
                            maxframes,
                            noted: Cell::new(false),
                            types,
                            clocks,
                            usdt,
                        };
                        run(consumer, site.probe_id, f.cpu, &ctx, None);
                    }
                }
            }
        });
        self.busy = records > 0;
        // What the kernel cannot do for a child it added: per-process links (libraries
        // other processes map too), after the fact.
        for l in lineage {
            match l {
                Lineage::Forked { parent, child } => {
                    if let Err(e) = b.fork(parent, child) {
                        note!("failed to follow pid {child}: {e}");
                    }
                    if let Some(k) = w.kernel.as_mut() {
                        k.forked(parent, child);
                    }
                }
                Lineage::Exited { pid } => {
                    if let Some(k) = w.kernel.as_mut() {
                        k.exited(pid);
                    }
                    self.kernel_roots.remove(&pid);
                    b.exit(pid);
                    self.procs.borrow_mut().retire(pid as u32);
                }
                Lineage::Execed { pid } | Lineage::Loaded { pid } => {
                    let root = self.kernel_roots.get(&pid).copied().unwrap_or(pid);
                    if let Some(k) = w.kernel.as_mut() {
                        let mut world =
                            World { backend: &mut *b, registry: &mut *w.registry, consumer, procs: self.procs };
                        match l {
                            Lineage::Execed { .. } => k.exec(root, pid, &mut world),
                            _ => k.loaded(root, pid, &mut world),
                        }
                    }
                }
            }
        }
        self.procs.borrow_mut().forget(&retired);
        if let Some(f) = w.follower.as_deref_mut() {
            retired.iter().for_each(|&p| f.tree.forget(p as i32));
        }
        out.flush()?;
        result
    }

    /// Whether a child the kernel follows still runs (its end may be a record lost in
    /// a full ring: /proc tells too). The entries stay: records of a child that ended
    /// may still be in the ring, and are owned through them.
    fn kernel_children_run(&self) -> bool {
        self.kernel_roots.keys().any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    }
}

/// The enabled probes a proc record fires, in order: (id, name).
fn enabled_probes(f: &ProcFiring, ids: &HashMap<&'static str, u32>) -> Vec<(u32, &'static str)> {
    procprov::fired(f).into_iter().filter_map(|name| ids.get(name).map(|&id| (id, name))).collect()
}

/// The C library's local time, for `%Y` and `%T` as dtrace prints them.
fn local_time(secs: i64) -> Option<udtrace_runtime::format::time::Tm> {
    let t = udtrace_sys::time::localtime(secs)?;
    Some(udtrace_runtime::format::time::Tm {
        year: t.year,
        mon: t.mon as usize,
        mday: i64::from(t.mday),
        // The formatter counts weekdays from Thursday, the epoch's.
        wday: ((t.wday + 3) % 7) as usize,
        hour: i64::from(t.hour),
        min: i64::from(t.min),
        sec: i64::from(t.sec),
        zone: t.zone,
    })
}

/// The consumer's drop notices (speculations), as dtrace's status handling prints them.
fn report_consumer_drops(consumer: &mut Consumer) {
    for n in consumer.drop_notes() {
        note!("{n}");
    }
}

/// dtrace's drop notice: `N drops on CPU C` (a full principal buffer: `-x droptags`
/// tags it `[DTRACEDROP_PRINCIPAL]`, as dt_handle_cpudrop does), and the drop for
/// the output format.
fn report_drops(b: &mut dyn Backend, consumer: &mut Consumer) {
    let tag = if consumer.settings().droptags { "[DTRACEDROP_PRINCIPAL] " } else { "" };
    for (cpu, n) in b.new_drops() {
        let msg = format!("{n} drop{} on CPU {cpu}", if n == 1 { "" } else { "s" });
        note!("{tag}{msg}");
        consumer.note_drop(&udtrace_runtime::oformat::Drop {
            kind: "PRINCIPAL",
            cpu: Some(cpu as u32),
            count: n,
            msg: &msg,
        });
    }
}

fn clock_ns(c: nix::time::ClockId) -> i64 {
    nix::time::clock_gettime(c).map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec()).unwrap_or(0)
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now, in ns.
fn wall_offset() -> i64 {
    use nix::time::ClockId;
    clock_ns(ClockId::CLOCK_REALTIME) - clock_ns(ClockId::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME − CLOCK_BOOTTIME now, in ns (tasks' start times count from boot).
fn boot_offset() -> i64 {
    use nix::time::ClockId;
    clock_ns(ClockId::CLOCK_REALTIME) - clock_ns(ClockId::CLOCK_BOOTTIME)
}

/// Applies a firing's effects that concern the session; returns the exit status when
/// the program asked to stop.
#[inline]
fn apply(fx: &Effects) -> Option<i32> {
    // (Most firings have nothing to report: no call to loop over nothing.)
    if fx.errors.is_empty() && fx.signals.is_empty() {
        return fx.exit;
    }
    apply_effects(fx)
}

/// [`apply`] of a firing with errors or signals.
#[inline(never)]
fn apply_effects(fx: &Effects) -> Option<i32> {
    for e in &fx.errors {
        note!("{e}");
    }
    // raise() and stop(): the firing has already happened, so the signal comes a
    // little later than in DTrace, which sends it from the probe.
    for &(pid, sig) in &fx.signals {
        if let Ok(sig) = Signal::try_from(sig) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
    // setopt() requests were applied by the consumer as it ran them.
    fx.exit
}

#[cfg(test)]
mod tests {
    use super::exit_notice_delay;
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn exit_waits_for_the_next_slow_status_check() {
        let at = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(exit_notice_delay(10 * SEC, SEC, at(7)), Duration::from_secs(3));
        assert_eq!(exit_notice_delay(10 * SEC, SEC, at(10)), Duration::ZERO);
        assert_eq!(exit_notice_delay(10 * SEC, SEC, None), Duration::ZERO);
        assert_eq!(exit_notice_delay(SEC, SEC, at(7)), Duration::ZERO);
    }

    #[test]
    fn exit_waits_one_slow_buffer_switch() {
        assert_eq!(exit_notice_delay(SEC, 16 * SEC, None), Duration::from_secs(16));
        assert_eq!(exit_notice_delay(SEC, SEC / 10, None), Duration::ZERO);
    }
}
