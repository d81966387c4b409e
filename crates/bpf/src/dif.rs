//! The firing-time language (`udtrace_dif`, docs/firing.md) compiled into a uprobe
//! program, and the maps its storage lives in.
//!
//! Storage has the buffer's meaning (`udtrace_dif::layout`) in maps:
//!
//! - thread-local variables: a hash from the thread id to its slots. An entry is made
//!   at the thread's first firing that uses one, and deleted when a firing leaves every
//!   slot 0 (DTrace frees a dynamic variable set to 0): ended threads do not fill it.
//!   When it is full, the firing does nothing and counts a dynamic-variable drop, as
//!   the interpreter does when its thread table is.
//! - aggregations without keys: one per-CPU array entry holding all their rows.
//! - aggregations with keys: a per-CPU hash each, from the key words to the row, its
//!   entry made zeroed (`BPF_NOEXIST`, so that two CPUs making it at once keep the
//!   first) and looked up again; full, the update is an aggregation drop.
//! - drops: a per-CPU array entry of two counters, aggregation then dynamic-variable.
//! - strings (`Op::Str`): a hash from a string's id to its NUL-padded words, made with
//!   `BPF_NOEXIST` and looked up again: an entry with other words is a collision, none
//!   a full map, both an aggregation drop (d = 0), as in the buffer's string table. The
//!   string is read (`bpf_probe_read_user_str`) into zeroed words on the stack, so
//!   `strsize` is at most [`MAX_STRSIZE`] here.
//!
//! Every row starts zeroed: min and max keep their value encoded so that 0 is their
//! start ([`encode_min_max`]: i64::MAX or i64::MIN as the interpreter starts them), and
//! a per-CPU hash entry made on one CPU is zeroed on the others. Words are updated with
//! atomic instructions although they are this CPU's: uprobe programs run preemptible
//! (only migration is disabled), so two threads on one CPU could interleave.

use thiserror::Error;

use udtrace_dif::layout::{merge, AggFn};
use udtrace_dif::op::{BinOp, Op, Program, UnOp, Var};
use udtrace_dif::snapshot::Snapshot;
use udtrace_dif::Layout;
use udtrace_record::pid::PtReg;

use crate::insn::{
    alu64_imm, alu64_reg, atomic_add, atomic_cmpxchg, atomic_fetch_add, helper, ld_imm64, ld_map_fd, ldx, mov32_reg,
    mov64_imm, mov64_reg, st, stx, AluOp, Asm, Cond, Label, Reg, Size,
};
use crate::maps::{MapError, RawKind, RawMap, BPF_NOEXIST};

#[derive(Debug, Error)]
pub enum DifError {
    #[error("the firing-time program does not check: {0}")]
    Verify(#[from] udtrace_dif::VerifyError),
    #[error("{0} bytes of aggregation rows without keys (at most {MAX_ROWS})")]
    RowsTooLarge(usize),
    #[error("ppid at the firing needs the kernel's BTF (task_struct's real_parent and tgid)")]
    NoParent,
    #[error("strings of {0} bytes at the firing (at most {MAX_STRSIZE})")]
    StrTooLong(u16),
}

/// The most bytes of a string a program reads (`Layout::strsize`): its words live on
/// the stack beside the registers.
pub const MAX_STRSIZE: u16 = 256;

/// Bytes of keyless rows in one per-CPU value (the kernel's per-CPU allocations are at
/// most 32 KiB).
pub const MAX_ROWS: usize = 32 << 10;

/// How many entries the maps hold (DTrace's `dynvarsize` and `aggsize` may set them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DifSizes {
    /// Threads with thread-local variables set, at once.
    pub threads: u32,
    /// Keys per aggregation with keys.
    pub keys: u32,
}

impl Default for DifSizes {
    fn default() -> DifSizes {
        DifSizes { threads: 65536, keys: 16384 }
    }
}

/// The maps of a session's [`Layout`].
pub struct DifMaps {
    pub layout: Layout,
    /// Thread id (u64) → its slots; none without slots.
    tls: Option<RawMap>,
    /// Key 0: every keyless row, at `row_at` (per CPU); none without such rows.
    rows: Option<RawMap>,
    /// Per aggregation: the byte offset of its row in `rows` (keyless ones).
    row_at: Vec<Option<usize>>,
    /// Per aggregation: its hash (keyed ones).
    keyed: Vec<Option<RawMap>>,
    /// Key 0: zeros, as large as the largest value made by a program.
    zero: RawMap,
    /// Key 0: per CPU, aggregation drops and dynamic-variable drops.
    drops: RawMap,
    /// A string's id → its words (`Layout::strsize` > 0).
    strings: Option<RawMap>,
    /// Offsets in the kernel's `task_struct` (from its BTF) of `real_parent` and
    /// `tgid`, for `Var::Ppid`; without them a program reading it does not compile.
    pub parent: Option<(u32, u32)>,
    /// Where `task_struct` keeps `group_leader` and `comm` (`TaskOffsets::leader_comm`):
    /// with them `execname` is the process's name, its leader's (the consumer's), else
    /// the firing thread's (`bpf_get_current_comm`).
    pub leader_comm: Option<(i16, i16)>,
}

const DROP_AGG: i16 = 0;
const DROP_DYN: i16 = 8;

impl DifMaps {
    pub fn create(layout: &Layout, sizes: DifSizes) -> Result<DifMaps, MapError> {
        let tls_bytes = 8 * usize::from(layout.tls);
        let tls = if layout.tls > 0 {
            Some(RawMap::create(RawKind::Hash, "udtrace_tls", 8, tls_bytes, sizes.threads.max(1))?)
        } else {
            None
        };
        let mut row_at = Vec::with_capacity(layout.aggs.len());
        let mut keyed = Vec::with_capacity(layout.aggs.len());
        let (mut rows_bytes, mut largest) = (0, tls_bytes.max(8));
        for a in &layout.aggs {
            let bytes = 8 * a.func.words();
            if a.nkeys == 0 {
                row_at.push(Some(rows_bytes));
                rows_bytes += bytes;
                keyed.push(None);
            } else {
                row_at.push(None);
                largest = largest.max(bytes);
                let key = 8 * usize::from(a.nkeys);
                keyed.push(Some(RawMap::create(RawKind::PerCpuHash, "udtrace_agg", key, bytes, sizes.keys.max(1))?));
            }
        }
        let rows = if rows_bytes > 0 {
            Some(RawMap::create(RawKind::PerCpuArray, "udtrace_rows", 4, rows_bytes.min(MAX_ROWS), 1)?)
        } else {
            None
        };
        Ok(DifMaps {
            layout: layout.clone(),
            tls,
            rows,
            row_at,
            keyed,
            zero: RawMap::create(RawKind::Array, "udtrace_zero", 4, largest, 1)?,
            drops: RawMap::create(RawKind::PerCpuArray, "udtrace_difdrop", 4, 16, 1)?,
            strings: if layout.strsize > 0 {
                let bytes = 8 * layout.string_words();
                Some(RawMap::create(RawKind::Hash, "udtrace_str", 8, bytes, sizes.keys.max(1))?)
            } else {
                None
            },
            parent: None,
            leader_comm: None,
        })
    }

