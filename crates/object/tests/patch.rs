//! Patch plans and relocation, on hand-assembled x86-64 code and on a C file gcc -O2
//! compiles here. Every relocation is checked by decoding its output: the same
//! instructions, with the same absolute branch targets and memory addresses.

use std::path::PathBuf;
use std::process::Command;

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};

use udtrace_object::debuginfo;
use udtrace_object::patch::{jmp_rel32, out_of_line, plan, plan_with, relocate, Outside, PatchPlan, Refusal, SiteKind};

const FUNC: u64 = 0x40_1000;
/// A trampoline 1.5 GiB above the code: far, but within reach.
const FAR: u64 = FUNC + 0x6000_0000;

fn decode_all(code: &[u8], ip: u64) -> Vec<Instruction> {
    let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut v = Vec::new();
    while d.can_decode() {
        let insn = d.decode();
        assert_ne!(insn.code(), Code::INVALID, "undecodable relocated code at {:#x}: {code:02x?}", insn.ip());
        v.push(insn);
    }
    v
}

/// `new` (at `new_ip`) does what `orig` (at `orig_ip`) does: instruction for instruction,
/// the same operation and operands, short branches turned near, absolute branch targets
/// and RIP-relative addresses unchanged (iced keeps both as absolute addresses, which
/// `Instruction`'s equality compares; it ignores the ip).
fn assert_equivalent(orig: &[u8], orig_ip: u64, new: &[u8], new_ip: u64) {
    let a = decode_all(orig, orig_ip);
    let b = decode_all(new, new_ip);
    let mut b = b.iter();
    for x in &a {
        if x.mnemonic() == Mnemonic::Call {
            // A displaced call pushes its own return address, then jumps: the callee
            // returns to the original code after the call.
            let seq: Vec<&Instruction> = b.by_ref().take(4).collect();
            assert_eq!(seq.len(), 4, "a call becomes four instructions: {orig:02x?} -> {new:02x?}");
            assert_eq!(seq[0].code(), Code::Lea_r64_m);
            assert_eq!(
                (seq[0].op0_register(), seq[0].memory_base()),
                (iced_x86::Register::RSP, iced_x86::Register::RSP)
            );
            assert_eq!(seq[0].memory_displacement64() as i64, -8);
            let (lo, hi) = (seq[1].immediate32() as u64, seq[2].immediate32() as u64);
            assert_eq!((seq[1].memory_displacement64(), seq[2].memory_displacement64()), (0, 4));
            assert_eq!(lo | hi << 32, x.next_ip(), "the return address is the original one");
            assert_eq!(seq[3].mnemonic(), Mnemonic::Jmp);
            if is_branch(x) {
                assert_eq!(seq[3].near_branch_target(), x.near_branch_target(), "{:?}", x.code());
            }
            continue;
        }
        let y = b.next().unwrap_or_else(|| panic!("instruction count: {orig:02x?} -> {new:02x?}"));
        if is_branch(x) {
            // Short or near, the same condition (it is in the mnemonic) and target.
            assert_eq!(x.mnemonic(), y.mnemonic(), "{:?} became {:?}", x.code(), y.code());
            assert!(is_branch(y));
        } else {
            assert_eq!(x, y, "{:?} became {:?}", x.code(), y.code());
        }
        if x.is_ip_rel_memory_operand() {
            assert!(y.is_ip_rel_memory_operand());
            assert_eq!(x.ip_rel_memory_address(), y.ip_rel_memory_address(), "{:?}", x.code());
        }
        if is_branch(x) {
            assert_eq!(x.near_branch_target(), y.near_branch_target(), "{:?}", x.code());
        }
    }
    assert!(b.next().is_none(), "instruction count: {orig:02x?} -> {new:02x?}");
}

