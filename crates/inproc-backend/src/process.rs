//! What the in-process backend keeps of each traced process: its ring, its data page,
//! the regions its trampolines live in and the bytes each patch replaced. Everything
//! here runs while every thread of the process is in a ptrace stop under udtrace.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::libc;

use udtrace_inproc::dif::{SiteWork, DATA_UID};
use udtrace_inproc::ring::{Geometry, Reader, DROP_CPUS};
use udtrace_inproc::trampoline::{
    errno_words, generate_with_landing, CpuSource, ProcessAddrs, Trampoline, TrampolineError, DATA_ARGS,
    DATA_ERRNO_SLOT, DATA_PID, GLIBC_TID_OFFSET,
};
use udtrace_object::patch::{self, SiteKind as PatchKind};
use udtrace_process::inject::{self, Prot, RemoteCall, SharedRegion, REACH};
use udtrace_process::procfs::{self, LoadedObject};
use udtrace_process::undertaker::Ledger;
use udtrace_providers::backend::Work;
use udtrace_providers::pid::PidProbe;
use udtrace_record::pid::RecordPlan;

use crate::breakpoint::Breakpoint;
use crate::firing::{self, Buffers};
use crate::guard::Guard;

/// Bytes of each trampoline region.
const REGION_LEN: u64 = 1 << 20;
/// Trampolines start on 16-byte boundaries.
const ALIGN: u64 = 16;
/// Room for the largest trampoline.
const ROOM: u64 = 1024;

/// One site to patch.
pub struct Site<'a> {
    pub file: &'a Path,
    pub file_off: u64,
    /// Offset in its function.
    pub offset: u64,
    pub func_size: u64,
    pub kind: PatchKind,
    pub cookie: u64,
    /// What its firings stash and read (`Trampoline::stash_ops`).
    pub stash_ops: u64,
}

/// A region of trampolines, shared by a process and the children it forked (the
/// mapping is shared memory).
struct Region {
    shared: SharedRegion,
    used: u64,
}

/// A patched site: where, the bytes it had and the bytes written.
#[derive(Clone)]
struct Patch {
    at: u64,
    original: Vec<u8>,
    written: Vec<u8>,
}

/// The landing of an entry patched over its first byte (`PatchPlan::landing`): an
/// `int3` right after the first instruction, reached only when another tracer's uprobe
/// ran that instruction, or when it was whole again once that uprobe went.
#[derive(Clone, Copy, Debug)]
pub struct Landing {
    /// Where the thread goes on: the trampoline's copy of the code after the first
    /// instruction.
    pub target: u64,
    /// The patch's first byte (the function's entry), and the file's byte there.
    pub entry: u64,
    pub first: u8,
}

/// What a thread stopped at an `int3` of a process's had hit ([`Proc::trap`]).
pub enum Hit {
    Breakpoint(u64, nix::libc::user_regs_struct),
    Landing(Landing),
}

/// Puts a patch's original bytes back, but for an `int3` another tracer's uprobe wrote
/// over its first byte since (the function's entry): that byte stays the uprobe's, and
/// the kernel writes the file's byte back when the uprobe goes.
fn put_back(m: &File, p: &Patch) -> std::io::Result<()> {
    let mut now = vec![0u8; p.written.len()];
    m.read_exact_at(&mut now, p.at)?;
    // Only where the patch still is: the object it went into may have been unloaded
    // and another mapped there since (whose code is not udtrace's to write). Byte by
    // byte, what udtrace wrote, the original (a kernel uprobe inside the patch writes
    // the file's byte back over a landing's int3 when it goes) or another tracer's int3.
    let ours = now.iter().zip(p.written.iter().zip(&p.original)).all(|(&b, (&w, &o))| b == w || b == o || b == 0xcc);
    if !ours {
        return Ok(());
    }
    if now[0] == 0xcc && p.original.first() != Some(&0xcc) {
        return m.write_all_at(&p.original[1..], p.at + 1);
    }
    m.write_all_at(&p.original, p.at)
}

/// Why an entry's trampoline could not be placed where its jump must point.
const FORCED_NO_ROOM: &str = "no free place in reach where its jump, which keeps its first instruction's \
                              bytes for other tracers' uprobes, can point";

/// The highest user address with 4-level paging.
const USER_TOP: u64 = 0x7fff_ffff_f000;

/// The rings udtrace reads, each written by one process and the children it forked.
#[derive(Default)]
pub struct Rings {
    list: Vec<Option<RingState>>,
    /// Drops counted by rings already let go, by CPU.
    gone_drops: Vec<u64>,
    /// The last drain stopped at its bound with records left.
    capped: bool,
}

struct RingState {
    region: SharedRegion,
    reader: Reader,
    /// Processes that write into it.
    users: usize,
}

impl Rings {
    fn add(&mut self, region: SharedRegion, reader: Reader) -> usize {
        let ring = Some(RingState { region, reader, users: 1 });
        // A slot let go is taken again: a daemon's short-lived workers must not grow
        // the list (nor every drain's walk over it).
        if let Some(i) = self.list.iter().position(Option::is_none) {
            self.list[i] = ring;
            return i;
        }
        self.list.push(ring);
        self.list.len() - 1
    }

    fn share(&mut self, i: usize) {
        if let Some(Some(r)) = self.list.get_mut(i) {
            r.users += 1;
        }
    }

    /// A process stopped writing into ring `i`; the last one's ring is let go once the
    /// records its writers committed after the last drain began are read (the session
    /// consumes every firing before it handles an exec or an exit): at the next drain,
    /// from the ring itself, not copied.
    fn leave(&mut self, i: usize) {
        let Some(Some(r)) = self.list.get_mut(i) else { return };
        r.users = r.users.saturating_sub(1);
    }

    /// Reads what is left in a ring no process writes into (at most `max` records), and
    /// lets it go once empty. A slot reserved and never committed (a writer that died in
    /// the middle) is a drop: no writer is left to commit it, so it is skipped at once (a
    /// few rounds: one per writer that died in the middle of a record). Whether the
    /// ring was let go.
    fn drain_gone(
        r: &mut RingState,
        i: usize,
        gone_drops: &mut Vec<u64>,
        max: u64,
        each: &mut impl FnMut(&[u8]),
    ) -> (u64, bool) {
        let later = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        let (mut idle, mut read) = (0, 0);
        for _ in 0..64 {
            let before = r.reader.unread(&r.region.view);
            let d = r.reader.drain_upto(&mut r.region.view, later, max.saturating_sub(read), &mut *each);
            read += d.records;
            if d.capped {
                return (read, false);
            }
            let now = r.reader.unread(&r.region.view);
            // The first call on a stalled slot only notes it; the next skips it.
            idle = if now == before { idle + 1 } else { 0 };
            if now == 0 || idle == 2 {
                break;
            }
        }
        // Slots stepped over and still watched for a late commit: no writer is left
        // to commit them.
        r.reader.give_up_late();
        let unread = r.reader.unread(&r.region.view);
        udtrace_messages::debug!(
            "ring {i} let go: {} slots skipped, {} committed late, {unread} unread, {} dropped full",
            r.reader.skipped(),
            r.reader.taken_late(),
            r.reader.drops(&r.region.view)
        );
        let mut drops = ring_drops(r);
        drops[0] = drops[0].saturating_add(unread);
        add_drops(gone_drops, &drops);
        (read, true)
    }

