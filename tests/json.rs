//! Issue 28, item 1: `-x oformat=json`. Every line of the output file is one object
//! that validates against docs/udtrace-output.schema.json (checked here by a small
//! validator of the keywords that schema uses: the `jsonschema` crate pulls in some
//! thirty crates, none of them in this workspace's lock, for a check this size);
//! records, aggregations and drops carry the exact counts the fixtures make.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value as J;

mod util;

use util::{fixture, pid_backends, stderr, Backend, TempDir};

fn schema() -> J {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/udtrace-output.schema.json"))
        .expect("the schema file");
    serde_json::from_str(&text).expect("the schema is JSON")
}

/// Whether `v` satisfies `s` (a schema of `root`): the keywords of draft 2020-12 the
/// schema uses; any other keyword fails the check rather than pass unread.
fn check(root: &J, s: &J, v: &J) -> Result<(), String> {
    let s = s.as_object().ok_or("a schema is an object")?;
    for (k, want) in s {
        match k.as_str() {
            "$schema" | "$id" | "$defs" | "title" | "description" => {}
            "$ref" => {
                let name = want.as_str().and_then(|r| r.strip_prefix("#/$defs/")).ok_or("a local $ref")?;
                check(root, &root["$defs"][name], v).map_err(|e| format!("{name}: {e}"))?;
            }
            "const" if v != want => return Err(format!("{v} is not {want}")),
            "const" => {}
            "enum" if !want.as_array().is_some_and(|a| a.contains(v)) => return Err(format!("{v} not in {want}")),
            "enum" => {}
            "type" => {
                let ok = match want.as_str() {
                    Some("object") => v.is_object(),
                    Some("array") => v.is_array(),
                    Some("string") => v.is_string(),
                    Some("integer") => v.is_i64() || v.is_u64(),
                    t => return Err(format!("type {t:?} not checked here")),
                };
                if !ok {
                    return Err(format!("{v} is no {want}"));
                }
            }
            "minimum" => {
                if let (Some(n), Some(min)) = (v.as_f64(), want.as_f64()) {
                    if n < min {
                        return Err(format!("{n} < {min}"));
                    }
                }
            }
            "required" => {
                for r in want.as_array().ok_or("required is a list")? {
                    let r = r.as_str().ok_or("required names")?;
                    if v.as_object().is_some_and(|o| !o.contains_key(r)) {
                        return Err(format!("{r} missing in {v}"));
                    }
                }
            }
            "properties" => {
                let Some(o) = v.as_object() else { continue };
                for (name, sub) in want.as_object().ok_or("properties is an object")? {
                    if let Some(x) = o.get(name) {
                        check(root, sub, x).map_err(|e| format!("{name}: {e}"))?;
                    }
                }
            }
            "additionalProperties" => {
                assert_eq!(want, &J::Bool(false), "only additionalProperties: false is checked here");
                let Some(o) = v.as_object() else { continue };
                let known = s.get("properties").and_then(|p| p.as_object());
                if let Some(extra) = o.keys().find(|k| !known.is_some_and(|p| p.contains_key(*k))) {
                    return Err(format!("{extra} is not a field of {v}"));
                }
            }
            "items" => {
                for x in v.as_array().into_iter().flatten() {
                    check(root, want, x)?;
                }
            }
            "oneOf" => {
                let subs = want.as_array().ok_or("oneOf is a list")?;
                let results: Vec<Result<(), String>> = subs.iter().map(|sub| check(root, sub, v)).collect();
                let n = results.iter().filter(|r| r.is_ok()).count();
                if n != 1 {
                    let why: Vec<String> = results.into_iter().filter_map(|r| r.err()).collect();
                    return Err(format!("{n} of oneOf match {v}: {why:?}"));
                }
            }
            other => return Err(format!("keyword {other} not checked here")),
        }
    }
    Ok(())
}

/// The output file's lines, each parsed and checked against the schema.
fn validated(path: &std::path::Path) -> Vec<J> {
    let root = schema();
    let text = std::fs::read_to_string(path).expect("the output file");
    assert!(text.ends_with('\n') || text.is_empty(), "a line is unfinished:\n{text}");
    text.lines()
        .map(|l| {
            let v: J = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            check(&root, &root, &v).unwrap_or_else(|e| panic!("{e}\nin {l}"));
            v
        })
        .collect()
}

