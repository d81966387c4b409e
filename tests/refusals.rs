//! Processes udtrace cannot trace, or not wholly: each refusal is one line naming the
//! pid and the reason, with status 1, and the process is left as it was; what still
//! works in a static, stripped or namespaced process works (docs/pid-provider.md,
//! "Refusals").

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

mod util;

use util::{copy_fixture, fixture, is_root, run, run_args, unprivileged, wait_mapped, Backend, Guard, TempDir, NAME};

/// A kernel thread: kthreadd (pid 2) where it is one, else the first /proc lists.
fn kernel_thread() -> (i32, String) {
    let flags_and_comm = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let close = stat.rfind(')')?;
        let comm = stat[stat.find('(')? + 1..close].to_string();
        let flags: u64 = stat[close + 1..].split_whitespace().nth(6)?.parse().ok()?;
        (flags & 0x0020_0000 != 0).then_some(comm)
    };
    let listed =
        std::fs::read_dir("/proc").expect("/proc").flatten().filter_map(|e| e.file_name().to_str()?.parse().ok());
    std::iter::once(2).chain(listed).find_map(|p| Some((p, flags_and_comm(p)?))).expect("a kernel thread")
}

#[test]
fn a_kernel_thread_has_no_user_code_to_probe() {
    let (pid, comm) = kernel_thread();
    let p = pid.to_string();
    let out = run_args(&["-n", "pid$target::malloc:entry {}", "-p", &p]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!(
            "{NAME}: invalid probe specifier pid$target::malloc:entry {{}}: failed to grab process {pid}: \
             {comm} is a kernel thread: it has no user code to probe\n"
        )
    );
    // Named by number, without -p: the same reason.
    let out = run_args(&["-n", &format!("pid{pid}::malloc:entry {{}}")]);
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.ends_with(&format!("{comm} is a kernel thread: it has no user code to probe\n")),
        "{}",
        out.stderr
    );
    // A program without pid probes only needs $target: the thread is watched, never
    // seized.
    let out = run_args(&["-qn", "BEGIN { printf(\"%d\\n\", $target); exit(0); }", "-p", &p]);
    assert_eq!((out.status, out.stdout.as_str(), out.stderr.as_str()), (0, format!("{pid}\n\n").as_str(), ""));
}

/// The state letter of `pid` in /proc/PID/stat.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

