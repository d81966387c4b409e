//! Issue 11, pid and proc providers, stacks and built-in variables: behaviours DTrace
//! defines, checked end to end against the built binary.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod util;

use util::{fixture, pid_backends, run_args, stderr, stdout, wait_mapped, Backend, Guard};

pid_backends!(
    provider_globs_that_match_pid_n_name_the_targets_pid_provider,
    a_provider_glob_naming_the_target_follows_what_it_loads,
    functions_that_never_return_have_return_probes_and_refused_instructions_none,
    errno_is_the_one_the_call_left_in_the_calling_thread,
    errno_in_a_static_program,
    errno_in_a_grabbed_process,
    grabbing_processes_with_a_utf8_locale,
    symbol_actions_print_the_symbol_in_a_50_column_field,
    ucaller_at_return_and_offset_probes,
    printa_formats_symbol_keys_with_percent_a,
    folded_stacks_of_counted_calls,
);

/// Compiles a program with `-x errtags -e`: asserts that it fails with `[tag] ` and a
/// first error line that ends with `msg`.
fn assert_compile_error(program: &str, tag: &str, msg: &str) {
    let out = run_args(&["-x", "errtags", "-e", "-n", program]);
    assert_eq!(out.status, 1, "{program}: {}", out.stderr);
    let line = out.first_err_line();
    assert!(line.contains(&format!("[{tag}] ")) && line.ends_with(msg), "{program}: {line}");
}

