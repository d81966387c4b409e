//! D's types: integers of every width and signedness with C's conversions, `string`,
//! pointers, arrays, structs, unions and enums, plus the special kinds that only
//! built-ins produce (stacks, symbols). Layout follows the LP64 C ABI of x86-64.

use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

/// An integer type: size in bytes, signedness, and the name it was written with (for
/// messages: `uint64_t` stays `uint64_t`).
#[derive(Debug, Clone)]
pub struct IntType {
    pub size: u8,
    pub signed: bool,
    pub name: Rc<str>,
}

impl PartialEq for IntType {
    /// Two integer types are the same when they store the same way; the name is cosmetic.
    fn eq(&self, other: &IntType) -> bool {
        self.size == other.size && self.signed == other.signed
    }
}
impl Eq for IntType {}

impl IntType {
    pub fn new(size: u8, signed: bool, name: &str) -> IntType {
        IntType { size, signed, name: name.into() }
    }
    /// The C name of a plain integer type of this shape.
    pub fn plain(size: u8, signed: bool) -> IntType {
        let name = match (size, signed) {
            (1, true) => "char",
            (1, false) => "unsigned char",
            (2, true) => "short",
            (2, false) => "unsigned short",
            (4, true) => "int",
            (4, false) => "unsigned int",
            (_, true) => "long",
            (_, false) => "unsigned long",
        };
        IntType::new(size, signed, name)
    }
    /// Truncates and re-extends `v` to this type, as storing it in a variable of this
    /// type does.
    pub fn wrap(&self, v: u64) -> u64 {
        IntType::wrap_as(self.size, self.signed, v)
    }
    /// [`IntType::wrap`] for a type of this shape, without making the type.
    pub fn wrap_as(size: u8, signed: bool, v: u64) -> u64 {
        let bits = u32::from(size) * 8;
        if bits >= 64 {
            return v;
        }
        let mask = (1u64 << bits) - 1;
        let low = v & mask;
        if signed && low >> (bits - 1) & 1 == 1 {
            low | !mask
        } else {
            low
        }
    }
}

pub type RecordId = usize;
pub type EnumId = usize;

/// Kinds of symbolic values: integers that print as a symbol, module or address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymKind {
    /// `usym`/`sym`: `module`function+offset` rounded to the function
    Sym,
    /// `umod`/`mod`: the module only
    Mod,
    /// `ufunc`/`func`: `module`function`
    Func,
    /// `uaddr`: `module`function+offset`
    Addr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Void,
    Int(IntType),
    /// `float`/`double`: declarable, as in D, but no arithmetic on them.
    Float(u8),
    String,
    Pointer(Box<Type>),
    Array(Box<Type>, u64),
    Struct(RecordId),
    Union(RecordId),
    Enum(EnumId),
    /// The value of `stack()`/`ustack()`: only traced or used as an aggregation key.
    Stack {
        user: bool,
    },
    /// `usym(x)`, `ufunc(x)`, …: an address that prints symbolically.
    Symbol {
        user: bool,
        kind: SymKind,
    },
    /// A function returning the type: declared in prototypes, pointed to by
    /// function pointers; it has no size.
    Function(Box<Type>),
}

impl Type {
    pub fn int(size: u8, signed: bool) -> Type {
        Type::Int(IntType::plain(size, signed))
    }
    pub fn named_int(size: u8, signed: bool, name: &str) -> Type {
        Type::Int(IntType::new(size, signed, name))
    }
    pub fn is_integer(&self) -> bool {
        matches!(self, Type::Int(_) | Type::Enum(_))
    }
    /// Integers, enums, pointers and symbols: what D can do arithmetic and comparisons on.
    pub fn is_scalar(&self) -> bool {
        matches!(self, Type::Int(_) | Type::Enum(_) | Type::Pointer(_) | Type::Symbol { .. })
    }
    pub fn is_arithmetic(&self) -> bool {
        matches!(self, Type::Int(_) | Type::Enum(_) | Type::Symbol { .. })
    }
    pub fn is_pointer(&self) -> bool {
        matches!(self, Type::Pointer(_))
    }
    /// Pointers and arrays both decay to an address.
    pub fn pointee(&self) -> Option<&Type> {
        match self {
            Type::Pointer(t) | Type::Array(t, _) => Some(t),
            _ => None,
        }
    }
    pub fn is_string(&self) -> bool {
        matches!(self, Type::String)
    }
    /// `char *`, `const char *` and `char[N]`: what D accepts where a string is wanted.
    pub fn is_char_pointer_or_array(&self) -> bool {
        matches!(self.pointee(), Some(Type::Int(i)) if i.size == 1)
    }
    pub fn is_void(&self) -> bool {
        matches!(self, Type::Void)
    }
    /// The integer shape of a scalar (enums are `int`, pointers and symbols `uintptr_t`).
    /// The size and signedness of [`Type::int_shape`], without making the type.
    pub fn int_bits(&self) -> Option<(u8, bool)> {
        match self {
            Type::Int(i) => Some((i.size, i.signed)),
            Type::Enum(_) => Some((4, true)),
            Type::Pointer(_) | Type::Symbol { .. } => Some((8, false)),
            _ => None,
        }
    }
    pub fn int_shape(&self) -> Option<IntType> {
        match self {
            Type::Int(i) => Some(i.clone()),
            Type::Enum(_) => Some(IntType::plain(4, true)),
            Type::Pointer(_) | Type::Symbol { .. } => Some(IntType::new(8, false, "uintptr_t")),
            _ => None,
        }
    }
}

