//! User-stack unwinding from `.eh_frame`, in user space, over stack bytes copied at the
//! firing. Debian's libc and most Rust code keep no frame pointers, so the kernel's
//! frame-pointer walk is useless; framehop reads the unwind tables instead.

use std::cell::Cell;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};
use object::{Object, ObjectSection};

use crate::debuginfo::ObjectSymbols;
use crate::elf;

/// Section bytes handed to framehop, shared by the unwinders of every process.
pub type Data = Arc<[u8]>;

/// Unwind tables of one process's modules.
pub struct Unwinder {
    inner: UnwinderX86_64<Data>,
    cache: CacheX86_64,
    /// Each module's address range, load bias and file (its code is read from the
    /// file to recognise a signal trampoline).
    code: Vec<(Range<u64>, u64, Rc<ObjectSymbols>)>,
    /// Whether a frame address is in a sigreturn trampoline, as found (the code is
    /// read from the file: once per address, not per frame of every firing).
    signal_frames: std::collections::HashMap<(u64, bool), bool>,
}

/// Registers and stack bytes of one firing.
pub struct Snapshot<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of stack starting at `sp`.
    pub stack: &'a [u8],
    /// Fewer bytes than were asked for could be read: the copy ends where the
    /// process's readable memory did (or, read by BPF without faulting pages in, at a
    /// page not present).
    pub truncated: bool,
}

/// Return addresses of a stack, innermost first (the first is the firing's own pc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwound {
    pub frames: Vec<u64>,
    /// Why the frames stop short of the outermost one, when they are known to.
    pub cut: Option<Cut>,
}

/// Why an unwound stack lacks its outer frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The next frame lies above the bytes copied, which were all that were asked for.
    Capture,
    /// The next frame lies above the bytes copied, where the copy stopped because
    /// the memory could not be read.
    Unreadable,
    /// A signal handler ran on an alternate signal stack: the stack of the code the
    /// signal interrupted, past its instruction, was not copied.
    AltStack,
}

/// What a signal handler returns into: a sigreturn trampoline, `mov $15,%rax; syscall`
/// (glibc's and musl's `__restore_rt`, Go's `runtime.sigreturn__sigaction`) or `mov
/// $15,%eax; syscall`, each with where its `syscall` is.
const SIGRETURN: [(&[u8], u64); 2] =
    [(&[0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05], 7), (&[0xb8, 0x0f, 0, 0, 0, 0x0f, 0x05], 5)];

/// Where the registers of the code a signal interrupted are in the `struct ucontext`
/// the kernel puts on the handler's stack (x86-64; the kernel's uapi
/// `asm/sigcontext.h` and glibc's `sys/ucontext.h`): `uc_stack` (the alternate stack:
/// `ss_sp`, `ss_size`) after `uc_flags` and `uc_link`, then `uc_mcontext`, whose
/// general registers run r8 … r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip.
mod ucontext {
    pub const SS_SP: u64 = 16;
    pub const SS_SIZE: u64 = 32;
    const MCONTEXT: u64 = 40;
    pub const RBP: u64 = MCONTEXT + 10 * 8;
    pub const RSP: u64 = MCONTEXT + 15 * 8;
    pub const RIP: u64 = MCONTEXT + 16 * 8;
}

impl Default for Unwinder {
    fn default() -> Unwinder {
        Unwinder {
            inner: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            code: Vec::new(),
            signal_frames: std::collections::HashMap::new(),
        }
    }
}

/// The address range and the bytes (decompressed) of section `name`.
fn section(file: &object::File, name: &str) -> (Option<Range<u64>>, Option<Data>) {
    match file.section_by_name(name) {
        Some(s) => {
            // Saturating: a hostile section header may put its end past 2^64.
            let range = s.address()..s.address().saturating_add(s.size());
            let data = elf::section_data(file, name).filter(|d| !d.is_empty()).map(|d| Arc::from(d.as_ref()));
            (Some(range), data)
        }
        None => (None, None),
    }
}

/// The `.debug_frame` to unwind an object's code with (its own, else its separate
/// debug file's, decompressed), where it describes more functions than its
/// `.eh_frame`: code built without asynchronous unwind tables
/// (`-fno-asynchronous-unwind-tables`, whose `.eh_frame` is the C runtime's few), and
/// Go, which writes no `.eh_frame`. framehop reads one table per object.
pub fn preferred_debug_frame(data: &[u8], debug_file: Option<&[u8]>) -> Option<Data> {
    let file = object::File::parse(data).ok()?;
    let frame = match elf::section_data(&file, ".debug_frame") {
        Some(f) => f.into_owned(),
        None => elf::section_data(&object::File::parse(debug_file?).ok()?, ".debug_frame")?.into_owned(),
    };
    let eh = elf::section_data(&file, ".eh_frame").map_or(0, |e| fde_count(&e, true));
    (fde_count(&frame, false) > eh).then(|| Arc::from(frame))
}

