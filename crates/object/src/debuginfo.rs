//! Load one object's functions: its own symbol table, a separate debug file (found by
//! build-id, else by `.gnu_debuglink`) and `.gnu_debugdata` (minidebuginfo).

use std::borrow::Cow;
use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use crate::elf::{self, ElfError, ElfInfo, RawSymbol, SymKind, SymbolSource};
use crate::sites::{self, Sites};
use crate::symbols::{self, Function, SymbolTable};
use crate::{read, unwind};

/// Where distributions install separate debug files.
pub const DEFAULT_DEBUG_ROOT: &str = "/usr/lib/debug";

/// The largest object or debug file read: each is read whole, and a process may map a
/// file of any size (a database's data, a shared memory segment).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// The most bytes of code read at once, for one function.
pub const MAX_CODE_READ: usize = 1 << 24;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// A device, FIFO, socket or directory: never an object, and never read (a device
    /// such as /dev/zero never ends).
    #[error("{path} is {kind}, not an object file")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path} is {size} bytes, more than the {max} udtrace reads of an object file", max = MAX_FILE_BYTES)]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{path}: {source}")]
    Elf { path: PathBuf, source: ElfError },
}

impl LoadError {
    /// Whether the file is simply not an object (not ELF, not a regular file): a
    /// mapping of data, which has no probes and is no error.
    pub fn not_an_object(&self) -> bool {
        matches!(self, LoadError::NotRegular { .. } | LoadError::Elf { source: ElfError::NotElf, .. })
    }
}

/// Why an address given without its function names no instruction of an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("it is not in the object's code")]
    NotCode,
    #[error("it is not aligned on an instruction")]
    InsideInstruction,
    #[error("the code before it cannot be decoded (at {at:#x})")]
    Undecodable { at: u64 },
}

#[derive(Debug, Clone)]
pub struct ObjectSymbols {
    pub info: ElfInfo,
    /// The function symbols of the separate debug file and of `.gnu_debugdata`, which
    /// the table is built from with `info.symbols`.
    more_symbols: Vec<Vec<RawSymbol>>,
    /// Built when first asked for ([`Self::table`]): a process maps objects of
    /// thousands of functions (libc and its debug file: 4 ms to name them all) where a
    /// probe names one function of another object.
    table: OnceCell<SymbolTable>,
    /// The separate debug file whose symbols were added, if one was found.
    pub debug_file: Option<PathBuf>,
    /// The file found where the debug file was looked for that is not it (another
    /// build's, not ELF, without a symbol table).
    pub debug_refused: Option<PathBuf>,
    /// The object file's bytes that udtrace parses (headers, symbol tables, unwind
    /// tables; zeros elsewhere): probe sites are decoded from the file, never from a
    /// process's memory, where a breakpoint may already sit.
    pub data: Vec<u8>,
    /// The file, where its code was left unread in `data`: a function's code is read
    /// from it when asked for ([`Self::code`]).
    pub code_file: Option<std::sync::Arc<std::fs::File>>,
    /// The `.debug_frame` its code is unwound with, decompressed, where that describes
    /// more of it than `.eh_frame` (`unwind::preferred_debug_frame`).
    pub debug_frame: Option<unwind::Data>,
}

impl ObjectSymbols {
    /// Every function, named as design.md says (built on first use).
    pub fn table(&self) -> &SymbolTable {
        self.table.get_or_init(|| {
            let mut sources: Vec<&[RawSymbol]> = vec![&self.info.symbols];
            sources.extend(self.more_symbols.iter().map(Vec::as_slice));
            SymbolTable::from_symbols(&sources, &self.info.plt)
        })
    }

    /// The functions matching the DTrace glob `pattern`, as [`SymbolTable::matching`];
    /// for a plain name that no symbol of the object could carry, none, without building
    /// the table.
    pub fn matching(&self, pattern: &str) -> Vec<&Function> {
        if symbols::is_plain_name(pattern) {
            let mut all = self.info.symbols.iter().chain(self.more_symbols.iter().flatten());
            if !all.any(|s| s.defined && symbols::may_be_named(&s.name, pattern)) {
                return Vec::new();
            }
        }
        self.table().matching(pattern)
    }

