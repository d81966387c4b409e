//! `-l`: dtrace's probe listing. The table is printed with dtrace.c's format
//! `%5s %10s %17s %33s %s`; `-v` adds dtrace's attribute block per probe.

mod util;

use util::run_args;

const HEADER: &str = "   ID   PROVIDER            MODULE                          FUNCTION NAME\n";

/// One row as dtrace.c's list_probe() prints it.
fn row(id: u32, provider: &str, module: &str, function: &str, name: &str) -> String {
    format!("{id:>5} {provider:>10} {module:>17} {function:>33} {name}\n")
}

fn dtrace_rows() -> String {
    [row(1, "dtrace", "", "", "BEGIN"), row(2, "dtrace", "", "", "END"), row(3, "dtrace", "", "", "ERROR")].concat()
}

/// The profile provider's probes that exist before anyone asks, in creation order.
const PRECREATED: &[&str] = &[
    "profile-97",
    "profile-199",
    "profile-499",
    "profile-997",
    "profile-1999",
    "profile-4001",
    "profile-4999",
    "tick-1",
    "tick-10",
    "tick-100",
    "tick-500",
    "tick-1000",
    "tick-5000",
];

#[test]
fn header_is_dtrace_format() {
    // Guard the constant itself against the format string it stands for.
    assert_eq!(HEADER, format!("{:>5} {:>10} {:>17} {:>33} {}\n", "ID", "PROVIDER", "MODULE", "FUNCTION", "NAME"));
}