/// A struct or union layout.
#[derive(Debug, Clone)]
pub struct Record {
    pub is_union: bool,
    pub tag: String,
    pub members: Vec<Field>,
    pub size: u64,
    pub align: u64,
    /// False for a forward reference (`struct foo *p` before `struct foo { … }`).
    pub complete: bool,
}

#[derive(Debug, Clone)]
pub struct Field {
    /// Empty for an unnamed bit-field.
    pub name: String,
    pub ty: Type,
    /// Byte offset of the member, or of the storage unit that holds a bit-field.
    pub offset: u64,
    /// For a bit-field, where its bits are in the storage unit `ty` reads.
    pub bits: Option<BitField>,
}

/// A bit-field's place in its storage unit: the unit (the member's integer type) is
/// read at the member's offset, shifted right by `shift` and cut to `width` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitField {
    pub shift: u8,
    pub width: u8,
}

impl BitField {
    pub fn mask(self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// The field's value in a storage unit, sign-extended from its width if signed.
    pub fn extract(self, unit: u64, signed: bool) -> u64 {
        let v = (unit >> self.shift) & self.mask();
        if signed && self.width < 64 && (v >> (self.width - 1)) & 1 == 1 {
            v | !self.mask()
        } else {
            v
        }
    }

    /// The storage unit with the field's bits replaced by the low bits of `v`.
    pub fn insert(self, unit: u64, v: u64) -> u64 {
        let m = self.mask() << self.shift;
        (unit & !m) | ((v << self.shift) & m)
    }
}

/// A member of a struct or union being defined in D.
#[derive(Debug, Clone)]
pub struct MemberDef {
    /// `None` for an unnamed bit-field.
    pub name: Option<String>,
    pub ty: Type,
    /// The width of a bit-field.
    pub bits: Option<u8>,
}

#[derive(Debug, Clone)]
pub struct EnumDef {
    pub tag: String,
    pub values: Vec<(String, i64)>,
    /// False for an enum only referred to (`enum e x;` with no `enum e { … }`).
    pub defined: bool,
}

/// Every type the program can name: builtins, typedefs, tagged records and enums.
#[derive(Debug, Clone)]
pub struct TypeTable {
    pub typedefs: HashMap<String, Type>,
    pub records: Vec<Record>,
    pub struct_tags: HashMap<String, RecordId>,
    pub union_tags: HashMap<String, RecordId>,
    pub enums: Vec<EnumDef>,
    pub enum_tags: HashMap<String, EnumId>,
    /// Enumerator name → (its enum, value).
    pub enumerators: HashMap<String, (EnumId, i64)>,
}

/// D's built-in typedefs on an LP64 target: name, size, signed.
const BUILTIN_INT_TYPEDEFS: &[(&str, u8, bool)] = &[
    ("int8_t", 1, true),
    ("int16_t", 2, true),
    ("int32_t", 4, true),
    ("int64_t", 8, true),
    ("uint8_t", 1, false),
    ("uint16_t", 2, false),
    ("uint32_t", 4, false),
    ("uint64_t", 8, false),
    ("intptr_t", 8, true),
    ("uintptr_t", 8, false),
    ("intmax_t", 8, true),
    ("uintmax_t", 8, false),
    ("size_t", 8, false),
    ("ssize_t", 8, true),
    ("ptrdiff_t", 8, true),
    ("off_t", 8, true),
    ("off64_t", 8, true),
    ("loff_t", 8, true),
    ("pid_t", 4, true),
    ("id_t", 4, true),
    ("uid_t", 4, false),
    ("gid_t", 4, false),
    ("mode_t", 4, false),
    ("dev_t", 8, false),
    ("ino_t", 8, false),
    ("nlink_t", 8, false),
    ("time_t", 8, true),
    ("clock_t", 8, true),
    ("hrtime_t", 8, true),
    ("uchar_t", 1, false),
    ("ushort_t", 2, false),
    ("uint_t", 4, false),
    ("ulong_t", 8, false),
    ("u_longlong_t", 8, false),
    ("longlong_t", 8, true),
    ("processorid_t", 4, true),
    ("psetid_t", 4, true),
    ("zoneid_t", 4, true),
    ("projid_t", 4, true),
    ("taskid_t", 4, true),
    ("boolean_t", 4, true),
    ("major_t", 4, false),
    ("minor_t", 4, false),
    ("socklen_t", 4, false),
    ("bool", 1, false),
    ("_Bool", 1, false),
    // The Linux kernel's <linux/types.h> names, which DTrace finds in vmlinux's CTF.
    ("u_char", 1, false),
    ("u_short", 2, false),
    ("u_int", 4, false),
    ("u_long", 8, false),
    ("unchar", 1, false),
    ("ushort", 2, false),
    ("uint", 4, false),
    ("ulong", 8, false),
];

impl Default for TypeTable {
    fn default() -> TypeTable {
        let mut typedefs = HashMap::new();
        for &(name, size, signed) in BUILTIN_INT_TYPEDEFS {
            typedefs.insert(name.to_string(), Type::named_int(size, signed, name));
        }
        typedefs.insert("caddr_t".into(), Type::Pointer(Box::new(Type::int(1, true))));
        TypeTable {
            typedefs,
            records: Vec::new(),
            struct_tags: HashMap::new(),
            union_tags: HashMap::new(),
            enums: Vec::new(),
            enum_tags: HashMap::new(),
            enumerators: HashMap::new(),
        }
    }
}

impl TypeTable {
    /// Size in bytes; `None` for void, functions and incomplete records.
    pub fn size_of(&self, ty: &Type) -> Option<u64> {
        Some(match ty {
            Type::Void => return None,
            Type::Int(i) => u64::from(i.size),
            Type::Float(s) => u64::from(*s),
            Type::String => 256,
            Type::Pointer(_) | Type::Symbol { .. } => 8,
            Type::Array(t, n) => self.size_of(t)?.checked_mul(*n)?,
            Type::Struct(id) | Type::Union(id) => {
                let r = &self.records[*id];
                if !r.complete {
                    return None;
                }
                r.size
            }
            Type::Enum(_) => 4,
            Type::Stack { .. } => 8,
            Type::Function(_) => return None,
        })
    }

