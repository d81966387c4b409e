//! The in-process backend's shared ring as a hostile traced process can leave it: the
//! fuzzer writes the header (head, tail, drops, even the geometry), commits slots with
//! any bytes, scribbles anywhere, and udtrace's reader drains it between writes. Every
//! record drained goes where the backend sends it: parsed with the session's record
//! layout, its cookie looked up. Proc and profile records are parsed from the same bytes.

use std::time::{Duration, Instant};

use udtrace_inproc::ring::{Geometry, Reader, RingView, OFF_DROPS, OFF_HEAD, OFF_NSLOTS, OFF_SLOT_SIZE, OFF_TAIL};
use udtrace_record::pid::{
    BufferCapture, ChainCap, ChainOp, PtReg, RecordLayout, RecordPlan, StashCaptures, StringCapture,
};
use udtrace_record::proc::{self, Hook, ProcLayout, ProcPlan};
use udtrace_record::profile::{self, ProfileLayout};

use crate::Input;

/// Writes and drains per run: enough for laps of the largest ring.
const MAX_OPS: usize = 256;
/// Cookies the session would know (a probe site each).
const COOKIES: usize = 4;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let layout = layout(&mut input);
    let nslots = 2u64 << (input.u8() % 4);
    let Ok(g) = Geometry::new(nslots, layout.size) else { return };
    let mut ring = vec![0u8; g.size()];
    g.init(&mut ring);
    let mut reader = match Reader::new(&ring, layout.size) {
        Ok(r) => r,
        Err(_) => return,
    };
    let start = Instant::now();
    let mut now = start;
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 8 {
            0 => {
                let field = [OFF_HEAD, OFF_TAIL, OFF_DROPS, OFF_NSLOTS, OFF_SLOT_SIZE][input.u8() as usize % 5];
                ring.store_release_u64(field, input.u64());
            }
            // A commit as the protocol makes it, with any record bytes and any index.
            1 => {
                let i = input.u64();
                let at = g.slot_offset(i);
                let rec = input.bytes(layout.size);
                ring[at + 8..at + 8 + rec.len()].copy_from_slice(rec);
                ring.store_release_u64(at, i.wrapping_add(1));
            }
            // A well-behaved producer: reserve, write, commit.
            2 => {
                let h = ring.load_acquire_u64(OFF_HEAD);
                let rec = input.bytes(layout.size);
                let at = g.slot_offset(h);
                ring[at + 8..at + 8 + rec.len()].copy_from_slice(rec);
                ring.store_release_u64(OFF_HEAD, h.wrapping_add(1));
                ring.store_release_u64(at, h.wrapping_add(1));
            }
            3 => {
                let at = (input.u64() % ring.len() as u64) as usize;
                let bytes = input.bytes(16);
                let n = bytes.len().min(ring.len() - at);
                ring[at..at + n].copy_from_slice(&bytes[..n]);
            }
            4 => {
                now += Duration::from_millis(u64::from(input.u8()) * 4);
                let _ = reader.drain_at(&mut ring, now, |rec| consume(&layout, rec));
            }
            5 => {
                let _ = (reader.backlog(&ring), reader.drops(&ring), reader.skipped(), reader.geometry());
            }
            // A reader made now, from whatever the header says.
            6 => {
                if let Ok(mut r) = Reader::new(&ring, layout.size) {
                    let _ = r.drain_at(&mut ring, now, |rec| consume(&layout, rec));
                }
            }
            _ => other_records(&mut input),
        }
    }
    let _ = reader.drain_at(&mut ring, now + Duration::from_secs(1), |rec| consume(&layout, rec));
}

