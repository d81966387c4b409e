//! Uprobes on this test binary's own functions, through the generated program, both
//! attachment ways, read back through the ring buffer.

mod common;

use std::hint::black_box;
use std::time::Duration;

use std::sync::atomic::AtomicU8;
use udtrace_bpf::codegen::{uprobe_program, uprobe_program_for, Filter, ProbeMaps};
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::ringbuf::RingBufReader;
use udtrace_bpf::uprobe::{self, Site};

use udtrace_record::pid::{BufferCapture, PtReg, RecordLayout, RecordPlan, StringCapture};

#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_test_target(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_add(black_box(b))
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_test_multi_a(a: u64) -> u64 {
    black_box(a) ^ 1
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_test_multi_b(a: u64) -> u64 {
    black_box(a) ^ 2
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_test_multi_c(a: u64) -> u64 {
    black_box(a) ^ 3
}

/// Takes the string's address as an integer so that any value, even 0, can be passed.
#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_test_str(s: u64, n: u64) -> u64 {
    black_box(s).wrapping_add(black_box(n))
}

fn our_tgid() -> u32 {
    std::process::id()
}

/// Generates and loads the program for `plan` and `kind`.
fn load(plan: &RecordPlan, maps: &ProbeMaps, kind: ProgramKind) -> Program {
    let insns = uprobe_program(plan, maps).expect("codegen");
    Program::load(kind, "udtrace_test", &insns).unwrap_or_else(|e| panic!("{e}"))
}

/// Generates the program for `plan` (traced processes) and loads it, sleepable or not.
fn load_traced(plan: &RecordPlan, maps: &ProbeMaps, sleepable: bool) -> Program {
    let insns = uprobe_program_for(plan, maps, Filter::Traced, sleepable).expect("codegen");
    if sleepable {
        Program::load_sleepable(ProgramKind::UprobeMulti, "udtrace_test", &insns)
    } else {
        Program::load(ProgramKind::UprobeMulti, "udtrace_test", &insns)
    }
    .unwrap_or_else(|e| panic!("sleepable {sleepable}: {e}"))
}

/// Drains every record already in the ring.
fn drain(maps: &ProbeMaps) -> Vec<Vec<u8>> {
    let mut reader = RingBufReader::new(maps.ring().unwrap()).expect("map ring");
    let mut out = Vec::new();
    reader.poll(Some(Duration::from_millis(10))).expect("poll");
    reader.consume(|r| out.push(r.to_vec()));
    out
}

fn check_target_firings(kind: ProgramKind) {
    const N: u64 = 1000;
    let maps = ProbeMaps::create(1 << 20, 64).unwrap();
    maps.traced.insert(&our_tgid(), &1).unwrap();
    let plan = RecordPlan { regs: true, ..RecordPlan::default() };
    let layout = RecordLayout::new(&plan).unwrap();
    let prog = load(&plan, &maps, kind);
    let (exe, off) = common::own_function("udtrace_test_target");
    let site = [Site { offset: off, cookie: 7, ref_ctr: 0 }];
    let _attached: Box<dyn std::any::Any> = match kind {
        ProgramKind::UprobeMulti => Box::new(uprobe::attach_multi(&prog, &exe, &site, false).unwrap()),
        _ => Box::new(uprobe::attach_perf(&prog, &exe, &site).unwrap()),
    };
    for i in 0..N {
        udtrace_test_target(i, 2 * i);
    }
    let recs = drain(&maps);
    assert_eq!(recs.len() as u64, N);
    let mut last_ktime = 0;
    for (i, r) in recs.iter().enumerate() {
        let f = layout.parse(r).unwrap();
        let i = i as u64;
        assert_eq!(f.cookie, 7);
        assert_eq!(f.pid, our_tgid());
        assert_eq!(f.reg(PtReg::Di), i, "firing {i} in order");
        assert_eq!(f.reg(PtReg::Si), 2 * i);
        assert!(f.ktime >= last_ktime);
        last_ktime = f.ktime;
        assert!(f.stack.is_empty());
    }
    assert_eq!(maps.drops.sum(0).unwrap(), 0);
}

#[test]
fn every_call_fires_once_in_order_uprobe_multi() {
    if !common::bpf_available("uprobe_multi firing") {
        return;
    }
    let _g = common::serial();
    check_target_firings(ProgramKind::UprobeMulti);
}

#[test]
fn every_call_fires_once_in_order_perf_event() {
    if !common::bpf_available("perf uprobe firing") {
        return;
    }
    let _g = common::serial();
    check_target_firings(ProgramKind::Uprobe);
}

#[test]
fn untraced_process_records_nothing() {
    if !common::bpf_available("untraced process") {
        return;
    }
    let _g = common::serial();
    let maps = ProbeMaps::create(1 << 16, 64).unwrap();
    // Some other tgid is traced, not ours.
    maps.traced.insert(&1, &1).unwrap();
    let prog = load(&RecordPlan { regs: true, ..RecordPlan::default() }, &maps, ProgramKind::UprobeMulti);
    let (exe, off) = common::own_function("udtrace_test_target");
    let _l = uprobe::attach_multi(&prog, &exe, &[Site { offset: off, cookie: 7, ref_ctr: 0 }], false).unwrap();
    for i in 0..100 {
        udtrace_test_target(i, i);
    }
    assert!(drain(&maps).is_empty());
    assert_eq!(maps.drops.sum(0).unwrap(), 0);
}

#[test]
fn multi_link_sites_carry_their_cookies() {
    if !common::bpf_available("uprobe_multi cookies") {
        return;
    }
    let _g = common::serial();
    let maps = ProbeMaps::create(1 << 16, 64).unwrap();
    maps.traced.insert(&our_tgid(), &1).unwrap();
    let plan = RecordPlan { regs: true, ..RecordPlan::default() };
    let layout = RecordLayout::new(&plan).unwrap();
    let prog = load(&plan, &maps, ProgramKind::UprobeMulti);
    let (exe, a) = common::own_function("udtrace_test_multi_a");
    let (_, b) = common::own_function("udtrace_test_multi_b");
    let (_, c) = common::own_function("udtrace_test_multi_c");
    let sites = [
        Site { offset: a, cookie: 100, ref_ctr: 0 },
        Site { offset: b, cookie: 200, ref_ctr: 0 },
        Site { offset: c, cookie: 300, ref_ctr: 0 },
    ];
    let link = uprobe::attach_multi(&prog, &exe, &sites, false).unwrap();
    let mut expect = Vec::new();
    for i in 0..10u64 {
        udtrace_test_multi_a(i);
        expect.push((100, i));
        if i % 2 == 0 {
            udtrace_test_multi_b(i);
            expect.push((200, i));
        }
        if i % 5 == 0 {
            udtrace_test_multi_c(i);
            expect.push((300, i));
        }
    }
    drop(link);
    // Detached: no more firings.
    udtrace_test_multi_a(99);
    let got: Vec<(u64, u64)> =
        drain(&maps).iter().map(|r| layout.parse(r).unwrap()).map(|f| (f.cookie, f.reg(PtReg::Di))).collect();
    assert_eq!(got, expect);
}

#[test]
fn strings_and_stack_are_captured() {
    if !common::bpf_available("string capture") {
        return;
    }
    let _g = common::serial();
    let maps = ProbeMaps::create(1 << 16, 64).unwrap();
    maps.traced.insert(&our_tgid(), &1).unwrap();
    let plan = RecordPlan {
        stack_bytes: 256,
        strings: vec![
            StringCapture { reg: PtReg::Di, max: 8, per_site: false },
            StringCapture { reg: PtReg::Di, max: 64, per_site: false },
        ],
        buffers: vec![],
        regs: true,
        arg_regs: 0,
        errno: false,
        curthread: true,
        task: false,
        stash: Default::default(),
    };
    let layout = RecordLayout::new(&plan).unwrap();
    let prog = load(&plan, &maps, ProgramKind::UprobeMulti);
    let (exe, off) = common::own_function("udtrace_test_str");
    let _l = uprobe::attach_multi(&prog, &exe, &[Site { offset: off, cookie: 1, ref_ctr: 0 }], false).unwrap();
    let short = c"hi";
    let long = c"hello, udtrace string capture";
    udtrace_test_str(short.as_ptr() as u64, 1);
    udtrace_test_str(long.as_ptr() as u64, 2);
    udtrace_test_str(0, 3);
    let recs = drain(&maps);
    let fs: Vec<_> = recs.iter().map(|r| layout.parse(r).unwrap()).collect();
    assert_eq!(fs.len(), 3);
    assert_eq!(fs[0].strings, vec![Some(&b"hi"[..]), Some(&b"hi"[..])]);
    // Cut to the slot: 7 bytes and the NUL.
    assert_eq!(fs[1].strings, vec![Some(&b"hello, "[..]), Some(long.to_bytes())]);
    assert_eq!(fs[2].strings, vec![None, None]);
    // The task is this thread's, the same at each firing, in the kernel's half.
    assert!(fs[0].curthread.is_some_and(|t| t >= 0xffff_8000_0000_0000), "{:?}", fs[0].curthread);
    assert!(fs.iter().all(|f| f.curthread == fs[0].curthread));
    for f in &fs {
        assert_eq!(f.stack.len(), 256);
        assert!(!f.stack_truncated);
        // At a function's entry the stack's top word is the return address, which lies
        // in this executable, near the probed function.
        let ret = u64::from_ne_bytes(f.stack[..8].try_into().unwrap());
        assert!(ret.abs_diff(f.reg(PtReg::Ip)) < 1 << 26, "return address {ret:#x} vs ip {:#x}", f.reg(PtReg::Ip));
    }
}

/// Pages of .bss that nothing touches before the test reads them through a firing.
#[repr(C, align(4096))]
struct Cold([AtomicU8; 8192]);
static COLD: Cold = Cold([const { AtomicU8::new(0) }; 8192]);

#[test]
fn buffers_are_captured_and_faulted_in_when_sleepable() {
    if !common::bpf_available("buffer capture") {
        return;
    }
    let _g = common::serial();
    let plan = RecordPlan {
        buffers: vec![BufferCapture { reg: PtReg::Di, size: 12 }, BufferCapture { reg: PtReg::Si, size: 3 }],
        ..RecordPlan::default()
    };
    let layout = RecordLayout::new(&plan).unwrap();
    let (exe, off) = common::own_function("udtrace_test_str");
    let data = *b"0123456789abcdef";
    let (cold, second) = (COLD.0.as_ptr() as u64, COLD.0[4096..].as_ptr() as u64);
    for sleepable in [false, true] {
        let maps = ProbeMaps::create(1 << 16, 64).unwrap();
        maps.traced.insert(&our_tgid(), &1).unwrap();
        let prog = load_traced(&plan, &maps, sleepable);
        let _l = uprobe::attach_multi(&prog, &exe, &[Site { offset: off, cookie: 1, ref_ctr: 0 }], false).unwrap();
        udtrace_test_str(data.as_ptr() as u64, data[13..].as_ptr() as u64);
        udtrace_test_str(0, 0xffff_8000_0000_0000);
        // A page never touched: only the sleepable program faults it in.
        udtrace_test_str(if sleepable { cold } else { second }, data.as_ptr() as u64);
        let recs = drain(&maps);
        let fs: Vec<_> = recs.iter().map(|r| layout.parse(r).unwrap()).collect();
        assert_eq!(fs.len(), 3);
        assert_eq!(fs[0].buffers, vec![Some(&data[..12]), Some(&data[13..])]);
        assert_eq!(fs[1].buffers, vec![None, None]);
        let zeros = [0u8; 12];
        let want = if sleepable { Some(&zeros[..]) } else { None };
        assert_eq!(fs[2].buffers, vec![want, Some(&data[..3])], "sleepable {sleepable}");
        // A failed read leaves the slot's result negative and its bytes zero.
        let (slot, _) = layout.buffers[0];
        assert!(i32::from_ne_bytes(recs[1][slot..slot + 4].try_into().unwrap()) < 0);
        assert!(recs[1][slot + 4..slot + 24].iter().all(|&b| b == 0));
    }
}

#[test]
fn a_full_ring_counts_drops() {
    if !common::bpf_available("drop count") {
        return;
    }
    let _g = common::serial();
    let page = 4096;
    let maps = ProbeMaps::create(page, 64).unwrap();
    maps.traced.insert(&our_tgid(), &1).unwrap();
    let plan = RecordPlan { regs: true, ..RecordPlan::default() };
    let prog = load(&plan, &maps, ProgramKind::UprobeMulti);
    let (exe, off) = common::own_function("udtrace_test_target");
    let _l = uprobe::attach_multi(&prog, &exe, &[Site { offset: off, cookie: 7, ref_ctr: 0 }], false).unwrap();
    const N: u64 = 100;
    for i in 0..N {
        udtrace_test_target(i, i);
    }
    let kept = drain(&maps).len() as u64;
    let drops = maps.drops.sum(0).unwrap();
    let size = RecordLayout::new(&plan).unwrap().size as u64 + 8;
    assert_eq!(kept, page as u64 / size, "a one-page ring holds whole records only");
    assert_eq!(kept + drops, N);
}

#[test]
fn verifier_refusal_carries_the_log() {
    if !common::bpf_available("verifier log") {
        return;
    }
    use udtrace_bpf::insn::{exit, ldx, Reg, Size};
    // Reads R2, which is uninitialised at entry.
    let bad = [ldx(Size::DW, Reg::R0, Reg::R2, 0), exit()];
    let e = Program::load(ProgramKind::Uprobe, "udtrace_bad", &bad).unwrap_err();
    assert!(e.log().contains("R2 !read_ok"), "log: {}", e.log());
    assert!(e.to_string().contains("verifier log"));
}

/// Where the readable memory that holds `addr` ends: the end of its mapping, or of
/// the readable mappings that follow it without a gap.
fn readable_end(addr: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut end = None;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        let (lo, hi) = range.split_once('-').unwrap();
        let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap());
        let readable = perms.starts_with('r');
        match end {
            None if (lo..hi).contains(&addr) => end = Some(hi),
            Some(e) if e == lo && readable => end = Some(hi),
            Some(_) => break,
            None => {}
        }
    }
    end.expect("a mapping holds the address")
}