    /// Whether the keyless rows fit one per-CPU value.
    fn check(&self) -> Result<(), DifError> {
        let bytes: usize = self.layout.aggs.iter().filter(|a| a.nkeys == 0).map(|a| 8 * a.func.words()).sum();
        if bytes > MAX_ROWS {
            return Err(DifError::RowsTooLarge(bytes));
        }
        if self.layout.strsize > MAX_STRSIZE {
            return Err(DifError::StrTooLong(self.layout.strsize));
        }
        Ok(())
    }

    /// What the programs have left so far: every thread's variables, every aggregation's
    /// rows merged over CPUs (as the interpreter's buffer holds them), the drop totals.
    pub fn snapshot(&self) -> Result<Snapshot, MapError> {
        let layout = &self.layout;
        let mut s = Snapshot::empty(layout);
        if let Some(tls) = &self.tls {
            for k in tls.keys()? {
                let Some(v) = tls.get(&k)? else { continue };
                let tid = words(&k).next().unwrap_or(0);
                s.tls.insert(tid, words(&v).collect());
            }
        }
        if let Some(rows) = &self.rows {
            if let Some(v) = rows.get(&0u32.to_ne_bytes())? {
                for cpu in v.chunks(rows.stride()) {
                    let all: Vec<u64> = words(cpu).collect();
                    for (a, desc) in layout.aggs.iter().enumerate() {
                        let Some(at) = self.row_at[a] else { continue };
                        let row = decode(desc.func, &all[at / 8..at / 8 + desc.func.words()]);
                        s.add(a, desc.func, Vec::new(), &row);
                    }
                }
            }
        }
        for (a, (desc, map)) in layout.aggs.iter().zip(&self.keyed).enumerate() {
            let Some(map) = map else { continue };
            for k in map.keys()? {
                let Some(v) = map.get(&k)? else { continue };
                let key: Vec<u64> = words(&k).collect();
                let mut row: Option<Vec<u64>> = None;
                for cpu in v.chunks(map.stride()) {
                    let r = decode(desc.func, &words(cpu).take(desc.func.words()).collect::<Vec<u64>>());
                    match &mut row {
                        Some(into) => merge(desc.func, into, &r),
                        None if r[0] != 0 => row = Some(r),
                        None => {}
                    }
                }
                if let Some(row) = row {
                    s.add(a, desc.func, key, &row);
                }
            }
        }
        if let Some(map) = &self.strings {
            for k in map.keys()? {
                let Some(v) = map.get(&k)? else { continue };
                let id = words(&k).next().unwrap_or(0);
                s.strings.insert(id, udtrace_dif::layout::string_of_words(&words(&v).collect::<Vec<u64>>()));
            }
        }
        if let Some(v) = self.drops.get(&0u32.to_ne_bytes())? {
            for (cpu, bytes) in v.chunks(self.drops.stride()).enumerate() {
                let w: Vec<u64> = words(bytes).collect();
                s.add_agg_drops(cpu as u64, w[0]);
                s.dyn_drops += w[1];
            }
        }
        Ok(s)
    }
}

/// A value's 64-bit words.
fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])))
}

/// The word a min or max row keeps for `v`: larger is better, 0 the start (i64::MAX
/// for min, i64::MIN for max), so that a zeroed row is a fresh one.
pub fn encode_min_max(func: AggFn, v: u64) -> u64 {
    v ^ min_max_mask(func)
}

fn min_max_mask(func: AggFn) -> u64 {
    if func == AggFn::Min {
        i64::MAX as u64
    } else {
        1 << 63
    }
}

/// A row as a map holds it, as the interpreter's buffer holds it.
fn decode(func: AggFn, row: &[u64]) -> Vec<u64> {
    let mut r = row.to_vec();
    if matches!(func, AggFn::Min | AggFn::Max) && r.len() > 1 {
        r[1] = encode_min_max(func, r[1]);
    }
    r
}

/// Where [`Op::Get`] takes its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gets {
    /// From the firing: the thread, its CPU, the clock.
    Firing,
    /// Tests: from word 0.. of entry 0 of this array map, in [`Var::ALL`]'s order
    /// (pid, tid, cpu, timestamp, uid, gid, ret), so that a test decides them per
    /// firing.
    Map(i32),
}

/// A program to compile, with where its storage and values are.
#[derive(Clone, Copy)]
pub struct DifCode<'a> {
    pub program: &'a Program,
    pub maps: &'a DifMaps,
    pub gets: Gets,
    /// Where errno is (`Var::Errno`): the records' source; none, errno reads 0, as a
    /// record's does.
    pub errno: Option<&'a crate::codegen::ErrnoSource>,
    /// The program is loaded sleepable: a string on a page the process has not touched
    /// is faulted in (`bpf_copy_from_user`) and read again, as records' strings are,
    /// rather than taken for a fault the consumer's later read would not see.
    pub sleepable: bool,
}

/// The stack: the sixteen registers (register i at `REGS + 8 i`: keys in consecutive
/// registers are one key in memory), then scratch words.
const REGS: i16 = -128;
const ZERO_KEY: i16 = -136;
const TID_KEY: i16 = -144;
const GET_KEY: i16 = -152;
/// 1 once an [`Op::Emit`] ran (read by [`emitted`]).
const EMIT: i16 = -160;
/// Scratch of [`emit_errno`].
const ERRNO_A: i16 = -168;
const ERRNO_B: i16 = -176;
/// 16 bytes of the process's name ([`Var::Comm0`], [`Var::Comm1`]).
const COMM: i16 = -192;
/// The current task, then its group leader (pointers).
const TASK: i16 = -200;
/// A string's words ([`Op::Str`]), [`MAX_STRSIZE`] bytes.
const STR: i16 = TASK - MAX_STRSIZE as i16;

