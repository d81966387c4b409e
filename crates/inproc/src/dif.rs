//! The x86 executor of the firing-time language (docs/firing.md): a verified
//! `udtrace_dif::Program` compiled into the code a trampoline runs, on the buffer
//! (`udtrace_dif::layout`) the process shares with udtrace. Its results are those of
//! `udtrace_dif::interp::run`, operation for operation (tests/dif.rs compares them).
//!
//! The program's sixteen registers live in a frame at `rsp` (`[rsp + 8 * r]`); rax, rcx
//! and rdx are scratch; r11 holds the thread's entry when the program uses it; rsi, rdi
//! and r8 serve the keyed tables. [`clobbers`] says which of them a program's code
//! writes: the trampoline saves those alone (and the flags, where they are live).

use iced_x86::code_asm::{
    al, byte_ptr, cl, dword_ptr, eax, ecx, edi, edx, qword_ptr, r10, r11, r8, r8d, r9, r9d, rax, rcx, rdi, rdx, rsi,
    rsp, AsmMemoryOperand, AsmRegister32, AsmRegister64, CodeAssembler, CodeLabel,
};
use udtrace_dif::layout::{
    AggFn, AggPlace, BufferLayout, DROP_CPUS, HASH_FINISH, HASH_MUL, HASH_SEED, KEY_FILLING, KEY_FREE, KEY_READY,
    MAX_PROBES, OFF_AGG_DROPS, OFF_DYN_DROPS, OFF_THREADS,
};
use udtrace_dif::op::{BinOp, Op, UnOp, Var};
use udtrace_dif::{Layout, Program};

use crate::trampoline::{CpuSource, TrampolineError, DATA_ERRNO_SLOT, DATA_PID, SYS_PROCESS_VM_READV};

/// Offset in the data page of the process's real user id (u64), which udtrace writes
/// when it sets the process up (`Var::Uid`).
pub const DATA_UID: usize = 40;
/// Offset in the data page of the process's real group id (u64) (`Var::Gid`).
pub const DATA_GID: usize = 48;
/// Offset in the data page of the process's name (`execname` at the firing: 16 bytes,
/// `udtrace_dif::op::comm_words`), which udtrace writes when it sets the process up,
/// from /proc/PID/stat as the consumer reads it (a copy, not the thread's live
/// `comm`: the consumer's `execname` is the process's, read once per image).
pub const DATA_COMM: usize = 64;

/// What a site runs at its firing (`udtrace_providers::backend::Work`), compiled into
/// its trampoline.
#[derive(Debug, Clone, Copy)]
pub struct SiteWork<'a> {
    pub program: &'a Program,
    pub layout: &'a Layout,
    pub buf: &'a BufferLayout,
    /// Where the buffer is mapped in the process.
    pub base: u64,
    /// The site still writes its record (after the program).
    pub record: bool,
    /// Tests only: `Get` reads `[pid, tid, cpu, timestamp, uid, gid]` (u64s) at this
    /// address instead of their sources, so that a harness can feed it any firing.
    pub harness: Option<u64>,
}

impl SiteWork<'_> {
    /// Whether the code calls the vDSO's clock (which clobbers every caller-saved
    /// register): the program reads `timestamp`, from its real source.
    pub fn calls_clock(&self) -> bool {
        self.harness.is_none() && self.program.reads(Var::Timestamp)
    }

    /// Bytes of the frame at rsp: the registers the program writes, a string's room
    /// when it reads strings ([`SiteWork::str_slot`]), the emit word (and a pad), then a
    /// 16-byte timespec whose first word becomes the timestamp. A multiple of 16.
    pub fn frame(&self) -> i32 {
        let strings = if self.program.reads_strings() { 40 + 8 * self.layout.string_words() as i32 } else { 0 };
        (self.regs_bytes() + strings + 32 + 15) & !15
    }

    fn regs_bytes(&self) -> i32 {
        let regs = self.program.ops.iter().filter_map(|op| op.regs().1).map(|r| usize::from(r) + 1).max().unwrap_or(0);
        8 * regs as i32
    }

    /// Offset in the frame of `Op::Str`'s room: two iovecs (32 bytes), r11's word
    /// around the system call, then the string's words.
    pub fn str_slot(&self) -> i32 {
        self.regs_bytes()
    }

    /// Offset in the frame of the timestamp (and of the timespec the clock fills).
    pub fn ts_slot(&self) -> i32 {
        self.frame() - 16
    }

    /// Offset in the frame of the word an `Op::Emit` sets (0 before the program).
    pub fn emit_slot(&self) -> i32 {
        self.frame() - 32
    }
}

