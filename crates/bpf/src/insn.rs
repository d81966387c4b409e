//! eBPF instruction encoding and a small assembler with labels.
//!
//! An instruction is 8 bytes: opcode, `dst | src << 4`, a signed 16-bit offset and a
//! signed 32-bit immediate. `ld_imm64` takes two slots; jump offsets count slots.

use thiserror::Error;

/// The eleven BPF registers. R0 holds results, R1–R5 helper arguments (clobbered by
/// calls), R6–R9 survive calls, R10 is the read-only frame pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    R0 = 0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0xf) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    pub fn decode(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0xf,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// Encodes a whole program as the kernel reads it.
pub fn encode(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.encode()).collect()
}

// Instruction classes.
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
// Source operand: immediate or register.
const K: u8 = 0x00;
const X: u8 = 0x08;
// Memory modes.
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;

/// Access sizes for loads and stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    B = 0x10,
    H = 0x08,
    W = 0x00,
    DW = 0x18,
}

impl Size {
    pub fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AluOp {
    Add = 0x00,
    Sub = 0x10,
    Mul = 0x20,
    Div = 0x30,
    Or = 0x40,
    And = 0x50,
    Lsh = 0x60,
    Rsh = 0x70,
    /// `dst = -dst` (the source is unused).
    Neg = 0x80,
    Mod = 0x90,
    Xor = 0xa0,
    Mov = 0xb0,
    Arsh = 0xc0,
}

/// Conditions of conditional jumps; the `S` ones compare signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    Eq = 0x10,
    Gt = 0x20,
    Ge = 0x30,
    Set = 0x40,
    Ne = 0x50,
    Sgt = 0x60,
    Sge = 0x70,
    Lt = 0xa0,
    Le = 0xb0,
    Slt = 0xc0,
    Sle = 0xd0,
}

const JA: u8 = 0x00;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

/// `src` of the first `ld_imm64` slot that makes the kernel read `imm` as a map fd.
pub const PSEUDO_MAP_FD: u8 = 1;

fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn { code, dst: dst as u8, src: src as u8, off, imm }
}

pub fn alu64_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | K | op as u8, dst, Reg::R0, 0, imm)
}
pub fn alu64_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
    insn(ALU64 | X | op as u8, dst, src, 0, 0)
}
pub fn alu32_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
    insn(ALU | K | op as u8, dst, Reg::R0, 0, imm)
}
pub fn alu32_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
    insn(ALU | X | op as u8, dst, src, 0, 0)
}
pub fn mov64_imm(dst: Reg, imm: i32) -> Insn {
    alu64_imm(AluOp::Mov, dst, imm)
}
pub fn mov64_reg(dst: Reg, src: Reg) -> Insn {
    alu64_reg(AluOp::Mov, dst, src)
}
pub fn mov32_imm(dst: Reg, imm: i32) -> Insn {
    alu32_imm(AluOp::Mov, dst, imm)
}
pub fn mov32_reg(dst: Reg, src: Reg) -> Insn {
    alu32_reg(AluOp::Mov, dst, src)
}
/// `dst = *(size *)(src + off)`
pub fn ldx(size: Size, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(LDX | MEM | size as u8, dst, src, off, 0)
}
/// `*(size *)(dst + off) = src`
pub fn stx(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | MEM | size as u8, dst, src, off, 0)
}
/// `*(size *)(dst + off) += src`, atomically (`lock xadd`; imm 0 is BPF_ADD without fetch).
pub fn atomic_add(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | ATOMIC | size as u8, dst, src, off, 0)
}
/// `src = atomic_fetch_add((size *)(dst + off), src)`: adds, and `src` gets the old value.
pub fn atomic_fetch_add(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | ATOMIC | size as u8, dst, src, off, BPF_FETCH)
}
/// `r0 = cmpxchg((size *)(dst + off), r0, src)`: stores `src` if the word is `r0`; `r0`
/// gets the word before either way.
pub fn atomic_cmpxchg(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | ATOMIC | size as u8, dst, src, off, BPF_CMPXCHG)
}
const BPF_FETCH: i32 = 0x01;
const BPF_CMPXCHG: i32 = 0xf0 | BPF_FETCH;
/// `*(size *)(dst + off) = imm`
pub fn st(size: Size, dst: Reg, off: i16, imm: i32) -> Insn {
    insn(ST | MEM | size as u8, dst, Reg::R0, off, imm)
}
/// The two slots of `dst = imm64`.
pub fn ld_imm64(dst: Reg, imm: u64) -> [Insn; 2] {
    [
        insn(LD | IMM | Size::DW as u8, dst, Reg::R0, 0, imm as u32 as i32),
        Insn { code: 0, dst: 0, src: 0, off: 0, imm: (imm >> 32) as u32 as i32 },
    ]
}
/// The two slots of `dst = &map`, the kernel replacing the fd by the map's address.
pub fn ld_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
    let mut s = ld_imm64(dst, fd as u32 as u64);
    s[0].src = PSEUDO_MAP_FD;
    s
}
pub fn jmp_imm(cond: Cond, dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP | K | cond as u8, dst, Reg::R0, off, imm)
}
pub fn jmp_reg(cond: Cond, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(JMP | X | cond as u8, dst, src, off, 0)
}
pub fn jmp32_imm(cond: Cond, dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP32 | K | cond as u8, dst, Reg::R0, off, imm)
}
pub fn jmp32_reg(cond: Cond, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(JMP32 | X | cond as u8, dst, src, off, 0)
}
pub fn ja(off: i16) -> Insn {
    insn(JMP | JA, Reg::R0, Reg::R0, off, 0)
}
pub fn call(helper: i32) -> Insn {
    insn(JMP | CALL, Reg::R0, Reg::R0, 0, helper)
}
pub fn exit() -> Insn {
    insn(JMP | EXIT, Reg::R0, Reg::R0, 0, 0)
}

