//! What /proc says about a live process: its mappings grouped into loaded objects,
//! its memory, its auxiliary vector, its name and parent.

use std::io;
use std::path::{Path, PathBuf};

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use udtrace_object::elf::ElfInfo;

/// One line of /proc/<pid>/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub offset: u64,
    pub inode: u64,
    /// The file or pseudo name (`[vdso]`, `[heap]`); `None` for anonymous memory.
    pub path: Option<String>,
}

/// Parses the text of /proc/<pid>/maps; malformed lines are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_map_line).collect()
}

fn parse_map_line(line: &str) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.as_bytes();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().map(str::trim_start).filter(|p| !p.is_empty()).map(String::from);
    let (s, e) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        read: perms.first() == Some(&b'r'),
        write: perms.get(1) == Some(&b'w'),
        exec: perms.get(2) == Some(&b'x'),
        offset,
        inode,
        path,
    })
}

/// A file mapped into a process (an executable, a shared library, the vDSO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedObject {
    /// The path as the process sees it (maps' text, without ` (deleted)`).
    pub path: String,
    pub is_main: bool,
    /// The vDSO and other pseudo objects are listed but never probed.
    pub is_vdso: bool,
    /// Maps says ` (deleted)`: the file was removed or replaced (an upgraded library)
    /// since it was mapped, and its path names another file or none. It is read, if
    /// at all, through `/proc/PID/map_files/` ([`object_file`]).
    pub deleted: bool,
    pub mappings: Vec<Mapping>,
}

/// Groups file-backed mappings into objects, in address order of first appearance.
/// `exe` is the main executable's path (from /proc/<pid>/exe).
///
/// Only files are objects: not `[heap]`, `[anon:…]`, `anon_inode:…` or `socket:…`,
/// nor a memfd (`/memfd:… (deleted)`). A deleted file is one only where it is mapped
/// executable: shared anonymous memory (`/dev/zero (deleted)`) and System V segments
/// (`/SYSV… (deleted)`) show as deleted files too, and may be gigabytes.
pub fn loaded_objects(maps: &[Mapping], exe: &str) -> Vec<LoadedObject> {
    let mut out: Vec<LoadedObject> = Vec::new();
    for m in maps {
        let Some(raw) = &m.path else { continue };
        let (path, deleted) = match raw.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (raw.as_str(), false),
        };
        let is_vdso = path == "[vdso]";
        if !is_vdso && (!path.starts_with('/') || path.starts_with("/memfd:")) {
            continue;
        }
        match out.iter_mut().find(|o| o.path == path && o.deleted == deleted) {
            Some(o) => o.mappings.push(m.clone()),
            None => out.push(LoadedObject {
                path: path.to_string(),
                is_main: path == exe,
                is_vdso,
                deleted,
                mappings: vec![m.clone()],
            }),
        }
    }
    out.retain(|o| !o.deleted || o.mappings.iter().any(|m| m.exec));
    out
}

impl LoadedObject {
    /// The load bias: what to add to the file's virtual addresses to get the process's.
    /// Found from a mapping whose file offset lies in one of the ELF's load segments.
    pub fn bias(&self, info: &ElfInfo) -> Option<u64> {
        for m in &self.mappings {
            for s in &info.segments {
                let seg_page = s.offset & !0xfff;
                // Saturating: the segment's numbers are the object file's, which may lie.
                if m.offset >= seg_page && m.offset < s.offset.saturating_add(s.filesz.max(1)) {
                    // The vaddr that this mapping's first byte has in the file.
                    let vaddr = s.vaddr.wrapping_add(m.offset).wrapping_sub(s.offset);
                    return Some(m.start.wrapping_sub(vaddr));
                }
            }
        }
        None
    }

    /// Whether a process address lies in this object's executable mappings.
    pub fn contains_code(&self, addr: u64) -> bool {
        self.mappings.iter().any(|m| m.exec && m.start <= addr && addr < m.end)
    }
}

