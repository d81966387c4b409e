//! The network types DTrace's subroutines take: `ipaddr_t` (from DTrace's ip.d),
//! `struct in_addr` and `struct in6_addr` with the members Linux gives them (DTrace
//! reads them from the kernel's CTF), so that `inet_ntoa6(&a)` and
//! `a->in6_u.u6_addr8[i]` work as they do under DTrace.

use crate::types::{Record, Type, TypeTable};

fn uint(size: u8, name: &str) -> Type {
    Type::named_int(size, false, name)
}

fn array(t: Type, n: u64) -> Type {
    Type::Array(Box::new(t), n)
}

/// Adds the network types to a program's type table.
pub fn install(types: &mut TypeTable) {
    types.typedefs.insert("ipaddr_t".into(), uint(4, "ipaddr_t"));
    types.typedefs.insert("in_addr_t".into(), uint(4, "in_addr_t"));
    types.typedefs.insert("in_port_t".into(), uint(2, "in_port_t"));
    types.typedefs.insert("sa_family_t".into(), uint(2, "sa_family_t"));

    let in_addr = types.record_tag(false, "in_addr");
    types.complete_record(in_addr, vec![("s_addr".into(), uint(4, "in_addr_t"))]);

    // The kernel's anonymous union of the address's bytes, halves and words.
    let words = types.records.len();
    types.records.push(Record {
        is_union: true,
        tag: String::new(),
        members: Vec::new(),
        size: 0,
        align: 1,
        complete: false,
    });
    types.complete_record(
        words,
        vec![
            ("u6_addr8".into(), array(uint(1, "uint8_t"), 16)),
            ("u6_addr16".into(), array(uint(2, "uint16_t"), 8)),
            ("u6_addr32".into(), array(uint(4, "uint32_t"), 4)),
        ],
    );
    let in6_addr = types.record_tag(false, "in6_addr");
    types.complete_record(in6_addr, vec![("in6_u".into(), Type::Union(words))]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in6_addr_is_16_bytes_of_one_union() {
        let mut t = TypeTable::default();
        install(&mut t);
        let id = t.struct_tags["in6_addr"];
        assert_eq!(t.size_of(&Type::Struct(id)), Some(16));
        let u = t.field(id, "in6_u").unwrap().ty.clone();
        let Type::Union(u) = u else { panic!("in6_u is a union") };
        assert_eq!(t.field(u, "u6_addr32").unwrap().offset, 0);
        assert_eq!(t.size_of(&Type::Struct(t.struct_tags["in_addr"])), Some(4));
    }
}
