//! The firing path end to end on this test's own process: a `#[no_mangle]` function is
//! patched with a jump to a generated trampoline, called normally, and the ring's
//! records are read back and checked against what the calls passed (as aya's tests
//! uprobe their own functions).
//!
//! The tests patch the same functions, so they hold one lock.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::fs::File;
use std::hint::black_box;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use iced_x86::{Decoder, DecoderOptions, Mnemonic};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{getpid, getppid, gettid};

use udtrace_inproc::dif::SiteWork;
use udtrace_inproc::ring::{Geometry, Reader, OFF_HEAD};
use udtrace_inproc::trampoline::{
    errno_words, generate, CpuSource, ProcessAddrs, Trampoline, DATA_ERRNO_CONST, DATA_ERRNO_SLOT, DATA_PID,
    GLIBC_TID_OFFSET,
};
use udtrace_inproc::vdso;
use udtrace_object::elf;
use udtrace_object::errno::{self, ErrnoTls};
use udtrace_object::patch::{plan, PatchPlan, SiteKind};
use udtrace_record::pid::{
    BufferCapture, PtReg, RecordLayout, RecordPlan, StringCapture, FLAG_STACK_TRUNCATED, OFF_ERRNO, OFF_FLAGS,
    OFF_STACK_LEN,
};
use udtrace_sys::mmap::Mmap;
use udtrace_sys::selfpatch::{memfd_create, mprotect, read_own_memory, vdso_base, write_own_code, Prot, RawMap};

/// The function the tests probe. Big enough for a 5-byte region at its entry and before
/// its `ret`; `#[inline(never)]` so every call goes through its code.
#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_inproc_target(a: u64, b: u64) -> u64 {
    reference(a, b)
}

#[inline(always)]
fn reference(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b;
    x ^= x >> 29;
    x.wrapping_add(b.rotate_left(7))
}

/// The string captures' target: the captures read what `s` (and `n`, also a pointer in
/// the tests) point to; the function itself only computes with the addresses.
#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_inproc_strtarget(s: *const c_char, n: u64) -> u64 {
    reference(s as u64, n)
}

/// The stack captures' target: keeps a copy of its caller's stack, from its own frame up
/// to `end` (or 2 KiB), in [`SNAPSHOT`]. The bytes above the entry's rsp do not change
/// while it runs, so they are what the entry's firing read. Returns `marker`.
#[no_mangle]
#[inline(never)]
pub extern "C" fn udtrace_inproc_stacktarget(marker: *const u64, end: u64) -> u64 {
    let local = 0u64;
    let here = black_box(&local) as *const u64 as u64;
    let end = if end == 0 { here + 2048 } else { end };
    let bytes = read_own_memory(here, (end - here) as usize).unwrap();
    *SNAPSHOT.lock().unwrap() = Some((here, bytes));
    marker as u64
}

/// (address, bytes from there) as [`udtrace_inproc_stacktarget`] saw its stack.
static SNAPSHOT: Mutex<Option<(u64, Vec<u8>)>> = Mutex::new(None);

fn call(a: u64, b: u64) -> u64 {
    let f: extern "C" fn(u64, u64) -> u64 = black_box(udtrace_inproc_target);
    black_box(f(black_box(a), black_box(b)))
}

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const COOKIE: u64 = 0xc0ff_ee00_0000_0001;

fn record_plan() -> RecordPlan {
    RecordPlan { regs: true, ..RecordPlan::default() }
}

/// A target's address and code, read from our own memory, its size from our symbols.
struct Target {
    addr: u64,
    code: Vec<u8>,
}

fn target() -> Target {
    Target::of("udtrace_inproc_target", udtrace_inproc_target as *const () as u64)
}

impl Target {
    fn of(name: &str, addr: u64) -> Target {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let info = elf::parse(&exe).unwrap();
        let sym = info.symbols.iter().find(|s| s.name == name).expect("symbol");
        assert!(sym.size >= 5, "target of {} bytes", sym.size);
        Target { addr, code: read_own_memory(addr, sym.size as usize).unwrap() }
    }

    fn plan(&self, kind: SiteKind) -> PatchPlan {
        match kind {
            SiteKind::Entry => plan(&self.code, self.addr, 0, kind).unwrap(),
            _ => {
                let rets: Vec<u64> = Decoder::with_ip(64, &self.code, self.addr, DecoderOptions::NONE)
                    .into_iter()
                    .filter(|i| i.mnemonic() == Mnemonic::Ret)
                    .map(|i| i.ip() - self.addr)
                    .collect();
                assert_eq!(rets.len(), 1, "one ret in the target");
                plan(&self.code, self.addr, rets[0], kind).unwrap()
            }
        }
    }
}

/// A ring (memfd, mapped twice: the producer's mapping whose address trampolines get, and
/// udtrace's reader mapping), the data page and the vDSO clock.
struct Env {
    plan: RecordPlan,
    geometry: Geometry,
    layout: RecordLayout,
    view: Mmap,
    producer: RawMap,
    data: RawMap,
    clock: u64,
    reader: Reader,
    _fd: OwnedFd,
}

impl Env {
    fn new(nslots: u64) -> Env {
        Env::with_plan(nslots, record_plan())
    }

