//! Capture plans: what a firing must record in the kernel, at the instant it happens,
//! for a clause to be evaluated later in user space: the registers when it reads
//! arguments or registers, user stack bytes (for `ustack()`, `ucaller`, stack
//! arguments), the strings behind `copyinstr(argN)`, the bytes behind `copyin(argN,
//! SIZE)` and `copyinto(argN, SIZE, …)` with a constant SIZE, and `errno`. Anything
//! else a clause reads from the process is read from the live process when the
//! consumer evaluates it.

use crate::ir::{visit_actions, visit_expr, Action, Builtin, Clause, Expr, ExprKind, Subr};

/// How many bytes of user stack `ustack()` copies: enough for the unwinder to walk a
/// few dozen frames of ordinary C and Rust code.
pub const USTACK_BYTES: u32 = 8192;

/// Bytes of stack for `arg6..arg9` (return address and stack arguments).
pub const ARGS_STACK_BYTES: u32 = 64;

/// Bytes of stack for `ucaller`: at entry and return sites the word at the stack
/// pointer; at an offset inside a function, enough of its frame to unwind to the caller.
pub const UCALLER_STACK_BYTES: u32 = 512;

/// The largest `copyin(argN, SIZE)` captured at the firing; larger sizes are read from
/// the live process when the record is consumed.
pub const MAX_BUFFER_BYTES: u32 = 4096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturePlan {
    /// User stack bytes to copy from the stack pointer up.
    pub stack_bytes: u32,
    /// `copyinstr(argN)`: the argument registers (0..=5) whose strings to copy.
    pub strings: Vec<u8>,
    /// `copyin(argN, SIZE)`: (argument register 0..=5, bytes to copy), one per
    /// register, the largest size any clause asks for, sorted by register.
    pub buffers: Vec<(u8, u32)>,
    /// The registers: arguments, `uregs[]`, stacks. A clause that only counts or reads
    /// the probe's identity needs none, and its firings cost less to record and read.
    pub regs: bool,
    /// The proc provider's records: the current task's data (`curpsinfo`,
    /// `curlwpsinfo`, `ppid`, `uid`, `gid`), the probe's arguments, and the ancestry
    /// of the current process (`progenyof`).
    pub cur_task: bool,
    /// Bit n: `args[n]` (or `argn`) is read; a computed index sets them all.
    pub args: u16,
    pub ancestors: bool,
    /// `errno`: the firing thread's, read at the firing.
    pub errno: bool,
    /// `curthread`: the firing task's `struct task_struct` address.
    pub curthread: bool,
}

impl CapturePlan {
    /// The union of two plans: one record layout serves several clauses.
    pub fn merge(&mut self, other: &CapturePlan) {
        self.stack_bytes = self.stack_bytes.max(other.stack_bytes);
        self.regs |= other.regs;
        self.cur_task |= other.cur_task;
        self.args |= other.args;
        self.ancestors |= other.ancestors;
        self.errno |= other.errno;
        self.curthread |= other.curthread;
        for s in &other.strings {
            if !self.strings.contains(s) {
                self.strings.push(*s);
            }
        }
        self.strings.sort_unstable();
        for &(n, size) in &other.buffers {
            add_buffer(&mut self.buffers, n, size);
        }
    }
}

/// Adds a buffer capture: one per register, the largest size; kept sorted.
fn add_buffer(buffers: &mut Vec<(u8, u32)>, n: u8, size: u32) {
    match buffers.iter_mut().find(|b| b.0 == n) {
        Some(b) => b.1 = b.1.max(size),
        None => {
            buffers.push((n, size));
            buffers.sort_unstable();
        }
    }
}

/// The plan for one clause (predicate and actions).
pub fn plan(c: &Clause) -> CapturePlan {
    let mut p = CapturePlan::default();
    {
        let mut see = |e: &Expr| note(e, &mut p);
        if let Some(pred) = &c.predicate {
            visit_expr(pred, &mut see);
        }
        visit_actions(&c.actions, &mut see);
    }
    if ustack_action(&c.actions) {
        p.stack_bytes = p.stack_bytes.max(USTACK_BYTES);
    }
    p.strings.sort_unstable();
    // Stacks unwind from ip/sp/bp; string and buffer captures are matched to their
    // argument.
    p.regs |= p.stack_bytes > 0 || !p.strings.is_empty() || !p.buffers.is_empty();
    p
}

