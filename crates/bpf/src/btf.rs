//! The running kernel's BTF (`/sys/kernel/btf/vmlinux`): where the fields of its
//! structs are, so that programs that read task data need no kernel headers and no
//! offsets compiled in. Parsing is pure; [`Btf::vmlinux`] is the one read.
//!
//! The kernel's BTF is 5.5 MB of 130,000 types, of which udtrace asks a few dozen
//! places: it is mapped (read where it cannot be), parsing only finds where each type's
//! record starts, and names are indexed when first asked for. Building every type and
//! name up front cost 20 ms of udtrace's start-up for the one offset the loader hook
//! needs.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
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

/// A member of a struct or union, as its record has it.
#[derive(Debug, Clone, Copy)]
struct Member {
    name: u32,
    ty: u32,
    /// In bits.
    offset: u32,
    bitfield: bool,
}

/// One type's record header: name, info word, size or referenced type; its
/// kind-specific words follow at `extra` in the type section.
#[derive(Debug, Clone, Copy)]
struct Rec {
    name: u32,
    info: u32,
    /// Size in bytes for ints, records, enums; the referenced type for pointers,
    /// typedefs and qualifiers.
    size_or_type: u32,
    extra: usize,
}

impl Rec {
    fn kind(&self) -> u32 {
        (self.info >> 24) & 0x1f
    }

    fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }

    fn is_alias(&self) -> bool {
        matches!(self.kind(), KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG)
    }
}

/// A member's place: its byte offset from the start of the outer struct and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub offset: u32,
    pub size: u32,
}

enum Bytes {
    Owned(Vec<u8>),
    Mapped(udtrace_sys::mmap::FileMap),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m.bytes(),
        }
    }
}

pub struct Btf {
    bytes: Bytes,
    types: Range<usize>,
    strings: Range<usize>,
    /// Where each type's record starts in the type section; index = type id, id 0
    /// (void) has none.
    offsets: Vec<u32>,
    /// The structs looked up so far by name (the first complete definition of a
    /// name): each is found by a scan of the records, as udtrace asks for a few.
    structs: Mutex<HashMap<Box<str>, Option<u32>>>,
    enumerators: OnceLock<HashMap<Box<str>, i64>>,
    /// Raw tracepoint name → the id of its `btf_trace_<name>` typedef.
    tracepoints: OnceLock<HashMap<Box<str>, u32>>,
}

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

