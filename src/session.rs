//! One udtrace run: compile, report matches, fire BEGIN, drive timers and signals
//! until `exit()`, a signal or the end of the traced processes, fire END, print what
//! remains. Exit status as dtrace's: the `exit()` value, 1 on failure.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use udtrace_lang::macros::MacroArgs;
use udtrace_runtime::consumer::Settings;
use udtrace_runtime::{Consumer, Effects, Probe};

use crate::cli::{self, Cli, Mode};
use crate::compile::{self, io_reason, Compiled};
use crate::list;
use crate::probes::{self, Registry, TimerKind};
use crate::backend::{self, Bpf};
use crate::firing::{FiringCtx, Procs};
use crate::pidprov::PidProbe;
use crate::selfctx::SelfContext;
use std::cell::RefCell;
use std::collections::HashSet;
use udtrace_bpf::ringbuf::RingBufReader;
use udtrace_lang::capture::{self, CapturePlan};
use udtrace_target::control::Target;

pub const EXIT_FAILURE: i32 = 1;

/// How often firings are read from the ring buffer when it does not fill up.
const DRAIN_INTERVAL: Duration = Duration::from_millis(10);

fn fail(msg: &str) -> i32 {
    warn!("udtrace: {msg}");
    EXIT_FAILURE
}

/// Processes given with `-c`/`-p`, held until tracing starts; udtrace stops when all
/// have exited.
struct Targets {
    list: Vec<Target>,
    /// Which have been reported as exited.
    gone: Vec<bool>,
}

impl Targets {
    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    fn first_pid(&self) -> Option<i64> {
        self.list.first().map(|t| i64::from(t.pid))
    }
    fn release(&mut self) {
        self.list.iter_mut().for_each(Target::release);
    }
    /// Ends tracing of every target: created ones still running are killed, grabbed
    /// ones released (dtrace's behaviour).
    fn finish(&mut self) {
        self.list.iter_mut().for_each(Target::finish);
    }
    /// Reports newly exited targets as dtrace's prochandler does; true when all are gone.
    fn reap(&mut self, quiet: bool) -> bool {
        for (t, gone) in self.list.iter_mut().zip(self.gone.iter_mut()) {
            if *gone || !t.has_exited() {
                continue;
            }
            *gone = true;
            if quiet {
                continue;
            }
            let pid = t.pid;
            match t.exit_status() {
                Some(st) if st.signal().is_some() => {
                    let sig = st.signal().unwrap_or(0);
                    let name = Signal::try_from(sig).map(|s| s.as_str().to_string()).unwrap_or_else(|_| format!("signal {sig}"));
                    warn!("udtrace: pid {pid} terminated by {name}");
                }
                Some(st) if st.code().unwrap_or(0) != 0 => {
                    warn!("udtrace: pid {pid} exited with status {}", st.code().unwrap_or(0));
                }
                _ => warn!("udtrace: pid {pid} has exited"),
            }
        }
        self.gone.iter().all(|g| *g)
    }
}

fn start_targets(cli: &Cli) -> Result<Targets, String> {
    let mut t = Targets { list: Vec::new(), gone: Vec::new() };
    for cmd in &cli.commands {
        let argv = cli::split_command(cmd);
        match Target::create(&argv) {
            Ok(target) => t.list.push(target),
            Err(e) => {
                t.finish();
                return Err(e.to_string());
            }
        }
    }
    for &pid in &cli.pids {
        match Target::grab(pid) {
            Ok(target) => t.list.push(target),
            Err(e) => {
                t.finish();
                return Err(e.to_string());
            }
        }
    }
    t.gone = vec![false; t.list.len()];
    Ok(t)
}

