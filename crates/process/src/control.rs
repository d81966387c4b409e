//! Holding `-c` and `-p` processes while probes are armed.
//!
//! `-c` starts the command seized, lets the dynamic loader map its libraries (it runs
//! to the executable's entry point, as DTrace stops "after the loader, before main"),
//! and holds it there. `-p` seizes every thread of a running process and interrupts
//! it. Then either `release` lets the process go on untouched, or a
//! [`crate::follow::Tree`] adopts it to follow it and its children.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid as nix_waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::procfs;
use crate::refusal::{self, Refusal};
use crate::wait::{self, waitpid, Wait};

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// dtrace: `failed to execute CMD: REASON`
    #[error("failed to execute {cmd}: {reason}")]
    Exec { cmd: String, reason: String },
    /// dtrace: `failed to grab pid N: REASON`, where the reason says why (dtrace for
    /// Linux gives strerror alone). A pid with no /proc entry gets dtrace for Linux's
    /// bare `No such process`, which its test suite expects (the pid is on the command
    /// line).
    #[error("{}", grab_message(*.pid, .why))]
    Grab { pid: i32, why: Refusal },
    #[error("failed to control pid {pid}: {reason}")]
    Control { pid: i32, reason: String },
}

fn grab_message(pid: i32, why: &Refusal) -> String {
    match why {
        Refusal::NoProcess => why.to_string(),
        _ => format!("failed to grab pid {pid}: {why}"),
    }
}

/// strerror's words, which DTrace for Linux prints.
fn reason(e: Errno) -> String {
    e.desc().to_string()
}

fn io_reason(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    }
}

/// A process udtrace created or grabbed.
#[derive(Debug)]
pub struct Target {
    pub pid: i32,
    /// `-c`: udtrace is its parent, and kills it when tracing ends.
    pub created: bool,
    /// Threads currently ptrace-stopped by udtrace.
    pub(crate) held: Vec<i32>,
    exited: bool,
    status: Option<WaitStatus>,
    /// Released (or adopted) at least once: the process has run under tracing.
    started: bool,
    /// Controlled by a tree, which reports its end.
    adopted: bool,
    /// Another process holds it with ptrace (a debugger, another udtrace): its pid and
    /// name. udtrace then never stops it; its probes are armed while it runs.
    pub tracer: Option<(i32, String)>,
}

