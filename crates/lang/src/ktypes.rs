//! The running kernel's types, as DTrace for Linux has them from the kernel's CTF:
//! here from its BTF (`/sys/kernel/btf/vmlinux`), whose bytes the caller supplies
//! (this crate does no I/O). Nothing is read or parsed until a program names a type
//! D does not know (`struct task_struct`, `__u8`, `curthread`); a type is imported
//! into the program's [`TypeTable`] the first time it is used, with the layout BTF
//! gives it (offsets, sizes and bit-fields as the kernel has them).

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

use crate::types::{BitField, EnumDef, Field, IntType, Record, Type, TypeTable};

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// One BTF type: its kind, name, flag, size-or-type word and the words that follow.
struct Entry {
    kind: u32,
    name: u32,
    flag: bool,
    size_or_type: u32,
    /// Kind-specific words (members, enumerators, array bounds, int encoding).
    extra: Vec<u32>,
}

/// A parsed BTF type section with its names.
pub struct Btf {
    strings: Vec<u8>,
    /// Index = type id; id 0 is void.
    entries: Vec<Entry>,
    structs: HashMap<String, u32>,
    unions: HashMap<String, u32>,
    enums: HashMap<String, u32>,
    typedefs: HashMap<String, u32>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// How many extra words a type of this kind with `vlen` entries carries.
fn extra_words(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 1,
        KIND_ARRAY => 3,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 3 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 2 * vlen,
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_FUNC | KIND_FLOAT
        | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

impl Btf {
    /// Parses a little-endian BTF blob; `None` if it is malformed.
    pub fn parse(data: &[u8]) -> Option<Btf> {
        if data.get(..2) != Some(&[0x9f, 0xeb]) {
            return None;
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types = data.get(hdr_len + type_off..hdr_len + type_off + type_len)?;
        let strings = data.get(hdr_len + str_off..hdr_len + str_off + str_len)?.to_vec();
        let mut btf = Btf {
            strings,
            entries: vec![Entry { kind: 0, name: 0, flag: false, size_or_type: 0, extra: Vec::new() }],
            structs: HashMap::new(),
            unions: HashMap::new(),
            enums: HashMap::new(),
            typedefs: HashMap::new(),
        };
        let mut off = 0;
        while off < types.len() {
            let name = u32_at(types, off)?;
            let info = u32_at(types, off + 4)?;
            let size_or_type = u32_at(types, off + 8)?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let n = extra_words(kind, vlen)?;
            let mut extra = Vec::with_capacity(n);
            for i in 0..n {
                extra.push(u32_at(types, off + 12 + 4 * i)?);
            }
            off += 12 + 4 * n;
            let id = btf.entries.len() as u32;
            let map = match kind {
                KIND_STRUCT => Some(&mut btf.structs),
                KIND_UNION => Some(&mut btf.unions),
                KIND_ENUM | KIND_ENUM64 => Some(&mut btf.enums),
                KIND_TYPEDEF => Some(&mut btf.typedefs),
                _ => None,
            };
            if let Some(map) = map {
                if name != 0 {
                    let s = str_at(&btf.strings, name).to_string();
                    map.entry(s).or_insert(id);
                }
            }
            btf.entries.push(Entry { kind, name, flag: info >> 31 == 1, size_or_type, extra });
        }
        Some(btf)
    }

    fn name(&self, off: u32) -> &str {
        str_at(&self.strings, off)
    }

    /// The size in bytes of a type, following typedefs and qualifiers.
    fn size(&self, id: u32) -> u64 {
        let Some(e) = self.entries.get(id as usize) else { return 0 };
        match e.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => u64::from(e.size_or_type),
            KIND_PTR => 8,
            KIND_ARRAY => self.size(e.extra[0]) * u64::from(e.extra[2]),
            KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => self.size(e.size_or_type),
            _ => 0,
        }
    }
}

fn str_at(strings: &[u8], off: u32) -> &str {
    let rest = strings.get(off as usize..).unwrap_or(&[]);
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).unwrap_or("")
}

/// Where a program's kernel types come from: a loader of the BTF bytes, called at
/// most once, the first time a type D does not know is looked up.
#[derive(Default)]
pub struct KernelTypes {
    loader: Option<Box<dyn Fn() -> Option<Vec<u8>>>>,
    btf: OnceCell<Option<Btf>>,
    /// BTF type id → the D type it was imported as.
    imported: RefCell<HashMap<u32, Type>>,
}

/// The kernel's module name as DTrace scopes kernel types (`struct vmlinux`task_struct`).
pub fn kernel_scoped(name: &str) -> Option<&str> {
    match name.split_once('`') {
        Some(("vmlinux" | "genunix" | "unix", rest)) => Some(rest),
        _ => None,
    }
}

impl KernelTypes {
    pub fn new(loader: Box<dyn Fn() -> Option<Vec<u8>>>) -> KernelTypes {
        KernelTypes { loader: Some(loader), ..KernelTypes::default() }
    }