    pub fn align_of(&self, ty: &Type) -> u64 {
        match ty {
            Type::Array(t, _) => self.align_of(t),
            Type::Struct(id) | Type::Union(id) => self.records[*id].align.max(1),
            Type::String => 1,
            Type::Function(_) => 8,
            Type::Float(16) => 16,
            other => self.size_of(other).unwrap_or(1).clamp(1, 8),
        }
    }

    /// Finds or creates the enum with this tag; an enum only referred to so far has
    /// no values and is not `defined`.
    pub fn enum_tag(&mut self, tag: &str) -> EnumId {
        if let Some(&id) = self.enum_tags.get(tag) {
            return id;
        }
        let id = self.enums.len();
        self.enums.push(EnumDef { tag: tag.to_string(), values: Vec::new(), defined: false });
        self.enum_tags.insert(tag.to_string(), id);
        id
    }

    /// Lays out and completes a struct or union the program defines, as libctf lays
    /// out the members DTrace adds to one: a member goes at the first byte boundary
    /// after the previous one (its bits, for a bit-field) aligned for its type; a
    /// struct ends with its last member (no tail padding) and is aligned as its first
    /// member; a bit-field is an integer of the smallest power-of-two bytes that hold
    /// its width. `None`, leaving the record incomplete, if the size overflows.
    pub fn define_record(&mut self, id: RecordId, members: Vec<MemberDef>) -> Option<()> {
        let is_union = self.records[id].is_union;
        let mut fields: Vec<Field> = Vec::with_capacity(members.len());
        let (mut size, mut align) = (0u64, 0u64);
        for m in members {
            let (ty, bits) = match (m.bits, &m.ty) {
                (Some(width), Type::Int(i)) => {
                    let bytes = u64::from(width).div_ceil(8).next_power_of_two();
                    let unit = IntType { size: bytes as u8, signed: i.signed, name: i.name.clone() };
                    (Type::Int(unit), Some(BitField { shift: 0, width }))
                }
                _ => (m.ty, None),
            };
            let msize = self.size_of(&ty).unwrap_or(0);
            let malign = self.align_of(&ty);
            let offset = match fields.last() {
                Some(prev) if !is_union => {
                    let prev_bits = match prev.bits {
                        Some(b) => u64::from(b.width),
                        None => self.size_of(&prev.ty).unwrap_or(0).checked_mul(8)?,
                    };
                    let end = prev.offset.checked_mul(8)?.checked_add(prev_bits)?.div_ceil(8);
                    end.div_ceil(malign).checked_mul(malign)?
                }
                _ => 0,
            };
            size = if is_union || fields.is_empty() { size.max(msize) } else { offset.checked_add(msize)? };
            if is_union || fields.is_empty() {
                align = align.max(malign);
            }
            fields.push(Field { name: m.name.unwrap_or_default(), ty, offset, bits });
        }
        let r = &mut self.records[id];
        r.members = fields;
        r.align = align.max(1);
        r.size = size;
        r.complete = true;
        Some(())
    }