fn is_branch(insn: &Instruction) -> bool {
    matches!(insn.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
}

/// Both parts of a plan's displaced code, relocated to `at` and `at + 0x100`, check out
/// against the original bytes; returns them.
fn check_plan(code: &[u8], func: u64, p: &PatchPlan, at: u64) -> (Vec<u8>, Vec<u8>) {
    let (start, probe, end) = (p.start as usize, (p.start + p.probe_at) as usize, p.end as usize);
    let before = p.relocate_before(at).unwrap();
    let after = p.relocate_after(at + 0x100).unwrap();
    assert_equivalent(&code[start..probe], func + start as u64, &before, at);
    assert_equivalent(&code[probe..end], func + probe as u64, &after, at + 0x100);
    (before, after)
}

#[test]
fn prologue_entry() {
    // 0: push rbp; 1: mov rbp,rsp; 4: sub rsp,0x10; 8: leave; 9: ret
    let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc9, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    // The push runs in place: the patch starts after it, and the firing records the
    // stack pointer 8 bytes higher.
    assert_eq!((p.site, p.start, p.end, p.probe_at, p.displaced_call, p.sp_adjust), (0, 1, 8, 0, false, 8));
    assert_eq!(p.region_vaddr(), FUNC + 1);
    assert_eq!(p.resume_vaddr(), FUNC + 8);
    let (before, after) = check_plan(&code, FUNC, &p, FAR);
    assert!(before.is_empty());
    assert_eq!(after, code[1..8], "nothing position-dependent: the same bytes");
    let patch = p.patch_bytes(FAR).unwrap();
    assert_eq!(patch.len(), 7);
    assert_eq!(patch[..5], jmp_rel32(FUNC + 1, FAR).unwrap());
    assert_eq!(patch[5..], [0xcc; 2]);
    // An offset site at the sub takes the leave along; one at the leave would run past
    // the ret, and past the end.
    let p = plan(&code, FUNC, 4, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (4, 9));
    check_plan(&code, FUNC, &p, FAR);
    assert_eq!(plan(&code, FUNC, 8, SiteKind::Offset), Err(Refusal::TooShort));
}

#[test]
fn endbr64_entry() {
    // 0: endbr64; 4: push rbp; 5: mov rbp,rsp; 8: pop rbp; 9: ret
    let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.sp_adjust), (4, 9, 0));
    check_plan(&code, FUNC, &p, FAR);
}

#[test]
fn entries_whose_first_instruction_runs_in_place() {
    // What may run before the firing, and what it takes from rsp.
    let first = |code: &[u8]| udtrace_object::patch::runs_first(&decode_all(code, FUNC)[0]);
    assert_eq!(first(&[0xf3, 0x0f, 0x1e, 0xfa]), Some(0), "endbr64");
    assert_eq!(first(&[0x41, 0x57]), Some(8), "push r15");
    assert_eq!(first(&[0x48, 0x83, 0xec, 0x18]), Some(0x18), "sub rsp,0x18");
    assert_eq!(first(&[0x48, 0x81, 0xec, 0x88, 0, 0, 0]), Some(0x88), "sub rsp,0x88");
    assert_eq!(first(&[0x48, 0x83, 0xc4, 0x80]), Some(0x80), "add rsp,-0x80");
    assert_eq!(first(&[0x48, 0x83, 0xc4, 0x08]), Some(-8), "add rsp,8");
    assert_eq!(first(&[0x49, 0x3b, 0x66, 0x10]), Some(0), "Go's cmp rsp,[r14+0x10]");
    assert_eq!(first(&[0x89, 0xf8]), Some(0), "mov eax,edi: a scratch register");
    assert_eq!(first(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0]), Some(0), "mov rax,fs:[0x28]");
    // Arguments, the frame pointer, memory, other moves of rsp, and branches: no.
    assert_eq!(first(&[0x48, 0x89, 0xf2]), None, "mov rdx,rsi");
    assert_eq!(first(&[0x31, 0xd2]), None, "xor edx,edx");
    assert_eq!(first(&[0x48, 0x89, 0xe5]), None, "mov rbp,rsp");
    assert_eq!(first(&[0x48, 0xc7, 0x07, 0, 0, 0, 0]), None, "mov qword [rdi],0");
    assert_eq!(first(&[0x48, 0x89, 0xfc]), None, "mov rsp,rdi");
    assert_eq!(first(&[0x48, 0x83, 0xe4, 0xf0]), None, "and rsp,-16");
    assert_eq!(first(&[0xe9, 0, 0, 0, 0]), None, "jmp");
    assert_eq!(first(&[0xc3]), None, "ret");
    assert_eq!(first(&[0x0f, 0x31]), None, "rdtsc writes rdx");
    // Such a first instruction gives way to the plan at the entry when the code after
    // it cannot be patched: 0: push rbx; 1: mov edi,1; 6: loop back to 1 (jne).
    let code = [0x53, 0xbf, 0x01, 0x00, 0x00, 0x00, 0x75, 0xf9, 0x5b, 0xc3];
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry), Err(Refusal::BranchInside(1)));
    // A first instruction that writes an argument is displaced: 0: mov rdx,rsi;
    // 3: mov eax,1; 8: ret.
    let code = [0x48, 0x89, 0xf2, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.sp_adjust), (0, 8, 0));
    check_plan(&code, FUNC, &p, FAR);
}

