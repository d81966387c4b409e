//! The guard: a SIGTRAP handler udtrace installs in a process where it placed
//! breakpoints (`int3`) or the loader hook's debug register, that is, where there is no
//! BPF to fall back on (docs/inprocess.md, "After udtrace is killed").
//!
//! While udtrace traces, a SIGTRAP stops its thread for udtrace, which deals with it and
//! never lets it through: the handler does not run. When udtrace dies of SIGKILL,
//! nothing can take the `int3`s and the debug registers out, and a thread that reached
//! one would die of SIGTRAP. The handler makes such a hit harmless:
//!
//! - an `int3` of udtrace's (`si_code` `SI_KERNEL`, the byte before the interrupted
//!   address in the table): the thread goes on through the breakpoint's out-of-line
//!   copy (or was already sent there by udtrace when it died: its address is the copy's);
//! - the debug register (`TRAP_HWBKPT`): the kernel set the resume flag before sending
//!   the signal, so returning from the handler runs the instruction without trapping;
//! - any other SIGTRAP (the program's own `raise(SIGTRAP)`, an `int3` not udtrace's):
//!   the action the process had before is put back and the signal sent again, so that
//!   it ends the way it would have without udtrace.
//!
//! The guard is one private anonymous mapping per process image (a forked child has a
//! copy, in step with the breakpoints it inherits): the handler's code and the
//! `sigaction` structures on its first page, then the table of breakpoints, `(site,
//! copy)` pairs that udtrace appends (the entry first, then the count). Firings after
//! udtrace died are not recorded.
//!
//! Pure: an address in, bytes out.

use iced_x86::code_asm::CodeAssembler;
use iced_x86::code_asm::{dword_ptr, eax, edi, edx, esi, qword_ptr, r10, r10d, r8, r8d, r9, rax, rcx, rdx, rsi};
use iced_x86::IcedError;

/// Bytes of the mapping: the first page, then room for the table (reserved, not
/// committed: pages are allocated as entries reach them).
pub const GUARD_LEN: u64 = 16 << 20;
/// Offset of the handler's code (the restorer follows it).
pub const OFF_CODE: u64 = 0;
/// The action udtrace installs (a kernel `struct sigaction`: handler, flags, restorer,
/// mask).
pub const OFF_ACTION: u64 = 2048;
/// The action the process had, which the kernel writes there at installation, and which
/// is put back when udtrace lets the process go, or by the handler for a SIGTRAP not
/// udtrace's.
pub const OFF_OLD: u64 = 2048 + 64;
/// How many table entries are valid (u64).
pub const OFF_COUNT: u64 = 4096 - 8;
/// The table: `(address of the int3, address of its out-of-line copy)`, 16 bytes each.
pub const OFF_TABLE: u64 = 4096;
/// Bytes of a table entry.
pub const ENTRY_SIZE: u64 = 16;
/// Bytes of a kernel `struct sigaction` on x86-64.
pub const ACTION_SIZE: usize = 32;

/// The entries the table holds.
pub const fn capacity() -> u64 {
    (GUARD_LEN - OFF_TABLE) / ENTRY_SIZE
}

const SIGTRAP: u32 = 5;
const SI_KERNEL: u32 = 0x80;
const TRAP_HWBKPT: u32 = 4;
const SA_SIGINFO: u64 = 4;
const SA_RESTORER: u64 = 0x0400_0000;
/// `siginfo_t.si_code`.
const SI_CODE: i32 = 8;
/// `ucontext_t.uc_mcontext.gregs[REG_RIP]`: after uc_flags, uc_link and uc_stack (40
/// bytes), register 16 of 8 bytes each.
const UC_RIP: i32 = 40 + 16 * 8;
const SYS_RT_SIGACTION: u32 = 13;
const SYS_RT_SIGRETURN: u32 = 15;
const SYS_GETPID: u32 = 39;
const SYS_GETTID: u32 = 186;
const SYS_TGKILL: u32 = 234;