fn reg(r: u8) -> i16 {
    REGS + 8 * i16::from(r)
}

/// Emits `code` into a uprobe program: R6 is the context (pt_regs), R7 the firing's
/// `bpf_get_current_pid_tgid()`; both kept. Clobbers R0–R5, R8, R9 and the stack below
/// -8 (the record's code that follows writes its own).
pub fn emit(a: &mut Asm, code: DifCode<'_>) -> Result<(), DifError> {
    let (p, maps) = (code.program, code.maps);
    if p.ops.is_empty() {
        return Ok(());
    }
    udtrace_dif::op::verify(p, &maps.layout)?;
    maps.check()?;
    let layout = &maps.layout;
    let end = a.label();
    let dyn_drop = a.label();
    let tls = p.ops.iter().any(|op| matches!(op, Op::TlsLoad { .. } | Op::TlsStore { .. }));
    let stores = p.ops.iter().any(|op| matches!(op, Op::TlsStore { .. }));
    let keyless = p.ops.iter().any(|op| matches!(*op, Op::Agg { agg, .. } if maps.row_at[usize::from(agg)].is_some()));
    a.push(st(Size::W, Reg::R10, ZERO_KEY, 0));
    if p.emits() {
        a.push(st(Size::DW, Reg::R10, EMIT, 0));
    }
    if code.gets == Gets::Firing && (p.reads(Var::Comm0) || p.reads(Var::Comm1)) {
        read_name(a, maps.leader_comm);
    }
    // The thread's slots into R8, made (zeroed) at its first firing.
    if let (true, Some(map)) = (tls, &maps.tls) {
        let have = a.label();
        emit_get(a, code.gets, Var::Tid);
        a.push(stx(Size::DW, Reg::R10, TID_KEY, Reg::R0));
        a.map_lookup(map.raw_fd(), TID_KEY);
        a.jmp_imm(Cond::Ne, Reg::R0, 0, have);
        make(a, map, TID_KEY, &maps.zero, dyn_drop);
        a.bind(have);
        a.push(mov64_reg(Reg::R8, Reg::R0));
    }
    // This CPU's keyless rows into R9.
    if let (true, Some(map)) = (keyless, &maps.rows) {
        a.map_lookup(map.raw_fd(), ZERO_KEY);
        a.jmp_imm(Cond::Eq, Reg::R0, 0, end);
        a.push(mov64_reg(Reg::R9, Reg::R0));
    }
    let at: Vec<Label> = (0..=p.ops.len()).map(|_| a.label()).collect();
    for (i, op) in p.ops.iter().enumerate() {
        a.bind(at[i]);
        emit_op(a, code, *op, &at)?;
    }
    a.bind(at[p.ops.len()]);
    // Slots all 0: the thread's entry goes (DTrace frees variables set to 0).
    if let (true, Some(map)) = (stores, &maps.tls) {
        for s in 0..layout.tls {
            a.push(ldx(Size::DW, Reg::R1, Reg::R8, (8 * s) as i16));
            a.jmp_imm(Cond::Ne, Reg::R1, 0, end);
        }
        a.push_wide(ld_map_fd(Reg::R1, map.raw_fd()));
        a.push(mov64_reg(Reg::R2, Reg::R10));
        a.push(alu64_imm(AluOp::Add, Reg::R2, i32::from(TID_KEY)));
        a.call(helper::MAP_DELETE_ELEM);
    }
    // (The verifier refuses code no way reaches.)
    if tls {
        a.ja(end);
        a.bind(dyn_drop);
        count_drop(a, maps, DROP_DYN);
    } else {
        a.bind(dyn_drop);
    }
    a.bind(end);
    Ok(())
}

/// After [`emit`] of a program that [emits](Program::emits): goes to `not` when no
/// [`Op::Emit`] ran (the firing writes no record). Clobbers R1.
pub fn emitted(a: &mut Asm, not: Label) {
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, EMIT));
    a.jmp_imm(Cond::Eq, Reg::R1, 0, not);
}

/// Makes `map`'s entry at `fp + key` (zeroed, unless another CPU made it first) and
/// leaves its address in R0; jumps to `full` when there is no room. Clobbers R1–R5.
fn make(a: &mut Asm, map: &RawMap, key: i16, zero: &RawMap, full: Label) {
    a.map_lookup(zero.raw_fd(), ZERO_KEY);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, full);
    a.push(mov64_reg(Reg::R3, Reg::R0));
    a.push_wide(ld_map_fd(Reg::R1, map.raw_fd()));
    a.push(mov64_reg(Reg::R2, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R2, i32::from(key)));
    a.push(mov64_imm(Reg::R4, BPF_NOEXIST as i32));
    a.call(helper::MAP_UPDATE_ELEM);
    a.map_lookup(map.raw_fd(), key);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, full);
}

/// Adds 1 to this CPU's drop counter at `which`. Clobbers R0–R5.
fn count_drop(a: &mut Asm, maps: &DifMaps, which: i16) {
    let skip = a.label();
    a.map_lookup(maps.drops.raw_fd(), ZERO_KEY);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, skip);
    a.push(mov64_imm(Reg::R1, 1));
    a.push(atomic_add(Size::DW, Reg::R0, which, Reg::R1));
    a.bind(skip);
}

/// The process's name into `fp + COMM` ([`Var::Comm0`], [`Var::Comm1`]), once per
/// firing. Clobbers R0–R5.
fn read_name(a: &mut Asm, leader_comm: Option<(i16, i16)>) {
    let len = udtrace_dif::op::COMM_BYTES as i32;
    match leader_comm {
        Some((leader, comm)) => {
            // The leader's comm up to its NUL into zeroed bytes: what comm_words makes
            // of /proc/PID/stat's name.
            a.push(st(Size::DW, Reg::R10, COMM, 0));
            a.push(st(Size::DW, Reg::R10, COMM + 8, 0));
            a.call(helper::GET_CURRENT_TASK);
            a.push(mov64_reg(Reg::R3, Reg::R0));
            a.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(leader)));
            a.read_to_stack(helper::PROBE_READ_KERNEL, TASK, 8);
            a.push(ldx(Size::DW, Reg::R3, Reg::R10, TASK));
            a.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(comm)));
            a.read_to_stack(helper::PROBE_READ_KERNEL_STR, COMM, len);
        }
        // The thread's comm, NUL-padded by the helper.
        None => {
            a.read_to_stack(helper::GET_CURRENT_COMM, COMM, len);
        }
    }
}

