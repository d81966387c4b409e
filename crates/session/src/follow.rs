//! Following `-c`/`-p` process trees: what udtrace does at each ptrace event of a
//! [`Tree`] before the process may go on. A child gets its parent's probes while it is
//! held at its fork; after exec, and whenever the loader has mapped new objects, the
//! program's `pid<root>` descriptions are matched against what is new, the clauses are
//! enabled on the probes found and the sites armed, and only then does the process run.
//! A process that was already a descendant of a `-p` process when it was grabbed is
//! taken on as after an exec.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;

use nix::sys::signal::Signal;

use udtrace_lang::ast::ProbeDesc;
use udtrace_lang::capture;
use udtrace_messages::{debug, note};
use udtrace_process::control::{ControlError, Target};
use udtrace_process::follow::{Brief, Event, Tree};
use udtrace_process::gate::ExecGate;
use udtrace_process::procfs::{self, LoadedObject};
use udtrace_providers::backend::{Backend, ProbeOps, ProbeWork, Trap, HOLD_SIGNALS};
use udtrace_providers::pid::{
    is_all_processes, is_all_usdt, is_pid_provider, is_process_provider, named_process, PidProbe,
};
use udtrace_providers::pid_context::Procs;
use udtrace_providers::registry::Registry;
use udtrace_runtime::{Consumer, Probe};

use crate::compile::{first_statement, Compiled};

/// How long a `pid*` process with a new image may be held waiting for its loader.
const BRIEF_HOLD: std::time::Duration = std::time::Duration::from_millis(100);

/// How long the exec gate holds an exec for the main thread, busy elsewhere, before it
/// lets it go unseized (to be seized when its exec is read of, as without the gate).
const GATE_LIMIT: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a process the gate let go may take to reach its exec stop.
const EXEC_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

pub struct Follower {
    pub tree: Tree,
    rematcher: Rematcher,
    /// Objects already matched in each process, by their path there.
    seen: HashMap<i32, HashSet<String>>,
}

/// The pid descriptions matched again in objects that appear while tracing, and the
/// clauses enabled on what they find.
struct Rematcher {
    /// (clause, DTrace's statement number, description, owner): the root it names,
    /// or 0 for `pid*`.
    descs: Vec<(usize, usize, ProbeDesc, i32)>,
    /// (description, file, is the executable) → its probes there: matching depends on
    /// nothing else, and a forking server execs the same few images again and again.
    matched: HashMap<(usize, PathBuf, bool), Vec<Rc<Probe>>>,
    /// Per clause, its stash ops; what the probes found get.
    clause_ops: Vec<u64>,
    probe_ops: ProbeOps,
    /// What the probes found run at the firing.
    program: Rc<udtrace_lang::ir::CheckedProgram>,
    firing: Rc<udtrace_lang::firing::FiringPlan>,
    work: ProbeWork,
}

impl Rematcher {
    fn new(descs: Vec<(usize, usize, ProbeDesc, i32)>, c: &Compiled) -> Rematcher {
        Rematcher {
            descs,
            matched: HashMap::new(),
            clause_ops: c.stash.clause_ops.clone(),
            probe_ops: c.probe_ops.clone(),
            program: Rc::clone(&c.program),
            firing: Rc::clone(&c.firing),
            work: c.work.clone(),
        }
    }

