//! The program every pid probe runs: keep only firings of traced processes, then write
//! one fixed-size record (see `udtrace_record::pid`) into the ring buffer.

use std::cell::OnceCell;

use thiserror::Error;

use udtrace_record::pid::{
    self as record, ChainBin, ChainOp, PlanError, PtReg, RecordLayout, RecordPlan, MAX_STASH_SLOTS,
};

use crate::insn::{
    alu64_imm, alu64_reg, atomic_add, helper, ld_imm64, ld_map_fd, ldx, mov64_imm, mov64_reg, st, stx, AluOp, Asm,
    AsmError, Cond, Insn, Reg, Size,
};
use crate::maps::{HashMap, MapError, PerCpuArray, RingBuf};

#[derive(Debug, Error)]
pub enum CodegenError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("internal code generation error: {0}")]
    Asm(#[from] AsmError),
    #[error("a record of {record} bytes cannot fit in a ring buffer of {ring} bytes")]
    RingTooSmall { record: usize, ring: usize },
    #[error("the record plan stashes addresses, and there are no maps for them (or more than 8 slots)")]
    NoStashMaps,
    #[error(transparent)]
    Dif(#[from] crate::dif::DifError),
    #[error(transparent)]
    Map(#[from] MapError),
}

/// The maps a uprobe program uses.
pub struct ProbeMaps {
    /// Processes (tgid) whose firings count: 1 for those held with ptrace,
    /// [`crate::lineage::KERNEL_FOLLOWED`] for those followed in the kernel. Also the
    /// threads [`hold_program`] signalled, as their tid with [`HELD`] set: a hash's
    /// bucket array is made at its full size (65,536 entries: 1 MiB, 0.5 ms of the
    /// kernel's time to make), and a second map for them cost that again.
    pub traced: HashMap<u32, u32>,
    /// The firings' ring, made when first asked for ([`ProbeMaps::ring`]): a session
    /// whose probes all run in-process never writes to it, and its `bufsize` × CPUs of
    /// kernel memory (8 MiB by default) cost 2 ms to make and map.
    ring: OnceCell<RingBuf>,
    ring_size: usize,
    /// Slot 0 counts, per CPU, records lost because the ring was full.
    pub drops: PerCpuArray<u64>,
    /// Where errno is read from, for plans that record it.
    pub errno: Option<ErrnoSource>,
    /// For plans that stash addresses from one firing to a later one.
    pub stash: Option<StashMaps>,
    /// Where the kernel keeps a task's data, for plans that record the current task's
    /// (`RecordPlan::task`).
    pub task: Option<crate::proc::TaskOffsets>,
}

/// The maps of stashed addresses: per thread its slots, per site what it does.
pub struct StashMaps {
    /// pid_tgid → one u64 per slot. Least recently used threads make room: a thread's
    /// end is not heard of.
    pub threads: HashMap<u64, [u8; STASH_VALUE]>,
    /// A site's cookie → its ops (`udtrace_lang::capture::StashPlan` bits); sites
    /// without an entry do nothing.
    pub ops: HashMap<u64, u64>,
}

impl StashMaps {
    pub fn create(max_threads: u32, max_sites: u32) -> Result<StashMaps, MapError> {
        Ok(StashMaps {
            threads: HashMap::create_lru("udtrace_stash", max_threads)?,
            ops: HashMap::create("udtrace_stashops", max_sites)?,
        })
    }
}

/// What reading a thread's errno at a firing takes: per process (tgid), where errno's
/// offset from the thread pointer is, and where the kernel keeps a thread's pointer.
pub struct ErrnoSource {
    /// tgid → [`errno_entry`]: the address of the GOT slot holding the offset (0: none),
    /// then the offset itself (used when there is no slot).
    pub tls: HashMap<u32, [u8; 16]>,
    /// The offset of `thread.fsbase` in the kernel's `task_struct` (from its BTF).
    pub fsbase: u32,
}

/// A process's entry in [`ErrnoSource::tls`].
pub fn errno_entry(slot: u64, offset: i64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&slot.to_ne_bytes());
    v[8..].copy_from_slice(&offset.to_ne_bytes());
    v
}

impl ProbeMaps {
    /// The maps, but the ring (of `ring_size` bytes: checked here, made when asked for).
    pub fn create(ring_size: usize, max_traced: u32) -> Result<ProbeMaps, MapError> {
        RingBuf::check_size(ring_size)?;
        Ok(ProbeMaps {
            traced: HashMap::create_growing("udtrace_traced", max_traced)?,
            ring: OnceCell::new(),
            ring_size,
            drops: PerCpuArray::create("udtrace_drops", 1)?,
            errno: None,
            stash: None,
            task: None,
        })
    }

    /// The firings' ring, made on first use.
    pub fn ring(&self) -> Result<&RingBuf, MapError> {
        if let Some(r) = self.ring.get() {
            return Ok(r);
        }
        let r = RingBuf::create("udtrace_ring", self.ring_size)?;
        Ok(self.ring.get_or_init(|| r))
    }

    /// The ring if it was made.
    pub fn ring_made(&self) -> Option<&RingBuf> {
        self.ring.get()
    }

    /// Its size, made or not.
    pub fn ring_size(&self) -> usize {
        self.ring_size
    }
}

/// How [`hold_program`] stops a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldSignals {
    /// The signal sent to a thread that does not block it.
    pub signal: i32,
    /// The signal sent instead to a thread that blocks `signal` (a blocked signal stays
    /// pending and never stops it), with where `struct task_struct` keeps the blocked
    /// mask (`blocked`, from the kernel's BTF); `None`: `signal` always.
    pub when_blocked: Option<(i32, u32)>,
}