    /// With one ring alone: how many of its next records, about `bytes` of them at
    /// most, may go out from where they lie, without a copy (see
    /// [`Reader::sorted_run`]: times never decreasing and below `before`). `None` with
    /// more rings than one, or when they must be copied to be sorted.
    pub fn in_order(&self, bytes: usize, before: u64) -> Option<u64> {
        let mut live = self.list.iter().flatten();
        let (r, None) = (live.next()?, live.next()) else { return None };
        let size = r.reader.geometry().slot_size.max(1) as usize;
        let max = (bytes / size).max(1) as u64;
        r.reader.sorted_run(&r.region.view, udtrace_record::pid::OFF_KTIME, before, max).filter(|&n| n > 0)
    }

    /// Hands the next `n` records of the one ring ([`Rings::in_order`]) to `each`, read
    /// in place. Whether records are left after them.
    pub fn drain_in_order(&mut self, n: u64, each: impl FnMut(&[u8])) -> bool {
        let Some(r) = self.list.iter_mut().flatten().next() else { return false };
        let d = r.reader.drain_upto(&mut r.region.view, std::time::Instant::now(), n, each);
        self.capped = d.capped;
        d.capped
    }

    /// Hands the committed records of every ring to `each`, up to about `bytes` bytes
    /// of them: first those left in rings let go since the last drain. Whether every
    /// record was taken.
    pub fn drain_upto(&mut self, bytes: usize, mut each: impl FnMut(&[u8])) -> bool {
        let mut room = bytes;
        let now = std::time::Instant::now();
        self.capped = false;
        for (i, slot) in self.list.iter_mut().enumerate() {
            let Some(r) = slot else { continue };
            let size = r.reader.geometry().slot_size.max(1) as usize;
            let max = (room / size).max(1) as u64;
            let read = if r.users == 0 {
                let (read, gone) = Rings::drain_gone(r, i, &mut self.gone_drops, max, &mut each);
                if gone {
                    *slot = None;
                } else {
                    self.capped = true;
                }
                read
            } else {
                let d = r.reader.drain_upto(&mut r.region.view, now, max, &mut each);
                self.capped |= d.capped;
                d.records
            };
            room = room.saturating_sub(read as usize * size);
        }
        !self.capped
    }

    /// Records committed or reserved in every ring, not read yet.
    pub fn unread(&self) -> u64 {
        self.list.iter().flatten().map(|r| r.reader.unread(&r.region.view)).fold(0, u64::saturating_add)
    }

    /// Whether a ring is at least half full, or a drain left records: drain again at
    /// once.
    pub fn backlog(&self) -> bool {
        self.capped || self.list.iter().flatten().any(|r| r.reader.backlog(&r.region.view))
    }

    /// Firings dropped, by CPU: because a ring was full (counted on the CPU the firing
    /// ran on), or their slot was never committed (skipped after the stall timeout: a
    /// writer that died, or one held off the CPU that long, whose record comes too
    /// late; its CPU is not known, and it counts on CPU 0).
    pub fn drops(&self) -> Vec<u64> {
        let mut all = self.gone_drops.clone();
        for r in self.list.iter().flatten() {
            add_drops(&mut all, &ring_drops(r));
        }
        all
    }
}

/// One ring's drops by CPU, its skipped slots on CPU 0.
fn ring_drops(r: &RingState) -> [u64; DROP_CPUS] {
    let mut d = r.reader.drops_by_cpu(&r.region.view);
    d[0] = d[0].saturating_add(r.reader.skipped());
    d
}

/// Adds per-CPU counts `more` into `to`.
fn add_drops(to: &mut Vec<u64>, more: &[u64]) {
    if to.len() < more.len() {
        to.resize(more.len(), 0);
    }
    for (t, m) in to.iter_mut().zip(more) {
        *t = t.saturating_add(*m);
    }
}

/// One traced process set up for patching.
pub struct Proc {
    ring: usize,
    /// The buffer of the site's programs (docs/firing.md), shared with forked children;
    /// none when the session's programs keep nothing.
    dif: Option<Rc<SharedRegion>>,
    /// The real user and group ids its data page holds (`uid`, `gid` at the firing).
    ids: (u64, u64),
    /// The name its data page holds (`execname` at the firing).
    comm: [u64; 2],
    addrs: ProcessAddrs,
    regions: Vec<Rc<RefCell<Region>>>,
    patches: Vec<Patch>,
    /// (file, file offset) of each site patched, with where its patch starts.
    sites: HashMap<(PathBuf, u64), u64>,
    /// Functions' bytes read from their files: (file, file offset) → bytes.
    code: HashMap<(PathBuf, u64), Rc<Vec<u8>>>,
    /// The dynamic loader, when the process was set up before it ran: its code runs
    /// before the thread pointer exists, so it is never patched.
    loader: Option<PathBuf>,
    /// Breakpoints, by address.
    breakpoints: HashMap<u64, Breakpoint>,
    /// Landings of entries patched over their first byte, by address.
    landings: HashMap<u64, Landing>,
    /// Sites armed some other way (uprobes, breakpoints): no patch may cover them.
    elsewhere: HashSet<u64>,
    /// Why trampolines may not read the process's memory (`process_vm_readv` on itself):
    /// it is in another pid namespace, or under a seccomp filter that may forbid it.
    no_captures: Option<&'static str>,
    /// Why no site of it may be patched (breakpoints still may be placed).
    no_patch: Option<String>,
    /// USDT semaphores (u16) this session raised by 1 in this image: address and the
    /// object's file (docs/usdt.md). A forked child has them raised too, and lowers
    /// them as its own.
    semaphores: Vec<(u64, PathBuf)>,
}

