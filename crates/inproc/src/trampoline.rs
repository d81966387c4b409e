//! The machine code of a site's trampoline (docs/inprocess.md, "Trampoline").
//!
//! ```text
//! at          relocate_before   displaced code before the probe point (return sites)
//!             firing            save all (a pt_regs image on the stack), reserve a
//!                               slot, write the record into it (header, registers,
//!                               errno, stack bytes, strings, buffers), commit,
//!                               restore all
//!             relocate_after    the rest of the displaced code
//!             jmp rel32         back to the site's resume address
//! ```
//!
//! Pure: addresses in, bytes out. The code depends on its own address only through the
//! relocated code and the final `jmp rel32`; the ring, the data page and the vDSO are
//! reached through 64-bit immediates.
//!
//! Stack bytes, strings and buffers are read with `process_vm_readv` on the process itself, which
//! copies what is readable and never faults: a bad pointer costs a record field, never
//! the traced process.

use iced_x86::code_asm::{
    byte_ptr, cl, dword_ptr, eax, ecx, edi, edx, qword_ptr, r10, r11, r12, r13, r14, r15, r8, r8d, r9, r9d, rax, rbp,
    rbx, rcx, rdi, rdx, rsi, rsp, word_ptr, AsmRegister64, CodeAssembler, CodeLabel,
};
use iced_x86::IcedError;

use udtrace_object::patch::{jmp_rel32, PatchPlan, Refusal};
use udtrace_record::pid::{
    op_chain, op_read, op_write, ChainBin, ChainOp, PlanError, PtReg, RecordLayout, RecordPlan, FLAG_STACK_TRUNCATED,
    NUM_REGS,
};

use crate::dif::{self, ArgAt, SiteWork};
use crate::ring::{Geometry, DROP_CPUS, HEADER_SIZE, OFF_DROPS, OFF_HEAD, OFF_TAIL};

/// Offset in the per-process data page of the process id (u32), which udtrace writes
/// after the process starts or forks (the page is private: a child has its own copy).
pub const DATA_PID: usize = 0;

/// Offset in the per-process data page of the address (u64) of the GOT slot holding
/// errno's offset from the thread pointer (glibc's `__errno_location` loads it from
/// there, see `udtrace_object::errno`); 0 while not known, and then errno is recorded as
/// 0. udtrace writes it once libc is mapped. The slot is read at every firing, so it may
/// be written before the loader relocates libc (the slot holds 0 until then, and errno
/// is recorded as 0).
pub const DATA_ERRNO_SLOT: usize = 8;

/// Offset in the data page where udtrace may keep errno's offset itself (i64) when it
/// is a constant (a static program, `ErrnoTls::Offset`): it then writes this word's
/// address, `data_page + DATA_ERRNO_CONST`, to [`DATA_ERRNO_SLOT`].
pub const DATA_ERRNO_CONST: usize = 16;

/// The 16 bytes udtrace writes at [`DATA_ERRNO_SLOT`] of a process's data page (at
/// `data_page`) for where the process keeps errno, as `PidProvider::errno_tls` gives it
/// (and `Backend::set_errno_tls` receives it): `(slot, 0)` a GOT slot, `(0, offset)` a
/// constant (kept at [`DATA_ERRNO_CONST`]), `None` unknown. A firing racing the write
/// sees the old words or a slot whose offset is still 0: errno 0 either way.
pub fn errno_words(data_page: u64, tls: Option<(u64, i64)>) -> [u8; 16] {
    let (slot, offset) = match tls {
        Some((0, offset)) if offset != 0 => (data_page + DATA_ERRNO_CONST as u64, offset),
        Some((slot, _)) => (slot, 0),
        None => (0, 0),
    };
    let mut w = [0u8; 16];
    w[..8].copy_from_slice(&slot.to_ne_bytes());
    w[8..].copy_from_slice(&offset.to_ne_bytes());
    w
}

/// Offset in the data page of the process's argument strings' bounds (u64 start,
/// u64 end: `mm->arg_start`, `arg_end`), which udtrace writes when it sets the process
/// up: a firing whose record has a task snapshot copies the first of those bytes,
/// DTrace's `pr_psargs`, as they are at the firing (a process may rewrite them).
pub const DATA_ARGS: usize = 24;

/// Where the data page keeps addresses stashed from one firing to a later one of the
/// same thread (`udtrace_record::pid::StashCaptures`): a table indexed by the thread id
/// modulo its length, each entry the thread id (u32, then 4 bytes) and a u64 per slot.
/// Two threads that share an entry overwrite each other's: the consumer takes a
/// capture only at the address its variable holds, so that costs a live read, never a
/// wrong value.
pub const DATA_STASH: usize = 1024;
const DATA_STASH_BYTES: usize = 3072;

/// (entries, bytes per entry) of the stash table for `slots` slots.
pub fn stash_table(slots: u8) -> (usize, usize) {
    let size = 8 + 8 * usize::from(slots);
    let mut n = 1;
    while 2 * n * size <= DATA_STASH_BYTES {
        n *= 2;
    }
    (n, size)
}

/// The address of thread `tid`'s stash entry in the data page at `data_page`.
pub fn stash_entry(data_page: u64, slots: u8, tid: u32) -> u64 {
    let (n, size) = stash_table(slots);
    data_page + (DATA_STASH + (tid as usize & (n - 1)) * size) as u64
}

/// glibc's `struct pthread` `tid` field, from the thread pointer (`fs:0`), on x86-64
/// glibc 2.26 and later; udtrace checks it per process.
pub const GLIBC_TID_OFFSET: i32 = 0x2d0;

/// x86-64 user code and stack segment selectors (`__USER_CS`, `__USER_DS`).
const USER_CS: i32 = 0x33;
const USER_SS: i32 = 0x2b;
const CLOCK_MONOTONIC: u32 = 1;
/// Linux keeps the cpu number in the low 12 bits of TSC_AUX (the node above them).
const CPU_MASK: u32 = 0xfff;
/// The System V x86-64 red zone: leaf code may keep data below its stack pointer.
const RED_ZONE: i32 = 128;
/// `process_vm_readv`, x86-64.
pub(crate) const SYS_PROCESS_VM_READV: u32 = 310;
/// `getppid`, `getresuid`, `getresgid`, `getpgid`, `getsid`, x86-64.
const SYS_GETPPID: u32 = 110;
const SYS_GETPGID: u32 = 121;
const SYS_GETSID: u32 = 124;
const SYS_GETRESUID: u32 = 118;
const SYS_GETRESGID: u32 = 120;
const EFAULT: i32 = 14;

/// How the firing reads the cpu number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSource {
    /// `rdpid`: TSC_AUX alone.
    Rdpid,
    /// `rdtscp`, for CPUs without `rdpid` (also reads the TSC, a few cycles more).
    Rdtscp,
}

/// Where things are in the traced process, the same for every site of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessAddrs {
    /// The ring's mapping.
    pub ring: u64,
    /// The per-process data page ([`DATA_PID`]).
    pub data_page: u64,
    /// The vDSO's `__vdso_clock_gettime`.
    pub clock_gettime: u64,
    /// Offset of the thread id (i32) from the thread pointer, `fs:[tid_offset]`.
    pub tid_offset: i32,
    pub cpu: CpuSource,
}

