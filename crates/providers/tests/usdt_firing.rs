//! USDT arguments at the firing (docs/usdt.md, "At the firing"): the program the
//! lowering makes from a probe's sites reads, through the reference interpreter, what
//! the consumer decodes (`UsdtSite::arg`), for every descriptor form, sites with other
//! descriptors told apart by their page offset, the frame's memory readable or not.

use udtrace_dif::gen::{Rng, UserPages, PAGE, USER_BASE};
use udtrace_dif::interp::{self, Firing, Memory};
use udtrace_dif::layout::BufferLayout;
use udtrace_dif::op::{UserMem, UREG_IP, USER_REGS};
use udtrace_dif::snapshot::Snapshot;
use udtrace_lang::check::Checker;
use udtrace_lang::firing::{usdt_at_firing, usdt_dispatch, FiringPlan, ProbeFacts, UsdtSiteArgs};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::parser::parse_script;
use udtrace_object::usdt::{parse_args, Operand, Reg, RegPart};
use udtrace_providers::usdt::UsdtSite;

/// A register's number in `USER_REGS` (what `Op::UReg` reads), found by its name.
fn number(g: Reg) -> usize {
    if g == Reg::Ip {
        return usize::from(UREG_IP);
    }
    USER_REGS
        .iter()
        .position(|n| matches!(parse_args(&format!("8@%{n}")).as_deref(), Ok([a]) if a.operand == Operand::Reg(RegPart { reg: g, width: 8, high: false })))
        .expect("a register")
}

/// Each site: (address in the file, descriptors). The first two share a page offset
/// and descriptors; the third has others at another offset.
const SITES: [(u64, &str); 3] = [
    (0x1234, "-4@%ecx 8@-8(%rbp) -1@%ah -2@$-7 4@%r12d 8@16(%rsp)"),
    (0x5234, "-4@%ecx 8@-8(%rbp) -1@%ah -2@$-7 4@%r12d 8@16(%rsp)"),
    (0x2468, "8@%rdi -2@%si 1@%dl 8@%r15 -4@-12(%rbp) 2@$40000"),
];

fn sites(descs: &[(u64, &str)]) -> Vec<UsdtSite> {
    descs.iter().map(|(vaddr, d)| UsdtSite { args: parse_args(d), vaddr: *vaddr, symbols: vec![None; 6] }).collect()
}

fn program(sites: &[UsdtSiteArgs]) -> (FiringPlan, udtrace_dif::Program) {
    let src = "fixture1:::p { @[arg0, arg1, arg2, arg3, arg4, arg5] = count(); }";
    let parsed = parse_script(src).expect("parse");
    let macros = MacroArgs::new(vec!["t.d".into()]);
    let mut checker = Checker::new(&macros);
    checker.add_source(&parsed, 0, src).expect("check");
    let prog = checker.finish();
    let plan = FiringPlan::with_usdt(&prog, &|_| false, &|_| true, 256);
    let facts = ProbeFacts { id: 1, provider: "fixture1", module: "m", function: "f", name: "p", usdt: Some(sites) };
    let p = plan.program(&prog, 0, &facts).expect("a program at the firing");
    (plan, p)
}

/// The memory the firings' registers point into: words, some at a page's end.
fn memory() -> UserPages {
    let bytes: Vec<u8> = (0..PAGE as usize).map(|i| (i * 37 + 11) as u8).collect();
    UserPages::new(&[(USER_BASE, bytes)])
}

fn run_sites(descs: &[(u64, &str)]) {
    let sites = sites(descs);
    let args: Vec<UsdtSiteArgs> = sites.iter().map(UsdtSite::firing_args).collect();
    assert!(usdt_at_firing(&args), "{descs:?}");
    let (plan, p) = program(&args);
    let user = memory();
    let mut r = Rng(0x5eed);
    let bias = 0x5555_0000_0000u64;
    for round in 0..400 {
        let site = &sites[round % sites.len()];
        let mut regs = [0u64; 17];
        for g in regs.iter_mut() {
            *g = match r.below(4) {
                0 => USER_BASE + r.below(PAGE + 16),
                1 => r.below(1 << 16),
                _ => r.next_u64(),
            };
        }
        regs[usize::from(UREG_IP)] = bias + site.vaddr;
        let f = Firing { regs, tid: 1, ..Firing::default() };
        let buf = BufferLayout::new(&plan.layout, 4, 64);
        let mut mem = vec![0u8; buf.size];
        for (o, v) in buf.header() {
            mem.store(o, v);
        }
        interp::run_reading(&p, &plan.layout, &buf, &f, &mut mem, &user);
        let snap = Snapshot::read(&plan.layout, &buf, &mem);
        let key: Vec<u64> = snap.aggs[0].keys().next().expect("a key").clone();
        let reg = |g: Reg| regs[number(g)];
        let read = |addr: u64, len: usize| {
            let mut b = vec![0u8; len];
            (user.read(addr, &mut b) == len).then_some(b)
        };
        let want: Vec<u64> = (0..6).map(|n| site.arg(n, reg, read)).collect();
        assert_eq!(key, want, "round {round}, site {:#x}: at the firing (left), the consumer (right)", site.vaddr);
    }
}

#[test]
fn the_firing_reads_what_the_consumer_decodes() {
    run_sites(&SITES);
}

#[test]
fn sites_at_one_page_offset_with_other_arguments_stay_in_the_consumer() {
    let args: Vec<UsdtSiteArgs> =
        sites(&[(0x1010, "8@%rdi"), (0x2010, "8@%rsi")]).iter().map(UsdtSite::firing_args).collect();
    assert!(usdt_dispatch(&args).is_none() && !usdt_at_firing(&args));
}

/// An argument in memory off the stack keeps a probe in the consumer where the script
/// is compiled (the page may not be resident), yet a program can read it.
#[test]
fn memory_off_the_stack_stays_in_the_consumer_at_the_start() {
    for d in ["8@8(%rsi,%rdx,8)", "4@counter+4(%rip)", "-2@(%rax)", "8@-8(%rbp,%rax,1)"] {
        // The symbol resolved (unresolved, it reads 0, as the consumer's).
        let site = UsdtSite { args: parse_args(d), vaddr: 0x1010, symbols: vec![Some(0x4000)] };
        let args = [site.firing_args()];
        assert!(!usdt_at_firing(&args) && usdt_dispatch(&args).is_some(), "{d}");
    }
}