fn macro_args(cli: &Cli, targets: &Targets, me: &SelfContext) -> MacroArgs {
    let argv = match cli.programs.first() {
        Some(p) => cli.macro_argv(p),
        None => std::iter::once(cli.argv0.clone()).chain(cli.macro_args.iter().cloned()).collect(),
    };
    let mut m = MacroArgs::new(argv);
    m.defaultargs = cli.options.defaultargs;
    m.argref = cli.options.argref;
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

pub fn run(cli: Cli) -> i32 {
    match cli.mode {
        Mode::Version => {
            out!("{}\n", cli::version_line());
            return 0;
        }
        Mode::Help => {
            out!("{}", cli::help_text());
            return 0;
        }
        _ => {}
    }
    // Signals are taken through a signalfd so that the loop can wait for timers,
    // signals and the end of traced processes in one poll.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    if let Err(e) = mask.thread_block() {
        return fail(&format!("failed to block signals: {e}"));
    }
    let sfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(s) => s,
        Err(e) => return fail(&format!("failed to create signalfd: {e}")),
    };

    let me = SelfContext::new();
    let mut targets = match start_targets(&cli) {
        Ok(t) => t,
        Err(m) => return fail(&m),
    };
    let macros = macro_args(&cli, &targets, &me);
    let mut registry = Registry::default();
    let compiled = match compile::compile(&cli, &macros, &mut registry) {
        Ok(c) => c,
        Err(f) => {
            targets.finish();
            return fail(&f.0);
        }
    };
    if cli.mode == Mode::List {
        let status = list::list(&cli, &compiled, &mut registry);
        targets.finish();
        return status;
    }
    if cli.exit_after_compile {
        targets.finish();
        return 0;
    }
    let quiet = compiled.options.quiet;
    if !quiet {
        for s in &compiled.sources {
            let plural = if s.matched == 1 { "" } else { "s" };
            warn!("udtrace: {} '{}' matched {} probe{plural}", s.kind, s.name, s.matched);
        }
    }
    let total: usize = compiled.sources.iter().map(|s| s.matched).sum();
    if total == 0 && !compiled.options.zdefs {
        targets.finish();
        let what = if compiled.sources.is_empty() { "specified" } else { "matched" };
        return fail(&format!("no probes {what}"));
    }
    // dtrace's notice once tracing starts with -w (or `destructive` set).
    if compiled.options.destructive && !quiet {
        warn!("udtrace: allowing destructive actions");
    }
    let backend = match arm(&compiled, &registry) {
        Ok(b) => b,
        Err(m) => {
            targets.finish();
            return fail(&m);
        }
    };
    let mut out: Box<dyn Write> = match &cli.output {
        Some(path) => match OpenOptions::new().create(true).append(true).open(path) {
            Ok(f) => Box::new(io::BufWriter::new(f)),
            Err(e) => {
                targets.finish();
                return fail(&format!("failed to open output file '{}': {}", path.display(), io_reason(&e)));
            }
        },
        None => Box::new(io::BufWriter::new(io::stdout())),
    };
    let result = trace(&compiled, &me, &mut targets, &sfd, backend.as_ref(), &registry, out.as_mut());
    targets.finish();
    match result {
        Ok(status) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => fail(&format!("failed to write output: {}", io_reason(&e))),
    }
}