/// The bit that makes a thread id a key of [`ProbeMaps::traced`]'s held threads: ids
/// are below 2^22 (the kernel's PID_MAX_LIMIT), so none is a process's key.
pub const HELD: u32 = 1 << 31;

/// The program on the dynamic loader's debug hook (`_dl_debug_state`, called after
/// each change to the list of loaded objects), armed for every process: in a traced
/// one it marks the thread in `traced` (its tid with [`HELD`]) and sends it a signal (see [`HoldSignals`]), so
/// that its tracer sees it stop before code of a new object runs (the mark tells that
/// signal apart from one sent by anyone else). Any other process's id goes to `events`,
/// when given, to have its new objects matched against `pid*` descriptions.
///
/// Only consistent states count: the bpf cookie is the distance from the hook to the
/// loader's `_r_debug.r_state` (0: unknown, every call counts), and calls announcing
/// an addition or removal in progress (r_state not RT_CONSISTENT) are let through.
pub fn hold_program(
    traced: &HashMap<u32, u32>,
    signals: HoldSignals,
    events: Option<&RingBuf>,
    lineage: Option<&RingBuf>,
) -> Result<Vec<Insn>, CodegenError> {
    let mut a = Asm::new();
    let out = a.label();
    let untraced = a.label();
    let unheld = a.label();
    let checked = a.label();
    a.push(mov64_reg(Reg::R9, Reg::R1));
    a.call(helper::GET_ATTACH_COOKIE);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, checked);
    a.push(ldx(Size::DW, Reg::R3, Reg::R9, PtReg::Ip.offset() as i16));
    a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R0));
    a.read_to_stack(helper::PROBE_READ_USER, -16, 4);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, checked);
    a.push(ldx(Size::W, Reg::R1, Reg::R10, -16));
    a.jmp_imm(Cond::Ne, Reg::R1, RT_CONSISTENT, out);
    a.bind(checked);
    a.call(helper::GET_CURRENT_PID_TGID);
    a.push(mov64_reg(Reg::R6, Reg::R0));
    a.push(stx(Size::W, Reg::R10, -4, Reg::R6)); // the thread id: the low half
    a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
    a.push(stx(Size::W, Reg::R10, -8, Reg::R0)); // the process id
    a.map_lookup(traced.raw_fd(), -8);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, untraced);
    // A process udtrace does not hold (another tracer does) would only be stopped for
    // that tracer to see: it is told of in `lineage`, its new objects armed after the
    // fact.
    a.push(ldx(Size::W, Reg::R1, Reg::R0, 0));
    a.jmp_imm(Cond::Ne, Reg::R1, 1, unheld);
    a.push(st(Size::W, Reg::R10, -8, 1));
    a.push(mov64_reg(Reg::R1, Reg::R6));
    a.push(alu64_imm(AluOp::Or, Reg::R1, HELD as i32)); // the low word's top bit
    a.push(stx(Size::W, Reg::R10, -4, Reg::R1));
    a.map_update(traced.raw_fd(), -4, -8);
    a.push(mov64_imm(Reg::R7, signals.signal));
    if let Some((blocked_signal, offset)) = signals.when_blocked {
        // The thread's blocked mask (its first word holds signals 1-64); a failed read
        // leaves the usual signal.
        let send = a.label();
        a.call(helper::GET_CURRENT_TASK);
        a.push(mov64_reg(Reg::R3, Reg::R0));
        a.push(alu64_imm(AluOp::Add, Reg::R3, offset as i32));
        a.read_to_stack(helper::PROBE_READ_KERNEL, -16, 8);
        a.jmp_imm(Cond::Ne, Reg::R0, 0, send);
        a.push(ldx(Size::DW, Reg::R1, Reg::R10, -16));
        a.push(alu64_imm(AluOp::Rsh, Reg::R1, signals.signal - 1));
        a.push(alu64_imm(AluOp::And, Reg::R1, 1));
        a.jmp_imm(Cond::Eq, Reg::R1, 0, send);
        a.push(mov64_imm(Reg::R7, blocked_signal));
        a.bind(send);
    }
    a.push(mov64_reg(Reg::R1, Reg::R7));
    a.call(helper::SEND_SIGNAL_THREAD);
    a.ja(out);
    a.bind(unheld);
    if let Some(ring) = lineage {
        a.jmp_imm(Cond::Ne, Reg::R1, crate::lineage::KERNEL_FOLLOWED as i32, out);
        crate::lineage::emit_loaded(&mut a, ring, -8);
    }
    a.ja(out);
    a.bind(untraced);
    if let Some(ring) = events {
        emit_pid_event(&mut a, ring, -8, 8);
    }
    a.bind(out);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    Ok(a.finish()?)
}

/// `enum r_state` of the loader's debugger interface: no change in progress.
const RT_CONSISTENT: i32 = 0;

/// Writes the 4-byte process id stored at `fp + slot`, a zero word, and what the stack
/// holds after them up to `len` bytes in all, to `ring` as one event.
fn emit_pid_event(a: &mut Asm, ring: &RingBuf, slot: i16, len: i32) {
    a.push(st(Size::W, Reg::R10, slot + 4, 0));
    a.push_wide(ld_map_fd(Reg::R1, ring.raw_fd()));
    a.push(mov64_reg(Reg::R2, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R2, i32::from(slot)));
    a.push(mov64_imm(Reg::R3, len));
    a.push(mov64_imm(Reg::R4, 0));
    a.call(helper::RINGBUF_OUTPUT);
}

/// The program on `sched:sched_process_exec`: the id of every process that has just
/// exec'd goes to `events`, to have its new image matched against `pid*` descriptions,
/// with its new name ([`EXEC_NOTICE_SIZE`] bytes: id, 0, comm), which `execname` needs
/// once a short-lived process is gone.
pub fn exec_program(events: &RingBuf) -> Result<Vec<Insn>, CodegenError> {
    let mut a = Asm::new();
    a.read_to_stack(helper::GET_CURRENT_COMM, -16, 16);
    a.call(helper::GET_CURRENT_PID_TGID);
    a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
    a.push(stx(Size::W, Reg::R10, -24, Reg::R0));
    emit_pid_event(&mut a, events, -24, EXEC_NOTICE_SIZE as i32);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    Ok(a.finish()?)
}

