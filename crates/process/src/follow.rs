//! Following process trees with ptrace events while every firing goes through BPF.
//!
//! A [`Tree`] adopts held `-c`/`-p` processes (and the descendants a `-p` process had
//! when it was grabbed) and keeps every thread seized with
//! `PTRACE_O_TRACEFORK|VFORK|CLONE|EXEC`. The kernel then attaches each new child and
//! stops it before its first instruction, and stops a process right after exec: both are
//! reported as [`Event`]s and the process stays held until the caller has armed its
//! probes and resumes it. These stops are ptrace stops, invisible to the real parent.
//! Everything else is passed on as if untraced: signals are delivered, group-stops are
//! left in place with `PTRACE_LISTEN` (so a shell sees its job stop and continue).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::control::{ControlError, Target};
use crate::wait::{self, waitpid, Wait};

/// `si_code` of the SIGTRAP an `int3` raises.
const SI_KERNEL: i32 = 0x80;

/// What a followed process did that needs the caller before it may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `child` was created by `parent` (fork, vfork, or clone without CLONE_THREAD) and
    /// is held before its first instruction until [`Tree::release_child`].
    Forked { parent: i32, child: i32 },
    /// `pid` has exec'd and is held at the exec stop until [`Tree::resume`].
    Exec { pid: i32 },
    /// Thread `tid` of `pid` is about to take `sig`, one of the hold signals; it waits
    /// in the stop until [`Tree::resume`] says whether to deliver it.
    Hold { pid: i32, tid: i32, sig: Signal },
    /// Thread `tid` of `pid` is ending (its exit stop, [`Tree::new`]'s `exit_stops`):
    /// its process's memory is still there until [`Tree::resume`].
    Exiting { pid: i32, tid: i32 },
    /// Process `pid` has ended (`Exited` or `Signaled`).
    Exited { pid: i32, status: WaitStatus },
    /// Thread `tid` of `pid` stopped with SIGTRAP (a breakpoint udtrace placed, or the
    /// process's own); it waits until [`Tree::resume`] says whether to deliver it.
    Trap { pid: i32, tid: i32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    /// In a stop reported as an event; waits for the caller.
    Held,
    /// A new thread or process whose first stop has not been seen yet; `release` says
    /// whether it may run as soon as it comes.
    Starting {
        release: bool,
    },
    /// A new process at its first stop, waiting for [`Tree::release_child`].
    Born,
    /// A new task not to be followed: detached at its first stop.
    Unwanted,
    /// In a group-stop, left stopped with PTRACE_LISTEN.
    Listening,
    /// Stopped by [`Tree::pause_others`] until [`Tree::unpause`].
    Paused,
    /// Found by [`Tree::pause_others`] at an `int3`, its stop left unreaped for
    /// [`Tree::poll`].
    AtInt3,
}

#[derive(Debug)]
struct Task {
    tgid: i32,
    state: State,
}

#[derive(Debug)]
pub struct Tree {
    follow: bool,
    exit_stops: bool,
    hold_signals: Vec<Signal>,
    tasks: HashMap<i32, Task>,
    /// Live processes.
    procs: HashSet<i32>,
    /// Every process ever followed → its parent in the tree and its root (kept after
    /// it exits: its last firings may still be waiting to be consumed).
    parents: HashMap<i32, (Option<i32>, i32)>,
    /// New tasks whose first stop came before their creator's event.
    early: HashSet<i32>,
    /// Process → the address every thread of it watches with a debug register
    /// ([`Tree::watch`]).
    watches: HashMap<i32, u64>,
    /// Events that came while threads were being paused, for the next [`Tree::poll`].
    backlog: Vec<Event>,
}

fn is_stop_signal(sig: Signal) -> bool {
    matches!(sig, Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU)
}

