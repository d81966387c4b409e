//! D's own memory: the storage areas of global and clause-local variables, laid
//! out as DTrace lays them out, and the addresses of D objects. A pointer into a D
//! variable (`&a[2]`, `p = a`) is an address in a range no user process can map
//! (above the canonical user half of x86-64), so loads through any pointer can tell
//! D memory from the traced process's.

use std::collections::HashMap;

use udtrace_lang::ir::VarInfo;
use udtrace_lang::storage::{self, Slot};
use udtrace_lang::types::{Type, TypeTable};

use crate::value::Value;

/// Where D's address ranges start: one range per kind of storage.
pub const D_BASE: u64 = 0xffff_d000_0000_0000;
/// Global variables.
pub const GLOBALS: u64 = D_BASE;
/// Clause-local (`this->`) variables.
pub const LOCALS: u64 = D_BASE + (1 << 40);
/// Thread-local variables: `THREAD_LOCALS + (id << 28) + offset`, for the thread
/// that uses the address.
pub const THREAD_LOCALS: u64 = D_BASE + (2 << 40);
/// The CPUs' `cpuinfo_t` (what `curcpu` points to), one after another.
pub const CPUS: u64 = D_BASE + (3 << 40);
/// Strings a clause uses through a pointer (`char *p = execname;`): DTrace's
/// temporary strings, which last for the clause.
pub const TEMPORARIES: u64 = D_BASE + (4 << 40);
const D_END: u64 = D_BASE + (5 << 40);

/// One CPU as `cpuinfo_t` describes it (sched.d).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuInfo {
    pub id: i32,
    pub pset: i32,
    /// The physical package it is on.
    pub chip: i32,
    /// Its NUMA node.
    pub lgrp: i32,
}

/// The size of a `cpuinfo_t`.
pub const CPUINFO_SIZE: u64 = 16;

