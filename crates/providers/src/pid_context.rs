//! The context of a pid probe firing: built-ins from the record the backend wrote at the
//! instant of the firing, memory from what was captured (stack, strings) or, failing
//! that, from the live process, and user stacks unwound from `.eh_frame` and symbolized
//! as DTrace prints them (`libc.so.6`malloc+0x1a`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use udtrace_lang::capture::MAX_USTACK_BYTES;
use udtrace_lang::ir::Builtin;
use udtrace_lang::types::SymKind;
use udtrace_lang::types::TypeTable;
use udtrace_object::debuginfo::{self, ObjectSymbols};
use udtrace_object::modules;
use udtrace_object::unwind::{Snapshot, Unwinder};
use udtrace_process::procfs::{self, LoadedObject};
use udtrace_record::pid::{Firing, PtReg};
use udtrace_record::proc::TaskSnap;
use udtrace_runtime::{Context, Value};

use crate::backend::SiteTarget;
use crate::pid::SiteKind;
use crate::proc::{self, Clocks, CurrentFromProc};
use crate::stack_cuts::StackCuts;

/// What udtrace remembers of a process: read while it is held (at its start, fork, exec
/// or when it maps new objects) or at its first firing, so that output for a process
/// that has since exited is still right.
pub struct ProcInfo {
    pub execname: String,
    pub ppid: i64,
    pub uid: i64,
    pub gid: i64,
    /// The objects it had mapped when last looked at.
    mapped: Option<Rc<Vec<LoadedObject>>>,
    /// `mapped` with symbols and load bias, resolved when first needed.
    objects: Option<Vec<(LoadedObject, u64 /*bias*/, Rc<ObjectSymbols>)>>,
    unwinder: Option<Unwinder>,
    /// When `mapped` was last read again because an address fell outside it.
    refreshed: Option<std::time::Instant>,
    /// Whether that may happen: for processes known from samples or not followed. A
    /// process udtrace follows is read at each of its holds, and read later it may run
    /// another image.
    refreshable: bool,
    /// The process as /proc showed it when read, its arguments included: `curpsinfo`
    /// of its firings once it has exited (consumed after its end).
    snap: Option<TaskSnap>,
    /// `snap` was read while udtrace held the process (remembered at a hold, or
    /// inherited from its parent at its fork).
    held: bool,
}

/// How long what is known of an ended process is kept for its last firings: five
/// times the in-process ring's stall timeout.
pub const RETIRE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Per-process facts and per-file symbols, shared by all firings.
#[derive(Default)]
pub struct Procs {
    procs: HashMap<u32, ProcInfo>,
    files: HashMap<PathBuf, Rc<ObjectSymbols>>,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, to turn ktime into walltimestamp.
    pub wall_offset: i64,
    /// Processes that ended, and when, kept until the records they left have been
    /// consumed.
    retiring: Vec<(u32, std::time::Instant)>,
    /// Stacks unwound short of their outermost frame, for the notice at the end.
    cut: StackCuts,
}

/// The real user and group ids of a process (0 when unknown).
fn status_ids(pid: u32) -> (i64, i64) {
    let real = |name| procfs::status_numbers(pid as i32, name).and_then(|v| v.first().copied()).unwrap_or(0) as i64;
    (real("Uid:"), real("Gid:"))
}

fn read_info(pid: u32) -> ProcInfo {
    let (execname, ppid) = procfs::stat(pid as i32).map(|(c, p)| (c, i64::from(p))).unwrap_or_default();
    let (uid, gid) = status_ids(pid);
    ProcInfo {
        execname,
        ppid,
        uid,
        gid,
        mapped: None,
        objects: None,
        unwinder: None,
        refreshed: None,
        refreshable: false,
        snap: proc::snapshot_with_args(pid),
        held: false,
    }
}

impl Procs {
    /// `files` are objects already loaded (when probes were matched): not read again.
    pub fn new(wall_offset: i64, files: HashMap<PathBuf, Rc<ObjectSymbols>>) -> Procs {
        Procs { wall_offset, files, ..Procs::default() }
    }