/// eax = the thread's errno: `fs:[offset]`, with offset the i64 in the GOT slot whose
/// address is at `DATA_ERRNO_SLOT` of the data page; jumps to `none` while there is no
/// slot, or the slot is still 0 (libc not relocated yet). Clobbers rax only.
pub(crate) fn errno_into_eax(a: &mut CodeAssembler, data_page: u64, none: CodeLabel) -> Result<(), TrampolineError> {
    a.mov(rax, data_page + DATA_ERRNO_SLOT as u64)?;
    a.mov(rax, qword_ptr(rax))?;
    a.test(rax, rax)?;
    a.jz(none)?;
    a.mov(rax, qword_ptr(rax))?;
    a.test(rax, rax)?;
    a.jz(none)?;
    a.mov(eax, dword_ptr(rax).fs())?;
    Ok(())
}

/// The general registers the compiled program writes (besides the frame and the flags).
pub fn clobbers(w: &SiteWork<'_>) -> Vec<AsmRegister64> {
    let mut regs = vec![rax, rcx, rdx];
    if w.program.uses_thread_entry(w.layout) || w.program.reads(Var::Ppid) {
        regs.push(r11);
    }
    let keyed = w.program.ops.iter().any(|op| match *op {
        Op::Agg { agg, .. } => matches!(w.buf.places.get(usize::from(agg)), Some(AggPlace::Keyed { .. })),
        _ => false,
    });
    if keyed || w.program.reads_strings() {
        regs.extend([rsi, rdi, r8]);
    }
    // process_vm_readv's arguments, and the system call's rcx and r11.
    if w.program.reads_strings() {
        regs.extend([r9, r10]);
        if !regs.contains(&r11) {
            regs.push(r11);
        }
    }
    regs
}

/// Where the probed function's argument `n` is while the program runs.
#[derive(Debug, Clone, Copy)]
pub enum ArgAt {
    /// Still in its register (the program does not write it).
    Live(AsmRegister64),
    /// Saved on the stack.
    Saved(AsmMemoryOperand),
}

/// What the code around the program provides.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    /// The six argument registers' places.
    pub args: [ArgAt; 6],
    /// Where rax was saved (`Var::Ret`: a return site's return value).
    pub rax: AsmMemoryOperand,
    /// Where `Get` reads from.
    pub data_page: u64,
    pub tid_offset: i32,
    pub cpu: CpuSource,
}

/// The argument registers, in `Op::Arg` order.
pub const ARG_REGS: [AsmRegister64; 6] = [rdi, rsi, rdx, rcx, r8, iced_x86::code_asm::r9];

/// Emits the program. On entry rsp points at the frame ([`SiteWork::frame`] bytes),
/// whose timestamp slot holds the timestamp when [`SiteWork::calls_clock`]; on exit the
/// registers of [`clobbers`] and the flags are changed, nothing else.
pub fn emit(a: &mut CodeAssembler, w: &SiteWork<'_>, f: &Frame) -> Result<(), TrampolineError> {
    let p = w.program;
    let n = p.ops.len();
    let mut labels: Vec<CodeLabel> = (0..=n).map(|_| a.create_label()).collect();
    // Every op index may be a jump target: each gets a label (set on its first
    // instruction), and the end one on a `nop`... set lazily below.
    let mut targets = vec![false; n + 1];
    for op in &p.ops {
        match *op {
            Op::Jz { to, .. } | Op::Jmp { to } | Op::Str { fault: to, .. } => targets[usize::from(to)] = true,
            _ => {}
        }
    }
    let mut end = labels[n];
    let mut c = Compiler { a, w, f };
    if p.emits() {
        c.a.mov(qword_ptr(rsp + w.emit_slot()), 0)?;
    }
    if p.uses_thread_entry(w.layout) {
        c.thread_entry(end)?;
    }
    for (i, op) in p.ops.iter().enumerate() {
        if targets[i] {
            c.a.set_label(&mut labels[i])?;
            // A label must sit on an instruction: a later target at the same place
            // (an empty block) gets its own.
            c.a.nop()?;
        }
        c.op(*op, &labels)?;
    }
    c.a.set_label(&mut end)?;
    c.a.nop()?;
    Ok(())
}

struct Compiler<'a, 'b> {
    a: &'a mut CodeAssembler,
    w: &'a SiteWork<'b>,
    f: &'a Frame,
}

fn reg(r: u8) -> AsmMemoryOperand {
    qword_ptr(rsp + 8 * i32::from(r))
}