impl Tree {
    /// `follow`: new processes join the tree (otherwise only threads do, and the named
    /// processes are still followed through exec). `hold_signals` are the signals whose
    /// delivery stops are reported as [`Event::Hold`].
    /// `exit_stops`: every thread stops as it ends ([`Event::Exiting`]), while its
    /// memory can still be read.
    pub fn new(follow: bool, hold_signals: &[Signal], exit_stops: bool) -> Tree {
        Tree {
            follow,
            exit_stops,
            hold_signals: hold_signals.to_vec(),
            tasks: HashMap::new(),
            procs: HashSet::new(),
            parents: HashMap::new(),
            early: HashSet::new(),
            watches: HashMap::new(),
            backlog: Vec::new(),
        }
    }

    /// Stops every running thread of process `pid` (one of its threads is held by the
    /// caller), so that its code may change: an interrupt, then a wait for each. A
    /// thread that stops otherwise meanwhile (a breakpoint, the hold signal, a new
    /// thread) is dealt with as [`Tree::poll`] would, its events kept for the next poll.
    /// Whether every thread is now stopped, in the same image; [`Tree::unpause`] lets
    /// them go on. Bounded: a thread that does not stop within a second is left running.
    pub fn pause_others(&mut self, pid: i32) -> bool {
        let running: Vec<i32> =
            self.tasks.iter().filter(|(_, t)| t.tgid == pid && t.state == State::Running).map(|(&t, _)| t).collect();
        let mut waiting: HashSet<i32> =
            running.into_iter().filter(|&t| ptrace::interrupt(Pid::from_raw(t)).is_ok()).collect();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while !waiting.is_empty() && Instant::now() < deadline {
            let mut progress = false;
            for tid in waiting.clone() {
                // At a breakpoint: stopped, its stop left for poll to deal with unreaped.
                if self.unreaped_int3(tid) {
                    if let Some(t) = self.tasks.get_mut(&tid) {
                        t.state = State::AtInt3;
                    }
                    waiting.remove(&tid);
                    progress = true;
                    continue;
                }
                let st = match waitpid(Some(Pid::from_raw(tid)), WaitPidFlag::__WALL | WaitPidFlag::WNOHANG) {
                    Ok(Wait::Status(WaitStatus::StillAlive)) | Err(Errno::EINTR) => continue,
                    Err(_) => {
                        waiting.remove(&tid);
                        continue;
                    }
                    // Delivered; its interrupt stop is still to come.
                    Ok(Wait::RealTime(_, sig)) => {
                        wait::cont(tid, sig);
                        progress = true;
                        continue;
                    }
                    Ok(Wait::Status(st)) => st,
                };
                progress = true;
                match st {
                    WaitStatus::PtraceEvent(_, sig, libc::PTRACE_EVENT_STOP) if !is_stop_signal(sig) => {
                        if let Some(t) = self.tasks.get_mut(&tid) {
                            t.state = State::Paused;
                        }
                    }
                    st => self.handle(st, &mut out),
                }
                // Paused, held at an event of its own, in a group-stop, or gone: stopped.
                // Otherwise it went on, and its interrupt stop is still to come.
                if self.tasks.get(&tid).is_none_or(|t| t.state != State::Running) {
                    waiting.remove(&tid);
                }
            }
            if !progress {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let exec = out.iter().any(|e| matches!(e, Event::Exec { .. }));
        self.backlog.append(&mut out);
        // A thread created meanwhile waits at its first stop until a later poll.
        !exec
            && waiting.is_empty()
            && self.tasks.iter().filter(|(_, t)| t.tgid == pid).all(|(_, t)| t.state != State::Running)
    }

    /// Lets the threads [`Tree::pause_others`] stopped go on.
    pub fn unpause(&mut self, pid: i32) {
        let paused: Vec<i32> =
            self.tasks.iter().filter(|(_, t)| t.tgid == pid && t.state == State::Paused).map(|(&t, _)| t).collect();
        for tid in paused {
            self.resume(tid, None);
        }
    }

    /// Every thread of process `pid`, those it creates and the processes it forks stop
    /// with SIGTRAP ([`Event::Trap`]) before executing `addr` (a hardware breakpoint,
    /// [`crate::watch`]). Its threads must be stopped (held). Exec ends it (the kernel
    /// clears the registers); so does detaching. Returns how many threads refused.
    pub fn watch(&mut self, pid: i32, addr: u64) -> usize {
        self.watches.insert(pid, addr);
        self.tasks.iter().filter(|(&tid, t)| t.tgid == pid && crate::watch::set(tid, addr).is_err()).count()
    }

    fn options(&self) -> Options {
        // TRACESYSGOOD: a thread udtrace leaves in a syscall stop when it dies goes on
        // unharmed (crate::inject).
        let mut o = Options::PTRACE_O_TRACECLONE | Options::PTRACE_O_TRACEEXEC | Options::PTRACE_O_TRACESYSGOOD;
        if self.follow {
            o |= Options::PTRACE_O_TRACEFORK | Options::PTRACE_O_TRACEVFORK;
        }
        if self.exit_stops {
            o |= Options::PTRACE_O_TRACEEXIT;
        }
        o
    }

    /// Takes over a held target (its threads stay stopped): it becomes a root of the
    /// tree. Call [`Tree::start`] to let it run.
    pub fn adopt(&mut self, target: &mut Target) -> Result<(), ControlError> {
        let pid = target.pid;
        self.adopt_as(target, None, pid)
    }

    /// Takes over a held process that was already a child of `parent` (of `root`'s tree)
    /// when the root was grabbed ([`crate::descendants`]): a member of the tree as a
    /// child forked later is. Call [`Tree::start`] to let it run.
    pub fn adopt_descendant(&mut self, target: &mut Target, parent: i32, root: i32) -> Result<(), ControlError> {
        self.adopt_as(target, Some(parent), root)
    }

    fn adopt_as(&mut self, target: &mut Target, parent: Option<i32>, root: i32) -> Result<(), ControlError> {
        let pid = target.pid;
        for tid in target.hand_over() {
            match ptrace::setoptions(Pid::from_raw(tid), self.options()) {
                Ok(()) => {}
                // A thread that exited since it was held: nothing to follow.
                Err(Errno::ESRCH) if tid != pid && !crate::control::thread_alive(pid, tid) => continue,
                Err(e) => return Err(ControlError::Control { pid, reason: e.desc().to_string() }),
            }
            self.tasks.insert(tid, Task { tgid: pid, state: State::Held });
        }
        self.procs.insert(pid);
        self.parents.insert(pid, (parent, root));
        Ok(())
    }

    /// Lets every held thread of an adopted process run.
    pub fn start(&mut self, pid: i32) {
        let tids: Vec<i32> =
            self.tasks.iter().filter(|(_, t)| t.tgid == pid && t.state == State::Held).map(|(&t, _)| t).collect();
        for tid in tids {
            self.resume(tid, None);
        }
    }

    /// Live followed processes.
    pub fn pids(&self) -> impl Iterator<Item = i32> + '_ {
        self.procs.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// The root (`-c`/`-p` process) a followed process descends from, also after it
    /// exited.
    pub fn root_of(&self, pid: i32) -> Option<i32> {
        self.parents.get(&pid).map(|p| p.1)
    }

    /// The parent a followed process had in the tree, also after it exited.
    pub fn parent_of(&self, pid: i32) -> Option<i32> {
        self.parents.get(&pid).and_then(|p| p.0)
    }

    /// Lets a held thread go on; `sig` is delivered (a hold signal that was not ours).
    pub fn resume(&mut self, tid: i32, sig: Option<Signal>) {
        if let Some(t) = self.tasks.get_mut(&tid) {
            t.state = State::Running;
        }
        let _ = ptrace::cont(Pid::from_raw(tid), sig);
    }

    /// Lets a new process reported by [`Event::Forked`] run its first instruction.
    pub fn release_child(&mut self, child: i32) {
        match self.tasks.get(&child).map(|t| t.state) {
            Some(State::Born) => self.resume(child, None),
            Some(State::Starting { .. }) => {
                if let Some(t) = self.tasks.get_mut(&child) {
                    t.state = State::Starting { release: true };
                }
            }
            _ => {}
        }
    }

    /// Collects what happened since the last call, without blocking.
    ///
    /// `at_breakpoint(pid, tid)` deals with a thread stopped at an `int3` (SIGTRAP,
    /// `SI_KERNEL`) before its stop is reaped: true when it has (the thread goes on, no
    /// event), false to have the stop reported as [`Event::Trap`]. Reaping a stop takes
    /// its signal away: should udtrace die between reaping and resuming, the kernel
    /// would let the thread go on without the SIGTRAP, past the `int3`, in the middle of
    /// an instruction. Unreaped, the signal stays, and the process's SIGTRAP handler
    /// (the in-process backend's guard) takes it.
    pub fn poll(&mut self, at_breakpoint: &mut dyn FnMut(i32, i32) -> bool) -> Vec<Event> {
        let mut out = std::mem::take(&mut self.backlog);
        let any = WaitPidFlag::__WALL | WaitPidFlag::WNOHANG;
        loop {
            let peek = WaitPidFlag::WEXITED | WaitPidFlag::WSTOPPED | WaitPidFlag::WNOWAIT | any;
            let next = match waitid(Id::All, peek) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(st) => st.pid(),
                // A status nix cannot express (a real-time signal): reaped as before.
                Err(_) => None,
            };
            if let Some(p) = next.filter(|&p| self.at_int3(p)) {
                let tid = p.as_raw();
                let tgid = self.tasks.get(&tid).map_or(tid, |t| t.tgid);
                if at_breakpoint(tgid, tid) {
                    self.resume(tid, None);
                    continue;
                }
            }
            let reaped = match next.map(|p| waitpid(Some(p), any)) {
                Some(Ok(Wait::Status(WaitStatus::StillAlive))) | Some(Err(_)) | None => waitpid(None, any),
                Some(st) => st,
            };
            match reaped {
                Ok(Wait::Status(WaitStatus::StillAlive)) | Err(_) => break,
                // Never udtrace's: delivered as it would have been.
                Ok(Wait::RealTime(p, sig)) => wait::cont(p.as_raw(), sig),
                Ok(Wait::Status(st)) => self.handle(st, &mut out),
            }
        }
        out
    }

    /// Whether thread `tid` is in the signal-delivery stop of an `int3`, unreaped.
    fn unreaped_int3(&self, tid: i32) -> bool {
        let p = Pid::from_raw(tid);
        let peek = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
        matches!(waitid(Id::Pid(p), peek), Ok(st) if st.pid() == Some(p)) && self.at_int3(p)
    }

    /// Whether `p`, a followed thread with an unreaped stop, is in the signal-delivery
    /// stop of an `int3`'s SIGTRAP.
    fn at_int3(&self, p: Pid) -> bool {
        self.tasks.contains_key(&p.as_raw())
            && ptrace::getsiginfo(p).is_ok_and(|i| i.si_signo == libc::SIGTRAP && i.si_code == SI_KERNEL)
    }

    fn handle(&mut self, st: WaitStatus, out: &mut Vec<Event>) {
        match st {
            WaitStatus::Exited(p, _) | WaitStatus::Signaled(p, _, _) => self.gone(p.as_raw(), st, out),
            WaitStatus::Stopped(p, sig) => {
                let tid = p.as_raw();
                match self.tasks.get_mut(&tid) {
                    Some(t) if self.hold_signals.contains(&sig) => {
                        t.state = State::Held;
                        out.push(Event::Hold { pid: t.tgid, tid, sig });
                    }
                    Some(t) if sig == Signal::SIGTRAP => {
                        t.state = State::Held;
                        out.push(Event::Trap { pid: t.tgid, tid });
                    }
                    // Any other signal is delivered as it would have been.
                    _ => {
                        let _ = ptrace::cont(p, sig);
                    }
                }
            }
            WaitStatus::PtraceEvent(p, sig, ev) => {
                let tid = p.as_raw();
                match ev {
                    libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                        if let Ok(new) = ptrace::getevent(p) {
                            self.created(tid, new as i32, ev, out);
                        }
                        let _ = ptrace::cont(p, None);
                    }
                    libc::PTRACE_EVENT_EXEC => {
                        let former = ptrace::getevent(p).map(|f| f as i32).unwrap_or(tid);
                        self.exec(tid, former);
                        out.push(Event::Exec { pid: tid });
                    }
                    libc::PTRACE_EVENT_STOP => self.event_stop(tid, sig),
                    libc::PTRACE_EVENT_EXIT => match self.tasks.get_mut(&tid) {
                        Some(t) => {
                            t.state = State::Held;
                            out.push(Event::Exiting { pid: t.tgid, tid });
                        }
                        None => {
                            let _ = ptrace::cont(p, None);
                        }
                    },
                    _ => {
                        let _ = ptrace::cont(p, None);
                    }
                }
            }
            _ => {}
        }
    }