    /// The probes of `owner`'s descriptions in `objects` of process `pid`, with their
    /// clauses enabled.
    fn probes_in(
        &mut self,
        owner: i32,
        pid: i32,
        objects: &[LoadedObject],
        registry: &mut Registry,
        consumer: &mut Consumer,
    ) -> Vec<Rc<Probe>> {
        let mut found: Vec<Rc<Probe>> = Vec::new();
        for obj in objects {
            let file = procfs::host_path(pid, &obj.path);
            for (i, (clause, stmt, d, _)) in self.descs.iter().enumerate().filter(|(_, d)| d.3 == owner) {
                let probes = self
                    .matched
                    .entry((i, file.clone(), obj.is_main))
                    .or_insert_with(|| registry.rematch(d, owner, pid, std::slice::from_ref(obj)));
                for probe in probes.iter() {
                    self.probe_ops.add(probe.id, self.clause_ops.get(*clause).copied().unwrap_or(0));
                    if !consumer.is_enabled_clause(probe.id, *clause) {
                        let usdt = registry.pid.usdt_site_args(probe.id);
                        crate::compile::add_work(
                            &self.program,
                            &self.firing,
                            &self.work,
                            *clause,
                            probe,
                            usdt.as_deref(),
                        );
                    }
                    consumer.enable(*clause, *stmt, Rc::clone(probe));
                    found.push(Rc::clone(probe));
                }
            }
        }
        found
    }
}

/// The pid probes (with their sites) behind `found`.
fn pid_probes<'r>(registry: &'r Registry, found: &[Rc<Probe>]) -> Vec<&'r PidProbe> {
    let ids: HashSet<u32> = found.iter().map(|p| p.id).collect();
    registry.pid.probes().iter().filter(|p| ids.contains(&p.probe.id)).collect()
}

/// `pid*` descriptions: every process on the machine. Objects already armed are armed
/// for every process; processes that exec or load objects are reported through the
/// backend's event ring, and what they bring is matched and armed then.
pub struct AllProcesses {
    rematcher: Rematcher,
    /// Holds the processes no one traces that exec an image never seen (root only).
    gate: Option<ExecGate>,
}

