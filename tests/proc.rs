//! The proc provider end to end: D scripts of our own over fixtures whose process
//! lives, execs, threads and signals are known exactly (see the headers of
//! procexec.c, lifetimes.c, threads.c, signals.c and exits.c). The probes are
//! system-wide; each script narrows to the fixture's tree with `progenyof($target)`.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

mod util;

use util::{fixture, pid_backends, stderr, stdout, traced, Backend, TempDir};

pid_backends!(curpsinfo_in_pid_probes);

/// One at a time: the lifetimes test measures time, and other fixtures' load would
/// stretch it.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `udtrace -q -n SCRIPT -c COMMAND` on the default backend and returns its
/// stdout (fixture output included), after checking that both succeeded; None where
/// BPF is refused.
fn run(script: &str, command: &str) -> Option<String> {
    run_on(Backend::InProcess, script, command)
}

/// [`run`] with pid probes on `backend`.
fn run_on(backend: Backend, script: &str, command: &str) -> Option<String> {
    let out = backend.traced(&["-q", "-n", script, "-c", command])?;
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "udtrace failed: {err}\n{text}");
    assert!(err.is_empty(), "unexpected messages: {err}");
    Some(text)
}

/// The lines starting with `tag `, without it, sorted.
fn tagged(text: &str, tag: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn who_execs_what() {
    let _s = serial();
    let script = r#"
        proc:::exec /progenyof($target)/ { self->parent = execname; self->execing = 1; @path[args[0]] = count(); }
        proc:::exec-success /self->execing/ { @pair[self->parent, execname] = count(); self->execing = 0; }
        proc:::exec-failure /self->execing/ { @fail[execname, args[0]] = count(); self->execing = 0; }
        proc:::exec-failure /progenyof($target) && args[0] == ENOENT/ { @enoent = count(); }
        END {
            printa("path %s %@d\n", @path);
            printa("pair %s %s %@d\n", @pair);
            printa("fail %s %d %@d\n", @fail);
            printa("enoent %@d\n", @enoent);
        }"#;
    let Some(text) = run(script, &fixture("procexec")) else { return };
    assert!(text.contains("procexec: ok"), "{text}");
    let mut paths = vec![format!("{} 4", fixture("execee")), "/nonexistent/udtrace-no-such-file 2".to_string()];
    paths.sort();
    assert_eq!(tagged(&text, "path"), paths, "{text}");
    assert_eq!(tagged(&text, "pair"), ["procexec execee 4"], "{text}");
    assert_eq!(tagged(&text, "fail"), [format!("procexec {} 2", libc::ENOENT)], "{text}");
    assert_eq!(tagged(&text, "enoent"), ["2"], "{text}");
}

#[test]
fn psargs_of_execed_processes() {
    let _s = serial();
    // The issue's own one-liner, narrowed to the fixture's tree.
    let script = r#"proc:::exec-success /progenyof($target)/ { printf("%s\n", curpsinfo->pr_psargs); }
        proc:::exec-success /progenyof($target)/ { printf("ids %d %d %d %d %d\n", curpsinfo->pr_pid == pid, curpsinfo->pr_ppid == ppid, ppid == $target, curpsinfo->pr_argc, curlwpsinfo->pr_lwpid == tid); }"#;
    let Some(text) = run(script, &fixture("procexec")) else { return };
    let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with("execee")).collect();
    lines.sort();
    let long = format!("execee {}", "x".repeat(72));
    assert_eq!(
        lines,
        ["execee alpha beta gamma 3", "execee alpha beta gamma 3", "execee alpha beta gamma 3", long.as_str()],
        "{text}"
    );
    assert_eq!(tagged(&text, "ids"), ["1 1 1 2 1", "1 1 1 4 1", "1 1 1 4 1", "1 1 1 4 1"], "{text}");
}

