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
        let bits = u32::from(self.size) * 8;
        if bits >= 64 {
            return v;
        }
        let mask = (1u64 << bits) - 1;
        let low = v & mask;
        if self.signed && low >> (bits - 1) & 1 == 1 {
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
    pub name: String,
    pub ty: Type,
    pub offset: u64,
}

#[derive(Debug, Clone)]
pub struct EnumDef {
    pub tag: String,
    pub values: Vec<(String, i64)>,
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
        })
    }

    pub fn align_of(&self, ty: &Type) -> u64 {
        match ty {
            Type::Array(t, _) => self.align_of(t),
            Type::Struct(id) | Type::Union(id) => self.records[*id].align.max(1),
            Type::String => 1,
            other => self.size_of(other).unwrap_or(1).clamp(1, 8),
        }
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
            fields.push(Field { name, ty, offset });
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
        self.records[id].members.iter().find(|f| f.name == name)
    }

    /// The type's name as DTrace prints it in messages: `int`, `char *`,
    /// `struct foo`, `string`, `uint64_t`.
    pub fn name(&self, ty: &Type) -> String {
        match ty {
            Type::Void => "void".into(),
            Type::Int(i) => i.name.to_string(),
            Type::Float(4) => "float".into(),
            Type::Float(_) => "double".into(),
            Type::String => "string".into(),
            Type::Pointer(t) => {
                let inner = self.name(t);
                if inner.ends_with('*') {
                    format!("{inner}*")
                } else {
                    format!("{inner} *")
                }
            }
            Type::Array(t, n) => format!("{} [{n}]", self.name(t)),
            Type::Struct(id) => format!("struct {}", self.records[*id].tag),
            Type::Union(id) => format!("union {}", self.records[*id].tag),
            Type::Enum(id) => format!("enum {}", self.enums[*id].tag),
            Type::Stack { user: true } => "ustack".into(),
            Type::Stack { user: false } => "stack".into(),
            Type::Symbol { .. } => "_symaddr".into(),
        }
    }
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
