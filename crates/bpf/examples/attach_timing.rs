//! Times arming 1,000 and 10,000 uprobe sites with one uprobe_multi link against one
//! perf event + perf link per site. Run as root:
//!
//!     cargo run --release -p udtrace-bpf --example attach_timing [FILE]
//!
//! Sites are function entries of FILE (default: the toolchain's librustc_driver, which
//! has far more than 10,000 functions). A `rustc -` process waiting on its standard
//! input keeps that library mapped, so the kernel really writes breakpoints into a
//! live process, as when udtrace arms a traced program.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use udtrace_bpf::codegen::{uprobe_program, ProbeMaps};
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::uprobe::{self, Site};
use udtrace_record::pid::RecordPlan;

fn rustc_driver() -> PathBuf {
    let out = Command::new("rustc").args(["--print", "sysroot"]).output().expect("rustc --print sysroot");
    let lib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("lib");
    std::fs::read_dir(&lib)
        .expect("sysroot lib")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("librustc_driver") && n.ends_with(".so"))
        })
        .expect("librustc_driver in the sysroot")
}

/// File offsets of the entries of functions, deduplicated.
fn function_offsets(path: &PathBuf) -> Vec<u64> {
    let data = std::fs::read(path).expect("read file");
    let file = object::File::parse(&*data).expect("parse ELF");
    let segs: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), size, off)
        })
        .collect();
    let mut set = BTreeSet::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.size() == 0 || sym.is_undefined() {
            continue;
        }
        let a = sym.address();
        if let Some(&(va, _, off)) = segs.iter().find(|&&(va, size, _)| a >= va && a < va + size) {
            set.insert(a - va + off);
        }
    }
    set.into_iter().collect()
}

/// Sites the kernel refuses one by one, found by halving (a refused site fails a whole
/// uprobe_multi link with ENOTSUPP).
fn refused(prog: &Program, path: &PathBuf, sites: &[Site]) -> Vec<Site> {
    if uprobe::attach_multi(prog, path, sites, false).is_ok() {
        return vec![];
    }
    if sites.len() == 1 {
        return sites.to_vec();
    }
    let (a, b) = sites.split_at(sites.len() / 2);
    let mut r = refused(prog, path, a);
    r.extend(refused(prog, path, b));
    r
}

fn main() {
    let path = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(rustc_driver);
    let offsets = function_offsets(&path);
    println!("{}: {} function entries", path.display(), offsets.len());
    let mut holder = (std::env::args().len() == 1).then(|| {
        Command::new("rustc")
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rustc -")
    });
    std::thread::sleep(std::time::Duration::from_millis(300));

    let maps = ProbeMaps::create(1 << 20, 64).expect("maps");
    let plan = RecordPlan { regs: true, ..RecordPlan::default() };
    let insns = uprobe_program(&plan, &maps).expect("codegen");
    let multi = Program::load(ProgramKind::UprobeMulti, "timing_multi", &insns).expect("load");
    let single = Program::load(ProgramKind::Uprobe, "timing_perf", &insns).expect("load");
    let limit = uprobe::raise_fd_limit().expect("fd limit");

    let mut usable = offsets.clone();
    for n in [1_000usize, 10_000] {
        if n > usable.len() {
            println!("only {} sites available, skipping {n}", usable.len());
            continue;
        }
        let mut sites: Vec<Site> =
            usable[..n].iter().enumerate().map(|(i, &offset)| Site { offset, cookie: i as u64, ref_ctr: 0 }).collect();
        let bad = refused(&multi, &path, &sites);
        if !bad.is_empty() {
            println!(
                "refused by the kernel (ENOTSUPP), left out: {:x?}",
                bad.iter().map(|s| s.offset).collect::<Vec<_>>()
            );
            usable.retain(|o| !bad.iter().any(|b| b.offset == *o));
            sites = usable[..n]
                .iter()
                .enumerate()
                .map(|(i, &offset)| Site { offset, cookie: i as u64, ref_ctr: 0 })
                .collect();
        }
        let t = Instant::now();
        let link = uprobe::attach_multi(&multi, &path, &sites, false).expect("uprobe_multi");
        let armed = t.elapsed();
        let t = Instant::now();
        drop(link);
        println!("uprobe_multi {n:>6} sites: attach {:>9.2?}  detach {:>9.2?}", armed, t.elapsed());
    }

    // Perf uprobes detach one RCU grace period at a time (serialised in the kernel), so
    // only small sets are detached here; larger ones are attached and timed, then left
    // to the kernel at exit would take minutes, so they are not run by default.
    let perf_n: usize = std::env::var("PERF_SITES").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let perf_detach_n = perf_n.min(100);
    if perf_n as u64 + 64 > limit || perf_n > usable.len() {
        println!("perf: {perf_n} sites cannot be opened (open-file limit {limit})");
    } else {
        let sites: Vec<Site> = usable[..perf_n]
            .iter()
            .enumerate()
            .map(|(i, &offset)| Site { offset, cookie: i as u64, ref_ctr: 0 })
            .collect();
        let t = Instant::now();
        let links = uprobe::attach_perf(&single, &path, &sites).expect("perf uprobes");
        println!("perf event   {perf_n:>6} sites: attach {:>9.2?}", t.elapsed());
        links.close_in_parallel(16);
        let sites = &sites[..perf_detach_n];
        let links = uprobe::attach_perf(&single, &path, sites).expect("perf uprobes");
        let t = Instant::now();
        links.close_in_parallel(16);
        println!("perf event   {perf_detach_n:>6} sites: detach {:>9.2?} (16 threads)", t.elapsed());
    }
    if let Some(child) = holder.as_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
}
