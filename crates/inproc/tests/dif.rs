//! The x86 executor against the reference interpreter (docs/firing.md): random cases
//! (`udtrace_dif::gen`), each program compiled into a trampoline on a function of the
//! test's own making, each firing a real call of that function with the firing's
//! arguments (and its pid, tid, cpu, timestamp, uid, gid and name in the harness words the
//! compiled code reads instead of their sources), on a buffer in shared memory; then
//! the buffer's snapshot must equal the interpreter's. The sites vary: an entry (no
//! flag saved), a return (status flags live), an entry that also writes its record.
//! A separate test checks that a firing leaves every register and flag as it was.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use udtrace_dif::gen::{case, string_case, Case, UserPages, PAGE, USER_BASE, USER_PAGES};
use udtrace_dif::interp::{self, Firing, Memory, Words};
use udtrace_dif::layout::{AggDesc, AggFn};
use udtrace_dif::op::{BinOp, Op, Program, Var};
use udtrace_dif::snapshot::Snapshot;
use udtrace_dif::{BufferLayout, Layout};
use udtrace_inproc::dif::SiteWork;
use udtrace_inproc::ring::{Geometry, Reader};
use udtrace_inproc::trampoline::{generate, CpuSource, ProcessAddrs, Trampoline, GLIBC_TID_OFFSET};
use udtrace_inproc::vdso;
use udtrace_object::patch::{plan, PatchPlan, SiteKind};
use udtrace_record::pid::{RecordLayout, RecordPlan};
use udtrace_sys::mmap::Mmap;
use udtrace_sys::selfpatch::{call_code, memfd_create, read_own_memory, vdso_base, Prot, RawMap};

/// `nop dword [rax+rax]; mov rax, rdi; mov r10, rax; ret`: returns its first argument,
/// with every argument register as it came at its entry (patched after the `nop`, which
/// writes no flag) and at its `ret` (offset 11, patched with the two moves before it).
const FUNC: [u8; 12] = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0x48, 0x89, 0xf8, 0x49, 0x89, 0xc2, 0xc3];
const RET_AT: u64 = 11;
/// Bytes of each trampoline in the code mapping.
const TRAMP: usize = 32 << 10;
const BUF_LEN: usize = 4 << 20;

/// Reads a shared mapping word by word, as udtrace reads a process's buffer.
struct View<'a>(&'a Mmap);

impl Words for View<'_> {
    fn load(&self, off: usize) -> u64 {
        self.0.load_acquire_u64(off)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Entry,
    Return,
    Record,
}

/// The code mapping (the function at 0, trampolines after it), the buffer, the harness
/// words and a ring for the variant that records.
struct Env {
    code: RawMap,
    buf_at: RawMap,
    buf: Mmap,
    harness: RawMap,
    ring_at: RawMap,
    ring: Mmap,
    reader: Reader,
    geometry: Geometry,
    record: RecordPlan,
    clock: u64,
    _fds: [OwnedFd; 2],
}

fn shared(len: usize) -> (OwnedFd, RawMap, Mmap) {
    let fd = memfd_create("udtrace-dif-test").unwrap();
    File::from(fd.try_clone().unwrap()).set_len(len as u64).unwrap();
    let at = RawMap::shared(fd.as_fd(), len).unwrap();
    let view = Mmap::map(fd.as_fd(), len, 0, true).unwrap();
    (fd, at, view)
}

fn vdso_clock() -> u64 {
    let base = vdso_base();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).expect("[vdso] in maps");
    let (lo, hi) = line.split_once(' ').unwrap().0.split_once('-').unwrap();
    let len = u64::from_str_radix(hi, 16).unwrap() - u64::from_str_radix(lo, 16).unwrap();
    base + vdso::clock_gettime_offset(&read_own_memory(base, len as usize).unwrap()).unwrap()
}

impl Env {
    fn new() -> Env {
        let mut code = RawMap::anon(4096 + 4 * TRAMP).unwrap();
        code.write(0, &FUNC);
        code.protect(Prot::ReadWriteExec).unwrap();
        let (fd1, buf_at, buf) = shared(BUF_LEN);
        let record = RecordPlan { regs: true, ..RecordPlan::default() };
        let size = RecordLayout::new(&record).unwrap().size;
        let geometry = Geometry::new(256, size).unwrap();
        let (fd2, ring_at, mut ring) = shared(geometry.size());
        geometry.init(&mut ring);
        let reader = Reader::new(&ring, size).unwrap();
        let harness = RawMap::anon(4096).unwrap();
        Env {
            code,
            buf_at,
            buf,
            harness,
            ring_at,
            ring,
            reader,
            geometry,
            record,
            clock: vdso_clock(),
            _fds: [fd1, fd2],
        }
    }

