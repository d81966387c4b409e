//! Issue 3 end to end: `-c`/`-p` process control, pid probe listing (`-l`), module
//! names, sites against objdump, and the pid provider's errors.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};

mod util;

use util::{fixture, wait_mapped};

/// Kills and reaps a spawned process when the test ends, even on failure.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn udtrace(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_udtrace"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("udtrace runs");
    // No test may hang: a watchdog kills udtrace after 30 s.
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        for _ in 0..300 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("udtrace finishes");
    let _ = watchdog.join();
    out
}

/// The rows of a `-l` listing: (provider, module, function, name).
fn rows(out: &Output) -> Vec<(String, String, String, String)> {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("   ID   PROVIDER            MODULE                          FUNCTION NAME"),
        "listing header; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "row {l:?}");
            (f[1].to_string(), f[2].to_string(), f[3].to_string(), f[4].to_string())
        })
        .collect()
}

fn functions_named(rows: &[(String, String, String, String)]) -> Vec<String> {
    let mut v: Vec<String> = rows.iter().map(|r| r.2.clone()).collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn list_libc_entries_of_a_created_process() {
    let out = udtrace(&["-l", "-n", "pid$target:libc:str*:entry", "-c", &format!("{} 1", fixture("fixture"))]);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let rows = rows(&out);
    assert!(rows.len() > 20, "libc has many str* functions, got {}", rows.len());
    let provider = &rows[0].0;
    assert!(provider.starts_with("pid") && provider[3..].parse::<u32>().is_ok(), "provider {provider}");
    for (p, m, _, n) in &rows {
        assert_eq!(p, provider);
        assert_eq!(m, "libc.so.6", "probemod is the real basename");
        assert_eq!(n, "entry");
    }
    // A function may match through an alias and show its canonical name (strchr's
    // address is also index's), but nearly all are str* themselves.
    let str_named = rows.iter().filter(|r| r.2.starts_with("str")).count();
    assert!(str_named * 10 >= rows.len() * 9, "{rows:?}");
    assert!(rows.iter().any(|r| r.2 == "strlen"));
}

#[test]
fn libc_module_names_are_equivalent() {
    let fx = format!("{} 1", fixture("fixture"));
    let sets: Vec<Vec<String>> = ["libc.so.6", "libc.so", "libc"]
        .iter()
        .map(|m| functions_named(&rows(&udtrace(&["-l", "-n", &format!("pid$target:{m}:mem*:entry"), "-c", &fx]))))
        .collect();
    assert!(!sets[0].is_empty());
    assert_eq!(sets[0], sets[1]);
    assert_eq!(sets[0], sets[2]);
}

#[test]
fn a_out_and_the_basename_are_equivalent() {
    let fx = format!("{} 1", fixture("fixture"));
    let a = functions_named(&rows(&udtrace(&["-l", "-n", "pid$target:a.out::entry", "-c", &fx])));
    let b = functions_named(&rows(&udtrace(&["-l", "-n", "pid$target:fixture::entry", "-c", &fx])));
    assert_eq!(a, b);
    for f in ["main", "target", "classify", "tail", "dispatch", "fx_weak", "z_global", "fx_static"] {
        assert!(a.iter().any(|x| x == f), "{f} missing from {a:?}");
    }
    // The weak alias and the local symbol at shared addresses resolve canonically.
    assert!(!a.iter().any(|x| x == "__fx_impl" || x == "a_local"), "{a:?}");
}

/// `objdump -d` of one function: the offset of every instruction and of every `ret`.
fn objdump_function(binary: &str, func: &str) -> Option<(Vec<u64>, Vec<u64>)> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn", binary]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let header = format!("<{func}>:");
    let mut lines = text.lines().skip_while(|l| !l.ends_with(&header));
    let start = u64::from_str_radix(lines.next()?.split_whitespace().next()?, 16).ok()?;
    let (mut insns, mut rets) = (Vec::new(), Vec::new());
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let Some((addr, rest)) = l.trim().split_once(':') else { continue };
        let Ok(a) = u64::from_str_radix(addr, 16) else { continue };
        insns.push(a - start);
        if rest.trim_start().starts_with("ret") {
            rets.push(a - start);
        }
    }
    // objdump runs on into the alignment padding after the function: keep its size.
    let nm = Command::new("nm").args(["-S", "--defined-only", binary]).output().ok()?;
    let size = String::from_utf8_lossy(&nm.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 4 && f[3] == func).then(|| u64::from_str_radix(f[1], 16).ok()).flatten()
    })?;
    insns.retain(|&o| o < size);
    rets.retain(|&o| o < size);
    Some((insns, rets))
}

