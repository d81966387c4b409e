//! `-h` and `-G`, DTrace's application side: the header `udtrace -h` writes from
//! tests/fixtures/sdtapp.d (golden file), a C program built with it by gcc alone
//! (its `.note.stapsdt` notes read back with binutils' readelf and nm, its output
//! equal with and without tracing, its `_ENABLED()` 0 untraced), the probes' argument
//! descriptors checked against the values the program passes by tracing each probe
//! site with a pid instruction probe, `-G`'s object linked in, and the messages.

mod util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use util::{run, run_args, udtrace, unprivileged, TempDir};

fn fixtures_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Writes sdtapp.h into `dir` with `udtrace -h`.
fn make_header(dir: &Path) -> PathBuf {
    let h = dir.join("sdtapp.h");
    let d = fixtures_src().join("sdtapp.d");
    let out = run_args(&["-h".as_ref(), "-s".as_ref(), d.as_os_str(), "-o".as_ref(), h.as_os_str()]);
    assert_eq!((out.status, out.stderr.as_str(), out.stdout.as_str()), (0, "", ""));
    h
}

/// Builds sdtapp.c with gcc and `flags` against the header in `dir`.
fn build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    sh(Command::new("gcc")
        .args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-I"])
        .arg(dir)
        .arg("-o")
        .arg(&exe)
        .arg(fixtures_src().join("sdtapp.c")));
    exe
}

#[test]
fn header_is_golden() {
    let dir = TempDir::new("sdt-golden");
    let got = std::fs::read_to_string(make_header(dir.path())).unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/sdtapp.h");
    if std::env::var_os("UDTRACE_BLESS").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    assert_eq!(got, want, "tests/golden/sdtapp.h (UDTRACE_BLESS=1 rewrites it)");
}

/// One `.note.stapsdt` note as readelf shows it.
#[derive(Debug)]
struct Note {
    provider: String,
    name: String,
    location: u64,
    base: u64,
    semaphore: u64,
    args: Vec<String>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("hex {s:?}"))
}

fn notes(exe: &Path) -> Vec<Note> {
    let text = sh(Command::new("readelf").arg("-nW").arg(exe));
    let mut notes = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(l) = lines.next() {
        // With -W the provider ends the note's first line.
        let Some((_, provider)) = l.split_once("Provider: ") else { continue };
        let name = lines.next().unwrap().strip_prefix("Name: ").unwrap().to_string();
        let loc = lines.next().unwrap();
        let field = |k: &str| hex(loc.split(k).nth(1).unwrap().split(',').next().unwrap());
        let args = lines.next().unwrap().strip_prefix("Arguments:").unwrap();
        notes.push(Note {
            provider: provider.to_string(),
            name,
            location: field("Location: "),
            base: field("Base: "),
            semaphore: field("Semaphore: "),
            args: args.split_whitespace().map(str::to_string).collect(),
        });
    }
    notes
}

/// Symbol addresses, from nm.
fn symbols(exe: &Path) -> HashMap<String, u64> {
    sh(Command::new("nm").arg(exe))
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3).then(|| (w[2].to_string(), hex(w[0])))
        })
        .collect()
}

/// A section's address and size, from readelf.
fn section(exe: &Path, name: &str) -> (u64, u64) {
    let text = sh(Command::new("readelf").arg("-SW").arg(exe));
    let l = text.lines().find(|l| l.split_whitespace().any(|w| w == name)).unwrap_or_else(|| panic!("no {name}"));
    let w: Vec<&str> = l.split(']').nth(1).unwrap().split_whitespace().collect();
    (hex(w[2]), hex(w[4]))
}

/// What the program prints, run untraced.
const UNTRACED: &str = "requests 3 enabled 0 start-enabled 0\n";

/// The sizes of each probe's argument descriptors, from sdtapp.d's types.
const SIZES: &[(&str, &[i32])] =
    &[("request__start", &[4, 8, -8]), ("request__done", &[1, -2, 8, -1, -4]), ("tick", &[]), ("object", &[8, 8])];

