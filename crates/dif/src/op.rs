//! The operations, what each means, and the checks every program passes before any
//! executor sees it. Values are 64-bit; arithmetic wraps; every operation is defined for
//! every input (no trap, no undefined shift), so that the three executors agree.

use thiserror::Error;

use crate::layout::Layout;

/// Registers per program (r0..r15). A program reads none it has not written on every
/// way to the read ([`verify`]): executors start with any values, and the programs of
/// a site's probes run one after the other ([`Program::append`]).
pub const NREGS: usize = 16;

/// A register index, below [`NREGS`].
pub type Reg = u8;

/// Most operations in one program (jump targets are u16, and a site's program is
/// compiled into a trampoline of bounded size).
pub const MAX_OPS: usize = 4096;

/// What a firing knows about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Var {
    /// The process id (in udtrace's PID namespace).
    Pid,
    /// The thread id.
    Tid,
    /// The CPU the firing ran on.
    Cpu,
    /// CLOCK_MONOTONIC in ns (the clock of `bpf_ktime_get_ns`).
    Timestamp,
    /// The real user id of the process.
    Uid,
    /// The real group id of the process.
    Gid,
    /// rax at the site: at a return (the `ret` instruction), the return value, a pid
    /// return probe's `arg1`.
    Ret,
    /// The parent process's id (in udtrace's PID namespace), as it is at the firing: a
    /// forked child's is its parent, a reparented process's its new parent.
    Ppid,
    /// The firing thread's errno (C's `int`, sign-extended), where the process keeps it
    /// (its TLS offset, as records read it); 0 while that is not known.
    Errno,
    /// Bytes 0..8 of the process's name (`execname`, [`comm_words`]).
    Comm0,
    /// Bytes 8..16 of the process's name.
    Comm1,
}

impl Var {
    pub const ALL: [Var; 11] = [
        Var::Pid,
        Var::Tid,
        Var::Cpu,
        Var::Timestamp,
        Var::Uid,
        Var::Gid,
        Var::Ret,
        Var::Ppid,
        Var::Errno,
        Var::Comm0,
        Var::Comm1,
    ];
}

/// Bytes of a process's name at the firing: the kernel's `comm` (TASK_COMM_LEN, its
/// NUL included). `execname` is at most 15 characters.
pub const COMM_BYTES: usize = 16;

/// A process's name as the two words [`Var::Comm0`] and [`Var::Comm1`] give: its first
/// 15 bytes, NUL-padded, little-endian (so that a string compares and keys by words).
pub fn comm_words(name: &[u8]) -> [u64; 2] {
    let mut b = [0u8; COMM_BYTES];
    let n = name.iter().position(|&c| c == 0).unwrap_or(name.len()).min(COMM_BYTES - 1);
    b[..n].copy_from_slice(&name[..n]);
    [u64::from_le_bytes(b[..8].try_into().expect("8")), u64::from_le_bytes(b[8..].try_into().expect("8"))]
}

/// The name [`comm_words`] made (up to its first NUL).
pub fn comm_name(words: [u64; 2]) -> Vec<u8> {
    let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    b.truncate(b.iter().position(|&c| c == 0).unwrap_or(b.len()));
    b
}

/// Two-operand operations. Comparisons give 0 or 1. Shift counts are taken modulo 64
/// (what x86 and the BPF JIT do with a register count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    And,
    Or,
    Xor,
    Shl,
    /// Logical shift right.
    ShrU,
    /// Arithmetic shift right.
    ShrS,
    Eq,
    Ne,
    LtU,
    LeU,
    LtS,
    LeS,
}

impl BinOp {
    pub const ALL: [BinOp; 15] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::And,
        BinOp::Or,
        BinOp::Xor,
        BinOp::Shl,
        BinOp::ShrU,
        BinOp::ShrS,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::LtU,
        BinOp::LeU,
        BinOp::LtS,
        BinOp::LeS,
    ];

    pub fn apply(self, a: u64, b: u64) -> u64 {
        let s = (b & 63) as u32;
        match self {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::Mul => a.wrapping_mul(b),
            BinOp::And => a & b,
            BinOp::Or => a | b,
            BinOp::Xor => a ^ b,
            BinOp::Shl => a << s,
            BinOp::ShrU => a >> s,
            BinOp::ShrS => ((a as i64) >> s) as u64,
            BinOp::Eq => u64::from(a == b),
            BinOp::Ne => u64::from(a != b),
            BinOp::LtU => u64::from(a < b),
            BinOp::LeU => u64::from(a <= b),
            BinOp::LtS => u64::from((a as i64) < (b as i64)),
            BinOp::LeS => u64::from((a as i64) <= (b as i64)),
        }
    }
}