#[test]
fn offsets_listed_for_a_grabbed_process_match_objdump() {
    let Some((insns, rets)) = objdump_function(&fixture("fixture"), "classify") else {
        println!("skipped: objdump is not installed");
        return;
    };
    // A process waiting on its stdin, grabbed with -p, then let go.
    let mut guard = Guard(
        Command::new("sh")
            .arg("-c")
            .arg(format!("read x; exec {} 5", fixture("fixture")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh"),
    );
    let pid = guard.0.id().to_string();
    wait_mapped(&pid, "libc.so.6");
    // sh is the grabbed process; its a.out is the shell, so name the fixture after exec
    // is not possible yet: list the shell's own main instead, then check the fixture
    // through -c below. Here we prove -p lists and releases.
    let out = udtrace(&["-l", "-p", &pid, "-n", "pid$target:libc:malloc:entry"]);
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].0, format!("pid{pid}"));
    // Released untouched: it still reads its line and runs the fixture normally.
    guard.0.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let out = std::mem::replace(&mut guard.0, Command::new("true").spawn().expect("true"))
        .wait_with_output()
        .expect("output");
    let untraced = Command::new(fixture("fixture")).arg("5").output().expect("fixture");
    assert_eq!(out.stdout, untraced.stdout);
    assert_eq!(out.status.code(), untraced.status.code());

    // Every instruction offset and the return probe of classify, through -c.
    let out = udtrace(&["-l", "-n", "pid$target:a.out:classify:", "-c", &format!("{} 1", fixture("fixture"))]);
    let r = rows(&out);
    let mut names: Vec<&str> = r.iter().map(|x| x.3.as_str()).collect();
    assert!(names.contains(&"entry") && names.contains(&"return"));
    names.retain(|n| *n != "entry" && *n != "return");
    let listed: Vec<u64> = names.iter().map(|n| u64::from_str_radix(n, 16).expect("hex offset")).collect();
    assert_eq!(listed, insns, "every instruction offset, in order");
    assert!(!rets.is_empty());
}

#[test]
fn created_process_runs_as_untraced() {
    let fx = fixture("fixture");
    let untraced = Command::new(&fx).arg("7").output().expect("fixture");
    let out = udtrace(&["-q", "-n", "BEGIN {}", "-c", &format!("{fx} 7")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The fixture's output, then the newline dtrace prints when tracing ends.
    let mut expected = untraced.stdout.clone();
    expected.push(b'\n');
    assert_eq!(String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&expected));
    let out = udtrace(&["-n", "BEGIN {}", "-c", &format!("{fx} 7")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().any(|l| l.starts_with("udtrace: pid ") && l.ends_with(" has exited")), "{err}");
}

#[test]
fn target_is_the_created_pid() {
    let out =
        udtrace(&["-q", "-n", "BEGIN { printf(\"%d\\n\", $target); }", "-c", &format!("{} 1", fixture("fixture"))]);
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("");
    let pid: i32 = first.parse().unwrap_or_else(|_| panic!("pid line {first:?}"));
    assert!(pid > 0);
}

fn first_stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("").to_string()
}

#[test]
fn pid_provider_errors_use_dtraces_words() {
    let fx = format!("{} 1", fixture("fixture"));
    let cases = [
        ("pid$target:a.out:nosuch:entry", "failed to lookup 'nosuch' in module 'a.out'"),
        ("pid$target:a.out:classify:fff", "offset 0xfff outside of function 'classify'"),
        ("pid$target:a.out:classify:1", "offset 0x1 is not aligned on an instruction"),
        ("pid$target:a.out:classify:bogus", "'bogus' is an invalid probe name"),
        ("pid$target:libc:-:1234", "only the a.out module is valid with the '-' function"),
        ("pid$target::-:12*", "only individual addresses may be specified with the '-' function"),
        ("pid0:::entry", "pid0 does not contain a valid pid"),
    ];
    for (desc, msg) in cases {
        let out = udtrace(&["-n", desc, "-c", &fx]);
        assert_eq!(out.status.code(), Some(1), "{desc}");
        let line = first_stderr_line(&out);
        assert!(line.starts_with("udtrace: invalid probe specifier ") && line.ends_with(msg), "{desc}: {line}");
    }
    // An unknown module is no error by itself: the description then matches nothing.
    let out = udtrace(&["-n", "pid$target:nosuchmod::entry", "-c", &fx]);
    assert_eq!(out.status.code(), Some(1));
    let line = first_stderr_line(&out);
    assert!(line.ends_with("does not match any probes"), "{line}");
    let out = udtrace(&["-Z", "-q", "-n", "pid$target:nosuchmod::entry", "-c", &fx]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn process_errors_use_dtraces_words() {
    let out = udtrace(&["-n", "BEGIN", "-c", "/nonexistent/prog"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(first_stderr_line(&out), "udtrace: failed to execute /nonexistent/prog: No such file or directory");
    let out = udtrace(&["-n", "BEGIN", "-p", "999999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(first_stderr_line(&out), "udtrace: No such process");
    // A script that fails to compile kills the command it started.
    let out = udtrace(&["-n", "BEGIN { x = ; }", "-c", "sleep 1000"]);
    assert_eq!(out.status.code(), Some(1));
    let leftover = Command::new("pgrep").args(["-x", "-f", "sleep 1000"]).output().expect("pgrep");
    assert!(leftover.stdout.is_empty(), "the -c child was left running");
}
