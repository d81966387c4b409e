//! USDT probes of a C fixture (tests/fixtures/usdt.c): listing, arguments of every
//! descriptor form, copyinstr of a string argument, a semaphore the program tests,
//! exact counts in a forked child and after exec, with BPF (uprobes) and without it
//! (the user nobody: in-process sites, semaphores written by udtrace).

mod util;

use util::{fixture, stdout, traced};

/// Default (with BPF, USDT probes are uprobes), `-x uprobes`, and without BPF (the user
/// nobody, whose sites are armed in-process and semaphores raised by udtrace).
const MODES: [&[&str]; 3] = [&[], &["-x", "uprobes"], &[NOBODY]];

/// The mode that runs udtrace and its command as the user nobody.
const NOBODY: &str = "nobody";

/// Taken by the `fixture*` test, which raises the semaphore of every process with the
/// fixture's provider (a uprobe in each), and by those that check a semaphore's exact
/// values (one would see the other's 1) or run without BPF (a uprobe over a
/// breakpoint takes its hits).
static EVERY_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn every_process_lock() -> std::sync::MutexGuard<'static, ()> {
    EVERY_PROCESS.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(mode: &[&str], script: &str, cmd: &str) -> Option<(String, String)> {
    let nobody = mode == [NOBODY];
    let mut args: Vec<&str> = if nobody { Vec::new() } else { mode.to_vec() };
    // Without BPF, on a copy of the fixture (and its library): another test's uprobes on
    // the fixture's file (a link for every process that maps it) would be in this
    // process too, over its breakpoints.
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = nobody.then(|| {
        let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = util::TempDir::new(&format!("usdt-nobody-{n}"));
        util::copy_fixture("usdt", &dir.path().join("usdt"));
        util::copy_fixture("libusdtlib.so", &dir.path().join("libusdtlib.so"));
        dir
    });
    let cmd = match &dir {
        Some(d) => cmd.replacen(&fixture("usdt"), &d.path().join("usdt").display().to_string(), 1),
        None => cmd.to_string(),
    };
    args.extend(["-Z", "-q", "-n", script, "-c", &cmd]);
    let out = if nobody {
        // A `fixture*` session's uprobe at a breakpoint's address takes its hits (the
        // kernel's int3): the nobody session would lose those firings.
        let _alone = every_process_lock();
        util::traced_unprivileged(&args)
    } else {
        traced(&args)?
    };
    assert!(out.status.success(), "udtrace failed: {}", util::stderr(&out));
    Some((stdout(&out), util::stderr(&out)))
}

#[test]
fn listing_names_probes_as_dtrace_does() {
    let exe = fixture("usdt");
    let out = util::run_args(&["-l", "-n", "fixture$target:::", "-c", &format!("{exe} 1")]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let rows: Vec<Vec<&str>> = out.stdout.lines().skip(1).map(|l| l.split_whitespace().skip(1).collect()).collect();
    let rows: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[1], r[2], r[3])).collect();
    // `__` in a note's name is `-`; the function is the one holding the site.
    assert_eq!(rows, vec![("usdt", "fire", "all-args"), ("usdt", "fire", "string"), ("usdt", "fire", "gated")]);
    assert!(out.stdout.lines().skip(1).all(|l| l.split_whitespace().nth(1).is_some_and(|p| p.starts_with("fixture"))));
    let v = util::run_args(&["-lv", "-n", "fixture$target::fire:all-args", "-c", &format!("{exe} 1")]);
    let types: Vec<&str> = v.stdout.lines().filter(|l| l.trim_start().starts_with("args[")).map(str::trim).collect();
    assert_eq!(
        types,
        [
            "args[0]: int32_t",
            "args[1]: uint64_t",
            "args[2]: uint64_t",
            "args[3]: int32_t",
            "args[4]: int8_t",
            "args[5]: uint32_t",
            "args[6]: int16_t"
        ]
    );
}

