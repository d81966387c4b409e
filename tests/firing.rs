//! Issue 26: predicates, thread-local variables and aggregations run where the probe
//! fires (docs/firing.md). Every firing counts, at any rate: the fixture's threads call
//! tiny functions as fast as they can, and each count is checked against the calls it
//! made, with no drop reported, and the program's output against an untraced run's.

mod util;

use std::collections::BTreeMap;
use std::process::Command;

use util::{fixture, is_root, pid_backends, stderr, stdout, Backend};

pid_backends!(
    a_count_is_exact_at_any_rate,
    the_latency_idiom_pairs_every_call,
    predicates_keys_and_functions_at_the_firing,
    forked_children_count_into_their_parents_aggregations,
    clauses_at_the_firing_and_in_the_consumer_together,
    a_full_aggregation_drops_in_dtraces_words,
    return_values_and_llquantize_at_the_firing,
    clear_and_trunc_of_aggregations_at_the_firing,
    ppid_at_the_firing_is_the_parent_after_a_fork,
    errno_at_the_firing_is_the_calling_threads,
    execname_keys_and_predicates_at_the_firing,
    execname_is_the_processs_name,
    copyinstr_keys_at_the_firing,
);

const THREADS: u64 = 2;

/// Calls per thread: in-process firings cost nanoseconds, uprobes microseconds.
fn calls(backend: Backend) -> u64 {
    if backend == Backend::InProcess {
        2_000_000
    } else {
        50_000
    }
}

