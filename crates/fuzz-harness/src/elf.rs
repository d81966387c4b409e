//! An object file a process maps, through what the session does with one: parse it,
//! assemble its functions (with a separate debug file and `.gnu_debugdata`), place it in
//! a process as the loader would (its load bias from the mappings), then per function:
//! symbol lookup, probe sites, offset checks, what uprobes accept, patch plans and their
//! relocated code, out-of-line copies, glibc's errno location; and stack unwinding over
//! its `.eh_frame` with stack bytes a firing could have copied.

use std::path::Path;
use std::rc::Rc;

use udtrace_object::debuginfo::{self, ObjectSymbols};
use udtrace_object::elf;
use udtrace_object::patch::{self, Outside, SiteKind};
use udtrace_object::sites;
use udtrace_object::unwind::{Snapshot, Unwinder};
use udtrace_object::{errno, symbols};
use udtrace_process::procfs::{LoadedObject, Mapping};

/// Where the object is mapped: a typical address of a shared object.
const BASE: u64 = 0x7f00_0000_0000;
/// Where trampolines and out-of-line copies go: within 2 GiB of `BASE`, and far away.
const NEAR: u64 = BASE - 0x1000_0000;
const FAR: u64 = 0x1000;
/// Functions looked at in detail, and sites per function: enough to reach every kind
/// of code while keeping one run short on big objects.
const MAX_FUNCTIONS: usize = 48;
const MAX_SITES: usize = 64;

pub fn run(data: &[u8]) {
    let Ok(info) = elf::parse(data) else { return };
    for s in &info.segments {
        let _ = info.vaddr_to_offset(s.vaddr.wrapping_add(s.filesz / 2));
        let _ = info.offset_to_vaddr(s.offset.wrapping_add(s.filesz / 2));
    }
    let entry = info.entry;
    // Its own bytes as its separate debug file half of the time: the same build-id, so
    // the debug file's symbols are merged in.
    let debug = data.len().is_multiple_of(2).then_some((data, Path::new("/usr/lib/debug/fuzz.debug")));
    let syms = Rc::new(debuginfo::assemble(info, data.to_vec(), debug));
    let _ = syms.table().lookup(entry);
    for pattern in ["", "*", "main", "_Z*", "*::*", "__errno_location", "f?o[a-c]*"] {
        let _ = syms.table().matching(pattern);
    }

    let obj = loaded(&syms);
    let bias = obj.bias(&syms.info).unwrap_or(0);
    let _ = obj.contains_code(BASE);
    let functions = &syms.table().functions()[..syms.table().functions().len().min(MAX_FUNCTIONS)];
    for f in functions {
        let _ = syms.table().matching(&f.name);
        let _ = symbols::demangle(&f.name);
        function(&syms, f);
    }
    unwind(data, &syms, &obj, bias);
}

/// The object mapped as the loader maps it: each load segment at `BASE` plus its page.
fn loaded(syms: &ObjectSymbols) -> LoadedObject {
    let mappings = syms
        .info
        .segments
        .iter()
        .map(|s| {
            let start = BASE.wrapping_add(s.vaddr & !0xfff);
            Mapping {
                start,
                end: start.wrapping_add(s.memsz.clamp(1, 1 << 32)),
                read: true,
                write: !s.exec,
                exec: s.exec,
                offset: s.offset & !0xfff,
                inode: 1,
                path: Some("/fuzz/libfuzz.so.1".into()),
            }
        })
        .collect();
    LoadedObject { path: "/fuzz/libfuzz.so.1".into(), is_main: false, is_vdso: false, deleted: false, mappings }
}

/// What matching, arming and patching do with one function.
fn function(syms: &ObjectSymbols, f: &symbols::Function) {
    let _ = syms.file_offset(f.addr);
    let _ = syms.instruction_at(f.addr.wrapping_add(f.size / 2));
    let _ = syms.table().lookup(f.addr.wrapping_add(f.size / 2));
    let Some(s) = syms.sites(f) else { return };
    let Some(code) = syms.code(f) else { return };
    let code = &*code;
    let _ = errno::locate(code, f.addr);
    let owned: Vec<(u64, std::borrow::Cow<'_, [u8]>)> = syms
        .table()
        .other_parts(f)
        .into_iter()
        .filter_map(|(a, _)| syms.table().lookup(a).and_then(|(g, _)| Some((g.addr, syms.code(g)?))))
        .collect();
    let parts: Vec<(u64, &[u8])> = owned.iter().map(|(a, c)| (*a, &**c)).collect();
    let outside = Outside { parts: &parts, targets: &[f.addr.wrapping_add(1)] };
    let mut plans = vec![patch::plan_with(code, f.addr, &outside, 0, SiteKind::Entry)];
    for &r in s.returns.iter().take(MAX_SITES) {
        plans.push(patch::plan(code, f.addr, u64::from(r), SiteKind::Return));
    }
    for &o in s.insns.iter().take(MAX_SITES) {
        let at = usize::try_from(o).unwrap_or(usize::MAX);
        let window = code.get(at..).unwrap_or(&[]);
        let _ = sites::probeable(&window[..window.len().min(16)], f.addr.wrapping_add(u64::from(o)));
        let _ = sites::check_offset(&s, f.size, u64::from(o) + 1);
        for new_ip in [NEAR, FAR] {
            let _ = patch::out_of_line(code, f.addr, u64::from(o), new_ip);
        }
        plans.push(patch::plan(code, f.addr, u64::from(o), SiteKind::Offset));
    }
    for plan in plans.into_iter().flatten() {
        for tramp in [NEAR, FAR] {
            let _ = plan.patch_bytes(tramp);
            let _ = plan.relocate_before(tramp);
            let _ = plan.relocate_after(tramp.wrapping_add(64));
        }
    }
}

/// Unwinding from inside each function, over stack words that alternate between
/// addresses in the object's functions and bytes of the object itself.
fn unwind(data: &[u8], syms: &Rc<ObjectSymbols>, obj: &LoadedObject, bias: u64) {
    let lo = obj.mappings.iter().map(|m| m.start).min().unwrap_or(0);
    let hi = obj.mappings.iter().map(|m| m.end).max().unwrap_or(0).max(lo);
    let mut unwinder = Unwinder::default();
    unwinder.add_module(&obj.path, syms, lo..hi, bias);
    let functions = syms.table().functions();
    let tail = &data[data.len().saturating_sub(256)..];
    let mut stack = Vec::new();
    for (i, word) in tail.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..word.len()].copy_from_slice(word);
        stack.extend_from_slice(&w);
        if let Some(f) = functions.get(i % functions.len().max(1)) {
            stack.extend_from_slice(&bias.wrapping_add(f.addr).wrapping_add(f.size / 2).to_le_bytes());
        }
    }
    let sp = 0x7ffd_0000_0000;
    for f in functions.iter().take(8) {
        let ip = bias.wrapping_add(f.addr).wrapping_add(f.size.min(16) / 2);
        for bp in [0, sp + 16, u64::MAX - 4] {
            let _ = unwinder.unwind(&Snapshot { ip, sp, bp, stack: &stack, truncated: false }, 32);
        }
    }
    let _ = unwinder.unwind(&Snapshot { ip: lo, sp: u64::MAX - 8, bp: 0, stack: &stack, truncated: false }, 32);
}
