//! The buffers of the firing-time programs (docs/firing.md): one per process image, a
//! memfd mapped shared in the process (its forked children share it, as they share the
//! ring) and in udtrace, which runs breakpoint sites' programs on it and reads every
//! buffer ever made (a process that ended still counts) for the snapshots.

use std::rc::Rc;

use udtrace_dif::interp::{self, Firing, Memory, Outcome, Words};
use udtrace_dif::op::{Op, UserMem};
use udtrace_dif::snapshot::{retire_threads, Snapshot};
use udtrace_dif::{BufferLayout, Layout, Program};
use udtrace_process::inject::{self, Prot, SharedRegion};

/// A buffer as udtrace's mapping holds it, shared with processes that update it with
/// atomic instructions.
struct Shared<'a>(&'a SharedRegion);

impl Words for Shared<'_> {
    fn load(&self, off: usize) -> u64 {
        self.0.view.load_acquire_u64(off)
    }

    /// The memfd's data, as `lseek` finds it: the pages of 4,096 thread entries are
    /// holes but for the few threads that fired, and reading them all at every
    /// snapshot and scan allocated them (1 ms of a 10 ms start-up and end).
    fn written(&self) -> Option<Vec<(usize, usize)>> {
        use nix::unistd::{lseek, Whence};
        use std::os::fd::AsRawFd;
        let (fd, end) = (self.0.fd.as_raw_fd(), self.0.view.len() as i64);
        let mut out = Vec::new();
        let mut at = 0;
        while at < end {
            let data = match lseek(fd, at, Whence::SeekData) {
                Ok(d) => d,
                Err(nix::errno::Errno::ENXIO) => break, // nothing past `at`
                Err(_) => return None,
            };
            let hole = lseek(fd, data, Whence::SeekHole).ok()?.min(end);
            out.push((usize::try_from(data).ok()?, usize::try_from(hole).ok()?));
            at = hole;
        }
        Some(out)
    }
}

impl Memory for Shared<'_> {
    fn store(&mut self, off: usize, v: u64) {
        self.0.view.store_release_u64(off, v);
    }
    fn fetch_add(&mut self, off: usize, v: u64) -> u64 {
        self.0.view.fetch_add_u64(off, v)
    }
    fn cmpxchg(&mut self, off: usize, old: u64, new: u64) -> u64 {
        self.0.view.cmpxchg_u64(off, old, new)
    }
}

/// Whether `p` keeps anything in a buffer (thread-local variables, aggregations).
pub fn stores(p: &Program) -> bool {
    p.ops.iter().any(|op| matches!(op, Op::TlsLoad { .. } | Op::TlsStore { .. } | Op::Agg { .. }))
}

/// Whether `p` uses thread-local variables: its firings must all run where they meet
/// the process's buffer (trampolines and breakpoints), never in a BPF program, whose
/// variables are in a map of its own.
pub fn uses_tls(p: &Program) -> bool {
    p.ops.iter().any(|op| matches!(op, Op::TlsLoad { .. } | Op::TlsStore { .. }))
}

/// A stopped process's memory, as `Op::Str` reads it at a breakpoint: with
/// `process_vm_readv`, as a trampoline reads its own (up to the first unreadable page).
struct ProcMem(i32);

impl UserMem for ProcMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        match udtrace_process::procfs::read_memory(self.0, addr, buf.len()) {
            Ok(got) => {
                buf[..got.len()].copy_from_slice(&got);
                got.len()
            }
            Err(_) => 0,
        }
    }
}

/// Every buffer made in this session, and udtrace's own for breakpoint firings of
/// processes that have none.
pub struct Buffers {
    pub layout: Layout,
    pub buf: BufferLayout,
    /// With whether the process that made it is in udtrace's PID namespace (its
    /// threads' ids are then ones udtrace can look up).
    made: Vec<(Rc<SharedRegion>, bool)>,
    local: Option<Vec<u8>>,
    /// The rows of ended threads whose entries were freed ([`Buffers::retire`]).
    retired: Snapshot,
}

impl Buffers {
    /// `tables`: thread entries (a thread past them, its entry's neighbours all taken,
    /// is a dynamic-variable drop) and keys per keyed aggregation, per buffer.
    pub fn new(layout: &Layout, tables: (usize, usize)) -> Buffers {
        Buffers {
            layout: layout.clone(),
            buf: BufferLayout::new(layout, tables.0, tables.1),
            made: Vec::new(),
            local: None,
            retired: Snapshot::empty(layout),
        }
    }

    /// Whether the session's programs keep anything: processes then get a buffer.
    pub fn wanted(&self) -> bool {
        self.layout.tls > 0 || !self.layout.aggs.is_empty()
    }

