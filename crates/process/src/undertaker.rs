//! What puts a process's code back when udtrace cannot: the undertaker.
//!
//! The in-process backend patches code in the processes it traces, and takes the
//! patches out when it stops. Killed with SIGKILL, it cannot. So before its first patch
//! it starts the undertaker, a copy of its own binary in a process group of its own
//! (a signal to udtrace's group does not reach it), and tells it through a pipe every
//! change it is about to make ([`Ledger`]): the address, the original bytes and the
//! bytes written, with the process's start time (a pid may be reused). A clean stop
//! sends `C` first. When the pipe closes without it, udtrace died: the undertaker
//! stops every thread of each process with ptrace (udtrace's ptrace went with it),
//! writes the original bytes back wherever the written ones are still there, and lets
//! the threads go. No thread is inside a patch's bytes: a patch is only written where
//! no thread is stopped inside them, and a thread after it runs the jump whole.
//! Trampolines, rings and the SIGTRAP guard stay mapped, unused. A USDT semaphore
//! udtrace raised (`R`) is lowered by one, never written with an absolute value
//! (another tracer may hold its own count there), and only in a process that still
//! runs the image udtrace changed: one of its byte changes is still there.
//!
//! One text line per message:
//!
//! ```text
//!   W pid start addr original written   a patch (hex bytes) is about to be written
//!   R pid start addr                    the u16 semaphore at addr is about to be raised by 1
//!   U pid addr                          the change at addr is taken out (handed over)
//!   F parent child                      child was forked with parent's patches
//!   G pid                               pid's patches are gone (undone, exec, exit)
//!   C                                   udtrace stops cleanly: nothing to undo
//! ```

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, BufRead, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::wait::WaitPidFlag;
use nix::unistd::Pid;

use crate::procfs;
use crate::wait::waitpid;

/// The environment variable that makes udtrace's binary the undertaker.
pub const UNDERTAKER_ENV: &str = "UDTRACE_UNDERTAKER";

/// Its name (`comm`), as `ps` shows it.
pub const UNDERTAKER_NAME: &str = "udtrace-undertk";

/// One change written into a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub at: u64,
    pub original: Vec<u8>,
    pub written: Vec<u8>,
    /// A USDT semaphore (a u16) raised by 1 at `at`, to be lowered by 1 (`original`
    /// and `written` empty).
    pub raise: bool,
}

/// What the undertaker knows: per process, its start time and its changes in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Book {
    pub procs: BTreeMap<i32, (u64, Vec<Change>)>,
    pub clean: bool,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 64 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

impl Book {
    /// Takes one message; a malformed one is ignored.
    pub fn take(&mut self, line: &str) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| s.parse::<i64>().ok();
        match f.as_slice() {
            ["W", pid, start, at, original, written] => {
                let (Some(pid), Some(start)) = (num(pid), num(start)) else { return };
                let Ok(at) = u64::from_str_radix(at, 16) else { return };
                let (Some(original), Some(written)) = (unhex(original), unhex(written)) else { return };
                if original.len() != written.len() {
                    return;
                }
                let entry = self.procs.entry(pid as i32).or_insert((start as u64, Vec::new()));
                entry.1.push(Change { at, original, written, raise: false });
            }
            ["R", pid, start, at] => {
                let (Some(pid), Some(start)) = (num(pid), num(start)) else { return };
                let Ok(at) = u64::from_str_radix(at, 16) else { return };
                let entry = self.procs.entry(pid as i32).or_insert((start as u64, Vec::new()));
                entry.1.push(Change { at, original: Vec::new(), written: Vec::new(), raise: true });
            }
            ["F", parent, child] => {
                let (Some(parent), Some(child)) = (num(parent), num(child)) else { return };
                if let Some((_, changes)) = self.procs.get(&(parent as i32)) {
                    let changes = changes.clone();
                    // The child's own start time, read now: it runs, held by udtrace.
                    let start = start_time(child as i32).unwrap_or(0);
                    self.procs.insert(child as i32, (start, changes));
                }
            }
            ["U", pid, at] => {
                let (Some(pid), Ok(at)) = (num(pid), u64::from_str_radix(at, 16)) else { return };
                if let Some((_, changes)) = self.procs.get_mut(&(pid as i32)) {
                    changes.retain(|c| c.at != at);
                }
            }
            ["G", pid] => {
                if let Some(pid) = num(pid) {
                    self.procs.remove(&(pid as i32));
                }
            }
            ["C"] => self.clean = true,
            _ => {}
        }
    }
}

