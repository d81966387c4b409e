//! Tier of real programs: the USDT probes Debian's programs ship (docs/usdt.md).
//! python3.11's `function-entry` over a script with known calls, and PostgreSQL's
//! `query-start` on a private cluster's postmaster while clients connect (a backend
//! forked per connection), with a backend that existed before udtrace started; python's
//! `multiprocessing` children, forked and spawned.

// Two modes here (no unprivileged one: USDT probes need BPF), not `real_modes!`.
#[allow(unused_macros, unused_imports)]
mod real;
mod util;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use real::{expect, require, source, traced_unharmed, Mode};

/// `two_modes!(name, f)`: the tests `name::in_process` and `name::uprobes`, running
/// `f(mode)` (no unprivileged mode: USDT probes need BPF).
macro_rules! two_modes {
    ($($name:ident: $f:expr;)*) => {
        $(mod $name {
            #[test]
            fn in_process() {
                ($f)(crate::Mode::InProcess)
            }
            #[test]
            fn uprobes() {
                ($f)(crate::Mode::Uprobes)
            }
        })*
    };
}

two_modes! {
    python_function_entry: crate::python_function_entry;
    python_multiprocessing_fork: |m| crate::python_multiprocessing(m, "fork");
    python_multiprocessing_spawn: |m| crate::python_multiprocessing(m, "spawn");
    postgres_query_start: crate::postgres_query_start;
    python_started_elsewhere: crate::python_started_elsewhere;
}

/// Python processes started while a test here traces `python*`: each test runs its
/// python while holding it, so that `python*` sees only its own.
static PYTHON: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn python_alone() -> std::sync::MutexGuard<'static, ()> {
    PYTHON.lock().unwrap_or_else(|e| e.into_inner())
}

/// `python$target:::line` raises the line probe's semaphore, which CPython 3.11 needs
/// to report Python-to-Python calls (without it, `function-entry` fires only where C
/// enters the interpreter: docs/usdt.md).
fn python_function_entry(mode: Mode) {
    let _alone = python_alone();
    let python = require("/usr/bin/python3.11", "python3.11").display().to_string();
    let file = source("python/usdt_calls.py").display().to_string();
    let script = format!(
        "python$target:::line {{ @lines = count(); }} python$target:::function-entry /copyinstr(arg0) == \"{file}\"/ \
         {{ @c[copyinstr(arg1)] = count(); }} END {{ printa(\"%s=%@d\\n\", @c); }}"
    );
    let cmd = vec![python, "-I".into(), "-B".into(), file];
    let Some(run) = traced_unharmed(mode, &[], &script, &cmd) else { return };
    let want = expect(&[("<lambda>", 10), ("<module>", 1), ("bar", 11), ("foo", 18)]);
    assert_eq!(run.counts(), want, "{}", run.said());
}

/// `multiprocessing` children started by fork (the parent's probes, inherited) and by
/// spawn (a fork and an exec of python3.11, matched again): each process's calls.
fn python_multiprocessing(mode: Mode, start: &str) {
    let _alone = python_alone();
    let python = require("/usr/bin/python3.11", "python3.11").display().to_string();
    let file = source("python/usdt_mp.py").display().to_string();
    let (children, k) = (3usize, 7u64);
    let script = "python$target:::line { @lines = count(); } \
                  python$target:::function-entry /copyinstr(arg1) == \"foo\"/ { @c[pid] = count(); } \
                  END { printa(\"pid %d=%@d\\n\", @c); }";
    let cmd = vec![python, "-I".into(), "-B".into(), file, start.into(), children.to_string(), k.to_string()];
    // A spawned child's start-up alone fires `line` ~90,000 times, each a record
    // (USDT clauses run in udtrace): room for them.
    let Some(run) = traced_unharmed(mode, &["-b", "256m"], script, &cmd) else { return };
    let per_pid: Vec<u64> =
        run.counts().into_iter().filter(|(key, _)| key.starts_with("pid ")).map(|(_, n)| n).collect();
    assert_eq!(per_pid, vec![k; children + 1], "{}", run.said());
}