    fn with_plan(nslots: u64, plan: RecordPlan) -> Env {
        let layout = RecordLayout::new(&plan).unwrap();
        let geometry = Geometry::new(nslots, layout.size).unwrap();
        let fd = memfd_create("udtrace-ring").unwrap();
        File::from(fd.try_clone().unwrap()).set_len(geometry.size() as u64).unwrap();
        let mut view = Mmap::map(fd.as_fd(), geometry.size(), 0, true).unwrap();
        geometry.init(&mut view);
        let producer = RawMap::shared(fd.as_fd(), geometry.size()).unwrap();
        let mut data = RawMap::anon(4096).unwrap();
        data.write(DATA_PID, &(getpid().as_raw() as u32).to_ne_bytes());
        let base = vdso_base();
        assert_ne!(base, 0, "no vDSO");
        let image = read_own_memory(base, vdso_len(base)).unwrap();
        let clock = base + vdso::clock_gettime_offset(&image).unwrap();
        let reader = Reader::new(&view, layout.size).unwrap();
        Env { plan, geometry, layout, view, producer, data, clock, reader, _fd: fd }
    }

    /// Points the data page's errno slot at `slot` (0: errno not known).
    fn set_errno_slot(&mut self, slot: u64) {
        self.data.write(DATA_ERRNO_SLOT, &slot.to_ne_bytes());
    }

    fn addrs(&self) -> ProcessAddrs {
        ProcessAddrs {
            ring: self.producer.addr(),
            data_page: self.data.addr(),
            clock_gettime: self.clock,
            tid_offset: GLIBC_TID_OFFSET,
            cpu: CpuSource::Rdpid,
        }
    }

    /// Every committed record, as (tid, ktime, cpu, regs), checked for what every record
    /// must hold.
    fn drain(&mut self) -> Vec<Rec> {
        let mut out = Vec::new();
        let layout = &self.layout;
        let pid = getpid().as_raw() as u32;
        self.reader.drain(&mut self.view, |bytes| {
            let f = layout.parse(bytes).unwrap();
            assert_eq!(f.cookie, COOKIE);
            assert_eq!(f.pid, pid);
            assert_eq!((f.stack.len(), f.errno, f.stack_truncated), (0, 0, false));
            out.push(Rec { tid: f.tid, ktime: f.ktime, cpu: f.cpu, regs: f.regs.all() });
        });
        out
    }

    /// Every committed record's bytes, with the cookie and pid checked.
    fn drain_raw(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let layout = &self.layout;
        let pid = getpid().as_raw() as u32;
        self.reader.drain(&mut self.view, |bytes| {
            let f = layout.parse(bytes).unwrap();
            assert_eq!((f.cookie, f.pid), (COOKIE, pid));
            out.push(bytes.to_vec());
        });
        out
    }

    fn head(&self) -> u64 {
        self.view.load_acquire_u64(OFF_HEAD)
    }
}

fn vdso_len(base: u64) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).expect("[vdso] in maps");
    let (range, _) = line.split_once(' ').unwrap();
    let (lo, hi) = range.split_once('-').unwrap();
    let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap());
    assert_eq!(lo, base);
    (hi - lo) as usize
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    tid: u32,
    ktime: u64,
    cpu: u32,
    regs: [u64; 21],
}

impl Rec {
    fn reg(&self, r: PtReg) -> u64 {
        self.regs[r as usize]
    }
}

/// A site patched; unpatched on drop (before its trampoline page is unmapped).
struct Patched {
    plan: PatchPlan,
    original: Vec<u8>,
    _tramp: RawMap,
}

impl Patched {
    fn new(t: &Target, kind: SiteKind, env: &Env) -> Patched {
        Patched::with_work(t, kind, env, None)
    }

    /// With the site's program (docs/firing.md).
    fn with_work(t: &Target, kind: SiteKind, env: &Env, work: Option<SiteWork<'_>>) -> Patched {
        let plan = t.plan(kind);
        let mut tramp = RawMap::anon_near(t.addr, t.addr + t.code.len() as u64, 4096).unwrap();
        let code = generate(&Trampoline {
            plan: &plan,
            at: tramp.addr(),
            space: tramp.len(),
            cookie: COOKIE,
            record: &env.plan,
            ring: env.geometry,
            process: env.addrs(),
            stash_ops: 0,
            work,
        })
        .unwrap();
        tramp.write(0, &code);
        tramp.protect(Prot::ReadExec).unwrap();
        let original = t.code[plan.start as usize..plan.end as usize].to_vec();
        let bytes = plan.patch_bytes(tramp.addr()).expect("trampoline in reach");
        write_own_code(plan.region_vaddr(), &bytes, Prot::ReadExec).unwrap();
        Patched { plan, original, _tramp: tramp }
    }
}

impl Drop for Patched {
    fn drop(&mut self) {
        write_own_code(self.plan.region_vaddr(), &self.original, Prot::ReadExec).unwrap();
    }
}

fn monotonic() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn ncpus() -> u32 {
    // "0-N" or "0-3,8-11": the highest possible cpu + 1.
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let last = s.trim().rsplit([',', '-']).next().unwrap();
    last.parse::<u32>().unwrap() + 1
}

fn args(thread: u64, i: u64) -> (u64, u64) {
    ((thread << 32) | i, i.wrapping_mul(3) + 7)
}

