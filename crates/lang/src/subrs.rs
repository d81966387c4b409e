//! DTrace's subroutines: their names, their prototypes as libdtrace declares them, and
//! what each parameter accepts (dt_node_is_argcompat's rules). The checker calls
//! [`find`] for a name and checks the arguments against [`Proto::params`].

use crate::ir::Subr;

/// What a parameter accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// An integer type (`int`, `size_t`, `pid_t`): integers and enums, not pointers.
    Int,
    /// An integer or a pointer: udtrace's `_symaddr` functions take addresses either way.
    Scalar,
    /// `const char *`: strings, `char` pointers and arrays, or the constant 0.
    Str,
    /// `void *`: any pointer, array or string, or the constant 0.
    VoidPtr,
    /// A pointer to the named type of the program (`struct in6_addr`, `ipaddr_t`):
    /// such a pointer, a `void *`, or the constant 0.
    PtrTo(&'static str),
    /// A pointer to a kernel type (`vmlinux`struct mutex *`), which udtrace does not
    /// have: only a `void *` or the constant 0 can match.
    Kernel,
}

/// A subroutine's prototype: its text as DTrace prints it in messages, what each
/// parameter accepts, and how many are required (the rest are optional).
#[derive(Debug, Clone, Copy)]
pub struct Proto {
    pub text: &'static str,
    pub params: &'static [Param],
    pub required: usize,
}

impl Proto {
    /// The type of parameter `i` as DTrace names it in D_PROTO_ARG messages: without
    /// the brackets of an optional parameter, `const` or a module prefix
    /// (`const char *` prints as `char *`, `vmlinux`struct mutex *` as `struct mutex *`).
    pub fn param_name(&self, i: usize) -> String {
        let inner = self.text.find('(').map_or("", |o| self.text[o + 1..].strip_suffix(')').unwrap_or(""));
        let p = inner.split(',').nth(i).unwrap_or(self.text).trim();
        let p = p.trim_start_matches('[').trim_end_matches(']');
        let p = p.strip_prefix("const ").unwrap_or(p);
        p.replace("vmlinux`", "")
    }
}

const fn proto(text: &'static str, params: &'static [Param], required: usize) -> Proto {
    Proto { text, params, required }
}

/// The subroutine a name calls, with its prototype; `None` for anything else
/// (actions and aggregating functions are not subroutines).
pub fn find(name: &str) -> Option<(Subr, Proto)> {
    use Param::*;
    let string1 = proto("string(const char *)", &[Str], 1);
    let string2 = proto("string(const char *, const char *)", &[Str, Str], 2);
    let kernel_lock = |text| proto(text, &[Kernel], 1);
    Some(match name {
        "alloca" => (Subr::Alloca, proto("void *(size_t)", &[Int], 1)),
        "basename" => (Subr::Basename, string1),
        "bcopy" => (Subr::Bcopy, proto("void(void *, void *, size_t)", &[VoidPtr, VoidPtr, Int], 3)),
        "cleanpath" => (Subr::Cleanpath, string1),
        "copyin" => (Subr::Copyin, proto("void *(uintptr_t, size_t)", &[Int, Int], 2)),
        "copyinstr" => (Subr::Copyinstr, proto("string(uintptr_t, [size_t])", &[Int, Int], 1)),
        "copyinto" => (Subr::Copyinto, proto("void(uintptr_t, size_t, void *)", &[Int, Int, VoidPtr], 3)),
        "copyout" => (Subr::Copyout, proto("void(void *, uintptr_t, size_t)", &[VoidPtr, Int, Int], 3)),
        "copyoutstr" => (Subr::Copyoutstr, proto("void(char *, uintptr_t, size_t)", &[Str, Int, Int], 3)),
        "d_path" => (Subr::Kernel, proto("string(struct path *)", &[Kernel], 1)),
        "ddi_pathname" => (Subr::Kernel, proto("string(void *, int64_t)", &[VoidPtr, Int], 2)),
        "dirname" => (Subr::Dirname, string1),
        "getmajor" => (Subr::Getmajor, proto("vmlinux`dev_t(vmlinux`dev_t)", &[Int], 1)),
        "getminor" => (Subr::Getminor, proto("vmlinux`dev_t(vmlinux`dev_t)", &[Int], 1)),
        "htonl" => (Subr::Htonl, proto("uint32_t(uint32_t)", &[Int], 1)),
        "htonll" => (Subr::Htonll, proto("uint64_t(uint64_t)", &[Int], 1)),
        "htons" => (Subr::Htons, proto("uint16_t(uint16_t)", &[Int], 1)),
        "index" => (Subr::Index, proto("int(const char *, const char *, [int])", &[Str, Str, Int], 2)),
        "inet_ntoa" => (Subr::InetNtoa, proto("string(ipaddr_t *)", &[PtrTo("ipaddr_t")], 1)),
        "inet_ntoa6" => {
            (Subr::InetNtoa6, proto("string(struct in6_addr *, [int])", &[PtrTo("struct in6_addr"), Int], 1))
        }
        "inet_ntop" => (Subr::InetNtop, proto("string(int, void *)", &[Int, VoidPtr], 2)),
        "link_ntop" => (Subr::LinkNtop, proto("string(int, void *)", &[Int, VoidPtr], 2)),
        "lltostr" => (Subr::Lltostr, proto("string(int64_t, [int])", &[Int, Int], 1)),
        "msgdsize" | "msgsize" => (Subr::Kernel, proto("size_t(mblk_t *)", &[Kernel], 1)),
        "mutex_owned" => (Subr::Kernel, kernel_lock("int(vmlinux`struct mutex *)")),
        "mutex_owner" => (Subr::Kernel, kernel_lock("vmlinux`struct task_struct *(vmlinux`struct mutex *)")),
        "mutex_type_adaptive" => (Subr::Kernel, kernel_lock("int(vmlinux`struct mutex *)")),
        "mutex_type_spin" => (Subr::Kernel, kernel_lock("int(vmlinux`struct mutex *)")),
        "ntohl" => (Subr::Ntohl, proto("uint32_t(uint32_t)", &[Int], 1)),
        "ntohll" => (Subr::Ntohll, proto("uint64_t(uint64_t)", &[Int], 1)),
        "ntohs" => (Subr::Ntohs, proto("uint16_t(uint16_t)", &[Int], 1)),
        "progenyof" => (Subr::Progenyof, proto("int(pid_t)", &[Int], 1)),
        "rand" => (Subr::Rand, proto("int()", &[], 0)),
        "rindex" => (Subr::Rindex, proto("int(const char *, const char *, [int])", &[Str, Str, Int], 2)),
        "rw_iswriter" | "rw_read_held" | "rw_write_held" => (Subr::Kernel, kernel_lock("int(vmlinux`rwlock_t *)")),
        "speculation" => (Subr::Speculation, proto("int()", &[], 0)),
        "strchr" => (Subr::Strchr, proto("string(const char *, char)", &[Str, Int], 2)),
        "strjoin" => (Subr::Strjoin, string2),
        "strlen" => (Subr::Strlen, proto("size_t(const char *)", &[Str], 1)),
        "strrchr" => (Subr::Strrchr, proto("string(const char *, char)", &[Str, Int], 2)),
        "strstr" => (Subr::Strstr, string2),
        "strtok" => (Subr::Strtok, string2),
        "strtoll" => (Subr::Strtoll, proto("int64_t(const char *, [int])", &[Str, Int], 1)),
        "substr" => (Subr::Substr, proto("string(const char *, int, [int])", &[Str, Int, Int], 2)),
        "tolower" => (Subr::Tolower, string1),
        "toupper" => (Subr::Toupper, string1),
        "stack" => (Subr::Stack { user: false }, proto("stack([uint32_t])", &[Int], 0)),
        "ustack" => (Subr::Stack { user: true }, proto("stack([uint32_t], [uint32_t])", &[Int, Int], 0)),
        "sym" | "func" | "mod" => (Subr::Symbol, proto("_symaddr(uintptr_t)", &[Scalar], 1)),
        "usym" | "ufunc" | "umod" | "uaddr" => (Subr::Symbol, proto("_usymaddr(uintptr_t)", &[Scalar], 1)),
        _ => return None,
    })
}

