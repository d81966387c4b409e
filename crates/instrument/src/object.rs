//! The object `udtrace -G` writes. DTrace's `-G` rewrites the program's objects'
//! probe calls and makes an object holding what its kernel side needs; with the
//! header of [`crate::header`] the probe sites, notes and semaphores are already in
//! the program's objects, so there is nothing left to link. Builds made for DTrace
//! link the `-G` object all the same: it is an ELF relocatable object with no
//! symbols and no code, only a `.note.GNU-stack` section (so that linking it does not
//! make the program's stack executable).

/// ELF64 little-endian relocatable object for the machine udtrace runs on.
pub fn empty_object() -> Vec<u8> {
    const EM_X86_64: u16 = 62;
    const EM_AARCH64: u16 = 183;
    let machine = if cfg!(target_arch = "aarch64") { EM_AARCH64 } else { EM_X86_64 };
    let names: &[u8] = b"\0.note.GNU-stack\0.shstrtab\0";
    let shoff = (64 + names.len()).next_multiple_of(8);
    let mut b = Vec::with_capacity(shoff + 3 * 64);
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB, EV_CURRENT, ELFOSABI_NONE.
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&1u16.to_le_bytes()); // e_type: ET_REL
    b.extend_from_slice(&machine.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes()); // e_version
    b.extend_from_slice(&0u64.to_le_bytes()); // e_entry
    b.extend_from_slice(&0u64.to_le_bytes()); // e_phoff
    b.extend_from_slice(&(shoff as u64).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    b.extend_from_slice(&64u16.to_le_bytes()); // e_ehsize
    b.extend_from_slice(&0u16.to_le_bytes()); // e_phentsize
    b.extend_from_slice(&0u16.to_le_bytes()); // e_phnum
    b.extend_from_slice(&64u16.to_le_bytes()); // e_shentsize
    b.extend_from_slice(&3u16.to_le_bytes()); // e_shnum
    b.extend_from_slice(&2u16.to_le_bytes()); // e_shstrndx
    b.extend_from_slice(names);
    b.resize(shoff, 0);
    // Section headers: null; .note.GNU-stack (SHT_PROGBITS, empty); .shstrtab.
    section(&mut b, 0, 0, 0, 0, 0);
    section(&mut b, 1, 1, 64, 0, 1);
    section(&mut b, 17, 3, 64, names.len() as u64, 1);
    b
}

fn section(b: &mut Vec<u8>, name: u32, kind: u32, offset: u64, size: u64, align: u64) {
    b.extend_from_slice(&name.to_le_bytes());
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // sh_flags
    b.extend_from_slice(&0u64.to_le_bytes()); // sh_addr
    b.extend_from_slice(&offset.to_le_bytes());
    b.extend_from_slice(&size.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // sh_link
    b.extend_from_slice(&0u32.to_le_bytes()); // sh_info
    b.extend_from_slice(&align.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // sh_entsize
}

#[cfg(test)]
mod tests {
    #[test]
    fn layout() {
        let o = super::empty_object();
        assert_eq!(&o[..4], b"\x7fELF");
        assert_eq!(o.len(), 96 + 3 * 64);
        // .shstrtab's name and .note.GNU-stack's.
        assert_eq!(&o[64 + 17..64 + 26], b".shstrtab");
        assert_eq!(&o[65..80], b".note.GNU-stack");
    }
}