/// Calls the target `n` times with `args(thread, i)` from `threads` threads, spinning
/// `pause` times between calls; returns each thread's tid.
fn run_threads(threads: u64, n: u64, pause: u32) -> Vec<u32> {
    let handles: Vec<_> = (0..threads)
        .map(|th| {
            std::thread::spawn(move || {
                for i in 0..n {
                    let (a, b) = args(th, i);
                    assert_eq!(call(a, b), reference(a, b));
                    for _ in 0..pause {
                        std::hint::spin_loop();
                    }
                }
                gettid().as_raw() as u32
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Checks the records of `tids[th]` calling with `args(th, 0..n)`, every one fired at
/// `site`, in program order, in the time window.
fn check_threads(recs: &[Rec], tids: &[u32], n: u64, kind: SiteKind, site: u64, window: (u64, u64)) {
    assert_eq!(recs.len() as u64, tids.len() as u64 * n, "one record per call");
    let cpus = ncpus();
    let mut by_tid: BTreeMap<u32, Vec<&Rec>> = BTreeMap::new();
    for r in recs {
        by_tid.entry(r.tid).or_default().push(r);
    }
    for (th, tid) in tids.iter().enumerate() {
        let rs = by_tid.get(tid).unwrap_or_else(|| panic!("no record with tid {tid} (is fs:[0x2d0] the tid?)"));
        assert_eq!(rs.len() as u64, n);
        let mut last = 0;
        for (i, r) in rs.iter().enumerate() {
            let (a, b) = args(th as u64, i as u64);
            match kind {
                SiteKind::Entry => assert_eq!((r.reg(PtReg::Di), r.reg(PtReg::Si)), (a, b)),
                _ => assert_eq!(r.reg(PtReg::Ax), reference(a, b), "rax at ret is the return value"),
            }
            assert_eq!(r.reg(PtReg::Ip), site);
            assert_eq!((r.reg(PtReg::OrigAx), r.reg(PtReg::Cs), r.reg(PtReg::Ss)), (u64::MAX, 0x33, 0x2b));
            // The interrupt flag is always set in user mode; bit 1 is reserved, 1.
            assert_eq!(r.reg(PtReg::Flags) & 0x202, 0x202);
            assert!(r.ktime >= last && r.ktime >= window.0 && r.ktime <= window.1, "ktime {} {window:?}", r.ktime);
            last = r.ktime;
            assert!(r.cpu < cpus);
        }
    }
}

#[test]
fn entry_fires_from_one_and_four_threads() {
    let _g = lock();
    let t = target();
    let mut env = Env::new(4096);
    let p = Patched::new(&t, SiteKind::Entry, &env);
    assert_eq!(p.plan.site, 0);
    for threads in [1, 4] {
        let t0 = monotonic();
        let tids = run_threads(threads, 1000, 0);
        let t1 = monotonic();
        let recs = env.drain();
        check_threads(&recs, &tids, 1000, SiteKind::Entry, t.addr, (t0, t1));
    }
    // The stack pointer recorded is the one at the entry: the return address on top.
    let sp = black_box(call(1, 2));
    let r = env.drain();
    assert_eq!(r.len(), 1);
    assert_eq!(sp, reference(1, 2));
    assert_eq!(r[0].reg(PtReg::Sp) % 16, 8, "entry rsp is 8 mod 16 (after the call)");
    assert_eq!(env.reader.drops(&env.view), 0);
    drop(p);
    // Unpatched: calls run, nothing is recorded.
    let head = env.head();
    assert_eq!(call(5, 6), reference(5, 6));
    assert_eq!(read_own_memory(t.addr, t.code.len()).unwrap(), t.code);
    assert_eq!(env.head(), head);
    assert!(env.drain().is_empty());
}

#[test]
fn return_site_records_the_return_value() {
    let _g = lock();
    let t = target();
    let mut env = Env::new(4096);
    let p = Patched::new(&t, SiteKind::Return, &env);
    let site = t.addr + u64::from(p.plan.site);
    for threads in [1, 4] {
        let t0 = monotonic();
        let tids = run_threads(threads, 1000, 0);
        let t1 = monotonic();
        let recs = env.drain();
        check_threads(&recs, &tids, 1000, SiteKind::Return, site, (t0, t1));
    }
    drop(p);
    assert_eq!(call(5, 6), reference(5, 6));
    assert!(env.drain().is_empty());
}

#[test]
fn full_ring_drops_and_recovers() {
    let _g = lock();
    let t = target();
    let mut env = Env::new(64);
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    for i in 0..100 {
        assert_eq!(call(i, i + 1), reference(i, i + 1));
    }
    assert_eq!(env.reader.drops(&env.view), 36);
    let recs = env.drain();
    let got: Vec<u64> = recs.iter().map(|r| r.reg(PtReg::Di)).collect();
    assert_eq!(got, (0..64).collect::<Vec<_>>(), "the first 64 calls, intact");
    assert!(recs.iter().all(|r| r.reg(PtReg::Si) == r.reg(PtReg::Di) + 1));
    for i in 0..10 {
        call(1000 + i, 0);
    }
    let got: Vec<u64> = env.drain().iter().map(|r| r.reg(PtReg::Di)).collect();
    assert_eq!(got, (1000..1010).collect::<Vec<_>>());
    assert_eq!(env.reader.drops(&env.view), 36);
}

/// Producers race each other and the reader on a small ring: every firing is either a
/// record, whole and in its thread's order, or a drop. The producers pause between calls
/// so that the reader keeps up with them most of the time and the reservations, not the
/// full-ring path, race.
#[test]
fn concurrent_producers_and_reader() {
    let _g = lock();
    let t = target();
    let mut env = Env::new(256);
    // A producer preempted between reserving and committing on a loaded machine must not
    // be skipped here: this test counts every firing.
    env.reader = Reader::new(&env.view, env.layout.size).unwrap().with_stall_timeout(Duration::from_secs(60));
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    const N: u64 = 20_000;
    let done = Arc::new(AtomicBool::new(false));
    let workers = {
        let done = done.clone();
        std::thread::spawn(move || {
            let tids = run_threads(4, N, 1000);
            done.store(true, Ordering::Release);
            tids
        })
    };
    let mut recs = Vec::new();
    while !done.load(Ordering::Acquire) {
        recs.extend(env.drain());
        std::thread::yield_now();
    }
    let tids = workers.join().unwrap();
    recs.extend(env.drain());
    let drops = env.reader.drops(&env.view);
    assert_eq!(recs.len() as u64 + drops, 4 * N, "{} records, {drops} drops", recs.len());
    assert_eq!(env.reader.skipped(), 0);
    for (th, tid) in tids.iter().enumerate() {
        let mut last = None;
        for r in recs.iter().filter(|r| r.tid == *tid) {
            let i = r.reg(PtReg::Di) & 0xffff_ffff;
            assert_eq!(r.reg(PtReg::Di) >> 32, th as u64);
            assert_eq!(r.reg(PtReg::Si), args(th as u64, i).1, "torn record");
            assert!(last.is_none_or(|l| i > l), "out of order");
            last = Some(i);
        }
    }
    eprintln!("concurrent: {} records, {drops} drops", recs.len());
}

/// ns per call, unpatched and patched; printed, not asserted (`--nocapture`).
#[test]
fn cost_per_firing() {
    let _g = lock();
    let t = target();
    let mut env = Env::new(4096);
    const CALLS: u64 = 1_000_000;
    const BATCH: u64 = 4096;
    let run = |env: &mut Env| {
        let mut spent = Duration::ZERO;
        let mut i = 0;
        while i < CALLS {
            let start = Instant::now();
            for k in i..i + BATCH {
                call(k, k);
            }
            spent += start.elapsed();
            // Draining is udtrace's time, not the traced process's.
            env.drain();
            i += BATCH;
        }
        spent.as_nanos() as f64 / i as f64
    };
    let plain = run(&mut env);
    let p = Patched::new(&t, SiteKind::Entry, &env);
    let patched = run(&mut env);
    drop(p);
    let plain2 = run(&mut env);
    let base = plain.min(plain2);
    eprintln!(
        "per call: unpatched {base:.1} ns, patched {patched:.1} ns, firing {:.1} ns ({} profile)",
        patched - base,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    assert_eq!(env.reader.drops(&env.view), 0);
}

/// The firing-time programs' costs (docs/firing.md), in-process with no record:
/// `pid$target::f:entry { @ = count(); }`, and DTrace's latency idiom (entry
/// `self->ts = timestamp`; return `/self->ts/ { @ = quantize(timestamp - self->ts);
/// self->ts = 0; }`), per call, patched vs unpatched, from 1 and 2 threads. Printed,
/// not asserted (`--nocapture`); the counts are checked.
#[test]
fn program_cost_per_firing() {
    use udtrace_dif::layout::{AggDesc, AggFn, BufferLayout};
    use udtrace_dif::op::{BinOp, Op, Program, Var};
    use udtrace_dif::snapshot::Snapshot;
    use udtrace_dif::Layout;

    struct View<'a>(&'a Mmap);
    impl udtrace_dif::interp::Words for View<'_> {
        fn load(&self, off: usize) -> u64 {
            self.0.load_acquire_u64(off)
        }
    }
    let _g = lock();
    let t = target();
    let env = Env::new(64);
    let count_layout = Layout { tls: 0, aggs: vec![AggDesc { func: AggFn::Count, nkeys: 0 }], strsize: 0 };
    let count = Program { ops: vec![Op::Const { d: 0, v: 0 }, Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 }] };
    let lat_layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Quantize, nkeys: 0 }], strsize: 0 };
    let entry = Program { ops: vec![Op::Get { d: 0, v: Var::Timestamp }, Op::TlsStore { slot: 0, a: 0 }] };
    let ret = Program {
        ops: vec![
            Op::TlsLoad { d: 0, slot: 0 },
            Op::Jz { a: 0, to: 8 },
            Op::Get { d: 1, v: Var::Timestamp },
            Op::Bin { op: BinOp::Sub, d: 1, a: 1, b: 0 },
            Op::Const { d: 2, v: 1 },
            Op::Agg { agg: 0, keys: 0, val: 1, incr: 2 },
            Op::Const { d: 3, v: 0 },
            Op::TlsStore { slot: 0, a: 3 },
        ],
    };
    const CALLS: u64 = 2_000_000;
    let per_call = |threads: u64| {
        let start = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                std::thread::spawn(|| {
                    for k in 0..CALLS {
                        call(k, k);
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        start.elapsed().as_nanos() as f64 / CALLS as f64
    };
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    for threads in [1u64, 2] {
        let base = per_call(threads).min(per_call(threads));
        for (name, layout) in [("count", &count_layout), ("latency", &lat_layout)] {
            let buf = BufferLayout::new(layout, 4096, 256);
            let fd = memfd_create("udtrace-dif").unwrap();
            File::from(fd.try_clone().unwrap()).set_len(buf.size as u64).unwrap();
            let at = RawMap::shared(fd.as_fd(), buf.size).unwrap();
            let view = Mmap::map(fd.as_fd(), buf.size, 0, true).unwrap();
            for (o, v) in buf.header() {
                view.store_release_u64(o, v);
            }
            let work = |program| SiteWork { program, layout, buf: &buf, base: at.addr(), record: false, harness: None };
            let patched = if name == "count" {
                vec![Patched::with_work(&t, SiteKind::Entry, &env, Some(work(&count)))]
            } else {
                vec![
                    Patched::with_work(&t, SiteKind::Entry, &env, Some(work(&entry))),
                    Patched::with_work(&t, SiteKind::Return, &env, Some(work(&ret))),
                ]
            };
            let cost = per_call(threads);
            drop(patched);
            let snap = Snapshot::read(layout, &buf, &View(&view));
            let hits = snap.aggs[0].get(&vec![]).map_or(0, |r| r[0]);
            assert_eq!(hits, threads * CALLS, "{name}: every call counted");
            assert_eq!((snap.agg_drops, snap.dyn_drops), (0, 0));
            eprintln!(
                "{name}, {threads} thread(s): unpatched {base:.1} ns, patched {cost:.1} ns per call: {:.1} ns ({profile})",
                cost - base
            );
        }
    }
}

fn strtarget() -> Target {
    Target::of("udtrace_inproc_strtarget", udtrace_inproc_strtarget as *const () as u64)
}

fn call_str(s: u64, n: u64) -> u64 {
    let f: extern "C" fn(*const c_char, u64) -> u64 = black_box(udtrace_inproc_strtarget);
    black_box(f(black_box(s as *const c_char), black_box(n)))
}

fn i32_at(rec: &[u8], off: usize) -> i32 {
    i32::from_ne_bytes(rec[off..off + 4].try_into().unwrap())
}

fn u32_at(rec: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(rec[off..off + 4].try_into().unwrap())
}

fn u64_at(rec: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(rec[off..off + 8].try_into().unwrap())
}

/// What `bpf_probe_read_user_str` leaves in a string slot of `max` bytes: (result, the
/// slot's data, `max` rounded up to 8): the string and its NUL, cut to max - 1 bytes and
/// a NUL, zeros after; `None` (the read faults): -EFAULT and zeros.
fn expected_slot(s: Option<&[u8]>, max: u32) -> (i32, Vec<u8>) {
    let mut data = vec![0u8; max.div_ceil(8) as usize * 8];
    match s {
        None => (-14, data),
        Some(s) => {
            let n = s.len().min(max as usize - 1);
            data[..n].copy_from_slice(&s[..n]);
            (n as i32 + 1, data)
        }
    }
}

/// Checks every slot of `rec` (result, reserved word 0, data) against `want`.
fn check_strings(env: &Env, rec: &[u8], want: &[Option<&[u8]>]) {
    for (&(off, max), s) in env.layout.strings.iter().zip(want) {
        let (result, data) = expected_slot(*s, max);
        let got = (i32_at(rec, off), u32_at(rec, off + 4), &rec[off + 8..off + 8 + data.len()]);
        assert_eq!(got, (result, 0, &data[..]), "string {:?}", s.map(String::from_utf8_lossy));
    }
    // No stack, errno or truncation in these records.
    assert_eq!((u32_at(rec, OFF_FLAGS), u32_at(rec, OFF_STACK_LEN), u32_at(rec, OFF_ERRNO)), (0, 0, 0));
}

/// Two pages, the second inaccessible (its address is returned), with `tail` written
/// to end right before it.
fn guarded(tail: &[u8]) -> (RawMap, u64) {
    let mut pages = RawMap::anon(8192).unwrap();
    let guard = pages.addr() + 4096;
    pages.write(4096 - tail.len(), tail);
    mprotect(guard, 4096, Prot::None).unwrap();
    (pages, guard)
}

#[test]
fn strings_read_as_probe_read_user_str() {
    let _g = lock();
    let t = strtarget();
    let plan = RecordPlan {
        strings: vec![
            StringCapture { reg: PtReg::Di, max: 16, per_site: false },
            StringCapture { reg: PtReg::Si, max: 5, per_site: false },
        ],
        ..record_plan()
    };
    let mut env = Env::with_plan(64, plan);
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    // Strings that end right before an inaccessible page, or run into it.
    let (mut pages, guard) = guarded(b"tail\0");

    let addr = |s: &'static [u8]| s.as_ptr() as u64;
    let xy = addr(b"xy\0");
    // (rdi, rsi, the strings they point to, None where reading faults)
    type Case = (u64, u64, Option<&'static [u8]>, Option<&'static [u8]>);
    let cases: Vec<Case> = vec![
        (addr(b"hello\0"), xy, Some(b"hello"), Some(b"xy")),
        (addr(b"\0"), xy, Some(b""), Some(b"xy")),
        // Longer than max: max - 1 bytes and a NUL, result max.
        (addr(b"0123456789abcdefghijklmnop\0"), addr(b"abcdefgh\0"), Some(b"0123456789abcdefghij"), Some(b"abcdefgh")),
        // Exactly max with its NUL.
        (addr(b"0123456789abcde\0"), addr(b"abcd\0"), Some(b"0123456789abcde"), Some(b"abcd")),
        (0, xy, None, Some(b"xy")),
        (guard, 0, None, None),
        (guard + 4000, xy, None, Some(b"xy")),
        (0xffff_8000_0000_0000, xy, None, Some(b"xy")),
        // Ends right before the inaccessible page.
        (guard - 5, guard - 2, Some(b"tail"), Some(b"l")),
    ];
    for &(s, n, _, _) in &cases {
        call_str(s, n);
    }
    let recs = env.drain_raw();
    assert_eq!(recs.len(), cases.len());
    for (rec, (s, n, want_s, want_n)) in recs.iter().zip(&cases) {
        assert_eq!((u64_at(rec, 40 + PtReg::Di.offset()), u64_at(rec, 40 + PtReg::Si.offset())), (*s, *n));
        check_strings(&env, rec, &[*want_s, *want_n]);
        let f = env.layout.parse(rec).unwrap();
        assert_eq!(f.strings, vec![want_s.map(|w| &w[..w.len().min(15)]), want_n.map(|w| &w[..w.len().min(4)])]);
    }
    // Runs into the inaccessible page without a NUL: a fault, as for the helper, even
    // though bytes were readable.
    pages.write(4096 - 3, b"abc");
    call_str(guard - 3, guard - 1);
    let recs = env.drain_raw();
    check_strings(&env, &recs[0], &[None, None]);
    assert_eq!(env.reader.drops(&env.view), 0);
}

#[test]
fn buffers_are_read_up_to_the_first_unreadable_page() {
    let _g = lock();
    let t = strtarget();
    let plan = RecordPlan {
        buffers: vec![BufferCapture { reg: PtReg::Di, size: 12 }, BufferCapture { reg: PtReg::Si, size: 3 }],
        ..record_plan()
    };
    let mut env = Env::with_plan(64, plan);
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    let (_pages, guard) = guarded(b"tail!");
    let data = b"0123456789abcdef";
    let at = data.as_ptr() as u64;
    // (rdi, rsi, the bytes each slot holds: None where nothing was readable)
    type Case = (u64, u64, Option<&'static [u8]>, Option<&'static [u8]>);
    let cases: Vec<Case> = vec![
        (at, at + 13, Some(&data[..12]), Some(&data[13..])),
        (0, at, None, Some(&data[..3])),
        (guard, 0xffff_8000_0000_0000, None, None),
        // Runs into the inaccessible page: the bytes before it.
        (guard - 5, guard - 2, Some(b"tail!"), Some(b"l!")),
    ];
    for &(di, si, _, _) in &cases {
        call_str(di, si);
    }
    let recs = env.drain_raw();
    assert_eq!(recs.len(), cases.len());
    for (rec, (_, _, want_di, want_si)) in recs.iter().zip(&cases) {
        let f = env.layout.parse(rec).unwrap();
        assert_eq!(f.buffers, vec![*want_di, *want_si]);
        for (&(off, size), want) in env.layout.buffers.iter().zip([want_di, want_si]) {
            // The result, the reserved word, and zeros past the bytes read.
            let n = want.map_or(-14, |w| w.len() as i32);
            assert_eq!((i32_at(rec, off), u32_at(rec, off + 4)), (n, 0));
            let read = want.map_or(0, |w| w.len());
            assert!(rec[off + 8 + read..off + 8 + size.div_ceil(8) as usize * 8].iter().all(|&b| b == 0));
        }
    }
    assert_eq!(env.reader.drops(&env.view), 0);
}

const MARK: u64 = 0x5eed_0000_0000_0000;

/// Calls the stack target with an array of known values in this frame, whose address it
/// returns.
#[inline(never)]
fn call_stacktarget(seed: u64) -> u64 {
    let marker: [u64; 8] = black_box(std::array::from_fn(|i| MARK | seed << 8 | i as u64));
    let f: extern "C" fn(*const u64, u64) -> u64 = black_box(udtrace_inproc_stacktarget);
    let at = f(black_box(marker.as_ptr()), 0);
    black_box(&marker);
    at
}

#[test]
fn stack_bytes_from_the_sites_rsp() {
    let _g = lock();
    let t = Target::of("udtrace_inproc_stacktarget", udtrace_inproc_stacktarget as *const () as u64);
    let mut env = Env::with_plan(64, RecordPlan { stack_bytes: 512, ..record_plan() });
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    for seed in 0..4 {
        let marker_at = call_stacktarget(seed);
        let (here, snap) = SNAPSHOT.lock().unwrap().take().unwrap();
        let recs = env.drain_raw();
        assert_eq!(recs.len(), 1);
        let f = env.layout.parse(&recs[0]).unwrap();
        let sp = f.reg(PtReg::Sp);
        assert_eq!((f.stack.len(), f.stack_truncated, f.errno), (512, false, 0));
        assert_eq!(u32_at(&recs[0], OFF_FLAGS), 0);
        // As the target saw its caller's stack.
        assert!(sp > here && sp + 512 <= here + snap.len() as u64, "sp {sp:#x}, snapshot at {here:#x}");
        let off = (sp - here) as usize;
        assert_eq!(f.stack, &snap[off..off + 512]);
        // The return address on top, into call_stacktarget.
        let ret = u64_at(f.stack, 0);
        let caller = call_stacktarget as *const () as u64;
        assert!(ret > caller && ret < caller + 4096, "return address {ret:#x}, caller at {caller:#x}");
        // The caller's array where it lives.
        let m = (marker_at - sp) as usize;
        assert!(m >= 8 && m + 64 <= 512, "marker at rsp+{m}");
        for i in 0..8 {
            assert_eq!(u64_at(f.stack, m + 8 * i), MARK | seed << 8 | i as u64);
        }
    }
}

/// The end of the readable memory `addr` is in: its mapping's end, or the end of the
/// readable mappings that follow it without a gap.
fn readable_end(addr: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let ranges: Vec<(u64, u64, bool)> = maps
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let (lo, hi) = f.next().unwrap().split_once('-').unwrap();
            let readable = f.next().unwrap().starts_with('r');
            (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap(), readable)
        })
        .collect();
    let mut i = ranges.iter().position(|&(lo, hi, _)| lo <= addr && addr < hi).expect("mapped");
    assert!(ranges[i].2);
    let mut end = ranges[i].1;
    while let Some(&(lo, hi, true)) = ranges.get(i + 1) {
        if lo != end {
            break;
        }
        end = hi;
        i += 1;
    }
    end
}

/// A 16 KiB capture near the top of a thread's stack runs past readable memory: the
/// record holds what is readable, flagged truncated, zeros after, and the thread goes on.
#[test]
fn stack_truncated_near_the_top_of_a_thread_stack() {
    let _g = lock();
    let t = Target::of("udtrace_inproc_stacktarget", udtrace_inproc_stacktarget as *const () as u64);
    let mut env = Env::with_plan(64, RecordPlan { stack_bytes: 16384, ..record_plan() });
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    // A new thread's first frames are a few KiB below its stack mapping's end (glibc's
    // thread descriptor and TLS are above them). Stacks are mapped top down, so a thread
    // made while another is alive usually has the other's guard page right above its
    // stack. Threads are made, and kept alive, until one is near unreadable memory.
    let mut parked = Vec::new();
    let mut found = None;
    for _ in 0..16 {
        let (park_tx, park_rx) = mpsc::channel::<()>();
        let (res_tx, res_rx) = mpsc::channel();
        let h = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || {
                let local = 0u64;
                let here = black_box(&local) as *const u64 as u64;
                let end = readable_end(here);
                if end - here >= 12 << 10 {
                    res_tx.send(None).unwrap();
                    // Parked: its stack stays mapped while the next thread is made.
                    let _ = park_rx.recv();
                    return;
                }
                let f: extern "C" fn(*const u64, u64) -> u64 = black_box(udtrace_inproc_stacktarget);
                f(std::ptr::null(), end);
                res_tx.send(Some((end, here, gettid().as_raw() as u32))).unwrap();
            })
            .unwrap();
        match res_rx.recv().unwrap() {
            None => parked.push((park_tx, h)),
            Some(x) => {
                h.join().unwrap();
                found = Some(x);
                break;
            }
        }
    }
    let tries = parked.len() + 1;
    for (tx, h) in parked {
        drop(tx);
        h.join().unwrap();
    }
    let (end, frame, tid) = found.expect("a thread stack within 12 KiB of unreadable memory");
    let (here, snap) = SNAPSHOT.lock().unwrap().take().unwrap();
    let recs = env.drain_raw();
    assert_eq!(recs.len(), 1);
    let rec = &recs[0];
    let f = env.layout.parse(rec).unwrap();
    assert_eq!(f.tid, tid);
    let sp = f.reg(PtReg::Sp);
    let len = ((end - sp) & !7) as usize;
    assert!(len < 16384, "{len} bytes readable above rsp");
    assert_eq!((f.stack.len(), f.stack_truncated), (len, true));
    assert_eq!(u32_at(rec, OFF_FLAGS), FLAG_STACK_TRUNCATED);
    // The frames up to the thread's closure (`frame`) are as the target saw them; above
    // are glibc's thread descriptor and the TLS, which change as the thread runs.
    let (off, stable) = ((sp - here) as usize, (frame - sp) as usize);
    assert!(stable > 64 && stable < len, "{stable} of {len} bytes");
    assert!(f.stack[..stable] == snap[off..off + stable], "the stack as the target saw it");
    let past = env.layout.off_stack + len..env.layout.off_stack + 16384;
    assert!(rec[past].iter().all(|&b| b == 0), "zeros past stack_len");
    eprintln!("truncated stack capture: {len} of 16384 bytes readable, on thread {tries} made");
}

