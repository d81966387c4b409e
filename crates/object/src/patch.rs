//! Which probe sites can be patched in the traced process with a 5-byte `jmp rel32` to a
//! trampoline, and the displaced instructions relocated to run in that trampoline
//! (pid-provider.md, "In-process patching").
//!
//! The trampoline of a site is laid out as: the code [`PatchPlan::relocate_before`]
//! returns, the firing, the code [`PatchPlan::relocate_after`] returns, then a
//! [`jmp_rel32`] back to [`PatchPlan::resume_vaddr`]. At entry and offset sites nothing
//! runs before the firing; at a return site the instructions leading up to the `ret` (or
//! tail jump) do, so that the firing sees the registers the site instruction sees.
//!
//! Pure: bytes in, a plan and bytes out. Writing the patch, mapping the trampoline within
//! 2 GiB of the code and stopping threads while doing it are the backend's job.

use std::collections::BTreeSet;
use std::ops::Range;

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionBlock,
    InstructionInfoFactory, MemoryOperand, Mnemonic, OpAccess, OpKind, Register,
};

use crate::sites::{for_each_insn, is_direct_branch};

/// Length of the patch: `jmp rel32`.
pub const PATCH_LEN: u32 = 5;

/// Which probe a site is for: it decides where the patched bytes lie around the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SiteKind {
    /// Offset 0 of the function.
    Entry,
    /// A `ret`, `ret imm16`, or a direct jump leaving the function (tail call).
    Return,
    /// Any instruction boundary.
    Offset,
}

/// Why a site cannot be patched; the backend falls back to a uprobe and says why in one
/// line, so every message reads on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("code at {0:#x} cannot be decoded")]
    Undecodable(u64),
    #[error("offset {0:#x} is not an instruction of the function")]
    NotAnInstruction(u64),
    #[error("offset {0:#x} is not the function's entry")]
    NotTheEntry(u64),
    #[error("{mnemonic} at +{off:#x} is not a return site")]
    NotAReturn { off: u32, mnemonic: String },
    #[error("function too short to patch")]
    TooShort,
    #[error("a branch lands inside the patched bytes at +{0:#x}")]
    BranchInside(u32),
    #[error("indirect jump in the function")]
    IndirectJump,
    #[error("code after {mnemonic} at +{off:#x} would be patched, and only a jump reaches it")]
    PastBlockEnd { off: u32, mnemonic: String },
    #[error("call at +{0:#x} returns inside the patched bytes")]
    CallInside(u32),
    #[error("a displaced branch at {from:#x} lands inside the displaced code at {target:#x}")]
    BranchIntoDisplaced { from: u64, target: u64 },
    #[error("{target:#x} is more than 2 GiB away from the trampoline")]
    TooFar { target: u64 },
    #[error("instruction cannot be relocated: {0}")]
    Unrelocatable(String),
}

impl Refusal {
    /// The reason without its addresses, for counting refusals by kind in one notice.
    pub fn summary(&self) -> &'static str {
        match self {
            Refusal::Undecodable(_) => "its function's code cannot be decoded",
            Refusal::NotAnInstruction(_) => "not an instruction boundary",
            Refusal::NotTheEntry(_) => "not the function's entry",
            Refusal::NotAReturn { .. } => "not a return site",
            Refusal::TooShort => "function too short to patch",
            Refusal::BranchInside(_) => "a branch lands inside the bytes a patch takes",
            Refusal::IndirectJump => "indirect jump (a switch table) in the function",
            Refusal::PastBlockEnd { .. } => "a patch would run past a ret or jmp",
            Refusal::CallInside(_) => "a call would return inside the patched bytes",
            Refusal::BranchIntoDisplaced { .. } => "a displaced branch lands inside the displaced code",
            Refusal::TooFar { .. } => "a target is more than 2 GiB from the trampoline",
            Refusal::Unrelocatable(_) => "an instruction cannot be relocated",
        }
    }
}

/// Code that belongs to the function but lies outside its symbol's bytes, and entries
/// into it that no direct branch shows. Targets the planner cannot see are what makes a
/// patch unsafe, so the caller passes what it knows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outside<'a> {
    /// Other parts of the function (gcc's `f.cold`): their address and bytes. Their
    /// branches into the function are targets; an indirect jump in them counts too.
    pub parts: &'a [(u64, &'a [u8])],
    /// Addresses entered without a direct branch: exception landing pads, labels whose
    /// address is stored in data.
    pub targets: &'a [u64],
}