/// An exec's notice: the process id, a zero word and the new `comm` (16 bytes); the
/// loader hook's notices are the first 8 bytes alone.
pub const EXEC_NOTICE_SIZE: usize = 24;

/// The generated uprobe program for `plan` (R6 = ctx, R7 = pid_tgid, R8 = record).
/// bpf_ringbuf_query's flag for the bytes not yet consumed.
const RB_AVAIL_DATA: i32 = 0;
/// bpf_ringbuf_submit's flags.
const RB_NO_WAKEUP: i32 = 1;
pub(crate) const RB_FORCE_WAKEUP: i32 = 2;

pub fn uprobe_program(plan: &RecordPlan, maps: &ProbeMaps) -> Result<Vec<Insn>, CodegenError> {
    uprobe_program_for(plan, maps, Filter::Traced, false)
}

/// Whose firings a uprobe program records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Filter {
    /// Processes in the traced map.
    Traced,
    /// The one process of a per-process link, which the kernel checks at each firing
    /// (from Linux 6.13: [`link_filters_process`]): nothing to look up. The traced
    /// map's lookup was half the program's time (~50 ns of ~120 at a libc `malloc`).
    Link,
    /// Every process but this one (the `pid*` probes; the tracer itself is left out,
    /// or its own work on each record would fire the probes again, without end).
    AllBut(u32),
}

/// Whether a per-process uprobe_multi link runs its program only in its own process:
/// from Linux 6.13 the kernel checks the firing thread's group against the link's
/// (a child forked with the parent's breakpoints, or one sharing its memory after
/// vfork, used to run it too). `release`: the kernel's (`uname -r`).
pub fn link_filters_process(release: &str) -> bool {
    let mut n = release.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) >= (6, 13)
}

/// As [`uprobe_program`], for the processes `filter` names. `sleepable`: the program is
/// loaded sleepable, and a string or buffer its first read could not take (a page the
/// process has not touched yet) is faulted in with `bpf_copy_from_user` and read again.
pub fn uprobe_program_for(
    plan: &RecordPlan,
    maps: &ProbeMaps,
    filter: Filter,
    sleepable: bool,
) -> Result<Vec<Insn>, CodegenError> {
    uprobe_program_work(plan, maps, filter, sleepable, SiteWork::default())
}

/// What a site's firings do besides passing the filter (docs/firing.md).
#[derive(Clone, Copy)]
pub struct SiteWork<'a> {
    /// The program of the clauses that run at the firing, before any record.
    pub dif: Option<crate::dif::DifCode<'a>>,
    /// Whether a record is always written (some clause runs in the consumer); else only
    /// when the program ran an `Emit`.
    pub record: bool,
    /// The register each of the plan's string captures reads at these sites (`None`:
    /// nothing read, the slot not captured); without it, the plan's own registers, and
    /// nothing for a capture whose register is per site (`StringCapture::per_site`).
    pub strings: Option<&'a [Option<PtReg>]>,
}

impl Default for SiteWork<'_> {
    /// Recorded, nothing run: what every site did before.
    fn default() -> Self {
        SiteWork { dif: None, record: true, strings: None }
    }
}

