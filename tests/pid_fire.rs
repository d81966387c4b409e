//! Issue 4 end to end: pid probes firing in real processes, on each backend,
//! with exact counts, arguments, return values, strings, stacks and threads.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

mod util;

use util::driven::{Driven, Ready};
use util::{bpf_gate, fixture, pid_backends, run_args, stdout, wait_mapped, Backend, Guard};

pid_backends!(
    entry_count_and_sum_are_exact,
    return_probes_give_site_offsets_and_values,
    every_instruction_of_a_straight_function_fires_exactly,
    copyinstr_shows_exact_strings_of_a_short_lived_process,
    copyinstr_reads_strings_on_pages_never_touched,
    copyinstr_keys_counted_at_the_firing_read_pages_never_touched,
    copyinstr_of_a_pointer_saved_at_entry_reads_it_before_the_process_ends,
    copyin_shows_buffers_as_they_were_at_each_call,
    pointers_saved_at_entry_are_read_at_the_return,
    reads_at_computed_addresses_are_made_at_the_firing,
    curpsinfo_is_what_the_process_had_at_the_firing,
    an_entry_and_its_return_armed_differently_are_seen_in_order,
    ustack_walks_a_chain_without_frame_pointers,
    ustack_of_a_libc_probe_starts_in_libc,
    threads_are_counted_exactly,
    only_the_traced_process_is_counted,
    a_grabbed_process_finishes_untouched_after_sigint_and_sigterm,
    a_stripped_pie_is_probed_at_its_addresses,
);

/// The lines of printed aggregation entries, split in whitespace-separated fields.
fn agg_rows(text: &str) -> Vec<Vec<String>> {
    text.lines().map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>()).filter(|f| !f.is_empty()).collect()
}

fn entry_count_and_sum_are_exact(backend: Backend) {
    let n = 5000u64;
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::target:entry { @ = count(); @s = sum(arg1); }",
        "-c",
        &format!("{} {n}", fixture("fixture")),
    ]) else {
        return;
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    let nums: Vec<u64> = agg_rows(&text).iter().filter(|r| r.len() == 1).filter_map(|r| r[0].parse().ok()).collect();
    // target(i, 2*i) for i in 0..n: count n, sum of arg1 = n(n-1).
    assert_eq!(nums, vec![n, n * (n - 1)], "{text}");
}

/// `objdump -d` of one function bounded by its symbol size: (offsets of every
/// instruction, offsets of its `ret`s).
fn disassemble(binary: &str, func: &str) -> Option<(Vec<u64>, Vec<u64>)> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn", binary]).output().ok()?;
    let nm = Command::new("nm").args(["-S", "--defined-only", binary]).output().ok()?;
    let size = String::from_utf8_lossy(&nm.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 4 && f[3] == func).then(|| u64::from_str_radix(f[1], 16).ok()).flatten()
    })?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let header = format!("<{func}>:");
    let mut lines = text.lines().skip_while(|l| !l.ends_with(&header));
    let start = u64::from_str_radix(lines.next()?.split_whitespace().next()?, 16).ok()?;
    let (mut insns, mut rets) = (Vec::new(), Vec::new());
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let Some((a, rest)) = l.trim().split_once(':') else { continue };
        let Ok(a) = u64::from_str_radix(a, 16) else { continue };
        if a - start >= size {
            break;
        }
        insns.push(a - start);
        if rest.trim_start().starts_with("ret") {
            rets.push(a - start);
        }
    }
    Some((insns, rets))
}

