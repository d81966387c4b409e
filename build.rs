//! Builds the C/C++ test fixtures (tests/fixtures/) with the system compiler into
//! `$OUT_DIR/fixtures/`, exported to tests as `UDTRACE_FIXTURES`:
//!
//! - `libfixture.so`        shared library of our own, linked by every C fixture
//! - `fixture`              PIE executable, -O2 -g, rpath `$ORIGIN`
//! - `fixture-nopie`        the same as a non-PIE executable
//! - `fixture-stripped`     `fixture` with `strip --strip-all`: only .dynsym is left
//! - `fixture-split`        `fixture` without symbols; its debug file is in the private
//!   build-id tree `debug/.build-id/xx/yyyy.debug`
//! - `fixture-linked`       as `fixture-split`, found through `.gnu_debuglink` instead:
//!   `fixture-linked.debug` next to it
//! - `fixture-mini`         `fixture-stripped` plus `.gnu_debugdata` (xz'ed symbol table);
//!   only when `xz` is installed
//! - `fixture-cxx`          C++ executable
//! - `probes`               firing tests: strings, a call chain without frame pointers,
//!   threads, waiting (see its header)
//! - `probes-stripped`      `probes` with `strip --strip-all`: a PIE whose functions
//!   have only addresses
//! - `probes-dframe`        `probes` without asynchronous unwind tables: its functions are
//!   described in `.debug_frame` only (`.eh_frame` has the C runtime's), compressed by
//!   `gcc -gz=zlib`; `probes-dframe-plain` uncompressed
//! - `probes-dframe-zstd`   the same compressed with zstd, `probes-dframe-zgnu` as GNU's
//!   old `.zdebug_frame` (both by objcopy, where it can), and `probes-dframe-split`
//!   stripped, its symbols and `.debug_frame` in `probes-dframe-split.debug` next to it
//!   (zstd, found by debuglink)
//! - `libfollow.so`         follow-children fixtures' library: `target()`
//! - `forker`               daemon forking/spawning/vforking workers, some exec'ing
//!   `worker2` (see its header for the exact counts)
//! - `worker2`              image exec'd by forker's workers: `helper()`, `target()`
//! - `prefork`              daemon whose workers (some exec'ing `preworker`) wait on pipes
//!   until told to call `target()`: tracing a daemon's existing workers (see its header)
//! - `preworker`            image exec'd by prefork's every third worker: `helper()`, `target()`
//! - `usdt`                 USDT probes of every argument descriptor form, one behind a
//!   semaphore, fired N times, then in a forked child or after exec (tests/fixtures/usdt.c);
//!   no red zone, so that its stack arguments lie above the stack pointer
//! - `libusdtlib.so`        a USDT probe behind its own semaphore, dlopened by `usdt N dlopen`
//! - `plugin.so`            `plugin_fn()`, loaded only by `dlopener` through dlopen
//! - `dlopener`             dlopens `plugin.so` after a pause and calls `plugin_fn`
//! - `jobctl`               stops, continues and kills a child, checking each with waitpid
//! - `procexec`             proc provider: 6 children, 4 exec `execee` (one with a 200-byte
//!   argument), 2 exec a missing file (ENOENT); see its header for the counts and psargs
//! - `execee`               image exec'd by procexec's children: exits 0, does nothing else
//! - `lifetimes`            proc provider: N short (10 ms) and M long (100 ms) children at once
//! - `threads`              proc provider: T pthreads created and joined (lwp-create/start/exit)
//! - `hot`                  work at the firing: T threads × N calls of tiny functions, forked too
//! - `signals`              proc provider: signals sent, handled, discarded (SIG_IGN) and
//!   taken by sigwait, and a SIGTERM'd child "sigchild"; exact counts in its header
//! - `exits`                proc provider: children that exit(3), get SIGKILL, abort() with a
//!   core dump (in the directory given) and fault on NULL
//! - `errnos`               failing libc calls in two threads, printing errno after each
//! - `chaos`                threads, forks and execs with output that does not depend on
//!   timing: the chaos test stops udtrace at random moments while it runs
//! - `errnos-static`        the same, linked statically (only where libc.a is installed)
//! - `errnos-static-stripped` `errnos-static` with `strip --strip-all`: no symbol at all
//! - `coldstr`              strings on pages never touched before the probed call
//! - `changebuf`            buffers changed (or unmapped) right after the probed call,
//!   some on pages never touched before it
//! - `holder`               holds a process with ptrace, as a debugger does
//! - `mapholder`            memory maps names like files that are no objects: shared
//!   anonymous memory, /dev/zero, a System V segment, an executable memfd
//! - `busy`                 profile provider: threads spending 75% and 25% of their CPU
//!   time in two functions, reporting the CPU time used
//!
//! The tier of real programs (tests/real_*.rs) adds:
//! - `templates`            C++ function and class templates for several types, exceptions
//! - `altstack`             a SIGUSR1 handler on an 8 KiB sigaltstack with canaries around it
//! - `stackedges`           where stacks end: signal handlers on the same and on an
//!   alternate stack, a thread on a stack with an inaccessible page above it, deep
//!   recursion (see its header)
//! - `sigurg`               blocks SIGURG, dlopens `plugin.so`, execs `sh -c` to run itself
//!   again, calling `target()` of `libfollow.so`
//! - `shmem`                hundreds of MB of shared anonymous and /dev/zero memory
//! - `absloop`              calls libc's `abs()` in a loop, for a foreign uprobe to land on
//! - `firstargs`            functions whose first instruction writes an argument (or whose
//!   body is too short past it), for a foreign uprobe on their entries
//!
//! Kept to a few seconds: a handful of compiler runs, independent ones in parallel.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