/// Whether the clause reads the process's memory where the firing captures none of it:
/// `copyinstr`, `copyin` or `copyinto` of an address that is not an argument register,
/// or of a size not constant or over [`MAX_BUFFER_BYTES`]. Those are read from the live
/// process when the record is consumed.
pub fn reads_live_memory(c: &Clause) -> bool {
    let mut live = false;
    let mut see = |e: &Expr| {
        live |= match &e.kind {
            ExprKind::Call(Subr::Copyinstr, args) => captured_string(args).is_none(),
            ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => captured_buffer(args).is_none(),
            _ => false,
        }
    };
    if let Some(pred) = &c.predicate {
        visit_expr(pred, &mut see);
    }
    visit_actions(&c.actions, &mut see);
    live
}

/// Whether the actions include `ustack()` as a statement (inside `if` too).
fn ustack_action(list: &[Action]) -> bool {
    list.iter().any(|a| match a {
        Action::Stack { user: true, .. } => true,
        Action::If { then, otherwise, .. } => ustack_action(then) || ustack_action(otherwise),
        _ => false,
    })
}

/// What one expression node (its children are visited on their own) asks a firing to
/// record.
fn note(e: &Expr, p: &mut CapturePlan) {
    match &e.kind {
        ExprKind::Builtin(Builtin::Arg(n)) => {
            p.regs = true;
            p.args |= 1 << n;
            if *n >= 6 {
                p.stack_bytes = p.stack_bytes.max(ARGS_STACK_BYTES);
            }
        }
        ExprKind::Args(i) => {
            p.regs = true;
            p.args |= match i.kind {
                ExprKind::Int(n) if n < 16 => 1 << n,
                _ => u16::MAX,
            };
            p.stack_bytes = p.stack_bytes.max(ARGS_STACK_BYTES);
        }
        ExprKind::Uregs(_) => p.regs = true,
        ExprKind::Builtin(Builtin::Curpsinfo | Builtin::Curlwpsinfo | Builtin::Ppid | Builtin::Uid | Builtin::Gid) => {
            p.cur_task = true
        }
        ExprKind::Builtin(Builtin::Errno) => p.errno = true,
        ExprKind::Builtin(Builtin::Curthread) => p.curthread = true,
        ExprKind::Builtin(Builtin::Ucaller) => p.stack_bytes = p.stack_bytes.max(UCALLER_STACK_BYTES),
        ExprKind::Builtin(Builtin::Ustackdepth) => p.stack_bytes = p.stack_bytes.max(USTACK_BYTES),
        ExprKind::Call(Subr::Progenyof, _) => p.ancestors = true,
        ExprKind::Call(Subr::Stack { user: true }, _) => p.stack_bytes = p.stack_bytes.max(USTACK_BYTES),
        ExprKind::Call(Subr::Copyinstr, args) => {
            if let Some(n) = captured_string(args).filter(|n| !p.strings.contains(n)) {
                p.strings.push(n);
            }
        }
        ExprKind::Call(Subr::Copyin | Subr::Copyinto, args) => {
            if let Some((n, size)) = captured_buffer(args) {
                add_buffer(&mut p.buffers, n, size);
            }
        }
        _ => {}
    }
}

/// The argument register whose string the firing captures for `copyinstr(args)`:
/// `argN` with N in 0..=5.
fn captured_string(args: &[Expr]) -> Option<u8> {
    match args.first().map(|a| &a.kind) {
        Some(ExprKind::Builtin(Builtin::Arg(n))) if *n < 6 => Some(*n),
        _ => None,
    }
}

