//! USDT notes read from real objects: Debian's PostgreSQL (71 probes, each behind a
//! semaphore) and python3.11 (8), compared with what `readelf -n` prints of them.

use std::path::Path;
use std::process::Command;

use udtrace_object::usdt::{dtrace_name, Operand, Reg, UsdtNote};

const POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";
const PYTHON: &str = "/usr/bin/python3.11";

fn notes(path: &str) -> Vec<UsdtNote> {
    assert!(Path::new(path).exists(), "{path} is missing: .ci/run installs it");
    let data = std::fs::read(path).unwrap();
    udtrace_object::elf::parse(&data).unwrap().usdt
}

/// (provider, name, location, semaphore, arguments) of every note, as readelf prints
/// them: the reference the parser is checked against.
fn readelf(path: &str) -> Vec<(String, String, u64, u64, String)> {
    let out = Command::new("readelf").args(["-n", path]).output().expect("readelf runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim).peekable();
    while let Some(l) = lines.next() {
        let Some(provider) = l.strip_prefix("Provider: ") else { continue };
        let name = lines.next().unwrap().strip_prefix("Name: ").unwrap().to_string();
        let loc = lines.next().unwrap();
        let hex = |key: &str| {
            let at = loc.find(key).unwrap() + key.len();
            let v = loc[at..].split(',').next().unwrap().trim();
            u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
        };
        let args = match lines.peek() {
            Some(a) if a.starts_with("Arguments:") => lines.next().unwrap()["Arguments:".len()..].trim().to_string(),
            _ => String::new(),
        };
        out.push((provider.to_string(), name, hex("Location: "), hex("Semaphore: "), args));
    }
    out
}

fn same_as_readelf(path: &str) -> Vec<UsdtNote> {
    let n = notes(path);
    let r = readelf(path);
    let ours: Vec<_> =
        n.iter().map(|n| (n.provider.clone(), n.name.clone(), n.pc, n.semaphore, n.args_text.clone())).collect();
    assert_eq!(ours, r);
    for note in &n {
        assert!(note.args.is_ok(), "{}: {:?}", note.name, note.args);
    }
    n
}

#[test]
fn postgres_probes() {
    let n = same_as_readelf(POSTGRES);
    assert_eq!(n.len(), 71);
    assert!(n.iter().all(|n| n.provider == "postgresql" && n.semaphore != 0));
    let q = n.iter().find(|n| dtrace_name(&n.name) == "query-start").expect("query-start");
    let args = q.args.as_ref().unwrap();
    assert_eq!(args.len(), 1);
    assert_eq!((args[0].size, args[0].signed), (8, false));
    assert!(matches!(args[0].operand, Operand::Reg(_)), "{:?}", args[0]);
}

#[test]
fn python_probes() {
    let n = same_as_readelf(PYTHON);
    assert_eq!(n.len(), 8);
    let names: Vec<String> = n.iter().map(|n| dtrace_name(&n.name)).collect();
    for want in ["function-entry", "function-return", "line", "gc-start", "gc-done", "import-find-load-start"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let entry = n.iter().find(|n| n.name == "function__entry").unwrap();
    let a = entry.args.as_ref().unwrap();
    assert_eq!(a.len(), 3);
    let Operand::Reg(r) = &a[2].operand else { panic!("{:?}", a[2]) };
    assert_eq!((r.reg, r.width, a[2].signed, a[2].size), (Reg::Ax, 4, true, 4));
    let gc = n.iter().find(|n| n.name == "gc__start").unwrap();
    assert!(matches!(
        gc.args.as_ref().unwrap()[0].operand,
        Operand::Mem { disp: 112, base: Some(b), index: None, .. } if b.reg == Reg::Sp
    ));
}