/// A site that can be patched: the patched bytes and the instructions they displace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchPlan {
    pub kind: SiteKind,
    pub func_vaddr: u64,
    /// The site's offset in the function.
    pub site: u32,
    /// Offsets in the function of the patched bytes, `[start, end)`: whole instructions,
    /// at least [`PATCH_LEN`] bytes.
    pub start: u32,
    pub end: u32,
    /// Bytes of displaced code that run before the firing: 0 but for return sites.
    pub probe_at: u32,
    /// A `call` is displaced (always the last instruction). Relocated, it pushes its
    /// original return address and jumps, so the callee returns to the original code
    /// and stacks unwind as if nothing were patched.
    pub displaced_call: bool,
    /// At an entry site whose first instruction runs in place before the patch
    /// (`start` > 0, see [`plan_with`]): what that instruction took from the stack
    /// pointer (8 for a `push`, N for `sub rsp, N`), for the firing to record the
    /// stack pointer the function was entered with. 0 otherwise.
    pub sp_adjust: i32,
    /// At an entry patched over its first byte (its first instruction may not run
    /// first): that instruction's bytes. The jump's displacement keeps those of them
    /// it covers, so that the instruction is whole again when another tracer's uprobe
    /// gives the first byte back ([`Self::forced_displacement`]).
    pub first: Vec<u8>,
    /// Offset in the function of the landing `int3`, right after the first instruction:
    /// where a thread goes on after another tracer's uprobe has run that instruction
    /// (or after the instruction ran whole again); the trampoline has the code that
    /// follows it ([`Self::relocate_after_landing`]). None where the first instruction
    /// does not fall through (a jump, a call) or other plans.
    pub landing: Option<u32>,
    /// The status flags and DF are dead where the firing runs: an entry, before any
    /// instruction of the function or after a first one that writes no flag (the ABI
    /// leaves the flags at a call undefined but for DF, clear). A firing there need not
    /// save them.
    pub flags_dead: bool,
    insns: Vec<Instruction>,
    /// Index in `insns` of the first instruction that runs after the firing.
    split: usize,
}

impl PatchPlan {
    /// Address of the first patched byte, where the `jmp` to the trampoline goes.
    pub fn region_vaddr(&self) -> u64 {
        self.func_vaddr.wrapping_add(u64::from(self.start))
    }

    /// Where the trampoline jumps back to: the first byte after the patched ones.
    pub fn resume_vaddr(&self) -> u64 {
        self.func_vaddr.wrapping_add(u64::from(self.end))
    }

    /// The bytes to write at [`Self::region_vaddr`]: the `jmp` to `trampoline`, then
    /// `int3` over the rest of the displaced bytes (never executed, as no branch lands
    /// there; a trap says so loudly if a thread was left inside). At an entry patched
    /// over its first byte, the bytes of the first instruction past the jump are kept
    /// and the landing is an `int3`. `None` if the trampoline is more than 2 GiB away,
    /// or not where [`Self::forced_displacement`] wants it.
    pub fn patch_bytes(&self, trampoline: u64) -> Option<Vec<u8>> {
        let jmp = jmp_rel32(self.region_vaddr(), trampoline)?;
        if let Some(forced) = self.forced_displacement() {
            if forced.iter().zip(&jmp[1..]).any(|(f, &b)| f.is_some_and(|f| f != b)) {
                return None;
            }
        }
        let mut b = jmp.to_vec();
        b.extend(self.first.iter().skip(b.len()));
        b.resize((self.end - self.start) as usize, 0xcc);
        Some(b)
    }

    /// At an entry patched over its first byte: the bytes the jump's displacement
    /// (little-endian, bytes 1–4 of the jump) must have, `None` where any will do.
    /// The ones over the first instruction are its own: when another tracer's uprobe
    /// goes, the kernel writes the file's first byte back, and the instruction is
    /// whole again. The byte right after it, when inside the jump, is the landing
    /// `int3`. The trampoline goes where this displacement points.
    pub fn forced_displacement(&self) -> Option<[Option<u8>; 4]> {
        if self.first.is_empty() {
            return None;
        }
        Some(std::array::from_fn(|k| match self.first.get(k + 1) {
            Some(&b) => Some(b),
            None if k + 1 == self.first.len() => Some(0xcc),
            None => None,
        }))
    }

