//! User-stack unwinding from `.eh_frame`, in user space, over stack bytes copied at the
//! firing. Debian's libc and most Rust code keep no frame pointers, so the kernel's
//! frame-pointer walk is useless; framehop reads the unwind tables instead.

use std::ops::Range;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};
use object::{Object, ObjectSection};

type Data = Arc<[u8]>;

/// Unwind tables of one process's modules.
pub struct Unwinder {
    inner: UnwinderX86_64<Data>,
    cache: CacheX86_64,
}

/// Registers and stack bytes of one firing.
pub struct Snapshot<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of stack starting at `sp`.
    pub stack: &'a [u8],
}

impl Default for Unwinder {
    fn default() -> Unwinder {
        Unwinder { inner: UnwinderX86_64::new(), cache: CacheX86_64::new() }
    }
}

fn section(file: &object::File, name: &str) -> (Option<Range<u64>>, Option<Data>) {
    match file.section_by_name(name) {
        Some(s) => {
            // Saturating: a hostile section header may put its end past 2^64.
            let range = s.address()..s.address().saturating_add(s.size());
            let data = s.data().ok().filter(|d| !d.is_empty()).map(Arc::from);
            (Some(range), data)
        }
        None => (None, None),
    }
}

impl Unwinder {
    /// Adds a module from its file bytes. `avma` is the range it occupies in the
    /// process and `bias` what its file addresses are shifted by.
    pub fn add_module(&mut self, name: &str, file_bytes: &[u8], avma: Range<u64>, bias: u64) {
        let Ok(file) = object::File::parse(file_bytes) else { return };
        let (text_svma, text) = section(&file, ".text");
        let (eh_frame_svma, eh_frame) = section(&file, ".eh_frame");
        let (mut eh_frame_hdr_svma, mut eh_frame_hdr) = section(&file, ".eh_frame_hdr");
        // gimli trusts the search table of `.eh_frame_hdr` to point into `.eh_frame`;
        // one that does not is dropped, and with it only the unwinding of this object.
        let sound = match (&eh_frame_hdr_svma, &eh_frame_hdr, &eh_frame_svma) {
            (Some(at), Some(hdr), Some(eh_frame)) => hdr_is_sound(hdr, at.start, eh_frame).is_some(),
            _ => false,
        };
        if !sound {
            (eh_frame_hdr_svma, eh_frame_hdr) = (None, None);
        }
        let (_, debug_frame) = section(&file, ".debug_frame");
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            text,
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            debug_frame,
            ..ExplicitModuleSectionInfo::default()
        };
        self.inner.add_module(Module::new(name.to_string(), avma, bias, info));
    }

    /// Return addresses, innermost first (the first is the firing's own pc), at most
    /// `max` of them. Unwinding stops where the copied stack ends.
    pub fn unwind(&mut self, snap: &Snapshot, max: usize) -> Vec<u64> {
        let stack = snap.stack;
        let sp = snap.sp;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(snap.ip, snap.sp, snap.bp);
        let mut iter = self.inner.iter_frames(snap.ip, regs, &mut self.cache, &mut read);
        let mut out = Vec::new();
        while out.len() < max {
            match iter.next() {
                Ok(Some(FrameAddress::InstructionPointer(a))) => out.push(a),
                Ok(Some(FrameAddress::ReturnAddress(a))) => out.push(a.get()),
                _ => break,
            }
        }
        out
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
        u.add_module("self", &data, 0x1000..0x10000, 0);
        let stack = [0u8; 64];
        let snap = Snapshot { ip: 0x1000, sp: 8, bp: u64::MAX - 4, stack: &stack };
        assert!(u.unwind(&snap, 8).len() <= 8);
    }
}