#[test]
fn too_short_and_not_sites() {
    // 0: xor eax,eax; 2: ret
    let code = [0x31, 0xc0, 0xc3];
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry), Err(Refusal::TooShort));
    assert_eq!(plan(&code, FUNC, 2, SiteKind::Return), Err(Refusal::TooShort));
    assert_eq!(plan(&code, FUNC, 1, SiteKind::Offset), Err(Refusal::NotAnInstruction(1)));
    assert_eq!(plan(&code, FUNC, 3, SiteKind::Offset), Err(Refusal::NotAnInstruction(3)));
    assert_eq!(plan(&code, FUNC, 2, SiteKind::Entry), Err(Refusal::NotTheEntry(2)));
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Return), Err(Refusal::NotAReturn { off: 0, mnemonic: "xor".into() }));
    assert_eq!(plan(&[0x90, 0x06], FUNC, 0, SiteKind::Entry), Err(Refusal::Undecodable(FUNC + 1)));
    assert_eq!(Refusal::TooShort.to_string(), "function too short to patch");
}

#[test]
fn loop_back_edge_into_entry_region() {
    // 0: endbr64; 4: add edi,1; 7: cmp edi,10; 10: jl 4; 12: ret
    let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x83, 0xc7, 0x01, 0x83, 0xff, 0x0a, 0x7c, 0xf8, 0xc3];
    let r = plan(&code, FUNC, 0, SiteKind::Entry);
    assert_eq!(r, Err(Refusal::BranchInside(4)));
    assert_eq!(r.unwrap_err().to_string(), "a branch lands inside the patched bytes at +0x4");
    // At the loop head itself the target is the region's first byte: fine.
    let p = plan(&code, FUNC, 4, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (4, 10));
    check_plan(&code, FUNC, &p, FAR);
    // The jl is in the region from offset 7 on; it goes back to 4, outside it.
    let p = plan(&code, FUNC, 7, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (7, 12));
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    assert_eq!(decode_all(&after, FAR + 0x100)[1].code(), Code::Jl_rel32_64);
}

#[test]
fn rip_relative_operands() {
    // 0: lea rax,[rip+0x100]; 7: mov eax,[rip+0x200]; 13: ret
    let code = [0x48, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, 0x8b, 0x05, 0x00, 0x02, 0x00, 0x00, 0xc3];
    // The entry's lea (into rax) runs in place; the code at offset 0 is displaced.
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry).map(|p| (p.start, p.end)), Ok((7, 13)));
    let p = plan(&code, FUNC, 0, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (0, 7));
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    let lea = decode_all(&after, FAR + 0x100)[0];
    assert_eq!(lea.ip_rel_memory_address(), FUNC + 7 + 0x100);
    assert_ne!(after, code[..7], "the displacement changed");
    let p = plan(&code, FUNC, 7, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (7, 13));
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    assert_eq!(decode_all(&after, FAR + 0x100)[0].ip_rel_memory_address(), FUNC + 13 + 0x200);
    // Below the code too, and both at once through `relocate`.
    let (high, low) = (0x7f00_1000_0000, 0x7f00_1000_0000 - 0x7000_0000);
    let r = relocate(&code[..13], high, low).unwrap();
    assert_equivalent(&code[..13], high, &r, low);
    // 3 GiB away, the addresses are out of rel32 reach.
    assert_eq!(relocate(&code[..7], FUNC, FUNC + 0xc000_0000), Err(Refusal::TooFar { target: FUNC + 0x107 }));
}

#[test]
fn call_in_region() {
    // 0: push rbx; 1: call +0x1000; 6: pop rbx; 7: ret
    let code = [0x53, 0xe8, 0x00, 0x10, 0x00, 0x00, 0x5b, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end, p.displaced_call), (0, 6, true));
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    // The call pushes the original return address (after it: the region's end) and jumps.
    let jump = decode_all(&after, FAR + 0x100)[4];
    // At the entry the push runs in place, the call alone is displaced.
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.displaced_call, p.sp_adjust), (1, 6, true, 8));
    assert_eq!((jump.code(), jump.near_branch_target()), (Code::Jmp_rel32_64, FUNC + 6 + 0x1000));
    // A call that does not end the region would return into the patched bytes.
    // 0: call rax; 2: xor eax,eax; 4: ret
    let code = [0xff, 0xd0, 0x31, 0xc0, 0xc3];
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry), Err(Refusal::CallInside(0)));
    // 3 GiB from the callee, the call cannot reach it.
    let code = [0x53, 0xe8, 0x00, 0x10, 0x00, 0x00, 0x5b, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    let e = p.relocate_after(FUNC + 0xc000_0000).unwrap_err();
    assert_eq!(e, Refusal::TooFar { target: FUNC + 0x1006 });
    assert!(e.to_string().contains("more than 2 GiB"), "{e}");
}

