//! Issue 25: compressed sections are read decompressed. Go writes no `.eh_frame`, only a
//! `.debug_frame` its linker compresses; C built without asynchronous unwind tables
//! describes its functions in `.debug_frame` alone, which `gcc -gz`, `objcopy` and
//! debug files compress with zlib or zstd (or, in GNU's older way, as `.zdebug_frame`).
//! Handed over compressed, the unwinder fell back to frame pointers and `ustack()`
//! skipped the caller (docs/pid-provider.md, "Context values in pid probes").

use std::path::Path;
use std::process::Command;

mod util;

use util::{fixture, pid_backends, stdout, Backend, TempDir};

pid_backends!(go_stacks_unwind_from_a_compressed_debug_frame, c_stacks_unwind_from_a_compressed_debug_frame);

/// Whether a fixture that needs more than gcc was built; outside CI a missing tool only
/// skips (CI installs them: .ci/run).
fn available(what: &str, present: bool) -> bool {
    if !present {
        assert_ne!(std::env::var("UDTRACE_REQUIRE_BPF").as_deref(), Ok("1"), "{what} is missing");
        println!("skipped: {what} is missing");
    }
    present
}

/// How `readelf -t` says section `name` of `path` is compressed: `ZLIB`, `ZSTD`, or
/// "" (not compressed the ELF way); `None` when there is no such section.
fn compression(path: &str, name: &str) -> Option<String> {
    let out = Command::new("readelf").args(["-t", "-W", path]).output().expect("readelf");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().skip_while(|l| !l.trim_end().ends_with(&format!("] {name}")));
    lines.next()?;
    let flags = lines.nth(1).unwrap_or("");
    if !flags.contains("COMPRESSED") {
        return Some(String::new());
    }
    Some(lines.next().unwrap_or("").trim().split(',').next().unwrap_or("").to_string())
}

/// The frames of the one stack a `@[ustack()] = count()` program printed, and its count.
fn stack(text: &str) -> (Vec<String>, u64) {
    let mut frames: Vec<String> = text.lines().map(str::trim).filter(|l| l.contains('`')).map(String::from).collect();
    let count = text.lines().rev().find_map(|l| l.trim().parse().ok()).unwrap_or(0);
    frames.dedup();
    (frames, count)
}

/// Frames without their offsets: `module`function`.
fn functions(frames: &[String]) -> Vec<String> {
    frames.iter().map(|f| f.split('+').next().unwrap_or(f).to_string()).collect()
}

fn go_stacks_unwind_from_a_compressed_debug_frame(backend: Backend) {
    if !available("go (Debian: golang-go)", Command::new("go").arg("version").output().is_ok()) {
        return;
    }
    let dir = TempDir::new(&format!("gowork-{backend:?}"));
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gowork.go"), dir.path().join("main.go"))
        .expect("copy gowork.go");
    dir.write("go.mod", "module gowork\n\ngo 1.19\n");
    let d = |sub: &str| dir.path().join(sub).display().to_string();
    let built = Command::new("go")
        .args(["build", "-o", "gowork", "."])
        .current_dir(dir.path())
        .envs([("HOME", d("home")), ("GOCACHE", d("cache")), ("GOPATH", d("gopath"))])
        .envs([("CGO_ENABLED", "0"), ("GOFLAGS", ""), ("GOPROXY", "off"), ("GO111MODULE", "on")])
        .output()
        .expect("go build");
    assert!(built.status.success(), "go build: {}", String::from_utf8_lossy(&built.stderr));
    let exe = d("gowork");
    // What makes this test: Go's unwind table, compressed, and nothing else.
    assert_eq!(compression(&exe, ".debug_frame").as_deref(), Some("ZLIB"));
    assert_eq!(compression(&exe, ".eh_frame"), None);

    let untraced = Command::new(&exe).arg("1000").output().expect("untraced run");
    let program = "pid$target::main.work:entry { @[ustack()] = count(); }";
    let Some(out) = backend.traced(&["-q", "-n", program, "-c", &format!("{exe} 1000")]) else { return };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(text.starts_with(&*String::from_utf8_lossy(&untraced.stdout)), "{text}");
    let (frames, count) = stack(&text);
    assert_eq!(count, 1000, "{text}");
    // At work's entry: its caller main.main, then the runtime's goroutine start.
    assert_eq!(
        functions(&frames),
        ["gowork`main.work", "gowork`main.main", "gowork`runtime.main", "gowork`runtime.goexit.abi0"],
        "{text}"
    );
}

fn c_stacks_unwind_from_a_compressed_debug_frame(backend: Backend) {
    let program = "pid$target::chain_c:entry { @[ustack()] = count(); }";
    let run = |name: &str| {
        let out = backend.traced(&["-q", "-n", program, "-c", &format!("{} chain 3", fixture(name))])?;
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let text = stdout(&out);
        assert!(text.starts_with("chain 3 sink=27\n"), "{name}: {text}");
        let (frames, count) = stack(&text);
        assert_eq!(count, 3, "{name}: {text}");
        // One module name for the reference's and this one's.
        Some(frames.iter().map(|f| f.replace(&format!("{name}`"), "probes`")).collect::<Vec<_>>())
    };
    // The whole chain, from the uncompressed `.debug_frame`.
    let Some(expected) = run("probes-dframe-plain") else { return };
    assert_eq!(
        functions(&expected),
        [
            "probes`chain_c",
            "probes`chain_b",
            "probes`chain_a",
            "probes`main",
            "libc.so.6`__libc_start_call_main",
            "libc.so.6`__libc_start_main",
            "probes`_start"
        ]
    );
    let variants = [
        ("probes-dframe", "probes-dframe", ".debug_frame", "ZLIB"),
        ("probes-dframe-zstd", "probes-dframe-zstd", ".debug_frame", "ZSTD"),
        ("probes-dframe-zgnu", "probes-dframe-zgnu", ".zdebug_frame", ""),
        ("probes-dframe-split", "probes-dframe-split.debug", ".debug_frame", "ZSTD"),
    ];
    for (name, holder, section, how) in variants {
        if !available(name, Path::new(&fixture(name)).exists()) {
            continue;
        }
        assert_eq!(compression(&fixture(holder), section).as_deref(), Some(how), "{holder}");
        assert_eq!(run(name).as_ref(), Some(&expected), "{name}");
    }
    // The stripped one has neither its symbols nor its table but in its debug file.
    let split = fixture("probes-dframe-split");
    if Path::new(&split).exists() {
        assert_eq!(compression(&split, ".debug_frame"), None);
        assert_eq!(compression(&split, ".symtab"), None);
    }
}