/// R0 = what the firing knows. Clobbers R1–R5.
fn emit_get(a: &mut Asm, gets: Gets, v: Var) {
    match gets {
        Gets::Firing => match v {
            Var::Pid => {
                a.push(mov64_reg(Reg::R0, Reg::R7));
                a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
            }
            Var::Tid => {
                a.push(mov32_reg(Reg::R0, Reg::R7));
            }
            Var::Cpu => {
                a.call(helper::GET_SMP_PROCESSOR_ID);
                a.push(mov32_reg(Reg::R0, Reg::R0));
            }
            Var::Timestamp => {
                a.call(helper::KTIME_GET_NS);
            }
            Var::Uid => {
                a.call(helper::GET_CURRENT_UID_GID);
                a.push(mov32_reg(Reg::R0, Reg::R0));
            }
            Var::Gid => {
                a.call(helper::GET_CURRENT_UID_GID);
                a.push(alu64_imm(AluOp::Rsh, Reg::R0, 32));
            }
            Var::Ret => {
                a.push(ldx(Size::DW, Reg::R0, Reg::R6, PtReg::Ax.offset() as i16));
            }
            // Read through the task by `emit_ppid` and `emit_errno` (emit_op), never here.
            Var::Ppid | Var::Errno => {
                a.push(mov64_imm(Reg::R0, 0));
            }
            // Read once, at the program's start (`read_name`).
            Var::Comm0 | Var::Comm1 => {
                let word = if v == Var::Comm1 { 8 } else { 0 };
                a.push(ldx(Size::DW, Reg::R0, Reg::R10, COMM + word));
            }
        },
        Gets::Map(fd) => emit_map_word(a, fd, Var::ALL.iter().position(|&w| w == v).unwrap_or(0) as i16),
    }
}

/// `Op::UReg`'s registers in `struct pt_regs`, in `udtrace_dif::op::USER_REGS` order.
const UREGS: [PtReg; 17] = [
    PtReg::Ax,
    PtReg::Bx,
    PtReg::Cx,
    PtReg::Dx,
    PtReg::Si,
    PtReg::Di,
    PtReg::Bp,
    PtReg::Sp,
    PtReg::R8,
    PtReg::R9,
    PtReg::R10,
    PtReg::R11,
    PtReg::R12,
    PtReg::R13,
    PtReg::R14,
    PtReg::R15,
    PtReg::Ip,
];

/// Tests ([`Gets::Map`]): R0 = word `word` of entry 0 of map `fd` (0 without one).
/// Clobbers R1–R5.
fn emit_map_word(a: &mut Asm, fd: i32, word: i16) {
    let have = a.label();
    a.push(st(Size::W, Reg::R10, GET_KEY, 0));
    a.map_lookup(fd, GET_KEY);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, have);
    a.push(mov64_imm(Reg::R0, 0));
    let done = a.label();
    a.ja(done);
    a.bind(have);
    a.push(ldx(Size::DW, Reg::R0, Reg::R0, 8 * word));
    a.bind(done);
}

/// R0 = the current task's `real_parent->tgid` (`offsets`: theirs in task_struct), as
/// it is now: a forked child's parent, a reparented process's new one; 0 where a read
/// faults (never, for the current task). Clobbers R1–R5.
fn emit_ppid(a: &mut Asm, offsets: (u32, u32)) {
    let done = a.label();
    a.push(st(Size::DW, Reg::R10, GET_KEY, 0));
    a.call(helper::GET_CURRENT_TASK);
    a.push(mov64_reg(Reg::R3, Reg::R0));
    a.push(alu64_imm(AluOp::Add, Reg::R3, offsets.0 as i32));
    a.read_to_stack(helper::PROBE_READ_KERNEL, GET_KEY, 8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, done);
    a.push(ldx(Size::DW, Reg::R3, Reg::R10, GET_KEY));
    a.push(st(Size::DW, Reg::R10, GET_KEY, 0));
    a.push(alu64_imm(AluOp::Add, Reg::R3, offsets.1 as i32));
    a.read_to_stack(helper::PROBE_READ_KERNEL, GET_KEY, 4);
    a.bind(done);
    a.push(ldx(Size::DW, Reg::R0, Reg::R10, GET_KEY));
    a.push(mov32_reg(Reg::R0, Reg::R0));
}

/// R0 = the firing thread's errno, sign-extended, as a record reads it
/// (`codegen::emit_errno`): the thread pointer (`fsbase` of the current task) plus
/// the process's TLS offset of errno (from its GOT slot, or the constant); 0 without a
/// source, an entry, an offset, or where a read faults. Clobbers R1–R5.
fn emit_errno(a: &mut Asm, src: Option<&crate::codegen::ErrnoSource>) {
    let Some(src) = src else {
        a.push(mov64_imm(Reg::R0, 0));
        return;
    };
    let (have, done) = (a.label(), a.label());
    a.push(st(Size::DW, Reg::R10, ERRNO_A, 0));
    a.push(mov64_reg(Reg::R1, Reg::R7));
    a.push(alu64_imm(AluOp::Rsh, Reg::R1, 32));
    a.push(stx(Size::W, Reg::R10, GET_KEY, Reg::R1));
    a.map_lookup(src.tls.raw_fd(), GET_KEY);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, done);
    a.push(ldx(Size::DW, Reg::R1, Reg::R0, 8));
    a.push(stx(Size::DW, Reg::R10, ERRNO_B, Reg::R1));
    a.push(ldx(Size::DW, Reg::R3, Reg::R0, 0));
    a.jmp_imm(Cond::Eq, Reg::R3, 0, have);
    // The offset from its GOT slot (a failed read leaves 0: no errno).
    a.read_to_stack(helper::PROBE_READ_USER, ERRNO_B, 8);
    a.bind(have);
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, ERRNO_B));
    a.jmp_imm(Cond::Eq, Reg::R1, 0, done);
    a.call(helper::GET_CURRENT_TASK);
    a.push(mov64_reg(Reg::R3, Reg::R0));
    a.push(alu64_imm(AluOp::Add, Reg::R3, src.fsbase as i32));
    a.read_to_stack(helper::PROBE_READ_KERNEL, ERRNO_A, 8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, done);
    a.push(ldx(Size::DW, Reg::R3, Reg::R10, ERRNO_A));
    a.jmp_imm(Cond::Eq, Reg::R3, 0, done);
    a.push(ldx(Size::DW, Reg::R1, Reg::R10, ERRNO_B));
    a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R1));
    a.read_to_stack(helper::PROBE_READ_USER, ERRNO_A, 4);
    a.bind(done);
    // The low 32 bits: errno, or 0 on every way without it (a failed read zeroes its
    // destination; fsbase is there only where it was 0).
    a.push(ldx(Size::W, Reg::R0, Reg::R10, ERRNO_A));
    a.push(alu64_imm(AluOp::Lsh, Reg::R0, 32));
    a.push(alu64_imm(AluOp::Arsh, Reg::R0, 32));
}