fn check_notes(exe: &Path) -> Vec<Note> {
    let notes = notes(exe);
    let syms = symbols(exe);
    let (probes, probes_size) = section(exe, ".probes");
    let (base, _) = section(exe, ".stapsdt.base");
    let (text, text_size) = section(exe, ".text");
    assert_eq!(notes.len(), SIZES.len(), "{notes:?}");
    for (n, (name, sizes)) in notes.iter().zip(SIZES) {
        assert_eq!((n.provider.as_str(), n.name.as_str()), ("sdtapp", *name));
        assert_eq!(n.semaphore, syms[&format!("sdtapp_{name}_semaphore")], "{n:?}");
        assert!(n.semaphore >= probes && n.semaphore + 2 <= probes + probes_size, "semaphore in .probes: {n:?}");
        assert_eq!(n.base, base, "{n:?}");
        assert!(n.location >= text && n.location < text + text_size, "{n:?}");
        let got: Vec<i32> = n.args.iter().map(|a| a.split('@').next().unwrap().parse().unwrap()).collect();
        assert_eq!(got, *sizes, "{n:?}");
    }
    notes
}

/// A descriptor's operand as a D expression of the value it holds at the site.
fn operand(desc: &str) -> String {
    let (size, place) = desc.split_once('@').unwrap();
    let size: i32 = size.parse().unwrap();
    let ty = format!("{}int{}_t", if size < 0 { "" } else { "u" }, size.abs() * 8);
    if let Some(c) = place.strip_prefix('$') {
        return format!("(({ty}){c})");
    }
    let reg = |r: &str| {
        let r = r.trim_start_matches('%');
        let full = match r {
            "al" | "ax" | "eax" | "rax" => "RAX".to_string(),
            "bl" | "bx" | "ebx" | "rbx" => "RBX".to_string(),
            "cl" | "cx" | "ecx" | "rcx" => "RCX".to_string(),
            "dl" | "dx" | "edx" | "rdx" => "RDX".to_string(),
            "sil" | "si" | "esi" | "rsi" => "RSI".to_string(),
            "dil" | "di" | "edi" | "rdi" => "RDI".to_string(),
            "bpl" | "bp" | "ebp" | "rbp" => "RBP".to_string(),
            "spl" | "sp" | "esp" | "rsp" => "RSP".to_string(),
            r if r.starts_with('r') => r.trim_end_matches(['b', 'w', 'd']).to_ascii_uppercase(),
            r => panic!("register {r}"),
        };
        format!("uregs[R_{full}]")
    };
    match place.split_once('(') {
        None => format!("(({ty}){})", reg(place)),
        Some((disp, r)) => {
            let r = r.strip_suffix(')').unwrap();
            assert!(!r.contains(','), "an indexed operand: {desc}");
            let disp = if disp.is_empty() { "0" } else { disp };
            format!("(*({ty} *)copyin({} + ({disp}), {}))", reg(r), size.abs())
        }
    }
}

/// Traces each probe site with a pid instruction probe that prints what its
/// descriptors say the arguments are (strings through copyinstr, the object's
/// pointer through the value it points to), and checks them against what sdtapp.c
/// passes. Without the USDT provider this checks the descriptors point where the
/// values are.
fn check_arguments(exe: &Path, notes: &[Note]) {
    let main = symbols(exe)["main"];
    let module = exe.file_name().unwrap().to_str().unwrap();
    let mut script = String::from("#pragma D option quiet\n");
    for n in notes {
        let a: Vec<String> = n.args.iter().map(|d| operand(d)).collect();
        let (fmt, vals) = match n.name.as_str() {
            "request__start" => ("%d %s %d", format!("{}, copyinstr((uintptr_t){}), {}", a[0], a[1], a[2])),
            "request__done" => ("%d %d %d %d %d", a.join(", ")),
            "tick" => ("", String::new()),
            "object" => {
                ("%d %s", format!("*(uint64_t *)copyin((uintptr_t){}, 8), copyinstr((uintptr_t){})", a[0], a[1]))
            }
            other => panic!("probe {other}"),
        };
        let sep = if vals.is_empty() { "" } else { ", " };
        script.push_str(&format!(
            "pid$target:{module}:main:{:x} {{ printf(\"{} {fmt}\\n\"{sep}{vals}); }}\n",
            n.location - main,
            n.name
        ));
    }
    let dir = exe.parent().unwrap();
    let d = dir.join("args.d");
    std::fs::write(&d, &script).unwrap();
    let out = run(&mut udtrace(&["-s".as_ref(), d.as_os_str(), "-c".as_ref(), exe.as_os_str()]));
    assert_eq!(out.status, 0, "{script}\n{}", out.stderr);
    let big = 1u64 << 40;
    let mut want = String::from(UNTRACED);
    for i in 0..3i64 {
        want.push_str(&format!("request__start {i} /index.html {}\n", -7 * i));
        want.push_str(&format!("request__done {} -3 {} {} 1\n", 200 + i, big + i as u64, i - 1));
    }
    want.push_str("tick \n");
    want.push_str(&format!("object {big} /index.html\n\n"));
    // The program's line comes first or among the firings' (its stdout is its own).
    let mut got: Vec<&str> = out.stdout.lines().collect();
    got.sort();
    let mut w: Vec<&str> = want.lines().collect();
    w.sort();
    assert_eq!(got, w, "{script}\n{}", out.stdout);
    let firings: Vec<&str> = out.stdout.lines().filter(|l| *l != UNTRACED.trim_end()).collect();
    let in_order: Vec<&str> = want.lines().filter(|l| *l != UNTRACED.trim_end()).collect();
    assert_eq!(firings, in_order, "firings in program order");
}

