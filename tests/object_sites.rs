//! Probe sites against an independent disassembly: for every function of every fixture
//! (and of libc), the instruction offsets and return offsets udtrace computes with iced-x86
//! must equal those read from `objdump -d`. Skips, saying why, only if objdump is missing.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use udtrace_object::debuginfo::{self, ObjectSymbols};
use udtrace_object::sites::{check_offset, OffsetError};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("UDTRACE_FIXTURES")).join(name)
}

fn have_objdump() -> bool {
    let ok = Command::new("objdump").arg("--version").output().is_ok();
    if !ok {
        eprintln!("SKIP: objdump is not installed; site offsets are not cross-checked");
    }
    ok
}

/// What objdump says about one object: each instruction's address and text, and each
/// function symbol's address, size and name.
struct Objdump {
    insns: BTreeMap<u64, String>,
    funcs: Vec<(u64, u64, String)>,
}

fn objdump(path: &Path) -> Objdump {
    let run = |args: &[&str]| {
        let out = Command::new("objdump").args(args).arg(path).output().unwrap();
        assert!(out.status.success(), "objdump {args:?} {}", path.display());
        String::from_utf8(out.stdout).unwrap()
    };
    let mut insns = BTreeMap::new();
    for line in run(&["-d", "-w", "--no-show-raw-insn"]).lines() {
        // "    12c0:\tlea    (%rdi,%rsi,1),%eax"
        let Some((addr, text)) = line.split_once(":\t") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        insns.insert(addr, text.trim().to_string());
    }
    // "0000000000001139 g     F .text\t0000000000000004              target"
    let mut funcs = Vec::new();
    for line in run(&["-t", "-w"]).lines() {
        let Some((head, rest)) = line.split_once('\t') else {
            continue;
        };
        if head.len() < 17 || !head[..16].bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        // Seven flag characters, then the section name.
        let (flags, section) = head[17..].split_at(7.min(head.len() - 17));
        if !flags.contains('F') && !flags.contains('i') {
            continue;
        }
        let mut it = rest.split_whitespace();
        let size = u64::from_str_radix(it.next().unwrap(), 16).unwrap();
        // A version column ("(GLIBC_2.2.5)" or "Base") may come before the name.
        let name = it.last().unwrap_or("").to_string();
        let addr = u64::from_str_radix(&head[..16], 16).unwrap();
        if size > 0 && !section.contains("*UND*") {
            funcs.push((addr, size, name));
        }
    }
    Objdump { insns, funcs }
}

/// Mnemonic and operands of an objdump line, prefixes such as `bnd`, `notrack`, `repz`
/// removed.
fn mnemonic(text: &str) -> (&str, &str) {
    let mut rest = text;
    loop {
        let (m, ops) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let ops = ops.trim_start();
        if matches!(m, "bnd" | "notrack" | "rep" | "repz" | "repnz" | "ds" | "cs" | "data16") && !ops.is_empty() {
            rest = ops;
        } else {
            return (m, ops);
        }
    }
}

struct Expected {
    insns: Vec<u32>,
    returns: Vec<u32>,
    indirect: bool,
}

/// The sites of the function at `[addr, addr + size)` by the rule of design.md, computed
/// from objdump's text: `ret*`; `j*`/`loop*` with a direct target outside the function and
/// its `.cold` parts; none of the latter if the function has an indirect `jmp`.
fn expected(od: &Objdump, addr: u64, size: u64, parts: &[(u64, u64)]) -> Expected {
    let mut e = Expected { insns: vec![], returns: vec![], indirect: false };
    let mut tails = vec![];
    for (&a, text) in od.insns.range(addr..addr + size) {
        let off = (a - addr) as u32;
        e.insns.push(off);
        let (m, ops) = mnemonic(text);
        if m.starts_with("ret") {
            e.returns.push(off);
        } else if m.starts_with('j') || m.starts_with("loop") {
            if ops.starts_with('*') {
                e.indirect |= m.starts_with("jmp");
                continue;
            }
            let target = ops.split_whitespace().next().unwrap();
            let t = u64::from_str_radix(target, 16).unwrap();
            let inside = (addr..addr + size).contains(&t) || parts.iter().any(|&(a, b)| (a..b).contains(&t));
            if !inside {
                tails.push(off);
            }
        }
    }
    if !e.indirect {
        e.returns.extend(tails);
        e.returns.sort();
    }
    e
}