#[test]
fn stack_capture_near_the_top_of_a_thread_stack_keeps_what_is_readable() {
    if !common::bpf_available("stack near top") {
        return;
    }
    let _g = common::serial();
    // A power of two and another size: the reads after a failed whole one are powers
    // of two below it.
    for stack_bytes in [16384, 12288] {
        let maps = ProbeMaps::create(1 << 18, 64).unwrap();
        maps.traced.insert(&our_tgid(), &1).unwrap();
        let plan = RecordPlan { stack_bytes, regs: true, ..RecordPlan::default() };
        let layout = RecordLayout::new(&plan).unwrap();
        let prog = load(&plan, &maps, ProgramKind::UprobeMulti);
        let (exe, off) = common::own_function("udtrace_test_target");
        let _l = uprobe::attach_multi(&prog, &exe, &[Site { offset: off, cookie: 7, ref_ctr: 0 }], false).unwrap();
        udtrace_test_target(1, 2);
        // A fresh thread's first frames sit a few KiB below the end of its stack
        // mapping; it says where that readable memory ends.
        let end = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(|| {
                let here = 0u64;
                let end = readable_end(std::ptr::addr_of!(here) as u64);
                udtrace_test_target(3, end);
                end
            })
            .unwrap()
            .join()
            .unwrap();
        let recs = drain(&maps);
        assert_eq!(recs.len(), 2);
        for r in &recs {
            let f = layout.parse(r).unwrap();
            assert!(!f.stack.is_empty(), "some stack is always readable at a function entry");
            assert_eq!(f.stack_truncated, f.stack.len() < stack_bytes as usize);
            let ret = u64::from_ne_bytes(f.stack[..8].try_into().unwrap());
            assert!(ret.abs_diff(f.reg(PtReg::Ip)) < 1 << 26);
            if f.reg(PtReg::Di) == 3 {
                // Every readable byte, to 8: what a trampoline's process_vm_readv reads.
                let sp = f.reg(PtReg::Sp);
                let readable = ((end - sp) / 8 * 8).min(u64::from(stack_bytes));
                assert_eq!(f.stack.len() as u64, readable, "sp {sp:#x}, readable to {end:#x}");
                assert!(f.stack_truncated);
            }
            eprintln!("{stack_bytes}: arg0 {} captured {} stack bytes", f.reg(PtReg::Di), f.stack.len());
        }
    }
}

