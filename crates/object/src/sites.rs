//! Probe sites inside one x86-64 function: every instruction (offset probes), and the
//! return sites (design.md, "Return probes").
//!
//! Code bytes always come from the object FILE, never from process memory, so a uprobe's
//! `int3` already written into a process cannot be mistaken for an instruction.

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sites {
    /// Offset of every instruction, ascending; the first is 0 (the entry site).
    pub insns: Vec<u32>,
    /// Offsets of the return sites: `ret`, `ret imm16`, and direct jmp/jcc leaving the
    /// function (tail calls). When the function has an indirect jump, only the `ret`s.
    pub returns: Vec<u32>,
    /// The function contains an indirect `jmp` (a jump table or a computed tail call).
    pub indirect_jump: bool,
    /// Decoding stopped here: the bytes are no instruction (data in text, or a function
    /// size that runs past its code). Instructions before it are still listed.
    pub undecodable_at: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    #[error("offset {off:#x} is past the end of the function (size {size:#x})")]
    PastEnd { off: u64, size: u64 },
    #[error("offset {off:#x} is not on an instruction boundary")]
    InsideInstruction { off: u64 },
    #[error("offset {off:#x} lies beyond {at:#x}, where the code cannot be decoded")]
    Undecodable { off: u64, at: u32 },
}

/// Decode the function whose code (exactly its `size` bytes) is `code`, placed at
/// `func_vaddr`.
pub fn decode(code: &[u8], func_vaddr: u64) -> Sites {
    decode_with_parts(code, func_vaddr, &[])
}

/// As [`decode`], for a function some of whose code lies elsewhere: gcc moves unlikely
/// paths of `f` into a separate `f.cold` symbol. Jumps into `other_parts` (vaddr ranges
/// `[start, end)`) stay inside the function, so they are not tail calls.
pub fn decode_with_parts(code: &[u8], func_vaddr: u64, other_parts: &[(u64, u64)]) -> Sites {
    let mut s = Sites::default();
    let end = func_vaddr.wrapping_add(code.len() as u64);
    let inside = |t: u64| (t >= func_vaddr && t < end) || other_parts.iter().any(|&(a, b)| t >= a && t < b);
    let mut tail_calls = Vec::new();
    s.undecodable_at = for_each_insn(code, func_vaddr, |off, insn| {
        s.insns.push(off);
        if insn.mnemonic() == Mnemonic::Ret {
            s.returns.push(off);
        } else if is_direct_branch(insn) {
            if !inside(insn.near_branch_target()) {
                tail_calls.push(off);
            }
        } else if insn.mnemonic() == Mnemonic::Jmp {
            // A jmp without an immediate target: through a register or memory.
            s.indirect_jump = true;
        }
    });
    // DTrace's rule: with an indirect jump in the function, a jump out is not certainly a
    // tail call, so only `ret`s get return probes.
    if !s.indirect_jump {
        s.returns.extend(tail_calls);
        s.returns.sort_unstable();
    }
    s
}

/// Decode `code`, placed at `vaddr`, calling `f` with each instruction and its offset.
/// Returns the offset where decoding stopped on bytes that are no instruction, if any.
/// Shared by the site finder and the patch planner (`patch`), so both see the same
/// instructions.
pub(crate) fn for_each_insn(code: &[u8], vaddr: u64, mut f: impl FnMut(u32, &Instruction)) -> Option<u32> {
    // Offsets are u32: no function is 4 GiB long; refuse to decode past that.
    let code = &code[..code.len().min(u32::MAX as usize)];
    let mut decoder = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        let off = decoder.position() as u32;
        decoder.decode_out(&mut insn);
        // An instruction cut by the function's end decodes as INVALID too.
        if insn.code() == Code::INVALID {
            return Some(off);
        }
        f(off, &insn);
    }
    None
}

