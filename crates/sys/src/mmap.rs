//! A shared mapping of a file descriptor (the BPF ring buffer), unmapped on drop, with
//! the acquire/release accesses the ring's positions and record headers need.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// The mapping is plain shared memory; moving its owner between threads is fine.
// SAFETY: Mmap hands out only atomics and shared slices; no thread-affine state.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` at `offset`, shared, read-only or read-write.
    pub fn map(fd: BorrowedFd<'_>, len: usize, offset: u64, writable: bool) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh mapping at an address the kernel chooses; it aliases no Rust
        // object.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), offset as libc::off_t)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len, writable })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bounds and alignment are checked; a bad offset is a bug of the caller.
    #[inline]
    fn at(&self, off: usize, size: usize) -> *mut u8 {
        assert!(
            off.checked_add(size).is_some_and(|end| end <= self.len) && off.is_multiple_of(size),
            "bad ring offset {off}"
        );
        // SAFETY: in bounds, checked above.
        unsafe { self.ptr.as_ptr().add(off) }
    }

    #[inline]
    pub fn load_acquire_u64(&self, off: usize) -> u64 {
        // SAFETY: aligned, in bounds and mapped for as long as `self`; the kernel only
        // writes it atomically.
        unsafe { AtomicU64::from_ptr(self.at(off, 8).cast()) }.load(Ordering::Acquire)
    }

    pub fn load_acquire_u32(&self, off: usize) -> u32 {
        // SAFETY: as for load_acquire_u64.
        unsafe { AtomicU32::from_ptr(self.at(off, 4).cast()) }.load(Ordering::Acquire)
    }

    /// Only for a writable mapping (the consumer page); a read-only one faults, so it
    /// is refused.
    #[inline]
    pub fn store_release_u64(&self, off: usize, v: u64) {
        assert!(self.writable, "store to a read-only mapping");
        // SAFETY: as for load_acquire_u64, and the mapping is writable (checked above).
        unsafe { AtomicU64::from_ptr(self.at(off, 8).cast()) }.store(v, Ordering::Release)
    }

    /// Atomically adds `v` to the word at `off` of a writable mapping (shared with
    /// other processes that update it with `lock`ed instructions); returns the word
    /// before.
    pub fn fetch_add_u64(&self, off: usize, v: u64) -> u64 {
        assert!(self.writable, "update of a read-only mapping");
        // SAFETY: aligned and in bounds (checked by `at`) of a writable mapping that
        // lives as long as `self`; other writers use atomic instructions too, and no
        // Rust reference covers the word.
        unsafe { AtomicU64::from_ptr(self.at(off, 8).cast()) }.fetch_add(v, Ordering::AcqRel)
    }

    /// Atomically stores `new` at `off` if the word is `old`; returns the word before.
    pub fn cmpxchg_u64(&self, off: usize, old: u64, new: u64) -> u64 {
        assert!(self.writable, "update of a read-only mapping");
        // SAFETY: as for fetch_add_u64.
        let word = unsafe { AtomicU64::from_ptr(self.at(off, 8).cast()) };
        match word.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        }
    }

    /// Copies `data` into a writable mapping at `off` (a shared region another process
    /// also maps: trampoline code, ring records). A read-only mapping or a range out of
    /// bounds is refused, not a fault.
    pub fn write_bytes(&self, off: usize, data: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "write to a read-only mapping"));
        }
        if off.checked_add(data.len()).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "write out of the mapping's bounds"));
        }
        // SAFETY: in bounds (checked above) of a writable mapping that lives as long as
        // `self`; `data` is a Rust slice, which cannot overlap memory this mapping owns
        // mutably (nothing hands out `&mut` into it).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len()) };
        Ok(())
    }

    /// Bytes of the mapping. For the ring buffer these are bytes of a committed record,
    /// which the kernel does not touch until the consumer position moves past them.
    #[inline]
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len), "bad ring range {off}+{len}");
        // SAFETY: in bounds of a mapping that lives as long as the returned borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; no borrow of it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A private, read-only mapping of a whole file that nothing writes while it is mapped
/// (the kernel's BTF in sysfs, kernel memory that never changes), read as bytes.
#[derive(Debug)]
pub struct FileMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the bytes are never written (read-only mapping of an unchanging file), so
// sharing or moving them between threads is as for `&[u8]`.
unsafe impl Send for FileMap {}
// SAFETY: as for Send.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps the first `len` bytes of `fd`, private and read-only. Files that cannot be
    /// mapped (a sysfs file of an older kernel) fail here; the caller reads them instead.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<FileMap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses; it aliases no Rust
        // object.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(FileMap { ptr, len })
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the whole mapping, which lives as long as the borrow and is never
        // written (read-only, of a file nothing writes).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; no borrow of it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Waits until `fd` is readable or `timeout_ms` passes (-1 = forever). Ok(false) on
/// timeout or interruption by a signal.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, its count is 1.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
    }
    Ok(r > 0 && p.revents & libc::POLLIN != 0)
}