/// DTraceToolkit's py_*.d shape, `python*:::function-entry { @[basename(copyinstr(arg0)),
/// copyinstr(arg1)] = count(); }`, on a python3.11 started from outside udtrace after
/// it started (`-Z`; its image new to udtrace unless another process mapped it at
/// start): every key is the file's and the function's name, counted exactly. Before,
/// a probe found after start had no string captured at its firing and the consumer
/// read the names late from the process, whose heap had freed and reused them:
/// about one key in 40 was a freed chunk's bytes (a malloc list pointer, or zeros),
/// printed as a hex dump. The program's output is an untraced run's.
fn python_started_elsewhere(mode: Mode) {
    let _alone = python_alone();
    let python = require("/usr/bin/python3.11", "python3.11").display().to_string();
    let dir = util::TempDir::new("usdt-python-late");
    let file = dir.path().join("late_calls.py");
    std::fs::copy(source("python/usdt_calls.py"), &file).expect("copy the script");
    let argv = [python.as_str(), "-I", "-B", &file.display().to_string()];
    let plain = Command::new(argv[0]).args(&argv[1..]).output().expect("untraced run");
    assert!(plain.status.success());
    let script = "python*:::line { @lines = count(); } \
                  python*:::function-entry { @[basename(copyinstr(arg0)), copyinstr(arg1)] = count(); } \
                  BEGIN { printf(\"ready\\n\"); } END { printa(\"%s|%s=%@d\\n\", @); printa(\"lines=%@d\\n\", @lines); }";
    let mut args: Vec<&str> = match mode {
        Mode::Uprobes => vec!["-x", "uprobes"],
        _ => vec![],
    };
    args.extend(["-Z", "-q", "-n", script]);
    let mut u = util::Guard::spawn(&mut util::udtrace_cmd(&args));
    util::kill_after_deadline(u.child().id());
    let mut lines = BufReader::new(u.child().stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok);
    if first.as_deref() != Some("ready") {
        let out = u.take().wait_with_output().expect("udtrace finishes");
        let Some(()) = util::bpf_gate(&out) else { return };
        panic!("udtrace did not start: {first:?} {}", util::stderr(&out));
    }
    let ran = Command::new(argv[0]).args(&argv[1..]).output().expect("python");
    assert_eq!((ran.status.code(), &ran.stdout), (plain.status.code(), &plain.stdout));
    let _ = Command::new("kill").args(["-INT", &u.child().id().to_string()]).status();
    let text = lines.map_while(Result::ok).collect::<Vec<_>>().join("\n");
    let out = u.take().wait_with_output().expect("udtrace finishes");
    let said = format!("{text}\n{}", util::stderr(&out));
    assert!(out.status.success(), "{said}");
    assert_eq!(util::stderr(&out), "", "{said}");
    // Every key two names (`<frozen abc>` has a space): none empty, none bytes of
    // something else.
    let mut mine = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with("lines=")) {
        let (keys, n) = line.rsplit_once('=').unwrap_or_else(|| panic!("{line:?}: {said}"));
        let (file, func) = keys.split_once('|').unwrap_or_else(|| panic!("{line:?}: {said}"));
        let name = |s: &str| !s.is_empty() && s.bytes().all(|c| c == b' ' || c.is_ascii_graphic());
        assert!(name(file) && name(func) && n.parse::<u64>().is_ok(), "{line:?}: {said}");
        if file == "late_calls.py" {
            mine.insert(func.to_string(), n.parse::<u64>().unwrap_or(0));
        }
    }
    let want = expect(&[("<lambda>", 10), ("<module>", 1), ("bar", 11), ("foo", 18)]);
    assert_eq!(mine, want, "{said}");
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A private PostgreSQL cluster on a Unix socket in a temporary directory, run as
/// `postgres`; stopped (fast shutdown) when dropped.
struct Cluster {
    dir: util::TempDir,
    postmaster: util::Guard,
}