impl Compiler<'_, '_> {
    /// rax = what the firing knows.
    fn get(&mut self, v: Var) -> Result<(), TrampolineError> {
        let a = &mut *self.a;
        if let Some(h) = self.w.harness {
            let k = Var::ALL.iter().position(|&x| x == v).unwrap_or(0) as u64;
            a.mov(rax, h + 8 * k)?;
            a.mov(rax, qword_ptr(rax))?;
            return Ok(());
        }
        match v {
            Var::Pid => {
                a.mov(rax, self.f.data_page + DATA_PID as u64)?;
                a.mov(eax, dword_ptr(rax))?;
            }
            Var::Tid => a.mov(eax, dword_ptr(self.f.tid_offset as u64).fs())?,
            Var::Cpu => self.cpu()?,
            Var::Timestamp => a.mov(rax, qword_ptr(rsp + self.w.ts_slot()))?,
            Var::Uid | Var::Gid => {
                a.mov(rax, self.f.data_page + if v == Var::Uid { DATA_UID } else { DATA_GID } as u64)?;
                a.mov(rax, qword_ptr(rax))?;
            }
            Var::Ret => a.mov(rax, self.f.rax)?,
            Var::Ppid => {
                // getppid(2): the parent now (a forked child's, a reparented
                // process's), which no page could keep up to date. The system call
                // changes rcx (scratch) and r11 (the thread's entry): kept.
                a.push(r11)?;
                a.mov(eax, 110)?; // SYS_getppid
                a.syscall()?;
                a.pop(r11)?;
            }
            Var::Errno => {
                // fs:[offset], the offset in the GOT slot whose address the data page
                // holds (as a record reads it: trampoline::emit_errno); 0 while either
                // is not known.
                let (mut none, mut done) = (a.create_label(), a.create_label());
                errno_into_eax(a, self.f.data_page, none)?;
                a.movsxd(rax, eax)?;
                a.jmp(done)?;
                a.set_label(&mut none)?;
                a.xor(eax, eax)?;
                a.set_label(&mut done)?;
                a.nop()?;
            }
            Var::Comm0 | Var::Comm1 => {
                let off = DATA_COMM + if v == Var::Comm1 { 8 } else { 0 };
                a.mov(rax, self.f.data_page + off as u64)?;
                a.mov(rax, qword_ptr(rax))?;
            }
        }
        Ok(())
    }

    /// rax = the CPU (clobbers rcx and rdx with rdtscp).
    fn cpu(&mut self) -> Result<(), TrampolineError> {
        if self.w.harness.is_some() {
            return self.get(Var::Cpu);
        }
        match self.f.cpu {
            CpuSource::Rdpid => self.a.rdpid(rax)?,
            CpuSource::Rdtscp => {
                self.a.rdtscp()?;
                self.a.mov(eax, ecx)?;
            }
        }
        self.a.and(eax, 0xfff)?;
        Ok(())
    }

    /// Counts a drop on this CPU in the counters at `off`.
    fn drop_on(&mut self, off: usize) -> Result<(), TrampolineError> {
        self.cpu()?;
        self.a.and(eax, (DROP_CPUS - 1) as u32)?;
        self.a.mov(rcx, self.w.base + off as u64)?;
        self.a.lock().add(qword_ptr(rcx + rax * 8), 1)?;
        Ok(())
    }

