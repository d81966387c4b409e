//! The firing path end to end on this test's own process: a `#[no_mangle]` function is
//! patched with a jump to a generated trampoline, called normally, and the ring's
//! records are read back and checked against what the calls passed (as aya's tests
//! uprobe their own functions).
//!
//! Every test patches the same function, so they hold one lock.

use std::collections::BTreeMap;
use std::fs::File;
use std::hint::black_box;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use iced_x86::{Decoder, DecoderOptions, Mnemonic};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{getpid, gettid};

use udtrace_object::elf;
use udtrace_object::patch::{plan, PatchPlan, SiteKind};
use udtrace_record::pid::{PtReg, RecordLayout, RecordPlan};
use udtrace_sys::mmap::Mmap;
use udtrace_sys::selfpatch::{memfd_create, read_own_memory, vdso_base, write_own_code, Prot, RawMap};

use udtrace_inproc::ring::{Geometry, Reader, OFF_HEAD};
use udtrace_inproc::trampoline::{generate, CpuSource, ProcessAddrs, Trampoline, DATA_PID, GLIBC_TID_OFFSET};
use udtrace_inproc::vdso;

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

/// The target's address and code, read from our own memory, its size from our symbols.
struct Target {
    addr: u64,
    code: Vec<u8>,
}

fn target() -> Target {
    let addr = udtrace_inproc_target as *const () as u64;
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let info = elf::parse(&exe).unwrap();
    let sym = info.symbols.iter().find(|s| s.name == "udtrace_inproc_target").expect("symbol");
    assert!(sym.size >= 5, "target of {} bytes", sym.size);
    Target { addr, code: read_own_memory(addr, sym.size as usize).unwrap() }
}

impl Target {
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
    geometry: Geometry,
    layout: RecordLayout,
    view: Mmap,
    producer: RawMap,
    _data: RawMap,
    data_addr: u64,
    clock: u64,
    reader: Reader,
    _fd: OwnedFd,
}

impl Env {
    fn new(nslots: u64) -> Env {
        let layout = RecordLayout::new(&record_plan()).unwrap();
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
        Env { geometry, layout, view, producer, data_addr: data.addr(), _data: data, clock, reader, _fd: fd }
    }

    fn addrs(&self) -> ProcessAddrs {
        ProcessAddrs {
            ring: self.producer.addr(),
            data_page: self.data_addr,
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
            out.push(Rec { tid: f.tid, ktime: f.ktime, cpu: f.cpu, regs: f.regs });
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
        let plan = t.plan(kind);
        let mut tramp = RawMap::anon_near(t.addr, t.addr + t.code.len() as u64, 4096).unwrap();
        let code = generate(&Trampoline {
            plan: &plan,
            at: tramp.addr(),
            space: tramp.len(),
            cookie: COOKIE,
            record: &record_plan(),
            ring: env.geometry,
            process: env.addrs(),
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
