//! Tier of real programs: C and C++ programs doing what real ones do and toy fixtures
//! do not (tests/fixtures, built by build.rs): C++ templates and exceptions, a signal
//! handler on a small alternate stack, SIGURG blocked around dlopen and an exec, and
//! hundreds of MB of shared anonymous memory.

mod real;
mod util;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use real::{
    assert_unharmed, cmd, expect, frame, functions, real_modes, return_addresses, stacks, traced_unharmed,
    untraced_with_input, Group, Mode, Ran, Traced,
};
use util::fixture;

real_modes!(
    cxx_templates_are_counted_per_instantiation,
    a_handler_on_a_small_alternate_stack_is_unharmed_by_stacks,
    libraries_loaded_with_sigurg_blocked_fire,
    shared_anonymous_memory_costs_udtrace_nothing,
);

fn cxx_templates_are_counted_per_instantiation(mode: Mode) {
    let n = 1000u64;
    let exe = mode.own(fixture("templates"));
    let script = "pid$target:a.out:*tpl??*:entry, pid$target:a.out:*tpl??*:return \
                  { @c[probefunc, probename] = count(); } END { printa(\"%s %s=%@d\\n\", @c); }";
    let Some(run) = traced_unharmed(mode, &[], script, &cmd(&[&exe, &n.to_string()])) else { return };
    // Names as binutils demangles them; templates.cpp's header has the counts. Every
    // 10th risky<int> call throws, so returns fewer times than it is entered; the
    // others call scale<int>.
    let thrown = n / 10;
    let names = functions(Path::new(&exe), true);
    let name = |needle: &str| -> String {
        let found: Vec<&String> = names.iter().map(|(_, n)| n).filter(|n| n.contains(needle)).collect();
        assert_eq!(found.len(), 1, "one function named like {needle}: {found:?}");
        found[0].clone()
    };
    let mut want = Vec::new();
    for (needle, entries, returns) in [
        ("tpl::scale<int>(", 2 * n - thrown, 2 * n - thrown),
        ("tpl::scale<double>(", n, n),
        ("tpl::scale<long>(", 2 * n, 2 * n),
        ("tpl::Box<int>::put(", n, n),
        ("tpl::Box<std::__cxx11::basic_string<char", n, n),
        ("tpl::risky<int>(", n, n - thrown),
    ] {
        let f = name(needle);
        want.push((format!("{f} entry"), entries));
        want.push((format!("{f} return"), returns));
    }
    assert_eq!(run.counts(), expect(&want), "{}", run.said());
}

fn a_handler_on_a_small_alternate_stack_is_unharmed_by_stacks(mode: Mode) {
    // altstack.c prints whether the canaries around its 8 KiB alternate stack held: a
    // probe that writes below the stack pointer of a handler running there changes
    // its output.
    let n = 200u64;
    let exe = mode.own(fixture("altstack"));
    let script = "pid$target::on_alt:entry { @s[ustack()] = count(); @d = min(ustackdepth); } \
                  END { printa(\"least depth=%@d\\n\", @d); printa(@s); }";
    let Some(run) = traced_unharmed(mode, &[], script, &cmd(&[&exe, &n.to_string()])) else { return };
    assert!(run.program.stdout.ends_with("altstack: canaries intact\n"), "{}", run.program.stdout);
    // Every stack starts in on_alt, called by the handler, which returns into the
    // signal trampoline; then comes the instruction the signal interrupted (in libc's
    // raise), from the signal frame on the alternate stack, and nothing more: the
    // interrupted stack was not captured, which udtrace says.
    let caller = return_addresses(Path::new(&exe), "handler", "on_alt");
    assert_eq!(caller.len(), 1, "one call of on_alt in handler: {caller:?}");
    let mut fired = 0;
    for (frames, count) in stacks(&run.trace) {
        let top: Vec<&str> = frames.iter().take(3).map(|f| frame(f)).collect();
        assert_eq!(top, ["on_alt", caller[0].as_str(), "__restore_rt"], "{}", run.said());
        assert_eq!(frames.len(), 4, "{}", run.said());
        assert!(frames[3].starts_with("libc.so.6`"), "{}", run.said());
        fired += count;
    }
    assert_eq!(fired, n, "{}", run.said());
    assert_eq!(run.counts()["least depth"], 4, "{}", run.said());
    let said = format!(
        "{}: {n} user stacks end at the instruction a signal interrupted: their handlers ran on an alternate \
         signal stack, and the interrupted stack is not captured at a firing",
        util::NAME
    );
    assert!(run.notices.contains(&said), "{}", run.said());
}

