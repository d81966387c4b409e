//! The exec gate: a process no one traces that execs an image udtrace has never seen is
//! held inside its execve until udtrace has seized it, so that `pid*` and `provider*`
//! probes of the new image are armed before any of its code runs.
//!
//! The kernel's fanotify permission event `FAN_OPEN_EXEC_PERM` stops the exec while the
//! image is opened, before the exec's point of no return, until the group answers. The
//! group belongs to the gate keeper, a process of its own (udtrace's binary with
//! [`GATE_ENV`], in a process group of its own: [`keeper_main`]), not to udtrace: a
//! udtrace that is stopped (SIGSTOP, ^Z, a debugger) or slow never blocks an exec. The
//! keeper hands each exec it must hold to udtrace's main thread (the one that may
//! seize: a tracer is a thread) over a socket, and lets it go when told, or after the
//! gate's limit whatever happened (udtrace then drops the request unread: a thread id
//! may be another thread's by the time a stopped udtrace reads it). Every image udtrace has armed gets an ignore mark
//! ([`ExecGate::ignore`], once armed: not when let go, or a second exec of it would run
//! unarmed): an exec of a seen image never reaches the gate, so the machine pays for the
//! first exec of each new file only. Processes that are traced (by udtrace's follower,
//! or another tracer: they cannot be seized) or that udtrace started pass at once.
//! When udtrace ends, however it ends, the keeper reads the end of the socket and exits:
//! the kernel allows what no one answered.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, FanotifyResponse, InitFlags, MarkFlags, MaskFlags, Response};
use nix::sys::signal::Signal;
use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};

/// The environment variable that makes udtrace's binary the gate keeper; its value is
/// udtrace's pid, then the limit in milliseconds (`PID:MS`).
pub const GATE_ENV: &str = "UDTRACE_EXEC_GATE";

/// The keeper's name (`comm`), as `ps` shows it.
pub const GATE_NAME: &str = "udtrace-gate";

/// Why the gate could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("{0}")]
    Keeper(String),
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

/// Largest message: a path and a few words.
const MAX_MESSAGE: usize = 8192;

/// An exec the gate holds, for udtrace's main thread: the thread in its execve and the
/// image it opened. [`ExecGate::go`] lets it go on.
pub struct Exec {
    seq: u64,
    pub tid: i32,
    pub path: PathBuf,
}

/// udtrace's side of the gate: open while it lives.
pub struct ExecGate {
    sock: OwnedFd,
    keeper: Child,
    /// How long the keeper waits for an answer.
    limit: Duration,
    /// How many file systems are gated.
    pub filesystems: usize,
}