/// One site's trampoline to generate.
#[derive(Debug, Clone, Copy)]
pub struct Trampoline<'a> {
    pub plan: &'a PatchPlan,
    /// Where the trampoline will be in the process.
    pub at: u64,
    /// Bytes available there.
    pub space: usize,
    pub cookie: u64,
    pub record: &'a RecordPlan,
    pub ring: Geometry,
    pub process: ProcessAddrs,
    /// What the site's firings stash and read (`StashPlan` bits: `1 << i` stores
    /// `record.stash.writes[i]`, `1 << (32 + slot)` reads the slot).
    pub stash_ops: u64,
    /// The site's program (docs/firing.md), run first; without a record, the firing
    /// is only that ([`fast_firing`]). `None`: a record alone.
    pub work: Option<SiteWork<'a>>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrampolineError {
    #[error("in-process probes do not record {0} yet")]
    Unsupported(&'static str),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("the ring's {slot_size} byte slots do not fit {record} byte records")]
    SlotSize { slot_size: u64, record: usize },
    #[error("trampoline of {need} bytes does not fit in {have}")]
    TooBig { need: usize, have: usize },
    #[error("displaced code: {0}")]
    Relocation(#[from] Refusal),
    #[error("the resume address {0:#x} is more than 2 GiB from the trampoline")]
    TooFar(u64),
    #[error("assembling the firing: {0}")]
    Asm(String),
}

impl From<IcedError> for TrampolineError {
    fn from(e: IcedError) -> Self {
        TrampolineError::Asm(e.to_string())
    }
}

/// The trampoline's bytes, to be placed at `t.at`.
pub fn generate(t: &Trampoline<'_>) -> Result<Vec<u8>, TrampolineError> {
    generate_with_landing(t).map(|(code, _)| code)
}

/// [`generate`], and for a plan with a landing (`PatchPlan::landing`) the address in
/// the trampoline where a thread at the landing goes on: the copy of the code after the
/// function's first instruction, which that thread has run already.
pub fn generate_with_landing(t: &Trampoline<'_>) -> Result<(Vec<u8>, Option<u64>), TrampolineError> {
    let mut code = t.plan.relocate_before(t.at)?;
    match t.work.filter(|w| !w.record) {
        Some(w) if w.program.emits() => {
            let at = t.at + code.len() as u64;
            code.extend(emitting(t, &w, at)?);
        }
        Some(w) => code.extend(fast_firing(t, &w, t.at + code.len() as u64, None)?),
        None => {
            let layout = supported_layout(t.record)?;
            if t.ring.slot_size != 8 + (layout.size as u64).div_ceil(8) * 8 {
                return Err(TrampolineError::SlotSize { slot_size: t.ring.slot_size, record: layout.size });
            }
            let site_ip = t.plan.func_vaddr.wrapping_add(u64::from(t.plan.site));
            code.extend(firing(t, &layout, site_ip, t.at + code.len() as u64)?);
        }
    }
    let after_at = t.at + code.len() as u64;
    let (after, landing) = t.plan.relocate_after_landing(after_at)?;
    let landing = landing.map(|off| after_at + off as u64);
    code.extend(after);
    let back = t.plan.resume_vaddr();
    code.extend(jmp_rel32(t.at + code.len() as u64, back).ok_or(TrampolineError::TooFar(back))?);
    if code.len() > t.space {
        return Err(TrampolineError::TooBig { need: code.len(), have: t.space });
    }
    Ok((code, landing))
}

/// The record layout of `plan`, if this backend can fill it: everything but the current
/// task's address (`curthread`), which only the kernel knows.
pub fn supported_layout(plan: &RecordPlan) -> Result<RecordLayout, TrampolineError> {
    if plan.curthread {
        return Err(TrampolineError::Unsupported("curthread"));
    }
    Ok(RecordLayout::new(plan)?)
}

/// Bytes of the pt_regs image the firing pushes, below the red zone.
const PT_REGS: i32 = (NUM_REGS * 8) as i32;
/// Where the registers (the pt_regs image) start in the record.
const OFF_REGS: i32 = udtrace_record::pid::OFF_REGS as i32;

/// Bytes of the record after the registers (stack bytes, strings, buffers).
fn tail_size(layout: &RecordLayout) -> usize {
    if layout.regs {
        layout.size - layout.off_stack
    } else {
        0
    }
}

/// A register of the site, in the pt_regs image on the stack (rbp points at it).
fn site_reg(r: PtReg) -> iced_x86::code_asm::AsmMemoryOperand {
    qword_ptr(rbp + r.offset() as i32)
}

/// The firing, assembled for address `ip`. On entry the registers are the site's; on exit
/// they are again, flags included.
///
/// The thread's stack holds only the red zone, the pt_regs image and a few calls' frames
/// (about 400 bytes, whatever the captures): the record itself is written straight into
/// the slot it reserves. A thread running on a small stack (a signal handler's
/// alternate stack, a goroutine's, a coroutine's) must not find kilobytes of stack bytes
/// and strings written below its stack pointer.
fn firing(t: &Trampoline<'_>, layout: &RecordLayout, site_ip: u64, ip: u64) -> Result<Vec<u8>, TrampolineError> {
    let p = &t.process;
    let mut a = CodeAssembler::new(64)?;
    // pt_regs below the red zone, built downwards from its last field: S is the site's
    // rsp; after the pushes rsp = S - 128 - 168 points at r15, pt_regs' first field.
    a.lea(rsp, qword_ptr(rsp - RED_ZONE))?;
    a.push(USER_SS)?;
    a.push(rax)?; // sp, filled in below
    a.pushfq()?;
    a.push(USER_CS)?;
    a.push(rax)?; // ip, filled in below
    a.push(-1i32)?; // orig_ax: not a system call
    for r in [rdi, rsi, rdx, rcx, rax, r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15] {
        a.push(r)?;
    }
    // The flags are saved: from here on the code may change them. C code (the vDSO) and
    // the string instructions below want the direction flag clear.
    a.cld()?;
    // rbp (callee-saved, so it survives the vDSO call) = the pt_regs image.
    a.mov(rbp, rsp)?;
    // The stack pointer the function was entered with, where its first instruction ran
    // before the patch (a push).
    a.lea(rax, qword_ptr(rsp + (RED_ZONE + PT_REGS + t.plan.sp_adjust)))?;
    a.mov(site_reg(PtReg::Sp), rax)?;
    a.mov(rax, site_ip)?;
    a.mov(site_reg(PtReg::Ip), rax)?;
    // A timespec, 16-byte aligned as the call wants the stack.
    a.and(rsp, -16)?;
    a.sub(rsp, 16)?;
    // ktime: CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns; kept in r13 until
    // there is a slot to put it in.
    a.mov(edi, CLOCK_MONOTONIC)?;
    a.mov(rsi, rsp)?;
    a.mov(rax, p.clock_gettime)?;
    a.call(rax)?;
    a.imul_3(r13, qword_ptr(rsp), 1_000_000_000)?;
    a.add(r13, qword_ptr(rsp + 8))?;
    if let Some(w) = t.work.filter(|w| !w.program.ops.is_empty()) {
        // The program first, on the registers in the image, with the record's time.
        let frame = w.frame();
        a.sub(rsp, frame)?;
        a.mov(qword_ptr(rsp + w.ts_slot()), r13)?;
        let args = PtReg::ARGS.map(|r| ArgAt::Saved(site_reg(r)));
        dif::emit(&mut a, &w, &dif_frame(p, args, site_reg(PtReg::Ax)))?;
        a.add(rsp, frame)?;
    }

    // Reserve slot h: head h -> h + 1 unless the ring is full.
    let mut retry = a.create_label();
    let mut full = a.create_label();
    let mut copy = a.create_label();
    let mut restore = a.create_label();
    a.mov(r8, p.ring)?;
    a.mov(rax, qword_ptr(r8 + OFF_HEAD as i32))?;
    a.set_label(&mut retry)?;
    a.mov(rcx, rax)?;
    a.sub(rcx, qword_ptr(r8 + OFF_TAIL as i32))?;
    a.cmp(rcx, t.ring.nslots as i32)?;
    a.jae(full)?;
    a.lea(rdx, qword_ptr(rax + 1))?;
    // On failure rax holds the head another thread moved it to: try again from there.
    a.lock().cmpxchg(qword_ptr(r8 + OFF_HEAD as i32), rdx)?;
    a.jne(retry)?;
    // r14 = seq = h + 1, stored last; rbx (callee-saved) = the record, after the slot's
    // seq word.
    a.mov(r14, rdx)?;
    a.and(rax, (t.ring.nslots - 1) as i32)?;
    a.imul_3(rax, rax, t.ring.slot_size as i32)?;
    a.lea(rbx, qword_ptr(r8 + rax + (HEADER_SIZE + 8) as i32))?;

    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_KTIME as i32), r13)?;
    a.mov(rax, t.cookie)?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_COOKIE as i32), rax)?;
    // pid_tgid: the pid from the data page, the tid from glibc's thread descriptor.
    a.mov(rax, p.data_page + DATA_PID as u64)?;
    a.mov(eax, dword_ptr(rax))?;
    a.shl(rax, 32)?;
    a.mov(ecx, dword_ptr(p.tid_offset as u64).fs())?;
    a.or(rax, rcx)?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_PID_TGID as i32), rax)?;
    // cpu (u32) and flags (u32, 0) in one store; then stack_len and errno, 0.
    emit_cpu(&mut a, p.cpu)?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_CPU as i32), rax)?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_STACK_LEN as i32), 0)?;
    if layout.regs {
        // The pt_regs image into the record, a qword at a time, last first.
        a.mov(ecx, NUM_REGS as u32)?;
        a.set_label(&mut copy)?;
        a.mov(rax, qword_ptr(rbp + rcx * 8 - 8))?;
        a.mov(qword_ptr(rbx + rcx * 8 + (OFF_REGS - 8)), rax)?;
        a.dec(ecx)?;
        a.jnz(copy)?;
    } else {
        // Only the registers the clauses read as arguments.
        for (at, r) in layout.recorded_regs() {
            a.mov(rax, site_reg(r))?;
            a.mov(qword_ptr(rbx + at as i32), rax)?;
        }
    }

    // Captures, into the reserved slot: it stays uncommitted while they read (see
    // docs/inprocess.md, "Ring", on a slot left uncommitted).
    let tail = tail_size(layout);
    let mut subs = Subroutines { readv: a.create_label(), readstr: a.create_label() };
    if layout.errno {
        emit_errno(&mut a, p.data_page)?;
    }
    if tail > 0 {
        // The tail starts zeroed (a slot holds an older record): bytes past stack_len
        // and past a string's NUL are 0, as the BPF helpers leave them.
        a.lea(rdi, qword_ptr(rbx + layout.off_stack as i32))?;
        a.xor(eax, eax)?;
        a.mov(ecx, (tail / 8) as u32)?;
        a.rep().stosq()?;
    }
    if layout.stack_bytes > 0 {
        emit_stack(&mut a, layout, subs.readv)?;
    }
    for (cap, &(slot, max)) in t.record.strings.iter().zip(&layout.strings) {
        if cap.per_site {
            // A USDT argument this site does not have in a register: not captured,
            // read when consumed.
            a.mov(qword_ptr(rbx + slot as i32), 0)?;
            continue;
        }
        a.lea(rdi, qword_ptr(rbx + slot as i32))?;
        a.mov(rsi, site_reg(cap.reg))?;
        a.mov(edx, max)?;
        a.call(subs.readstr)?;
    }
    for (cap, &(slot, size)) in t.record.buffers.iter().zip(&layout.buffers) {
        // The result is readv's: the bytes read (up to the first unreadable page) or
        // -errno; the reserved word and the bytes past those read stay zero.
        a.lea(rdi, qword_ptr(rbx + (slot + 8) as i32))?;
        a.mov(rsi, site_reg(cap.reg))?;
        a.mov(edx, size)?;
        a.call(subs.readv)?;
        a.mov(dword_ptr(rbx + slot as i32), eax)?;
    }
    if !t.record.stash.is_empty() && t.stash_ops != 0 {
        emit_stash(&mut a, t, layout, &subs)?;
    }
    if let Some(base) = layout.off_snapshot {
        emit_own_task(&mut a, base, p.data_page, subs.readv)?;
    }
    // Commit last; on x86 a plain store is not reordered before the earlier ones (nor
    // before the stores of a string instruction, as a whole).
    a.mov(qword_ptr(rbx - 8), r14)?;
    a.jmp(restore)?;
    // The subroutines, off the main path.
    let stash_reads =
        !layout.stash_strings.is_empty() || !layout.stash_buffers.is_empty() || !layout.chain_caps.is_empty();
    let chain_strings = layout.chain_caps.iter().any(|c| matches!(c.1, udtrace_record::pid::ChainCap::Str(_)));
    if layout.stack_bytes > 0
        || !layout.strings.is_empty()
        || !layout.buffers.is_empty()
        || stash_reads
        || layout.off_snapshot.is_some()
    {
        emit_readv(&mut a, &mut subs.readv, p.data_page)?;
        if !layout.strings.is_empty() || !layout.stash_strings.is_empty() || chain_strings {
            emit_readstr(&mut a, &mut subs)?;
        }
    }
    // A full ring: the drop is counted against the CPU it happened on, as DTrace
    // counts its per-CPU buffers' drops.
    a.set_label(&mut full)?;
    emit_cpu(&mut a, p.cpu)?;
    a.and(eax, (DROP_CPUS - 1) as u32)?;
    a.lock().inc(qword_ptr(r8 + rax * 8 + OFF_DROPS as i32))?;

    a.set_label(&mut restore)?;
    a.mov(rsp, rbp)?;
    for r in [r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi] {
        a.pop(r)?;
    }
    // Skip orig_ax, ip and cs; flags back; skip sp, ss and the red zone (lea keeps the
    // flags).
    a.lea(rsp, qword_ptr(rsp + 24))?;
    a.popfq()?;
    a.lea(rsp, qword_ptr(rsp + (16 + RED_ZONE)))?;
    Ok(a.assemble(ip)?)
}