/// One-operand operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    BitNot,
    /// 1 when the operand is 0, else 0.
    Not,
}

impl UnOp {
    pub fn apply(self, a: u64) -> u64 {
        match self {
            UnOp::Neg => a.wrapping_neg(),
            UnOp::BitNot => !a,
            UnOp::Not => u64::from(a == 0),
        }
    }
}

/// One operation. `d` is the register written; jumps go forward only, to an index
/// after the jump (the program's length ends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// d = v
    Const { d: Reg, v: u64 },
    /// d = the probed function's argument `n` (0..=5: rdi, rsi, rdx, rcx, r8, r9 at the
    /// site)
    Arg { d: Reg, n: u8 },
    /// d = what the firing knows ([`Var`])
    Get { d: Reg, v: Var },
    /// d = a
    Mov { d: Reg, a: Reg },
    /// d = op(a, b)
    Bin { op: BinOp, d: Reg, a: Reg, b: Reg },
    /// d = a / imm or a % imm, signed (C's truncation) or unsigned. The divisor is a
    /// constant, never 0 and, signed, never -1 (the one quotient that overflows): no
    /// executor can trap on it.
    Div { d: Reg, a: Reg, imm: u64, signed: bool, rem: bool },
    /// d = op(a)
    Un { op: UnOp, d: Reg, a: Reg },
    /// d = a's low `bits` bits (8, 16 or 32), sign- or zero-extended.
    Ext { d: Reg, a: Reg, bits: u8, signed: bool },
    /// Goes on at op `to` when a is 0.
    Jz { a: Reg, to: u16 },
    /// Goes on at op `to`.
    Jmp { to: u16 },
    /// d = the firing thread's thread-local variable `slot` (0 until stored).
    TlsLoad { d: Reg, slot: u16 },
    /// The firing thread's thread-local variable `slot` = a.
    TlsStore { slot: u16, a: Reg },
    /// Aggregation `agg` of the layout, at the key in registers `keys..keys + nkeys`
    /// (its descriptor's count), takes value `val` with weight `incr` (the quantize
    /// family's optional third argument; the others ignore it).
    Agg { agg: u16, keys: Reg, val: Reg, incr: Reg },
    /// The firing writes its record for the consumer (once, after the program, however
    /// many `Emit`s ran): a clause the consumer evaluates whose predicate the program
    /// decided (docs/firing.md, "What runs where").
    Emit,
    /// d = the id of the string at user address a (`copyinstr(a)`: at most `max` bytes
    /// read, its NUL included, as [`user_string`] reads), kept in the string table
    /// ([`crate::layout`], "Strings"): a key word that reads back as the string. A
    /// table with no room for it, or a different string under the same id, gives 0 and
    /// counts an aggregation drop (the lowering skips the update a 0 key would make). A
    /// read that faults (`user_string` gives none) `Emit`s (the consumer evaluates the
    /// clause on the record and reports the fault as it does) and goes on at op `fault`,
    /// d unwritten.
    Str { d: Reg, a: Reg, max: u16, fault: u16 },
    /// d = register `r` of the thread at the site, in [`USER_REGS`] order (a USDT
    /// argument's operand names any of them: docs/usdt.md).
    UReg { d: Reg, r: u8 },
    /// d = the `size` bytes (1, 2, 4 or 8) at user address a, little-endian,
    /// zero-extended; 0 when any of them cannot be read (as the consumer reads a USDT
    /// argument in memory). Never faults.
    Load { d: Reg, a: Reg, size: u8 },
}

/// The registers [`Op::UReg`] reads, by number: x86-64's general registers as
/// `udtrace_object::usdt::Reg` orders them, then rip.
pub const USER_REGS: [&str; 17] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip",
];

/// [`Op::UReg`]'s number of rip.
pub const UREG_IP: u8 = 16;

/// What [`Op::Str`] reads: a process's memory as seen from the firing thread.
pub trait UserMem {
    /// Copies the bytes at `addr` into `buf` up to the first unreadable one; returns how
    /// many were copied (0: `addr` itself is unreadable).
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize;
}

/// No memory at all (every read faults): where no program reads a string.
pub struct NoUserMem;

impl UserMem for NoUserMem {
    fn read(&self, _addr: u64, _buf: &mut [u8]) -> usize {
        0
    }
}