/// The address of glibc's GOT slot holding errno's offset from the thread pointer in
/// this process, found as the pid provider finds it (`errno_tls`): from the code of
/// `__errno_location` in libc's file, plus libc's load bias.
fn errno_got_slot() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let (start, offset, path) = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = *f.get(5)?;
            if !path.rsplit('/').next()?.starts_with("libc.so") {
                return None;
            }
            let lo = u64::from_str_radix(f[0].split_once('-')?.0, 16).ok()?;
            Some((lo, u64::from_str_radix(f[2], 16).ok()?, path.to_string()))
        })
        .expect("libc mapped");
    let info = elf::parse(&std::fs::read(&path).unwrap()).unwrap();
    let bias = start - info.offset_to_vaddr(offset).unwrap();
    let sym = info.symbols.iter().find(|s| s.name == "__errno_location" && s.defined).expect("__errno_location");
    let addr = bias + sym.addr;
    let code = read_own_memory(addr, sym.size.max(16) as usize).unwrap();
    match errno::locate(&code, addr) {
        Some(ErrnoTls::GotSlot(slot)) => slot,
        other => panic!("__errno_location: {other:?}"),
    }
}

const ENOENT: i32 = 2;
const ENOTDIR: i32 = 20;

/// Leaves `want` in this thread's errno: a failing `open` through std.
fn set_errno(want: i32) {
    let path = if want == ENOENT { "/nonexistent-udtrace/x" } else { "/proc/self/status/x" };
    assert_eq!(File::open(path).unwrap_err().raw_os_error(), Some(want));
}