#[test]
fn a_zombie_has_exited() {
    // A child of the test that exits and is not waited for (until the guard reaps it).
    let mut g = Guard::spawn(Command::new("true").stdin(Stdio::null()));
    let pid = g.child().id();
    for _ in 0..500 {
        if state(pid) == Some('Z') {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(state(pid), Some('Z'), "true never became a zombie");
    let out = run_args(&["-n", "pid$target::malloc:entry {}", "-p", &pid.to_string()]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!("{NAME}: failed to grab pid {pid}: zombie process: it has exited, and its parent has not reaped it\n")
    );
    // Untouched: still a zombie, still the test's to reap.
    assert_eq!(state(pid), Some('Z'));
    assert!(g.take().wait().expect("reap").success());
}

#[test]
fn a_missing_process_is_dtraces_no_such_process() {
    // Above any pid_max: never a process. DTrace for Linux's words, which its test
    // suite expects (tst.ProcInvalid): the pid is on the command line.
    let out = run_args(&["-n", "pid$target::malloc:entry {}", "-p", "2147483647"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.stderr, format!("{NAME}: No such process\n"));
}

#[test]
fn another_users_process_needs_root_or_cap_sys_ptrace() {
    if !is_root() {
        println!("skipped: needs root to run udtrace as nobody against a root process");
        return;
    }
    // A process of root's, run by the test so that it ends with it.
    let mut g = Guard::spawn(Command::new(fixture("probes")).args(["spin", "100000", "10"]).stdout(Stdio::null()));
    let pid = g.child().id();
    wait_mapped(pid, "libc");
    let mut cmd = unprivileged(util::bin());
    cmd.args(["-n", "pid$target::work:entry {}", "-p", &pid.to_string()]);
    let out = run(&mut cmd);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!(
            "{NAME}: failed to grab pid {pid}: Operation not permitted: it runs as uid 0, udtrace as uid 65534; \
             tracing another user's process needs root or CAP_SYS_PTRACE\n"
        )
    );
    // Named by number: its maps are as closed to nobody.
    let mut cmd = unprivileged(util::bin());
    cmd.args(["-n", &format!("pid{pid}::work:entry {{}}")]);
    let out = run(&mut cmd);
    assert_eq!(out.status, 1);
    assert!(out.stderr.ends_with("tracing another user's process needs root or CAP_SYS_PTRACE\n"), "{}", out.stderr);
    assert_eq!(state(pid).map(|s| s != 'Z' && s != 't'), Some(true), "the process was disturbed");
    assert!(g.child().try_wait().expect("poll").is_none());
}

/// The first child of `parent` once it runs the executable `exe` (waits up to 5 s).
fn child_running(parent: u32, exe: &str) -> u32 {
    for _ in 0..500 {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).unwrap_or_default();
        let child = children.split_whitespace().next().and_then(|p| p.parse::<u32>().ok());
        if let Some(c) = child.filter(|c| std::fs::read_link(format!("/proc/{c}/exe")).is_ok_and(|e| e.ends_with(exe)))
        {
            return c;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("no child of {parent} ran {exe}");
}

#[test]
fn without_bpf_the_refusal_is_one_line() {
    if !is_root() {
        println!("skipped: needs root to run udtrace as nobody");
        return;
    }
    let mut cmd = unprivileged(util::bin());
    cmd.args(["-n", "proc:::exec-success {}"]);
    let out = run(&mut cmd);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        format!(
            "{NAME}: description 'proc:::exec-success ' matched 1 probe\n\
             {NAME}: the proc provider cannot be enabled without BPF: the kernel refused BPF: run as root (or with \
             CAP_BPF and CAP_PERFMON); pid probes on -c/-p processes work without it\n"
        )
    );
}

// ---- PID namespaces ------------------------------------------------------------------

/// `unshare` with these arguments, or None (and a reason printed) where it cannot run.
fn unshare(args: &[&str]) -> Option<Command> {
    if !is_root() || Command::new("unshare").args(["--pid", "--fork", "true"]).status().map_or(true, |s| !s.success()) {
        println!("skipped: cannot make a PID namespace here (needs root and unshare)");
        return None;
    }
    let mut c = Command::new("unshare");
    c.args(["--pid", "--kill-child", "--mount-proc"]).args(args);
    Some(c)
}

/// A process in a PID namespace of its own is traced from udtrace's (the host's) by the
/// pid udtrace sees; `pid` in D is that pid too, as udtrace's every other output.
fn a_process_in_another_pid_namespace_is_traced_by_udtraces_pid(backend: Backend) {
    let Some(mut c) = unshare(&[&fixture("probes"), "spin", "100000", "5"]) else { return };
    let mut g = Guard::spawn(c.stdout(Stdio::null()));
    // The namespace's first process.
    let pid = child_running(g.child().id(), "probes");
    wait_mapped(pid, "libc");
    // In its own namespace it is pid 1.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    assert!(status.contains(&format!("NSpid:\t{pid}\t1\n")), "{status}");
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::work:entry { printf(\"%d %d %d\\n\", pid, tid, $target); exit(0); }",
        "-p",
        &pid.to_string(),
    ]) else {
        return;
    };
    assert!(out.status.success(), "{}", util::stderr(&out));
    assert_eq!(util::stdout(&out), format!("{pid} {pid} {pid}\n\n"));
    assert!(g.child().try_wait().expect("poll").is_none(), "the traced process died");
}

util::pid_backends!(a_process_in_another_pid_namespace_is_traced_by_udtraces_pid);

/// udtrace inside a PID namespace, under the host's /proc: /proc's pids are not the
/// ones its system calls take. It refuses before it touches anything.
#[test]
fn udtrace_under_another_namespaces_proc_refuses() {
    if unshare(&[]).is_none() {
        return;
    }
    let mut c = Command::new("unshare");
    c.args(["--pid", "--kill-child"]).arg(util::bin());
    c.args(["-n", "pid$target::work:entry {}", "-c", &format!("{} spin 1 1", fixture("probes"))]);
    let out = run(&mut c);
    assert_eq!(out.status, 1);
    let prefix = format!(
        "{NAME}: failed to execute {}: /proc belongs to another PID namespace than udtrace's (udtrace is pid 1 here, \
         /proc/self says ",
        fixture("probes")
    );
    assert!(out.stderr.starts_with(&prefix), "{}", out.stderr);
    assert!(out.stderr.ends_with("): mount this namespace's /proc (unshare --mount-proc)\n"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
}

/// udtrace inside a PID namespace with its own /proc: pid probes run in the traced
/// processes and count exactly; what needs BPF (whose helpers give the host's pids) is
/// refused in one line.
#[test]
fn udtrace_inside_a_pid_namespace_runs_pid_probes_without_bpf() {
    let Some(mut c) = unshare(&[]) else { return };
    // A copy of its own: another test's uprobe on the fixture, armed for every process
    // that maps it, is another tracer's change in its code, which in-process probes
    // leave alone (and without BPF nothing else can probe).
    let dir = TempDir::new("namespace-probes");
    let exe = dir.path().join("probes");
    copy_fixture("probes", &exe);
    c.arg(util::bin()).args([
        "-q",
        "-n",
        "pid$target::work:entry { @ = count(); }",
        "-c",
        &format!("{} spin 7 1", exe.display()),
    ]);
    let out = run(&mut c);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout.split_whitespace().collect::<Vec<_>>(), ["spin", "7", "sink=21", "7"], "{}", out.stdout);
    let Some(mut c) = unshare(&[]) else { return };
    c.arg(util::bin()).args(["-n", "proc:::exec-success {}"]);
    let out = run(&mut c);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr.lines().last().unwrap_or(""),
        format!(
            "{NAME}: the proc provider cannot be enabled without BPF: BPF sees the host's pids, and udtrace runs in \
             another PID namespace: run udtrace in the host's PID namespace; pid probes on -c/-p processes work \
             without it"
        )
    );
}

// ---- static and stripped executables ---------------------------------------------------

/// `fixture(name)` when build.rs could build it (the static ones need libc.a).
fn built(name: &str) -> Option<String> {
    let path = fixture(name);
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    assert_ne!(std::env::var("UDTRACE_REQUIRE_BPF").as_deref(), Ok("1"), "{name} was not built (no libc.a?)");
    println!("skipped: {name} not built (no static libc)");
    None
}

#[test]
fn a_static_program_has_no_libc_module() {
    let Some(exe) = built("errnos-static") else { return };
    let out = run_args(&["-n", "pid$target:libc:malloc:entry {}", "-c", &exe]);
    assert_eq!(out.status, 1);
    let prefix = format!("{NAME}: invalid probe specifier pid$target:libc:malloc:entry {{}}: probe description pid");
    let suffix = ":libc:malloc:entry does not match any probes: errnos-static is statically linked: it maps no \
                  library, its libc functions are in a.out\n";
    assert!(out.stderr.starts_with(&prefix) && out.stderr.ends_with(suffix), "{}", out.stderr);
    // They are in a.out: there they fire.
    let out = run_args(&["-q", "-n", "pid$target:a.out:close:entry { @ = count(); }", "-c", &format!("{exe} 3")]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().last().map(str::trim), Some("6"), "{}", out.stdout);
}

/// The GNU build-id of an object, in hex, from `readelf -n`.
fn build_id(path: &str) -> String {
    let out = Command::new("readelf").args(["-n", path]).output().expect("readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("{path} has no build-id"))
}

/// Where a debug file is looked for by build-id.
fn by_build_id(path: &str) -> String {
    let id = build_id(path);
    format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..])
}

#[test]
fn a_stripped_program_says_what_can_be_probed() {
    let exe = fixture("fixture-stripped");
    let out = run_args(&["-n", "pid$target:a.out:classify:entry {}", "-c", &format!("{exe} 1")]);
    assert_eq!(out.status, 1);
    let msg = |pid: &str| {
        format!(
            "fixture-stripped is stripped: only its 2 exported functions can be probed by name, or absolute \
             addresses (pid{pid}:a.out:-:ADDR); its debug file was not found (looked for {})\n",
            by_build_id(&exe)
        )
    };
    let pid = out.stderr.split("pid").nth(2).and_then(|s| s.split(':').next()).unwrap_or("").to_string();
    assert_eq!(
        out.stderr,
        format!(
            "{NAME}: invalid probe specifier pid$target:a.out:classify:entry {{}}: failed to lookup 'classify' in \
             module 'a.out': {}",
            msg(&pid)
        )
    );
    // Under a module glob the executable is the object worth a word.
    let out = run_args(&["-n", "pid$target::classify:entry {}", "-c", &format!("{exe} 1")]);
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.contains("::classify:entry does not match any probes: fixture-stripped is stripped"),
        "{}",
        out.stderr
    );
    // Its exported functions fire.
    let out = run_args(&["-q", "-n", "pid$target:a.out:target:entry { @ = count(); }", "-c", &format!("{exe} 10")]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().last().map(str::trim), Some("10"), "{}", out.stdout);
}

