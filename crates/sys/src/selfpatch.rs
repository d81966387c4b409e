//! Mappings and code writes in udtrace's own process, for the in-process backend's ring
//! (a memfd shared with traced processes) and for testing trampolines on udtrace's own
//! functions: `memfd_create`, mappings whose address is known (one near some code, for a
//! `jmp rel32`), `mprotect`, and writing over executable bytes.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// Reach of a `jmp rel32` / `call rel32`, either way.
const REACH: u64 = 1 << 31;

/// A memfd (`MFD_CLOEXEC`), of length 0: size it with `File::set_len`.
pub fn memfd_create(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in memfd name"))?;
    // SAFETY: a valid NUL-terminated name; the call creates a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Memory protections, as `mprotect` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prot {
    /// No access: reads and writes fault (a guard page).
    None,
    ReadWrite,
    ReadExec,
    ReadWriteExec,
}

impl Prot {
    fn bits(self) -> libc::c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            Prot::ReadExec => libc::PROT_READ | libc::PROT_EXEC,
            Prot::ReadWriteExec => libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        }
    }
}

/// A mapping whose address other code is told about (a trampoline page, a ring mapped for
/// a trampoline to write), unmapped on drop. Unlike [`crate::mmap::Mmap`] it hands out its
/// address, and its bytes are written only through [`RawMap::write`] while writable.
#[derive(Debug)]
pub struct RawMap {
    ptr: NonNull<u8>,
    len: usize,
    prot: Prot,
}

// SAFETY: plain memory; no thread-affine state.
unsafe impl Send for RawMap {}