pub fn read_maps(pid: i32) -> io::Result<Vec<Mapping>> {
    Ok(parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?))
}

/// The objects a live process has mapped now.
pub fn objects_of(pid: i32) -> io::Result<Vec<LoadedObject>> {
    Ok(loaded_objects(&read_maps(pid)?, &exe_path(pid)?))
}

/// Where udtrace reads object `obj` of process `pid`: its path (through the process's
/// root), or, for a deleted file, `/proc/PID/map_files/START-END` of one of its
/// mappings, the file as it was mapped (opening it takes CAP_SYS_ADMIN, or
/// CAP_CHECKPOINT_RESTORE).
pub fn object_file(pid: i32, obj: &LoadedObject) -> PathBuf {
    match obj.mappings.first().filter(|_| obj.deleted) {
        Some(m) => PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)),
        None => host_path(pid, &obj.path),
    }
}

/// What names object `obj` of process `pid` among every process's objects, for keeping
/// what was read of it once: its path (through the process's root), or for a deleted
/// file, whose path names another file and whose map_files path another process's
/// mapping, its path and inode.
pub fn object_key(pid: i32, obj: &LoadedObject) -> PathBuf {
    match obj.mappings.first().filter(|_| obj.deleted) {
        Some(m) => PathBuf::from(format!("{} (deleted, inode {})", obj.path, m.inode)),
        None => host_path(pid, &obj.path),
    }
}

/// The executable's path as maps shows it.
pub fn exe_path(pid: i32) -> io::Result<String> {
    let p = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    Ok(parse_exe_link(&p.to_string_lossy()))
}

/// The target of /proc/<pid>/exe as maps spells the path: without ` (deleted)`.
pub fn parse_exe_link(link: &str) -> String {
    link.strip_suffix(" (deleted)").unwrap_or(link).to_string()
}