fn dif_frame(p: &ProcessAddrs, args: [ArgAt; 6], rax_at: iced_x86::code_asm::AsmMemoryOperand) -> dif::Frame {
    dif::Frame { args, rax: rax_at, data_page: p.data_page, tid_offset: p.tid_offset, cpu: p.cpu }
}

/// A firing that writes no record: the site's program alone, saving only the registers
/// it writes, and the flags only where they are live (`PatchPlan::flags_dead`): the
/// status flags with `lahf`/`seto`, cheap to put back, and the whole register
/// (`pushfq`/`popfq`, slow) only around a clock call at an offset site, where DF may be
/// set (at an entry and a return the ABI has it clear, as C code wants it).
///
/// ```text
/// lea rsp,[rsp-128]          past the red zone
/// (pushfq; cld)              offset site calling the clock
/// push what the program writes (all caller-saved and rbx when it calls the clock)
/// (seto al; lahf; push rax)  live flags
/// frame: sub rsp,N (calling the clock: rbx = rsp, aligned to 16 first)
/// (clock_gettime into the frame's timestamp)
/// the program
/// back in reverse
/// ```
fn fast_firing(
    t: &Trampoline<'_>,
    w: &SiteWork<'_>,
    ip: u64,
    plain_exit: Option<u64>,
) -> Result<Vec<u8>, TrampolineError> {
    if w.program.ops.is_empty() {
        return Ok(Vec::new());
    }
    let p = &t.process;
    let mut a = CodeAssembler::new(64)?;
    let clock = w.calls_clock();
    let saved = if clock { vec![rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11, rbx] } else { dif::clobbers(w) };
    let live = !t.plan.flags_dead;
    let whole = live && clock && t.plan.kind == udtrace_object::patch::SiteKind::Offset;
    let status = live && !whole;
    a.lea(rsp, qword_ptr(rsp - RED_ZONE))?;
    if whole {
        a.pushfq()?;
        a.cld()?;
    }
    for &r in &saved {
        a.push(r)?;
    }
    if status {
        dif::save_status_flags(&mut a)?;
        a.push(rax)?;
    }
    let pushed = saved.len() as i32 + i32::from(status);
    let frame = w.frame();
    // Where saved register k is, from the base `at` (rsp after the pushes) plus `extra`.
    let place = |k: usize, at: AsmRegister64, extra: i32| qword_ptr(at + (extra + 8 * (pushed - 1 - k as i32)));
    let (base, extra) = if clock { (rbx, 0) } else { (rsp, frame) };
    let args = dif::ARG_REGS.map(|r| match saved.iter().position(|&s| s == r) {
        Some(k) => ArgAt::Saved(place(k, base, extra)),
        None => ArgAt::Live(r),
    });
    if clock {
        a.mov(rbx, rsp)?;
        a.and(rsp, -16)?;
        a.sub(rsp, frame)?;
        a.mov(edi, CLOCK_MONOTONIC)?;
        a.lea(rsi, qword_ptr(rsp + w.ts_slot()))?;
        a.mov(rax, p.clock_gettime)?;
        a.call(rax)?;
        a.imul_3(rax, qword_ptr(rsp + w.ts_slot()), 1_000_000_000)?;
        a.add(rax, qword_ptr(rsp + w.ts_slot() + 8))?;
        a.mov(qword_ptr(rsp + w.ts_slot()), rax)?;
    } else {
        a.sub(rsp, frame)?;
    }
    // rax is saved first, always (it is scratch to every program).
    let rax_at = place(saved.iter().position(|&s| s == rax).unwrap_or(0), base, extra);
    dif::emit(&mut a, w, &dif_frame(p, args, rax_at))?;
    let restore = |a: &mut CodeAssembler| -> Result<(), TrampolineError> {
        if clock {
            a.mov(rsp, rbx)?;
        } else {
            a.add(rsp, frame)?;
        }
        if status {
            a.pop(rax)?;
            dif::restore_status_flags(a)?;
        }
        for &r in saved.iter().rev() {
            a.pop(r)?;
        }
        if whole {
            a.popfq()?;
        }
        a.lea(rsp, qword_ptr(rsp + RED_ZONE))?;
        Ok(())
    };
    if let Some(exit) = plain_exit {
        // No Emit ran: on past the record's firing, which follows.
        let mut emitted = a.create_label();
        a.cmp(qword_ptr(rsp + w.emit_slot()), 0)?;
        a.jne(emitted)?;
        restore(&mut a)?;
        a.jmp(exit)?;
        a.set_label(&mut emitted)?;
    }
    restore(&mut a)?;
    Ok(a.assemble(ip)?)
}