    /// The code of `f`, read from the file; None if it lies outside the file's segments.
    pub fn code(&self, f: &Function) -> Option<Cow<'_, [u8]>> {
        let start = self.info.vaddr_to_offset(f.addr)?;
        // The whole function must be in the same segment's file image.
        let last = self.info.vaddr_to_offset(f.addr.checked_add(f.size.checked_sub(1)?)?)?;
        if last.checked_sub(start)? != f.size - 1 {
            return None;
        }
        self.bytes(start, usize::try_from(f.size).ok()?)
    }

    /// `len` bytes of the file at offset `off`: from `data`, or read from the file when
    /// its code was left unread (at most [`MAX_CODE_READ`] bytes).
    pub fn bytes(&self, off: u64, len: usize) -> Option<Cow<'_, [u8]>> {
        let Some(f) = &self.code_file else {
            return self
                .data
                .get(usize::try_from(off).ok()?..usize::try_from(off).ok()?.checked_add(len)?)
                .map(Cow::Borrowed);
        };
        if len > MAX_CODE_READ || off.checked_add(len as u64)? > self.data.len() as u64 {
            return None;
        }
        let mut b = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&**f, &mut b, off).ok()?;
        Some(Cow::Owned(b))
    }

    /// Entry, return and offset sites of `f`, decoded from the file (None if its code is
    /// not in the file).
    pub fn sites(&self, f: &Function) -> Option<Sites> {
        let code = self.code(f)?;
        Some(sites::decode_with_parts(&code, f.addr, &self.table().other_parts(f)))
    }

    /// Whether the object lost its full symbol table with nothing to stand in for it (no
    /// debug file, no minidebuginfo): only its exported (`.dynsym`) functions have names.
    pub fn stripped(&self) -> bool {
        self.info.symbols_from != SymbolSource::Symtab && self.debug_file.is_none() && self.info.gnu_debugdata.is_none()
    }

    /// The file offset of the instruction at `vaddr`, an address given without its
    /// function (`pid$target:a.out:-:ADDR`): it must lie in the object's code and start
    /// an instruction when the code is decoded from the last place known to start one
    /// (the function holding it, else the end of the last function before it, else its
    /// section's start, as objdump decodes), or a probe there would cut an instruction.
    /// Returns it with the instruction's length.
    pub fn instruction_at(&self, vaddr: u64) -> Result<(u64, u64), AddressError> {
        let (lo, hi) = self.code_range(vaddr).ok_or(AddressError::NotCode)?;
        let start = match self.table().lookup(vaddr) {
            Some((f, _)) => f.addr,
            None => self
                .table()
                .functions()
                .iter()
                .map(|f| f.addr.saturating_add(f.size))
                .filter(|&end| lo <= end && end <= vaddr)
                .max()
                .unwrap_or(lo),
        };
        let first = self.info.vaddr_to_offset(start).ok_or(AddressError::NotCode)?;
        // The longest instruction past it, where the code goes on that far.
        let len = vaddr.saturating_add(15).min(hi) - start;
        let code =
            self.bytes(first, usize::try_from(len).map_err(|_| AddressError::NotCode)?).ok_or(AddressError::NotCode)?;
        let code = &*code;
        sites::starts_instruction(code, start, vaddr).map_err(|e| match e {
            sites::OffsetError::Undecodable { at, .. } => AddressError::Undecodable { at: start + u64::from(at) },
            _ => AddressError::InsideInstruction,
        })?;
        let at = usize::try_from(vaddr - start).map_err(|_| AddressError::NotCode)?;
        let len = sites::instruction_len(code.get(at..).unwrap_or_default())
            .ok_or(AddressError::Undecodable { at: vaddr })?;
        Ok((self.info.vaddr_to_offset(vaddr).ok_or(AddressError::NotCode)?, len as u64))
    }

    /// The range of code holding `vaddr`: its section of code, or where the section
    /// headers are gone, its executable segment's file image.
    fn code_range(&self, vaddr: u64) -> Option<(u64, u64)> {
        let within = |&(lo, hi): &(u64, u64)| lo <= vaddr && vaddr < hi;
        let segment = self
            .info
            .segments
            .iter()
            .filter(|s| s.exec)
            .map(|s| (s.vaddr, s.vaddr.saturating_add(s.filesz)))
            .find(within)?;
        match self.info.code_sections.is_empty() {
            true => Some(segment),
            // Mapped executable too: a section header may say anything.
            false => self
                .info
                .code_sections
                .iter()
                .copied()
                .find(within)
                .map(|(lo, hi)| (lo.max(segment.0), hi.min(segment.1))),
        }
    }

    /// File offset of a virtual address: what a uprobe is attached at.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.info.vaddr_to_offset(vaddr)
    }
}

