//! The machine code of a site's trampoline (docs/inprocess.md, "Trampoline").
//!
//! ```text
//! at          relocate_before   displaced code before the probe point (return sites)
//!             firing            save all, build the record on the stack, reserve a
//!                               slot, copy, commit, restore all
//!             relocate_after    the rest of the displaced code
//!             jmp rel32         back to the site's resume address
//! ```
//!
//! Pure: addresses in, bytes out. The code depends on its own address only through the
//! relocated code and the final `jmp rel32`; the ring, the data page and the vDSO are
//! reached through 64-bit immediates.

use iced_x86::code_asm::{
    dword_ptr, eax, ecx, edi, qword_ptr, r10, r11, r12, r13, r14, r15, r8, r9, rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp,
    CodeAssembler,
};
use iced_x86::IcedError;

use udtrace_object::patch::{jmp_rel32, PatchPlan, Refusal};
use udtrace_record::pid::{PlanError, PtReg, RecordLayout, RecordPlan, NUM_REGS};

use crate::ring::{Geometry, HEADER_SIZE, OFF_DROPS, OFF_HEAD, OFF_TAIL};

/// Offset in the per-process data page of the process id (u32), which udtrace writes
/// after the process starts or forks (the page is private: a child has its own copy).
pub const DATA_PID: usize = 0;

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
    let layout = supported_layout(t.record)?;
    if t.ring.slot_size != 8 + (layout.size as u64).div_ceil(8) * 8 {
        return Err(TrampolineError::SlotSize { slot_size: t.ring.slot_size, record: layout.size });
    }
    let mut code = t.plan.relocate_before(t.at)?;
    let site_ip = t.plan.func_vaddr.wrapping_add(u64::from(t.plan.site));
    code.extend(firing(t, &layout, site_ip, t.at + code.len() as u64)?);
    let after = t.plan.relocate_after(t.at + code.len() as u64)?;
    code.extend(after);
    let back = t.plan.resume_vaddr();
    code.extend(jmp_rel32(t.at + code.len() as u64, back).ok_or(TrampolineError::TooFar(back))?);
    if code.len() > t.space {
        return Err(TrampolineError::TooBig { need: code.len(), have: t.space });
    }
    Ok(code)
}

/// The record layout of `plan`, if this backend can fill it: the header and registers.
pub fn supported_layout(plan: &RecordPlan) -> Result<RecordLayout, TrampolineError> {
    if plan.stack_bytes > 0 {
        return Err(TrampolineError::Unsupported("user stack bytes (ustack, arg6 and up)"));
    }
    if !plan.strings.is_empty() {
        return Err(TrampolineError::Unsupported("strings (copyinstr)"));
    }
    if plan.errno {
        return Err(TrampolineError::Unsupported("errno"));
    }
    if plan.curthread {
        return Err(TrampolineError::Unsupported("curthread"));
    }
    Ok(RecordLayout::new(plan)?)
}

/// Bytes of the pt_regs image the firing pushes, below the red zone.
const PT_REGS: i32 = (NUM_REGS * 8) as i32;
/// The record header (cookie .. errno) sits right below the pt_regs image, so header and
/// registers are one contiguous record on the stack.
const HEADER: i32 = udtrace_record::pid::OFF_REGS as i32;

