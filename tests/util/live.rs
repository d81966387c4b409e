//! What a tracer may have left in live processes once it has gone: threads left
//! stopped, and code that differs from its file (a patch or breakpoint not taken out).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// `root` and its descendants, as /proc shows them now (parents before children).
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some(ppid) = stat_fields(&format!("/proc/{pid}/stat")).and_then(|f| f.get(1)?.parse().ok()) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        tree.extend(children.get(&tree[i]).into_iter().flatten());
        i += 1;
    }
    tree
}

/// The fields of a `stat` file after the command name (the state is index 0).
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(path).ok()?;
    let close = s.rfind(')')?;
    Some(s[close + 1..].split_whitespace().map(str::to_string).collect())
}

/// The threads of `pids` in a stopped state (`T`: job control, `t`: a ptrace stop),
/// each as "pid P thread T state S (comm)".
pub fn stopped_threads(pids: &[u32]) -> Vec<String> {
    let mut found = Vec::new();
    for &pid in pids {
        for entry in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let tid = entry.file_name().to_string_lossy().into_owned();
            let path = format!("/proc/{pid}/task/{tid}/stat");
            let Some(state) = stat_fields(&path).and_then(|f| f.first().cloned()) else { continue };
            if state == "T" || state == "t" {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
                // Who holds it, if a tracer does: what a failure needs to be explained.
                let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap_or_default();
                let tracer = status.lines().find_map(|l| l.strip_prefix("TracerPid:")).map_or("?", str::trim);
                let by = match tracer {
                    "0" | "?" => String::new(),
                    t => {
                        let cmd = std::fs::read(format!("/proc/{t}/cmdline")).unwrap_or_default();
                        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                        format!(", traced by {t}: {}", cmd.trim())
                    }
                };
                found.push(format!("pid {pid} thread {tid} state {state} ({}){by}", comm.trim()));
            }
        }
    }
    found
}

/// An executable file-backed mapping of `/proc/PID/maps`.
struct CodeMapping {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

fn code_mappings(maps: &str) -> Vec<CodeMapping> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(offset), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or("").trim_start();
        // Only code a file holds: not [vdso], anonymous or memfd mappings (udtrace's
        // trampolines and guard), nor a file replaced since it was mapped.
        if !perms.contains('x') || inode == "0" || !path.starts_with('/') || path.ends_with(" (deleted)") {
            continue;
        }
        let (Some((start, end)), Ok(offset)) = (range.split_once('-'), u64::from_str_radix(offset, 16)) else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) else { continue };
        out.push(CodeMapping { start, end, offset, path: path.to_string() });
    }
    out
}

/// Where process `pid`'s code differs from its files: for every executable file-backed
/// mapping, the bytes in `/proc/PID/mem` against the file's at the mapping's offset
/// (code is never relocated, so any difference is a patch or breakpoint left behind).
/// One entry per run of differing bytes: process, file, file offset, both bytes. A
/// process that is gone, or that execs meanwhile, has nothing to report.
pub fn code_differences(pid: u32) -> Vec<String> {
    let Some((maps, mem)) = memory(pid) else { return Vec::new() };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    let mut found = Vec::new();
    for m in code_mappings(&maps) {
        let file = files.entry(m.path.clone()).or_insert_with(|| std::fs::read(&m.path).unwrap_or_default());
        // Past the file's end a mapping's page is zeros: compare what the file has.
        let from = (m.offset as usize).min(file.len());
        let len = ((m.end - m.start) as usize).min(file.len() - from);
        let expected = &file[from..from + len];
        let mut actual = vec![0u8; len];
        if mem.read_exact_at(&mut actual, m.start).is_err() {
            continue; // Gone meanwhile.
        }
        let mut i = 0;
        while i < len {
            if actual[i] == expected[i] {
                i += 1;
                continue;
            }
            let run = i;
            while i < len && actual[i] != expected[i] {
                i += 1;
            }
            found.push(format!(
                "pid {pid} ({}): {} at file offset {:#x}: {} in memory, {} in the file",
                comm.trim(),
                m.path,
                from + run,
                hex(&actual[run..i]),
                hex(&expected[run..i])
            ));
        }
    }
    found
}

/// The maps of process `pid` and its memory, open on the same image.
fn memory(pid: u32) -> Option<(String, File)> {
    // Both files are bound to the memory the process has when they are opened: maps
    // read before and after opening mem tell whether an exec came in between.
    for _ in 0..5 {
        let before = read_all(File::open(format!("/proc/{pid}/maps")).ok()?);
        let mem = File::open(format!("/proc/{pid}/mem")).ok()?;
        let after = read_all(File::open(format!("/proc/{pid}/maps")).ok()?);
        if before == after {
            return Some((before, mem));
        }
    }
    None
}

fn read_all(mut f: File) -> String {
    let mut s = String::new();
    let _ = std::io::Read::read_to_string(&mut f, &mut s);
    s
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

/// The children of udtrace `pid`: with `-p`, only its undertaker.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).collect::<Vec<_>>())
        .collect()
}

/// Waits (at most 10 s) until the processes `pids` have ended (a zombie has).
pub fn wait_gone(pids: &[u32]) {
    let runs = |p: &u32| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pids.iter().any(runs) {
        assert!(std::time::Instant::now() < deadline, "the undertaker {pids:?} did not end within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}