/// A site without a record of its own whose program may ask for one (`Op::Emit`, a
/// consumer clause whose predicate the firing decides): the program as in
/// [`fast_firing`]; when an Emit ran, the record's firing as in [`firing`] (without
/// the program), else a jump past it. Assembled twice: the jump's target is known once
/// the first pass has the lengths (both more than 127 bytes apart: a `jmp rel32` each
/// time).
fn emitting(t: &Trampoline<'_>, w: &SiteWork<'_>, ip: u64) -> Result<Vec<u8>, TrampolineError> {
    let layout = supported_layout(t.record)?;
    if t.ring.slot_size != 8 + (layout.size as u64).div_ceil(8) * 8 {
        return Err(TrampolineError::SlotSize { slot_size: t.ring.slot_size, record: layout.size });
    }
    let site_ip = t.plan.func_vaddr.wrapping_add(u64::from(t.plan.site));
    let record_only = Trampoline { work: None, ..*t };
    let first = fast_firing(t, w, ip, Some(ip + (1 << 20)))?;
    let rec = firing(&record_only, &layout, site_ip, ip + first.len() as u64)?;
    let after = ip + (first.len() + rec.len()) as u64;
    let mut code = fast_firing(t, w, ip, Some(after))?;
    if code.len() != first.len() {
        return Err(TrampolineError::Asm("the emitting firing changed length between passes".into()));
    }
    code.extend(rec);
    Ok(code)
}

/// rax = the CPU the thread runs on (clobbers rcx with `rdtscp`).
fn emit_cpu(a: &mut CodeAssembler, cpu: CpuSource) -> Result<(), TrampolineError> {
    match cpu {
        CpuSource::Rdpid => a.rdpid(rax)?,
        CpuSource::Rdtscp => {
            a.rdtscp()?;
            a.mov(eax, ecx)?;
        }
    }
    a.and(eax, CPU_MASK)?;
    Ok(())
}

/// Local subroutines of a firing, placed after its commit (off the main path).
struct Subroutines {
    /// `rax = process_vm_readv(pid, {rdi, rdx}, 1, {rsi, rdx}, 1, 0)`.
    readv: CodeLabel,
    /// The string at `rsi` into the string slot at `rdi`, at most `edx` bytes.
    readstr: CodeLabel,
}