/// Why trampolines may not read `pid`'s memory through `process_vm_readv` with the pid
/// udtrace sees: the process is in another pid namespace (the pid names another
/// process there), or under a seccomp filter (which may forbid the call, or kill).
fn captures_forbidden(pid: i32) -> Option<&'static str> {
    let ns = |p: &str| std::fs::read_link(format!("{p}/ns/pid")).ok();
    if ns(&format!("/proc/{pid}")) != ns("/proc/self") {
        return Some("it runs in another pid namespace, where its captures cannot name it");
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let seccomp = status.lines().find_map(|l| l.strip_prefix("Seccomp:")).map(str::trim);
    if seccomp.is_some_and(|m| m != "0") {
        return Some("it runs under seccomp, which may forbid the read its captures make");
    }
    None
}

/// The errno of thread `tid` of `pid` (stopped), from where glibc keeps it: the TLS
/// offset (read from its GOT slot when `slot` is not 0) from the thread pointer.
pub fn errno_of(pid: i32, tid: i32, (slot, offset): (u64, i64)) -> Option<i32> {
    let regs = nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(tid)).ok()?;
    let off =
        if slot != 0 { i64::from_ne_bytes(procfs::read_memory(pid, slot, 8).ok()?.try_into().ok()?) } else { offset };
    let b = procfs::read_memory(pid, regs.fs_base.wrapping_add(off as u64), 4).ok()?;
    Some(i32::from_ne_bytes(b.try_into().ok()?))
}

/// What one `arm` of a process reads of it once, for all its sites.
pub struct Batch {
    /// What the process has mapped.
    pub objects: Vec<LoadedObject>,
    /// The addresses of the sites being armed: a patch never covers another site, whose
    /// uprobe or breakpoint would write into the patch's bytes.
    pub sites: HashSet<u64>,
    /// Where each thread is (all stopped): a patch never goes over one.
    pub rips: Vec<u64>,
}

impl Batch {
    /// Reads `pid`'s mappings and threads; `sites` are those of `probes`.
    pub fn of(pid: i32, probes: &[&PidProbe]) -> Batch {
        let objects = procfs::objects_of(pid).unwrap_or_default();
        let sites = probes
            .iter()
            .flat_map(|p| {
                p.sites.iter().chain(&p.unprobeable).filter_map(|&(_, fo)| runtime_address(pid, &objects, &p.file, fo))
            })
            .collect();
        let rips = procfs::tasks(pid)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(t)).ok().map(|r| r.rip))
            .collect();
        Batch { objects, sites, rips }
    }
}

/// The state letter of thread `tid` of `pid` (`t`: in a ptrace stop).
fn state(pid: i32, tid: i32) -> Option<char> {
    procfs::task_stat(pid, tid).ok()?.1.first()?.chars().next()
}

/// A thread of `pid` in a ptrace stop, to run system calls in (the leader first). Not
/// one held at a fork or clone event: it is inside that call still (`rax` is the
/// entry's `-ENOSYS`), and a call run there would first end the fork (a vfork only when
/// the child lets go of its memory). A thread held at its exec is one (see
/// [`ready_tid`]).
pub fn stopped_tid(pid: i32) -> Result<i32, String> {
    let mut tids = procfs::tasks(pid).map_err(|e| format!("cannot list its threads: {e}"))?;
    tids.sort_by_key(|&t| t != pid);
    let in_fork = |t: i32| {
        nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(t))
            .is_ok_and(|r| held_in_call(&r).is_some_and(|nr| !is_exec(nr)))
    };
    tids.into_iter()
        .find(|&t| state(pid, t) == Some('t') && !in_fork(t))
        .ok_or_else(|| "none of its threads is stopped where a system call can run".into())
}

/// The system call a thread is held inside of, at an event stop (fork, clone, exec):
/// `rax` is still the entry's `-ENOSYS`, the call's result not yet in.
fn held_in_call(r: &libc::user_regs_struct) -> Option<i64> {
    let nr = r.orig_rax as i64;
    (nr >= 0 && r.rax as i64 == -i64::from(libc::ENOSYS)).then_some(nr)
}

fn is_exec(nr: i64) -> bool {
    matches!(nr, libc::SYS_execve | libc::SYS_execveat)
}

/// A thread of `pid` in a ptrace stop, ready to run system calls in, with its
/// registers. A thread held at its exec is inside execve still (`rax` is the entry's
/// `-ENOSYS`): a system call run now would get execve's result. Stepping to the call's
/// end takes it out, before the new image's first instruction runs.
pub fn ready_tid(pid: i32) -> Result<(i32, libc::user_regs_struct), String> {
    let tid = stopped_tid(pid)?;
    let regs = || {
        nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(tid))
            .map_err(|e| format!("cannot read its registers: {e}"))
    };
    let r = regs()?;
    if held_in_call(&r).is_some_and(is_exec) {
        finish_exec(tid)?;
        return Ok((tid, regs()?));
    }
    Ok((tid, r))
}

/// Whether every thread of `pid` is in a ptrace stop (state `t`): only then may its
/// code change under it.
pub fn all_stopped(pid: i32) -> Result<(), String> {
    let tids = procfs::tasks(pid).map_err(|e| format!("cannot list its threads: {e}"))?;
    for tid in tids {
        if state(pid, tid) != Some('t') {
            return Err("threads of the process were running when its probes were armed".into());
        }
    }
    Ok(())
}

pub(crate) fn mem(pid: i32) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| format!("cannot open its memory: {e}"))
}