/// As [`uprobe_program_for`], running `work`'s program first and writing a record only
/// when it says so (a site without one reserves nothing in the ring).
pub fn uprobe_program_work(
    plan: &RecordPlan,
    maps: &ProbeMaps,
    filter: Filter,
    sleepable: bool,
    work: SiteWork<'_>,
) -> Result<Vec<Insn>, CodegenError> {
    let layout = RecordLayout::new(plan)?;
    if layout.size + 8 > maps.ring_size() {
        return Err(CodegenError::RingTooSmall { record: layout.size, ring: maps.ring_size() });
    }
    let off = |o: usize| o as i16; // fits: RecordLayout caps the size at i16::MAX
    let mut a = Asm::new();
    let out = a.label();

    a.push(mov64_reg(Reg::R6, Reg::R1));
    a.call(helper::GET_CURRENT_PID_TGID);
    a.push(mov64_reg(Reg::R7, Reg::R0));

    a.push(mov64_reg(Reg::R1, Reg::R7));
    a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
    match filter {
        Filter::Traced => {
            // Drop firings of processes that are not traced.
            a.push(stx(Size::W, Reg::R10, -4, Reg::R1));
            a.map_lookup(maps.traced.raw_fd(), -4);
            a.jmp_imm(Cond::Eq, Reg::R0, 0, out);
        }
        Filter::Link => {}
        Filter::AllBut(pid) => {
            a.jmp_imm(Cond::Eq, Reg::R1, pid as i32, out);
        }
    }

    if let Some(code) = work.dif {
        crate::dif::emit(&mut a, crate::dif::DifCode { sleepable, ..code })?;
    }
    let emits = work.dif.is_some_and(|c| c.program.emits());
    if !work.record && emits {
        crate::dif::emitted(&mut a, out);
    } else if !work.record {
        a.bind(out);
        a.push(mov64_imm(Reg::R0, 0));
        a.exit();
        return Ok(a.finish()?);
    }

    emit_reserve(&mut a, maps, layout.size, out)?;
    a.push(stx(Size::DW, Reg::R8, off(record::OFF_PID_TGID), Reg::R7));
    a.push(mov64_reg(Reg::R1, Reg::R6));
    a.call(helper::GET_ATTACH_COOKIE);
    a.push(stx(Size::DW, Reg::R8, off(record::OFF_COOKIE), Reg::R0));
    a.call(helper::KTIME_GET_NS);
    a.push(stx(Size::DW, Reg::R8, off(record::OFF_KTIME), Reg::R0));
    a.call(helper::GET_SMP_PROCESSOR_ID);
    a.push(stx(Size::W, Reg::R8, off(record::OFF_CPU), Reg::R0));
    // Reserved memory is not zeroed.
    a.push(st(Size::W, Reg::R8, off(record::OFF_FLAGS), 0));
    a.push(st(Size::DW, Reg::R8, off(record::OFF_STACK_LEN), 0)); // and the reserved word
                                                                  // Every register, or only those the clauses read as arguments.
    for (at, r) in layout.recorded_regs() {
        a.push(ldx(Size::DW, Reg::R1, Reg::R6, r.offset() as i16));
        a.push(stx(Size::DW, Reg::R8, off(at), Reg::R1));
    }

    if layout.stack_bytes > 0 {
        emit_stack(&mut a, layout.stack_bytes, layout.off_stack, (Reg::R6, PtReg::Sp.offset() as i16), sleepable)?;
    }

    if let (true, Some(src)) = (layout.errno, &maps.errno) {
        emit_errno(&mut a, src);
    }

    match (layout.off_snapshot, &maps.task) {
        (Some(base), Some(o)) => crate::proc::emit_current_snapshot(&mut a, o, base),
        // Without the kernel's offsets: none taken.
        (Some(base), None) => {
            a.push(st(Size::DW, Reg::R8, (base + udtrace_record::proc::SNAP_TASK) as i16, 0));
        }
        _ => {}
    }
    if let Some(task) = layout.off_task {
        a.call(helper::GET_CURRENT_TASK);
        a.push(stx(Size::DW, Reg::R8, off(task), Reg::R0));
    }

    for (i, (cap, &(slot, max))) in plan.strings.iter().zip(&layout.strings).enumerate() {
        let reg = match work.strings {
            Some(regs) => regs.get(i).copied().flatten(),
            None => Some(cap.reg).filter(|_| !cap.per_site),
        };
        match reg {
            Some(r) => emit_string(&mut a, Addr::Reg(r), slot, max, sleepable),
            // Not captured (a result of 0): the consumer reads it when it needs it.
            None => {
                a.push(st(Size::DW, Reg::R8, slot as i16, 0));
            }
        }
    }

    for (cap, &(slot, size)) in plan.buffers.iter().zip(&layout.buffers) {
        emit_buffer(&mut a, Addr::Reg(cap.reg), slot, size, sleepable);
    }

    if !plan.stash.is_empty() {
        match &maps.stash {
            Some(stash) if usize::from(layout.stash_slots) <= MAX_STASH_SLOTS => {
                emit_stash(&mut a, plan, &layout, stash, sleepable)
            }
            _ => return Err(CodegenError::NoStashMaps),
        }
    }

    emit_submit(&mut a, maps)?;

    a.bind(out);
    a.push(mov64_imm(Reg::R0, 0));
    a.exit();
    Ok(a.finish()?)
}

/// Reads the string at the address `src` holds into the string slot at `slot`: i32
/// the helper's result (the length with the NUL, or -errno), then a u32 0. Sleepable, a
/// string the first read could not take is faulted in and read again.
fn emit_string(a: &mut Asm, src: Addr, slot: usize, max: u32, sleepable: bool) {
    emit_read_string(a, src, slot, max);
    if sleepable {
        emit_fault_in_string(a, src, slot, max);
    }
    a.push(stx(Size::W, Reg::R8, slot as i16, Reg::R0));
    a.push(st(Size::W, Reg::R8, (slot + 4) as i16, 0));
}

/// After a string read whose result is in R0: when it failed, copies the string's
/// bytes up to the end of its page with `bpf_copy_from_user` (which faults the page in:
/// the program is sleepable) and reads the string again, R0 its result. When that
/// fails too, the string goes on into the next page, untouched as well: that page is
/// faulted in the same way (into the slot's start: only the fault matters, the last
/// read writes the slot), and the string read once more. (`max` is at most a page.)
fn emit_fault_in_string(a: &mut Asm, src: Addr, slot: usize, max: u32) {
    let done = a.label();
    let fits = a.label();
    let second = a.label();
    a.jmp_imm(Cond::Sge, Reg::R0, 0, done);
    // Bytes to the page's end, at most `max`: a copy that crossed into an unmapped
    // page would fail whole.
    a.push(src.load(Reg::R2));
    a.push(alu64_imm(AluOp::And, Reg::R2, 4095));
    a.push(mov64_imm(Reg::R1, 4096));
    a.push(alu64_reg(AluOp::Sub, Reg::R1, Reg::R2));
    a.push(mov64_reg(Reg::R2, Reg::R1));
    a.jmp_imm(Cond::Le, Reg::R2, max as i32, fits);
    a.push(mov64_imm(Reg::R2, max as i32));
    a.bind(fits);
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, (slot + 8) as i32));
    a.push(mov64_reg(Reg::R9, Reg::R2)); // the first page's part, kept for below
    a.push(src.load(Reg::R3));
    a.call(helper::COPY_FROM_USER);
    emit_read_string(a, src, slot, max);
    a.jmp_imm(Cond::Sge, Reg::R0, 0, done);
    // The rest, up to `max`, from the next page's start.
    a.push(mov64_imm(Reg::R2, max as i32));
    a.push(alu64_reg(AluOp::Sub, Reg::R2, Reg::R9));
    a.jmp_imm(Cond::Sle, Reg::R2, 0, done);
    a.jmp_imm(Cond::Le, Reg::R2, max as i32, second);
    a.push(mov64_imm(Reg::R2, max as i32));
    a.bind(second);
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, (slot + 8) as i32));
    a.push(src.load(Reg::R3));
    a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R9));
    a.call(helper::COPY_FROM_USER);
    emit_read_string(a, src, slot, max);
    a.bind(done);
}