impl RawMap {
    /// `len` bytes of `fd` from offset 0, shared and read-write.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<RawMap> {
        Self::mmap(0, len, libc::MAP_SHARED, fd.as_raw_fd(), Prot::ReadWrite)
    }

    /// `len` bytes of private anonymous memory (zeros), read-write; a forked child gets
    /// its own copy.
    pub fn anon(len: usize) -> io::Result<RawMap> {
        Self::mmap(0, len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, Prot::ReadWrite)
    }

    /// `len` bytes of private anonymous memory (zeros), read-write, at `addr` exactly
    /// (`MAP_FIXED_NOREPLACE`: an error, EEXIST, where anything is mapped there). Tests
    /// place memory where a generated case says it is.
    pub fn anon_at(addr: u64, len: usize) -> io::Result<RawMap> {
        Self::mmap(addr, len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE, -1, Prot::ReadWrite)
    }

    /// `len` bytes of private anonymous memory, read-write, placed so that every byte is
    /// within `jmp rel32` reach of every byte of `[lo, hi)` (the code that will jump to
    /// it). Tries page-aligned candidates moving away from the code, below it first, with
    /// `MAP_FIXED_NOREPLACE` so nothing mapped is ever replaced.
    pub fn anon_near(lo: u64, hi: u64, len: usize) -> io::Result<RawMap> {
        const STEP: u64 = 1 << 24;
        let len64 = len as u64;
        // The code and the mapping together span less than 2 GiB: every pair of bytes is
        // then in reach, whichever jumps to which.
        let ok = |a: u64| a.checked_add(len64).is_some_and(|end| hi.max(end) - lo.min(a) < REACH - 4096);
        let base_lo = lo & !0xfff;
        let base_hi = (hi + 0xfff) & !0xfff;
        for k in 1..(REACH / STEP) {
            for a in [base_lo.checked_sub(k * STEP + len64), base_hi.checked_add(k * STEP)].into_iter().flatten() {
                // Stay above the first 64 KiB (mmap_min_addr) and below user space's end.
                if !(0x10000..0x7fff_ffff_0000).contains(&a) || !ok(a) {
                    continue;
                }
                match Self::mmap(
                    a,
                    len,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    Prot::ReadWrite,
                ) {
                    Ok(m) => return Ok(m),
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        Err(io::Error::new(io::ErrorKind::AddrNotAvailable, "no free address within 2 GiB of the code"))
    }

    fn mmap(addr: u64, len: usize, flags: libc::c_int, fd: libc::c_int, prot: Prot) -> io::Result<RawMap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a new mapping; with an address, MAP_FIXED_NOREPLACE keeps it from
        // replacing anything mapped, so it aliases no Rust object.
        let p = unsafe { libc::mmap(addr as *mut libc::c_void, len, prot.bits(), flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat the address as a hint.
        if addr != 0 && p as u64 != addr {
            // SAFETY: unmaps what was just mapped.
            unsafe { libc::munmap(p, len) };
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(RawMap { ptr, len, prot })
    }

    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `bytes` to offset `off`. Panics when out of bounds or not writable (a bug of
    /// the caller). Code or data running in this process that reads these bytes at the
    /// same time sees them torn; the caller orders that (a trampoline is written before
    /// any jump to it).
    pub fn write(&mut self, off: usize, bytes: &[u8]) {
        assert!(off.checked_add(bytes.len()).is_some_and(|end| end <= self.len), "bad write {off}+{}", bytes.len());
        assert!(matches!(self.prot, Prot::ReadWrite | Prot::ReadWriteExec), "write to a read-only mapping");
        // SAFETY: in bounds of a writable mapping this object owns; it is not a Rust
        // object, so no reference to it exists.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(off), bytes.len()) };
    }

    /// Changes the whole mapping's protection (a trampoline page goes read-exec once
    /// written).
    pub fn protect(&mut self, prot: Prot) -> io::Result<()> {
        mprotect(self.addr(), self.len, prot)?;
        self.prot = prot;
        Ok(())
    }
}

impl Drop for RawMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what was mapped; no borrow of it outlives `self`. Code
        // must no longer jump here: the owner unpatches first.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `mprotect` of the pages covering `[addr, addr + len)`.
pub fn mprotect(addr: u64, len: usize, prot: Prot) -> io::Result<()> {
    let page = crate::mmap::page_size() as u64;
    let start = addr & !(page - 1);
    let end = (addr + len as u64).div_ceil(page) * page;
    // SAFETY: changes protections only; memory Rust objects live in is never made
    // read-only or inaccessible by the callers (they pass code pages and their own
    // mappings).
    let r = unsafe { libc::mprotect(start as *mut libc::c_void, (end - start) as usize, prot.bits()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `bytes` over this process's code at `addr` (a patch, or the original bytes
/// back): the pages go read-write-exec for the copy (so other threads running other code
/// on them keep running), then back to `restore`.
///
/// The caller guarantees no thread executes the replaced bytes during the copy (it is not
/// atomic: a thread there could run a torn instruction). Nothing else is at stake: code
/// bytes are not Rust objects.
pub fn write_own_code(addr: u64, bytes: &[u8], restore: Prot) -> io::Result<()> {
    let p = NonNull::new(addr as *mut u8).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "NULL"))?;
    mprotect(addr, bytes.len(), Prot::ReadWriteExec)?;
    // SAFETY: the pages are mapped (mprotect succeeded on them) and writable; they hold
    // code, which no Rust reference covers.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.as_ptr(), bytes.len()) };
    mprotect(addr, bytes.len(), restore)
}

/// The vDSO's address in this process (`AT_SYSINFO_EHDR`), 0 if it has none.
pub fn vdso_base() -> u64 {
    // SAFETY: getauxval reads the auxiliary vector; no pointers involved.
    unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) }
}

/// Bytes of this process's memory at `addr` (the vDSO's image, a function's code), read
/// through `/proc/self/mem` so that an unmapped address is an error, not a fault.
pub fn read_own_memory(addr: u64, len: usize) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/mem")?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, addr)?;
    Ok(buf)
}

/// Calls the code at `addr` in this process as `extern "C" fn(u64 × 6) -> u64`: tests
/// run generated code (a trampoline's firing on a function of their own making) this
/// way.
///
/// The caller guarantees that `addr` is mapped executable and holds a function of that
/// signature that follows the System V ABI (callee-saved registers, stack, DF) and
/// writes no memory Rust objects live in.
pub fn call_code(addr: u64, args: [u64; 6]) -> u64 {
    assert_ne!(addr, 0, "call of NULL");
    type Func = extern "C" fn(u64, u64, u64, u64, u64, u64) -> u64;
    // SAFETY: a non-NULL address of code with this signature and ABI (the caller's
    // guarantee above); a function pointer has the size and representation of u64 here.
    let f: Func = unsafe { std::mem::transmute::<usize, Func>(addr as usize) };
    f(args[0], args[1], args[2], args[3], args[4], args[5])
}