impl Proc {
    /// Maps a ring and a data page into `pid` (stopped) and finds its clock.
    pub fn set_up(
        pid: i32,
        geometry: Geometry,
        record_size: usize,
        cpu: CpuSource,
        rings: &mut Rings,
        buffers: &mut Buffers,
    ) -> Result<Proc, String> {
        // The thread system calls run in: held, while others may run (a library loaded).
        let (tid, regs) = ready_tid(pid)?;
        // Trampolines read the thread id where glibc keeps it, from the thread pointer.
        let mut loader = None;
        let mut no_patch = None;
        if regs.fs_base == 0 {
            // Held at its exec, or a static program at its entry point.
            // glibc's loader sets the thread pointer up before any code of the program
            // or its libraries runs, but its own code runs before that and is not
            // patched. Without it (a static program) nothing is patched: breakpoints
            // need no thread pointer.
            match glibc_loader(pid) {
                Ok(l) => loader = Some(l),
                Err(why) => no_patch = Some(why),
            }
        } else {
            let tid_at = regs.fs_base.wrapping_add(GLIBC_TID_OFFSET as u64);
            let found =
                procfs::read_memory(pid, tid_at, 4).ok().and_then(|b| b.try_into().ok()).map(i32::from_ne_bytes);
            if found != Some(tid) {
                no_patch = Some("its thread ids are not where glibc keeps them".to_string());
            }
        }
        let clock_gettime = vdso_clock(pid)?;
        let (rw, private) =
            ((libc::PROT_READ | libc::PROT_WRITE) as u64, (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64);
        // The data page, the firing buffer and the ring in one session of system calls:
        // each session reads the process's maps and writes a signal frame.
        let mut call = RemoteCall::new(tid).map_err(|e| format!("cannot map its data page: {e}"))?;
        let made = (|| {
            let page = call
                .syscall(libc::SYS_mmap, [0, 4096, rw, private, u64::MAX, 0])
                .map_err(|e| format!("cannot map its data page: {e}"))?;
            if page < 0 {
                return Err(format!("cannot map its data page: errno {}", -page));
            }
            let dif = if buffers.wanted() { Some(buffers.create(&mut call, regs.rip)?) } else { None };
            let region =
                inject::create_shared_near_in(&mut call, geometry.size() as u64, regs.rip, Prot::READ | Prot::WRITE)
                    .map_err(|e| format!("cannot map its ring: {e}"))?;
            Ok((page as u64, dif, region))
        })();
        let finished = call.finish().map_err(|e| format!("cannot map its ring: {e}"));
        let (data_page, dif, mut region) = made?;
        finished?;
        udtrace_messages::debug!(
            "pid {pid}: data page at {data_page:#x}, fs_base {:#x}, rip {:#x}",
            regs.fs_base,
            regs.rip
        );
        write_pid(pid, data_page)?;
        write_args(pid, data_page);
        let ids = write_ids(pid, data_page);
        let comm = write_comm(pid, data_page);
        geometry.init(&mut region.view);
        let reader = Reader::new(&region.view, record_size).map_err(|e| e.to_string())?;
        let ring_addr = region.remote_addr;
        let ring = rings.add(region, reader);
        Ok(Proc {
            ring,
            dif,
            ids,
            comm,
            addrs: ProcessAddrs { ring: ring_addr, data_page, clock_gettime, tid_offset: GLIBC_TID_OFFSET, cpu },
            regions: Vec::new(),
            patches: Vec::new(),
            sites: HashMap::new(),
            code: HashMap::new(),
            loader,
            breakpoints: HashMap::new(),
            landings: HashMap::new(),
            elsewhere: HashSet::new(),
            no_captures: captures_forbidden(pid),
            no_patch,
            semaphores: Vec::new(),
        })
    }

    /// The state of `child`, just forked from this process and held: the same
    /// mappings and patches; its data page must name it.
    /// `None` for a vfork child, which shares its parent's memory until it execs: its
    /// firings meanwhile carry its parent's process id.
    pub fn forked(&self, parent: i32, child: i32, rings: &mut Rings) -> Result<Option<Proc>, String> {
        write_pid(child, self.addrs.data_page)?;
        if read_pid(parent, self.addrs.data_page) == Some(child as u32) {
            write_pid_as(parent, parent, self.addrs.data_page)?;
            return Ok(None);
        }
        rings.share(self.ring);
        Ok(Some(Proc {
            ring: self.ring,
            dif: self.dif.clone(),
            ids: self.ids,
            comm: self.comm,
            addrs: self.addrs,
            regions: self.regions.clone(),
            patches: self.patches.clone(),
            sites: self.sites.clone(),
            code: HashMap::new(),
            loader: self.loader.clone(),
            breakpoints: self.breakpoints.clone(),
            landings: self.landings.clone(),
            elsewhere: self.elsewhere.clone(),
            no_captures: self.no_captures,
            no_patch: self.no_patch.clone(),
            // A fork copies the memory, our 1 in each raised semaphore included (a vfork
            // child, above, shares the parent's and has none of its own).
            semaphores: self.semaphores.clone(),
        }))
    }

    /// Where its threads keep errno, for the trampolines (`None`: unknown).
    pub fn set_errno(&self, pid: i32, tls: Option<(u64, i64)>) {
        let words = errno_words(self.addrs.data_page, tls);
        if let Ok(m) = mem(pid) {
            let _ = m.write_all_at(&words, self.addrs.data_page + DATA_ERRNO_SLOT as u64);
        }
    }

    /// The process no longer runs this image (exec, exit, released).
    pub fn gone(self, rings: &mut Rings) {
        rings.leave(self.ring);
    }

    /// Puts back the original bytes of every patch and breakpoint (the process is
    /// stopped).
    pub fn unpatch(&self, pid: i32) {
        let Ok(m) = mem(pid) else { return };
        for p in self.patches.iter().rev() {
            let _ = put_back(&m, p);
        }
        for (&at, b) in &self.breakpoints {
            let mut now = [0u8; 1];
            if m.read_exact_at(&mut now, at).is_ok() && now[0] == 0xcc {
                let _ = m.write_all_at(&[b.original], at);
            }
        }
        for (at, _) in &self.semaphores {
            udtrace_process::undertaker::lower(&m, *at);
        }
    }

    /// Raises the USDT semaphore at `at` by 1 (the process is stopped), once per image:
    /// an increment, never an absolute value, so that a count other tracers (kernel
    /// uprobes' `ref_ctr`) keep there stays theirs. The undertaker hears of it first.
    pub fn raise(&mut self, pid: i32, at: u64, file: &Path, ledger: Option<&mut Ledger>) -> Result<(), String> {
        if self.semaphores.iter().any(|(a, _)| *a == at) {
            return Ok(());
        }
        let m = mem(pid)?;
        let mut v = [0u8; 2];
        m.read_exact_at(&mut v, at).map_err(|e| format!("cannot read its semaphore: {e}"))?;
        let n = u16::from_le_bytes(v).checked_add(1).ok_or("its semaphore is at its largest")?;
        if let Some(l) = ledger {
            l.raising(pid, at);
        }
        m.write_all_at(&n.to_le_bytes(), at).map_err(|e| format!("cannot raise its semaphore: {e}"))?;
        self.semaphores.push((at, file.to_path_buf()));
        Ok(())
    }

    /// Forgets what it placed in objects the process no longer maps (`dlclose`): their
    /// code is gone, so nothing is written back, and the same object loaded again is
    /// patched again. The undertaker forgets them too (another object mapped there
    /// later is not udtrace's to write).
    pub fn forget_unmapped(&mut self, pid: i32, objects: &[LoadedObject], mut ledger: Option<&mut Ledger>) {
        let mapped = |at: u64| {
            objects.iter().flat_map(|o| &o.mappings).any(|m| m.exec && m.path.is_some() && m.start <= at && at < m.end)
        };
        let gone: Vec<u64> = self.patches.iter().map(|p| p.at).filter(|&at| !mapped(at)).collect();
        let gone_bp: Vec<u64> = self.breakpoints.keys().copied().filter(|&at| !mapped(at)).collect();
        // A semaphore goes with its object's data (another object there later is not
        // udtrace's to lower).
        let gone_sem: Vec<u64> = self
            .semaphores
            .iter()
            .filter(|(at, file)| !maps_data_at(pid, objects, file, *at))
            .map(|(at, _)| *at)
            .collect();
        if gone.is_empty() && gone_bp.is_empty() && gone_sem.is_empty() {
            return;
        }
        self.semaphores.retain(|(at, _)| !gone_sem.contains(at));
        for &at in gone.iter().chain(&gone_bp).chain(&gone_sem) {
            if let Some(l) = ledger.as_deref_mut() {
                l.undone(pid, at);
            }
        }
        self.patches.retain(|p| !gone.contains(&p.at));
        self.sites.retain(|_, start| !gone.contains(start));
        self.breakpoints.retain(|at, _| !gone_bp.contains(at));
        self.landings.retain(|&at, _| mapped(at));
        self.elsewhere.retain(|&at| mapped(at));
    }

    /// The site (file, file offset) whose patch covers address `addr`.
    pub fn site_at(&self, addr: u64) -> Option<(PathBuf, u64)> {
        let p = self.patches.iter().find(|p| p.at <= addr && addr < p.at + p.original.len() as u64)?;
        self.sites.iter().find(|&(_, &start)| start == p.at).map(|(k, _)| k.clone())
    }

    /// Whether site `key` (file, file offset) is patched.
    pub fn has_site(&self, key: &(PathBuf, u64)) -> bool {
        self.sites.contains_key(key)
    }

    /// Takes the patch of site `key` out of `pid` (stopped): its original bytes go back.
    /// The undertaker hears of it after the write (udtrace dying between the two
    /// leaves it bytes that are no longer its own: it writes nothing there).
    pub fn unpatch_site(&mut self, pid: i32, key: &(PathBuf, u64), ledger: Option<&mut Ledger>) -> Result<(), String> {
        let start = *self.sites.get(key).ok_or("it is not patched")?;
        let i = self.patches.iter().position(|p| p.at == start).ok_or("its patch is not known")?;
        put_back(&mem(pid)?, &self.patches[i]).map_err(|e| format!("cannot put its code back: {e}"))?;
        if let Some(l) = ledger {
            l.undone(pid, start);
        }
        // Its landing stays known: a thread that came to it before the patch went may
        // be stopped there still, its stop not dealt with yet, and goes on as any other.
        self.patches.remove(i);
        self.sites.remove(key);
        Ok(())
    }

    /// Where a thread stopped at an `int3` of this process goes on: a breakpoint's
    /// firing (its cookie and the registers at the site), or a landing (the thread has
    /// run the entry's first instruction, another tracer's uprobe having taken the
    /// entry). The thread is set to go on, through the breakpoint's out-of-line copy or
    /// the landing's trampoline code.
    pub fn trap(&self, tid: i32) -> Option<Hit> {
        let p = nix::unistd::Pid::from_raw(tid);
        let mut regs = nix::sys::ptrace::getregs(p).ok()?;
        let at = regs.rip.wrapping_sub(1);
        if let Some(l) = self.landings.get(&at) {
            let mut next = regs;
            next.rip = l.target;
            nix::sys::ptrace::setregs(p, next).ok()?;
            return Some(Hit::Landing(*l));
        }
        let b = self.breakpoints.get(&at)?;
        let mut next = regs;
        next.rip = b.copy;
        nix::sys::ptrace::setregs(p, next).ok()?;
        regs.rip = at;
        Some(Hit::Breakpoint(b.cookie, regs))
    }

    /// Breakpoints whose `int3` is gone: another tracer's uprobe on the same instruction
    /// took the breakpoint's hits while it was there, and the kernel wrote the file's byte
    /// back when it went. Each is written again (one byte); their addresses.
    pub fn lost_breakpoints(&self, pid: i32) -> Vec<u64> {
        let Ok(m) = mem(pid) else { return Vec::new() };
        let mut lost = Vec::new();
        for (&at, b) in &self.breakpoints {
            let mut now = [0u8; 1];
            if m.read_exact_at(&mut now, at).is_ok() && now[0] == b.original && m.write_all_at(&[0xcc], at).is_ok() {
                lost.push(at);
            }
        }
        lost
    }

    /// After a landing: the entry's first byte is another tracer's uprobe's `int3`
    /// still (`true`), or, the uprobe gone, the file's byte again, which gets the jump's
    /// back (the rest of the patch is as it was: one byte, written whole). Nothing when
    /// the patch is gone (given up to uprobes) since.
    pub fn after_landing(&self, pid: i32, l: &Landing) -> Result<bool, String> {
        if !self.patches.iter().any(|p| p.at == l.entry) {
            return Ok(false);
        }
        let m = mem(pid)?;
        let mut b = [0u8; 1];
        m.read_exact_at(&mut b, l.entry).map_err(|e| format!("cannot read its code: {e}"))?;
        if b[0] == l.first {
            m.write_all_at(&[0xe9], l.entry).map_err(|e| format!("cannot patch its code: {e}"))?;
        }
        Ok(b[0] == 0xcc)
    }

    /// Whether the site at `at` may be armed other than by a patch (a uprobe or a
    /// breakpoint writes an `int3` there): not inside a patch's bytes. Noted if so.
    pub fn may_arm_elsewhere(&mut self, at: u64) -> Result<(), String> {
        if self.patches.iter().any(|p| p.at <= at && at < p.at + p.original.len() as u64) {
            return Err("it lies in the bytes another site's patch took".into());
        }
        self.elsewhere.insert(at);
        Ok(())
    }

    /// Puts a breakpoint at one site of `pid` (some thread of it stopped; the others may
    /// run: a one-byte write is seen whole or not at all).
    /// `guard`: the process's SIGTRAP guard, which learns of the breakpoint before it
    /// is written.
    pub fn break_at(
        &mut self,
        pid: i32,
        site: &Site<'_>,
        objects: &[LoadedObject],
        guard: Option<&mut Guard>,
        ledger: Option<&mut Ledger>,
    ) -> Result<(), String> {
        let func_off = site.file_off.checked_sub(site.offset).ok_or("bad site offset")?;
        let func = runtime_address(pid, objects, site.file, func_off).ok_or("its object is not mapped")?;
        let code = self.code(site.file, func_off, site.func_size)?;
        self.place(pid, &code, (func, site.offset), site.cookie, guard, ledger)
    }

    fn place(
        &mut self,
        pid: i32,
        code: &[u8],
        (func, offset): (u64, u64),
        cookie: u64,
        guard: Option<&mut Guard>,
        ledger: Option<&mut Ledger>,
    ) -> Result<(), String> {
        let at = func + offset;
        if self.breakpoints.contains_key(&at) {
            return Ok(());
        }
        self.may_arm_elsewhere(at)?;
        // As for a patch: another tracer's byte there would be taken for the original.
        let m = mem(pid)?;
        let mut original = [0u8; 1];
        m.read_exact_at(&mut original, at).map_err(|e| format!("cannot read its code: {e}"))?;
        if code.get(offset as usize) != Some(&original[0]) {
            return Err("another tracer changed its code (a breakpoint or a patch)".into());
        }
        let region = self.region_near(pid, func)?;
        let mut r = region.borrow_mut();
        let copy = r.shared.remote_addr + r.used;
        let bytes = patch::out_of_line(code, func, offset, copy).map_err(|e| e.summary().to_string())?;
        r.shared.write(r.used, &bytes).map_err(|e| format!("cannot write its out-of-line copy: {e}"))?;
        r.used += (bytes.len() as u64).div_ceil(ALIGN) * ALIGN;
        drop(r);
        if let Some(g) = guard {
            if let Err(e) = g.add(pid, at, copy) {
                udtrace_messages::debug!("pid {pid}: breakpoint at {at:#x} unguarded: {e}");
            }
        }
        if let Some(l) = ledger {
            l.writing(pid, at, &original, &[0xcc]);
        }
        m.write_all_at(&[0xcc], at).map_err(|e| format!("cannot write a breakpoint: {e}"))?;
        self.breakpoints.insert(at, Breakpoint { cookie, original: original[0], copy });
        Ok(())
    }

    /// Thread `tid`, stopped with SIGTRAP: if at one of this process's breakpoints,
    /// what it is and the registers at the site; the thread then goes on through the
    /// out-of-line copy.
    /// The process's data page (`udtrace_inproc::trampoline::DATA_PID`).
    pub fn data_page(&self) -> u64 {
        self.addrs.data_page
    }

    /// The buffer of its sites' programs, if it has one.
    /// The `uid` and `gid` its firings see.
    pub fn ids(&self) -> (u64, u64) {
        self.ids
    }

    /// The name its firings see (`udtrace_dif::op::comm_words`).
    pub fn comm(&self) -> [u64; 2] {
        self.comm
    }

    pub fn dif(&self) -> Option<&SharedRegion> {
        self.dif.as_deref()
    }

    /// Patches one site of `pid` (stopped), armed in `batch`. `guard`: the process's
    /// SIGTRAP guard, which learns of a landing before it is written.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        pid: i32,
        site: &Site<'_>,
        batch: &Batch,
        record: &RecordPlan,
        geometry: Geometry,
        (work, buffers): (&Work, &Buffers),
        guard: Option<&mut Guard>,
        ledger: Option<&mut Ledger>,
    ) -> Result<(), String> {
        let objects = &batch.objects;
        if self.dif.is_none() && firing::stores(&work.program) {
            return Err("its firing buffer could not be mapped".into());
        }
        if self.sites.contains_key(&(site.file.to_path_buf(), site.file_off)) {
            return Ok(());
        }
        if let Some(why) = &self.no_patch {
            return Err(why.clone());
        }
        if self.loader.as_deref() == Some(site.file) {
            return Err("the dynamic loader runs before the thread pointer is set".into());
        }
        if let Some(why) = self.no_captures.filter(|_| {
            record.stack_bytes > 0
                || !record.strings.is_empty()
                || !record.buffers.is_empty()
                || record.task
                || (site.stash_ops >= udtrace_record::pid::op_read(0) && !record.stash.is_empty())
                // getppid(2) names the parent in the process's namespace, and seccomp
                // may forbid the call.
                || work.program.reads(udtrace_dif::Var::Ppid)
        }) {
            return Err(why.into());
        }
        let func_off = site.file_off.checked_sub(site.offset).ok_or("bad site offset")?;
        let func = runtime_address(pid, objects, site.file, func_off).ok_or("its object is not mapped")?;
        let code = self.code(site.file, func_off, site.func_size)?;
        let plan = patch::plan(&code, func, site.offset, site.kind).map_err(|e| e.summary().to_string())?;
        let (start, end) = (plan.region_vaddr(), plan.region_vaddr() + u64::from(plan.end - plan.start));
        if self.patches.iter().any(|p| p.at < end && start < p.at + p.original.len() as u64) {
            return Err("it overlaps another patched site".into());
        }
        let here = func + site.offset;
        if batch.sites.iter().chain(&self.elsewhere).any(|&a| a != here && start <= a && a < end) {
            return Err("another probe site lies in the bytes its patch would take".into());
        }
        // A thread stopped inside the bytes would resume in the middle of the jump.
        if batch.rips.iter().any(|&ip| start < ip && ip < end) {
            return Err("a thread is stopped inside the bytes its patch would take".into());
        }
        // Another tracer's breakpoint or patch there (a uprobe of another session, a
        // debugger's int3): a jump over it would take its firings away, and its removal
        // later would write its byte into the jump. A uprobe instead shares the place.
        let m = mem(pid)?;
        let mut live = vec![0u8; (end - start) as usize];
        m.read_exact_at(&mut live, start).map_err(|e| format!("cannot read its code: {e}"))?;
        if code.get(plan.start as usize..plan.end as usize) != Some(&live[..]) {
            return Err("another tracer changed its code (a breakpoint or a patch)".into());
        }
        // An entry patched over its first byte has its trampoline where the jump's
        // displacement, partly the first instruction's own bytes, points.
        let (region, at) = match plan.forced_displacement() {
            Some(forced) => self.region_at(pid, start, forced)?,
            None => {
                let r = self.region_near(pid, func)?;
                let at = r.borrow().shared.remote_addr + r.borrow().used;
                (r, at)
            }
        };
        let mut r = region.borrow_mut();
        let off = at - r.shared.remote_addr;
        let t = Trampoline {
            plan: &plan,
            at,
            space: (r.shared.len - off) as usize,
            cookie: site.cookie,
            record,
            ring: geometry,
            process: self.addrs,
            stash_ops: site.stash_ops,
            // A site with nothing to do at the firing but its record is as before.
            work: (!work.program.ops.is_empty() || !work.record).then(|| SiteWork {
                program: &work.program,
                layout: &buffers.layout,
                buf: &buffers.buf,
                base: self.dif.as_ref().map_or(0, |r| r.remote_addr),
                record: work.record,
                harness: None,
            }),
        };
        let (bytes, landing) = generate_with_landing(&t).map_err(|e| match e {
            TrampolineError::Relocation(r) => r.summary().to_string(),
            other => other.to_string(),
        })?;
        r.shared.write(off, &bytes).map_err(|e| format!("cannot write its trampoline: {e}"))?;
        r.used = off + (bytes.len() as u64).div_ceil(ALIGN) * ALIGN;
        drop(r);
        let patch = plan.patch_bytes(at).ok_or("its trampoline is out of reach")?;
        let mut original = vec![0u8; patch.len()];
        m.read_exact_at(&mut original, start).map_err(|e| format!("cannot read its code: {e}"))?;
        if let Some(l) = ledger {
            l.writing(pid, start, &original, &patch);
        }
        if let (Some(target), Some(l)) = (landing, plan.landing) {
            let at = start + u64::from(l);
            if let Some(g) = guard {
                if let Err(e) = g.add(pid, at, target) {
                    udtrace_messages::debug!("pid {pid}: landing at {at:#x} unguarded: {e}");
                }
            }
            self.landings.insert(at, Landing { target, entry: start, first: original[0] });
        }
        m.write_all_at(&patch, start).map_err(|e| format!("cannot patch its code: {e}"))?;
        self.patches.push(Patch { at: start, original, written: patch.to_vec() });
        self.sites.insert((site.file.to_path_buf(), site.file_off), start);
        Ok(())
    }