/// How many FDEs (functions described) a `.eh_frame` (`eh`) or `.debug_frame` holds:
/// each entry is a length, a CIE id (0 in `.eh_frame`, all ones in `.debug_frame` for a
/// CIE) and the rest; a zero length ends `.eh_frame`.
fn fde_count(data: &[u8], eh: bool) -> usize {
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = data.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let (mut at, mut n) = (0usize, 0usize);
    while let Some(len) = word(at, 4) {
        if len == 0 {
            break;
        }
        // 64-bit DWARF: all ones, then the length in 8 bytes and 8-byte ids.
        let (len, id_at, id_len) = match len {
            0xffff_ffff => (word(at + 4, 8), at + 12, 8),
            _ => (Some(len), at + 4, 4),
        };
        let (Some(len), Some(id)) = (len.and_then(|l| usize::try_from(l).ok()), word(id_at, id_len)) else { break };
        let cie = if eh { id == 0 } else { id == u64::MAX >> (64 - 8 * id_len) };
        n += usize::from(!cie);
        let Some(next) = id_at.checked_add(len) else { break };
        at = next;
    }
    n
}

impl Unwinder {
    /// Adds a module from its symbols (file bytes and the `.debug_frame` chosen for it).
    /// `avma` is the range it occupies in the process and `bias` what its file
    /// addresses are shifted by.
    pub fn add_module(&mut self, name: &str, syms: &Rc<ObjectSymbols>, avma: Range<u64>, bias: u64) {
        let Ok(file) = object::File::parse(&*syms.data) else { return };
        self.code.push((avma.clone(), bias, Rc::clone(syms)));
        // framehop reads `.text`'s bytes only in Mach-O's unwind info: its range will do.
        let (text_svma, _) = section(&file, ".text");
        let info = match &syms.debug_frame {
            Some(d) => ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma,
                debug_frame: Some(Arc::clone(d)),
                ..ExplicitModuleSectionInfo::default()
            },
            None => {
                let (eh_frame_svma, eh_frame) = section(&file, ".eh_frame");
                let (mut eh_frame_hdr_svma, mut eh_frame_hdr) = section(&file, ".eh_frame_hdr");
                // gimli trusts the search table of `.eh_frame_hdr` to point into
                // `.eh_frame`; one that does not is dropped, and with it only the
                // unwinding of this object.
                let sound = match (&eh_frame_hdr_svma, &eh_frame_hdr, &eh_frame_svma) {
                    (Some(at), Some(hdr), Some(eh_frame)) => hdr_is_sound(hdr, at.start, eh_frame).is_some(),
                    _ => false,
                };
                if !sound {
                    (eh_frame_hdr_svma, eh_frame_hdr) = (None, None);
                }
                ExplicitModuleSectionInfo {
                    base_svma: 0,
                    text_svma,
                    eh_frame_svma,
                    eh_frame,
                    eh_frame_hdr_svma,
                    eh_frame_hdr,
                    ..ExplicitModuleSectionInfo::default()
                }
            }
        };
        self.inner.add_module(Module::new(name.to_string(), avma, bias, info));
    }

    /// The stack's return addresses, at most `max` of them, and whether the chain goes
    /// on past the copied bytes.
    pub fn unwind(&mut self, snap: &Snapshot, max: usize) -> Unwound {
        let (stack, sp) = (snap.stack, snap.sp);
        let end = sp.saturating_add(stack.len() as u64);
        // Whether the unwinder asked for a word at or above `end` since this was last
        // cleared: a frame that lies beyond the copy.
        let beyond = Cell::new(false);
        let mut read = |addr: u64| -> Result<u64, ()> {
            let word = addr
                .checked_sub(sp)
                .and_then(|off| usize::try_from(off).ok())
                .and_then(|off| stack.get(off..off.checked_add(8)?))
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            if word.is_none() && addr >= end {
                beyond.set(true);
            }
            word.ok_or(())
        };
        let short = if snap.truncated { Cut::Unreadable } else { Cut::Capture };
        let mut regs = UnwindRegsX86_64::new(snap.ip, snap.sp, snap.bp);
        let mut at = FrameAddress::InstructionPointer(snap.ip);
        let mut out = Unwound { frames: vec![snap.ip], cut: None };
        while out.frames.len() < max {
            beyond.set(false);
            if self.returns_from_signal(at) {
                // The handler's frame is gone (its return address, the trampoline, was
                // popped): the stack pointer is at the signal frame's `struct ucontext`.
                // framehop does not evaluate the trampoline's CFI expressions.
                let uc = regs.sp();
                let mut field = |off: u64| uc.checked_add(off).ok_or(()).and_then(&mut read);
                let (Ok(ip), Ok(sp), Ok(bp)) = (field(ucontext::RIP), field(ucontext::RSP), field(ucontext::RBP))
                else {
                    out.cut = beyond.get().then_some(short);
                    break;
                };
                // The interrupted instruction is known exactly, whatever follows.
                out.frames.push(ip);
                if (snap.sp..end).contains(&sp) {
                    regs = UnwindRegsX86_64::new(ip, sp, bp);
                    at = FrameAddress::InstructionPointer(ip);
                    continue;
                }
                let alt = field(ucontext::SS_SP).and_then(|lo| Ok(lo..lo.saturating_add(field(ucontext::SS_SIZE)?)));
                let on_alt = alt.as_ref().is_ok_and(|a| a.contains(&uc) && !a.contains(&sp));
                out.cut = Some(if on_alt || sp < uc { Cut::AltStack } else { short });
                break;
            }
            match self.inner.unwind_frame(at, &mut regs, &mut self.cache, &mut read) {
                Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                    Some(next) => {
                        out.frames.push(ret);
                        at = next;
                    }
                    None => break,
                },
                // The outermost frame (its return address is undefined).
                Ok(None) => break,
                Err(_) => {
                    out.cut = beyond.get().then_some(short);
                    break;
                }
            }
        }
        out.frames.truncate(max);
        out
    }
}

