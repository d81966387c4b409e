//! The slow path, for sites that cannot be patched when there is no BPF to fall back
//! on: an `int3` at the site. udtrace hears of each hit through ptrace (the thread stops
//! with SIGTRAP), writes the firing's record itself from the stopped thread (the same
//! bytes a trampoline or a BPF program writes), and sends the thread on through an
//! out-of-line copy of the instruction, so the breakpoint stays in place for every
//! other thread. (The dynamic loader's hook is watched with a debug register instead:
//! see `udtrace_process::watch`.)

use nix::libc::user_regs_struct;

use udtrace_process::procfs;
use udtrace_record::pid::{
    RecordLayout, RecordPlan, FLAG_STACK_TRUNCATED, NUM_REGS, OFF_COOKIE, OFF_CPU, OFF_ERRNO, OFF_FLAGS, OFF_KTIME,
    OFF_PID_TGID, OFF_REGS, OFF_STACK_LEN,
};

/// One breakpoint: its site's cookie, the byte it replaced, where its out-of-line copy
/// runs.
#[derive(Debug, Clone)]
pub struct Breakpoint {
    pub cookie: u64,
    pub original: u8,
    pub copy: u64,
}

const EFAULT: i32 = 14;

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// The registers in `struct pt_regs` order (the record's), `orig_ax` as a trampoline
/// writes it.
fn pt_regs(r: &user_regs_struct) -> [u64; NUM_REGS] {
    [
        r.r15,
        r.r14,
        r.r13,
        r.r12,
        r.rbp,
        r.rbx,
        r.r11,
        r.r10,
        r.r9,
        r.r8,
        r.rax,
        r.rcx,
        r.rdx,
        r.rsi,
        r.rdi,
        u64::MAX,
        r.rip,
        r.cs,
        r.eflags,
        r.rsp,
        r.ss,
    ]
}

/// CLOCK_MONOTONIC in ns, the clock of every record.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| (t.tv_sec() as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec() as u64))
}

/// The CPU thread `tid` last ran on (`stat` field 39, "processor").
fn cpu_of(pid: i32, tid: i32) -> u32 {
    procfs::task_stat(pid, tid).ok().and_then(|(_, f)| f.get(36)?.parse().ok()).unwrap_or(0)
}

/// The firing's record, as a trampoline would have written it, from the thread `tid`
/// of `pid` stopped at the site (`regs`, with `rip` at the site). `errno`: the thread's,
/// where it is known.
pub fn record(
    layout: &RecordLayout,
    plan: &RecordPlan,
    cookie: u64,
    pid: i32,
    tid: i32,
    regs: &user_regs_struct,
    errno: Option<i32>,
) -> Vec<u8> {
    let mut b = vec![0u8; layout.size];
    put_u64(&mut b, OFF_COOKIE, cookie);
    put_u64(&mut b, OFF_PID_TGID, (pid as u64) << 32 | u64::from(tid as u32));
    put_u64(&mut b, OFF_KTIME, monotonic_ns());
    put_u32(&mut b, OFF_CPU, cpu_of(pid, tid));
    if layout.regs {
        for (i, v) in pt_regs(regs).iter().enumerate() {
            put_u64(&mut b, OFF_REGS + 8 * i, *v);
        }
    }
    if layout.stack_bytes > 0 {
        // Read up to the first unmapped page, as the BPF program's halving reads do.
        let want = layout.stack_bytes as usize;
        let got = procfs::read_memory(pid, regs.rsp, want).unwrap_or_default();
        let n = got.len() / 8 * 8;
        b[layout.off_stack..layout.off_stack + n].copy_from_slice(&got[..n]);
        put_u32(&mut b, OFF_STACK_LEN, n as u32);
        if n < want {
            put_u32(&mut b, OFF_FLAGS, FLAG_STACK_TRUNCATED);
        }
    }
    for (&(off, max), cap) in layout.strings.iter().zip(&plan.strings) {
        let addr = pt_regs(regs)[cap.reg as usize];
        let got = if addr == 0 { Vec::new() } else { procfs::read_memory(pid, addr, max as usize).unwrap_or_default() };
        // bpf_probe_read_user_str: the length with its NUL, the string cut at max - 1,
        // or -EFAULT when no NUL was readable.
        let result = match got.iter().position(|&c| c == 0) {
            Some(nul) => {
                b[off + 8..off + 8 + nul].copy_from_slice(&got[..nul]);
                nul as i32 + 1
            }
            None if got.len() == max as usize => {
                let keep = max as usize - 1;
                b[off + 8..off + 8 + keep].copy_from_slice(&got[..keep]);
                max as i32
            }
            None => -EFAULT,
        };
        put_u32(&mut b, off, result as u32);
    }
    for (&(off, size), cap) in layout.buffers.iter().zip(&plan.buffers) {
        let addr = pt_regs(regs)[cap.reg as usize];
        // As a trampoline's read: the bytes up to the first unreadable page, or -EFAULT
        // when none is readable.
        let got =
            if addr == 0 { Vec::new() } else { procfs::read_memory(pid, addr, size as usize).unwrap_or_default() };
        let result = if got.is_empty() { -EFAULT } else { got.len() as i32 };
        b[off + 8..off + 8 + got.len()].copy_from_slice(&got);
        put_u32(&mut b, off, result as u32);
    }
    if layout.errno {
        put_u32(&mut b, OFF_ERRNO, errno.unwrap_or(0) as u32);
    }
    b
}
