//! `print()`: the object a pointer points to, member by member with each member's
//! type, as libdtrace's dt_print_type lays it out (members that are all zero bytes are
//! left out below the top level; char arrays stop at their NUL). `data` holds the
//! bytes shown (`printsize`): the first member that starts past them, or nesting 10
//! deep, prints `...` and ends the walk, closing the braces still open.

use std::fmt::Write;

use udtrace_lang::types::{Type, TypeTable};

/// Where the object's lines start, and how deep nesting is shown.
const START_INDENT: usize = 44;
const MAX_DEPTH: usize = 10;

/// The whole output of `print(p)` for `p`'s address and the bytes it points to.
pub fn print_type(out: &mut Vec<u8>, addr: u64, ty: &Type, data: &[u8], types: &TypeTable) {
    let mut s = format!("0x{addr:x} = *\n");
    let mut p = Printer { types, data, out: &mut s, last_depth: 0, records: [false; MAX_DEPTH] };
    p.visit(None, ty, 0, None, 0);
    p.close(0);
    out.extend_from_slice(s.as_bytes());
}

/// The walk's state, as dt_print_visit keeps it: a struct's closing brace is written
/// when the walk comes back up to its depth (or ends), so a `...` that ends the walk
/// inside a struct comes before the braces that close it.
struct Printer<'a> {
    types: &'a TypeTable,
    data: &'a [u8],
    out: &'a mut String,
    /// The depth of the last object written.
    last_depth: usize,
    /// Whether the last object written at each depth is a struct or union.
    records: [bool; MAX_DEPTH],
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

    /// Closes the structs and unions opened deeper than `depth` since the last object
    /// written at `depth` (the top-level one always, even when empty).
    fn close(&mut self, depth: usize) {
        if !self.records[depth] {
            return;
        }
        if depth == 0 && self.last_depth == 0 {
            self.last_depth = 1;
        }
        for i in (1..=self.last_depth.saturating_sub(depth)).rev() {
            let comma = if depth > 0 || i > 1 { "," } else { "" };
            let _ = writeln!(self.out, "{}}}{comma}", indent(depth + i - 1));
        }
        self.last_depth = depth;
    }

    /// One object at `off` bytes (`bits`: a bit-field's shift and width). False when
    /// the walk is over (the bytes shown or the nesting ran out).
    fn visit(&mut self, name: Option<&str>, ty: &Type, off: usize, bits: Option<(u8, u8)>, depth: usize) -> bool {
        if off >= self.data.len() || depth >= MAX_DEPTH {
            let _ = writeln!(self.out, "{}...", indent(depth));
            return false;
        }
        if self.last_depth > depth {
            self.close(depth);
        }
        let size = self.types.size_of(ty).unwrap_or(0) as usize;
        if depth > 0 && bits.is_none() && self.bytes(off, size).iter().all(|&b| b == 0) {
            return true;
        }
        let tname = type_name(self.types, ty);
        let text = match ty {
            Type::Struct(_) | Type::Union(_) => format!("({tname}) {{"),
            Type::Array(_, n) => format!("({tname}) [{}", if *n == 0 { "]," } else { "" }),
            Type::Int(i) => {
                let raw = self.uint(off, usize::from(i.size));
                let v = match bits {
                    Some((shift, width)) => {
                        let v = (raw >> shift) & if width >= 64 { u64::MAX } else { (1 << width) - 1 };
                        if v == 0 {
                            return true;
                        }
                        v
                    }
                    None => i.wrap(raw),
                };
                if &*i.name == "char" {
                    format!("({tname})'{}',", v as u8 as char)
                } else if i.signed {
                    format!("({tname}){},", v as i64)
                } else {
                    format!("({tname}){v},")
                }
            }
            Type::Enum(id) => {
                let v = self.uint(off, 4) as u32 as i32;
                match self.types.enums[*id].values.iter().find(|(_, x)| *x == i64::from(v)) {
                    Some((n, _)) => format!("({tname}){n},"),
                    None => format!("({tname}){v},"),
                }
            }
            Type::Pointer(_) => format!("({tname})0x{:x},", self.uint(off, 8)),
            _ => return true,
        };
        self.records[depth] = matches!(ty, Type::Struct(_) | Type::Union(_));
        self.last_depth = depth;
        self.line(depth, name, &text);
        match ty {
            Type::Struct(id) | Type::Union(id) => {
                let members = self.types.records[*id].members.clone();
                for m in &members {
                    let bits = m.bits.map(|b| (b.shift, b.width));
                    if !self.visit(Some(&m.name), &m.ty, off + m.offset as usize, bits, depth + 1) {
                        return false;
                    }
                }
            }
            Type::Array(elem, n) if *n > 0 => {
                // Elements are written with a copy of the walk's state.
                let (saved_depth, saved_records) = (self.last_depth, self.records);
                let esize = self.types.size_of(elem).unwrap_or(0) as usize;
                let is_char = matches!(&**elem, Type::Int(i) if i.size == 1);
                for i in 0..*n as usize {
                    if is_char && self.uint(off + i * esize, 1) == 0 {
                        break;
                    }
                    let go_on = self.visit(None, elem, off + i * esize, None, depth + 1);
                    if !go_on {
                        (self.last_depth, self.records) = (saved_depth, saved_records);
                        return false;
                    }
                }
                (self.last_depth, self.records) = (saved_depth, saved_records);
                let _ = writeln!(self.out, "{}],", indent(depth));
            }
            _ => {}
        }
        true
    }
}