    fn func(&self) -> u64 {
        self.code.addr()
    }

    fn plan(&self, v: Variant) -> PatchPlan {
        let (site, kind) = if v == Variant::Return { (RET_AT, SiteKind::Return) } else { (0, SiteKind::Entry) };
        plan(&FUNC, self.func(), site, kind).unwrap()
    }

    /// Compiles `w` into trampoline `k`; returns the patch that jumps to it.
    fn compile(&mut self, k: usize, plan: &PatchPlan, w: SiteWork<'_>) -> Vec<u8> {
        let off = 4096 + k * TRAMP;
        let at = self.code.addr() + off as u64;
        let t = Trampoline {
            plan,
            at,
            space: TRAMP,
            cookie: 7,
            record: &self.record,
            ring: self.geometry,
            process: ProcessAddrs {
                ring: self.ring_at.addr(),
                data_page: self.harness.addr(),
                clock_gettime: self.clock,
                tid_offset: GLIBC_TID_OFFSET,
                cpu: CpuSource::Rdpid,
            },
            stash_ops: 0,
            work: Some(w),
        };
        let code = generate(&t).unwrap_or_else(|e| panic!("{e}: {:?}", w.program));
        self.code.write(off, &code);
        plan.patch_bytes(at).unwrap()
    }

    /// A firing: the harness words, then a call of the patched function.
    fn fire(&mut self, plan: &PatchPlan, patch: &[u8], f: &Firing) {
        self.code.write(plan.start as usize, patch);
        let words = Var::ALL.map(|v| f.get(v));
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        self.harness.write(0, &bytes);
        assert_eq!(call_code(self.func(), f.args), f.args[0], "the function's result");
    }

    fn clear(&mut self, len: usize) {
        self.buf.write_bytes(0, &vec![0u8; len]).unwrap();
    }

    fn records(&mut self) -> usize {
        let mut n = 0;
        self.reader.drain(&mut self.ring, |_| n += 1);
        n
    }
}

/// The interpreter's snapshot and the x86 code's, for `c` at the site `v`.
fn run_case(env: &mut Env, c: &Case, v: Variant) -> (Snapshot, Snapshot) {
    let buf = BufferLayout::new(&c.layout, 64, 256);
    assert!(buf.size <= BUF_LEN);
    let mut mem = vec![0u8; buf.size];
    env.clear(buf.size);
    for (o, w) in buf.header() {
        mem.store(o, w);
        env.buf.store_release_u64(o, w);
    }
    let plan = env.plan(v);
    let base = env.buf_at.addr();
    let patches: Vec<Vec<u8>> = c
        .programs
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let w = SiteWork {
                program: p,
                layout: &c.layout,
                buf: &buf,
                base,
                record: v == Variant::Record,
                harness: Some(env.harness.addr()),
            };
            env.compile(k, &plan, w)
        })
        .collect();
    // A record for every firing of a site that records, else for those whose program
    // ran an Emit.
    let mut records = 0;
    let user = UserPages::new(&c.user);
    for (i, f) in &c.firings {
        let out = interp::run_reading(&c.programs[*i], &c.layout, &buf, f, &mut mem, &user);
        records += usize::from(v == Variant::Record || out == interp::Outcome::Emit);
        env.fire(&plan, &patches[*i], f);
    }
    env.code.write(plan.start as usize, &FUNC[plan.start as usize..plan.end as usize]);
    assert_eq!(env.records(), records, "records written ({v:?})");
    (Snapshot::read(&c.layout, &buf, &mem), Snapshot::read(&c.layout, &buf, &View(&env.buf)))
}

