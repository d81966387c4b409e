//! The lowering to firing-time programs against the consumer: each script's clauses
//! run on the same firings once all in the consumer, once as `udtrace_lang::firing`
//! places them (programs through the reference interpreter, the rest in the
//! consumer, the aggregations read back), and print the same.

use std::rc::Rc;

use udtrace_dif::gen::{string_case, Rng, UserPages, PAGE, USER_BASE};
use udtrace_dif::interp::{self, Firing, Memory};
use udtrace_dif::layout::BufferLayout;
use udtrace_dif::snapshot::Snapshot;
use udtrace_dif::Program;
use udtrace_lang::check::Checker;
use udtrace_lang::firing::{FiringPlan, ProbeFacts};
use udtrace_lang::ir::{Builtin, CheckedProgram};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::parser::parse_script;
use udtrace_runtime::consumer::printa_in;
use udtrace_runtime::{Consumer, Context, Ecb, Probe, Settings, Value};

const PID: u64 = 4242;

fn probes() -> Vec<Rc<Probe>> {
    ["entry", "return", "1f"]
        .iter()
        .enumerate()
        .map(|(i, n)| Rc::new(Probe::new(i as u32 + 1, "pid4242", "a.out", "work", n)))
        .collect()
}

/// The variables the scripts use, declared (D types a variable at its first
/// assignment, and the random scripts may read one first).
const DECLS: &str = "self int64_t a; self unsigned int b; self int n; self int64_t m; this int c;\n";

fn check(src: &str) -> Option<CheckedProgram> {
    let src = &format!("{DECLS}{src}");
    let program = match parse_script(src) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e:?}");
            return None;
        }
    };
    let macros = MacroArgs::new(vec!["t.d".into()]);
    let mut checker = Checker::new(&macros);
    if let Err(e) = checker.add_source(&program, 0, src) {
        eprintln!("{}: {src}", e.message);
        return None;
    }
    Some(checker.finish())
}

fn ecbs(prog: &CheckedProgram, probes: &[Rc<Probe>]) -> Vec<Ecb> {
    let mut out = Vec::new();
    for (ci, cl) in prog.clauses.iter().enumerate() {
        for (di, d) in cl.probes.iter().enumerate() {
            for p in probes.iter().filter(|p| d.name.is_empty() || d.name == p.name) {
                out.push(Ecb { epid: out.len() as u32 + 1, clause: ci, stmt: ci + di, probe: Rc::clone(p) });
            }
        }
    }
    out
}

/// A firing, and whether it is at the return probe (whose arguments are the site's
/// offset and the return value, as `udtrace_providers::pid_context` reads them).
struct Ctx(Firing, bool);

/// The traced process's memory, for `copyinstr` (the string cases' of `udtrace_dif::gen`):
/// the consumer reads it as a record's capture is read, the programs as `Op::Str` reads.
fn memory() -> &'static UserPages {
    static PAGES: std::sync::OnceLock<UserPages> = std::sync::OnceLock::new();
    PAGES.get_or_init(|| UserPages::new(&string_case(0).user))
}

/// The return site's offset (`arg0` at the return probe).
const RET_OFFSET: i64 = 0x2a;

impl Context for Ctx {
    fn builtin(&self, b: Builtin) -> Option<Value> {
        let f = &self.0;
        Some(Value::int(match b {
            Builtin::Arg(0) if self.1 => RET_OFFSET,
            Builtin::Arg(1) if self.1 => f.ret as i64,
            Builtin::Arg(_) if self.1 => 0,
            Builtin::Arg(n) if n < 6 => f.args[usize::from(n)] as i64,
            Builtin::Pid => f.pid as i64,
            Builtin::Tid => f.tid as i64,
            Builtin::Timestamp | Builtin::Vtimestamp => f.timestamp as i64,
            Builtin::Uid => f.uid as i64,
            Builtin::Gid => f.gid as i64,
            Builtin::Ppid => f.ppid as i64,
            Builtin::Errno => f.errno as i64,
            Builtin::Execname => return Some(Value::Str(udtrace_dif::op::comm_name(f.comm))),
            _ => return None,
        }))
    }