/// Helper ids from the kernel's `__BPF_FUNC_MAPPER`.
pub mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const MAP_UPDATE_ELEM: i32 = 2;
    pub const MAP_DELETE_ELEM: i32 = 3;
    pub const TAIL_CALL: i32 = 12;
    pub const KTIME_GET_NS: i32 = 5;
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    pub const GET_CURRENT_UID_GID: i32 = 15;
    pub const GET_CURRENT_COMM: i32 = 16;
    pub const GET_CURRENT_TASK: i32 = 35;
    pub const SEND_SIGNAL_THREAD: i32 = 117;
    pub const PROBE_READ_USER: i32 = 112;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const PROBE_READ_USER_STR: i32 = 114;
    pub const PROBE_READ_KERNEL_STR: i32 = 115;
    pub const RINGBUF_OUTPUT: i32 = 130;
    pub const RINGBUF_RESERVE: i32 = 131;
    pub const RINGBUF_SUBMIT: i32 = 132;
    pub const RINGBUF_DISCARD: i32 = 133;
    pub const RINGBUF_QUERY: i32 = 134;
    pub const GET_ATTACH_COOKIE: i32 = 174;
    pub const COPY_FROM_USER: i32 = 148;
}

/// A jump target in an [`Asm`], bound to a position with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AsmError {
    #[error("label {0} is used by a jump but never bound")]
    Unbound(usize),
    #[error("label {0} is bound twice")]
    BoundTwice(usize),
    #[error("jump from slot {from} to slot {to} does not fit in 16 bits")]
    TooFar { from: usize, to: usize },
}

