//! The profile provider end to end: `profile-N` samples every CPU in the context of the
//! thread it interrupts. The `busy` fixture spends 75% and 25% of its CPU time in
//! heavy() and light() (its threads too) and reports the CPU time it used, so that the
//! shares, the stacks (unwound without frame pointers) and the number of samples are
//! known. Needs BPF.

mod util;

use std::process::Stdio;

use util::{bin, fixture, stderr, stdout, traced, unprivileged};

/// udtrace's stdout after a successful run; `None` where the kernel refuses BPF.
fn sampled(args: &[&str]) -> Option<String> {
    let out = traced(args)?;
    assert!(out.status.success(), "{}", stderr(&out));
    Some(stdout(&out))
}

fn busy(args: &str) -> String {
    format!("{} {args}", fixture("busy"))
}

/// The CPU time busy reports, in milliseconds.
fn cpu_ms(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("busy: cpu_ms "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no report of busy in {text}"))
}

/// Lines that end in a count (an aggregation's default output, printa("... %@d\n"),
/// folded stacks): the rest of the line, trimmed → count.
fn counts(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim_end().rsplit_once(' ')?;
            Some((k.trim().to_string(), v.parse().ok()?))
        })
        .collect()
}

fn count_of(rows: &[(String, u64)], key: &str) -> u64 {
    rows.iter().filter(|(k, _)| k == key).map(|(_, n)| n).sum()
}

#[test]
fn samples_fall_in_each_function_by_its_share_of_cpu_time() {
    let prog = "profile-997 /pid == $target/ { @[ufunc(arg1)] = count(); }";
    let Some(text) = sampled(&["-q", "-n", prog, "-c", &busy("1500")]) else { return };
    let rows = counts(&text);
    let (heavy, light) = (count_of(&rows, "busy`heavy"), count_of(&rows, "busy`light"));
    let total: u64 = rows.iter().map(|(_, n)| n).sum();
    // At 997 Hz, one sample per ~1 ms of the CPU time the process used.
    let expected = cpu_ms(&text);
    assert!(total * 10 >= expected * 7 && total * 10 <= expected * 13, "{total} samples for {expected} ms:\n{text}");
    assert!((heavy + light) * 10 >= total * 9, "heavy {heavy} + light {light} of {total}:\n{text}");
    let share = heavy as f64 / (heavy + light) as f64;
    assert!((0.68..=0.82).contains(&share), "heavy's share {share:.2}, not 0.75:\n{text}");
}

#[test]
fn user_stacks_reach_main_without_frame_pointers() {
    let prog = "profile-997 /pid == $target/ { @[ustack()] = count(); }";
    let Some(text) = sampled(&["-q", "-x", "stackfmt=folded", "-n", prog, "-c", &busy("1000")]) else { return };
    let rows = counts(&text);
    let total: u64 = rows.iter().map(|(_, n)| n).sum();
    // Folded: root first. In user mode, busy's main calls outer, which calls heavy or light.
    let whole: u64 = rows
        .iter()
        .filter(|(k, _)| k.contains("busy`main;busy`outer;busy`heavy") || k.contains("busy`main;busy`outer;busy`light"))
        .map(|(_, n)| n)
        .sum();
    assert!(total > 200 && whole * 10 >= total * 9, "{whole} of {total} stacks reach main:\n{text}");
    let rooted: u64 = rows.iter().filter(|(k, _)| k.starts_with("busy`_start;")).map(|(_, n)| n).sum();
    assert!(rooted * 10 >= total * 9, "stacks start at the entry point:\n{text}");
}

#[test]
fn threads_share_the_samples_of_the_cpu_time_they_use() {
    // 4 busy threads on a machine of a few CPUs: profile-100 takes 100 samples a
    // second of each CPU, so the process gets one per 10 ms of the CPU time it uses.
    let prog = "profile-100 /pid == $target/ { @t[tid] = count(); @n = count(); } \
                END { printa(\"tid %d %@d\\n\", @t); printa(\"total %@d\\n\", @n); }";
    let Some(text) = sampled(&["-q", "-n", prog, "-c", &busy("1500 4")]) else { return };
    let total = text.lines().find_map(|l| l.strip_prefix("total ")?.parse::<u64>().ok()).expect("total");
    let expected = cpu_ms(&text) / 10;
    assert!(total * 10 >= expected * 7 && total * 10 <= expected * 13, "{total} samples, {expected} expected:\n{text}");
    let threads: Vec<u64> =
        text.lines().filter_map(|l| l.strip_prefix("tid ")?.split_whitespace().nth(1)?.parse().ok()).collect();
    assert_eq!(threads.len(), 4, "samples of 4 threads expected:\n{text}");
    assert!(threads.iter().all(|&n| n * 8 >= total), "each thread should have about a quarter:\n{text}");
}

