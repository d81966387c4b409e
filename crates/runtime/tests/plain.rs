//! Plain clauses (`printf("%d\n", arg0)`, run without the general path's set-up) print
//! byte for byte what the general path prints: the same scripts on the same firings,
//! once with plain clauses and once without, quiet or not, in testing mode or not.

use std::rc::Rc;

use udtrace_lang::check::Checker;
use udtrace_lang::ir::{Builtin, CheckedProgram};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::parser::parse_script;
use udtrace_runtime::{Consumer, Context, Ecb, Probe, Settings, Value};

fn check(src: &str) -> Rc<CheckedProgram> {
    let program = parse_script(src).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    let macros = MacroArgs::new(vec!["t.d".into()]);
    let mut checker = Checker::new(&macros);
    checker.add_source(&program, 0, src).unwrap_or_else(|e| panic!("{src}: {}", e.message));
    Rc::new(checker.finish())
}

/// A firing's fields; `arg5` is missing (the context answers only through `builtin`
/// with nothing, as a firing without that register does).
struct Ctx {
    args: [u64; 5],
    pid: i64,
    tid: i64,
    uid: i64,
}

impl Context for Ctx {
    fn builtin(&self, b: Builtin) -> Option<Value> {
        Some(match b {
            Builtin::Arg(n) if n < 5 => Value::int(self.args[usize::from(n)] as i64),
            Builtin::Pid => Value::int(self.pid),
            Builtin::Tid => Value::int(self.tid),
            Builtin::Uid => Value::int(self.uid),
            Builtin::Execname => Value::str("work"),
            Builtin::Timestamp => Value::int(1_000),
            _ => return None,
        })
    }
}

fn firings() -> Vec<(u32, Ctx)> {
    let vals: [u64; 10] =
        [0, 1, 9, 10, 255, u64::MAX, (-7i64) as u64, i32::MIN as u64, u64::from(u32::MAX), i64::MIN as u64];
    (0..40)
        .map(|i| {
            let v = |k: usize| vals[(i * 7 + k * 3) % vals.len()];
            let ctx = Ctx { args: [v(0), v(1), v(2), v(3), v(4)], pid: 4242, tid: 4243 + i as i64, uid: v(5) as i64 };
            ((i % 2) as u32 + 1, ctx)
        })
        .collect()
}

/// Runs `src` on the firings; `plain` says whether plain clauses may run.
fn run(prog: &Rc<CheckedProgram>, settings: &Settings, plain: bool) -> (String, usize) {
    let probes: Vec<Rc<Probe>> = ["entry", "return"]
        .iter()
        .enumerate()
        .map(|(i, n)| Rc::new(Probe::new(i as u32 + 1, "pid4242", "a.out", "work", n)))
        .collect();
    let mut ecbs = Vec::new();
    for (ci, cl) in prog.clauses.iter().enumerate() {
        for p in probes.iter().filter(|p| cl.probes.iter().any(|d| d.name.is_empty() || d.name == p.name)) {
            ecbs.push(Ecb { epid: ecbs.len() as u32 + 1, clause: ci, stmt: ci, probe: Rc::clone(p) });
        }
    }
    let mut c = Consumer::new(Rc::clone(prog), settings.clone(), ecbs, 1);
    if !plain {
        c.without_plain_clauses();
    }
    let n = c.plain_clauses();
    let mut out: Vec<u8> = Vec::new();
    for (id, ctx) in firings() {
        c.fire(id, 1, &ctx, &mut out).unwrap();
    }
    c.finish(&mut out).unwrap();
    (String::from_utf8_lossy(&out).into_owned(), n)
}

#[test]
fn plain_clauses_print_as_the_general_path() {
    // (script, how many of its clauses are plain)
    let scripts: &[(&str, usize)] = &[
        (r#"pid4242:::entry { printf("%d\n", arg0); }"#, 1),
        (r#"pid4242::: { printf("%i %u|%d\n", arg1, arg2, pid); }"#, 1),
        (r#"pid4242:::entry { printf("%d%%%u %% x", tid, uid); printf("\n[%d]\n", arg3); }"#, 1),
        (r#"pid4242:::return { printf("%u", arg4); } pid4242:::entry { printf("%d\n", arg0); }"#, 2),
        (r#"pid4242::: { printf("%d\n", (int)arg0); }"#, 0),
        (r#"pid4242::: { printf("%5d %x\n", arg0, arg1); }"#, 0),
        (r#"pid4242::: /arg0 > 5/ { printf("%d\n", arg0); }"#, 0),
        (r#"pid4242::: { printf("%s %d\n", probefunc, arg0); }"#, 0),
        (r#"pid4242::: { printf("%d %d\n", id, epid); }"#, 0),
        (r#"pid4242::: { printf("%d\n", timestamp); }"#, 0),
        (r#"pid4242::: { printf("%d\n", arg0); trace(arg1); }"#, 0),
        // A field the firing does not have: the general path reads it, each time.
        (r#"pid4242::: { printf("%d %d\n", arg0, arg5); }"#, 1),
        // A plain clause before and after others on the same probe.
        (
            r#"pid4242::: { printf("a %d\n", arg0); } pid4242::: { trace(arg1); } pid4242:::entry { printf("%u\n", arg2); }"#,
            2,
        ),
        (r#"pid4242::: { @[arg0 & 3] = count(); printf("%d\n", arg1); } END { printa(@); }"#, 0),
    ];
    for quiet in [true, false] {
        for testing in [false, true] {
            let settings = Settings { quiet, testing, ..Settings::default() };
            for (src, plain) in scripts {
                let prog = check(src);
                let (general, none) = run(&prog, &settings, false);
                let (fast, n) = run(&prog, &settings, true);
                assert_eq!(none, 0);
                assert_eq!(n, *plain, "plain clauses of {src}");
                assert_eq!(fast, general, "{src} (quiet {quiet}, testing {testing})");
                assert!(general.len() > 50, "{src} printed: {general:?}");
            }
        }
    }
}

#[test]
fn json_has_no_plain_clauses() {
    let prog = check(r#"pid4242::: { printf("%d\n", arg0); }"#);
    let settings = Settings { quiet: true, json: true, ..Settings::default() };
    assert_eq!(run(&prog, &settings, true).1, 0);
    let text = Settings { quiet: true, ..Settings::default() };
    assert_eq!(run(&prog, &text, true).1, 1);
}
