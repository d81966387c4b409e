//! The proc hooks' programs pass the verifier with every section on, and their records
//! say what happened to a child this test runs: its fork, exec (path and new name),
//! first return to user mode, a signal sent to it, and its exit status.

mod common;

use std::process::Command;

use udtrace_bpf::btf::Btf;
use udtrace_bpf::codegen::ProbeMaps;
use udtrace_bpf::proc::{attach_points, proc_program, AttachPoints, SyscallField, TaskOffsets};
use udtrace_bpf::prog::{Program, ProgramKind};
use udtrace_bpf::ringbuf::RingBufReader;
use udtrace_bpf::tracepoint;
use udtrace_record::proc::{hook_of, Hook, ProcFiring, ProcLayout, ProcPlan};

enum Link {
    Raw(#[allow(dead_code)] tracepoint::RawTracepointLink),
    Tp(#[allow(dead_code)] tracepoint::TracepointLink),
}

#[test]
fn proc_hooks_record_a_child_life() {
    if !common::bpf_available("proc hooks") {
        return;
    }
    let btf = Btf::vmlinux().expect("kernel BTF");
    let offsets = TaskOffsets::from_btf(&btf).unwrap_or_else(|e| panic!("{e}"));
    let maps = ProbeMaps::create(1 << 22, 16).unwrap();
    let paths = udtrace_bpf::maps::HashMap::<u32, u64>::create("udtrace_paths", 1024).unwrap();
    let plan = ProcPlan { cur: true, other: true, siginfo: true, faults: true, ancestors: true, string_max: 256 };
    let mut links = Vec::new();
    let mut layouts = Vec::new();
    for hook in Hook::ALL {
        let layout = ProcLayout::new(hook, &plan);
        match attach_points(hook) {
            AttachPoints::Raw(name) => {
                let insns = proc_program(&layout, &offsets, &maps, &paths, None).unwrap();
                let prog = Program::load(ProgramKind::RawTracepoint, "udtrace_proc", &insns)
                    .unwrap_or_else(|e| panic!("{hook:?}: {e}"));
                links.push(Link::Raw(tracepoint::attach_raw(&prog, name).unwrap_or_else(|e| panic!("{hook:?}: {e}"))));
            }
            AttachPoints::Syscalls(names, field) => {
                for name in names {
                    let fmt = tracepoint::format("syscalls", name).unwrap();
                    let f = fmt.field(field).unwrap_or_else(|| panic!("{name} has no {field}"));
                    let insns =
                        proc_program(&layout, &offsets, &maps, &paths, Some(SyscallField { offset: f.offset as i16 }))
                            .unwrap();
                    let prog = Program::load(ProgramKind::Tracepoint, "udtrace_proc", &insns)
                        .unwrap_or_else(|e| panic!("{hook:?}: {e}"));
                    links.push(Link::Tp(tracepoint::attach(&prog, "syscalls", name, 0).unwrap()));
                }
            }
        }
        layouts.push(layout);
    }
    // sh runs `exit 3` after sending itself SIGUSR2, which it ignores by trap.
    let status = Command::new("/bin/sh")
        .args(["-c", "trap '' USR2; kill -USR2 $$; exec /bin/sh -c 'exit 3' xyz"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    drop(links);
    let mut reader = RingBufReader::new(maps.ring().unwrap()).unwrap();
    let mut seen: Vec<ProcFiring> = Vec::new();
    reader.consume(|b| {
        let hook = hook_of(b).expect("proc record");
        let layout = layouts.iter().find(|l| l.hook == hook).unwrap();
        seen.push(layout.parse(b).unwrap());
    });
    let me = std::process::id();
    let fork = seen
        .iter()
        .find(|f| f.hook == Hook::Fork && f.pid == me && f.other.as_ref().is_some_and(|o| o.ppid == me))
        .expect("our fork");
    let child = (fork.a[0] >> 32) as u32;
    let o = fork.other.as_ref().unwrap();
    assert_eq!((o.tgid, o.tid), (child, child));
    assert!(seen.iter().any(|f| f.hook == Hook::Start && f.pid == child && f.tid == child), "the child's start");
    let execs: Vec<&ProcFiring> = seen.iter().filter(|f| f.hook == Hook::ExecEnter && f.pid == child).collect();
    assert_eq!(execs.len(), 2, "two execs: {execs:?}");
    assert_eq!(execs[0].string.as_ref().unwrap().as_deref().unwrap(), b"/bin/sh");
    let done: Vec<&ProcFiring> = seen.iter().filter(|f| f.hook == Hook::ExecDone && f.pid == child).collect();
    assert_eq!(done.len(), 2);
    assert_eq!(done[0].string.as_ref().unwrap().as_deref().unwrap(), b"/bin/sh", "the kernel's copy of the path");
    assert_eq!(done[0].a[0], u64::from(child), "the thread id before the exec");
    let ps = done[1].cur.as_ref().unwrap().psargs.clone().expect("psargs of the new image");
    assert_eq!(ps, b"/bin/sh\0-c\0exit 3\0xyz\0");
    let sig = seen.iter().find(|f| f.hook == Hook::Signal && f.pid == child && f.a[0] == 12).expect("SIGUSR2");
    assert_eq!(sig.a[2], 1, "TRACE_SIGNAL_IGNORED");
    assert_eq!(sig.a[5], 0, "SI_USER");
    assert_eq!(sig.a[4] >> 32, u64::from(child));
    let si = sig.siginfo.unwrap();
    assert_eq!(i32::from_ne_bytes(si[0..4].try_into().unwrap()), 12, "si_signo");
    assert_eq!(sig.ancestors.unwrap()[0], me, "parent first");
    let exit = seen.iter().find(|f| f.hook == Hook::Exit && f.pid == child).expect("exit");
    assert_eq!(exit.a[0], 1, "group dead");
    assert_eq!(exit.a[1], 3 << 8, "exit code");
    assert_eq!(&exit.comm[..3], b"sh\0");
}