    /// The displaced instructions that run before the firing, relocated to `new_ip`
    /// (empty but for return sites).
    pub fn relocate_before(&self, new_ip: u64) -> Result<Vec<u8>, Refusal> {
        relocate_insns(&self.insns[..self.split], self.region(), new_ip)
    }

    /// The displaced instructions that run after the firing, relocated to `new_ip`; the
    /// caller appends the jump back to [`Self::resume_vaddr`].
    pub fn relocate_after(&self, new_ip: u64) -> Result<Vec<u8>, Refusal> {
        relocate_insns(&self.insns[self.split..], self.region(), new_ip)
    }

    /// [`Self::relocate_after`], and where in it the copy of the code after the first
    /// instruction starts, for a plan with a landing: a thread at the landing has run
    /// the first instruction already and goes on there.
    pub fn relocate_after_landing(&self, new_ip: u64) -> Result<(Vec<u8>, Option<usize>), Refusal> {
        if self.landing.is_none() {
            return Ok((self.relocate_after(new_ip)?, None));
        }
        let mut code = relocate_insns(&self.insns[self.split..=self.split], self.region(), new_ip)?;
        let at = code.len();
        code.extend(relocate_insns(&self.insns[self.split + 1..], self.region(), new_ip.wrapping_add(at as u64))?);
        Ok((code, Some(at)))
    }

    fn region(&self) -> Range<u64> {
        self.region_vaddr()..self.resume_vaddr()
    }
}

/// Plan the patch of the site at offset `site` of the function whose bytes are `code`,
/// placed at `func_vaddr`. See [`plan_with`].
pub fn plan(code: &[u8], func_vaddr: u64, site: u64, kind: SiteKind) -> Result<PatchPlan, Refusal> {
    plan_with(code, func_vaddr, &Outside::default(), site, kind)
}

/// Plan the patch of a site, knowing the function's other parts and entries.
///
/// The patched bytes are whole instructions, at least 5 bytes, inside the function: from
/// the site on for entry and offset sites; for a return site, the instructions ending
/// with it, starting as late as possible. No branch may land strictly inside them (it
/// would land in the middle of the `jmp`), no call may return inside them, and they may
/// not run past a `ret` or `jmp` (the code after one is reached only by some jump).
///
/// An entry site whose first instruction leaves the arguments and the caller's frame as
/// they were ([`runs_first`]: `endbr64`, `push`, `sub rsp, N`, a compare, a load into a
/// scratch register, …) keeps that instruction in place and is patched from the second
/// on: the firing then runs right after it and records the stack pointer as it was at
/// the entry. The function's first byte stays the file's, so another tracer's uprobe
/// there (bpftrace's, perf's, any eBPF agent's, always at a function's first byte) runs
/// that instruction and goes on into the patch, and takes its byte back when it goes;
/// a jump written over the first byte would have the kernel resume in the middle of it
/// (docs/pid-provider.md, "Other tracers' uprobes").
pub fn plan_with(
    code: &[u8],
    func_vaddr: u64,
    outside: &Outside<'_>,
    site: u64,
    kind: SiteKind,
) -> Result<PatchPlan, Refusal> {
    let f = Facts::new(code, func_vaddr, outside)?;
    let i = u32::try_from(site)
        .ok()
        .and_then(|s| f.insns.binary_search_by_key(&s, |insn| f.off(insn)).ok())
        .ok_or(Refusal::NotAnInstruction(site))?;
    match kind {
        SiteKind::Entry if site != 0 => return Err(Refusal::NotTheEntry(site)),
        // Switch-table targets are case labels, reached through the dispatch code, which
        // comes after the function's first instructions: an indirect jump does not stop
        // the entry (pid-provider.md says why this is an assumption).
        SiteKind::Entry => {
            if let Some(plan) = plan_after_first(&f) {
                return Ok(plan);
            }
        }
        _ if f.indirect_jump => return Err(Refusal::IndirectJump),
        SiteKind::Return => {
            let insn = &f.insns[i];
            let t = insn.near_branch_target();
            let leaves = is_direct_branch(insn) && !f.inside(t) && !f.parts.iter().any(|&(a, b)| t >= a && t < b);
            if !(matches!(insn.mnemonic(), Mnemonic::Ret) || leaves) {
                return Err(Refusal::NotAReturn { off: f.off(insn), mnemonic: mnemonic(insn) });
            }
        }
        SiteKind::Offset => {}
    }
    // The instructions patched: `first..=last`, and the first to run after the firing.
    let (first, last, split) = if kind == SiteKind::Return {
        let mut first = i;
        while f.insns[i].next_ip().wrapping_sub(f.insns[first].ip()) < u64::from(PATCH_LEN) {
            first = first.checked_sub(1).ok_or(Refusal::TooShort)?;
        }
        (first, i, i - first)
    } else {
        (i, f.region_end(i)?, 0)
    };
    // An entry patched over its first byte lands another tracer's uprobe's thread
    // right after the first instruction: on an `int3` inside the jump, or, for an
    // instruction of 5 bytes and more, over the next one, displaced too. A first
    // instruction that does not fall through sends it elsewhere.
    let mut last = last;
    let first_len = f.insns[i].len() as u32;
    let falls = matches!(f.insns[i].flow_control(), FlowControl::Next | FlowControl::ConditionalBranch);
    let landing = (kind == SiteKind::Entry && falls).then_some(first_len);
    if landing.is_some() && last == i {
        last += 1;
        if last == f.insns.len() {
            return Err(Refusal::TooShort);
        }
    }
    let insns = f.insns[first..=last].to_vec();
    let (start, end) = f.check_region(&insns, true)?;
    Ok(PatchPlan {
        kind,
        func_vaddr,
        site: f.off(&f.insns[i]),
        start,
        end,
        probe_at: f.off(&f.insns[first + split]) - start,
        displaced_call: insns.iter().any(|insn| insn.mnemonic() == Mnemonic::Call),
        sp_adjust: 0,
        first: if kind == SiteKind::Entry { code[..first_len as usize].to_vec() } else { Vec::new() },
        landing,
        flags_dead: kind == SiteKind::Entry,
        insns,
        split,
    })
}