    /// `Op::Str`: the string at register `src` read with `process_vm_readv` on the
    /// process itself (a bad address is -EFAULT, never a fault of the thread) into the
    /// frame's zeroed words, as `op::user_string` reads it; its id
    /// (`layout::string_id`) into register `d` and its entry into the string table as
    /// `interp::string_entry` makes it (0 and an aggregation drop when there is no
    /// room, or another string has the id); a fault sets the emit word and goes to
    /// `fault`. No string instruction: the direction flag may be set at an offset site.
    fn string(&mut self, d: u8, src: u8, max: u16, fault: CodeLabel) -> Result<(), TrampolineError> {
        let Some(place) = self.w.buf.strings else {
            return Err(TrampolineError::Unsupported("strings without a string table"));
        };
        let words = self.w.layout.string_words() as i32;
        let iov = self.w.str_slot();
        let save = iov + 32;
        let s = iov + 40;
        let max = i32::from(max);
        let a = &mut *self.a;
        let (mut zero, mut scan, mut clear, mut no_nul, mut read, mut faulted) = (
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
        );
        a.xor(eax, eax)?;
        a.mov(ecx, words as u32)?;
        a.set_label(&mut zero)?;
        a.mov(qword_ptr(rsp + rcx * 8 + (s - 8)), rax)?;
        a.dec(ecx)?;
        a.jnz(zero)?;
        // {local: the words, max}, {remote: the string, max}.
        a.lea(rax, qword_ptr(rsp + s))?;
        a.mov(qword_ptr(rsp + iov), rax)?;
        a.mov(qword_ptr(rsp + (iov + 8)), max)?;
        a.mov(rax, reg(src))?;
        a.mov(qword_ptr(rsp + (iov + 16)), rax)?;
        a.mov(qword_ptr(rsp + (iov + 24)), max)?;
        a.mov(qword_ptr(rsp + save), r11)?;
        if self.w.harness.is_some() {
            // The harness's pid word is a made-up one: the real pid reads this process.
            a.mov(eax, 39)?; // SYS_getpid
            a.syscall()?;
            a.mov(edi, eax)?;
        } else {
            a.mov(rax, self.f.data_page + DATA_PID as u64)?;
            a.mov(edi, dword_ptr(rax))?;
        }
        a.lea(rsi, qword_ptr(rsp + iov))?;
        a.mov(edx, 1)?;
        a.lea(r10, qword_ptr(rsp + (iov + 16)))?;
        a.mov(r8d, 1)?;
        a.xor(r9d, r9d)?;
        a.mov(eax, SYS_PROCESS_VM_READV)?;
        // Clobbers rcx and r11 (the thread's entry, kept in the frame).
        a.syscall()?;
        a.mov(r11, qword_ptr(rsp + save))?;
        // rax = bytes read (up to the first unreadable page) or -errno.
        a.test(rax, rax)?;
        a.jle(faulted)?;
        a.xor(ecx, ecx)?;
        a.set_label(&mut scan)?;
        a.cmp(rcx, rax)?;
        a.jae(no_nul)?;
        a.cmp(byte_ptr(rsp + rcx + s), 0)?;
        a.je(clear)?;
        a.inc(rcx)?;
        a.jmp(scan)?;
        // The NUL at rcx: the bytes read after it are zeroed (the words are the string
        // NUL-padded).
        a.set_label(&mut clear)?;
        a.mov(byte_ptr(rsp + rcx + s), 0)?;
        a.inc(rcx)?;
        a.cmp(rcx, rax)?;
        a.jb(clear)?;
        a.jmp(read)?;
        // No NUL in what was read: max bytes, truncated to max - 1; fewer, a fault.
        a.set_label(&mut no_nul)?;
        a.cmp(rax, max)?;
        a.jb(faulted)?;
        a.mov(byte_ptr(rsp + (s + max - 1)), 0)?;
        a.jmp(read)?;
        a.set_label(&mut faulted)?;
        a.mov(qword_ptr(rsp + self.w.emit_slot()), 1)?;
        a.jmp(fault)?;
        a.set_label(&mut read)?;
        // r8 = key_hash of the words, the low bit set.
        let mut hash = a.create_label();
        a.mov(r8, HASH_SEED)?;
        a.mov(rcx, HASH_MUL)?;
        a.xor(edx, edx)?;
        a.set_label(&mut hash)?;
        a.xor(r8, qword_ptr(rsp + rdx * 8 + s))?;
        a.imul_2(r8, rcx)?;
        a.mov(rax, r8)?;
        a.shr(rax, 29)?;
        a.xor(r8, rax)?;
        a.inc(edx)?;
        a.cmp(edx, words)?;
        a.jb(hash)?;
        hash_finish(a)?;
        a.or(r8, 1)?;
        // Its entry, as interp::string_entry finds or makes it.
        let (mut top, mut taken, mut next, mut copy, mut same, mut have, mut drop, mut done) = (
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
        );
        claim_entry(a, self.w.base + place.table as u64, (place.entries, place.entry_size), &mut top, taken)?;
        // Claimed: the id and the words, then published (stores stay in order).
        a.mov(qword_ptr(rsi + 8), r8)?;
        a.xor(edx, edx)?;
        a.set_label(&mut copy)?;
        a.mov(rax, qword_ptr(rsp + rdx * 8 + s))?;
        a.mov(qword_ptr(rsi + rdx * 8 + 16), rax)?;
        a.inc(edx)?;
        a.cmp(edx, words)?;
        a.jb(copy)?;
        a.mov(qword_ptr(rsi), KEY_READY as i32)?;
        a.jmp(have)?;
        // rax = the entry's status: another string's, or this id's (the same words, or
        // a collision: a drop).
        a.set_label(&mut taken)?;
        a.cmp(rax, KEY_READY as i32)?;
        a.jne(next)?;
        a.cmp(qword_ptr(rsi + 8), r8)?;
        a.jne(next)?;
        a.xor(edx, edx)?;
        a.set_label(&mut same)?;
        a.mov(rax, qword_ptr(rsp + rdx * 8 + s))?;
        a.cmp(rax, qword_ptr(rsi + rdx * 8 + 16))?;
        a.jne(drop)?;
        a.inc(edx)?;
        a.cmp(edx, words)?;
        a.jb(same)?;
        a.jmp(have)?;
        a.set_label(&mut next)?;
        a.inc(edi)?;
        a.cmp(edi, MAX_PROBES as u32)?;
        a.jb(top)?;
        a.set_label(&mut drop)?;
        self.drop_on(OFF_AGG_DROPS)?;
        self.a.mov(reg(d), 0)?;
        self.a.jmp(done)?;
        self.a.set_label(&mut have)?;
        self.a.mov(reg(d), r8)?;
        self.a.set_label(&mut done)?;
        self.a.nop()?;
        Ok(())
    }