/// Arms the enabled pid probes, if any, and starts tracing their processes.
fn arm(c: &Compiled, registry: &Registry) -> Result<Option<Bpf>, String> {
    let enabled: HashSet<u32> = c.ecbs.iter().filter(|e| e.probe.provider.starts_with("pid")).map(|e| e.probe.id).collect();
    if enabled.is_empty() {
        return Ok(None);
    }
    let probes: Vec<&PidProbe> = registry.pid.probes().iter().filter(|p| enabled.contains(&p.probe.id)).collect();
    let mut plan = CapturePlan::default();
    for e in c.ecbs.iter().filter(|e| enabled.contains(&e.probe.id)) {
        plan.merge(&capture::plan(&c.program.clauses[e.clause]));
    }
    let mut bpf = Bpf::arm(&probes, &plan, c.options.bufsize, c.options.strsize.min(u64::from(u32::MAX)) as u32)?;
    // Probes with sites the kernel refuses (checked up front, or refused anyway).
    let mut unarmed: Vec<&PidProbe> = probes.iter().filter(|p| !p.unprobeable.is_empty()).copied().collect();
    for p in backend::refused_probes(&bpf.refused, &probes) {
        if !unarmed.iter().any(|u| u.probe.id == p.probe.id) {
            unarmed.push(p);
        }
    }
    for p in unarmed.iter().take(5) {
        let q = &p.probe;
        warn!(
            "udtrace: failed to enable {}:{}:{}:{}: the kernel cannot place a uprobe on its instruction{}",
            q.provider,
            q.module,
            q.function,
            q.name,
            if p.sites.is_empty() { "" } else { " at some of its sites" }
        );
    }
    if unarmed.len() > 5 {
        warn!("udtrace: ... and {} more probes on instructions the kernel cannot probe", unarmed.len() - 5);
    }
    let mut pids: Vec<i32> = probes.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        bpf.trace_pid(pid)?;
    }
    Ok(Some(bpf))
}

fn settings(c: &Compiled) -> Settings {
    let o = &c.options;
    Settings {
        quiet: o.quiet,
        strsize: o.strsize.max(1) as usize,
        nspec: o.nspec.max(1) as usize,
        destructive: o.destructive,
        sort: udtrace_runtime::output::SortOptions {
            key: o.aggsortkey,
            rev: o.aggsortrev,
            pos: o.aggsortpos as usize,
            keypos: o.aggsortkeypos as usize,
        },
        tz_offset: 0,
    }
}

/// A timer probe enabled by the program, with its next deadline.
struct Timer {
    probe: Rc<Probe>,
    kind: TimerKind,
    period: Duration,
    next: Instant,
}