/// [`Op::Str`]: the string at register `src` into the stack's zeroed words, its id
/// (`layout::string_id`) into register `d` and its entry into the strings map; 0 and
/// an aggregation drop when the map is full or holds other words under the id; a
/// fault sets the record's flag and goes to `fault`. Clobbers R0–R5.
fn emit_str(a: &mut Asm, maps: &DifMaps, (d, src, max): (u8, u8, u16), sleepable: bool, fault: Label) {
    let words = maps.layout.string_words() as i16;
    let Some(map) = &maps.strings else { return };
    let (read, drop, done, failed) = (a.label(), a.label(), a.label(), a.label());
    // bpf_probe_read_user_str: the bytes to the NUL, or the first max - 1 and a NUL, or
    // a fault (0, an unmapped byte before a NUL): `op::user_string`. Into zeroed words
    // (the key is all of them).
    let read_str = |a: &mut Asm| {
        for w in 0..words {
            a.push(st(Size::DW, Reg::R10, STR + 8 * w, 0));
        }
        a.push(ldx(Size::DW, Reg::R3, Reg::R10, reg(src)));
        a.read_to_stack(helper::PROBE_READ_USER_STR, STR, i32::from(max));
        a.jmp_imm(Cond::Sge, Reg::R0, 0, read);
    };
    read_str(a);
    if sleepable {
        // A page not present reads as a fault: the bytes to the page's end (at most
        // max: a copy into an unmapped page fails whole) are copied, which faults the
        // page in, and the string read again; then the next page's, if the string
        // goes on there. What still fails is unreadable (`op::user_string`).
        let fits = a.label();
        a.push(ldx(Size::DW, Reg::R2, Reg::R10, reg(src)));
        a.push(alu64_imm(AluOp::And, Reg::R2, 4095));
        a.push(mov64_imm(Reg::R1, 4096));
        a.push(alu64_reg(AluOp::Sub, Reg::R1, Reg::R2));
        a.push(mov64_reg(Reg::R2, Reg::R1));
        a.jmp_imm(Cond::Le, Reg::R2, i32::from(max), fits);
        a.push(mov64_imm(Reg::R2, i32::from(max)));
        a.bind(fits);
        a.push(mov64_reg(Reg::R9, Reg::R2));
        a.push(mov64_reg(Reg::R1, Reg::R10));
        a.push(alu64_imm(AluOp::Add, Reg::R1, i32::from(STR)));
        a.push(ldx(Size::DW, Reg::R3, Reg::R10, reg(src)));
        a.call(helper::COPY_FROM_USER);
        read_str(a);
        a.push(mov64_imm(Reg::R2, i32::from(max)));
        a.push(alu64_reg(AluOp::Sub, Reg::R2, Reg::R9));
        a.jmp_imm(Cond::Sle, Reg::R2, 0, failed);
        a.jmp_imm(Cond::Sgt, Reg::R2, i32::from(max), failed);
        a.push(mov64_reg(Reg::R1, Reg::R10));
        a.push(alu64_imm(AluOp::Add, Reg::R1, i32::from(STR)));
        a.push(ldx(Size::DW, Reg::R3, Reg::R10, reg(src)));
        a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R9));
        a.call(helper::COPY_FROM_USER);
        read_str(a);
    }
    a.bind(failed);
    a.push(st(Size::DW, Reg::R10, EMIT, 1));
    a.ja(fault);
    a.bind(read);
    // key_hash of the words, the low bit set.
    a.push_wide(ld_imm64(Reg::R1, udtrace_dif::layout::HASH_SEED));
    a.push_wide(ld_imm64(Reg::R3, udtrace_dif::layout::HASH_MUL));
    for w in 0..words {
        a.push(ldx(Size::DW, Reg::R2, Reg::R10, STR + 8 * w));
        a.push(alu64_reg(AluOp::Xor, Reg::R1, Reg::R2));
        a.push(alu64_reg(AluOp::Mul, Reg::R1, Reg::R3));
        a.push(mov64_reg(Reg::R2, Reg::R1));
        a.push(alu64_imm(AluOp::Rsh, Reg::R2, 29));
        a.push(alu64_reg(AluOp::Xor, Reg::R1, Reg::R2));
    }
    let [f0, f1] = udtrace_dif::layout::HASH_FINISH;
    for (shift, mul) in [(30, Some(f0)), (27, Some(f1)), (31, None)] {
        a.push(mov64_reg(Reg::R2, Reg::R1));
        a.push(alu64_imm(AluOp::Rsh, Reg::R2, shift));
        a.push(alu64_reg(AluOp::Xor, Reg::R1, Reg::R2));
        if let Some(m) = mul {
            a.push_wide(ld_imm64(Reg::R3, m));
            a.push(alu64_reg(AluOp::Mul, Reg::R1, Reg::R3));
        }
    }
    a.push(alu64_imm(AluOp::Or, Reg::R1, 1));
    a.push(stx(Size::DW, Reg::R10, reg(d), Reg::R1));
    // Made unless there (BPF_NOEXIST), then looked up: its words must be these.
    a.push_wide(ld_map_fd(Reg::R1, map.raw_fd()));
    a.push(mov64_reg(Reg::R2, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R2, i32::from(reg(d))));
    a.push(mov64_reg(Reg::R3, Reg::R10));
    a.push(alu64_imm(AluOp::Add, Reg::R3, i32::from(STR)));
    a.push(mov64_imm(Reg::R4, BPF_NOEXIST as i32));
    a.call(helper::MAP_UPDATE_ELEM);
    a.map_lookup(map.raw_fd(), reg(d));
    a.jmp_imm(Cond::Eq, Reg::R0, 0, drop);
    for w in 0..words {
        a.push(ldx(Size::DW, Reg::R1, Reg::R0, 8 * w));
        a.push(ldx(Size::DW, Reg::R2, Reg::R10, STR + 8 * w));
        a.jmp_reg(Cond::Ne, Reg::R1, Reg::R2, drop);
    }
    a.ja(done);
    a.bind(drop);
    a.push(st(Size::DW, Reg::R10, reg(d), 0));
    count_drop(a, maps, DROP_AGG);
    a.bind(done);
}