#[test]
fn short_jcc_in_region() {
    // 0: test edi,edi; 2: je 10; 4: mov eax,1; 9: ret; 10: xor eax,eax; 12: ret
    let code = [0x85, 0xff, 0x74, 0x06, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3, 0x31, 0xc0, 0xc3];
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry).map(|p| (p.start, p.end)), Ok((2, 9)));
    let p = plan(&code, FUNC, 0, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (0, 9));
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    let je = decode_all(&after, FAR + 0x100)[1];
    assert_eq!((je.code(), je.near_branch_target()), (Code::Je_rel32_64, FUNC + 10));
    // At the ret, the region would run into the code the je goes to.
    let p = plan(&code, FUNC, 2, SiteKind::Offset).unwrap();
    assert_eq!((p.start, p.end), (2, 9));
    check_plan(&code, FUNC, &p, FAR);
    assert_eq!(plan(&code, FUNC, 9, SiteKind::Offset), Err(Refusal::TooShort));
    let mut code2 = code.to_vec();
    code2.splice(10..12, [0xb8, 0, 0, 0, 0]);
    assert_eq!(plan(&code2, FUNC, 9, SiteKind::Offset), Err(Refusal::BranchInside(10)));
    // Code after a ret that no known branch reaches (a landing pad, say) is not patched
    // over either: 0: pop rbp; 1: ret; 2: nopl 0(rax,rax); 7: ret
    let code = [0x5d, 0xc3, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3];
    let e = plan(&code, FUNC, 0, SiteKind::Offset).unwrap_err();
    assert_eq!(e, Refusal::PastBlockEnd { off: 1, mnemonic: "ret".into() });
    assert_eq!(e.to_string(), "code after ret at +0x1 would be patched, and only a jump reaches it");
}

#[test]
fn return_site_block() {
    // 0: push rbp; 1: mov rbp,rsp; 4: mov eax,42; 9: pop rbp; 10: ret
    let code = [0x55, 0x48, 0x89, 0xe5, 0xb8, 0x2a, 0x00, 0x00, 0x00, 0x5d, 0xc3];
    let p = plan(&code, FUNC, 10, SiteKind::Return).unwrap();
    assert_eq!((p.site, p.start, p.end, p.probe_at), (10, 4, 11, 6));
    let (before, after) = check_plan(&code, FUNC, &p, FAR);
    assert_eq!(before, code[4..10]);
    assert_eq!(after, [0xc3]);
    // ret imm16 is a return site as well.
    let code = [0x55, 0x48, 0x89, 0xe5, 0xb8, 0x2a, 0x00, 0x00, 0x00, 0x5d, 0xc2, 0x08, 0x00];
    let p = plan(&code, FUNC, 10, SiteKind::Return).unwrap();
    assert_eq!((p.start, p.end, p.probe_at), (4, 13, 6));
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    assert_eq!(after, [0xc2, 0x08, 0x00]);
    // 4 bytes from the start: the function is too short.
    let code = [0x55, 0x48, 0x89, 0xe5, 0xc3];
    assert!(plan(&code, FUNC, 4, SiteKind::Return).is_ok());
    assert_eq!(plan(&code[1..], FUNC, 3, SiteKind::Return), Err(Refusal::TooShort));
}

#[test]
fn return_site_with_target_in_block() {
    // 0: push rbp; 1: mov rbp,rsp; 4: test edi,edi; 6: je 13; 8: mov eax,1; 13: pop rbp; 14: ret
    let code = [0x55, 0x48, 0x89, 0xe5, 0x85, 0xff, 0x74, 0x05, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x5d, 0xc3];
    assert_eq!(plan(&code, FUNC, 14, SiteKind::Return), Err(Refusal::BranchInside(13)));
    // A jump to the ret itself is inside too.
    let mut code2 = code;
    code2[7] = 0x06;
    assert_eq!(plan(&code2, FUNC, 14, SiteKind::Return), Err(Refusal::BranchInside(14)));
}

