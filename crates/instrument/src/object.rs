//! The object `udtrace -G` writes. DTrace's `-G` rewrites the program's objects'
//! probe calls and makes an object holding what its kernel side needs; with the
//! header of [`crate::header`] the probe sites, notes and semaphores are already in
//! the program's objects, so there is nothing left to link. Builds made for DTrace
//! link the `-G` object all the same: it is an ELF relocatable object with no
//! symbols and no code, only a `.note.GNU-stack` section (so that linking it does not
//! make the program's stack executable).

/// The data model of the objects `-G` is given (ELF class), which the object it
/// writes must share for the link to take it: DTrace guesses it from the objects too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataModel {
    /// ELFCLASS32 (`gcc -m32`: i386).
    Ilp32,
    /// ELFCLASS64, the machine udtrace runs on.
    Lp64,
}

impl DataModel {
    /// The model of an ELF file from its first bytes (`EI_CLASS`); `None` when it is
    /// not ELF or of another class.
    pub fn of(bytes: &[u8]) -> Option<DataModel> {
        if bytes.len() < 5 || &bytes[..4] != b"\x7fELF" {
            return None;
        }
        match bytes[4] {
            1 => Some(DataModel::Ilp32),
            2 => Some(DataModel::Lp64),
            _ => None,
        }
    }
}

/// Little-endian relocatable object of the data model given, for the machine udtrace
/// runs on (i386 for 32-bit objects).
pub fn empty_object(model: DataModel) -> Vec<u8> {
    const EM_386: u16 = 3;
    const EM_X86_64: u16 = 62;
    const EM_AARCH64: u16 = 183;
    let wide = model == DataModel::Lp64;
    let machine = match model {
        DataModel::Lp64 if cfg!(target_arch = "aarch64") => EM_AARCH64,
        DataModel::Lp64 => EM_X86_64,
        DataModel::Ilp32 => EM_386,
    };
    // Header and section header sizes of ELF64 and ELF32.
    let (ehsize, shentsize) = if wide { (64, 64) } else { (52, 40) };
    let names: &[u8] = b"\0.note.GNU-stack\0.shstrtab\0";
    let shoff = (ehsize + names.len()).next_multiple_of(if wide { 8 } else { 4 });
    let mut b = Vec::with_capacity(shoff + 3 * shentsize);
    // e_ident: magic, class, ELFDATA2LSB, EV_CURRENT, ELFOSABI_NONE.
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', if wide { 2 } else { 1 }, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&1u16.to_le_bytes()); // e_type: ET_REL
    b.extend_from_slice(&machine.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes()); // e_version
    word(&mut b, wide, 0); // e_entry
    word(&mut b, wide, 0); // e_phoff
    word(&mut b, wide, shoff as u64);
    b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    b.extend_from_slice(&(ehsize as u16).to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes()); // e_phentsize
    b.extend_from_slice(&0u16.to_le_bytes()); // e_phnum
    b.extend_from_slice(&(shentsize as u16).to_le_bytes());
    b.extend_from_slice(&3u16.to_le_bytes()); // e_shnum
    b.extend_from_slice(&2u16.to_le_bytes()); // e_shstrndx
    b.extend_from_slice(names);
    b.resize(shoff, 0);
    // Section headers: null; .note.GNU-stack (SHT_PROGBITS, empty); .shstrtab.
    let at = ehsize as u64;
    section(&mut b, wide, 0, 0, 0, 0, 0);
    section(&mut b, wide, 1, 1, at, 0, 1);
    section(&mut b, wide, 17, 3, at, names.len() as u64, 1);
    b
}

/// An address-sized field: 8 bytes in ELF64, 4 in ELF32.
fn word(b: &mut Vec<u8>, wide: bool, v: u64) {
    if wide {
        b.extend_from_slice(&v.to_le_bytes());
    } else {
        b.extend_from_slice(&(v as u32).to_le_bytes());
    }
}

fn section(b: &mut Vec<u8>, wide: bool, name: u32, kind: u32, offset: u64, size: u64, align: u64) {
    b.extend_from_slice(&name.to_le_bytes());
    b.extend_from_slice(&kind.to_le_bytes());
    word(b, wide, 0); // sh_flags
    word(b, wide, 0); // sh_addr
    word(b, wide, offset);
    word(b, wide, size);
    b.extend_from_slice(&0u32.to_le_bytes()); // sh_link
    b.extend_from_slice(&0u32.to_le_bytes()); // sh_info
    word(b, wide, align);
    word(b, wide, 0); // sh_entsize
}

#[cfg(test)]
mod tests {
    use super::DataModel;

    #[test]
    fn layout() {
        let o = super::empty_object(DataModel::Lp64);
        assert_eq!(&o[..4], b"\x7fELF");
        assert_eq!(DataModel::of(&o), Some(DataModel::Lp64));
        assert_eq!(o.len(), 96 + 3 * 64);
        // .shstrtab's name and .note.GNU-stack's.
        assert_eq!(&o[64 + 17..64 + 26], b".shstrtab");
        assert_eq!(&o[65..80], b".note.GNU-stack");
    }

    #[test]
    fn layout_32() {
        let o = super::empty_object(DataModel::Ilp32);
        assert_eq!(DataModel::of(&o), Some(DataModel::Ilp32));
        assert_eq!(u16::from_le_bytes([o[18], o[19]]), 3); // EM_386
                                                           // 52-byte header, names (27 bytes) padded to 80, three 40-byte section headers.
        assert_eq!(o.len(), 80 + 3 * 40);
        assert_eq!(u32::from_le_bytes(o[32..36].try_into().unwrap()), 80); // e_shoff
        assert_eq!(&o[52 + 17..52 + 26], b".shstrtab");
    }
}
