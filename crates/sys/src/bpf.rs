//! The `bpf(2)` commands udtrace uses. Each builds its part of `union bpf_attr` as a
//! zeroed byte array (the kernel rejects non-zero bytes past the fields it knows) and
//! returns the kernel's errno as an `io::Error`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Large enough for every command used here; the kernel checks that the bytes past the
/// fields of the command are zero, and they are.
const ATTR_SIZE: usize = 128;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_LINK_CREATE: libc::c_long = 28;

/// `enum bpf_attach_type` values used by udtrace.
pub const BPF_PERF_EVENT: u32 = 41;
pub const BPF_TRACE_UPROBE_MULTI: u32 = 48;

/// `flags` of a uprobe_multi link: the sites are return probes.
pub const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

/// The `bpf_attr` bytes of one command, 8-byte aligned as the kernel's union is.
#[repr(C, align(8))]
struct Attr([u8; ATTR_SIZE]);

impl Attr {
    fn new() -> Attr {
        Attr([0; ATTR_SIZE])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn bytes(&mut self, off: usize, v: &[u8]) -> &mut Self {
        self.0[off..off + v.len()].copy_from_slice(v);
        self
    }
}

fn ptr<T>(p: *const T) -> u64 {
    p as usize as u64
}

/// Runs one command; the attr's pointers must point at memory alive for the call.
fn sys_bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable, 8-aligned buffer of ATTR_SIZE bytes; every
    // pointer placed inside it by the callers of this module borrows memory that outlives
    // this call, with the length the kernel is told.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), ATTR_SIZE as libc::c_uint) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn sys_bpf_fd(cmd: libc::c_long, attr: &mut Attr) -> io::Result<OwnedFd> {
    let fd = sys_bpf(cmd, attr)? as RawFd;
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Object names are at most 15 bytes plus NUL; longer names are cut, not rejected.
fn obj_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let clean: Vec<u8> =
        name.bytes().filter(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.').take(15).collect();
    out[..clean.len()].copy_from_slice(&clean);
    out
}

/// What BPF_MAP_CREATE needs.
#[derive(Debug, Clone, Copy)]
pub struct MapSpec<'a> {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    pub name: &'a str,
}

pub fn map_create(spec: &MapSpec<'_>) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, spec.map_type)
        .u32(4, spec.key_size)
        .u32(8, spec.value_size)
        .u32(12, spec.max_entries)
        .u32(16, spec.flags)
        .bytes(28, &obj_name(spec.name));
    sys_bpf_fd(BPF_MAP_CREATE, &mut a)
}

/// Element commands share one layout: map_fd, key, value/next_key, flags.
fn elem_attr(map: BorrowedFd<'_>, key: *const u8, value: u64, flags: u64) -> Attr {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32).u64(8, ptr(key)).u64(16, value).u64(24, flags);
    a
}

/// The kernel reads exactly the map's key and value sizes; the callers (typed maps)
/// pass slices of those sizes, and a wrong size is refused here rather than read past.
fn check_len(what: &str, got: usize, want: usize) -> io::Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{what} is {got} bytes, the map wants {want}")))
    }
}

pub fn map_update_elem(
    map: BorrowedFd<'_>,
    key: &[u8],
    key_size: usize,
    value: &[u8],
    value_size: usize,
    flags: u64,
) -> io::Result<()> {
    check_len("key", key.len(), key_size)?;
    check_len("value", value.len(), value_size)?;
    let mut a = elem_attr(map, key.as_ptr(), ptr(value.as_ptr()), flags);
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// Fills `value`; ENOENT when the key is absent.
pub fn map_lookup_elem(
    map: BorrowedFd<'_>,
    key: &[u8],
    key_size: usize,
    value: &mut [u8],
    value_size: usize,
) -> io::Result<()> {
    check_len("key", key.len(), key_size)?;
    check_len("value", value.len(), value_size)?;
    let mut a = elem_attr(map, key.as_ptr(), ptr(value.as_mut_ptr()), 0);
    sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(drop)
}

pub fn map_delete_elem(map: BorrowedFd<'_>, key: &[u8], key_size: usize) -> io::Result<()> {
    check_len("key", key.len(), key_size)?;
    let mut a = elem_attr(map, key.as_ptr(), 0, 0);
    sys_bpf(BPF_MAP_DELETE_ELEM, &mut a).map(drop)
}

/// The key after `key` (the first key when `key` is None) into `next`; ENOENT after
/// the last.
pub fn map_get_next_key(map: BorrowedFd<'_>, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<()> {
    if let Some(k) = key {
        check_len("key", k.len(), next.len())?;
    }
    let mut a = elem_attr(map, key.map_or(std::ptr::null(), |k| k.as_ptr()), ptr(next.as_mut_ptr()), 0);
    sys_bpf(BPF_MAP_GET_NEXT_KEY, &mut a).map(drop)
}

/// What BPF_PROG_LOAD needs. `insns` is the encoded program, 8 bytes per slot.
pub struct ProgSpec<'a> {
    pub prog_type: u32,
    pub expected_attach_type: u32,
    pub insns: &'a [u8],
    pub license: &'a CStr,
    pub name: &'a str,
    /// 0 = no log; 1 or 2 = the verifier writes its log into `log`.
    pub log_level: u32,
    pub log: &'a mut [u8],
    /// `prog_flags` (BPF_F_SLEEPABLE, …).
    pub flags: u32,
}