#[test]
fn tail_jump_return_sites() {
    // 0: mov edi,1; 5: jmp rel32 +0x2000 (out of the function)
    let code = [0xbf, 0x01, 0x00, 0x00, 0x00, 0xe9, 0x00, 0x20, 0x00, 0x00];
    let p = plan(&code, FUNC, 5, SiteKind::Return).unwrap();
    assert_eq!((p.start, p.end, p.probe_at), (5, 10, 0));
    let (before, after) = check_plan(&code, FUNC, &p, FAR);
    assert!(before.is_empty());
    let jmp = decode_all(&after, FAR + 0x100)[0];
    assert_eq!((jmp.code(), jmp.near_branch_target()), (Code::Jmp_rel32_64, FUNC + 0x200a));
    // 0: mov eax,1; 5: pop rbx; 6: jmp rel8 +0x40 (out): widened to a near jmp.
    let code = [0xb8, 0x01, 0x00, 0x00, 0x00, 0x5b, 0xeb, 0x40];
    let p = plan(&code, FUNC, 6, SiteKind::Return).unwrap();
    assert_eq!((p.start, p.end, p.probe_at), (0, 8, 6));
    let (before, after) = check_plan(&code, FUNC, &p, FAR);
    assert_eq!(before, code[..6]);
    let jmp = decode_all(&after, FAR + 0x100)[0];
    assert_eq!((jmp.code(), jmp.near_branch_target()), (Code::Jmp_rel32_64, FUNC + 0x48));
    // A jmp that stays in the function is no return site.
    let code = [0xb8, 0x01, 0x00, 0x00, 0x00, 0xeb, 0xf9];
    assert_eq!(plan(&code, FUNC, 5, SiteKind::Return), Err(Refusal::NotAReturn { off: 5, mnemonic: "jmp".into() }));
}

#[test]
fn indirect_jump_function() {
    // 0: cmp edi,3; 3: ja 12; 5: jmp [rdi*8+0x601000]; 12: xor eax,eax; 14: ret
    let code = [0x83, 0xff, 0x03, 0x77, 0x07, 0xff, 0x24, 0xfd, 0x00, 0x10, 0x60, 0x00, 0x31, 0xc0, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end), (3, 12));
    check_plan(&code, FUNC, &p, FAR);
    assert_eq!(plan(&code, FUNC, 12, SiteKind::Offset), Err(Refusal::IndirectJump));
    assert_eq!(plan(&code, FUNC, 14, SiteKind::Return), Err(Refusal::IndirectJump));
    assert_eq!(Refusal::IndirectJump.to_string(), "indirect jump in the function");
    // jmp rax followed by more code: the same.
    let code = [0x48, 0x89, 0xf8, 0x48, 0x01, 0xf0, 0xff, 0xe0, 0x31, 0xc0, 0xc3];
    assert!(plan(&code, FUNC, 0, SiteKind::Entry).is_ok());
    assert_eq!(plan(&code, FUNC, 3, SiteKind::Offset), Err(Refusal::IndirectJump));
    // A known target still refuses the entry: 0: xor eax,eax; 2: inc eax; 4: jmp rdx;
    // 6: jmp 2.
    let code = [0x31, 0xc0, 0xff, 0xc0, 0xff, 0xe2, 0xeb, 0xfa];
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry), Err(Refusal::BranchInside(2)));
    // A tail call through a GOT slot is no jump table: 0: mov edi,1; 5: jmp [rip+0x1000]
    let code = [0xbf, 0x01, 0x00, 0x00, 0x00, 0xff, 0x25, 0x00, 0x10, 0x00, 0x00];
    let p = plan(&code, FUNC, 5, SiteKind::Offset).unwrap();
    let (_, after) = check_plan(&code, FUNC, &p, FAR);
    assert_eq!(decode_all(&after, FAR + 0x100)[0].ip_rel_memory_address(), FUNC + 11 + 0x1000);
}