/// The string at `addr` as `copyinstr` reads it (`max` ≥ 1 bytes, its NUL included:
/// what a record's capture reads, and what the consumer then takes): the bytes before
/// the first NUL; with no NUL in `max` readable bytes, the first `max - 1`; None (a
/// fault, "invalid address") when `addr` is 0, or no NUL comes before an unreadable
/// byte, or `max` is 0.
pub fn user_string(user: &dyn UserMem, addr: u64, max: usize) -> Option<Vec<u8>> {
    if addr == 0 || max == 0 {
        return None;
    }
    let mut b = vec![0u8; max];
    let n = user.read(addr, &mut b).min(max);
    match b[..n].iter().position(|&c| c == 0) {
        Some(nul) => {
            b.truncate(nul);
            Some(b)
        }
        None if n == max => {
            b.truncate(max - 1);
            Some(b)
        }
        None => None,
    }
}

impl Op {
    /// A division as its executors compute it (the checks rule out what would trap).
    pub fn divide(a: u64, imm: u64, signed: bool, rem: bool) -> u64 {
        if imm == 0 {
            return 0;
        }
        if signed {
            let (a, b) = (a as i64, imm as i64);
            (if rem { a.wrapping_rem(b) } else { a.wrapping_div(b) }) as u64
        } else if rem {
            a % imm
        } else {
            a / imm
        }
    }

    /// `a`'s low `bits` bits, extended.
    pub fn extend(a: u64, bits: u8, signed: bool) -> u64 {
        let shift = 64 - u32::from(bits.clamp(1, 64));
        if signed {
            (((a << shift) as i64) >> shift) as u64
        } else {
            (a << shift) >> shift
        }
    }
}

/// A program: the firing-time work of the clauses enabled on one probe site, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Program {
    pub ops: Vec<Op>,
}

impl Program {
    /// Whether it reads or writes the firing thread's entry ([`crate::layout`]): the
    /// executors find the entry once, before the first op, when it does.
    pub fn uses_thread_entry(&self, layout: &Layout) -> bool {
        self.ops.iter().any(|op| match *op {
            Op::TlsLoad { .. } | Op::TlsStore { .. } => true,
            Op::Agg { agg, .. } => layout.aggs.get(usize::from(agg)).is_some_and(|a| a.nkeys == 0),
            _ => false,
        })
    }

    /// Whether it may ask for the record ([`Op::Emit`], or a string read that faults).
    pub fn emits(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Emit | Op::Str { .. }))
    }

    /// Whether it reads strings ([`Op::Str`]).
    pub fn reads_strings(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Str { .. }))
    }

    /// Whether it reads `v` (an executor may read it once, at the start).
    pub fn reads(&self, v: Var) -> bool {
        self.ops.iter().any(|op| matches!(*op, Op::Get { v: w, .. } if w == v))
    }

    /// Appends `other`, its jumps moved with it: the programs of a site's probes run
    /// one after the other.
    pub fn append(&mut self, other: &Program) {
        let base = self.ops.len() as u16;
        self.ops.extend(other.ops.iter().map(|&op| match op {
            Op::Jz { a, to } => Op::Jz { a, to: to + base },
            Op::Jmp { to } => Op::Jmp { to: to + base },
            Op::Str { d, a, max, fault } => Op::Str { d, a, max, fault: fault + base },
            op => op,
        }));
    }

    /// Appends `other` to run only in process `pid` (a site shared by the probes of
    /// several processes), using register `scratch`.
    pub fn append_for_pid(&mut self, other: &Program, pid: u64, scratch: Reg) {
        let start = self.ops.len();
        let end = (start + 4 + other.ops.len()) as u16;
        self.ops.push(Op::Get { d: scratch, v: Var::Pid });
        self.ops.push(Op::Const { d: scratch + 1, v: pid });
        self.ops.push(Op::Bin { op: BinOp::Eq, d: scratch, a: scratch, b: scratch + 1 });
        self.ops.push(Op::Jz { a: scratch, to: end });
        self.append(other);
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("op {0}: register out of range")]
    Reg(usize),
    #[error("op {0}: a jump must go forward, at most to the program's end")]
    Jump(usize),
    #[error("op {0}: argument {1} is not one of 0..=5")]
    Arg(usize, u8),
    #[error("op {0}: extension to {1} bits (8, 16 or 32)")]
    Bits(usize, u8),
    #[error("op {0}: a divisor of 0, or -1 signed")]
    Divisor(usize),
    #[error("op {0}: thread-local slot {1} not in the layout")]
    Slot(usize, u16),
    #[error("op {0}: aggregation {1} not in the layout")]
    Agg(usize, u16),
    #[error("a program of {0} ops (at most {MAX_OPS})")]
    TooLong(usize),
    #[error("op {0}: reads register {1}, not written on every way there")]
    Unwritten(usize, Reg),
    #[error("op {0}: a string of {1} bytes (1..=the layout's strsize)")]
    StrSize(usize, u16),
    #[error("op {0}: register {1} is not one of 0..=16")]
    UReg(usize, u8),
    #[error("op {0}: a load of {1} bytes (1, 2, 4 or 8)")]
    LoadSize(usize, u8),
}