fn return_probes_give_site_offsets_and_values(backend: Backend) {
    let Some((_, rets)) = disassemble(&fixture("fixture"), "classify") else {
        println!("skipped: objdump or nm is not installed");
        return;
    };
    // classify(i - n/2) for i in 0..10: five negative (-1), one zero (0), four positive (1).
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::classify:return { @[arg0, arg1] = count(); }",
        "-c",
        &format!("{} 10", fixture("fixture")),
    ]) else {
        return;
    };
    let rows: Vec<Vec<String>> = agg_rows(&stdout(&out)).into_iter().filter(|r| r.len() == 3).collect();
    let mut got: Vec<(u64, i64, u64)> =
        rows.iter().map(|r| (r[0].parse().unwrap(), r[1].parse::<i64>().unwrap(), r[2].parse().unwrap())).collect();
    got.sort_unstable();
    let mut offs: Vec<u64> = got.iter().map(|g| g.0).collect();
    offs.sort_unstable();
    let mut want_offs = rets.clone();
    want_offs.sort_unstable();
    assert_eq!(offs, want_offs, "each return site fired: {got:?}");
    // The returned int sits in eax; arg1 is the whole rax, -1 zero-extended.
    let mut by_value: Vec<(i64, u64)> = got.iter().map(|g| (g.1, g.2)).collect();
    by_value.sort_unstable();
    assert_eq!(by_value, vec![(0, 1), (1, 4), (0xffff_ffff, 5)]);
}

fn every_instruction_of_a_straight_function_fires_exactly(backend: Backend) {
    let Some((insns, _)) = disassemble(&fixture("probes"), "work") else {
        println!("skipped: objdump or nm is not installed");
        return;
    };
    let n = 300u64;
    // work() has no branches: every instruction runs once per call.
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::work: { @[probename] = count(); }",
        "-c",
        &format!("{} spin {n} 0", fixture("probes")),
    ]) else {
        return;
    };
    let rows: Vec<Vec<String>> = agg_rows(&stdout(&out)).into_iter().filter(|r| r.len() == 2).collect();
    for r in &rows {
        assert_eq!(r[1].parse::<u64>().unwrap(), n, "probe {} fired {} times", r[0], r[1]);
    }
    let mut names: Vec<String> = rows.iter().map(|r| r[0].clone()).collect();
    names.sort();
    let mut want: Vec<String> =
        insns.iter().map(|o| format!("{o:x}")).chain(["entry".into(), "return".into()]).collect();
    want.sort();
    assert_eq!(names, want);
    // A single offset probe.
    let second = format!("{:x}", insns[1]);
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        &format!("pid$target::work:{second} {{ @ = count(); }}"),
        "-c",
        &format!("{} spin {n} 0", fixture("probes")),
    ]) else {
        return;
    };
    assert!(stdout(&out).lines().any(|l| l.trim() == n.to_string()), "{}", stdout(&out));
}

fn copyinstr_shows_exact_strings_of_a_short_lived_process(backend: Backend) {
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::fx_open:entry { @[copyinstr(arg0), arg1] = count(); }",
        "-c",
        &format!("{} open 40", fixture("probes")),
    ]) else {
        return;
    };
    let text = stdout(&out);
    // Aggregation rows only, not the fixture's own "open 40 sink=…" line.
    let rows: Vec<Vec<String>> = agg_rows(&text).into_iter().filter(|r| r.len() == 3 && r[0] != "open").collect();
    let got: Vec<(String, String, String)> = rows.iter().map(|r| (r[0].clone(), r[1].clone(), r[2].clone())).collect();
    let want = [("/etc/passwd", "0"), ("/tmp/udtrace-fixture", "1"), ("relative/name", "2"), ("x", "3")];
    assert_eq!(got.len(), 4, "{text}");
    for (s, flag) in want {
        assert!(got.contains(&(s.to_string(), flag.to_string(), "10".to_string())), "{s}: {text}");
    }
}