    /// A region and an address in it for a trampoline that a jump at `jmp` must reach
    /// with a displacement of bytes `forced` (`PatchPlan::forced_displacement`). The low
    /// bytes fixed, the trampoline goes at the next such address in a region; with
    /// three or four fixed, there are only a few such addresses in reach, each given a
    /// small region of its own when free.
    fn region_at(&mut self, pid: i32, jmp: u64, forced: [Option<u8>; 4]) -> Result<(Rc<RefCell<Region>>, u64), String> {
        let fixed = forced.iter().take_while(|b| b.is_some()).count() as u32;
        let value = forced.iter().enumerate().fold(0u32, |v, (k, b)| v | u32::from(b.unwrap_or(0)) << (8 * k));
        let mask: u32 = if fixed >= 4 { u32::MAX } else { (1u32 << (8 * fixed)) - 1 };
        let from = jmp.wrapping_add(5);
        // The next address at or after `lo` whose displacement from `from` has the
        // fixed bytes.
        let next = |lo: u64| -> u64 {
            let rel = lo.wrapping_sub(from) as u32;
            lo + u64::from(value.wrapping_sub(rel) & mask)
        };
        let in_reach = |t: u64| i32::try_from(t.wrapping_sub(from) as i64).is_ok();
        if fixed <= 2 {
            for r in &self.regions {
                let b = r.borrow();
                let t = next(b.shared.remote_addr + b.used);
                if in_reach(t) && t + ROOM <= b.shared.remote_addr + b.shared.len {
                    drop(b);
                    return Ok((Rc::clone(r), t));
                }
            }
            // A new region has room for the next such address (64 KiB on at most).
            let r = self.new_region(pid, jmp)?;
            let t = next(r.borrow().shared.remote_addr);
            if !in_reach(t) || t + ROOM > r.borrow().shared.remote_addr + r.borrow().shared.len {
                return Err(FORCED_NO_ROOM.into());
            }
            return Ok((r, t));
        }
        // Every displacement with the fixed bytes, nearest first.
        let free_bits = 32 - 8 * fixed;
        let mut cands: Vec<u64> = (0..1u64 << free_bits)
            .map(|high| from.wrapping_add(i64::from((value | ((high as u32) << (8 * fixed % 32))) as i32) as u64))
            .filter(|&t| (0x10000..USER_TOP - ROOM).contains(&t))
            .collect();
        cands.sort_by_key(|&t| t.abs_diff(from));
        for &t in &cands {
            if let Some(r) = self.regions.iter().find(|r| {
                let b = r.borrow();
                t >= b.shared.remote_addr + b.used && t + ROOM <= b.shared.remote_addr + b.shared.len
            }) {
                return Ok((Rc::clone(r), t));
            }
        }
        const PAGE: u64 = 4096;
        let page = PAGE;
        let maps = procfs::read_maps(pid).map_err(|e| format!("cannot read its maps: {e}"))?;
        let free = |lo: u64, hi: u64| !maps.iter().any(|m| m.start < hi && lo < m.end);
        for &t in &cands {
            let (lo, hi) = (t & !(page - 1), (t + ROOM).div_ceil(page) * page);
            if !free(lo, hi) {
                continue;
            }
            let Ok(shared) = inject::map_exec_at(stopped_tid(pid)?, hi - lo, &[lo]) else { continue };
            return Ok((self.add_region(shared, t - lo), t));
        }
        Err(FORCED_NO_ROOM.into())
    }

