//! The slow path, for sites that cannot be patched when there is no BPF to fall back
//! on: an `int3` at the site. udtrace hears of each hit through ptrace (the thread stops
//! with SIGTRAP), writes the firing's record itself from the stopped thread (the same
//! bytes a trampoline or a BPF program writes), and sends the thread on through an
//! out-of-line copy of the instruction, so the breakpoint stays in place for every
//! other thread. (The dynamic loader's hook is watched with a debug register instead:
//! see `udtrace_process::watch`.)

use nix::libc::user_regs_struct;

use udtrace_inproc::trampoline::stash_entry;
use udtrace_process::procfs;
use udtrace_record::pid::{
    op_chain, op_read, op_write, ChainOp, PtReg, RecordLayout, RecordPlan, FLAG_STACK_TRUNCATED, NUM_REGS, OFF_COOKIE,
    OFF_CPU, OFF_ERRNO, OFF_FLAGS, OFF_KTIME, OFF_PID_TGID, OFF_STACK_LEN,
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
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| (t.tv_sec() as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec() as u64))
}

/// The CPU thread `tid` last ran on (`stat` field 39, "processor").
pub(crate) fn cpu_of(pid: i32, tid: i32) -> u32 {
    procfs::task_stat(pid, tid).ok().and_then(|(_, f)| f.get(36)?.parse().ok()).unwrap_or(0)
}

/// The site that fired: its cookie, its stash ops, and the process's data page (where
/// the stash table is).
#[derive(Debug, Clone, Copy)]
pub struct Fired {
    pub cookie: u64,
    pub stash_ops: u64,
    pub data_page: u64,
}

/// The firing's record, as a trampoline would have written it, from the thread `tid`
/// of `pid` stopped at the site (`regs`, with `rip` at the site). `errno`: the thread's,
/// where it is known.
pub fn record(
    layout: &RecordLayout,
    plan: &RecordPlan,
    site: Fired,
    pid: i32,
    tid: i32,
    regs: &user_regs_struct,
    errno: Option<i32>,
) -> Vec<u8> {
    let Fired { cookie, stash_ops, data_page } = site;
    let mut b = vec![0u8; layout.size];
    put_u64(&mut b, OFF_COOKIE, cookie);
    put_u64(&mut b, OFF_PID_TGID, (pid as u64) << 32 | u64::from(tid as u32));
    put_u64(&mut b, OFF_KTIME, monotonic_ns());
    put_u32(&mut b, OFF_CPU, cpu_of(pid, tid));
    let all = pt_regs(regs);
    for (at, r) in layout.recorded_regs() {
        put_u64(&mut b, at, all[r as usize]);
    }
    if layout.stack_bytes > 0 {
        // Read up to the first unreadable page, as trampolines and BPF programs do.
        let want = layout.stack_bytes as usize;
        let got = procfs::read_memory(pid, regs.rsp, want).unwrap_or_default();
        let n = got.len() / 8 * 8;
        b[layout.off_stack..layout.off_stack + n].copy_from_slice(&got[..n]);
        put_u32(&mut b, OFF_STACK_LEN, n as u32);
        if n < want {
            put_u32(&mut b, OFF_FLAGS, FLAG_STACK_TRUNCATED);
        }
    }
    // A USDT argument the site does not have in a register: not captured (result 0).
    for (&(off, max), cap) in layout.strings.iter().zip(&plan.strings).filter(|(_, c)| !c.per_site) {
        read_string(&mut b, pid, pt_regs(regs)[cap.reg as usize], off, max);
    }
    for (&(off, size), cap) in layout.buffers.iter().zip(&plan.buffers) {
        read_buffer(&mut b, pid, pt_regs(regs)[cap.reg as usize], off, size);
    }
    if let Some(base) = layout.off_snapshot {
        // As a trampoline does: credentials, parent and argument strings as they are
        // now, the thread stopped at the site.
        use udtrace_record::proc::{
            PSARGS_SIZE, SNAP_ARGS, SNAP_CRED, SNAP_PGID, SNAP_PPID, SNAP_PSARGS, SNAP_SID, SNAP_TASK,
        };
        put_u64(&mut b, base + SNAP_TASK, udtrace_record::pid::OWN_TASK);
        let ids = |key| procfs::status_numbers(pid, key).unwrap_or_default();
        // /proc's real, effective, saved; the record's uid gid suid sgid euid egid.
        for (i, key) in ["Uid:", "Gid:"].into_iter().enumerate() {
            let v = ids(key);
            for (j, at) in [0, 4, 2].into_iter().enumerate() {
                put_u32(&mut b, base + SNAP_CRED + 4 * (at + i), v.get(j).copied().unwrap_or(0) as u32);
            }
        }
        // stat's fields after comm: 1 ppid, 2 pgrp, 3 session.
        let stat = procfs::task_stat(pid, pid).map(|(_, f)| f).unwrap_or_default();
        for (i, at) in [(1, SNAP_PPID), (2, SNAP_PGID), (3, SNAP_SID)] {
            put_u32(&mut b, base + at, stat.get(i).and_then(|v| v.parse().ok()).unwrap_or(0));
        }
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let n = args.len().min(PSARGS_SIZE);
        b[base + SNAP_PSARGS..base + SNAP_PSARGS + n].copy_from_slice(&args[..n]);
        put_u32(&mut b, base + SNAP_ARGS, n as u32);
    }
    if stash_ops != 0 && !plan.stash.is_empty() {
        do_stash(&mut b, layout, plan, pid, tid, regs, stash_ops, data_page);
    }
    if layout.errno {
        put_u32(&mut b, OFF_ERRNO, errno.unwrap_or(0) as u32);
    }
    b
}