fn copyinstr_of_a_pointer_saved_at_entry_reads_it_before_the_process_ends(backend: Backend) {
    // The pointer kept at entry, its string read at return, through a global variable
    // (the firings keep `self->` pointers, not globals): the string is read from the
    // process when the record is consumed, and the process exits right after its last
    // call. Every firing was consumed after its memory had gone ("invalid address");
    // its exit now waits for them.
    let prog = "pid$target::fx_open:entry { p = arg0; } \
                pid$target::fx_open:return /p/ { @[copyinstr(p)] = count(); p = 0; }";
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", &format!("{} open 40", fixture("probes"))]) else {
        return;
    };
    let (text, err) = (stdout(&out), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success() && !err.contains("invalid address"), "{text}\n{err}");
    let mut rows: Vec<Vec<String>> = agg_rows(&text).into_iter().filter(|r| r.len() == 2).collect();
    rows.sort();
    let want: Vec<Vec<String>> = ["/etc/passwd", "/tmp/udtrace-fixture", "relative/name", "x"]
        .iter()
        .map(|s| vec![s.to_string(), "10".to_string()])
        .collect();
    assert_eq!(rows, want, "{text}\n{err}");
}

fn copyinstr_reads_strings_on_pages_never_touched(backend: Backend) {
    // coldstr.c: each string is alone on a page nothing has read yet; bare() is a
    // uprobe on either backend (no patch fits a lone `ret`), name() is patched
    // in-process by default. A read that cannot fault the page in lost the first of
    // each (DTrace's "invalid address"). The string that goes on into a second page
    // is read whole (the kernel maps neighbouring cached pages of the file with the
    // first fault; the program's second fault-in is for a page that is not cached).
    let prog = "pid$target::bare:entry, pid$target::name:entry { printf(\"%s %s\\n\", probefunc, copyinstr(arg0)); }";
    let want =
        ["bare alpha", "bare beta", "bare gamma", "bare spanning-two-pages", "name delta", "name epsilon", "name zeta"];
    assert_firings_read_at_the_call(backend, prog, &fixture("coldstr"), &want);
}

fn copyinstr_keys_counted_at_the_firing_read_pages_never_touched(backend: Backend) {
    // The same strings as aggregation keys, which the firing keeps (docs/firing.md): a
    // BPF read that cannot fault the page in took it for a fault, and the consumer,
    // whose later read succeeded, could not add the firing to the firing's rows: it
    // was lost, silently (bare()'s keys, a uprobe on either backend).
    let prog = "pid$target::bare:entry, pid$target::name:entry { @[probefunc, copyinstr(arg0)] = count(); } \
                END { printa(\"%s %s %@d\\n\", @); }";
    let want = [
        "bare alpha 1",
        "bare beta 1",
        "bare gamma 1",
        "bare spanning-two-pages 1",
        "name delta 1",
        "name epsilon 1",
        "name zeta 1",
    ];
    assert_firings_read_at_the_call(backend, prog, &fixture("coldstr"), &want);
}

fn pointers_saved_at_entry_are_read_at_the_return(backend: Backend) {
    // DTrace's idiom once more, where a read when the record is consumed cannot be
    // right: changebuf overwrites each struct and string right after its call, unmaps
    // the page, and execs /bin/true at the end (the image whose memory the pointers
    // name is gone, and no exit waits for it). The addresses kept at entry are kept by
    // the firing too, and the return's firing reads them. bare() is one site for its
    // entry and return (a lone `ret`): the pointer stored there is the one read.
    // measured()'s entry cannot be patched in-process, its return can: the pointer
    // kept at a breakpoint is found by the trampoline (a uprobe there would keep it
    // where the trampoline does not look).
    let prog = "pid$target::point:entry, pid$target::named:entry, pid$target::bare:entry { self->p = arg0; } \
                pid$target::point:return, pid$target::bare:return /self->p/ { \
                printf(\"%s %d %d\\n\", probefunc, *(int *)copyin(self->p, 4), ((int *)copyin(self->p, 8))[1]); self->p = 0; } \
                pid$target::named:return /self->p/ { printf(\"%s %s\\n\", probefunc, copyinstr(self->p)); self->p = 0; } \
                pid$target::measured:entry { self->m = arg0; } \
                pid$target::measured:return /self->m/ { printf(\"%s %s\\n\", probefunc, copyinstr(self->m)); self->m = 0; }";
    let want = [
        "bare 100 1000",
        "bare 200 2000",
        "bare 300 3000",
        "measured name-1",
        "measured name-2",
        "measured name-3",
        "named name-1",
        "named name-2",
        "named name-3",
        "point 1 10",
        "point 2 20",
        "point 3 30",
        "point 4 40",
    ];
    let (_dir, exe) = changebuf(backend);
    assert_firings_read_at_the_call(backend, prog, &format!("{exe} exec"), &want);
}

