//! The in-process backend end to end: pid probes patched into the traced process
//! (`-x inprocess`, and by default where BPF is refused), with exact counts on the C
//! fixtures and the example daemon, children and exec'd workers followed, threads
//! firing at once, a grabbed process left with its original code, and tracing as an
//! ordinary user. The tests that hold for any pid backend run on uprobes too.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

mod util;

use util::{
    bin, bpf_gate, fixture, kill_after_deadline, pid_backends, stderr, stdout, udtrace_cmd, wait_mapped, Backend, Guard,
};

pid_backends!(
    classify_counts_match_the_uprobe_path,
    threads_fire_at_once_without_loss,
    forked_children_fire_with_their_own_pid,
);

/// Runs udtrace to completion (killed after 60 s as a hang guard).
fn run(args: &[&str]) -> Output {
    let mut g = Guard::spawn(&mut udtrace_cmd(args));
    kill_after_deadline(g.child().id());
    g.take().wait_with_output().expect("udtrace finishes")
}

/// Runs udtrace on `backend` as [`Backend::traced`] does; in-process runs add
/// `-x inprocess`, which reports the sites that fell back to uprobes.
fn run_on(backend: Backend, args: &[&str]) -> Option<Output> {
    let explain: &[&str] = if backend == Backend::InProcess { &["-x", "inprocess"] } else { &[] };
    backend.traced(&[explain, args].concat())
}

/// The example daemon, built by `cargo test --workspace` with the examples.
fn workerd() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile = exe.parent().and_then(|d| d.parent()).expect("target/<profile>");
    let p = profile.join("examples").join("workerd");
    assert!(p.exists(), "{} not built: `cargo test --workspace` builds examples", p.display());
    p
}