fn timers(c: &Compiled, start: Instant) -> Vec<Timer> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for e in &c.ecbs {
        if e.probe.provider != "profile" || seen.contains(&e.probe.id) {
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
    backend: Option<&Bpf>,
    registry: &Registry,
    out: &mut dyn Write,
) -> io::Result<i32> {
    let seed = me.seed();
    let mut consumer = Consumer::new(Rc::clone(&c.program), settings(c), c.ecbs.clone(), seed);
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u32;
    let mut status = 0;
    let mut done = false;

    let fire = |consumer: &mut Consumer, id: u32, cpu: u32, out: &mut dyn Write| -> io::Result<Option<i32>> {
        let fx = consumer.fire(id, cpu, me, out)?;
        out.flush()?;
        Ok(apply(&fx))
    };

    // Remember traced processes while they are held: some exit before their firings
    // are consumed.
    let procs = RefCell::new(Procs::new(wall_offset(), registry.pid.objects().clone()));
    if let Some(b) = backend {
        for pid in &b.pids {
            procs.borrow_mut().remember(*pid as u32);
        }
    }
    if let Some(s) = fire(&mut consumer, probes::BEGIN, me.cpu(), out)? {
        status = s;
        done = true;
    }
    // As dtrace: BEGIN has fired and probes are armed; now the processes may run.
    targets.release();
    let mut timers = timers(c, Instant::now());

    let mut reader = match backend {
        Some(b) => Some(RingBufReader::new(&b.maps.ring).map_err(|e| io::Error::other(e.to_string()))?),
        None => None,
    };
    let mut drops_seen = Vec::new();
    let mut last_drop_check = Instant::now();
    let ustackframes = c.options.ustackframes.min(u64::from(u32::MAX)) as u32;
    let drain = |consumer: &mut Consumer, reader: &mut Option<RingBufReader>, out: &mut dyn Write| -> io::Result<Option<i32>> {
        let (Some(b), Some(r)) = (backend, reader.as_mut()) else { return Ok(None) };
        let mut result: io::Result<Option<i32>> = Ok(None);
        r.consume(|bytes| {
            let Ok(f) = b.layout.parse(bytes) else { return };
            let Some(sites) = b.cookies.get(f.cookie as usize) else { return };
            for site in sites.iter().filter(|s| s.pid as u32 == f.pid) {
                let ctx = FiringCtx { f: &f, site: *site, procs: &procs, string_args: &b.string_args, ustackframes };
                match consumer.fire(site.probe_id, f.cpu, &ctx, out) {
                    Ok(fx) => {
                        if let Some(s) = apply(&fx) {
                            if let Ok(r) = result.as_mut() {
                                r.get_or_insert(s);
                            }
                        }
                    }
                    Err(e) => result = Err(e),
                }
            }
        });
        out.flush()?;
        result
    };
    while !done {
        let now = Instant::now();
        let next = timers.iter().map(|t| t.next).min();
        let mut wait = next.map(|n| n.saturating_duration_since(now));
        if !targets.is_empty() {
            // Process exit is noticed by polling; 50 ms keeps the tail short.
            wait = Some(wait.map_or(Duration::from_millis(50), |w| w.min(Duration::from_millis(50))));
        }
        if backend.is_some() {
            // Firings do not wake us (see the uprobe program): drain on a timer.
            wait = Some(wait.map_or(DRAIN_INTERVAL, |w| w.min(DRAIN_INTERVAL)));
        }
        let timeout = match wait {
            Some(w) => PollTimeout::try_from(w.as_millis().min(60_000) as i32 + i32::from(w.subsec_nanos() % 1_000_000 != 0))
                .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        let polled = match backend {
            Some(b) => {
                let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN), PollFd::new(b.maps.ring.as_fd(), PollFlags::POLLIN)];
                poll(&mut fds, timeout)
            }
            None => poll(&mut [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)], timeout),
        };
        match polled {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
        if let Some(s) = drain(&mut consumer, &mut reader, out)? {
            status = s;
            break;
        }
        if let Some(b) = backend {
            if last_drop_check.elapsed() >= Duration::from_secs(1) {
                report_drops(b, &mut drops_seen);
                last_drop_check = Instant::now();
            }
        }
        if let Ok(Some(_)) = sfd.read_signal() {
            // dtrace prints a newline on the first interrupt, even when quiet.
            out.write_all(b"\n")?;
            break;
        }
        let now = Instant::now();
        for t in timers.iter_mut() {
            if t.next > now {
                continue;
            }
            let cpus = if t.kind == TimerKind::Profile { 0..ncpu } else { me.cpu()..me.cpu() + 1 };
            for cpu in cpus {
                if let Some(s) = fire(&mut consumer, t.probe.id, cpu, out)? {
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
        if !targets.is_empty() && targets.reap(c.options.quiet) {
            break;
        }
    }
    // Firings still in the ring happened before the end: they come before END.
    if let Some(s) = drain(&mut consumer, &mut reader, out)? {
        status = s;
    }
    if let Some(b) = backend {
        report_drops(b, &mut drops_seen);
    }
    if let Some(s) = fire(&mut consumer, probes::END, me.cpu(), out)? {
        status = s;
    }
    consumer.finish(out)?;
    out.flush()?;
    Ok(status)
}

/// dtrace's drop notice: `N drops on CPU C`.
fn report_drops(b: &Bpf, seen: &mut Vec<u64>) {
    for (cpu, n) in b.new_drops(seen) {
        warn!("udtrace: {n} drop{} on CPU {cpu}", if n == 1 { "" } else { "s" });
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now, in ns.
fn wall_offset() -> i64 {
    use nix::time::{clock_gettime, ClockId};
    let ns = |c| clock_gettime(c).map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec()).unwrap_or(0);
    ns(ClockId::CLOCK_REALTIME) - ns(ClockId::CLOCK_MONOTONIC)
}

/// Applies a firing's effects that concern the session; returns the exit status when
/// the program asked to stop.
fn apply(fx: &Effects) -> Option<i32> {
    for e in &fx.errors {
        warn!("udtrace: {e}");
    }
    // setopt() requests were applied by the consumer as it ran them.
    fx.exit
}
