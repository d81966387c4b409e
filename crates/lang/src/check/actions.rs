//! The action statements: aggregation updates and the actions DTrace's code
//! generator accepts, with their prototypes and DTrace's messages.

use std::rc::Rc;

use super::*;

impl Checker<'_> {
    pub(super) fn agg_update(&mut self, lhs: &ast::Expr, rhs: &ast::Expr) -> Result<Action> {
        let (name, key_exprs): (&str, &[ast::Expr]) = match &lhs.kind {
            ast::ExprKind::Agg(n) => (n, &[]),
            ast::ExprKind::Index { base, index } => match &base.kind {
                ast::ExprKind::Agg(n) => (n, index),
                _ => unreachable!("is_agg_target checked the shape"),
            },
            _ => unreachable!("is_agg_target checked the shape"),
        };
        let ast::ExprKind::Call { name: fname, name_span, args } = &rhs.kind else {
            return err(
                Tag::D_AGG_FUNC,
                rhs.span,
                format!("@{name} must be assigned the result of an aggregating function"),
            );
        };
        let known = |n: &str| ACTIONS.contains(&n) || subrs::find(n).is_some() || n == "stack" || n == "ustack";
        if AggKind::from_name(fname).is_none() && !known(fname) {
            return err(Tag::D_FUNC_UNDEF, *name_span, format!("undefined function name: {fname}"));
        }
        let Some(kind) = AggKind::from_name(fname) else {
            return err(
                Tag::D_AGG_FUNC,
                rhs.span,
                format!("@{name} must be assigned the result of an aggregating function"),
            );
        };
        let mut keys = Vec::new();
        for (i, k) in key_exprs.iter().enumerate() {
            // jstack() is ustack() on Linux (no JVM helpers), as a key too.
            let jstack;
            let k = match &k.kind {
                ast::ExprKind::Call { name, name_span, args } if name == "jstack" => {
                    let kind = ast::ExprKind::Call { name: "ustack".into(), name_span: *name_span, args: args.clone() };
                    jstack = ast::Expr { kind, ..k.clone() };
                    &jstack
                }
                _ => k,
            };
            // dt_idcook_assc: neither a void nor a dynamic value can be a key.
            let k = match self.operand(k)? {
                Operand::Value(v) => {
                    super::check_key(k, &v, i, "aggregation")?;
                    v
                }
                o => {
                    return err(
                        Tag::D_KEY_TYPE,
                        k.span,
                        format!(
                            "{} expression may not be used as aggregation index: key #{}",
                            self.operand_type(&o),
                            i + 1
                        ),
                    )
                }
            };
            // A char array (curpsinfo->pr_psargs) is a string key, as in DTrace.
            let k = self.string_if_char_array(k);
            if !k.ty.is_scalar() && !k.ty.is_string() && !matches!(k.ty, Type::Stack { .. }) {
                return err(
                    Tag::D_KEY_TYPE,
                    k.span,
                    format!("aggregation key of type \"{}\" is not supported", self.type_name(&k.ty)),
                );
            }
            keys.push(k);
        }
        // Value and weight arguments are expressions; the shape parameters of
        // lquantize/llquantize are constants.
        let (nvals, nparams, max_args) = match kind {
            AggKind::Count => (0, 0, 0),
            AggKind::Sum | AggKind::Avg | AggKind::Min | AggKind::Max | AggKind::Stddev => (1, 0, 1),
            AggKind::Quantize => (1, 0, 2),
            AggKind::Lquantize => (1, 2, 5),
            AggKind::Llquantize => (1, 4, 6),
        };
        let min_args = nvals + nparams;
        if args.len() > max_args && max_args > min_args {
            return err(
                Tag::D_PROTO_LEN,
                *name_span,
                format!("{fname}( ) prototype mismatch: {} args passed, at most {max_args} expected", args.len()),
            );
        }
        if args.len() < min_args || args.len() > max_args {
            return err(Tag::D_PROTO_LEN, *name_span, proto_len(fname, "( )", "arg", args.len(), min_args, max_args));
        }
        let mut values = Vec::new();
        let mut params = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let is_param = match kind {
                AggKind::Lquantize => (1..=3).contains(&i),
                AggKind::Llquantize => (1..=4).contains(&i),
                _ => false,
            };
            if is_param {
                let v = self.const_int(a).map_err(|_| {
                    // dt_cg_agg_lquantize/llquantize: the step must be a positive
                    // constant, the other parameters constants.
                    let (tag, what) = if kind == AggKind::Lquantize {
                        let tag = [Tag::D_LQUANT_BASETYPE, Tag::D_LQUANT_LIMTYPE, Tag::D_LQUANT_STEPTYPE][i - 1];
                        (tag, if i == 3 { "a non-zero positive integer constant" } else { "an integer constant" })
                    } else {
                        let tag = [
                            Tag::D_LLQUANT_FACTORTYPE,
                            Tag::D_LLQUANT_LMAGTYPE,
                            Tag::D_LLQUANT_HMAGTYPE,
                            Tag::D_LLQUANT_STEPTYPE,
                        ][i - 1];
                        (tag, if i == 4 { "a non-zero positive integer constant" } else { "an integer constant" })
                    };
                    CompileError::new(tag, a.span, format!("{fname}( ) argument #{i} must be {what}"))
                })?;
                params.push(v);
            } else {
                let v = self.rvalue(a)?;
                if !v.ty.is_arithmetic() {
                    if i == 0 {
                        return err(
                            Tag::D_AGG_SCALAR,
                            a.span,
                            format!("{fname}( ) argument #1 must be of scalar type"),
                        );
                    }
                    return err(
                        Tag::D_PROTO_ARG,
                        a.span,
                        format!("{fname}( ) increment value (argument #{}) must be of scalar type", i + 1),
                    );
                }
                // An aggregating function takes the whole 64-bit register: a folded
                // constant is not cut to its type's width (min(1075064400 * 1000000000)).
                let v = if v.ty.is_integer() && fold(&v).is_some() {
                    self.convert(v, &Type::named_int(8, true, "int64_t"))
                } else {
                    v
                };
                values.push(v);
            }
        }
        if kind == AggKind::Lquantize && params.len() == 2 {
            params.push(1);
        }
        let key_types: Vec<Type> = keys.iter().map(|k| k.ty.clone()).collect();
        let agg = match self.aggs.get(name) {
            Some(&id) => {
                let prev = &self.prog.aggs[id];
                if prev.kind != kind {
                    return err(
                        Tag::D_AGG_REDEF,
                        rhs.span,
                        format!(
                            "aggregation redefined: @{name}\n\t current: @{name} = {}( )\n\tprevious: @{name} = {}( ) : line {}",
                            kind.name(),
                            prev.kind.name(),
                            prev.line
                        ),
                    );
                }
                if prev.params != params {
                    let names: &[&str] = if kind == AggKind::Lquantize {
                        &["base", "limit", "step"]
                    } else {
                        &["factor", "low magnitude", "high magnitude", "linear steps per magnitude"]
                    };
                    let i = prev.params.iter().zip(&params).position(|(a, b)| a != b).unwrap_or(0);
                    let what = format!("{} (argument #{})", names[i], i + 1);
                    let tag = if kind == AggKind::Lquantize {
                        [Tag::D_LQUANT_MATCHBASE, Tag::D_LQUANT_MATCHLIM, Tag::D_LQUANT_MATCHSTEP][i]
                    } else {
                        [
                            Tag::D_LLQUANT_MATCHFACTOR,
                            Tag::D_LLQUANT_MATCHLMAG,
                            Tag::D_LLQUANT_MATCHHMAG,
                            Tag::D_LLQUANT_MATCHSTEPS,
                        ][i]
                    };
                    return err(
                        tag,
                        rhs.span,
                        format!(
                            "{}( ) {what} doesn't match previous declaration: expected {}, found {}",
                            kind.name(),
                            prev.params[i],
                            params[i]
                        ),
                    );
                }
                if prev.keys.len() != key_types.len() {
                    let n = prev.keys.len();
                    return err(
                        Tag::D_PROTO_LEN,
                        lhs.span,
                        proto_len(&format!("@{name}"), "[ ]", "key", key_types.len(), n, n),
                    );
                }
                for (i, (a, b)) in prev.keys.iter().zip(&key_types).enumerate() {
                    if !same_kind(a, b) {
                        return err(
                            Tag::D_PROTO_ARG,
                            keys[i].span,
                            format!(
                                "@{name}[ ] key #{} is incompatible with prototype:\n\tprototype: {}\n\t      key: {}",
                                i + 1,
                                self.type_name(a),
                                self.type_name(b)
                            ),
                        );
                    }
                }
                // Later uses store their keys as the first use typed them: (int64_t)1
                // and (int32_t)1 are one key.
                let declared = prev.keys.clone();
                for (k, t) in keys.iter_mut().zip(&declared) {
                    if k.ty.is_integer() && t.is_integer() {
                        let v = std::mem::replace(k, int_const(0, int_ty(), Span::default()));
                        *k = self.convert(v, t);
                    }
                }
                id
            }
            None => {
                let id = self.prog.aggs.len();
                let line = self.line_of(lhs.span);
                self.prog.aggs.push(AggInfo {
                    name: name.to_string(),
                    kind,
                    params,
                    keys: key_types,
                    span: lhs.span,
                    line,
                });
                self.aggs.insert(name.to_string(), id);
                id
            }
        };
        Ok(Action::AggUpdate { agg, keys, args: values })
    }

    fn agg_ref(&mut self, e: &ast::Expr, fname: &str, argno: usize) -> Result<usize> {
        // Each aggregation-taking action has its own tags for a non-aggregation and
        // for an aggregation that does not exist.
        let (tag, undefined) = match fname {
            "clear" => (Tag::D_CLEAR_AGGARG, Tag::D_CLEAR_AGGBAD),
            "normalize" | "denormalize" => (Tag::D_NORMALIZE_AGGARG, Tag::D_NORMALIZE_AGGBAD),
            "trunc" => (Tag::D_TRUNC_AGGARG, Tag::D_TRUNC_AGGBAD),
            _ => (Tag::D_PRINTA_AGGARG, Tag::D_PRINTA_AGGBAD),
        };
        match &e.kind {
            ast::ExprKind::Agg(n) => match self.aggs.get(n) {
                Some(&id) => Ok(id),
                None => err(undefined, e.span, format!("undefined aggregation: @{n}")),
            },
            _ => {
                let o = self.operand(e)?;
                err(tag, e.span, proto_arg_message(fname, argno, "aggregation", &self.operand_type(&o)))
            }
        }
    }

    /// dt_printa_validate: the keys of `@other` must match those of `@first` in
    /// number and type. Raised while compiling the statement (no clause region).
    fn printa_keys_match(&self, first: usize, other: usize, span: Span) -> Result<()> {
        let (l, r) = (&self.prog.aggs[first], &self.prog.aggs[other]);
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        if l.keys.len() != r.keys.len() {
            let (ln, rn) = (l.keys.len(), r.keys.len());
            let msg = format!(
                "printa( ): @{} and @{} do not have matching key signatures: @{} has {ln} key{}, @{} has {rn} key{}",
                l.name,
                r.name,
                l.name,
                plural(ln),
                r.name,
                plural(rn)
            );
            return Err(CompileError::new(Tag::D_PRINTA_AGGKEY, span, msg).unlabelled());
        }
        for (i, (a, b)) in l.keys.iter().zip(&r.keys).enumerate() {
            if !same_kind(a, b) {
                let msg = format!(
                    "printa( ): @{}[ ] key #{n} is incompatible with @{}:\n{:>9} key #{n}: {}\n{:>9} key #{n}: {}",
                    r.name,
                    l.name,
                    l.name,
                    self.type_name(a),
                    r.name,
                    self.type_name(b),
                    n = i + 1
                );
                return Err(CompileError::new(Tag::D_PRINTA_AGGPROTO, span, msg).unlabelled());
            }
        }
        Ok(())
    }

    /// dt_idcook_sign's argument count check: "at least" the required arguments,
    /// "at most" all of them when some are optional.
    fn arity(&self, name: &str, span: Span, args: &[ast::Expr], min: usize, max: usize) -> Result<()> {
        let n = args.len();
        if n >= min && n <= max {
            return Ok(());
        }
        let plural = if n == 1 { " " } else { "s " };
        let bound = match (n < min, min == max) {
            (_, true) => format!("{min}"),
            (true, false) => format!("at least {min}"),
            (false, false) => format!("at most {max}"),
        };
        err(Tag::D_PROTO_LEN, span, format!("{name}( ) prototype mismatch: {n} arg{plural}passed, {bound} expected"))
    }

    /// An argument of an action, cooked as DTrace cooks function arguments: another
    /// action (or an aggregating function) there is a void value and an aggregation
    /// a dynamic one, for the action to reject with its own message.
    fn operand(&mut self, a: &ast::Expr) -> Result<Operand> {
        Ok(match &a.kind {
            // jstack() is a stack, like ustack().
            ast::ExprKind::Call { name, .. }
                if name != "jstack" && (ACTIONS.contains(&name.as_str()) || AggKind::from_name(name).is_some()) =>
            {
                Operand::Void
            }
            ast::ExprKind::Agg(_) => Operand::Aggregation,
            _ => Operand::Value(self.rvalue(a)?),
        })
    }

    /// The type name DTrace gives an operand in its messages.
    fn operand_type(&self, o: &Operand) -> String {
        match o {
            Operand::Value(v) => self.type_name(&v.ty),
            Operand::Void => "void".into(),
            Operand::Aggregation => "aggregation".into(),
        }
    }

    /// An operand that must be an integer (parameter `proto`, e.g. `int`).
    fn int_operand(&mut self, fname: &str, argno: usize, a: &ast::Expr, proto: &str) -> Result<Expr> {
        match self.operand(a)? {
            Operand::Value(v) if v.ty.is_arithmetic() => Ok(v),
            o => err(Tag::D_PROTO_ARG, a.span, proto_arg_message(fname, argno, proto, &self.operand_type(&o))),
        }
    }

    /// printf()'s format: a string, and a string constant at that.
    fn format_string(&mut self, name: &str, e: &ast::Expr) -> Result<Rc<str>> {
        if let ast::ExprKind::Str(s) = &e.kind {
            return Ok(Rc::from(s.as_str()));
        }
        let o = self.operand(e)?;
        let is_string = matches!(&o, Operand::Value(v) if is_stringish(&v.ty));
        // printf's prototype wants a string (system() and freopen() take anything);
        // the code generator then wants a constant.
        if name == "printf" && !is_string {
            return err(Tag::D_PROTO_ARG, e.span, proto_arg_message(name, 1, "string", &self.operand_type(&o)));
        }
        err(
            Tag::D_PRINTF_ARG_FMT,
            e.span,
            format!(
                "{name}( ) argument #1 is incompatible with prototype:\n\tprototype: string constant\n\t argument: {}",
                self.operand_type(&o)
            ),
        )
    }

    /// The arguments of printf(), system() and freopen(). A void or aggregation
    /// operand stands in as a typed placeholder, which the format check rejects
    /// with the conversion it meets, as dt_printf_validate does.
    fn format_args(&mut self, args: &[ast::Expr]) -> Result<Vec<Expr>> {
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            let v = match self.operand(a)? {
                Operand::Value(v) => self.string_if_char_array(v),
                o => operand_placeholder(&self.operand_type(&o), a.span),
            };
            vals.push(v);
        }
        Ok(vals)
    }

    pub(super) fn action(&mut self, name: &str, span: Span, args: &[ast::Expr], whole: Span) -> Result<Action> {
        let _ = whole;
        Ok(match name {
            "trace" => {
                self.arity(name, span, args, 1, 1)?;
                match self.operand(&args[0])? {
                    Operand::Value(v) if !v.ty.is_void() => Action::Trace(v),
                    Operand::Aggregation => {
                        return err(
                            Tag::D_TRACE_DYN,
                            args[0].span,
                            "trace( ) may not be applied to a dynamic expression",
                        )
                    }
                    _ => {
                        return err(Tag::D_TRACE_VOID, args[0].span, "trace( ) may not be applied to a void expression")
                    }
                }
            }
            "print" => {
                // print(void *): what the pointer points to, by its type.
                self.arity(name, span, args, 1, 1)?;
                match self.operand(&args[0])? {
                    Operand::Value(v) if v.ty.is_pointer() => match v.ty.pointee().cloned() {
                        Some(ty) if self.prog.types.size_of(&ty).is_some_and(|n| n > 0) => {
                            Action::Print { addr: v, ty }
                        }
                        Some(ty @ (Type::Struct(_) | Type::Union(_))) if self.prog.types.size_of(&ty) == Some(0) => {
                            let msg = format!(
                                "print( ) argument #1 reference has type '{}' with size 0; cannot print( ) it.",
                                self.type_name(&ty)
                            );
                            return err(Tag::D_PRINT_SIZE, args[0].span, msg);
                        }
                        _ => Action::Trace(v),
                    },
                    o => {
                        return err(
                            Tag::D_PROTO_ARG,
                            args[0].span,
                            proto_arg_message(name, 1, "void *", &self.operand_type(&o)),
                        )
                    }
                }
            }
            "tracemem" => self.tracemem(span, args)?,
            "printf" | "system" | "freopen" => {
                self.arity(name, span, args, 1, usize::MAX)?;
                let format = self.format_string(name, &args[0])?;
                if name == "freopen" && &*format == "." {
                    // libdtrace keeps "." to mean "restore stdout" (what "" asks for).
                    return err(Tag::D_FREOPEN_INVALID, span, "freopen( ) argument #1 cannot be \".\"");
                }
                let vals = self.format_args(&args[1..])?;
                let format_span = args[0].span;
                match name {
                    "printf" => Action::Printf { format, format_span, args: vals },
                    "system" => Action::System { format, format_span, args: vals },
                    _ => Action::Freopen { format, format_span, args: vals },
                }
            }
            "printa" => {
                self.arity(name, span, args, 1, usize::MAX)?;
                let (format, rest) = match &args[0].kind {
                    ast::ExprKind::Str(s) => (Some((Rc::from(s.as_str()), args[0].span)), &args[1..]),
                    _ => (None, args),
                };
                if rest.is_empty() {
                    return err(
                        Tag::D_PRINTA_PROTO,
                        span,
                        format!(
                            "printa( ) prototype mismatch: {} args passed, {} expected",
                            args.len(),
                            args.len() + 1
                        ),
                    );
                }
                let skip = usize::from(format.is_some());
                let aggs = rest
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.agg_ref(a, name, i + 1 + skip))
                    .collect::<Result<Vec<_>>>()?;
                // Several aggregations (with or without a format) print joined on
                // their keys, so their key signatures must match (dt_printa_validate).
                for &id in &aggs[1..] {
                    self.printa_keys_match(aggs[0], id, span)?;
                }
                Action::Printa { format, aggs }
            }
            "exit" => {
                self.arity(name, span, args, 1, 1)?;
                Action::Exit(self.int_operand(name, 1, &args[0], "int")?)
            }
            "clear" | "denormalize" => {
                self.arity(name, span, args, 1, 1)?;
                let id = self.agg_ref(&args[0], name, 1)?;
                if name == "clear" {
                    Action::Clear(id)
                } else {
                    Action::Denormalize(id)
                }
            }
            "trunc" => {
                self.arity(name, span, args, 1, 2)?;
                let agg = self.agg_ref(&args[0], name, 1)?;
                let keep = match args.get(1) {
                    Some(a) => Some(self.int_operand(name, 2, a, "int64_t")?),
                    None => None,
                };
                Action::Trunc { agg, keep }
            }
            "normalize" => {
                self.arity(name, span, args, 2, 2)?;
                let agg = self.agg_ref(&args[0], name, 1)?;
                let factor = self.int_operand(name, 2, &args[1], "uint64_t")?;
                Action::Normalize { agg, factor }
            }
            "setopt" => self.setopt(span, args)?,
            "speculate" | "commit" | "discard" | "raise" => {
                self.arity(name, span, args, 1, 1)?;
                let v = self.int_operand(name, 1, &args[0], "int")?;
                match name {
                    "speculate" => Action::Speculate(v),
                    "commit" => Action::Commit(v),
                    "discard" => Action::Discard(v),
                    _ => Action::Raise(v),
                }
            }
            "stop" => {
                self.arity(name, span, args, 0, 0)?;
                Action::Stop
            }
            // No JVM helpers on Linux: jstack() is ustack() (what users want from it).
            "jstack" => Action::Stack { user: true, frames: self.stack_args(name, span, args)? },
            "ftruncate" => {
                self.arity(name, span, args, 0, 0)?;
                Action::Ftruncate
            }
            "chill" | "panic" | "breakpoint" | "pcap" => self.kernel_action(name, span, args, whole)?,
            _ => {
                for a in args {
                    self.operand(a)?;
                }
                Action::Nop
            }
        })
    }

    /// tracemem(addr, size, [dsize]): an address (pointer or integer), a positive
    /// constant size, and optionally the size to print, at most that.
    fn tracemem(&mut self, span: Span, args: &[ast::Expr]) -> Result<Action> {
        let name = "tracemem";
        self.arity(name, span, args, 2, 3)?;
        let addr = match self.operand(&args[0])? {
            Operand::Value(v) if v.ty.is_integer() || v.ty.is_pointer() || matches!(v.ty, Type::Array(..)) => v,
            o => {
                return err(
                    Tag::D_TRACEMEM_ADDR,
                    args[0].span,
                    proto_arg_message(name, 1, "pointer or integer", &self.operand_type(&o)),
                )
            }
        };
        let size = self.int_operand(name, 2, &args[1], "size_t")?;
        let size = match size.kind {
            ExprKind::Int(n) if (n as i64) > 0 => n,
            _ => {
                return err(
                    Tag::D_TRACEMEM_SIZE,
                    args[1].span,
                    "tracemem( ) argument #2 must be a non-zero positive integral constant expression",
                )
            }
        };
        let dsize = match args.get(2) {
            Some(a) => Some(self.int_operand(name, 3, a, "size_t")?),
            None => None,
        };
        Ok(Action::Tracemem { addr, size, dsize })
    }

    /// setopt(name, [value]): strings (udtrace takes them as constants).
    fn setopt(&mut self, span: Span, args: &[ast::Expr]) -> Result<Action> {
        self.arity("setopt", span, args, 1, 2)?;
        let mut strs = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if let ast::ExprKind::Str(s) = &a.kind {
                strs.push(s.clone());
                continue;
            }
            let o = self.operand(a)?;
            if !matches!(&o, Operand::Value(v) if is_stringish(&v.ty)) {
                return err(
                    Tag::D_PROTO_ARG,
                    a.span,
                    proto_arg_message("setopt", i + 1, "char *", &self.operand_type(&o)),
                );
            }
            return err(
                Tag::D_PROTO_ARG,
                a.span,
                format!(
                    "setopt( ) argument #{} is incompatible with prototype:\n\tprototype: string constant\n\t argument: expression",
                    i + 1
                ),
            );
        }
        Ok(Action::Setopt { name: strs[0].clone(), value: strs.get(1).cloned() })
    }

    /// The frame count of `stack([uint32_t])`, `ustack([uint32_t], [uint32_t])` (or
    /// jstack), checked as DTrace does: the prototype first (count, integer arguments),
    /// then the values, which must be constants: frames > 0, string size >= 0.
    pub(super) fn stack_args(&mut self, name: &str, name_span: Span, args: &[ast::Expr]) -> Result<Option<u32>> {
        let kernel = name == "stack";
        self.arity(name, name_span, args, 0, if kernel { 1 } else { 2 })?;
        let mut vals = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            vals.push(self.int_operand(name, i + 1, a, "uint32_t")?);
        }
        let constant = |v: &Expr| fold(v).map(|n| (n, v.ty.int_shape().is_some_and(|s| s.signed)));
        let frames = match vals.first() {
            None => None,
            Some(v) => match constant(v) {
                Some((n, signed)) if n != 0 && (!signed || n as i64 > 0) => Some(n.min(u64::from(u32::MAX)) as u32),
                _ => {
                    let tag = if kernel { Tag::D_STACK_SIZE } else { Tag::D_USTACK_FRAMES };
                    let msg = format!("{name}( ) argument #1 must be a non-zero positive integer constant");
                    return err(tag, v.span, msg);
                }
            },
        };
        if let Some(v) = vals.get(1) {
            if !matches!(constant(v), Some((n, signed)) if !signed || n as i64 >= 0) {
                let msg = format!("{name}( ) argument #2 must be a positive integer constant");
                return err(Tag::D_USTACK_STRSIZE, v.span, msg);
            }
        }
        Ok(frames)
    }
}