#[test]
fn stack_arguments_are_checked_as_dtrace_checks_them() {
    let cases = [
        ("BEGIN { stack(\"x\"); }", "[D_PROTO_ARG] stack( ) argument #1 is incompatible with prototype:"),
        ("BEGIN { ustack(1, \"x\"); }", "[D_PROTO_ARG] ustack( ) argument #2 is incompatible with prototype:"),
        ("BEGIN { stack(1, 2); }", "[D_PROTO_LEN] stack( ) prototype mismatch: 2 args passed, at most 1 expected"),
        (
            "BEGIN { ustack(1, 10, 3); }",
            "[D_PROTO_LEN] ustack( ) prototype mismatch: 3 args passed, at most 2 expected",
        ),
        ("BEGIN { stack(0); }", "[D_STACK_SIZE] stack( ) argument #1 must be a non-zero positive integer constant"),
        ("BEGIN { stack(-1); }", "[D_STACK_SIZE] stack( ) argument #1 must be a non-zero positive integer constant"),
        (
            "BEGIN { ustack(0, 200); }",
            "[D_USTACK_FRAMES] ustack( ) argument #1 must be a non-zero positive integer constant",
        ),
        (
            "BEGIN { ustack(arg0); }",
            "[D_USTACK_FRAMES] ustack( ) argument #1 must be a non-zero positive integer constant",
        ),
        ("BEGIN { ustack(1, -1); }", "[D_USTACK_STRSIZE] ustack( ) argument #2 must be a positive integer constant"),
        (
            "BEGIN { @[ustack(0)] = count(); }",
            "[D_USTACK_FRAMES] ustack( ) argument #1 must be a non-zero positive integer constant",
        ),
    ];
    for (program, want) in cases {
        let (tag, msg) = want.split_once("] ").unwrap();
        assert_compile_error(program, tag.trim_start_matches('['), msg);
    }
    // The prototype's parameter type is named in the message, as DTrace names it.
    let out = run_args(&["-e", "-n", "BEGIN { stack(\"x\"); }"]);
    assert!(out.stderr.contains("\tprototype: uint32_t\n\t argument: string"), "{}", out.stderr);
    // Valid forms compile.
    let out =
        run_args(&["-e", "-n", "BEGIN { stack(5); ustack(3, 100); ustack(); jstack(2); @[ustack(4)] = count(); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

#[test]
fn members_the_translators_leave_undefined_are_errors() {
    for (program, member) in [
        ("BEGIN { trace(curpsinfo->pr_size); }", "pr_size"),
        ("BEGIN { trace(curpsinfo->pr_rssize); }", "pr_rssize"),
        ("BEGIN { trace(curlwpsinfo->pr_cpu); }", "pr_cpu"),
        ("BEGIN { trace(curlwpsinfo->pr_oldpri); }", "pr_oldpri"),
        ("proc:::create { trace(args[0]->pr_size); }", "pr_size"),
    ] {
        let msg = format!("translator does not define conversion for member: {member}");
        assert_compile_error(program, "D_XLATE_NOCONV", &msg);
    }
    // Members the translators define still compile.
    let out = run_args(&["-e", "-n", "BEGIN { trace(curpsinfo->pr_pid); trace(curlwpsinfo->pr_pri); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

#[test]
fn clocks_do_not_move_within_a_firing() {
    // walltimestamp is the exception: DTrace reads the clock at each use of it.
    let out = run_args(&[
        "-q",
        "-n",
        "BEGIN { this->t = timestamp; this->v = vtimestamp; this->w = walltimestamp;
                 printf(\"%d %d %d\\n\", timestamp - this->t, vtimestamp - this->v, walltimestamp >= this->w);
                 exit(0); }",
    ]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().next(), Some("0 0 1"));
    // ...but they move from one firing to the next.
    let out =
        run_args(&["-q", "-n", "BEGIN { t = timestamp; } tick-10ms { printf(\"%d\\n\", timestamp > t); exit(0); }"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().next(), Some("1"));
}

#[test]
fn a_provider_that_is_not_a_pid_provider_matches_nothing() {
    // Not ending in digits: no pid provider, so the description matches no probe.
    assert_compile_error(
        "pidgin:::entry {}",
        "D_PDESC_ZERO",
        "probe description pidgin:::entry does not match any probes",
    );
    assert_compile_error("pid0:::entry {}", "D_PROC_BADPID", "pid0 does not contain a valid pid");
}

/// The pid probes' lines of `-l` output: (provider, module, function, name).
fn listed(text: &str) -> Vec<(String, String, String, String)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5).then(|| (f[1].to_string(), f[2].to_string(), f[3].to_string(), f[4].to_string()))
        })
        .collect()
}

fn provider_globs_that_match_pid_n_name_the_targets_pid_provider(backend: Backend) {
    let fx = format!("{} 1", fixture("fixture"));
    let Some(out) = backend.traced(&["-l", "-n", "p*d$target::target:entry", "-c", &fx]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = listed(&stdout(&out));
    assert_eq!(rows.len(), 1, "{}", stdout(&out));
    assert!(rows[0].0.starts_with("pid") && rows[0].2 == "target" && rows[0].3 == "entry", "{rows:?}");
    // And they fire: the fixture calls target() once per round.
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "p?d$target::target:entry { @ = count(); } END { printa(\"%@d\\n\", @); }",
        "-c",
        &fx,
    ]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().rfind(|l| !l.is_empty()), Some("1"), "{text}");
}

fn a_provider_glob_naming_the_target_follows_what_it_loads(backend: Backend) {
    // plugin_fn is in plugin.so, which the fixture dlopens after tracing started.
    let n = 7;
    let cmd = format!("{} {n}", fixture("dlopener"));
    let prog = "p*d$target::plugin_fn:entry { @ = count(); } END { printa(\"plugin %@d\\n\", @); }";
    let Some(out) = backend.traced(&["-q", "-Z", "-n", prog, "-c", &cmd]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.lines().any(|l| l == format!("plugin {n}")), "{text}");
}

/// The object file of `pid`'s executable, and the offsets (in `_start`) of its
/// instructions, from objdump.
fn start_insns(exe: &Path) -> Option<Vec<(u64, String)>> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(exe).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().skip_while(|l| !l.ends_with("<_start>:"));
    let start = u64::from_str_radix(lines.next()?.split_whitespace().next()?, 16).ok()?;
    let mut insns = Vec::new();
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let Some((a, rest)) = l.trim().split_once(':') else { continue };
        let Ok(a) = u64::from_str_radix(a, 16) else { continue };
        insns.push((a - start, rest.split_whitespace().next().unwrap_or("").to_string()));
    }
    Some(insns)
}