/// What the process can tell of itself, into the record's task snapshot (marked
/// [`udtrace_record::pid::OWN_TASK`]: the kernel's task is not known; the consumer
/// takes the rest from /proc): its credentials (`getresuid`, `getresgid`), its parent,
/// process group and session (`getppid`, `getpgid`, `getsid`), and the first `PSARGS_SIZE` bytes of its argument strings, whose bounds
/// are in the data page ([`DATA_ARGS`]; none while both are 0), with their count.
fn emit_own_task(a: &mut CodeAssembler, base: usize, data_page: u64, readv: CodeLabel) -> Result<(), TrampolineError> {
    use udtrace_record::proc::{
        PSARGS_SIZE, SNAP_ARGS, SNAP_CRED, SNAP_PGID, SNAP_PPID, SNAP_PSARGS, SNAP_SID, SNAP_TASK,
    };
    a.mov(qword_ptr(rbx + (base + SNAP_TASK) as i32), udtrace_record::pid::OWN_TASK as i32)?;
    // uid gid suid sgid euid egid, as the kernel's cred has them.
    let cred = |i: usize| rbx + (base + SNAP_CRED + 4 * i) as i32;
    for (nr, real, effective, saved) in [(SYS_GETRESUID, 0, 4, 2), (SYS_GETRESGID, 1, 5, 3)] {
        a.mov(eax, nr)?;
        a.lea(rdi, qword_ptr(cred(real)))?;
        a.lea(rsi, qword_ptr(cred(effective)))?;
        a.lea(rdx, qword_ptr(cred(saved)))?;
        a.syscall()?;
    }
    for (nr, at) in [(SYS_GETPPID, SNAP_PPID), (SYS_GETPGID, SNAP_PGID), (SYS_GETSID, SNAP_SID)] {
        a.mov(eax, nr)?;
        a.xor(edi, edi)?;
        a.syscall()?;
        a.mov(dword_ptr(rbx + (base + at) as i32), eax)?;
    }
    let mut none = a.create_label();
    let mut fits = a.create_label();
    a.mov(rax, data_page + DATA_ARGS as u64)?;
    a.mov(rsi, qword_ptr(rax))?;
    a.mov(rdx, qword_ptr(rax + 8))?;
    a.sub(rdx, rsi)?;
    a.jbe(none)?;
    a.cmp(rdx, PSARGS_SIZE as i32)?;
    a.jbe(fits)?;
    a.mov(edx, PSARGS_SIZE as u32)?;
    a.set_label(&mut fits)?;
    a.lea(rdi, qword_ptr(rbx + (base + SNAP_PSARGS) as i32))?;
    a.call(readv)?;
    a.test(rax, rax)?;
    a.js(none)?;
    a.mov(dword_ptr(rbx + (base + SNAP_ARGS) as i32), eax)?;
    a.set_label(&mut none)?;
    a.nop()?;
    Ok(())
}

/// rdx = this thread's stash entry ([`stash_entry`]), ecx = its id. Clobbers rax.
fn emit_stash_entry(a: &mut CodeAssembler, t: &Trampoline<'_>, layout: &RecordLayout) -> Result<(), TrampolineError> {
    let (n, size) = stash_table(layout.stash_slots);
    a.mov(ecx, dword_ptr(rbx + udtrace_record::pid::OFF_PID_TGID as i32))?;
    a.mov(eax, ecx)?;
    a.and(eax, (n - 1) as u32)?;
    a.imul_3(eax, eax, size as u32)?;
    a.mov(rdx, t.process.data_page + DATA_STASH as u64)?;
    a.add(rdx, rax)?;
    Ok(())
}

/// The site's stash ops, as the BPF program does them: the argument registers it
/// stores put in this thread's entry (which becomes this thread's); then the slots it
/// reads copied from the entry into the record (zero already: not read) and the memory
/// behind them captured.
fn emit_stash(
    a: &mut CodeAssembler,
    t: &Trampoline<'_>,
    layout: &RecordLayout,
    subs: &Subroutines,
) -> Result<(), TrampolineError> {
    let writes: Vec<(u8, PtReg)> = t
        .record
        .stash
        .writes
        .iter()
        .enumerate()
        .filter(|&(i, _)| t.stash_ops & op_write(i) != 0)
        .map(|(_, &w)| w)
        .collect();
    if !writes.is_empty() {
        emit_stash_entry(a, t, layout)?;
        a.mov(dword_ptr(rdx), ecx)?;
        for (v, reg) in writes {
            a.mov(rax, site_reg(reg))?;
            a.mov(qword_ptr(rdx + 8 + 8 * i32::from(v)), rax)?;
        }
    }
    let reads: Vec<u8> = (0..layout.stash_slots).filter(|&v| t.stash_ops & op_read(usize::from(v)) != 0).collect();
    let val = |v: u8| rbx + (layout.off_stash + 8 * usize::from(v)) as i32;
    if !reads.is_empty() {
        let mut other = a.create_label();
        emit_stash_entry(a, t, layout)?;
        a.cmp(dword_ptr(rdx), ecx)?;
        a.jne(other)?;
        for &v in &reads {
            a.mov(rax, qword_ptr(rdx + 8 + 8 * i32::from(v)))?;
            a.mov(qword_ptr(val(v)), rax)?;
        }
        a.set_label(&mut other)?;
        for &(slot, max, v) in layout.stash_strings.iter().filter(|c| reads.contains(&c.2)) {
            let mut next = a.create_label();
            a.mov(rsi, qword_ptr(val(v)))?;
            a.test(rsi, rsi)?;
            a.jz(next)?;
            a.lea(rdi, qword_ptr(rbx + slot as i32))?;
            a.mov(edx, max)?;
            a.call(subs.readstr)?;
            a.set_label(&mut next)?;
        }
        for &(slot, size, v) in layout.stash_buffers.iter().filter(|c| reads.contains(&c.2)) {
            let mut next = a.create_label();
            a.mov(rsi, qword_ptr(val(v)))?;
            a.test(rsi, rsi)?;
            a.jz(next)?;
            a.lea(rdi, qword_ptr(rbx + (slot + 8) as i32))?;
            a.mov(edx, size)?;
            a.call(subs.readv)?;
            a.mov(dword_ptr(rbx + slot as i32), eax)?;
            a.set_label(&mut next)?;
        }
    }
    for (k, chain) in t.record.stash.chains.iter().enumerate() {
        if t.stash_ops & op_chain(k) != 0 {
            emit_chain(a, chain, layout, subs)?;
        }
    }
    Ok(())
}