    /// Shares symbols loaded elsewhere since (objects matched after exec or dlopen).
    pub fn share(&mut self, files: &HashMap<PathBuf, Rc<ObjectSymbols>>) {
        for (path, syms) in files {
            self.files.entry(path.clone()).or_insert_with(|| Rc::clone(syms));
        }
    }

    fn info(&mut self, pid: u32) -> &mut ProcInfo {
        self.procs.entry(pid).or_insert_with(|| read_info(pid))
    }

    /// Process `pid`'s name as its firings see it (`execname`): read once, kept.
    pub fn execname(&mut self, pid: u32) -> String {
        self.info(pid).execname.clone()
    }

    /// Process `pid` exec'd and took the name `name` (the kernel's notice, read before
    /// the firings recorded meanwhile are consumed): its `execname` from then on, also
    /// once it has ended and /proc no longer knows it.
    pub fn exec_named(&mut self, pid: u32, name: String) {
        self.info(pid).execname = name;
    }

    /// What ended process `pid` held at `addr`, from the files it had mapped (see
    /// `procfs::read_file_backed`); None for a process that still runs (its memory is
    /// read instead) or unknown here.
    pub fn read_ended(&self, pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mapped = self.procs.get(&pid)?.mapped.as_ref()?;
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return None;
        }
        procfs::read_file_backed(mapped, addr, len)
    }

    /// Reads (again) what udtrace needs of a live process, its name and ids, and keeps
    /// `mapped`, the objects it has mapped now. Called while it is held, so that firings
    /// consumed after it exits are right.
    pub fn remember(&mut self, pid: u32, mapped: Vec<LoadedObject>) {
        // A deleted object can only be read while the process maps it.
        for obj in mapped.iter().filter(|o| o.deleted) {
            self.symbols_of(pid, obj);
        }
        let mut info = read_info(pid);
        // Gone already: the name its exec notice gave it stays (/proc has none).
        if info.execname.is_empty() {
            if let Some(known) = self.procs.get(&pid) {
                info.execname.clone_from(&known.execname);
            }
        }
        info.mapped = Some(Rc::new(mapped));
        info.held = true;
        self.procs.insert(pid, info);
    }

    /// Thread `tid` of process `pid`, named `comm`, was sampled (a profile probe, which
    /// sees every process). A process seen for the first time is read now, while it
    /// most likely still runs, so that its samples symbolize after it exits; read again
    /// when its main thread's name changed (it exec'd). Its name is the sample's when
    /// /proc has no more to say; the idle task is DTrace's `sched`.
    pub fn sampled(&mut self, pid: u32, tid: u32, comm: &[u8]) {
        let comm = String::from_utf8_lossy(comm);
        let stale = match self.procs.get(&pid) {
            None => true,
            Some(info) => pid != 0 && tid == pid && info.execname != comm,
        };
        if !stale {
            return;
        }
        let mut info = read_info(pid);
        let mapped = procfs::objects_of(pid as i32).unwrap_or_default();
        for obj in mapped.iter().filter(|o| o.deleted) {
            self.symbols_of(pid, obj);
        }
        info.mapped = Some(Rc::new(mapped));
        info.refreshable = true;
        if pid == 0 {
            info.execname = "sched".into();
        } else if info.execname.is_empty() {
            info.execname = comm.into_owned();
        }
        self.procs.insert(pid, info);
    }

    /// Process `pid`, remembered, is not followed: what it maps later is read when a
    /// firing's address falls outside what is known of it (see `refresh`).
    pub fn unfollowed(&mut self, pid: u32) {
        if let Some(info) = self.procs.get_mut(&pid) {
            info.refreshable = true;
        }
    }

    /// Process `pid` ended: what is known of it goes once the firings it left are
    /// consumed (see [`Procs::take_retiring`]).
    pub fn retire(&mut self, pid: u32) {
        self.retiring.push((pid, std::time::Instant::now()));
    }

    /// The processes that ended at least [`RETIRE_GRACE`] ago: every firing of theirs
    /// is consumed by the next drain, so they may be forgotten ([`Procs::forget`])
    /// after it. Not at once: a ring a process shares with its parent and siblings is
    /// read in order, and a slot another writer has not committed yet holds up the
    /// reader (up to the ring's stall timeout) before the ended process's records.
    pub fn take_retiring(&mut self) -> Vec<u32> {
        let now = std::time::Instant::now();
        let (due, keep): (Vec<_>, Vec<_>) =
            self.retiring.drain(..).partition(|&(_, at)| now.duration_since(at) >= RETIRE_GRACE);
        self.retiring = keep;
        due.into_iter().map(|(pid, _)| pid).collect()
    }

    pub fn forget(&mut self, pids: &[u32]) {
        for pid in pids {
            self.procs.remove(pid);
        }
    }

    /// What udtrace must say of the stacks it unwound short of their outermost frame
    /// since it was last asked, one line each: no stack is shortened silently.
    pub fn stack_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.cut).notes()
    }

    /// A new child: a copy of its parent (same image, same ids) until it execs.
    pub fn inherit(&mut self, child: u32, parent: u32) {
        let p = self.info(parent);
        let info = ProcInfo {
            execname: p.execname.clone(),
            ppid: i64::from(parent),
            uid: p.uid,
            gid: p.gid,
            mapped: p.mapped.clone(),
            objects: None,
            unwinder: None,
            refreshed: None,
            refreshable: false,
            snap: p.snap.clone().map(|s| TaskSnap { tid: child, tgid: child, ppid: parent, ..s }),
            held: p.held,
        };
        self.procs.insert(child, info);
    }

    /// Whether `ancestor` is `pid` or one of its ancestors, by the parents remembered.
    pub fn progenyof(&mut self, pid: u32, ancestor: i64) -> bool {
        let mut cur = i64::from(pid);
        for _ in 0..4096 {
            if cur == ancestor {
                return true;
            }
            if cur <= 1 {
                return false;
            }
            cur = self.info(cur as u32).ppid;
        }
        false
    }

    /// Resolves (once) the objects the process has mapped, for unwinding and symbols.
    fn objects(&mut self, pid: u32) {
        if self.info(pid).unwinder.is_some() {
            return;
        }
        let mapped = match &self.info(pid).mapped {
            Some(m) => Rc::clone(m),
            None => Rc::new(procfs::objects_of(pid as i32).unwrap_or_default()),
        };
        let mut unwinder = Unwinder::default();
        let mut objects = Vec::new();
        for obj in mapped.iter() {
            if obj.is_vdso {
                continue;
            }
            let Some(syms) = self.symbols_of(pid, obj) else { continue };
            let Some(bias) = obj.bias(&syms.info) else { continue };
            let lo = obj.mappings.iter().map(|m| m.start).min().unwrap_or(0);
            let hi = obj.mappings.iter().map(|m| m.end).max().unwrap_or(0);
            unwinder.add_module(&obj.path, &syms, lo..hi, bias);
            objects.push((obj.clone(), bias, syms));
        }
        let info = self.info(pid);
        info.mapped = Some(mapped);
        info.objects = Some(objects);
        info.unwinder = Some(unwinder);
    }

    /// The symbols of object `obj` of process `pid`, read once per file. A deleted file
    /// (an upgraded library) is read as it was mapped, through map_files, which only
    /// lasts as long as the process: see `remember`.
    fn symbols_of(&mut self, pid: u32, obj: &LoadedObject) -> Option<Rc<ObjectSymbols>> {
        let key = procfs::object_key(pid as i32, obj);
        if let Some(s) = self.files.get(&key) {
            return Some(Rc::clone(s));
        }
        let s = Rc::new(debuginfo::load(&procfs::object_file(pid as i32, obj)).ok()?);
        self.files.insert(key, Rc::clone(&s));
        Some(s)
    }

    /// The object of `pid` that maps `addr`, with its load bias and symbols.
    fn object_at(&mut self, pid: u32, addr: u64) -> Option<&(LoadedObject, u64, Rc<ObjectSymbols>)> {
        self.objects(pid);
        self.info(pid)
            .objects
            .iter()
            .flatten()
            .find(|(o, _, _)| o.mappings.iter().any(|m| m.start <= addr && addr < m.end))
    }

    /// `addr`, a user address of `pid`, lies outside every object remembered of it: the
    /// process may have mapped more since (a library loaded, or it was read while its
    /// loader was still at work). Read again, at most once a second, if it still runs
    /// and may be (see `refreshable`); whether it was.
    fn refresh(&mut self, pid: u32, addr: u64) -> bool {
        let info = self.info(pid);
        if addr == 0
            || !info.refreshable
            || info.refreshed.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1))
        {
            return false;
        }
        info.refreshed = Some(std::time::Instant::now());
        let Ok(mapped) = procfs::objects_of(pid as i32) else { return false };
        if mapped.is_empty() {
            return false;
        }
        info.mapped = Some(Rc::new(mapped));
        info.objects = None;
        info.unwinder = None;
        self.objects(pid);
        true
    }

    /// `module`function+0xoff` for an address, as DTrace prints user frames.
    fn symbolize(&mut self, pid: u32, addr: u64) -> String {
        self.symbol(pid, addr, SymKind::Addr).unwrap_or_else(|| format!("0x{addr:x}"))
    }

    /// An address as DTrace's usym/ufunc/umod/uaddr print it; `None` outside any object.
    pub(crate) fn symbol(&mut self, pid: u32, addr: u64, kind: SymKind) -> Option<String> {
        if self.object_at(pid, addr).is_none() && !self.refresh(pid, addr) {
            return None;
        }
        let (obj, bias, syms) = self.object_at(pid, addr)?;
        let module = modules::module_name(&obj.path);
        if kind == SymKind::Mod {
            return Some(module.to_string());
        }
        Some(match syms.table().lookup(addr.wrapping_sub(*bias)) {
            Some((f, off)) if off == 0 || kind != SymKind::Addr => format!("{module}`{}", f.name),
            Some((f, off)) => format!("{module}`{}+0x{off:x}", f.name),
            None => format!("{module}`0x{addr:x}"),
        })
    }
}