/// The entry plan that leaves the function's first instruction in place, if it may run
/// before the firing and the instructions after it can be patched.
fn plan_after_first(f: &Facts) -> Option<PatchPlan> {
    let first = f.insns.first()?;
    let sp_adjust = runs_first(first)?;
    let flags_dead = first.rflags_modified() == 0;
    if f.insns.len() < 2 {
        return None;
    }
    let insns = f.insns[1..=f.region_end(1).ok()?].to_vec();
    // A branch to the patch's first byte would fire the entry again: only the function's
    // own first byte may be a target.
    let (start, end) = f.check_region(&insns, false).ok()?;
    Some(PatchPlan {
        kind: SiteKind::Entry,
        func_vaddr: f.vaddr,
        site: 0,
        start,
        end,
        probe_at: 0,
        displaced_call: insns.iter().any(|insn| insn.mnemonic() == Mnemonic::Call),
        sp_adjust,
        first: Vec::new(),
        landing: None,
        flags_dead,
        insns,
        split: 0,
    })
}

/// Whether a function's first instruction may run before the entry firing, and if so
/// what it takes from the stack pointer: it must go on to the next instruction, write
/// no argument register (rdi, rsi, rdx, rcx, r8, r9), not the frame pointer, no memory
/// but the slot a `push` fills, and move rsp only by a known amount. What else it writes
/// (flags, a scratch register such as rax or r11, a callee-saved one it is about to
/// save) shows in the firing's registers as it left them.
pub fn runs_first(insn: &Instruction) -> Option<i32> {
    if insn.flow_control() != FlowControl::Next || insn.has_lock_prefix() {
        return None;
    }
    let info = InstructionInfoFactory::new().info(insn).clone();
    let writes = |a: OpAccess| {
        matches!(a, OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite)
    };
    let pushes = insn.stack_pointer_increment() < 0 && matches!(insn.mnemonic(), Mnemonic::Push | Mnemonic::Pushfq);
    if info.used_memory().iter().any(|m| writes(m.access())) && !pushes {
        return None;
    }
    let mut moves_sp = false;
    for r in info.used_registers().iter().filter(|r| writes(r.access())) {
        match r.register().full_register() {
            Register::RDI | Register::RSI | Register::RDX | Register::RCX | Register::R8 | Register::R9 => return None,
            Register::RBP => return None,
            Register::RSP => moves_sp = true,
            r if r.is_segment_register() => return None,
            _ => {}
        }
    }
    if !moves_sp {
        return Some(0);
    }
    if pushes {
        return Some(-insn.stack_pointer_increment());
    }
    // `sub rsp, N` / `add rsp, -N`: what it takes is its immediate.
    let imm = match insn.op1_kind() {
        // Sign-extended, as the instruction uses it.
        OpKind::Immediate8to64 | OpKind::Immediate32to64 => insn.immediate(1) as i64,
        _ => return None,
    };
    if insn.op0_kind() != OpKind::Register || insn.op0_register() != Register::RSP {
        return None;
    }
    let taken = match insn.mnemonic() {
        Mnemonic::Sub => imm,
        Mnemonic::Add => imm.checked_neg()?,
        _ => return None,
    };
    i32::try_from(taken).ok()
}