impl AllProcesses {
    pub fn new(c: &Compiled) -> Option<AllProcesses> {
        let descs: Vec<(usize, usize, ProbeDesc, i32)> = c
            .program
            .clauses
            .iter()
            .enumerate()
            .flat_map(|(ci, cl)| {
                let first = first_statement(&c.program, ci);
                cl.probes
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| is_all_processes(&d.provider) || is_all_usdt(&d.provider))
                    .map(move |(di, d)| (ci, first + di, d.clone(), 0))
            })
            .collect();
        (!descs.is_empty()).then(|| AllProcesses { rematcher: Rematcher::new(descs, c), gate: None })
    }

    /// Arms what the descriptions matched at start, and the loader hooks of every
    /// process (to hear of the objects they load).
    pub fn start(&self, c: &Compiled, backend: &mut dyn Backend, registry: &mut Registry) -> Result<(), String> {
        let ids: HashSet<u32> = c.ecbs.iter().map(|e| e.probe.id).collect();
        let probes: Vec<&PidProbe> =
            registry.pid.probes().iter().filter(|p| p.pid == 0 && ids.contains(&p.probe.id)).collect();
        backend.arm_all(&probes)?;
        let mut loaders = HashSet::new();
        for pid in procfs::all_pids().unwrap_or_default() {
            let objects = mapped(pid);
            locate_errno(pid, &objects, backend, registry);
            if let Some(ld) = procfs::loader_of(pid, &objects) {
                if loaders.insert(procfs::host_path(pid, &ld.path)) {
                    arm_hook(pid, &objects, backend, registry)?;
                }
            }
        }
        Ok(())
    }

    /// Opens the exec gate, with every file seen so far let through; where it cannot be
    /// opened (not root, no fanotify), says so once: processes udtrace does not follow
    /// are then seized when udtrace reads of their exec.
    pub fn open_gate(&mut self, registry: &Registry) {
        match ExecGate::open(GATE_LIMIT) {
            Ok(g) => {
                debug!("exec gate open on {} file systems", g.filesystems);
                for (path, _) in &registry.pid.all_files {
                    g.ignore(path);
                }
                self.gate = Some(g);
            }
            Err(e) => note!(
                "no exec gate ({e}): a process udtrace did not start that execs a new image may run before its \
                 probes are armed"
            ),
        }
    }

    /// Closes the exec gate: execs waiting there go on.
    pub fn close_gate(&mut self) {
        self.gate = None;
    }

    /// What the main loop polls for the exec gate.
    pub fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.gate.as_ref().map(|g| g.wait_fd())
    }

    /// The execs the gate holds: each process with an image never seen is seized
    /// inside its execve, let go on to its exec stop, and looked at from there (see
    /// [`AllProcesses::look_at`]) before any of its new image's code runs.
    pub fn gated(&mut self, w: &mut World<'_>) {
        let Some(execs) = self.gate.as_ref().map(|g| g.take()) else { return };
        for exec in execs {
            let path = exec.path.clone();
            let seen = w.registry.pid.all_files.contains(&(path.clone(), true));
            let brief = if seen { None } else { Brief::seize_exec(exec.tid) };
            let pid = exec.tid;
            if let Some(g) = &self.gate {
                g.go(exec);
            }
            if let Some(mut brief) = brief {
                if brief.wait_exec(EXEC_LIMIT) {
                    self.look_at(pid, Some(brief), w);
                } else {
                    debug!("pid {pid}: no exec stop after the gate");
                    brief.release();
                }
            }
            // Armed (or nothing to arm): its next execs need not wait.
            if w.registry.pid.all_files.contains(&(path.clone(), true)) {
                if let Some(g) = &self.gate {
                    g.ignore(&path);
                }
            }
        }
    }

    /// Seizes `pid`, which exec'd or loaded objects, when it runs an image never seen:
    /// done as soon as the notice is read, before the firings recorded meanwhile are
    /// consumed, so that it is stopped as early as can be (see [`AllProcesses::look_at`]).
    pub fn seize(&self, pid: i32, registry: &Registry) -> Option<Brief> {
        let exe = procfs::exe_path(pid).ok().map(|e| procfs::host_path(pid, &e))?;
        if registry.pid.all_files.contains(&(exe, true)) {
            return None;
        }
        Brief::seize(pid)
    }

    /// Process `pid` exec'd or loaded objects: matches and arms what is new. A process
    /// that exec'd an image never seen is held meanwhile (`brief`, from
    /// [`AllProcesses::seize`]: its loader is still mapping libraries, unless udtrace
    /// was slow to hear of it), and once more at the loader hook, so that the image and
    /// its libraries are armed before their code runs.
    pub fn look_at(&mut self, pid: i32, brief: Option<Brief>, w: &mut World<'_>) {
        let Some(mut brief) = brief else {
            self.match_new(pid, w);
            return;
        };
        self.match_new(pid, w);
        if w.backend.trace_pid(pid).is_ok() {
            if brief.run_until(&hold_signals(), BRIEF_HOLD) {
                w.backend.take_hold(pid);
                self.match_new(pid, w);
            }
            w.backend.untrace(pid);
        }
        brief.release();
    }

    /// Matches and arms the objects of `pid` no process had before.
    pub fn match_new(&mut self, pid: i32, w: &mut World<'_>) {
        let objects = mapped(pid);
        let all_files = &mut w.registry.pid.all_files;
        let new: Vec<LoadedObject> = objects
            .iter()
            .filter(|o| !o.is_vdso && all_files.insert((procfs::host_path(pid, &o.path), o.is_main)))
            .cloned()
            .collect();
        if new.is_empty() {
            remember(pid, objects, w);
            return;
        }
        let found = self.rematcher.probes_in(0, pid, &new, w.registry, w.consumer);
        if !found.is_empty() {
            if let Err(e) = w.backend.arm_all(&pid_probes(w.registry, &found)) {
                note!("pid {pid}: {e}");
            }
            w.procs.borrow_mut().share(w.registry.pid.objects());
        }
        if let Err(e) = arm_hook(pid, &objects, w.backend, w.registry) {
            note!("pid {pid}: {e}");
        }
        remember(pid, objects, w);
    }
}

/// Keeps what udtrace needs of a process it has just looked at (held): what it has
/// mapped, for its firings' context, and where its threads keep errno, for the kernel.
pub fn remember(pid: i32, objects: Vec<LoadedObject>, w: &mut World<'_>) {
    locate_errno(pid, &objects, w.backend, w.registry);
    w.procs.borrow_mut().remember(pid as u32, objects);
}