#[test]
fn program_built_with_the_header() {
    let dir = TempDir::new("sdt-build");
    make_header(dir.path());
    for (name, flags) in [("sdtapp", &["-O2"][..]), ("sdtapp0", &["-O0", "-std=c99", "-Wpedantic"][..])] {
        let exe = build(dir.path(), name, flags);
        let untraced = sh(&mut Command::new(&exe));
        assert_eq!(untraced, UNTRACED, "{name}: _ENABLED() is 0 untraced");
        let notes = check_notes(&exe);
        check_arguments(&exe, &notes);
    }
}

#[test]
fn cxx_and_shared_library() {
    // The same header in C++ (extern "C", no mangled semaphores) and in a shared
    // library: each object has its own semaphores (hidden), the notes point at them.
    let dir = TempDir::new("sdt-cxx");
    make_header(dir.path());
    let cc = dir.path().join("sdtapp.cc");
    std::fs::copy(fixtures_src().join("sdtapp.c"), &cc).unwrap();
    let exe = dir.path().join("sdtappxx");
    sh(Command::new("g++").args(["-O2", "-Wall", "-Werror", "-I"]).arg(dir.path()).arg("-o").arg(&exe).arg(&cc));
    assert_eq!(sh(&mut Command::new(&exe)), UNTRACED);
    check_notes(&exe);
    let so = dir.path().join("libsdtapp.so");
    sh(Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-Dmain=sdtapp_main", "-I"])
        .arg(dir.path())
        .arg("-o")
        .arg(&so)
        .arg(fixtures_src().join("sdtapp.c")));
    check_notes(&so);
    let dynsyms = sh(Command::new("nm").arg("-D").arg(&so));
    assert!(!dynsyms.contains("semaphore"), "semaphores are not exported: {dynsyms}");
}

#[test]
fn dash_g_object_links() {
    let dir = TempDir::new("sdt-link");
    make_header(dir.path());
    let o = dir.path().join("sdtapp_main.o");
    sh(Command::new("gcc")
        .args(["-c", "-O2", "-I"])
        .arg(dir.path())
        .arg("-o")
        .arg(&o)
        .arg(fixtures_src().join("sdtapp.c")));
    let before = std::fs::read(&o).unwrap();
    // As a DTrace build does it: -G over the provider and the program's objects, then
    // link them all.
    let d = fixtures_src().join("sdtapp.d");
    let prov = dir.path().join("prov.o");
    let out = run_args(&["-G".as_ref(), "-s".as_ref(), d.as_os_str(), "-o".as_ref(), prov.as_os_str(), o.as_os_str()]);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""));
    assert_eq!(std::fs::read(&o).unwrap(), before, "the program's object is left alone");
    let exe = dir.path().join("linked");
    sh(Command::new("gcc").arg("-o").arg(&exe).arg(&o).arg(&prov));
    assert_eq!(sh(&mut Command::new(&exe)), UNTRACED);
    check_notes(&exe);
    let stack = sh(Command::new("readelf").arg("-lW").arg(&exe));
    assert!(stack.lines().any(|l| l.contains("GNU_STACK") && l.contains("RW ")), "no executable stack: {stack}");
}