/// What planning needs to know about the whole function.
struct Facts {
    vaddr: u64,
    end: u64,
    insns: Vec<Instruction>,
    /// Offsets in the function where control may arrive other than by falling through.
    targets: BTreeSet<u32>,
    /// An indirect jump that may land anywhere in the function.
    indirect_jump: bool,
    /// The other parts' `[start, end)`: jumps there stay in the function.
    parts: Vec<(u64, u64)>,
}

impl Facts {
    fn new(code: &[u8], vaddr: u64, outside: &Outside<'_>) -> Result<Facts, Refusal> {
        let mut f = Facts {
            vaddr,
            end: vaddr.wrapping_add(code.len() as u64),
            insns: Vec::new(),
            targets: BTreeSet::new(),
            indirect_jump: false,
            parts: outside.parts.iter().map(|&(a, c)| (a, a.wrapping_add(c.len() as u64))).collect(),
        };
        let mut seen = Vec::new();
        if let Some(at) = for_each_insn(code, vaddr, |_, insn| seen.push(*insn)) {
            return Err(Refusal::Undecodable(vaddr + u64::from(at)));
        }
        for insn in &seen {
            f.note(insn);
        }
        f.insns = seen;
        for &(pv, pcode) in outside.parts {
            let mut part = Vec::new();
            if let Some(at) = for_each_insn(pcode, pv, |_, insn| part.push(*insn)) {
                return Err(Refusal::Undecodable(pv + u64::from(at)));
            }
            for insn in &part {
                f.note(insn);
            }
        }
        for &t in outside.targets {
            f.add_target(t);
        }
        Ok(f)
    }

    /// Record where `insn` may send control in the function, and whether nobody knows.
    fn note(&mut self, insn: &Instruction) {
        if is_near_branch(insn) {
            // Calls too: a call to a local label (a PC thunk) lands there.
            self.add_target(insn.near_branch_target());
        } else if insn.mnemonic() == Mnemonic::Jmp && !via_one_pointer(insn) {
            self.indirect_jump = true;
        }
        // A label whose address is taken (`&&label`, computed goto) is loaded with lea.
        if insn.is_ip_rel_memory_operand() {
            self.add_target(insn.ip_rel_memory_address());
        }
    }

    /// The index of the last instruction of a region from instruction `i` on: the
    /// first that ends at least [`PATCH_LEN`] bytes after `i`'s start.
    fn region_end(&self, i: usize) -> Result<usize, Refusal> {
        let mut last = i;
        while self.insns[last].next_ip().wrapping_sub(self.insns[i].ip()) < u64::from(PATCH_LEN) {
            last += 1;
            if last == self.insns.len() {
                return Err(Refusal::TooShort);
            }
        }
        Ok(last)
    }

    /// The offsets `[start, end)` of the displaced instructions `insns`, if they may be
    /// patched: no branch lands strictly inside them (nor at their first byte, unless
    /// `entered_at_start`), and none but the last ends a block or is a call.
    fn check_region(&self, insns: &[Instruction], entered_at_start: bool) -> Result<(u32, u32), Refusal> {
        let last = &insns[insns.len() - 1];
        let (start, end) = (self.off(&insns[0]), self.off(last) + last.len() as u32);
        let from = if entered_at_start { start + 1 } else { start };
        if let Some(&t) = self.targets.range(from..end).next() {
            return Err(Refusal::BranchInside(t));
        }
        for insn in &insns[..insns.len() - 1] {
            if ends_block(insn) {
                return Err(Refusal::PastBlockEnd { off: self.off(insn), mnemonic: mnemonic(insn) });
            }
            // A frame live while the patch is written (a thread inside the callee, a
            // setjmp buffer) returns to the original address after the call.
            if insn.mnemonic() == Mnemonic::Call {
                return Err(Refusal::CallInside(self.off(insn)));
            }
        }
        Ok((start, end))
    }