/// More frames than the largest stack capture can hold (each is at least its 8-byte
/// return address; a signal frame is larger).
const MAX_DEPTH: u32 = MAX_USTACK_BYTES / 8;

/// DTrace's `uregs[]` index onto the recorded registers.
fn ureg(n: u64) -> Option<PtReg> {
    use PtReg::*;
    // Oracle's numbering (regs.d): struct pt_regs in order. 21..=25 are members of
    // the task's thread_struct (ds, es, fsbase, gsbase, trap_nr), not recorded here.
    const PT_REGS: [PtReg; 21] =
        [R15, R14, R13, R12, Bp, Bx, R11, R10, R9, R8, Ax, Cx, Dx, Si, Di, OrigAx, Ip, Cs, Flags, Sp, Ss];
    PT_REGS.get(usize::try_from(n).ok()?).copied()
}

pub struct FiringCtx<'a> {
    pub f: &'a Firing<'a>,
    pub site: SiteTarget,
    pub procs: &'a RefCell<Procs>,
    /// String captures: which register each slot of `f.strings` read (the codes of
    /// [`crate::backend::string_reg`]; a USDT argument's is the site's).
    pub string_args: &'a [u8],
    /// Buffer captures: the argument register and size of each slot of `f.buffers`.
    pub buffer_args: &'a [(u8, u32)],
    pub ustackframes: u32,
    /// No stack has more frames (`-x maxframes`).
    pub maxframes: u32,
    /// Whether a stack of this firing was counted as cut short: once per firing,
    /// however many clauses unwind it.
    pub noted: Cell<bool>,
    /// For `curpsinfo` and `curlwpsinfo`: the program's types and the clocks.
    pub types: &'a TypeTable,
    pub clocks: Clocks,
    /// A USDT site's arguments (`SiteKind::Usdt`), decoded from its descriptors.
    pub usdt: Option<Rc<crate::usdt::UsdtSite>>,
}

