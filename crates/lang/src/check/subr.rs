//! Subroutine calls: arguments checked against DTrace's prototypes (see
//! [`crate::subrs`]), the checks libdtrace makes on particular subroutines, and the
//! result's type and alloca taint.

use super::{err, int_const, int_ty, is_action_call, is_stringish, mk, Checker};
use crate::ast;
use crate::error::{Result, Tag};
use crate::ir::{Action, Expr, ExprKind, Subr, Taint};
use crate::span::Span;
use crate::subrs::{self, Param, Proto};
use crate::types::{SymKind, Type};

/// Whether an expression is the integer constant 0 (`NULL`), which every pointer
/// parameter accepts.
fn is_zero_constant(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::Int(0)) && e.ty.is_integer()
}

impl Checker<'_> {
    /// A call of subroutine `subr` (found by `name`, with prototype `proto`).
    pub(super) fn subr_call(
        &mut self,
        name: &str,
        name_span: Span,
        subr: Subr,
        proto: &Proto,
        args: &[ast::Expr],
        span: Span,
    ) -> Result<Expr> {
        if let Subr::Stack { user } = subr {
            // stack(n)/ustack(n, s) take constants; the frame count is what the runtime reads.
            let frames = self.stack_args(name, name_span, args)?;
            let vals = frames.map(|n| int_const(u64::from(n), int_ty(), span)).into_iter().collect();
            return Ok(mk(ExprKind::Call(subr, vals), Type::Stack { user }, span));
        }
        if args.len() < proto.required || args.len() > proto.params.len() {
            return err(Tag::D_PROTO_LEN, name_span, subrs::proto_len_message(name, args.len(), proto));
        }
        let mut vals = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            vals.push(self.subr_arg(name, proto, i, a)?);
        }
        self.subr_constraints(name, subr, &vals, span)?;
        let (ty, taint) = self.subr_result(name, subr);
        let mut call = mk(ExprKind::Call(subr, vals), ty, span);
        call.taint = taint;
        Ok(call)
    }

    /// `chill()`, `panic()`, `breakpoint()` and `pcap()`: their prototypes are
    /// checked. pcap() compiles (and faults on the address it is given, which is no
    /// socket buffer); the others act on the kernel, which the clause-flags check
    /// refuses.
    pub(super) fn kernel_action(
        &mut self,
        name: &str,
        name_span: Span,
        args: &[ast::Expr],
        span: Span,
    ) -> Result<Action> {
        let proto = subrs::kernel_action(name).expect("a kernel action");
        if args.len() < proto.required || args.len() > proto.params.len() {
            return err(Tag::D_PROTO_LEN, name_span, subrs::proto_len_message(name, args.len(), &proto));
        }
        let vals =
            args.iter().enumerate().map(|(i, a)| self.subr_arg(name, &proto, i, a)).collect::<Result<Vec<_>>>()?;
        Ok(match name {
            "pcap" => Action::Eval(mk(ExprKind::Call(Subr::Pcap, vals), Type::Void, span)),
            _ => Action::Nop,
        })
    }

    /// Argument `i` of a call, checked against its parameter and converted to it.
    fn subr_arg(&mut self, name: &str, proto: &Proto, i: usize, a: &ast::Expr) -> Result<Expr> {
        // An action has no value: DTrace types it void, which no parameter accepts.
        if is_action_call(a) {
            return err(Tag::D_PROTO_ARG, a.span, arg_mismatch(name, i, proto, "void"));
        }
        let v = self.rvalue(a)?;
        // strtok(NULL, …) goes on with the previous string: the NULL stays a NULL.
        if name == "strtok" && i == 0 && is_zero_constant(&v) {
            return Ok(v);
        }
        let v = match proto.params[i] {
            Param::VoidPtr | Param::PtrTo(_) => self.decay(v),
            _ => v,
        };
        if !self.accepts(proto.params[i], &v) {
            let shown = self.type_name(&v.ty);
            return err(Tag::D_PROTO_ARG, a.span, arg_mismatch(name, i, proto, &shown));
        }
        Ok(match proto.params[i] {
            Param::Str => self.convert(v, &Type::String),
            _ => v,
        })
    }

    /// dt_node_is_argcompat: whether parameter `p` accepts `v`.
    fn accepts(&self, p: Param, v: &Expr) -> bool {
        let t = &v.ty;
        match p {
            Param::Int => t.is_integer(),
            Param::Scalar => t.is_scalar(),
            Param::Str => is_stringish(t) || is_zero_constant(v),
            Param::VoidPtr => t.is_pointer() || matches!(t, Type::Array(..)) || t.is_string() || is_zero_constant(v),
            Param::PtrTo(name) => {
                let target = self.named_type(name);
                is_zero_constant(v)
                    || matches!(t, Type::Pointer(inner) if inner.is_void() || Some(&**inner) == target.as_ref())
            }
            Param::Kernel => is_zero_constant(v) || matches!(t, Type::Pointer(inner) if inner.is_void()),
        }
    }

    /// A type of the program by the name a prototype uses: `struct tag` or a typedef.
    fn named_type(&self, name: &str) -> Option<Type> {
        let types = &self.prog.types;
        match name.strip_prefix("struct ") {
            Some(tag) => types.struct_tags.get(tag).map(|&id| Type::Struct(id)),
            None => types.typedefs.get(name).cloned(),
        }
    }

    /// What libdtrace checks beyond the prototype, for particular subroutines.
    fn subr_constraints(&mut self, name: &str, subr: Subr, vals: &[Expr], span: Span) -> Result<()> {
        match subr {
            Subr::Alloca => self.alloca_size_fits(&vals[0], span),
            Subr::Copyin => self.alloca_size_fits(&vals[1], span),
            Subr::Bcopy => self.alloca_destination(name, 2, &vals[1]),
            Subr::Copyinto => self.alloca_destination(name, 3, &vals[2]),
            Subr::InetNtoa6 => match vals.get(1) {
                Some(strict) if !matches!(strict.kind, ExprKind::Int(_)) => {
                    err(Tag::D_PROTO_ARG, strict.span, "inet_ntoa6( ) argument #2 must be an integer constant")
                }
                _ => Ok(()),
            },
            Subr::Kernel => err(Tag::D_FUNC_UNDEF, span, subrs::kernel_only_message(name)),
            _ => Ok(()),
        }
    }

    /// dt_cg_subr_alloca_impl: a constant size must fit the scratch space (its first
    /// 8 bytes stand for NULL).
    fn alloca_size_fits(&self, size: &Expr, span: Span) -> Result<()> {
        let room = self.alloca.scratch_room();
        match size.kind {
            ExprKind::Int(n) if n > room => {
                err(Tag::D_ALLOCA_SIZE, span, format!("alloca({n}) size larger than scratchsize {room}"))
            }
            _ => Ok(()),
        }
    }

    /// bcopy() and copyinto() write only to scratch space.
    fn alloca_destination(&self, name: &str, argno: usize, dst: &Expr) -> Result<()> {
        if dst.taint.alloca {
            return Ok(());
        }
        err(
            Tag::D_PROTO_ARG,
            dst.span,
            format!(
                "{name}( ) argument #{argno} is incompatible with prototype:\n\tprototype: alloca pointer\n\t argument: non-alloca pointer"
            ),
        )
    }

    /// The result type of a subroutine, and whether it is an alloca pointer.
    fn subr_result(&self, name: &str, subr: Subr) -> (Type, Taint) {
        let string = Type::String;
        let void_ptr = Type::Pointer(Box::new(Type::Void));
        let ty = match subr {
            Subr::Strlen => Type::named_int(8, false, "size_t"),
            Subr::Index | Subr::Rindex | Subr::Rand | Subr::Speculation | Subr::Progenyof => int_ty(),
            Subr::Strtoll => Type::named_int(8, true, "int64_t"),
            Subr::Htons | Subr::Ntohs => Type::named_int(2, false, "uint16_t"),
            Subr::Htonl | Subr::Ntohl => Type::named_int(4, false, "uint32_t"),
            Subr::Htonll | Subr::Ntohll => Type::named_int(8, false, "uint64_t"),
            Subr::Getmajor | Subr::Getminor => Type::named_int(4, false, "dev_t"),
            Subr::Alloca | Subr::Copyin => return (void_ptr, Taint::ALLOCA),
            Subr::Bcopy | Subr::Copyinto | Subr::Copyout | Subr::Copyoutstr | Subr::Pcap => Type::Void,
            Subr::Stack { user } => Type::Stack { user },
            Subr::Symbol => {
                let user = name.starts_with('u');
                let kind = match name.trim_start_matches('u') {
                    "sym" => SymKind::Sym,
                    "mod" => SymKind::Mod,
                    "func" => SymKind::Func,
                    _ => SymKind::Addr,
                };
                Type::Symbol { user, kind }
            }
            Subr::Kernel => int_ty(),
            Subr::Strjoin
            | Subr::StrSetChar
            | Subr::Substr
            | Subr::Strstr
            | Subr::Strchr
            | Subr::Strrchr
            | Subr::Strtok
            | Subr::Basename
            | Subr::Dirname
            | Subr::Cleanpath
            | Subr::Lltostr
            | Subr::Toupper
            | Subr::Tolower
            | Subr::Copyinstr
            | Subr::InetNtoa
            | Subr::InetNtoa6
            | Subr::InetNtop
            | Subr::LinkNtop => string,
        };
        (ty, Taint::default())
    }
}

/// DTrace's D_PROTO_ARG message for argument `i` of type `shown`.
fn arg_mismatch(name: &str, i: usize, proto: &Proto, shown: &str) -> String {
    format!(
        "{name}( ) argument #{} is incompatible with prototype:\n\tprototype: {}\n\t argument: {shown}",
        i + 1,
        proto.param_name(i)
    )
}
