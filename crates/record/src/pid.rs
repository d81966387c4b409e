//! The layout of one pid firing's record, defined once: a backend writes it (the BPF
//! code generator today) and [`RecordLayout::parse`] reads it back. Pure, no I/O.
//!
//! ```text
//! offset  size  field
//!      0     8  cookie (the probe site's cookie)
//!      8     8  pid_tgid (tgid << 32 | tid)
//!     16     8  ktime_get_ns
//!     24     4  cpu
//!     28     4  flags (FLAG_STACK_TRUNCATED)
//!     32     4  stack_len: bytes of user stack captured (<= stack_bytes)
//!     36     4  errno of the firing thread, when plan.errno (else 0)
//!     40   168  the 21 pt_regs registers, x86-64 order (see PtReg), when plan.regs;
//!           8 n  else the n registers of plan.arg_regs, in that order (often none)
//!  R=208 or 40+8n  user stack from regs->sp, S = plan.stack_bytes (zeros past stack_len)
//!    R+S        per string capture: i32 probe_read_user_str result (length with NUL,
//!               or -errno), u32 reserved, then `max` bytes rounded up to 8
//!               per buffer capture: i32 bytes read (`size`, or fewer where the
//!               rest was unreadable) or -errno, u32 reserved, then `size` bytes
//!               rounded up to 8 (zeros past the bytes read)
//!               per stash slot (plan.stash.slots): u64, the address the slot held
//!               for this thread when the firing reads it (0: not read, or none)
//!               per stash string and buffer capture: a slot as above, read from
//!               that address (when not 0)
//!               per chain capture: u64 address (0: not read), then a slot as above
//!               the current task's snapshot (`proc::SNAP_SIZE`), when plan.task:
//!               its first word (the task's address) 0 when none was taken
//!    last    8  the current task's `struct task_struct` address, when plan.curthread
//! ```

use thiserror::Error;

pub const OFF_COOKIE: usize = 0;
pub const OFF_PID_TGID: usize = 8;
pub const OFF_KTIME: usize = 16;
pub const OFF_CPU: usize = 24;
pub const OFF_FLAGS: usize = 28;
pub const OFF_STACK_LEN: usize = 32;
pub const OFF_ERRNO: usize = 36;
pub const OFF_REGS: usize = 40;
pub const NUM_REGS: usize = 21;
pub const OFF_STACK: usize = OFF_REGS + NUM_REGS * 8;

/// Less user stack than asked for was readable (e.g. near the top of the stack mapping).
pub const FLAG_STACK_TRUNCATED: u32 = 1;

/// Upper bound of `stack_bytes`.
pub const MAX_STACK_BYTES: u32 = 16384;
/// Generated code addresses fields with 16-bit offsets from the record start.
pub const MAX_RECORD_SIZE: usize = i16::MAX as usize;

/// The registers of x86-64 `struct pt_regs`, in their order there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PtReg {
    R15 = 0,
    R14,
    R13,
    R12,
    Bp,
    Bx,
    R11,
    R10,
    R9,
    R8,
    Ax,
    Cx,
    Dx,
    Si,
    Di,
    OrigAx,
    Ip,
    Cs,
    Flags,
    Sp,
    Ss,
}

impl PtReg {
    /// Byte offset in `struct pt_regs` (and index * 8 in [`Firing::regs`]).
    pub fn offset(self) -> usize {
        self as usize * 8
    }

    /// The argument registers of the System V x86-64 ABI, arg0..arg5.
    pub const ARGS: [PtReg; 6] = [PtReg::Di, PtReg::Si, PtReg::Dx, PtReg::Cx, PtReg::R8, PtReg::R9];

    /// Every register, in `struct pt_regs` order (index = `self as usize`).
    pub const ALL: [PtReg; NUM_REGS] = {
        use PtReg::*;
        [R15, R14, R13, R12, Bp, Bx, R11, R10, R9, R8, Ax, Cx, Dx, Si, Di, OrigAx, Ip, Cs, Flags, Sp, Ss]
    };

    /// Its bit in a register mask ([`RecordPlan::arg_regs`]).
    pub const fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// A NUL-terminated user string read at the firing from the address in `reg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringCapture {
    pub reg: PtReg,
    /// Bytes reserved for it, NUL included.
    pub max: u32,
    /// The address is in whichever register a USDT argument is at the firing's site
    /// (`reg` unused): backends resolve it per site (`reg` set, this cleared); where
    /// it is left set (a site without that argument in a register) nothing is read,
    /// the slot's result 0: not captured, read when consumed. docs/usdt.md.
    pub per_site: bool,
}

/// `size` bytes of user memory read at the firing from the address in `reg`
/// (`copyin(argN, SIZE)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferCapture {
    pub reg: PtReg,
    pub size: u32,
}