/// `@a[i][j]`: DTrace's aggregations have one key tuple (D_AGG_MDIM); the name of
/// the aggregation so indexed.
pub(super) fn multi_dim_agg(e: &ast::Expr) -> Option<&str> {
    let ast::ExprKind::Index { base, .. } = &e.kind else { return None };
    match &base.kind {
        ast::ExprKind::Index { base: inner, .. } => match &inner.kind {
            ast::ExprKind::Agg(n) => Some(n),
            _ => multi_dim_agg(base),
        },
        _ => None,
    }
}

/// An action's argument as DTrace cooks it.
enum Operand {
    Value(Expr),
    /// An action or aggregating function called as an argument.
    Void,
    /// `@name` as an argument.
    Aggregation,
}

/// DTrace's D_PROTO_ARG message for argument `argno`.
fn proto_arg_message(fname: &str, argno: usize, proto: &str, arg: &str) -> String {
    format!("{fname}( ) argument #{argno} is incompatible with prototype:\n\tprototype: {proto}\n\t argument: {arg}")
}

/// A void or aggregation operand among printf()'s arguments: a value of type void
/// whose text is the type name to report. It never runs: no conversion accepts it.
fn operand_placeholder(type_name: &str, span: Span) -> Expr {
    mk(ExprKind::Str(Rc::from(type_name.as_bytes())), Type::Void, span)
}
