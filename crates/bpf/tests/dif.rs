//! The BPF executor of the firing-time language against the reference interpreter
//! (`udtrace_dif::interp`): random cases (`udtrace_dif::gen`) compiled into real uprobe
//! programs, loaded through the verifier, fired by calls of a function of this test
//! binary with each firing's arguments, and their maps read back. What a firing knows
//! besides its arguments (pid, tid, cpu, timestamp, uid, gid) comes from a map the test
//! fills before each call (`Gets::Map`), so that the interpreter sees the same values.
//!
//! One uprobe link serves every case: its program tail-calls the case's program in the
//! slot the test names, as closing links waits out a grace period each.

mod common;

use std::cell::RefCell;
use std::hint::black_box;

use udtrace_bpf::codegen::{uprobe_program_work, Filter, ProbeMaps, SiteWork};
use udtrace_bpf::dif::{without_zero_threads, DifCode, DifMaps, DifSizes, Gets};
use udtrace_bpf::insn::{helper, ld_map_fd, ldx, mov64_imm, mov64_reg, st, Asm, Cond, Reg, Size};
use udtrace_bpf::maps::{RawKind, RawMap};
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::ringbuf::RingBufReader;
use udtrace_bpf::uprobe::{attach_multi_pid, MultiLink, Site};
use udtrace_dif::gen::{case, string_case, usdt_case, Case, UserPages, PAGE, USER_BASE, USER_PAGES};
use udtrace_dif::interp::{run_reading, Firing, Memory, Outcome};
use udtrace_dif::layout::{AggDesc, AggFn, BufferLayout};
use udtrace_dif::op::{NoUserMem, UserMem};
use udtrace_dif::op::{Op, Program as Dif, Var};
use udtrace_dif::snapshot::Snapshot;
use udtrace_dif::Layout;
use udtrace_record::pid::RecordPlan;

#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_dif_target(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> u64 {
    black_box(a) ^ black_box(b) ^ black_box(c) ^ black_box(d) ^ black_box(e) ^ black_box(f)
}

/// Words of the firing map: the values of `Var::ALL`, the registers `Op::UReg` reads,
/// then the program slot.
const FIRING_WORDS: usize = Var::ALL.len() + 17 + 1;
const SLOTS: u32 = 4;

/// The probe on [`udtrace_dif_target`] and what its program reads.
struct Rig {
    probe: ProbeMaps,
    firing: RawMap,
    slots: RawMap,
    records: RefCell<RingBufReader>,
    _dispatch: Program,
    _link: MultiLink,
}

impl Rig {
    fn new() -> Rig {
        let probe = ProbeMaps::create(1 << 16, 64).expect("maps");
        probe.traced.insert(&std::process::id(), &1).expect("traced");
        let firing = RawMap::create(RawKind::Array, "udtrace_tfire", 4, 8 * FIRING_WORDS, 1).expect("firing map");
        let slots = RawMap::create(RawKind::ProgArray, "udtrace_tslots", 4, 4, SLOTS).expect("prog array");
        let mut a = Asm::new();
        let out = a.label();
        a.push(mov64_reg(Reg::R6, Reg::R1));
        a.push(st(Size::W, Reg::R10, -4, 0));
        a.map_lookup(firing.raw_fd(), -4);
        a.jmp_imm(Cond::Eq, Reg::R0, 0, out);
        a.push(ldx(Size::DW, Reg::R3, Reg::R0, 8 * (FIRING_WORDS as i16 - 1)));
        a.push(mov64_reg(Reg::R1, Reg::R6));
        a.push_wide(ld_map_fd(Reg::R2, slots.raw_fd()));
        a.call(helper::TAIL_CALL);
        a.bind(out);
        a.push(mov64_imm(Reg::R0, 0));
        a.exit();
        let dispatch = Program::load(ProgramKind::UprobeMulti, "udtrace_tdisp", &a.finish().expect("asm"))
            .unwrap_or_else(|e| panic!("{e}"));
        let (exe, off) = common::own_function("udtrace_dif_target");
        let link = attach_multi_pid(
            &dispatch,
            &exe,
            &[Site { offset: off, cookie: 0, ref_ctr: 0 }],
            false,
            std::process::id(),
        )
        .expect("attach");
        let records = RefCell::new(RingBufReader::new(probe.ring().expect("ring")).expect("ring"));
        Rig { probe, firing, slots, records, _dispatch: dispatch, _link: link }
    }