#[test]
fn arguments_of_every_descriptor_form() {
    let cmd = format!("{} 3", fixture("usdt"));
    let script = "fixture$target:::all-args { printf(\"%d %x %x %d %d %x %d\\n\", arg0, arg1, arg2, arg3, arg4, \
                  arg5, arg6); } fixture$target:::string { printf(\"%s %d\\n\", copyinstr(arg0), arg1); }";
    for mode in MODES {
        let Some((out, err)) = run(mode, script, &cmd) else { return };
        let mut want = String::new();
        for i in 0..3 {
            // -4@%ecx, 8@-8(%rbp), 8@8(%rsi,%rdx,8), -4@$5, -1@%dil, 4@sym+4(%rip), -2@%cx
            want.push_str(&format!("{} 1122334455667788 5566778899 5 -3 11223344 {}\n", -5 - i, -5 - i));
            want.push_str(&format!("hello usdt {i}\n"));
        }
        want.push_str("usdt: fired 3\n");
        let got: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
        let mut want_lines: Vec<&str> = want.lines().collect();
        // The program's own line may come before or after the trace's.
        let mut got_sorted = got.clone();
        got_sorted.sort_unstable();
        want_lines.sort_unstable();
        assert_eq!(got_sorted, want_lines, "{mode:?}: {err}");
    }
}

/// An argument in the frame of a probe in a library loaded after udtrace started
/// (no site known when the clauses were planned, as libjvm.so's `thread-start` for
/// DTraceToolkit's j_calls.d): read at the firing, before the function writes over it.
#[test]
fn a_frame_argument_of_a_library_loaded_later_is_read_at_the_firing() {
    let script = "fixture$target:::libframe { printf(\"frame %d\\n\", arg0); }";
    for mode in MODES {
        let cmd = format!("{} 3 dlopen", fixture("usdt"));
        let Some((out, err)) = run(mode, script, &cmd) else { return };
        let frames: Vec<&str> = out.lines().filter(|l| l.starts_with("frame ")).collect();
        assert_eq!(frames, ["frame 1000", "frame 1001", "frame 1002"], "{mode:?}: {out}{err}");
    }
}

#[test]
fn a_semaphore_is_raised_while_traced_in_children_too() {
    // `lib` is in libusdtlib.so, which `dlopen` loads later: -Z.
    let script = "fixture$target:::gated { @g[pid] = count(); @s = sum(arg0); } \
                  fixture$target:::lib { @l = count(); @ls = sum(arg0); } \
                  END { printa(\"pid %d=%@d\\n\", @g); printa(\"sum=%@d\\n\", @s); \
                  printa(\"lib=%@d\\n\", @l); printa(\"libsum=%@d\\n\", @ls); }";
    for (then, pids, per_pid) in [("", 1, 5), ("fork", 2, 5), ("exec", 1, 10), ("dlopen", 1, 5), ("reload", 1, 5)] {
        for mode in MODES {
            let cmd = format!("{} 5 {then}", fixture("usdt"));
            let Some((out, err)) = run(mode, script, cmd.trim()) else { return };
            let counts: Vec<u64> = out
                .lines()
                .filter(|l| l.starts_with("pid "))
                .filter_map(|l| l.rsplit_once('=').and_then(|(_, n)| n.parse().ok()))
                .collect();
            assert_eq!(counts, vec![per_pid; pids], "{then} {mode:?}: {out}{err}");
            // Each process counts its own gated firings from 1: the semaphore is seen
            // raised from the first (a child copies its parent's count).
            let sum: u64 = match then {
                "fork" => 15 + (6..=10).sum::<u64>(),
                "exec" => 15 + 15,
                _ => 15,
            };
            assert!(out.contains(&format!("sum={sum}\n")), "{then} {mode:?}: {out}");
            // The program's own output is an untraced run's.
            let alone = std::process::Command::new(fixture("usdt")).args(cmd.split_whitespace().skip(1)).output();
            let alone = String::from_utf8_lossy(&alone.unwrap().stdout).into_owned();
            let own: String = out.lines().filter(|l| l.starts_with("usdt:")).map(|l| format!("{l}\n")).collect();
            assert_eq!(own, alone, "{then} {mode:?}");
            // The library's probe fires (its own semaphore raised) once it is loaded.
            // Unloaded and loaded again, it fires as often again (its semaphore raised
            // in the new mapping).
            let lib = match then {
                "dlopen" => "lib=5\nlibsum=10\n",
                "reload" => "lib=10\nlibsum=20\n",
                _ => "",
            };
            assert!(lib.is_empty() || out.contains(lib), "{then} {mode:?}: {out}{err}");
        }
    }
    // Untraced, the program never sees its semaphore raised: nothing gated fires.
    let alone = std::process::Command::new(fixture("usdt")).arg("5").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&alone.stdout), "usdt: fired 5\n");
}