/// Tells the kernel where process `pid`'s threads keep errno, when firings read it.
pub fn locate_errno(pid: i32, objects: &[LoadedObject], backend: &mut dyn Backend, registry: &mut Registry) {
    if !backend.reads_errno() {
        return;
    }
    backend.set_errno_tls(pid, registry.pid.errno_tls(pid, objects));
}

/// What a followed event may change besides the tree.
pub struct World<'a> {
    pub backend: &'a mut dyn Backend,
    pub registry: &'a mut Registry,
    pub consumer: &'a mut Consumer,
    pub procs: &'a RefCell<Procs>,
}

fn hold_signals() -> Vec<Signal> {
    HOLD_SIGNALS.iter().filter_map(|&s| Signal::try_from(s).ok()).collect()
}

/// The program's descriptions of the `targets` processes: (clause, statement,
/// description, root).
fn descs_of(c: &Compiled, targets: &[i32]) -> Vec<(usize, usize, ProbeDesc, i32)> {
    let mut descs = Vec::new();
    for (ci, clause) in c.program.clauses.iter().enumerate() {
        let first = first_statement(&c.program, ci);
        for (di, d) in clause.probes.iter().enumerate() {
            let named = named_process(&d.provider);
            if let Some(root) = named.filter(|p| targets.contains(p)) {
                descs.push((ci, first + di, d.clone(), root));
            }
        }
    }
    descs
}

/// Of `pids`, those the program's pid descriptions name: the roots whose trees are
/// followed.
pub fn described(c: &Compiled, pids: &[i32]) -> Vec<i32> {
    let named: HashSet<i32> = descs_of(c, pids).into_iter().map(|d| d.3).collect();
    pids.iter().copied().filter(|p| named.contains(p)).collect()
}

/// Follows processes another tracer holds, without a tree: the kernel tells of their
/// children, new images and objects their loader mapped (`Record::Lineage`), and what
/// is new is matched and armed when udtrace reads that (its first firings are missed).
pub struct KernelFollower {
    rematcher: Rematcher,
    /// Objects already matched in each process, by their path there.
    seen: HashMap<i32, HashSet<String>>,
}

impl KernelFollower {
    pub fn new(c: &Compiled, roots: &[i32]) -> Option<KernelFollower> {
        let descs = descs_of(c, roots);
        (!descs.is_empty()).then(|| KernelFollower { rematcher: Rematcher::new(descs, c), seen: HashMap::new() })
    }

    /// Takes on `pid`, whose objects were matched at compile time: its loader hook goes
    /// in (it tells of objects loaded later, and never stops the process).
    pub fn adopt(&mut self, pid: i32, backend: &mut dyn Backend, registry: &mut Registry) -> Result<(), String> {
        let objects = mapped(pid);
        self.seen.insert(pid, objects.iter().map(|o| o.path.clone()).collect());
        arm_hook(pid, &objects, backend, registry).map(|_| ())
    }

    /// `child` was forked by `parent`: it has its parent's objects, and their probes.
    pub fn forked(&mut self, parent: i32, child: i32) {
        let seen = self.seen.get(&parent).cloned().unwrap_or_default();
        self.seen.insert(child, seen);
    }

    /// Process `pid` ended.
    pub fn exited(&mut self, pid: i32) {
        self.seen.remove(&pid);
    }

    /// Process `pid`, of `root`'s tree, loaded (or unloaded) objects.
    pub fn loaded(&mut self, root: i32, pid: i32, w: &mut World<'_>) {
        let objects = mapped(pid);
        let new = unseen(pid, self.seen.entry(pid).or_default(), &objects, w.backend);
        self.arm_new(root, pid, objects, &new, w);
    }