/// Addresses kept per thread from one firing to a later one (`self->p = arg0` at an
/// entry, `copyinstr(self->p)` at the return): which argument registers a firing stores
/// in which slot, and what is read behind a slot's address. Which firings store and
/// which read is decided per probe site (the backends' "stash ops": bit `i` stores
/// `writes[i]`, bit `32 + slot` reads the slot and its captures).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StashCaptures {
    pub slots: u8,
    /// (slot, register).
    pub writes: Vec<(u8, PtReg)>,
    /// (slot, bytes reserved, NUL included).
    pub strings: Vec<(u8, u32)>,
    /// (slot, size).
    pub buffers: Vec<(u8, u32)>,
    /// Reads at addresses computed at the firing, run where the site's ops have bit
    /// [`op_chain`]`(k)`: after the stash's stores and reads.
    pub chains: Vec<Vec<ChainOp>>,
    /// What the chains capture, by `cap`.
    pub chain_caps: Vec<ChainCap>,
}

impl StashCaptures {
    pub fn is_empty(&self) -> bool {
        self.slots == 0 && self.chains.is_empty()
    }
}

/// The most stash slots a plan has (thread-local variables whose pointers are kept).
pub const MAX_STASH_SLOTS: usize = 8;
/// The most chains a plan has.
pub const MAX_CHAINS: usize = 24;

/// The ops bit of storing `writes[i]`.
pub const fn op_write(i: usize) -> u64 {
    1 << i
}

/// The ops bit of reading stash slot `slot` (below [`MAX_STASH_SLOTS`]).
pub const fn op_read(slot: usize) -> u64 {
    1 << (32 + slot)
}

/// The ops bit of running chain `k` (below [`MAX_CHAINS`]).
pub const fn op_chain(k: usize) -> u64 {
    1 << (32 + MAX_STASH_SLOTS + k)
}

/// The task word of a record's snapshot filled by the process itself (in-process
/// probes): its credentials, parent and argument strings only.
pub const OWN_TASK: u64 = 1;

/// What a process tells of itself at a firing (the in-process probes' snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnTask {
    pub uid: u32,
    pub gid: u32,
    pub euid: u32,
    pub egid: u32,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
}

/// One step of a chain: a stack program over u64 values (`udtrace_lang::capture::Chain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainOp {
    Const(u64),
    Arg(PtReg),
    /// The stash slot's address as the record holds it (0: none).
    Slot(u8),
    Bin(ChainBin),
    /// Pop A; capture buffer `cap` at A; push A. A fault ends the chain.
    Copyin {
        cap: u8,
    },
    /// Pop N, pop A; capture min(N, its size) bytes at A in buffer `cap`; push A. A
    /// fault ends the chain.
    CopyinUpto {
        cap: u8,
    },
    /// Push `size` (1, 2, 4, 8) bytes at `off` of buffer capture `cap`.
    Field {
        cap: u8,
        off: u32,
        size: u8,
        signed: bool,
    },
    Drop,
    /// Pop A; capture the string at A in `cap`.
    Str {
        cap: u8,
    },
}

impl ChainOp {
    /// The op with its capture number (if it has one) mapped by `f`.
    pub fn map_cap(self, f: impl Fn(u8) -> u8) -> ChainOp {
        match self {
            ChainOp::Copyin { cap } => ChainOp::Copyin { cap: f(cap) },
            ChainOp::CopyinUpto { cap } => ChainOp::CopyinUpto { cap: f(cap) },
            ChainOp::Field { cap, off, size, signed } => ChainOp::Field { cap: f(cap), off, size, signed },
            ChainOp::Str { cap } => ChainOp::Str { cap: f(cap) },
            op => op,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainBin {
    Add,
    Sub,
    Mul,
    And,
    Or,
    Shl,
    Shr,
}

impl ChainBin {
    pub fn apply(self, a: u64, b: u64) -> u64 {
        match self {
            ChainBin::Add => a.wrapping_add(b),
            ChainBin::Sub => a.wrapping_sub(b),
            ChainBin::Mul => a.wrapping_mul(b),
            ChainBin::And => a & b,
            ChainBin::Or => a | b,
            ChainBin::Shl => a.checked_shl(b as u32).unwrap_or(0),
            ChainBin::Shr => a.checked_shr(b as u32).unwrap_or(0),
        }
    }
}

/// A chain's capture: a string of at most `max` bytes (NUL included), or `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainCap {
    Str(u32),
    Buf(u32),
}

impl ChainCap {
    pub fn bytes(self) -> u32 {
        match self {
            ChainCap::Str(n) | ChainCap::Buf(n) => n,
        }
    }
}

/// The deepest operand stack a chain may need.
pub const MAX_CHAIN_DEPTH: usize = 8;

/// What a probe's program records besides the fixed header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPlan {
    /// User stack bytes copied from the stack pointer up: 0..=16384, a multiple of 8.
    pub stack_bytes: u32,
    pub strings: Vec<StringCapture>,
    pub buffers: Vec<BufferCapture>,
    /// Whether the registers are recorded (needed by stack, string and buffer captures
    /// too).
    pub regs: bool,
    /// Without `regs`, the registers recorded all the same (bit [`PtReg::bit`]): those
    /// the clauses read as arguments, so that `printf("%d", arg0)` records one.
    pub arg_regs: u32,
    /// Whether the thread's errno is read (where the process's errno is known).
    pub errno: bool,
    /// Whether the current task's address is recorded (`curthread`).
    pub curthread: bool,
    pub stash: StashCaptures,
    /// Whether the current task's data are recorded (`curpsinfo`, `curlwpsinfo`),
    /// as the proc provider's records have them.
    pub task: bool,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("stack capture of {0} bytes: must be a multiple of 8 and at most 16384")]
    StackBytes(u32),
    #[error("string capture of {0} bytes: must be between 1 and 4096")]
    StringMax(u32),
    #[error("buffer capture of {0} bytes: must be between 1 and 4096")]
    BufferSize(u32),
    #[error("a record of {0} bytes is too large (at most 32767)")]
    TooLarge(usize),
    #[error("a stash capture names a slot the plan does not have")]
    StashSlot,
    #[error("a chain of reads is malformed")]
    Chain,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record of {got} bytes, expected {want}")]
    Size { got: usize, want: usize },
    #[error("record claims {0} bytes of stack, more than its plan")]
    StackLen(u32),
}