    /// r11 = the thread's entry, claimed and its rows set up on its first firing
    /// (`interp::thread_entry`); none: a dynamic-variable drop, and the program ends.
    fn thread_entry(&mut self, end: CodeLabel) -> Result<(), TrampolineError> {
        let buf = self.w.buf;
        self.get(Var::Tid)?;
        let a = &mut *self.a;
        let (mut top, mut found, mut taken, mut next) =
            (a.create_label(), a.create_label(), a.create_label(), a.create_label());
        a.mov(rdx, rax)?;
        a.xor(ecx, ecx)?;
        a.set_label(&mut top)?;
        a.lea(rax, qword_ptr(rdx + rcx))?;
        a.and(rax, (buf.nthreads - 1) as i32)?;
        a.imul_3(rax, rax, buf.entry_size as i32)?;
        a.mov(r11, self.w.base + OFF_THREADS as u64)?;
        a.add(r11, rax)?;
        a.mov(rax, qword_ptr(r11))?;
        a.test(rax, rax)?;
        a.jne(taken)?;
        // Free (rax = 0): claim it.
        a.lock().cmpxchg(qword_ptr(r11), rdx)?;
        a.jne(taken)?;
        for (d, p) in self.w.layout.aggs.iter().zip(&buf.places) {
            if let (AggPlace::Thread { row }, Some((word, v))) = (*p, d.func.init()) {
                a.mov(rax, v)?;
                a.mov(qword_ptr(r11 + (row + 8 * word) as i32), rax)?;
            }
        }
        a.jmp(found)?;
        a.set_label(&mut taken)?;
        a.cmp(rax, rdx)?;
        a.je(found)?;
        self.next_probe(&mut next, ecx, top, OFF_DYN_DROPS, end)?;
        self.a.set_label(&mut found)?;
        self.a.nop()?;
        Ok(())
    }

    fn op(&mut self, op: Op, labels: &[CodeLabel]) -> Result<(), TrampolineError> {
        match op {
            Op::Str { d, a, max, fault } => self.string(d, a, max, labels[usize::from(fault)])?,
            // USDT sites are uprobes, never trampolines (docs/usdt.md).
            Op::UReg { .. } | Op::Load { .. } => return Err(TrampolineError::Unsupported("USDT operands")),
            Op::Const { d, v } => {
                if let Ok(imm) = i32::try_from(v as i64) {
                    self.a.mov(reg(d), imm)?;
                } else {
                    self.a.mov(rax, v)?;
                    self.a.mov(reg(d), rax)?;
                }
            }
            Op::Arg { d, n } => match self.f.args[usize::from(n)] {
                ArgAt::Live(r) => self.a.mov(reg(d), r)?,
                ArgAt::Saved(m) => {
                    self.a.mov(rax, m)?;
                    self.a.mov(reg(d), rax)?;
                }
            },
            Op::Get { d, v } => {
                self.get(v)?;
                self.a.mov(reg(d), rax)?;
            }
            Op::Mov { d, a: s } => {
                self.a.mov(rax, reg(s))?;
                self.a.mov(reg(d), rax)?;
            }
            Op::Bin { op, d, a: x, b: y } => self.bin(op, d, x, y)?,
            Op::Div { d, a: x, imm, signed, rem } => {
                let a = &mut *self.a;
                a.mov(rax, reg(x))?;
                a.mov(rcx, imm)?;
                if signed {
                    a.cqo()?;
                    a.idiv(rcx)?;
                } else {
                    a.xor(edx, edx)?;
                    a.div(rcx)?;
                }
                a.mov(reg(d), if rem { rdx } else { rax })?;
            }
            Op::Un { op, d, a: x } => {
                let a = &mut *self.a;
                a.mov(rax, reg(x))?;
                match op {
                    UnOp::Neg => a.neg(rax)?,
                    UnOp::BitNot => a.not(rax)?,
                    UnOp::Not => {
                        a.xor(ecx, ecx)?;
                        a.test(rax, rax)?;
                        a.sete(cl)?;
                        a.mov(rax, rcx)?;
                    }
                }
                a.mov(reg(d), rax)?;
            }
            Op::Ext { d, a: x, bits, signed } => {
                let a = &mut *self.a;
                let m = reg(x);
                match (bits, signed) {
                    (8, true) => a.movsx(rax, byte_ptr(m))?,
                    (8, false) => a.movzx(eax, byte_ptr(m))?,
                    (16, true) => a.movsx(rax, iced_x86::code_asm::word_ptr(m))?,
                    (16, false) => a.movzx(eax, iced_x86::code_asm::word_ptr(m))?,
                    (32, true) => a.movsxd(rax, dword_ptr(m))?,
                    _ => a.mov(eax, dword_ptr(m))?,
                }
                a.mov(reg(d), rax)?;
            }
            Op::Jz { a: x, to } => {
                self.a.cmp(reg(x), 0)?;
                self.a.je(labels[usize::from(to)])?;
            }
            Op::Jmp { to } => self.a.jmp(labels[usize::from(to)])?,
            Op::TlsLoad { d, slot } => {
                self.a.mov(rax, qword_ptr(r11 + BufferLayout::tls_offset(slot) as i32))?;
                self.a.mov(reg(d), rax)?;
            }
            Op::TlsStore { slot, a: x } => {
                self.a.mov(rax, reg(x))?;
                self.a.mov(qword_ptr(r11 + BufferLayout::tls_offset(slot) as i32), rax)?;
            }
            Op::Agg { agg, keys, val, incr } => self.agg(usize::from(agg), keys, val, incr)?,
            Op::Emit => self.a.mov(qword_ptr(rsp + self.w.emit_slot()), 1)?,
        }
        Ok(())
    }