/// Load `path` with debug files looked up under [`DEFAULT_DEBUG_ROOT`].
pub fn load(path: &Path) -> Result<ObjectSymbols, LoadError> {
    load_with_debug_root(path, Path::new(DEFAULT_DEBUG_ROOT))
}

/// Load `path`, looking for its separate debug file under `debug_root` (tests use a
/// private tree): `<root>/.build-id/xx/yyyy.debug`, then by debuglink name next to the
/// object, in its `.debug/` directory, and under `<root>/<object's directory>/`.
pub fn load_with_debug_root(path: &Path, debug_root: &Path) -> Result<ObjectSymbols, LoadError> {
    let (data, file) = read::read_parts(path, false)?;
    let info = elf::parse(&data).map_err(|source| LoadError::Elf { path: path.to_path_buf(), source })?;
    // A debug file that is missing or unreadable only costs symbols.
    let debug = find_debug_file(path, &info, debug_root).map(|p| (read::read(&p).unwrap_or_default(), p));
    let mut syms = assemble(info, data, debug.as_ref().map(|(d, p)| (d.as_slice(), p.as_path())));
    syms.code_file = Some(std::sync::Arc::new(file));
    Ok(syms)
}

/// The functions of an object already parsed from `data`, with the symbols of its
/// separate debug file (its bytes and path) when one was found: all of loading but the
/// reading, so that hostile bytes can be fed to it directly.
pub fn assemble(info: ElfInfo, data: Vec<u8>, debug: Option<(&[u8], &Path)>) -> ObjectSymbols {
    // A malformed debug file only costs symbols: the object itself is still probeable
    // through its own table.
    let found = debug.map(|(_, p)| p.to_path_buf());
    let debug = debug.and_then(|(d, p)| {
        let dinfo = elf::parse(d).ok()?;
        // A debuglink found by name must be the same build, when both say which.
        if let (Some(a), Some(b)) = (&info.build_id, &dinfo.build_id) {
            if a != b {
                return None;
            }
        }
        (dinfo.symbols_from == SymbolSource::Symtab).then(|| (p.to_path_buf(), dinfo, d))
    });
    let mini = info.gnu_debugdata.as_deref().and_then(|d| elf::parse(d).ok());

    // Only functions make the table (symbols::SymbolTable::from_symbols).
    let functions = |symbols: Vec<RawSymbol>| -> Vec<RawSymbol> {
        symbols.into_iter().filter(|s| s.defined && matches!(s.kind, SymKind::Func | SymKind::Ifunc)).collect()
    };
    let mut more_symbols = Vec::new();
    let debug = debug.map(|(p, mut d, bytes)| {
        more_symbols.push(functions(std::mem::take(&mut d.symbols)));
        (p, d, bytes)
    });
    if let Some(m) = mini {
        more_symbols.push(functions(m.symbols));
    }
    let debug_frame = unwind::preferred_debug_frame(&data, debug.as_ref().map(|(_, _, d)| *d));
    let debug_file = debug.map(|(p, _, _)| p);
    let debug_refused = found.filter(|_| debug_file.is_none());
    ObjectSymbols {
        info,
        more_symbols,
        table: OnceCell::new(),
        debug_file,
        debug_refused,
        data,
        code_file: None,
        debug_frame,
    }
}

/// Where the separate debug file of the object at `path` is looked for, in order, as
/// gdb looks: `<root>/.build-id/xx/yyyy.debug`, then by its debuglink name next to it,
/// in its `.debug/` directory and under `<root>/<its directory>/`.
pub fn debug_file_candidates(path: &Path, info: &ElfInfo, root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = info.build_id.as_deref().filter(|id| id.len() >= 2) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        out.push(root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..])));
    }
    // A debuglink is a file name; anything with a separator is not one we follow.
    if let Some(link) = info.debuglink.as_deref().filter(|l| !l.is_empty() && !l.contains('/')) {
        let dir = path.parent().unwrap_or(Path::new("."));
        let abs_dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let under_root = root.join(abs_dir.strip_prefix("/").unwrap_or(&abs_dir));
        out.extend([dir.join(link), dir.join(".debug").join(link), under_root.join(link)]);
    }
    out
}

fn find_debug_file(path: &Path, info: &ElfInfo, root: &Path) -> Option<PathBuf> {
    let own = std::fs::canonicalize(path).ok();
    debug_file_candidates(path, info, root)
        .into_iter()
        // The object may carry a debuglink to its own name; it is not its own debug file.
        .find(|p| p.is_file() && std::fs::canonicalize(p).ok() != own)
}