/// Copies `size` bytes from the address in `reg` into the buffer slot at `slot`: i32
/// `size`, or -errno with the bytes zeroed (the helpers clear their destination on a
/// fault), then a u32 0. Sleepable, a failed read (a page not present) is done again
/// with `bpf_copy_from_user`, which faults the pages in.
fn emit_buffer(a: &mut Asm, src: Addr, slot: usize, size: u32, sleepable: bool) {
    let read = |a: &mut Asm, helper_id| {
        a.push(mov64_reg(Reg::R1, Reg::R8));
        a.push(alu64_imm(AluOp::Add, Reg::R1, (slot + 8) as i32));
        a.push(mov64_imm(Reg::R2, size as i32));
        a.push(src.load(Reg::R3));
        a.call(helper_id);
    };
    let done = a.label();
    read(a, helper::PROBE_READ_USER);
    if sleepable {
        a.jmp_imm(Cond::Eq, Reg::R0, 0, done);
        read(a, helper::COPY_FROM_USER);
    }
    a.bind(done);
    // 0 on success: the slot's result is the size read.
    let stored = a.label();
    a.jmp_imm(Cond::Ne, Reg::R0, 0, stored);
    a.push(mov64_imm(Reg::R0, size as i32));
    a.bind(stored);
    a.push(stx(Size::W, Reg::R8, slot as i16, Reg::R0));
    a.push(st(Size::W, Reg::R8, (slot + 4) as i16, 0));
}

/// Reads the string behind `src` into its slot, R0 the result.
fn emit_read_string(a: &mut Asm, src: Addr, slot: usize, max: u32) {
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, (slot + 8) as i32));
    a.push(mov64_imm(Reg::R2, max as i32));
    a.push(src.load(Reg::R3));
    a.call(helper::PROBE_READ_USER_STR);
}

/// Where a capture's address is: a register of the firing (in ctx, R6) or a stash
/// slot's address already in the record (R8).
#[derive(Clone, Copy)]
enum Addr {
    Reg(PtReg),
    Record(usize),
}

impl Addr {
    fn load(self, dst: Reg) -> Insn {
        match self {
            Addr::Reg(r) => ldx(Size::DW, dst, Reg::R6, r.offset() as i16),
            Addr::Record(off) => ldx(Size::DW, dst, Reg::R8, off as i16),
        }
    }
}

/// Where a chain keeps the length of a read of a size known at the firing.
const CHAIN_LEN: i16 = -112;

/// A chain's operand `d` on the stack.
fn operand(d: usize) -> i16 {
    -120 - 8 * d as i16
}