/// jmp, jcc, jrcxz and loop with an immediate target: every instruction whose first
/// operand is a near branch target except `call` and `xbegin` (its abort path). Done on
/// operand kinds because iced's flow-control queries need its large `instr_info` tables.
pub(crate) fn is_direct_branch(insn: &Instruction) -> bool {
    matches!(insn.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
        && !matches!(insn.mnemonic(), Mnemonic::Call | Mnemonic::Xbegin)
}

/// Whether `target` starts an instruction of `code` (placed at `vaddr`), decoded from
/// its start one instruction after another, as objdump decodes: for an address given
/// without its function. Decodes only up to `target`.
pub fn starts_instruction(code: &[u8], vaddr: u64, target: u64) -> Result<(), OffsetError> {
    let code = &code[..code.len().min(u32::MAX as usize)];
    let off = target.wrapping_sub(vaddr);
    let mut decoder = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    loop {
        let at = decoder.position() as u64;
        if at == off {
            return Ok(());
        }
        if at > off {
            return Err(OffsetError::InsideInstruction { off });
        }
        if !decoder.can_decode() {
            return Err(OffsetError::Undecodable { off, at: at as u32 });
        }
        decoder.decode_out(&mut insn);
        if insn.code() == Code::INVALID {
            return Err(OffsetError::Undecodable { off, at: at as u32 });
        }
    }
}

/// Check an offset probe's offset against a decoded function of `size` bytes.
pub fn check_offset(s: &Sites, size: u64, off: u64) -> Result<(), OffsetError> {
    if off >= size {
        return Err(OffsetError::PastEnd { off, size });
    }
    if let Some(at) = s.undecodable_at {
        if off >= u64::from(at) {
            return Err(OffsetError::Undecodable { off, at });
        }
    }
    match u32::try_from(off) {
        Ok(o) if s.insns.binary_search(&o).is_ok() => Ok(()),
        _ => Err(OffsetError::InsideInstruction { off }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_without_a_function() {
        // endbr64; lea eax,[rdi+rsi]; ret; nop
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x8d, 0x04, 0x37, 0xc3, 0x90];
        for at in [0x1000, 0x1004, 0x1007, 0x1008] {
            assert_eq!(starts_instruction(&code, 0x1000, at), Ok(()), "{at:#x}");
        }
        assert_eq!(starts_instruction(&code, 0x1000, 0x1005), Err(OffsetError::InsideInstruction { off: 5 }));
        assert_eq!(starts_instruction(&code, 0x1000, 0x1010), Err(OffsetError::Undecodable { off: 0x10, at: 9 }));
        assert_eq!(
            starts_instruction(&[0x0f, 0xff, 0x90], 0x1000, 0x1002),
            Err(OffsetError::Undecodable { off: 2, at: 0 })
        );
    }

    #[test]
    fn leaf_with_one_ret() {
        // endbr64; lea eax,[rdi+rsi]; ret
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x8d, 0x04, 0x37, 0xc3];
        let s = decode(&code, 0x1000);
        assert_eq!(s.insns, vec![0, 4, 7]);
        assert_eq!(s.returns, vec![7]);
        assert!(!s.indirect_jump);
        assert_eq!(s.undecodable_at, None);
        assert_eq!(check_offset(&s, 8, 4), Ok(()));
        assert_eq!(check_offset(&s, 8, 5), Err(OffsetError::InsideInstruction { off: 5 }));
        assert_eq!(check_offset(&s, 8, 8), Err(OffsetError::PastEnd { off: 8, size: 8 }));
    }

    #[test]
    fn ret_imm_tail_jmp_and_inner_jcc() {
        // 0: test edi,edi; 2: je +3 (-> 7, inside); 4: ret 8; 7: jmp rel32 out; c: ret
        let code = [0x85, 0xff, 0x74, 0x03, 0xc2, 0x08, 0x00, 0xe9, 0x00, 0x10, 0x00, 0x00, 0xc3];
        let s = decode(&code, 0x4000);
        assert_eq!(s.insns, vec![0, 2, 4, 7, 12]);
        assert_eq!(s.returns, vec![4, 7, 12]);
        // A jcc out of the function is a (conditional) tail call too.
        let code = [0x85, 0xff, 0x0f, 0x84, 0x00, 0x01, 0x00, 0x00, 0xc3];
        assert_eq!(decode(&code, 0x4000).returns, vec![2, 8]);
        // ... unless it goes to the function's own cold part.
        let s = decode_with_parts(&code, 0x4000, &[(0x4100, 0x4120)]);
        assert_eq!(s.returns, vec![8]);
    }

    #[test]
    fn indirect_jump_keeps_only_rets() {
        // 0: jmp *rax; 2: jmp rel8 out; 4: ret
        let code = [0xff, 0xe0, 0xeb, 0x10, 0xc3];
        let s = decode(&code, 0x1000);
        assert!(s.indirect_jump);
        assert_eq!(s.returns, vec![4]);
    }

    #[test]
    fn undecodable_and_cut_instructions() {
        // nop; then a mov imm32 cut short by the function's end.
        let code = [0x90, 0xb8, 0x01, 0x02];
        let s = decode(&code, 0);
        assert_eq!(s.insns, vec![0]);
        assert_eq!(s.undecodable_at, Some(1));
        assert_eq!(check_offset(&s, 4, 0), Ok(()));
        assert_eq!(check_offset(&s, 4, 2), Err(OffsetError::Undecodable { off: 2, at: 1 }));
        // 0x06 (push es) is invalid in 64-bit mode.
        assert_eq!(decode(&[0x06], 0).undecodable_at, Some(0));
        assert_eq!(decode(&[], 0), Sites::default());
    }
}

/// One-byte opcodes x86-64 uprobes refuse (the kernel's `good_insns_64`): invalid in
/// 64-bit mode, privileged or trapping ones (`int3`, `int N`, `hlt`, `cli`, `in`/`out`).
const REFUSED_OPCODES: &[u8] = &[
    0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62, 0x6c, 0x6d, 0x6e, 0x6f, 0x82,
    0x9a, 0xcc, 0xcd, 0xce, 0xcf, 0xd4, 0xd5, 0xd6, 0xe4, 0xe5, 0xe6, 0xe7, 0xea, 0xec, 0xed, 0xee, 0xef, 0xf1, 0xf4,
    0xfa, 0xfb,
];

/// Second bytes of `0f xx` opcodes uprobes refuse: system instructions, `syscall`,
/// `sysenter`, `ud2`, group 15 (`fxsave`, fences…).
const REFUSED_0F_OPCODES: &[u8] =
    &[0x00, 0x01, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0b, 0x30, 0x34, 0x35, 0x37, 0x78, 0x79, 0xae];

/// The length of the instruction starting at `code[0]`, when it decodes.
pub fn instruction_len(code: &[u8]) -> Option<usize> {
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let insn = d.can_decode().then(|| d.decode()).filter(|i| !i.is_invalid())?;
    Some(insn.len())
}

/// Whether the kernel can place a uprobe on the instruction starting at `code[0]`.
/// x86 uprobes refuse `lock` and es/cs/ss/ds segment prefixes, VEX/EVEX/XOP-encoded
/// instructions and the opcodes above (ENOTSUPP), and one refused site fails a whole
/// uprobe_multi link.
pub fn probeable(code: &[u8], vaddr: u64) -> bool {
    let mut d = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE);
    if !d.can_decode() {
        return false;
    }
    let insn = d.decode();
    if insn.is_invalid() || insn.has_lock_prefix() {
        return false;
    }
    // Skip the prefixes uprobes accept and REX to the opcode: C4/C5 start VEX, 62 EVEX
    // (both always, in 64-bit mode), and 8F with a map select of 8 or more XOP.
    let mut i = 0;
    while i < code.len() && matches!(code[i], 0x66 | 0x67 | 0xf2 | 0xf3 | 0x64 | 0x65 | 0x40..=0x4f) {
        i += 1;
    }
    match code.get(i) {
        Some(0x26 | 0x2e | 0x36 | 0x3e | 0xf0) => false,
        Some(0xc4 | 0xc5 | 0x62) => false,
        Some(0x8f) => code.get(i + 1).is_none_or(|b| b & 0x1f < 8),
        Some(0x0f) => code.get(i + 1).is_some_and(|b| !REFUSED_0F_OPCODES.contains(b)),
        Some(op) => !REFUSED_OPCODES.contains(op),
        None => false,
    }
}