/// Non-zero buckets of each quantize() table in default aggregation output.
fn quantized(text: &str) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut out: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut key = String::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            [k] => key = k.to_string(),
            [v, bar, n] if bar.starts_with('|') => {
                let (v, n): (u64, u64) = (v.parse().expect("value"), n.parse().expect("count"));
                if n > 0 {
                    out.entry(key.clone()).or_default().push((v, n));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn process_lifetimes() {
    let _s = serial();
    let script = r#"proc:::start /progenyof($target)/ { self->start = timestamp; }
        proc:::exit /self->start/ { @[execname] = quantize(timestamp - self->start); self->start = 0; }"#;
    let Some(text) = run(script, &format!("{} 5 3", fixture("lifetimes"))) else { return };
    assert!(text.contains("lifetimes: ok"), "{text}");
    let q = quantized(&text);
    assert_eq!(q.get("short"), Some(&vec![(8388608, 5)]), "10 ms children: {text}");
    assert_eq!(q.get("long"), Some(&vec![(67108864, 3)]), "100 ms children: {text}");
    assert_eq!(q.len(), 2, "{text}");
}

#[test]
fn thread_lifetimes() {
    let _s = serial();
    let script = r#"proc:::lwp-create /pid == $target && args[1]->pr_pid == pid/ { @c = count(); @made[args[0]->pr_lwpid] = count(); }
        proc:::lwp-start /pid == $target/ { self->t = timestamp; @s = count(); @ran[tid] = count(); }
        proc:::lwp-exit /pid == $target && self->t/ { @life = count(); self->t = 0; }
        proc:::lwp-exit /pid == $target/ { @e = count(); }
        proc:::exit /pid == $target/ { @x[args[0]] = count(); }
        END {
            printa("created %@d\n", @c); printa("started %@d\n", @s); printa("lived %@d\n", @life);
            printa("exited %@d\n", @e); printa("exit %d %@d\n", @x);
            printa("made %d %@d\n", @made); printa("ran %d %@d\n", @ran);
        }"#;
    let t = 8;
    let Some(text) = run(script, &format!("{} {t}", fixture("threads"))) else { return };
    assert!(text.contains("threads: ok"), "{text}");
    assert_eq!(tagged(&text, "created"), [t.to_string()], "{text}");
    assert_eq!(tagged(&text, "started"), [t.to_string()], "{text}");
    assert_eq!(tagged(&text, "lived"), [t.to_string()], "exactly T threads from start to exit: {text}");
    assert_eq!(tagged(&text, "exited"), [(t + 1).to_string()], "and the main thread: {text}");
    assert_eq!(tagged(&text, "exit"), ["1 1"], "CLD_EXITED once: {text}");
    // lwp-create's lwpsinfo names the threads that then start.
    let made = tagged(&text, "made");
    assert_eq!(made.len(), t, "{text}");
    assert_eq!(made, tagged(&text, "ran"), "{text}");
}

/// The address a fixture printed for a handler (`handler NAME 0x...`), in hex.
fn handler(text: &str, name: &str) -> String {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("handler {name} ")))
        .unwrap_or_else(|| panic!("no {name}: {text}"));
    line.trim_start_matches("0x").to_string()
}

#[test]
fn signals_sent_discarded_handled_cleared() {
    let _s = serial();
    let script = r#"
        proc:::signal-send /progenyof($target)/ { @send[execname, stringof(args[1]->pr_fname), args[2]] = count(); }
        proc:::signal-discard /progenyof($target)/ { @discard[execname, stringof(args[1]->pr_fname), args[2]] = count(); }
        proc:::signal-handle /progenyof($target)/ { @handle[execname, args[0], args[2]] = count(); }
        proc:::signal-handle /progenyof($target) && args[1] == NULL/ { @noinfo[execname, args[0]] = count(); }
        proc:::signal-handle /progenyof($target) && args[1] != NULL/ {
            @info[execname, args[0], args[1]->si_signo, args[1]->si_code, args[1]->si_pid == pid] = count();
        }
        proc:::signal-clear /progenyof($target)/ { @clear[execname, args[0]] = count(); }
        END {
            printa("send %s %s %d %@d\n", @send);
            printa("discard %s %s %d %@d\n", @discard);
            printa("handle %s %d %x %@d\n", @handle);
            printa("noinfo %s %d %@d\n", @noinfo);
            printa("info %s %d %d %d %d %@d\n", @info);
            printa("clear %s %d %@d\n", @clear);
        }"#;
    let Some(text) = run(script, &fixture("signals")) else { return };
    assert!(text.contains("signals: ok"), "{text}");
    // SIGHUP 1, SIGUSR1 10, SIGUSR2 12, SIGTERM 15, SIGCHLD 17, SIGWINCH 28; the last
    // SIGCHLD is signals' own, at its exit, to its parent udtrace.
    assert_eq!(
        tagged(&text, "send"),
        [
            "sigchild signals 17 1",
            "signals sigchild 15 1",
            "signals signals 1 1",
            "signals signals 10 3",
            "signals signals 12 2",
            "signals udtrace 17 1"
        ],
        "{text}"
    );
    assert_eq!(tagged(&text, "discard"), ["signals signals 28 4"], "{text}");
    let handle = tagged(&text, "handle");
    assert_eq!(handle.len(), 4, "{text}");
    assert!(handle.contains(&format!("signals 10 {} 3", handler(&text, "on_usr1"))), "{handle:?}\n{text}");
    assert!(handle.contains(&format!("signals 12 {} 2", handler(&text, "on_usr2_info"))), "{handle:?}\n{text}");
    assert!(handle.iter().any(|h| h.starts_with("signals 17 ") && h.ends_with(" 1")), "{handle:?}");
    assert!(handle.iter().any(|h| h.starts_with("sigchild 15 ") && h.ends_with(" 1")), "{handle:?}");
    // siginfo only for SA_SIGINFO handlers: SIGUSR2 from kill (SI_USER, from the
    // process itself), SIGCHLD from the exiting child (CLD_EXITED, another pid).
    assert_eq!(tagged(&text, "noinfo"), ["sigchild 15 1", "signals 10 3"], "{text}");
    assert_eq!(tagged(&text, "info"), ["signals 12 12 0 1 2", "signals 17 17 1 0 1"], "{text}");
    assert_eq!(tagged(&text, "clear"), ["signals 1 1"], "{text}");
}