/// A stripped program whose `.gnu_debuglink` names a file that is not there: the
/// message names the file and every place it was looked for, as gdb does.
#[test]
fn a_missing_debuglink_file_is_named_with_where_it_was_looked_for() {
    let dir = TempDir::new("debuglink");
    // Without the debug file that build.rs put next to it; with the library it needs.
    copy_fixture("fixture-linked", dir.path());
    copy_fixture("libfixture.so", dir.path());
    let exe = dir.path().join("fixture-linked").display().to_string();
    let out = run_args(&["-n", "pid$target:a.out:classify:entry {}", "-c", &format!("{exe} 1")]);
    assert_eq!(out.status, 1);
    let d = std::fs::canonicalize(dir.path()).expect("temp dir").display().to_string();
    let looked = format!(
        "{}, {d}/fixture-linked.debug, {d}/.debug/fixture-linked.debug, /usr/lib/debug{d}/fixture-linked.debug",
        by_build_id(&exe)
    );
    assert!(
        out.stderr.contains("failed to lookup 'classify' in module 'a.out': fixture-linked is stripped: only its")
            && out.stderr.ends_with(&format!(
                ":a.out:-:ADDR); its debug file fixture-linked.debug was not found (looked for {looked})\n"
            )),
        "{}",
        out.stderr
    );
    // Found there, it is read: classify fires.
    let linked = dir.path().join(".debug/fixture-linked.debug");
    std::fs::create_dir(dir.path().join(".debug")).expect("mkdir");
    std::fs::copy(fixture("fixture-linked.debug"), &linked).expect("copy the debug file");
    let out = run_args(&["-q", "-n", "pid$target:a.out:classify:entry { @ = count(); }", "-c", &format!("{exe} 10")]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().last().map(str::trim), Some("10"), "{}", out.stdout);
    // Another build's file there is named as not being it.
    std::fs::copy(fixture("probes"), &linked).expect("copy");
    let out = run_args(&["-n", "pid$target:a.out:classify:entry {}", "-c", &format!("{exe} 1")]);
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.ends_with(&format!(
            "; {d}/.debug/fixture-linked.debug is not its debug file (unreadable, or another build's)\n"
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn a_program_without_symbols_is_probed_at_addresses() {
    let (Some(plain), Some(exe)) = (built("errnos-static"), built("errnos-static-stripped")) else { return };
    let out = run_args(&["-n", "pid$target:a.out:main:entry {}", "-c", &exe]);
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.ends_with(&format!(
            ":a.out:-:ADDR) can be probed; its debug file was not found (looked for {})\n",
            by_build_id(&exe)
        )) && out.stderr.contains(
            "failed to lookup 'main' in module 'a.out': errnos-static-stripped is stripped and exports no function: \
             only absolute addresses (pid"
        ),
        "{}",
        out.stderr
    );
    // main's address, from the copy that kept its symbols (strip moves no code).
    let nm = Command::new("nm").arg(&plain).output().expect("nm");
    let main = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| l.strip_suffix(" T main").map(|a| a.trim_start_matches('0').to_string()))
        .expect("main in nm's output");
    let out = run_args(&[
        "-q",
        "-n",
        &format!("pid$target:a.out:-:{main} {{ printf(\"at %x\\n\", uregs[R_PC]); }}"),
        "-c",
        &exe,
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out.stdout.contains(&format!("at {main}\n")), "{}", out.stdout);
}