/// Chain `k` (see `udtrace_record::pid::ChainOp`), run when the site's ops have its
/// bit: an operand stack on the program's stack, each read's address and bytes into
/// the record; a read that faults ends it (its address stays, with the fault, for the
/// consumer's invalid address).
fn emit_chain(a: &mut Asm, k: usize, chain: &[ChainOp], layout: &RecordLayout, sleepable: bool) {
    let end = a.label();
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, STASH_OPS));
    a.push(alu64_imm(AluOp::Rsh, Reg::R1, record::op_chain(k).trailing_zeros() as i32));
    a.push(alu64_imm(AluOp::And, Reg::R1, 1));
    a.jmp_imm(Cond::Eq, Reg::R1, 0, end);
    let mut d = 0usize;
    for op in chain {
        match *op {
            ChainOp::Const(n) => {
                a.push_wide(ld_imm64(Reg::R1, n));
                a.push(stx(Size::DW, Reg::R10, operand(d), Reg::R1));
                d += 1;
            }
            ChainOp::Arg(r) => {
                a.push(ldx(Size::DW, Reg::R1, Reg::R6, r.offset() as i16));
                a.push(stx(Size::DW, Reg::R10, operand(d), Reg::R1));
                d += 1;
            }
            ChainOp::Slot(v) => {
                a.push(ldx(Size::DW, Reg::R1, Reg::R8, (layout.off_stash + 8 * usize::from(v)) as i16));
                a.push(stx(Size::DW, Reg::R10, operand(d), Reg::R1));
                d += 1;
            }
            ChainOp::Bin(b) => {
                let op = match b {
                    ChainBin::Add => AluOp::Add,
                    ChainBin::Sub => AluOp::Sub,
                    ChainBin::Mul => AluOp::Mul,
                    ChainBin::And => AluOp::And,
                    ChainBin::Or => AluOp::Or,
                    ChainBin::Shl => AluOp::Lsh,
                    ChainBin::Shr => AluOp::Rsh,
                };
                a.push(ldx(Size::DW, Reg::R1, Reg::R10, operand(d - 2)));
                a.push(ldx(Size::DW, Reg::R2, Reg::R10, operand(d - 1)));
                a.push(alu64_reg(op, Reg::R1, Reg::R2));
                a.push(stx(Size::DW, Reg::R10, operand(d - 2), Reg::R1));
                d -= 1;
            }
            ChainOp::Copyin { cap } => {
                let (off, c) = layout.chain_caps[usize::from(cap)];
                a.push(ldx(Size::DW, Reg::R3, Reg::R10, operand(d - 1)));
                a.push(stx(Size::DW, Reg::R8, off as i16, Reg::R3));
                emit_buffer(a, Addr::Record(off), off + 8, c.bytes(), sleepable);
                a.push(ldx(Size::W, Reg::R1, Reg::R8, (off + 8) as i16));
                a.jmp_imm(Cond::Ne, Reg::R1, c.bytes() as i32, end);
            }
            ChainOp::CopyinUpto { cap } => {
                let (off, c) = layout.chain_caps[usize::from(cap)];
                let (fits, read, stored) = (a.label(), a.label(), a.label());
                a.push(ldx(Size::DW, Reg::R3, Reg::R10, operand(d - 2)));
                a.push(stx(Size::DW, Reg::R8, off as i16, Reg::R3));
                // min(N, the capture's size), which bounds the read for the verifier.
                a.push(ldx(Size::DW, Reg::R2, Reg::R10, operand(d - 1)));
                a.jmp_imm(Cond::Le, Reg::R2, c.bytes() as i32, fits);
                a.push(mov64_imm(Reg::R2, c.bytes() as i32));
                a.bind(fits);
                a.push(stx(Size::DW, Reg::R10, CHAIN_LEN, Reg::R2));
                a.push(mov64_imm(Reg::R0, 0));
                a.jmp_imm(Cond::Eq, Reg::R2, 0, stored);
                a.push(mov64_reg(Reg::R1, Reg::R8));
                a.push(alu64_imm(AluOp::Add, Reg::R1, (off + 16) as i32));
                a.call(helper::PROBE_READ_USER);
                if sleepable {
                    let again = a.label();
                    a.jmp_imm(Cond::Eq, Reg::R0, 0, read);
                    a.push(mov64_reg(Reg::R1, Reg::R8));
                    a.push(alu64_imm(AluOp::Add, Reg::R1, (off + 16) as i32));
                    a.push(ldx(Size::DW, Reg::R2, Reg::R10, CHAIN_LEN));
                    a.jmp_imm(Cond::Le, Reg::R2, c.bytes() as i32, again);
                    a.push(mov64_imm(Reg::R2, c.bytes() as i32));
                    a.bind(again);
                    a.push(ldx(Size::DW, Reg::R3, Reg::R8, off as i16));
                    a.call(helper::COPY_FROM_USER);
                }
                a.bind(read);
                // 0 on success: the slot's result is the bytes read.
                a.jmp_imm(Cond::Ne, Reg::R0, 0, stored);
                a.push(ldx(Size::DW, Reg::R0, Reg::R10, CHAIN_LEN));
                a.bind(stored);
                a.push(stx(Size::W, Reg::R8, (off + 8) as i16, Reg::R0));
                a.push(st(Size::W, Reg::R8, (off + 12) as i16, 0));
                a.jmp_imm(Cond::Slt, Reg::R0, 0, end);
                d -= 1;
            }
            ChainOp::Field { cap, off: at, size, signed } => {
                let (off, _) = layout.chain_caps[usize::from(cap)];
                let width = match size {
                    1 => Size::B,
                    2 => Size::H,
                    4 => Size::W,
                    _ => Size::DW,
                };
                a.push(ldx(width, Reg::R1, Reg::R8, (off + 16 + at as usize) as i16));
                if signed && size < 8 {
                    let shift = 64 - 8 * i32::from(size);
                    a.push(alu64_imm(AluOp::Lsh, Reg::R1, shift));
                    a.push(alu64_imm(AluOp::Arsh, Reg::R1, shift));
                }
                a.push(stx(Size::DW, Reg::R10, operand(d), Reg::R1));
                d += 1;
            }
            ChainOp::Drop => d -= 1,
            ChainOp::Str { cap } => {
                let (off, c) = layout.chain_caps[usize::from(cap)];
                let skip = a.label();
                a.push(ldx(Size::DW, Reg::R3, Reg::R10, operand(d - 1)));
                a.push(stx(Size::DW, Reg::R8, off as i16, Reg::R3));
                a.jmp_imm(Cond::Eq, Reg::R3, 0, skip);
                emit_string(a, Addr::Record(off), off + 8, c.bytes(), sleepable);
                a.bind(skip);
                d -= 1;
            }
        }
    }
    a.bind(end);
}

/// Stack slots of the stash code: the site's ops, the thread's key, a zeroed value.
const STASH_OPS: i16 = -32;
const STASH_KEY: i16 = -40;
const STASH_ZERO: i16 = -40 - STASH_VALUE as i16;

/// Bytes of a thread's entry in [`StashMaps::threads`]: a u64 per slot.
pub const STASH_VALUE: usize = 8 * MAX_STASH_SLOTS;

