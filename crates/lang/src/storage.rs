//! Where D variables live: DTrace lays global and clause-local variables out one
//! after another in a storage area of their scope, each at an offset aligned as
//! dt_ident_set_storage aligns it; thread-local variables and associative array
//! elements are dynamic (each its own storage, offset 0). udtrace keeps its global
//! and clause-local variables in such areas, so that pointers into them (`&a[2]`)
//! are addresses, and `-S` shows the same layout DTrace's does.

use crate::ir::VarInfo;
use crate::types::{Type, TypeTable};

/// One variable's place in its storage area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub offset: u64,
    pub size: u64,
}

/// The size of a variable's storage: strings take `strsize` bytes.
pub fn storage_size(ty: &Type, types: &TypeTable, strsize: u64) -> u64 {
    match ty {
        Type::String => strsize,
        Type::Stack { .. } | Type::Symbol { .. } => 8,
        other => types.size_of(other).unwrap_or(0),
    }
}

/// The alignment DTrace gives a variable of this type (dt_parser.c): integers,
/// enums and pointers their size, strings 1, arrays their element's size, structs
/// and unions (and anything else) 8.
pub fn storage_alignment(ty: &Type, types: &TypeTable) -> u64 {
    match ty {
        Type::Int(_) | Type::Enum(_) | Type::Pointer(_) | Type::Float(_) => types.size_of(ty).unwrap_or(8),
        Type::String => 1,
        Type::Array(elem, _) => match &**elem {
            Type::String => 1,
            e => types.size_of(e).unwrap_or(8),
        },
        _ => 8,
    }
}

/// Lays variables out in declaration order. Associative arrays have no slot.
/// DTrace rounds offsets with `(next + align - 1) & ~(align - 1)`, which is only a
/// rounding for powers of two; the same expression is used here so that offsets
/// match for every type.
pub fn layout(vars: &[VarInfo], types: &TypeTable, strsize: u64) -> Vec<Option<Slot>> {
    let mut next = 0u64;
    vars.iter()
        .map(|v| {
            if v.keys.is_some() {
                return None;
            }
            let size = storage_size(&v.ty, types, strsize);
            let align = storage_alignment(&v.ty, types).max(1);
            let offset = next.wrapping_add(align - 1) & !(align - 1);
            next = offset + size;
            Some(Slot { offset, size })
        })
        .collect()
}

/// The total size of a storage area laid out by [`layout`].
pub fn area_size(slots: &[Option<Slot>]) -> u64 {
    slots.iter().flatten().map(|s| s.offset + s.size).max().unwrap_or(0)
}

/// The CPUs' `cpuinfo_t` (sched.d): what `curcpu` points to, in D memory.
pub fn install_cpuinfo(types: &mut TypeTable) {
    let int = |name: &str| Type::named_int(4, true, name);
    for name in ["chipid_t", "lgrp_id_t"] {
        types.typedefs.insert(name.into(), int(name));
    }
    let id = types.record_tag(false, "cpuinfo");
    types.complete_record(
        id,
        vec![
            ("cpu_id".into(), int("processorid_t")),
            ("cpu_pset".into(), int("psetid_t")),
            ("cpu_chip".into(), int("chipid_t")),
            ("cpu_lgrp".into(), int("lgrp_id_t")),
        ],
    );
    types.typedefs.insert("cpuinfo_t".into(), Type::Struct(id));
    types.typedefs.insert("cpuinfo_t_p".into(), Type::Pointer(Box::new(Type::Struct(id))));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(ty: Type) -> VarInfo {
        VarInfo { name: "v".into(), ty, keys: None }
    }

    #[test]
    fn offsets_follow_dtrace_alignment() {
        let t = TypeTable::default();
        let ch = Type::int(1, true);
        let offset_after_char = |ty: Type| layout(&[var(ch.clone()), var(ty)], &t, 256)[1].unwrap().offset;
        assert_eq!(offset_after_char(Type::int(1, true)), 1);
        assert_eq!(offset_after_char(Type::int(2, true)), 2);
        assert_eq!(offset_after_char(Type::int(4, true)), 4);
        assert_eq!(offset_after_char(Type::int(8, true)), 8);
        assert_eq!(offset_after_char(Type::Pointer(Box::new(Type::Void))), 8);
        assert_eq!(offset_after_char(Type::Array(Box::new(Type::int(2, true)), 5)), 2);
        assert_eq!(offset_after_char(Type::String), 1);
        let strings = layout(&[var(Type::String), var(Type::String)], &t, 256);
        assert_eq!(strings[1], Some(Slot { offset: 256, size: 256 }));
        let assoc = VarInfo { name: "a".into(), ty: Type::int(4, true), keys: Some(vec![]) };
        assert_eq!(layout(&[assoc], &t, 256), vec![None]);
    }
}