/// `-G` guesses the data model from the objects, as dtrace does: for 32-bit objects
/// (`gcc -m32`) it writes a 32-bit object that links with them, and objects of both
/// classes are refused in dtrace's words (DTrace's tst.badguess.sh, tst.guess32.sh).
/// Skipped where gcc cannot make 32-bit objects.
#[test]
fn dash_g_guesses_the_data_model() {
    let dir = TempDir::new("sdt-model");
    let d = dir.write("prov.d", "provider test_prov {\n\tprobe go();\n};\n");
    // No #include: a 32-bit compile needs no 32-bit libc headers.
    dir.write("f.c", "int f(void) { return 1; }\n");
    let m32 = Command::new("gcc").args(["-m32", "-c", "-o", "f32.o", "f.c"]).current_dir(dir.path()).status();
    if !m32.is_ok_and(|s| s.success()) {
        eprintln!("skipped: gcc -m32 cannot compile here");
        return;
    }
    sh(Command::new("gcc").args(["-c", "-o", "f64.o", "f.c"]).current_dir(dir.path()));
    let g = |objs: &[&str]| {
        let mut args = vec!["-G", "-s"];
        let d = d.to_str().unwrap();
        args.push(d);
        args.extend_from_slice(objs);
        run(udtrace(&args).current_dir(dir.path()))
    };
    let class = |o: &str| std::fs::read(dir.path().join(o)).unwrap()[4];
    let out = g(&["f32.o"]);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""));
    assert_eq!(class("prov.o"), 1, "ELFCLASS32");
    // The linker takes it with the 32-bit object (a relocatable link: no 32-bit libc needed).
    sh(Command::new("ld").args(["-m", "elf_i386", "-r", "-o", "both32.o", "f32.o", "prov.o"]).current_dir(dir.path()));
    let out = g(&["f64.o"]);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""));
    assert_eq!(class("prov.o"), 2, "ELFCLASS64");
    sh(Command::new("ld").args(["-r", "-o", "both64.o", "f64.o", "prov.o"]).current_dir(dir.path()));
    std::fs::remove_file(dir.path().join("prov.o")).unwrap();
    for objs in [["f32.o", "f64.o"], ["f64.o", "f32.o"]] {
        let out = g(&objs);
        assert_eq!(
            (out.status, out.stderr.as_str()),
            (1, "udtrace: can't mix 32-bit and 64-bit object files\n"),
            "{objs:?}"
        );
        assert!(!dir.path().join("prov.o").exists(), "{objs:?}: nothing written");
    }
}

/// dtrace's names: `-h -s x.d` writes `x.h`, `-G -s x.d` writes `x.o`, in the
/// current directory.
#[test]
fn default_output_names() {
    let dir = TempDir::new("sdt-names");
    let d = fixtures_src().join("sdtapp.d");
    for flag in ["-h", "-G"] {
        let out = run(udtrace(&[flag.as_ref(), "-s".as_ref(), d.as_os_str()]).current_dir(dir.path()));
        assert_eq!((out.status, out.stderr.as_str()), (0, ""), "{flag}");
    }
    let h = std::fs::read_to_string(dir.path().join("sdtapp.h")).unwrap();
    assert!(h.contains("#ifndef\t_SDTAPP_H\n"), "{h}");
    assert_eq!(&std::fs::read(dir.path().join("sdtapp.o")).unwrap()[..4], b"\x7fELF");
}