#[test]
fn x86_agrees_with_the_interpreter() {
    let mut env = Env::new();
    let cases: u64 = std::env::var("UDTRACE_DIF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    let variants = [Variant::Entry, Variant::Return, Variant::Record];
    let (mut compared, mut emitting) = (0, 0);
    for seed in 0..cases {
        let c = case(seed);
        let v = variants[(seed % 3) as usize];
        let (want, got) = run_case(&mut env, &c, v);
        assert_eq!(got, want, "seed {seed} ({v:?}): {:#?}\nfirings {:?}", c.programs, c.firings);
        compared += usize::from(want.aggs.iter().any(|a| !a.is_empty()) || !want.tls.is_empty());
        emitting += usize::from(c.programs.iter().any(Program::emits));
    }
    assert!(emitting as u64 > cases / 10, "{emitting} cases emit");
    assert!(compared as u64 > cases / 4, "{compared} cases left something to compare");
}

/// String cases (`gen::string_case`): their memory mapped in this process where the
/// case says, which the trampolines read with `process_vm_readv` as the interpreter
/// reads the same bytes; bad pointers, empty strings, strings past strsize.
#[test]
fn x86_agrees_with_the_interpreter_on_strings() {
    let mut env = Env::new();
    let mut pages: Vec<RawMap> = (0..USER_PAGES)
        .map(|k| RawMap::anon_at(USER_BASE + 2 * k * PAGE, PAGE as usize).expect("map a page"))
        .collect();
    let user = string_case(0).user;
    for (addr, bytes) in &user {
        let k = ((addr - USER_BASE) / (2 * PAGE)) as usize;
        let off = (addr - pages[k].addr()) as usize;
        pages[k].write(off, bytes);
    }
    let cases: u64 = std::env::var("UDTRACE_DIF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let variants = [Variant::Entry, Variant::Return, Variant::Record];
    let mut strings = 0;
    for seed in 0..cases {
        let c = string_case(seed);
        assert_eq!(c.user, user, "every string case has the same memory");
        let v = variants[(seed % 3) as usize];
        let (want, got) = run_case(&mut env, &c, v);
        assert_eq!(got, want, "seed {seed} ({v:?}): {:#?}\nfirings {:?}", c.programs, c.firings);
        strings += usize::from(!want.strings.is_empty());
    }
    assert!(strings as u64 * 4 > cases, "{strings} cases kept a string");
}

/// Full tables, as the interpreter counts them: a keyed table of one entry and a
/// thread table of one entry, several keys and threads.
#[test]
fn drops_agree() {
    let mut env = Env::new();
    let layout = Layout {
        tls: 1,
        aggs: vec![AggDesc { func: AggFn::Sum, nkeys: 1 }, AggDesc { func: AggFn::Min, nkeys: 0 }],
        strsize: 0,
    };
    let p = Program {
        ops: vec![
            Op::Arg { d: 0, n: 1 },
            Op::Agg { agg: 0, keys: 0, val: 0, incr: 0 },
            Op::Get { d: 1, v: Var::Tid },
            Op::TlsStore { slot: 0, a: 1 },
            Op::Agg { agg: 1, keys: 0, val: 0, incr: 0 },
        ],
    };
    let c = Case {
        user: Vec::new(),
        layout,
        programs: vec![p],
        firings: (0..12)
            .map(|i| (0, Firing { args: [1, i % 5, 0, 0, 0, 0], tid: 100 + i % 3, cpu: i % 2, ..Firing::default() }))
            .collect(),
    };
    for v in [Variant::Entry, Variant::Return] {
        let buf = BufferLayout::new(&c.layout, 1, 1);
        let mut mem = vec![0u8; buf.size];
        env.clear(buf.size);
        let plan = env.plan(v);
        let w = SiteWork {
            program: &c.programs[0],
            layout: &c.layout,
            buf: &buf,
            base: env.buf_at.addr(),
            record: false,
            harness: Some(env.harness.addr()),
        };
        let patch = env.compile(0, &plan, w);
        for (_, f) in &c.firings {
            interp::run(&c.programs[0], &c.layout, &buf, f, &mut mem);
            env.fire(&plan, &patch, f);
        }
        env.code.write(plan.start as usize, &FUNC[plan.start as usize..plan.end as usize]);
        let want = Snapshot::read(&c.layout, &buf, &mem);
        assert!(want.agg_drops > 0 && want.dyn_drops > 0, "{want:?}");
        assert_eq!(Snapshot::read(&c.layout, &buf, &View(&env.buf)), want);
    }
}

/// A firing in the middle of code that depends on every register and flag: the code
/// stores them all before and after the site, and they must be equal.
#[test]
fn a_firing_keeps_every_register_and_flag() {
    use iced_x86::code_asm::*;
    let regs = [rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15];
    let mut env = Env::new();
    // rdi: where to store; rsi, rdx: compared, for the flags. The site is the 5-byte
    // nop, an offset site (flags live): run with each of a program that reads the clock
    // (and calls it: pushfq) and one that does not (lahf).
    let store = |a: &mut CodeAssembler, at: i32| -> Result<(), IcedError> {
        a.pushfq()?;
        a.pop(qword_ptr(r11 + at))?;
        for (i, &r) in regs.iter().enumerate() {
            a.mov(qword_ptr(r11 + at + 8 + 8 * i as i32), r)?;
        }
        Ok(())
    };
    let mut a = CodeAssembler::new(64).unwrap();
    let mut site = a.create_label();
    a.push(rbx).unwrap();
    a.push(rbp).unwrap();
    a.push(r12).unwrap();
    a.mov(r11, rdi).unwrap();
    a.mov(rbx, 0x1111_2222_3333_4444u64).unwrap();
    a.mov(rbp, 0x5555u64).unwrap();
    a.mov(r12, -3i64 as u64).unwrap();
    a.cmp(rsi, rdx).unwrap();
    store(&mut a, 0).unwrap();
    a.set_label(&mut site).unwrap();
    a.db(&[0x0f, 0x1f, 0x44, 0x00, 0x00]).unwrap();
    store(&mut a, 256).unwrap();
    a.pop(r12).unwrap();
    a.pop(rbp).unwrap();
    a.pop(rbx).unwrap();
    a.ret().unwrap();
    let func = env.code.addr() + 4096 + 3 * TRAMP as u64;
    let r = a.assemble_options(func, iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS).unwrap();
    let site_off = r.label_ip(&site).unwrap() - func;
    let bytes = r.inner.code_buffer;
    env.code.write(4096 + 3 * TRAMP, &bytes);
    let layout = Layout { tls: 1, aggs: vec![AggDesc { func: AggFn::Stddev, nkeys: 1 }], strsize: 16 };
    let buf = BufferLayout::new(&layout, 64, 64);
    env.clear(buf.size);
    // A string to read (process_vm_readv of the pid in the data page: this process).
    let mut text = RawMap::anon(4096).unwrap();
    text.write(0, b"hi\0");
    env.harness.write(udtrace_inproc::trampoline::DATA_PID, &std::process::id().to_ne_bytes());
    let programs = [
        Program {
            ops: vec![
                Op::Get { d: 0, v: Var::Timestamp },
                Op::Arg { d: 1, n: 1 },
                Op::Bin { op: BinOp::Add, d: 0, a: 0, b: 1 },
                Op::TlsStore { slot: 0, a: 0 },
                Op::Agg { agg: 0, keys: 1, val: 0, incr: 0 },
            ],
        },
        Program {
            ops: vec![
                Op::Arg { d: 3, n: 2 },
                Op::Get { d: 4, v: Var::Comm1 },
                Op::Bin { op: BinOp::Add, d: 3, a: 3, b: 4 },
                Op::Agg { agg: 0, keys: 3, val: 3, incr: 3 },
            ],
        },
        // getppid(2) with the thread's entry in r11; errno (not located: 0); rax.
        Program {
            ops: vec![
                Op::TlsLoad { d: 4, slot: 0 },
                Op::Get { d: 0, v: Var::Ppid },
                Op::Get { d: 1, v: Var::Errno },
                Op::Get { d: 2, v: Var::Ret },
                Op::Bin { op: BinOp::Add, d: 0, a: 0, b: 1 },
                Op::TlsStore { slot: 0, a: 0 },
                Op::Agg { agg: 0, keys: 0, val: 2, incr: 2 },
            ],
        },
        // A string read (the system call, with the thread's entry in r11), then one of
        // a bad address (the arguments are small numbers): a fault, the record.
        Program {
            ops: vec![
                Op::TlsLoad { d: 4, slot: 0 },
                Op::Const { d: 0, v: text.addr() },
                Op::Str { d: 0, a: 0, max: 16, fault: 7 },
                Op::Agg { agg: 0, keys: 0, val: 4, incr: 4 },
                Op::Arg { d: 1, n: 1 },
                Op::Str { d: 1, a: 1, max: 16, fault: 7 },
                Op::TlsStore { slot: 0, a: 1 },
            ],
        },
    ];
    for p in &programs {
        udtrace_dif::op::verify(p, &layout).unwrap();
        let plan = plan(&bytes, func, site_off, SiteKind::Offset).unwrap();
        assert!(!plan.flags_dead);
        let w =
            SiteWork { program: p, layout: &layout, buf: &buf, base: env.buf_at.addr(), record: false, harness: None };
        let patch = env.compile(0, &plan, w);
        let orig = bytes[plan.start as usize..plan.end as usize].to_vec();
        let at = 4096 + 3 * TRAMP + plan.start as usize;
        env.code.write(at, &patch);
        let out = RawMap::anon(4096).unwrap();
        for (x, y) in [(1u64, 2u64), (2, 1), (5, 5), (i64::MIN as u64, 1), (0, u64::MAX)] {
            call_code(func, [out.addr(), x, y, 0, 0, 0]);
            let words = read_own_memory(out.addr(), 512).unwrap();
            assert_eq!(words[..256], words[256..], "registers and flags around the firing ({x}, {y})");
        }
        env.code.write(at, &orig);
    }
    let snap = Snapshot::read(&layout, &buf, &View(&env.buf));
    assert_eq!(snap.aggs[0].values().map(|r| r[0]).sum::<u64>(), 20, "{snap:?}");
    assert_eq!(snap.strings.values().collect::<Vec<_>>(), [b"hi"], "{snap:?}");
    let ppid = u64::from(std::os::unix::process::parent_id());
    assert_eq!(snap.aggs[0].get(&vec![ppid]).map(|r| r[0]), Some(5), "{snap:?}");
}