    fn created(&mut self, parent_tid: i32, new: i32, ev: i32, out: &mut Vec<Event>) {
        let Some(tgid) = self.tasks.get(&parent_tid).map(|t| t.tgid) else { return };
        let thread = is_thread(tgid, new, ev);
        let early = self.early.remove(&new);
        if thread {
            self.tasks.insert(new, Task { tgid, state: State::Starting { release: true } });
        } else if self.follow {
            let root = self.root_of(tgid).unwrap_or(tgid);
            self.procs.insert(new);
            self.parents.insert(new, (Some(tgid), root));
            // Same memory, same code: the child watches what its parent does.
            if let Some(&a) = self.watches.get(&tgid) {
                self.watches.insert(new, a);
            }
            self.tasks.insert(new, Task { tgid: new, state: State::Starting { release: false } });
            out.push(Event::Forked { parent: tgid, child: new });
        } else {
            self.tasks.insert(new, Task { tgid: new, state: State::Unwanted });
        }
        if early {
            self.first_stop(new);
        }
    }

    /// A new task's first stop.
    fn first_stop(&mut self, tid: i32) {
        let Some(t) = self.tasks.get_mut(&tid) else { return };
        // A new task starts without debug registers.
        if let Some(&a) = self.watches.get(&t.tgid).filter(|_| t.state != State::Unwanted) {
            let _ = crate::watch::set(tid, a);
        }
        match t.state {
            State::Starting { release: true } => self.resume(tid, None),
            State::Starting { release: false } => t.state = State::Born,
            State::Unwanted => {
                self.tasks.remove(&tid);
                let _ = ptrace::detach(Pid::from_raw(tid), None);
            }
            _ => {}
        }
    }