    /// A new buffer mapped in the process of `tid` (stopped), its header written.
    pub fn create(&mut self, tid: i32, near: u64) -> Result<Rc<SharedRegion>, String> {
        let region = inject::create_shared_near(tid, self.buf.size as u64, near, Prot::READ | Prot::WRITE)
            .map_err(|e| format!("cannot map its firing buffer: {e}"))?;
        for (off, v) in self.buf.header() {
            region.view.store_release_u64(off, v);
        }
        let region = Rc::new(region);
        let ns = |p: &str| std::fs::read_link(p).ok();
        let same_ns = ns("/proc/self/ns/pid").is_some_and(|me| ns(&format!("/proc/{tid}/ns/pid")) == Some(me));
        self.made.push((region.clone(), same_ns));
        Ok(region)
    }

    /// Runs `p` for a firing at a breakpoint, on its process's buffer (`None`: it has
    /// none, udtrace's own).
    pub fn run(&mut self, p: &Program, f: &Firing, region: Option<&SharedRegion>) -> Outcome {
        let user = ProcMem(f.pid as i32);
        match region {
            Some(r) => interp::run_reading(p, &self.layout, &self.buf, f, &mut Shared(r), &user),
            None => {
                let buf = &self.buf;
                let local = self.local.get_or_insert_with(|| {
                    let mut m = vec![0u8; buf.size];
                    for (off, v) in buf.header() {
                        m.store(off, v);
                    }
                    m
                });
                interp::run_reading(p, &self.layout, &self.buf, f, local, &user)
            }
        }
    }

    /// Frees the thread entries of ended threads (of `tids`, or all), keeping their
    /// rows: forked workers share their parent's buffer, and each worker's threads
    /// take entries of their own (8,000 short-lived workers of the memory test filled
    /// 4,096 entries, and the later ones' firings were dropped).
    pub fn retire(&mut self, tids: Option<&[u64]>) {
        self.settle();
        let (layout, buf, into) = (&self.layout, &self.buf, &mut self.retired);
        for (r, same_ns) in &self.made {
            if *same_ns {
                retire_threads(layout, buf, &mut Shared(r), tids, &ended, into);
            }
        }
        if let Some(local) = self.local.as_mut() {
            retire_threads(layout, buf, local, tids, &ended, into);
        }
    }

    /// Buffers no process uses any more (every process that held one ended or exec'd:
    /// only this list holds it) are read one last time into the retired rows and let
    /// go: a daemon whose workers exec leaves one per worker, and reading them all at
    /// every snapshot, or scanning them for ended threads, cost more with each.
    fn settle(&mut self) {
        let (layout, buf, into) = (&self.layout, &self.buf, &mut self.retired);
        self.made.retain(|(r, _)| {
            if Rc::strong_count(r) > 1 {
                return true;
            }
            into.merge(layout, &Snapshot::read(layout, buf, &Shared(r)));
            false
        });
    }

    /// Every buffer's rows merged.
    pub fn snapshot(&mut self) -> Snapshot {
        self.settle();
        let mut s = self.retired.clone();
        for (r, _) in &self.made {
            s.merge(&self.layout, &Snapshot::read(&self.layout, &self.buf, &Shared(r)));
        }
        if let Some(local) = &self.local {
            s.merge(&self.layout, &Snapshot::read(&self.layout, &self.buf, local));
        }
        s
    }
}

/// Whether thread `tid` (in udtrace's PID namespace) has ended: gone, or a zombie.
fn ended(tid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{tid}/stat")) {
        Err(_) => true,
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| matches!(st, "Z" | "X")),
    }
}

/// The parent of `pid` now (from `/proc/<pid>/stat`; 0 if unreadable): at a breakpoint
/// the thread is stopped, and its parent is the one a trampoline's getppid() would see.
pub fn ppid_of(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The real user and group ids of `pid`, from `/proc/<pid>/status` (0 if unreadable).
pub fn ids_of(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let first = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (first("Uid:"), first("Gid:"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use udtrace_dif::layout::{AggDesc, AggFn};

    #[test]
    fn breakpoint_firings_without_a_buffer_count_in_udtraces_own() {
        let layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 0 }], strsize: 0 };
        let mut b = Buffers::new(&layout, (64, 64));
        assert!(b.wanted());
        let p = Program {
            ops: vec![
                Op::Const { d: 0, v: 9 },
                Op::TlsStore { slot: 0, a: 0 },
                Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 },
            ],
        };
        assert!(stores(&p) && uses_tls(&p));
        for tid in [5, 6, 5] {
            b.run(&p, &Firing { tid, ..Firing::default() }, None);
        }
        let s = b.snapshot();
        assert_eq!(s.aggs[0][&vec![]], vec![3]);
        assert_eq!(s.tls[&5], vec![9]);
        let me = std::process::id() as i32;
        let (uid, _) = ids_of(me);
        assert_eq!(uid, u64::from(nix::unistd::getuid().as_raw()));
    }
}
