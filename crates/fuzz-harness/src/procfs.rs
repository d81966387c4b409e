//! The text of `/proc` files through udtrace's parsers: maps (grouped into objects, load
//! biases, module names), stat, task stat, status, auxv and the exe link. The input is
//! read both as bytes (auxv) and lossily as text, as `read_to_string` would refuse bytes
//! that are not UTF-8.

use udtrace_object::elf::{ElfInfo, LoadSegment, SymbolSource};
use udtrace_object::modules;
use udtrace_process::procfs;

use crate::Input;

/// Module patterns as probe descriptions spell them.
const PATTERNS: &[&str] = &["a.out", "libc", "libc.so.6", "*", "lib*.so*", "ld-linux-x86-64.so.2", "[vdso]"];

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = procfs::parse_auxv(data);
    let _ = procfs::parse_stat(&text);
    let _ = procfs::parse_task_stat(&text);
    for name in ["Uid:", "Gid:", "Tgid:", ""] {
        let _ = procfs::parse_status_numbers(&text, name);
    }
    let _ = procfs::parse_pending_signals(&text);
    let exe = procfs::parse_exe_link(text.lines().next().unwrap_or(""));

    let maps = procfs::parse_maps(&text);
    let objects = procfs::loaded_objects(&maps, &exe);
    let info = elf_info(&mut Input::new(data), &maps);
    for o in &objects {
        let _ = procfs::maps_mention(&text, &o.path);
        let _ = o.bias(&info);
        for m in &o.mappings {
            let _ = o.contains_code(m.start);
            let _ = o.contains_code(m.end.wrapping_sub(1));
        }
        let _ = modules::module_name(&o.path);
        for p in PATTERNS {
            let _ = modules::module_matches(p, &o.path, o.is_main);
        }
    }
}

/// An object's load segments for computing biases: two from the input's first words
/// (any numbers), then one that matches each of the first mappings, as the object's own
/// segments would.
fn elf_info(input: &mut Input, maps: &[procfs::Mapping]) -> ElfInfo {
    let mut segments: Vec<LoadSegment> = (0..2)
        .map(|_| LoadSegment {
            vaddr: input.u64(),
            memsz: input.u64(),
            offset: input.u64(),
            filesz: input.u64(),
            exec: input.u8() & 1 != 0,
        })
        .collect();
    segments.extend(maps.iter().take(4).map(|m| {
        let len = m.end.wrapping_sub(m.start);
        LoadSegment { vaddr: m.offset.wrapping_add(0x1000), memsz: len, offset: m.offset, filesz: len, exec: m.exec }
    }));
    ElfInfo {
        is_dyn: true,
        entry: 0,
        build_id: None,
        debuglink: None,
        segments,
        symbols: Vec::new(),
        symbols_from: SymbolSource::None,
        gnu_debugdata: None,
        plt: Vec::new(),
        code_sections: Vec::new(),
        usdt: Vec::new(),
        go: false,
    }
}
