//! The exec gate: a process no one traces that execs an image udtrace has never seen is
//! held inside its execve until udtrace has seized it, so that `pid*` and `provider*`
//! probes of the new image are armed before any of its code runs.
//!
//! The kernel's fanotify permission event `FAN_OPEN_EXEC_PERM` stops the exec while the
//! image is opened, before the exec's point of no return, until the group answers. A
//! thread of its own ([`ExecGate::open`]) answers; it only waits for udtrace's main
//! thread (the one that may seize: a tracer is a thread) for at most the gate's limit,
//! and lets the exec go then whatever happened. Every image udtrace has armed gets an
//! ignore mark ([`ExecGate::ignore`], once armed: not when let go, or a second exec of
//! it would run unarmed): an exec of a seen image never reaches the gate, so the machine
//! pays for the first exec of each new file only.
//! Processes that are traced (by udtrace's follower, or another tracer: they cannot be
//! seized) or that udtrace started pass at once. Closing the group (the gate dropped,
//! or udtrace killed) lets every exec still waiting go: the kernel allows what no one
//! answered.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, FanotifyResponse, InitFlags, MarkFlags, MaskFlags, Response};
use nix::unistd::{pipe2, read, write};

/// Why the gate could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("fanotify: {0}")]
    Fanotify(Errno),
    #[error("no filesystem could be marked")]
    NoFilesystem,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// File systems no program is exec'd from (or that fanotify cannot mark).
const PSEUDO: &[&str] = &[
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "devpts",
    "mqueue",
    "bpf",
    "tracefs",
    "debugfs",
    "securityfs",
    "pstore",
    "configfs",
    "fusectl",
    "autofs",
    "binfmt_misc",
    "efivarfs",
    "rpc_pipefs",
    "nsfs",
    "hugetlbfs",
    "devtmpfs",
];

/// An exec the gate holds, for udtrace's main thread: the thread in its execve and the
/// image it opened. Dropped or [`Exec::go`]: the gate lets it go on.
pub struct Exec {
    pub tid: i32,
    pub path: PathBuf,
    answer: Arc<(Mutex<bool>, Condvar)>,
}

impl Exec {
    /// Lets the exec go on (after the thread was seized, or not to be).
    pub fn go(self) {}
}