/// A path of the target's as udtrace can open it, also across mount namespaces.
pub fn host_path(pid: i32, path: &str) -> PathBuf {
    // The plain path when the process sees the same root as udtrace: then every
    // process names a file the same way (one key for its symbols and probes).
    let root = format!("/proc/{pid}/root");
    if same_file(Path::new(&root), Path::new("/")) {
        return PathBuf::from(path);
    }
    let through_root = PathBuf::from(format!("{root}{path}"));
    if through_root.exists() {
        through_root
    } else {
        PathBuf::from(path)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Every process on the machine (as /proc lists them now).
pub fn all_pids() -> io::Result<Vec<i32>> {
    Ok(std::fs::read_dir("/proc")?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .collect())
}

/// Whether any process for which `skip` says false has `path` mapped (as its maps
/// name it). Reads every process's maps: for deciding once per file.
pub fn mapped_by_any(path: &str, skip: impl Fn(i32) -> bool) -> bool {
    let Ok(pids) = all_pids() else { return true };
    for pid in pids {
        if skip(pid) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        if maps_mention(&text, path) {
            return true;
        }
    }
    false
}

/// Whether some line of a maps text ends with ` <path>`.
pub fn maps_mention(text: &str, path: &str) -> bool {
    text.lines().any(|l| l.ends_with(path) && l.len() > path.len() && l.as_bytes()[l.len() - path.len() - 1] == b' ')
}

/// Reads target memory without stopping it.
pub fn read_memory(pid: i32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let remote = [RemoteIoVec { base: addr as usize, len }];
    let n =
        process_vm_readv(Pid::from_raw(pid), &mut [io::IoSliceMut::new(&mut buf)], &remote).map_err(io::Error::from)?;
    buf.truncate(n);
    Ok(buf)
}

/// What a process that has ended held at `addr` (up to `len` bytes, not past its
/// mapping), read from the file `objects` say was mapped there: for a firing whose
/// string the kernel could not read at the firing (the page was not resident, which
/// BPF cannot fault in) and whose process is gone before the consumer could read it. A
/// page that was not resident was never written, so it held the file's bytes: always
/// for a read-only mapping, and for a private writable one unless swap is on (a
/// written page swapped out is not resident either; then None). None too when the
/// file at that path is no longer the one mapped (another inode).
pub fn read_file_backed(objects: &[LoadedObject], addr: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let (obj, m) = objects
        .iter()
        .filter(|o| !o.deleted && !o.is_vdso)
        .find_map(|o| o.mappings.iter().find(|m| m.read && (m.start..m.end).contains(&addr)).map(|m| (o, m)))?;
    if m.write && swap_on() {
        return None;
    }
    let file = std::fs::File::open(&obj.path).ok()?;
    if file.metadata().ok()?.ino() != m.inode {
        return None;
    }
    let mut buf = vec![0u8; len.min((m.end - addr) as usize)];
    let n = file.read_at(&mut buf, m.offset + (addr - m.start)).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Whether any swap space is in use (`/proc/swaps` lists more than its header).
fn swap_on() -> bool {
    std::fs::read_to_string("/proc/swaps").map_or(true, |s| s.lines().count() > 1)
}

/// The auxiliary vector: (type, value) pairs.
pub fn auxv(pid: i32) -> io::Result<Vec<(u64, u64)>> {
    Ok(parse_auxv(&std::fs::read(format!("/proc/{pid}/auxv"))?))
}

/// The (type, value) pairs of an auxv image, up to `AT_NULL`; a partial last pair is
/// ignored.
pub fn parse_auxv(raw: &[u8]) -> Vec<(u64, u64)> {
    raw.chunks_exact(16)
        .map(|c| {
            let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            (word(&c[..8]), word(&c[8..]))
        })
        .take_while(|&(t, _)| t != 0)
        .collect()
}

pub const AT_ENTRY: u64 = 9;
/// The dynamic loader's base address (0 or absent for a static program).
pub const AT_BASE: u64 = 7;
/// The vDSO's base address.
pub const AT_SYSINFO_EHDR: u64 = 33;

/// The value of `pid`'s auxiliary vector entry `tag`, when it has one that is not 0.
pub fn auxv_value(pid: i32, tag: u64) -> Option<u64> {
    auxv(pid).ok()?.into_iter().find(|&(t, _)| t == tag).map(|(_, v)| v).filter(|&v| v != 0)
}

/// `pid`'s dynamic loader among its `objects`: the one mapped at AT_BASE (a statically
/// linked program has none).
pub fn loader_of(pid: i32, objects: &[LoadedObject]) -> Option<&LoadedObject> {
    let base = auxv_value(pid, AT_BASE)?;
    objects.iter().find(|o| o.mappings.iter().any(|m| m.start == base))
}

/// `comm` and parent pid from /proc/<pid>/stat.
pub fn stat(pid: i32) -> io::Result<(String, i32)> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat"))?)
}

/// `comm` and parent pid from the text of a stat file (0 when the parent is unreadable).
pub fn parse_stat(s: &str) -> io::Result<(String, i32)> {
    let (comm, rest) = parse_task_stat(s)?;
    let ppid = rest.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    Ok((comm, ppid))
}

/// A thread's `stat` line: its comm and the fields after it (field 3, the state, is
/// index 0).
pub fn task_stat(pid: i32, tid: i32) -> io::Result<(String, Vec<String>)> {
    parse_task_stat(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))?)
}

/// The comm and the fields after it of a stat line. The comm is whatever lies between
/// the first `(` and the last `)`: it may hold parentheses and spaces itself.
pub fn parse_task_stat(s: &str) -> io::Result<(String, Vec<String>)> {
    let open = s.find('(').ok_or_else(|| io::Error::other("bad stat"))?;
    let close = s.rfind(')').filter(|&c| c > open).ok_or_else(|| io::Error::other("bad stat"))?;
    Ok((s[open + 1..close].to_string(), s[close + 1..].split_whitespace().map(str::to_string).collect()))
}

/// The numbers of a `status` line (`Uid:` gives real, effective, saved, fs).
pub fn status_numbers(pid: i32, name: &str) -> Option<Vec<u64>> {
    parse_status_numbers(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?, name)
}