    /// Runs `programs` on `firings` in the kernel: the maps' snapshot, and per firing
    /// whether it wrote a record (an `Emit` ran).
    fn run(
        &self,
        layout: &Layout,
        sizes: DifSizes,
        programs: &[Dif],
        firings: &[(usize, Firing)],
    ) -> (Snapshot, Vec<bool>) {
        let maps = DifMaps::create(layout, sizes).expect("dif maps");
        let loaded: Vec<Program> = programs
            .iter()
            .map(|p| {
                let code = DifCode {
                    program: p,
                    maps: &maps,
                    gets: Gets::Map(self.firing.raw_fd()),
                    errno: None,
                    sleepable: false,
                };
                let work = SiteWork { dif: Some(code), record: false, ..SiteWork::default() };
                let insns = uprobe_program_work(&RecordPlan::default(), &self.probe, Filter::Traced, false, work)
                    .unwrap_or_else(|e| panic!("compile {p:?}: {e}"));
                Program::load(ProgramKind::UprobeMulti, "udtrace_tdif", &insns)
                    .unwrap_or_else(|e| panic!("load {p:?}: {e}"))
            })
            .collect();
        for (i, p) in loaded.iter().enumerate() {
            use std::os::fd::{AsFd, AsRawFd};
            let fd = p.as_fd().as_raw_fd() as u32;
            self.slots.set(&(i as u32).to_ne_bytes(), &fd.to_ne_bytes(), 0).expect("slot");
        }
        let mut emitted = Vec::new();
        for (i, f) in firings {
            let mut v = Vec::with_capacity(8 * FIRING_WORDS);
            for w in Var::ALL.iter().map(|&var| f.get(var)).chain(f.regs).chain([*i as u64]) {
                v.extend_from_slice(&w.to_ne_bytes());
            }
            self.firing.set(&0u32.to_ne_bytes(), &v, 0).expect("firing");
            let a = f.args;
            black_box(udtrace_dif_target(
                black_box(a[0]),
                black_box(a[1]),
                black_box(a[2]),
                black_box(a[3]),
                black_box(a[4]),
                black_box(a[5]),
            ));
            let mut records = 0;
            self.records.borrow_mut().consume(|_| records += 1);
            emitted.push(records > 0);
        }
        (maps.snapshot().expect("snapshot"), emitted)
    }
}

/// What the interpreter leaves for the same firings, on a buffer of `threads` thread
/// entries and `keys` entries per keyed table.
fn interpret(
    layout: &Layout,
    threads: usize,
    keys: usize,
    programs: &[Dif],
    firings: &[(usize, Firing)],
    user: &dyn UserMem,
) -> (Snapshot, Vec<bool>) {
    let buf = BufferLayout::new(layout, threads, keys);
    let mut mem = vec![0u8; buf.size];
    for (o, v) in buf.header() {
        mem.store(o, v);
    }
    let emitted = firings
        .iter()
        .map(|(i, f)| run_reading(&programs[*i], layout, &buf, f, &mut mem, user) == Outcome::Emit)
        .collect();
    (Snapshot::read(layout, &buf, &mem), emitted)
}

/// String cases (`gen::string_case`): their memory mapped in this process where the
/// case says (the uprobe program reads the firing process's, this one's), the
/// interpreter reading the same bytes.
#[test]
fn bpf_agrees_with_the_interpreter_on_strings() {
    if !common::bpf_available("bpf_agrees_with_the_interpreter_on_strings") {
        return;
    }
    on_case_memory(string_case);
}

/// USDT operands (`gen::usdt_case`): registers of the site (from the test's map, as
/// the other values a firing knows) and memory read with `bpf_probe_read_user`, at
/// strings, across a mapped page's end, and unmapped.
#[test]
fn bpf_agrees_with_the_interpreter_on_usdt_operands() {
    if !common::bpf_available("bpf_agrees_with_the_interpreter_on_usdt_operands") {
        return;
    }
    on_case_memory(usdt_case);
}