/// The (argument register, size) the firing captures for `copyin(args)` or
/// `copyinto(args)`: `argN` with N in 0..=5 and a constant size up to
/// [`MAX_BUFFER_BYTES`].
fn captured_buffer(args: &[Expr]) -> Option<(u8, u32)> {
    match args {
        [src, size, ..] => match (&src.kind, &size.kind) {
            (ExprKind::Builtin(Builtin::Arg(n)), ExprKind::Int(size))
                if *n < 6 && (1..=u64::from(MAX_BUFFER_BYTES)).contains(size) =>
            {
                Some((*n, *size as u32))
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Checker;
    use crate::macros::MacroArgs;
    use crate::parser::{parse_program, DescAlign};

    fn clause_of(src: &str) -> Clause {
        let prog = parse_program(src, DescAlign::Name).expect("parses");
        let macros = MacroArgs::new(vec!["udtrace".into()]);
        let mut c = Checker::new(&macros);
        c.add_source(&prog, 0, src).expect("checks");
        c.finish().clauses.swap_remove(0)
    }

    fn plan_of(src: &str) -> CapturePlan {
        plan(&clause_of(src))
    }

    #[test]
    fn plans_follow_what_clauses_read() {
        assert_eq!(plan_of("BEGIN { x = 1; @ = count(); }"), CapturePlan::default());
        assert_eq!(plan_of("BEGIN { x = arg0; }"), CapturePlan { regs: true, args: 1, ..CapturePlan::default() });
        assert!(plan_of("BEGIN { x = uregs[R_SP]; }").regs);
        assert!(plan_of("BEGIN { @[ustack()] = count(); }").regs);
        let p = plan_of("BEGIN /progenyof(1)/ { trace(curpsinfo->pr_pid); }");
        assert!(p.cur_task && p.ancestors && p.args == 0);
        assert_eq!(plan_of("pid1::f:entry { trace(args[2]); trace(arg1); }").args, 0b110);
        assert_eq!(plan_of("pid1::f:entry { trace(args[arg0]); }").args, u16::MAX);
        assert_eq!(plan_of("BEGIN { printf(\"%s\", copyinstr(arg1)); }").strings, vec![1]);
        assert_eq!(plan_of("BEGIN /copyinstr(arg0) == \"a\"/ { @[copyinstr(arg2)] = count(); }").strings, vec![0, 2]);
        assert_eq!(plan_of("BEGIN { @[ustack()] = count(); }").stack_bytes, USTACK_BYTES);
        assert_eq!(plan_of("BEGIN { ustack(); }").stack_bytes, USTACK_BYTES);
        assert_eq!(plan_of("BEGIN { trace(arg7); }").stack_bytes, ARGS_STACK_BYTES);
        // A computed address is read from the live process instead.
        assert!(plan_of("BEGIN { trace(copyinstr(arg0 + 8)); }").strings.is_empty());
    }

    #[test]
    fn reads_of_computed_addresses_are_told_apart() {
        let live = |src: &str| reads_live_memory(&clause_of(src));
        assert!(!live("BEGIN { trace(copyinstr(arg0)); trace(*(int *)copyin(arg1, 4)); }"));
        assert!(live("BEGIN { trace(copyinstr(arg0 + 8)); }"));
        assert!(live("BEGIN /copyinstr(arg0 + arg1) != \"\"/ { }"));
        assert!(live("BEGIN { trace(*(int *)copyin(arg1, arg2)); }"));
        assert!(!live("BEGIN { trace(arg0); }"));
    }

    #[test]
    fn constant_copyins_of_arguments_are_captured() {
        let p = plan_of("BEGIN { trace(*(int *)copyin(arg1, 4)); }");
        assert_eq!(p.buffers, vec![(1, 4)]);
        assert!(p.regs && p.strings.is_empty());
        // One capture per register, the largest size; sorted by register.
        let p = plan_of("BEGIN / *(int *)copyin(arg2, 4) == 1 / { tracemem(copyin(arg0, 16), 16); trace(*(long *)copyin(arg2, sizeof (long))); }");
        assert_eq!(p.buffers, vec![(0, 16), (2, 8)]);
        assert_eq!(plan_of("BEGIN { copyinto(arg3, 12, alloca(12)); }").buffers, vec![(3, 12)]);
        let big = "#pragma D option scratchsize=8192\nBEGIN { trace(*(char *)copyin(arg0, 4096)); }";
        assert_eq!(plan_of(big).buffers, vec![(0, 4096)]);
        // Computed sizes and addresses, sizes past the bound, stack arguments: read
        // when consumed.
        for src in [
            "BEGIN { trace(*(char *)copyin(arg0, arg1)); }",
            "BEGIN { trace(*(char *)copyin(arg0 + 8, 4)); }",
            "#pragma D option scratchsize=8192\nBEGIN { trace(*(char *)copyin(arg0, 4097)); }",
            "BEGIN { trace(*(char *)copyin(arg6, 4)); }",
        ] {
            assert!(plan_of(src).buffers.is_empty(), "{src}");
        }
        // Clauses merged: per register the largest.
        let mut p = plan_of("BEGIN { trace(*(char *)copyin(arg0, 8)); }");
        p.merge(&plan_of("BEGIN { trace(*(char *)copyin(arg0, 32)); trace(*(char *)copyin(arg5, 2)); }"));
        p.merge(&plan_of("BEGIN { trace(*(char *)copyin(arg0, 16)); }"));
        assert_eq!(p.buffers, vec![(0, 32), (5, 2)]);
    }
}