    fn event_stop(&mut self, tid: i32, sig: Signal) {
        let Some(t) = self.tasks.get_mut(&tid) else {
            // A new task, reported before its creator's event.
            self.early.insert(tid);
            return;
        };
        match t.state {
            State::Starting { .. } | State::Unwanted => self.first_stop(tid),
            _ if is_stop_signal(sig) => {
                // A group-stop: stay stopped as if untraced until SIGCONT.
                t.state = State::Listening;
                let _ = udtrace_sys::process::ptrace_listen(tid);
            }
            // Woken from a group-stop, or an interrupt: go on.
            _ => self.resume(tid, None),
        }
    }

    fn exec(&mut self, pid: i32, former: i32) {
        // Every other thread is gone; the exec'ing one now has the leader's id.
        self.tasks.retain(|&tid, t| t.tgid != pid || tid == pid);
        if former != pid {
            self.tasks.remove(&former);
        }
        self.tasks.insert(pid, Task { tgid: pid, state: State::Held });
        // Exec cleared its debug registers.
        self.watches.remove(&pid);
    }

    /// Forgets the place in the tree of `pid`, which ended and whose firings have all
    /// been consumed.
    pub fn forget(&mut self, pid: i32) {
        if !self.procs.contains(&pid) {
            self.parents.remove(&pid);
        }
    }