/// Runs the cases `make` gives, with their memory mapped in this process.
fn on_case_memory(make: fn(u64) -> Case) {
    let _serial = common::serial();
    let rig = Rig::new();
    let mut pages: Vec<udtrace_sys::selfpatch::RawMap> = (0..USER_PAGES)
        .map(|k| udtrace_sys::selfpatch::RawMap::anon_at(USER_BASE + 2 * k * PAGE, PAGE as usize).expect("map a page"))
        .collect();
    let user = string_case(0).user;
    for (addr, bytes) in &user {
        let k = ((addr - USER_BASE) / (2 * PAGE)) as usize;
        let off = (addr - pages[k].addr()) as usize;
        pages[k].write(off, bytes);
    }
    let mem = UserPages::new(&user);
    let seeds: u64 = std::env::var("UDTRACE_DIF_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS / 4);
    let (mut strings, mut emits) = (0, 0);
    for seed in 0..seeds {
        let Case { layout, programs, firings, user: u } = make(seed);
        assert_eq!(u, user, "every string case has the same memory");
        let (want, want_records) = interpret(&layout, 64, 256, &programs, &firings, &mem);
        let (got, got_records) = rig.run(&layout, DifSizes { threads: 64, keys: 256 }, &programs, &firings);
        let (want, got) = (without_zero_threads(&want), without_zero_threads(&got));
        assert_eq!(got, want, "seed {seed}: BPF (left) and the interpreter (right) differ\n{programs:#?}");
        assert_eq!(got_records, want_records, "seed {seed}: records written (left) and Emits run (right)");
        strings += usize::from(!want.strings.is_empty());
        emits += want_records.iter().filter(|&&e| e).count();
    }
    assert!(strings * 4 > seeds as usize, "only {strings} of {seeds} cases kept a string");
    assert!(emits > 0, "no firing faulted or emitted");
}

/// Cases run in the normal test run (and in `.ci/run`): each loads up to three programs.
const SEEDS: u64 = 2000;

#[test]
fn bpf_agrees_with_the_interpreter() {
    if !common::bpf_available("bpf_agrees_with_the_interpreter") {
        return;
    }
    let _serial = common::serial();
    let rig = Rig::new();
    let seeds: u64 = std::env::var("UDTRACE_DIF_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS);
    let mut compared = 0;
    let mut emits = 0;
    for seed in 0..seeds {
        let Case { layout, programs, firings, .. } = case(seed);
        let (want, want_records) = interpret(&layout, 64, 256, &programs, &firings, &NoUserMem);
        let (got, got_records) = rig.run(&layout, DifSizes { threads: 64, keys: 256 }, &programs, &firings);
        let (want, got) = (without_zero_threads(&want), without_zero_threads(&got));
        assert_eq!(got, want, "seed {seed}: BPF (left) and the interpreter (right) differ\n{programs:#?}");
        assert_eq!(
            got_records, want_records,
            "seed {seed}: records written (left) and Emits run (right)\n{programs:#?}"
        );
        emits += want_records.iter().filter(|&&e| e).count();
        compared += usize::from(want.aggs.iter().any(|a| !a.is_empty()) || !want.tls.is_empty());
    }
    assert!(compared * 4 > seeds as usize, "only {compared} of {seeds} cases left anything");
    assert!(emits > 0 || seeds < 100, "no firing emitted a record");
}

/// Full maps: a keyed aggregation with room for one key counts the others' updates as
/// aggregation drops, and a thread with no room for its variables does nothing and
/// counts a dynamic-variable drop, as the interpreter's full tables do.
#[test]
fn full_maps_count_drops_as_the_interpreter() {
    if !common::bpf_available("full_maps_count_drops_as_the_interpreter") {
        return;
    }
    let _serial = common::serial();
    let rig = Rig::new();
    let layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Sum, nkeys: 1 }], strsize: 0 };
    let program = Dif {
        ops: vec![
            Op::Get { d: 0, v: Var::Tid },
            Op::TlsStore { slot: 0, a: 0 },
            Op::Arg { d: 1, n: 0 },
            Op::Agg { agg: 0, keys: 1, val: 1, incr: 1 },
        ],
    };
    let firing = |tid, key| (0, Firing { args: [key, 0, 0, 0, 0, 0], pid: 1, tid, timestamp: 1, ..Firing::default() });
    let firings = [firing(7, 5), firing(7, 5), firing(7, 6), firing(8, 5), firing(7, 7)];
    let (want, _) = interpret(&layout, 1, 1, std::slice::from_ref(&program), &firings, &NoUserMem);
    let (mut got, _) = rig.run(&layout, DifSizes { threads: 1, keys: 1 }, std::slice::from_ref(&program), &firings);
    assert_eq!((want.agg_drops, want.dyn_drops), (2, 1));
    // A per-CPU map counts a drop on the CPU the program ran on, whatever CPU the test
    // gave the firing: the totals are compared.
    assert_eq!(got.agg_drops_by_cpu.values().sum::<u64>(), 2);
    got.agg_drops_by_cpu = want.agg_drops_by_cpu.clone();
    assert_eq!(got, want);
}