/// The recorded register a USDT argument names.
pub fn usdt_reg(r: udtrace_object::usdt::Reg) -> PtReg {
    use udtrace_object::usdt::Reg;
    match r {
        Reg::Ax => PtReg::Ax,
        Reg::Bx => PtReg::Bx,
        Reg::Cx => PtReg::Cx,
        Reg::Dx => PtReg::Dx,
        Reg::Si => PtReg::Si,
        Reg::Di => PtReg::Di,
        Reg::Bp => PtReg::Bp,
        Reg::Sp => PtReg::Sp,
        Reg::R8 => PtReg::R8,
        Reg::R9 => PtReg::R9,
        Reg::R10 => PtReg::R10,
        Reg::R11 => PtReg::R11,
        Reg::R12 => PtReg::R12,
        Reg::R13 => PtReg::R13,
        Reg::R14 => PtReg::R14,
        Reg::R15 => PtReg::R15,
        Reg::Ip => PtReg::Ip,
    }
}

impl FiringCtx<'_> {
    fn stack_word(&self, off: usize) -> Option<u64> {
        let b = self.f.stack.get(off..off + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn arg(&self, n: u8) -> u64 {
        // A USDT site's, where its descriptors say: registers as recorded, memory from
        // the captured stack or the process.
        if let Some(u) = &self.usdt {
            return u.arg(usize::from(n), |r| self.f.reg(usdt_reg(r)), |a, len| self.read_memory(a, len));
        }
        // A return probe's arguments are the return site's offset and the return value.
        if self.site.kind == SiteKind::Return {
            return match n {
                0 => self.site.offset,
                1 => self.f.reg(PtReg::Ax),
                _ => 0,
            };
        }
        // A sample's: the kernel PC (0 in user mode), then the user PC (0 in the kernel).
        if self.site.kind == SiteKind::Profile {
            return match n {
                0 => self.site.offset,
                1 if self.site.offset == 0 => self.f.reg(PtReg::Ip),
                _ => 0,
            };
        }
        match n {
            0..=5 => self.f.arg(usize::from(n)).unwrap_or(0),
            // At a function's entry [sp] holds the return address; stack arguments follow.
            _ => self.stack_word(8 * (usize::from(n) - 5)).unwrap_or(0),
        }
    }

    /// The address the current function returns to. At its entry and at a return site
    /// (a `ret`, or a jump out of the function) that is the word at the stack pointer;
    /// elsewhere the caller's frame is found by unwinding, as far as the stack captured
    /// for this firing allows (0 when it does not reach).
    fn ucaller(&self) -> u64 {
        match self.site.kind {
            SiteKind::Entry | SiteKind::Return => self.stack_word(0).unwrap_or(0),
            SiteKind::Offset(_) | SiteKind::Profile | SiteKind::Usdt(_) => self.unwound(2).get(1).copied().unwrap_or(0),
        }
    }

    /// Up to `max` return addresses of the user stack, innermost (the pc) first.
    fn unwound(&self, max: usize) -> Vec<u64> {
        let pid = self.f.pid;
        let mut procs = self.procs.borrow_mut();
        let ip = self.f.reg(PtReg::Ip);
        if procs.object_at(pid, ip).is_none() {
            procs.refresh(pid, ip);
        }
        let snap = Snapshot {
            ip: self.f.reg(PtReg::Ip),
            sp: self.f.reg(PtReg::Sp),
            bp: self.f.reg(PtReg::Bp),
            stack: self.f.stack,
            truncated: self.f.stack_truncated,
        };
        let Some(u) = procs.info(pid).unwinder.as_mut() else { return vec![snap.ip] };
        let unwound = u.unwind(&snap, max);
        if let Some(cut) = unwound.cut.filter(|_| !self.noted.replace(true)) {
            procs.cut.count(cut, self.f.stack.len());
        }
        unwound.frames
    }

    /// (ppid, uid, gid) at the firing, where the record has them: the kernel's task,
    /// or what the process told of itself.
    fn ids(&self) -> Option<(i64, i64, i64)> {
        let (s, o) = (self.f.snapshot.as_deref(), self.f.own.as_ref());
        s.map(|s| (s.ppid, s.uid, s.gid))
            .or_else(|| o.map(|o| (o.ppid, o.uid, o.gid)))
            .map(|(p, u, g)| (i64::from(p), i64::from(u), i64::from(g)))
    }

    fn captured(&self, addr: u64) -> Option<&[u8]> {
        for (slot, &n) in self.string_args.iter().enumerate() {
            let reg = match n.checked_sub(crate::backend::USDT_STRING) {
                None => Some(crate::backend::string_reg(n)),
                // The register the site has that argument in (what the backend read).
                Some(arg) => self
                    .usdt
                    .as_ref()
                    .and_then(|u| crate::usdt::whole_regs(&u.args).get(usize::from(arg)).copied().flatten()),
            };
            if reg.is_some_and(|r| self.f.reg(r) == addr) {
                if let Some(Some(s)) = self.f.strings.get(slot) {
                    return Some(s);
                }
            }
        }
        // Behind an address saved at an earlier firing: only where it is the address
        // asked for (the variable holds what was saved).
        self.f.stashed.iter().find(|s| s.string && s.addr == addr).and_then(|s| s.bytes)
    }

    /// `len` bytes at `addr` from a buffer captured at the firing (`copyin(argN,
    /// SIZE)`): `Some(Some(bytes))` when a capture covers them, `Some(None)` when one
    /// should have and its read faulted (the memory was unreadable at the firing, as
    /// DTrace's read there would have found), `None` when no capture covers them.
    fn captured_buffer(&self, addr: u64, len: usize) -> Option<Option<Vec<u8>>> {
        for (slot, &(n, size)) in self.buffer_args.iter().enumerate() {
            let Some(off) = self.f.arg(usize::from(n)).and_then(|a| addr.checked_sub(a)) else { continue };
            let Some(end) = (off as usize).checked_add(len).filter(|&e| off < u64::from(size) && e <= size as usize)
            else {
                continue;
            };
            let bytes = self.f.buffers.get(slot).copied().flatten();
            return Some(bytes.and_then(|b| b.get(off as usize..end)).map(<[u8]>::to_vec));
        }
        for s in self.f.stashed.iter().filter(|s| !s.string) {
            // A faulted read covers what it was asked for; a short one what it read.
            let Some(off) = addr.checked_sub(s.addr).filter(|&o| o == 0 || s.bytes.is_some()) else { continue };
            let Some(end) = (off as usize).checked_add(len) else { continue };
            match s.bytes {
                None if off == 0 => return Some(None),
                Some(b) if end <= b.len() => return Some(Some(b[off as usize..end].to_vec())),
                _ => {}
            }
        }
        None
    }
}

impl Context for FiringCtx<'_> {
    fn builtin(&self, b: Builtin) -> Option<Value> {
        let pid = self.f.pid;
        Some(match b {
            Builtin::Arg(n) => Value::int(self.arg(n) as i64),
            Builtin::Pid => Value::int(i64::from(pid)),
            Builtin::Tid => Value::int(i64::from(self.f.tid)),
            Builtin::Curthread => Value::int(self.f.curthread? as i64),
            Builtin::Cpu => Value::int(i64::from(self.f.cpu)),
            Builtin::Timestamp => Value::int(self.f.ktime as i64),
            // Per-thread CPU time is not recorded: vtimestamp follows the clock.
            Builtin::Vtimestamp => Value::int(self.f.ktime as i64),
            Builtin::Walltimestamp => Value::int(self.f.ktime as i64 + self.procs.borrow().wall_offset),
            Builtin::Execname => Value::str(&self.procs.borrow_mut().info(pid).execname),
            // As the record has them at the firing, else as last read.
            Builtin::Ppid => Value::int(self.ids().map_or_else(|| self.procs.borrow_mut().info(pid).ppid, |i| i.0)),
            Builtin::Uid => Value::int(self.ids().map_or_else(|| self.procs.borrow_mut().info(pid).uid, |i| i.1)),
            Builtin::Gid => Value::int(self.ids().map_or_else(|| self.procs.borrow_mut().info(pid).gid, |i| i.2)),
            Builtin::Ucaller => Value::int(self.ucaller() as i64),
            Builtin::Errno => Value::int(i64::from(self.f.errno)),
            // Every frame the copied stack holds, as DTrace counts the whole stack
            // (ustackframes bounds only what ustack() shows).
            Builtin::Ustackdepth => Value::int(self.unwound(self.maxframes.min(MAX_DEPTH) as usize).len() as i64),
            Builtin::Curpsinfo | Builtin::Curlwpsinfo => return CurrentFromProc::builtin(b),
            _ => return None,
        })
    }

    fn builtin_int(&self, b: Builtin) -> Option<u64> {
        match b {
            Builtin::Arg(n) => Some(self.arg(n)),
            _ => self.builtin(b).and_then(|v| match v {
                Value::Int(i) => Some(i.bits),
                _ => None,
            }),
        }
    }

    fn register(&self, n: u64) -> Option<u64> {
        ureg(n).map(|r| self.f.reg(r))
    }

    fn read_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if CurrentFromProc::covers(addr) {
            let (execname, cached, held) = {
                let mut procs = self.procs.borrow_mut();
                let info = procs.info(self.f.pid);
                (info.execname.clone(), info.snap.clone(), info.held)
            };
            let cur = CurrentFromProc {
                at_firing: self.f.snapshot.as_deref(),
                psargs: self.f.psargs.as_deref(),
                own: self.f.own.as_ref(),
                cached: cached.as_ref(),
                held,
                pid: self.f.pid,
                tid: self.f.tid,
                cpu: self.f.cpu,
                comm: &execname,
                types: self.types,
                clocks: self.clocks,
            };
            return cur.read(addr, len);
        }
        if crate::kernel::is_kernel_address(addr) {
            return crate::kernel::read(addr, len);
        }
        let sp = self.f.reg(PtReg::Sp);
        if let Some(off) = addr.checked_sub(sp) {
            if let Some(b) = self.f.stack.get(off as usize..off as usize + len) {
                return Some(b.to_vec());
            }
        }
        if let Some(s) = self.captured(addr) {
            if s.len() >= len {
                return Some(s[..len].to_vec());
            }
        }
        if let Some(b) = self.captured_buffer(addr, len) {
            return b;
        }
        let data = procfs::read_memory(self.f.pid as i32, addr, len)
            .ok()
            .or_else(|| self.procs.borrow().read_ended(self.f.pid, addr, len))?;
        (data.len() == len).then_some(data)
    }

    fn read_string(&self, addr: u64, max: usize) -> Option<Vec<u8>> {
        if addr == 0 {
            return None;
        }
        if crate::kernel::is_kernel_address(addr) && !CurrentFromProc::covers(addr) {
            return crate::kernel::read_string(addr, max);
        }
        if let Some(s) = self.captured(addr) {
            return Some(s[..s.len().min(max.saturating_sub(1))].to_vec());
        }
        // Read the live process a chunk at a time up to the NUL.
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() + 1 < max {
            let want = (max - 1 - out.len()).min(256);
            let chunk = procfs::read_memory(self.f.pid as i32, at, want)
                .ok()
                .or_else(|| self.procs.borrow().read_ended(self.f.pid, at, want))?;
            if chunk.is_empty() {
                break;
            }
            if let Some(nul) = chunk.iter().position(|&c| c == 0) {
                out.extend_from_slice(&chunk[..nul]);
                return Some(out);
            }
            at += chunk.len() as u64;
            out.extend_from_slice(&chunk);
        }
        Some(out)
    }

    fn stack(&self, user: bool, frames: Option<u32>) -> Vec<String> {
        if !user {
            return Vec::new();
        }
        let addrs = self.unwound(frames.unwrap_or(self.ustackframes).min(self.maxframes) as usize);
        let mut procs = self.procs.borrow_mut();
        addrs.into_iter().map(|a| procs.symbolize(self.f.pid, a)).collect()
    }

    fn symbol(&self, addr: u64, kind: SymKind) -> Option<String> {
        if crate::kernel::is_kernel_address(addr) {
            return crate::kernel::symbol(addr, kind);
        }
        self.procs.borrow_mut().symbol(self.f.pid, addr, kind)
    }

    fn progenyof(&self, ancestor: i64) -> bool {
        self.procs.borrow_mut().progenyof(self.f.pid, ancestor)
    }
}