    /// A trampoline region with room within reach of `func`, mapped when none has.
    fn region_near(&mut self, pid: i32, func: u64) -> Result<Rc<RefCell<Region>>, String> {
        // The region must be reachable from the whole function (its sites and resume
        // addresses) by rel32.
        let reach = REACH - (1 << 24);
        if let Some(r) = self.regions.iter().find(|r| {
            let r = r.borrow();
            r.used + ROOM <= r.shared.len && r.shared.remote_addr.abs_diff(func) < reach
        }) {
            return Ok(Rc::clone(r));
        }
        self.new_region(pid, func)
    }

    /// A new region of trampolines near `near`.
    fn new_region(&mut self, pid: i32, near: u64) -> Result<Rc<RefCell<Region>>, String> {
        let shared = inject::map_exec_near(stopped_tid(pid)?, REGION_LEN, near)
            .map_err(|e| format!("cannot map trampolines near it: {e}"))?;
        Ok(self.add_region(shared, 0))
    }

    fn add_region(&mut self, shared: SharedRegion, used: u64) -> Rc<RefCell<Region>> {
        let r = Rc::new(RefCell::new(Region { shared, used }));
        self.regions.push(Rc::clone(&r));
        r
    }

    /// The bytes of the function at `func_off` in `file`.
    fn code(&mut self, file: &Path, func_off: u64, size: u64) -> Result<Rc<Vec<u8>>, String> {
        if let Some(c) = self.code.get(&(file.to_path_buf(), func_off)) {
            return Ok(Rc::clone(c));
        }
        if size == 0 || size > 1 << 24 {
            return Err("its function's size is unknown".into());
        }
        let f = File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let mut buf = vec![0u8; size as usize];
        f.read_exact_at(&mut buf, func_off).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let c = Rc::new(buf);
        self.code.insert((file.to_path_buf(), func_off), Rc::clone(&c));
        Ok(c)
    }
}