    fn bin(&mut self, op: BinOp, d: u8, x: u8, y: u8) -> Result<(), TrampolineError> {
        let a = &mut *self.a;
        a.mov(rax, reg(x))?;
        match op {
            BinOp::Add => a.add(rax, reg(y))?,
            BinOp::Sub => a.sub(rax, reg(y))?,
            BinOp::Mul => a.imul_2(rax, reg(y))?,
            BinOp::And => a.and(rax, reg(y))?,
            BinOp::Or => a.or(rax, reg(y))?,
            BinOp::Xor => a.xor(rax, reg(y))?,
            BinOp::Shl | BinOp::ShrU | BinOp::ShrS => {
                // A register count is taken modulo 64, as the language defines it.
                a.mov(rcx, reg(y))?;
                match op {
                    BinOp::Shl => a.shl(rax, cl)?,
                    BinOp::ShrU => a.shr(rax, cl)?,
                    _ => a.sar(rax, cl)?,
                }
            }
            BinOp::Eq | BinOp::Ne | BinOp::LtU | BinOp::LeU | BinOp::LtS | BinOp::LeS => {
                a.xor(ecx, ecx)?;
                a.cmp(rax, reg(y))?;
                match op {
                    BinOp::Eq => a.sete(cl)?,
                    BinOp::Ne => a.setne(cl)?,
                    BinOp::LtU => a.setb(cl)?,
                    BinOp::LeU => a.setbe(cl)?,
                    BinOp::LtS => a.setl(cl)?,
                    _ => a.setle(cl)?,
                }
                a.mov(rax, rcx)?;
            }
        }
        a.mov(reg(d), rax)?;
        Ok(())
    }

    fn agg(&mut self, agg: usize, keys: u8, val: u8, incr: u8) -> Result<(), TrampolineError> {
        let desc = self.w.layout.aggs[agg];
        match self.w.buf.places[agg] {
            AggPlace::Thread { row } => self.update(desc.func, r11, row as i32, val, incr, false),
            AggPlace::Keyed { table, entries, entry_size } => {
                let nk = usize::from(desc.nkeys);
                let mut done = self.a.create_label();
                let mut update = self.a.create_label();
                self.keyed_entry(desc.func, (table, entries, entry_size), keys, nk, &mut update, done)?;
                self.a.set_label(&mut update)?;
                self.update(desc.func, rsi, 0, val, incr, true)?;
                self.a.set_label(&mut done)?;
                self.a.nop()?;
                Ok(())
            }
        }
    }

    /// rsi = the row of the key in registers `keys..keys + nk` (`interp::keyed_entry`),
    /// then on to `update`; no entry: an aggregation drop, on to `done`.
    fn keyed_entry(
        &mut self,
        func: AggFn,
        (table, entries, entry_size): (usize, usize, usize),
        keys: u8,
        nk: usize,
        update: &mut CodeLabel,
        done: CodeLabel,
    ) -> Result<(), TrampolineError> {
        let key = |j: usize| reg(keys + j as u8);
        let a = &mut *self.a;
        let (mut top, mut taken, mut next) = (a.create_label(), a.create_label(), a.create_label());
        a.mov(r8, HASH_SEED)?;
        a.mov(rcx, HASH_MUL)?;
        for j in 0..nk {
            a.xor(r8, key(j))?;
            a.imul_2(r8, rcx)?;
            a.mov(rax, r8)?;
            a.shr(rax, 29)?;
            a.xor(r8, rax)?;
        }
        hash_finish(a)?;
        claim_entry(a, self.w.base + table as u64, (entries, entry_size), &mut top, taken)?;
        // Claimed: the key, the row's initial words, then published (x86 keeps stores
        // in order: a reader that sees READY sees the rest).
        for j in 0..nk {
            a.mov(rax, key(j))?;
            a.mov(qword_ptr(rsi + (8 + 8 * j) as i32), rax)?;
        }
        let row = (8 + 8 * nk) as i32;
        if let Some((word, v)) = func.init() {
            a.mov(rax, v)?;
            a.mov(qword_ptr(rsi + row + 8 * word as i32), rax)?;
        }
        a.mov(qword_ptr(rsi), KEY_READY as i32)?;
        a.add(rsi, row)?;
        a.jmp(*update)?;
        // Taken (rax = its status): this key's, once published?
        a.set_label(&mut taken)?;
        a.cmp(rax, KEY_READY as i32)?;
        a.jne(next)?;
        for j in 0..nk {
            a.mov(rax, key(j))?;
            a.cmp(qword_ptr(rsi + (8 + 8 * j) as i32), rax)?;
            a.jne(next)?;
        }
        a.add(rsi, row)?;
        a.jmp(*update)?;
        self.next_probe(&mut next, edi, top, OFF_AGG_DROPS, done)
    }

