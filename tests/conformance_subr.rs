//! Subroutines as Oracle's DTrace runs them (issue 11): alloca() and scratch space
//! with its bounds checks, bcopy()/copyin()/copyinto(), DTrace's prototypes and their
//! messages, the address-formatting subroutines, cleanpath(), getmajor()/getminor(),
//! and what udtrace refuses (kernel objects, writes to the traced process).

mod common;

use common::*;

/// Runs a script that must compile and succeed; returns stdout.
fn script_ok(text: &str) -> String {
    let r = run_script(&["-q"], text);
    r.ok();
    r.stdout
}

/// Runs a script that must fail to compile with `-x errtags`; returns the first line of
/// its message.
fn compile_error(text: &str) -> String {
    let r = run_script(&["-q", "-x", "errtags"], text);
    assert_eq!(r.code, 1, "exit status; stdout: {} stderr: {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("failed to compile script"), "not a compile error: {}", r.stderr);
    r.stderr.clone()
}

/// Runs a one-clause BEGIN body whose fault must reach the ERROR probe (which exits
/// 3); returns stderr.
fn fault(body: &str) -> String {
    let r = run_script(&["-q"], &format!("BEGIN {{ {body} exit(0); }}\nERROR {{ exit(3); }}\n"));
    assert_eq!(r.code, 3, "the fault must fire ERROR; stdout: {} stderr: {}", r.stdout, r.stderr);
    r.stderr
}

#[test]
fn alloca_hands_out_aligned_offsets_from_8() {
    // DTrace's alloca pointers are offsets into scratch space; its first 8 bytes
    // stand for NULL.
    let out = script_ok(
        "BEGIN { a = alloca(1); b = alloca(1); printf(\"%d %d\\n\", (uint64_t)a, (uint64_t)b); \
         printf(\"%d\\n\", alloca(0) == alloca(0)); exit(0); }",
    );
    assert_eq!(out, "8 16\n1\n\n");
}

#[test]
fn scratch_space_starts_empty_in_every_clause() {
    let out = script_ok(
        "BEGIN { s = (char *)alloca(1); *s = 'a'; }\n\
         BEGIN { s2 = (char *)alloca(1); *s2 = 'b'; printf(\"%d %c\\n\", s == s2, *s2); exit(0); }",
    );
    assert_eq!(out, "1 b\n\n");
    // The earlier clause's allocation is gone: reading it faults.
    let r = run_script(
        &["-q"],
        "BEGIN { s = (char *)alloca(1); *s = 'a'; }\nBEGIN { trace(*s); exit(0); }\nERROR { exit(3); }",
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("invalid address (0x8)"), "{}", r.stderr);
}

#[test]
fn scratch_memory_holds_integers_structs_and_strings() {
    let out = script_ok(
        "struct foo { int a; char b; int c; } *ptr;\n\
         BEGIN {\n\
           arr = (int *)alloca(5 * sizeof(int)); arr[3] = 0x42; *arr = 7;\n\
           ptr = alloca(sizeof(struct foo)); ptr->c = 0x43;\n\
           x = (char *)alloca(8); x[0] = 'a'; x[1] = '/'; x[2] = 'b'; x[3] = 0;\n\
           str = (string *)alloca(20); *str = \"abc\";\n\
           printf(\"%x %d %x %s %s %s %d\\n\", arr[3], arr[0], ptr->c, stringof(x), basename(x), *str, strlen(x));\n\
           exit(0);\n\
         }",
    );
    assert_eq!(out, "42 7 43 a/b b abc 3\n\n");
}

#[test]
fn scratch_accesses_outside_the_allocation_fault() {
    for body in [
        "s = (char *)alloca(15); trace(s[-1]);",
        "s = (char *)alloca(15); trace(s[16]);",
        "s = (int *)alloca(10); trace(s[-1]);",
        "s = (char *)alloca(15); s[-1] = 65;",
        "s = (char *)alloca(15); s[16] = 65;",
        "s = (char *)alloca(10); s = NULL; *s = 4;",
    ] {
        let err = fault(body);
        assert!(err.contains("invalid address ("), "{body}: {err}");
    }
    // An access that starts inside but runs past the end is a bad size.
    let err = fault("a = \"01\"; s = (char *)alloca(16); bcopy(a, &s[15], 2);");
    assert!(err.contains("invalid size (0x2)"), "{err}");
}

#[test]
fn alloca_beyond_the_scratch_size_is_refused() {
    let err = compile_error("#pragma D option scratchsize=1024\nBEGIN { ptr = alloca(1025); exit(1); }");
    assert!(err.contains("[D_ALLOCA_SIZE] line 2: alloca(1025) size larger than scratchsize 1024"), "{err}");
    let err = compile_error("BEGIN { ptr = alloca(10); ptr = alloca(0xffffffffffffffff); exit(0); }");
    assert!(err.contains("alloca(18446744073709551615) size larger than scratchsize 256"), "{err}");
    // copyin() allocates its result in scratch space too.
    let err = compile_error("#pragma D option scratchsize=64\nBEGIN { copyin(0, 65); exit(0); }");
    assert!(err.contains("[D_ALLOCA_SIZE]"), "{err}");
    // A size computed at run time fails when the clause runs.
    let err = fault("sz = 300; alloca(sz);");
    assert!(err.contains("out of scratch space"), "{err}");
}

#[test]
fn bcopy_copies_into_scratch_space() {
    let out = script_ok(
        "BEGIN {\n\
           src = (char *)alloca(8); dst = (char *)alloca(8);\n\
           src[0] = 'a'; src[1] = 'b'; src[2] = 'c'; src[3] = 'd'; src[4] = 'e'; src[5] = 'f'; src[6] = 'g'; src[7] = 'h';\n\
           dst[0] = dst[1] = dst[2] = dst[3] = dst[4] = dst[5] = dst[6] = dst[7] = '.';\n\
           n = 2;\n\
           bcopy((void *)(src + (n++)), (void *)(dst + (n++)), (n++));\n\
           printf(\"%c%c%c%c%c%c%c%c\\n\", dst[0], dst[1], dst[2], dst[3], dst[4], dst[5], dst[6], dst[7]);\n\
           s = alloca(10); bcopy(probename, s, 5); printf(\"%s\\n\", (string)s);\n\
           exit(0);\n\
         }",
    );
    assert_eq!(out, "...cdef.\nBEGIN\n\n");
    for (body, what) in [
        ("bcopy(\"bad news\", alloca(1), -1);", "invalid size"),
        ("d = alloca(20); s = alloca(10); bcopy(s, d, 20);", "invalid size (0x14)"),
        ("ptr = alloca(sizeof(int)); bcopy((void *)NULL, ptr, sizeof(int));", "invalid address (0x0)"),
    ] {
        let err = fault(body);
        assert!(err.contains(what), "{body}: {err}");
    }
}

#[test]
fn copy_destinations_must_be_scratch_space() {
    let err = compile_error("int *ptr;\nBEGIN { bcopy(\"x\", ptr, 1); exit(0); }");
    assert!(
        err.contains(
            "line 2: bcopy( ) argument #2 is incompatible with prototype:\n\tprototype: alloca pointer\n\t argument: non-alloca pointer"
        ),
        "{err}"
    );
    // A string is stored by value: assigning an alloca pointer to one does not make
    // it an alloca pointer.
    let err = compile_error("BEGIN { s = (string)alloca(10); bcopy(probename, s, 5); exit(0); }");
    assert!(err.contains("[D_PROTO_ARG]"), "{err}");
    let err = compile_error("BEGIN { copyinto(1, 2, \"\"); exit(1); }");
    assert!(err.contains("copyinto( ) argument #3 is incompatible with prototype"), "{err}");
}

#[test]
fn copies_from_bad_addresses_fault() {
    for body in ["copyin(0x1234, 8);", "copyin(0, 8);", "ptr = (char *)alloca(256); copyinto(0, 8, ptr);"] {
        let err = fault(body);
        assert!(err.contains("invalid address ("), "{body}: {err}");
    }
    let err = fault("ptr = (char *)alloca(64); copyinto(0x1234, 300, ptr);");
    assert!(err.contains("invalid size"), "{err}");
}

#[test]
fn a_mixed_ternary_cannot_be_stored() {
    let err = compile_error("BEGIN {\n a = (char *) alloca(1);\n a = (a == NULL) ? (char *) 50 : a;\n}");
    assert!(
        err.contains(
            "[D_ALLOCA_INCOMPAT] line 3: ternary conditional with alloca and non-alloca branches cannot be assigned to a variable"
        ),
        "{err}"
    );
    // Traced, it is only a value.
    let out = script_ok("BEGIN { a = (char *) alloca(1); trace((a == NULL) ? (char *) 50 : a); exit(0); }");
    assert_eq!(out, "8\n");
}

#[test]
fn one_variable_cannot_hold_both_kinds_of_pointer() {
    let err = compile_error("BEGIN { a = (char *)alloca(1); }\n\nBEGIN {\n a = NULL;\n a = (char *)arg0;\n}");
    assert!(
        err.contains(
            "[D_ALLOCA_INCOMPAT] line 3: a: cannot reuse the same identifier for both alloca and non-alloca allocations"
        ),
        "{err}"
    );
}

#[test]
fn prototype_messages_are_oracles() {
    for (prog, want) in [
        ("BEGIN { trace(substr(probename, 1, 2, 3)); }", "substr( ) prototype mismatch: 4 args passed, at most 3 expected"),
        ("BEGIN { trace(substr(probename)); }", "substr( ) prototype mismatch: 1 arg passed, at least 2 expected"),
        ("BEGIN { mutex_owned(0, 99); }", "mutex_owned( ) prototype mismatch: 2 args passed, 1 expected"),
        ("BEGIN { ptr = alloca(); }", "alloca( ) prototype mismatch: 0 args passed, 1 expected"),
        ("BEGIN { copyoutstr(\"a\", 1); }", "copyoutstr( ) prototype mismatch: 2 args passed, 3 expected"),
        (
            "BEGIN { trace(substr(10, 1)); }",
            "substr( ) argument #1 is incompatible with prototype:\n\tprototype: char *\n\t argument: int",
        ),
        (
            "BEGIN { progenyof(trace(1)); }",
            "progenyof( ) argument #1 is incompatible with prototype:\n\tprototype: pid_t\n\t argument: void",
        ),
        (
            "BEGIN { mutex_type_adaptive(trace(\"x\")); }",
            "mutex_type_adaptive( ) argument #1 is incompatible with prototype:\n\tprototype: struct mutex *\n\t argument: void",
        ),
        (
            "int *p;\nBEGIN { trace(inet_ntoa6(p)); }",
            "inet_ntoa6( ) argument #1 is incompatible with prototype:\n\tprototype: struct in6_addr *\n\t argument: int *",
        ),
        (
            "BEGIN { n = 0; trace(inet_ntoa6((struct in6_addr *)alloca(16), n)); }",
            "inet_ntoa6( ) argument #2 must be an integer constant",
        ),
        (
            "BEGIN { copyin(1, \"2\"); }",
            "copyin( ) argument #2 is incompatible with prototype:\n\tprototype: size_t\n\t argument: string",
        ),
    ] {
        let err = compile_error(prog);
        assert!(err.contains(want), "{prog}: {err}");
    }
}

#[test]
fn kernel_objects_and_process_writes_are_refused_after_the_prototype_check() {
    let err = compile_error("BEGIN { mutex_owned((void *)0); }");
    assert!(err.contains("mutex_owned( ) inspects kernel objects"), "{err}");
    let err = compile_error("#pragma D option destructive\nBEGIN { copyout((void *)3, 0, 5); }");
    assert!(err.contains("copyout( ) cannot write to the traced process"), "{err}");
}

#[test]
fn addresses_print_as_dtrace_prints_them() {
    let out = script_ok(
        "ipaddr_t *ip4;\nstruct in6_addr *ip6;\nstruct in_addr *in4;\n\
         BEGIN {\n\
           ip4 = alloca(sizeof(ipaddr_t)); *ip4 = htonl(0xc0a80117);\n\
           in4 = alloca(sizeof(struct in_addr)); in4->s_addr = htonl(0x7f000001);\n\
           ip6 = alloca(sizeof(struct in6_addr));\n\
           ip6->in6_u.u6_addr8[0] = 0xfe; ip6->in6_u.u6_addr8[1] = 0x80; ip6->in6_u.u6_addr8[15] = 0xc8;\n\
           printf(\"%s %s %s %s\\n\", inet_ntoa(ip4), inet_ntop(AF_INET, in4), inet_ntoa6(ip6), inet_ntop(AF_INET6, ip6));\n\
           ip6->in6_u.u6_addr8[0] = 0; ip6->in6_u.u6_addr8[1] = 0;\n\
           ip6->in6_u.u6_addr8[12] = 0x7f; ip6->in6_u.u6_addr8[15] = 1;\n\
           printf(\"%s %s %s\\n\", inet_ntoa6(ip6), inet_ntoa6(ip6, 1), inet_ntop(AF_INET6, ip6));\n\
           mac = (uint64_t *)alloca(sizeof(uint64_t)); *mac = htonll(0x020820ac040e << 16);\n\
           printf(\"%s\\n\", link_ntop(ARPHRD_ETHER, mac));\n\
           exit(0);\n\
         }",
    );
    assert_eq!(
        out,
        "192.168.1.23 127.0.0.1 fe80::c8 fe80::c8\n127.0.0.1 ::127.0.0.1 ::127.0.0.1\n02:08:20:ac:04:0e\n\n"
    );
    let err = fault("this->b = (uint64_t *)alloca(8); trace(link_ntop(-1, this->b));");
    assert!(err.contains("illegal operation"), "{err}");
    let err = fault("trace(inet_ntoa6(NULL));");
    assert!(err.contains("invalid address (0x0)"), "{err}");
}

#[test]
fn cleanpath_and_device_numbers() {
    let out = script_ok(
        "BEGIN { printf(\"%s|%s|%s|%s|%s|%s\\n\", cleanpath(\"/foo/bar/../../baz/.//\"), cleanpath(\"./\"), \
         cleanpath(\"a/../..\"), cleanpath(\"/../../\"), cleanpath(\"\"), cleanpath(\"z/a/b/../../././c///d/e\")); \
         printf(\"%x %x\\n\", getmajor(0xabcdef0123456789ll), getminor(0xabcdef0123456789ll)); exit(0); }",
    );
    assert_eq!(out, "/baz|.|..|/||z/c/d/e\n234 56789\n\n");
}

#[test]
fn compound_assignment_of_a_void_pointer_needs_a_sized_left_operand() {
    let err = compile_error("int p;\nBEGIN { p = 1; p -= alloca(10); exit(1); }");
    assert!(err.contains("[D_OP_VFPTR] line 2: operator -= requires left-hand scalar operand of known size"), "{err}");
}

#[test]
fn strings_hold_strsize_characters() {
    let out = script_ok(
        "#pragma D option strsize=7\n\
         BEGIN { x = \"1234567890\"; printf(\"%s|%s|%s|%s|%s|%d\\n\", x, strjoin(\"dtrace\", \"BEGIN\"), lltostr(12345678), \
         lltostr(-1234567), substr(\"1234567890\", 1), strlen(\"123456789\")); exit(0); }",
    );
    // Arguments too are read up to strsize characters.
    assert_eq!(out, "1234567|dtraceB|1234567|-123456|234567|7\n\n");
}

#[test]
fn rawbytes_traces_a_string_record_of_strsize_plus_one_bytes() {
    let out = script_ok("#pragma D option rawbytes\n#pragma D option strsize=5\nBEGIN { trace(strjoin(\"123\", \"abcdefgh\")); exit(0); }");
    assert!(out.contains("0: 31 32 33 61 62 00 "), "{out}");
}

#[test]
fn subroutines_that_find_nothing_return_null() {
    let out = script_ok(
        "BEGIN { s = \"fooeyfoo\"; printf(\"%d %d %d %d %d\\n\", strchr(s, 'a') == NULL, strrchr(s, 'a') != NULL, \
         strstr(s, \"bar\") == NULL, strstr(s, \"ey\") != NULL, strchr(s, 'y') == NULL); exit(0); }",
    );
    assert_eq!(out, "1 0 1 1 0\n\n");
    // Reading the NULL string faults, as in DTrace.
    let err = fault("trace(strstr(\"abc\", \"def\"));");
    assert!(err.contains("invalid address (0x0)"), "{err}");
    let err = fault("strtok(strstr(\"abc\", \"def\"), \"\");");
    assert!(err.contains("invalid address (0x0)"), "{err}");
}

#[test]
fn strtok_state_lasts_one_probe_firing() {
    let out = script_ok(
        "BEGIN { x = \"abcABCdefDEFghi\"; printf(\"%s\\n\", strtok(x, \"cC\")); }\n\
         BEGIN { printf(\"%s\\n\", strtok(NULL, \"fF\")); printf(\"%s\\n\", strtok(NULL, \"\")); \
         printf(\"%d\\n\", strtok(NULL, \"\") == NULL); exit(0); }",
    );
    // The offset stays at the delimiter that ended a token: DTrace does not overwrite it.
    assert_eq!(out, "ab\ncABCde\nfDEFghi\n1\n\n");
    // Nothing to go on with in a new firing, nor with a NULL delimiter.
    let r = run_script(
        &["-q"],
        "BEGIN { trace(strtok(\"abc\", \"x\")); }\ntick-10ms { trace(strtok(NULL, \"x\")); exit(0); }\nERROR { exit(3); }",
    );
    assert_eq!(r.code, 3, "{} {}", r.stdout, r.stderr);
    let err = fault("strtok(\"abc\", NULL);");
    assert!(err.contains("invalid address (0x0)"), "{err}");
}

#[test]
fn kernel_actions_check_their_prototypes_then_are_refused() {
    for (prog, want) in [
        (
            "BEGIN { chill(\"x\"); }",
            "chill( ) argument #1 is incompatible with prototype:\n\tprototype: int\n\t argument: string",
        ),
        ("BEGIN { chill(1, 2, 3); }", "[D_PROTO_LEN] line 1: chill( ) prototype mismatch: 3 args passed, 1 expected"),
        ("BEGIN { panic(\"x\"); }", "panic( ) prototype mismatch: 1 arg passed, 0 expected"),
        ("BEGIN { breakpoint(1, 2); }", "breakpoint( ) prototype mismatch: 2 args passed, 0 expected"),
        (
            "BEGIN { pcap(0, \"a\"); }",
            "pcap( ) argument #2 is incompatible with prototype:\n\tprototype: int\n\t argument: string",
        ),
        ("BEGIN { chill(200); }", "line 1: chill( ) is not available"),
        ("BEGIN { stringof(trace(0)); }", "[D_STRINGOF_TYPE] line 1: cannot apply stringof to a value of type void"),
        ("BEGIN { p -= trace(0); }", "[D_VAR_UNDEF] line 1: p has not yet been declared or assigned"),
    ] {
        let err = compile_error(prog);
        assert!(err.contains(want), "{prog}: {err}");
    }
    // pcap() compiles; in user space there is no packet at any address.
    let err = fault("pcap(0, PCAP_IP);");
    assert!(err.contains("invalid address (0x0)"), "{err}");
}

#[test]
fn ftruncate_empties_the_output_file() {
    let dir = temp_dir();
    let out = dir.join("out.txt");
    let prog =
        "tick-10ms { printf(\"%d\\n\", i++); } tick-10ms /i == 3/ { ftruncate(); } tick-10ms /i == 5/ { exit(0); }";
    let r = udtrace(&["-q", "-o", out.to_str().unwrap(), "-n", prog]);
    r.ok();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "3\n4\n\n");
}

#[test]
fn an_empty_string_is_kept_in_an_associative_array() {
    // Only zero frees a dynamic variable: "" is a string, and an absent element
    // would read as the NULL string.
    let out = script_ok("BEGIN { a[1] = \"\"; self->s = \"\"; printf(\"[%s][%s]\\n\", a[1], self->s); exit(0); }");
    assert_eq!(out, "[][]\n\n");
}

#[test]
fn tracemem_reads_scratch_space() {
    let out = script_ok("BEGIN { x = (char *)alloca(8); x[0] = 0x61; x[1] = 0x62; tracemem(x, 4); exit(0); }");
    assert!(out.contains("0: 61 62 00 00 "), "{out}");
}