#[test]
fn messages() {
    let dir = TempDir::new("sdt-msgs");
    let case = |flags: &[&str], text: Option<&str>| {
        let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        if let Some(t) = text {
            args.push("-s".into());
            args.push(dir.write("p.d", t).display().to_string());
            args.push("-o".into());
            args.push(dir.path().join("p.h").display().to_string());
        }
        run(udtrace(&args).current_dir(dir.path()))
    };
    let out = case(&["-h"], None);
    assert_eq!(
        (out.status, out.stderr.as_str()),
        (2, "udtrace: -h requires one or more scripts or enabling options\n")
    );
    let out = case(&["-h", "-n", "BEGIN"], None);
    assert_eq!(
        (out.status, out.stderr.as_str()),
        (2, "udtrace: -h requires an output file if no scripts are specified\n")
    );
    let bad = [
        ("provider p1 { probe a(); };", "provider name may not end with a digit: p1"),
        ("provider p { probe a(); probe a(int); };", "probe redeclared: p:::a"),
        (
            "provider p { probe a(int); };\nprovider p { probe a(long); };",
            "probe p:::a output prototype argument #1 mismatch:",
        ),
        (
            "provider p { probe a(char *x) : (int x); };",
            "translator for p:::a output argument #1 from char * to int is not defined",
        ),
        ("provider p { probe a(foo_t); };", "syntax error near \"foo_t"),
        ("provider p { probe a(int, ...); };", "probe input prototype may not use a variable-length argument list"),
        ("provider p { probe a(int x, int x); };", "parameter is already declared in probe input prototype: x"),
        ("provider p { probe a(int x) : (int y); };", "parameter is not declared in probe output prototype: y"),
        ("provider p { probe a(int) };", "syntax error near \"}"),
        ("provider p { a(int); };", "syntax error near \"a"),
    ];
    for (text, msg) in bad {
        let out = case(&["-h"], Some(text));
        assert_eq!(out.status, 1, "{text}: {}", out.stderr);
        assert!(out.stderr.contains(msg), "{text}: {}", out.stderr);
        assert!(!dir.path().join("p.h").exists(), "{text}: no header written");
    }
    let out = case(&["-h"], Some("struct s { int a; };\nprovider p { probe a(struct s); };"));
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.contains("failed to create header file")
            && out.stderr.contains("probe p:a argument #1: struct s cannot be a probe argument"),
        "{}",
        out.stderr
    );
    // A translated argument with a translator, or of a compatible type, is accepted.
    let ok = "struct t { int v; };\ntranslator struct t < int x > { v = x; };\n\
              provider p { probe a(int x, char *s) : (struct t *x, string s); probe b(int y) : (long y); };";
    let out = case(&["-h"], Some(ok));
    assert_eq!((out.status, out.stderr.as_str()), (0, ""));
    // An output prototype may name an input twice (DTrace's usdt-tst-argmap-prov.d);
    // the macro takes the inputs.
    let out = case(&["-h"], Some("provider test_prov { probe place(int i, int j) : (int j, int i, int i, int j); };"));
    assert_eq!((out.status, out.stderr.as_str()), (0, ""));
    let h = std::fs::read_to_string(dir.path().join("p.h")).unwrap();
    assert!(h.contains("#define\tTEST_PROV_PLACE(arg0, arg1) \\\n"), "{h}");
    // A provider declared in a tracing script is accepted, as dtrace accepts it.
    let out = run_args(&["-qn", "provider p { probe a(int); }; BEGIN { exit(0); }"]);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""));
}