    /// At `next`: on to the next entry (`counter` counts them) until MAX_PROBES, then a
    /// drop counted at `drops`, and on to `exit`.
    fn next_probe(
        &mut self,
        next: &mut CodeLabel,
        counter: AsmRegister32,
        top: CodeLabel,
        drops: usize,
        exit: CodeLabel,
    ) -> Result<(), TrampolineError> {
        self.a.set_label(next)?;
        self.a.inc(counter)?;
        self.a.cmp(counter, MAX_PROBES as u32)?;
        self.a.jb(top)?;
        self.drop_on(drops)?;
        self.a.jmp(exit)?;
        Ok(())
    }

    /// Updates the row at `[b + d]` with the value in register `val`, weight `incr`:
    /// shared, every word with a `lock`ed instruction (`interp::update_shared`); the
    /// thread's own, each word with one plain instruction, so that a signal handler's
    /// firing in between cannot split it (`interp::update_own`).
    fn update(
        &mut self,
        func: AggFn,
        b: AsmRegister64,
        d: i32,
        val: u8,
        incr: u8,
        shared: bool,
    ) -> Result<(), TrampolineError> {
        let a = &mut *self.a;
        let word = |w: i32| qword_ptr(b + (d + 8 * w));
        if shared {
            a.lock().add(word(0), 1)?;
        } else {
            a.add(word(0), 1)?;
        }
        match func {
            AggFn::Count => {}
            AggFn::Sum | AggFn::Avg => {
                a.mov(rax, reg(val))?;
                if shared {
                    a.lock().add(word(1), rax)?;
                } else {
                    a.add(word(1), rax)?;
                }
            }
            AggFn::Min | AggFn::Max => {
                // A compare-and-swap loop, without `lock` on the thread's own row: an
                // unlocked cmpxchg is still one instruction for the thread's signals.
                let (mut top, mut done) = (a.create_label(), a.create_label());
                a.mov(rdx, reg(val))?;
                a.mov(rax, word(1))?;
                a.set_label(&mut top)?;
                a.cmp(rdx, rax)?;
                if func == AggFn::Min {
                    a.jge(done)?;
                } else {
                    a.jle(done)?;
                }
                if shared {
                    a.lock().cmpxchg(word(1), rdx)?;
                } else {
                    a.cmpxchg(word(1), rdx)?;
                }
                a.jne(top)?;
                a.set_label(&mut done)?;
                a.nop()?;
            }
            AggFn::Stddev => {
                a.mov(rax, reg(val))?;
                if shared {
                    a.lock().add(word(1), rax)?;
                } else {
                    a.add(word(1), rax)?;
                }
                // |v| (i64::MIN's is 2^63), squared into rdx:rax, added in 128 bits:
                // the carry of the low word's add goes into the high word's.
                a.cqo()?;
                a.xor(rax, rdx)?;
                a.sub(rax, rdx)?;
                a.mul(rax)?;
                if shared {
                    a.lock().add(word(2), rax)?;
                    a.lock().adc(word(3), rdx)?;
                } else {
                    a.add(word(2), rax)?;
                    a.adc(word(3), rdx)?;
                }
            }
            AggFn::Quantize | AggFn::Lquantize { .. } | AggFn::Llquantize { .. } => {
                bucket(a, func, val)?;
                a.mov(rcx, reg(incr))?;
                let m = qword_ptr(b + rax * 8 + (d + 8));
                if shared {
                    a.lock().add(m, rcx)?;
                } else {
                    a.add(m, rcx)?;
                }
            }
        }
        Ok(())
    }
}