    /// Process `pid`, of `root`'s tree, runs a new image.
    pub fn exec(&mut self, root: i32, pid: i32, w: &mut World<'_>) {
        w.backend.exec(pid);
        self.arm_image(root, pid, mapped(pid), w);
    }

    /// Takes on `pid`, which was a descendant of `root` when `root` was grabbed: as
    /// after an exec, `root`'s descriptions are matched against all it maps, and its
    /// loader hook goes in.
    pub fn adopt_descendant(&mut self, root: i32, pid: i32, w: &mut World<'_>) {
        let objects = mapped(pid);
        if let Err(e) = arm_hook(pid, &objects, w.backend, w.registry) {
            note!("pid {pid}: {e}: objects it loads later are not armed");
        }
        self.arm_image(root, pid, objects, w);
    }

    /// Matches `root`'s descriptions against every object of `pid` (`objects`).
    fn arm_image(&mut self, root: i32, pid: i32, objects: Vec<LoadedObject>, w: &mut World<'_>) {
        let new: Vec<LoadedObject> = objects.iter().filter(|o| !o.is_vdso).cloned().collect();
        self.seen.insert(pid, new.iter().map(|o| o.path.clone()).collect());
        self.arm_new(root, pid, objects, &new, w);
    }

    /// Matches `root`'s descriptions in `new` objects of `pid` and arms what they find;
    /// `objects` (every one mapped) are remembered for the firings to come.
    fn arm_new(&mut self, root: i32, pid: i32, objects: Vec<LoadedObject>, new: &[LoadedObject], w: &mut World<'_>) {
        let found = self.rematcher.probes_in(root, pid, new, w.registry, w.consumer);
        if !found.is_empty() {
            if let Err(e) = w.backend.arm(pid, &pid_probes(w.registry, &found)) {
                note!("pid {pid}: {e}");
            }
            w.procs.borrow_mut().share(w.registry.pid.objects());
        }
        remember(pid, objects, w);
    }
}

impl Follower {
    /// A follower when the program has pid descriptions for the targets' processes, or
    /// `pid*`/`provider*` ones (`all`): the processes udtrace starts or grabs are then
    /// held at each new image and object until those are matched and armed.
    pub fn new(c: &Compiled, targets: &[i32], all: bool) -> Option<Follower> {
        let descs = descs_of(c, targets);
        if descs.is_empty() && !all {
            return None;
        }
        // Firings whose clauses read memory not captured with them are consumed while
        // their process ends, before its memory goes (see docs/pid-provider.md).
        // A USDT clause's arguments are decoded in the consumer, its strings read there.
        let exit_stops = c.program.clauses.iter().any(|cl| {
            let usdt = cl.probes.iter().any(|d| is_process_provider(&d.provider) && !is_pid_provider(&d.provider));
            usdt || cl.probes.iter().any(|d| is_pid_provider(&d.provider)) && capture::reads_live_memory(cl, &c.stash)
        });
        Some(Follower {
            tree: Tree::new(!c.options.nofollow, &hold_signals(), exit_stops),
            rematcher: Rematcher::new(descs, c),
            seen: HashMap::new(),
        })
    }

    /// Takes over a held target: the loader hook goes into it, and what it has mapped
    /// now counts as matched (the descriptions were matched against it at compile time).
    pub fn adopt(
        &mut self,
        target: &mut Target,
        backend: &mut dyn Backend,
        registry: &mut Registry,
    ) -> Result<(), String> {
        let pid = target.pid;
        self.tree.adopt(target).map_err(|e: ControlError| e.to_string())?;
        let objects = mapped(pid);
        self.seen.insert(pid, objects.iter().map(|o| o.path.clone()).collect());
        let hook = arm_hook(pid, &objects, backend, registry)?;
        watch_hook(&mut self.tree, pid, hook);
        Ok(())
    }