    /// Finds or creates the (possibly incomplete) record with this tag.
    pub fn record_tag(&mut self, is_union: bool, tag: &str) -> RecordId {
        let tags = if is_union { &self.union_tags } else { &self.struct_tags };
        if let Some(&id) = tags.get(tag) {
            return id;
        }
        let id = self.records.len();
        self.records.push(Record {
            is_union,
            tag: tag.to_string(),
            members: Vec::new(),
            size: 0,
            align: 1,
            complete: false,
        });
        let tags = if is_union { &mut self.union_tags } else { &mut self.struct_tags };
        tags.insert(tag.to_string(), id);
        id
    }

    /// Creates a struct or union no tag names (`struct { … } x;`).
    pub fn anonymous_record(&mut self, is_union: bool) -> RecordId {
        let id = self.records.len();
        self.records.push(Record {
            is_union,
            tag: "(anon)".into(),
            members: Vec::new(),
            size: 0,
            align: 1,
            complete: false,
        });
        id
    }

    /// Creates an enum no tag names (`enum { A, B } x;`).
    pub fn anonymous_enum(&mut self) -> EnumId {
        let id = self.enums.len();
        self.enums.push(EnumDef { tag: "(anon)".into(), values: Vec::new(), defined: false });
        id
    }

    /// Lays out the members of a record with C's alignment rules and marks it
    /// complete. `None`, leaving the record incomplete, if its size overflows u64
    /// (members can be arrays of 2^64 - 1 bytes).
    pub fn complete_record(&mut self, id: RecordId, members: Vec<(String, Type)>) -> Option<()> {
        let is_union = self.records[id].is_union;
        let mut fields = Vec::with_capacity(members.len());
        let (mut size, mut align) = (0u64, 1u64);
        for (name, ty) in members {
            let a = self.align_of(&ty);
            let s = self.size_of(&ty).unwrap_or(0);
            align = align.max(a);
            let offset = if is_union { 0 } else { size.div_ceil(a).checked_mul(a)? };
            size = if is_union { size.max(s) } else { offset.checked_add(s)? };
            fields.push(Field { name, ty, offset, bits: None });
        }
        let size = size.div_ceil(align).checked_mul(align)?;
        let r = &mut self.records[id];
        r.members = fields;
        r.align = align;
        r.size = size;
        r.complete = true;
        Some(())
    }

    pub fn field(&self, id: RecordId, name: &str) -> Option<&Field> {
        self.records[id].members.iter().find(|f| !f.name.is_empty() && f.name == name)
    }