fn reads_at_computed_addresses_are_made_at_the_firing(backend: Backend) {
    // changebuf again: a struct's pointer member and the string it points to (through
    // a clause-local variable), a field at an offset, the same through a pointer
    // saved at entry, and bytes whose count is an argument, each changed right after
    // its call and gone by an exec. The firing computes each address (a chain of
    // reads) and captures what it reads on the way.
    let prog = "struct label { int id; char *name; }; \
                pid$target::labelled:entry { self->l = arg0; \
                this->l = (struct label *)copyin(arg0, sizeof (struct label)); \
                printf(\"%s %d %s\\n\", probefunc, this->l->id, copyinstr((uintptr_t)this->l->name)); } \
                pid$target::labelled:return /self->l/ { printf(\"return %s\\n\", \
                copyinstr((uintptr_t)((struct label *)copyin(self->l, sizeof (struct label)))->name)); self->l = 0; } \
                pid$target::point:entry, pid$target::bare:entry { printf(\"%s %d\\n\", probefunc, *(int *)copyin(arg0 + 4, 4)); } \
                pid$target::named:entry { printf(\"%s %s\\n\", probefunc, copyinstr(arg0 + 5)); } \
                pid$target::sized:entry { printf(\"%s %s\\n\", probefunc, stringof(copyin(arg0, arg1))); }";
    let want = [
        "bare 1000",
        "bare 2000",
        "bare 3000",
        "labelled 1 label-1",
        "labelled 2 label-2",
        "named 1",
        "named 2",
        "named 3",
        "point 10",
        "point 20",
        "point 30",
        "point 40",
        "return label-1",
        "return label-2",
        "sized name-1",
        "sized name-2",
        "sized name-3",
    ];
    let (_dir, exe) = changebuf(backend);
    assert_firings_read_at_the_call(backend, prog, &format!("{exe} exec"), &want);
}

fn curpsinfo_is_what_the_process_had_at_the_firing(backend: Backend) {
    // changebuf retitle rewrites its arguments before each named() call, as servers
    // rename their workers: a uprobe's record holds the task's data (the argument
    // strings included) as the kernel had them at the call, a trampoline's the
    // argument strings as they were then, not as /proc showed them earlier.
    // It drops its privileges and leads a process group of its own after its point()
    // calls: uid, gid and the group are the kernel's then too (read by the process
    // itself in-process).
    let prog = "pid$target::named:entry { printf(\"%s|%s|%d|%d\\n\", probefunc, curpsinfo->pr_psargs, \
                curpsinfo->pr_pid == pid && curpsinfo->pr_ppid == ppid, curlwpsinfo->pr_lwpid == tid); } \
                pid$target::point:entry, pid$target::named:entry { printf(\"ids %s %d %d %d %d %d\\n\", probefunc, \
                uid, gid, curpsinfo->pr_euid, curpsinfo->pr_egid, curpsinfo->pr_pgid == pid); }";
    if !util::is_root() {
        println!("skipped: dropping privileges needs root");
        return;
    }
    // A short path: pr_psargs holds 80 bytes.
    let dir = util::TempDir::new(if matches!(backend, Backend::Uprobes) { "cps-u" } else { "cps-i" });
    let exe = dir.path().join("changebuf").display().to_string();
    util::copy_fixture("changebuf", std::path::Path::new(&exe));
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", &format!("{exe} dropuid retitle")]) else {
        return;
    };
    let (text, err) = (stdout(&out), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{text}\n{err}");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("named|")).collect();
    let want: Vec<String> = (1..=3).map(|i| format!("named|{exe} dropuid title-{i}|1|1")).collect();
    assert_eq!(lines, want, "{text}\n{err}");
    let mut ids: Vec<&str> = text.lines().filter(|l| l.starts_with("ids ")).collect();
    ids.dedup();
    assert_eq!(ids, ["ids point 0 0 0 0 0", "ids named 65534 65534 65534 65534 1"], "{text}\n{err}");
}