/// The handler and its restorer, for a guard mapped at `base`; and the restorer's
/// offset in the bytes.
pub fn code(base: u64) -> Result<(Vec<u8>, u64), IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let (mut search, mut at_site, mut done, mut not_ours, mut restorer) =
        (a.create_label(), a.create_label(), a.create_label(), a.create_label(), a.create_label());
    // handler(sig = edi, info = rsi, ucontext = rdx). sigreturn restores every
    // register from the frame: the handler may use any.
    a.mov(r9, base)?;
    a.mov(eax, dword_ptr(rsi + SI_CODE))?;
    a.cmp(eax, TRAP_HWBKPT)?;
    a.je(done)?;
    a.cmp(eax, SI_KERNEL)?;
    a.jne(not_ours)?;
    a.mov(r8, qword_ptr(rdx + UC_RIP))?;
    a.mov(rcx, qword_ptr(r9 + OFF_COUNT as i32))?;
    a.lea(r10, qword_ptr(r9 + OFF_TABLE as i32))?;
    a.set_label(&mut search)?;
    a.test(rcx, rcx)?;
    a.jz(not_ours)?;
    a.mov(rax, qword_ptr(r10))?;
    a.inc(rax)?;
    a.cmp(rax, r8)?;
    a.je(at_site)?;
    // Stopped at the breakpoint when udtrace died, after it sent the thread to the copy.
    a.cmp(qword_ptr(r10 + 8), r8)?;
    a.je(done)?;
    a.add(r10, ENTRY_SIZE as i32)?;
    a.dec(rcx)?;
    a.jmp(search)?;
    a.set_label(&mut at_site)?;
    a.mov(rax, qword_ptr(r10 + 8))?;
    a.mov(qword_ptr(rdx + UC_RIP), rax)?;
    a.set_label(&mut done)?;
    a.ret()?;
    // Not udtrace's: the old action back, and the signal again, taken once the handler
    // returns (SIGTRAP is blocked while it runs).
    a.set_label(&mut not_ours)?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.mov(edi, SIGTRAP)?;
    a.lea(rsi, qword_ptr(r9 + OFF_OLD as i32))?;
    a.xor(edx, edx)?;
    a.mov(r10d, 8u32)?;
    a.syscall()?;
    a.mov(eax, SYS_GETPID)?;
    a.syscall()?;
    a.mov(r8d, eax)?;
    a.mov(eax, SYS_GETTID)?;
    a.syscall()?;
    a.mov(esi, eax)?;
    a.mov(edi, r8d)?;
    a.mov(edx, SIGTRAP)?;
    a.mov(eax, SYS_TGKILL)?;
    a.syscall()?;
    a.ret()?;
    a.set_label(&mut restorer)?;
    a.mov(eax, SYS_RT_SIGRETURN)?;
    a.syscall()?;
    let bytes = a.assemble(base + OFF_CODE)?;
    // The restorer is the last instruction pair: `mov eax, imm32` (5) and `syscall` (2).
    let restorer_off = bytes.len() as u64 - 7;
    Ok((bytes, restorer_off))
}

/// The kernel `struct sigaction` that installs the handler of a guard at `base` whose
/// restorer lies `restorer_off` bytes into its code.
pub fn action(base: u64, restorer_off: u64) -> [u8; ACTION_SIZE] {
    let mut b = [0u8; ACTION_SIZE];
    b[..8].copy_from_slice(&(base + OFF_CODE).to_ne_bytes());
    b[8..16].copy_from_slice(&(SA_SIGINFO | SA_RESTORER).to_ne_bytes());
    b[16..24].copy_from_slice(&(base + OFF_CODE + restorer_off).to_ne_bytes());
    // No signal blocked besides SIGTRAP itself while the handler runs.
    b
}

/// The table entry for an `int3` at `at` whose out-of-line copy is at `copy`.
pub fn entry(at: u64, copy: u64) -> [u8; ENTRY_SIZE as usize] {
    let mut b = [0u8; ENTRY_SIZE as usize];
    b[..8].copy_from_slice(&at.to_ne_bytes());
    b[8..].copy_from_slice(&copy.to_ne_bytes());
    b
}

/// Whether the handler of a kernel `struct sigaction` is `SIG_DFL` or `SIG_IGN`: only
/// then does the guard take SIGTRAP over (a program's own handler is left alone).
pub fn is_default(action: &[u8]) -> bool {
    action.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).is_some_and(|h| h <= 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    #[test]
    fn the_code_fits_before_the_actions_and_ends_in_the_restorer() {
        let base = 0x7f00_0000_0000;
        let (bytes, restorer) = code(base).unwrap();
        assert!((bytes.len() as u64) < OFF_ACTION, "{} bytes", bytes.len());
        let mut d = Decoder::with_ip(64, &bytes[restorer as usize..], base + restorer, DecoderOptions::NONE);
        let mov = d.decode();
        assert_eq!(mov.mnemonic(), Mnemonic::Mov);
        assert_eq!(mov.immediate32(), SYS_RT_SIGRETURN);
        assert_eq!(d.decode().mnemonic(), Mnemonic::Syscall);
        assert!(!d.can_decode());
        let a = action(base, restorer);
        assert_eq!(u64::from_ne_bytes(a[16..24].try_into().unwrap()), base + restorer);
        assert!(!is_default(&a));
        assert!(is_default(&[0u8; ACTION_SIZE]));
    }

    #[test]
    fn the_table_holds_a_million_breakpoints_after_the_first_page() {
        assert!(capacity() >= 1_000_000);
        assert_eq!(OFF_COUNT + 8, OFF_TABLE);
        assert!(OFF_OLD + ACTION_SIZE as u64 <= OFF_COUNT);
    }
}