#[test]
fn other_parts_and_entries() {
    // 0: test edi,edi; 2: jne cold; 8: mov eax,1; 13: ret
    let code = [0x85, 0xff, 0x0f, 0x85, 0xf8, 0x0f, 0x00, 0x00, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3];
    let cold_at = FUNC + 0x1000;
    assert!(plan(&code, FUNC, 0, SiteKind::Entry).is_ok());
    // f.cold: 0: xor eax,eax; 2: jmp back to f+2 (inside the entry region).
    let back = (FUNC + 2).wrapping_sub(cold_at + 7) as u32;
    let mut cold = vec![0x31, 0xc0, 0xe9];
    cold.extend(back.to_le_bytes());
    let outside = Outside { parts: &[(cold_at, &cold)], targets: &[] };
    assert_eq!(plan_with(&code, FUNC, &outside, 0, SiteKind::Entry), Err(Refusal::BranchInside(2)));
    // The jne to the cold part is no return site, with the part known.
    assert!(plan(&code, FUNC, 2, SiteKind::Return).is_ok());
    assert_eq!(
        plan_with(&code, FUNC, &outside, 2, SiteKind::Return),
        Err(Refusal::NotAReturn { off: 2, mnemonic: "jne".into() })
    );
    // A landing pad at 2.
    let outside = Outside { parts: &[], targets: &[FUNC + 2] };
    assert_eq!(plan_with(&code, FUNC, &outside, 0, SiteKind::Entry), Err(Refusal::BranchInside(2)));
}

#[test]
fn branches_inside_displaced_code() {
    // relocate() alone: 0: nop; 1: nop; 2: loop 1 lands inside the displaced bytes.
    assert_eq!(
        relocate(&[0x90, 0x90, 0xe2, 0xfd], FUNC, FAR),
        Err(Refusal::BranchIntoDisplaced { from: FUNC + 2, target: FUNC + 1 })
    );
    // A loop back to the first byte goes through the patch again: kept. loop has no near
    // form, so BlockEncoder jumps around a near jmp to the target.
    let r = relocate(&[0x90, 0xe2, 0xfd], FUNC, FAR).unwrap();
    let out = decode_all(&r, FAR);
    assert_eq!(out[0].mnemonic(), Mnemonic::Nop);
    assert_eq!(out[1].mnemonic(), Mnemonic::Loop);
    let far_jmp = out.iter().find(|i| i.code() == Code::Jmp_rel32_64).expect("a near jmp");
    assert_eq!(far_jmp.near_branch_target(), FUNC);
    assert_eq!(out[1].near_branch_target(), far_jmp.ip(), "the loop goes to the jmp to its old target");
    // The loop falls through past the jmp.
    assert!(out.iter().all(|i| i.next_ip() <= FAR + r.len() as u64));
    // jrcxz out of the displaced bytes, likewise.
    let r = relocate(&[0xe3, 0x10], FUNC, FAR).unwrap();
    let out = decode_all(&r, FAR);
    assert_eq!(out[0].mnemonic(), Mnemonic::Jrcxz);
    assert!(out.iter().any(|i| i.code() == Code::Jmp_rel32_64 && i.near_branch_target() == FUNC + 0x12));
    // Cut instructions are refused.
    assert_eq!(relocate(&[0xb8, 0x01], FUNC, FAR), Err(Refusal::Undecodable(FUNC)));
}

#[test]
fn jmp_rel32_reach() {
    assert_eq!(jmp_rel32(0x1000, 0x1005), Some([0xe9, 0, 0, 0, 0]));
    assert_eq!(jmp_rel32(0x1000, 0x1000), Some([0xe9, 0xfb, 0xff, 0xff, 0xff]));
    assert_eq!(jmp_rel32(0x1000, 0x1005 + 0x7fff_ffff), Some([0xe9, 0xff, 0xff, 0xff, 0x7f]));
    assert_eq!(jmp_rel32(0x1000, 0x1005 + 0x8000_0000), None);
    assert_eq!(jmp_rel32(0x8000_1000, 0x8000_1005 - 0x8000_0000), Some([0xe9, 0, 0, 0, 0x80]));
    assert_eq!(jmp_rel32(0x8000_1000, 0x8000_1004 - 0x8000_0000), None);
}

const FIXTURE_C: &str = r#"
#include <string.h>
#include <stdlib.h>
int counter;
static int table[64];
int add(int a, int b) { return a + b; }
int bump(void) { return ++counter; }
int sum(const int *v, int n) { int s = 0; for (int i = 0; i < n; i++) s += v[i]; return s; }
int fill(int n) { for (int i = 0; i < n && i < 64; i++) table[i] = i * n; return table[n & 63]; }
int dispatch(int op, int a, int b) {
    switch (op) {
    case 0: return a + b; case 1: return a - b; case 2: return a * b; case 3: return a / (b | 1);
    case 4: return a << b; case 5: return a >> b; case 6: return a & b; case 7: return a | b;
    default: return -1;
    }
}
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
extern int helper(int);
int tail(int x) { return helper(x + 1); }
int twice(int x) { return helper(helper(x)) + counter; }
size_t count_a(const char *s) { size_t n = 0; for (; *s; s++) n += *s == 'a'; return n; }
char *dup_upper(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (!d) return 0;
    for (size_t i = 0; i <= n; i++) d[i] = s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i];
    return d;
}
int (*pick(int i))(int, int) { return i ? add : 0; }
int call_through(int (*f)(int), int x) { return f(x) * 2; }
long mix(long a, long b, long c) { return (a * 31 + b) ^ (c >> 3) ^ counter; }
"#;