/// Runs udtrace with `-x oformat=json -o FILE` and the arguments; the file's objects
/// (None where the kernel refuses BPF).
fn json_run(backend: Backend, args: &[&str]) -> Option<Vec<J>> {
    let dir = temp();
    let file = dir.path().join("out.json");
    let mut all = vec!["-x", "oformat=json", "-o", file.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = backend.traced(&all)?;
    assert!(out.status.success(), "udtrace {args:?} failed:\n{}", stderr(&out));
    Some(validated(&file))
}

/// A directory of its own for each run (the tests of this file run at once).
fn temp() -> TempDir {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    TempDir::new(&format!("json{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
}

fn of_type<'a>(lines: &'a [J], t: &str) -> Vec<&'a J> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

pid_backends!(quantize_keyed_count_and_printf_records);

/// `fixture 10` calls classify 10 times: it returns 0 once (from offset 0xb), 1 four
/// times (0x20) and -1 five times (0x33), as the README's example shows in text.
fn quantize_keyed_count_and_printf_records(backend: Backend) {
    let prog = r#"pid$target::classify:return { @c[arg0, arg1] = count(); @q = quantize(arg0);
        printf("ret %d at %d\n", (int)arg1, arg0); }"#;
    let Some(lines) = json_run(backend, &["-n", prog, "-c", &format!("{} 10", fixture("fixture"))]) else { return };
    let probes = of_type(&lines, "probe");
    assert_eq!(probes.len(), 10, "{lines:?}");
    let mut messages: BTreeMap<String, u32> = BTreeMap::new();
    for p in &probes {
        assert_eq!(
            (p["provider"].as_str().unwrap().starts_with("pid"), &p["function"], &p["name"]),
            (true, &J::from("classify"), &J::from("return"))
        );
        assert!(p["timestamp"].as_u64().is_some() && p["pid"].as_u64().is_some() && p["cpu"].as_u64().is_some(), "{p}");
        let out = p["output"].as_array().unwrap();
        assert_eq!(out.len(), 1, "{p}");
        let args = out[0]["args"].as_array().unwrap();
        assert_eq!(out[0]["message"], format!("ret {} at {}\n", args[0], args[1]), "{p}");
        *messages.entry(out[0]["message"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let want: BTreeMap<String, u32> =
        [("ret 0 at 11\n", 1), ("ret 1 at 32\n", 4), ("ret -1 at 51\n", 5)].map(|(m, n)| (m.to_string(), n)).into();
    assert_eq!(messages, want);
    let aggs = of_type(&lines, "aggregation");
    let by_name =
        |n: &str| aggs.iter().find(|a| a["aggregation-name"] == n).unwrap_or_else(|| panic!("no @{n}: {aggs:?}"));
    // The keyed count: sorted by value as dtrace prints it.
    let c: Vec<(Vec<J>, u64)> = by_name("c")["aggregation-data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["keys"].as_array().unwrap().clone(), e["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        c,
        vec![
            (vec![J::from(11), J::from(0)], 1),
            (vec![J::from(32), J::from(1)], 4),
            (vec![J::from(51), J::from(4294967295u64)], 5)
        ]
    );
    // The quantize: the rows dtrace prints, as numbers: 11 in [8, 16), 32 and 51 in
    // [32, 64), and one empty row either side of the data.
    let q = &by_name("q")["aggregation-data"][0];
    assert_eq!(q["keys"], J::Array(vec![]));
    let rows: Vec<(i64, u64)> = q["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["value"].as_i64().unwrap(), b["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(rows, vec![(4, 0), (8, 1), (16, 0), (32, 9), (64, 0)]);
}

/// Under a storm that overflows a 4 KB ring, every call is counted in the final
/// aggregation or in a drop object (in-process: uprobes may keep up).
#[test]
fn drops_are_objects_and_add_up_with_the_count() {
    let per_thread: u64 = 500_000;
    let cmd = format!("{} threads {per_thread} 4", fixture("probes"));
    let prog = "pid$target::thr_work:entry { @ = count(); }";
    let Some(lines) = json_run(Backend::InProcess, &["-q", "-x", "nodif", "-x", "bufsize=4k", "-n", prog, "-c", &cmd])
    else {
        return;
    };
    let drops = of_type(&lines, "drop");
    assert!(!drops.is_empty(), "the storm dropped nothing: it tests no drop\n{lines:?}");
    let dropped: u64 = drops
        .iter()
        .map(|d| {
            assert_eq!((&d["kind"], &d["name"]), (&J::from("PRINCIPAL"), &J::from("DROP")), "{d}");
            let n = d["count"].as_u64().unwrap();
            assert_eq!(d["msg"], format!("{n} drop{} on CPU {}", if n == 1 { "" } else { "s" }, d["cpu"]));
            n
        })
        .sum();
    let aggs = of_type(&lines, "aggregation");
    assert_eq!(aggs.len(), 1, "{aggs:?}");
    let counted = aggs[0]["aggregation-data"][0]["count"].as_u64().unwrap();
    assert_eq!(counted + dropped, 4 * per_thread, "{counted} counted + {dropped} dropped");
}

/// `target/<profile>/examples/NAME`, next to this test's `deps/` directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile.join("examples").join(name);
    assert!(path.exists(), "{} not built: `cargo test --workspace` builds examples", path.display());
    path
}

/// The README's main job in JSON: END's three printf records and three printa
/// aggregations, with every request counted.
#[test]
fn readme_main_job_in_json() {
    let cmd = format!("{} 4 1000", example("workerd").display());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/workers.d");
    let Some(lines) = json_run(Backend::InProcess, &["-s", script, "-c", &cmd]) else { return };
    let end: Vec<&J> = of_type(&lines, "probe").into_iter().filter(|p| p["name"] == "END").collect();
    assert_eq!(end.len(), 1, "{lines:?}");
    let out = end[0]["output"].as_array().unwrap();
    assert_eq!(out[0]["message"], "4 workers\n");
    let data = |i: usize| out[i]["aggregation-data"].as_array().unwrap().clone();
    let requests: Vec<(J, u64)> =
        data(2).iter().map(|e| (e["keys"][0].clone(), e["count"].as_u64().unwrap())).collect();
    assert_eq!(requests, (0..4).map(|w| (J::from(w), 1000)).collect::<Vec<_>>());
    assert_eq!(data(3)[0]["count"], 4000);
    let latency: u64 = data(5)[0]["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(latency, 4000);
}

/// Every other README example that runs here (not PostgreSQL's or a `-p` on a running
/// daemon: their objects are of the kinds these write) writes objects, and every one
/// validates.
#[test]
fn readme_examples_validate() {
    let f = |n: &str| fixture(n);
    let examples: Vec<Vec<String>> = vec![
        vec![
            "-n".into(),
            "pid$target::classify:return { @[arg0, arg1] = count(); }".into(),
            "-c".into(),
            format!("{} 10", f("fixture")),
        ],
        vec![
            "-q".into(),
            "-n".into(),
            "pid$target::chain_c:entry { @[ustack()] = count(); }".into(),
            "-c".into(),
            format!("{} chain 3", f("probes")),
        ],
        vec![
            "-Z".into(),
            "-n".into(),
            "pid$target::target:entry, pid$target::helper:entry { @[execname, probefunc] = count(); }".into(),
            "-c".into(),
            format!("{} 20 5 7 fork", f("forker")),
        ],
        vec!["-s".into(), concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ticks.d").into()],
        vec!["-n".into(), r#"BEGIN { printf("hello from %s, pid %d\n", execname, pid); exit(0); }"#.into()],
        vec![
            "-qn".into(),
            r#"BEGIN { @sizes = lquantize(3, 0, 10, 2); @sizes = lquantize(7, 0, 10, 2);
               @sizes = lquantize(7, 0, 10, 2); @n["libc", "malloc"] = count();
               @n["libc", "free"] = count(); @n["libc", "malloc"] = count(); exit(0); }"#
                .into(),
        ],
        vec![
            "-n".into(),
            r#"proc:::exec-success /progenyof($target)/ { printf("%s\n", curpsinfo->pr_psargs); }"#.into(),
            "-c".into(),
            f("procexec"),
        ],
        vec![
            "-qn".into(),
            r#"proc:::signal-send /progenyof($target)/ { @[execname, stringof(args[1]->pr_fname), args[2]] = count(); }
               proc:::signal-discard /pid == $target/ { @d[args[2]] = count(); }"#
                .into(),
            "-c".into(),
            f("signals"),
        ],
        vec![
            "-qn".into(),
            r#"proc:::start /progenyof($target)/ { self->start = timestamp; }
               proc:::exit /self->start/ { @[execname] = quantize(timestamp - self->start); self->start = 0; }"#
                .into(),
            "-c".into(),
            format!("{} 5 3", f("lifetimes")),
        ],
        // The profile examples: ufunc keys and folded stacks.
        vec![
            "-n".into(),
            "profile-997 /pid == $target/ { @[ufunc(arg1)] = count(); }".into(),
            "-c".into(),
            format!("{} 200", f("busy")),
        ],
        vec![
            "-q".into(),
            "-x".into(),
            "stackfmt=folded".into(),
            "-n".into(),
            "profile-997 /pid == $target/ { @[ustack()] = count(); }".into(),
            "-c".into(),
            format!("{} 200 2", f("busy")),
        ],
        // The python3 example, on the real programs' ctypes script.
        vec![
            "-q".into(),
            "-n".into(),
            r#"pid$target:libc:abs:entry /arg0 == 4242/ { @ = count(); } pid$target:libc:abs:entry { @all = count(); }
               END { printa("4242s %@d\n", @); printa("all %@d\n", @all); }"#
                .into(),
            "-c".into(),
            format!(
                "/usr/bin/python3 -I -B {}/tests/real/python/abs_calls.py ctypes 20000",
                env!("CARGO_MANIFEST_DIR")
            ),
        ],
    ];
    for args in &examples {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(lines) = json_run(Backend::InProcess, &args) else { continue };
        assert!(!lines.is_empty(), "{args:?} wrote nothing");
    }
}

/// The lquantize of the README's BEGIN example: its underflow and overflow rows carry
/// their text labels; `exit()` is an item of the record that ran it.
#[test]
fn lquantize_rows_and_exit_item() {
    let prog = r#"BEGIN { @s = lquantize(-3, 0, 10, 2); @s = lquantize(7, 0, 10, 2); @s = lquantize(70, 0, 10, 2); exit(3); }"#;
    let dir = temp();
    let file = dir.path().join("out.json");
    let out = util::run_args(&["-x", "oformat=json", "-o", file.to_str().unwrap(), "-n", prog]);
    assert_eq!(out.status, 3, "{}", out.stderr);
    let lines = validated(&file);
    assert_eq!(lines[0]["output"], serde_json::json!([{ "exit": 3 }]));
    let rows = &lines[1]["aggregation-data"][0]["buckets"];
    assert_eq!(
        rows,
        &serde_json::json!([
            { "value": 0, "label": "< 0", "count": 1 },
            { "value": 0, "count": 0 }, { "value": 2, "count": 0 }, { "value": 4, "count": 0 },
            { "value": 6, "count": 1 }, { "value": 8, "count": 0 },
            { "value": 10, "label": ">= 10", "count": 1 }
        ])
    );
}

/// The validator refuses what the schema does not allow (a check that passes
/// everything would prove nothing).
#[test]
fn the_validator_refuses_what_the_schema_does_not() {
    let root = schema();
    let ok = serde_json::json!({"type": "error", "msg": "x"});
    assert_eq!(check(&root, &root, &ok), Ok(()));
    for bad in [
        serde_json::json!({"type": "error", "msg": "x", "extra": 1}),
        serde_json::json!({"type": "error"}),
        serde_json::json!({"type": "probe", "cpu": 0, "id": 1, "provider": "p", "module": "", "function": "",
                           "name": "n", "output": [{"value": 1, "message": "m"}]}),
        serde_json::json!({"type": "aggregation", "aggregation-name": "a",
                           "aggregation-data": [{"keys": [], "count": 1, "sum": 2}]}),
        serde_json::json!({"type": "drop", "cpu": -1, "id": -1, "provider": "dtrace", "module": "INTERNAL",
                           "function": "INTERNAL", "name": "DROP", "count": 1, "kind": "OTHER", "msg": ""}),
    ] {
        assert!(check(&root, &root, &bad).is_err(), "{bad} passed");
    }
}

/// A clause's fault is an `error` object after the firing's records, and a failed
/// speculation (a drop the consumer counts) a `drop` object, each also on stderr.
#[test]
fn errors_and_consumer_drops_are_objects() {
    let prog = "BEGIN { trace(*(int *)0); } BEGIN { a = speculation(); b = speculation(); } BEGIN { exit(0); }";
    let dir = temp();
    let file = dir.path().join("out.json");
    let out = util::run_args(&["-x", "oformat=json", "-o", file.to_str().unwrap(), "-n", prog]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let lines = validated(&file);
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["probe", "error", "drop"], "{lines:?}");
    assert_eq!(lines[0]["output"], serde_json::json!([{ "exit": 0 }]));
    let msg = lines[1]["msg"].as_str().unwrap();
    assert!(msg.starts_with("error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): invalid address (0x0)"), "{msg}");
    assert!(out.stderr.contains(msg), "{}", out.stderr);
    assert_eq!((&lines[2]["kind"], &lines[2]["count"]), (&J::from("SPECUNAVAIL"), &J::from(1)));
    assert!(out.stderr.contains("1 failed speculation (no speculative buffer available)"), "{}", out.stderr);
}

/// `-x oformat=text` is the default output, byte for byte.
#[test]
fn oformat_text_is_the_default() {
    let prog = r#"BEGIN { printf("%s %d\n", "x", 1); @[1] = quantize(5); trace(2); exit(0); }"#;
    let plain = util::run_args(&["-qn", prog]);
    let text = util::run_args(&["-x", "oformat=text", "-qn", prog]);
    assert_eq!((plain.status, &plain.stdout), (0, &text.stdout));
    assert!(plain.stdout.contains("x 1\n2\n"), "{}", plain.stdout);
}