fn an_entry_and_its_return_armed_differently_are_seen_in_order(backend: Backend) {
    // measured()'s entry cannot be patched in-process and its return can: in-process,
    // its entries are uprobes (the fallback's ring) and its returns trampolines (the
    // process's ring). DTrace's latency idiom needs each entry before its return; the
    // two rings were consumed one after the other, and most returns found
    // `self->ts` stored by a later entry, or cleared.
    let prog = "pid$target::measured:entry { self->ts = timestamp; } \
                pid$target::measured:return /self->ts/ { @n = count(); @late = sum(timestamp > self->ts); self->ts = 0; } \
                END { printa(\"n %@d late %@d\\n\", @n, @late); }";
    let (_dir, exe) = changebuf(backend);
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", &format!("{exe} loop")]) else {
        return;
    };
    let (text, err) = (stdout(&out), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{text}\n{err}");
    assert!(text.contains("n 20003 late 20003\n"), "{text}\n{err}");
}

/// changebuf copied for one test on one backend: the two backends' variants of a test
/// run at once, and a `-x uprobes` session's uprobes on a file go into every process
/// that maps it after they are armed, where they take the hits of the other session's
/// breakpoints at the same sites (README, "Differences from DTrace"). The directory
/// goes when the test ends.
fn changebuf(backend: Backend) -> (util::TempDir, String) {
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let which = if matches!(backend, Backend::Uprobes) { "u" } else { "i" };
    let dir = util::TempDir::new(&format!("changebuf-{which}{n}"));
    let exe = dir.path().join("changebuf");
    util::copy_fixture("changebuf", &exe);
    let exe = exe.display().to_string();
    (dir, exe)
}

/// Runs `prog` on `cmd`, which must exit 0 with no read failing, and compares
/// the output lines whose first word is that of a line of `want` with `want`, sorted
/// (two backends' records are each in order, not interleaved by time).
fn assert_firings_read_at_the_call(backend: Backend, prog: &str, cmd: &str, want: &[&str]) {
    let Some(out) = backend.traced(&["-q", "-n", prog, "-c", cmd]) else { return };
    let (text, err) = (stdout(&out), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success() && !err.contains("invalid address"), "{text}\n{err}");
    let heads: Vec<&str> = want.iter().filter_map(|w| w.split(' ').next()).collect();
    let mut lines: Vec<&str> = text.lines().filter(|l| heads.iter().any(|h| l.split(' ').next() == Some(h))).collect();
    lines.sort_unstable();
    assert_eq!(lines, want, "{text}\n{err}");
}

fn copyin_shows_buffers_as_they_were_at_each_call(backend: Backend) {
    // changebuf.c: each struct is overwritten right after the call, the mmap'd one
    // unmapped after the last, and the process exits at once: copyin() read when the
    // record is consumed saw -1s or a process that was gone. point() is patched
    // in-process by default; bare() is a uprobe on either backend, and its structs are
    // on pages never touched before the call (the read at the firing faults them in).
    // Both clauses read arg0: one capture of 8 bytes serves the 4-byte copyin too.
    let prog = "pid$target::point:entry, pid$target::bare:entry { \
                printf(\"%s %d %d\\n\", probefunc, *(int *)copyin(arg0, 4), ((int *)copyin(arg0, 8))[1]); }";
    let want =
        ["bare 100 1000", "bare 200 2000", "bare 300 3000", "point 1 10", "point 2 20", "point 3 30", "point 4 40"];
    let (_dir, exe) = changebuf(backend);
    assert_firings_read_at_the_call(backend, prog, &exe, &want);
}

