//! ELF facts needed to place probes: load segments (to turn a symbol address into the file
//! offset a uprobe wants), symbols, build-id and debuglink (to find separate debug info),
//! `.gnu_debugdata` (minidebuginfo) and the PLT ranges (stubs get no probes).
//!
//! Pure: bytes in, facts out. Malformed input gives an [`ElfError`], never a panic.

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, Object, ObjectSection};

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    #[error("unsupported ELF file: {0}")]
    Unsupported(&'static str),
    #[error("malformed ELF file: {0}")]
    Malformed(String),
}

impl From<object::Error> for ElfError {
    fn from(e: object::Error) -> Self {
        ElfError::Malformed(e.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolSource {
    Symtab,
    Dynsym,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymKind {
    Func,
    /// `STT_GNU_IFUNC`: the address is the resolver, which is real code (libc's `strlen`).
    Ifunc,
    Object,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    Global,
    Weak,
    Local,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSymbol {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    pub kind: SymKind,
    pub bind: Bind,
    pub defined: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSegment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub exec: bool,
}

#[derive(Debug, Clone)]
pub struct ElfInfo {
    /// ET_DYN: a PIE executable or a shared object (loaded at a bias).
    pub is_dyn: bool,
    pub entry: u64,
    pub build_id: Option<Vec<u8>>,
    pub debuglink: Option<String>,
    pub segments: Vec<LoadSegment>,
    pub symbols: Vec<RawSymbol>,
    pub symbols_from: SymbolSource,
    /// The decompressed inner ELF of `.gnu_debugdata`, when the section exists and
    /// decompresses.
    pub gnu_debugdata: Option<Vec<u8>>,
    /// Virtual address ranges `[start, end)` of `.plt`, `.plt.got`, `.plt.sec`.
    pub plt: Vec<(u64, u64)>,
    /// Virtual address ranges `[start, end)` of the sections of code (allocated,
    /// executable), in file order; empty when the section headers are gone.
    pub code_sections: Vec<(u64, u64)>,
    /// The statically defined probes of `.note.stapsdt` (USDT), addresses adjusted
    /// for `.stapsdt.base`.
    pub usdt: Vec<crate::usdt::UsdtNote>,
    /// Linked by Go's toolchain (its `.go.buildinfo` section or `.note.go.buildid`):
    /// its Go functions take their arguments in Go's register ABI (rax, rbx, rcx, rdi,
    /// rsi, r8–r11), not the C ABI's that `argN` reads.
    pub go: bool,
}

impl ElfInfo {
    /// File offset of a virtual address, through the PT_LOAD segment holding it in the file
    /// (addresses only in memory, like .bss, have none).
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
            .and_then(|s| s.offset.checked_add(vaddr - s.vaddr))
    }

    pub fn offset_to_vaddr(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| off >= s.offset && off - s.offset < s.filesz)
            .and_then(|s| s.vaddr.checked_add(off - s.offset))
    }
}

/// Refuse to inflate `.gnu_debugdata` beyond this: minidebuginfo is a symbol table, a few
/// MB at most; a bigger result means a hostile or broken file.
const MAX_DEBUGDATA: usize = 256 << 20;

pub fn parse(data: &[u8]) -> Result<ElfInfo, ElfError> {
    parse_with(data, true)
}

/// [`parse`] with `symbols` left empty (`symbols_from` still says where they are): a
/// debug file's are named only when asked for.
pub fn parse_without_symbols(data: &[u8]) -> Result<ElfInfo, ElfError> {
    parse_with(data, false)
}

/// The bytes of the string table of `data`'s `.symtab` (its symbols' names), where it
/// has one.
pub fn symtab_strings(data: &[u8]) -> Option<&[u8]> {
    let file = ElfFile64::<Endianness, &[u8]>::parse(data).ok()?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let table = sections.symbols(endian, data, elf::SHT_SYMTAB).ok()?;
    sections.section(table.string_section()).ok()?.data(endian, data).ok()
}

fn parse_with(data: &[u8], with_symbols: bool) -> Result<ElfInfo, ElfError> {
    if data.len() < 16 || &data[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    // e_ident[EI_CLASS], byte 4.
    if data[4] != elf::ELFCLASS64 {
        return Err(ElfError::Unsupported("only 64-bit ELF is supported"));
    }
    let file = ElfFile64::<Endianness, &[u8]>::parse(data)?;
    let endian = file.endian();
    let header = file.elf_header();
    let is_dyn = header.e_type(endian) == elf::ET_DYN;
    let entry = header.e_entry(endian);

    let segments = file
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| LoadSegment {
            vaddr: ph.p_vaddr(endian),
            memsz: ph.p_memsz(endian),
            offset: ph.p_offset(endian),
            filesz: ph.p_filesz(endian),
            exec: ph.p_flags(endian) & elf::PF_X != 0,
        })
        .collect();

    // A broken note or debuglink section only costs us the debug-file lookup.
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    let debuglink = file.gnu_debuglink().ok().flatten().map(|(name, _crc)| String::from_utf8_lossy(name).into_owned());

    let (table, symbols_from) = if !file.elf_symbol_table().is_empty() {
        (file.elf_symbol_table(), SymbolSource::Symtab)
    } else if !file.elf_dynamic_symbol_table().is_empty() {
        (file.elf_dynamic_symbol_table(), SymbolSource::Dynsym)
    } else {
        (file.elf_symbol_table(), SymbolSource::None)
    };
    let strings = table.strings();
    // .dynsym keeps versions apart from names; spell non-default ones as .symtab does
    // (`pthread_kill@GLIBC_2.2.5`), else a compatibility function takes the plain name.
    let versions = match symbols_from {
        SymbolSource::Dynsym => file.elf_section_table().versions(endian, data).ok().flatten(),
        _ => None,
    };
    let mut symbols = Vec::with_capacity(if with_symbols { table.len() } else { 0 });
    for (index, sym) in table.enumerate().take(if with_symbols { usize::MAX } else { 0 }) {
        let kind = match sym.st_type() {
            elf::STT_FUNC => SymKind::Func,
            elf::STT_GNU_IFUNC => SymKind::Ifunc,
            elf::STT_OBJECT | elf::STT_TLS => SymKind::Object,
            // Section and file symbols name no code anyone probes.
            elf::STT_SECTION | elf::STT_FILE => continue,
            _ => SymKind::Other,
        };
        let bind = match sym.st_bind() {
            elf::STB_GLOBAL | elf::STB_GNU_UNIQUE => Bind::Global,
            elf::STB_WEAK => Bind::Weak,
            _ => Bind::Local,
        };
        let name = sym.name(endian, strings)?;
        if name.is_empty() {
            continue;
        }
        let mut name = String::from_utf8_lossy(name).into_owned();
        let defined = sym.st_shndx(endian) != elf::SHN_UNDEF;
        if let Some(v) = &versions {
            let vi = v.version_index(endian, index);
            if defined && vi.is_hidden() {
                if let Ok(Some(ver)) = v.version(vi) {
                    name = format!("{name}@{}", String::from_utf8_lossy(ver.name()));
                }
            }
        }
        symbols.push(RawSymbol { name, addr: sym.st_value(endian), size: sym.st_size(endian), kind, bind, defined });
    }

    let mut plt = Vec::new();
    for name in [".plt", ".plt.got", ".plt.sec"] {
        if let Some(s) = file.section_by_name(name) {
            if s.size() > 0 {
                plt.push((s.address(), s.address().saturating_add(s.size())));
            }
        }
    }

    let code_sections = file
        .elf_section_table()
        .iter()
        .filter(|sh| {
            let flags = sh.sh_flags(endian);
            let code = u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR);
            flags & code == code && sh.sh_type(endian) != elf::SHT_NOBITS
        })
        .map(|sh| (sh.sh_addr(endian), sh.sh_addr(endian).saturating_add(sh.sh_size(endian))))
        .collect();

    // Notes of a moved object name the base they were linked against.
    let stapsdt_base = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let usdt = file
        .section_by_name(".note.stapsdt")
        .and_then(|s| s.data().ok())
        .map(|d| crate::usdt::parse_notes(d, stapsdt_base))
        .unwrap_or_default();

    let go = file.section_by_name(".go.buildinfo").is_some() || file.section_by_name(".note.go.buildid").is_some();

    let gnu_debugdata = file.section_by_name(".gnu_debugdata").and_then(|s| s.data().ok()).and_then(inflate_xz);

    Ok(ElfInfo {
        is_dyn,
        entry,
        build_id,
        debuglink,
        segments,
        symbols,
        symbols_from,
        gnu_debugdata,
        plt,
        code_sections,
        usdt,
        go,
    })
}

/// The largest section udtrace decompresses: the unwind tables of the largest
/// programs are tens of MB.
pub const MAX_SECTION_BYTES: usize = 256 << 20;

/// The bytes of section `name` of `file`, decompressed where they are compressed: ELF's
/// `SHF_COMPRESSED` (zlib or zstd, as `gcc -gz`, `ld --compress-debug-sections` and Go's
/// linker write them) or GNU's older `.zdebug_*` (zlib). `None` when there is no such
/// section or it does not decompress to the size its header gives, at most
/// [`MAX_SECTION_BYTES`].
pub fn section_data<'d>(file: &object::File<'d>, name: &str) -> Option<std::borrow::Cow<'d, [u8]>> {
    use object::CompressionFormat;
    let compressed = file.section_by_name(name)?.compressed_data().ok()?;
    let size = usize::try_from(compressed.uncompressed_size).ok().filter(|&n| n <= MAX_SECTION_BYTES)?;
    match compressed.format {
        CompressionFormat::None => Some(std::borrow::Cow::Borrowed(compressed.data)),
        // object's zlib inflates into the room the size gives, and no further.
        CompressionFormat::Zlib => compressed.decompress().ok(),
        // Its zstd reads to the stream's end, however far that is: bounded here.
        CompressionFormat::Zstandard => unzstd(compressed.data, size).map(std::borrow::Cow::Owned),
        _ => None,
    }
}

