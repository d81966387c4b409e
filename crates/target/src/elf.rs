//! (temporary stub until the elf module lands)
pub struct LoadSegment { pub vaddr: u64, pub memsz: u64, pub offset: u64, pub filesz: u64, pub exec: bool }
pub struct ElfInfo { pub segments: Vec<LoadSegment>, pub entry: u64 }