    fn btf(&self) -> Option<&Btf> {
        self.btf.get_or_init(|| self.loader.as_ref().and_then(|l| l()).and_then(|d| Btf::parse(&d))).as_ref()
    }

    /// Whether the kernel has a typedef of this name (so that the parser takes it as
    /// a type name, as DTrace's does with the kernel's CTF).
    pub fn has_typedef(&self, name: &str) -> bool {
        let name = kernel_scoped(name).unwrap_or(name);
        self.loader.is_some() && self.btf().is_some_and(|b| b.typedefs.contains_key(name))
    }

    /// The kernel's typedef of this name, imported.
    pub fn typedef(&self, name: &str, types: &mut TypeTable) -> Option<Type> {
        let name = kernel_scoped(name).unwrap_or(name);
        self.loader.as_ref()?;
        let id = *self.btf()?.typedefs.get(name)?;
        Some(self.import(id, types))
    }

    /// The kernel's struct or union with this tag, imported (complete).
    pub fn record(&self, is_union: bool, tag: &str, types: &mut TypeTable) -> Option<Type> {
        let tag = kernel_scoped(tag).unwrap_or(tag);
        self.loader.as_ref()?;
        let btf = self.btf()?;
        let id = *if is_union { &btf.unions } else { &btf.structs }.get(tag)?;
        Some(self.import(id, types))
    }

    /// The kernel's enum with this tag, imported.
    pub fn enumeration(&self, tag: &str, types: &mut TypeTable) -> Option<Type> {
        let tag = kernel_scoped(tag).unwrap_or(tag);
        self.loader.as_ref()?;
        let id = *self.btf()?.enums.get(tag)?;
        Some(self.import(id, types))
    }

    /// The D type of a BTF type, importing the records and enums it names.
    fn import(&self, id: u32, types: &mut TypeTable) -> Type {
        if let Some(t) = self.imported.borrow().get(&id) {
            return t.clone();
        }
        let Some(btf) = self.btf() else { return Type::Void };
        let Some(e) = btf.entries.get(id as usize) else { return Type::Void };
        let t = match e.kind {
            KIND_INT => int_type(btf.name(e.name), e.size_or_type, e.extra[0]),
            KIND_FLOAT => Type::Float(e.size_or_type.min(16) as u8),
            KIND_PTR => Type::Pointer(Box::new(self.import(e.size_or_type, types))),
            KIND_ARRAY => Type::Array(Box::new(self.import(e.extra[0], types)), u64::from(e.extra[2])),
            KIND_STRUCT | KIND_UNION => return self.import_record(btf, id, e, types),
            KIND_FWD => {
                let id = types.record_tag(e.flag, btf.name(e.name));
                if e.flag {
                    Type::Union(id)
                } else {
                    Type::Struct(id)
                }
            }
            KIND_ENUM | KIND_ENUM64 => self.import_enum(btf, e, types),
            KIND_TYPEDEF => match self.import(e.size_or_type, types) {
                // An integer typedef keeps its name for messages and print().
                Type::Int(i) => Type::Int(IntType::new(i.size, i.signed, btf.name(e.name))),
                t => t,
            },
            KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => self.import(e.size_or_type, types),
            KIND_FUNC_PROTO => Type::Function(Box::new(self.import(e.size_or_type, types))),
            _ => Type::Void,
        };
        self.imported.borrow_mut().insert(id, t.clone());
        t
    }