/// The zstd frames of `input`, which must decompress to exactly `size` bytes; stops as
/// soon as they would be more.
fn unzstd(mut input: &[u8], size: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    out.try_reserve_exact(size).ok()?;
    while !input.is_empty() && out.len() <= size {
        let room = (size + 1 - out.len()) as u64;
        ruzstd::StreamingDecoder::new(&mut input).ok()?.take(room).read_to_end(&mut out).ok()?;
    }
    (out.len() == size).then_some(out)
}

/// Decompress `.gnu_debugdata` (an xz stream). A corrupt stream is treated like an absent
/// one: minidebuginfo only adds symbols, the object stays usable without it.
fn inflate_xz(compressed: &[u8]) -> Option<Vec<u8>> {
    let mut out = Capped(Vec::new());
    let mut input = std::io::BufReader::new(compressed);
    lzma_rs::xz_decompress(&mut input, &mut out).ok()?;
    Some(out.0)
}

struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_DEBUGDATA {
            return Err(std::io::Error::other(".gnu_debugdata too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf_and_truncated() {
        assert!(matches!(parse(b""), Err(ElfError::NotElf)));
        assert!(matches!(parse(b"#!/bin/sh\n echo hi"), Err(ElfError::NotElf)));
        let mut h = b"\x7fELF\x01\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
        assert!(matches!(parse(&h), Err(ElfError::Unsupported(_))));
        h[4] = 2;
        assert!(matches!(parse(&h), Err(ElfError::Malformed(_))));
    }

    #[test]
    fn never_panics_on_truncation_or_corruption() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        // Every prefix length class and a few byte flips through the headers.
        for len in (0..data.len().min(1 << 16)).step_by(97) {
            let _ = parse(&data[..len]);
        }
        for i in (16..data.len().min(4096)).step_by(7) {
            let mut d = data[..data.len().min(1 << 20)].to_vec();
            d[i] ^= 0xff;
            let _ = parse(&d);
        }
    }

    #[test]
    fn zstd_inflates_to_the_size_given_and_no_further() {
        // 64 KiB of zeros in 23 bytes (`zstd`): what a hostile header could claim less of.
        let frame = [
            0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0x55, 0x00, 0x00, 0x10, 0x00, 0x00, 0x01, 0x00, 0xfb, 0x7f, 0x1d, 0x60,
            0x01, 0xa4, 0x15, 0x57, 0xf1,
        ];
        assert_eq!(unzstd(&frame, 65536), Some(vec![0; 65536]));
        assert_eq!(unzstd(&frame, 100), None, "more than the header says");
        assert_eq!(unzstd(&frame, 65537), None, "less than the header says");
        let two = [frame, frame].concat();
        assert_eq!(unzstd(&two, 131072).map(|v| v.len()), Some(131072), "one frame after another");
        assert_eq!(unzstd(&frame[..20], 65536), None, "truncated");
    }

    #[test]
    fn offsets_round_trip() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let info = parse(&data).unwrap();
        assert!(info.is_dyn, "cargo test binaries are PIE");
        assert!(info.segments.iter().any(|s| s.exec));
        let off = info.vaddr_to_offset(info.entry).unwrap();
        assert_eq!(info.offset_to_vaddr(off), Some(info.entry));
        assert_eq!(info.symbols_from, SymbolSource::Symtab);
    }
}
