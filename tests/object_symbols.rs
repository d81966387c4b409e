//! Symbols and module names of real objects: the fixtures built by build.rs (PIE, non-PIE,
//! stripped, separate debug info by build-id and by debuglink, minidebuginfo, shared
//! library, C++) and the system's libc.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use udtrace_object::debuginfo::{self, ObjectSymbols};
use udtrace_object::elf::SymbolSource;
use udtrace_object::modules::{module_matches, module_name};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("UDTRACE_FIXTURES")).join(name)
}

/// A private debug root with nothing in it: the fixtures' debug files must not be found
/// by accident in the system's tree.
fn no_debug_root() -> PathBuf {
    fixture("no-such-debug-root")
}

fn names(obj: &ObjectSymbols) -> BTreeSet<String> {
    obj.table().functions().iter().map(|f| f.name.clone()).collect()
}

fn addrs(obj: &ObjectSymbols) -> Vec<(String, u64, u64)> {
    obj.table().functions().iter().map(|f| (f.name.clone(), f.addr, f.size)).collect()
}

const FIXTURE_FUNCTIONS: &[&str] = &[
    "target",
    "classify",
    "tail",
    "helper",
    "dispatch",
    "fx_static",
    "fx_weak",
    "z_global",
    "checked",
    "checked.cold",
    "report",
    "main",
];

#[test]
fn fixture_functions_and_canonical_names() {
    let obj = debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap();
    assert_eq!(obj.info.symbols_from, SymbolSource::Symtab);
    let all = names(&obj);
    for f in FIXTURE_FUNCTIONS {
        assert!(all.contains(*f), "{f} missing from {all:?}");
    }
    // Weak alias: both names global/weak, fewer leading underscores wins.
    let weak = obj.table().matching("fx_weak");
    assert_eq!(weak.len(), 1);
    assert_eq!(weak[0].aliases, ["__fx_impl"]);
    assert!(!all.contains("__fx_impl"));
    // The other name finds the same function (one probe, shown by its canonical name).
    assert_eq!(obj.table().matching("__fx_impl")[0].addr, weak[0].addr);
    // Global over local, although the local sorts first.
    assert_eq!(obj.table().matching("z_global")[0].aliases, ["a_local"]);
    assert!(!all.contains("a_local"));
    // PLT stubs and undefined symbols (printf, abort, lib_add) get no function.
    for f in ["printf", "abort", "lib_add", "puts"] {
        assert!(obj.table().matching(f).is_empty(), "{f}");
    }
    for f in obj.table().functions() {
        assert!(f.size > 0);
        assert!(!obj.info.plt.iter().any(|&(a, b)| (a..b).contains(&f.addr)));
    }
    assert!(!obj.info.plt.is_empty());
    // Globs over the demangled names.
    let m: BTreeSet<_> = obj.table().matching("c*").iter().map(|f| f.name.clone()).collect();
    assert_eq!(m, BTreeSet::from(["checked".into(), "checked.cold".into(), "classify".into()]));
    // lookup: any address inside a function, with its offset.
    let t = &obj.table().matching("classify")[0];
    let (f, off) = obj.table().lookup(t.addr + 2).unwrap();
    assert_eq!((f.name.as_str(), off), ("classify", 2));
}

