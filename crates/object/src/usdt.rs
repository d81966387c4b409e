//! Statically defined probes (USDT) as SystemTap's `<sys/sdt.h>` describes them: one
//! `NT_STAPSDT` note in `.note.stapsdt` per probe site (provider, name, the site's
//! address, the address of its semaphore, and an argument descriptor string such as
//! `-4@%eax 8@-16(%rbp) $5`), with `.stapsdt.base` for objects moved after linking
//! (prelink). Bytes in, typed facts out.

use std::fmt;

/// `NT_STAPSDT`: a note of owner `stapsdt` describing one probe site.
pub const NT_STAPSDT: u32 = 3;

/// One probe site as its note gives it, with addresses adjusted for `.stapsdt.base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtNote {
    pub provider: String,
    /// The name as written in the note (`query__start`); DTrace's is [`dtrace_name`].
    pub name: String,
    /// The site's address in the file's virtual address space.
    pub pc: u64,
    /// The semaphore's address (0: none), a 16-bit counter the program tests.
    pub semaphore: u64,
    /// The arguments, parsed; `Err` keeps the text of a descriptor udtrace cannot read.
    pub args: Result<Vec<UsdtArg>, String>,
    /// The descriptor string as written.
    pub args_text: String,
}

/// A probe name as DTrace spells it: `__` becomes `-` (`query__start` → `query-start`).
pub fn dtrace_name(name: &str) -> String {
    name.replace("__", "-")
}

/// Parses the notes of a `.note.stapsdt` section (little-endian, 64-bit). `base`: the
/// address of `.stapsdt.base` when the object has one; notes record the base they were
/// linked against, and addresses move by the difference. Notes that are malformed or of
/// another type are skipped; parsing stops at a truncated note.
pub fn parse_notes(data: &[u8], base: Option<u64>) -> Vec<UsdtNote> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])));
    while at + 12 <= data.len() {
        let (Some(namesz), Some(descsz), Some(kind)) = (u32_at(data, at), u32_at(data, at + 4), u32_at(data, at + 8))
        else {
            break;
        };
        let name_start = at + 12;
        let Some(desc_start) = align4(namesz as usize).and_then(|n| name_start.checked_add(n)) else { break };
        let Some(next) = align4(descsz as usize).and_then(|n| desc_start.checked_add(n)) else { break };
        let (Some(owner), Some(desc)) =
            (data.get(name_start..name_start + namesz as usize), data.get(desc_start..desc_start + descsz as usize))
        else {
            break;
        };
        if kind == NT_STAPSDT && owner == b"stapsdt\0" {
            if let Some(n) = parse_desc(desc, base) {
                out.push(n);
            }
        }
        at = next;
    }
    out
}

fn parse_desc(desc: &[u8], base: Option<u64>) -> Option<UsdtNote> {
    let word = |o: usize| desc.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])));
    let (pc, note_base, semaphore) = (word(0)?, word(8)?, word(16)?);
    let mut strings = desc.get(24..)?.split(|&b| b == 0);
    let text = |s: &[u8]| std::str::from_utf8(s).ok().map(str::to_string);
    let provider = text(strings.next()?)?;
    let name = text(strings.next()?)?;
    let args_text = strings.next().and_then(text).unwrap_or_default();
    if provider.is_empty() || name.is_empty() {
        return None;
    }
    // Prelink moved the object: the addresses move with `.stapsdt.base`.
    let delta = base.map_or(0, |b| b.wrapping_sub(note_base));
    let semaphore = if semaphore == 0 { 0 } else { semaphore.wrapping_add(delta) };
    Some(UsdtNote { provider, name, pc: pc.wrapping_add(delta), semaphore, args: parse_args(&args_text), args_text })
}

/// The 64-bit general registers (and `rip`), as an argument names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reg {
    Ax,
    Bx,
    Cx,
    Dx,
    Si,
    Di,
    Bp,
    Sp,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
    Ip,
}

/// A register operand: which register and which of its bits (`%eax`: the low 4 bytes,
/// `%ah`: byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegPart {
    pub reg: Reg,
    /// Bytes read: 1, 2, 4 or 8.
    pub width: u8,
    /// The high byte of the low word (`%ah`, `%bh`, `%ch`, `%dh`).
    pub high: bool,
}

impl RegPart {
    /// The part's value from its register's.
    pub fn value(&self, full: u64) -> u64 {
        let v = if self.high { full >> 8 } else { full };
        match self.width {
            1 => v & 0xff,
            2 => v & 0xffff,
            4 => v & 0xffff_ffff,
            _ => v,
        }
    }
}

