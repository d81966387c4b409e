//! The processes a run is given with `-c` and `-p`: started or grabbed (held until
//! tracing starts), the descendants a `-p` process already has when it is grabbed,
//! their ends as dtrace reports them, and letting them go when the run ends.

use nix::sys::wait::WaitStatus;

use udtrace_messages::{debug, note};
use udtrace_process::control::{ControlError, Target};
use udtrace_process::descendants::{self, Descendant};

use crate::request::{split_command, Request};

/// Processes given with `-c`/`-p`, held until tracing starts; udtrace stops when all
/// have exited.
pub struct Targets {
    pub list: Vec<Target>,
    /// Which have been reported as exited.
    gone: Vec<bool>,
    /// What ran below the `-p` processes when they were grabbed: followed as their
    /// later children are. Never `$target`, and their ends are not reported.
    pub descendants: Vec<Descendant>,
}

impl Targets {
    /// Starts the `-c` commands and grabs the `-p` processes, in that order (as dtrace
    /// does); the first failure lets go of what was started or grabbed.
    pub fn start(req: &Request) -> Result<Targets, String> {
        let mut t = Targets { list: Vec::new(), gone: Vec::new(), descendants: Vec::new() };
        for cmd in &req.commands {
            match Target::create(&split_command(cmd)) {
                Ok(target) => t.list.push(target),
                Err(e) => {
                    t.finish();
                    return Err(e.to_string());
                }
            }
        }
        for &pid in &req.pids {
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

    /// Grabs what runs below those of `roots` that were grabbed (`-p`): a daemon's
    /// workers. One that cannot be grabbed is said in one line and left alone.
    pub fn grab_descendants(&mut self, roots: &[i32]) {
        // The init process's descendants are every process there is: grabbing them all
        // would stop the machine for a moment and patch it whole.
        if roots.contains(&1) && self.list.iter().any(|t| t.pid == 1 && !t.created) {
            note!("pid 1's descendants are not traced (they are every process): name them with -p, or use pid*");
        }
        let grabbed: Vec<i32> =
            self.list.iter().filter(|t| !t.created && t.pid != 1 && roots.contains(&t.pid)).map(|t| t.pid).collect();
        if grabbed.is_empty() {
            return;
        }
        let found = descendants::grab(&grabbed, &self.pids());
        for (pid, parent, e) in found.refused {
            let why = match e {
                ControlError::Grab { why, .. } => why.to_string(),
                e => e.to_string(),
            };
            note!("pid {pid}, a child of pid {parent}, is not traced: {why}");
        }
        debug!("descendants adopted: {:?}", found.descendants.iter().map(|d| d.target.pid).collect::<Vec<_>>());
        self.descendants = found.descendants;
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn first_pid(&self) -> Option<i64> {
        self.list.first().map(|t| i64::from(t.pid))
    }

    pub fn pids(&self) -> Vec<i32> {
        self.list.iter().map(|t| t.pid).collect()
    }

    /// The descendants another tracer holds, each with its root.
    pub fn unheld_descendants(&self) -> impl Iterator<Item = (i32, i32)> + '_ {
        self.descendants.iter().filter(|d| d.target.tracer.is_some()).map(|d| (d.target.pid, d.root))
    }

    /// A tree reported that a target ended.
    pub fn exited(&mut self, pid: i32, status: WaitStatus) {
        self.list.iter_mut().filter(|t| t.pid == pid).for_each(|t| t.set_exited(status));
    }

    pub fn release(&mut self) {
        self.list.iter_mut().chain(self.descendants.iter_mut().map(|d| &mut d.target)).for_each(Target::release);
    }

    /// Ends tracing of every target: created ones still running are killed, grabbed
    /// ones released (dtrace's behaviour), and so are their descendants.
    pub fn finish(&mut self) {
        self.list.iter_mut().chain(self.descendants.iter_mut().map(|d| &mut d.target)).for_each(Target::finish);
    }

    /// Reports newly exited targets as dtrace's prochandler does; true when all are gone.
    pub fn reap(&mut self, quiet: bool) -> bool {
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
                Some(WaitStatus::Signaled(_, sig, _)) => note!("pid {pid} terminated by {}", sig.as_str()),
                Some(WaitStatus::Exited(_, code)) if code != 0 => note!("pid {pid} exited with status {code}"),
                _ => note!("pid {pid} has exited"),
            }
        }
        self.gone.iter().all(|g| *g)
    }
}
