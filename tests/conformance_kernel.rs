//! The kernel's types and memory, as DTrace for Linux has them from the kernel's
//! CTF: here from its BTF (`/sys/kernel/btf/vmlinux`) and from a BPF program run on
//! demand. `curthread` is a `struct task_struct *`.

mod common;
mod util;

use common::*;
use util::{pid_backends, Backend};

pid_backends!(curthread_at_a_pid_firing_is_the_firing_task);

use udtrace_bpf::btf::Btf;

#[test]
fn sizeof_a_kernel_struct_is_the_size_btf_gives_it() {
    let btf = Btf::vmlinux().expect("the kernel's BTF");
    let want = btf.struct_size("task_struct").expect("struct task_struct");
    let out = quiet(
        "BEGIN { printf(\"%d %d\", sizeof (struct task_struct), sizeof (struct vmlinux`task_struct)); exit(0); }",
    );
    assert_eq!(out.trim_end(), format!("{want} {want}"));
}

#[test]
fn kernel_typedefs_are_type_names() {
    let out = quiet("BEGIN { x = (__u8)0x1ff; printf(\"%d %d\", sizeof (__u8), x); exit(0); }");
    assert_eq!(out.trim_end(), "1 255");
}

#[test]
fn kernel_bit_fields_have_the_kernels_layout() {
    // struct iphdr starts with the header length and version nibbles of one byte.
    let out = quiet(
        "struct iphdr iph; BEGIN { iph.ihl = 5; iph.version = 4; \
         printf(\"%d %d %d\", sizeof (iph), iph.ihl, iph.version); exit(0); }",
    );
    assert_eq!(out.trim_end(), "20 5 4");
}

#[test]
fn a_program_definition_is_not_the_kernels_type_of_that_tag() {
    let out = quiet("struct iphdr { int only; }; BEGIN { printf(\"%d\", sizeof (struct iphdr)); exit(0); }");
    assert_eq!(out.trim_end(), "4");
}