/// The maximum length of a string capture; DTrace's strsize defaults to 256.
pub const MAX_STRING: u32 = 4096;
/// The maximum size of a buffer capture.
pub const MAX_BUFFER: u32 = 4096;

/// Offsets of a plan's record; build once per plan, use for codegen and parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLayout {
    /// All 21 registers are recorded, in `struct pt_regs` order.
    pub regs: bool,
    /// The registers recorded from [`OFF_REGS`] on, in [`PtReg`] order, 8 bytes each
    /// (every bit with `regs`).
    pub reg_mask: u32,
    /// Where the user stack starts: after the registers, or the header.
    pub off_stack: usize,
    pub stack_bytes: u32,
    pub errno: bool,
    /// (offset of the slot, max) per string capture; data at offset + 8.
    pub strings: Vec<(usize, u32)>,
    /// (offset of the slot, size) per buffer capture; data at offset + 8.
    pub buffers: Vec<(usize, u32)>,
    /// Where the stash slots' addresses are (u64 each).
    pub off_stash: usize,
    pub stash_slots: u8,
    /// (offset of the capture, max or size, stash slot) per stash string and buffer
    /// capture; data at offset + 8.
    pub stash_strings: Vec<(usize, u32, u8)>,
    pub stash_buffers: Vec<(usize, u32, u8)>,
    /// (offset of the address; the slot is 8 bytes on, its data 16) per chain capture.
    pub chain_caps: Vec<(usize, ChainCap)>,
    /// Where the current task's snapshot is, when recorded.
    pub off_snapshot: Option<usize>,
    /// Where the current task's address is, when recorded.
    pub off_task: Option<usize>,
    pub size: usize,
}

impl RecordLayout {
    pub fn new(plan: &RecordPlan) -> Result<RecordLayout, PlanError> {
        if !plan.stack_bytes.is_multiple_of(8) || plan.stack_bytes > MAX_STACK_BYTES {
            return Err(PlanError::StackBytes(plan.stack_bytes));
        }
        let regs = plan.regs
            || plan.stack_bytes > 0
            || !plan.strings.is_empty()
            || !plan.buffers.is_empty()
            || !plan.stash.is_empty()
            // A trampoline zeroes the record's tail only where it has registers: an
            // in-process record's snapshot is zero (none).
            || plan.task;
        let reg_mask = if regs { (1 << NUM_REGS) - 1 } else { plan.arg_regs & ((1 << NUM_REGS) - 1) };
        let off_stack = OFF_REGS + reg_mask.count_ones() as usize * 8;
        let mut off = off_stack + plan.stack_bytes as usize;
        let strings = slots(&mut off, plan.strings.iter().map(|s| s.max), MAX_STRING, PlanError::StringMax)?;
        let buffers = slots(&mut off, plan.buffers.iter().map(|b| b.size), MAX_BUFFER, PlanError::BufferSize)?;
        let off_stash = off;
        off += usize::from(plan.stash.slots) * 8;
        let with_slot = |v: Vec<(usize, u32)>, of: &[(u8, u32)]| -> Vec<(usize, u32, u8)> {
            v.into_iter().zip(of).map(|((at, n), &(slot, _))| (at, n, slot)).collect()
        };
        let ss = slots(&mut off, plan.stash.strings.iter().map(|s| s.1), MAX_STRING, PlanError::StringMax)?;
        let stash_strings = with_slot(ss, &plan.stash.strings);
        let sb = slots(&mut off, plan.stash.buffers.iter().map(|b| b.1), MAX_BUFFER, PlanError::BufferSize)?;
        let stash_buffers = with_slot(sb, &plan.stash.buffers);
        if plan.stash.strings.iter().chain(&plan.stash.buffers).any(|&(slot, _)| slot >= plan.stash.slots)
            || plan.stash.writes.iter().any(|&(slot, _)| slot >= plan.stash.slots)
        {
            return Err(PlanError::StashSlot);
        }
        let mut chain_caps = Vec::new();
        for &cap in &plan.stash.chain_caps {
            let (n, max) = match cap {
                ChainCap::Str(n) => (n, MAX_STRING),
                ChainCap::Buf(n) => (n, MAX_BUFFER),
            };
            if n == 0 || n > max {
                return Err(PlanError::Chain);
            }
            chain_caps.push((off, cap));
            off += 16 + (n as usize).div_ceil(8) * 8;
        }
        if plan.stash.chains.len() > MAX_CHAINS || plan.stash.chains.iter().any(|c| !chain_ok(c, &plan.stash)) {
            return Err(PlanError::Chain);
        }
        let off_snapshot = plan.task.then_some(off);
        if plan.task {
            off += crate::proc::SNAP_SIZE.div_ceil(8) * 8;
        }
        let off_task = plan.curthread.then_some(off);
        if plan.curthread {
            off += 8;
        }
        if off > MAX_RECORD_SIZE {
            return Err(PlanError::TooLarge(off));
        }
        Ok(RecordLayout {
            regs,
            reg_mask,
            off_stack,
            stack_bytes: plan.stack_bytes,
            errno: plan.errno,
            strings,
            buffers,
            off_stash,
            stash_slots: plan.stash.slots,
            stash_strings,
            stash_buffers,
            chain_caps,
            off_snapshot,
            off_task,
            size: off,
        })
    }