/// A process's start time (field 22 of its stat, clock ticks since boot).
pub fn start_time(pid: i32) -> Option<u64> {
    let (_, fields) = procfs::task_stat(pid, pid).ok()?;
    fields.get(19)?.parse().ok()
}

/// udtrace's side: the pipe to its undertaker.
pub struct Ledger {
    child: Undertaker,
    pipe: Option<Box<dyn Write + Send>>,
}

/// How the undertaker was started.
enum Undertaker {
    /// `/proc/self/exe` run again.
    Spawned(Child),
    /// udtrace forked before it started any thread ([`start_early`]).
    Forked(i32),
}

/// The undertaker forked at udtrace's start, until the first patch asks for one.
static EARLY: std::sync::Mutex<Option<Ledger>> = std::sync::Mutex::new(None);

/// Forks the undertaker now, while udtrace has one thread, for [`Ledger::start`] to
/// take: the copy of udtrace needs no exec (its binary loaded and linked again: ~1 ms
/// of the 10 ms a short run costs udtrace). Where the fork is refused, the first patch
/// runs `/proc/self/exe` as before. A session that never patches leaves it waiting; it
/// goes, undoing nothing, when udtrace's end closes its pipe.
pub fn start_early() {
    let Ok((read, write)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else { return };
    match udtrace_sys::process::fork_single_threaded() {
        Ok(0) => {
            drop(write);
            std::process::exit(forked_life(read));
        }
        Ok(pid) => {
            drop(read);
            // Its own group as the spawned one's: set here too, so that no signal to
            // udtrace's group reaches it before it has set it itself.
            let _ = nix::unistd::setpgid(Pid::from_raw(pid), Pid::from_raw(pid));
            let ledger = Ledger { child: Undertaker::Forked(pid), pipe: Some(Box::new(std::fs::File::from(write))) };
            if let Ok(mut early) = EARLY.lock() {
                *early = Some(ledger);
            }
        }
        // Refused (a thread started already): the first patch spawns one.
        Err(_) => {}
    }
}

/// Lets the undertaker forked at start go if no patch took it: it is told udtrace
/// stopped cleanly and reaped, leaving no process behind.
pub fn end_early() {
    if let Some(early) = EARLY.lock().ok().and_then(|mut e| e.take()) {
        early.close();
    }
}

/// The forked undertaker's life: the spawned one's (the pipe its stdin, its output
/// nowhere, its own process group, not ended by the terminal's hang-up or interrupt).
/// Its exit status.
fn forked_life(read: std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::{AsRawFd, IntoRawFd};
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    // udtrace's stdin is not held open by it (a pipe's writer would not see it close);
    // the pipe may be descriptor 0 already, when udtrace started without a stdin.
    let read = read.into_raw_fd();
    if read != 0 {
        if nix::unistd::dup2(read, 0).is_err() {
            return 1;
        }
        let _ = nix::unistd::close(read);
    }
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2(null.as_raw_fd(), 1);
    }
    let mut quiet = nix::sys::signal::SigSet::empty();
    quiet.add(nix::sys::signal::Signal::SIGHUP);
    quiet.add(nix::sys::signal::Signal::SIGINT);
    let _ = quiet.thread_block();
    serve(io::stdin().lock());
    0
}