/// The numbers of the first line of a status text that starts with `name`.
pub fn parse_status_numbers(text: &str, name: &str) -> Option<Vec<u64>> {
    let line = text.lines().find_map(|l| l.strip_prefix(name))?;
    Some(line.split_whitespace().filter_map(|v| v.parse().ok()).collect())
}

/// The signals pending for thread `tid` alone (`SigPnd`, bit n-1 for signal n).
pub fn thread_pending_signals(tid: i32) -> Option<u64> {
    status_signals(tid, "SigPnd:")
}

/// A signal set of a `status` line (`SigPnd:`, `SigIgn:`, …; bit n-1 for signal n).
pub fn status_signals(pid: i32, name: &str) -> Option<u64> {
    parse_status_signals(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?, name)
}

/// The `SigPnd` mask of a status text.
pub fn parse_pending_signals(text: &str) -> Option<u64> {
    parse_status_signals(text, "SigPnd:")
}

/// The signal set of the status text's line `name`.
pub fn parse_status_signals(text: &str, name: &str) -> Option<u64> {
    let hex = text.lines().find_map(|l| l.strip_prefix(name))?.trim();
    u64::from_str_radix(hex, 16).ok()
}

/// The process's tracer, when one holds it with ptrace: its pid and name (`TracerPid`).
pub fn tracer(pid: i32) -> Option<(i32, String)> {
    let t = tracer_pid(pid)?;
    Some((t, stat(t).map_or_else(|_| "?".to_string(), |(comm, _)| comm)))
}

/// The pid of the process's tracer, when one holds it with ptrace (`TracerPid`).
pub fn tracer_pid(pid: i32) -> Option<i32> {
    i32::try_from(*status_numbers(pid, "TracerPid:")?.first()?).ok().filter(|&t| t != 0)
}

/// Whether another tracer changed the code of `pid` at `file_off` of the open file
/// `f` (mapped as `maps` lists it): a live byte of the instruction there that is
/// neither the file's nor a leading `int3` (a uprobe's, which another uprobe at the
/// same place shares).
/// `None` when the offset is not mapped executable or a read fails.
pub fn code_changed(pid: i32, maps: &[Mapping], f: &std::fs::File, file_off: u64) -> Option<bool> {
    code_change(pid, maps, f, file_off).map(|(_, changed)| changed)
}

/// [`code_changed`], with the instruction's address in `pid`.
pub fn code_change(pid: i32, maps: &[Mapping], f: &std::fs::File, file_off: u64) -> Option<(u64, bool)> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let inode = f.metadata().ok()?.ino();
    let m = maps
        .iter()
        .find(|m| m.exec && m.inode == inode && m.offset <= file_off && file_off < m.offset + (m.end - m.start))?;
    let addr = m.start + (file_off - m.offset);
    // The longest x86 instruction; the file may end sooner.
    let mut want = vec![0u8; 15];
    let n = f.read_at(&mut want, file_off).ok()?;
    let len = udtrace_object::sites::instruction_len(&want[..n]).unwrap_or(1).min((m.end - addr) as usize);
    let live = read_memory(pid, addr, len).ok().filter(|l| l.len() == len)?;
    let changed = live.iter().zip(&want).enumerate().any(|(i, (l, w))| l != w && !(i == 0 && *l == 0xcc));
    if changed || live[0] == want[0] {
        return Some((addr, changed));
    }
    // A leading int3 is another uprobe's, unless it pads a patch that starts before
    // the site: its jump takes the code away before it is reached.
    let back = (file_off - m.offset).min(15) as usize;
    let mut before_file = vec![0u8; back];
    f.read_exact_at(&mut before_file, file_off - back as u64).ok()?;
    let before_live = read_memory(pid, addr - back as u64, back).ok().filter(|l| l.len() == back)?;
    Some((addr, pads_a_jump(&before_live, &before_file)))
}