fn ustack_walks_a_chain_without_frame_pointers(backend: Backend) {
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::chain_c:entry { @[ustack()] = count(); }",
        "-c",
        &format!("{} chain 7", fixture("probes")),
    ]) else {
        return;
    };
    let text = stdout(&out);
    let frames: Vec<&str> = text.lines().map(str::trim).filter(|l| l.contains('`')).collect();
    assert!(frames.len() >= 4, "{text}");
    assert_eq!(frames[0], "probes`chain_c");
    assert!(frames[1].starts_with("probes`chain_b+0x"), "{text}");
    assert!(frames[2].starts_with("probes`chain_a+0x"), "{text}");
    assert!(frames[3].starts_with("probes`main+0x"), "{text}");
    assert!(frames.iter().any(|f| f.starts_with("libc.so.6`")), "into libc's start code: {text}");
    assert!(text.lines().any(|l| l.trim() == "7"), "{text}");
}

fn ustack_of_a_libc_probe_starts_in_libc(backend: Backend) {
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target:libc:nanosleep:entry { @[ustack(2)] = count(); }",
        "-c",
        &format!("{} spin 3 1", fixture("probes")),
    ]) else {
        return;
    };
    let text = stdout(&out);
    let frames: Vec<&str> = text.lines().map(str::trim).filter(|l| l.contains('`')).collect();
    assert_eq!(frames, ["libc.so.6`nanosleep", frames[1]], "{text}");
    assert!(frames[1].starts_with("probes`main+0x"), "{text}");
}

fn threads_are_counted_exactly(backend: Backend) {
    let m = 20000u64;
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::thr_work:entry { @ = count(); }",
        "-c",
        &format!("{} threads {m}", fixture("probes")),
    ]) else {
        return;
    };
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.trim() == (4 * m).to_string()), "{text}");
}

fn only_the_traced_process_is_counted(backend: Backend) {
    // The same binary runs untraced alongside, calling work() 500 times.
    let mut other = Guard::spawn(Command::new(fixture("probes")).args(["spin", "500", "1"]).stdout(Stdio::null()));
    let Some(out) = backend.traced(&[
        "-q",
        "-n",
        "pid$target::work:entry { @ = count(); }",
        "-c",
        &format!("{} spin 200 1", fixture("probes")),
    ]) else {
        return;
    };
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.trim() == "200"), "{text}");
    let _ = other.child().kill();
}

fn a_grabbed_process_finishes_untouched_after_sigint_and_sigterm(backend: Backend) {
    for sig in ["-INT", "-TERM"] {
        let untraced =
            Command::new(fixture("probes")).args(["wait", "1000"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn();
        let mut untraced = Guard(Some(untraced.expect("spawn")));
        untraced.child().stdin.take().expect("stdin").write_all(b"go\n").expect("write");
        let expected = untraced.take().wait_with_output().expect("untraced");

        let mut target = Guard::spawn(
            Command::new(fixture("probes")).args(["wait", "1000"]).stdin(Stdio::piped()).stdout(Stdio::piped()),
        );
        let pid = target.child().id().to_string();
        wait_mapped(&pid, "libc.so.6");
        let mut tracer =
            Guard::spawn(&mut backend.command(&["-q", "-n", "pid$target::work:entry { @ = count(); }", "-p", &pid]));
        // Let it arm, then stop it mid-trace.
        std::thread::sleep(Duration::from_millis(700));
        Command::new("kill").args([sig, &tracer.child().id().to_string()]).status().expect("kill");
        let out = tracer.take().wait_with_output().expect("udtrace exits");
        if bpf_gate(&out).is_none() {
            return;
        }
        assert!(out.status.success(), "{sig}: {}", String::from_utf8_lossy(&out.stderr));
        // The process was left running, untouched: it completes as an untraced run.
        target.child().stdin.take().expect("stdin").write_all(b"go\n").expect("write");
        let mut child = target.take();
        let mut text = String::new();
        child.stdout.take().expect("stdout").read_to_string(&mut text).expect("read");
        let status = child.wait().expect("wait");
        assert_eq!(text.as_bytes(), expected.stdout, "{sig}");
        assert_eq!(status.code(), expected.status.code(), "{sig}");
    }
}

/// The address of `func` in `binary` as `nm` prints it.
fn nm_address(binary: &str, func: &str) -> u64 {
    let nm = Command::new("nm").arg(binary).output().expect("nm");
    String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == func).then(|| u64::from_str_radix(f[0], 16).ok()).flatten()
        })
        .unwrap_or_else(|| panic!("{func} in nm {binary}"))
}

