//! Functions of one object, as the pid provider names them: one canonical name per
//! address (design.md, "Probe names"), demangled C++ and Rust names, DTrace glob matching.

use std::collections::HashMap;

use crate::elf::{Bind, RawSymbol, SymKind};
use crate::modules::glob_match;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Canonical name, demangled if it was mangled.
    pub name: String,
    /// The symbol's own name when it was mangled.
    pub mangled: Option<String>,
    /// Other names at the same address, demangled, without duplicates.
    pub aliases: Vec<String>,
    /// Virtual address in the file (add the load bias for a process address).
    pub addr: u64,
    pub size: u64,
    /// An `STT_GNU_IFUNC` resolver: probes here fire when the implementation is chosen,
    /// not when the function is called.
    pub ifunc: bool,
}

#[derive(Debug, Clone, Default)]
pub struct SymbolTable {
    functions: Vec<Function>,
    /// Per function (same index): every raw name at its address, for matching mangled
    /// aliases (C++ C1/C2 constructors share an address).
    raw_names: Vec<Vec<String>>,
    /// Functions split into pieces by gcc (`f`, `f.cold`), by stem: see `other_parts`.
    cold_groups: HashMap<String, Vec<usize>>,
    /// Function symbols of size 0 where no function starts (assembly that sets no
    /// `.size`: glibc's signal trampoline `__restore_rt`), by ascending address: they
    /// name their own address only, and get no probes.
    labels: Vec<Function>,
}

/// Rank of a candidate name: lower wins. Order of design.md: function over object,
/// global/weak over local, no leading `$`, fewer leading underscores, smaller size, name.
fn rank(s: &RawSymbol, name: &str) -> (u8, u8, bool, usize, u64) {
    let kind = match s.kind {
        SymKind::Func | SymKind::Ifunc => 0,
        SymKind::Object => 1,
        SymKind::Other => 2,
    };
    let bind = match s.bind {
        Bind::Global | Bind::Weak => 0,
        Bind::Local => 1,
    };
    let underscores = name.bytes().take_while(|&b| b == b'_').count();
    (kind, bind, name.starts_with('$'), underscores, s.size)
}