    fn gone(&mut self, tid: i32, status: WaitStatus, out: &mut Vec<Event>) {
        self.early.remove(&tid);
        let Some(t) = self.tasks.remove(&tid) else { return };
        if t.tgid == tid {
            self.tasks.retain(|_, o| o.tgid != tid);
            self.watches.remove(&tid);
            if self.procs.remove(&tid) {
                out.push(Event::Exited { pid: tid, status });
            }
        }
    }

    /// Lets every process go on untraced. Running threads are interrupted first; once
    /// every thread of a process is stopped, `release(pid)` may take out what was placed
    /// in it (patched code) before any of its threads runs again; then every thread is
    /// detached, its debug registers cleared ([`Tree::watch`]). A thread that stops
    /// meanwhile with the hold signal or SIGTRAP has it dropped when `ours(pid, tid,
    /// signal)` says udtrace caused it (and has dealt with the stop); any other signal
    /// is delivered at once, from its own stop, and the thread waited for again. A
    /// process with a thread that never stops (it is exiting) is not released: waiting
    /// is bounded.
    ///
    /// Forks and execs the caller has not been told of (their stops were still to be
    /// reaped, or kept for the next poll) go to `unseen` first, before any release: a
    /// child is a copy of its parent, with what was placed in it, and is released as
    /// any other process; an exec'd image has none of it.
    pub fn detach_all(
        &mut self,
        ours: &mut dyn FnMut(i32, i32, Signal) -> bool,
        unseen: &mut dyn FnMut(&Event),
        release: &mut dyn FnMut(i32),
    ) {
        let mut waiting: HashSet<i32> = HashSet::new();
        // Every stopped thread; none is detached with a signal (see the signal stops).
        let mut stopped: Vec<i32> = Vec::new();
        let mut tgids: HashMap<i32, i32> = self.tasks.iter().map(|(&tid, t)| (tid, t.tgid)).collect();
        // Forks and execs reported by no poll yet, in order.
        let mut news: Vec<Event> =
            self.backlog.drain(..).filter(|e| matches!(e, Event::Forked { .. } | Event::Exec { .. })).collect();
        let tasks: Vec<(i32, State)> = self.tasks.iter().map(|(&tid, t)| (tid, t.state)).collect();
        for (tid, state) in tasks {
            let p = Pid::from_raw(tid);
            match state {
                State::Held | State::Born | State::Paused => stopped.push(tid),
                _ => {
                    if ptrace::interrupt(p).is_ok() || matches!(state, State::Starting { .. } | State::Unwanted) {
                        waiting.insert(tid);
                    }
                }
            }
        }
        for tid in self.early.drain() {
            stopped.push(tid);
        }
        self.tasks.clear();
        self.procs.clear();
        // Bounded: a thread that never stops (it is exiting) must not hang udtrace.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !waiting.is_empty() && Instant::now() < deadline {
            let st = match waitpid(None, WaitPidFlag::__WALL | WaitPidFlag::WNOHANG) {
                Ok(Wait::Status(WaitStatus::StillAlive)) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(Errno::EINTR) => continue,
                Err(_) => break,
                // Never udtrace's: delivered now, from its own stop (see below).
                Ok(Wait::RealTime(p, sig)) => {
                    deliver_then_stop(p, sig);
                    continue;
                }
                Ok(Wait::Status(st)) => st,
            };
            match st {
                WaitStatus::Exited(p, _) | WaitStatus::Signaled(p, _, _) => {
                    waiting.remove(&p.as_raw());
                }
                WaitStatus::Stopped(p, sig) => {
                    let tgid = tgids.get(&p.as_raw()).copied().unwrap_or(p.as_raw());
                    if (self.hold_signals.contains(&sig) || sig == Signal::SIGTRAP) && ours(tgid, p.as_raw(), sig) {
                        stopped.push(p.as_raw());
                        waiting.remove(&p.as_raw());
                    } else {
                        deliver_then_stop(p, sig as i32);
                    }
                }
                WaitStatus::PtraceEvent(p, Signal::SIGTRAP, libc::PTRACE_EVENT_STOP)
                    if crate::procfs::thread_pending_signals(p.as_raw())
                        .is_some_and(|s| s & (1 << (libc::SIGTRAP - 1)) != 0) =>
                {
                    // The interrupt stop comes before a signal already queued: here a
                    // breakpoint's SIGTRAP (an int3 just run, or the debug register).
                    // Released now, the thread would get it with the breakpoints and
                    // the guard gone, and die of it. It goes on to take it, and its
                    // stop is dealt with as any other.
                    let _ = ptrace::cont(p, None);
                }
                WaitStatus::PtraceEvent(p, _, ev) => {
                    let tid = p.as_raw();
                    let tgid = tgids.get(&tid).copied().unwrap_or(tid);
                    // A child created meanwhile is attached too: it stops, then goes.
                    if matches!(ev, libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE) {
                        if let Ok(new) = ptrace::getevent(p).map(|n| n as i32) {
                            // Unless its first stop was reported already (before its
                            // creator's event, as it may be): it would never come again.
                            if !stopped.contains(&new) {
                                waiting.insert(new);
                            }
                            if is_thread(tgid, new, ev) {
                                tgids.insert(new, tgid);
                            } else {
                                tgids.insert(new, new);
                                news.push(Event::Forked { parent: tgid, child: new });
                            }
                        }
                    }
                    if ev == libc::PTRACE_EVENT_EXEC {
                        news.push(Event::Exec { pid: tgid });
                    }
                    stopped.push(tid);
                    waiting.remove(&tid);
                }
                _ => {}
            }
        }
        news.iter().for_each(unseen);
        // Released: processes none of whose threads is still running.
        let running: HashSet<i32> = waiting.iter().filter_map(|t| tgids.get(t).copied()).collect();
        let mut released: HashSet<i32> = HashSet::new();
        for &tid in &stopped {
            if let Some(&tgid) = tgids.get(&tid) {
                if !running.contains(&tgid) && released.insert(tgid) {
                    release(tgid);
                }
            }
        }
        let watches = std::mem::take(&mut self.watches);
        for tid in stopped {
            if tgids.get(&tid).is_some_and(|t| watches.contains_key(t)) {
                let _ = crate::watch::clear(tid);
            }
            let _ = ptrace::detach(Pid::from_raw(tid), None);
        }
    }
}

