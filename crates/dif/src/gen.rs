//! Random programs and firings for differential tests of the executors (each runs a
//! [`Case`] and the snapshots must equal the interpreter's). Deterministic per seed, no
//! dependency: a case that fails is rerun from its seed.

use crate::interp::Firing;
use crate::layout::{AggDesc, AggFn, Layout};
use crate::op::{verify, BinOp, Op, Program, Reg, UnOp, UserMem, Var, NREGS};

/// A layout, programs on it, and firings: (program index, what the firing knows).
#[derive(Debug, Clone)]
pub struct Case {
    pub layout: Layout,
    pub programs: Vec<Program>,
    pub firings: Vec<(usize, Firing)>,
    /// The traced process's memory that [`Op::Str`] reads ([`string_case`]): bytes to
    /// write at an address, in [`USER_PAGES`] pages from [`USER_BASE`], every other one
    /// mapped (zero-filled) and those between unmapped. Empty where no program reads
    /// strings.
    pub user: Vec<(u64, Vec<u8>)>,
}

/// Where a string case's memory is (an executor's test maps the pages there).
pub const USER_BASE: u64 = 0x5e00_0000_0000;
pub const PAGE: u64 = 4096;
/// Mapped pages: `USER_BASE + 2 * k * PAGE` for k below this.
pub const USER_PAGES: u64 = 4;

/// A case's memory as [`Op::Str`] reads it (what the interpreter is given; an
/// executor's test maps [`Case::user`] for real).
pub struct UserPages(Vec<(u64, Vec<u8>)>);

impl UserPages {
    pub fn new(user: &[(u64, Vec<u8>)]) -> UserPages {
        let mut pages: Vec<(u64, Vec<u8>)> =
            (0..USER_PAGES).map(|k| (USER_BASE + 2 * k * PAGE, vec![0u8; PAGE as usize])).collect();
        for (addr, bytes) in user {
            for (i, &b) in bytes.iter().enumerate() {
                let a = addr + i as u64;
                if let Some((base, page)) = pages.iter_mut().find(|(base, _)| (*base..*base + PAGE).contains(&a)) {
                    page[(a - *base) as usize] = b;
                }
            }
        }
        UserPages(pages)
    }
}

impl UserMem for UserPages {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let Some((base, page)) = self.0.iter().find(|(base, _)| (*base..*base + PAGE).contains(&addr)) else {
            return 0;
        };
        // Mapped pages are never adjacent: a read stops at its page's end.
        let from = &page[(addr - base) as usize..];
        let n = from.len().min(buf.len());
        buf[..n].copy_from_slice(&from[..n]);
        n
    }
}

/// Threads in a case (distinct tids); buffers for it need at least this many entries.
pub const CASE_THREADS: u64 = 6;
/// Distinct key values; a keyed table of 256 entries never fills.
pub const CASE_KEYS: u64 = 4;

/// Process names the firings have: short, 8 bytes (a NUL-free first word), the most
/// the kernel keeps (15), and empty.
pub const CASE_NAMES: &[&[u8]] = &[b"hot", b"postgres", b"abcdefghijklmno", b"", b"ls"];

/// xorshift64*: a tiny generator whose sequence a seed (not 0) fixes, for the
/// differential tests here and of the compiler (`crates/runtime/tests/firing_diff.rs`).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
    fn value(&mut self) -> u64 {
        match self.below(6) {
            0 => self.below(4),
            1 => self.below(200).wrapping_sub(100),
            2 => [0, 1, u64::MAX, i64::MAX as u64, i64::MIN as u64, 0x8000_0000, 0xffff_ffff][self.below(7) as usize],
            3 => 1 << self.below(64),
            _ => self.next_u64(),
        }
    }
}

/// The case of `seed`.
pub fn case(seed: u64) -> Case {
    build(seed, false, false)
}

/// The case of `seed` with strings: programs read them ([`Op::Str`], some as keys),
/// from firings' arguments that point at them or at nothing (0, 1, an unmapped page),
/// into empty strings, strings longer than the layout's `strsize` (1 to 256), and one
/// running to the end of a mapped page with no NUL (a fault unless `max` bytes fit).
pub fn string_case(seed: u64) -> Case {
    build(seed, true, false)
}

/// [`string_case`] whose programs also read USDT operands: registers of the site
/// ([`Op::UReg`], the firings' `regs` random, some pointing into the case's memory) and
/// memory ([`Op::Load`] of 1, 2, 4 or 8 bytes at an argument or register, in a
/// string, across the end of a mapped page, or unmapped). Only the BPF executor and the
/// interpreter run these (USDT sites are not trampolines).
pub fn usdt_case(seed: u64) -> Case {
    build(seed, true, true)
}