/// Collects instructions; jumps to labels are resolved at [`Asm::finish`], so forward
/// jumps can be written before their target exists.
#[derive(Debug, Default)]
pub struct Asm {
    slots: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
    twice: Option<usize>,
}

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    /// Slots emitted so far (`ld_imm64` counts two).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn push(&mut self, i: Insn) -> &mut Self {
        self.slots.push(i);
        self
    }

    pub fn push_wide(&mut self, i: [Insn; 2]) -> &mut Self {
        self.slots.extend(i);
        self
    }

    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// The next instruction emitted is the label's target.
    pub fn bind(&mut self, l: Label) -> &mut Self {
        if self.labels[l.0].is_some() {
            self.twice.get_or_insert(l.0);
        }
        self.labels[l.0] = Some(self.slots.len());
        self
    }

    pub fn jmp_imm(&mut self, cond: Cond, dst: Reg, imm: i32, to: Label) -> &mut Self {
        self.fixups.push((self.slots.len(), to));
        self.push(jmp_imm(cond, dst, imm, 0))
    }

    pub fn jmp_reg(&mut self, cond: Cond, dst: Reg, src: Reg, to: Label) -> &mut Self {
        self.fixups.push((self.slots.len(), to));
        self.push(jmp_reg(cond, dst, src, 0))
    }

    pub fn jmp32_imm(&mut self, cond: Cond, dst: Reg, imm: i32, to: Label) -> &mut Self {
        self.fixups.push((self.slots.len(), to));
        self.push(jmp32_imm(cond, dst, imm, 0))
    }

    pub fn ja(&mut self, to: Label) -> &mut Self {
        self.fixups.push((self.slots.len(), to));
        self.push(ja(0))
    }

    pub fn call(&mut self, helper: i32) -> &mut Self {
        self.push(call(helper))
    }

    pub fn exit(&mut self) -> &mut Self {
        self.push(exit())
    }

    /// `R0 = read(fp + slot, size, R3)` with `read` a probe-read helper: `size` bytes at
    /// the address in R3 to the stack at `fp + slot`; R0 is 0 or a negative error.
    /// Clobbers R1-R5.
    pub fn read_to_stack(&mut self, read: i32, slot: i16, size: i32) -> &mut Self {
        self.push(mov64_reg(Reg::R1, Reg::R10));
        self.push(alu64_imm(AluOp::Add, Reg::R1, i32::from(slot)));
        self.push(mov64_imm(Reg::R2, size));
        self.call(read)
    }

    /// `R0 = bpf_map_lookup_elem(map, fp + key)`: the value's address, or 0. Clobbers
    /// R1-R5.
    pub fn map_lookup(&mut self, map_fd: i32, key: i16) -> &mut Self {
        self.push_wide(ld_map_fd(Reg::R1, map_fd));
        self.push(mov64_reg(Reg::R2, Reg::R10));
        self.push(alu64_imm(AluOp::Add, Reg::R2, i32::from(key)));
        self.call(helper::MAP_LOOKUP_ELEM)
    }

    /// `bpf_map_update_elem(map, fp + key, fp + value, BPF_ANY)`. Clobbers R0-R5.
    pub fn map_update(&mut self, map_fd: i32, key: i16, value: i16) -> &mut Self {
        self.push_wide(ld_map_fd(Reg::R1, map_fd));
        self.push(mov64_reg(Reg::R2, Reg::R10));
        self.push(alu64_imm(AluOp::Add, Reg::R2, i32::from(key)));
        self.push(mov64_reg(Reg::R3, Reg::R10));
        self.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(value)));
        self.push(mov64_imm(Reg::R4, 0));
        self.call(helper::MAP_UPDATE_ELEM)
    }

    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if let Some(l) = self.twice {
            return Err(AsmError::BoundTwice(l));
        }
        for &(at, l) in &self.fixups {
            let to = self.labels[l.0].ok_or(AsmError::Unbound(l.0))?;
            // Offsets are relative to the slot after the jump.
            let delta = to as i64 - at as i64 - 1;
            self.slots[at].off = i16::try_from(delta).map_err(|_| AsmError::TooFar { from: at, to })?;
        }
        Ok(self.slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_kernel_abi() {
        assert_eq!(mov64_imm(Reg::R0, 0).encode(), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(exit().encode(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(mov64_reg(Reg::R6, Reg::R1).encode(), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ldx(Size::DW, Reg::R1, Reg::R6, 0x70).encode(), [0x79, 0x61, 0x70, 0, 0, 0, 0, 0]);
        assert_eq!(stx(Size::W, Reg::R10, -4, Reg::R1).encode(), [0x63, 0x1a, 0xfc, 0xff, 0, 0, 0, 0]);
        assert_eq!(st(Size::DW, Reg::R8, 8, 7).encode()[0], 0x7a);
        assert_eq!(call(helper::GET_CURRENT_PID_TGID).encode(), [0x85, 0, 0, 0, 14, 0, 0, 0]);
        assert_eq!(jmp_imm(Cond::Eq, Reg::R0, 0, 3).encode(), [0x15, 0, 3, 0, 0, 0, 0, 0]);
        assert_eq!(jmp32_reg(Cond::Ne, Reg::R1, Reg::R2, -1).encode(), [0x5e, 0x21, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(alu32_imm(AluOp::Add, Reg::R1, 1).encode()[0], 0x04);
        let m = ld_map_fd(Reg::R1, 5);
        assert_eq!(m[0].encode(), [0x18, 0x11, 0, 0, 5, 0, 0, 0]);
        assert_eq!(m[1].encode(), [0; 8]);
        let w = ld_imm64(Reg::R2, 0x1122_3344_5566_7788);
        assert_eq!((w[0].imm as u32, w[1].imm as u32), (0x5566_7788, 0x1122_3344));
        let i = jmp32_reg(Cond::Sle, Reg::R3, Reg::R9, -7);
        assert_eq!(Insn::decode(i.encode()), i);
    }

    #[test]
    fn labels_resolve_forward_and_backward() {
        let mut a = Asm::new();
        let end = a.label();
        let top = a.label();
        a.bind(top);
        a.jmp_imm(Cond::Eq, Reg::R1, 0, end); // slot 0
        a.push_wide(ld_imm64(Reg::R2, 1)); // slots 1, 2
        a.ja(top); // slot 3 -> 0
        a.bind(end);
        a.exit(); // slot 4
        let p = a.finish().unwrap();
        assert_eq!(p[0].off, 3);
        assert_eq!(p[3].off, -4);
    }

    #[test]
    fn unbound_label_is_an_error() {
        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        assert_eq!(a.finish(), Err(AsmError::Unbound(0)));
    }
}