/// Delivers `sig` to `p` from the signal-delivery stop it is in, then has it stop
/// again ([`Tree::detach_all`]). Resumed from its own stop, the signal keeps its siginfo
/// (a sigqueue value, its sender) and its thread. Kept for the detach instead, it went
/// out from whatever stop the thread was in by then: after `release` had run remote
/// calls in the thread, a syscall-exit stop, where the kernel sends the signal anew,
/// process-wide, with its own siginfo (value 0: the chaos test's lost real-time value).
/// The interrupt stop comes before any handler runs; interrupting again (a no-op while
/// one is pending) covers a thread whose interrupt stop was taken already.
fn deliver_then_stop(p: Pid, sig: i32) {
    wait::cont(p.as_raw(), sig);
    let _ = ptrace::interrupt(p);
}

impl Drop for Tree {
    fn drop(&mut self) {
        if !self.tasks.is_empty() {
            self.detach_all(&mut |_, _, _| false, &mut |_| {}, &mut |_| {});
        }
    }
}

/// Whether task `new`, created by process `tgid` with ptrace event `ev`, is a thread
/// of it: a clone without CLONE_THREAD makes a process.
fn is_thread(tgid: i32, new: i32, ev: i32) -> bool {
    ev == libc::PTRACE_EVENT_CLONE && std::path::Path::new(&format!("/proc/{tgid}/task/{new}")).exists()
}