    /// (offset in the record, register) of each register recorded.
    pub fn recorded_regs(&self) -> impl Iterator<Item = (usize, PtReg)> + '_ {
        PtReg::ALL.iter().filter(|r| self.reg_mask & r.bit() != 0).enumerate().map(|(i, &r)| (OFF_REGS + 8 * i, r))
    }

    pub fn parse<'a>(&self, rec: &'a [u8]) -> Result<Firing<'a>, RecordError> {
        // The ring rounds nothing into the length; a record is exactly our size.
        if rec.len() != self.size {
            return Err(RecordError::Size { got: rec.len(), want: self.size });
        }
        let u64_at = |o: usize| u64::from_ne_bytes(rec[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_ne_bytes(rec[o..o + 4].try_into().expect("4 bytes"));
        let pid_tgid = u64_at(OFF_PID_TGID);
        let regs = Regs { bytes: &rec[OFF_REGS..self.off_stack], mask: self.reg_mask };
        let stack_len = u32_at(OFF_STACK_LEN);
        if stack_len > self.stack_bytes {
            return Err(RecordError::StackLen(stack_len));
        }
        // (Most layouts capture neither strings nor buffers: no iterator is built then.)
        let strings = captured(&self.strings, |&(off, max)| {
            let n = u32_at(off) as i32;
            // The helper's length counts the NUL; <= 0 means the read faulted.
            (n > 0).then(|| &rec[off + 8..off + 8 + (n as usize - 1).min(max as usize)])
        });
        let buffers = captured(&self.buffers, |&(off, size)| {
            let n = u32_at(off) as i32;
            // Bytes read (a trampoline's read may stop at an unreadable page), or -errno.
            (n >= 0).then(|| &rec[off + 8..off + 8 + (n as usize).min(size as usize)])
        });
        // A slot's capture counts only where the firing read an address into the slot.
        let mut stashed = Vec::new();
        for &(off, n, slot) in &self.stash_strings {
            let addr = u64_at(self.off_stash + usize::from(slot) * 8);
            if addr != 0 {
                let got = u32_at(off) as i32;
                let bytes = (got > 0).then(|| &rec[off + 8..off + 8 + (got as usize - 1).min(n as usize)]);
                stashed.push(Stashed { addr, string: true, bytes });
            }
        }
        for &(off, n, slot) in &self.stash_buffers {
            let addr = u64_at(self.off_stash + usize::from(slot) * 8);
            if addr != 0 {
                let got = u32_at(off) as i32;
                let bytes = (got >= 0).then(|| &rec[off + 8..off + 8 + (got as usize).min(n as usize)]);
                stashed.push(Stashed { addr, string: false, bytes });
            }
        }
        for &(off, cap) in &self.chain_caps {
            let addr = u64_at(off);
            if addr != 0 {
                let got = u32_at(off + 8) as i32;
                let data = off + 16;
                let bytes = match cap {
                    ChainCap::Str(n) => (got > 0).then(|| &rec[data..data + (got as usize - 1).min(n as usize)]),
                    ChainCap::Buf(n) => (got >= 0).then(|| &rec[data..data + (got as usize).min(n as usize)]),
                };
                stashed.push(Stashed { addr, string: matches!(cap, ChainCap::Str(_)), bytes });
            }
        }
        let task_word = self.off_snapshot.map(|o| u64_at(o + crate::proc::SNAP_TASK));
        let snapshot = self
            .off_snapshot
            .filter(|_| !matches!(task_word, Some(0 | OWN_TASK)))
            .map(|o| Box::new(crate::proc::snapshot(rec, o)));
        let own = self.off_snapshot.filter(|_| task_word == Some(OWN_TASK)).map(|o| {
            let s = crate::proc::snapshot(rec, o);
            OwnTask { uid: s.uid, gid: s.gid, euid: s.euid, egid: s.egid, ppid: s.ppid, pgid: s.pgid, sid: s.sid }
        });
        // Without the task (in-process), the argument strings alone.
        let psargs = match (self.off_snapshot, &snapshot) {
            (Some(o), None) => {
                let n = (u32_at(o + crate::proc::SNAP_ARGS) as usize).min(crate::proc::PSARGS_SIZE);
                (n > 0).then(|| rec[o + crate::proc::SNAP_PSARGS..][..n].to_vec())
            }
            (_, Some(s)) => s.psargs.clone(),
            _ => None,
        };
        Ok(Firing {
            own,
            psargs,
            snapshot,
            stashed,
            cookie: u64_at(OFF_COOKIE),
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            ktime: u64_at(OFF_KTIME),
            cpu: u32_at(OFF_CPU),
            regs,
            stack: &rec[self.off_stack..self.off_stack + stack_len as usize],
            stack_truncated: u32_at(OFF_FLAGS) & FLAG_STACK_TRUNCATED != 0,
            errno: u32_at(OFF_ERRNO) as i32,
            strings,
            buffers,
            curthread: self.off_task.map(u64_at),
        })
    }
}