    /// Takes over a held process that was a child of `parent`, in `root`'s tree, when
    /// `root` was grabbed: as after an exec, `root`'s descriptions are matched against
    /// all it maps (it may run another image), and the sites found and its loader hook
    /// are armed.
    pub fn adopt_descendant(
        &mut self,
        target: &mut Target,
        parent: i32,
        root: i32,
        w: &mut World<'_>,
    ) -> Result<(), String> {
        self.tree.adopt_descendant(target, parent, root).map_err(|e: ControlError| e.to_string())?;
        self.arm_image(target.pid, w);
        Ok(())
    }

    /// Handles one event; the process it concerns goes on afterwards, once what it
    /// brings is matched against its root's descriptions and `all`'s (`pid*`). Firings
    /// already recorded must have been consumed: what is remembered of the process
    /// changes.
    pub fn handle(&mut self, ev: Event, w: &mut World<'_>, mut all: Option<&mut AllProcesses>) {
        let mut all_new = |pid: i32, w: &mut World<'_>| {
            if let Some(a) = all.as_deref_mut() {
                a.match_new(pid, w);
            }
        };
        match ev {
            Event::Forked { parent, child } => {
                if let Err(e) = w.backend.fork(parent, child) {
                    note!("failed to follow pid {child}: {e}");
                }
                w.procs.borrow_mut().inherit(child as u32, parent as u32);
                let seen = self.seen.get(&parent).cloned().unwrap_or_default();
                self.seen.insert(child, seen);
                self.tree.release_child(child);
            }
            Event::Exec { pid } => {
                self.seen.remove(&pid);
                w.backend.exec(pid);
                self.arm_image(pid, w);
                all_new(pid, w);
                self.tree.resume(pid, None);
            }
            Event::Trap { pid, tid } => match w.backend.trap(pid, tid) {
                Trap::NotOurs => self.tree.resume(tid, Some(Signal::SIGTRAP)),
                Trap::Fired => self.tree.resume(tid, None),
                Trap::Hold => {
                    let objects = self.discover(pid, w);
                    remember(pid, objects, w);
                    all_new(pid, w);
                    self.tree.resume(tid, None);
                }
            },
            Event::Hold { pid, tid, sig } => {
                if w.backend.take_hold(tid) {
                    let objects = self.discover(pid, w);
                    remember(pid, objects, w);
                    all_new(pid, w);
                    self.tree.resume(tid, None);
                } else {
                    self.tree.resume(tid, Some(sig));
                }
            }
            // Its firings were consumed before this event, its memory still there.
            Event::Exiting { tid, .. } => self.tree.resume(tid, None),
            Event::Exited { pid, .. } => {
                w.backend.exit(pid);
                self.seen.remove(&pid);
                w.procs.borrow_mut().retire(pid as u32);
            }
        }
    }

    /// Matches the descriptions against every object `pid` maps (none seen yet: a new
    /// image, or a process adopted at the grab), arms what they find and the loader
    /// hook, and remembers the process.
    fn arm_image(&mut self, pid: i32, w: &mut World<'_>) {
        let objects = self.discover(pid, w);
        match arm_hook(pid, &objects, w.backend, w.registry) {
            Ok(hook) => watch_hook(&mut self.tree, pid, hook),
            Err(e) => note!("pid {pid}: {e}"),
        }
        remember(pid, objects, w);
    }

    /// Matches the descriptions against the objects `pid` has mapped since last time,
    /// enables clauses on the probes found and arms them. Returns every object mapped.
    fn discover(&mut self, pid: i32, w: &mut World<'_>) -> Vec<LoadedObject> {
        let objects = mapped(pid);
        let Some(root) = self.tree.root_of(pid) else { return objects };
        let new = unseen(pid, self.seen.entry(pid).or_default(), &objects, w.backend);
        if new.is_empty() {
            return objects;
        }
        let found = self.rematcher.probes_in(root, pid, &new, w.registry, w.consumer);
        if !found.is_empty() {
            // Code changes only under stopped threads: the others (a library loaded by
            // one thread of many) are stopped for the moment of arming.
            self.tree.pause_others(pid);
            if let Err(e) = w.backend.arm(pid, &pid_probes(w.registry, &found)) {
                note!("pid {pid}: {e}");
            }
            self.tree.unpause(pid);
            w.procs.borrow_mut().share(w.registry.pid.objects());
        }
        objects
    }

    /// Lets every followed process go on untraced: the loader hooks are removed first,
    /// and a hold signal udtrace sent is not delivered. A process forked since the last
    /// event handled (its parent's patches copied into it) is told to the backend, so
    /// that releasing it takes them out.
    pub fn finish(&mut self, backend: &mut dyn Backend) {
        backend.drop_hooks();
        // The closures share the backend: take_hold only reads it.
        let backend = std::cell::RefCell::new(backend);
        // A thread stopped meanwhile at a breakpoint of the backend's is dealt with
        // (its firing recorded) and goes on without the SIGTRAP.
        let mut ours = |pid: i32, tid: i32, sig: Signal| {
            if sig == Signal::SIGTRAP {
                backend.borrow_mut().trap(pid, tid) != Trap::NotOurs
            } else {
                backend.borrow().take_hold(tid)
            }
        };
        let mut unseen = |ev: &Event| match *ev {
            Event::Forked { parent, child } => {
                if let Err(e) = backend.borrow_mut().fork(parent, child) {
                    debug!("pid {child}, forked as tracing ended: {e}");
                }
            }
            Event::Exec { pid } => backend.borrow_mut().exec(pid),
            _ => {}
        };
        self.tree.detach_all(&mut ours, &mut unseen, &mut |pid| backend.borrow_mut().release(pid));
    }
}