fn u32_at(b: &[u8], off: usize) -> Result<u32, BtfError> {
    let s = b.get(off..off.wrapping_add(4)).ok_or(BtfError::Malformed("truncated"))?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Per kind (the 5 bits of the info word): the bytes of its kind-specific words, fixed
/// and per `vlen` entry; `u16::MAX`, a kind BTF does not have. A table rather than a
/// `match`: the walk over the kernel's 130,000 types is branchy enough without an
/// indirect jump per type (0.7 ms against 0.3).
const EXTRA: [(u16, u16); 32] = {
    let mut t = [(u16::MAX, 0); 32];
    // Unknown-0, FWD (7), FUNC (12) and FLOAT (16) are followed by nothing too.
    let bare = [0, KIND_PTR, 7, KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, 12, 16, KIND_TYPE_TAG];
    let mut i = 0;
    while i < bare.len() {
        t[bare[i] as usize] = (0, 0);
        i += 1;
    }
    let sized = [
        (KIND_INT, (4, 0)),
        (KIND_ARRAY, (12, 0)),
        (KIND_STRUCT, (0, 12)),
        (KIND_UNION, (0, 12)),
        (KIND_ENUM, (0, 8)),
        (KIND_FUNC_PROTO, (0, 8)),
        (KIND_VAR, (4, 0)),
        (KIND_DATASEC, (0, 12)),
        (KIND_DECL_TAG, (4, 0)),
        (KIND_ENUM64, (0, 12)),
    ];
    let mut i = 0;
    while i < sized.len() {
        t[sized[i].0 as usize] = sized[i].1;
        i += 1;
    }
    t
};

impl Btf {
    /// The running kernel's BTF: mapped where the kernel allows it (6.16 on), else read.
    pub fn vmlinux() -> Result<Btf, BtfError> {
        let err = |e: std::io::Error| BtfError::Read { path: VMLINUX.into(), reason: e.to_string() };
        let file = std::fs::File::open(VMLINUX).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let mapped = usize::try_from(len)
            .ok()
            .and_then(|len| udtrace_sys::mmap::FileMap::map(std::os::fd::AsFd::as_fd(&file), len).ok());
        let bytes = match mapped {
            Some(m) => Bytes::Mapped(m),
            None => {
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut &file, &mut data).map_err(err)?;
                Bytes::Owned(data)
            }
        };
        Btf::from_bytes(bytes)
    }

    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        Btf::from_bytes(Bytes::Owned(data.to_vec()))
    }

    fn from_bytes(bytes: Bytes) -> Result<Btf, BtfError> {
        let data = bytes.get();
        if data.get(..2) != Some(&[0x9f, 0xeb]) {
            return Err(BtfError::Malformed("bad magic (or not little-endian)"));
        }
        let section = |off: usize, len: usize| -> Result<Range<usize>, &'static str> {
            let hdr_len = u32_at(data, 4).map_err(|_| "truncated")? as usize;
            let start = hdr_len.checked_add(off).ok_or("section out of bounds")?;
            let end = start.checked_add(len).filter(|&e| e <= data.len()).ok_or("section out of bounds")?;
            Ok(start..end)
        };
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let types = section(type_off, type_len).map_err(|_| BtfError::Malformed("type section out of bounds"))?;
        let strings = section(str_off, str_len).map_err(|_| BtfError::Malformed("string section out of bounds"))?;
        let t = &data[types.clone()];
        // One pass that only finds where each record starts (and checks it is whole).
        let mut offsets = Vec::with_capacity(t.len() / 24);
        offsets.push(0);
        let mut pos = 0;
        while let Some(head) = t.get(pos..pos + 12) {
            let info = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            offsets.push(pos as u32);
            let (fixed, each) = EXTRA[((info >> 24) & 0x1f) as usize];
            if fixed == u16::MAX {
                return Err(BtfError::Malformed("unknown type kind"));
            }
            pos += 12 + usize::from(fixed) + usize::from(each) * (info & 0xffff) as usize;
        }
        if pos != t.len() {
            return Err(BtfError::Malformed("truncated"));
        }
        Ok(Btf {
            bytes,
            types,
            strings,
            offsets,
            structs: Mutex::new(HashMap::new()),
            enumerators: OnceLock::new(),
            tracepoints: OnceLock::new(),
        })
    }

    fn type_bytes(&self) -> &[u8] {
        &self.bytes.get()[self.types.clone()]
    }

    fn str_at(&self, off: u32) -> &str {
        let strings = &self.bytes.get()[self.strings.clone()];
        let rest = strings.get(off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    /// The record of type `id` (whole: checked when parsed).
    fn entry(&self, id: u32) -> Result<Rec, BtfError> {
        let pos = match id {
            0 => return Ok(Rec { name: 0, info: 0, size_or_type: 0, extra: 0 }),
            _ => *self.offsets.get(id as usize).ok_or(BtfError::Malformed("type id out of range"))? as usize,
        };
        let t = self.type_bytes();
        Ok(Rec { name: u32_at(t, pos)?, info: u32_at(t, pos + 4)?, size_or_type: u32_at(t, pos + 8)?, extra: pos + 12 })
    }

    /// Every type id with its record.
    fn records(&self) -> impl Iterator<Item = (u32, Rec)> + '_ {
        (1..self.offsets.len() as u32).filter_map(|id| Some((id, self.entry(id).ok()?)))
    }

    /// The `i`th member of a struct or union record.
    fn member(&self, r: &Rec, i: usize) -> Result<Member, BtfError> {
        let t = self.type_bytes();
        let at = r.extra + 12 * i;
        let raw = u32_at(t, at + 8)?;
        let (offset, bitfield) = if r.info >> 31 == 1 { (raw & 0xff_ffff, raw >> 24 != 0) } else { (raw, false) };
        Ok(Member { name: u32_at(t, at)?, ty: u32_at(t, at + 4)?, offset, bitfield })
    }

    /// An array's element type and length.
    fn array(&self, r: &Rec) -> Result<(u32, u32), BtfError> {
        let t = self.type_bytes();
        Ok((u32_at(t, r.extra)?, u32_at(t, r.extra + 8)?))
    }

    /// `id` with typedefs and qualifiers stripped.
    fn resolve(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..32 {
            let e = self.entry(id)?;
            match e.is_alias() {
                true => id = e.size_or_type,
                false => return Ok(id),
            }
        }
        Err(BtfError::Malformed("typedef loop"))
    }

    fn size_of(&self, id: u32) -> Result<u32, BtfError> {
        let id = self.resolve(id)?;
        let e = self.entry(id)?;
        Ok(match e.kind() {
            KIND_PTR => 8,
            KIND_ARRAY => {
                let (elem, len) = self.array(&e)?;
                self.size_of(elem)?.saturating_mul(len)
            }
            _ => e.size_or_type,
        })
    }

    /// Finds a named member in record `id`, looking into anonymous members (the kernel
    /// wraps many fields in unnamed structs and unions): (bit offset, member).
    fn find_member(&self, id: u32, name: &str) -> Result<Option<(u32, Member)>, BtfError> {
        self.find_member_within(id, name, 0)
    }

    fn find_member_within(&self, id: u32, name: &str, depth: u32) -> Result<Option<(u32, Member)>, BtfError> {
        let r = self.entry(self.resolve(id)?)?;
        if !matches!(r.kind(), KIND_STRUCT | KIND_UNION) || depth > 32 {
            return Ok(None);
        }
        for i in 0..r.vlen() {
            let m = self.member(&r, i)?;
            if m.name != 0 && self.str_at(m.name) == name {
                return Ok(Some((m.offset, m)));
            }
        }
        for i in 0..r.vlen() {
            let m = self.member(&r, i)?;
            if m.name != 0 {
                continue;
            }
            if let Some((off, found)) = self.find_member_within(m.ty, name, depth + 1)? {
                return Ok(Some((m.offset + off, found)));
            }
        }
        Ok(None)
    }

    /// The type id of `struct name`.
    pub fn struct_id(&self, name: &str) -> Result<u32, BtfError> {
        let mut structs = self.structs.lock().unwrap_or_else(|e| e.into_inner());
        let id = *structs.entry(name.into()).or_insert_with(|| {
            // The first complete definition wins; forward ones are KIND_FWD.
            self.records()
                .find(|(_, r)| r.kind() == KIND_STRUCT && r.name != 0 && self.str_at(r.name) == name)
                .map(|(id, _)| id)
        });
        id.ok_or_else(|| BtfError::NoStruct(name.into()))
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
                let e = self.entry(id)?;
                if e.kind() != KIND_ARRAY {
                    return Err(BtfError::NotComposite(format!("{within}.{field}")));
                }
                let (elem, len) = self.array(&e)?;
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
        let tracepoints = self.tracepoints.get_or_init(|| {
            let mut m = HashMap::new();
            for (id, r) in self.records().filter(|(_, r)| r.kind() == KIND_TYPEDEF && r.name != 0) {
                if let Some(tp) = self.str_at(r.name).strip_prefix("btf_trace_") {
                    m.insert(tp.into(), id);
                }
            }
            m
        });
        let id = *tracepoints.get(name)?;
        let target = self.resolve(id).ok()?;
        let e = self.entry(target).ok()?;
        let proto = match e.kind() {
            KIND_PTR => self.resolve(e.size_or_type).ok()?,
            _ => target,
        };
        let p = self.entry(proto).ok()?;
        // The first parameter is the tracepoint's private data, not an argument.
        (p.kind() == KIND_FUNC_PROTO).then(|| p.vlen().saturating_sub(1))
    }

    /// The value of an enumerator (`PIDTYPE_PGID`).
    pub fn enumerator(&self, name: &str) -> Result<i64, BtfError> {
        let enumerators = self.enumerators.get_or_init(|| {
            let t = self.type_bytes();
            let mut m = HashMap::new();
            for (_, r) in self.records() {
                let (step, wide) = match r.kind() {
                    KIND_ENUM => (8, false),
                    KIND_ENUM64 => (12, true),
                    _ => continue,
                };
                for i in 0..r.vlen() {
                    let at = r.extra + step * i;
                    let (Ok(name), Ok(lo)) = (u32_at(t, at), u32_at(t, at + 4)) else { break };
                    let value = match wide {
                        false => i64::from(lo as i32),
                        true => (u64::from(u32_at(t, at + 8).unwrap_or(0)) << 32 | u64::from(lo)) as i64,
                    };
                    m.insert(self.str_at(name).into(), value);
                }
            }
            m
        });
        enumerators.get(name).copied().ok_or_else(|| BtfError::NoEnumerator(name.into()))
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