impl Unwinder {
    /// Whether the frame at `at` is in a sigreturn trampoline, having returned from a
    /// signal handler into it (or, the first frame, interrupted in it): its code, read
    /// from the module's file, is one of [`SIGRETURN`].
    fn returns_from_signal(&mut self, at: FrameAddress) -> bool {
        let key = (at.address(), matches!(at, FrameAddress::ReturnAddress(_)));
        if let Some(&known) = self.signal_frames.get(&key) {
            return known;
        }
        let found = self.in_sigreturn(at);
        // Bounded: a process has few distinct frame addresses, but a hostile one may
        // show many.
        if self.signal_frames.len() >= 1 << 16 {
            self.signal_frames.clear();
        }
        self.signal_frames.insert(key, found);
        found
    }

    /// [`Self::returns_from_signal`], from the module's file.
    fn in_sigreturn(&self, at: FrameAddress) -> bool {
        let addr = at.address();
        let Some((_, bias, syms)) = self.code.iter().find(|(r, _, _)| r.contains(&addr)) else { return false };
        let code_at = |vaddr: u64, len: usize| -> Option<std::borrow::Cow<'_, [u8]>> {
            syms.bytes(syms.info.vaddr_to_offset(vaddr)?, len)
        };
        let vaddr = addr.wrapping_sub(*bias);
        SIGRETURN.iter().any(|&(bytes, syscall)| {
            // A return address is the trampoline's start; an interrupted one may be
            // anywhere in it, or right after its system call.
            let starts: &[u64] = match at {
                FrameAddress::ReturnAddress(_) => &[0],
                FrameAddress::InstructionPointer(_) => &[0, syscall, bytes.len() as u64],
            };
            starts.iter().any(|&back| code_at(vaddr.wrapping_sub(back), bytes.len()).as_deref() == Some(bytes))
        })
    }
}