/// The objects of `objects` not in `seen` (the vDSO aside), now added to it.
/// The objects of `pid` not seen before. Those seen but no longer mapped (dlclose) are
/// forgotten, here and by the backend, so that loaded again they are matched and armed
/// again: their code is mapped anew, without what was placed in it.
fn unseen(
    pid: i32,
    seen: &mut HashSet<String>,
    objects: &[LoadedObject],
    backend: &mut dyn Backend,
) -> Vec<LoadedObject> {
    let before = seen.len();
    seen.retain(|path| objects.iter().any(|o| &o.path == path));
    if seen.len() < before {
        backend.unloaded(pid);
    }
    objects.iter().filter(|o| !o.is_vdso && seen.insert(o.path.clone())).cloned().collect()
}

fn mapped(pid: i32) -> Vec<LoadedObject> {
    procfs::objects_of(pid).unwrap_or_default()
}

/// Puts the loader hook into `pid`'s dynamic loader, if it has one: a statically
/// linked program loads nothing later. `Some(address)`: the hook is to be watched
/// there with a hardware breakpoint ([`Backend::arm_hook`]).
fn arm_hook(
    pid: i32,
    objects: &[LoadedObject],
    backend: &mut dyn Backend,
    registry: &mut Registry,
) -> Result<Option<u64>, String> {
    let Some(ld) = procfs::loader_of(pid, objects) else { return Ok(None) };
    // Its path names another loader (glibc upgraded meanwhile): the hook would go to
    // the wrong place.
    if ld.deleted {
        if registry.pid.first_deleted_loader(&ld.path) {
            note!(
                "pid {pid}: its dynamic loader {} was deleted or replaced since it was mapped: the objects it loads \
                 from now on are not probed (restart the process to probe them)",
                ld.path
            );
        }
        return Ok(None);
    }
    let file = procfs::host_path(pid, &ld.path);
    match registry.pid.loader_hook(&file) {
        Some((off, r_state)) => backend.arm_hook(pid, &file, off, r_state),
        None => Ok(None),
    }
}

/// Sets the hardware breakpoint the backend asked for in every thread of `pid` (held).
fn watch_hook(tree: &mut Tree, pid: i32, addr: Option<u64>) {
    let Some(a) = addr else { return };
    let refused = tree.watch(pid, a);
    if refused > 0 {
        note!("pid {pid}: {refused} threads refused the loader hook's breakpoint: libraries they load go unseen");
    }
}