/// Compile FIXTURE_C with gcc -O2 (once per test binary, into Cargo's test tempdir).
fn fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("patch-fixture");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("patchfix.c");
    std::fs::write(&src, FIXTURE_C).unwrap();
    let out = dir.join("libpatchfix.so");
    let status = Command::new("gcc")
        .args(["-O2", "-fPIC", "-shared", "-fcf-protection=full", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("these tests need gcc (Debian: apt-get install build-essential)");
    assert!(status.success(), "gcc failed on {}", src.display());
    out
}

#[test]
fn gcc_fixture_sites() {
    let path = fixture();
    let obj = debuginfo::load(&path).unwrap();
    let bytes_at = |a: u64, len: u64| obj.bytes(obj.info.vaddr_to_offset(a).unwrap(), len as usize).unwrap();
    let (mut entries, mut entry_ok, mut others, mut others_ok) = (0, 0, 0, 0);
    let mut refusals = Vec::new();
    for f in obj.table().functions() {
        let code = obj.code(f).unwrap();
        let code = &*code;
        let sites = obj.sites(f).unwrap();
        let owned: Vec<_> = obj.table().other_parts(f).iter().map(|&(a, b)| (a, bytes_at(a, b - a))).collect();
        let parts: Vec<(u64, &[u8])> = owned.iter().map(|(a, c)| (*a, &**c)).collect();
        let outside = Outside { parts: &parts, targets: &[] };
        let mut all = vec![(0, SiteKind::Entry)];
        all.extend(sites.returns.iter().map(|&o| (o, SiteKind::Return)));
        all.extend(sites.insns.iter().map(|&o| (o, SiteKind::Offset)));
        for (off, kind) in all {
            let r = plan_with(code, f.addr, &outside, u64::from(off), kind);
            if kind == SiteKind::Entry {
                entries += 1;
            } else {
                others += 1;
            }
            match r {
                Ok(p) => {
                    assert_eq!(p.site, off);
                    assert!(p.end - p.start >= 5 && p.end as usize <= code.len(), "{}: {p:?}", f.name);
                    if kind == SiteKind::Entry && p.start > 0 {
                        // The first instruction runs in place, the patch right after it.
                        let first = Decoder::with_ip(64, code, f.addr, DecoderOptions::NONE).decode();
                        assert_eq!(p.start as usize, first.len(), "{}: {p:?}", f.name);
                        assert!(udtrace_object::patch::runs_first(&first).is_some());
                    } else {
                        assert!(p.start <= off && off < p.end);
                    }
                    if kind == SiteKind::Entry {
                        entry_ok += 1;
                    } else {
                        others_ok += 1;
                    }
                    check_plan(code, f.addr, &p, f.addr + 0x7000_0000);
                    check_plan(code, f.addr, &p, f.addr.wrapping_sub(0x7000_0000));
                }
                Err(e) => refusals.push(format!("{} +{off:#x} {kind:?}: {e}", f.name)),
            }
        }
    }
    eprintln!("entries {entry_ok}/{entries}, other sites {others_ok}/{others}");
    eprintln!("{}", refusals.join("\n"));
    assert!(entries >= 12, "only {entries} functions");
    assert!(entry_ok * 10 >= entries * 8, "entries patched: {entry_ok}/{entries}\n{}", refusals.join("\n"));
    assert!(others_ok * 2 >= others, "other sites patched: {others_ok}/{others}");
    // The jump table keeps dispatch() to its entry.
    assert!(refusals.iter().any(|r| r.starts_with("dispatch ") && r.ends_with("indirect jump in the function")));
}

#[test]
fn out_of_line_copies_for_breakpoints() {
    // mov eax,[rip+0x100]; call +0x20; jne -6 (back into the function); ret
    let func = 0x40_0000u64;
    let code = [
        0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, // mov eax, [rip+0x100]
        0xe8, 0x20, 0x00, 0x00, 0x00, // call +0x20
        0x75, 0xf3, // jne func+0
        0xc3, // ret
    ];
    let far = func + 0x7000_0000;
    for (site, len) in [(0u64, 6usize), (6, 5), (11, 2), (13, 1)] {
        let out = out_of_line(&code, func, site, far).unwrap_or_else(|e| panic!("+{site:#x}: {e}"));
        let insns = decode_all(&out, far);
        // The instruction (a call: four), then the jump back.
        let copy = if site == 6 { 4 } else { 1 };
        assert_eq!(insns.len(), copy + 1, "{out:02x?}");
        let orig = &code[site as usize..site as usize + len];
        let relocated_len: usize = insns[..copy].iter().map(|i| i.len()).sum();
        assert_equivalent(orig, func + site, &out[..relocated_len], far);
        assert_eq!(insns[copy].mnemonic(), Mnemonic::Jmp);
        assert_eq!(insns[copy].near_branch_target(), func + site + len as u64, "back after the instruction");
    }
    // Out of reach, or not an instruction of the function.
    assert!(matches!(out_of_line(&code, func, 0, func + (3 << 30)), Err(Refusal::TooFar { .. })));
    assert!(out_of_line(&code, func, 14, far).is_err());
}

#[test]
fn entries_patched_over_their_first_byte_keep_it_in_their_jump() {
    // 0: mov rdx,rsi; 3: mov eax,1; 8: ret (the first instruction writes an argument).
    let code = [0x48, 0x89, 0xf2, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.landing), (0, 8, Some(3)));
    // The jump's displacement keeps the first instruction's other bytes, then the
    // landing int3; its high byte is free.
    assert_eq!(p.forced_displacement(), Some([Some(0x89), Some(0xf2), Some(0xcc), None]));
    let t = FUNC + 5 + 0x00cc_f289;
    let bytes = p.patch_bytes(t).unwrap();
    assert_eq!(bytes, [0xe9, 0x89, 0xf2, 0xcc, 0x00, 0xcc, 0xcc, 0xcc]);
    assert_eq!(p.patch_bytes(t + 1), None, "a displacement without those bytes");
    // Another tracer's uprobe gone, the kernel puts the file's first byte back: the
    // first instruction is whole, and the landing follows it.
    let mut after = bytes.clone();
    after[0] = code[0];
    assert_eq!((&after[..3], after[3]), (&code[..3], 0xcc));
    // The trampoline's copy of the code after it starts 3 bytes into the relocated code.
    let (after, at) = p.relocate_after_landing(FAR).unwrap();
    assert_eq!((after, at), (code[..8].to_vec(), Some(3)));

    // 5 bytes and more: the displacement is the first instruction's bytes, the next
    // instruction is displaced too, and the landing is its first byte.
    // 0: mov edi,0x11223344; 5: mov eax,1; 10: ret
    let code = [0xbf, 0x44, 0x33, 0x22, 0x11, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.landing), (0, 10, Some(5)));
    assert_eq!(p.forced_displacement(), Some([Some(0x44), Some(0x33), Some(0x22), Some(0x11)]));
    let bytes = p.patch_bytes(FUNC + 5 + 0x1122_3344).unwrap();
    assert_eq!(bytes, [0xe9, 0x44, 0x33, 0x22, 0x11, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc]);
    // 0: lea rdi,[rip+0x100]; 7: mov eax,1; 12: ret: the bytes past the jump are the
    // first instruction's own.
    let code = [0x48, 0x8d, 0x3d, 0x00, 0x01, 0x00, 0x00, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.landing), (0, 12, Some(7)));
    let bytes = p.patch_bytes(FUNC + 5 + 0x0100_3d8d).unwrap();
    assert_eq!(bytes[..8], [0xe9, 0x8d, 0x3d, 0x00, 0x01, 0x00, 0x00, 0xcc]);
    check_plan(&code, FUNC, &p, FUNC + 5 + 0x0100_3d8d);
    // A first instruction that never falls through needs no landing: a tail jump.
    // 0: jmp +0x20 (out of the function); 5: ret
    let code = [0xe9, 0x20, 0x00, 0x00, 0x00, 0xc3];
    let p = plan(&code, FUNC, 0, SiteKind::Entry).unwrap();
    assert_eq!((p.start, p.end, p.landing), (0, 5, None));
    // Entries patched after their first instruction keep all of its bytes: nothing forced.
    let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc9, 0xc3];
    assert_eq!(plan(&code, FUNC, 0, SiteKind::Entry).unwrap().forced_displacement(), None);
}
