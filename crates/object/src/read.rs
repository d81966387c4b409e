//! Reading an object file from disk: only a regular ELF file of bounded size, and of it
//! only what udtrace looks at. A process maps files of any kind and size: /dev/zero
//! never ends, a FIFO blocks its reader, and a library's read-only data (ICU's is 30
//! MB) is never looked at, yet kept for as long as its symbols are.

use std::ops::Range;
use std::path::Path;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::Endianness;

use crate::debuginfo::{LoadError, MAX_FILE_BYTES};
use crate::elf::ElfError;

/// The bytes of the object file at `path`, read only once it is known to be a regular
/// file of at most [`MAX_FILE_BYTES`] that starts as ELF does. Where its headers can be
/// read, only its headers, its code and the sections udtrace parses are read
/// ([`wanted`]); the rest stays zeros, which cost no memory until written.
pub fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    read_parts(path, true).map(|(data, _)| data)
}

/// [`read`], with its code (executable segments, code sections) left unread when not
/// `code`, and the file, open, for reading the code of a function when it is asked
/// for: a process maps tens of megabytes of libraries' code, of which a few functions
/// are probed (a PostgreSQL postmaster's objects hold 22 MB of it).
pub fn read_parts(path: &Path, code: bool) -> Result<(Vec<u8>, std::fs::File), LoadError> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let io = |source| LoadError::Io { path: path.to_path_buf(), source };
    let regular = |meta: &std::fs::Metadata| match file_kind(meta) {
        Some(kind) => Err(LoadError::NotRegular { path: path.to_path_buf(), kind }),
        None => Ok(()),
    };
    // Looked at before opening: opening a FIFO waits for a writer.
    regular(&std::fs::metadata(path).map_err(io)?)?;
    // Non-blocking all the same, and looked at again once open: the path may have
    // been replaced in between.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    regular(&meta)?;
    let size = meta.len();
    if size > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge { path: path.to_path_buf(), size });
    }
    let mut magic = [0u8; 4];
    if f.read_exact_at(&mut magic, 0).is_err() || &magic != b"\x7fELF" {
        return Err(LoadError::Elf { path: path.to_path_buf(), source: ElfError::NotElf });
    }
    // The size it had when opened: a file that changes meanwhile is read as it was, or
    // fails to read.
    let mut data = vec![0u8; size as usize];
    let fill = |data: &mut Vec<u8>, r: &Range<u64>| -> std::io::Result<()> {
        let (start, end) = (r.start.min(size) as usize, r.end.min(size) as usize);
        f.read_exact_at(&mut data[start..end.max(start)], start as u64)
    };
    // Each step reads what the next one parses: the header, its tables, the section
    // names, then the parts. A step that cannot parse reads the whole file.
    let steps: [Step; 5] = [
        |_, _| Some(std::iter::once(0..HEADER).collect()),
        |d, _| tables(d),
        |d, _| section_headers(d),
        |d, _| section_names(d),
        parts,
    ];
    for step in steps {
        let Some(ranges) = step(&data, code) else {
            fill(&mut data, &(0..size)).map_err(io)?;
            break;
        };
        ranges.iter().try_for_each(|r| fill(&mut data, r)).map_err(io)?;
    }
    Ok((data, f))
}

/// ELF's 64-bit header.
const HEADER: u64 = 64;

/// One step of reading: from what is read so far (and whether code is read), the
/// ranges to read next; `None` when the headers cannot be parsed so (the whole file is
/// read then).
type Step = fn(&[u8], bool) -> Option<Vec<Range<u64>>>;

type Header = elf::FileHeader64<Endianness>;

/// A table of `n` entries of `entry` bytes at `off`.
fn table(off: u64, n: u64, entry: u16) -> Option<Range<u64>> {
    Some(off..off.checked_add(n.checked_mul(u64::from(entry))?)?)
}

/// The program header table, and section 0 (which holds the counts that do not fit
/// the header).
fn tables(data: &[u8]) -> Option<Vec<Range<u64>>> {
    let h = Header::parse(data).ok()?;
    let e = h.endian().ok()?;
    let phdrs = table(h.e_phoff(e), u64::from(h.e_phnum(e)), h.e_phentsize(e))?;
    (h.e_shoff(e) != 0).then_some(())?;
    Some(vec![phdrs, table(h.e_shoff(e), 1, h.e_shentsize(e))?])
}

/// The section header table.
fn section_headers(data: &[u8]) -> Option<Vec<Range<u64>>> {
    let h = Header::parse(data).ok()?;
    let e = h.endian().ok()?;
    Some(std::iter::once(table(h.e_shoff(e), h.shnum(e, data).ok()? as u64, h.e_shentsize(e))?).collect())
}

/// The section names.
fn section_names(data: &[u8]) -> Option<Vec<Range<u64>>> {
    let h = Header::parse(data).ok()?;
    let e = h.endian().ok()?;
    let names = h.section_headers(e, data).ok()?.get(h.shstrndx(e, data).ok()? as usize)?;
    let (off, n) = names.file_range(e)?;
    Some(std::iter::once(off..off.saturating_add(n)).collect())
}