/// The stash code of a firing (see `udtrace_record::pid::StashCaptures`): the site's
/// ops from `ops` by its cookie (none: nothing to do); the slots it reads are copied
/// from the thread's entry into the record and the memory behind them captured, after
/// the registers it writes are stored in the thread's entry: a site that is both a
/// function's entry and its return (a lone `ret`), or a clause that stores a variable
/// and reads it, reads what was just stored. (A clause that reads the earlier value
/// before storing another reads it from the live process.)
fn emit_stash(a: &mut Asm, plan: &RecordPlan, layout: &RecordLayout, maps: &StashMaps, sleepable: bool) {
    let done = a.label();
    let reads = a.label();
    let chains = a.label();
    for v in 0..usize::from(layout.stash_slots) {
        a.push(st(Size::DW, Reg::R8, (layout.off_stash + 8 * v) as i16, 0));
    }
    for &(off, _) in &layout.chain_caps {
        a.push(st(Size::DW, Reg::R8, off as i16, 0));
    }
    a.push(ldx(Size::DW, Reg::R1, Reg::R8, record::OFF_COOKIE as i16));
    a.push(stx(Size::DW, Reg::R10, STASH_KEY, Reg::R1));
    a.map_lookup(maps.ops.raw_fd(), STASH_KEY);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, done);
    a.push(ldx(Size::DW, Reg::R1, Reg::R0, 0));
    a.push(stx(Size::DW, Reg::R10, STASH_OPS, Reg::R1));
    a.push(stx(Size::DW, Reg::R10, STASH_KEY, Reg::R7));
    // Writes.
    if !plan.stash.writes.is_empty() {
        let have = a.label();
        a.push(ldx(Size::DW, Reg::R1, Reg::R10, STASH_OPS));
        a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
        a.jmp_imm(Cond::Eq, Reg::R1, 0, reads);
        a.map_lookup(maps.threads.raw_fd(), STASH_KEY);
        a.jmp_imm(Cond::Ne, Reg::R0, 0, have);
        for i in 0..MAX_STASH_SLOTS {
            a.push(st(Size::DW, Reg::R10, STASH_ZERO + 8 * i as i16, 0));
        }
        a.map_update(maps.threads.raw_fd(), STASH_KEY, STASH_ZERO);
        a.map_lookup(maps.threads.raw_fd(), STASH_KEY);
        a.jmp_imm(Cond::Eq, Reg::R0, 0, reads);
        a.bind(have);
        for (i, &(v, reg)) in plan.stash.writes.iter().enumerate() {
            let next = a.label();
            a.push(ldx(Size::DW, Reg::R1, Reg::R10, STASH_OPS));
            a.push(alu64_imm(AluOp::Rsh, Reg::R1, record::op_write(i).trailing_zeros() as i32));
            a.push(alu64_imm(AluOp::And, Reg::R1, 1));
            a.jmp_imm(Cond::Eq, Reg::R1, 0, next);
            a.push(ldx(Size::DW, Reg::R1, Reg::R6, reg.offset() as i16));
            a.push(stx(Size::DW, Reg::R0, (8 * usize::from(v)) as i16, Reg::R1));
            a.bind(next);
        }
    }
    // Reads.
    a.bind(reads);
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, STASH_OPS));
    a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
    a.jmp_imm(Cond::Eq, Reg::R1, 0, done);
    a.map_lookup(maps.threads.raw_fd(), STASH_KEY);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, chains);
    for v in 0..usize::from(layout.stash_slots) {
        let next = a.label();
        a.push(ldx(Size::DW, Reg::R1, Reg::R10, STASH_OPS));
        a.push(alu64_imm(AluOp::Rsh, Reg::R1, record::op_read(v).trailing_zeros() as i32));
        a.push(alu64_imm(AluOp::And, Reg::R1, 1));
        a.jmp_imm(Cond::Eq, Reg::R1, 0, next);
        a.push(ldx(Size::DW, Reg::R1, Reg::R0, (8 * v) as i16));
        a.push(stx(Size::DW, Reg::R8, (layout.off_stash + 8 * v) as i16, Reg::R1));
        a.bind(next);
    }
    for &(slot, max, v) in &layout.stash_strings {
        let next = a.label();
        let src = Addr::Record(layout.off_stash + 8 * usize::from(v));
        a.push(src.load(Reg::R3));
        a.jmp_imm(Cond::Eq, Reg::R3, 0, next);
        emit_string(a, src, slot, max, sleepable);
        a.bind(next);
    }
    for &(slot, size, v) in &layout.stash_buffers {
        let next = a.label();
        let src = Addr::Record(layout.off_stash + 8 * usize::from(v));
        a.push(src.load(Reg::R3));
        a.jmp_imm(Cond::Eq, Reg::R3, 0, next);
        emit_buffer(a, src, slot, size, sleepable);
        a.bind(next);
    }
    a.bind(chains);
    for (k, chain) in plan.stash.chains.iter().enumerate() {
        emit_chain(a, k, chain, layout, sleepable);
    }
    a.bind(done);
}

/// Reserves a record of `size` bytes in the ring into R8; when the ring is full,
/// counts the loss on this CPU and jumps to `out`. Clobbers R0–R5.
pub(crate) fn emit_reserve(
    a: &mut Asm,
    maps: &ProbeMaps,
    size: usize,
    out: crate::insn::Label,
) -> Result<(), CodegenError> {
    let have = a.label();
    a.push_wide(ld_map_fd(Reg::R1, maps.ring()?.raw_fd()));
    a.push(mov64_imm(Reg::R2, size as i32));
    a.push(mov64_imm(Reg::R3, 0));
    a.call(helper::RINGBUF_RESERVE);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, have);
    a.push(st(Size::W, Reg::R10, -4, 0));
    a.map_lookup(maps.drops.raw_fd(), -4);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, out);
    // Atomic although the slot is this CPU's: uprobe programs run preemptible (only
    // migration is disabled), so two threads on one CPU can interleave a load/add/store
    // and lose a drop.
    a.push(mov64_imm(Reg::R1, 1));
    a.push(atomic_add(Size::DW, Reg::R0, 0, Reg::R1));
    a.ja(out);
    a.bind(have);
    a.push(mov64_reg(Reg::R8, Reg::R0));
    Ok(())
}

/// Submits the record in R8. Waking the consumer on every record costs microseconds
/// per firing. Like DTrace, whose consumer reads buffers on a timer, submit without a
/// wakeup and let the consumer drain on its own schedule; wake it only when the ring
/// is a quarter full.
pub(crate) fn emit_submit(a: &mut Asm, maps: &ProbeMaps) -> Result<(), CodegenError> {
    let quiet = a.label();
    a.push_wide(ld_map_fd(Reg::R1, maps.ring()?.raw_fd()));
    a.push(mov64_imm(Reg::R2, RB_AVAIL_DATA));
    a.call(helper::RINGBUF_QUERY);
    a.push(mov64_imm(Reg::R2, RB_NO_WAKEUP));
    a.jmp_imm(Cond::Le, Reg::R0, (maps.ring_size() / 4) as i32, quiet);
    a.push(mov64_imm(Reg::R2, RB_FORCE_WAKEUP));
    a.bind(quiet);
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.call(helper::RINGBUF_SUBMIT);
    Ok(())
}