#[test]
fn errno_through_the_data_page() {
    let _g = lock();
    let t = target();
    let mut env = Env::with_plan(64, RecordPlan { errno: true, ..record_plan() });
    let slot = errno_got_slot();
    let _p = Patched::new(&t, SiteKind::Entry, &env);
    // Not known yet: 0.
    set_errno(ENOENT);
    call(1, 0);
    env.set_errno_slot(slot);
    set_errno(ENOENT);
    call(2, 0);
    set_errno(ENOTDIR);
    call(3, 0);
    // Another thread has its own.
    std::thread::spawn(|| {
        set_errno(ENOENT);
        call(4, 0);
    })
    .join()
    .unwrap();
    // A constant offset (a static program's), kept in the data page itself.
    let offset = i64::from_ne_bytes(read_own_memory(slot, 8).unwrap().try_into().unwrap());
    let words = errno_words(env.data.addr(), Some((0, offset)));
    env.data.write(DATA_ERRNO_SLOT, &words);
    assert_eq!(u64_at(&words, 0), env.data.addr() + DATA_ERRNO_CONST as u64);
    set_errno(ENOTDIR);
    call(5, 0);
    env.set_errno_slot(0);
    set_errno(ENOTDIR);
    call(6, 0);
    let got: Vec<(u64, i32)> = env
        .drain_raw()
        .iter()
        .map(|r| {
            let f = env.layout.parse(r).unwrap();
            assert_eq!((f.stack.len(), f.stack_truncated), (0, false));
            (f.reg(PtReg::Di), f.errno)
        })
        .collect();
    assert_eq!(got, [(1, 0), (2, ENOENT), (3, ENOTDIR), (4, ENOENT), (5, ENOTDIR), (6, 0)]);
}