fn main() {
    println!("cargo:rerun-if-changed=tests/fixtures");
    println!("cargo:rerun-if-changed=build.rs");
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("tests/fixtures");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("fixtures");
    if let Err(e) = build(&src, &out) {
        eprintln!("error: building the test fixtures in tests/fixtures failed: {e}");
        std::process::exit(1);
    }
    println!("cargo:rustc-env=UDTRACE_FIXTURES={}", out.display());
}

fn build(src: &Path, out: &Path) -> Result<(), String> {
    for tool in ["gcc", "g++", "strip", "objcopy"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Err(format!(
                "`{tool}` was not found; udtrace's tests need gcc, g++ and binutils \
                 (Debian: apt-get install build-essential)"
            ));
        }
    }
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out.join("debug")).map_err(|e| e.to_string())?;
    let s = |name: &str| src.join(name).display().to_string();
    let o = |name: &str| out.join(name).display().to_string();
    // -O2 so that gcc emits tail calls, jump tables and .cold parts; -g for real debug files.
    let cflags = ["-O2", "-g", "-Wall"];

    let lib = spawn(Command::new("gcc").args(cflags).args([
        "-fPIC",
        "-shared",
        "-o",
        &o("libfixture.so"),
        &s("libfixture.c"),
    ]))?;
    let cxx = spawn(Command::new("g++").args(cflags).args(["-o", &o("fixture-cxx"), &s("cxx.cpp")]))?;
    let follow_lib = spawn(Command::new("gcc").args(cflags).args([
        "-fPIC",
        "-shared",
        "-o",
        &o("libfollow.so"),
        &s("libfollow.c"),
    ]))?;
    let plugin =
        spawn(Command::new("gcc").args(cflags).args(["-fPIC", "-shared", "-o", &o("plugin.so"), &s("plugin.c")]))?;
    let dlopener =
        spawn(Command::new("gcc").args(cflags).args(["-pthread", "-o", &o("dlopener"), &s("dlopener.c"), "-ldl"]))?;
    wait(lib)?;
    wait(follow_lib)?;
    // Follow-children fixtures: linked with libfollow.so, found next to them.
    let follow_exe = |name: &str| {
        let mut c = Command::new("gcc");
        c.args(cflags)
            .args(["-o", &o(name), &s(&format!("{name}.c"))])
            .args(["-L", &out.display().to_string(), "-lfollow"])
            .arg("-Wl,-rpath,$ORIGIN");
        c
    };
    let forker = spawn(&mut follow_exe("forker"))?;
    let worker2 = spawn(&mut follow_exe("worker2"))?;
    let prefork = spawn(&mut follow_exe("prefork"))?;
    let preworker = spawn(&mut follow_exe("preworker"))?;
    let jobctl = spawn(&mut follow_exe("jobctl"))?;
    let mut sigurg_cmd = follow_exe("sigurg");
    let sigurg = spawn(sigurg_cmd.arg("-ldl"))?;
    // proc provider fixtures: plain C, no library of ours.
    let plain = |name: &str, extra: &[&str]| {
        let mut c = Command::new("gcc");
        c.args(cflags).args(extra).args(["-o", &o(name), &s(&format!("{name}.c"))]);
        c
    };
    let proc_fixtures = [
        spawn(&mut plain("procexec", &[]))?,
        spawn(&mut plain("execee", &[]))?,
        spawn(&mut plain("lifetimes", &[]))?,
        spawn(&mut plain("threads", &["-pthread"]))?,
        spawn(&mut plain("hot", &["-pthread"]))?,
        spawn(&mut plain("signals", &[]))?,
        spawn(&mut plain("exits", &[]))?,
        spawn(&mut plain("errnos", &["-pthread"]))?,
        spawn(&mut plain("chaos", &["-pthread"]))?,
        spawn(&mut plain("busy", &["-pthread"]))?,
        spawn(&mut plain("coldstr", &[]))?,
        spawn(&mut plain("changebuf", &[]))?,
        spawn(&mut plain("holder", &[]))?,
        spawn(&mut plain("altstack", &[]))?,
        spawn(&mut plain("stackedges", &["-pthread"]))?,
        spawn(&mut plain("shmem", &[]))?,
        spawn(&mut plain("absloop", &[]))?,
        spawn(&mut plain("firstargs", &[]))?,
        spawn(&mut plain("mapholder", &[]))?,
        spawn(&mut plain("usdt", &["-mno-red-zone", "-fno-omit-frame-pointer", "-I", &src.display().to_string()]))?,
        spawn(Command::new("gcc").args(cflags).args([
            "-fPIC",
            "-shared",
            "-I",
            &src.display().to_string(),
            "-o",
            &o("libusdtlib.so"),
            &s("usdtlib.c"),
        ]))?,
    ];
    let templates = spawn(Command::new("g++").args(cflags).args(["-o", &o("templates"), &s("templates.cpp")]))?;
    let exe = |name: &str, pie: &[&str]| {
        let mut c = Command::new("gcc");
        c.args(cflags)
            .args(pie)
            .args(["-I", &src.display().to_string()])
            .args(["-o", &o(name), &s("fixture.c")])
            .args(["-L", &out.display().to_string(), "-lfixture"])
            .arg("-Wl,-rpath,$ORIGIN")
            .arg("-Wl,--build-id")
            // A few functions in .dynsym, so that stripped copies still list some.
            .arg("-Wl,--export-dynamic-symbol=target,--export-dynamic-symbol=tail");
        c
    };
    // Firing tests: -fomit-frame-pointer so ustack() must unwind from .eh_frame.
    let probes = spawn(Command::new("gcc").args(cflags).args([
        "-fomit-frame-pointer",
        "-pthread",
        "-o",
        &o("probes"),
        &s("probes.c"),
    ]))?;
    let dframe = spawn(Command::new("gcc").args(cflags).args([
        "-fomit-frame-pointer",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
        "-pthread",
        "-o",
        &o("probes-dframe-plain"),
        &s("probes.c"),
    ]))?;
    let dframe_zlib = spawn(Command::new("gcc").args(cflags).args([
        "-fomit-frame-pointer",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
        "-gz=zlib",
        "-pthread",
        "-o",
        &o("probes-dframe"),
        &s("probes.c"),
    ]))?;
    let pie = spawn(&mut exe("fixture", &["-fPIE", "-pie"]))?;
    let nopie = spawn(&mut exe("fixture-nopie", &["-fno-PIE", "-no-pie"]))?;
    wait(pie)?;
    wait(nopie)?;
    wait(cxx)?;
    wait(probes)?;
    wait(dframe)?;
    wait(dframe_zlib)?;
    wait(forker)?;
    wait(worker2)?;
    wait(prefork)?;
    wait(preworker)?;
    wait(jobctl)?;
    wait(sigurg)?;
    wait(templates)?;
    wait(plugin)?;
    wait(dlopener)?;
    for f in proc_fixtures {
        wait(f)?;
    }

    run(Command::new("strip").args(["--strip-all", "-o", &o("fixture-stripped"), &o("fixture")]))?;
    run(Command::new("strip").args(["--strip-all", "-o", &o("probes-stripped"), &o("probes")]))?;

    // Separate debug info by build-id, in a private tree (tests pass it as debug root).
    let debug = o("fixture.debug");
    run(Command::new("objcopy").args(["--only-keep-debug", &o("fixture"), &debug]))?;
    let id = build_id(&o("fixture"))?;
    let dir = out.join("debug/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::copy(&debug, dir.join(format!("{}.debug", &id[2..]))).map_err(|e| e.to_string())?;
    let strip_syms = ["--strip-debug", "--strip-unneeded", "-o"];
    run(Command::new("strip").args(strip_syms).args([&o("fixture-split"), &o("fixture")]))?;

    // Separate debug info by debuglink, next to the binary (objcopy wants it there to
    // compute the CRC, and records only the base name).
    std::fs::copy(&debug, out.join("fixture-linked.debug")).map_err(|e| e.to_string())?;
    run(Command::new("strip").args(strip_syms).args(["fixture-linked", "fixture"]).current_dir(out))?;
    run(Command::new("objcopy").args(["--add-gnu-debuglink=fixture-linked.debug", "fixture-linked"]).current_dir(out))?;

    compressed_debug_frames(out)?;

    // A static program has errno at a constant offset from the thread pointer.
    let static_errnos = Command::new("gcc")
        .args(cflags)
        .args(["-static", "-pthread", "-o", &o("errnos-static"), &s("errnos.c")])
        .output();
    if static_errnos.is_ok_and(|o| o.status.success()) {
        let stripped = ["--strip-all", "-o", &o("errnos-static-stripped"), &o("errnos-static")];
        run(Command::new("strip").args(stripped))?;
    } else {
        println!("cargo:warning=no static libc (libc.a): errnos-static not built");
    }

    // Minidebuginfo as Fedora makes it: the symbol table of the debug file, xz'ed, in
    // .gnu_debugdata of a fully stripped binary.
    if Command::new("xz").arg("--version").output().is_ok() {
        let mini = o("mini.elf");
        run(Command::new("objcopy").args(["--strip-debug", &debug, &mini]))?;
        run(Command::new("xz").args(["-f", "-k", &mini]))?;
        run(Command::new("objcopy").args([
            &format!("--add-section=.gnu_debugdata={mini}.xz"),
            &o("fixture-stripped"),
            &o("fixture-mini"),
        ]))?;
    } else {
        println!("cargo:warning=xz not installed: fixture-mini (.gnu_debugdata) not built");
    }
    Ok(())
}