    /// The type's name as DTrace prints it in messages: `int`, `char *`,
    /// `struct foo`, `string`, `uint64_t`.
    pub fn name(&self, ty: &Type) -> String {
        match ty {
            Type::Void => "void".into(),
            Type::Int(i) => i.name.to_string(),
            Type::Float(4) => "float".into(),
            Type::Float(16) => "long double".into(),
            Type::Float(_) => "double".into(),
            Type::String => "string".into(),
            Type::Pointer(t) if matches!(**t, Type::Function(_)) => match &**t {
                Type::Function(ret) => format!("{} (*)()", self.name(ret)),
                _ => unreachable!("matched a function"),
            },
            Type::Pointer(t) => {
                let inner = self.name(t);
                if inner.ends_with('*') {
                    format!("{inner}*")
                } else {
                    format!("{inner} *")
                }
            }
            Type::Array(t, n) => format!("{} [{n}]", self.name(t)),
            // libctf names an anonymous record `struct ` (an empty tag).
            Type::Struct(id) => format!("struct {}", anon_empty(&self.records[*id].tag)),
            Type::Union(id) => format!("union {}", anon_empty(&self.records[*id].tag)),
            Type::Enum(id) => format!("enum {}", self.enums[*id].tag),
            Type::Stack { user: true } => "ustack".into(),
            Type::Stack { user: false } => "stack".into(),
            // dt_open.c's typedefs: the kernel functions' `_symaddr`, the user ones'
            // `_usymaddr`.
            Type::Symbol { user: false, .. } => "_symaddr".into(),
            Type::Symbol { user: true, .. } => "_usymaddr".into(),
            Type::Function(ret) => format!("{} ()", self.name(ret)),
        }
    }
}

/// The C intrinsic types DTrace defines (LP64), by name: size in bytes and
/// signedness; `None` size for `void`, and the floating-point types below.
const INTRINSICS: &[(&str, u8, bool)] = &[
    ("signed", 4, true),
    ("unsigned", 4, false),
    ("char", 1, true),
    ("short", 2, true),
    ("int", 4, true),
    ("long", 8, true),
    ("long long", 8, true),
    ("signed char", 1, true),
    ("signed short", 2, true),
    ("signed int", 4, true),
    ("signed long", 8, true),
    ("signed long long", 8, true),
    ("unsigned char", 1, false),
    ("unsigned short", 2, false),
    ("unsigned int", 4, false),
    ("unsigned long", 8, false),
    ("unsigned long long", 8, false),
    ("_Bool", 1, false),
];

/// The intrinsic type with this name as the declaration specifiers compose it
/// (`unsigned long `, trailing blank and all), if C has one.
pub fn intrinsic(name: &str) -> Option<Type> {
    let name = name.trim_end();
    Some(match name {
        "void" => Type::Void,
        "float" => Type::Float(4),
        "double" => Type::Float(8),
        "long double" => Type::Float(16),
        _ => {
            let &(n, size, signed) = INTRINSICS.iter().find(|(n, _, _)| *n == name)?;
            Type::named_int(size, signed, n)
        }
    })
}

/// D's integer promotion: none. Unlike C, D keeps a narrow operand's type
/// (dt_node_type_propagate): `-c` of a `char` is a `char`.
pub fn promote(i: &IntType) -> IntType {
    i.clone()
}

/// D's conversions for two integer operands (dt_type_promote): the operand type of
/// higher rank, the rank being the size in bits plus one if unsigned. Unlike C,
/// nothing is promoted to `int` first: `unsigned char + char` is an `unsigned char`.
pub fn usual_arithmetic(a: &IntType, b: &IntType) -> IntType {
    let rank = |t: &IntType| u32::from(t.size) * 8 + u32::from(!t.signed);
    if rank(b) > rank(a) {
        b.clone()
    } else {
        a.clone()
    }
}

impl fmt::Display for SymKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SymKind::Sym => "sym",
            SymKind::Mod => "mod",
            SymKind::Func => "func",
            SymKind::Addr => "addr",
        })
    }
}