/// Whether thread `tid` of `pid` still runs (not gone, not a zombie).
pub(crate) fn thread_alive(pid: i32, tid: i32) -> bool {
    procfs::task_stat(pid, tid)
        .ok()
        .and_then(|(_, fields)| fields.first()?.chars().next())
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// Options while a created command is held: it dies with udtrace until it is released.
/// TRACESYSGOOD: see crate::inject (a thread left in a syscall stop survives udtrace).
const HOLD_OPTIONS: ptrace::Options = ptrace::Options::PTRACE_O_TRACEEXEC
    .union(ptrace::Options::PTRACE_O_EXITKILL)
    .union(ptrace::Options::PTRACE_O_TRACESYSGOOD);

impl Target {
    /// `-c`: starts `argv` and holds it at its entry point, libraries mapped.
    pub fn create(argv: &[String]) -> Result<Target, ControlError> {
        let cmd = argv.first().cloned().unwrap_or_default();
        // The command's pid would name another process in /proc.
        refusal::check_proc().map_err(|r| ControlError::Exec { cmd: cmd.clone(), reason: r.to_string() })?;
        // Seized (not PTRACE_TRACEME) so that job-control stops can be passed on later.
        // If udtrace dies before releasing it, the half-started command dies too.
        let pid = udtrace_sys::process::spawn_seized(argv, HOLD_OPTIONS.bits())
            .map_err(|e| ControlError::Exec { cmd: cmd.clone(), reason: io_reason(&e) })?;
        let mut t = Target::unheld(pid);
        (t.created, t.held) = (true, vec![pid]);
        let ctl = |e: Errno| ControlError::Control { pid, reason: reason(e) };
        match nix_waitpid(Pid::from_raw(pid), Some(WaitPidFlag::__WALL)).map_err(ctl)? {
            WaitStatus::PtraceEvent(_, _, ev) if ev == nix::libc::PTRACE_EVENT_EXEC => {}
            other => {
                t.exited = true;
                t.held.clear();
                return Err(ControlError::Exec { cmd, reason: format!("unexpected state {other:?}") });
            }
        }
        t.run_to_entry()?;
        Ok(t)
    }

    /// Runs a freshly exec'd process to its entry point with a one-shot breakpoint.
    fn run_to_entry(&mut self) -> Result<(), ControlError> {
        let pid = self.pid;
        let ioerr = |e: io::Error| ControlError::Control { pid, reason: io_reason(&e) };
        let ctl = |e: Errno| ControlError::Control { pid, reason: reason(e) };
        let entry = procfs::auxv(pid)
            .map_err(ioerr)?
            .into_iter()
            .find(|&(t, _)| t == procfs::AT_ENTRY)
            .map(|(_, v)| v)
            .ok_or_else(|| ControlError::Control { pid, reason: "no entry point in auxv".into() })?;
        // /proc/<pid>/mem writes reach read-only text (the kernel forces them, as for a
        // debugger) on a private copy of the page: the file is never changed.
        let mem = OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/mem")).map_err(ioerr)?;
        let mut orig = [0u8; 1];
        mem.read_exact_at(&mut orig, entry).map_err(ioerr)?;
        mem.write_all_at(&[0xcc], entry).map_err(ioerr)?;
        ptrace::cont(Pid::from_raw(pid), None).map_err(ctl)?;
        loop {
            match waitpid(Some(Pid::from_raw(pid)), WaitPidFlag::empty()).map_err(ctl)? {
                Wait::Status(WaitStatus::Stopped(_, Signal::SIGTRAP)) => break,
                // Signals before main (rare) are delivered as they would have been.
                w @ (Wait::Status(WaitStatus::Stopped(..)) | Wait::RealTime(..)) => {
                    wait::cont(pid, w.delivery_signal().unwrap_or(0))
                }
                Wait::Status(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                    self.exited = true;
                    self.held.clear();
                    return Err(ControlError::Control { pid, reason: "exited before reaching its entry point".into() });
                }
                _ => ptrace::cont(Pid::from_raw(pid), None).map_err(ctl)?,
            }
        }
        mem.write_all_at(&orig, entry).map_err(ioerr)?;
        let mut regs = ptrace::getregs(Pid::from_raw(pid)).map_err(ctl)?;
        regs.rip = entry;
        ptrace::setregs(Pid::from_raw(pid), regs).map_err(ctl)?;
        Ok(())
    }

    /// `-p`: seizes and stops every thread of a running process. A kernel thread is
    /// watched, not seized (ptrace refuses it): a program without pid probes, which
    /// only needs `$target` and its end, runs on it; the pid provider refuses probes on
    /// it with the reason.
    pub fn grab(pid: i32) -> Result<Target, ControlError> {
        let grab_err = |e: Errno| ControlError::Grab { pid, why: refusal::after_refusal(pid, e) };
        match refusal::before_grab(pid) {
            Some(Refusal::KernelThread { .. }) => return Ok(Target::unheld(pid)),
            Some(why) => return Err(ControlError::Grab { pid, why }),
            None => {}
        }
        // A process has one tracer: udtrace watches one that has another instead (its
        // pid probes need no ptrace; see docs/pid-provider.md, "Traced by another").
        if let Some(tracer) = procfs::tracer(pid) {
            let mut t = Target::unheld(pid);
            t.tracer = Some(tracer);
            return Ok(t);
        }
        wait_out_exec(pid);
        wait_out_brief_hold(pid);
        let tids = procfs::tasks(pid).map_err(|_| ControlError::Grab { pid, why: Refusal::NoProcess })?;
        let mut t = Target::unheld(pid);
        // Threads come and go meanwhile: list again until a listing has no thread that
        // is not held yet (held threads are stopped, and create none).
        let mut listed = tids;
        // Exiting threads left alone: a zombie may stay listed for a while.
        let mut left: Vec<i32> = Vec::new();
        loop {
            let new: Vec<i32> = listed.into_iter().filter(|tid| !t.held.contains(tid) && !left.contains(tid)).collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                let p = Pid::from_raw(tid);
                // TRACESYSGOOD: see crate::inject (a thread left in a syscall stop survives).
                match ptrace::seize(p, ptrace::Options::PTRACE_O_TRACESYSGOOD) {
                    Ok(()) => {}
                    // A thread that exited meanwhile is fine: gone (ESRCH), or a zombie
                    // that refuses (EPERM).
                    Err(Errno::ESRCH | Errno::EPERM) if tid != pid && !thread_alive(pid, tid) => {
                        left.push(tid);
                        continue;
                    }
                    Err(e) => {
                        t.release();
                        return Err(grab_err(e));
                    }
                }
                t.held.push(tid);
                ptrace::interrupt(p).map_err(grab_err)?;
                // Wait for this thread's group-stop-like interrupt stop. A thread that
                // was exiting ends instead: it is not held. A signal taken first is
                // delivered (held, its signal would be lost); the interrupt stop follows.
                loop {
                    match waitpid(Some(p), WaitPidFlag::__WALL) {
                        Ok(Wait::Status(WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                            t.held.retain(|&h| h != tid);
                            left.push(tid);
                        }
                        Ok(w) if w.delivery_signal().is_some() => {
                            wait::cont(tid, w.delivery_signal().unwrap_or(0));
                            continue;
                        }
                        _ => {}
                    }
                    break;
                }
            }
            listed = procfs::tasks(pid).unwrap_or_default();
        }
        Ok(t)
    }

    /// A running process not created by udtrace, none of its threads held yet.
    fn unheld(pid: i32) -> Target {
        Target {
            pid,
            created: false,
            held: Vec::new(),
            exited: false,
            status: None,
            started: false,
            adopted: false,
            tracer: None,
        }
    }

    /// Lets every held thread run on, untouched.
    pub fn release(&mut self) {
        if !self.held.is_empty() {
            self.started = true;
        }
        for tid in self.held.drain(..) {
            let _ = ptrace::detach(Pid::from_raw(tid), None);
        }
    }

    /// Whether the process has exited (reaping it when it is udtrace's child). Only for
    /// released processes: an adopted one's end is reported by its tree.
    pub fn has_exited(&mut self) -> bool {
        if self.exited || self.adopted {
            return self.exited;
        }
        if self.created {
            match nix_waitpid(Pid::from_raw(self.pid), Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(s @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => self.set_exited(s),
                Ok(_) => {}
                Err(_) => self.exited = true,
            }
        } else {
            self.exited = !std::path::Path::new(&format!("/proc/{}", self.pid)).exists();
        }
        self.exited
    }

    /// Records the end of the process, as its tree or `has_exited` saw it.
    pub fn set_exited(&mut self, status: WaitStatus) {
        self.exited = true;
        self.status = Some(status);
        self.held.clear();
    }

    /// How a `-c` command ended: `Exited` or `Signaled`, once known.
    pub fn exit_status(&self) -> Option<WaitStatus> {
        self.status.filter(|_| self.created)
    }

    /// Marks the threads as handed over (to a tree that now controls them).
    pub(crate) fn hand_over(&mut self) -> Vec<i32> {
        self.started = true;
        self.adopted = true;
        std::mem::take(&mut self.held)
    }

    /// Ends tracing of this process, as dtrace's exit does (libproc's release with
    /// kill for what it created): a created command still alive is killed, whatever
    /// the way out; a grabbed process runs on untouched.
    pub fn finish(&mut self) {
        if self.created && !self.exited {
            let _ = nix::sys::signal::kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            self.held.clear();
            let _ = nix_waitpid(Pid::from_raw(self.pid), Some(WaitPidFlag::__WALL));
        } else {
            self.release();
        }
        self.exited = true;
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.release();
    }
}

/// Waits (up to 500 ms) while another udtrace session holds `pid`: a `pid*` session
/// holds each process that execs a new image for a few milliseconds (to its loader's
/// first stop: docs/pid-provider.md, "The exec gate"); grabbed meanwhile, it would be
/// taken as traced by another tracer for good. One another session follows for
/// longer is taken so after the wait.
fn wait_out_brief_hold(pid: i32) {
    wait_while(std::time::Duration::from_millis(500), || {
        procfs::tracer(pid).is_some_and(|(_, comm)| comm == "udtrace")
    });
}

/// Waits (up to 2 s) while process `pid` is inside execve: grabbed there, it would be
/// matched against the image it is leaving. A process just started by a script (`cmd &`
/// then `udtrace -p $!`) may still be exec'ing, longer when an exec gate holds it
/// (another session's: docs/pid-provider.md, "The exec gate").
fn wait_out_exec(pid: i32) {
    wait_while(std::time::Duration::from_secs(2), || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| matches!(s.split(' ').next(), Some("59" | "322")))
    });
}

/// Looks every millisecond while `busy` holds, for at most `limit`.
fn wait_while(limit: std::time::Duration, mut busy: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while busy() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