/// Reads the firing thread's errno into the record: the thread pointer (`fsbase` of
/// the current task) plus the process's TLS offset of errno, read from its GOT slot now
/// (the loader fills it while relocating: 0 before, and then errno is not read). A
/// process without an entry, or any failed read, leaves 0. Clobbers R0–R5, R9.
fn emit_errno(a: &mut Asm, src: &ErrnoSource) {
    let skip = a.label();
    let have = a.label();
    a.push(mov64_reg(Reg::R1, Reg::R7));
    a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
    a.push(stx(Size::W, Reg::R10, -4, Reg::R1));
    a.map_lookup(src.tls.raw_fd(), -4);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, skip);
    a.push(ldx(Size::DW, Reg::R9, Reg::R0, 8));
    a.push(ldx(Size::DW, Reg::R3, Reg::R0, 0));
    a.jmp_imm(Cond::Eq, Reg::R3, 0, have);
    a.read_to_stack(helper::PROBE_READ_USER, -16, 8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, skip);
    a.push(ldx(Size::DW, Reg::R9, Reg::R10, -16));
    a.bind(have);
    a.jmp_imm(Cond::Eq, Reg::R9, 0, skip);
    a.call(helper::GET_CURRENT_TASK);
    a.push(mov64_reg(Reg::R3, Reg::R0));
    a.push(alu64_imm(AluOp::Add, Reg::R3, src.fsbase as i32));
    a.read_to_stack(helper::PROBE_READ_KERNEL, -24, 8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, skip);
    a.push(ldx(Size::DW, Reg::R3, Reg::R10, -24));
    a.jmp_imm(Cond::Eq, Reg::R3, 0, skip);
    a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R9));
    a.push(mov64_reg(Reg::R1, Reg::R8));
    a.push(alu64_imm(AluOp::Add, Reg::R1, record::OFF_ERRNO as i32));
    a.push(mov64_imm(Reg::R2, 4));
    a.call(helper::PROBE_READ_USER);
    a.bind(skip);
}

/// Copies the user stack from `sp` up into the record in R8: `stack_bytes` in one read,
/// or where that faults (the stack's mapping ends sooner), as much as is readable, to
/// 8 bytes, as a trampoline's `process_vm_readv` reads: a binary search that reads
/// each power of two from the largest below `stack_bytes` down to 8 after what was
/// read so far, and keeps it where it could be read. `sp`: where the user stack pointer
/// is (a register and an offset). Sleepable, a failed read (a page not present: a
/// large local array never touched) is made again with `bpf_copy_from_user`, which
/// faults the pages in, before the search, which uses it too. A failed read leaves
/// zeros (the helpers clear their destination), so bytes past `stack_len` are always
/// zero.
pub(crate) fn emit_stack(
    a: &mut Asm,
    stack_bytes: u32,
    off_stack: usize,
    sp: (Reg, i16),
    sleepable: bool,
) -> Result<(), AsmError> {
    let done = a.label();
    let read = |a: &mut Asm, size: u32| {
        a.push(mov64_reg(Reg::R1, Reg::R8));
        a.push(alu64_imm(AluOp::Add, Reg::R1, off_stack as i32));
        a.push(mov64_imm(Reg::R2, size as i32));
        a.push(ldx(Size::DW, Reg::R3, sp.0, sp.1));
    };
    let whole = |a: &mut Asm, helper_id| {
        read(a, stack_bytes);
        a.call(helper_id);
        a.jmp_imm(Cond::Eq, Reg::R0, 0, done);
    };
    a.push(st(Size::W, Reg::R8, record::OFF_STACK_LEN as i16, stack_bytes as i32));
    whole(a, helper::PROBE_READ_USER);
    let search = if sleepable {
        whole(a, helper::COPY_FROM_USER);
        helper::COPY_FROM_USER
    } else {
        helper::PROBE_READ_USER
    };
    a.push(st(Size::W, Reg::R8, record::OFF_FLAGS as i16, record::FLAG_STACK_TRUNCATED as i32));
    // stack_len holds what was read: kept in the record rather than in a register,
    // the verifier sees one unknown, bounded length at each step instead of following
    // every combination of reads that worked.
    a.push(st(Size::W, Reg::R8, record::OFF_STACK_LEN as i16, 0));
    let mut size = if stack_bytes.is_power_of_two() { stack_bytes / 2 } else { 1 << stack_bytes.ilog2() };
    while size >= 8 {
        let next = a.label();
        a.push(ldx(Size::W, Reg::R4, Reg::R8, record::OFF_STACK_LEN as i16));
        // No read past `stack_bytes` (which also bounds the destination for the
        // verifier).
        a.jmp_imm(Cond::Gt, Reg::R4, (stack_bytes - size) as i32, next);
        read(a, size);
        a.push(alu64_reg(AluOp::Add, Reg::R1, Reg::R4));
        a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R4));
        a.call(search);
        a.jmp_imm(Cond::Ne, Reg::R0, 0, next);
        a.push(ldx(Size::W, Reg::R4, Reg::R8, record::OFF_STACK_LEN as i16));
        a.push(alu64_imm(AluOp::Add, Reg::R4, size as i32));
        a.push(stx(Size::W, Reg::R8, record::OFF_STACK_LEN as i16, Reg::R4));
        a.bind(next);
        size /= 2;
    }
    a.bind(done);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::link_filters_process;

    #[test]
    fn per_process_links_filter_from_6_13() {
        for (release, filters) in [
            ("6.18.44-fc-v669", true),
            ("6.13.0-rc1", true),
            ("7.0.1", true),
            ("6.12.58", false),
            ("6.6.0-1-amd64", false),
            ("5.15.0", false),
            ("", false),
        ] {
            assert_eq!(link_filters_process(release), filters, "{release}");
        }
    }
}
