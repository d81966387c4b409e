//! The types of the proc provider, as DTrace's guide defines them: `psinfo_t`,
//! `lwpsinfo_t`, `siginfo_t` and the `timestruc_t` they hold, laid out by the LP64
//! rules like any D struct. The backend fills their bytes from kernel task data; the
//! checker only needs their members. Also the argument types of probes, which the
//! caller gives the checker per probe description.

use crate::types::{Type, TypeTable};

/// DTrace's PRFNSZ, PRARGSZ and PRCLSZ.
pub const PRFNSZ: u64 = 16;
pub const PRARGSZ: u64 = 80;
pub const PRCLSZ: u64 = 8;

/// The type of one probe argument, by name: resolved against the program's types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    /// An integer typedef or C type name (`int`, `uintptr_t`).
    Int(&'static str),
    String,
    /// A pointer to a named type (`psinfo_t`).
    Ptr(&'static str),
}

fn td(types: &TypeTable, name: &str) -> Type {
    types.typedefs.get(name).cloned().unwrap_or_else(|| Type::int(8, true))
}

fn chars(n: u64) -> Type {
    Type::Array(Box::new(Type::int(1, true)), n)
}

/// Adds the proc provider's types to a program's type table.
pub fn install(types: &mut TypeTable) {
    let int = Type::int(4, true);
    let long = Type::int(8, true);
    let short = Type::int(2, true);
    let ch = Type::int(1, true);

    let ts = types.record_tag(false, "timespec");
    types.complete_record(ts, vec![("tv_sec".into(), td(types, "time_t")), ("tv_nsec".into(), long.clone())]);
    types.typedefs.insert("timespec_t".into(), Type::Struct(ts));
    types.typedefs.insert("timestruc_t".into(), Type::Struct(ts));
    types.typedefs.insert("poolid_t".into(), Type::named_int(4, true, "poolid_t"));
    types.typedefs.insert("ctid_t".into(), Type::named_int(4, true, "ctid_t"));
    let timestruc = Type::Struct(ts);

    let m = |name: &str, ty: Type| (name.to_string(), ty);
    let ps = types.record_tag(false, "psinfo");
    let members = vec![
        m("pr_flag", int.clone()),
        m("pr_nlwp", int.clone()),
        m("pr_pid", td(types, "pid_t")),
        m("pr_ppid", td(types, "pid_t")),
        m("pr_pgid", td(types, "pid_t")),
        m("pr_sid", td(types, "pid_t")),
        m("pr_uid", td(types, "uid_t")),
        m("pr_euid", td(types, "uid_t")),
        m("pr_gid", td(types, "gid_t")),
        m("pr_egid", td(types, "gid_t")),
        m("pr_addr", td(types, "uintptr_t")),
        m("pr_size", td(types, "size_t")),
        m("pr_rssize", td(types, "size_t")),
        m("pr_ttydev", td(types, "dev_t")),
        m("pr_pctcpu", td(types, "ushort_t")),
        m("pr_pctmem", td(types, "ushort_t")),
        m("pr_start", timestruc.clone()),
        m("pr_time", timestruc.clone()),
        m("pr_ctime", timestruc.clone()),
        m("pr_fname", chars(PRFNSZ)),
        m("pr_psargs", chars(PRARGSZ)),
        m("pr_wstat", int.clone()),
        m("pr_argc", int.clone()),
        m("pr_argv", td(types, "uintptr_t")),
        m("pr_envp", td(types, "uintptr_t")),
        m("pr_dmodel", ch.clone()),
        m("pr_taskid", td(types, "taskid_t")),
        m("pr_projid", td(types, "projid_t")),
        m("pr_nzomb", int.clone()),
        m("pr_poolid", td(types, "poolid_t")),
        m("pr_zoneid", td(types, "zoneid_t")),
        m("pr_contract", td(types, "ctid_t")),
    ];
    types.complete_record(ps, members);
    types.typedefs.insert("psinfo_t".into(), Type::Struct(ps));

    let lwp = types.record_tag(false, "lwpsinfo");
    let members = vec![
        m("pr_flag", int.clone()),
        m("pr_lwpid", td(types, "id_t")),
        m("pr_addr", td(types, "uintptr_t")),
        m("pr_wchan", td(types, "uintptr_t")),
        m("pr_stype", ch.clone()),
        m("pr_state", ch.clone()),
        m("pr_sname", ch.clone()),
        m("pr_nice", ch.clone()),
        m("pr_syscall", short),
        m("pr_oldpri", ch.clone()),
        m("pr_cpu", ch.clone()),
        m("pr_pri", int.clone()),
        m("pr_pctcpu", td(types, "ushort_t")),
        m("pr_start", timestruc.clone()),
        m("pr_time", timestruc),
        m("pr_clname", chars(PRCLSZ)),
        m("pr_name", chars(PRFNSZ)),
        m("pr_onpro", td(types, "processorid_t")),
        m("pr_bindpro", td(types, "processorid_t")),
        m("pr_bindpset", td(types, "psetid_t")),
        m("pr_lgrp", int.clone()),
    ];
    types.complete_record(lwp, members);
    types.typedefs.insert("lwpsinfo_t".into(), Type::Struct(lwp));

    let sv = types.record_tag(true, "sigval");
    types.complete_record(sv, vec![m("sival_int", int.clone()), m("sival_ptr", Type::Pointer(Box::new(Type::Void)))]);
    let si = types.record_tag(false, "siginfo");
    let members = vec![
        m("si_signo", int.clone()),
        m("si_code", int.clone()),
        m("si_errno", int.clone()),
        m("si_pid", td(types, "pid_t")),
        m("si_uid", td(types, "uid_t")),
        m("si_status", int.clone()),
        m("si_addr", Type::Pointer(Box::new(Type::Void))),
        m("si_band", long),
        m("si_value", Type::Union(sv)),
        m("si_trapno", int.clone()),
        m("si_fd", int),
    ];
    types.complete_record(si, members);
    types.typedefs.insert("siginfo_t".into(), Type::Struct(si));
    install_cpuinfo(types);
}

/// `cpuinfo_t`, as DTrace's sched.d declares it (with its `chipid_t` and
/// `lgrp_id_t`), so that declarations of that type compile.
fn install_cpuinfo(types: &mut TypeTable) {
    let id_t = td(types, "id_t");
    types.typedefs.insert("chipid_t".into(), Type::named_int(4, true, "chipid_t"));
    types.typedefs.insert("lgrp_id_t".into(), Type::named_int(4, true, "lgrp_id_t"));
    let cpu = types.record_tag(false, "cpuinfo");
    let m = |name: &str, ty: Type| (name.to_string(), ty);
    let members = vec![
        m("cpu_id", td(types, "processorid_t")),
        m("cpu_pset", td(types, "psetid_t")),
        m("cpu_chip", id_t.clone()),
        m("cpu_lgrp", id_t),
    ];
    types.complete_record(cpu, members);
    types.typedefs.insert("cpuinfo_t".into(), Type::Struct(cpu));
}

/// Members of `psinfo_t` and `lwpsinfo_t` that the translators from task data leave
/// undefined (Linux keeps no such thing, or udtrace does not read it): DTrace rejects
/// them with D_XLATE_NOCONV rather than reading zeros.
const UNCONVERTED: [(&str, &[&str]); 2] = [
    ("psinfo", &["pr_flag", "pr_size", "pr_rssize", "pr_pctcpu", "pr_pctmem", "pr_time", "pr_ctime"]),
    ("lwpsinfo", &["pr_syscall", "pr_oldpri", "pr_cpu", "pr_pctcpu", "pr_time", "pr_lgrp"]),
];

/// Whether `member` of the record tagged `tag` is one the translators do not define.
pub fn unconverted(tag: &str, member: &str) -> bool {
    UNCONVERTED.iter().any(|(t, members)| *t == tag && members.contains(&member))
}

/// A member's byte offset in a record installed here (for the backend that fills it).
pub fn offset_of(types: &TypeTable, record: &str, member: &str) -> Option<u64> {
    let id = match types.typedefs.get(record)? {
        Type::Struct(id) => *id,
        _ => return None,
    };
    types.field(id, member).map(|f| f.offset)
}

/// The size of a record installed here.
pub fn size_of(types: &TypeTable, record: &str) -> Option<u64> {
    types.size_of(types.typedefs.get(record)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laid_out_as_lp64_c() {
        let mut t = TypeTable::default();
        install(&mut t);
        assert_eq!(offset_of(&t, "psinfo_t", "pr_flag"), Some(0));
        assert_eq!(offset_of(&t, "psinfo_t", "pr_addr"), Some(40));
        assert_eq!(offset_of(&t, "psinfo_t", "pr_start"), Some(80), "after two ushorts, aligned to 8");
        assert_eq!(offset_of(&t, "psinfo_t", "pr_fname"), Some(128));
        assert_eq!(offset_of(&t, "psinfo_t", "pr_psargs"), Some(144));
        assert_eq!(offset_of(&t, "lwpsinfo_t", "pr_pri"), Some(32));
        assert_eq!(offset_of(&t, "siginfo_t", "si_addr"), Some(24));
        assert_eq!(size_of(&t, "timestruc_t"), Some(16));
        assert!(size_of(&t, "psinfo_t").unwrap().is_multiple_of(8));
    }
}