/// Each capture's bytes, by `read`; no iterator at all for none.
fn captured<'a>(caps: &[(usize, u32)], read: impl FnMut(&(usize, u32)) -> Option<&'a [u8]>) -> Vec<Option<&'a [u8]>> {
    if caps.is_empty() {
        return Vec::new();
    }
    caps.iter().map(read).collect()
}

/// Whether a chain keeps its stack within bounds, names captures of the plan, and
/// reads fields within them.
fn chain_ok(ops: &[ChainOp], stash: &StashCaptures) -> bool {
    let mut depth: usize = 0;
    for op in ops {
        let cap = |c: u8| stash.chain_caps.get(usize::from(c)).copied();
        depth = match *op {
            ChainOp::Const(_) | ChainOp::Arg(_) => depth + 1,
            ChainOp::Slot(s) if s < stash.slots => depth + 1,
            ChainOp::Field { cap: c, off, size, .. } => match cap(c) {
                Some(ChainCap::Buf(n))
                    if [1, 2, 4, 8].contains(&size) && off.checked_add(u32::from(size)).is_some_and(|e| e <= n) =>
                {
                    depth + 1
                }
                _ => return false,
            },
            ChainOp::Bin(_) if depth >= 2 => depth - 1,
            ChainOp::Copyin { cap: c } if depth >= 1 && matches!(cap(c), Some(ChainCap::Buf(_))) => depth,
            ChainOp::CopyinUpto { cap: c } if depth >= 2 && matches!(cap(c), Some(ChainCap::Buf(_))) => depth - 1,
            ChainOp::Str { cap: c } if depth >= 1 && matches!(cap(c), Some(ChainCap::Str(_))) => depth - 1,
            ChainOp::Drop if depth >= 1 => depth - 1,
            _ => return false,
        };
        if depth > MAX_CHAIN_DEPTH {
            return false;
        }
    }
    depth == 0
}

/// The (offset, size) of each slot of a string or buffer capture of `sizes` bytes, from
/// `*off` on: an i32 result, a u32, then the bytes rounded up to 8.
fn slots(
    off: &mut usize,
    sizes: impl Iterator<Item = u32>,
    max: u32,
    bad: fn(u32) -> PlanError,
) -> Result<Vec<(usize, u32)>, PlanError> {
    sizes
        .map(|n| {
            if n == 0 || n > max {
                return Err(bad(n));
            }
            let at = *off;
            *off += 8 + (n as usize).div_ceil(8) * 8;
            Ok((at, n))
        })
        .collect()
}

/// One firing as the program recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing<'a> {
    pub cookie: u64,
    pub pid: u32,
    pub tid: u32,
    pub ktime: u64,
    pub cpu: u32,
    /// The registers recorded (0 for the others).
    pub regs: Regs<'a>,
    /// The user stack from `sp` up, as much as was readable (empty if none).
    pub stack: &'a [u8],
    /// Less than `stack_bytes` could be read.
    pub stack_truncated: bool,
    /// The thread's errno at the firing (0 when not recorded or not known).
    pub errno: i32,
    /// The current task's `struct task_struct` address, when recorded.
    pub curthread: Option<u64>,
    /// Per string capture, the bytes before the NUL; None if the address faulted.
    pub strings: Vec<Option<&'a [u8]>>,
    /// Per buffer capture, the bytes read; None if the address faulted.
    pub buffers: Vec<Option<&'a [u8]>>,
    /// The strings and buffers read behind addresses stashed at earlier firings.
    pub stashed: Vec<Stashed<'a>>,
    /// The current task's data at the firing, where the backend took them.
    /// Boxed: a firing is moved whole through the backend seam, and most have none.
    pub snapshot: Option<Box<crate::proc::TaskSnap>>,
    /// Its argument strings at the firing (raw, NUL-separated, at most DTrace's 80
    /// bytes), where the backend read them (the snapshot's, or alone).
    pub psargs: Option<Vec<u8>>,
    /// What the process told of itself at the firing, where the backend could not
    /// read the kernel's task.
    pub own: Option<OwnTask>,
}

