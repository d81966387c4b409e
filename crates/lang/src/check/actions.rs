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
        let Some(kind) = AggKind::from_name(fname) else {
            return err(
                Tag::D_AGG_FUNC,
                rhs.span,
                format!("@{name} must be assigned the result of an aggregating function"),
            );
        };
        let mut keys = Vec::new();
        for k in key_exprs {
            let k = self.rvalue(k)?;
            if !k.ty.is_scalar() && !k.ty.is_string() && !matches!(k.ty, Type::Stack { .. }) {
                return err(
                    Tag::D_KEY_TYPE,
                    k.span,
                    format!("aggregation key of type \"{}\" is not supported", self.type_name(&k.ty)),
                );
            }
            keys.push(self.string_if_char_array(k));
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
                    let (tag, msg) = if kind == AggKind::Lquantize {
                        let tag = [Tag::D_LQUANT_BASETYPE, Tag::D_LQUANT_LIMTYPE, Tag::D_LQUANT_STEPTYPE][i - 1];
                        (tag, format!("lquantize( ) argument #{i} must be an integer constant"))
                    } else {
                        let what = ["factor", "low magnitude", "high magnitude", "linear steps per magnitude"][i - 1];
                        let tag = [
                            Tag::D_LLQUANT_FACTORTYPE,
                            Tag::D_LLQUANT_LMAGTYPE,
                            Tag::D_LLQUANT_HMAGTYPE,
                            Tag::D_LLQUANT_STEPTYPE,
                        ][i - 1];
                        (tag, format!("llquantize( ) argument #{i} ({what}) must be an integer constant"))
                    };
                    CompileError::new(tag, a.span, msg)
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
                let v = self.rvalue(e)?;
                err(
                    tag,
                    e.span,
                    format!(
                        "{fname}( ) argument #{argno} is incompatible with prototype:\n\tprototype: aggregation\n\t argument: {}",
                        self.type_name(&v.ty)
                    ),
                )
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

    fn arity(&self, name: &str, span: Span, args: &[ast::Expr], min: usize, max: usize) -> Result<()> {
        if args.len() < min || args.len() > max {
            return err(Tag::D_PROTO_LEN, span, proto_len(name, "( )", "arg", args.len(), min, max));
        }
        Ok(())
    }

    fn format_string(&mut self, name: &str, e: &ast::Expr) -> Result<Rc<str>> {
        match &e.kind {
            ast::ExprKind::Str(s) => Ok(Rc::from(s.as_str())),
            _ => {
                let v = self.rvalue(e)?;
                err(
                    Tag::D_PRINTF_ARG_FMT,
                    e.span,
                    format!(
                        "{name}( ) argument #1 is incompatible with prototype:\n\tprototype: string constant\n\t argument: {}",
                        self.type_name(&v.ty)
                    ),
                )
            }
        }
    }

    pub(super) fn action(&mut self, name: &str, span: Span, args: &[ast::Expr], whole: Span) -> Result<Action> {
        let _ = whole;
        Ok(match name {
            "trace" => {
                self.arity(name, span, args, 1, 1)?;
                let v = self.rvalue(&args[0])?;
                if v.ty.is_void() {
                    return err(Tag::D_TRACE_VOID, args[0].span, "trace( ) may not be applied to a void expression");
                }
                Action::Trace(v)
            }
            "print" => {
                self.arity(name, span, args, 1, 1)?;
                Action::Trace(self.rvalue(&args[0])?)
            }
            "tracemem" => {
                self.arity(name, span, args, 2, 3)?;
                let addr = self.rvalue(&args[0])?;
                let size = self.const_int(&args[1]).map_err(|_| {
                    CompileError::new(
                        Tag::D_TRACEMEM_SIZE,
                        args[1].span,
                        "tracemem( ) argument #2 must be a non-zero positive integral constant expression",
                    )
                })?;
                if size <= 0 {
                    return err(
                        Tag::D_TRACEMEM_SIZE,
                        args[1].span,
                        "tracemem( ) argument #2 must be a non-zero positive integral constant expression",
                    );
                }
                let dsize = match args.get(2) {
                    Some(a) => Some(self.rvalue(a)?),
                    None => None,
                };
                Action::Tracemem { addr, size: size as u64, dsize }
            }
            "printf" | "system" | "freopen" => {
                self.arity(name, span, args, 1, usize::MAX)?;
                let format = self.format_string(name, &args[0])?;
                if name == "freopen" && &*format == "." {
                    // libdtrace keeps "." to mean "restore stdout" (what "" asks for).
                    return err(Tag::D_FREOPEN_INVALID, span, "freopen( ) argument #1 cannot be \".\"");
                }
                let mut vals = Vec::new();
                for a in &args[1..] {
                    let v = self.rvalue(a)?;
                    if v.ty.is_void() {
                        return err(Tag::D_PRINTF_ARG_TYPE, a.span, format!("{name}( ) argument is of type void"));
                    }
                    vals.push(self.string_if_char_array(v));
                }
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
                let v = self.rvalue(&args[0])?;
                self.require_int(name, 1, &v, "int")?;
                Action::Exit(v)
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
                    Some(a) => {
                        let v = self.rvalue(a)?;
                        self.require_int(name, 2, &v, "uint64_t")?;
                        Some(v)
                    }
                    None => None,
                };
                Action::Trunc { agg, keep }
            }
            "normalize" => {
                self.arity(name, span, args, 2, 2)?;
                let agg = self.agg_ref(&args[0], name, 1)?;
                let factor = self.rvalue(&args[1])?;
                self.require_int(name, 2, &factor, "uint64_t")?;
                Action::Normalize { agg, factor }
            }
            "setopt" => {
                self.arity(name, span, args, 1, 2)?;
                let mut strs = Vec::new();
                for (i, a) in args.iter().enumerate() {
                    match &a.kind {
                        ast::ExprKind::Str(s) => strs.push(s.clone()),
                        _ => {
                            return err(
                                Tag::D_PROTO_ARG,
                                a.span,
                                format!("setopt( ) argument #{} is incompatible with prototype:\n\tprototype: string constant\n\t argument: expression", i + 1),
                            )
                        }
                    }
                }
                Action::Setopt { name: strs[0].clone(), value: strs.get(1).cloned() }
            }
            "speculate" | "commit" | "discard" | "raise" => {
                self.arity(name, span, args, 1, 1)?;
                let v = self.rvalue(&args[0])?;
                self.require_int(name, 1, &v, "int")?;
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
            "jstack" => Action::Stack { user: true, frames: None },
            "ftruncate" => {
                self.arity(name, span, args, 0, 0)?;
                Action::Ftruncate
            }
            "chill" | "panic" | "breakpoint" | "pcap" => self.kernel_action(name, span, args, whole)?,
            _ => {
                for a in args {
                    self.rvalue(a)?;
                }
                Action::Nop
            }
        })
    }

    fn require_int(&self, fname: &str, argno: usize, v: &Expr, proto: &str) -> Result<()> {
        if v.ty.is_arithmetic() {
            return Ok(());
        }
        err(
            Tag::D_PROTO_ARG,
            v.span,
            format!(
                "{fname}( ) argument #{argno} is incompatible with prototype:\n\tprototype: {proto}\n\t argument: {}",
                self.type_name(&v.ty)
            ),
        )
    }
}