/// `execname` at a real firing (`Gets::Firing`), laid out as `comm_words` does: the
/// process's name (its group leader's `comm`, found through BTF) whatever a thread
/// calls itself; without the offsets, the firing thread's name.
#[test]
fn the_name_is_the_processs() {
    if !common::bpf_available("the_name_is_the_processs") {
        return;
    }
    let _serial = common::serial();
    let offsets = udtrace_bpf::btf::Btf::vmlinux()
        .ok()
        .and_then(|b| udtrace_bpf::proc::TaskOffsets::from_btf(&b).ok())
        .map(|o| o.leader_comm());
    let own = std::fs::read_to_string("/proc/self/comm").expect("comm");
    let names = ["udt-name-a", "a-name-of-15-ch", "x"];
    for leader_comm in [None, offsets] {
        let probe = ProbeMaps::create(1 << 16, 64).expect("maps");
        probe.traced.insert(&std::process::id(), &1).expect("traced");
        let layout = Layout { tls: 0, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 2 }], strsize: 0 };
        let mut maps = DifMaps::create(&layout, DifSizes::default()).expect("dif maps");
        maps.leader_comm = leader_comm;
        let program = Dif {
            ops: vec![
                Op::Get { d: 0, v: Var::Comm0 },
                Op::Get { d: 1, v: Var::Comm1 },
                Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 },
            ],
        };
        let on = on_target(&program, &maps, &probe, "udtrace_tcomm");
        for (i, name) in names.iter().enumerate() {
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || (0..=i as u64).for_each(|k| _ = black_box(udtrace_dif_target(k, 0, 0, 0, 0, 0))))
                .expect("thread")
                .join()
                .expect("join");
        }
        drop(on);
        let rows = &maps.snapshot().expect("snapshot").aggs[0];
        let row = |name: &str| rows.get(&udtrace_dif::op::comm_words(name.as_bytes()).to_vec()).map(|r| r[0]);
        if leader_comm.is_some() {
            assert_eq!(row(own.trim_end()), Some(6), "{own}: {rows:?}");
            assert_eq!(rows.len(), 1, "{rows:?}");
        } else {
            for (i, name) in names.iter().enumerate() {
                assert_eq!(row(name), Some(i as u64 + 1), "{name}: {rows:?}");
            }
        }
    }
    assert!(offsets.is_some(), "no task_struct offsets from the kernel's BTF");
}

/// `program` compiled with what real firings know (`Gets::Firing`), attached to
/// [`udtrace_dif_target`] in this process.
fn on_target(program: &Dif, maps: &DifMaps, probe: &ProbeMaps, name: &str) -> (Program, MultiLink) {
    let code = DifCode { program, maps, gets: Gets::Firing, errno: None, sleepable: false };
    let work = SiteWork { dif: Some(code), record: false, ..SiteWork::default() };
    let insns = uprobe_program_work(&RecordPlan::default(), probe, Filter::Traced, false, work).expect("compile");
    let prog = Program::load(ProgramKind::UprobeMulti, name, &insns).unwrap_or_else(|e| panic!("{e}"));
    let (exe, off) = common::own_function("udtrace_dif_target");
    let link = attach_multi_pid(&prog, &exe, &[Site { offset: off, cookie: 0, ref_ctr: 0 }], false, std::process::id())
        .expect("attach");
    (prog, link)
}

/// Calls of [`udtrace_dif_target`] per cost measurement (`UDTRACE_DIF_CALLS`).
fn bench_calls() -> u64 {
    std::env::var("UDTRACE_DIF_CALLS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

/// Calls the target `n` times; ns per call.
fn time_calls(n: u64) -> f64 {
    let t = std::time::Instant::now();
    for i in 0..n {
        black_box(udtrace_dif_target(black_box(i), 0, 0, 0, 0, 0));
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// The cost of a call under no probe (run under bpftrace for its cost: bench/README.md).
#[test]
#[ignore = "a measurement, not a test"]
fn cost_of_calls() {
    println!("calls {:.1} ns per call", time_calls(bench_calls()));
}

/// The cost of a call under `@ = count()` compiled to BPF, with no record.
#[test]
#[ignore = "a measurement, not a test"]
fn cost_of_counting() {
    let probe = ProbeMaps::create(1 << 16, 64).expect("maps");
    probe.traced.insert(&std::process::id(), &1).expect("traced");
    let layout = Layout { tls: 0, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 0 }], strsize: 0 };
    let maps = DifMaps::create(&layout, DifSizes::default()).expect("dif maps");
    let program = Dif { ops: vec![Op::Const { d: 0, v: 1 }, Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 }] };
    let (prog, _link) = on_target(&program, &maps, &probe, "udtrace_tcount");
    let n = bench_calls();
    let ns = time_calls(n);
    let counted = maps.snapshot().expect("snapshot").aggs[0][&vec![]][0];
    // With `sysctl kernel.bpf_stats_enabled=1`, the program's own time per run.
    use std::os::fd::{AsFd, AsRawFd};
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", prog.as_fd().as_raw_fd())).unwrap_or_default();
    let stat = |k: &str| info.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse::<f64>().ok());
    let own = match (stat("run_time_ns:"), stat("run_cnt:")) {
        (Some(t), Some(c)) if c > 0.0 => format!(", program {:.1} ns per run", t / c),
        _ => String::new(),
    };
    println!("counting {ns:.1} ns per call{own}, counted {counted}");
    assert_eq!(counted, n);
}