/// Memory read at the firing behind an address stashed at an earlier one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stashed<'a> {
    pub addr: u64,
    /// A string (the bytes before the NUL), else a buffer (the bytes read).
    pub string: bool,
    /// None if the address faulted.
    pub bytes: Option<&'a [u8]>,
}

/// The registers a record holds, read where they are: a firing is lent by reference
/// from where it was parsed, and a copy of all 21 cost more than the clauses' reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs<'a> {
    /// 8 bytes per register of `mask`, in [`PtReg`] order.
    bytes: &'a [u8],
    mask: u32,
}

impl Regs<'_> {
    /// The register's value, 0 when the record does not hold it.
    #[inline]
    pub fn get(&self, r: PtReg) -> u64 {
        if self.mask & r.bit() == 0 {
            return 0;
        }
        // (The first register held, `arg0`'s where a clause reads only it, is at 0:
        // no count, which without POPCNT in the baseline is a dozen instructions.)
        let below = self.mask & (r.bit() - 1);
        let at = if below == 0 { 0 } else { below.count_ones() as usize * 8 };
        self.bytes.get(at..at + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    }

    /// All 21, in `struct pt_regs` order.
    pub fn all(&self) -> [u64; NUM_REGS] {
        PtReg::ALL.map(|r| self.get(r))
    }
}