#[test]
fn exit_reasons_and_faults() {
    let _s = serial();
    let dir = TempDir::new("proc-exits");
    let script = r#"
        proc:::exit /progenyof($target) && pid != $target/ {
            printf("exit %s %s\n", execname, args[0] == CLD_EXITED ? "CLD_EXITED" : args[0] == CLD_KILLED ? "CLD_KILLED" : args[0] == CLD_DUMPED ? "CLD_DUMPED" : "?");
        }
        proc:::fault /progenyof($target)/ {
            printf("fault %s %s %d %d %x\n", execname, args[0] == FLTBOUNDS ? "FLTBOUNDS" : "?", args[1]->si_signo, args[1]->si_code, (uintptr_t)args[1]->si_addr);
        }"#;
    let Some(text) = run(script, &format!("{} {}", fixture("exits"), dir.path().display())) else { return };
    assert!(text.contains("exits: ok"), "{text}");
    // In order: a fault comes before its process's exit.
    let events: Vec<&str> = text.lines().filter(|l| l.starts_with("exit ") || l.starts_with("fault ")).collect();
    assert_eq!(
        events,
        [
            "exit exit3 CLD_EXITED",
            "exit killed CLD_KILLED",
            "exit dumped CLD_DUMPED",
            "fault segv FLTBOUNDS 11 1 0",
            "exit segv CLD_KILLED"
        ],
        "{text}"
    );
}

/// Under a storm of short-lived processes every create arrives, or udtrace says how
/// many records it lost.
#[test]
fn storms_arrive_whole_or_drops_are_told() {
    let _s = serial();
    let script = r#"proc:::create /pid == $target/ { @c = count(); } proc:::exit /progenyof($target) && pid != $target/ { @x = count(); }
        END { printa("created %@d\n", @c); printa("exited %@d\n", @x); }"#;
    let n = 300;
    let Some(out) = traced(&["-q", "-b", "4k", "-n", script, "-c", &format!("{} {n} 0", fixture("lifetimes"))]) else {
        return;
    };
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    let complete = tagged(&text, "created") == [n.to_string()] && tagged(&text, "exited") == [n.to_string()];
    assert!(complete || err.contains(" drop"), "neither complete nor drops reported: {err}\n{text}");
}

/// `curpsinfo` and `curlwpsinfo` in pid probes, translated from /proc when read.
fn curpsinfo_in_pid_probes(backend: Backend) {
    let _s = serial();
    let script = r#"pid$target::classify:entry /i++ == 0/ {
            printf("cur %s %d %d %d %s\n", stringof(curpsinfo->pr_fname), curpsinfo->pr_pid == pid, curpsinfo->pr_ppid == ppid, curlwpsinfo->pr_lwpid == tid, stringof(curlwpsinfo->pr_clname));
        }"#;
    let Some(text) = run_on(backend, script, &format!("{} 10", fixture("fixture"))) else { return };
    assert_eq!(tagged(&text, "cur"), ["fixture 1 1 1 TS"], "{text}");
}