impl Op {
    /// Registers read and the register written.
    pub fn regs(&self) -> (Vec<Reg>, Option<Reg>) {
        match *self {
            Op::Const { d, .. }
            | Op::Arg { d, .. }
            | Op::Get { d, .. }
            | Op::TlsLoad { d, .. }
            | Op::UReg { d, .. } => (vec![], Some(d)),
            Op::Mov { d, a }
            | Op::Load { d, a, .. }
            | Op::Un { d, a, .. }
            | Op::Ext { d, a, .. }
            | Op::Div { d, a, .. }
            | Op::Str { d, a, .. } => (vec![a], Some(d)),
            Op::Bin { d, a, b, .. } => (vec![a, b], Some(d)),
            Op::Jz { a, .. } | Op::TlsStore { a, .. } => (vec![a], None),
            Op::Jmp { .. } | Op::Emit => (vec![], None),
            Op::Agg { val, incr, .. } => (vec![val, incr], None),
        }
    }
}

/// Checks that every register is written before it is read, on every way through
/// (jumps go forward, so one pass sees every way into an op first).
fn check_written(p: &Program, layout: &Layout) -> Result<(), VerifyError> {
    let n = p.ops.len();
    // Registers written on every way into op i; None: no way in yet.
    let mut into: Vec<Option<u16>> = vec![None; n + 1];
    into[0] = Some(0);
    for (i, op) in p.ops.iter().enumerate() {
        let Some(mut w) = into[i] else { continue };
        let (mut reads, d) = op.regs();
        if let Op::Agg { agg, keys, .. } = *op {
            let nk = layout.aggs.get(usize::from(agg)).map_or(0, |a| a.nkeys);
            reads.extend((0..nk).map(|k| keys + k));
        }
        if let Some(&r) = reads.iter().find(|&&r| w & (1 << r) == 0) {
            return Err(VerifyError::Unwritten(i, r));
        }
        // A faulting read goes on at `fault` without writing d.
        if let Op::Str { fault, .. } = *op {
            let slot = &mut into[usize::from(fault)];
            *slot = Some(slot.map_or(w, |s| s & w));
        }
        if let Some(d) = d {
            w |= 1 << d;
        }
        let meet = |slot: &mut Option<u16>| *slot = Some(slot.map_or(w, |s| s & w));
        match *op {
            Op::Jmp { to } => meet(&mut into[usize::from(to)]),
            Op::Jz { to, .. } => {
                meet(&mut into[usize::from(to)]);
                meet(&mut into[i + 1]);
            }
            _ => meet(&mut into[i + 1]),
        }
    }
    Ok(())
}