impl Cluster {
    fn start(tag: &str) -> Cluster {
        require(&format!("{PG_BIN}/postgres"), "postgresql-15");
        let dir = util::TempDir::new(&format!("usdt-pg-{tag}"));
        let chown = Command::new("chown").args(["postgres"]).arg(dir.path()).status().expect("chown");
        assert!(chown.success());
        let data = dir.path().join("data");
        let init = Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/initdb"), "-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .output()
            .expect("initdb");
        assert!(init.status.success(), "initdb: {}", String::from_utf8_lossy(&init.stderr));
        let postmaster = util::Guard::spawn(
            Command::new("runuser")
                .args(["-u", "postgres", "--", &format!("{PG_BIN}/postgres"), "-D"])
                .arg(&data)
                .arg("-k")
                .arg(dir.path())
                .args(["-c", "listen_addresses=", "-c", "logging_collector=off"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let c = Cluster { dir, postmaster };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.psql(&["-c", "select 1"]).status.success() {
            assert!(Instant::now() < deadline, "the cluster did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// The postmaster's pid (runuser's child).
    fn pid(&self) -> u32 {
        let pidfile = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).expect("postmaster.pid");
        pidfile.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid")
    }

    fn psql_command(&self) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "psql", "-X", "-q", "-t", "-h"]).arg(self.dir.path());
        c
    }

    fn psql(&self, args: &[&str]) -> std::process::Output {
        self.psql_command().args(args).output().expect("psql")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGINT: fast shutdown, every backend ends.
        let _ = Command::new("kill").args(["-INT", &self.pid().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.dir.path().join("data/postmaster.pid").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(self.postmaster.0.take().map(|mut c| c.wait()));
    }
}

fn postgres_query_start(mode: Mode) {
    let (clients, queries) = (4usize, 5usize);
    let cluster = Cluster::start(&format!("{mode:?}"));
    // A backend that exists before udtrace starts: a session waiting on its input.
    let mut old = util::Guard::spawn(cluster.psql_command().stdin(Stdio::piped()).stdout(Stdio::null()));
    let mut old_in = old.child().stdin.take().expect("stdin");
    writeln!(old_in, "select 'before';").unwrap();
    old_in.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = util::TempDir::new(&format!("usdt-pg-trace-{mode:?}"));
    let trace = out.path().join("trace");
    let script = "postgresql$target:::query-start { @q[copyinstr(arg0)] = count(); @p[pid] = count(); } \
                  END { printa(\"%s=%@d\\n\", @q); printa(\"pid %d=%@d\\n\", @p); }";
    let pid = cluster.pid().to_string();
    let mut u = util::Guard::spawn(
        mode.udtrace(&["-q", "-o", trace.to_str().unwrap(), "-p", &pid, "-n", script]).stderr(Stdio::piped()),
    );
    // Armed once udtrace says nothing more is to come before its trace: wait for the
    // probes to be in place by asking a query it must see.
    let stderr = u.child().stderr.take().expect("stderr");
    let said = std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The semaphore is raised in the postmaster when armed: a new backend reads it.
        let probe = cluster.psql(&["-c", "select 'armed?'"]);
        assert!(probe.status.success());
        std::thread::sleep(Duration::from_millis(200));
        if std::fs::metadata(&trace).is_ok() && armed(&cluster) {
            break;
        }
        assert!(Instant::now() < deadline, "udtrace did not arm");
    }
    writeln!(old_in, "select 'old backend';").unwrap();
    old_in.flush().unwrap();
    let workers: Vec<_> = (0..clients)
        .map(|k| {
            let mut c = cluster.psql_command();
            for q in 0..queries {
                c.args(["-c", &format!("select {k} as client, {q} as query")]);
            }
            c.stdout(Stdio::null()).spawn().expect("psql")
        })
        .collect();
    for mut w in workers {
        assert!(w.wait().unwrap().success());
    }
    drop(old_in);
    let _ = old.take().wait();
    // udtrace ends on SIGINT, printing END's aggregations.
    let _ = Command::new("kill").args(["-INT", &u.child().id().to_string()]).status();
    let status = u.take().wait().expect("udtrace");
    let notices = said.join().unwrap().join("\n");
    assert!(status.success(), "udtrace: {status}: {notices}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let counts: std::collections::BTreeMap<String, u64> = text
        .lines()
        .filter_map(|l| l.rsplit_once('=').and_then(|(k, n)| Some((k.to_string(), n.trim().parse().ok()?))))
        .collect();
    for k in 0..clients {
        for q in 0..queries {
            let key = format!("select {k} as client, {q} as query");
            assert_eq!(counts.get(&key), Some(&1), "{key} once in:\n{text}\n{notices}");
        }
    }
    assert_eq!(counts.get("select 'old backend';"), Some(&1), "{text}");
    assert_eq!(counts.get("select 'before';"), None, "{text}");
    // One pid per client, the old backend's, and those of the probing sessions.
    let pids = counts.keys().filter(|k| k.starts_with("pid ")).count();
    assert!(pids > clients, "{text}");
}

/// Whether `postgresql$target:::query-start` is enabled in the postmaster: its
/// semaphore (`TRACE_POSTGRESQL_QUERY_START_ENABLED()`) raised.
fn armed(cluster: &Cluster) -> bool {
    let out = Command::new("readelf").args(["-n", &format!("{PG_BIN}/postgres")]).output().expect("readelf");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let Some(at) = text.find("Name: query__start") else { return false };
    let line = text[at..].lines().nth(1).unwrap_or("");
    let Some(sem) = line.split("Semaphore: ").nth(1) else { return false };
    let sem = u64::from_str_radix(sem.trim().trim_start_matches("0x"), 16).unwrap_or(0);
    let pid = cluster.pid();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    // The lowest mapping of the executable is its load address (a PIE).
    let Some(base) = maps.lines().find(|l| l.ends_with("/postgres")).and_then(|l| l.split('-').next()) else {
        return false;
    };
    let base = u64::from_str_radix(base, 16).unwrap_or(0);
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else { return false };
    let mut b = [0u8; 2];
    std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, base + sem).is_ok() && u16::from_le_bytes(b) > 0
}
