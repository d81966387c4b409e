//! `print()`: the object a pointer points to, member by member with each member's
//! type, as libdtrace's dt_print_type lays it out (members that are all zero bytes are
//! left out below the top level; char arrays stop at their NUL).

use std::fmt::Write;

use udtrace_lang::types::{Type, TypeTable};

/// Where the object's lines start, and how deep nesting is shown.
const START_INDENT: usize = 44;
const MAX_DEPTH: usize = 10;

/// The whole output of `print(p)` for `p`'s address and the bytes it points to.
pub fn print_type(out: &mut Vec<u8>, addr: u64, ty: &Type, data: &[u8], types: &TypeTable) {
    let mut s = format!("0x{addr:x} = *\n");
    let mut p = Printer { types, data, out: &mut s };
    p.visit(None, ty, 0, None, 0);
    out.extend_from_slice(s.as_bytes());
}

struct Printer<'a> {
    types: &'a TypeTable,
    data: &'a [u8],
    out: &'a mut String,
}

fn indent(depth: usize) -> String {
    " ".repeat(START_INDENT + depth)
}

/// The name libctf gives a type: anonymous records are plain `struct`/`union`.
fn type_name(types: &TypeTable, ty: &Type) -> String {
    match ty {
        Type::Struct(id) | Type::Union(id) if matches!(types.records[*id].tag.as_str(), "" | "(anon)") => {
            if types.records[*id].is_union { "union" } else { "struct" }.to_string()
        }
        _ => types.name(ty),
    }
}

impl Printer<'_> {
    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        let start = off.min(self.data.len());
        &self.data[start..(off + len).min(self.data.len())]
    }

    fn uint(&self, off: usize, len: usize) -> u64 {
        let mut b = [0u8; 8];
        let src = self.bytes(off, len.min(8));
        b[..src.len()].copy_from_slice(src);
        u64::from_le_bytes(b)
    }

    fn line(&mut self, depth: usize, name: Option<&str>, text: &str) {
        let member = name.filter(|n| !n.is_empty()).map(|n| format!(".{n} = ")).unwrap_or_default();
        let _ = writeln!(self.out, "{}{member}{text}", indent(depth));
    }

    /// One object at `off` bytes (`bits`: a bit-field's shift and width).
    fn visit(&mut self, name: Option<&str>, ty: &Type, off: usize, bits: Option<(u8, u8)>, depth: usize) {
        if depth >= MAX_DEPTH {
            let _ = writeln!(self.out, "{}...", indent(depth));
            return;
        }
        let size = self.types.size_of(ty).unwrap_or(0) as usize;
        if depth > 0 && bits.is_none() && self.bytes(off, size).iter().all(|&b| b == 0) {
            return;
        }
        let tname = type_name(self.types, ty);
        match ty {
            Type::Struct(id) | Type::Union(id) => {
                self.line(depth, name, &format!("({tname}) {{"));
                let members = self.types.records[*id].members.clone();
                for m in &members {
                    let bits = m.bits.map(|b| (b.shift, b.width));
                    self.visit(Some(&m.name), &m.ty, off + m.offset as usize, bits, depth + 1);
                }
                let _ = writeln!(self.out, "{}}}{}", indent(depth), if depth > 0 { "," } else { "" });
            }
            Type::Array(elem, n) => {
                let esize = self.types.size_of(elem).unwrap_or(0) as usize;
                self.line(depth, name, &format!("({tname}) [{}", if *n == 0 { "]," } else { "" }));
                let is_char = matches!(&**elem, Type::Int(i) if i.size == 1);
                for i in 0..*n as usize {
                    if is_char && self.uint(off + i * esize, 1) == 0 {
                        break;
                    }
                    self.visit(None, elem, off + i * esize, None, depth + 1);
                }
                if *n > 0 {
                    let _ = writeln!(self.out, "{}],", indent(depth));
                }
            }
            Type::Int(i) => {
                let raw = self.uint(off, usize::from(i.size));
                let v = match bits {
                    Some((shift, width)) => {
                        let v = (raw >> shift) & if width >= 64 { u64::MAX } else { (1 << width) - 1 };
                        if v == 0 {
                            return;
                        }
                        v
                    }
                    None => i.wrap(raw),
                };
                let text = if &*i.name == "char" {
                    format!("({tname})'{}',", v as u8 as char)
                } else if i.signed {
                    format!("({tname}){},", v as i64)
                } else {
                    format!("({tname}){v},")
                };
                self.line(depth, name, &text);
            }
            Type::Enum(id) => {
                let v = self.uint(off, 4) as u32 as i32;
                let e = &self.types.enums[*id];
                let text = match e.values.iter().find(|(_, x)| *x == i64::from(v)) {
                    Some((n, _)) => format!("({tname}){n},"),
                    None => format!("({tname}){v},"),
                };
                self.line(depth, name, &text);
            }
            Type::Pointer(_) => {
                let v = self.uint(off, 8);
                self.line(depth, name, &format!("({tname})0x{v:x},"));
            }
            _ => {}
        }
    }
}
