//! `-x timeline=FILE` end to end (docs/timeline.md): the README's main job, the
//! forking daemon `examples/workerd` under `examples/workers.d`-style probes plus the
//! proc probes of its workers' lives. The file must be a trace-event JSON document
//! that shows the daemon, each worker as its child after its fork and exec, and every
//! `handle_request` call as a slice inside its worker's `worker_main` slice, exactly as
//! many as the workers made; the program must print and end as it does untraced.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

mod util;

use serde_json::Value;
use util::{pid_backends, stderr, stdout, workerd, Backend, TempDir};

pid_backends!(the_timeline_shows_every_request_of_every_worker_in_its_track);

/// workers.d's probes (one clause in the consumer, `workers++` on a global; the others
/// run where the probes fire), the return of `worker_main` for its slice, and the
/// workers' lives. Not quiet: the records go to the `-o` file, apart from the program's
/// output.
const SCRIPT: &str = r#"
pid$target::worker_main:entry { workers++; }
pid$target::worker_main:return { @mains = count(); }
pid$target::handle_request:entry { self->start = timestamp; @requests[arg0] = count(); }
pid$target::handle_request:return /self->start/ { @total = count(); self->start = 0; }
END { printf("%d workers\n", workers); printa("requests answered: %@d\n", @total); }
"#;

/// The workers' lives (proc probes: BPF, root).
const LIVES: &str = "proc:::create, proc:::exec-success, proc:::exit /pid == $target || ppid == $target/ {}\n";

/// udtrace run with these arguments; `None`: skipped (the kernel refuses BPF).
type Run<'a> = &'a dyn Fn(&[&str]) -> Option<std::process::Output>;

/// The program's own lines, in an order that does not depend on which worker ended first.
fn program_lines(text: &str) -> Vec<String> {
    let mut l: Vec<String> = text.lines().map(str::to_string).collect();
    l.sort();
    l
}

fn num(e: &Value, key: &str) -> u64 {
    e[key].as_u64().unwrap_or_else(|| panic!("{key} of {e}"))
}

/// A trace-event timestamp (microseconds, three decimals) in nanoseconds.
fn ns(e: &Value, key: &str) -> u64 {
    let f = e[key].as_f64().unwrap_or_else(|| panic!("{key} of {e}"));
    (f * 1000.0).round() as u64
}

fn the_timeline_shows_every_request_of_every_worker_in_its_track(backend: Backend) {
    checked(&format!("{backend:?}"), &|args| backend.traced(args), true);
}

/// As an ordinary user: trampolines without BPF, so no proc probes; the tree is
/// the followed one all the same.
#[test]
fn the_timeline_of_an_ordinary_user() {
    checked("nobody", &|args| Some(util::traced_unprivileged(args)), false);
}

/// A file that cannot be created: one message before tracing, exit status 1.
#[test]
fn a_timeline_file_that_cannot_be_created_is_refused() {
    let out = util::run_args(&["-x", "timeline=/nonexistent/dir/t.json", "-n", "BEGIN { exit(0); }"]);
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stderr,
        "udtrace: failed to open timeline file '/nonexistent/dir/t.json': No such file or directory\n"
    );
}