fn libraries_loaded_with_sigurg_blocked_fire(mode: Mode) {
    // sigurg.c: with SIGURG blocked it dlopens plugin.so and calls plugin_fn N times,
    // then execs `sh -c 'exec sigurg lib M'`, whose loader maps libfollow.so (the mask
    // goes with every exec): target() M times.
    let (n, m) = (60u64, 70u64);
    let script = "pid$target::plugin_fn:entry, pid$target::target:entry { @c[probefunc] = count(); } \
                  END { printa(\"%s=%@d\\n\", @c); }";
    let exe = fixture("sigurg");
    let Some(run) = traced_unharmed(mode, &["-Z"], script, &cmd(&[&exe, &n.to_string(), &m.to_string()])) else {
        return;
    };
    assert_eq!(run.counts(), expect(&[("plugin_fn", n), ("target", m)]), "{}", run.said());
}

/// udtrace's resident size is watched while it runs: past this it is killed (a
/// udtrace that reads shared memory as a file would take the machine's memory).
const RSS_KILL_KIB: u64 = 512 << 10;
/// The peak resident size udtrace may reach tracing a program with shared memory.
const RSS_LIMIT_KIB: u64 = 64 << 10;

/// Watches the resident size of the process `pid` (a process group's leader, not
/// reaped while this runs) and kills its group once past [`RSS_KILL_KIB`].
struct RssWatch {
    stop: Arc<AtomicBool>,
    killed_at: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let (stop, killed_at) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (s, k) = (stop.clone(), killed_at.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let rss = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()));
                if rss.is_some_and(|r| r > RSS_KILL_KIB) {
                    k.store(rss.unwrap_or(0), Ordering::Relaxed);
                    // SAFETY: kill(2) on the group of a process the test started and
                    // has not reaped (the watch is stopped before it is).
                    unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        RssWatch { stop, killed_at, thread }
    }

    /// Stops watching; the resident size (KiB) at which the process was killed, if it was.
    fn stop(self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("RSS watch");
        Some(self.killed_at.load(Ordering::Relaxed)).filter(|&k| k > 0)
    }
}

fn shared_anonymous_memory_costs_udtrace_nothing(mode: Mode) {
    // shmem.c maps MB MiB of shared anonymous memory and MB/4 MiB of /dev/zero, all
    // touched (its maps show both as `/dev/zero (deleted)`), forks a child that reads
    // them, then waits for a line to call shm_work N times. udtrace grabs it (-p):
    // neither mapping is a file it may read.
    let (mb, n) = (256u64, 1000u64);
    let command = cmd(&[&mode.own(fixture("shmem")), &mb.to_string(), &n.to_string()]);
    let mut program = Group::spawn(mode.command(&command[0]).args(&command[1..]).stdin(Stdio::piped()));
    assert_eq!(program.next_line().as_deref(), Some("shmem: ready\n"), "shmem did not start");
    let script = "BEGIN { printf(\"ready\\n\"); } pid$target::shm_work:entry { @c[probefunc] = count(); } \
                  END { printa(\"%s=%@d\\n\", @c); }";
    let pid = program.pid().to_string();
    let mut tracer = Group::spawn(mode.udtrace(&["-q", "-n", script, "-p", &pid]).stdin(Stdio::null()));
    let watch = RssWatch::start(tracer.pid());
    let ready = tracer.next_line();
    // Without the line (udtrace did not start) shmem ends at its stdin's end.
    let mut stdin = program.child().stdin.take().expect("piped stdin");
    if ready.as_deref() == Some("ready\n") {
        stdin.write_all(b"go\n").expect("shmem's stdin");
    }
    drop(stdin);
    let (end, stdout, stderr, _) = program.wait();
    tracer.wait_exit();
    let killed_at = watch.stop();
    let (status, trace, said, maxrss) = tracer.wait();
    if util::bpf_gate_stderr(&said).is_none() {
        return;
    }
    assert_eq!(killed_at, None, "udtrace grew past {RSS_KILL_KIB} KiB of resident memory and was killed:\n{said}");
    assert_eq!(ready.as_deref(), Some("ready\n"), "udtrace did not start: {said}");
    let alone = untraced_with_input(mode, &command, "go\n");
    let run = Traced {
        program: Ran { stdout, stderr, end: Some(end) },
        trace,
        notices: said.lines().map(str::to_string).collect(),
        end: status,
    };
    assert_unharmed(&run, &alone);
    assert_eq!(run.counts(), expect(&[("shm_work", n)]), "{}", run.said());
    assert!(maxrss < RSS_LIMIT_KIB, "udtrace's peak resident size was {maxrss} KiB:\n{}", run.said());
}