impl ExecGate {
    /// Starts the keeper (udtrace's own binary, `/proc/self/exe`), which opens the gate
    /// on every file system mounted in udtrace's mount namespace; an exec waits at most
    /// `limit` for udtrace's main thread.
    pub fn open(limit: Duration) -> Result<ExecGate, GateError> {
        let (ours, theirs) =
            socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(io)?;
        let keeper = Command::new("/proc/self/exe")
            .env(GATE_ENV, format!("{}:{}", std::process::id(), limit.as_millis()))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let mut gate = ExecGate { sock: ours, keeper, limit, filesystems: 0 };
        let mut fds = [PollFd::new(gate.sock.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(5000u16));
        let said = match receive(&gate.sock) {
            Heard::Message(m) => m,
            Heard::Nothing | Heard::End => Vec::new(),
        };
        let text = String::from_utf8_lossy(&said);
        match text.strip_prefix("ready ") {
            Some(n) => {
                gate.filesystems = n.trim().parse().unwrap_or(0);
                Ok(gate)
            }
            None => Err(GateError::Keeper(match text.strip_prefix("error ") {
                Some(why) => why.to_string(),
                None => "the gate keeper did not start".into(),
            })),
        }
    }

    /// What the main thread polls: readable when an exec waits for it.
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// The execs waiting for the main thread.
    pub fn take(&self) -> Vec<Exec> {
        let mut out = Vec::new();
        while let Heard::Message(m) = receive(&self.sock) {
            let Some(rest) = m.strip_prefix(b"exec ") else { continue };
            let mut parts = rest.splitn(4, |&b| b == b' ');
            let num = |p: Option<&[u8]>| p.and_then(|p| std::str::from_utf8(p).ok()).and_then(|s| s.parse().ok());
            let (Some(seq), Some(tid), Some(asked)) = (num(parts.next()), num(parts.next()), num(parts.next())) else {
                continue;
            };
            // Let go already (udtrace was stopped or busy): its thread id may name
            // another thread by now, which must not be seized.
            if monotonic_ms().saturating_sub(asked) >= self.limit.as_millis() as u64 {
                continue;
            }
            let path = PathBuf::from(std::ffi::OsString::from_vec(parts.next().unwrap_or_default().to_vec()));
            out.push(Exec { seq, tid: tid as i32, path });
        }
        out
    }

    /// Lets `exec` go on (after the thread was seized, or not to be).
    pub fn go(&self, exec: Exec) {
        let _ = send(self.sock.as_raw_fd(), format!("go {}", exec.seq).as_bytes(), MsgFlags::MSG_DONTWAIT);
    }

    /// `path` is an image udtrace has seen: its execs pass without waiting.
    pub fn ignore(&self, path: &Path) {
        let mut m = b"ignore ".to_vec();
        m.extend_from_slice(path.as_os_str().as_bytes());
        if m.len() <= MAX_MESSAGE {
            let _ = send(self.sock.as_raw_fd(), &m, MsgFlags::empty());
        }
    }
}

impl Drop for ExecGate {
    fn drop(&mut self) {
        // The socket's end tells the keeper to go; it exits at once, its group closed.
        let _ = nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        let _ = self.keeper.wait();
    }
}

/// CLOCK_MONOTONIC in milliseconds: one clock for udtrace and its keeper.
fn monotonic_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// What the other side of the socket said.
enum Heard {
    Message(Vec<u8>),
    /// Nothing waiting.
    Nothing,
    /// The other side has gone (or the socket failed).
    End,
}

/// One message if one is there, without waiting.
fn receive(sock: &OwnedFd) -> Heard {
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        match recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Heard::End,
            Ok(n) => {
                buf.truncate(n);
                return Heard::Message(buf);
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Heard::Nothing,
            Err(_) => return Heard::End,
        }
    }
}

/// The keeper's life (udtrace's binary started with [`GATE_ENV`], its stdin the socket
/// to udtrace): opens the gate, says `ready N` (or `error WHY`), then answers execs until
/// udtrace's end. Returns the exit status.
pub fn keeper_main() -> i32 {
    let spec = std::env::var(GATE_ENV).unwrap_or_default();
    let (pid, ms) = spec.split_once(':').unwrap_or(("0", "250"));
    let udtrace: i32 = pid.parse().unwrap_or(0);
    let limit = Duration::from_millis(ms.parse().unwrap_or(250));
    let Ok(sock) = std::io::stdin().as_fd().try_clone_to_owned() else { return 1 };
    if let Ok(name) = std::ffi::CString::new(GATE_NAME) {
        let _ = nix::sys::prctl::set_name(&name);
    }
    // Terminal signals are for udtrace's process group, not this one: held off (a
    // hangup or a stop here would end or stop the gate while udtrace holds execs).
    let mut mask = nix::sys::signal::SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGHUP, Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        mask.add(s);
    }
    let _ = mask.thread_block();
    let fan = match Fanotify::init(
        InitFlags::FAN_CLOEXEC
            | InitFlags::FAN_NONBLOCK
            | InitFlags::FAN_CLASS_CONTENT
            | InitFlags::FAN_REPORT_TID
            | InitFlags::FAN_UNLIMITED_MARKS,
        EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC,
    ) {
        Ok(f) => f,
        Err(e) => {
            let _ = send(sock.as_raw_fd(), format!("error fanotify: {e}").as_bytes(), MsgFlags::empty());
            return 1;
        }
    };
    let n = mark_filesystems(&fan);
    if n == 0 {
        let _ = send(sock.as_raw_fd(), b"error no file system could be marked", MsgFlags::empty());
        return 1;
    }
    if send(sock.as_raw_fd(), format!("ready {n}").as_bytes(), MsgFlags::empty()).is_err() {
        return 1;
    }
    let mut keeper = Keeper { fan, sock, udtrace, limit, seq: 0 };
    keeper.serve();
    0
}