    fn read_string(&self, addr: u64, max: usize) -> Option<Vec<u8>> {
        udtrace_dif::op::user_string(memory(), addr, max)
    }
}

/// The names firings have (`execname`): the most a name keeps (15 bytes) among them.
const NAMES: [&str; 5] = ["work", "postgres", "abcdefghijklmno", "", "a"];

fn firings(seed: u64, n: usize) -> Vec<(u32, Firing)> {
    let mut r = Rng(seed | 1);
    let interesting: [u64; 16] = [
        // Strings: "", "a", "hello", 300 bytes (udtrace_dif::gen's string memory).
        USER_BASE,
        USER_BASE + 64,
        USER_BASE + 128,
        USER_BASE + 2 * PAGE,
        0,
        1,
        2,
        7,
        255,
        256,
        u64::MAX,
        (-7i64) as u64,
        i32::MIN as u64,
        u64::from(u32::MAX),
        i64::MIN as u64,
        0x1234_5678_9abc,
    ];
    let mut ts = 1_000_000u64;
    (0..n)
        .map(|_| {
            ts += r.next_u64() % 5000;
            let mut args = [0u64; 6];
            for a in &mut args {
                *a = if r.next_u64().is_multiple_of(3) { r.next_u64() } else { *r.pick(&interesting) };
            }
            let f = Firing {
                args,
                pid: PID,
                tid: 100 + r.next_u64() % 4,
                cpu: r.next_u64() % 3,
                timestamp: ts,
                uid: *r.pick(&[0, 1000, u64::from(u32::MAX)]),
                gid: 100,
                ret: if r.next_u64().is_multiple_of(3) { r.next_u64() } else { *r.pick(&interesting) },
                ppid: 1 + r.next_u64() % 2,
                errno: *r.pick(&[0, 2, 11]),
                comm: udtrace_dif::op::comm_words(r.pick(&NAMES).as_bytes()),
                regs: [0; 17],
            };
            ((r.next_u64() % 3) as u32 + 1, f)
        })
        .collect()
}

fn settings() -> Settings {
    Settings { quiet: true, ..Settings::default() }
}