impl Ledger {
    /// Starts the undertaker: the one forked at udtrace's start ([`start_early`]), or
    /// `/proc/self/exe` with [`UNDERTAKER_ENV`] set.
    pub fn start() -> io::Result<Ledger> {
        if let Some(early) = EARLY.lock().ok().and_then(|mut e| e.take()) {
            return Ok(early);
        }
        let mut child = Command::new("/proc/self/exe")
            .env(UNDERTAKER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take().map(|p| Box::new(p) as Box<dyn Write + Send>);
        Ok(Ledger { child: Undertaker::Spawned(child), pipe })
    }

    fn send(&mut self, line: &str) {
        if let Some(p) = self.pipe.as_mut() {
            if p.write_all(line.as_bytes()).is_err() {
                self.pipe = None;
            }
        }
    }

    /// `written` is about to replace `original` at `at` in `pid`.
    pub fn writing(&mut self, pid: i32, at: u64, original: &[u8], written: &[u8]) {
        let start = start_time(pid).unwrap_or(0);
        self.send(&format!("W {pid} {start} {at:x} {} {}\n", hex(original), hex(written)));
    }

    /// The u16 semaphore at `at` in `pid` is about to be raised by 1 (a USDT probe's).
    pub fn raising(&mut self, pid: i32, at: u64) {
        let start = start_time(pid).unwrap_or(0);
        self.send(&format!("R {pid} {start} {at:x}\n"));
    }

    /// The change written at `at` in `pid` was taken out again (the original bytes are
    /// back): nothing to undo there.
    pub fn undone(&mut self, pid: i32, at: u64) {
        self.send(&format!("U {pid} {at:x}\n"));
    }

    pub fn forked(&mut self, parent: i32, child: i32) {
        self.send(&format!("F {parent} {child}\n"));
    }

    pub fn gone(&mut self, pid: i32) {
        self.send(&format!("G {pid}\n"));
    }

    /// udtrace stops cleanly: the undertaker goes without touching anything.
    pub fn close(mut self) {
        self.send("C\n");
        self.pipe = None;
        // Reaped when it ends (soon, its pipe closed), so as not to leave a zombie.
        match &mut self.child {
            Undertaker::Spawned(c) => drop(c.wait()),
            Undertaker::Forked(pid) => drop(waitpid(Some(Pid::from_raw(*pid)), WaitPidFlag::empty())),
        }
    }
}

/// The undertaker's life: reads messages until the pipe closes, then undoes what is
/// left unless udtrace said it stopped cleanly. Returns what it restored, by process.
pub fn serve(input: impl BufRead) -> Vec<(i32, usize)> {
    if let Ok(name) = std::ffi::CString::new(UNDERTAKER_NAME) {
        let _ = nix::sys::prctl::set_name(&name);
    }
    let mut book = Book::default();
    for line in input.lines() {
        let Ok(line) = line else { break };
        book.take(&line);
    }
    if book.clean {
        return Vec::new();
    }
    let done: Vec<(i32, usize)> =
        book.procs.iter().map(|(&pid, (start, changes))| (pid, undo(pid, *start, changes, &book))).collect();
    if let Some(log) = std::env::var_os("UDTRACE_UNDERTAKER_LOG") {
        let text = format!("{book:?}\n{done:?}\n");
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| f.write_all(text.as_bytes()));
    }
    done
}

/// Undoes `changes` in `pid` (when it is still the process that started at `start`)
/// and in every child of it the book does not list: one forked while udtrace died,
/// before it could say so, is a copy of its parent, patches included. The number of
/// changes restored, children included.
fn undo(pid: i32, start: u64, changes: &[Change], book: &Book) -> usize {
    if start_time(pid) != Some(start) {
        return 0; // gone, or another process with its pid
    }
    let mut restored = 0;
    let mut todo = vec![pid];
    let mut done: Vec<i32> = Vec::new();
    while let Some(p) = todo.pop() {
        if done.contains(&p) {
            continue;
        }
        done.push(p);
        restored += undo_one(p, changes);
        // Only where the written bytes are: an exec'd child has none of them.
        todo.extend(children(p).into_iter().filter(|c| !book.procs.contains_key(c)));
    }
    restored
}

/// The children of `pid` (every thread's).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|n| n.parse().ok()).collect::<Vec<i32>>())
        .collect()
}

/// Stops every thread of `pid`, writes the original bytes back where the written ones
/// still are (latest change first), lets the threads go. The number restored.
fn undo_one(pid: i32, changes: &[Change]) -> usize {
    // udtrace's files close before the kernel lets its tracees go: wait for that.
    let deadline = Instant::now() + Duration::from_secs(2);
    while procfs::tracer_pid(pid).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut held: Vec<i32> = Vec::new();
    // Threads come and go: seize until a listing has none new (held ones create none).
    loop {
        let new: Vec<i32> = procfs::tasks(pid).unwrap_or_default().into_iter().filter(|t| !held.contains(t)).collect();
        if new.is_empty() {
            break;
        }
        for tid in new {
            let p = Pid::from_raw(tid);
            if ptrace::seize(p, ptrace::Options::empty()).is_err() {
                // Gone, or another tracer took it: its bytes are written all the same
                // (a thread runs a jump or the original, one whole write apart).
                held.push(tid);
                continue;
            }
            held.push(tid);
            if ptrace::interrupt(p).is_ok() {
                wait_stop(p);
            }
        }
    }
    let mut restored = 0;
    if let Ok(mem) = OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/mem")) {
        // A semaphore is lowered only in the image udtrace raised it in: one where a
        // patch or breakpoint of its own is still there (every USDT site armed is one).
        let image_ours = changes.iter().filter(|c| !c.raise).any(|c| {
            let mut now = vec![0u8; c.written.len()];
            mem.read_exact_at(&mut now, c.at).is_ok() && still_ours(&now, c)
        });
        for c in changes.iter().rev() {
            if c.raise {
                if image_ours && lower(&mem, c.at) {
                    restored += 1;
                }
                continue;
            }
            let mut now = vec![0u8; c.written.len()];
            if mem.read_exact_at(&mut now, c.at).is_ok() && still_ours(&now, c) {
                // An int3 over the patch's first byte is another tracer's uprobe's: it
                // stays, and the kernel writes the file's byte back when it goes.
                let uprobe = uprobe_over_first(&now, c);
                let skip = usize::from(uprobe);
                if mem.write_all_at(&c.original[skip..], c.at + skip as u64).is_ok() {
                    restored += 1;
                }
            }
        }
    }
    for tid in held {
        let _ = ptrace::detach(Pid::from_raw(tid), None);
    }
    restored
}