/// A process held for a moment without following it (a `pid*` process that exec'd an
/// image udtrace has not seen): seized and stopped, then let go with [`Brief::release`]
/// (or on drop). Its stops are ptrace stops, invisible to its parent.
pub struct Brief {
    pid: Pid,
    held: bool,
}

impl Brief {
    /// Seizes `pid` (single-threaded: it has just exec'd) and waits for it to stop.
    pub fn seize(pid: i32) -> Option<Brief> {
        let p = Pid::from_raw(pid);
        ptrace::seize(p, Options::PTRACE_O_TRACESYSGOOD).ok()?;
        let mut b = Brief { pid: p, held: false };
        if ptrace::interrupt(p).is_err() {
            return None;
        }
        b.held = true;
        b.held = b.wait_stop(Duration::from_secs(1)).is_some();
        b.held.then_some(b)
    }

    /// Seizes thread `tid` while the exec gate holds it inside its execve (see
    /// `crate::gate`), and asks it to stop once back in user space: after the exec's
    /// own stop when the exec succeeds, at once when it fails. [`Brief::wait_exec`]
    /// waits for either, once the gate has let it go.
    pub fn seize_exec(tid: i32) -> Option<Brief> {
        let p = Pid::from_raw(tid);
        ptrace::seize(p, Options::PTRACE_O_TRACESYSGOOD | Options::PTRACE_O_TRACEEXEC).ok()?;
        let _ = ptrace::interrupt(p);
        Some(Brief { pid: p, held: true })
    }