/// What `udtrace_test_str` is given in the chain test: a struct whose first 8 bytes
/// are a string and whose second word points to another.
#[repr(C)]
struct Labelled {
    pad: [u8; 8],
    name: *const u8,
}

#[test]
fn saved_pointers_and_chains_are_read_at_the_firing_sleepable_or_not() {
    use udtrace_bpf::codegen::StashMaps;
    use udtrace_record::pid::{op_chain, op_read, op_write, ChainBin, ChainCap, ChainOp::*, StashCaptures, Stashed};
    if !common::bpf_available("chains") {
        return;
    }
    let _g = common::serial();
    let stash = StashCaptures {
        slots: 1,
        writes: vec![(0, PtReg::Di)],
        strings: vec![(0, 16)],
        chains: vec![
            // The name behind the struct's pointer member.
            vec![
                Arg(PtReg::Di),
                Copyin { cap: 0 },
                Drop,
                Field { cap: 0, off: 8, size: 8, signed: false },
                Str { cap: 1 },
            ],
            // min(n, 8) bytes of the struct.
            vec![Arg(PtReg::Di), Arg(PtReg::Si), CopyinUpto { cap: 2 }, Drop],
            // The string one byte into the saved pointer's struct: the pointer stored
            // at this very firing.
            vec![Slot(0), Const(1), Bin(ChainBin::Add), Str { cap: 3 }],
        ],
        chain_caps: vec![ChainCap::Buf(16), ChainCap::Str(32), ChainCap::Buf(8), ChainCap::Str(16)],
        ..StashCaptures::default()
    };
    let plan = RecordPlan { stash, ..RecordPlan::default() };
    let layout = RecordLayout::new(&plan).unwrap();
    let (exe, off) = common::own_function("udtrace_test_str");
    let name = c"label-1";
    let l = Labelled { pad: *b"abcdefg\0", name: name.as_ptr().cast() };
    let at = std::ptr::addr_of!(l) as u64;
    let bad = 0xffff_8000_0000_0000u64;
    for sleepable in [false, true] {
        let mut maps = ProbeMaps::create(1 << 16, 64).unwrap();
        maps.stash = Some(StashMaps::create(64, 64).unwrap());
        maps.traced.insert(&our_tgid(), &1).unwrap();
        let ops = op_write(0) | op_read(0) | op_chain(0) | op_chain(1) | op_chain(2);
        maps.stash.as_ref().unwrap().ops.insert(&1u64, &ops).unwrap();
        let prog = load_traced(&plan, &maps, sleepable);
        let _l = uprobe::attach_multi(&prog, &exe, &[Site { offset: off, cookie: 1, ref_ctr: 0 }], false).unwrap();
        udtrace_test_str(at, 5);
        udtrace_test_str(bad, 100);
        let recs = drain(&maps);
        let fs: Vec<_> = recs.iter().map(|r| layout.parse(r).unwrap()).collect();
        assert_eq!(fs.len(), 2);
        let whole: Vec<u8> = l.pad.iter().copied().chain((l.name as u64).to_ne_bytes()).collect();
        assert_eq!(
            fs[0].stashed,
            vec![
                Stashed { addr: at, string: true, bytes: Some(&b"abcdefg"[..]) },
                Stashed { addr: at, string: false, bytes: Some(&whole[..]) },
                Stashed { addr: l.name as u64, string: true, bytes: Some(&b"label-1"[..]) },
                Stashed { addr: at, string: false, bytes: Some(&b"abcde"[..]) },
                Stashed { addr: at + 1, string: true, bytes: Some(&b"bcdefg"[..]) },
            ],
            "sleepable {sleepable}"
        );
        // A bad address: each read made says it faulted, and the chain that needed
        // it for a further read stops there.
        assert_eq!(
            fs[1].stashed,
            vec![
                Stashed { addr: bad, string: true, bytes: None },
                Stashed { addr: bad, string: false, bytes: None },
                Stashed { addr: bad, string: false, bytes: None },
                Stashed { addr: bad + 1, string: true, bytes: None },
            ],
            "sleepable {sleepable}"
        );
    }
}