/// Where the code at file offset `off` of `file` is mapped in `pid`: in an executable
/// mapping. A file page can be mapped twice (lld puts the end of read-only data and the
/// start of `.text` in one page and maps it read-only and executable), and a patch
/// written in the read-only copy would never run.
pub fn runtime_address(pid: i32, objects: &[LoadedObject], file: &Path, off: u64) -> Option<u64> {
    objects.iter().filter(|o| procfs::host_path(pid, &o.path) == file).find_map(|o| {
        o.mappings
            .iter()
            .find(|m| m.exec && m.offset <= off && off < m.offset + (m.end - m.start))
            .map(|m| m.start + (off - m.offset))
    })
}

/// Where file offset `off` of `file` is in `pid`'s private writable mapping of it: a
/// USDT semaphore's address, found as the kernel finds a uprobe's reference counter.
pub fn data_address(pid: i32, objects: &[LoadedObject], file: &Path, off: u64) -> Option<u64> {
    objects.iter().filter(|o| procfs::host_path(pid, &o.path) == file).find_map(|o| {
        o.mappings
            .iter()
            .find(|m| m.write && m.offset <= off && off < m.offset + (m.end - m.start))
            .map(|m| m.start + (off - m.offset))
    })
}

/// Whether `pid` maps `at` writable from `file` (a semaphore's object still there).
fn maps_data_at(pid: i32, objects: &[LoadedObject], file: &Path, at: u64) -> bool {
    objects
        .iter()
        .filter(|o| procfs::host_path(pid, &o.path) == file)
        .flat_map(|o| &o.mappings)
        .any(|m| m.write && m.start <= at && at < m.end)
}