impl Drop for Exec {
    fn drop(&mut self) {
        let (done, cv) = &*self.answer;
        *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

/// The gate: open while it lives.
pub struct ExecGate {
    fan: Arc<Fanotify>,
    asks: Receiver<Exec>,
    /// Readable when an exec waits in `asks`.
    wake: OwnedFd,
    /// Written to stop the gate's thread.
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// How many file systems are gated.
    pub filesystems: usize,
}

impl ExecGate {
    /// Opens the gate on every file system mounted in udtrace's mount namespace; an
    /// exec waits at most `limit` for udtrace's main thread.
    pub fn open(limit: Duration) -> Result<ExecGate, GateError> {
        let fan = Fanotify::init(
            InitFlags::FAN_CLOEXEC
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_CLASS_CONTENT
                | InitFlags::FAN_REPORT_TID
                | InitFlags::FAN_UNLIMITED_MARKS,
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC,
        )
        .map_err(GateError::Fanotify)?;
        let filesystems = mark_filesystems(&fan)?;
        if filesystems == 0 {
            return Err(GateError::NoFilesystem);
        }
        let fan = Arc::new(fan);
        let (wake_r, wake_w) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(std::io::Error::from)?;
        let (stop_r, stop_w) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(std::io::Error::from)?;
        let (tx, asks) = channel();
        let served = Arc::clone(&fan);
        let me = std::process::id() as i32;
        let thread = std::thread::Builder::new()
            .name("exec-gate".into())
            .spawn(move || serve(&served, &stop_r, &tx, &wake_w, me, limit))?;
        Ok(ExecGate { fan, asks, wake: wake_r, stop: stop_w, thread: Some(thread), filesystems })
    }

    /// What the main thread polls: readable when an exec waits for it.
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// The execs waiting for the main thread.
    pub fn take(&self) -> Vec<Exec> {
        let mut buf = [0u8; 64];
        while matches!(read(self.wake.as_raw_fd(), &mut buf), Ok(n) if n > 0) {}
        self.asks.try_iter().collect()
    }

    /// `path` is an image udtrace has seen: its execs pass without waiting.
    pub fn ignore(&self, path: &Path) {
        let _ = self.fan.mark(
            MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_IGNORED_MASK,
            MaskFlags::FAN_OPEN_EXEC_PERM,
            None,
            Some(path),
        );
    }
}

impl Drop for ExecGate {
    fn drop(&mut self) {
        let _ = write(&self.stop, b"x");
        // Execs the thread waits on go first, so that it is not held to its limit.
        drop(self.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The last reference to the group closes with `self.fan`: the kernel allows
        // whatever is still waiting.
    }
}

/// Marks the gate's event on each file system of udtrace's mount table, once per file
/// system (a file system mark covers all its mounts, in every namespace).
fn mark_filesystems(fan: &Fanotify) -> Result<usize, GateError> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut done = std::collections::HashSet::new();
    let mut marked = 0;
    for line in table.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else { continue };
        let (Some(dev), Some(at), Some(fstype)) = (fields.get(2), fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        if PSEUDO.contains(fstype) || !done.insert(dev.to_string()) {
            continue;
        }
        let at = unescape(at);
        let mark = |kind: MarkFlags| {
            fan.mark(MarkFlags::FAN_MARK_ADD | kind, MaskFlags::FAN_OPEN_EXEC_PERM, None, Some(at.as_path()))
        };
        if mark(MarkFlags::FAN_MARK_FILESYSTEM).or_else(|_| mark(MarkFlags::FAN_MARK_MOUNT)).is_ok() {
            marked += 1;
        }
    }
    Ok(marked)
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash as octal.
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
}

/// The gate's thread: answers each exec, after the main thread has seen the ones it
/// must hold, or after `limit`.
fn serve(fan: &Fanotify, stop: &OwnedFd, tx: &Sender<Exec>, wake: &OwnedFd, me: i32, limit: Duration) {
    loop {
        let mut fds = [PollFd::new(fan.as_fd(), PollFlags::POLLIN), PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        let events = match fan.read_events() {
            Ok(e) => e,
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(_) => return,
        };
        for ev in &events {
            let Some(fd) = ev.fd() else { continue };
            if !ev.mask().contains(MaskFlags::FAN_OPEN_EXEC_PERM) {
                continue;
            }
            let tid = ev.pid();
            if must_hold(tid, me) {
                let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
                let answer = Arc::new((Mutex::new(false), Condvar::new()));
                if tx.send(Exec { tid, path, answer: Arc::clone(&answer) }).is_ok() {
                    let _ = write(wake, b"x");
                    wait_answer(&answer, limit);
                }
            }
            let _ = fan.write_response(FanotifyResponse::new(fd, Response::FAN_ALLOW));
        }
    }
}

fn wait_answer(answer: &(Mutex<bool>, Condvar), limit: Duration) {
    let deadline = Instant::now() + limit;
    let (done, cv) = answer;
    let mut d = done.lock().unwrap_or_else(|e| e.into_inner());
    while !*d {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        d = cv.wait_timeout(d, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// Whether thread `tid`'s exec is held for udtrace: not when it is udtrace's or its
/// child's (followed already, or the undertaker), not when a tracer has it (udtrace's
/// follower arms it at its exec stop; another tracer's cannot be seized), and not for a
/// thread other than its process's leader (its exec takes the leader's id: what was
/// seized would be gone).
fn must_hold(tid: i32, me: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else { return false };
    let field = |name: &str| -> Option<i32> {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok())
    };
    let (Some(tgid), Some(ppid), Some(tracer)) = (field("Tgid:"), field("PPid:"), field("TracerPid:")) else {
        return false;
    };
    tgid == tid && tgid != me && ppid != me && tracer == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape("/mnt/a\\040b\\011c"), PathBuf::from("/mnt/a b\tc"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape("/tail\\04"), PathBuf::from("/tail\\04"));
    }
}