/// Where an argument's value is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// `$5`: a constant.
    Const(i64),
    /// `%eax`: in a register.
    Reg(RegPart),
    /// `disp(%base,%index,scale)`: in memory. `symbol` (`counter+8(%rip)`) is added to
    /// the displacement once resolved; with it, `%rip` stands for the object's load bias.
    Mem { disp: i64, symbol: Option<String>, base: Option<RegPart>, index: Option<RegPart>, scale: u8 },
}

/// One argument: its size (`-4`: a signed 4-byte value) and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtArg {
    /// Bytes: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub operand: Operand,
}

impl UsdtArg {
    /// `value` (read from a register or memory) cut to the argument's size and
    /// extended as its sign says.
    pub fn extend(&self, value: u64) -> u64 {
        let bits = u32::from(self.size) * 8;
        if bits >= 64 {
            return value;
        }
        let v = value & ((1u64 << bits) - 1);
        if self.signed && v >> (bits - 1) & 1 == 1 {
            v | !((1u64 << bits) - 1)
        } else {
            v
        }
    }

    /// The C type DTrace's `-lv` shows for it.
    pub fn c_type(&self) -> &'static str {
        match (self.size, self.signed) {
            (1, true) => "int8_t",
            (1, false) => "uint8_t",
            (2, true) => "int16_t",
            (2, false) => "uint16_t",
            (4, true) => "int32_t",
            (4, false) => "uint32_t",
            (_, true) => "int64_t",
            (_, false) => "uint64_t",
        }
    }
}

impl fmt::Display for UsdtArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", if self.signed { "-" } else { "" }, self.size)
    }
}

/// Parses a descriptor string: arguments separated by blanks. `Err`: the first
/// argument udtrace cannot read, as written.
pub fn parse_args(text: &str) -> Result<Vec<UsdtArg>, String> {
    text.split_ascii_whitespace().map(|a| parse_arg(a).ok_or_else(|| a.to_string())).collect()
}

/// One argument: `[-]SIZE@OPERAND`, or a bare operand (old notes: 8 bytes, signed).
pub fn parse_arg(text: &str) -> Option<UsdtArg> {
    let (size, signed, op) = match text.split_once('@') {
        Some((size, op)) => {
            let (signed, digits) = match size.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, size),
            };
            let size: u8 = digits.parse().ok()?;
            if ![1, 2, 4, 8].contains(&size) {
                return None;
            }
            (size, signed, op)
        }
        None => (8, true, text),
    };
    Some(UsdtArg { size, signed, operand: parse_operand(op)? })
}

fn parse_operand(op: &str) -> Option<Operand> {
    if let Some(c) = op.strip_prefix('$') {
        return parse_int(c).map(Operand::Const);
    }
    if let Some(r) = op.strip_prefix('%') {
        return register(r).map(Operand::Reg);
    }
    // disp(%base[,%index[,scale]]), disp possibly `sym`, `sym+N` or `sym-N`.
    let (disp_text, inside) = match op.split_once('(') {
        Some((d, rest)) => (d, Some(rest.strip_suffix(')')?)),
        None => (op, None),
    };
    let (disp, symbol) = parse_displacement(disp_text)?;
    let (mut base, mut index, mut scale) = (None, None, 1u8);
    if let Some(inside) = inside {
        let mut parts = inside.split(',');
        let b = parts.next()?.trim();
        if !b.is_empty() {
            base = Some(register(b.strip_prefix('%')?)?);
        }
        if let Some(i) = parts.next() {
            index = Some(register(i.trim().strip_prefix('%')?)?);
            if let Some(s) = parts.next() {
                scale = s.trim().parse().ok().filter(|s| [1, 2, 4, 8].contains(s))?;
            }
        }
        if parts.next().is_some() {
            return None;
        }
    } else if symbol.is_none() {
        // A bare number: an absolute address.
        return Some(Operand::Mem { disp, symbol: None, base: None, index: None, scale: 1 });
    }
    Some(Operand::Mem { disp, symbol, base, index, scale })
}