/// A chain (see `udtrace_record::pid::ChainOp`), as the BPF program runs it: its
/// operands on the stack (r12 keeps where they start, to drop them all when a read
/// faults and ends the chain), each read's address and bytes into the record.
fn emit_chain(
    a: &mut CodeAssembler,
    chain: &[ChainOp],
    layout: &RecordLayout,
    subs: &Subroutines,
) -> Result<(), TrampolineError> {
    let mut end = a.create_label();
    a.mov(r12, rsp)?;
    for op in chain {
        match *op {
            ChainOp::Const(n) => {
                a.mov(rax, n)?;
                a.push(rax)?;
            }
            ChainOp::Arg(r) => a.push(site_reg(r))?,
            ChainOp::Slot(v) => a.push(qword_ptr(rbx + (layout.off_stash + 8 * usize::from(v)) as i32))?,
            ChainOp::Bin(b) => {
                a.pop(rcx)?;
                a.pop(rax)?;
                match b {
                    ChainBin::Add => a.add(rax, rcx)?,
                    ChainBin::Sub => a.sub(rax, rcx)?,
                    ChainBin::Mul => a.imul_2(rax, rcx)?,
                    ChainBin::And => a.and(rax, rcx)?,
                    ChainBin::Or => a.or(rax, rcx)?,
                    ChainBin::Shl => a.shl(rax, cl)?,
                    ChainBin::Shr => a.shr(rax, cl)?,
                }
                a.push(rax)?;
            }
            ChainOp::Copyin { cap } => {
                let (off, c) = layout.chain_caps[usize::from(cap)];
                a.mov(rsi, qword_ptr(rsp))?;
                a.mov(qword_ptr(rbx + off as i32), rsi)?;
                a.lea(rdi, qword_ptr(rbx + (off + 16) as i32))?;
                a.mov(edx, c.bytes())?;
                a.call(subs.readv)?;
                a.mov(dword_ptr(rbx + (off + 8) as i32), eax)?;
                a.cmp(rax, c.bytes() as i32)?;
                a.jne(end)?;
            }
            ChainOp::CopyinUpto { cap } => {
                let (off, c) = layout.chain_caps[usize::from(cap)];
                let mut fits = a.create_label();
                a.pop(rdx)?;
                a.mov(rsi, qword_ptr(rsp))?;
                a.mov(qword_ptr(rbx + off as i32), rsi)?;
                a.cmp(rdx, c.bytes() as i32)?;
                a.jbe(fits)?;
                a.mov(edx, c.bytes())?;
                a.set_label(&mut fits)?;
                a.lea(rdi, qword_ptr(rbx + (off + 16) as i32))?;
                a.call(subs.readv)?;
                a.mov(dword_ptr(rbx + (off + 8) as i32), eax)?;
                a.test(rax, rax)?;
                a.js(end)?;
            }
            ChainOp::Field { cap, off: at, size, signed } => {
                let (off, _) = layout.chain_caps[usize::from(cap)];
                let at = rbx + (off + 16 + at as usize) as i32;
                match (size, signed) {
                    (1, false) => a.movzx(eax, byte_ptr(at))?,
                    (1, true) => a.movsx(rax, byte_ptr(at))?,
                    (2, false) => a.movzx(eax, word_ptr(at))?,
                    (2, true) => a.movsx(rax, word_ptr(at))?,
                    (4, false) => a.mov(eax, dword_ptr(at))?,
                    (4, true) => a.movsxd(rax, dword_ptr(at))?,
                    _ => a.mov(rax, qword_ptr(at))?,
                }
                a.push(rax)?;
            }
            ChainOp::Drop => a.lea(rsp, qword_ptr(rsp + 8))?,
            ChainOp::Str { cap } => {
                let (off, c) = layout.chain_caps[usize::from(cap)];
                let mut skip = a.create_label();
                a.pop(rsi)?;
                a.mov(qword_ptr(rbx + off as i32), rsi)?;
                a.test(rsi, rsi)?;
                a.jz(skip)?;
                a.lea(rdi, qword_ptr(rbx + (off + 8) as i32))?;
                a.mov(edx, c.bytes())?;
                a.call(subs.readstr)?;
                a.set_label(&mut skip)?;
            }
        }
    }
    // A string read may end the chain at the same place: one label per instruction.
    a.nop()?;
    a.set_label(&mut end)?;
    a.mov(rsp, r12)?;
    Ok(())
}

/// errno: `fs:[offset]` (i32), with offset the i64 in the GOT slot whose address is at
/// [`DATA_ERRNO_SLOT`] of the data page. No slot, or a slot still 0 (libc not relocated
/// yet), leaves the 0 already stored.
fn emit_errno(a: &mut CodeAssembler, data_page: u64) -> Result<(), TrampolineError> {
    let mut none = a.create_label();
    dif::errno_into_eax(a, data_page, none)?;
    a.mov(dword_ptr(rbx + udtrace_record::pid::OFF_ERRNO as i32), eax)?;
    a.set_label(&mut none)?;
    Ok(())
}

/// The user stack from the site's rsp up: as much of `stack_bytes` as is readable
/// (`process_vm_readv` stops at the first unreadable page), rounded down to 8 bytes, is
/// `stack_len`; less than asked sets FLAG_STACK_TRUNCATED. The tail is zero already;
/// bytes read past the rounded length are zeroed again.
fn emit_stack(a: &mut CodeAssembler, layout: &RecordLayout, readv: CodeLabel) -> Result<(), TrampolineError> {
    let mut read = a.create_label();
    let mut whole = a.create_label();
    a.lea(rdi, qword_ptr(rbx + layout.off_stack as i32))?;
    a.mov(rsi, site_reg(PtReg::Sp))?;
    a.mov(edx, layout.stack_bytes)?;
    a.call(readv)?;
    // A failure (-errno) read nothing.
    a.test(rax, rax)?;
    a.jns(read)?;
    a.xor(eax, eax)?;
    a.set_label(&mut read)?;
    a.mov(rdx, rax)?;
    a.and(eax, -8)?;
    a.mov(dword_ptr(rbx + udtrace_record::pid::OFF_STACK_LEN as i32), eax)?;
    a.lea(rdi, qword_ptr(rbx + rax + layout.off_stack as i32))?;
    a.mov(rcx, rdx)?;
    a.sub(rcx, rax)?;
    a.xor(eax, eax)?;
    a.rep().stosb()?;
    a.cmp(dword_ptr(rbx + udtrace_record::pid::OFF_STACK_LEN as i32), layout.stack_bytes)?;
    a.jae(whole)?;
    a.mov(dword_ptr(rbx + udtrace_record::pid::OFF_FLAGS as i32), FLAG_STACK_TRUNCATED)?;
    a.set_label(&mut whole)?;
    Ok(())
}

/// `readv`: rdi = destination, rsi = source, rdx = length; returns in rax the bytes read
/// (up to the first unreadable page) or -errno. The process reads itself with
/// `process_vm_readv`, which never faults: a bad source is -EFAULT. Clobbers rax, rcx,
/// rdx, rsi, rdi, r8-r11.
fn emit_readv(a: &mut CodeAssembler, label: &mut CodeLabel, data_page: u64) -> Result<(), TrampolineError> {
    a.set_label(label)?;
    // Two struct iovec: the local one at rsp, the remote one at rsp + 16.
    a.sub(rsp, 32)?;
    a.mov(qword_ptr(rsp), rdi)?;
    a.mov(qword_ptr(rsp + 8), rdx)?;
    a.mov(qword_ptr(rsp + 16), rsi)?;
    a.mov(qword_ptr(rsp + 24), rdx)?;
    a.mov(rax, data_page + DATA_PID as u64)?;
    a.mov(edi, dword_ptr(rax))?;
    a.mov(rsi, rsp)?;
    a.mov(edx, 1)?;
    a.lea(r10, qword_ptr(rsp + 16))?;
    a.mov(r8d, 1)?;
    a.xor(r9d, r9d)?;
    a.mov(eax, SYS_PROCESS_VM_READV)?;
    // Clobbers rcx and r11, saved in the pt_regs image like every register.
    a.syscall()?;
    a.add(rsp, 32)?;
    a.ret()?;
    Ok(())
}