/// Compare every function of `obj` with objdump; returns how many were compared and
/// (by name) the facts checked for the named ones.
fn compare(path: &Path, obj: &ObjectSymbols) -> HashMap<String, (Vec<u32>, bool)> {
    let od = objdump(path);
    // The functions objdump sees (size > 0, outside the PLT) are exactly ours by address.
    let mut theirs: Vec<(u64, u64)> = od
        .funcs
        .iter()
        .filter(|(a, _, _)| !obj.info.plt.iter().any(|&(s, e)| (s..e).contains(a)))
        .map(|&(a, s, _)| (a, s))
        .collect();
    theirs.sort();
    theirs.dedup_by_key(|f| f.0);
    let ours: Vec<(u64, u64)> = obj.table().functions().iter().map(|f| (f.addr, f.size)).collect();
    assert_eq!(ours, theirs, "{}: function addresses and sizes", path.display());

    let mut facts = HashMap::new();
    for f in obj.table().functions() {
        let s = obj.sites(f).expect("function code is in the file");
        let parts = obj.table().other_parts(f);
        let e = expected(&od, f.addr, f.size, &parts);
        let what = format!("{} {} at {:#x}", path.display(), f.name, f.addr);
        assert_eq!(s.undecodable_at, None, "{what}");
        assert_eq!(s.insns, e.insns, "{what}: instruction offsets");
        assert_eq!(s.returns, e.returns, "{what}: return offsets");
        assert_eq!(s.indirect_jump, e.indirect, "{what}: indirect jump");
        assert_eq!(s.insns.first(), Some(&0), "{what}: entry site");
        // Offset probes: every boundary accepted, every byte inside an instruction and the
        // end refused, each with its own error.
        for off in 0..f.size {
            let r = check_offset(&s, f.size, off);
            if e.insns.contains(&(off as u32)) {
                assert_eq!(r, Ok(()), "{what} +{off:#x}");
            } else {
                assert_eq!(r, Err(OffsetError::InsideInstruction { off }), "{what} +{off:#x}");
            }
        }
        assert_eq!(check_offset(&s, f.size, f.size), Err(OffsetError::PastEnd { off: f.size, size: f.size }));
        facts.insert(f.name.clone(), (s.returns.clone(), s.indirect_jump));
    }
    facts
}

fn check_c_fixture(name: &str) {
    if !have_objdump() {
        return;
    }
    let path = fixture(name);
    let obj = debuginfo::load(&path).unwrap();
    let facts = compare(&path, &obj);
    let code_at = |fname: &str, off: u32| {
        let f = &obj.table().matching(fname)[0];
        let insn = obj.info.vaddr_to_offset(f.addr + u64::from(off)).unwrap();
        obj.bytes(insn, 1).unwrap()[0]
    };
    // The shapes the fixtures exist for really are there, as gcc compiled them.
    let (r, _) = &facts["target"];
    assert_eq!(r.len(), 1, "leaf: one ret");
    let (r, _) = &facts["classify"];
    assert!(r.len() >= 2, "non-leaf with several returns: {r:?}");
    let (r, _) = &facts["tail"];
    assert!(
        r.iter().any(|&o| matches!(code_at("tail", o), 0xe9 | 0xeb)),
        "tail call: gcc emitted no jmp out of tail(): {r:?}"
    );
    let (r, ind) = &facts["dispatch"];
    assert!(*ind, "jump table: dispatch() has no indirect jmp");
    assert!(r.iter().all(|&o| code_at("dispatch", o) == 0xc3), "only rets with a jump table");
    // checked() jumps to checked.cold, which is not a return.
    let (r, _) = &facts["checked"];
    assert_eq!(r.len(), 1, "checked: only its ret, not the jcc to checked.cold: {r:?}");
    assert!(facts.contains_key("checked.cold"), "gcc made no checked.cold");
}

#[test]
fn pie_executable_sites_match_objdump() {
    check_c_fixture("fixture");
}

#[test]
fn non_pie_executable_sites_match_objdump() {
    check_c_fixture("fixture-nopie");
}

#[test]
fn shared_library_sites_match_objdump() {
    if !have_objdump() {
        return;
    }
    let path = fixture("libfixture.so");
    let facts = compare(&path, &debuginfo::load(&path).unwrap());
    assert!(facts.contains_key("lib_add") && facts.contains_key("lib_bump"));
}

#[test]
fn cxx_sites_match_objdump() {
    if !have_objdump() {
        return;
    }
    let path = fixture("fixture-cxx");
    let facts = compare(&path, &debuginfo::load(&path).unwrap());
    assert!(facts.contains_key("Counter::bump(int)"), "{:?}", facts.keys());
}

/// The separate-debuginfo copy: functions come from the debug file, code from the stripped
/// binary; sites must still be exact.
#[test]
fn split_debuginfo_sites_match_objdump() {
    if !have_objdump() {
        return;
    }
    let root = fixture("debug");
    let obj = debuginfo::load_with_debug_root(&fixture("fixture-split"), &root).unwrap();
    assert!(obj.debug_file.is_some());
    // objdump reads symbols from the debug file, addresses/instructions from the binary.
    let od_syms = objdump(obj.debug_file.as_ref().unwrap());
    let od = Objdump { insns: objdump(&fixture("fixture-split")).insns, funcs: od_syms.funcs };
    for f in obj.table().functions() {
        let s = obj.sites(f).unwrap();
        let e = expected(&od, f.addr, f.size, &obj.table().other_parts(f));
        assert_eq!((s.insns, s.returns), (e.insns, e.returns), "{}", f.name);
    }
}

/// libc, with its installed debug file: thousands of functions, compiled and hand-written.
#[test]
fn libc_sites_match_objdump() {
    if !have_objdump() {
        return;
    }
    let path = std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
    let obj = debuginfo::load(&path).unwrap();
    let od = objdump(&path);
    let mut checked = 0;
    for f in obj.table().functions() {
        let s = obj.sites(f).unwrap();
        let e = expected(&od, f.addr, f.size, &obj.table().other_parts(f));
        assert_eq!(s.insns, e.insns, "libc {} at {:#x}", f.name, f.addr);
        assert_eq!(s.returns, e.returns, "libc {} at {:#x}", f.name, f.addr);
        checked += 1;
    }
    assert!(checked > 1000, "only {checked} libc functions");
    eprintln!("libc: {checked} functions match objdump");
}