/// `-16`, `0x10`, `sym`, `sym+8`, `40+sym`, `sym-8`, or nothing (0): numbers summed,
/// at most one symbol.
fn parse_displacement(text: &str) -> Option<(i64, Option<String>)> {
    let mut disp = 0i64;
    let mut symbol: Option<String> = None;
    let mut rest = text;
    let mut negative = false;
    while !rest.is_empty() {
        let end = rest.char_indices().skip(1).find(|&(_, c)| c == '+' || c == '-').map_or(rest.len(), |(i, _)| i);
        let term = &rest[..end];
        let (neg, term) = match term.strip_prefix('-') {
            Some(t) => (true, t),
            None => (false, term.strip_prefix('+').unwrap_or(term)),
        };
        let neg = neg != negative;
        negative = false;
        if let Some(n) = parse_int(term) {
            disp = disp.wrapping_add(if neg { n.wrapping_neg() } else { n });
        } else {
            let ok = !term.is_empty()
                && term.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '@'))
                && !term.starts_with(|c: char| c.is_ascii_digit());
            if !ok || neg || symbol.is_some() {
                return None;
            }
            symbol = Some(term.to_string());
        }
        rest = &rest[end..];
    }
    Some((disp, symbol))
}

fn parse_int(text: &str) -> Option<i64> {
    let (neg, t) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok()? as i64,
        None if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => t.parse::<u64>().ok()? as i64,
        None => return None,
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// A register by its AT&T name without `%`: every x86-64 general register at every
/// width, and `rip`.
pub fn register(name: &str) -> Option<RegPart> {
    use Reg::*;
    let part = |reg, width, high| Some(RegPart { reg, width, high });
    // The legacy eight: 64, 32, 16, low 8 bits (and the high byte of the first four).
    type Names = (Reg, &'static str, &'static str, &'static str, &'static str, Option<&'static str>);
    const LEGACY: [Names; 8] = [
        (Ax, "rax", "eax", "ax", "al", Some("ah")),
        (Bx, "rbx", "ebx", "bx", "bl", Some("bh")),
        (Cx, "rcx", "ecx", "cx", "cl", Some("ch")),
        (Dx, "rdx", "edx", "dx", "dl", Some("dh")),
        (Si, "rsi", "esi", "si", "sil", None),
        (Di, "rdi", "edi", "di", "dil", None),
        (Bp, "rbp", "ebp", "bp", "bpl", None),
        (Sp, "rsp", "esp", "sp", "spl", None),
    ];
    for (reg, q, d, w, b, h) in LEGACY {
        match name {
            n if n == q => return part(reg, 8, false),
            n if n == d => return part(reg, 4, false),
            n if n == w => return part(reg, 2, false),
            n if n == b => return part(reg, 1, false),
            n if Some(n) == h => return part(reg, 1, true),
            _ => {}
        }
    }
    if name == "rip" {
        return part(Ip, 8, false);
    }
    let rest = name.strip_prefix('r')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n: u8 = rest[..digits].parse().ok()?;
    let reg = [R8, R9, R10, R11, R12, R13, R14, R15].get(usize::from(n.checked_sub(8)?)).copied()?;
    let width = match &rest[digits..] {
        "" => 8,
        "d" => 4,
        "w" => 2,
        "b" | "l" => 1,
        _ => return None,
    };
    part(reg, width, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(reg: Reg, width: u8) -> Option<RegPart> {
        Some(RegPart { reg, width, high: false })
    }

    #[test]
    fn descriptors_of_every_form() {
        let a = parse_args("-4@%eax 8@-16(%rbp) 8@8(%rax,%rdx,8) -4@$5 -1@%dil 2@%r9w 1@%ah 8@(%rsp) 8@$-3").unwrap();
        assert_eq!(a[0], UsdtArg { size: 4, signed: true, operand: Operand::Reg(reg(Reg::Ax, 4).unwrap()) });
        assert_eq!(
            a[1].operand,
            Operand::Mem { disp: -16, symbol: None, base: reg(Reg::Bp, 8), index: None, scale: 1 }
        );
        assert_eq!(
            a[2].operand,
            Operand::Mem { disp: 8, symbol: None, base: reg(Reg::Ax, 8), index: reg(Reg::Dx, 8), scale: 8 }
        );
        assert_eq!(a[3].operand, Operand::Const(5));
        assert_eq!(a[4], UsdtArg { size: 1, signed: true, operand: Operand::Reg(reg(Reg::Di, 1).unwrap()) });
        assert_eq!(a[5].operand, Operand::Reg(reg(Reg::R9, 2).unwrap()));
        assert_eq!(a[6].operand, Operand::Reg(RegPart { reg: Reg::Ax, width: 1, high: true }));
        assert_eq!(a[7].operand, Operand::Mem { disp: 0, symbol: None, base: reg(Reg::Sp, 8), index: None, scale: 1 });
        assert_eq!(a[8].operand, Operand::Const(-3));
        let pg = parse_arg("-4@40+CheckpointStats(%rip)").unwrap();
        assert!(matches!(pg.operand, Operand::Mem { disp: 40, symbol: Some(ref s), .. } if s == "CheckpointStats"));
        assert!(matches!(parse_arg("8@sym-8(%rip)").unwrap().operand, Operand::Mem { disp: -8, .. }));
        let s = parse_arg("4@counter+8(%rip)").unwrap();
        assert_eq!(
            s.operand,
            Operand::Mem { disp: 8, symbol: Some("counter".into()), base: reg(Reg::Ip, 8), index: None, scale: 1 }
        );
        assert_eq!(parse_args(""), Ok(vec![]));
        assert_eq!(parse_args("3@%eax"), Err("3@%eax".into()), "no 3-byte arguments");
        assert_eq!(parse_args("8@%xmm0"), Err("8@%xmm0".into()));
        assert_eq!(parse_args("8@8(%rax,%rdx,3)"), Err("8@8(%rax,%rdx,3)".into()));
    }

    #[test]
    fn every_register_name() {
        for (n, r) in ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp"].iter().zip([
            Reg::Ax,
            Reg::Bx,
            Reg::Cx,
            Reg::Dx,
            Reg::Si,
            Reg::Di,
            Reg::Bp,
            Reg::Sp,
        ]) {
            assert_eq!(register(n), reg(r, 8));
            assert_eq!(register(&n.replacen('r', "e", 1)), reg(r, 4));
            assert_eq!(register(&n[1..]), reg(r, 2));
        }
        for (i, r) in
            [Reg::R8, Reg::R9, Reg::R10, Reg::R11, Reg::R12, Reg::R13, Reg::R14, Reg::R15].into_iter().enumerate()
        {
            let n = i + 8;
            assert_eq!(register(&format!("r{n}")), reg(r, 8));
            assert_eq!(register(&format!("r{n}d")), reg(r, 4));
            assert_eq!(register(&format!("r{n}w")), reg(r, 2));
            assert_eq!(register(&format!("r{n}b")), reg(r, 1));
        }
        for (n, r) in [("al", Reg::Ax), ("bl", Reg::Bx), ("cl", Reg::Cx), ("dl", Reg::Dx)] {
            assert_eq!(register(n), reg(r, 1));
        }
        for (n, r) in [("sil", Reg::Si), ("dil", Reg::Di), ("bpl", Reg::Bp), ("spl", Reg::Sp)] {
            assert_eq!(register(n), reg(r, 1));
        }
        assert_eq!(register("r16"), None);
        assert_eq!(register("r7"), None);
        assert_eq!(register("rip"), reg(Reg::Ip, 8));
    }

    #[test]
    fn sizes_extend() {
        let a = |t| parse_arg(t).unwrap();
        assert_eq!(a("-1@%al").extend(0xff), u64::MAX);
        assert_eq!(a("1@%al").extend(0x1ff), 0xff);
        assert_eq!(a("-2@%ax").extend(0x8000), 0xffff_ffff_ffff_8000);
        assert_eq!(a("-4@%eax").extend(0x1_7fff_ffff), 0x7fff_ffff);
        assert_eq!(a("4@%eax").extend(0xffff_ffff_ffff_ffff), 0xffff_ffff);
        assert_eq!(a("-8@%rax").extend(5), 5);
        assert_eq!(RegPart { reg: Reg::Ax, width: 1, high: true }.value(0x1234), 0x12);
    }

    #[test]
    fn notes_with_base_adjustment() {
        let mut desc = Vec::new();
        for w in [0x1000u64, 0x2000, 0x3000] {
            desc.extend_from_slice(&w.to_le_bytes());
        }
        desc.extend_from_slice(b"prov\0query__start\08@%rdi -4@$1\0");
        let mut note = Vec::new();
        note.extend_from_slice(&8u32.to_le_bytes());
        note.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_STAPSDT.to_le_bytes());
        note.extend_from_slice(b"stapsdt\0");
        note.extend_from_slice(&desc);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let two = [note.clone(), note.clone()].concat();
        let n = parse_notes(&two, None);
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].pc, n[0].semaphore, n[0].provider.as_str()), (0x1000, 0x3000, "prov"));
        assert_eq!(dtrace_name(&n[0].name), "query-start");
        assert_eq!(n[0].args.as_ref().map(Vec::len), Ok(2));
        let moved = parse_notes(&note, Some(0x2100));
        assert_eq!((moved[0].pc, moved[0].semaphore), (0x1100, 0x3100));
        // Truncated anywhere before its padding: no panic, nothing made up.
        for cut in 0..20 + desc.len() {
            assert!(parse_notes(&note[..cut], None).is_empty());
        }
    }
}
