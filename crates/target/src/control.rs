//! Holding `-c` and `-p` processes while probes are armed.
//!
//! `-c` starts the command traced, lets the dynamic loader map its libraries (it runs
//! to the executable's entry point, as DTrace stops "after the loader, before main"),
//! and holds it there. `-p` seizes every thread of a running process and interrupts
//! it. `release` lets the process go on untouched.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::process::Child;

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::procfs;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// dtrace: `failed to execute CMD: REASON`
    #[error("failed to execute {cmd}: {reason}")]
    Exec { cmd: String, reason: String },
    /// dtrace: `failed to grab pid N: REASON`
    #[error("failed to grab pid {pid}: {reason}")]
    Grab { pid: i32, reason: String },
    #[error("failed to control pid {pid}: {reason}")]
    Control { pid: i32, reason: String },
}

fn reason(e: Errno) -> String {
    match e {
        // libproc's Pgrab_error() words, which dtrace prints.
        Errno::ESRCH => "no such process".into(),
        Errno::EPERM => "permission denied".into(),
        e => e.desc().to_string(),
    }
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
    /// Set for `-c`: udtrace is its parent, and kills it if tracing ends first.
    child: Option<Child>,
    /// Threads currently ptrace-stopped by udtrace.
    held: Vec<i32>,
    exited: bool,
    /// Released at least once: the process has run under tracing.
    started: bool,
}

impl Target {
    /// `-c`: starts `argv` and holds it at its entry point, libraries mapped.
    pub fn create(argv: &[String]) -> Result<Target, ControlError> {
        let cmd = argv.first().cloned().unwrap_or_default();
        let child = udtrace_sys::process::spawn_traced(argv)
            .map_err(|e| ControlError::Exec { cmd: cmd.clone(), reason: io_reason(&e) })?;
        let pid = child.id() as i32;
        let mut t = Target { pid, child: Some(child), held: vec![pid], exited: false, started: false };
        let ctl = |e: Errno| ControlError::Control { pid, reason: reason(e) };
        // The exec stop (SIGTRAP from PTRACE_TRACEME).
        match waitpid(Pid::from_raw(pid), None).map_err(ctl)? {
            WaitStatus::Stopped(_, Signal::SIGTRAP) => {}
            other => {
                t.exited = true;
                return Err(ControlError::Exec { cmd, reason: format!("unexpected state {other:?}") });
            }
        }
        // If udtrace dies before releasing it, the half-started command dies too.
        ptrace::setoptions(Pid::from_raw(pid), ptrace::Options::PTRACE_O_EXITKILL).map_err(ctl)?;
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
            match waitpid(Pid::from_raw(pid), None).map_err(ctl)? {
                WaitStatus::Stopped(_, Signal::SIGTRAP) => break,
                // Signals before main (rare) are delivered as they would have been.
                WaitStatus::Stopped(_, sig) => ptrace::cont(Pid::from_raw(pid), Some(sig)).map_err(ctl)?,
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
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

    /// `-p`: seizes and stops every thread of a running process.
    pub fn grab(pid: i32) -> Result<Target, ControlError> {
        let grab_err = |e: Errno| ControlError::Grab { pid, reason: reason(e) };
        if pid <= 0 {
            return Err(grab_err(Errno::ESRCH));
        }
        if pid == std::process::id() as i32 {
            return Err(ControlError::Grab { pid, reason: "cannot grab udtrace itself".into() });
        }
        let tids = procfs::tasks(pid).map_err(|_| grab_err(Errno::ESRCH))?;
        let mut t = Target { pid, child: None, held: Vec::new(), exited: false, started: false };
        for tid in tids {
            let p = Pid::from_raw(tid);
            match ptrace::seize(p, ptrace::Options::empty()) {
                Ok(()) => {}
                // A thread that exited meanwhile is fine.
                Err(Errno::ESRCH) if tid != pid => continue,
                Err(e) => {
                    t.release();
                    return Err(grab_err(e));
                }
            }
            t.held.push(tid);
            ptrace::interrupt(p).map_err(grab_err)?;
            // Wait for this thread's group-stop-like interrupt stop.
            let _ = waitpid(p, Some(WaitPidFlag::__WALL));
        }
        Ok(t)
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

    /// Whether the process has exited (reaping it when it is udtrace's child).
    pub fn has_exited(&mut self) -> bool {
        if self.exited {
            return true;
        }
        self.exited = match &mut self.child {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => !std::path::Path::new(&format!("/proc/{}", self.pid)).exists(),
        };
        self.exited
    }

    /// Exit status of a `-c` command once it has exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Ends tracing of this process. A created command that never ran (the program
    /// failed to compile, `-l`, `-e`) is killed while still held; any process that has
    /// run under tracing runs on untouched.
    pub fn finish(&mut self) {
        match &mut self.child {
            Some(c) if !self.started => {
                if !self.exited {
                    let _ = c.kill();
                }
                self.held.clear();
                let _ = c.wait();
            }
            _ => self.release(),
        }
        self.exited = true;
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.release();
    }
}