/// ns per firing with a string capture and with a 512-byte stack capture (one
/// `process_vm_readv` each), against the same calls unpatched, and with registers only
/// for comparison; printed, not asserted (`--nocapture`).
#[test]
fn capture_cost_per_firing() {
    let _g = lock();
    const CALLS: u64 = 200_000;
    const BATCH: u64 = 1024;
    fn time(env: &mut Env, f: &dyn Fn(u64)) -> f64 {
        let mut spent = Duration::ZERO;
        let mut i = 0;
        while i < CALLS {
            let start = Instant::now();
            for k in i..i + BATCH {
                f(k);
            }
            spent += start.elapsed();
            env.drain_raw();
            i += BATCH;
        }
        assert_eq!(env.reader.drops(&env.view), 0);
        spent.as_nanos() as f64 / i as f64
    }
    fn cost(t: &Target, plan: RecordPlan, f: &dyn Fn(u64)) -> f64 {
        let mut env = Env::with_plan(BATCH, plan);
        let plain = time(&mut env, f);
        let p = Patched::new(t, SiteKind::Entry, &env);
        let patched = time(&mut env, f);
        drop(p);
        patched - plain.min(time(&mut env, f))
    }
    let path = b"/usr/lib/x86_64-linux-gnu/libc.so.6\0";
    let strings =
        RecordPlan { strings: vec![StringCapture { reg: PtReg::Di, max: 256, per_site: false }], ..record_plan() };
    let string = cost(&strtarget(), strings.clone(), &|k| {
        call_str(path.as_ptr() as u64, k);
    });
    // The system call's fixed part: it fails before touching a page.
    let null = cost(&strtarget(), strings, &|k| {
        call_str(0, k);
    });
    let stack = cost(&target(), RecordPlan { stack_bytes: 512, ..record_plan() }, &|k| {
        call(k, k);
    });
    let regs = cost(&target(), record_plan(), &|k| {
        call(k, k);
    });
    // A bare system call, for scale.
    let start = Instant::now();
    for _ in 0..CALLS {
        black_box(getppid());
    }
    let syscall = start.elapsed().as_nanos() as f64 / CALLS as f64;
    eprintln!(
        "per firing, recording the registers: {regs:.1} ns; and a 36-byte string (max 256): {string:.1} ns; \
         and a NULL string: {null:.1} ns; and 512 stack bytes: {stack:.1} ns; a getppid call: {syscall:.1} ns \
         ({} profile)",
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
}