    /// A struct or union: registered before its members are imported, so that
    /// members that point back to it find it.
    fn import_record(&self, btf: &Btf, id: u32, e: &Entry, types: &mut TypeTable) -> Type {
        let is_union = e.kind == KIND_UNION;
        let name = btf.name(e.name);
        let rid = if name.is_empty() { types.anonymous_record(is_union) } else { types.record_tag(is_union, name) };
        let t = if is_union { Type::Union(rid) } else { Type::Struct(rid) };
        self.imported.borrow_mut().insert(id, t.clone());
        if types.records[rid].complete {
            return t;
        }
        let mut fields = Vec::new();
        self.members(btf, e, 0, types, &mut fields);
        let r: &mut Record = &mut types.records[rid];
        r.members = fields;
        r.size = u64::from(e.size_or_type);
        r.align = 8.min(u64::from(e.size_or_type).next_power_of_two()).max(1);
        r.complete = true;
        t
    }

    /// The members of a record at `base` bytes, with those of its unnamed struct and
    /// union members in its own scope (as C names them: `t->member`).
    fn members(&self, btf: &Btf, e: &Entry, base: u64, types: &mut TypeTable, out: &mut Vec<Field>) {
        for m in e.extra.chunks_exact(3) {
            let (name, ty, off) = (btf.name(m[0]), m[1], m[2]);
            let (bit_off, width) = if e.flag { (off & 0xff_ffff, off >> 24) } else { (off, 0) };
            let bit_off = u64::from(bit_off);
            let inner = resolve_alias(btf, ty);
            let inner_entry = &btf.entries[inner as usize];
            if name.is_empty() && matches!(inner_entry.kind, KIND_STRUCT | KIND_UNION) {
                self.members(btf, inner_entry, base + bit_off / 8, types, out);
                continue;
            }
            let dty = self.import(ty, types);
            if width == 0 {
                out.push(Field { name: name.to_string(), ty: dty, offset: base + bit_off / 8, bits: None });
                continue;
            }
            // A bit-field: read the smallest naturally aligned unit that holds it.
            let signed = matches!(&dty, Type::Int(i) if i.signed);
            let iname = match &dty {
                Type::Int(i) => i.name.to_string(),
                _ => "int".to_string(),
            };
            let mut unit = btf.size(ty).clamp(1, 8);
            while unit < 8 && (bit_off % (unit * 8)) + u64::from(width) > unit * 8 {
                unit *= 2;
            }
            let start = bit_off / (unit * 8) * unit;
            let shift = (bit_off - start * 8) as u8;
            out.push(Field {
                name: name.to_string(),
                ty: Type::Int(IntType::new(unit as u8, signed, &iname)),
                offset: base + start,
                bits: Some(BitField { shift, width: width as u8 }),
            });
        }
    }