/// `__vdso_clock_gettime` in `pid`.
fn vdso_clock(pid: i32) -> Result<u64, String> {
    let base = procfs::auxv_value(pid, procfs::AT_SYSINFO_EHDR).ok_or("it has no vDSO")?;
    let maps = procfs::read_maps(pid).map_err(|e| format!("cannot read its maps: {e}"))?;
    let len = maps.iter().find(|m| m.start == base).map(|m| m.end - m.start).ok_or("its vDSO is not mapped")?;
    let image = procfs::read_memory(pid, base, len as usize).map_err(|e| format!("cannot read its vDSO: {e}"))?;
    let off = udtrace_inproc::vdso::clock_gettime_offset(&image).map_err(|e| e.to_string())?;
    Ok(base + off)
}

/// Writes `pid` into its data page at `page` (private memory: each process its own).
/// Writes where the process's argument strings are (`/proc/PID/stat`'s arg_start and
/// arg_end) to its data page ([`DATA_ARGS`]); left 0 (none) where they cannot be read.
fn write_args(pid: i32, page: u64) {
    let Ok((_, f)) = procfs::task_stat(pid, pid) else { return };
    // Fields 48 and 49 of stat; `task_stat` gives them from field 3 on.
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let mut w = [0u8; 16];
    w[..8].copy_from_slice(&field(48).to_ne_bytes());
    w[8..].copy_from_slice(&field(49).to_ne_bytes());
    if let Ok(m) = mem(pid) {
        let _ = m.write_all_at(&w, page + DATA_ARGS as u64);
    }
}

/// Writes `pid`'s real user and group ids to its data page (`uid`, `gid` at the
/// firing). A process that changes them later keeps the first (exec maps a new page).
/// Returns them: breakpoint firings use the same.
fn write_ids(pid: i32, page: u64) -> (u64, u64) {
    let (uid, gid) = firing::ids_of(pid);
    let mut w = [0u8; 16];
    w[..8].copy_from_slice(&uid.to_ne_bytes());
    w[8..].copy_from_slice(&gid.to_ne_bytes());
    if let Ok(m) = mem(pid) {
        let _ = m.write_all_at(&w, page + DATA_UID as u64);
    }
    (uid, gid)
}

/// Writes `pid`'s name to its data page (`execname` at the firing), read from
/// /proc/PID/stat as the consumer reads its `execname`, once per image (exec maps a new
/// page; a forked child keeps its parent's, as its name is until it execs). Returns
/// it: breakpoint firings use the same.
fn write_comm(pid: i32, page: u64) -> [u64; 2] {
    let name = procfs::stat(pid).map(|(c, _)| c).unwrap_or_default();
    let w = udtrace_dif::op::comm_words(name.as_bytes());
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_ne_bytes()).collect();
    if let Ok(m) = mem(pid) {
        let _ = m.write_all_at(&bytes, page + udtrace_inproc::dif::DATA_COMM as u64);
    }
    w
}

fn write_pid(pid: i32, page: u64) -> Result<(), String> {
    write_pid_as(pid, pid, page)
}

/// Writes `value` as the process id in the data page of `pid`.
fn write_pid_as(pid: i32, value: i32, page: u64) -> Result<(), String> {
    mem(pid)?
        .write_all_at(&(value as u32).to_ne_bytes(), page + DATA_PID as u64)
        .map_err(|e| format!("cannot write its data page: {e}"))
}

fn read_pid(pid: i32, page: u64) -> Option<u32> {
    let b = procfs::read_memory(pid, page + DATA_PID as u64, 4).ok()?;
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

/// Takes a thread held at its exec stop out of the execve call: it stops again (the
/// call's syscall-exit stop) at the new image's entry, before running it.
fn finish_exec(pid: i32) -> Result<(), String> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let p = nix::unistd::Pid::from_raw(pid);
    let before = nix::sys::ptrace::getregs(p).map_err(|e| format!("cannot read its registers: {e}"))?;
    // To the syscall-exit stop, not a single step: if udtrace dies there the process
    // runs on, where a step's pending SIGTRAP would kill it (udtrace_process::inject).
    nix::sys::ptrace::syscall(p, None).map_err(|e| format!("cannot take it out of exec: {e}"))?;
    match waitpid(p, Some(WaitPidFlag::__WALL)) {
        Ok(WaitStatus::PtraceSyscall(_)) => {}
        other => return Err(format!("unexpected stop after exec: {other:?}")),
    }
    let after = nix::sys::ptrace::getregs(p).map_err(|e| format!("cannot read its registers: {e}"))?;
    if after.rip != before.rip {
        return Err("its first instruction ran while taking it out of exec".into());
    }
    Ok(())
}

/// The host path of `pid`'s dynamic loader when it is glibc's (whose thread pointer
/// layout the trampolines assume); an error otherwise.
fn glibc_loader(pid: i32) -> Result<PathBuf, String> {
    procfs::auxv_value(pid, procfs::AT_BASE)
        .ok_or("it has no thread pointer yet and no dynamic loader (a static program)")?;
    let objects = procfs::objects_of(pid).map_err(|e| format!("cannot read its maps: {e}"))?;
    let ld = procfs::loader_of(pid, &objects).ok_or("its dynamic loader is not mapped")?;
    if !ld.path.ends_with("/ld-linux-x86-64.so.2") {
        return Err(format!("its dynamic loader is not glibc's ({})", ld.path));
    }
    Ok(procfs::host_path(pid, &ld.path))
}