/// The copies of `probes-dframe-plain` compressed otherwise than gcc's `-gz=zlib`: zstd
/// and `.zdebug_*`, where objcopy still (or already) can.
fn compressed_debug_frames(out: &Path) -> Result<(), String> {
    let objcopy =
        |args: &[&str]| Command::new("objcopy").args(args).current_dir(out).status().is_ok_and(|s| s.success());
    for (how, name) in [("zstd", "probes-dframe-zstd"), ("zlib-gnu", "probes-dframe-zgnu")] {
        if !objcopy(&[&format!("--compress-debug-sections={how}"), "probes-dframe-plain", name]) {
            println!("cargo:warning=objcopy cannot compress with {how}: {name} not built");
        }
    }
    // objcopy wants the debug file next to the binary to compute the debuglink's CRC.
    let split =
        ["--only-keep-debug", "--compress-debug-sections=zstd", "probes-dframe-plain", "probes-dframe-split.debug"];
    if objcopy(&split) {
        run(Command::new("strip")
            .args(["--strip-all", "-o", "probes-dframe-split", "probes-dframe-plain"])
            .current_dir(out))?;
        run(Command::new("objcopy")
            .args(["--add-gnu-debuglink=probes-dframe-split.debug", "probes-dframe-split"])
            .current_dir(out))?;
    } else {
        println!("cargo:warning=objcopy cannot compress with zstd: probes-dframe-split not built");
    }
    Ok(())
}

fn spawn(c: &mut Command) -> Result<(Child, String), String> {
    let desc = format!("{c:?}");
    let child = c.spawn().map_err(|e| format!("{desc}: {e}"))?;
    Ok((child, desc))
}

fn wait((mut child, desc): (Child, String)) -> Result<(), String> {
    let st = child.wait().map_err(|e| format!("{desc}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{desc} failed: {st}"))
    }
}

fn run(c: &mut Command) -> Result<(), String> {
    wait(spawn(c)?)
}

/// The GNU build-id of an object, in hex, from `readelf -n` (binutils, already required).
fn build_id(path: &str) -> Result<String, String> {
    let out = Command::new("readelf").args(["-n", path]).output().map_err(|e| format!("readelf: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .filter(|id| id.len() > 2)
        .ok_or_else(|| format!("{path} has no build-id (gcc without --build-id?)"))
}