/// A session's pid record layout, chosen by the input: every part present or not.
fn layout(input: &mut Input) -> RecordLayout {
    let flags = input.u8();
    let strings = (0..flags % 3)
        .map(|i| StringCapture { reg: PtReg::ARGS[i as usize], max: 1 + u32::from(input.u8()), per_site: false })
        .collect();
    let buffers = (0..(flags >> 5) % 3)
        .map(|i| BufferCapture { reg: PtReg::ARGS[i as usize], size: 1 + u32::from(input.u8()) })
        .collect();
    let plan = RecordPlan {
        stack_bytes: 8 * u32::from(input.u8() % 9),
        strings,
        buffers,
        regs: flags & 4 != 0,
        // Registers r9 to orig_ax: the argument registers and rax among them.
        arg_regs: u32::from(input.u8()) << 8,
        errno: flags & 8 != 0,
        curthread: flags & 16 != 0,
        stash: stash(input),
        task: input.u8() & 1 != 0,
    };
    RecordLayout::new(&plan).expect("a plan within the limits")
}

/// Stash slots and captures behind them, chosen by the input.
fn stash(input: &mut Input) -> StashCaptures {
    let bits = input.u8();
    let slots = bits % 3;
    if slots == 0 {
        return StashCaptures::default();
    }
    StashCaptures {
        slots,
        writes: vec![(0, PtReg::Di)],
        strings: (0..(bits >> 2) % 3).map(|i| (i % slots, 1 + u32::from(input.u8()))).collect(),
        buffers: (0..(bits >> 4) % 3).map(|i| (i % slots, 1 + u32::from(input.u8()))).collect(),
        // A pointer member's string, read through a struct copied in.
        chains: if bits & 0x40 != 0 {
            vec![vec![
                ChainOp::Arg(PtReg::Si),
                ChainOp::Copyin { cap: 0 },
                ChainOp::Drop,
                ChainOp::Field { cap: 0, off: 0, size: 8, signed: false },
                ChainOp::Str { cap: 1 },
            ]]
        } else {
            Vec::new()
        },
        chain_caps: if bits & 0x40 != 0 {
            vec![ChainCap::Buf(8 + u32::from(input.u8())), ChainCap::Str(1 + u32::from(input.u8()))]
        } else {
            Vec::new()
        },
    }
}

/// What the in-process backend does with a record before the consumer gets it.
fn consume(layout: &RecordLayout, rec: &[u8]) {
    let _ = proc::hook_of(rec);
    let _ = profile::is_profile(rec);
    let Ok(f) = layout.parse(rec) else { return };
    let cookies = [(); COOKIES];
    if cookies.get(usize::try_from(f.cookie).unwrap_or(usize::MAX)).is_none() {
        return;
    }
    for n in 0..8 {
        let _ = f.arg(n);
    }
    let _ = (f.reg(PtReg::Sp), f.stack.len(), f.strings.iter().flatten().map(|s| s.len()).sum::<usize>());
    let _ = f.buffers.iter().flatten().map(|b| b.len()).sum::<usize>();
    let _ = f.stashed.iter().filter_map(|s| s.bytes).map(|b| b.len()).sum::<usize>();
    let _ = f.snapshot.as_deref().map(|s| s.psargs.as_ref().map(Vec::len));
}

/// Proc and profile records (written by BPF programs, read by the same parsers) of the
/// input's bytes.
fn other_records(input: &mut Input) {
    let bits = input.u8();
    let hook = Hook::ALL[input.u8() as usize % Hook::ALL.len()];
    let plan = ProcPlan {
        cur: bits & 1 != 0,
        other: bits & 2 != 0,
        siginfo: bits & 4 != 0,
        faults: bits & 8 != 0,
        ancestors: bits & 16 != 0,
        string_max: u32::from(input.u8()) * 17,
    };
    let l = ProcLayout::new(hook, &plan);
    let mut rec = input.bytes(l.size).to_vec();
    rec.resize(l.size, 0);
    // Mostly a record of the right hook, else the parser stops at the cookie.
    if bits & 32 == 0 {
        rec[..8].copy_from_slice(&(proc::PROC_COOKIE | hook as u64).to_ne_bytes());
    }
    let _ = l.parse(&rec);
    let Ok(p) = ProfileLayout::new(8 * u32::from(bits % 9)) else { return };
    let mut rec = input.bytes(p.size).to_vec();
    rec.resize(p.size, 0);
    if let Ok(s) = p.parse(&rec) {
        let _ = (s.probe, s.kernel_pc, s.comm.len(), s.firing.stack.len());
    }
}