    /// Waits up to `limit` for the exec stop of a thread [`Brief::seize_exec`] took,
    /// delivering the signals it gets meanwhile: true when it is held there (its new
    /// image mapped, none of its code run; the interrupt stop comes when it goes on).
    /// False if it exited, or if the exec failed or was late: then it is stopped, to be
    /// let go.
    pub fn wait_exec(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait_stop(left) {
                Some(Stop::Event(ev)) if ev == libc::PTRACE_EVENT_EXEC => return true,
                // Back in user space without an exec (it failed), or a job-control stop.
                Some(Stop::Event(ev)) if ev == libc::PTRACE_EVENT_STOP => return false,
                Some(Stop::Signal(s)) => wait::cont(self.pid.as_raw(), s),
                Some(_) => {
                    let _ = ptrace::cont(self.pid, None);
                }
                None if !self.held => return false,
                None => {
                    let _ = ptrace::interrupt(self.pid);
                    self.wait_stop(Duration::from_secs(1));
                    return false;
                }
            }
        }
    }

    /// Waits for the next stop: [`Stop::Signal`] for a signal-delivery stop (the signal
    /// is taken away), [`Stop::Event`] for a ptrace event's, [`Stop::Other`] for any
    /// other; `None` if it exited or the time passed.
    fn wait_stop(&mut self, limit: Duration) -> Option<Stop> {
        let deadline = Instant::now() + limit;
        loop {
            match waitpid(Some(self.pid), WaitPidFlag::__WALL | WaitPidFlag::WNOHANG) {
                Ok(Wait::Status(WaitStatus::StillAlive)) | Err(Errno::EINTR) => {}
                Ok(w @ (Wait::Status(WaitStatus::Stopped(..)) | Wait::RealTime(..))) => {
                    return w.delivery_signal().map(Stop::Signal)
                }
                Ok(Wait::Status(WaitStatus::PtraceEvent(_, _, ev))) => return Some(Stop::Event(ev)),
                Ok(Wait::Status(WaitStatus::Exited(..) | WaitStatus::Signaled(..))) | Err(_) => {
                    self.held = false;
                    return None;
                }
                Ok(_) => return Some(Stop::Other),
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Lets it run until it takes one of `sigs` (which it then does not get) and stops
    /// there, or until `limit` passes (then it is stopped again). Other signals are
    /// delivered. False if it exited.
    pub fn run_until(&mut self, sigs: &[Signal], limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let _ = ptrace::cont(self.pid, None);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait_stop(left) {
                Some(Stop::Signal(s)) if sigs.iter().any(|&g| g as i32 == s) => return true,
                Some(Stop::Signal(s)) => wait::cont(self.pid.as_raw(), s),
                Some(_) => {
                    let _ = ptrace::cont(self.pid, None);
                }
                None if !self.held => return false,
                None => {
                    // Out of time: stop it again, to be let go like any other.
                    let _ = ptrace::interrupt(self.pid);
                    return self.wait_stop(Duration::from_secs(1)).is_some();
                }
            }
        }
    }

    pub fn release(mut self) {
        self.detach();
    }

    fn detach(&mut self) {
        if std::mem::take(&mut self.held) {
            let _ = ptrace::detach(self.pid, None);
        }
    }
}

/// A stop [`Brief`] waited for.
enum Stop {
    /// A signal-delivery stop, its signal.
    Signal(i32),
    /// A ptrace event's stop (`PTRACE_EVENT_*`).
    Event(i32),
    /// Any other (a syscall stop).
    Other,
}

impl Drop for Brief {
    fn drop(&mut self) {
        self.detach();
    }
}