/// What the consumer alone prints.
fn consumer_only(prog: &Rc<CheckedProgram>, fs: &[(u32, Firing)]) -> String {
    let probes = probes();
    let mut c = Consumer::new(Rc::clone(prog), settings(), ecbs(prog, &probes), 1);
    let mut out: Vec<u8> = Vec::new();
    for (id, f) in fs {
        c.fire(*id, f.cpu as u32, &Ctx(*f, *id == 2), &mut out).unwrap();
    }
    c.finish(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// What the lowering prints: programs at the firing, the rest in the consumer.
/// `None` when a keyed table dropped an update (keys differing only in their high bits
/// share the low bits of `udtrace_dif::layout::key_hash`, which picks the entry).
fn lowered(prog: &Rc<CheckedProgram>, plan: &FiringPlan, fs: &[(u32, Firing)]) -> Option<String> {
    let probes = probes();
    let ecbs = ecbs(prog, &probes);
    let mut c = Consumer::new(Rc::clone(prog), settings(), ecbs.clone(), 1);
    c.set_at_firing(plan.at_firing.clone());
    c.set_string_reads(plan.string_reads.clone());
    // Per probe: its program (clauses at the firing, gates of the others), and whether
    // it records every firing (a consumer clause without a gate).
    let is_pid = |d: &udtrace_lang::ast::ProbeDesc| d.provider.starts_with("pid");
    let programs: Vec<(Program, bool)> = probes
        .iter()
        .map(|p| {
            let facts = ProbeFacts {
                id: p.id,
                provider: &p.provider,
                module: &p.module,
                function: &p.function,
                name: &p.name,
                usdt: None,
            };
            let mut all = Program::default();
            let mut always = false;
            for e in ecbs.iter().filter(|e| e.probe.id == p.id) {
                match plan.program(prog, e.clause, &facts).or_else(|| plan.gate(prog, e.clause, &facts, &is_pid)) {
                    Some(one) => all.append(&one),
                    None => always = true,
                }
            }
            udtrace_dif::op::verify(&all, &plan.layout).unwrap();
            (all, always)
        })
        .collect();
    let buf = BufferLayout::new(&plan.layout, 64, 4096);
    let mut mem = vec![0u8; buf.size];
    for (o, v) in buf.header() {
        mem.store(o, v);
    }
    let mut out: Vec<u8> = Vec::new();
    let by_id = |id: u32| probes.iter().find(|p| p.id == id).cloned();
    // The session reads back before records whose clauses print, clear or truncate.
    let reads_back = prog.clauses.iter().any(|cl| printa_in(&cl.actions)) && !plan.layout.aggs.is_empty();
    for (id, f) in fs {
        let (program, always) = &programs[*id as usize - 1];
        // A firing writes its record when a clause needs it every time, or a gate
        // asked for it: the consumer sees only those.
        if interp::run_reading(program, &plan.layout, &buf, f, &mut mem, memory()) == interp::Outcome::Emit || *always {
            if reads_back {
                udtrace_runtime::firing::load(&mut c, plan, &Snapshot::read(&plan.layout, &buf, &mem), &by_id);
            }
            c.fire(*id, f.cpu as u32, &Ctx(*f, *id == 2), &mut out).unwrap();
        }
    }
    let snap = Snapshot::read(&plan.layout, &buf, &mem);
    if snap.agg_drops + snap.dyn_drops > 0 {
        return None;
    }
    udtrace_runtime::firing::load(&mut c, plan, &snap, &by_id);
    c.finish(&mut out).unwrap();
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Compares both ways on `src`; whether anything ran at the firing.
fn compare(src: &str, seed: u64) -> Option<bool> {
    let prog = Rc::new(check(src)?);
    let plan = FiringPlan::new(&prog, &|d| d.provider.starts_with("pid"));
    let fs = firings(seed, 300);
    let a = consumer_only(&prog, &fs);
    let b = lowered(&prog, &plan, &fs)?;
    assert_eq!(a, b, "script:\n{src}\nplan: {:?}", plan.at_firing);
    Some(!plan.is_empty())
}

const TABLE: &[(&str, bool)] = &[
    ("pid4242::work:entry { @ = count(); }", true),
    (
        "pid4242::work:entry { self->ts = timestamp; }
         pid4242::work:return /self->ts/ { @ = quantize(timestamp - self->ts); self->ts = 0; }",
        true,
    ),
    ("pid4242::work:entry /arg0 == 7/ { @[probefunc, probename] = count(); }", true),
    ("pid4242::work: { @[probefunc] = count(); @n[probename] = count(); }", true),
    ("pid4242::work:entry { @[arg1 & 3, (char)arg2] = sum(arg0 / 7); @m = min(arg0 % -5); }", true),
    ("pid4242::work:entry { @[arg0 % -7, arg1 % 5, arg2 / -3] = sum((arg3 & 0xff) % -2); }", true),
    ("pid4242::work:entry { @[(unsigned int)arg0 % 7, (int)arg1 / -1, arg2 % -1] = count(); }", true),
    ("pid4242::work:entry { @ = lquantize((int)arg0, -10, 10, 3); @q = quantize(arg1, arg2 & 3); }", true),
    ("pid4242::work:entry { @a = avg(arg0); @s = stddev(arg1 >> 3); @x = max((short)arg2); }", true),
    ("pid4242::work:entry { @[pid, tid, cpu, uid, gid] = count(); }", true),
    ("pid4242::work:entry /probefunc == \"work\" && probename != \"entry\"/ { @ = count(); }", true),
    ("pid4242::work:entry { this->x = arg0 * 3; @[this->x > 5 ? 1 : 0] = sum(this->x); }", true),
    ("pid4242::work:entry { self->n++; self->m += arg0 / -1; @[tid] = sum(self->n + self->m); }", true),
    ("pid4242::work:entry { if (arg0 > 2) { @a = count(); } else { @b = sum(arg1); } }", true),
    // Strings (some arguments point at them, most fault: an error each, both ways).
    (
        "pid4242::work:entry { @[copyinstr(arg0)] = count(); }
         pid4242::work:entry /arg4 & 1/ { @n[copyinstr(arg1, 3), arg2 & 1] = sum(arg3 & 7); }",
        true,
    ),
    ("pid4242::work:return { @[copyinstr(arg1), execname] = count(); }", true),
    // A predicate on a variable the consumer does not keep (it lives at the firing):
    // the consumer could not tell a faulting firing's clause from the record.
    (
        "pid4242::work:entry { self->x = arg2 & 1; }
         pid4242::work:entry /self->x/ { @[copyinstr(arg0)] = count(); }",
        false,
    ),
    (
        "pid4242::work:entry /timestamp & 1/ { @[copyinstr(arg0)] = count(); }
         pid4242::work:entry { if (arg2 & 1) { @[copyinstr(arg1)] = count(); } }",
        false,
    ),
    // A string read after an update (the second key's, after the first's update): the
    // clause stays in the consumer.
    ("pid4242::work:entry { @a[copyinstr(arg0)] = count(); @[copyinstr(arg1)] = count(); }", false),
    ("pid4242::work:entry { x = arg0; @ = sum(x); }", false),
    ("pid4242::work:entry /arg0 % 3 == 1 && pid == 4242/ { printf(\"%d\\n\", arg0); }", false),
    ("pid4242::work:entry /(uid & 1) || probename == \"1f\"/ { @[execname] = sum(arg1); }", true),
    ("pid4242::work:entry { @[execname] = count(); }", true),
    ("pid4242::work:entry /execname == \"postgres\"/ { @[execname] = sum(arg0); }", true),
    ("pid4242::work: { @[execname, probename, arg2 & 3] = count(); }", false),
    ("pid4242::work:entry { @[execname, probename, arg2 & 3] = count(); }", true),
    ("pid4242::work:entry /execname != \"work\" && pid == 4242/ { @[probefunc] = count(); }", true),
    ("pid4242::work:entry /\"abcdefghijklmno\" == execname/ { @ = count(); }", true),
    ("pid4242::work:entry /execname == \"abcdefghijklmnop\"/ { @ = count(); }", true),
    ("pid4242::work:entry /execname < \"m\"/ { @ = count(); }", true),
    ("pid4242::work:entry /\"m\" < execname/ { @[execname] = count(); }", true),
    ("pid4242::work:entry /\"postgres\" >= execname/ { @[execname] = count(); }", true),
    ("pid4242::work:entry /execname >= \"postgres\" || \"b\" > execname/ { @[execname] = count(); }", true),
    ("pid4242::work:entry /execname <= \"abcdefghijklmnop\"/ { @[execname] = count(); }", true),
    ("pid4242::work:entry /execname > \"abcdefghijklmno\"/ { @[execname] = count(); }", true),
    ("pid4242::work:entry /\"abcdefghijklmnoz\" <= execname/ { @[execname] = count(); }", true),
    ("pid4242::work:entry { @[execname] = count(); } pid4242::work:return { @[probefunc] = count(); }", false),
    ("pid4242::work:entry /execname == \"work\"/ { printf(\"%d\", arg0); }", false),
    ("pid4242::work:entry { self->ts = timestamp; } pid4242::work:return { printf(\"%d\", self->ts); }", false),
    (
        "pid4242::work:entry { @c = count(); } pid4242::work:return { @d = count(); }
         BEGIN { @d = count(); }",
        true,
    ),
    ("pid4242::work:entry { @ = sum(arg0 / arg1); }", false),
    ("pid4242::work:return { @ = sum(arg1); @a[args[2], arg5] = quantize(args[1]); }", true),
    ("pid4242::work:return /arg1 > 5/ { @ = count(); } pid4242::work:return /arg1 & 1/ { printf(\"%d\", arg1); }", true),
    ("pid4242::work:return { @ = sum(arg0); }", false),
    ("pid4242::work: { @[probename] = sum(arg1); }", false),
    ("pid4242::work:entry { @[(unsigned char)arg0] = sum((unsigned short)arg1 * 3 - arg2); }", true),
    // clear() and trunc() in the consumer, of aggregations at the firing.
    (
        "pid4242::work:entry { @[arg1 & 7] = count(); @s[arg2 & 3] = sum(arg0 & 0xff); @q = quantize(arg1 & 0xffff); }
         pid4242::work:1f /(arg0 & 3) == 1/ { printa(@); printa(@s); clear(@); clear(@q); }
         pid4242::work:return /(arg2 & 7) == 2/ { trunc(@s, 2); trunc(@, -1); printa(@s); }
         pid4242::work:return /(arg2 & 7) == 3/ { trunc(@s); printa(@); }",
        true,
    ),
    (
        "pid4242::work:entry { @a[arg0 & 1] = avg(arg1 & 0xff); @d[arg0 & 1] = stddev(arg1); @l = lquantize((int)arg1, 0, 10); }
         pid4242::work:1f /(arg0 & 7) == 1/ { printa(@a); printa(@d); printa(@l); clear(@a); clear(@d); trunc(@l); }",
        true,
    ),
    ("pid4242::work:entry { @ = min(arg0); } pid4242::work:1f { clear(@); }", false),
    // llquantize: the program computes the bin.
    (
        "pid4242::work:entry { @ = llquantize(arg0, 10, 0, 6, 20); @b[arg1 & 3] = llquantize((int)arg2, 2, 0, 62, 4); }
         pid4242::work:1f { @c = llquantize(arg1 & 0xffffff, 3, 1, 5, 7, arg2 & 7); }",
        true,
    ),
    ("pid4242::work:entry { @ = llquantize(arg0, 1000, 0, 5, 1000); }", false),
    // ppid and vtimestamp at the firing; ppid not in a gate.
    ("pid4242::work:entry /ppid == 2/ { @[ppid, pid] = count(); @v = sum(vtimestamp - timestamp); }", true),
    ("pid4242::work:entry /ppid == 2/ { printf(\"%d\", ppid); }", false),
    ("pid4242::work:return { @[probefunc, errno] = count(); } pid4242::work:return /errno == 2/ { @c = count(); }", true),
];

#[test]
fn the_table_prints_alike_both_ways() {
    for (i, &(src, moves)) in TABLE.iter().enumerate() {
        let lowered = compare(src, 7 + i as u64).unwrap_or_else(|| panic!("does not compile, or dropped: {src}"));
        assert_eq!(lowered, moves, "what moves to the firing: {src}");
    }
}

/// A random integer expression of the kinds the lowering takes (and some it leaves
/// to the consumer).
fn expr(r: &mut Rng, depth: u32) -> String {
    let leaves = [
        "arg0",
        "arg1",
        "arg2",
        "args[3]",
        "arg5",
        "pid",
        "tid",
        "cpu",
        "uid",
        "gid",
        "ppid",
        "vtimestamp",
        "timestamp",
        "id",
        "self->a",
        "self->b",
        "this->c",
        "3",
        "-1",
        "0x7fffffff",
        "255",
        "0",
    ];
    if depth == 0 || r.next_u64().is_multiple_of(4) {
        return r.pick(&leaves).to_string();
    }
    let a = expr(r, depth - 1);
    let b = expr(r, depth - 1);
    match r.next_u64() % 16 {
        0 => format!("({a} {} {b})", r.pick(&["+", "-", "*", "&", "|", "^"])),
        1 => format!("({a} {} {b})", r.pick(&["<", "<=", ">", ">=", "==", "!="])),
        2 => format!("({a} {} {})", r.pick(&["/", "%"]), r.pick(&["1", "-1", "3", "-7", "1000", "0x80000000"])),
        3 => format!("({a} {} ({b} & 63))", r.pick(&["<<", ">>"])),
        4 => format!("({a} {} {b})", r.pick(&["&&", "||", "^^"])),
        5 => format!("({a} ? {b} : {})", expr(r, depth - 1)),
        6 => format!("({}{a})", r.pick(&["-", "~", "!"])),
        7 => format!(
            "(({}){a})",
            r.pick(&["char", "unsigned char", "short", "unsigned short", "int", "unsigned int", "uint64_t", "long"])
        ),
        8 => format!("(self->a = {a})"),
        9 => format!("(this->c += {a})"),
        10 => format!("(self->b{})", r.pick(&["++", "--"])),
        11 => {
            let name = r.pick(&["probefunc", "probename", "probemod", "execname"]);
            let op = r.pick(&["==", "!=", "<", "<=", ">", ">="]);
            let s = r.pick(&["work", "entry", "1f", "postgres", "abcdefghijklmno", "abcdefghijklmnop", "", "a", "wor"]);
            if r.next_u64().is_multiple_of(2) {
                format!("({name} {op} \"{s}\")")
            } else {
                format!("(\"{s}\" {op} {name})")
            }
        }
        12 if r.next_u64().is_multiple_of(3) => format!("({a} / {b})"),
        13 => format!("(self->a {}= {b})", r.pick(&["+", "-", "*", "&", "|", "^", "<<", ">>"])),
        _ => format!("({a} + {b})"),
    }
}

fn clause(r: &mut Rng) -> String {
    let probe = r.pick(&["entry", "return", "1f", "entry", "1f"]);
    let pred = if r.next_u64().is_multiple_of(2) { format!("/{}/", expr(r, 3)) } else { String::new() };
    let mut body = String::new();
    for _ in 0..1 + r.next_u64() % 4 {
        let e = expr(r, 3);
        let stmt = match r.next_u64() % 9 {
            0 => format!("self->a = {e};"),
            1 => format!("this->c = {e};"),
            2 => "@c[probename] = count();".to_string(),
            3 => format!("@s[{}] = sum({e});", expr(r, 2)),
            4 => format!("@q = quantize({e});"),
            5 => format!("@l[{}] = lquantize({e}, -100, 100, 7);", expr(r, 1)),
            6 if r.next_u64().is_multiple_of(3) => {
                format!(
                    "@ll[{}] = llquantize({e}, {});",
                    expr(r, 1),
                    r.pick(&["10, 0, 6, 20", "2, 0, 62, 4", "4, 1, 3, 8"])
                )
            }
            6 => format!("@m = {}({e});", r.pick(&["min", "max", "avg", "stddev"])),
            7 => format!("if ({e}) {{ self->b = {}; }}", expr(r, 2)),
            8 if r.next_u64().is_multiple_of(2) => format!("@e[execname, {}] = sum({e});", expr(r, 1)),
            _ => "@t[tid] = sum(self->a + self->b);".to_string(),
        };
        body.push_str(&stmt);
        body.push(' ');
    }
    // At the return probe, arg0 (the site's offset) keeps a clause in the consumer;
    // arg1 is the return value, arg2.. 0, at the firing as in the consumer (`Ctx`).
    format!("pid4242::work:{probe} {pred} {{ {body}}}\n")
}

/// A consumer clause emptying one of the aggregations `src` updates (at the firing
/// when its rows subtract), or nothing.
fn emptying(r: &mut Rng, src: &str) -> String {
    let used: Vec<&str> = ["@c[", "@s[", "@q =", "@l[", "@m =", "@t[", "@ll["]
        .into_iter()
        .filter(|a| src.contains(a))
        .map(|a| a.split(['[', ' ']).next().unwrap_or(a))
        .collect();
    if used.is_empty() || r.next_u64().is_multiple_of(2) {
        return String::new();
    }
    let agg = r.pick(&used);
    let act = match r.next_u64() % 3 {
        0 => format!("clear({agg});"),
        1 => format!("trunc({agg});"),
        _ => format!("trunc({agg}, {});", r.pick(&["1", "2", "-1", "-3"])),
    };
    let at = r.pick(&["entry", "return", "1f"]);
    format!("pid4242::work:{at} /(arg0 & 3) == 1/ {{ printa({agg}); {act} }}\n")
}

#[test]
fn random_scripts_print_alike_both_ways() {
    let mut r = Rng(0x5eed_1234_5678_9abc);
    let (mut checked, mut moved, mut emptied) = (0, 0, 0);
    for seed in 0..300u64 {
        let n = 1 + r.next_u64() % 3;
        let mut src: String = (0..n).map(|_| clause(&mut r)).collect();
        let empty = emptying(&mut r, &src);
        src += &empty;
        if let Some(m) = compare(&src, seed) {
            checked += 1;
            moved += usize::from(m);
            emptied += usize::from(m && !empty.is_empty());
        }
    }
    assert!(checked > 200, "only {checked} random scripts checked");
    assert!(moved > 50, "only {moved} of {checked} random scripts moved anything to the firing");
    assert!(emptied > 20, "only {emptied} scripts clearing or truncating moved anything to the firing");
}