/// `Some` when `.eh_frame_hdr` (its bytes `hdr`, at `hdr_svma`) is laid out as linkers
/// write it (version 1, a pc-relative 4-byte pointer to `.eh_frame`, a 4-byte count, a
/// table of 4-byte offsets from the header) and its pointer and every FDE entry of its
/// table lie inside `eh_frame`. gimli subtracts the section's start from each entry.
fn hdr_is_sound(hdr: &[u8], hdr_svma: u64, eh_frame: &Range<u64>) -> Option<()> {
    const LAYOUT: [u8; 4] = [1, 0x1b, 0x03, 0x3b];
    let word = |o: usize| -> Option<[u8; 4]> { hdr.get(o..o.checked_add(4)?)?.try_into().ok() };
    let rel = |o: usize, base: u64| Some(base.wrapping_add(i32::from_le_bytes(word(o)?) as i64 as u64));
    if hdr.get(..4)? != LAYOUT || rel(4, hdr_svma.wrapping_add(4))? != eh_frame.start {
        return None;
    }
    let count = usize::try_from(u32::from_le_bytes(word(8)?)).ok()?;
    // Two words per entry: the function's start, then its FDE.
    if count.checked_mul(8)?.checked_add(12)? > hdr.len() {
        return None;
    }
    (0..count).map(|i| rel(16 + 8 * i, hdr_svma)).all(|fde| fde.is_some_and(|a| eh_frame.contains(&a))).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header for `.eh_frame` at 0x2000 (the header at 0x1000) with FDEs at `fdes`.
    fn hdr(fdes: &[u64]) -> Vec<u8> {
        let mut h = vec![1, 0x1b, 0x03, 0x3b];
        h.extend_from_slice(&(0x2000i32 - 0x1004).to_le_bytes());
        h.extend_from_slice(&(fdes.len() as u32).to_le_bytes());
        for &f in fdes {
            h.extend_from_slice(&0i32.to_le_bytes());
            h.extend_from_slice(&((f as i64 - 0x1000) as i32).to_le_bytes());
        }
        h
    }

    #[test]
    fn fdes_are_counted_in_either_table() {
        // A CIE then two FDEs, each entry a length, an id and 4 more bytes.
        let entry = |id: u32| [8u32.to_le_bytes(), id.to_le_bytes(), [0; 4]].concat();
        let eh = [entry(0), entry(12), entry(28), vec![0; 4], entry(12)].concat();
        assert_eq!(fde_count(&eh, true), 2, "a zero length ends .eh_frame");
        let debug = [entry(u32::MAX), entry(0), entry(0)].concat();
        assert_eq!(fde_count(&debug, false), 2);
        // 64-bit DWARF's CIE id is all ones in 8 bytes.
        let wide = [&u32::MAX.to_le_bytes()[..], &12u64.to_le_bytes(), &u64::MAX.to_le_bytes(), &[0; 4]].concat();
        assert_eq!(fde_count(&wide, false), 0);
        // A length past the end, or one that overflows, only ends the count.
        assert_eq!(fde_count(&[entry(0), (u32::MAX - 1).to_le_bytes().to_vec()].concat(), false), 1);
        assert_eq!(fde_count(&[0xff, 0xff, 0xff, 0xff, 0xff], false), 0);
    }

    #[test]
    fn eh_frame_hdr_must_point_into_eh_frame() {
        let eh_frame = 0x2000..0x3000;
        assert!(hdr_is_sound(&hdr(&[0x2000, 0x2ff8]), 0x1000, &eh_frame).is_some());
        // Found by fuzzing: an FDE before `.eh_frame` made gimli's lookup overflow.
        assert!(hdr_is_sound(&hdr(&[0x1ff0]), 0x1000, &eh_frame).is_none());
        assert!(hdr_is_sound(&hdr(&[0x3000]), 0x1000, &eh_frame).is_none());
        // A count larger than the table, another encoding, a truncated header.
        let mut h = hdr(&[0x2000]);
        h[8] = 2;
        assert!(hdr_is_sound(&h, 0x1000, &eh_frame).is_none());
        h[8] = 1;
        h[3] = 0x1b;
        assert!(hdr_is_sound(&h, 0x1000, &eh_frame).is_none());
        assert!(hdr_is_sound(&hdr(&[0x2000])[..10], 0x1000, &eh_frame).is_none());
    }

    #[test]
    fn own_executable_unwinds_with_its_header() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*data).unwrap();
        let (Some(at), Some(h)) = section(&file, ".eh_frame_hdr") else { panic!("no .eh_frame_hdr") };
        let (Some(eh_frame), _) = section(&file, ".eh_frame") else { panic!("no .eh_frame") };
        assert!(hdr_is_sound(&h, at.start, &eh_frame).is_some());
    }

    #[test]
    fn stack_reads_far_from_sp_fail() {
        // Reads at addresses just below 2^64 past sp fail instead of overflowing.
        let mut u = Unwinder::default();
        let data = std::fs::read("/proc/self/exe").unwrap();
        let syms = Rc::new(crate::debuginfo::assemble(crate::elf::parse(&data).unwrap(), data, None));
        u.add_module("self", &syms, 0x1000..0x10000, 0);
        let stack = [0u8; 64];
        let snap = Snapshot { ip: 0x1000, sp: 8, bp: u64::MAX - 4, stack: &stack, truncated: false };
        assert!(u.unwind(&snap, 8).frames.len() <= 8);
    }
}