#[test]
fn pie_and_non_pie() {
    let pie = debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap();
    let exe = debuginfo::load_with_debug_root(&fixture("fixture-nopie"), &no_debug_root()).unwrap();
    assert!(pie.info.is_dyn);
    assert!(!exe.info.is_dyn);
    // The same functions (non-PIE crt adds _dl_relocate_static_pie).
    for f in FIXTURE_FUNCTIONS {
        assert!(names(&pie).contains(*f) && names(&exe).contains(*f), "{f}");
    }
    // Non-PIE code is linked at 0x400000 upwards; the file offset is not the address.
    let t = &exe.table().matching("target")[0];
    assert!(t.addr >= 0x400000, "{:#x}", t.addr);
    let off = exe.file_offset(t.addr).unwrap();
    assert!(off < t.addr);
    assert_eq!(exe.info.offset_to_vaddr(off), Some(t.addr));
    // Both PIE and non-PIE: the bytes at the file offset are the function's (its first
    // instruction decodes, and the code slice starts there).
    for (obj, path) in [(&pie, fixture("fixture")), (&exe, fixture("fixture-nopie"))] {
        let t = &obj.table().matching("target")[0];
        let code = obj.code(t).unwrap();
        let off = obj.file_offset(t.addr).unwrap();
        let file = std::fs::read(path).unwrap();
        assert_eq!(&*code, &file[off as usize..(off + t.size) as usize]);
        assert_eq!(obj.sites(t).unwrap().insns[0], 0);
    }
}

#[test]
fn stripped_has_only_dynsym_functions() {
    let obj = debuginfo::load_with_debug_root(&fixture("fixture-stripped"), &no_debug_root()).unwrap();
    assert_eq!(obj.info.symbols_from, SymbolSource::Dynsym);
    assert!(obj.debug_file.is_none());
    // build.rs exports exactly these two into .dynsym.
    assert_eq!(names(&obj), BTreeSet::from(["tail".into(), "target".into()]));
    let full = debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap();
    let t = &full.table().matching("target")[0];
    assert_eq!(obj.table().matching("target")[0].addr, t.addr);
}

#[test]
fn separate_debuginfo_by_build_id_recovers_all_functions() {
    let full = debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap();
    let split = fixture("fixture-split");
    // Without the debug file: only what .dynsym holds.
    let bare = debuginfo::load_with_debug_root(&split, &no_debug_root()).unwrap();
    assert!(bare.debug_file.is_none());
    assert_eq!(names(&bare), BTreeSet::from(["tail".into(), "target".into()]));
    // With the private build-id tree: everything, at the same addresses and sizes.
    let obj = debuginfo::load_with_debug_root(&split, &fixture("debug")).unwrap();
    let dbg = obj.debug_file.as_ref().expect("debug file found by build-id");
    assert!(dbg.starts_with(fixture("debug/.build-id")), "{}", dbg.display());
    assert_eq!(addrs(&obj), addrs(&full));
    assert_eq!(obj.table().matching("fx_weak")[0].aliases, ["__fx_impl"]);
}

#[test]
fn separate_debuginfo_by_debuglink() {
    let full = debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap();
    let obj = debuginfo::load_with_debug_root(&fixture("fixture-linked"), &no_debug_root()).unwrap();
    assert_eq!(obj.info.debuglink.as_deref(), Some("fixture-linked.debug"));
    assert_eq!(obj.debug_file.as_deref(), Some(fixture("fixture-linked.debug").as_path()));
    assert_eq!(addrs(&obj), addrs(&full));
}

#[test]
fn gnu_debugdata_recovers_all_functions() {
    let path = fixture("fixture-mini");
    if !path.exists() {
        eprintln!("SKIP: fixture-mini was not built (xz is not installed)");
        return;
    }
    let full = debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap();
    let obj = debuginfo::load_with_debug_root(&path, &no_debug_root()).unwrap();
    assert!(obj.info.gnu_debugdata.is_some());
    assert!(obj.debug_file.is_none());
    assert_eq!(addrs(&obj), addrs(&full));
}

#[test]
fn shared_library_functions() {
    let obj = debuginfo::load_with_debug_root(&fixture("libfixture.so"), &no_debug_root()).unwrap();
    assert!(obj.info.is_dyn);
    let all = names(&obj);
    for f in ["lib_add", "lib_calls", "lib_bump"] {
        assert!(all.contains(f), "{f} missing from {all:?}");
    }
    let path = fixture("libfixture.so").display().to_string();
    assert_eq!(module_name(&path), "libfixture.so");
    for m in ["libfixture.so", "libfixture", "libfix*", path.as_str()] {
        assert!(module_matches(m, &path, false), "{m}");
    }
    assert!(!module_matches("a.out", &path, false));
}