/// The prototypes of the actions that act on the kernel: `chill()`, `panic()`,
/// `breakpoint()` and `pcap()`.
pub fn kernel_action(name: &str) -> Option<Proto> {
    use Param::*;
    Some(match name {
        "chill" => proto("void(int)", &[Int], 1),
        "panic" | "breakpoint" => proto("void()", &[], 0),
        "pcap" => proto("void(void *, int)", &[VoidPtr, Int], 2),
        _ => return None,
    })
}

/// DTrace's prototype-length message: exact counts, `at least` the required count
/// when too few are passed to a function with optional parameters, `at most` all of
/// them when too many are.
pub fn proto_len_message(name: &str, passed: usize, proto: &Proto) -> String {
    let plural = if passed == 1 { " " } else { "s " };
    let all = proto.params.len();
    let (bound, n) = if proto.required == all {
        ("", all)
    } else if passed < proto.required {
        ("at least ", proto.required)
    } else {
        ("at most ", all)
    };
    format!("{name}( ) prototype mismatch: {passed} arg{plural}passed, {bound}{n} expected")
}

/// Why a subroutine cannot run in user-space tracing, for those that only inspect
/// kernel objects.
pub fn kernel_only_message(name: &str) -> String {
    format!("{name}( ) inspects kernel objects, which user-space tracing cannot reach")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_names_as_dtrace_prints_them() {
        let (_, p) = find("substr").unwrap();
        assert_eq!(p.param_name(0), "char *");
        assert_eq!(p.param_name(2), "int");
        let (_, p) = find("mutex_owned").unwrap();
        assert_eq!(p.param_name(0), "struct mutex *");
        let (_, p) = find("inet_ntoa6").unwrap();
        assert_eq!(p.param_name(0), "struct in6_addr *");
    }

    #[test]
    fn length_messages_say_at_least_or_at_most() {
        let (_, p) = find("substr").unwrap();
        assert_eq!(
            proto_len_message("substr", 4, &p),
            "substr( ) prototype mismatch: 4 args passed, at most 3 expected"
        );
        assert_eq!(
            proto_len_message("substr", 1, &p),
            "substr( ) prototype mismatch: 1 arg passed, at least 2 expected"
        );
        let (_, p) = find("mutex_owned").unwrap();
        assert_eq!(
            proto_len_message("mutex_owned", 2, &p),
            "mutex_owned( ) prototype mismatch: 2 args passed, 1 expected"
        );
    }
}
