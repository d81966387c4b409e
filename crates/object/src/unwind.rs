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
            let range = s.address()..s.address() + s.size();
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
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(&file, ".eh_frame_hdr");
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
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off + 8).ok_or(())?;
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