pub fn prog_load(spec: &mut ProgSpec<'_>) -> io::Result<OwnedFd> {
    if !spec.insns.len().is_multiple_of(8) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "program length is not a multiple of 8 bytes"));
    }
    let mut a = Attr::new();
    a.u32(0, spec.prog_type)
        .u32(4, (spec.insns.len() / 8) as u32)
        .u64(8, ptr(spec.insns.as_ptr()))
        .u64(16, ptr(spec.license.as_ptr()))
        .u32(44, spec.flags)
        .bytes(48, &obj_name(spec.name))
        .u32(68, spec.expected_attach_type);
    if spec.log_level > 0 && !spec.log.is_empty() {
        let size = spec.log.len().min(u32::MAX as usize) as u32;
        a.u32(24, spec.log_level).u32(28, size).u64(32, ptr(spec.log.as_mut_ptr()));
    }
    sys_bpf_fd(BPF_PROG_LOAD, &mut a)
}

/// BPF_PROG_TEST_RUN of a program that takes a context (a raw tracepoint's
/// arguments): runs it once on this thread with `ctx` as its context; its return value.
pub fn prog_test_run_ctx(prog: BorrowedFd<'_>, ctx: &[u8]) -> io::Result<u32> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32).u32(40, ctx.len() as u32).u64(48, ptr(ctx.as_ptr()));
    sys_bpf(BPF_PROG_TEST_RUN, &mut a)?;
    Ok(u32::from_ne_bytes([a.0[4], a.0[5], a.0[6], a.0[7]]))
}

/// LINK_CREATE of a program on a perf event (a uprobe or a tracepoint), with the cookie
/// `bpf_get_attach_cookie` returns.
pub fn link_create_perf_event(prog: BorrowedFd<'_>, perf_event: BorrowedFd<'_>, cookie: u64) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32).u32(4, perf_event.as_raw_fd() as u32).u32(8, BPF_PERF_EVENT).u64(16, cookie);
    sys_bpf_fd(BPF_LINK_CREATE, &mut a)
}

/// LINK_CREATE of a uprobe_multi link: one file, many offsets, one cookie each, and
/// optionally one reference counter (a USDT semaphore's file offset, 0 for none) each.
/// `pid` 0 means every process.
pub fn link_create_uprobe_multi(
    prog: BorrowedFd<'_>,
    path: &CStr,
    offsets: &[u64],
    ref_ctr_offsets: Option<&[u64]>,
    cookies: &[u64],
    flags: u32,
    pid: u32,
) -> io::Result<OwnedFd> {
    if offsets.len() != cookies.len() || offsets.is_empty() || ref_ctr_offsets.is_some_and(|r| r.len() != offsets.len())
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "uprobe_multi needs one cookie per offset and at least one offset",
        ));
    }
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, BPF_TRACE_UPROBE_MULTI)
        .u64(16, ptr(path.as_ptr()))
        .u64(24, ptr(offsets.as_ptr()))
        .u64(32, ref_ctr_offsets.map_or(0, |r| ptr(r.as_ptr())))
        .u64(40, ptr(cookies.as_ptr()))
        .u32(48, offsets.len() as u32)
        .u32(52, flags)
        .u32(56, pid);
    sys_bpf_fd(BPF_LINK_CREATE, &mut a)
}

/// BPF_RAW_TRACEPOINT_OPEN: a RAW_TRACEPOINT program on the kernel tracepoint `name`
/// (`sched_process_fork`); the program sees the tracepoint's own arguments.
pub fn raw_tracepoint_open(prog: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u64(0, ptr(name.as_ptr())).u32(8, prog.as_raw_fd() as u32);
    sys_bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_and_cleaned() {
        assert_eq!(&obj_name("udtrace-ring_buffer_long")[..15], b"udtracering_buf");
        assert_eq!(obj_name("x")[1], 0);
    }

    #[test]
    fn wrong_key_size_is_refused_before_the_kernel() {
        let devnull = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        let e = map_delete_elem(devnull.as_fd(), &[1, 2, 3], 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