struct Keeper {
    fan: Fanotify,
    sock: OwnedFd,
    udtrace: i32,
    limit: Duration,
    seq: u64,
}

impl Keeper {
    fn serve(&mut self) {
        loop {
            let mut fds =
                [PollFd::new(self.fan.as_fd(), PollFlags::POLLIN), PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return,
            }
            let told = fds[1].revents().is_some_and(|r| !r.is_empty());
            if told && !self.heed() {
                return;
            }
            let events = match self.fan.read_events() {
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
                let mut gone = false;
                if must_hold(tid, self.udtrace) {
                    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
                    gone = !self.ask(tid, &path);
                }
                let _ = self.fan.write_response(FanotifyResponse::new(fd, Response::FAN_ALLOW));
                if gone {
                    return;
                }
            }
        }
    }

    /// Reads what udtrace says (ignore marks; a late `go` is dropped). False at its end.
    fn heed(&mut self) -> bool {
        loop {
            match receive(&self.sock) {
                Heard::Message(m) => self.told(&m),
                Heard::Nothing => return true,
                Heard::End => return false,
            }
        }
    }

    /// What udtrace said other than an awaited `go`: `ignore PATH` marks the file; a
    /// late `go` is dropped.
    fn told(&self, m: &[u8]) {
        if let Some(p) = m.strip_prefix(b"ignore ") {
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(p));
            let _ = self.fan.mark(
                MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_IGNORED_MASK,
                MaskFlags::FAN_OPEN_EXEC_PERM,
                None,
                Some(path.as_path()),
            );
        }
    }

    /// Asks udtrace to seize `tid` and waits for its `go`, at most the limit. False
    /// when udtrace has ended.
    fn ask(&mut self, tid: i32, path: &Path) -> bool {
        self.seq += 1;
        let mut m = format!("exec {} {tid} {} ", self.seq, monotonic_ms()).into_bytes();
        m.extend_from_slice(path.as_os_str().as_bytes());
        m.truncate(MAX_MESSAGE);
        if send(self.sock.as_raw_fd(), &m, MsgFlags::MSG_DONTWAIT).is_err() {
            return true;
        }
        let want = format!("go {}", self.seq);
        let deadline = Instant::now() + self.limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
            let ms = PollTimeout::try_from(left.as_millis().clamp(1, 60_000) as i32).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, ms) {
                Ok(0) => return true,
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return true,
            }
            match receive(&self.sock) {
                Heard::Message(m) if m == want.as_bytes() => return true,
                Heard::Message(m) => self.told(&m),
                Heard::Nothing => {}
                Heard::End => return false,
            }
        }
    }
}

/// Marks the gate's event on each file system of the mount table, once per file system
/// (a file system mark covers all its mounts, in every namespace).
fn mark_filesystems(fan: &Fanotify) -> usize {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return 0 };
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
    marked
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
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Whether thread `tid`'s exec is held for udtrace: not when it is udtrace's or its
/// child's (followed already, the undertaker, this keeper), not when a tracer has it
/// (udtrace's follower arms it at its exec stop; another tracer's cannot be seized), not
/// for a thread other than its process's leader (its exec takes the leader's id: what
/// was seized would be gone), and never for init (pid 1, re-exec'ing itself): no one
/// may depend on a tracer to get it going again.
fn must_hold(tid: i32, udtrace: i32) -> bool {
    if tid == 1 {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else { return false };
    let field = |name: &str| -> Option<i32> {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok())
    };
    let (Some(tgid), Some(ppid), Some(tracer)) = (field("Tgid:"), field("PPid:"), field("TracerPid:")) else {
        return false;
    };
    tgid == tid && tgid != udtrace && ppid != udtrace && tracer == 0
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