/// Traces `workerd` with [`SCRIPT`] (and [`LIVES`] with `lives`) through `run`, and
/// checks the program's output and the timeline.
fn checked(name: &str, run: Run<'_>, lives: bool) {
    let (workers, requests) = (4u64, 300u64);
    let dir = TempDir::new(&format!("timeline-{name}"));
    // An ordinary user's udtrace writes the files.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    let file = dir.path().join("workerd.json");
    let trace = dir.path().join("trace.txt");
    let script = dir.write("workers.d", &format!("{SCRIPT}{}", if lives { LIVES } else { "" }));
    let cmd = format!("{} {workers} {requests}", workerd().display());
    let (file_s, trace_s, script_s) =
        (file.display().to_string(), trace.display().to_string(), script.display().to_string());
    let args = ["-x", &format!("timeline={file_s}"), "-o", &trace_s, "-s", &script_s, "-c", &cmd];
    let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
    let Some(out) = run(&args) else { return };
    assert!(out.status.success(), "udtrace failed: {}", stderr(&out));

    // The program printed and ended as it does untraced.
    let alone = Command::new(workerd()).arg(workers.to_string()).arg(requests.to_string()).output().expect("workerd");
    assert!(alone.status.success());
    assert_eq!(program_lines(&stdout(&out)), program_lines(&String::from_utf8_lossy(&alone.stdout)));
    assert!(stderr(&out).lines().any(|l| l.ends_with(" has exited")), "{}", stderr(&out));
    let said = std::fs::read_to_string(&trace).expect("trace output");
    assert!(said.contains(&format!("{workers} workers\nrequests answered: {}\n", workers * requests)), "{said}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("timeline file")).expect("JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let meta = |name: &str| -> BTreeMap<u64, Value> {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == name)
            .map(|e| (num(e, "pid"), e["args"].clone()))
            .collect()
    };
    let names = meta("process_name");
    let labels = meta("process_labels");
    let order = meta("process_sort_index");

    // The daemon and its workers: one root, and each worker its child, ordered below it.
    let parent = |pid: u64| -> Option<u64> {
        labels.get(&pid).map(|l| l["labels"].as_str().unwrap().strip_prefix("parent ").unwrap().parse().unwrap())
    };
    let roots: Vec<u64> = names.keys().copied().filter(|&p| parent(p).is_none()).collect();
    assert_eq!(roots.len(), 1, "one root, the daemon: {names:?} {labels:?}");
    let daemon = roots[0];
    let kids: BTreeSet<u64> = names.keys().copied().filter(|&p| parent(p) == Some(daemon)).collect();
    assert_eq!(kids.len() as u64, workers, "{names:?} {labels:?}");
    assert_eq!(names.len() as u64, workers + 1, "{names:?}");
    assert_eq!(names[&daemon]["name"], "workerd");
    for &k in &kids {
        assert_eq!(names[&k]["name"], format!("workerd (child of workerd {daemon})"));
        assert!(num(&order[&k], "sort_index") > num(&order[&daemon], "sort_index"));
        let threads: Vec<&Value> =
            events.iter().filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && num(e, "pid") == k).collect();
        assert_eq!(threads.len(), 1, "{threads:?}");
        assert_eq!(num(threads[0], "tid"), k);
    }

    // The lives: the daemon creates each worker, which execs and exits.
    let instants = |name: &str| -> Vec<&Value> {
        events.iter().filter(|e| e["ph"] == "i" && e["name"] == format!("proc:::{name}")).collect()
    };
    let (mut created, mut execs): (BTreeMap<u64, u64>, BTreeMap<u64, u64>) = Default::default();
    if lives {
        created = instants("create")
            .iter()
            .map(|e| {
                assert_eq!(num(e, "pid"), daemon, "{e}");
                (num(&e["args"], "child"), ns(e, "ts"))
            })
            .collect();
        assert_eq!(created.keys().copied().collect::<BTreeSet<_>>(), kids);
        execs = instants("exec-success").iter().map(|e| (num(e, "pid"), ns(e, "ts"))).collect();
        assert_eq!(execs.keys().copied().collect::<BTreeSet<_>>(), kids);
        assert_eq!(instants("exec-success").len() as u64, workers);
        let exits: BTreeSet<u64> = instants("exit").iter().map(|e| num(e, "pid")).collect();
        assert!(kids.is_subset(&exits), "{exits:?}");
    }
    // Nothing else is an instant: every entry met its return.
    let other: Vec<&Value> =
        events.iter().filter(|e| e["ph"] == "i" && !e["name"].as_str().unwrap().starts_with("proc:::")).collect();
    assert!(other.is_empty(), "{other:?}");

    // Every call a slice in its worker's track, inside worker_main, after the exec,
    // on one clock across processes.
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(slices.iter().all(|e| e["args"].get("unfinished").is_none()), "unfinished slices");
    for &k in &kids {
        let mine = |f: &str| -> Vec<&Value> {
            slices.iter().copied().filter(|e| num(e, "pid") == k && e["name"] == f).collect()
        };
        let main = mine("worker_main");
        assert_eq!(main.len(), 1, "worker {k}: {main:?}");
        let (m0, m1) = (ns(main[0], "ts"), ns(main[0], "ts") + ns(main[0], "dur"));
        let calls = mine("handle_request");
        assert_eq!(calls.len() as u64, requests, "worker {k}");
        for c in &calls {
            assert_eq!(num(c, "tid"), k);
            let (c0, c1) = (ns(c, "ts"), ns(c, "ts") + ns(c, "dur"));
            assert!(m0 <= c0 && c1 <= m1, "worker {k}: call {c} outside worker_main {}", main[0]);
        }
        if lives {
            assert!(created[&k] < execs[&k] && execs[&k] < m0, "worker {k}: create, exec, work out of order");
        }
    }
    assert_eq!(slices.len() as u64, workers * (requests + 1));
}
