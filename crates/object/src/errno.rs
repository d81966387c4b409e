//! Where a thread's `errno` lives, read from the code of glibc's `__errno_location`,
//! which returns the thread pointer (`%fs:0`) plus errno's offset in thread-local
//! storage. libc.so loads that offset from a GOT slot the loader fills (initial-exec
//! TLS); a static program has it as a constant (local-exec TLS). Pure: bytes in.

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// Where the offset of errno from the thread pointer is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrnoTls {
    /// In the 8-byte GOT slot at this address of the object (before its load bias);
    /// the loader writes it while relocating.
    GotSlot(u64),
    /// This constant.
    Offset(i64),
}

/// How many instructions of `__errno_location` are looked at: glibc's has three or four.
const MAX_INSNS: usize = 8;

/// Decodes `__errno_location` (its `code`, placed at `vaddr`): `None` when it does not
/// compute errno's address from the thread pointer the way glibc does.
pub fn locate(code: &[u8], vaddr: u64) -> Option<ErrnoTls> {
    let mut d = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut uses_fs = false;
    let mut constant = None;
    for _ in 0..MAX_INSNS {
        if !d.can_decode() {
            break;
        }
        d.decode_out(&mut insn);
        if insn.is_invalid() {
            return None;
        }
        match insn.mnemonic() {
            Mnemonic::Ret => break,
            // `mov slot(%rip),%rax` or `add slot(%rip),%rax`: the GOT slot.
            Mnemonic::Mov | Mnemonic::Add if insn.is_ip_rel_memory_operand() => {
                return Some(ErrnoTls::GotSlot(insn.ip_rel_memory_address()));
            }
            _ if insn.segment_prefix() == Register::FS => uses_fs = true,
            // `mov $off,%rax` or `add $off,%rax`.
            Mnemonic::Mov | Mnemonic::Add if is_immediate(insn.op1_kind()) => {
                constant = Some(insn.immediate(1) as i64);
            }
            // `lea off(%rax),%rax` after `mov %fs:0,%rax`.
            Mnemonic::Lea if insn.memory_index() == Register::None => {
                constant = Some(insn.memory_displacement64() as i64);
            }
            _ => {}
        }
    }
    constant.filter(|_| uses_fs).map(ErrnoTls::Offset)
}

fn is_immediate(k: OpKind) -> bool {
    matches!(k, OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate64 | OpKind::Immediate32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_shared_loads_the_offset_from_the_got() {
        // endbr64; mov 0x1d6669(%rip),%rax; add %fs:0x0,%rax; ret
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8b, 0x05, 0x69, 0x66, 0x1d, 0x00, 0x64, 0x48, 0x03, 0x04, 0x25, 0, 0, 0, 0,
            0xc3,
        ];
        // The slot: the mov's end (0x29770 + 11) plus its displacement.
        assert_eq!(locate(&code, 0x29770), Some(ErrnoTls::GotSlot(0x29770 + 11 + 0x1d6669)));
    }

    #[test]
    fn static_programs_have_a_constant_offset() {
        // mov $0xffffffffffffffc0,%rax; add %fs:0x0,%rax; ret
        let code = [0x48, 0xc7, 0xc0, 0xc0, 0xff, 0xff, 0xff, 0x64, 0x48, 0x03, 0x04, 0x25, 0, 0, 0, 0, 0xc3];
        assert_eq!(locate(&code, 0x1000), Some(ErrnoTls::Offset(-0x40)));
        // mov %fs:0x0,%rax; lea -0x40(%rax),%rax; ret
        let code = [0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0, 0x48, 0x8d, 0x40, 0xc0, 0xc3];
        assert_eq!(locate(&code, 0x1000), Some(ErrnoTls::Offset(-0x40)));
    }

    #[test]
    fn other_code_is_not_understood() {
        // mov $1,%eax; ret: no thread pointer
        assert_eq!(locate(&[0xb8, 1, 0, 0, 0, 0xc3], 0), None);
        assert_eq!(locate(&[], 0), None);
    }
}