/// Where the executable `name` of process `pid` is mapped from its file's start.
fn image_base(pid: &str, name: &str) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    maps.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 6 && f[2] == "00000000" && f[5].ends_with(name))
                .then(|| u64::from_str_radix(f[0].split('-').next()?, 16).ok())
                .flatten()
        })
        .expect("the executable's first mapping")
}

/// A PIE stripped of its symbols has functions with no name: `pid$target:a.out:-:ADDR`
/// names one by its address in the process, or by its file's, as nm and objdump print
/// it (the address does not change from run to run). Each fires at that instruction,
/// exactly, and `-l` lists it.
fn a_stripped_pie_is_probed_at_its_addresses(backend: Backend) {
    // classify's address from the build that kept its symbols: strip moves no code.
    let classify = nm_address(&fixture("fixture"), "classify");
    let exe = fixture("fixture-stripped");
    let untraced = Command::new(&exe).arg("200").output().expect("untraced run");
    let program = format!("pid$target:a.out:-:{classify:x} {{ @[probefunc, probename] = count(); }}");
    let Some(out) = backend.traced(&["-q", "-n", &program, "-c", &format!("{exe} 200")]) else { return };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(text.starts_with(&*String::from_utf8_lossy(&untraced.stdout)), "{text}");
    assert_eq!(agg_rows(&text)[1..], [vec!["-".to_string(), format!("{classify:x}"), "200".into()]], "{text}");

    // In a running process, by either address: work() of a stripped `probes`.
    let work = nm_address(&fixture("probes"), "work");
    for by_file in [false, true] {
        let mut target = Driven::start(&[&fixture("probes-stripped"), "wait", "300"]);
        let pid = target.pid().to_string();
        wait_mapped(&pid, "libc.so.6");
        let at = image_base(&pid, "/probes-stripped") + work;
        let addr = format!("{:x}", if by_file { work } else { at });
        let listed = run_args(&["-l", "-n", &format!("pid$target:a.out:-:{addr}"), "-p", &pid]);
        assert_eq!(listed.status, 0, "{}", listed.stderr);
        let rows: Vec<Vec<&str>> = listed.stdout.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows.len(), 1, "{}", listed.stdout);
        assert_eq!(rows[0][1..], [format!("pid{pid}").as_str(), "probes-stripped", "-", &addr]);
        let program =
            format!("BEGIN {{ printf(\"ready\\n\"); }} pid$target:a.out:-:{addr} {{ @[uregs[R_PC]] = count(); }}");
        let Some(tracer) = Ready::start(backend, &["-q", "-n", &program, "-p", &pid]) else { return };
        target.send("go\n");
        assert_eq!(target.finish(), ("wait 300 sink=44850\n".to_string(), Some(0)));
        let (status, text, err) = tracer.finish();
        assert!(status.success(), "{err}");
        assert_eq!(agg_rows(&text), [vec![at.to_string(), "300".into()]], "{text}");
    }
}