/// Drop the default-version suffix that glibc's `.symtab` spells into names
/// (`pthread_kill@@GLIBC_2.34` is `pthread_kill`). A non-default `@VER` stays: that is a
/// different, compatibility function.
fn unversioned(name: &str) -> &str {
    match name.find("@@") {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

/// The function at `addr` named by the best of the symbols there (see [`rank`]), with
/// every raw name it has.
fn canonical(addr: u64, syms: &[&RawSymbol]) -> (Function, Vec<String>) {
    let best = syms
        .iter()
        .min_by(|a, b| {
            let (na, nb) = (unversioned(&a.name), unversioned(&b.name));
            rank(a, na).cmp(&rank(b, nb)).then_with(|| na.cmp(nb))
        })
        .expect("every address has a symbol");
    let raw = unversioned(&best.name);
    let demangled = demangle(raw);
    let mut raw_names: Vec<String> = syms.iter().map(|s| unversioned(&s.name).to_string()).collect();
    raw_names.sort();
    raw_names.dedup();
    let mut aliases: Vec<String> =
        raw_names.iter().filter(|n| n.as_str() != raw).map(|n| demangle(n).unwrap_or_else(|| n.clone())).collect();
    let name = demangled.clone().unwrap_or_else(|| raw.to_string());
    aliases.retain(|a| *a != name);
    aliases.sort();
    aliases.dedup();
    let f = Function {
        name,
        mangled: demangled.map(|_| raw.to_string()),
        aliases,
        addr,
        size: best.size,
        ifunc: best.kind == SymKind::Ifunc,
    };
    (f, raw_names)
}

impl SymbolTable {
    /// Union of several symbol lists of one object (its own table, a separate debug file,
    /// `.gnu_debugdata`), one [`Function`] per address holding a defined function symbol
    /// of non-zero size outside the `exclude` ranges (PLT stubs).
    pub fn from_symbols(sources: &[&[RawSymbol]], exclude: &[(u64, u64)]) -> SymbolTable {
        let mut by_addr: HashMap<u64, Vec<&RawSymbol>> = HashMap::new();
        let mut labels: HashMap<u64, Vec<&RawSymbol>> = HashMap::new();
        for s in sources.iter().flat_map(|src| src.iter()) {
            // Objects never become canonical while a function exists, and an address with
            // only objects gets no probes, so only functions are kept.
            if !s.defined || !matches!(s.kind, SymKind::Func | SymKind::Ifunc) {
                continue;
            }
            if exclude.iter().any(|&(a, b)| s.addr >= a && s.addr < b) {
                continue;
            }
            let kept = if s.size == 0 { &mut labels } else { &mut by_addr };
            kept.entry(s.addr).or_default().push(s);
        }
        labels.retain(|addr, _| !by_addr.contains_key(addr));
        let mut labels: Vec<Function> = labels.into_iter().map(|(addr, syms)| canonical(addr, &syms).0).collect();
        labels.sort_by_key(|f| f.addr);
        let mut entries: Vec<(Function, Vec<String>)> =
            by_addr.into_iter().map(|(addr, syms)| canonical(addr, &syms)).collect();
        entries.sort_by_key(|(f, _)| f.addr);
        let (functions, raw_names): (Vec<Function>, _) = entries.into_iter().unzip();
        SymbolTable { cold_groups: cold_groups(&functions), functions, raw_names, labels }
    }

    /// Every function, by ascending address.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The function containing `addr` and the offset of `addr` in it; else a label of
    /// size 0 at `addr` itself (offset 0).
    pub fn lookup(&self, addr: u64) -> Option<(&Function, u64)> {
        let i = self.functions.partition_point(|f| f.addr <= addr);
        // Functions may nest (an alias with a smaller size); look back past the nearest
        // start for one that covers `addr`, a few entries at most in practice.
        let covering = self.functions[..i].iter().rev().take(8).find(|f| addr - f.addr < f.size);
        match covering {
            Some(f) => Some((f, addr - f.addr)),
            None => self.labels.binary_search_by_key(&addr, |f| f.addr).ok().map(|i| (&self.labels[i], 0)),
        }
    }

    /// Functions whose demangled name, mangled name or any alias matches the DTrace glob
    /// `pattern`; an empty pattern matches all.
    pub fn matching(&self, pattern: &str) -> Vec<&Function> {
        if pattern.is_empty() {
            return self.functions.iter().collect();
        }
        if !crate::modules::is_glob(pattern) {
            // A plain name: compared, not matched (tables have thousands of names).
            return self
                .functions
                .iter()
                .zip(&self.raw_names)
                .filter(|(f, raw)| {
                    f.name == pattern
                        || f.mangled.as_deref() == Some(pattern)
                        || f.aliases.iter().any(|a| a == pattern)
                        || raw.iter().any(|r| r == pattern)
                })
                .map(|(f, _)| f)
                .collect();
        }
        self.functions
            .iter()
            .zip(&self.raw_names)
            .filter(|(f, raw)| {
                glob_match(pattern, &f.name)
                    || f.mangled.as_deref().is_some_and(|m| glob_match(pattern, m))
                    || f.aliases.iter().any(|a| glob_match(pattern, a))
                    || raw.iter().any(|r| glob_match(pattern, r))
            })
            .map(|(f, _)| f)
            .collect()
    }

    /// The other pieces of `f`'s code that gcc split off into `<name>.cold` (or, for a cold
    /// piece, its parent and siblings), as vaddr ranges: jumps there are not tail calls.
    pub fn other_parts(&self, f: &Function) -> Vec<(u64, u64)> {
        match self.cold_groups.get(stem(f)) {
            Some(members) => members
                .iter()
                .map(|&i| &self.functions[i])
                .filter(|g| g.addr != f.addr)
                .map(|g| (g.addr, g.addr.saturating_add(g.size)))
                .collect(),
            None => Vec::new(),
        }
    }
}

/// The name of `f` without a `.cold` suffix (on the mangled name, where there is one).
fn stem(f: &Function) -> &str {
    let n = f.mangled.as_deref().unwrap_or(&f.name);
    n.find(".cold").map_or(n, |i| &n[..i])
}

fn is_cold(f: &Function) -> bool {
    f.mangled.as_deref().unwrap_or(&f.name).contains(".cold")
}

/// Group functions by stem, keeping only groups that hold a `.cold` piece.
fn cold_groups(functions: &[Function]) -> HashMap<String, Vec<usize>> {
    let stems: std::collections::HashSet<&str> = functions.iter().filter(|f| is_cold(f)).map(stem).collect();
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, f) in functions.iter().enumerate() {
        if stems.contains(stem(f)) {
            groups.entry(stem(f).to_string()).or_default().push(i);
        }
    }
    groups
}

/// Whether `pattern` is a plain name: no glob, and only ASCII letters, digits, `_`,
/// `.` and `@` (a C function, `f.cold`, `f@VER`), so that [`may_be_named`] can tell
/// the symbols it cannot match.
pub fn is_plain_name(pattern: &str) -> bool {
    !pattern.is_empty() && pattern.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@'))
}

/// Whether the symbol `raw` may be matched by the plain name `name` (see
/// [`is_plain_name`]): `name` is its name without a default version, a substring of
/// it, or its demangled name. A demangled name with none of `:`, `(`, `<` or a space
/// is one identifier of the mangled name, spelt there as it is (Itanium's and Rust's
/// `<length><identifier>`; Rust v0's punycode spells non-ASCII), but for Rust's legacy
/// `$` escapes. False means it cannot match; true, that it may.
pub fn may_be_named(raw: &str, name: &str) -> bool {
    // By hand: `str::contains` builds a searcher per call, and this runs for each of
    // libc's and its debug file's 13,000 symbols.
    let (r, n) = (raw.as_bytes(), name.as_bytes());
    let Some(&first) = n.first() else { return true };
    r.contains(&b'$') || (0..r.len()).any(|i| r[i] == first && r[i..].starts_with(n))
}

/// Demangle a C++ (Itanium) or Rust (legacy or v0) symbol; None if `name` is not mangled.
/// Rust hashes are dropped: DTrace users write `crate::f`.
pub fn demangle(name: &str) -> Option<String> {
    if name.starts_with("_R") || (name.starts_with("_ZN") && is_rust_legacy(name)) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return Some(format!("{d:#}"));
        }
    }
    if name.starts_with("_Z") {
        let sym = cpp_demangle::Symbol::new(name).ok()?;
        return sym.demangle(&cpp_demangle::DemangleOptions::default()).ok();
    }
    None
}

