//! The running kernel's BTF (`/sys/kernel/btf/vmlinux`): where the fields of its
//! structs are, so that programs that read task data need no kernel headers and no
//! offsets compiled in. Parsing is pure; [`Btf::vmlinux`] is the one read.

use std::collections::HashMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("cannot read the kernel's BTF at {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    #[error("the kernel's BTF has no member {member} in {within}")]
    NoMember { within: String, member: String },
    #[error("{0} is a bit field; only whole members can be read")]
    BitField(String),
    #[error("{0} is not a struct, union or array here")]
    NotComposite(String),
    #[error("the kernel's BTF has no enumerator {0}")]
    NoEnumerator(String),
}

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, Clone)]
struct Member {
    name: u32,
    ty: u32,
    /// In bits.
    offset: u32,
    bitfield: bool,
}

#[derive(Debug, Clone)]
enum Kind {
    Int,
    Ptr,
    Array {
        elem: u32,
        len: u32,
    },
    Record(Vec<Member>),
    /// A function prototype: its parameters' type ids.
    Proto(Vec<u32>),
    /// Typedefs and qualifiers: another name for `ty`.
    Alias,
    Other,
}

#[derive(Debug, Clone)]
struct TypeEntry {
    kind: Kind,
    /// Size in bytes for ints, records, enums; the referenced type for pointers,
    /// typedefs and qualifiers.
    size_or_type: u32,
}

/// A member's place: its byte offset from the start of the outer struct and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub offset: u32,
    pub size: u32,
}

pub struct Btf {
    strings: Vec<u8>,
    /// Index = type id; id 0 is void.
    types: Vec<TypeEntry>,
    structs: HashMap<String, u32>,
    enumerators: HashMap<String, i64>,
    /// Raw tracepoint name → the id of its `btf_trace_<name>` typedef.
    tracepoints: HashMap<String, u32>,
}

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