/// R1 = 1 when `cond` holds between R1 and R2, else 0.
fn set_if(a: &mut Asm, cond: Cond) {
    let yes = a.label();
    let done = a.label();
    a.jmp_reg(cond, Reg::R1, Reg::R2, yes);
    a.push(mov64_imm(Reg::R1, 0));
    a.ja(done);
    a.bind(yes);
    a.push(mov64_imm(Reg::R1, 1));
    a.bind(done);
}

fn emit_op(a: &mut Asm, code: DifCode<'_>, op: Op, at: &[Label]) -> Result<(), DifError> {
    let maps = code.maps;
    let load = |a: &mut Asm, r: Reg, d: u8| {
        a.push(ldx(Size::DW, r, Reg::R10, reg(d)));
    };
    let store = |a: &mut Asm, d: u8, r: Reg| {
        a.push(stx(Size::DW, Reg::R10, reg(d), r));
    };
    match op {
        Op::Const { d, v } => {
            a.push_wide(ld_imm64(Reg::R1, v));
            store(a, d, Reg::R1);
        }
        Op::Arg { d, n } => {
            a.push(ldx(Size::DW, Reg::R1, Reg::R6, PtReg::ARGS[usize::from(n)].offset() as i16));
            store(a, d, Reg::R1);
        }
        Op::Get { d, v: Var::Ppid } if code.gets == Gets::Firing => {
            emit_ppid(a, maps.parent.ok_or(DifError::NoParent)?);
            store(a, d, Reg::R0);
        }
        Op::Get { d, v: Var::Errno } if code.gets == Gets::Firing => {
            emit_errno(a, code.errno);
            store(a, d, Reg::R0);
        }
        Op::Get { d, v } => {
            emit_get(a, code.gets, v);
            store(a, d, Reg::R0);
        }
        Op::Mov { d, a: s } => {
            load(a, Reg::R1, s);
            store(a, d, Reg::R1);
        }
        Op::Bin { op, d, a: x, b } => {
            load(a, Reg::R1, x);
            load(a, Reg::R2, b);
            let alu = |a: &mut Asm, o: AluOp| {
                a.push(alu64_reg(o, Reg::R1, Reg::R2));
            };
            let shift = |a: &mut Asm, o: AluOp| {
                a.push(alu64_imm(AluOp::And, Reg::R2, 63));
                a.push(alu64_reg(o, Reg::R1, Reg::R2));
            };
            match op {
                BinOp::Add => alu(a, AluOp::Add),
                BinOp::Sub => alu(a, AluOp::Sub),
                BinOp::Mul => alu(a, AluOp::Mul),
                BinOp::And => alu(a, AluOp::And),
                BinOp::Or => alu(a, AluOp::Or),
                BinOp::Xor => alu(a, AluOp::Xor),
                BinOp::Shl => shift(a, AluOp::Lsh),
                BinOp::ShrU => shift(a, AluOp::Rsh),
                BinOp::ShrS => shift(a, AluOp::Arsh),
                BinOp::Eq => set_if(a, Cond::Eq),
                BinOp::Ne => set_if(a, Cond::Ne),
                BinOp::LtU => set_if(a, Cond::Lt),
                BinOp::LeU => set_if(a, Cond::Le),
                BinOp::LtS => set_if(a, Cond::Slt),
                BinOp::LeS => set_if(a, Cond::Sle),
            }
            store(a, d, Reg::R1);
        }
        Op::Div { d, a: x, imm, signed, rem } => {
            load(a, Reg::R1, x);
            let o = if rem { AluOp::Mod } else { AluOp::Div };
            if !signed {
                a.push_wide(ld_imm64(Reg::R2, imm));
                a.push(alu64_reg(o, Reg::R1, Reg::R2));
            } else {
                // BPF divides unsigned: |a| by |imm|, then the sign C's truncation
                // gives (the remainder's is a's; the quotient's negative when the
                // signs differ). |i64::MIN| is 2^63, exact as unsigned.
                let positive = a.label();
                a.push(mov64_imm(Reg::R3, 0));
                a.jmp_imm(Cond::Sge, Reg::R1, 0, positive);
                a.push(mov64_imm(Reg::R3, 1));
                a.push(alu64_imm(AluOp::Neg, Reg::R1, 0));
                a.bind(positive);
                a.push_wide(ld_imm64(Reg::R2, (imm as i64).unsigned_abs()));
                a.push(alu64_reg(o, Reg::R1, Reg::R2));
                if !rem && (imm as i64) < 0 {
                    a.push(alu64_imm(AluOp::Xor, Reg::R3, 1));
                }
                let keep = a.label();
                a.jmp_imm(Cond::Eq, Reg::R3, 0, keep);
                a.push(alu64_imm(AluOp::Neg, Reg::R1, 0));
                a.bind(keep);
            }
            store(a, d, Reg::R1);
        }
        Op::Un { op, d, a: x } => {
            load(a, Reg::R1, x);
            match op {
                UnOp::Neg => {
                    a.push(alu64_imm(AluOp::Neg, Reg::R1, 0));
                }
                UnOp::BitNot => {
                    a.push(alu64_imm(AluOp::Xor, Reg::R1, -1));
                }
                UnOp::Not => {
                    a.push(mov64_imm(Reg::R2, 0));
                    set_if(a, Cond::Eq);
                }
            }
            store(a, d, Reg::R1);
        }
        Op::Ext { d, a: x, bits, signed } => {
            load(a, Reg::R1, x);
            let shift = 64 - i32::from(bits);
            a.push(alu64_imm(AluOp::Lsh, Reg::R1, shift));
            a.push(alu64_imm(if signed { AluOp::Arsh } else { AluOp::Rsh }, Reg::R1, shift));
            store(a, d, Reg::R1);
        }
        Op::Jz { a: x, to } => {
            load(a, Reg::R1, x);
            a.jmp_imm(Cond::Eq, Reg::R1, 0, at[usize::from(to)]);
        }
        Op::Jmp { to } => {
            a.ja(at[usize::from(to)]);
        }
        Op::Emit => {
            a.push(st(Size::DW, Reg::R10, EMIT, 1));
        }
        Op::Str { d, a: src, max, fault } => {
            emit_str(a, maps, (d, src, max), code.sleepable, at[usize::from(fault)]);
        }
        Op::UReg { d, r } => {
            match code.gets {
                Gets::Firing => {
                    a.push(ldx(Size::DW, Reg::R0, Reg::R6, UREGS[usize::from(r)].offset() as i16));
                }
                // Tests: the words after `Var::ALL`'s in the map.
                Gets::Map(fd) => emit_map_word(a, fd, (Var::ALL.len() + usize::from(r)) as i16),
            };
            store(a, d, Reg::R0);
        }
        Op::Load { d, a: src, size } => {
            // bpf_probe_read_user into a zeroed word: the bytes zero-extended, or 0
            // where one cannot be read (the helper zeroes what it was given then too,
            // but the result decides).
            let (ok, done) = (a.label(), a.label());
            a.push(st(Size::DW, Reg::R10, GET_KEY, 0));
            a.push(ldx(Size::DW, Reg::R3, Reg::R10, reg(src)));
            a.read_to_stack(helper::PROBE_READ_USER, GET_KEY, i32::from(size));
            a.jmp_imm(Cond::Eq, Reg::R0, 0, ok);
            a.push(st(Size::DW, Reg::R10, reg(d), 0));
            a.ja(done);
            a.bind(ok);
            a.push(ldx(Size::DW, Reg::R1, Reg::R10, GET_KEY));
            store(a, d, Reg::R1);
            a.bind(done);
        }
        Op::TlsLoad { d, slot } => {
            a.push(ldx(Size::DW, Reg::R1, Reg::R8, (8 * slot) as i16));
            store(a, d, Reg::R1);
        }
        Op::TlsStore { slot, a: x } => {
            load(a, Reg::R1, x);
            a.push(stx(Size::DW, Reg::R8, (8 * slot) as i16, Reg::R1));
        }
        Op::Agg { agg, keys, val, incr } => {
            let desc = maps.layout.aggs[usize::from(agg)];
            let next = a.label();
            match (maps.row_at[usize::from(agg)], &maps.keyed[usize::from(agg)]) {
                (Some(at), _) => update(a, desc.func, Reg::R9, at as i16, val, incr, next),
                (None, Some(map)) => {
                    let have = a.label();
                    let full = a.label();
                    a.map_lookup(map.raw_fd(), reg(keys));
                    a.jmp_imm(Cond::Ne, Reg::R0, 0, have);
                    make(a, map, reg(keys), &maps.zero, full);
                    a.bind(have);
                    a.push(mov64_reg(Reg::R5, Reg::R0));
                    update(a, desc.func, Reg::R5, 0, val, incr, next);
                    a.ja(next);
                    a.bind(full);
                    count_drop(a, maps, DROP_AGG);
                }
                (None, None) => {}
            }
            a.bind(next);
        }
    }
    Ok(())
}