/// The executable segments when `code`, and the sections udtrace parses (below).
fn parts(data: &[u8], code: bool) -> Option<Vec<Range<u64>>> {
    let h = Header::parse(data).ok()?;
    let e = h.endian().ok()?;
    let sections = h.sections(e, data).ok()?;
    if sections.is_empty() {
        return None;
    }
    let mut out: Vec<Range<u64>> = h
        .program_headers(e, data)
        .ok()?
        .iter()
        .filter(|p| code && p.p_type(e) == elf::PT_LOAD && p.p_flags(e) & elf::PF_X != 0)
        .map(|p| p.p_offset(e)..p.p_offset(e).saturating_add(p.p_filesz(e)))
        .collect();
    for s in sections.iter() {
        if s.sh_type(e) != elf::SHT_NOBITS && wanted(e, s, sections.section_name(e, s).unwrap_or_default(), code) {
            let (off, n) = s.file_range(e)?;
            out.push(off..off.saturating_add(n));
        }
    }
    Some(out)
}

/// Whether udtrace reads a section: code (when `code`), the symbol, string and version
/// tables, the notes (build-id), `.gnu_debuglink`, `.gnu_debugdata` and the unwind
/// tables. Not read: read-only and writable data (`.rodata`, `.data`), and DWARF but
/// `.debug_frame`.
fn wanted(e: Endianness, s: &elf::SectionHeader64<Endianness>, name: &[u8], code: bool) -> bool {
    let code = code && s.sh_flags(e) & u64::from(elf::SHF_EXECINSTR) != 0;
    let parsed = matches!(
        s.sh_type(e),
        elf::SHT_SYMTAB
            | elf::SHT_DYNSYM
            | elf::SHT_STRTAB
            | elf::SHT_SYMTAB_SHNDX
            | elf::SHT_NOTE
            | elf::SHT_GNU_VERSYM
            | elf::SHT_GNU_VERDEF
            | elf::SHT_GNU_VERNEED
    );
    let named = matches!(
        name,
        b".eh_frame" | b".eh_frame_hdr" | b".debug_frame" | b".zdebug_frame" | b".gnu_debuglink" | b".gnu_debugdata"
    );
    code || parsed || named
}

/// What a file that is not a regular file is, in words; `None` for a regular file.
fn file_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    Some(if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    })
}

#[cfg(test)]
mod tests {
    use object::{Object, ObjectSection};

    use super::*;
    use crate::{debuginfo, elf as facts, unwind};

    /// The objects this test process maps: itself and its libc, at least.
    fn mapped() -> Vec<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mut paths: Vec<String> = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.starts_with('/'))
            .map(String::from)
            .collect();
        paths.dedup();
        assert!(paths.iter().any(|p| p.contains("libc.so")), "{paths:?}");
        paths
    }

    #[test]
    fn the_parts_read_give_the_facts_the_whole_file_gives() {
        for path in mapped() {
            let whole = std::fs::read(&path).unwrap();
            let parts = read(Path::new(&path)).unwrap();
            assert_eq!(parts.len(), whole.len());
            let (a, b) = (facts::parse(&whole).unwrap(), facts::parse(&parts).unwrap());
            assert_eq!((&a.symbols, &a.build_id, &a.debuglink), (&b.symbols, &b.build_id, &b.debuglink), "{path}");
            assert_eq!((&a.segments, &a.plt, &a.code_sections), (&b.segments, &b.plt, &b.code_sections), "{path}");
            assert_eq!(a.gnu_debugdata, b.gnu_debugdata, "{path}");
            let (a, b) = (debuginfo::assemble(a, whole.clone(), None), debuginfo::assemble(b, parts.clone(), None));
            for f in a.table().functions() {
                assert_eq!(a.code(f), b.code(f), "{path}: {}", f.name);
            }
            assert_eq!(a.debug_frame, b.debug_frame, "{path}");
            let file = object::File::parse(&*parts).unwrap();
            for name in [".eh_frame", ".eh_frame_hdr", ".debug_frame", ".gnu_debuglink"] {
                let w = object::File::parse(&*whole).unwrap().section_by_name(name).map(|s| s.data().unwrap().to_vec());
                assert_eq!(file.section_by_name(name).map(|s| s.data().unwrap().to_vec()), w, "{path}: {name}");
            }
            let _ = unwind::preferred_debug_frame(&parts, None);
        }
    }

    #[test]
    fn data_is_not_read() {
        let libc = mapped().into_iter().find(|p| p.contains("libc.so")).unwrap();
        let parts = read(Path::new(&libc)).unwrap();
        let file = object::File::parse(&*parts).unwrap();
        let (off, len) = file.section_by_name(".rodata").unwrap().file_range().unwrap();
        assert!(parts[off as usize..(off + len) as usize].iter().all(|&b| b == 0), "libc's .rodata was read");
        assert_ne!(
            std::fs::read(&libc).unwrap()[off as usize..(off + len) as usize],
            parts[off as usize..(off + len) as usize]
        );
    }

    #[test]
    fn devices_fifos_and_other_files_are_never_read() {
        let not = |p: &str| matches!(read(Path::new(p)), Err(LoadError::NotRegular { .. }));
        assert!(not("/dev/zero") && not("/dev/null") && not("/"));
        assert!(matches!(read(Path::new("/proc/self/status")), Err(LoadError::Elf { .. })));
    }
}