    fn add_target(&mut self, t: u64) {
        if self.inside(t) {
            self.targets.insert(t.wrapping_sub(self.vaddr) as u32);
        }
    }

    fn inside(&self, t: u64) -> bool {
        t >= self.vaddr && t < self.end
    }

    fn off(&self, insn: &Instruction) -> u32 {
        insn.ip().wrapping_sub(self.vaddr) as u32
    }
}

/// Any instruction whose operand is an immediate branch target: jmp, jcc, call, loop,
/// jrcxz, xbegin.
fn is_near_branch(insn: &Instruction) -> bool {
    matches!(insn.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
}

/// An indirect jmp through one fixed pointer (`jmp *f@GOTPCREL(%rip)`, `jmp *0x601018`):
/// a tail call through a GOT slot, not a table. Through a register or an indexed slot,
/// the target may be a case label of this function.
fn via_one_pointer(insn: &Instruction) -> bool {
    insn.op0_kind() == OpKind::Memory
        && insn.memory_index() == Register::None
        && matches!(insn.memory_base(), Register::None | Register::RIP)
}

/// Control never falls through past it.
fn ends_block(insn: &Instruction) -> bool {
    matches!(
        insn.mnemonic(),
        Mnemonic::Ret
            | Mnemonic::Retf
            | Mnemonic::Jmp
            | Mnemonic::Ud0
            | Mnemonic::Ud1
            | Mnemonic::Ud2
            | Mnemonic::Int3
            | Mnemonic::Hlt
    )
}

fn mnemonic(insn: &Instruction) -> String {
    format!("{:?}", insn.mnemonic()).to_lowercase()
}

/// The 5 bytes of a `jmp rel32` at `from` to `to`; `None` if `to` is out of its reach.
pub fn jmp_rel32(from: u64, to: u64) -> Option<[u8; 5]> {
    let rel = i32::try_from(to.wrapping_sub(from.wrapping_add(5)) as i64).ok()?;
    let mut b = [0xe9, 0, 0, 0, 0];
    b[1..].copy_from_slice(&rel.to_le_bytes());
    Some(b)
}

/// For a breakpoint at offset `site` of the function `code` (at `func_vaddr`): the one
/// instruction there, relocated to run at `new_ip`, then a jump back to the instruction
/// after it. A thread stopped at the breakpoint goes on from `new_ip`, so the breakpoint
/// never has to be lifted (other threads may run through it meanwhile).
pub fn out_of_line(code: &[u8], func_vaddr: u64, site: u64, new_ip: u64) -> Result<Vec<u8>, Refusal> {
    let at = usize::try_from(site).ok().filter(|&s| s < code.len()).ok_or(Refusal::NotAnInstruction(site))?;
    let ip = func_vaddr.wrapping_add(site);
    let insn = Decoder::with_ip(64, &code[at..], ip, DecoderOptions::NONE).decode();
    if insn.code() == Code::INVALID {
        return Err(Refusal::Undecodable(ip));
    }
    let mut out = relocate_insns(&[insn], ip..ip.wrapping_add(insn.len() as u64), new_ip)?;
    let back = ip.wrapping_add(insn.len() as u64);
    let jmp = jmp_rel32(new_ip.wrapping_add(out.len() as u64), back).ok_or(Refusal::TooFar { target: back })?;
    out.extend(jmp);
    Ok(out)
}

/// Relocate the instructions `code` (whole ones), placed at `orig_ip`, to run at `new_ip`
/// with the same effect: RIP-relative operands and branch targets keep their absolute
/// addresses, short branches become near ones. Nothing is appended: the caller adds the
/// jump back.
pub fn relocate(code: &[u8], orig_ip: u64, new_ip: u64) -> Result<Vec<u8>, Refusal> {
    let mut insns = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, orig_ip, DecoderOptions::NONE);
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.code() == Code::INVALID {
            return Err(Refusal::Undecodable(insn.ip()));
        }
        insns.push(insn);
    }
    relocate_insns(&insns, orig_ip..orig_ip.wrapping_add(code.len() as u64), new_ip)
}