/// Strings a string case's memory holds, each with its NUL (and a few without).
const CASE_STRINGS: &[&[u8]] = &[b"", b"a", b"hello", b"/etc/passwd", b"hello", b"abcdefg", b"abcdefgh"];

fn user_memory() -> (Vec<(u64, Vec<u8>)>, Vec<u64>) {
    let mut user = Vec::new();
    let mut addrs = vec![0, 1, USER_BASE + PAGE, USER_BASE + 2 * PAGE * USER_PAGES];
    let mut at = USER_BASE;
    for s in CASE_STRINGS {
        let mut b = s.to_vec();
        b.push(0);
        addrs.push(at);
        if s.len() > 2 {
            addrs.push(at + 2);
        }
        user.push((at, b));
        at += 64;
    }
    // Longer than any strsize, in the next mapped page.
    let long = USER_BASE + 2 * PAGE;
    let mut b: Vec<u8> = (0..300u32).map(|i| b'a' + (i % 26) as u8).collect();
    b.push(0);
    user.push((long, b));
    addrs.extend([long, long + 40, long + 299, long + 300]);
    // No NUL before the page's end: 10 bytes, then the unmapped page.
    let tail = USER_BASE + 4 * PAGE + PAGE - 10;
    user.push((tail, b"0123456789".to_vec()));
    addrs.extend([tail, tail + 9]);
    (user, addrs)
}

fn build(seed: u64, strings: bool, usdt: bool) -> Case {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let funcs = |r: &mut Rng| match r.below(9) {
        0 => AggFn::Count,
        1 => AggFn::Sum,
        2 => AggFn::Min,
        3 => AggFn::Max,
        4 => AggFn::Avg,
        5 => AggFn::Stddev,
        6 => AggFn::Quantize,
        7 => AggFn::Lquantize {
            base: r.below(40) as i32 - 20,
            step: 1 + r.below(10) as u16,
            levels: 1 + r.below(20) as u16,
        },
        // The bin comes from the program (any value: the update clamps it).
        _ => AggFn::Llquantize { bins: 1 + r.below(40) as u16 },
    };
    let naggs = r.below(4) as usize;
    let layout = Layout {
        tls: r.below(4) as u16,
        aggs: (0..naggs).map(|_| AggDesc { func: funcs(&mut r), nkeys: r.below(3) as u8 }).collect(),
        strsize: if strings { *r.pick(&[1, 2, 8, 9, 16, 64, 256]) } else { 0 },
    };
    let (user, addrs) = if strings { user_memory() } else { (Vec::new(), Vec::new()) };
    let programs: Vec<Program> = (0..1 + r.below(3)).map(|_| program(&mut r, &layout, usdt)).collect();
    for p in &programs {
        debug_assert_eq!(verify(p, &layout), Ok(()));
    }
    let mut ts = 1_000_000 + r.below(1 << 40);
    let firings = (0..1 + r.below(40))
        .map(|_| {
            ts += r.below(100_000);
            let f = Firing {
                args: [r.value(), r.value(), r.value(), r.value(), r.value(), r.value()],
                pid: 1000 + r.below(2),
                tid: 2000 + r.below(CASE_THREADS),
                cpu: r.below(2),
                timestamp: ts,
                uid: r.below(2),
                gid: 100,
                ret: r.value(),
                ppid: 1 + r.below(3),
                errno: [0, 2, 11, u64::MAX][r.below(4) as usize],
                comm: crate::op::comm_words(CASE_NAMES[r.below(CASE_NAMES.len() as u64) as usize]),
                regs: [0; 17],
            };
            let mut f = f;
            if strings {
                for a in &mut f.args {
                    if r.below(3) > 0 {
                        *a = *r.pick(&addrs);
                    }
                }
            }
            if usdt {
                for g in &mut f.regs {
                    *g = if r.below(3) == 0 { *r.pick(&addrs) } else { r.value() };
                }
            }
            (r.below(programs.len() as u64) as usize, f)
        })
        .collect();
    Case { layout, programs, firings, user }
}

fn program(r: &mut Rng, layout: &Layout, usdt: bool) -> Program {
    let mut ops = Vec::new();
    let mut written: u16 = 0;
    block(r, layout, &mut ops, &mut written, 0, usdt);
    Program { ops }
}