/// The string at `addr` into the string slot at `off`, as `bpf_probe_read_user_str`:
/// the length with its NUL, the string cut at max - 1, or -EFAULT when no NUL was
/// readable.
fn read_string(b: &mut [u8], pid: i32, addr: u64, off: usize, max: u32) {
    let got = if addr == 0 { Vec::new() } else { procfs::read_memory(pid, addr, max as usize).unwrap_or_default() };
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
    put_u32(b, off, result as u32);
}

/// `size` bytes at `addr` into the buffer slot at `off`, as a trampoline's read: the
/// bytes up to the first unreadable page, or -EFAULT when none is readable.
fn read_buffer(b: &mut [u8], pid: i32, addr: u64, off: usize, size: u32) {
    let got = if addr == 0 { Vec::new() } else { procfs::read_memory(pid, addr, size as usize).unwrap_or_default() };
    let result = if got.is_empty() { -EFAULT } else { got.len() as i32 };
    b[off + 8..off + 8 + got.len()].copy_from_slice(&got);
    put_u32(b, off, result as u32);
}

/// The site's stash ops, on the table the trampolines use (in the data page at
/// `data_page`), as a trampoline does them (see `udtrace_inproc::trampoline`).
#[allow(clippy::too_many_arguments)]
fn do_stash(
    b: &mut [u8],
    layout: &RecordLayout,
    plan: &RecordPlan,
    pid: i32,
    tid: i32,
    regs: &user_regs_struct,
    ops: u64,
    data_page: u64,
) {
    let slots = layout.stash_slots;
    let entry = stash_entry(data_page, slots, tid as u32);
    let len = 8 + 8 * usize::from(slots);
    let mut e = procfs::read_memory(pid, entry, len).unwrap_or_default();
    if e.len() != len {
        return;
    }
    let writes: Vec<(u8, PtReg)> =
        plan.stash.writes.iter().enumerate().filter(|&(i, _)| ops & op_write(i) != 0).map(|(_, &w)| w).collect();
    if !writes.is_empty() {
        e[..4].copy_from_slice(&(tid as u32).to_ne_bytes());
        for (v, reg) in writes {
            let at = 8 + 8 * usize::from(v);
            e[at..at + 8].copy_from_slice(&pt_regs(regs)[reg as usize].to_ne_bytes());
        }
        if let Ok(m) = crate::process::mem(pid) {
            use std::os::unix::fs::FileExt;
            let _ = m.write_all_at(&e, entry);
        }
    }
    let word = |e: &[u8], at: usize| u64::from_ne_bytes(e[at..at + 8].try_into().expect("8 bytes"));
    let reads = |v: u8| ops & op_read(usize::from(v)) != 0;
    if e[..4] == (tid as u32).to_ne_bytes() {
        for v in (0..slots).filter(|&v| reads(v)) {
            put_u64(b, layout.off_stash + 8 * usize::from(v), word(&e, 8 + 8 * usize::from(v)));
        }
    }
    let val = |b: &[u8], v: u8| word(b, layout.off_stash + 8 * usize::from(v));
    for &(off, max, v) in layout.stash_strings.iter().filter(|c| reads(c.2)) {
        let addr = val(b, v);
        if addr != 0 {
            read_string(b, pid, addr, off, max);
        }
    }
    for &(off, size, v) in layout.stash_buffers.iter().filter(|c| reads(c.2)) {
        let addr = val(b, v);
        if addr != 0 {
            read_buffer(b, pid, addr, off, size);
        }
    }
    for (k, chain) in plan.stash.chains.iter().enumerate() {
        if ops & op_chain(k) != 0 {
            run_chain(b, layout, chain, pid, regs);
        }
    }
}