/// Whether the live bytes just before a site (`live`, the file's `file`, same length,
/// ending at the site) end in a jump written over the file's code followed only by
/// `int3` pads: a patch whose displaced bytes reach on over the site.
fn pads_a_jump(live: &[u8], file: &[u8]) -> bool {
    let pads = live.iter().rev().take_while(|&&b| b == 0xcc).count();
    let Some(jmp) = live.len().checked_sub(pads + 5) else { return false };
    live[jmp] == 0xe9 && live[jmp..jmp + 5] != file[jmp..jmp + 5]
}

/// Thread ids of a process.
pub fn tasks(pid: i32) -> io::Result<Vec<i32>> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use udtrace_object::elf::{LoadSegment, SymbolSource};

    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234                       /usr/bin/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1234                       /usr/bin/prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000028000 r--p 00000000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000028000-7f00001bd000 r-xp 00028000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7f00001bd000-7f00001be000 rw-p 00000000 00:00 0 
7ffd5f3f0000-7ffd5f3f2000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn an_int3_padding_a_patch_is_no_uprobe() {
        // ... mov rax, [rip+x] (7 bytes) | ret, patched from the mov: jmp + 2 pads, and
        // the ret's int3 pad.
        let file = [0x90, 0x48, 0x8b, 0x05, 0x78, 0x2a, 0x00, 0x00];
        let patched = [0x90, 0xe9, 0xfa, 0xea, 0xef, 0xff, 0xcc, 0xcc];
        assert!(pads_a_jump(&patched, &file));
        // A uprobe's int3 after unchanged code; a jump that is the file's own.
        assert!(!pads_a_jump(&file, &file));
        let own_jump = [0x90, 0xe9, 0x01, 0x02, 0x03, 0x04, 0xcc, 0xcc];
        assert!(!pads_a_jump(&own_jump, &own_jump));
        assert!(!pads_a_jump(&[0xcc, 0xcc], &[0x90, 0x90]), "too short for a jump");
    }

    #[test]
    fn maps_group_into_objects() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 7);
        assert!(maps[1].exec && !maps[1].write);
        assert_eq!(maps[5].path, None);
        let objs = loaded_objects(&maps, "/usr/bin/prog");
        let names: Vec<&str> = objs.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(names, ["/usr/bin/prog", "/usr/lib/x86_64-linux-gnu/libc.so.6", "[vdso]"]);
        assert!(objs[0].is_main && !objs[1].is_main && objs[2].is_vdso);
        assert_eq!(objs[1].mappings.len(), 2);
        assert!(objs[1].contains_code(0x7f0000030000));
        assert!(!objs[1].contains_code(0x7f0000000100));
    }

    #[test]
    fn only_files_are_objects() {
        // What PostgreSQL, nginx and udtrace's own rings look like in maps.
        let maps = parse_maps(
            "\
7f0000000000-7f0040000000 rw-s 00000000 00:01 1042                       /dev/zero (deleted)
7f0040000000-7f0040001000 rw-p 00000000 00:05 4                          /dev/zero
7f0040001000-7f0040002000 rw-s 00000000 00:01 7                          /SYSV0052e2c1 (deleted)
7f0040002000-7f0040003000 r-xs 00000000 00:01 9                          /memfd:udtrace-tramp (deleted)
7f0040003000-7f0040004000 rw-p 00000000 00:00 0                          [anon:arena]
7f0040004000-7f0040005000 rw-s 00000000 00:0e 11                         anon_inode:[perf_event]
7f0040005000-7f0040006000 rw-s 00000000 00:08 12                         socket:[1234]
7f0040006000-7f0040007000 r--p 00000000 fd:01 77                         /usr/lib/libold.so.1 (deleted)
7f0040007000-7f0040008000 r-xp 00001000 fd:01 77                         /usr/lib/libold.so.1 (deleted)
7f0040008000-7f0040009000 r--p 00000000 fd:01 78                         /usr/lib/libold.so.1
",
        );
        let objs = loaded_objects(&maps, "/usr/bin/prog");
        let seen: Vec<(&str, bool, usize)> =
            objs.iter().map(|o| (o.path.as_str(), o.deleted, o.mappings.len())).collect();
        // The device is left to the object reader, which looks at the file's type.
        assert_eq!(
            seen,
            [("/dev/zero", false, 1), ("/usr/lib/libold.so.1", true, 2), ("/usr/lib/libold.so.1", false, 1)]
        );
        assert_eq!(object_file(42, &objs[1]), PathBuf::from("/proc/42/map_files/7f0040006000-7f0040007000"));
        assert_eq!(object_key(42, &objs[1]), PathBuf::from("/usr/lib/libold.so.1 (deleted, inode 77)"));
    }

    #[test]
    fn stat_lines() {
        let (comm, rest) = parse_task_stat("12 (a) b) (c) S 1 12").unwrap();
        assert_eq!((comm.as_str(), rest), ("a) b) (c", vec!["S".to_string(), "1".into(), "12".into()]));
        assert_eq!(parse_stat("12 (sh) S 7 12").unwrap(), ("sh".to_string(), 7));
        // Found by fuzzing: the last `)` before the first `(` panicked slicing the comm.
        assert!(parse_task_stat(")(").is_err());
        assert!(parse_stat("1 ) x (").is_err());
    }

    #[test]
    fn bias_of_a_segment_at_the_end_of_the_file_space() {
        // Found by fuzzing: a segment whose offset plus size overflows (a hostile object)
        // panicked while looking for the mapping of its first page.
        let seg = LoadSegment { vaddr: 0x2000, memsz: 0x1000, offset: u64::MAX - 0xfff, filesz: 0x2000, exec: true };
        let info = ElfInfo {
            is_dyn: true,
            entry: 0,
            build_id: None,
            debuglink: None,
            segments: vec![seg],
            symbols: Vec::new(),
            symbols_from: SymbolSource::None,
            gnu_debugdata: None,
            plt: Vec::new(),
            code_sections: Vec::new(),
            usdt: Vec::new(),
            go: false,
        };
        let m = Mapping {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0000_1000,
            read: true,
            write: false,
            exec: true,
            offset: u64::MAX - 0xfff,
            inode: 1,
            path: Some("/x".into()),
        };
        let obj = LoadedObject { path: "/x".into(), is_main: false, is_vdso: false, deleted: false, mappings: vec![m] };
        assert_eq!(obj.bias(&info), Some(0x7f00_0000_0000 - 0x2000));
    }

    #[test]
    fn an_ended_process_s_untouched_bytes_are_read_from_its_file() {
        use std::os::unix::fs::MetadataExt;
        let path = std::env::temp_dir().join(format!("udtrace-filebacked-{}", std::process::id()));
        let mut bytes = vec![b'x'; 8192];
        bytes[4096 + 16..4096 + 22].copy_from_slice(b"hello\0");
        std::fs::write(&path, &bytes).unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        let m = Mapping {
            start: 0x10000,
            end: 0x11000,
            read: true,
            write: false,
            exec: false,
            offset: 4096,
            inode,
            path: Some(path.display().to_string()),
        };
        let obj = LoadedObject {
            path: path.display().to_string(),
            is_main: true,
            is_vdso: false,
            deleted: false,
            mappings: vec![m.clone()],
        };
        let objects = vec![obj.clone()];
        assert_eq!(read_file_backed(&objects, 0x10010, 6).as_deref(), Some(&b"hello\0"[..]));
        // Not past its mapping, nor outside any.
        assert_eq!(read_file_backed(&objects, 0x10ffe, 16).map(|b| b.len()), Some(2));
        assert_eq!(read_file_backed(&objects, 0x11000, 4), None);
        // Another file at the path now: not what was mapped.
        let other = LoadedObject { mappings: vec![Mapping { inode: inode + 1, ..m }], ..obj };
        assert_eq!(read_file_backed(&[other], 0x10010, 6), None);
        let _ = std::fs::remove_file(&path);
    }
}