/// `fixture*`: every process's probes, with -Z (none may exist yet), in processes that
/// were running before udtrace started; each waits for its semaphore, then fires.
#[test]
fn every_process_with_a_glob_provider() {
    let _alone = every_process_lock();
    let n = 6u64;
    // A copy of its own: another test's uprobes on the fixture (a link for every
    // process that maps a file, where only traced ones did) raise its semaphore too.
    let dir = util::TempDir::new("usdt-all");
    let exe = dir.path().join("usdt-all");
    util::copy_fixture("usdt", &exe);
    let mut procs: Vec<util::Guard> = (0..2)
        .map(|_| {
            util::Guard::spawn(
                std::process::Command::new(&exe).args([&n.to_string(), "await"]).stdout(std::process::Stdio::null()),
            )
        })
        .collect();
    let pids: Vec<u32> = procs.iter_mut().map(|g| g.child().id()).collect();
    let script = format!(
        "fixture*:::gated /pid == {} || pid == {}/ {{ @g[pid] = count(); }} \
         END {{ printa(\"pid %d=%@d\\n\", @g); }}",
        pids[0], pids[1]
    );
    let mut u =
        util::Guard::spawn(util::udtrace_cmd(&["-Z", "-q", "-n", &script]).stdout(std::process::Stdio::piped()));
    for p in &mut procs {
        let st = p.take().wait().unwrap();
        assert!(st.success());
    }
    let _ = std::process::Command::new("kill").args(["-INT", &u.child().id().to_string()]).status();
    let out = u.take().wait_with_output().unwrap();
    let Some(()) = util::bpf_gate(&out) else { return };
    let text = stdout(&out);
    let mut want: Vec<String> = pids.iter().map(|p| format!("pid {p}={n}")).collect();
    want.sort();
    let mut got: Vec<String> = text.lines().filter(|l| l.starts_with("pid ")).map(str::to_string).collect();
    got.sort();
    assert_eq!(got, want, "{}", util::stderr(&out));
}

/// A semaphore raised while udtrace traces a process is lowered when udtrace ends,
/// also by SIGKILL: with BPF the kernel drops its uprobes, and their counts, with it;
/// without BPF (nobody) the undertaker lowers what udtrace raised.
#[test]
fn a_semaphore_is_lowered_when_udtrace_is_killed() {
    let _alone = every_process_lock();
    use std::io::BufRead;
    let dir = util::TempDir::new("usdt-lowered");
    let exe = dir.path().join("usdt-lowered");
    util::copy_fixture("usdt", &exe);
    for nobody in [false, true] {
        let command = |program: &std::ffi::OsStr| match nobody {
            true => util::unprivileged(program),
            false => std::process::Command::new(program),
        };
        let mut fix =
            util::Guard::spawn(command(exe.as_os_str()).args(["2", "lowered"]).stdout(std::process::Stdio::piped()));
        let pid = fix.child().id().to_string();
        util::wait_mapped(&pid, "usdt-lowered");
        util::wait_mapped(&pid, "libc");
        let mut lines = std::io::BufReader::new(fix.child().stdout.take().unwrap()).lines();
        let mut u = util::Guard::spawn(
            command(util::bin().as_os_str())
                .args(["-q", "-p", &pid, "-n", "fixture$target:::gated { @ = count(); }"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped()),
        );
        let raised = lines.next().expect("a line").unwrap();
        if raised != "raised 1" {
            let out = u.take().wait_with_output().unwrap();
            let Some(()) = util::bpf_gate(&out) else { return };
            panic!("{raised}: {}", util::stderr(&out));
        }
        let undertakers = util::live::children_of(u.child().id());
        u.child().kill().unwrap();
        let _ = u.take().wait();
        util::live::wait_gone(&undertakers);
        assert_eq!(lines.next().expect("a line").unwrap(), "lowered 1", "nobody: {nobody}");
        assert!(fix.take().wait().unwrap().success());
    }
}

/// The values `usdt 1 watch [fork]` printed (`[child |parent ]semaphore V`), by who.
fn watched(text: &str, who: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.strip_prefix(who)?.strip_prefix("semaphore ")?.parse().ok()).collect()
}

/// Starts `usdt 1 watch ARGS` as nobody, its output into a file (read as it grows).
fn watcher(dir: &util::TempDir, args: &[&str]) -> (util::Guard, std::path::PathBuf) {
    let out = dir.path().join("watch.out");
    let file = std::fs::File::create(&out).unwrap();
    // A copy of its own: another test's uprobes on the fixture (a link for every
    // process that maps a file, where only traced ones did) would raise it too.
    let exe = dir.path().join("usdt-watch");
    util::copy_fixture("usdt", &exe);
    let mut fix = util::Guard::spawn(util::unprivileged(&exe).args(["1", "watch"]).args(args).stdout(file));
    util::kill_after_deadline(fix.child().id());
    // setpriv (root, and mapping libc itself) execs the fixture as nobody: grabbed
    // before, it is root's.
    util::wait_mapped(fix.child().id(), "usdt-watch");
    util::wait_mapped(fix.child().id(), "libc");
    (fix, out)
}