fn script(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The rows of `printa("%-8d %@8d\n", @requests)` under the WORKER header.
fn per_worker(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .skip_while(|l| !l.starts_with("WORKER"))
        .skip(1)
        .map_while(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [w, n] => Some((w.parse().ok()?, n.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

/// fixture.c: classify(i) returns -1, 0 or 1 through three `ret`s (offsets 0xb, 0x20,
/// 0x33), for 1, 4 and 5 of 10 calls.
fn assert_classify_counts(text: &str) {
    assert!(text.contains("entries 10\n"), "{text}");
    for row in ["11 0 1\n", "32 1 4\n", "51 4294967295 5\n"] {
        assert!(text.contains(row), "missing {row:?} in\n{text}");
    }
}

const CLASSIFY: &str = "pid$target::classify:entry { @e = count(); } \
                        pid$target::classify:return { @r[arg0, arg1] = count(); } \
                        END { printa(\"entries %@d\\n\", @e); printa(\"%d %d %@d\\n\", @r); }";

fn classify_counts_match_the_uprobe_path(backend: Backend) {
    let cmd = format!("{} 10", fixture("fixture"));
    let Some(out) = run_on(backend, &["-q", "-n", CLASSIFY, "-c", &cmd]) else { return };
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_classify_counts(&text);
    // In process, the `ret` at 0xb needs the bytes the entry's patch takes: that one
    // site is a uprobe, and udtrace says so. On uprobes, nothing falls back.
    if backend == Backend::InProcess {
        assert!(
            stderr(&out).contains("1 probe site uses uprobes, not in-process probes: it overlaps another patched site"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn the_main_job_in_process_counts_every_request() {
    let (workers, requests) = (3u64, 300u64);
    let cmd = format!("{} {workers} {requests}", workerd().display());
    let out = run(&["-x", "inprocess", "-s", &script("workers.d"), "-c", &cmd]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(per_worker(&text), (0..workers).map(|w| (w, requests)).collect::<Vec<_>>(), "{text}");
    assert!(text.contains(&format!("requests answered: {}\n", workers * requests)), "{text}");
    // Every site of the exec'd workers was patched: nothing fell back.
    assert!(!stderr(&out).contains("uprobes, not in-process"), "{}", stderr(&out));
}

fn threads_fire_at_once_without_loss(backend: Backend) {
    let m = 2000;
    let cmd = format!("{} threads {m}", fixture("probes"));
    let prog = "pid$target::thr_work:entry { @[tid] = count(); } END { printa(\"tid %@d\\n\", @); }";
    let Some(out) = run_on(backend, &["-q", "-n", prog, "-c", &cmd]) else { return };
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let counts: Vec<&str> = text.lines().filter(|l| l.starts_with("tid ")).collect();
    assert_eq!(counts, vec![format!("tid {m}"); 4], "four threads, {m} firings each:\n{text}");
    assert!(!stderr(&out).contains("drop"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("uprobes, not in-process"), "{}", stderr(&out));
}

fn forked_children_fire_with_their_own_pid(backend: Backend) {
    // forker.c: the daemon calls target() 3 times; each of 4 forked workers M times.
    let (n, m) = (4, 25);
    let cmd = format!("{} {n} {m} 1 fork", fixture("forker"));
    let prog =
        "pid$target::target:entry { @[pid == $target ? \"daemon\" : \"worker\"] = count(); @p[pid] = count(); } \
                END { printa(\"%s %@d\\n\", @); printa(\"pid %d %@d\\n\", @p); }";
    let Some(out) = run_on(backend, &["-q", "-n", prog, "-c", &cmd]) else { return };
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("daemon 3\n"), "{text}");
    assert!(text.contains(&format!("worker {}\n", n * m)), "{text}");
    let pids = text.lines().filter(|l| l.starts_with("pid ")).count();
    assert_eq!(pids, 1 + n as usize, "the daemon and each worker under its own pid:\n{text}");
    assert!(!stderr(&out).contains("uprobes, not in-process"), "{}", stderr(&out));
}

/// The bytes of `func` in the running process `pid` (whose executable is `exe`).
fn code_of(pid: u32, exe: &str, func: &str) -> Vec<u8> {
    let nm = Command::new("nm").arg(exe).output().expect("nm");
    let vaddr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == func).then(|| u64::from_str_radix(f[0], 16).ok()).flatten()
        })
        .expect("symbol");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let base = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[2] == "00000000" && f[5].ends_with("/probes"))
                .then(|| u64::from_str_radix(f[0].split('-').next()?, 16).ok())
                .flatten()
        })
        .expect("mapping");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("mem");
    let mut b = vec![0u8; 16];
    mem.read_exact_at(&mut b, base + vaddr).expect("read code");
    b
}

#[test]
fn a_grabbed_process_gets_its_code_back() {
    let exe = fixture("probes");
    let mut g = Guard::spawn(Command::new(&exe).args(["spin", "300", "5"]).stdout(Stdio::piped()));
    let pid = g.child().id();
    wait_mapped(pid, "libc");
    let before = code_of(pid, &exe, "work");
    let prog = "pid$target::work:entry { n++; } pid$target::work:entry /n == 20/ { exit(0); }";
    let out = run(&["-q", "-x", "inprocess", "-n", prog, "-p", &pid.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("uprobes, not in-process"), "{}", stderr(&out));
    assert_eq!(code_of(pid, &exe, "work"), before, "work() as it was before udtrace");
    // It runs on and finishes its 300 calls as if never traced.
    let done = g.take().wait_with_output().expect("fixture finishes");
    assert!(done.status.success());
    assert!(String::from_utf8_lossy(&done.stdout).starts_with("spin 300 "), "{:?}", done);
}

/// The state letter of a `stat` file (`/proc/PID/stat`, `/proc/PID/task/TID/stat`).
fn state_of(stat: &str) -> String {
    let s = std::fs::read_to_string(stat).unwrap_or_default();
    s.rsplit_once(") ").and_then(|(_, rest)| rest.get(..1)).unwrap_or("").to_string()
}

/// Waits (20 s at most) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + util::TIMEOUT;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on the pid of a child of this test, not yet reaped.
    unsafe { libc::kill(pid as i32, sig) };
}

/// A process forked as udtrace ends, its fork not yet seen by udtrace (the signal was
/// read first), is a copy of its patched parent: udtrace takes the patches out of it
/// too. udtrace is stopped (SIGSTOP) while the signal is sent and the program forks,
/// so that it finds both waiting when it goes on, and reads the signal first.
#[test]
fn a_child_forked_as_udtrace_ends_gets_its_code_back() {
    use std::io::{BufRead, Write};
    use util::live::{code_differences, process_tree, stopped_threads};

    let exe = fixture("probes");
    let mut g = Guard::spawn(Command::new(&exe).args(["fork", "2"]).stdin(Stdio::piped()).stdout(Stdio::piped()));
    let pid = g.child().id();
    let mut stdin = g.child().stdin.take().expect("piped stdin");
    wait_mapped(pid, "libc");
    let prog = "BEGIN { printf(\"ready\\n\"); } pid$target::work:entry { n++; }";
    let mut tracer = Guard::spawn(&mut udtrace_cmd(&["-q", "-n", prog, "-p", &pid.to_string()]));
    let udtrace = tracer.child().id();
    kill_after_deadline(udtrace);
    // BEGIN fires once the probes are armed; then the program goes on, to read a line.
    let mut ready = String::new();
    let out = tracer.child().stdout.as_mut().expect("piped stdout");
    std::io::BufReader::new(out).read_line(&mut ready).expect("udtrace's output");
    assert_eq!(ready, "ready\n");
    let main_thread = format!("/proc/{pid}/task/{pid}/stat");
    wait_until("the program reads its stdin", || state_of(&main_thread) == "S");

    signal(udtrace, libc::SIGSTOP);
    wait_until("udtrace stopped", || state_of(&format!("/proc/{udtrace}/stat")) == "T");
    signal(udtrace, libc::SIGTERM);
    stdin.write_all(b"fork\n").expect("write to the program");
    // The parent waits in its fork's stop, the child at its first: both for udtrace.
    let child = || process_tree(pid).get(1).copied();
    wait_until("the program forked", || {
        state_of(&main_thread) == "t" && child().is_some_and(|c| state_of(&format!("/proc/{c}/stat")) == "t")
    });
    signal(udtrace, libc::SIGCONT);
    let out = util::wait_output(tracer.take(), "udtrace");
    assert_eq!(out.status, 0, "{}", out.stderr);

    let tree = process_tree(pid);
    assert_eq!(tree.len(), 2, "the program and its child");
    assert_eq!(stopped_threads(&tree), Vec::<String>::new());
    // Only the program's own file: another tracer's uprobes may sit in the loader.
    let left: Vec<String> =
        tree.iter().flat_map(|&p| code_differences(p)).filter(|d| d.contains(&format!("{exe} at"))).collect();
    assert_eq!(left, Vec::<String>::new(), "probes left in the program's code");
    drop(stdin);
    let done = g.take().wait_with_output().expect("the program finishes");
    assert!(done.status.success(), "{done:?}");
    assert!(String::from_utf8_lossy(&done.stdout).starts_with("fork 1 "), "{done:?}");
}

/// A process traced before still has udtrace's memfds mapped (ring, trampolines),
/// which no file backs: traced again, in-process and with uprobes, it counts as any
/// other (their mappings are not objects udtrace must read).
#[test]
fn a_process_traced_before_is_traced_again() {
    let mut g = Guard::spawn(Command::new(fixture("probes")).args(["spin", "300", "5"]).stdout(Stdio::piped()));
    let pid = g.child().id().to_string();
    wait_mapped(&pid, "libc");
    let prog = "pid$target::work:entry { n++; } pid$target::work:entry /n == 20/ { exit(0); }";
    for flags in [&[][..], &["-x", "uprobes"][..], &[][..]] {
        let args: Vec<&str> = ["-q"].iter().chain(flags).chain(&["-n", prog, "-p", &pid]).copied().collect();
        let out = run(&args);
        if bpf_gate(&out).is_none() {
            return;
        }
        assert!(out.status.success(), "{flags:?}: {}", stderr(&out));
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
        assert!(maps.contains("/memfd:udtrace-"), "the first run left its memfds mapped");
    }
    let done = g.take().wait_with_output().expect("fixture finishes");
    assert!(done.status.success());
}

/// `runuser -u nobody -- udtrace ARGS`, or None (with the reason printed) where the
/// test cannot switch users (not root).
fn as_nobody(args: &[&str]) -> Option<Output> {
    if !util::is_root() {
        println!("skipped: switching to nobody needs root");
        return None;
    }
    let mut c = Command::new("runuser");
    c.args(["-u", "nobody", "--"]).arg(bin()).args(args).stdin(Stdio::null());
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut g = Guard::spawn(&mut c);
    kill_after_deadline(g.child().id());
    Some(g.take().wait_with_output().expect("udtrace finishes"))
}

#[test]
fn an_ordinary_user_traces_the_main_job() {
    let cmd = format!("{} 2 100", workerd().display());
    let Some(out) = as_nobody(&["-s", &script("workers.d"), "-c", &cmd]) else { return };
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(per_worker(&text), vec![(0, 100), (1, 100)], "{text}\n{}", stderr(&out));
    assert!(text.contains("requests answered: 200\n"), "{text}");
}

#[test]
fn an_ordinary_user_is_told_what_needs_privilege() {
    let Some(out) = as_nobody(&["-n", "proc:::exec-success { trace(pid); }", "-c", "/bin/true"]) else { return };
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the proc provider cannot be enabled without BPF"), "{err}");
    assert!(err.contains("run as root (or with CAP_BPF and CAP_PERFMON)"), "{err}");
}

#[test]
fn list_verbose_says_which_sites_cannot_be_patched() {
    let cmd = format!("{} 1", fixture("fixture"));
    let out = run(&["-x", "inprocess", "-l", "-v", "-n", "pid$target::classify:", "-c", &cmd]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    // classify: entry, 3 return sites, and an offset probe per instruction; each taken
    // alone. Its short blocks cannot all take a 5-byte jump.
    let line = err.lines().find(|l| l.contains("pid probe sites can be patched in-process")).expect(&err);
    let words: Vec<&str> = line.split_whitespace().collect();
    let (ok, total): (usize, usize) = (words[1].parse().unwrap(), words[3].parse().unwrap());
    assert!(ok > 0 && ok < total, "{line}");
    let refused: usize = err
        .lines()
        .filter(|l| l.contains(" cannot: "))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(ok + refused, total, "{err}");
}

#[test]
fn without_bpf_unpatchable_sites_are_breakpoints() {
    let cmd = format!("{} 10", fixture("fixture"));
    let Some(out) = as_nobody(&["-q", "-n", CLASSIFY, "-c", &cmd]) else { return };
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_classify_counts(&text);
    assert!(
        stderr(&out)
            .contains("1 probe site uses breakpoints (slow), not in-process probes: it overlaps another patched site"),
        "{}",
        stderr(&out)
    );
}

/// A breakpoint site's program (the interpreter in udtrace) sees the process's name as
/// its trampolines do: `execname` as a key and in a predicate, at every return.
#[test]
fn without_bpf_breakpoints_know_execname() {
    let cmd = format!("{} 10", fixture("fixture"));
    let prog = "pid$target::classify:entry { @e[execname] = count(); } \
                pid$target::classify:return /execname == \"fixture\"/ { @n[execname, probename] = count(); } \
                END { printa(\"%s %s %@d\\n\", @n); printa(\"%s %@d\\n\", @e); }";
    let Some(out) = as_nobody(&["-q", "-n", prog, "-c", &cmd]) else { return };
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 probe site uses breakpoints (slow)"), "{err}");
    assert!(text.contains("fixture return 10\n") && text.contains("fixture 10\n"), "{text}\n{err}");
}

#[test]
fn without_bpf_libraries_loaded_later_are_armed() {
    // dlopener.c: plugin.so is dlopen()ed after tracing starts, by the main thread, a
    // thread created later, or a forked child; plugin_fn runs N times there.
    let prog = "pid$target::plugin_fn:entry { @[pid == $target] = count(); } \
                END { printa(\"plugin_fn %d %@d\\n\", @); }";
    for (how, by_target) in [("", 1), ("thread", 1), ("fork", 0)] {
        let cmd = format!("{} 7 {how}", fixture("dlopener"));
        let Some(out) = as_nobody(&["-Z", "-q", "-n", prog, "-c", &cmd]) else { return };
        assert!(out.status.success(), "{how}: {}", stderr(&out));
        let want = format!("plugin_fn {by_target} 7\n");
        assert!(stdout(&out).contains(&want), "{how}: {}\n{}", stdout(&out), stderr(&out));
        // Patched in-process, also with the main thread running: it is stopped meanwhile.
        assert!(!stderr(&out).contains("breakpoints"), "{how}: {}", stderr(&out));
    }
}

#[test]
fn without_bpf_a_program_runs_on_after_udtrace_is_killed() {
    // SIGKILL leaves udtrace no chance to take its patch, breakpoints and debug
    // registers out: its undertaker takes the first two out, and until it has, the
    // guard (a SIGTRAP handler udtrace installed) sends the threads on. dlopener waits on its
    // stdin, then runs load_and_call (its first instruction patched, the second a
    // breakpoint: the patch took its bytes) and dlopen()s the plugin (the loader hook's
    // debug register). Before the guard, it died of SIGTRAP at the first of them.
    let ready = "BEGIN { printf(\"ready\\n\"); } ";
    let with_breakpoint = "pid$target::load_and_call:entry, pid$target::load_and_call:1 { @[probename] = count(); }";
    let hook_only = "pid$target::plugin_fn:entry { @ = count(); }";
    for (what, probes) in [("a breakpoint", with_breakpoint), ("the loader hook", hook_only)] {
        let mut target = Guard::spawn(
            util::unprivileged(fixture("dlopener"))
                .args(["5", "wait"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        kill_after_deadline(target.child().id());
        let pid = target.child().id().to_string();
        // setpriv (root) execs dlopener, which then maps libc: both before the grab.
        wait_mapped(&pid, "dlopener");
        wait_mapped(&pid, "libc");
        let program = format!("{ready}{probes}");
        let mut tracer = Guard::spawn(
            util::unprivileged(bin())
                .args(["-Z", "-q", "-p", &pid, "-n", &program])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        kill_after_deadline(tracer.child().id());
        // BEGIN fires once the probes and the hook are in.
        let mut line = String::new();
        let out = tracer.child().stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("udtrace's stdout");
        let mut tracer = tracer.take();
        let undertakers = util::live::children_of(tracer.id());
        tracer.kill().expect("SIGKILL udtrace");
        tracer.wait().expect("udtrace's end");
        // Its undertaker takes the patch and the breakpoint out of the running program.
        util::live::wait_gone(&undertakers);
        let left = util::live::code_differences(target.child().id());
        assert!(left.iter().all(|d| !d.contains("/fixtures/dlopener ")), "{what}: left in the code: {left:?}");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut tracer.stderr.take().expect("stderr"), &mut err).expect("udtrace's stderr");
        assert_eq!(line, "ready\n", "{what}: {err}");
        if what == "a breakpoint" {
            assert!(err.contains("1 probe site uses breakpoints (slow)"), "{err}");
        }
        let mut stdin = target.child().stdin.take().expect("stdin");
        std::io::Write::write_all(&mut stdin, b"go\n").expect("dlopener's stdin");
        drop(stdin);
        let out = util::wait_output(target.take(), "dlopener");
        assert_eq!((out.status, out.stdout.as_str()), (0, "dlopener: 5 calls\n"), "{what}: {}", out.stderr);
    }
}

#[test]
fn without_bpf_the_loader_hook_survives_a_kernel_uprobe_on_it() {
    // A root session on BPF puts a uprobe on the loader's hook in every process that
    // maps the loader (its hook follows children, so it has no pid filter). An int3 of
    // udtrace's own there would lose every hit to the kernel: this failed every time
    // before the hook became a debug register.
    let mut root = udtrace_cmd(&[
        "-x",
        "uprobes",
        "-Z",
        "-q",
        "-n",
        "BEGIN { printf(\"ready\\n\"); }",
        "-n",
        "pid$target::plugin_fn:entry { }",
        "-c",
        "sleep 60",
    ]);
    let mut g = Guard::spawn(&mut root);
    kill_after_deadline(g.child().id());
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(g.child().stdout.take().unwrap()), &mut line);
    if line != "ready\n" {
        let out = g.take().wait_with_output().expect("udtrace finishes");
        bpf_gate(&out).expect("the root session ends only when BPF is refused");
        panic!("the root session did not start: {}", stderr(&out));
    }
    let cmd = format!("{} 7", fixture("dlopener"));
    let prog = "pid$target::plugin_fn:entry { @ = count(); } END { printa(\"plugin_fn %@d\\n\", @); }";
    let out = as_nobody(&["-Z", "-q", "-n", prog, "-c", &cmd]);
    // SIGINT: the root session ends cleanly, and its `sleep` with it.
    let _ = Command::new("kill").args(["-INT", &g.child().id().to_string()]).status();
    let _ = g.take().wait();
    let Some(out) = out else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("plugin_fn 7\n"), "{}\n{}", stdout(&out), stderr(&out));
}

#[test]
fn sites_the_kernel_cannot_probe_are_patched_in_process() {
    // probes.c: fx_locked's first instruction is `lock incq`, which uprobes refuse.
    let cmd = format!("{} locked 5", fixture("probes"));
    let prog = "pid$target::fx_locked:entry, pid$target::fx_locked:return { @[probename] = count(); } \
                END { printa(\"%s %@d\\n\", @); }";
    let Some(out) = Backend::Uprobes.traced(&["-q", "-n", prog, "-c", &cmd]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(":fx_locked:entry: the kernel cannot place a uprobe on its instruction"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("return 5\n") && !stdout(&out).contains("entry"), "{}", stdout(&out));
    let out = run(&["-q", "-n", prog, "-c", &cmd]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("entry 5\nreturn 5\n"), "{}\n{}", stdout(&out), stderr(&out));
    assert!(!stderr(&out).contains("cannot place a uprobe"), "{}", stderr(&out));
    // Without BPF, every instruction's probe too: patched, or a breakpoint.
    let prog = "pid$target::fx_locked: { @[probename] = count(); } END { printa(\"%s %@d\\n\", @); }";
    let Some(out) = as_nobody(&["-q", "-n", prog, "-c", &cmd]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for name in ["entry", "8", "f", "return"] {
        assert!(text.contains(&format!("{name} 5\n")), "{name}: {text}\n{}", stderr(&out));
    }
    assert!(!stderr(&out).contains("cannot place a uprobe"), "{}", stderr(&out));
}

#[test]
fn without_bpf_strings_are_read_at_breakpoints() {
    // probes.c: fx_open(path) 8 times, cycling through 4 paths.
    let cmd = format!("{} open 8", fixture("probes"));
    let prog = "pid$target::fx_open:entry { @[copyinstr(arg0)] = count(); } END { printa(\"%s %@d\\n\", @); }";
    let Some(out) = as_nobody(&["-q", "-n", prog, "-c", &cmd]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for path in ["/etc/passwd", "/tmp/udtrace-fixture", "relative/name", "x"] {
        assert!(text.contains(&format!("{path} 2\n")), "{path}:\n{text}");
    }
}

#[test]
fn without_bpf_pointers_saved_at_entry_are_read_at_breakpoints_and_trampolines() {
    // changebuf.c (see pid_fire's test of the same): point() and named() are patched,
    // bare() (a lone `ret`) is a breakpoint, each entry's pointer read at its return
    // although the memory changes right after and the image is gone by an exec.
    let cmd = format!("{} exec", fixture("changebuf"));
    let prog = "pid$target::point:entry, pid$target::named:entry, pid$target::bare:entry { self->p = arg0; } \
                pid$target::point:return, pid$target::bare:return /self->p/ \
                { printf(\"%s %d\\n\", probefunc, *(int *)copyin(self->p, 4)); self->p = 0; } \
                pid$target::named:return /self->p/ { printf(\"%s %s\\n\", probefunc, copyinstr(self->p)); self->p = 0; } \
                pid$target::bare:entry { printf(\"at %d\\n\", *(int *)copyin(arg0 + 4, 4)); }";
    let Some(out) = as_nobody(&["-q", "-n", prog, "-c", &cmd]) else { return };
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success() && !err.contains("invalid address"), "{text}\n{err}");
    assert!(err.contains("use breakpoints"), "{err}");
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("changebuf") && !l.is_empty()).collect();
    lines.sort_unstable();
    // A read at a computed address (a chain) at the breakpoint, too: bare's y.
    let want = ["at 1000", "at 2000", "at 3000", "bare 100", "bare 200", "bare 300", "named name-1"];
    assert_eq!(lines[..7], want, "{text}\n{err}");
    assert_eq!(
        lines[7..],
        ["named name-2", "named name-3", "point 1", "point 2", "point 3", "point 4"],
        "{text}\n{err}"
    );
}

/// errnos.c: each thread's failing calls, and the errno each left, as the program
/// printed it and as the probes recorded it (`traced ...`): they must agree.
fn check_errnos(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
    let text = stdout(out);
    let mut own: Vec<&str> = text.lines().filter(|l| !l.is_empty() && !l.starts_with("traced ")).collect();
    let mut traced: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("traced ")).collect();
    own.sort_unstable();
    traced.sort_unstable();
    assert_eq!(own.len(), 20, "{text}");
    assert_eq!(traced, own, "the errno each call left, as the program saw it");
}

const ERRNO_SCRIPT: &str = "pid$target::open:return, pid$target::close:return, pid$target::chdir:return \
    { printf(\"traced %s %s %d\\n\", tid == pid ? \"main\" : \"thread\", probefunc, errno); }";

#[test]
fn errno_is_read_in_process() {
    let cmd = format!("{} 2", fixture("errnos"));
    let out = run(&["-q", "-x", "inprocess", "-n", ERRNO_SCRIPT, "-c", &cmd]);
    check_errnos(&out);
    assert!(!stderr(&out).contains("not in-process"), "{}", stderr(&out));
}

#[test]
fn without_bpf_a_static_program_is_traced_with_breakpoints() {
    let exe = fixture("errnos-static");
    if !std::path::Path::new(&exe).exists() {
        println!("skipped: no static libc to build errnos-static");
        return;
    }
    let cmd = format!("{exe} 2");
    let Some(out) = as_nobody(&["-q", "-n", ERRNO_SCRIPT, "-c", &cmd]) else { return };
    check_errnos(&out);
    assert!(stderr(&out).contains("breakpoints (slow)"), "{}", stderr(&out));
}

#[test]
fn offset_probes_inside_patched_bytes_and_callers_through_patched_calls() {
    // probes.c: main -> chain_a -> chain_b -> chain_c, twice. Offset probes on every
    // instruction of chain_b: sites that fall inside another site's patch must be armed
    // some other way, never written into the patch; the `call chain_c` displaced into a
    // trampoline must still return to chain_b, where ucaller finds it.
    let prog = "pid$target::chain_c:return { @r[ufunc(ucaller)] = count(); }
                pid$target::chain_b: /probename != \"entry\" && probename != \"return\"/
                { @o[ufunc(ucaller)] = count(); }
                END { printa(@r); printf(\"--\\n\"); printa(@o); }";
    let cmd = format!("{} chain 2", fixture("probes"));
    let out = run(&["-q", "-x", "inprocess", "-n", prog, "-c", &cmd]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("chain 2 sink="), "the program ran to its end:\n{text}\n{}", stderr(&out));
    let (ret, off) = text.split_once("--\n").unwrap_or_else(|| panic!("{text}"));
    let callers = |t: &str| -> Vec<(String, String)> {
        t.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 2 && f[0].contains('`')).then(|| (f[0].to_string(), f[1].to_string()))
            })
            .collect()
    };
    assert_eq!(callers(ret), [("probes`chain_b".to_string(), "2".to_string())], "{text}");
    assert_eq!(callers(off).iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(), ["probes`chain_a"], "{text}");
}

/// `-x uprobes` where BPF cannot serve it (refused to an ordinary user; in a child PID
/// namespace, where BPF sees the host's pids) runs in-process, saying so in one line.
#[test]
fn uprobes_that_cannot_be_had_are_said_so() {
    let cmd = format!("{} 10", fixture("fixture"));
    let prog = "pid$target::classify:entry { @ = count(); } END { printa(\"entries %@d\\n\", @); }";
    let check = |out: &Output, why: &str| {
        let err = stderr(out);
        assert!(out.status.success(), "{err}");
        assert!(stdout(out).contains("entries 10\n"), "{}\n{err}", stdout(out));
        let line = format!("udtrace: -x uprobes ignored: {why}; pid probes run inside the traced processes");
        assert_eq!(err.lines().filter(|l| *l == line).count(), 1, "{err}");
    };
    let Some(out) = as_nobody(&["-x", "uprobes", "-q", "-n", prog, "-c", &cmd]) else { return };
    check(&out, "the kernel refused BPF: run as root (or with CAP_BPF and CAP_PERFMON)");
    // unshare(1) forks into the new namespace and mounts its own /proc there.
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc"]).arg(bin()).args(["-x", "uprobes", "-q", "-n", prog, "-c", &cmd]);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut g = Guard::spawn(&mut c);
    kill_after_deadline(g.child().id());
    let out = g.take().wait_with_output().expect("udtrace finishes");
    check(
        &out,
        "BPF sees the host's pids, and udtrace runs in another PID namespace: run udtrace in the host's PID namespace",
    );
}