/// Relocate `insns`, displaced from `region`, to `new_ip`.
///
/// A branch to the first byte of the region keeps its target: once patched, that byte
/// jumps to the trampoline again, which fires again as the original loop went through
/// the site again. A branch
/// strictly inside it is refused (nothing is left there). `loop`, `jrcxz` and friends
/// have no near form: BlockEncoder rewrites them with a near `jmp` beside them.
/// A displaced `call`, as instructions that push the call's own return address (the
/// original code after it) and jump to its target: the callee returns to the original
/// code, not into the trampoline, so stacks unwind through it and `ucaller` is right.
fn emulated_call(call: &Instruction) -> Result<Vec<Instruction>, Refusal> {
    let bad = |_| Refusal::Unrelocatable(mnemonic(call));
    let ret = call.next_ip();
    let mut jump = *call;
    match call.code() {
        Code::Call_rel32_64 => {
            jump = Instruction::with_branch(Code::Jmp_rel32_64, call.near_branch_target()).map_err(bad)?
        }
        Code::Call_rm64 => {
            jump.set_code(Code::Jmp_rm64);
            // The return address is pushed first: an operand addressed from rsp moves.
            if call.op0_kind() == OpKind::Memory && call.memory_base() == Register::RSP {
                jump.set_memory_displacement64(call.memory_displacement64().wrapping_add(8));
            }
            if call.op0_kind() == OpKind::Register && call.op0_register() == Register::RSP {
                return Err(Refusal::Unrelocatable(mnemonic(call)));
            }
        }
        _ => return Err(Refusal::Unrelocatable(mnemonic(call))),
    }
    let rsp = |displ: i64| MemoryOperand::with_base_displ(Register::RSP, displ);
    Ok(vec![
        // lea keeps the flags, as the call did.
        Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-8)).map_err(bad)?,
        Instruction::with2(Code::Mov_rm32_imm32, rsp(0), ret as u32).map_err(bad)?,
        Instruction::with2(Code::Mov_rm32_imm32, rsp(4), (ret >> 32) as u32).map_err(bad)?,
        jump,
    ])
}

fn relocate_insns(insns: &[Instruction], region: Range<u64>, new_ip: u64) -> Result<Vec<u8>, Refusal> {
    if insns.is_empty() {
        return Ok(Vec::new());
    }
    // Whatever BlockEncoder makes of an instruction is at most 16 bytes longer (a short
    // loop plus two jumps); targets must be within rel32 reach from all of that.
    let span: u64 = insns.iter().map(|i| i.len() as u64 + 16).sum();
    let reach = |target: u64| {
        [new_ip, new_ip.wrapping_add(span)].iter().all(|&ip| i32::try_from(target.wrapping_sub(ip) as i64).is_ok())
    };
    for insn in insns {
        let mut targets = Vec::new();
        if is_near_branch(insn) {
            let t = insn.near_branch_target();
            if t > region.start && t < region.end {
                return Err(Refusal::BranchIntoDisplaced { from: insn.ip(), target: t });
            }
            targets.push(t);
        }
        if insn.is_ip_rel_memory_operand() {
            targets.push(insn.ip_rel_memory_address());
        }
        if let Some(&target) = targets.iter().find(|&&t| !reach(t)) {
            return Err(Refusal::TooFar { target });
        }
    }
    // BlockEncoder sends a branch whose target is one of the block's instructions to that
    // instruction's copy: a loop back to the site would then skip the firing. Addresses
    // no user code branches to (the top of the address space) keep every target absolute.
    let mut out: Vec<Instruction> = Vec::with_capacity(insns.len() + 3);
    for insn in insns {
        if insn.mnemonic() == Mnemonic::Call {
            out.extend(emulated_call(insn)?);
        } else {
            out.push(*insn);
        }
    }
    let insns: Vec<Instruction> = out
        .into_iter()
        .enumerate()
        .map(|(k, mut insn)| {
            insn.set_ip(u64::MAX - 16 * (k as u64 + 1));
            insn
        })
        .collect();
    match BlockEncoder::encode(64, InstructionBlock::new(&insns, new_ip), BlockEncoderOptions::NONE) {
        Ok(r) => Ok(r.code_buffer),
        Err(e) => {
            // Name the instruction that failed, if it fails alone.
            let culprit = insns.iter().find(|insn| {
                BlockEncoder::encode(64, InstructionBlock::new(std::slice::from_ref(insn), new_ip), 0).is_err()
            });
            Err(Refusal::Unrelocatable(culprit.map_or_else(|| e.to_string(), mnemonic)))
        }
    }
}