#[test]
fn cxx_names_demangled_and_mangled() {
    let obj = debuginfo::load_with_debug_root(&fixture("fixture-cxx"), &no_debug_root()).unwrap();
    let bump = obj.table().matching("Counter::bump(int)");
    assert_eq!(bump.len(), 1, "{:?}", names(&obj));
    assert_eq!(bump[0].mangled.as_deref(), Some("_ZN7Counter4bumpEi"));
    for p in ["_ZN7Counter4bumpEi", "Counter::bump*", "*bump*", "_ZN7Counter4bump*"] {
        let m = obj.table().matching(p);
        assert_eq!(m.len(), 1, "{p}");
        assert_eq!(m[0].addr, bump[0].addr, "{p}");
    }
    assert_eq!(obj.table().matching("app::twice(int)").len(), 1);
    // The constructor: C1 and C2 variants (where gcc emits both) are one function.
    let ctor = obj.table().matching("Counter::Counter(int)");
    assert_eq!(ctor.len(), 1, "{:?}", names(&obj));
    assert_eq!(obj.table().matching("_ZN7CounterC2Ei").len(), 1);
}

#[test]
fn executable_module_names() {
    let path = fixture("fixture").display().to_string();
    assert_eq!(module_name(&path), "fixture");
    for m in ["a.out", "fixture", path.as_str(), "fix*"] {
        assert!(module_matches(m, &path, true), "{m}");
    }
    assert!(!module_matches("a.out", &fixture("libfixture.so").display().to_string(), false));
}

#[test]
fn libc_loads_with_its_debug_file() {
    let path = std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
    let p = path.display().to_string();
    for m in ["libc.so.6", "libc.so", "libc", "libc*"] {
        assert!(module_matches(m, &p, false), "{m}");
    }
    for m in ["lib", "libc.s", "libcrypt", "a.out"] {
        assert!(!module_matches(m, &p, false), "{m}");
    }
    let start = Instant::now();
    let obj = debuginfo::load(&path).unwrap();
    eprintln!(
        "libc.so.6: {} functions in {:?} (debug build; debug file {:?})",
        obj.table().functions().len(),
        start.elapsed(),
        obj.debug_file
    );
    assert!(obj.debug_file.is_some(), "libc's debug file is installed on this machine");
    for f in ["strlen", "malloc", "__strlen_avx2", "free"] {
        let m = obj.table().matching(f);
        assert_eq!(m.len(), 1, "{f}");
        let s = obj.sites(m[0]).unwrap();
        assert_eq!(s.insns[0], 0, "{f}");
        assert!(!s.returns.is_empty(), "{f} has return sites");
    }
    // malloc's canonical name beats __libc_malloc and the local __malloc.
    let malloc = obj.table().matching("malloc")[0];
    assert!(malloc.aliases.contains(&"__libc_malloc".to_string()));
    assert!(obj.table().matching("strlen")[0].ifunc);
    // Versioned names: the default version shows plainly, a compatibility one with its
    // version, whether the name came from .dynsym (versions in .gnu.version) or .symtab.
    assert_eq!(obj.table().matching("pthread_kill").len(), 1);
    assert_eq!(obj.table().matching("pthread_kill@GLIBC_2.2.5").len(), 1);
    let bare = debuginfo::load_with_debug_root(&path, &no_debug_root()).unwrap();
    assert!(bare.debug_file.is_none());
    assert_eq!(bare.table().matching("pthread_kill").len(), 1);
    assert_eq!(bare.table().matching("pthread_kill@GLIBC_2.2.5").len(), 1);
    // Local functions exist only in the debug file.
    assert!(obj.table().functions().len() > 3000);
}