/// DTrace's own tests of the build (test/unittest/usdt/tst.header.sh, tst.execstack.sh,
/// tst.link-idempotence.sh, tst.linkunpriv.sh): `-h -s prov.d`, compile, `-G -s prov.d
/// test.o` (writing prov.o), link, twice, as an unprivileged user; the stack stays
/// non-executable and the object is not rewritten.
#[test]
fn dtrace_suite_build_steps() {
    let dir = TempDir::new("sdt-suite");
    // Writable by the unprivileged user udtrace runs as.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    dir.write(
        "prov.d",
        "provider test_prov {\n\tprobe zero();\n\tprobe one(uintptr_t);\n\tprobe u_nder(char *);\n\tprobe d__ash(char **);\n\tprobe go();\n};\n",
    );
    dir.write(
        "test.c",
        "#include \"prov.h\"\n\nint\nmain(int argc, char **argv)\n{\n\t(void)argc;\n\tTEST_PROV_ZERO();\n\tTEST_PROV_ONE(1);\n\tTEST_PROV_U_NDER(\"hi there\");\n\tTEST_PROV_D_ASH(argv);\n\tif (TEST_PROV_GO_ENABLED())\n\t\tTEST_PROV_GO();\n\treturn TEST_PROV_GO_ENABLED();\n}\n",
    );
    let udt = |args: &[&str]| {
        let mut c = unprivileged(util::bin());
        c.args(args).current_dir(dir.path());
        let out = run(&mut c);
        assert_eq!((out.status, out.stderr.as_str()), (0, ""), "udtrace {args:?}");
    };
    let cc = |args: &[&str]| sh(Command::new("gcc").args(["-Wall", "-Werror"]).args(args).current_dir(dir.path()));
    udt(&["-h", "-s", "prov.d"]);
    cc(&["-c", "test.c"]);
    udt(&["-G", "-s", "prov.d", "test.o"]);
    cc(&["-o", "test", "test.o", "prov.o"]);
    let exe = dir.path().join("test");
    let st = Command::new(&exe).status().unwrap();
    assert_eq!(st.code(), Some(0), "GO_ENABLED() is 0 untraced");
    let names: Vec<(String, String)> = notes(&exe).into_iter().map(|n| (n.provider, n.name)).collect();
    let want: Vec<(String, String)> =
        ["zero", "one", "u_nder", "d__ash", "go"].iter().map(|n| ("test_prov".to_string(), n.to_string())).collect();
    assert_eq!(names, want);
    let segments = sh(Command::new("readelf").arg("-lW").arg(&exe));
    assert!(segments.lines().any(|l| l.contains("GNU_STACK") && l.contains("RW ")), "{segments}");
    let before = std::fs::metadata(dir.path().join("test.o")).unwrap().modified().unwrap();
    udt(&["-G", "-s", "prov.d", "test.o"]);
    assert_eq!(std::fs::metadata(dir.path().join("test.o")).unwrap().modified().unwrap(), before);
}

/// The header's probes traced by name through the USDT provider (docs/usdt.md): every
/// argument as the program passed it, `copyinstr` of its string argument, and its
/// `_ENABLED()` semaphores raised while traced, on both backends.
#[test]
fn probes_from_the_header_fire_by_name() {
    let dir = TempDir::new("sdt-trace");
    make_header(dir.path());
    let exe = build(dir.path(), "sdtapp", &["-O2"]);
    let script = "sdtapp$target:::request-start { printf(\"start %d %s %d\\n\", arg0, copyinstr(arg1), arg2); } \
                  sdtapp$target:::request-done { printf(\"done %d %d %d %d %d\\n\", arg0, arg1, arg2, arg3, arg4); } \
                  sdtapp$target:::tick { printf(\"tick\\n\"); } \
                  sdtapp$target:::object { printf(\"object %s\\n\", copyinstr(arg1)); }";
    // With BPF (the default, -x uprobes) and without it: the user nobody, whose sites are
    // in-process and semaphores written by udtrace.
    for mode in [&[][..], &["-x", "uprobes"][..], &["nobody"][..]] {
        let nobody = mode == ["nobody"];
        let mut args: Vec<&str> = if nobody { Vec::new() } else { mode.to_vec() };
        args.extend(["-q", "-n", script, "-c", exe.to_str().unwrap()]);
        let out = if nobody {
            util::traced_unprivileged(&args)
        } else {
            let Some(out) = util::traced(&args) else { return };
            out
        };
        assert!(out.status.success(), "{mode:?}: {}", util::stderr(&out));
        let text = util::stdout(&out);
        let mut want = Vec::new();
        for i in 0..3i64 {
            want.push(format!("start {i} /index.html {}", -7 * i));
            want.push(format!("done {} -3 {} {} 1", 200 + i, (1i64 << 40) + i, i - 1));
        }
        want.extend(["tick".to_string(), "object /index.html".to_string()]);
        // Traced, both semaphores are raised: every _ENABLED() test saw 1.
        let program = "requests 3 enabled 3 start-enabled 1";
        let firings: Vec<&str> = text.lines().filter(|l| !l.is_empty() && *l != program).collect();
        assert_eq!(firings, want, "{mode:?}: {}", util::stderr(&out));
        assert!(text.lines().any(|l| l == program), "{mode:?}: {text}");
    }
}