/// A record's tag as libctf prints it: nothing for an anonymous record.
fn anon_empty(tag: &str) -> &str {
    if tag == "(anon)" {
        ""
    } else {
        tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_follow_dtrace() {
        let int = IntType::plain(4, true);
        let uint = IntType::plain(4, false);
        let long = IntType::plain(8, true);
        let ulong = IntType::plain(8, false);
        let ch = IntType::plain(1, true);
        let uch = IntType::plain(1, false);
        assert_eq!(usual_arithmetic(&ch, &ch), ch);
        assert_eq!(usual_arithmetic(&uch, &ch), uch);
        assert_eq!(usual_arithmetic(&ch, &int), int);
        assert_eq!(usual_arithmetic(&int, &uint), uint);
        assert_eq!(usual_arithmetic(&uint, &long), long);
        assert_eq!(usual_arithmetic(&long, &ulong), ulong);
    }

    #[test]
    fn wrap_truncates_and_extends() {
        assert_eq!(IntType::plain(1, true).wrap(0xff), u64::MAX);
        assert_eq!(IntType::plain(1, false).wrap(0x1ff), 0xff);
        assert_eq!(IntType::plain(4, true).wrap(0x8000_0000) as i64, -2147483648);
    }

    #[test]
    fn oversized_struct_is_refused_not_an_overflow() {
        // `struct s { char a[18446744073709551615]; int b; }` overflowed the offset.
        let mut t = TypeTable::default();
        let id = t.record_tag(false, "s");
        let huge = Type::Array(Box::new(Type::int(1, true)), u64::MAX);
        assert!(t.complete_record(id, vec![("a".into(), huge.clone()), ("b".into(), Type::int(4, true))]).is_none());
        assert!(!t.records[id].complete);
        let id = t.record_tag(false, "t");
        assert!(t.complete_record(id, vec![("b".into(), Type::int(4, true)), ("a".into(), huge.clone())]).is_none());
        let u = t.record_tag(true, "u");
        assert!(t.complete_record(u, vec![("a".into(), huge), ("b".into(), Type::int(4, true))]).is_none());
    }

    fn member(name: &str, ty: Type, bits: Option<u8>) -> MemberDef {
        MemberDef { name: Some(name.into()), ty, bits }
    }

    #[test]
    fn d_records_are_laid_out_as_libctf_does() {
        let mut t = TypeTable::default();
        let int = Type::int(4, true);
        // Bit-fields: each starts at the byte after the previous one's bits, in the
        // power-of-two bytes that hold its width.
        let id = t.record_tag(false, "bf");
        let m = vec![
            member("a", int.clone(), Some(20)),
            member("b", int.clone(), Some(3)),
            member("c", int.clone(), Some(12)),
        ];
        t.define_record(id, m).unwrap();
        let r = &t.records[id];
        let layout: Vec<(u64, u64)> = r.members.iter().map(|f| (f.offset, t.size_of(&f.ty).unwrap())).collect();
        assert_eq!(layout, vec![(0, 4), (3, 1), (4, 2)]);
        assert_eq!((r.size, r.align), (6, 4));
        // No tail padding; a struct is aligned as its first member.
        let id = t.record_tag(false, "s");
        let m = vec![member("c", Type::int(1, true), None), member("l", Type::int(8, true), None)];
        t.define_record(id, m).unwrap();
        assert_eq!((t.records[id].size, t.records[id].align, t.records[id].members[1].offset), (16, 1, 8));
        let u = t.record_tag(true, "u");
        let m = vec![member("c", Type::int(1, true), None), member("l", Type::Array(Box::new(int), 3), None)];
        t.define_record(u, m).unwrap();
        assert_eq!((t.records[u].size, t.records[u].align), (12, 4));
    }

    #[test]
    fn bit_fields_extract_and_insert_their_bits() {
        let b = BitField { shift: 4, width: 3 };
        assert_eq!(b.extract(0x70, false), 7);
        assert_eq!(b.extract(0x70, true) as i64, -1);
        assert_eq!(b.extract(0x30, true), 3);
        assert_eq!(b.insert(0xff, 0), 0x8f);
        assert_eq!(b.insert(0, 0xf), 0x70);
        let whole = BitField { shift: 0, width: 64 };
        assert_eq!(whole.extract(u64::MAX, true), u64::MAX);
    }

    #[test]
    fn struct_layout_aligns_members() {
        let mut t = TypeTable::default();
        let id = t.record_tag(false, "s");
        t.complete_record(
            id,
            vec![("c".into(), Type::int(1, true)), ("l".into(), Type::int(8, true)), ("s".into(), Type::int(2, true))],
        );
        let r = &t.records[id];
        assert_eq!(r.members[1].offset, 8);
        assert_eq!(r.members[2].offset, 16);
        assert_eq!(r.size, 24);
        let u = t.record_tag(true, "u");
        t.complete_record(
            u,
            vec![("a".into(), Type::int(4, true)), ("b".into(), Type::Array(Box::new(Type::int(1, true)), 6))],
        );
        assert_eq!(t.records[u].size, 8);
    }
}