/// A plain name is looked for without the table where no symbol could carry it
/// (`ObjectSymbols::matching`): every name, alias, mangled and raw name of C, C++,
/// split-debug and minidebuginfo objects and of libc with its debug file finds what the
/// table finds, and names no symbol has find nothing.
#[test]
fn plain_names_match_as_the_table_does() {
    let mut objects = vec![
        debuginfo::load_with_debug_root(&fixture("fixture"), &no_debug_root()).unwrap(),
        debuginfo::load_with_debug_root(&fixture("fixture-split"), &fixture("debug")).unwrap(),
        debuginfo::load_with_debug_root(&fixture("fixture-cxx"), &no_debug_root()).unwrap(),
        debuginfo::load_with_debug_root(&fixture("libfixture.so"), &no_debug_root()).unwrap(),
        debuginfo::load(&std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6").unwrap()).unwrap(),
    ];
    if fixture("fixture-mini").exists() {
        objects.push(debuginfo::load_with_debug_root(&fixture("fixture-mini"), &no_debug_root()).unwrap());
    }
    for obj in &objects {
        let fresh = |n: &str| -> Vec<u64> {
            let mut a: Vec<u64> = obj.matching(n).iter().map(|f| f.addr).collect();
            a.sort_unstable();
            a
        };
        let mut names: BTreeSet<String> = obj.info.symbols.iter().map(|s| s.name.clone()).collect();
        for f in obj.table().functions() {
            names.insert(f.name.clone());
            names.extend(f.mangled.clone());
            names.extend(f.aliases.iter().cloned());
        }
        names.extend(["f_hot", "no_such_function", "mallocx", "x"].map(String::from));
        let mut plain = 0;
        for n in names.iter().filter(|n| udtrace_object::symbols::is_plain_name(n)) {
            let mut want: Vec<u64> = obj.table().matching(n).iter().map(|f| f.addr).collect();
            want.sort_unstable();
            assert_eq!(fresh(n), want, "{n}");
            plain += 1;
        }
        assert!(plain > 5, "{plain} plain names");
        assert!(obj.matching("no_such_function").is_empty());
    }
}

/// The fixture copies run and agree: the same output and status, PIE or not, stripped or
/// not (later issues compare traced runs against these).
#[test]
fn fixtures_run() {
    let run = |name: &str| {
        let out = Command::new(fixture(name)).arg("10").output().unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    let want = run("fixture");
    assert_eq!(want.0, Some(0));
    assert!(want.1.starts_with("sum="), "{}", want.1);
    for name in ["fixture-nopie", "fixture-stripped", "fixture-split", "fixture-linked"] {
        assert_eq!(run(name), want, "{name}");
    }
    let cxx = run("fixture-cxx");
    // total = sum of 2*i for i < 10.
    assert_eq!(cxx, (Some(0), "total=90\n".to_string()));
}

/// Corrupt the fixture byte by byte (headers, symbol tables, code): parsing, the symbol
/// table and site decoding return errors or odd answers, never panic.
#[test]
fn corrupted_objects_never_panic() {
    use udtrace_object::elf;
    use udtrace_object::sites;
    use udtrace_object::symbols::SymbolTable;
    let data = std::fs::read(fixture("fixture")).unwrap();
    for i in (0..data.len()).step_by(5) {
        for flip in [0xff, 0x80] {
            let mut d = data.clone();
            d[i] ^= flip;
            let Ok(info) = elf::parse(&d) else { continue };
            let table = SymbolTable::from_symbols(&[&info.symbols], &info.plt);
            for f in table.functions() {
                let _ = table.lookup(f.addr.wrapping_add(f.size / 2));
                let Some(start) = info.vaddr_to_offset(f.addr) else {
                    continue;
                };
                let start = start as usize;
                let end = start.saturating_add(f.size as usize).min(d.len());
                if start < end {
                    let s = sites::decode_with_parts(&d[start..end], f.addr, &table.other_parts(f));
                    let _ = sites::check_offset(&s, f.size, f.size / 2);
                }
            }
        }
    }
}