impl Firing<'_> {
    #[inline]
    pub fn reg(&self, r: PtReg) -> u64 {
        self.regs.get(r)
    }

    /// arg0..arg5 from their registers.
    #[inline]
    pub fn arg(&self, n: usize) -> Option<u64> {
        PtReg::ARGS.get(n).map(|&r| self.reg(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_offsets() {
        let plan = RecordPlan {
            stack_bytes: 64,
            strings: vec![
                StringCapture { reg: PtReg::Di, max: 5, per_site: false },
                StringCapture { reg: PtReg::Si, max: 16, per_site: false },
            ],
            buffers: vec![BufferCapture { reg: PtReg::Di, size: 4 }, BufferCapture { reg: PtReg::Dx, size: 16 }],
            regs: true,
            arg_regs: 0,
            errno: false,
            curthread: false,
            task: false,
            stash: StashCaptures::default(),
        };
        let l = RecordLayout::new(&plan).unwrap();
        assert_eq!(OFF_STACK, 208);
        assert_eq!(l.strings, vec![(272, 5), (288, 16)]);
        assert_eq!(l.buffers, vec![(312, 4), (328, 16)]);
        assert_eq!(l.size, 352);
        // Buffers alone record the registers they are matched to.
        let alone = RecordPlan { buffers: vec![BufferCapture { reg: PtReg::Si, size: 1 }], ..RecordPlan::default() };
        let l = RecordLayout::new(&alone).unwrap();
        assert!(l.regs);
        assert_eq!((l.buffers[0], l.size), ((OFF_STACK, 1), OFF_STACK + 16));
        assert_eq!(PtReg::Di.offset(), 112);
        assert_eq!(PtReg::Sp.offset(), 152);
        assert_eq!(PtReg::Ip.offset(), 128);
    }

    #[test]
    fn bad_plans() {
        assert_eq!(
            RecordLayout::new(&RecordPlan {
                stack_bytes: 12,
                strings: vec![],
                buffers: vec![],
                regs: true,
                arg_regs: 0,
                errno: false,
                curthread: false,
                task: false,
                stash: StashCaptures::default(),
            }),
            Err(PlanError::StackBytes(12))
        );
        assert_eq!(
            RecordLayout::new(&RecordPlan {
                stack_bytes: 0,
                strings: vec![StringCapture { reg: PtReg::Di, max: 0, per_site: false }],
                buffers: vec![],
                regs: true,
                arg_regs: 0,
                errno: false,
                curthread: false,
                task: false,
                stash: StashCaptures::default(),
            }),
            Err(PlanError::StringMax(0))
        );
        for size in [0, MAX_BUFFER + 1] {
            let plan = RecordPlan { buffers: vec![BufferCapture { reg: PtReg::Di, size }], ..RecordPlan::default() };
            assert_eq!(RecordLayout::new(&plan), Err(PlanError::BufferSize(size)));
        }
        let many = vec![StringCapture { reg: PtReg::Di, max: 4096, per_site: false }; 5];
        assert!(matches!(
            RecordLayout::new(&RecordPlan {
                stack_bytes: 16384,
                strings: many,
                buffers: vec![],
                regs: true,
                arg_regs: 0,
                errno: false,
                curthread: false,
                task: false,
                stash: StashCaptures::default(),
            }),
            Err(PlanError::TooLarge(_))
        ));
    }

    #[test]
    fn stashed_captures_count_where_their_slot_was_read() {
        let plan = RecordPlan {
            stash: StashCaptures {
                slots: 2,
                writes: vec![(0, PtReg::Di)],
                strings: vec![(0, 8), (1, 8)],
                buffers: vec![(1, 4)],
                ..StashCaptures::default()
            },
            ..RecordPlan::default()
        };
        let l = RecordLayout::new(&plan).unwrap();
        assert!(l.regs);
        assert_eq!(l.off_stash, OFF_STACK);
        assert_eq!(l.stash_strings, vec![(OFF_STACK + 16, 8, 0), (OFF_STACK + 32, 8, 1)]);
        assert_eq!((l.stash_buffers.clone(), l.size), (vec![(OFF_STACK + 48, 4, 1)], OFF_STACK + 64));
        let mut r = vec![0u8; l.size];
        // Slot 0 read (0x1000): its string "ab"; slot 1 not read: nothing of it counts.
        r[l.off_stash..][..8].copy_from_slice(&0x1000u64.to_ne_bytes());
        r[OFF_STACK + 16..][..4].copy_from_slice(&3i32.to_ne_bytes());
        r[OFF_STACK + 24..][..2].copy_from_slice(b"ab");
        r[OFF_STACK + 32..][..4].copy_from_slice(&3i32.to_ne_bytes());
        let f = l.parse(&r).unwrap();
        assert_eq!(f.stashed, vec![Stashed { addr: 0x1000, string: true, bytes: Some(&b"ab"[..]) }]);
        // Slot 1 read at 0x2000: its string faulted, its buffer read.
        r[l.off_stash + 8..][..8].copy_from_slice(&0x2000u64.to_ne_bytes());
        r[OFF_STACK + 32..][..4].copy_from_slice(&(-14i32).to_ne_bytes());
        r[OFF_STACK + 48..][..4].copy_from_slice(&4i32.to_ne_bytes());
        r[OFF_STACK + 56..][..4].copy_from_slice(b"wxyz");
        let f = l.parse(&r).unwrap();
        assert_eq!(f.stashed[1], Stashed { addr: 0x2000, string: true, bytes: None });
        assert_eq!(f.stashed[2], Stashed { addr: 0x2000, string: false, bytes: Some(&b"wxyz"[..]) });
        // Captures of slots the plan lacks are refused.
        let bad = RecordPlan {
            stash: StashCaptures { slots: 1, strings: vec![(1, 8)], ..StashCaptures::default() },
            ..RecordPlan::default()
        };
        assert_eq!(RecordLayout::new(&bad), Err(PlanError::StashSlot));
    }

    #[test]
    fn chains_capture_where_they_read() {
        use ChainOp::*;
        let stash = StashCaptures {
            chains: vec![vec![
                Arg(PtReg::Si),
                Copyin { cap: 0 },
                Drop,
                Field { cap: 0, off: 8, size: 8, signed: false },
                Str { cap: 1 },
            ]],
            chain_caps: vec![ChainCap::Buf(16), ChainCap::Str(8)],
            ..StashCaptures::default()
        };
        let l = RecordLayout::new(&RecordPlan { stash, ..RecordPlan::default() }).unwrap();
        assert_eq!(l.chain_caps, vec![(OFF_STACK, ChainCap::Buf(16)), (OFF_STACK + 32, ChainCap::Str(8))]);
        assert_eq!(l.size, OFF_STACK + 56);
        let mut r = vec![0u8; l.size];
        assert!(l.parse(&r).unwrap().stashed.is_empty(), "no address: nothing was read");
        r[OFF_STACK..][..8].copy_from_slice(&0x1000u64.to_ne_bytes());
        r[OFF_STACK + 8..][..4].copy_from_slice(&16i32.to_ne_bytes());
        r[OFF_STACK + 32..][..8].copy_from_slice(&0x2000u64.to_ne_bytes());
        r[OFF_STACK + 40..][..4].copy_from_slice(&(-14i32).to_ne_bytes());
        let f = l.parse(&r).unwrap();
        assert_eq!(f.stashed[0], Stashed { addr: 0x1000, string: false, bytes: Some(&[0u8; 16][..]) });
        assert_eq!(f.stashed[1], Stashed { addr: 0x2000, string: true, bytes: None });
        // Malformed chains are refused: an operand missing, a field past its capture,
        // a string into a buffer capture.
        for chain in [
            vec![Bin(ChainBin::Add)],
            vec![Arg(PtReg::Di), Copyin { cap: 0 }, Drop, Field { cap: 0, off: 12, size: 8, signed: false }, Drop],
            vec![Arg(PtReg::Di), Str { cap: 0 }],
            vec![Arg(PtReg::Di)],
        ] {
            let stash = StashCaptures {
                chains: vec![chain.clone()],
                chain_caps: vec![ChainCap::Buf(16)],
                ..StashCaptures::default()
            };
            assert_eq!(
                RecordLayout::new(&RecordPlan { stash, ..RecordPlan::default() }),
                Err(PlanError::Chain),
                "{chain:?}"
            );
        }
    }

    #[test]
    fn parse_round_trip() {
        let plan = RecordPlan {
            stack_bytes: 16,
            strings: vec![
                StringCapture { reg: PtReg::Di, max: 8, per_site: false },
                StringCapture { reg: PtReg::Si, max: 8, per_site: false },
            ],
            buffers: vec![
                BufferCapture { reg: PtReg::Di, size: 4 },
                BufferCapture { reg: PtReg::Si, size: 12 },
                BufferCapture { reg: PtReg::Dx, size: 8 },
            ],
            regs: true,
            arg_regs: 0,
            errno: true,
            curthread: true,
            task: false,
            stash: StashCaptures::default(),
        };
        let l = RecordLayout::new(&plan).unwrap();
        let mut r = vec![0u8; l.size];
        r[0..8].copy_from_slice(&7u64.to_ne_bytes());
        r[8..16].copy_from_slice(&((42u64 << 32) | 43).to_ne_bytes());
        r[24..28].copy_from_slice(&1u32.to_ne_bytes());
        r[28..32].copy_from_slice(&FLAG_STACK_TRUNCATED.to_ne_bytes());
        r[32..36].copy_from_slice(&8u32.to_ne_bytes());
        r[OFF_ERRNO..OFF_ERRNO + 4].copy_from_slice(&21i32.to_ne_bytes());
        r[OFF_REGS + PtReg::Di.offset()..][..8].copy_from_slice(&99u64.to_ne_bytes());
        let (s0, s1) = (l.strings[0].0, l.strings[1].0);
        r[s0..s0 + 4].copy_from_slice(&3i32.to_ne_bytes());
        r[s0 + 8..s0 + 11].copy_from_slice(b"hi\0");
        r[s1..s1 + 4].copy_from_slice(&(-14i32).to_ne_bytes());
        let (b0, b1, b2) = (l.buffers[0].0, l.buffers[1].0, l.buffers[2].0);
        r[b0..b0 + 4].copy_from_slice(&4i32.to_ne_bytes());
        r[b0 + 8..b0 + 12].copy_from_slice(&[1, 2, 3, 4]);
        // Read up to an unreadable page: the bytes read only.
        r[b1..b1 + 4].copy_from_slice(&5i32.to_ne_bytes());
        r[b1 + 8..b1 + 13].copy_from_slice(b"abcde");
        r[b2..b2 + 4].copy_from_slice(&(-14i32).to_ne_bytes());
        let task = l.off_task.unwrap();
        assert_eq!(task + 8, l.size);
        r[task..task + 8].copy_from_slice(&0xffff_8880_0000_1000u64.to_ne_bytes());
        let f = l.parse(&r).unwrap();
        assert_eq!(f.curthread, Some(0xffff_8880_0000_1000));
        assert_eq!((f.cookie, f.pid, f.tid, f.cpu, f.errno), (7, 42, 43, 1, 21));
        assert_eq!(f.arg(0), Some(99));
        assert_eq!(f.stack.len(), 8);
        assert!(f.stack_truncated);
        assert_eq!(f.strings, vec![Some(&b"hi"[..]), None]);
        assert_eq!(f.buffers, vec![Some(&[1u8, 2, 3, 4][..]), Some(&b"abcde"[..]), None]);
        assert!(matches!(l.parse(&r[1..]), Err(RecordError::Size { .. })));
    }

    #[test]
    fn argument_registers_alone() {
        // arg0 and a return's arg1: rdi and rax, in pt_regs order (rax first).
        let plan = RecordPlan { arg_regs: PtReg::Di.bit() | PtReg::Ax.bit(), ..RecordPlan::default() };
        let l = RecordLayout::new(&plan).unwrap();
        assert_eq!((l.regs, l.size), (false, OFF_REGS + 16));
        assert_eq!(l.recorded_regs().collect::<Vec<_>>(), vec![(OFF_REGS, PtReg::Ax), (OFF_REGS + 8, PtReg::Di)]);
        let mut r = vec![0u8; l.size];
        r[OFF_REGS..][..8].copy_from_slice(&7u64.to_ne_bytes());
        r[OFF_REGS + 8..][..8].copy_from_slice(&99u64.to_ne_bytes());
        let f = l.parse(&r).unwrap();
        assert_eq!((f.reg(PtReg::Ax), f.arg(0), f.arg(1), f.reg(PtReg::Ip)), (7, Some(99), Some(0), 0));
        // All the registers whatever arg_regs says, where a capture needs them.
        let l = RecordLayout::new(&RecordPlan { regs: true, ..plan }).unwrap();
        assert_eq!((l.reg_mask, l.off_stack), ((1 << NUM_REGS) - 1, OFF_STACK));
    }

    #[test]
    fn records_without_registers_are_header_only() {
        let l = RecordLayout::new(&RecordPlan::default()).unwrap();
        assert_eq!((l.regs, l.size), (false, OFF_REGS));
        let mut r = vec![0u8; l.size];
        r[8..16].copy_from_slice(&((5u64 << 32) | 6).to_ne_bytes());
        let f = l.parse(&r).unwrap();
        assert_eq!((f.pid, f.tid, f.arg(0)), (5, 6, Some(0)));
    }
}