impl CpuInfo {
    fn bytes(self) -> Vec<u8> {
        [self.id, self.pset, self.chip, self.lgrp].iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

/// The address of CPU `cpu`'s `cpuinfo_t`.
pub fn cpuinfo_address(cpu: u64) -> u64 {
    CPUS + cpu * CPUINFO_SIZE
}

/// `len` bytes of the `cpuinfo_t` table at `addr`; CPUs not described read as
/// their number alone.
pub fn read_cpuinfo(cpus: &[CpuInfo], addr: u64, len: usize) -> Option<Vec<u8>> {
    let rel = addr.checked_sub(CPUS)?;
    let (first, off) = (rel / CPUINFO_SIZE, (rel % CPUINFO_SIZE) as usize);
    let mut table = Vec::new();
    let mut cpu = first;
    while table.len() < off + len {
        let info = cpus.iter().find(|c| c.id as u64 == cpu).copied();
        table.extend(info.unwrap_or(CpuInfo { id: cpu as i32, ..CpuInfo::default() }).bytes());
        cpu += 1;
    }
    Some(table[off..off + len].to_vec())
}
/// The largest thread-local variable addressable.
const TLS_SPAN: u64 = 1 << 28;

/// DT_NULL_STRING: how string storage holds the NULL string.
const NULL_STRING: [u8; 2] = [0x7f, 0x00];

/// Whether `addr` is in D's memory rather than the traced process's.
pub fn is_d_address(addr: u64) -> bool {
    (D_BASE..D_END).contains(&addr)
}

/// The address of thread-local variable `id` (for the current thread).
pub fn thread_local_address(id: usize) -> u64 {
    THREAD_LOCALS + ((id as u64) << 28)
}

/// A thread-local address as (variable id, offset).
pub fn thread_local_at(addr: u64) -> Option<(usize, u64)> {
    let rel = addr.checked_sub(THREAD_LOCALS)?;
    let id = (rel / TLS_SPAN) as usize;
    (addr < D_END).then_some((id, rel % TLS_SPAN))
}

/// Whether values of a type are kept as bytes (everything with a memory layout;
/// stacks and symbolized addresses are kept as values).
pub fn has_bytes(ty: &Type) -> bool {
    !matches!(ty, Type::Stack { .. } | Type::Symbol { .. })
}

/// A value as the bytes of storage of `size` bytes of type `ty`.
pub fn encode(v: &Value, ty: &Type, size: usize) -> Vec<u8> {
    let mut out = match v {
        Value::Int(i) if ty.is_string() && i.bits == 0 => NULL_STRING.to_vec(),
        Value::Int(i) => i.bits.to_le_bytes().to_vec(),
        Value::Str(s) => s.clone(),
        Value::Bytes(b) => b.clone(),
        Value::Stack(_) => Vec::new(),
    };
    out.resize(size, 0);
    out
}

/// Storage bytes read back as a value of type `ty`.
pub fn decode(bytes: &[u8], ty: &Type) -> Value {
    if ty.is_string() && bytes.starts_with(&NULL_STRING) {
        return crate::eval::null_string();
    }
    crate::eval::value_from_bytes(bytes, ty)
}

/// The storage area of one scope's variables.
#[derive(Debug)]
pub struct Area {
    base: u64,
    bytes: Vec<u8>,
    slots: Vec<Option<Slot>>,
    types: Vec<Type>,
    /// Values with no byte form, by variable.
    values: HashMap<usize, Value>,
    /// Something was stored since the last clear: a firing that stores nothing
    /// (most) clears nothing.
    dirty: bool,
}

impl Area {
    pub fn new(base: u64, vars: &[VarInfo], types: &TypeTable, strsize: usize) -> Area {
        let slots = storage::layout(vars, types, strsize as u64);
        let size = storage::area_size(&slots) as usize;
        Area {
            base,
            bytes: vec![0; size],
            slots,
            types: vars.iter().map(|v| v.ty.clone()).collect(),
            values: HashMap::new(),
            dirty: false,
        }
    }

    /// Every variable back to zero (clause-locals at each probe firing).
    pub fn clear(&mut self) {
        if self.dirty {
            self.bytes.fill(0);
            self.values.clear();
            self.dirty = false;
        }
    }

    fn slot(&self, id: usize) -> Option<Slot> {
        self.slots.get(id).copied().flatten()
    }

    /// The value of variable `id`; `None` when it has no storage here.
    pub fn get(&self, id: usize) -> Option<Value> {
        let ty = &self.types[id];
        if !has_bytes(ty) {
            return self.values.get(&id).cloned();
        }
        let s = self.slot(id)?;
        Some(decode(&self.bytes[s.offset as usize..(s.offset + s.size) as usize], ty))
    }

    pub fn set(&mut self, id: usize, v: Value) {
        self.dirty = true;
        let ty = &self.types[id];
        if !has_bytes(ty) {
            self.values.insert(id, v);
            return;
        }
        let Some(s) = self.slot(id) else { return };
        let data = encode(&v, ty, s.size as usize);
        self.bytes[s.offset as usize..(s.offset + s.size) as usize].copy_from_slice(&data);
    }

    /// The address of variable `id`'s storage.
    pub fn address(&self, id: usize) -> u64 {
        self.base + self.slot(id).map_or(0, |s| s.offset)
    }

    /// `len` bytes at `addr`. Past the variables the area reads as zeros, as the
    /// rest of the storage map DTrace keeps them in does.
    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let off = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let mut out = vec![0; len];
        if off < self.bytes.len() {
            let n = (self.bytes.len() - off).min(len);
            out[..n].copy_from_slice(&self.bytes[off..off + n]);
        }
        Some(out)
    }

    /// Writes `data` at `addr`; what falls past the variables is dropped.
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let Some(off) = addr.checked_sub(self.base).and_then(|o| usize::try_from(o).ok()) else { return };
        self.dirty = true;
        if off < self.bytes.len() {
            let n = (self.bytes.len() - off).min(data.len());
            self.bytes[off..off + n].copy_from_slice(&data[..n]);
        }
    }

    /// Whether `addr` falls in this area's address range.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < (1 << 40)
    }
}

/// The clause's temporary strings.
#[derive(Debug, Default)]
pub struct Temporaries {
    bytes: Vec<u8>,
}

impl Temporaries {
    /// Copies a string (and its NUL) in; its address.
    pub fn add(&mut self, s: &[u8]) -> u64 {
        let at = TEMPORARIES + self.bytes.len() as u64;
        self.bytes.extend_from_slice(s);
        self.bytes.push(0);
        at
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let off = usize::try_from(addr.checked_sub(TEMPORARIES)?).ok()?;
        self.bytes.get(off..off.checked_add(len)?).map(<[u8]>::to_vec)
    }

    pub fn contains(&self, addr: u64) -> bool {
        (TEMPORARIES..D_END).contains(&addr)
    }
}