/// A chain (`udtrace_record::pid::ChainOp`), as a trampoline runs it.
fn run_chain(b: &mut [u8], layout: &RecordLayout, chain: &[ChainOp], pid: i32, regs: &user_regs_struct) {
    let word = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let mut stack: Vec<u64> = Vec::new();
    for op in chain {
        let top = stack.last().copied().unwrap_or(0);
        match *op {
            ChainOp::Const(n) => stack.push(n),
            ChainOp::Arg(r) => stack.push(pt_regs(regs)[r as usize]),
            ChainOp::Slot(v) => stack.push(word(b, layout.off_stash + 8 * usize::from(v))),
            ChainOp::Bin(op) => {
                let (Some(y), Some(x)) = (stack.pop(), stack.pop()) else { return };
                stack.push(op.apply(x, y));
            }
            ChainOp::Copyin { cap } => {
                let Some(&(off, c)) = layout.chain_caps.get(usize::from(cap)) else { return };
                put_u64(b, off, top);
                read_buffer(b, pid, top, off + 8, c.bytes());
                if word(b, off + 8) as u32 != c.bytes() {
                    return;
                }
            }
            ChainOp::CopyinUpto { cap } => {
                let Some(&(off, c)) = layout.chain_caps.get(usize::from(cap)) else { return };
                let n = stack.pop().unwrap_or(0).min(u64::from(c.bytes())) as u32;
                let addr = stack.last().copied().unwrap_or(0);
                put_u64(b, off, addr);
                if n > 0 {
                    read_buffer(b, pid, addr, off + 8, n);
                } else {
                    put_u32(b, off + 8, 0);
                }
                if (word(b, off + 8) as u32 as i32) < 0 {
                    return;
                }
            }
            ChainOp::Field { cap, off: at, size, signed } => {
                let Some(&(off, _)) = layout.chain_caps.get(usize::from(cap)) else { return };
                let (at, n) = (off + 16 + at as usize, usize::from(size.min(8)));
                let mut w = [0u8; 8];
                w[..n].copy_from_slice(&b[at..at + n]);
                let raw = u64::from_ne_bytes(w);
                let shift = 64 - 8 * u32::from(size.min(8));
                stack.push(if signed && size < 8 { (((raw << shift) as i64) >> shift) as u64 } else { raw });
            }
            ChainOp::Drop => {
                stack.pop();
            }
            ChainOp::Str { cap } => {
                let Some(&(off, c)) = layout.chain_caps.get(usize::from(cap)) else { return };
                let addr = stack.pop().unwrap_or(0);
                put_u64(b, off, addr);
                if addr != 0 {
                    read_string(b, pid, addr, off + 8, c.bytes());
                }
            }
        }
    }
}