#[test]
fn list_begin() {
    let out = run_args(&["-l", "-n", "BEGIN"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{HEADER}{}", row(1, "dtrace", "", "", "BEGIN")));
    assert_eq!(out.stderr, "");
}

#[test]
fn list_provider() {
    let out = run_args(&["-l", "-P", "dtrace"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{HEADER}{}", dtrace_rows()));
    // The same probes by a fully specified glob.
    let out = run_args(&["-l", "-n", "dtrace:::*"]);
    assert_eq!(out.stdout, format!("{HEADER}{}", dtrace_rows()));
}

/// The proc provider's probes, in creation order after the profile provider's.
const PROC: &[(&str, &str)] = &[
    ("kernel_clone", "create"),
    ("do_execveat_common", "exec"),
    ("do_execveat_common", "exec-failure"),
    ("do_execveat_common", "exec-success"),
    ("do_exit", "exit"),
    ("force_sig_fault", "fault"),
    ("kernel_clone", "lwp-create"),
    ("do_exit", "lwp-exit"),
    ("ret_from_fork", "lwp-start"),
    ("sys_rt_sigtimedwait", "signal-clear"),
    ("send_signal_locked", "signal-discard"),
    ("get_signal", "signal-handle"),
    ("send_signal_locked", "signal-send"),
    ("ret_from_fork", "start"),
];

/// Probes that exist from the start: dtrace's, the precreated timers, proc's.
const PREDEFINED: u32 = 3 + 13 + 14;

/// A timer that does not exist yet is created by naming it, after the probes that
/// exist from the start.
#[test]
fn list_creates_timer_probe() {
    let out = run_args(&["-l", "-n", "tick-1s"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{HEADER}{}", row(PREDEFINED + 1, "profile", "", "", "tick-1s")));
    // A precreated one keeps its id.
    let out = run_args(&["-l", "-n", "profile:::tick-1000"]);
    assert_eq!(out.stdout, format!("{HEADER}{}", row(15, "profile", "", "", "tick-1000")));
}

#[test]
fn list_everything() {
    let out = run_args(&["-l"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let mut want = format!("{HEADER}{}", dtrace_rows());
    for (i, name) in PRECREATED.iter().enumerate() {
        want.push_str(&row(4 + i as u32, "profile", "", "", name));
    }
    for (i, (func, name)) in PROC.iter().enumerate() {
        want.push_str(&row(17 + i as u32, "proc", "vmlinux", func, name));
    }
    assert_eq!(out.stdout, want);
}

/// -l implies -Z: a description that matches nothing is no compile error; dtrace's
/// list_stmt() reports it on stderr and goes on (exit status 0).
#[test]
fn list_nothing_matches() {
    let out = run_args(&["-l", "-n", "nosuch:::probe", "-n", "END"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{HEADER}{}", row(2, "dtrace", "", "", "END")));
    assert_eq!(out.stderr, "udtrace: failed to match nosuch:::probe: No probe matches description\n");
}

/// Descriptions are listed in program order, each with its matches: a probe named
/// twice is listed twice, as dtrace's list_prog() walks statements.
#[test]
fn list_several_descriptions() {
    let out = run_args(&["-l", "-n", "END", "-n", "BEGIN", "-n", "dtrace:::BEGIN"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let (begin, end) = (row(1, "dtrace", "", "", "BEGIN"), row(2, "dtrace", "", "", "END"));
    assert_eq!(out.stdout, format!("{HEADER}{end}{begin}{begin}"));

    let dir = util::TempDir::new("list-script");
    let s = dir.write("l.d", "END, BEGIN\n{\n}\n\ndtrace:::ERROR\n{\n}\n");
    let out = run_args(&[std::path::Path::new("-l"), std::path::Path::new("-s"), s.as_path()]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{HEADER}{end}{begin}{}", row(3, "dtrace", "", "", "ERROR")));
}

/// dtrace.c's print_probe_info(): the minimum attributes of the named fields
/// (provider and name here; empty module and function do not count).
fn attributes(stability: &str) -> String {
    format!(
        "\n\tProbe Description Attributes\n\t\tIdentifier Names: {stability}\n\t\tData Semantics:   {stability}\n\t\tDependency Class: Common\n\n\tArgument Attributes\n\t\tIdentifier Names: {stability}\n\t\tData Semantics:   {stability}\n\t\tDependency Class: Common\n\n\tArgument Types\n\t\tNone\n\n"
    )
}

#[test]
fn list_verbose() {
    let out = run_args(&["-l", "-v", "-n", "BEGIN"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{HEADER}{}{}", row(1, "dtrace", "", "", "BEGIN"), attributes("Stable")));
    // The profile provider is Evolving (profile.c's profile_attr).
    let out = run_args(&["-lv", "-n", "tick-1s"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!("{HEADER}{}{}", row(PREDEFINED + 1, "profile", "", "", "tick-1s"), attributes("Evolving"))
    );
}

/// proc probes list their argument types, with sdt's attributes for the provider.
#[test]
fn list_proc_verbose() {
    let out = run_args(&["-lv", "-n", "proc:::signal-send"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let attrs = "\n\tProbe Description Attributes\n\t\tIdentifier Names: Evolving\n\t\tData Semantics:   Evolving\n\t\tDependency Class: ISA\n\n\tArgument Attributes\n\t\tIdentifier Names: Evolving\n\t\tData Semantics:   Evolving\n\t\tDependency Class: ISA\n\n";
    let types = "\tArgument Types\n\t\targs[0]: lwpsinfo_t *\n\t\targs[1]: psinfo_t *\n\t\targs[2]: int\n\n";
    assert_eq!(
        out.stdout,
        format!("{HEADER}{}{attrs}{types}", row(29, "proc", "vmlinux", "send_signal_locked", "signal-send"))
    );
    let out = run_args(&["-l", "-n", "proc:::*start"]);
    assert_eq!(
        out.stdout,
        format!(
            "{HEADER}{}{}",
            row(25, "proc", "vmlinux", "ret_from_fork", "lwp-start"),
            row(30, "proc", "vmlinux", "ret_from_fork", "start")
        )
    );
}

/// Listing compiles the program: a broken one fails as it would when tracing.
#[test]
fn list_with_broken_program() {
    let out = run_args(&["-l", "-n", "BEGIN { x = ; }"]);
    assert_eq!(out.status, 1);
    assert_eq!(out.first_err_line(), "udtrace: invalid probe specifier BEGIN { x = ; }: syntax error near \";\"");
    assert_eq!(out.stdout, "");
}