#[cfg(test)]
mod probeable_tests {
    use super::probeable;

    #[test]
    fn refuses_what_the_kernel_refuses() {
        assert!(probeable(&[0x55], 0), "push %rbp");
        assert!(probeable(&[0x48, 0x8d, 0x44, 0x3f, 0x01], 0), "lea");
        assert!(probeable(&[0xf3, 0x0f, 0x1e, 0xfa], 0), "endbr64");
        assert!(!probeable(&[0xf0, 0x48, 0x0f, 0xb1, 0x0a], 0), "lock cmpxchg");
        assert!(!probeable(&[0xc5, 0xfd, 0x6f, 0x07], 0), "vmovdqa (VEX)");
        assert!(!probeable(&[], 0));
        assert!(!probeable(&[0xf4], 0), "hlt");
        assert!(!probeable(&[0xcc], 0), "int3");
        assert!(!probeable(&[0x0f, 0x05], 0), "syscall");
        assert!(!probeable(&[0x0f, 0xae, 0xf0], 0), "mfence");
        assert!(!probeable(&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], 0), "cs nopw: a cs prefix");
        assert!(probeable(&[0x66, 0x0f, 0x1f, 0x44, 0, 0], 0), "nopw");
        assert!(probeable(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], 0), "mov %fs:0x28,%rax");
        assert!(probeable(&[0xc3], 0), "ret");
    }
}