/// Legacy Rust symbols end in a `17h<16 hex digits>E` hash path segment (maybe followed by
/// a `.llvm.NNN` suffix); C++ `_ZN...E` names do not. The suffix is found from the hash,
/// not by splitting at the first `.`: legacy names hold `..` for `::` inside generics
/// (`drop_in_place$LT$lexopt..Parser$GT$`).
fn is_rust_legacy(name: &str) -> bool {
    let b = name.as_bytes();
    (20..=b.len()).any(|end| {
        let tail = &b[end - 20..end];
        (end == b.len() || b[end] == b'.')
            && tail.starts_with(b"17h")
            && tail[19] == b'E'
            && tail[3..19].iter().all(u8::is_ascii_hexdigit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, addr: u64, size: u64, kind: SymKind, bind: Bind) -> RawSymbol {
        RawSymbol { name: name.into(), addr, size, kind, bind, defined: true }
    }
    use Bind::*;
    use SymKind::*;

    fn names(t: &SymbolTable) -> Vec<&str> {
        t.functions().iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn canonical_name_order() {
        let syms = [
            // global/weak over local
            sym("a_local", 0x10, 8, Func, Local),
            sym("z_global", 0x10, 8, Func, Weak),
            // fewer underscores
            sym("__libc_malloc", 0x20, 8, Func, Global),
            sym("malloc", 0x20, 8, Func, Global),
            sym("__malloc", 0x20, 8, Func, Local),
            // no leading $
            sym("$x", 0x30, 8, Func, Global),
            sym("zz", 0x30, 8, Func, Global),
            // smaller size, then name
            sym("big", 0x40, 16, Func, Global),
            sym("small", 0x40, 8, Func, Global),
            sym("b", 0x50, 8, Func, Global),
            sym("a", 0x50, 8, Func, Global),
            // function over object (objects are not even aliases)
            sym("aaa_obj", 0x60, 8, Object, Global),
            sym("fn", 0x60, 8, Func, Local),
        ];
        let t = SymbolTable::from_symbols(&[&syms], &[]);
        assert_eq!(names(&t), ["z_global", "malloc", "zz", "small", "a", "fn"]);
        assert_eq!(t.functions()[0].aliases, ["a_local"]);
        assert_eq!(t.functions()[1].aliases, ["__libc_malloc", "__malloc"]);
        assert_eq!(t.functions()[3].size, 8);
        assert!(t.functions()[5].aliases.is_empty());
    }

    #[test]
    fn excluded_symbols() {
        let mut undef = sym("puts", 0, 0, Func, Global);
        undef.defined = false;
        let syms = [
            undef,
            sym("zero", 0x10, 0, Func, Global),
            sym("stub", 0x100, 16, Func, Global),
            sym("data", 0x200, 16, Object, Global),
            sym("label", 0x300, 16, Other, Global),
            sym("ok", 0x400, 16, Func, Local),
            // A size-0 alias of a real function neither wins nor hides it.
            sym("_start_label", 0x400, 0, Func, Global),
        ];
        let t = SymbolTable::from_symbols(&[&syms], &[(0x100, 0x140)]);
        assert_eq!(names(&t), ["ok"]);
        // A size-0 function alone at its address names that address, and only it.
        assert_eq!(t.lookup(0x10).map(|(f, off)| (f.name.as_str(), off)), Some(("zero", 0)));
        assert!(t.lookup(0x11).is_none());
        assert_eq!(t.lookup(0x400).map(|(f, _)| f.name.as_str()), Some("ok"));
        assert!(t.matching("zero").is_empty());
    }

    #[test]
    fn union_of_sources_dedups() {
        let a = [sym("f", 0x10, 4, Func, Global)];
        let b = [
            sym("f", 0x10, 4, Func, Global),
            sym("g", 0x20, 4, Func, Local),
            sym("pthread_kill@@GLIBC_2.34", 0x30, 4, Func, Global),
            sym("pthread_kill@GLIBC_2.2.5", 0x40, 4, Func, Global),
        ];
        let t = SymbolTable::from_symbols(&[&a, &b], &[]);
        assert_eq!(names(&t), ["f", "g", "pthread_kill", "pthread_kill@GLIBC_2.2.5"]);
        assert!(t.functions()[0].aliases.is_empty());
    }

    #[test]
    fn lookup_and_matching() {
        let syms = [
            sym("_ZN7Counter4bumpEi", 0x100, 0x20, Func, Global),
            sym("_ZN7CounterC2Ei", 0x200, 0x10, Func, Global),
            sym("_ZN7CounterC1Ei", 0x200, 0x10, Func, Global),
            sym("strlen", 0x300, 0x10, Ifunc, Global),
        ];
        let t = SymbolTable::from_symbols(&[&syms], &[]);
        assert_eq!(t.lookup(0x100).unwrap().1, 0);
        let (f, off) = t.lookup(0x11f).unwrap();
        assert_eq!((f.name.as_str(), off), ("Counter::bump(int)", 0x1f));
        assert!(t.lookup(0x120).is_none());
        assert!(t.lookup(0x50).is_none());
        assert_eq!(f.mangled.as_deref(), Some("_ZN7Counter4bumpEi"));
        assert_eq!(t.matching("Counter::bump*").len(), 1);
        assert_eq!(t.matching("_ZN7Counter4bumpEi").len(), 1);
        assert_eq!(t.matching("*bump*").len(), 1);
        assert_eq!(t.matching("").len(), 3);
        assert_eq!(t.matching("nothing").len(), 0);
        // Both constructor variants name the one function.
        assert_eq!(t.matching("_ZN7CounterC2Ei").len(), 1);
        assert_eq!(t.matching("_ZN7CounterC1Ei").len(), 1);
        assert!(t.matching("strlen")[0].ifunc);
    }

    #[test]
    fn demangling() {
        assert_eq!(demangle("_ZN7Counter4bumpEi").unwrap(), "Counter::bump(int)");
        assert_eq!(demangle("_ZN3foo3barE").unwrap(), "foo::bar");
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE").unwrap(), "core::fmt::write");
        assert_eq!(demangle("_RNvCs1234_7mycrate4main").unwrap(), "mycrate::main");
        // `..` (a legacy `::` inside generics) is not the `.llvm.` suffix.
        assert_eq!(
            demangle("_ZN4core3ptr35drop_in_place$LT$lexopt..Parser$GT$17h5839bf157e3c58d4E").unwrap(),
            "core::ptr::drop_in_place<lexopt::Parser>"
        );
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE.llvm.1234").unwrap(), "core::fmt::write");
        assert_eq!(demangle("main"), None);
        assert_eq!(demangle("_Zgarbage"), None);
    }

    #[test]
    fn cold_parts() {
        let syms = [
            sym("f", 0x100, 0x20, Func, Global),
            sym("f.cold", 0x900, 0x8, Func, Local),
            sym("g", 0x200, 0x20, Func, Global),
        ];
        let t = SymbolTable::from_symbols(&[&syms], &[]);
        let f = &t.functions()[0];
        assert_eq!(t.other_parts(f), vec![(0x900, 0x908)]);
        assert_eq!(t.functions()[2].name, "f.cold");
        assert_eq!(t.other_parts(&t.functions()[2]), vec![(0x100, 0x120)]);
        assert!(t.other_parts(&t.functions()[1]).is_empty());
    }
}