/// Updates the row at `base + off` with value register `val`, weight `incr`. Clobbers
/// R0–R4. `skip`: where to go on (an impossible bucket, for the verifier's sake).
fn update(a: &mut Asm, func: AggFn, base: Reg, off: i16, val: u8, incr: u8, skip: Label) {
    let v = |a: &mut Asm, r: Reg| {
        a.push(ldx(Size::DW, r, Reg::R10, reg(val)));
    };
    a.push(mov64_imm(Reg::R1, 1));
    a.push(atomic_add(Size::DW, base, off, Reg::R1));
    match func {
        AggFn::Count => {}
        AggFn::Sum | AggFn::Avg => {
            v(a, Reg::R1);
            a.push(atomic_add(Size::DW, base, off + 8, Reg::R1));
        }
        AggFn::Min | AggFn::Max => {
            // An atomic maximum of the encoded value: compare and swap until the word
            // is at least it. Only a thread preempted on this CPU meanwhile makes a
            // swap fail; a few tries are plenty.
            v(a, Reg::R1);
            a.push_wide(ld_imm64(Reg::R2, min_max_mask(func)));
            a.push(alu64_reg(AluOp::Xor, Reg::R1, Reg::R2));
            let done = a.label();
            for _ in 0..4 {
                a.push(ldx(Size::DW, Reg::R0, base, off + 8));
                a.jmp_reg(Cond::Ge, Reg::R0, Reg::R1, done);
                a.push(mov64_reg(Reg::R2, Reg::R0));
                a.push(atomic_cmpxchg(Size::DW, base, off + 8, Reg::R1));
                a.jmp_reg(Cond::Eq, Reg::R0, Reg::R2, done);
            }
            a.bind(done);
        }
        AggFn::Stddev => {
            v(a, Reg::R1);
            a.push(atomic_add(Size::DW, base, off + 8, Reg::R1));
            // |v|² in 128 bits from 32-bit halves h and l: h²·2^64 + 2hl·2^32 + l².
            let positive = a.label();
            a.jmp_imm(Cond::Sge, Reg::R1, 0, positive);
            a.push(alu64_imm(AluOp::Neg, Reg::R1, 0));
            a.bind(positive);
            a.push(mov64_reg(Reg::R2, Reg::R1));
            a.push(alu64_imm(AluOp::Rsh, Reg::R2, 32)); // h
            a.push(mov32_reg(Reg::R1, Reg::R1)); // l
            a.push(mov64_reg(Reg::R3, Reg::R1));
            a.push(alu64_reg(AluOp::Mul, Reg::R3, Reg::R1)); // l²
            a.push(mov64_reg(Reg::R4, Reg::R1));
            a.push(alu64_reg(AluOp::Mul, Reg::R4, Reg::R2)); // hl < 2^64
            a.push(alu64_reg(AluOp::Mul, Reg::R2, Reg::R2)); // h² ≤ 2^62
            a.push(mov64_reg(Reg::R1, Reg::R4));
            a.push(alu64_imm(AluOp::Lsh, Reg::R1, 33));
            a.push(alu64_reg(AluOp::Add, Reg::R3, Reg::R1)); // low word
            let no_carry = a.label();
            a.jmp_reg(Cond::Ge, Reg::R3, Reg::R1, no_carry);
            a.push(alu64_imm(AluOp::Add, Reg::R2, 1));
            a.bind(no_carry);
            a.push(alu64_imm(AluOp::Rsh, Reg::R4, 31));
            a.push(alu64_reg(AluOp::Add, Reg::R2, Reg::R4)); // high word
            a.push(mov64_reg(Reg::R1, Reg::R3));
            a.push(atomic_fetch_add(Size::DW, base, off + 16, Reg::R1));
            a.push(alu64_reg(AluOp::Add, Reg::R1, Reg::R3));
            let no_carry = a.label();
            a.jmp_reg(Cond::Ge, Reg::R1, Reg::R3, no_carry);
            a.push(alu64_imm(AluOp::Add, Reg::R2, 1));
            a.bind(no_carry);
            a.push(atomic_add(Size::DW, base, off + 24, Reg::R2));
        }
        AggFn::Quantize | AggFn::Lquantize { .. } | AggFn::Llquantize { .. } => {
            v(a, Reg::R1);
            if func == AggFn::Quantize {
                quantize_word(a);
            } else if let AggFn::Lquantize { base: b, step, levels } = func {
                lquantize_word(a, b, step, levels);
            } else if let AggFn::Llquantize { bins } = func {
                llquantize_word(a, bins);
            }
            // The word's index is below the row's length on every way here; said
            // again for the verifier, which bounds the address by it.
            a.jmp_imm(Cond::Gt, Reg::R1, (func.words() - 1) as i32, skip);
            a.push(alu64_imm(AluOp::Lsh, Reg::R1, 3));
            a.push(mov64_reg(Reg::R2, base));
            a.push(alu64_reg(AluOp::Add, Reg::R2, Reg::R1));
            a.push(ldx(Size::DW, Reg::R3, Reg::R10, reg(incr)));
            a.push(atomic_add(Size::DW, Reg::R2, off, Reg::R3));
        }
    }
}