#[test]
fn arg0_is_the_kernel_pc_and_arg1_the_user_pc() {
    // dd copies a byte at a time: most of its time is in read and write, in the kernel.
    let prog = "profile-997 /pid == $target/ { @[arg0 != 0, arg1 != 0] = count(); } \
                profile-997 /pid == $target && arg0 != 0/ { @k[ufunc(uregs[R_PC])] = count(); } \
                END { printa(\"%d %d %@d\\n\", @); printa(@k); }";
    let cmd = "dd if=/dev/zero of=/dev/null bs=1 count=1000000";
    let Some(text) = sampled(&["-q", "-n", prog, "-c", cmd]) else { return };
    let rows = counts(&text);
    // Exactly one of the two is set, whichever mode the thread was in.
    assert_eq!(count_of(&rows, "1 1") + count_of(&rows, "0 0"), 0, "{text}");
    let kernel = count_of(&rows, "1 0");
    assert!(kernel > 50 && count_of(&rows, "0 1") > 0, "{text}");
    // In the kernel, the user registers are those the system call saved: its PC is in
    // libc's read or write.
    let in_io = count_of(&rows, "libc.so.6`read") + count_of(&rows, "libc.so.6`write");
    assert!(in_io * 10 >= kernel * 9, "{in_io} of {kernel} kernel samples in read/write:\n{text}");
}

#[test]
fn printa_symbolizes_user_pcs_against_the_target() {
    let prog = "profile-1001hz /pid == $target/ { @pc[arg1] = count(); } END { printa(\"%A %@d\\n\", @pc); }";
    let Some(text) = sampled(&["-q", "-n", prog, "-c", &busy("800")]) else { return };
    let heavy: u64 = counts(&text).iter().filter(|(k, _)| k.starts_with("busy`heavy+0x")).map(|(_, n)| n).sum();
    assert!(heavy > 100, "{text}");
}

#[test]
fn other_processes_are_sampled_too() {
    // No predicate: every process on the machine, busy (started by -c) among them, by
    // its name; the session ends at its exit.
    let prog = "profile-997 { @[execname] = count(); } END { printa(\"%s %@d\\n\", @); }";
    let Some(text) = sampled(&["-q", "-n", prog, "-c", &busy("600")]) else { return };
    // One sample per ~1 ms of the CPU time busy used.
    assert!(count_of(&counts(&text), "busy") * 10 >= cpu_ms(&text) * 7, "{text}");
}

#[test]
fn kernel_pcs_name_kernel_functions() {
    let prog = "profile-997 /pid == $target && arg0 != 0/ { @[mod(arg0)] = count(); @f[func(arg0)] = count(); }";
    let cmd = "dd if=/dev/zero of=/dev/null bs=1 count=1000000";
    let Some(text) = sampled(&["-q", "-n", prog, "-c", cmd]) else { return };
    let rows = counts(&text);
    // Printed in declaration order: the modules (vmlinux, nearly all), then functions.
    let vmlinux = count_of(&rows, "vmlinux");
    let named: u64 = rows.iter().filter(|(k, _)| k.starts_with("vmlinux`")).map(|(_, n)| n).sum();
    assert!(vmlinux > 50 && named == vmlinux, "{text}");
}

#[test]
fn without_bpf_profile_probes_fire_in_udtraces_context() {
    // An ordinary user: no BPF, so no sampling of other processes; the probe still
    // fires (as tick does), and one line says why it is not a sample.
    let out = unprivileged(bin())
        .args(["-q", "-n", "profile-97 { @ = count(); } tick-300ms { exit(0); }"])
        .stdin(Stdio::null())
        .output()
        .expect("udtrace");
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    if !err.contains("the kernel refused BPF") {
        println!("skipped: this user has BPF");
        return;
    }
    assert!(
        err.contains("profile probes need BPF to sample other processes: the kernel refused BPF: run as root (or with CAP_BPF and CAP_PERFMON); they fire in udtrace's own context"),
        "{err}"
    );
    assert!(text.trim().parse::<u64>().is_ok_and(|n| n > 0), "{text}");
}

#[test]
fn predicates_on_pid_and_cpu_are_applied_where_samples_are_taken() {
    // `pid == $target && cpu == 0` on every clause: only CPU 0's clock is armed, and
    // its program keeps only the target's samples (the debug line says what was armed).
    let prog = "profile-997 /pid == $target && cpu == 0/ { @[cpu] = count(); }";
    // Pinned to CPU 0 (taskset execs busy: the pid stays), so that a loaded machine
    // cannot keep it off the one CPU sampled.
    let pinned = format!("taskset -c 0 {}", busy("500 2"));
    let mut cmd = util::udtrace_cmd(&["-q", "-n", prog, "-c", &pinned]);
    cmd.env("DTRACE_DEBUG", "1");
    let out = cmd.output().expect("udtrace");
    if util::bpf_gate(&out).is_none() {
        return;
    }
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    let armed = err.lines().find(|l| l.contains("profile probe")).unwrap_or_else(|| panic!("{err}"));
    assert!(armed.contains("on CPUs [0], processes Some(["), "{armed}");
    let rows: Vec<(String, u64)> = counts(&text).into_iter().filter(|(k, _)| !k.starts_with("busy:")).collect();
    assert!(rows.len() == 1 && rows[0].0 == "0" && rows[0].1 > 10, "{text}");
}