fn u32_at(b: &[u8], off: usize) -> Result<u32, BtfError> {
    let s = b.get(off..off + 4).ok_or(BtfError::Malformed("truncated"))?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

impl Btf {
    /// The running kernel's BTF.
    pub fn vmlinux() -> Result<Btf, BtfError> {
        let data =
            std::fs::read(VMLINUX).map_err(|e| BtfError::Read { path: VMLINUX.into(), reason: e.to_string() })?;
        Btf::parse(&data)
    }

    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        if data.get(..2) != Some(&[0x9f, 0xeb]) {
            return Err(BtfError::Malformed("bad magic (or not little-endian)"));
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types_bytes = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or(BtfError::Malformed("type section out of bounds"))?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(BtfError::Malformed("string section out of bounds"))?
            .to_vec();
        let mut btf = Btf {
            strings,
            types: vec![TypeEntry { kind: Kind::Other, size_or_type: 0 }],
            structs: HashMap::new(),
            enumerators: HashMap::new(),
            tracepoints: HashMap::new(),
        };
        let mut pos = 0;
        while pos < types_bytes.len() {
            let name = u32_at(types_bytes, pos)?;
            let info = u32_at(types_bytes, pos + 4)?;
            let size_or_type = u32_at(types_bytes, pos + 8)?;
            pos += 12;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            let kind = match (info >> 24) & 0x1f {
                KIND_INT => {
                    pos += 4;
                    Kind::Int
                }
                KIND_PTR => Kind::Ptr,
                KIND_ARRAY => {
                    let elem = u32_at(types_bytes, pos)?;
                    let len = u32_at(types_bytes, pos + 8)?;
                    pos += 12;
                    Kind::Array { elem, len }
                }
                k @ (KIND_STRUCT | KIND_UNION) => {
                    let mut members = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let mname = u32_at(types_bytes, pos)?;
                        let ty = u32_at(types_bytes, pos + 4)?;
                        let raw = u32_at(types_bytes, pos + 8)?;
                        pos += 12;
                        let (offset, bitfield) =
                            if kind_flag { (raw & 0xff_ffff, raw >> 24 != 0) } else { (raw, false) };
                        members.push(Member { name: mname, ty, offset, bitfield });
                    }
                    if k == KIND_STRUCT && name != 0 {
                        let id = btf.types.len() as u32;
                        let n = btf.str_at(name).to_string();
                        // The first complete definition wins; forward ones are KIND_FWD.
                        btf.structs.entry(n).or_insert(id);
                    }
                    Kind::Record(members)
                }
                KIND_ENUM => {
                    for _ in 0..vlen {
                        let ename = u32_at(types_bytes, pos)?;
                        let val = u32_at(types_bytes, pos + 4)? as i32;
                        pos += 8;
                        btf.enumerators.insert(btf.str_at(ename).to_string(), i64::from(val));
                    }
                    Kind::Int
                }
                KIND_ENUM64 => {
                    for _ in 0..vlen {
                        let ename = u32_at(types_bytes, pos)?;
                        let lo = u64::from(u32_at(types_bytes, pos + 4)?);
                        let hi = u64::from(u32_at(types_bytes, pos + 8)?);
                        pos += 12;
                        btf.enumerators.insert(btf.str_at(ename).to_string(), (hi << 32 | lo) as i64);
                    }
                    Kind::Int
                }
                KIND_TYPEDEF if name != 0 => {
                    let n = btf.str_at(name);
                    if let Some(tp) = n.strip_prefix("btf_trace_") {
                        let tp = tp.to_string();
                        btf.tracepoints.insert(tp, btf.types.len() as u32);
                    }
                    Kind::Alias
                }
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => Kind::Alias,
                KIND_FUNC_PROTO => {
                    let mut params = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        params.push(u32_at(types_bytes, pos + 4)?);
                        pos += 8;
                    }
                    Kind::Proto(params)
                }
                KIND_VAR => {
                    pos += 4;
                    Kind::Other
                }
                KIND_DATASEC => {
                    pos += 12 * vlen;
                    Kind::Other
                }
                KIND_DECL_TAG => {
                    pos += 4;
                    Kind::Other
                }
                0 | 7 | 12 | 16 => Kind::Other, // unknown-0, FWD, FUNC, FLOAT
                _ => return Err(BtfError::Malformed("unknown type kind")),
            };
            btf.types.push(TypeEntry { kind, size_or_type });
        }
        Ok(btf)
    }

    fn str_at(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn entry(&self, id: u32) -> Result<&TypeEntry, BtfError> {
        self.types.get(id as usize).ok_or(BtfError::Malformed("type id out of range"))
    }

    /// `id` with typedefs and qualifiers stripped.
    fn resolve(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..32 {
            let e = self.entry(id)?;
            match e.kind {
                Kind::Alias => id = e.size_or_type,
                _ => return Ok(id),
            }
        }
        Err(BtfError::Malformed("typedef loop"))
    }

    fn size_of(&self, id: u32) -> Result<u32, BtfError> {
        let id = self.resolve(id)?;
        let e = self.entry(id)?;
        Ok(match e.kind {
            Kind::Ptr => 8,
            Kind::Array { elem, len } => self.size_of(elem)?.saturating_mul(len),
            _ => e.size_or_type,
        })
    }

    /// Finds a named member in record `id`, looking into anonymous members (the kernel
    /// wraps many fields in unnamed structs and unions): (bit offset, member).
    fn find_member(&self, id: u32, name: &str) -> Result<Option<(u32, Member)>, BtfError> {
        let Kind::Record(members) = &self.entry(self.resolve(id)?)?.kind else { return Ok(None) };
        for m in members {
            if m.name != 0 && self.str_at(m.name) == name {
                return Ok(Some((m.offset, m.clone())));
            }
        }
        for m in members.iter().filter(|m| m.name == 0) {
            if let Some((off, found)) = self.find_member(m.ty, name)? {
                return Ok(Some((m.offset + off, found)));
            }
        }
        Ok(None)
    }

    /// The type id of `struct name`.
    pub fn struct_id(&self, name: &str) -> Result<u32, BtfError> {
        self.structs.get(name).copied().ok_or_else(|| BtfError::NoStruct(name.into()))
    }

    /// The size of `struct name` in bytes.
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        self.size_of(self.struct_id(name)?)
    }

    /// Where `path` lies in `struct name`: members separated by dots, with `[i]` for an
    /// array element (`signal.pids[2]`, `thread_info.cpu`). Pointers are not followed:
    /// each step stays inside the same object.
    pub fn place(&self, name: &str, path: &str) -> Result<Place, BtfError> {
        let mut id = self.struct_id(name)?;
        let mut offset = 0u32;
        let mut within = format!("struct {name}");
        for step in path.split('.') {
            let (field, index) = match step.split_once('[') {
                Some((f, rest)) => {
                    let i = rest
                        .trim_end_matches(']')
                        .parse::<u32>()
                        .map_err(|_| BtfError::Malformed("bad index in path"))?;
                    (f, Some(i))
                }
                None => (step, None),
            };
            let Some((bits, m)) = self.find_member(id, field)? else {
                return Err(BtfError::NoMember { within, member: field.into() });
            };
            if m.bitfield || bits % 8 != 0 {
                return Err(BtfError::BitField(format!("{within}.{field}")));
            }
            offset += bits / 8;
            id = self.resolve(m.ty)?;
            if let Some(i) = index {
                let Kind::Array { elem, len } = self.entry(id)?.kind else {
                    return Err(BtfError::NotComposite(format!("{within}.{field}")));
                };
                // A flexible array member (`numbers[]`) has no length to check against.
                if i >= len && len != 0 {
                    return Err(BtfError::NoMember { within: format!("{within}.{field}"), member: format!("[{i}]") });
                }
                offset += i * self.size_of(elem)?;
                id = self.resolve(elem)?;
            }
            within = format!("{within}.{step}");
        }
        Ok(Place { offset, size: self.size_of(id)? })
    }

    /// How many arguments a raw tracepoint passes its programs (its `TP_PROTO`), or
    /// `None` where the kernel has no such tracepoint.
    pub fn tracepoint_arity(&self, name: &str) -> Option<usize> {
        let id = *self.tracepoints.get(name)?;
        let target = self.resolve(id).ok()?;
        let e = self.entry(target).ok()?;
        let proto = match e.kind {
            Kind::Ptr => self.resolve(e.size_or_type).ok()?,
            _ => target,
        };
        match &self.entry(proto).ok()?.kind {
            // The first parameter is the tracepoint's private data, not an argument.
            Kind::Proto(params) => Some(params.len().saturating_sub(1)),
            _ => None,
        }
    }

    /// The value of an enumerator (`PIDTYPE_PGID`).
    pub fn enumerator(&self, name: &str) -> Result<i64, BtfError> {
        self.enumerators.get(name).copied().ok_or_else(|| BtfError::NoEnumerator(name.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made BTF blob: `struct inner { int a; int b; }`, `struct outer { long x;
    /// struct inner in; union { int u; }; int arr[4]; }` and `enum e { E1 = 7 }`.
    fn blob() -> Vec<u8> {
        let mut strs = b"\0int\0inner\0a\0b\0outer\0x\0in\0u\0arr\0long\0E1\0e\0".to_vec();
        let off = |s: &str, strs: &[u8]| {
            let needle = format!("\0{s}\0");
            (strs.windows(needle.len()).position(|w| w == needle.as_bytes()).unwrap() + 1) as u32
        };
        let mut t = Vec::new();
        let mut ty = |name: u32, kind: u32, vlen: u32, so: u32, extra: &[u32]| {
            t.extend_from_slice(&name.to_le_bytes());
            t.extend_from_slice(&(kind << 24 | vlen).to_le_bytes());
            t.extend_from_slice(&so.to_le_bytes());
            for e in extra {
                t.extend_from_slice(&e.to_le_bytes());
            }
        };
        let s = |n: &str| off(n, &strs);
        ty(s("int"), KIND_INT, 0, 4, &[32]); // 1
        ty(s("long"), KIND_INT, 0, 8, &[64]); // 2
        ty(s("inner"), KIND_STRUCT, 2, 8, &[s("a"), 1, 0, s("b"), 1, 32]); // 3
        ty(0, KIND_UNION, 1, 4, &[s("u"), 1, 0]); // 4
        ty(0, KIND_ARRAY, 0, 0, &[1, 1, 4]); // 5: int[4]
        ty(s("outer"), KIND_STRUCT, 4, 40, &[s("x"), 2, 0, s("in"), 3, 64, 0, 4, 128, s("arr"), 5, 160]); // 6
        ty(s("e"), KIND_ENUM, 1, 4, &[s("E1"), 7]); // 7
        strs.push(0);
        let mut out = vec![0x9f, 0xeb, 1, 0];
        out.extend_from_slice(&24u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(t.len() as u32).to_le_bytes());
        out.extend_from_slice(&(t.len() as u32).to_le_bytes());
        out.extend_from_slice(&(strs.len() as u32).to_le_bytes());
        out.extend(t);
        out.extend(strs);
        out
    }

    #[test]
    fn places_of_members() {
        let b = Btf::parse(&blob()).unwrap();
        assert_eq!(b.place("outer", "x").unwrap(), Place { offset: 0, size: 8 });
        assert_eq!(b.place("outer", "in.b").unwrap(), Place { offset: 12, size: 4 });
        assert_eq!(b.place("outer", "u").unwrap(), Place { offset: 16, size: 4 }, "inside an anonymous union");
        assert_eq!(b.place("outer", "arr[3]").unwrap(), Place { offset: 32, size: 4 });
        assert_eq!(b.place("outer", "arr").unwrap(), Place { offset: 20, size: 16 });
        assert!(matches!(b.place("outer", "nope"), Err(BtfError::NoMember { .. })));
        assert!(matches!(b.place("outer", "arr[4]"), Err(BtfError::NoMember { .. })));
        assert!(matches!(b.place("missing", "x"), Err(BtfError::NoStruct(_))));
        assert_eq!(b.enumerator("E1").unwrap(), 7);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Btf::parse(b"").is_err());
        assert!(Btf::parse(&[0x9f, 0xeb, 1, 0, 24, 0, 0, 0, 0, 0, 0, 0, 255, 255, 0, 0]).is_err());
        let mut b = blob();
        b.truncate(60);
        assert!(Btf::parse(&b).is_err());
    }
}