/// Lowers the u16 semaphore at `at` by 1 (not below 0): the one udtrace added.
pub fn lower(mem: &std::fs::File, at: u64) -> bool {
    let mut v = [0u8; 2];
    if mem.read_exact_at(&mut v, at).is_err() {
        return false;
    }
    let n = u16::from_le_bytes(v);
    n > 0 && mem.write_all_at(&(n - 1).to_le_bytes(), at).is_ok()
}

/// Whether `now`, the bytes at `c`, are udtrace's change still: each byte the one
/// written or already the original, not all original. (A kernel uprobe of another
/// session on a byte inside the patch, an int3 pad never run, writes the file's byte
/// back there when it goes.) The first byte may be another tracer's uprobe's `int3`
/// (an entry patched over its first byte, docs/pid-provider.md).
fn still_ours(now: &[u8], c: &Change) -> bool {
    let from = usize::from(uprobe_over_first(now, c));
    now != c.original.as_slice()
        && now.iter().zip(c.written.iter().zip(&c.original)).skip(from).all(|(n, (w, o))| n == w || n == o)
}

/// Whether the first byte of the change is an `int3` neither udtrace nor the file put
/// there.
fn uprobe_over_first(now: &[u8], c: &Change) -> bool {
    now.first() == Some(&0xcc) && c.written.first() != Some(&0xcc) && c.original.first() != Some(&0xcc)
}

/// Waits (at most a second) for `p`'s interrupt stop; a signal stop first is passed on.
fn wait_stop(p: Pid) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        match waitpid(Some(p), WaitPidFlag::__WALL | WaitPidFlag::WNOHANG) {
            Ok(crate::wait::Wait::Status(nix::sys::wait::WaitStatus::StillAlive)) => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(w) if w.delivery_signal().is_some() => crate::wait::cont(p.as_raw(), w.delivery_signal().unwrap_or(0)),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_ours_while_each_byte_is_written_or_original() {
        let c = Change { at: 0, original: vec![0x25, 0xff, 0xc3], written: vec![0xe9, 0x82, 0xcc], raise: false };
        assert!(still_ours(&[0xe9, 0x82, 0xcc], &c));
        assert!(still_ours(&[0xe9, 0x82, 0xc3], &c), "a uprobe put the pad's byte back");
        assert!(!still_ours(&[0x25, 0xff, 0xc3], &c), "already the original");
        assert!(!still_ours(&[0x48, 0x89, 0xc3], &c), "another image");
        // Another tracer's uprobe over the patch's first byte: the rest is put back.
        assert!(still_ours(&[0xcc, 0x82, 0xcc], &c) && uprobe_over_first(&[0xcc, 0x82, 0xcc], &c));
        assert!(!uprobe_over_first(&[0xe9, 0x82, 0xcc], &c));
    }

    #[test]
    fn the_book_follows_the_messages() {
        let mut b = Book::default();
        for l in ["W 10 77 1000 554889e5 e9aabbccdd", "W 10 77 1000 5548 e9aa", "W 10 77 2000 55 cc", "W x", "G 11"] {
            b.take(l);
        }
        assert_eq!(b.procs[&10].0, 77);
        assert_eq!(b.procs[&10].1.len(), 2, "the entry of two lengths is dropped");
        assert_eq!(b.procs[&10].1[1], Change { at: 0x2000, original: vec![0x55], written: vec![0xcc], raise: false });
        b.take("R 10 77 3000");
        assert_eq!(b.procs[&10].1[2], Change { at: 0x3000, original: vec![], written: vec![], raise: true });
        b.take("U 10 3000");
        b.take("U 10 1000");
        assert_eq!(b.procs[&10].1.len(), 1, "the change at 0x1000 is undone");
        assert_eq!(b.procs[&10].1[0].at, 0x2000);
        b.take("G 10");
        assert!(b.procs.is_empty());
        assert!(!b.clean);
        b.take("C");
        assert!(b.clean);
    }
}