fn untraced(args: &[&str]) -> String {
    let out = Command::new(fixture("hot")).args(args).output().expect("run hot");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `hot THREADS CALLS [extra]` under `prog` (with `-q`), checks that it ran as it
/// runs untraced and that nothing was dropped, and returns what udtrace printed before
/// the program's own lines.
fn traced(backend: Backend, prog: &str, extra: &[&str]) -> Option<String> {
    let n = calls(backend).to_string();
    let t = THREADS.to_string();
    let mut args = vec![t.as_str(), n.as_str()];
    args.extend(extra);
    let cmd = std::iter::once(fixture("hot")).chain(args.iter().map(|s| s.to_string())).collect::<Vec<_>>().join(" ");
    let out = backend.traced(&["-q", "-n", prog, "-c", &cmd])?;
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("drop"), "drops at the firing:\n{err}");
    let own: Vec<&str> = text.lines().filter(|l| l.starts_with("hot ") || l.starts_with("child ")).collect();
    let mut want: Vec<String> = untraced(&args).lines().map(str::to_string).collect();
    let mut got: Vec<String> = own.iter().map(|s| s.to_string()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the program's output differs from an untraced run's\n{err}");
    Some(text.lines().filter(|l| !own.contains(l)).collect::<Vec<_>>().join("\n"))
}

/// `name value` lines.
fn values(text: &str) -> BTreeMap<String, i64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().rsplit_once(' ')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn a_count_is_exact_at_any_rate(backend: Backend) {
    let prog = "pid$target::ho_twork:entry { @ = count(); } END { printa(\"count %@d\\n\", @); }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    assert_eq!(values(&text)["count"], (THREADS * calls(backend)) as i64, "{text}");
}

/// The sum of a quantize()'s counts, from its printed rows (`value |@@@ count`).
fn quantize_total(text: &str) -> i64 {
    text.lines().filter(|l| l.contains('|')).filter_map(|l| l.split_whitespace().last()?.parse::<i64>().ok()).sum()
}

fn the_latency_idiom_pairs_every_call(backend: Backend) {
    let prog = "pid$target::ho_pair:entry { self->ts = timestamp; }
        pid$target::ho_pair:return /self->ts/ { @q = quantize(timestamp - self->ts); @n = count(); self->ts = 0; }
        END { printa(\"pairs %@d\\n\", @n); printa(@q); }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    let calls = (THREADS * calls(backend)) as i64;
    assert_eq!(values(&text)["pairs"], calls, "{text}");
    assert_eq!(quantize_total(&text), calls, "{text}");
}

fn predicates_keys_and_functions_at_the_firing(backend: Backend) {
    let prog = "pid$target::ho_twork:entry /arg0 % 3 == 0 && arg0 != 9/ {
            @k[arg0 & 3] = count(); @s = sum(arg0); @mn = min(arg0); @mx = max(arg0); @a = avg(arg0);
            @f[probefunc] = count();
        }
        END {
            printa(\"key %d %@d\\n\", @k); printa(\"sum %@d\\n\", @s); printa(\"min %@d\\n\", @mn);
            printa(\"max %@d\\n\", @mx); printa(\"avg %@d\\n\", @a); printa(\"func %s %@d\\n\", @f);
        }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    let chosen: Vec<i64> = (0..calls(backend) as i64).filter(|i| i % 3 == 0 && *i != 9).collect();
    let t = THREADS as i64;
    let v = values(&text);
    for k in 0..4 {
        let want = chosen.iter().filter(|&&i| i & 3 == k).count() as i64 * t;
        assert_eq!(v.get(&format!("key {k}")).copied().unwrap_or(0), want, "key {k}\n{text}");
    }
    let sum: i64 = chosen.iter().sum::<i64>() * t;
    assert_eq!(v["sum"], sum, "{text}");
    assert_eq!(v["min"], 0, "{text}");
    assert_eq!(v["max"], *chosen.last().unwrap(), "{text}");
    assert_eq!(v["avg"], sum / (chosen.len() as i64 * t), "{text}");
    assert_eq!(v["func ho_twork"], chosen.len() as i64 * t, "{text}");
}

fn forked_children_count_into_their_parents_aggregations(backend: Backend) {
    let prog = "pid$target::ho_twork:entry { @[pid] = count(); @all = count(); }
        END { printa(\"pid %d %@d\\n\", @); printa(\"all %@d\\n\", @all); }";
    let Some(text) = traced(backend, prog, &["fork"]) else { return };
    let per = (THREADS * calls(backend)) as i64;
    let v = values(&text);
    assert_eq!(v["all"], 2 * per, "{text}");
    let pids: Vec<_> = v.iter().filter(|(k, _)| k.starts_with("pid ")).collect();
    assert_eq!(pids.len(), 2, "two processes:\n{text}");
    assert!(pids.iter().all(|(_, &n)| n == per), "{text}");
}

fn clauses_at_the_firing_and_in_the_consumer_together(backend: Backend) {
    // One clause records (printf), the others count at the firing: each sees every call.
    let prog = "pid$target::ho_twork:entry /arg0 == 7/ { printf(\"seven %d\\n\", arg0); }
        pid$target::ho_twork:entry { @ = count(); }
        pid$target::ho_twork:entry /arg0 == 7/ { @sevens = count(); }
        END { printa(\"count %@d\\n\", @); printa(\"sevens %@d\\n\", @sevens); }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    assert_eq!(text.lines().filter(|l| *l == "seven 7").count() as u64, THREADS, "{text}");
    let v = values(&text);
    assert_eq!(v["count"], (THREADS * calls(backend)) as i64, "{text}");
    assert_eq!(v["sevens"], THREADS as i64, "{text}");
}

/// `execname` as a key and in predicates (`==`, `!=`, ordered), at the firing, in a
/// process and its forked child (which keeps its parent's name).
fn execname_keys_and_predicates_at_the_firing(backend: Backend) {
    let prog =
        "pid$target::ho_twork:entry /execname == \"hot\"/ { @n[execname] = count(); @k[execname, arg0 & 1] = count(); }
        pid$target::ho_twork:entry /execname != \"hot\"/ { @other = count(); }
        pid$target::ho_twork:entry /execname > \"hos\" && \"hou\" > execname && execname <= \"hot\"/ { @between = count(); }
        END { printa(\"name %s %@d\\n\", @n); printa(\"key %s %d %@d\\n\", @k); printa(\"other %@d\\n\", @other);
            printa(\"between %@d\\n\", @between); }";
    let Some(text) = traced(backend, prog, &["fork"]) else { return };
    let n = calls(backend) as i64;
    let per = 2 * THREADS as i64;
    let v = values(&text);
    assert_eq!(v.get("name hot").copied(), Some(per * n), "{text}");
    assert_eq!(v.get("key hot 0").copied(), Some(per * ((n + 1) / 2)), "{text}");
    assert_eq!(v.get("key hot 1").copied(), Some(per * (n / 2)), "{text}");
    assert_eq!(v.get("between").copied(), Some(per * n), "{text}");
    assert_eq!(v.len(), 4, "no other row:\n{text}");
}

/// `execname` is the process's name, as the consumer's is: threads that rename
/// themselves count under it, and a child that execs under its new one.
fn execname_is_the_processs_name(backend: Backend) {
    let prog = "pid$target::ho_twork:entry { @[execname] = count(); } END { printa(\"name %s %@d\\n\", @); }";
    let per = (THREADS * calls(backend)) as i64;
    let Some(text) = traced(backend, prog, &["rename"]) else { return };
    assert_eq!(values(&text), [("name hot".to_string(), per)].into(), "{text}");
    let Some(text) = traced(backend, prog, &["exec"]) else { return };
    assert_eq!(values(&text), [("name hot".to_string(), per), ("name exe".to_string(), per)].into(), "{text}");
}

/// Calls per thread of `hot ... strings` (a third of them fault: an error line each).
const STRING_CALLS: u64 = 3000;

/// `copyinstr(arg0)` keys at the firing: exact counts per string, the empty string, a
/// string past `strsize` truncated as the consumer truncates it, `copyinstr(arg0, 4)`,
/// and bad pointers (0, 1) reported as the consumer reports them, one error per
/// faulting firing, with nothing counted. `run` runs udtrace with these arguments.
/// udtrace's stdout and stderr for these arguments; `None`: skipped.
type Run<'a> = &'a dyn Fn(&[&str]) -> Option<(String, String)>;

fn copyinstr_keys_checked(run: Run<'_>) {
    let cmd = format!("{} {THREADS} {STRING_CALLS} strings", fixture("hot"));
    let prog =
        "pid$target::ho_name:entry { @[copyinstr(arg0)] = count(); @l[copyinstr(arg0, 4), execname] = sum(arg1 & 1); }
        END { printa(\"str <%s> %@d\\n\", @); printa(\"len <%s> %s %@d\\n\", @l); }";
    let mut outs = Vec::new();
    for nodif in [false, true] {
        let mut args = vec!["-q"];
        if nodif {
            args.extend(["-x", "nodif"]);
        }
        args.extend(["-n", prog, "-c", &cmd]);
        let Some((text, err)) = run(&args) else { return };
        assert!(!err.contains("drop"), "{err}");
        let per = |k: u64| THREADS as i64 * (0..STRING_CALLS).filter(|i| i % 6 == k).count() as i64;
        // ho_name returns i & 1: odd i for each string.
        let odd = |k: u64| THREADS as i64 * (0..STRING_CALLS).filter(|i| i % 6 == k && i % 2 == 1).count() as i64;
        let long = "x".repeat(255);
        let want: BTreeMap<String, i64> = [
            ("str <alpha>".to_string(), per(0)),
            ("str <>".to_string(), per(1)),
            (format!("str <{long}>"), per(2)),
            ("str <beta>".to_string(), per(5)),
            ("len <alp> hot".to_string(), odd(0)),
            ("len <> hot".to_string(), odd(1)),
            ("len <xxx> hot".to_string(), odd(2)),
            ("len <bet> hot".to_string(), odd(5)),
        ]
        .into();
        let own: String = text.lines().filter(|l| !l.starts_with("hot ")).collect::<Vec<_>>().join("\n");
        assert_eq!(values(&own), want, "nodif {nodif}:\n{own}\n{err}");
        for (addr, k) in [("0x0", 3), ("0x1", 4)] {
            let errors = err.lines().filter(|l| l.contains(&format!("invalid address ({addr})"))).count() as i64;
            assert_eq!(errors, per(k), "nodif {nodif}: errors for {addr}\n{err}");
        }
        outs.push(own);
    }
    assert_eq!(outs[0], outs[1], "at the firing, then all in the consumer");
}

fn copyinstr_keys_at_the_firing(backend: Backend) {
    copyinstr_keys_checked(&|args| {
        let out = backend.traced(args)?;
        assert!(out.status.success(), "{}", stderr(&out));
        Some((stdout(&out), stderr(&out)))
    });
}

/// The same as an ordinary user (trampolines, no BPF).
#[test]
fn copyinstr_keys_as_an_ordinary_user() {
    if !is_root() {
        println!("skipped: switching to nobody needs root");
        return;
    }
    copyinstr_keys_checked(&|args| {
        let out = util::run(util::unprivileged(util::bin()).args(args));
        assert_eq!(out.status, 0, "{}", out.stderr);
        Some((out.stdout, out.stderr))
    });
}

/// What the fixture's `ho_pair(i)` returns.
fn pair_returns(i: i64) -> i64 {
    let mut x = i * 3 + 1;
    x ^= x >> 7;
    x += i & 0xff;
    x ^ (i << 2)
}

/// Without BPF (an ordinary user) the trampolines do the same.
#[test]
fn an_ordinary_user_counts_exactly() {
    if !is_root() {
        println!("skipped: switching to nobody needs root");
        return;
    }
    let n = calls(Backend::InProcess).to_string();
    let cmd = format!("{} {THREADS} {n}", fixture("hot"));
    let prog = "pid$target::ho_twork:entry { @ = count(); }
        pid$target::ho_pair:entry { self->ts = timestamp; }
        pid$target::ho_pair:return /self->ts/ { @q = quantize(timestamp - self->ts); self->ts = 0; }
        pid$target::ho_pair:return { @r = sum(arg1); @l = llquantize(arg1, 10, 0, 6, 20); @pp = sum(ppid > 1); }
        pid$target::ho_pair:entry /execname == \"hot\"/ { @e[execname] = count(); }
        END { printa(\"count %@d\\n\", @); printa(\"rets %@d\\n\", @r); printa(\"ppid %@d\\n\", @pp);
            printa(\"name %s %@d\\n\", @e); printa(@q); printa(@l); }";
    let out = util::run(util::unprivileged(util::bin()).args(["-q", "-n", prog, "-c", &cmd]));
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("drop"), "{}", out.stderr);
    let calls = (THREADS * calls(Backend::InProcess)) as i64;
    assert_eq!(values(&out.stdout)["count"], calls, "{}", out.stdout);
    assert_eq!(quantize_total(&out.stdout), 2 * calls, "{}", out.stdout);
    let rets: i64 = (0..calls / THREADS as i64).map(pair_returns).sum();
    assert_eq!(values(&out.stdout)["rets"], rets * THREADS as i64, "{}", out.stdout);
    assert_eq!(values(&out.stdout)["ppid"], calls, "{}", out.stdout);
    assert_eq!(values(&out.stdout)["name hot"], calls, "{}", out.stdout);
}

/// `aggsize` bounds the keys an aggregation holds at the firing: past them, each
/// firing is an aggregation drop, reported by CPU in DTrace's words, and every call is
/// counted or dropped.
fn a_full_aggregation_drops_in_dtraces_words(backend: Backend) {
    let n = calls(backend).min(50_000);
    let cmd = format!("{} {THREADS} {n}", fixture("hot"));
    let prog = "pid$target::ho_twork:entry { @[arg0] = count(); } END { printa(\"key %d %@d\\n\", @); }";
    let Some(out) = backend.traced(&["-q", "-x", "aggsize=1k", "-n", prog, "-c", &cmd]) else { return };
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    let counted: i64 =
        text.lines().filter(|l| l.starts_with("key ")).filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok()).sum();
    let keys = text.lines().filter(|l| l.starts_with("key ")).count();
    let mut dropped = 0;
    for l in err.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["udtrace:", k, "aggregation", w, "on", "CPU", cpu] if cpu.parse::<u32>().is_ok() => {
                let k: i64 = k.parse().expect("a count");
                assert_eq!(*w, if k == 1 { "drop" } else { "drops" }, "{l}");
                dropped += k;
            }
            _ => panic!("not DTrace's aggregation drop line: {l:?}\n{err}"),
        }
    }
    assert!(keys > 0 && keys <= 64, "{keys} keys kept in 1 KiB");
    assert!(dropped > 0, "nothing dropped:\n{err}");
    assert_eq!(counted + dropped, (THREADS * n) as i64, "{counted} counted + {dropped} dropped\n{err}");
}

/// What `prog` prints over `cmd` with its clauses where the plan puts them, then all
/// in the consumer (`-x nodif`), each run checked (success, no drop); `None`: skipped.
fn both_ways(backend: Backend, flags: &[&str], prog: &str, cmd: &str) -> Option<Vec<String>> {
    let mut texts = Vec::new();
    for nodif in [false, true] {
        let mut args = vec!["-q"];
        args.extend(flags);
        if nodif {
            args.extend(["-x", "nodif"]);
        }
        args.extend(["-n", prog, "-c", cmd]);
        let out = backend.traced(&args)?;
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stderr(&out).contains("drop"), "{}", stderr(&out));
        texts.push(stdout(&out));
    }
    Some(texts)
}

/// What `prog` prints over `hot THREADS calls` both ways: the same.
fn as_the_consumer_prints(backend: Backend, prog: &str, calls: u64) {
    let cmd = format!("{} {THREADS} {calls}", fixture("hot"));
    let Some(texts) = both_ways(backend, &[], prog, &cmd) else { return };
    let own = |t: &str| t.lines().filter(|l| !l.starts_with("hot ")).collect::<Vec<_>>().join("\n");
    assert_eq!(own(&texts[0]), own(&texts[1]), "at the firing, then all in the consumer");
}

/// A return probe's `arg1` (the return value, rax) and llquantize() run at the firing:
/// exact counts, and the tables the consumer alone prints.
fn return_values_and_llquantize_at_the_firing(backend: Backend) {
    let prog = "pid$target::ho_twork:return { @r[arg1 & 3] = count(); @s = sum(arg1);
            @l = llquantize(arg1, 10, 0, 6, 20); @m = llquantize(args[1] - 1000, 2, 0, 20, 4, 2); }
        END { printa(\"ret %d %@d\\n\", @r); printa(\"sum %@d\\n\", @s); printa(@l); printa(@m); }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    let n = calls(backend) as i64;
    let t = THREADS as i64;
    let rets: Vec<i64> = (0..n).map(|i| i ^ 5).collect();
    let v = values(&text);
    for k in 0..4 {
        let want = rets.iter().filter(|&&r| r & 3 == k).count() as i64 * t;
        assert_eq!(v.get(&format!("ret {k}")).copied().unwrap_or(0), want, "key {k}\n{text}");
    }
    assert_eq!(v["sum"], rets.iter().sum::<i64>() * t, "{text}");
    // Both tables: every call once, the second weighted 2.
    assert_eq!(quantize_total(&text), 3 * n * t, "{text}");
    as_the_consumer_prints(backend, prog, 4_000);
}

/// clear() and trunc() in the consumer of aggregations that live at the firing: what
/// `-x nodif` prints, and exact.
fn clear_and_trunc_of_aggregations_at_the_firing(backend: Backend) {
    let prog = "pid$target::ho_twork:entry { @k[arg0 & 7] = count(); @s[arg0 & 1] = sum(arg0); @q = quantize(arg0); }
        pid$target::ho_pair:return { @a = avg(arg1 & 0xff); }
        END { trunc(@k, 3); printa(\"k %d %@d\\n\", @k); clear(@s); printa(\"s %d %@d\\n\", @s);
            trunc(@q); printa(@q); clear(@a); printa(\"a %@d\\n\", @a); }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    let per_key = (calls(backend) / 8 * THREADS) as i64;
    let v = values(&text);
    // Equal counts: trunc() keeps the larger keys.
    for k in 0..8 {
        assert_eq!(v.get(&format!("k {k}")).copied(), (k >= 5).then_some(per_key), "key {k}\n{text}");
    }
    assert_eq!((v.get("s 0"), v.get("s 1"), v.get("a")), (Some(&0), Some(&0), Some(&0)), "{text}");
    assert_eq!(quantize_total(&text), 0, "{text}");
    as_the_consumer_prints(backend, prog, 4_000);
}

/// `ppid` at the firing: a forked child's is its parent (read at each firing, not kept
/// from the start), in a key and a predicate; as the consumer alone (`-x nodif`) sees it.
fn ppid_at_the_firing_is_the_parent_after_a_fork(backend: Backend) {
    let prog = "pid$target::ho_twork:entry { @[pid, ppid] = count(); }
        pid$target::ho_twork:entry /ppid != pid && ppid > 0/ { @n = count(); }
        END { printa(\"ids %d %d %@d\\n\", @); printa(\"n %@d\\n\", @n); }";
    let check = |text: &str, per: i64| {
        let ids: Vec<(i64, i64, i64)> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<i64> = l.strip_prefix("ids ")?.split(' ').filter_map(|w| w.parse().ok()).collect();
                Some((f[0], f[1], f[2]))
            })
            .collect();
        assert_eq!(ids.len(), 2, "two processes:\n{text}");
        assert!(ids.iter().all(|&(_, _, n)| n == per), "{text}");
        let (parent, child) = if ids[1].1 == ids[0].0 { (ids[0], ids[1]) } else { (ids[1], ids[0]) };
        assert_eq!(child.1, parent.0, "the child's ppid is its parent:\n{text}");
        assert!(parent.1 > 0 && parent.1 != child.0, "{text}");
        assert_eq!(values(text)["n"], 2 * per, "{text}");
    };
    let Some(text) = traced(backend, prog, &["fork"]) else { return };
    check(&text, (THREADS * calls(backend)) as i64);
    // In a PID namespace of its own, whose parent is outside it (getppid(2) says 0
    // there): udtrace's view, as the consumer's.
    let cmd = format!("unshare -p -f {} 1 3000", fixture("hot"));
    let ns_prog = "pid$target::ho_twork:entry { @[ppid == 0] = count(); } END { printa(\"zero %d %@d\\n\", @); }";
    let unshares = Command::new("unshare").args(["-p", "-f", "true"]).status().is_ok_and(|s| s.success());
    if !unshares {
        println!("skipped the namespace case: unshare -p fails here");
    } else if let Some(texts) = both_ways(backend, &["-Z"], ns_prog, &cmd) {
        for t in &texts {
            assert_eq!(values(t).get("zero 0"), Some(&3000), "{t}");
        }
    }
    let cmd = format!("{} {THREADS} 2000 fork", fixture("hot"));
    let Some(out) = backend.traced(&["-q", "-x", "nodif", "-n", prog, "-c", &cmd]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    check(&stdout(&out), (THREADS * 2000) as i64);
}

/// `errno` at the firing: the one each failing call left in its thread (the errnos
/// fixture's two threads), counted by function and value, as `-x nodif` counts it.
fn errno_at_the_firing_is_the_calling_threads(backend: Backend) {
    let prog = "pid$target::open:return, pid$target::close:return, pid$target::chdir:return
        { @[probefunc, errno] = count(); }
        pid$target::chdir:return /errno == 2/ { @c = count(); }
        pid$target::close:return { printf(\"close %d %d\\n\", errno, ppid > 1); @r = sum(ppid > 1); }
        END { printa(\"e %s %d %@d\\n\", @); printa(\"c %@d\\n\", @c); printa(\"r %@d\\n\", @r); }";
    let cmd = format!("{} 3", fixture("errnos"));
    let Some(texts) = both_ways(backend, &[], prog, &cmd) else { return };
    // A site whose firing records (the printf) runs its program in the record's code.
    let ours = |t: &str| {
        let mut l: Vec<&str> = t.lines().filter(|l| l.starts_with(['e', 'c', 'r'])).collect();
        l.sort();
        l.join("\n")
    };
    assert_eq!(texts[0].lines().filter(|l| *l == "close 9 1").count(), 6, "{}", texts[0]);
    let v = values(&texts[0]);
    for (k, n) in [("e open 2", 6), ("e open 21", 6), ("e close 9", 6), ("e chdir 2", 12), ("c", 12), ("r", 6)] {
        assert_eq!(v.get(k).copied(), Some(n), "{k}\n{}", texts[0]);
    }
    assert_eq!(ours(&texts[0]), ours(&texts[1]), "at the firing, then all in the consumer");
    // At any rate (at the firing: the consumer would drop), with ppid and vtimestamp.
    let prog = "pid$target::ho_twork:entry { @[errno] = count(); @p[ppid] = count(); @v = sum(vtimestamp > 0); }
        END { printa(\"e %d %@d\\n\", @); printa(\"v %@d\\n\", @v); }";
    let Some(text) = traced(backend, prog, &[]) else { return };
    let all = (THREADS * calls(backend)) as i64;
    let counted: i64 =
        text.lines().filter(|l| l.starts_with("e ")).filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok()).sum();
    assert_eq!((counted, values(&text)["v"]), (all, all), "{text}");
}