/// The firing, assembled for address `ip`. On entry the registers are the site's; on exit
/// they are again, flags included.
fn firing(t: &Trampoline<'_>, layout: &RecordLayout, site_ip: u64, ip: u64) -> Result<Vec<u8>, TrampolineError> {
    let p = &t.process;
    let mut a = CodeAssembler::new(64)?;
    // pt_regs, built downwards from its last field, below the red zone: S is the site's
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
    // The flags are saved: from here on the code may change them. C code (the vDSO) wants
    // the direction flag clear.
    a.cld()?;
    a.lea(rax, qword_ptr(rsp + (RED_ZONE + PT_REGS)))?;
    a.mov(qword_ptr(rsp + PtReg::Sp.offset() as i32), rax)?;
    a.mov(rax, site_ip)?;
    a.mov(qword_ptr(rsp + PtReg::Ip.offset() as i32), rax)?;
    // rbx (callee-saved, so it survives the vDSO call) = the record's start.
    a.sub(rsp, HEADER)?;
    a.mov(rbx, rsp)?;
    // A timespec, 16-byte aligned as the call wants the stack.
    a.and(rsp, -16)?;
    a.sub(rsp, 16)?;
    // ktime: CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
    a.mov(edi, CLOCK_MONOTONIC)?;
    a.mov(rsi, rsp)?;
    a.mov(rax, p.clock_gettime)?;
    a.call(rax)?;
    a.imul_3(rax, qword_ptr(rsp), 1_000_000_000)?;
    a.add(rax, qword_ptr(rsp + 8))?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_KTIME as i32), rax)?;
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
    match p.cpu {
        CpuSource::Rdpid => a.rdpid(rax)?,
        CpuSource::Rdtscp => {
            a.rdtscp()?;
            a.mov(eax, ecx)?;
        }
    }
    a.and(eax, CPU_MASK)?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_CPU as i32), rax)?;
    a.mov(qword_ptr(rbx + udtrace_record::pid::OFF_STACK_LEN as i32), 0)?;

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
    // rdx = seq = h + 1; rdi = the slot.
    a.and(rax, (t.ring.nslots - 1) as i32)?;
    a.imul_3(rax, rax, t.ring.slot_size as i32)?;
    a.lea(rdi, qword_ptr(r8 + rax + HEADER_SIZE as i32))?;
    // The record goes after the slot's seq word, a qword at a time, last first.
    a.mov(ecx, (layout.size / 8) as u32)?;
    a.set_label(&mut copy)?;
    a.mov(rsi, qword_ptr(rbx + rcx * 8 - 8))?;
    a.mov(qword_ptr(rdi + rcx * 8), rsi)?;
    a.dec(ecx)?;
    a.jnz(copy)?;
    // Commit last; on x86 a plain store is not reordered before the earlier ones.
    a.mov(qword_ptr(rdi), rdx)?;
    a.jmp(restore)?;
    a.set_label(&mut full)?;
    a.lock().inc(qword_ptr(r8 + OFF_DROPS as i32))?;

    a.set_label(&mut restore)?;
    a.lea(rsp, qword_ptr(rbx + HEADER))?;
    for r in [r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi] {
        a.pop(r)?;
    }
    // Skip orig_ax, ip and cs; flags back; skip sp, ss and the red zone (lea keeps flags).
    a.lea(rsp, qword_ptr(rsp + 24))?;
    a.popfq()?;
    a.lea(rsp, qword_ptr(rsp + (16 + RED_ZONE)))?;
    Ok(a.assemble(ip)?)
}

#[cfg(test)]
mod tests {
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter, Mnemonic};

    use udtrace_object::patch::{plan, SiteKind};

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
        // Displaced `push rbp; mov rbp,rsp; mov rax,rdi` after the firing, then the jump
        // back to +7.
        let n = text.len();
        assert_eq!(&text[n - 4..n - 1], ["push rbp", "mov rbp,rsp", "mov rax,rdi"]);
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
    fn refuses_what_it_cannot_record() {
        for (rec, what) in [
            (RecordPlan { stack_bytes: 64, regs: true, ..RecordPlan::default() }, "user stack"),
            (RecordPlan { errno: true, ..RecordPlan::default() }, "errno"),
            (RecordPlan { curthread: true, ..RecordPlan::default() }, "curthread"),
        ] {
            let e = gen(SiteKind::Entry, 0, &rec).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
    }

    #[test]
    fn header_only_records_and_space() {
        let code = gen(SiteKind::Entry, 0, &RecordPlan::default()).unwrap();
        assert!(disasm(&code).iter().any(|s| s == "mov ecx,5"));
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
        };
        assert!(matches!(generate(&t), Err(TrampolineError::TooBig { have: 64, .. })));
        let t = Trampoline { ring: Geometry::new(64, 208).unwrap(), ..t };
        assert!(matches!(generate(&t), Err(TrampolineError::SlotSize { .. })));
    }
}