/// R1 (a value) becomes its quantize word (1 + `quantize_bucket`): a binary search for
/// the highest set bit, as BPF has no instruction for it. Clobbers R2, R3.
fn quantize_word(a: &mut Asm) {
    let zero = a.label();
    let negative = a.label();
    let done = a.label();
    a.jmp_imm(Cond::Eq, Reg::R1, 0, zero);
    a.jmp_imm(Cond::Slt, Reg::R1, 0, negative);
    log2(a);
    a.push(alu64_imm(AluOp::Add, Reg::R2, 1 + 64));
    a.ja(done);
    a.bind(negative);
    a.push(alu64_imm(AluOp::Neg, Reg::R1, 0));
    log2(a);
    // 62 - log, at least 0.
    let low = a.label();
    a.jmp_imm(Cond::Gt, Reg::R2, 62, low);
    a.push(mov64_imm(Reg::R3, 1 + 62));
    a.push(alu64_reg(AluOp::Sub, Reg::R3, Reg::R2));
    a.push(mov64_reg(Reg::R2, Reg::R3));
    a.ja(done);
    a.bind(low);
    a.push(mov64_imm(Reg::R2, 1));
    a.ja(done);
    a.bind(zero);
    a.push(mov64_imm(Reg::R2, 1 + 63));
    a.bind(done);
    a.push(mov64_reg(Reg::R1, Reg::R2));
}

/// R2 = ⌊log2 R1⌋ of a nonzero R1 (unsigned). Clobbers R1, R3.
fn log2(a: &mut Asm) {
    a.push(mov64_imm(Reg::R2, 0));
    for bits in [32, 16, 8, 4, 2, 1] {
        let next = a.label();
        a.push(mov64_reg(Reg::R3, Reg::R1));
        a.push(alu64_imm(AluOp::Rsh, Reg::R3, bits));
        a.jmp_imm(Cond::Eq, Reg::R3, 0, next);
        a.push(mov64_reg(Reg::R1, Reg::R3));
        a.push(alu64_imm(AluOp::Add, Reg::R2, bits));
        a.bind(next);
    }
}

/// R1 (a value) becomes its lquantize word (1 + `lquantize_bucket`): compared in 32
/// bits, signed. Clobbers R2.
fn lquantize_word(a: &mut Asm, base: i32, step: u16, levels: u16) {
    let done = a.label();
    let under = a.label();
    let over = a.label();
    a.push(alu64_imm(AluOp::Lsh, Reg::R1, 32));
    a.push(alu64_imm(AluOp::Arsh, Reg::R1, 32));
    a.push_wide(ld_imm64(Reg::R2, i64::from(base) as u64));
    a.jmp_reg(Cond::Slt, Reg::R1, Reg::R2, under);
    a.push(alu64_reg(AluOp::Sub, Reg::R1, Reg::R2));
    a.push(alu64_imm(AluOp::Div, Reg::R1, i32::from(step.max(1))));
    a.jmp_imm(Cond::Ge, Reg::R1, i32::from(levels), over);
    a.push(alu64_imm(AluOp::Add, Reg::R1, 2));
    a.ja(done);
    a.bind(over);
    a.push(mov64_imm(Reg::R1, i32::from(levels) + 2));
    a.ja(done);
    a.bind(under);
    a.push(mov64_imm(Reg::R1, 1));
    a.bind(done);
}

/// R1 (a bin the program computed, `udtrace_dif::llquantize`) becomes its word: 1 +
/// the bin taken signed within 0..bins.
fn llquantize_word(a: &mut Asm, bins: u16) {
    let last = i32::from(bins.max(1)) - 1;
    let (done, under, over) = (a.label(), a.label(), a.label());
    a.jmp_imm(Cond::Slt, Reg::R1, 0, under);
    a.jmp_imm(Cond::Gt, Reg::R1, last, over);
    a.push(alu64_imm(AluOp::Add, Reg::R1, 1));
    a.ja(done);
    a.bind(over);
    a.push(mov64_imm(Reg::R1, last + 1));
    a.ja(done);
    a.bind(under);
    a.push(mov64_imm(Reg::R1, 1));
    a.bind(done);
}

/// `s` without threads whose variables are all 0: the maps delete such a thread's
/// entry (DTrace frees a variable set to 0), the interpreter's buffer keeps it; for
/// tests that compare the two.
pub fn without_zero_threads(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    s.tls.retain(|_, v| v.iter().any(|&w| w != 0));
    s
}