fn functions_that_never_return_have_return_probes_and_refused_instructions_none(backend: Backend) {
    let exe = fixture("fixture");
    let fx = format!("{exe} 1");
    // _start never returns: it has a return probe, which never fires.
    let Some(out) = backend.traced(&["-l", "-n", "pid$target:a.out:_start:return", "-c", &fx]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = listed(&stdout(&out));
    assert_eq!(rows.len(), 1, "{}", stdout(&out));
    assert_eq!((rows[0].2.as_str(), rows[0].3.as_str()), ("_start", "return"));
    // Its instructions have offset probes, but not `hlt`, which the kernel cannot probe.
    let Some(insns) = start_insns(Path::new(&exe)) else { return };
    let Some(out) = backend.traced(&["-l", "-n", "pid$target:a.out:_start:", "-c", &fx]) else { return };
    let offsets: Vec<String> =
        listed(&stdout(&out)).into_iter().filter(|r| r.3 != "entry" && r.3 != "return").map(|r| r.3).collect();
    for (off, mnemonic) in insns.iter().filter(|(o, _)| *o > 0) {
        let label = format!("{off:x}");
        if mnemonic == "hlt" {
            assert!(!offsets.contains(&label), "hlt at {label} listed: {offsets:?}");
        } else if mnemonic != "(bad)" && !mnemonic.starts_with("cs") && !mnemonic.starts_with("nop") {
            assert!(offsets.contains(&label), "{mnemonic} at {label} not listed: {offsets:?}");
        }
    }
    // Enabling them all warns of nothing.
    let Some(out) = backend.traced(&["-q", "-n", "pid$target:a.out:_start: {}", "-c", &fx]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("cannot place a uprobe"), "{}", stderr(&out));
}

/// The fixture's own lines (`main open 2`) and the traced ones (`traced main open 2`).
fn errno_lines(text: &str) -> (Vec<String>, Vec<String>) {
    let (traced, own): (Vec<&str>, Vec<&str>) =
        text.lines().filter(|l| !l.is_empty()).partition(|l| l.starts_with("traced "));
    let own = own.into_iter().map(String::from).collect();
    let traced = traced.into_iter().map(|l| l.trim_start_matches("traced ").to_string()).collect();
    (own, traced)
}

const ERRNO_SCRIPT: &str = "pid$target::open:return, pid$target::close:return, pid$target::chdir:return
    { printf(\"traced %s %s %d\\n\", tid == pid ? \"main\" : \"thread\", probefunc, errno); }";

fn check_errnos(backend: Backend, exe: &str) {
    let Some(out) = backend.traced(&["-q", "-n", ERRNO_SCRIPT, "-c", &format!("{exe} 3")]) else { return };
    assert!(out.status.success(), "{}", stderr(&out));
    let (own, traced) = errno_lines(&stdout(&out));
    assert_eq!(own.len(), 30, "{}", stdout(&out));
    let mut own_sorted = own.clone();
    let mut traced_sorted = traced.clone();
    own_sorted.sort();
    traced_sorted.sort();
    assert_eq!(traced_sorted, own_sorted, "the errno each call left, as the program saw it");
    assert!(own.contains(&"main open 2".to_string()) && own.contains(&"thread close 9".to_string()), "{own:?}");
}

fn errno_is_the_one_the_call_left_in_the_calling_thread(backend: Backend) {
    check_errnos(backend, &fixture("errnos"));
}

fn errno_in_a_static_program(backend: Backend) {
    let exe = fixture("errnos-static");
    if !Path::new(&exe).exists() {
        println!("skipped: no static libc to build errnos-static");
        return;
    }
    check_errnos(backend, &exe);
}

fn errno_in_a_grabbed_process(backend: Backend) {
    // A process grabbed with -p: its libc is relocated already.
    let mut g = Guard::spawn(
        Command::new("sh").args(["-c", "while :; do cd /nonexistent-udtrace 2>/dev/null; sleep 0.05; done"]),
    );
    let pid = g.child().id().to_string();
    wait_mapped(&pid, "libc");
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::chdir:return /(int)arg1 == -1/ { printf(\"%d\\n\", errno); exit(0); }",
        "-p",
        &pid,
    ]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "2", "ENOENT");
}

/// Runs udtrace on `backend` grabbing `pid` with `desc` armed, and a timer that ends it.
fn grab_and_stop(backend: Backend, pid: &str, desc: &str) -> Option<std::process::Output> {
    let out = backend.traced(&["-q", "-n", &format!("{desc} {{}}"), "-n", "tick-200ms { exit(0); }", "-p", pid])?;
    Some(out)
}

/// Processes with a UTF-8 locale map locale files (not ELF objects): grabbing them
/// works, with and without a module in the description.
fn grabs_cleanly(backend: Backend, mut c: Command, wait_for: &str) {
    c.env("LANG", "C.UTF-8").env("LC_ALL", "C.UTF-8");
    c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut g = Guard::spawn(&mut c);
    let pid = g.child().id().to_string();
    wait_mapped(&pid, wait_for);
    std::thread::sleep(Duration::from_millis(200));
    for desc in ["pid$target::nanosleep:entry", "pid$target:libc.so.6:nanosleep:entry", "pid$target:libc::entry"] {
        let Some(out) = grab_and_stop(backend, &pid, desc) else { return };
        assert!(out.status.success(), "{c:?} {desc}: {}", stderr(&out));
    }
}

fn grabbing_processes_with_a_utf8_locale(backend: Backend) {
    let mut bash = Command::new("bash");
    bash.args(["-c", "while :; do sleep 0.1; done"]);
    grabs_cleanly(backend, bash, "libc");
    let mut sleep = Command::new("sleep");
    sleep.arg("30");
    grabs_cleanly(backend, sleep, "libc");
    let Ok(python) = which("python3") else {
        println!("skipped python3: not installed");
        return;
    };
    let mut py = Command::new(python);
    py.args(["-c", "import time\nwhile True: time.sleep(0.1)"]);
    grabs_cleanly(backend, py, "libc");
}

fn which(name: &str) -> Result<String, ()> {
    let out = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().map_err(|_| ())?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if p.is_empty() {
        return Err(());
    }
    // A pyenv-style shim is a script that execs the interpreter: ask it where that is.
    let real = Command::new(&p).args(["-c", "import sys; print(sys.executable)"]).output().map_err(|_| ())?;
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    Ok(if real.is_empty() { p } else { real })
}

fn symbol_actions_print_the_symbol_in_a_50_column_field(backend: Backend) {
    // chain_c is called from chain_b: ucaller is in chain_b.
    let prog = "pid$target::chain_c:entry { ufunc(ucaller); usym(ucaller); umod(ucaller); uaddr(ucaller);
                printf(\"|\\n\"); uaddr(0); printf(\"|\\n\"); exit(0); }";
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", &format!("{} chain 1", fixture("probes"))]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("  probes`")).unwrap_or_else(|| panic!("{text}"));
    let field = |s: &str| format!("  {s:<50}");
    let rest = line.strip_prefix(&format!("{}{}{}", field("probes`chain_b"), field("probes`chain_b"), field("probes")));
    let rest = rest.unwrap_or_else(|| panic!("{line:?}"));
    assert!(rest.starts_with("  probes`chain_b+0x") && rest.len() == 52 + 1 && rest.ends_with('|'), "{rest:?}");
    // An address in no object prints in hex.
    assert!(text.contains(&format!("{}|", field("0x0"))), "{text}");
}

#[test]
fn curpsinfo_in_begin_and_ticks_is_udtrace_itself() {
    for probe in ["BEGIN", "tick-10ms"] {
        let prog = format!(
            "{probe} {{ printf(\"%d %d %d %d %s %s %d\\n\", curpsinfo->pr_pid == pid, curpsinfo->pr_ppid == ppid,
                 curlwpsinfo->pr_lwpid == tid, curpsinfo->pr_argc, stringof(curpsinfo->pr_fname),
                 stringof(curlwpsinfo->pr_name), curpsinfo->pr_dmodel == PR_MODEL_LP64);
               printf(\"%s\\n\", copyinstr(*(uint64_t *)copyin(curpsinfo->pr_argv, 8)));
               exit(0); }}"
        );
        let out = run_args(&["-q", "-n", &prog]);
        assert_eq!(out.status, 0, "{probe}: {}", out.stderr);
        let mut lines = out.stdout.lines();
        // argc: udtrace -q -n PROGRAM.
        assert_eq!(lines.next(), Some("1 1 1 4 udtrace udtrace 1"), "{probe}: {}", out.stdout);
        assert_eq!(lines.next(), Some(util::bin().to_str().unwrap()), "argv[0], read from udtrace's own stack");
    }
}

fn ucaller_at_return_and_offset_probes(backend: Backend) {
    // chain_c is called from chain_b, chain_b from chain_a (no frame pointers: found by
    // unwinding from .eh_frame at offsets inside the function).
    let prog = "pid$target::chain_c:return { @r[ufunc(ucaller)] = count(); }
                pid$target::chain_b: /probename != \"entry\" && probename != \"return\"/
                { @o[ufunc(ucaller)] = count(); }
                END { printa(@r); printf(\"--\\n\"); printa(@o); }";
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", &format!("{} chain 2", fixture("probes"))]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (ret, off) = text.split_once("--\n").unwrap_or_else(|| panic!("{text}"));
    let callers = |t: &str| -> Vec<String> {
        t.lines().filter_map(|l| l.split_whitespace().next()).filter(|w| w.contains('`')).map(String::from).collect()
    };
    assert_eq!(callers(ret), ["probes`chain_b"], "{text}");
    assert_eq!(callers(off), ["probes`chain_a"], "{text}");
}

/// The offset in `caller` of the instruction after its call of `callee` (the return
/// address `ucaller` holds in `callee`), from objdump.
fn return_offset(exe: &str, caller: &str, callee: &str) -> Option<u64> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(exe).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let addr = |l: &str| u64::from_str_radix(l.trim().split([':', ' ']).next()?, 16).ok();
    let mut lines = text.lines().skip_while(|l| !l.ends_with(&format!("<{caller}>:")));
    let start = addr(lines.next()?)?;
    let mut lines = lines.take_while(|l| !l.trim().is_empty());
    lines.find(|l| l.contains("call") && l.contains(&format!("<{callee}>")))?;
    Some(addr(lines.next()?)? - start)
}

fn printa_formats_symbol_keys_with_percent_a(backend: Backend) {
    // Keys made by ufunc()/usym()/uaddr()/umod() print with %A as those functions
    // print them, as DTrace prints them (dt_aggregate.c reduces a usym()/ufunc() key
    // to its symbol's address, dtrace_uaddr2str prints `module`function[+0xoff]`):
    // chain_c is called from chain_b, so ucaller is chain_b+OFF. umod() keeps the
    // module's name (docs/conformance.md); width and flags apply to the text.
    let exe = fixture("probes");
    let off = return_offset(&exe, "chain_b", "chain_c").expect("chain_b's call of chain_c in objdump");
    let prog = "pid$target::chain_c:entry { @f[ufunc(ucaller)] = count(); @s[usym(ucaller)] = count();
                @a[uaddr(ucaller)] = count(); @m[umod(ucaller)] = count(); @p[ucaller] = count(); }
                pid$target::chain_c:entry /!done/ { done = 1;
                printf(\"%A|%A|%A|%A|%A|%-16A|\\n\", ufunc(ucaller), usym(ucaller), uaddr(ucaller), umod(ucaller),
                       ucaller, ufunc(ucaller)); }
                END { printa(\"f %A %@d\\n\", @f); printa(\"s %-20A|%@d\\n\", @s); printa(\"a %A %@d\\n\", @a);
                      printa(\"m %A %@d\\n\", @m); printa(\"p %A %@d\\n\", @p); printa(@f); }";
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", &format!("{exe} chain 3")]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    // The fixture's own line, written to the same output, may come first or later.
    let text = stdout(&out).replacen("chain 3 sink=27\n", "", 1);
    let at = format!("probes`chain_b+0x{off:x}");
    let want = format!(
        "probes`chain_b|probes`chain_b|{at}|probes|{at}|probes`chain_b  |\n\
         f probes`chain_b 3\n\
         s probes`chain_b      |3\n\
         a {at} 3\n\
         m probes 3\n\
         p {at} 3\n\
         \n  {:<50} {:>16}\n\n",
        "probes`chain_b", 3
    );
    assert_eq!(text, want);
}

fn folded_stacks_of_counted_calls(backend: Backend) {
    // docs/flamegraphs.md, "Counted calls": one line an entry, other keys first, the
    // frames root first without offsets, then the value; what flame graph tools read.
    let prog = "pid$target::chain_c:entry { @[ustack()] = count(); @e[execname, ustack()] = sum(2); }";
    let Some(out) =
        backend.traced(&["-q", "-x", "stackfmt=folded", "-n", prog, "-c", &format!("{} chain 3", fixture("probes"))])
    else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out).replacen("chain 3 sink=27\n", "", 1);
    let stack = "probes`_start;libc.so.6`__libc_start_main;libc.so.6`__libc_start_call_main;probes`main;\
                 probes`chain_a;probes`chain_b;probes`chain_c";
    assert_eq!(text, format!("\n{stack} 3\nprobes;{stack} 6\n"));
}