/// A string read of argument `n` into `d`, its fault going to the end of the block
/// (patched there: `faults` holds the op's index).
fn string_read(r: &mut Rng, layout: &Layout, ops: &mut Vec<Op>, faults: &mut Vec<usize>, d: Reg) {
    ops.push(Op::Arg { d, n: r.below(6) as u8 });
    // Mostly strsize; sometimes copyinstr(s, n)'s smaller n.
    let max = if r.below(3) == 0 { 1 + r.below(u64::from(layout.strsize)) as u16 } else { layout.strsize };
    faults.push(ops.len());
    ops.push(Op::Str { d, a: d, max, fault: 0 });
}

/// Emits a few ops, some of them a block skipped when a register is 0 (registers
/// written only inside it do not count as written after it).
fn block(r: &mut Rng, layout: &Layout, ops: &mut Vec<Op>, written: &mut u16, depth: u32, usdt: bool) {
    let reg = |r: &mut Rng| r.below(NREGS as u64) as Reg;
    let strings = layout.strsize > 0;
    let mut faults = Vec::new();
    for _ in 0..1 + r.below(8) {
        let pick = |r: &mut Rng, w: u16| -> Option<Reg> {
            let n = w.count_ones() as u64;
            if n == 0 {
                return None;
            }
            let k = r.below(n);
            (0..NREGS as Reg).filter(|&i| w & (1 << i) != 0).nth(k as usize)
        };
        let d = reg(r);
        let choice = r.below(15);
        let op = match (choice, pick(r, *written), pick(r, *written)) {
            (0, ..) | (_, None, _) => Op::Const { d, v: r.value() },
            (1, ..) if usdt && r.below(2) == 0 => Op::UReg { d, r: r.below(17) as u8 },
            (1, ..) if usdt => {
                // A USDT operand in memory: at an argument or register (pointing into
                // the case's memory or not), or at an address computed from one.
                ops.push(match r.below(2) {
                    0 => Op::Arg { d, n: r.below(6) as u8 },
                    _ => Op::UReg { d, r: r.below(17) as u8 },
                });
                Op::Load { d, a: d, size: *r.pick(&[1, 2, 4, 8]) }
            }
            (1, ..) => Op::Arg { d, n: r.below(6) as u8 },
            (2, ..) => Op::Get { d, v: Var::ALL[r.below(Var::ALL.len() as u64) as usize] },
            (3, Some(a), _) => Op::Mov { d, a },
            (4 | 5, Some(a), Some(b)) => Op::Bin { op: BinOp::ALL[r.below(15) as usize], d, a, b },
            (6, Some(a), _) => {
                let signed = r.below(2) == 0;
                let mut imm = r.value();
                if imm == 0 || (signed && imm as i64 == -1) {
                    imm = 3;
                }
                Op::Div { d, a, imm, signed, rem: r.below(2) == 0 }
            }
            (7, Some(a), _) => Op::Un { op: [UnOp::Neg, UnOp::BitNot, UnOp::Not][r.below(3) as usize], d, a },
            (8, Some(a), _) => Op::Ext { d, a, bits: [8, 16, 32][r.below(3) as usize], signed: r.below(2) == 0 },
            (9, ..) if layout.tls > 0 => Op::TlsLoad { d, slot: r.below(u64::from(layout.tls)) as u16 },
            (10, Some(a), _) if layout.tls > 0 => Op::TlsStore { slot: r.below(u64::from(layout.tls)) as u16, a },
            (11, Some(a), Some(b)) if !layout.aggs.is_empty() => {
                let agg = r.below(layout.aggs.len() as u64) as u16;
                let nk = layout.aggs[usize::from(agg)].nkeys;
                // Keys: small values (a bounded number of entries), in a run of registers.
                let keys = r.below((NREGS - usize::from(nk) + 1) as u64) as Reg;
                for k in 0..nk {
                    // Some keys are a word of the process's name (few distinct values), or
                    // a string's id.
                    if strings && r.below(2) == 0 {
                        string_read(r, layout, ops, &mut faults, keys + k);
                    } else {
                        ops.push(match r.below(5) {
                            0 => Op::Get { d: keys + k, v: *r.pick(&[Var::Comm0, Var::Comm1]) },
                            _ => Op::Const { d: keys + k, v: r.below(CASE_KEYS) },
                        });
                    }
                    *written |= 1 << (keys + k);
                }
                let (val, incr) = if nk > 0 && r.below(2) == 0 { (keys, b) } else { (a, b) };
                Op::Agg { agg, keys, val, incr }
            }
            (12 | 13, Some(a), _) if depth < 3 => {
                let at = ops.len();
                ops.push(Op::Jz { a, to: 0 });
                let mut inner = *written;
                block(r, layout, ops, &mut inner, depth + 1, usdt);
                let to = ops.len() as u16;
                ops[at] = Op::Jz { a, to };
                continue;
            }
            (14, ..) if !strings || r.below(2) == 0 => Op::Emit,
            (14, ..) => {
                string_read(r, layout, ops, &mut faults, d);
                *written |= 1 << d;
                continue;
            }
            _ => Op::Const { d, v: r.value() },
        };
        if let (_, Some(d)) = op.regs() {
            *written |= 1 << d;
        }
        ops.push(op);
    }
    let end = ops.len() as u16;
    for i in faults {
        if let Op::Str { d, a, max, .. } = ops[i] {
            ops[i] = Op::Str { d, a, max, fault: end };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{run, run_reading, Memory};
    use crate::layout::BufferLayout;
    use crate::snapshot::Snapshot;

    #[test]
    fn cases_verify_and_run() {
        let mut nonempty = 0;
        for seed in 0..2000 {
            let c = case(seed);
            for p in &c.programs {
                assert_eq!(verify(p, &c.layout), Ok(()), "seed {seed}");
            }
            let buf = BufferLayout::new(&c.layout, 64, 256);
            let mut mem = vec![0u8; buf.size];
            for (o, v) in buf.header() {
                mem.store(o, v);
            }
            for (i, f) in &c.firings {
                run(&c.programs[*i], &c.layout, &buf, f, &mut mem);
            }
            let s = Snapshot::read(&c.layout, &buf, &mem);
            assert_eq!((s.agg_drops, s.dyn_drops), (0, 0), "seed {seed}");
            nonempty += usize::from(s.aggs.iter().any(|a| !a.is_empty()));
        }
        assert!(nonempty > 500, "{nonempty} of 2000 cases aggregate something");
    }

    #[test]
    fn string_cases_read_faults_truncations_and_empty_strings() {
        let (mut faults, mut empty, mut truncated, mut keyed) = (0, 0, 0, 0);
        for seed in 0..2000 {
            let c = string_case(seed);
            let user = UserPages::new(&c.user);
            for p in &c.programs {
                assert_eq!(verify(p, &c.layout), Ok(()), "seed {seed}");
            }
            let buf = BufferLayout::new(&c.layout, 64, 256);
            let mut mem = vec![0u8; buf.size];
            for (i, f) in &c.firings {
                let p = &c.programs[*i];
                for op in &p.ops {
                    if let Op::Str { max, .. } = *op {
                        // What the read sees for each argument the program might pass.
                        for &arg in &f.args {
                            match crate::op::user_string(&user, arg, usize::from(max)) {
                                None => faults += 1,
                                Some(s) if s.is_empty() => empty += 1,
                                Some(s) if s.len() + 1 == usize::from(max) && max < 300 => truncated += 1,
                                Some(_) => {}
                            }
                        }
                    }
                }
                run_reading(p, &c.layout, &buf, f, &mut mem, &user);
            }
            let s = Snapshot::read(&c.layout, &buf, &mem);
            for (id, st) in &s.strings {
                assert!(st.len() < usize::from(c.layout.strsize), "seed {seed}");
                assert_eq!(*id, crate::layout::string_id(&crate::layout::string_words(st, c.layout.string_words())));
            }
            keyed += usize::from(s.aggs.iter().any(|a| a.keys().any(|k| k.iter().any(|w| s.strings.contains_key(w)))));
        }
        assert!(faults > 1000 && empty > 1000 && truncated > 1000, "{faults} {empty} {truncated}");
        assert!(keyed > 200, "{keyed} of 2000 cases key by a string");
    }

    #[test]
    fn usdt_cases_read_registers_and_memory() {
        let (mut regs, mut loaded, mut unread) = (0, 0, 0);
        for seed in 0..1000 {
            let c = usdt_case(seed);
            let user = UserPages::new(&c.user);
            let buf = BufferLayout::new(&c.layout, 64, 256);
            let mut mem = vec![0u8; buf.size];
            for p in &c.programs {
                assert_eq!(verify(p, &c.layout), Ok(()), "seed {seed}");
                regs += p.ops.iter().filter(|o| matches!(o, Op::UReg { .. })).count();
            }
            for (i, f) in &c.firings {
                for &a in f.args.iter().chain(&f.regs) {
                    match crate::interp::load(&user, a, 8) {
                        0 => unread += 1,
                        _ => loaded += 1,
                    }
                }
                run_reading(&c.programs[*i], &c.layout, &buf, f, &mut mem, &user);
            }
        }
        assert!(regs > 500 && loaded > 1000 && unread > 1000, "{regs} {loaded} {unread}");
    }
}