/// Waits (up to 30 s) until `file` holds `n` lines; else ends `tracer` and fails with
/// what it said.
fn wait_lines(file: &std::path::Path, n: usize, tracer: &mut util::Guard) {
    for _ in 0..3000 {
        if std::fs::read_to_string(file).unwrap_or_default().lines().count() >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = tracer.child().kill();
    let end = tracer.take().wait_with_output().unwrap();
    let text = std::fs::read_to_string(file).unwrap_or_default();
    panic!("{} never had {n} lines: {text:?}; udtrace: {}", file.display(), util::stderr(&end));
}

/// Runs the watcher fixture in `mode` under udtrace without BPF counting `gated`, waits
/// for `lines` of its output, stops udtrace with `signal` (its undertaker waited for),
/// and gives the watcher's output and udtrace's stderr.
fn watched_under(name: &str, mode: &str, lines: usize, signal: &str) -> (String, String) {
    let dir = util::TempDir::new(name);
    let (mut fix, out) = watcher(&dir, &[mode]);
    let pid = fix.child().id().to_string();
    let mut u = util::Guard::spawn(
        util::unprivileged(util::bin())
            .args(["-q", "-p", &pid, "-n", "fixture$target:::gated { @ = count(); }"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    util::kill_after_deadline(u.child().id());
    wait_lines(&out, lines, &mut u);
    let undertakers = util::live::children_of(u.child().id());
    let _ = std::process::Command::new("kill").args([signal, &u.child().id().to_string()]).status();
    let end = u.take().wait_with_output().unwrap();
    util::live::wait_gone(&undertakers);
    assert!(fix.take().wait().unwrap().success());
    (std::fs::read_to_string(&out).unwrap(), util::stderr(&end))
}

/// Without BPF, udtrace raises a semaphore by 1 in each process it traces: in a child
/// forked while it is raised (a copy of its parent's memory, our 1 included) too, and
/// lowers it by 1 in each when it ends (SIGINT), or the undertaker does (SIGKILL).
#[test]
fn without_bpf_a_semaphore_is_raised_and_lowered_in_forked_children() {
    let _alone = every_process_lock();
    for signal in ["-INT", "-KILL"] {
        let (text, err) = watched_under("usdt-watch-fork", "fork", 2, signal);
        assert_eq!(watched(&text, "parent "), [1, 0], "{signal}: {text}{err}");
        assert_eq!(watched(&text, "child "), [1, 0], "{signal}: {text}{err}");
        assert!(text.ends_with("usdt: fired 1\n"), "{text}");
    }
}

/// Each tracer of a semaphore adds and removes its own 1, never an absolute value:
/// the program holds a count of its own (as a BPF session's uprobe would: the kernel's
/// reference counter), and sees 1, then 2 while udtrace (without BPF) traces it, then 1
/// again when udtrace ends by SIGINT or SIGKILL (its undertaker).
#[test]
fn without_bpf_a_semaphore_is_raised_by_one_over_another_tracers_count() {
    let _alone = every_process_lock();
    for signal in ["-INT", "-KILL"] {
        let (text, err) = watched_under("usdt-watch-own", "own", 1, signal);
        assert_eq!(watched(&text, ""), [2, 1], "{signal}: {text}{err}");
        assert!(text.ends_with("usdt: fired 1\n"), "{text}");
    }
}

/// Clauses on USDT probes run where the probes fire (docs/usdt.md, "At the firing"):
/// a predicate on an argument and aggregations keyed and valued by them (registers,
/// beside a probe with memory arguments, whose clause stays in the consumer), with
/// exact counts, in a forked child and after exec too, printing what `-x nodif` (every
/// clause in the consumer, from the records) prints. After exec the consumer reads the
/// old image's globals from the new one (0: read late, docs/usdt.md "Arguments"): the
/// all-args rows are checked only without it.
#[test]
fn clauses_run_at_the_firing_as_in_the_consumer() {
    let script = "fixture$target:::all-args { @a[arg0, arg1, arg2, arg3, arg4, arg5] = count(); @s = sum(arg6); } \
                  fixture$target:::gated /arg0 > 2/ { @g = count(); @gs = sum(arg0); @q = quantize(arg0); } \
                  fixture$target:::string { @n[arg1 % 3] = count(); @x = max(arg1); }";
    let check = |then: &str, out: &str, what: &str| {
        let per = if then.is_empty() { 1 } else { 2 };
        // -4@%ecx is -5 - i, then 8@-8(%rbp), 8@8(%rsi,%rdx,8), -4@$5, -1@%dil, 4@sym+4(%rip).
        for i in (0..20).filter(|_| then != "exec") {
            let row = format!("{} 1234605616436508552 366791329945 5 -3 287454020 {per}", -5 - i);
            let words: Vec<&str> = row.split(' ').collect();
            assert!(
                out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == words),
                "{then} {what}: no row {row}:\n{out}"
            );
        }
        // The gated probe's arg0 counts its firings from 1 in each process (a forked
        // child continues its parent's count; an exec'd image starts again).
        let (count, sum) = match then {
            "" => (18, (3..=20).sum::<u64>()),
            "fork" => (38, (3..=20).sum::<u64>() + (21..=40).sum::<u64>()),
            _ => (36, 2 * (3..=20).sum::<u64>()),
        };
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        assert!(lines.contains(&count.to_string().as_str()), "{then} {what}: no count {count}:\n{out}");
        assert!(lines.contains(&sum.to_string().as_str()), "{then} {what}: no sum {sum}:\n{out}");
        // -2@%cx: -5 - i, 20 times per process.
        let s6: i64 = -(5..25).sum::<i64>() * per;
        assert!(lines.contains(&s6.to_string().as_str()), "{then} {what}: no sum {s6}:\n{out}");
    };
    for then in ["", "fork", "exec"] {
        let cmd = format!("{} 20 {then}", fixture("usdt"));
        let Some((want, err)) = run(&["-x", "nodif"], script, cmd.trim()) else { return };
        assert!(!err.contains("drop") && !err.contains("error"), "{then} nodif: {err}");
        check(then, &want, "nodif");
        for mode in MODES {
            let Some((got, err)) = run(mode, script, cmd.trim()) else { return };
            assert!(!err.contains("drop") && !err.contains("error"), "{then} {mode:?}: {err}");
            check(then, &got, "at the firing");
            if then != "exec" {
                assert_eq!(
                    sorted(&got),
                    sorted(&want),
                    "{then} {mode:?}: at the firing (left), in the consumer (right)"
                );
            }
        }
    }
}

/// Lines in order: the program's own line may come before or after the trace's.
fn sorted(out: &str) -> Vec<&str> {
    let mut l: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    l.sort_unstable();
    l
}

/// What `argv` prints and how it ends, untraced.
fn untraced(argv: &[&str]) -> (String, Option<i32>) {
    let out = std::process::Command::new(argv[0]).args(&argv[1..]).output().expect("untraced run");
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
}

/// `provider*` and `pid*` probes of an image udtrace has never seen (a fresh copy of the
/// fixture) that processes exec, fire N times and end within a millisecond: each is
/// held at its new image and at its loader until they are armed, so every firing
/// counts. Exec'd by 20 children a `-c` shell starts at once, and by a command
/// system() runs (its command runs held too; output after system() waits for the
/// command). Before, only the processes udtrace happened to seize in time counted (0 or
/// 7 of 140 seen), and system() blocked udtrace while its command ran (0 of 7: the
/// failure of tst.reeval.sh, and tst.entryreturn.sh's timeout).
#[test]
fn a_new_image_is_held_until_its_probes_are_armed() {
    let _alone = every_process_lock();
    let n = 7;
    let children = 20;
    for how in ["exec", "system"] {
        let dir = util::TempDir::new(&format!("usdt-new-{how}"));
        let exe = dir.path().join("usdt-new");
        util::copy_fixture("usdt", &exe);
        let exe_s = exe.display().to_string();
        // Read by the shell, not exec'd: a file this process wrote may be open for
        // writing in another test thread's child (`copy_fixture`).
        let launch = dir.write("launch", &format!("for i in $(seq {children}); do {exe_s} {n} & done; wait\n"));
        let launch_cmd = format!("/bin/sh {}", launch.display());
        let (plain, code) = match how {
            "exec" => untraced(&["/bin/sh", &launch.display().to_string()]),
            _ => untraced(&[&exe_s, &n.to_string()]),
        };
        assert_eq!(code, Some(0));
        let counts = "fixture*:::string /progenyof($pid)/ { @s = count(); } \
                      pid*:usdt-new:fire:entry /progenyof($pid)/ { @f = count(); } \
                      END { printa(\"string %@d\\n\", @s); printa(\"fire %@d\\n\", @f); }";
        let (script, extra, fired) = match how {
            "exec" => (counts.to_string(), vec!["-c", launch_cmd.as_str()], n * children),
            _ => (
                format!(
                    "BEGIN {{ system(\"{exe_s} {n}\"); printf(\"after\\n\"); }} \
                     proc:::exit /progenyof($pid) && execname == \"usdt-new\"/ {{ exit(0); }} {counts}"
                ),
                vec!["-w"],
                n,
            ),
        };
        let mut args = vec!["-Z", "-q", "-n", &script];
        args.extend(extra);
        let Some(out) = traced(&args) else { return };
        assert!(out.status.success(), "{how}: {}", util::stderr(&out));
        let text = stdout(&out);
        let ours = |l: &&str| l.starts_with("string ") || l.starts_with("fire ") || l.is_empty();
        let program: Vec<&str> = text.lines().filter(|l| !ours(l)).collect();
        let mut want: Vec<&str> = plain.lines().collect();
        if how == "system" {
            // What follows system() in the clause comes after the command's output.
            want.push("after");
            assert_eq!(program, want, "{how}: {text}{}", util::stderr(&out));
        } else {
            assert_eq!(sorted(&program.join("\n")), sorted(&plain), "{how}: {text}{}", util::stderr(&out));
        }
        assert!(text.contains(&format!("string {fired}\n")), "{how}: {text}{}", util::stderr(&out));
        assert!(text.contains(&format!("fire {fired}\n")), "{how}: {text}{}", util::stderr(&out));
    }
}

/// udtrace with `args` (a script that prints `ready` from BEGIN), once it has: the rest
/// of its output lines to read. None where the kernel refuses BPF.
fn ready(args: &[&str]) -> Option<(util::Guard, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>)> {
    use std::io::BufRead;
    let mut u = util::Guard::spawn(&mut util::udtrace_cmd(args));
    util::kill_after_deadline(u.child().id());
    let mut lines = std::io::BufReader::new(u.child().stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok);
    if first.as_deref() != Some("ready") {
        let out = u.take().wait_with_output().expect("udtrace finishes");
        util::bpf_gate(&out)?;
        panic!("udtrace did not start: {first:?} {}", util::stderr(&out));
    }
    Some((u, lines))
}

/// `provider*` and `pid*` probes of an image udtrace has never seen, exec'd by processes
/// udtrace did not start (a shell the test runs beside it starts 20 at once, each firing
/// N times and ending within a millisecond): the exec gate holds each exec of the new
/// image inside execve until udtrace has seized it, so every firing counts and the
/// program's output is an untraced run's, and `execname` is the new image's though each
/// ended before udtrace read its firings. Before the gate, such a process was seized
/// only once udtrace read of its exec: 7 to 91 of 140 counted (and `execname` was
/// empty for most).
#[test]
fn a_new_image_exec_d_outside_udtrace_is_held_until_armed() {
    let _alone = every_process_lock();
    let (n, children) = (7, 20);
    let (_dir, launch, plain) = fresh_launch("usdt-gate", n, children);
    let script = "fixture*:usdt-gate::string { @s = count(); } \
                  pid*:usdt-gate:fire:entry { @f = count(); @n[execname] = count(); } \
                  END { printa(\"name %s %@d\\n\", @n); } BEGIN { printf(\"ready\\n\"); } \
                  END { printa(\"string %@d\\n\", @s); printa(\"fire %@d\\n\", @f); }";
    let Some((text, out)) = launched_under(&["-Z", "-q", "-n", script], &launch, &plain) else { return };
    let fired = n * children;
    assert!(text.contains(&format!("string {fired}\n")), "{text}{}", util::stderr(&out));
    assert!(text.contains(&format!("fire {fired}\n")), "{text}{}", util::stderr(&out));
    // Each ended before udtrace read its firings: its name is the one its exec gave it.
    assert!(text.contains(&format!("name usdt-gate {fired}\n")), "{text}{}", util::stderr(&out));
}

/// The exec gate is a process of its own (`udtrace-gate`): while udtrace itself is
/// stopped (SIGSTOP, which it cannot catch), an exec of a new image is let go after the
/// gate's limit instead of waiting for udtrace (before, with the gate a thread of
/// udtrace, it waited until udtrace was continued: a shell that had stopped udtrace could
/// not run a new program to continue it). Continued, udtrace traces on and ends cleanly.
#[test]
fn a_stopped_udtrace_holds_no_exec() {
    let _alone = every_process_lock();
    let dir = util::TempDir::new("usdt-gate-stopped");
    let exe = dir.path().join("usdt-stopped");
    util::copy_fixture("usdt", &exe);
    let script = "pid*:usdt-stopped:fire:entry { @f = count(); } BEGIN { printf(\"ready\\n\"); }";
    let Some((mut u, lines)) = ready(&["-Z", "-q", "-n", script]) else { return };
    let pid = u.child().id().to_string();
    let signal = |sig: &str| std::process::Command::new("kill").args([sig, &pid]).status().expect("kill");
    assert!(signal("-STOP").success());
    let mut run = util::Guard::spawn(std::process::Command::new(&exe).arg("3").stdout(std::process::Stdio::piped()));
    util::kill_after(run.child().id(), 30);
    let ran = run.take().wait_with_output().expect("the program ends");
    assert!(signal("-CONT").success());
    assert_eq!(ran.status.code(), Some(0), "killed by the hang guard: the exec waited for a stopped udtrace");
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "usdt: fired 3\n");
    assert!(signal("-INT").success());
    drop(lines);
    let out = u.take().wait_with_output().expect("udtrace finishes");
    assert!(out.status.success(), "{}", util::stderr(&out));
}

/// A fresh copy of the fixture named `name` (no process maps it: its image is new to
/// udtrace) and a shell script that starts `children` of it at once, each firing `n`
/// times; with the output of an untraced run of the same (of another copy).
fn fresh_launch(name: &str, n: usize, children: usize) -> (util::TempDir, std::path::PathBuf, String) {
    let make = |dir: &util::TempDir| {
        let exe = dir.path().join(name);
        util::copy_fixture("usdt", &exe);
        dir.write("launch", &format!("for i in $(seq {children}); do {} {n} & done; wait\n", exe.display()))
    };
    let dir = util::TempDir::new(&format!("{name}-plain"));
    let (plain, code) = untraced(&["/bin/sh", &make(&dir).display().to_string()]);
    assert_eq!(code, Some(0));
    let dir = util::TempDir::new(&format!("{name}-fresh"));
    let launch = make(&dir);
    (dir, launch, plain)
}

/// udtrace with `args` (a script that prints "ready" at BEGIN), and once it is ready,
/// the shell script `launch` run beside it (not its child), its output `plain`'s; then
/// udtrace interrupted: what it printed after "ready", and its output. None where the
/// kernel refuses BPF.
fn launched_under(args: &[&str], launch: &std::path::Path, plain: &str) -> Option<(String, std::process::Output)> {
    let (mut u, lines) = ready(args)?;
    let ran = std::process::Command::new("/bin/sh").arg(launch).output().expect("launch");
    assert_eq!(ran.status.code(), Some(0));
    assert_eq!(sorted(&String::from_utf8_lossy(&ran.stdout)), sorted(plain));
    let _ = std::process::Command::new("kill").args(["-INT", &u.child().id().to_string()]).status();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = u.take().wait_with_output().expect("udtrace finishes");
    Some((rest.join("\n") + "\n", out))
}

/// `copyinstr(arg0)` of a USDT probe found after start (`-Z`, a fresh copy of the
/// fixture), in processes launched from a shell udtrace did not start, each ended
/// before udtrace read its firings: the literal `"hello usdt"` (a page the process
/// never touched) is read at the firing, faulted in, whichever register the site has
/// it in, for a clause in the consumer (`printf`) and a key. Before, the record of a
/// probe found later carried no string (the capture plan named the registers of the
/// probes matched at start: none): the consumer read the ended process, and only the
/// one the exec gate seized had its bytes read from its file; the others printed
/// "invalid address". Default backend and `-x uprobes`; the program's output is an
/// untraced run's.
#[test]
fn strings_of_usdt_probes_found_after_start_are_read_at_the_firing() {
    let _alone = every_process_lock();
    let (n, children) = (3, 8);
    for flags in [&[][..], &["-x", "uprobes"][..]] {
        // A fresh file for each: the first run armed the other.
        let (_dir, launch, plain) = fresh_launch("usdt-str", n, children);
        let script = "fixture*:usdt-str::string /arg1 == 0/ { printf(\"said %s\\n\", copyinstr(arg0)); } \
                      fixture*:usdt-str::string { @s[copyinstr(arg0)] = count(); } \
                      BEGIN { printf(\"ready\\n\"); } END { printa(\"key %s %@d\\n\", @s); }";
        let mut args = flags.to_vec();
        args.extend(["-Z", "-q", "-n", script]);
        let Some((text, out)) = launched_under(&args, &launch, &plain) else { return };
        let said: Vec<&str> = sorted(&text).into_iter().filter(|l| l.starts_with("said")).collect();
        assert_eq!(said, vec!["said hello usdt"; children], "{flags:?} {text}{}", util::stderr(&out));
        assert!(text.contains(&format!("key hello usdt {}\n", n * children)), "{flags:?} {text}{}", util::stderr(&out));
        assert_eq!(util::stderr(&out), "", "{flags:?}");
    }
}

/// A library a `-c` process dlopens and calls at once (`usdt N dlopen`, a fresh copy
/// of the fixture and its library): the process is held at its loader until the
/// library's `provider*` and `pid*` probes are armed, so each of its N firings counts
/// (before, the load was armed when udtrace heard of it, the process running on: the
/// failure of tst.dlclose2.sh). The program's output and status are an untraced run's.
#[test]
fn a_library_loaded_and_called_at_once_is_held_until_armed() {
    let _alone = every_process_lock();
    let n = 5;
    let dir = util::TempDir::new("usdt-new-dlopen");
    let exe = dir.path().join("usdt-dl");
    util::copy_fixture("usdt", &exe);
    util::copy_fixture("libusdtlib.so", &dir.path().join("libusdtlib.so"));
    let (plain, code) = untraced(&[&exe.display().to_string(), &n.to_string(), "dlopen"]);
    assert_eq!((plain.as_str(), code), ("usdt: fired 5\n", Some(0)));
    let script = "fixture*:::lib /pid == $target/ { @l = count(); } \
                  pid*:libusdtlib.so:usdt_lib_fire:entry /pid == $target/ { @f = count(); } \
                  END { printa(\"lib %@d\\n\", @l); printa(\"fire %@d\\n\", @f); }";
    let cmd = format!("{} {n} dlopen", exe.display());
    let Some(out) = traced(&["-Z", "-q", "-n", script, "-c", &cmd]) else { return };
    assert!(out.status.success(), "{}", util::stderr(&out));
    let text = stdout(&out);
    let program: Vec<&str> =
        text.lines().filter(|l| !l.starts_with("lib ") && !l.starts_with("fire ") && !l.is_empty()).collect();
    assert_eq!(program, plain.lines().collect::<Vec<_>>(), "{text}{}", util::stderr(&out));
    assert!(text.contains(&format!("lib {n}\n")), "{text}{}", util::stderr(&out));
    assert!(text.contains("fire 1\n"), "{text}{}", util::stderr(&out));
}

/// An interrupt while a system() command of a `pid*` session runs (held by udtrace
/// at its images) ends udtrace at once: the command is let go, neither stopped nor
/// traced, and runs on; what the program wrote after system() is written out. (The
/// command's output goes elsewhere: it would keep udtrace's stdout pipe open.)
#[test]
fn an_interrupt_lets_a_running_command_go() {
    let dir = util::TempDir::new("usdt-new-interrupt");
    let started = dir.path().join("started");
    let script = format!(
        "BEGIN {{ system(\"echo $$ > {}; exec sleep 30 >/dev/null 2>&1\"); printf(\"after\\n\"); }} pid*:nomatch-xyz::entry {{ }}",
        started.display()
    );
    let mut u = util::Guard::spawn(&mut util::udtrace_cmd(&["-w", "-Z", "-q", "-n", &script]));
    util::kill_after_deadline(u.child().id());
    let mut pid = String::new();
    for _ in 0..3000 {
        pid = std::fs::read_to_string(&started).unwrap_or_default();
        if pid.ends_with('\n') {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid: u32 = pid.trim().parse().expect("the command started");
    util::wait_mapped(pid, "sleep");
    let _ = std::process::Command::new("kill").args(["-INT", &u.child().id().to_string()]).status();
    let begun = std::time::Instant::now();
    let out = u.take().wait_with_output().unwrap();
    let Some(()) = util::bpf_gate(&out) else { return };
    let waited = begun.elapsed();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    assert!(out.status.success(), "{}", util::stderr(&out));
    assert!(waited < std::time::Duration::from_secs(10), "udtrace waited {waited:?} for the command");
    assert!(stdout(&out).contains("after\n"), "{}", stdout(&out));
    let field = |name: &str| status.lines().find(|l| l.starts_with(name)).unwrap_or("").to_string();
    assert!(!field("State:").contains("T"), "{status}");
    assert_eq!(field("TracerPid:"), "TracerPid:\t0", "{status}");
}