#[test]
fn a_tag_no_one_defines_stays_a_forward_declaration() {
    let r = run_script(&[], "BEGIN { p = (struct no_such_kernel_struct *)0; trace(p->x); }");
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(
            "operator -> cannot be applied to a forward declaration: no struct no_such_kernel_struct definition is available"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn curthread_in_begin_is_udtraces_own_task() {
    let out = quiet("BEGIN { printf(\"%d %d %d\", curthread->tgid, pid, curthread->pid == tid); exit(0); }");
    let mut f = out.trim_end().split(' ');
    let (tgid, pid, same) = (f.next(), f.next(), f.next());
    assert_eq!(tgid, pid, "{out}");
    assert_eq!(same, Some("1"), "{out}");
}

#[test]
fn kernel_strings_read_through_curthread() {
    // The task's comm is the executable's name, cut to 15 bytes.
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_udtrace")).file_name().unwrap().to_string_lossy().to_string();
    let want: String = exe.chars().take(15).collect();
    let out = quiet("BEGIN { printf(\"%s|%d\", curthread->comm, probename == curthread->comm); exit(0); }");
    assert_eq!(out.trim_end(), format!("{want}|0"));
}

#[test]
fn kernel_pointers_chase_to_the_pid_namespace_number() {
    let out = quiet("BEGIN { printf(\"%d\", curthread->thread_pid->numbers[0].nr == pid); exit(0); }");
    assert_eq!(out.trim_end(), "1");
}

#[test]
fn a_member_of_a_null_pointer_faults_at_address_zero() {
    let r = udtrace(&[
        "-q",
        "-n",
        "BEGIN { trace(((struct task_struct *)NULL)->pid); } \
         ERROR { printf(\"%d %x\", arg4 == DTRACEFLT_BADADDR, arg5); exit(0); }",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim_end(), "1 0");
    assert!(r.stderr.contains("invalid address (0x0)"), "{}", r.stderr);
}

#[test]
fn the_address_of_a_member_of_null_is_its_offset() {
    let out = quiet("struct s { int a; int b; }; BEGIN { printf(\"%d\", (int)&((struct s *)0)->b); exit(0); }");
    assert_eq!(out.trim_end(), "4");
}

#[test]
fn an_unmapped_kernel_address_is_an_invalid_address() {
    // The guard hole at the start of the kernel half is never mapped.
    let r = udtrace(&["-q", "-n", "BEGIN { trace(*(int *)0xffff800000001000); exit(0); } ERROR { exit(0); }"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("invalid address (0xffff800000001000)"), "{}", r.stderr);
}

#[test]
fn kernel_symbols_this_kernel_does_not_list_keep_dtraces_error() {
    let r = run_script(&["-x", "errtags"], "BEGIN { trace(`no_such_kernel_symbol); exit(0); }");
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("[D_IDENT_UNDEF]"), "{}", r.stderr);
    assert!(r.stderr.contains("`no_such_kernel_symbol"), "{}", r.stderr);
}

#[test]
fn uregs_r_fs_is_the_tasks_fs_base() {
    // DTrace reads uregs[R_DS..R_TRAPNO] from the task's thread_struct.
    let out = quiet("BEGIN { printf(\"%d %d\", uregs[R_FS] == curthread->thread.fsbase, uregs[R_FS] != 0); exit(0); }");
    assert_eq!(out.trim_end(), "1 1");
}

fn curthread_at_a_pid_firing_is_the_firing_task(backend: Backend) {
    let probes = format!("{}/probes chain 1", env!("UDTRACE_FIXTURES"));
    let r = udtrace(&backend.with(&[
        "-q",
        "-n",
        "pid$target:probes:chain_c:entry { printf(\"%d %d %s\\n\", curthread->pid == tid, curthread->tgid == pid, curthread->comm); exit(0); }",
        "-c",
        &probes,
    ]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.lines().any(|l| l == "1 1 probes"), "{}", r.stdout);
}

#[test]
fn print_shows_the_object_member_by_member() {
    let out = quiet(
        "enum eh { A = 0, B = 1 }; struct t { int a; char b[4]; union { __u8 c; __u64 d; } u; \
         struct { void *e; } s; long z; enum eh h; }; \
         BEGIN { p = (struct t *)alloca(sizeof (struct t)); p->a = -1; p->b[0] = 'h'; p->b[1] = 'i'; \
         p->u.d = 258; p->h = B; print(p); exit(0); }",
    );
    let body: Vec<&str> = out.lines().collect();
    assert!(body[0].starts_with("0x") && body[0].ends_with(" = *"), "{out}");
    let pad = |n: usize, s: &str| format!("{}{s}", " ".repeat(n));
    let want = vec![
        pad(44, "(struct t) {"),
        pad(45, ".a = (int)-1,"),
        pad(45, ".b = (char [4]) ["),
        pad(46, "(char)'h',"),
        pad(46, "(char)'i',"),
        pad(45, "],"),
        pad(45, ".u = (union) {"),
        pad(46, ".c = (__u8)2,"),
        pad(46, ".d = (__u64)258,"),
        pad(45, "},"),
        pad(45, ".h = (enum eh)B,"),
        pad(44, "}"),
    ];
    assert_eq!(body[1..].iter().filter(|l| !l.is_empty()).copied().collect::<Vec<_>>(), want, "{out}");
}

#[test]
fn print_stops_at_printsize_and_closes_what_it_opened() {
    let out = quiet(
        "struct t { long a; struct { long b; long c; } s; long d; }; \
         BEGIN { p = (struct t *)alloca(sizeof (struct t)); p->a = 1; p->s.b = 2; p->s.c = 3; p->d = 4; \
         setopt(\"printsize\", \"16\"); print(p); exit(0); }",
    );
    let pad = |n: usize, s: &str| format!("{}{s}", " ".repeat(n));
    let want = vec![
        pad(44, "(struct t) {"),
        pad(45, ".a = (long)1,"),
        pad(45, ".s = (struct) {"),
        pad(46, ".b = (long)2,"),
        pad(46, "..."),
        pad(45, "},"),
        pad(44, "}"),
    ];
    let body: Vec<&str> = out.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert_eq!(body, want, "{out}");
}

#[test]
fn print_of_a_zero_sized_struct_is_d_print_size() {
    let r = run_script(&["-x", "errtags"], "BEGIN { print((struct bpf_raw_tracepoint_args *)alloca(8)); exit(0); }");
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("[D_PRINT_SIZE]"), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "print( ) argument #1 reference has type 'struct bpf_raw_tracepoint_args' with size 0; cannot print( ) it."
        ),
        "{}",
        r.stderr
    );
}