/// rax = the bucket of register `val`'s value (`AggFn::bucket` less one: the word after
/// hits is bucket 0). Clobbers rcx and rdx.
fn bucket(a: &mut CodeAssembler, func: AggFn, val: u8) -> Result<(), TrampolineError> {
    let mut done = a.create_label();
    match func {
        AggFn::Lquantize { base, step, levels } => {
            // Compared in 32 bits, as the kernel does.
            let mut level = a.create_label();
            a.movsxd(rax, dword_ptr(reg(val)))?;
            a.cmp(rax, base)?;
            a.jge(level)?;
            a.xor(eax, eax)?;
            a.jmp(done)?;
            a.set_label(&mut level)?;
            a.sub(rax, base)?;
            a.xor(edx, edx)?;
            a.mov(ecx, u32::from(step.max(1)))?;
            a.div(rcx)?;
            let mut below = a.create_label();
            a.cmp(rax, i32::from(levels))?;
            a.jb(below)?;
            a.mov(eax, u32::from(levels))?;
            a.set_label(&mut below)?;
            a.add(eax, 1)?;
        }
        AggFn::Llquantize { bins } => {
            // The program computed the bin: within 0..bins, taken signed.
            let last = u32::from(bins.max(1)) - 1;
            let mut nonneg = a.create_label();
            a.mov(rax, reg(val))?;
            a.test(rax, rax)?;
            a.jns(nonneg)?;
            a.xor(eax, eax)?;
            a.jmp(done)?;
            a.set_label(&mut nonneg)?;
            a.cmp(rax, last as i32)?;
            a.jbe(done)?;
            a.mov(eax, last)?;
        }
        _ => {
            // 63 for 0; 64 + log2 v for v > 0; 62 - log2 |v|, at least 0, for v < 0.
            let mut neg = a.create_label();
            a.mov(rcx, reg(val))?;
            a.mov(eax, 63)?;
            a.test(rcx, rcx)?;
            a.je(done)?;
            a.js(neg)?;
            a.bsr(rcx, rcx)?;
            a.lea(eax, qword_ptr(rcx + 64))?;
            a.jmp(done)?;
            a.set_label(&mut neg)?;
            a.neg(rcx)?;
            a.bsr(rcx, rcx)?;
            a.mov(eax, 62)?;
            a.sub(eax, ecx)?;
            a.jns(done)?;
            a.xor(eax, eax)?;
        }
    }
    a.set_label(&mut done)?;
    a.nop()?;
    Ok(())
}

/// The saved flags' register: the status flags from `lahf` (SF ZF AF PF CF in ah) and
/// `seto al`, much cheaper to put back than `popfq`'s whole register.
pub fn save_status_flags(a: &mut CodeAssembler) -> Result<(), TrampolineError> {
    a.seto(al)?;
    a.lahf()?;
    Ok(())
}

/// Puts back what [`save_status_flags`] left in rax: `add al, 0x7f` overflows exactly
/// when al is 1 (OF), then `sahf` the rest.
/// `layout::key_hash`'s finisher on r8 (clobbers rax, rcx).
/// The open-addressed probe of a table at `table` for the hash in r8 (as
/// `interp::keyed_entry` and `interp::string_entry` probe): edi counts the entries tried, from `top` (set here); rsi = the entry
/// probed. A free entry is claimed (FILLING) and the code goes on below; one taken, or
/// lost to another thread's claim, goes to `taken` with its status in rax.
fn claim_entry(
    a: &mut CodeAssembler,
    table: u64,
    (entries, entry_size): (usize, usize),
    top: &mut CodeLabel,
    taken: CodeLabel,
) -> Result<(), TrampolineError> {
    a.xor(edi, edi)?;
    a.set_label(top)?;
    a.lea(rax, qword_ptr(r8 + rdi))?;
    a.and(rax, (entries - 1) as i32)?;
    a.imul_3(rax, rax, entry_size as i32)?;
    a.mov(rsi, table)?;
    a.add(rsi, rax)?;
    a.mov(rax, qword_ptr(rsi))?;
    a.cmp(rax, KEY_FREE as i32)?;
    a.jne(taken)?;
    a.mov(ecx, KEY_FILLING as u32)?;
    a.lock().cmpxchg(qword_ptr(rsi), rcx)?;
    a.jne(taken)?;
    Ok(())
}

fn hash_finish(a: &mut CodeAssembler) -> Result<(), TrampolineError> {
    for (shift, mul) in [(30, Some(HASH_FINISH[0])), (27, Some(HASH_FINISH[1])), (31, None)] {
        a.mov(rax, r8)?;
        a.shr(rax, shift)?;
        a.xor(r8, rax)?;
        if let Some(m) = mul {
            a.mov(rcx, m)?;
            a.imul_2(r8, rcx)?;
        }
    }
    Ok(())
}

pub fn restore_status_flags(a: &mut CodeAssembler) -> Result<(), TrampolineError> {
    a.add(al, 0x7f)?;
    a.sahf()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use udtrace_dif::layout::key_hash;

    #[test]
    fn the_hash_constants_are_the_layouts() {
        let mut h = HASH_SEED;
        for k in [5u64, 0, u64::MAX] {
            h = (h ^ k).wrapping_mul(HASH_MUL);
            h ^= h >> 29;
        }
        h ^= h >> 30;
        h = h.wrapping_mul(HASH_FINISH[0]);
        h ^= h >> 27;
        h = h.wrapping_mul(HASH_FINISH[1]);
        h ^= h >> 31;
        assert_eq!(h, key_hash(&[5, 0, u64::MAX]));
    }
}