/// `readstr`: rdi = the string slot (i32 result, u32 0, then `max` bytes, all zero on
/// entry), rsi = the string's address, edx = max. Fills the slot as
/// `bpf_probe_read_user_str` does: the bytes up to and including the first NUL, result
/// = their count, the rest zero; no NUL in `max` bytes: the first max - 1 and a NUL,
/// result = max; nothing readable, or a read that stops at an unreadable page before
/// any NUL: result = -EFAULT and the data zero. Clobbers what `readv` does.
fn emit_readstr(a: &mut CodeAssembler, subs: &mut Subroutines) -> Result<(), TrampolineError> {
    let mut fail = a.create_label();
    let mut no_nul = a.create_label();
    let mut partial = a.create_label();
    let mut store = a.create_label();
    a.set_label(&mut subs.readstr)?;
    a.push(rdi)?;
    a.push(rdx)?;
    a.add(rdi, 8)?;
    a.call(subs.readv)?;
    a.pop(rdx)?;
    a.pop(r8)?;
    // r8 = the slot, rdx = max, rax = bytes read (n) or -errno.
    a.test(rax, rax)?;
    a.jle(fail)?;
    a.mov(r9, rax)?;
    a.lea(rdi, qword_ptr(r8 + 8))?;
    a.mov(rcx, rax)?;
    a.xor(eax, eax)?;
    a.repne().scasb()?;
    a.jne(no_nul)?;
    // rdi is one past the NUL; rcx counts the bytes read after it: zero them.
    a.mov(rax, rdi)?;
    a.sub(rax, r8)?;
    a.sub(eax, 8)?;
    a.mov(dword_ptr(r8), eax)?;
    a.xor(eax, eax)?;
    a.rep().stosb()?;
    a.ret()?;
    a.set_label(&mut no_nul)?;
    a.cmp(r9, rdx)?;
    a.jb(partial)?;
    // max bytes and no NUL: truncated, the last byte becomes the NUL.
    a.mov(byte_ptr(r8 + rdx + 7), 0)?;
    a.mov(dword_ptr(r8), edx)?;
    a.ret()?;
    // The string runs into an unreadable page: a fault, as for the helper.
    a.set_label(&mut partial)?;
    a.lea(rdi, qword_ptr(r8 + 8))?;
    a.mov(rcx, r9)?;
    a.rep().stosb()?;
    a.mov(eax, -EFAULT)?;
    a.jmp(store)?;
    // n < 0: the system call's -errno (-EFAULT for a bad address); n == 0: -EFAULT.
    a.set_label(&mut fail)?;
    a.jl(store)?;
    a.mov(eax, -EFAULT)?;
    a.set_label(&mut store)?;
    a.mov(dword_ptr(r8), eax)?;
    a.ret()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter, Mnemonic};

    use udtrace_object::patch::{plan, SiteKind};
    use udtrace_record::pid::{BufferCapture, StringCapture, OFF_STACK};

    use super::*;

    /// `push rbp; mov rbp, rsp; mov rax, rdi; add rax, rsi; pop rbp; ret`
    const FUNC: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8, 0x48, 0x01, 0xf0, 0x5d, 0xc3];
    const FUNC_AT: u64 = 0x40_1000;
    const TRAMP_AT: u64 = 0x50_0000;

    fn addrs() -> ProcessAddrs {
        ProcessAddrs {
            ring: 0x7f00_0000_0000,
            data_page: 0x7f00_1000_0000,
            clock_gettime: 0x7fff_f7fc_1000,
            tid_offset: GLIBC_TID_OFFSET,
            cpu: CpuSource::Rdpid,
        }
    }

    fn gen(kind: SiteKind, site: u64, rec: &RecordPlan) -> Result<Vec<u8>, TrampolineError> {
        let p = plan(FUNC, FUNC_AT, site, kind).unwrap();
        let layout = RecordLayout::new(rec).unwrap();
        generate(&Trampoline {
            plan: &p,
            at: TRAMP_AT,
            space: 4096,
            cookie: 0x1234_5678_9abc,
            record: rec,
            ring: Geometry::new(64, layout.size).unwrap(),
            process: addrs(),
            stash_ops: 0,
            work: None,
        })
    }

    fn disasm(code: &[u8]) -> Vec<String> {
        let mut f = IntelFormatter::new();
        Decoder::with_ip(64, code, TRAMP_AT, DecoderOptions::NONE)
            .into_iter()
            .map(|i| {
                assert_ne!(i.mnemonic(), Mnemonic::INVALID);
                let mut s = String::new();
                f.format(&i, &mut s);
                s
            })
            .collect()
    }

    #[test]
    fn entry_trampoline_shape() {
        let rec = RecordPlan { regs: true, ..RecordPlan::default() };
        let code = gen(SiteKind::Entry, 0, &rec).unwrap();
        let text = disasm(&code);
        if std::env::var_os("UDTRACE_SHOW_TRAMPOLINE").is_some() {
            eprintln!("{} bytes:\n{}", code.len(), text.join("\n"));
        }
        assert_eq!(text[0], "lea rsp,[rsp-80h]");
        assert!(text.iter().any(|s| s == "mov ecx,fs:[2D0h]"), "{text:#?}");
        // Absolute fs:0x2d0, not RIP-relative (the formatter shows both alike).
        let tid_load = Decoder::with_ip(64, &code, TRAMP_AT, DecoderOptions::NONE)
            .into_iter()
            .find(|i| i.segment_prefix() == iced_x86::Register::FS)
            .unwrap();
        assert_eq!((tid_load.memory_base(), tid_load.memory_displacement64()), (iced_x86::Register::None, 0x2d0));
        assert!(text.iter().any(|s| s == "rdpid rax"));
        assert!(text.iter().any(|s| s == "lock cmpxchg [r8],rdx"));
        // `push rbp` runs in place before the patch: the firing records the stack
        // pointer from before it (8 more than at the patch).
        assert!(text.iter().any(|s| s == &format!("lea rax,[rsp+{:X}h]", 128 + PT_REGS + 8)), "{text:#?}");
        // Displaced `mov rbp,rsp; mov rax,rdi` after the firing, then the jump back to +7.
        let n = text.len();
        assert_eq!(&text[n - 3..n - 1], ["mov rbp,rsp", "mov rax,rdi"]);
        let back = jmp_rel32(TRAMP_AT + code.len() as u64 - 5, FUNC_AT + 7).unwrap();
        assert_eq!(code[code.len() - 5..], back);
    }

    #[test]
    fn return_trampoline_runs_displaced_code_first() {
        let rec = RecordPlan { regs: true, ..RecordPlan::default() };
        let code = gen(SiteKind::Return, 11, &rec).unwrap();
        let text = disasm(&code);
        // `add rax,rsi; pop rbp` run before the firing, `ret` after.
        assert_eq!(&text[..3], ["add rax,rsi", "pop rbp", "lea rsp,[rsp-80h]"]);
        assert!(text.iter().any(|s| s == &format!("mov rax,{:X}h", FUNC_AT + 11)), "{text:#?}");
        assert_eq!(text[text.len() - 2], "ret");
    }

    #[test]
    fn refuses_curthread_only() {
        let e = gen(SiteKind::Entry, 0, &RecordPlan { curthread: true, ..RecordPlan::default() }).unwrap_err();
        assert!(e.to_string().contains("curthread"), "{e}");
        let rec = RecordPlan { curthread: true, stack_bytes: 64, errno: true, ..RecordPlan::default() };
        assert_eq!(supported_layout(&rec), Err(TrampolineError::Unsupported("curthread")));
    }

    #[test]
    fn captures_stack_strings_and_errno() {
        let rec = RecordPlan {
            stack_bytes: 512,
            strings: vec![
                StringCapture { reg: PtReg::Di, max: 256, per_site: false },
                StringCapture { reg: PtReg::Si, max: 5, per_site: false },
            ],
            buffers: vec![BufferCapture { reg: PtReg::Dx, size: 20 }],
            regs: true,
            arg_regs: 0,
            errno: true,
            curthread: false,
            task: false,
            stash: Default::default(),
        };
        let layout = supported_layout(&rec).unwrap();
        let tail = layout.size - OFF_STACK;
        assert_eq!(tail, 512 + (8 + 256) + (8 + 8) + (8 + 24));
        let code = gen(SiteKind::Entry, 0, &rec).unwrap();
        let text = disasm(&code);
        if std::env::var_os("UDTRACE_SHOW_TRAMPOLINE").is_some() {
            eprintln!("{} bytes:\n{}", code.len(), text.join("\n"));
        }
        let has = |s: &str| text.iter().any(|t| t == s);
        // Only the red zone and pt_regs on the thread's stack, whatever the captures:
        // the record is written in its slot (rbx).
        assert_eq!(text[0], "lea rsp,[rsp-80h]");
        assert!(has(&format!("lea rsp,[rsp+{:X}h]", 16 + 128)), "{text:#?}");
        assert!(
            !text.iter().any(|s| s.starts_with("sub rsp,") && s != "sub rsp,10h" && s != "sub rsp,20h"),
            "{text:#?}"
        );
        // errno: the slot's address from the data page, then the i32 at fs:[offset].
        assert!(has(&format!("mov rax,{:X}h", addrs().data_page + DATA_ERRNO_SLOT as u64)), "{text:#?}");
        assert!(has("mov eax,fs:[rax]"), "{text:#?}");
        // The tail zeroed, then read: one process_vm_readv, called for the stack and,
        // through readstr, for each string.
        assert!(has(&format!("mov ecx,{:X}h", tail / 8)), "{text:#?}");
        assert!(has("rep stosq [rdi]"));
        assert_eq!(text.iter().filter(|s| *s == "syscall").count(), 1);
        assert!(has("mov eax,136h"));
        assert!(has("repne scasb [rdi]"));
        let calls = text.iter().filter(|s| s.starts_with("call ") && *s != "call rax").count();
        assert_eq!(calls, 1 + 2 + 1 + 1, "stack, two strings, readstr's readv, the buffer");
        // The buffer: 20 bytes from rdx's address into its slot's data, readv's result
        // into its slot.
        let (slot, _) = layout.buffers[0];
        assert!(has(&format!("lea rdi,[rbx+{:X}h]", slot + 8)), "{text:#?}");
        assert!(has(&format!("mov rsi,[rbp+{:X}h]", PtReg::Dx.offset())), "{text:#?}");
        assert!(has("mov edx,14h") && has(&format!("mov [rbx+{slot:X}h],eax")), "{text:#?}");
        assert!(has(&format!("mov dword ptr [rbx+1Ch],{FLAG_STACK_TRUNCATED}")), "{text:#?}");
        // Nothing is copied but the registers.
        assert!(!has("rep movsq [rdi],[rsi]"));
        let n = text.len();
        assert_eq!(&text[n - 3..n - 1], ["mov rbp,rsp", "mov rax,rdi"]);
    }

    #[test]
    fn errno_words_for_the_data_page() {
        let page = 0x7f00_1000_0000u64;
        let words = |w: [u8; 16]| {
            (u64::from_ne_bytes(w[..8].try_into().unwrap()), i64::from_ne_bytes(w[8..].try_into().unwrap()))
        };
        assert_eq!(DATA_ERRNO_CONST, DATA_ERRNO_SLOT + 8);
        assert_eq!(words(errno_words(page, Some((0x7fff_0000_1238, 0)))), (0x7fff_0000_1238, 0));
        assert_eq!(words(errno_words(page, Some((0, -0x40)))), (page + 16, -0x40));
        assert_eq!(words(errno_words(page, None)), (0, 0));
        assert_eq!(words(errno_words(page, Some((0, 0)))), (0, 0));
    }

    #[test]
    fn errno_alone_needs_no_system_call() {
        let rec = RecordPlan { errno: true, ..RecordPlan::default() };
        let text = disasm(&gen(SiteKind::Entry, 0, &rec).unwrap());
        assert_eq!(text[0], "lea rsp,[rsp-80h]");
        assert!(text.iter().any(|s| s == "mov eax,fs:[rax]"));
        assert!(!text.iter().any(|s| s == "syscall" || s.starts_with("rep")), "{text:#?}");
    }

    #[test]
    fn header_only_records_and_space() {
        let code = gen(SiteKind::Entry, 0, &RecordPlan::default()).unwrap();
        // No registers to copy into the slot, only the header written there.
        let text = disasm(&code);
        assert!(!text.iter().any(|s| s == &format!("mov ecx,{NUM_REGS:X}h")), "{text:#?}");
        assert!(text.iter().any(|s| s == "mov [rbx-8],r14"), "{text:#?}");
        let p = plan(FUNC, FUNC_AT, 0, SiteKind::Entry).unwrap();
        let rec = RecordPlan::default();
        let t = Trampoline {
            plan: &p,
            at: TRAMP_AT,
            space: 64,
            cookie: 1,
            record: &rec,
            ring: Geometry::new(64, 40).unwrap(),
            process: addrs(),
            stash_ops: 0,
            work: None,
        };
        assert!(matches!(generate(&t), Err(TrampolineError::TooBig { have: 64, .. })));
        let t = Trampoline { ring: Geometry::new(64, 208).unwrap(), ..t };
        assert!(matches!(generate(&t), Err(TrampolineError::SlotSize { .. })));
    }
}