    fn import_enum(&self, btf: &Btf, e: &Entry, types: &mut TypeTable) -> Type {
        let size = e.size_or_type;
        let name = btf.name(e.name);
        if size != 4 {
            return Type::int(size.clamp(1, 8) as u8, e.flag);
        }
        let eid = if name.is_empty() { types.anonymous_enum() } else { types.enum_tag(name) };
        if !types.enums[eid].defined {
            let step = if e.kind == KIND_ENUM64 { 3 } else { 2 };
            let values: Vec<(String, i64)> = e
                .extra
                .chunks_exact(step)
                .map(|v| {
                    let val = if step == 3 {
                        (u64::from(v[2]) << 32 | u64::from(v[1])) as i64
                    } else if e.flag {
                        i64::from(v[1])
                    } else {
                        i64::from(v[1] as i32)
                    };
                    (btf.name(v[0]).to_string(), val)
                })
                .collect();
            for (n, v) in &values {
                types.enumerators.entry(n.clone()).or_insert((eid, *v));
            }
            let tag = types.enums[eid].tag.clone();
            types.enums[eid] = EnumDef { tag, values, defined: true };
        }
        Type::Enum(eid)
    }
}

/// Follows typedefs and qualifiers.
fn resolve_alias(btf: &Btf, mut id: u32) -> u32 {
    for _ in 0..64 {
        match btf.entries.get(id as usize) {
            Some(e) if matches!(e.kind, KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG) => {
                id = e.size_or_type
            }
            _ => break,
        }
    }
    id
}

/// A BTF integer: its C name (`long unsigned int`), size and signedness.
fn int_type(name: &str, size: u32, encoding: u32) -> Type {
    let signed = (encoding >> 24) & 1 == 1;
    match size {
        1 | 2 | 4 | 8 => Type::Int(IntType::new(size as u8, signed, name)),
        // __int128: bytes D can copy and print but not compute with.
        n => Type::Array(Box::new(Type::int(1, false)), u64::from(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny BTF: int, struct s { int a; unsigned b:3; struct s *next; }, typedef.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0s\0a\0b\0next\0s_t\0".to_vec();
        let mut t = Vec::new();
        let w = |t: &mut Vec<u8>, v: u32| t.extend_from_slice(&v.to_le_bytes());
        // 1: int, 4 bytes, signed.
        w(&mut t, 1);
        w(&mut t, KIND_INT << 24);
        w(&mut t, 4);
        w(&mut t, 1 << 24 | 32);
        // 2: struct s, 16 bytes, kind_flag (bit-field offsets), 3 members.
        w(&mut t, 5);
        w(&mut t, 1 << 31 | KIND_STRUCT << 24 | 3);
        w(&mut t, 16);
        w(&mut t, 7);
        w(&mut t, 1);
        w(&mut t, 0);
        w(&mut t, 9);
        w(&mut t, 1);
        w(&mut t, 3 << 24 | 36);
        w(&mut t, 11);
        w(&mut t, 3);
        w(&mut t, 64);
        // 3: pointer to 2.
        w(&mut t, 0);
        w(&mut t, KIND_PTR << 24);
        w(&mut t, 2);
        // 4: typedef s_t = struct s.
        w(&mut t, 16);
        w(&mut t, KIND_TYPEDEF << 24);
        w(&mut t, 2);
        let mut out = Vec::new();
        out.extend_from_slice(&[0x9f, 0xeb, 1, 0]);
        for v in [24u32, 0, t.len() as u32, t.len() as u32, strings.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&t);
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn imports_records_with_their_layout() {
        let data = blob();
        let k = KernelTypes::new(Box::new(move || Some(data.clone())));
        let mut types = TypeTable::default();
        assert!(k.has_typedef("s_t"));
        assert!(!k.has_typedef("nope_t"));
        let Some(Type::Struct(id)) = k.record(false, "vmlinux`s", &mut types) else { panic!("struct s") };
        assert_eq!(types.size_of(&Type::Struct(id)), Some(16));
        let b = types.field(id, "b").unwrap();
        assert_eq!((b.offset, b.bits), (4, Some(BitField { shift: 4, width: 3 })));
        let next = types.field(id, "next").unwrap();
        assert_eq!(next.offset, 8);
        assert_eq!(next.ty, Type::Pointer(Box::new(Type::Struct(id))));
        assert_eq!(k.typedef("s_t", &mut types), Some(Type::Struct(id)));
    }

    #[test]
    fn no_loader_means_no_kernel_types() {
        let k = KernelTypes::default();
        let mut types = TypeTable::default();
        assert!(!k.has_typedef("s_t"));
        assert!(k.record(false, "task_struct", &mut types).is_none());
    }
}
