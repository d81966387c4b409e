//! `perf_event_open(2)` for the events udtrace attaches BPF programs to (uprobes on the
//! uprobe PMU, kernel tracepoints, CPU clocks) and the two ioctls that arm a program on
//! them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Missing from the libc crate.
pub const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// PERF_ATTR_SIZE_VER8: every field up to `config3`.
const ATTR_SIZE: usize = 136;

#[repr(C, align(8))]
struct Attr([u8; ATTR_SIZE]);

impl Attr {
    fn new(ty: u32) -> Attr {
        let mut a = Attr([0; ATTR_SIZE]);
        a.u32(0, ty).u32(4, ATTR_SIZE as u32);
        a
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

// Field offsets in `struct perf_event_attr`.
const CONFIG: usize = 8;
const SAMPLE_PERIOD: usize = 16;
/// The bit fields after `read_format`: bit 0 `disabled`.
const FLAGS: usize = 40;
const CONFIG1: usize = 56;
const CONFIG2: usize = 64;

fn open(attr: &Attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares; any pointer in it
    // (a uprobe's path) borrows memory the caller keeps alive across this call.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, attr.0.as_ptr(), pid, cpu, -1 as libc::c_int, PERF_FLAG_FD_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A uprobe (or uretprobe) at a file offset of `path`. `pid -1, cpu 0` watches every
/// process; `pid N, cpu -1` one process.
pub fn open_uprobe(
    pmu_type: u32,
    path: &CStr,
    file_offset: u64,
    retprobe: bool,
    pid: i32,
    cpu: i32,
) -> io::Result<OwnedFd> {
    let mut a = Attr::new(pmu_type);
    a.u64(CONFIG, retprobe as u64)
        .u64(CONFIG1, path.as_ptr() as usize as u64)
        .u64(CONFIG2, file_offset)
        .u64(SAMPLE_PERIOD, 1);
    open(&a, pid, cpu)
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

/// The CPU clock of CPU `cpu`, every process: an overflow every `period_ns` of time
/// that CPU runs, taken in the context of the thread it interrupts (the `profile-N`
/// probes). Opened disabled: [`enable`] starts it once its program is set.
pub fn open_cpu_clock(period_ns: u64, cpu: i32) -> io::Result<OwnedFd> {
    let mut a = Attr::new(PERF_TYPE_SOFTWARE);
    a.u64(CONFIG, PERF_COUNT_SW_CPU_CLOCK).u64(SAMPLE_PERIOD, period_ns.max(1)).u64(FLAGS, 1); // disabled
    open(&a, -1, cpu)
}

/// A kernel tracepoint by its tracefs id, for every process (`pid -1, cpu 0`).
pub fn open_tracepoint(id: u64, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut a = Attr::new(PERF_TYPE_TRACEPOINT);
    a.u64(CONFIG, id).u64(SAMPLE_PERIOD, 1);
    open(&a, pid, cpu)
}

fn ioctl(fd: BorrowedFd<'_>, req: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: both requests take an integer argument, not a pointer.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// PERF_EVENT_IOC_SET_BPF: the older attach path (no cookie), for kernels without perf links.
pub fn set_bpf(event: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    ioctl(event, PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd() as libc::c_ulong)
}

pub fn enable(event: BorrowedFd<'_>) -> io::Result<()> {
    ioctl(event, PERF_EVENT_IOC_ENABLE, 0)
}