/// Checks `p` against `layout`: what every executor relies on.
pub fn verify(p: &Program, layout: &Layout) -> Result<(), VerifyError> {
    let n = p.ops.len();
    if n > MAX_OPS {
        return Err(VerifyError::TooLong(n));
    }
    for (i, op) in p.ops.iter().enumerate() {
        let reg = |r: Reg| if usize::from(r) < NREGS { Ok(()) } else { Err(VerifyError::Reg(i)) };
        let jump =
            |to: u16| if usize::from(to) > i && usize::from(to) <= n { Ok(()) } else { Err(VerifyError::Jump(i)) };
        match *op {
            Op::Const { d, .. } | Op::Get { d, .. } => reg(d)?,
            Op::Arg { d, n } => {
                reg(d)?;
                if n > 5 {
                    return Err(VerifyError::Arg(i, n));
                }
            }
            Op::Mov { d, a } | Op::Un { d, a, .. } => {
                reg(d)?;
                reg(a)?;
            }
            Op::UReg { d, r } => {
                reg(d)?;
                if usize::from(r) >= USER_REGS.len() {
                    return Err(VerifyError::UReg(i, r));
                }
            }
            Op::Load { d, a, size } => {
                reg(d)?;
                reg(a)?;
                if !matches!(size, 1 | 2 | 4 | 8) {
                    return Err(VerifyError::LoadSize(i, size));
                }
            }
            Op::Bin { d, a, b, .. } => {
                reg(d)?;
                reg(a)?;
                reg(b)?;
            }
            Op::Div { d, a, imm, signed, .. } => {
                reg(d)?;
                reg(a)?;
                if imm == 0 || (signed && imm as i64 == -1) {
                    return Err(VerifyError::Divisor(i));
                }
            }
            Op::Ext { d, a, bits, .. } => {
                reg(d)?;
                reg(a)?;
                if !matches!(bits, 8 | 16 | 32) {
                    return Err(VerifyError::Bits(i, bits));
                }
            }
            Op::Jz { a, to } => {
                reg(a)?;
                jump(to)?;
            }
            Op::Jmp { to } => jump(to)?,
            Op::Emit => {}
            Op::Str { d, a, max, fault } => {
                reg(d)?;
                reg(a)?;
                jump(fault)?;
                if max == 0 || max > layout.strsize {
                    return Err(VerifyError::StrSize(i, max));
                }
            }
            Op::TlsLoad { d, slot } => {
                reg(d)?;
                if slot >= layout.tls {
                    return Err(VerifyError::Slot(i, slot));
                }
            }
            Op::TlsStore { slot, a } => {
                reg(a)?;
                if slot >= layout.tls {
                    return Err(VerifyError::Slot(i, slot));
                }
            }
            Op::Agg { agg, keys, val, incr } => {
                let Some(desc) = layout.aggs.get(usize::from(agg)) else {
                    return Err(VerifyError::Agg(i, agg));
                };
                reg(val)?;
                reg(incr)?;
                if usize::from(keys) + usize::from(desc.nkeys) > NREGS {
                    return Err(VerifyError::Reg(i));
                }
            }
        }
    }
    check_written(p, layout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{AggDesc, AggFn};

    #[test]
    fn checks_refuse_what_an_executor_could_not_run() {
        let layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 2 }], strsize: 0 };
        let bad = [
            Op::Const { d: 16, v: 0 },
            Op::Jmp { to: 0 },
            Op::Jz { a: 0, to: 5 },
            Op::Arg { d: 0, n: 6 },
            Op::Ext { d: 0, a: 0, bits: 64, signed: false },
            Op::Div { d: 0, a: 0, imm: 0, signed: false, rem: false },
            Op::Div { d: 0, a: 0, imm: u64::MAX, signed: true, rem: true },
            Op::TlsLoad { d: 0, slot: 1 },
            Op::Agg { agg: 1, keys: 0, val: 0, incr: 0 },
            Op::Agg { agg: 0, keys: 15, val: 0, incr: 0 },
        ];
        for op in bad {
            assert!(verify(&Program { ops: vec![op] }, &layout).is_err(), "{op:?}");
        }
        let good = Program {
            ops: vec![
                Op::Arg { d: 1, n: 5 },
                Op::Const { d: 14, v: 0 },
                Op::Mov { d: 15, a: 1 },
                Op::Mov { d: 2, a: 1 },
                Op::Jz { a: 1, to: 6 },
                Op::Div { d: 2, a: 1, imm: u64::MAX, signed: false, rem: false },
                Op::Agg { agg: 0, keys: 14, val: 1, incr: 2 },
            ],
        };
        assert_eq!(verify(&good, &layout), Ok(()));
        let unwritten = Program {
            ops: vec![Op::Arg { d: 1, n: 0 }, Op::Jz { a: 1, to: 3 }, Op::Const { d: 2, v: 0 }, Op::Mov { d: 3, a: 2 }],
        };
        assert_eq!(verify(&unwritten, &layout), Err(VerifyError::Unwritten(3, 2)));
    }

    #[test]
    fn a_name_is_two_words_and_reads_back() {
        assert_eq!(comm_words(b"hot"), [u64::from_le_bytes(*b"hot\0\0\0\0\0"), 0]);
        assert_eq!(comm_name(comm_words(b"postgres")), b"postgres");
        // The kernel keeps 15 bytes and a NUL; a NUL ends a name.
        assert_eq!(comm_name(comm_words(b"abcdefghijklmnopq")), b"abcdefghijklmno");
        assert_eq!(comm_name(comm_words(b"ab\0cd")), b"ab");
        assert_eq!(comm_words(b""), [0, 0]);
    }

    #[test]
    fn arithmetic_is_defined_everywhere() {
        assert_eq!(BinOp::Shl.apply(1, 65), 2);
        assert_eq!(BinOp::ShrS.apply(u64::MAX, 70), u64::MAX);
        assert_eq!(Op::divide(i64::MIN as u64, 2, true, false), (i64::MIN / 2) as u64);
        assert_eq!(Op::divide(7u64.wrapping_neg(), 2, true, true), 1u64.wrapping_neg());
        assert_eq!(Op::extend(0x80, 8, true), u64::MAX << 7);
        assert_eq!(Op::extend(0x1_ffff_ffff, 32, false), 0xffff_ffff);
    }
}
