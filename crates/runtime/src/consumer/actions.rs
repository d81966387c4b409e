//! What each action does when its clause runs: trace(), printf(), printa(), the
//! aggregating functions, speculations, exit(), system() and the other destructive
//! actions, setopt(). Split from the consumer's firing and record handling
//! (`consumer.rs`); the same `impl Consumer`.

use super::*;

impl Consumer {
    pub(super) fn actions(
        &mut self,
        actions: &[Action],
        ctx: &dyn Context,
        rec: &mut Record,
        fx: &mut Effects,
        counter: &mut usize,
    ) -> Result<Flow, (Fault, usize)> {
        for a in actions {
            *counter += 1;
            let n = *counter;
            if self.action(a, ctx, rec, fx, counter).map_err(|f| (f, n))? == Flow::Abort {
                return Ok(Flow::Abort);
            }
            // DTrace checks each datum a speculating clause records against specsize
            // and stops the clause at the first that does not fit.
            if rec.spec.is_some() && rec.size > self.settings.specsize {
                self.drops.spec += 1;
                return Ok(Flow::Abort);
            }
        }
        Ok(Flow::Continue)
    }

    pub(super) fn action(
        &mut self,
        a: &Action,
        ctx: &dyn Context,
        rec: &mut Record,
        fx: &mut Effects,
        counter: &mut usize,
    ) -> EvalResult<Flow> {
        match a {
            Action::Eval(e) => {
                self.eval(e, ctx)?;
            }
            Action::Trace(e) => {
                let v = self.eval_datum(e, ctx)?;
                rec.add_datum(&v, self.settings.strsize);
                self.oformat.trace(&mut rec.data, &v, &self.settings);
            }
            Action::Print { addr, ty } => {
                let size = self.prog.types.size_of(ty).unwrap_or(0) as usize;
                let (at, data) = self.eval_with(ctx, |ev| ev.pointed_object(addr, size))?;
                rec.add(size, 1);
                let shown = &data[..size.min(self.settings.printsize)];
                self.oformat.print(&mut rec.data, at, ty, shown, &self.prog.types);
            }
            Action::Tracemem { addr, size, dsize } => {
                // Traced memory, scratch space or D memory, wherever the address is.
                let mut data = self.eval_with(ctx, |ev| ev.pointed_bytes(addr, *size as usize))?;
                if let Some(d) = dsize {
                    if let Value::Int(i) = self.eval(d, ctx)? {
                        data.truncate(i.bits.min(*size) as usize);
                    }
                }
                rec.add(*size as usize, 1);
                self.oformat.tracemem(&mut rec.data, &data);
            }
            Action::Printf { format, args, .. } => {
                let mut vals = std::mem::take(&mut self.spare_values);
                vals.clear();
                for e in args {
                    match self.eval_datum(e, ctx) {
                        Ok(v) => vals.push(v),
                        Err(f) => {
                            self.spare_values = vals;
                            return Err(f);
                        }
                    }
                }
                vals.iter().for_each(|v| rec.add_datum(v, self.settings.strsize));
                let sym = |addr: u64, _user: bool| ctx.symbol(addr, udtrace_lang::types::SymKind::Addr);
                self.oformat.printf(&mut rec.data, &self.formats, format, &vals, &self.settings, &sym);
                vals.clear();
                self.spare_values = vals;
            }
            Action::System { format, args, .. } | Action::Freopen { format, args, .. } => {
                let vals = args.iter().map(|e| self.eval(e, ctx)).collect::<EvalResult<Vec<_>>>()?;
                vals.iter().for_each(|v| rec.add_datum(v, self.settings.strsize));
                let sym = |addr: u64, _user: bool| ctx.symbol(addr, udtrace_lang::types::SymKind::Addr);
                let text =
                    String::from_utf8_lossy(&self.formats.printf(format, &vals, &self.settings, &sym)).into_owned();
                let d =
                    if matches!(a, Action::System { .. }) { Deferred::System(text) } else { Deferred::Freopen(text) };
                rec.deferred.push((self.deferred_at(rec), d));
            }
            Action::Printa { format, aggs } => {
                for &id in aggs {
                    self.aggs[id].printed = true;
                }
                let list: Vec<&Aggregation> = aggs.iter().map(|&i| &self.aggs[i]).collect();
                let fmt = format.as_ref().map(|(f, _)| f.as_ref());
                let sym = |addr: u64, _user: bool| ctx.symbol(addr, udtrace_lang::types::SymKind::Addr);
                self.oformat.printa(&mut rec.data, &self.formats, fmt, &list, &self.settings, &sym);
            }
            Action::AggUpdate { agg, keys, args } => {
                let keys =
                    keys.iter().map(|k| self.eval(k, ctx).map(crate::eval::narrow)).collect::<EvalResult<Vec<_>>>()?;
                let vals = args.iter().map(|e| self.eval(e, ctx).map(|v| int(&v))).collect::<EvalResult<Vec<_>>>()?;
                let kind = self.prog.aggs[*agg].kind;
                let (value, incr) = match kind {
                    AggKind::Count => (0, 1),
                    AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => {
                        (vals[0], vals.get(1).copied().unwrap_or(1))
                    }
                    _ => (vals[0], 1),
                };
                let cpu = ctx.builtin(Builtin::Cpu).map_or(0, |v| int(&v) as u32);
                self.aggs[*agg].update_on(cpu, &keys, value, incr);
            }
            Action::Exit(e) => {
                let v = self.eval(e, ctx)?;
                self.oformat.exit(&mut rec.data, int(&v) as i32);
                fx.exit.get_or_insert(int(&v) as i32);
                self.draining = true;
            }
            Action::Clear(id) => self.aggs[*id].clear(),
            Action::Trunc { agg, keep } => {
                let n = match keep {
                    Some(k) => int(&self.eval(k, ctx)?),
                    None => 0,
                };
                self.aggs[*agg].trunc(n);
            }
            Action::Normalize { agg, factor } => {
                let f = int(&self.eval(factor, ctx)?);
                if f <= 0 || self.aggs[*agg].normalize(f as u64).is_err() {
                    return Err(Fault::IllegalOperation);
                }
            }
            Action::Denormalize(id) => self.aggs[*id].denormalize(),
            Action::Setopt { name, value } => {
                // dtrace(1M) applies setopt() as it consumes the record, so the rest of
                // the record (its trailing newline) and later records see the change.
                match self.setopt(name, value.as_deref()) {
                    Ok(()) => fx.setopts.push((name.clone(), value.clone())),
                    Err(e) => rec.lib_errors.push(e),
                }
            }
            Action::Speculate(e) => {
                // dt_speculation_speculate: an id that names no active speculation
                // (0, out of range, free, or already committed or discarded) ends
                // the clause without a record or an error.
                let v = int(&self.eval(e, ctx)?) as u32 as usize;
                match v.checked_sub(1).filter(|&i| i < self.specs.len()) {
                    Some(i) if self.specs[i].active && !self.specs[i].draining => rec.spec = Some(i),
                    _ => return Ok(Flow::Abort),
                }
            }
            Action::Commit(e) | Action::Discard(e) => {
                // dt_speculation_set_drainable: an id past nspec is an illegal operation;
                // 0 or a free speculation is nothing to do.
                let v = int(&self.eval(e, ctx)?) as u32 as usize;
                if v > self.specs.len() {
                    return Err(Fault::IllegalOperation);
                }
                if let Some(i) = v.checked_sub(1) {
                    if self.specs[i].active && !self.specs[i].draining {
                        if matches!(a, Action::Commit(_)) {
                            let text = self.committed_output(i);
                            rec.committed.extend_from_slice(&text);
                        }
                        let s = &mut self.specs[i];
                        s.draining = true;
                        s.buffer.clear();
                    }
                }
            }
            Action::Symbol(e) => {
                let v = self.eval(e, ctx)?;
                rec.add_datum(&v, self.settings.strsize);
                self.oformat.symbol(&mut rec.data, &v, &e.ty);
            }
            Action::Stack { user, frames } => {
                let frames = ctx.stack(*user, *frames);
                let v = Value::Stack(frames);
                rec.add_datum(&v, self.settings.strsize);
                self.oformat.stack(&mut rec.data, &v, *user, &self.settings);
            }
            Action::If { cond, then, otherwise } => {
                let c = self.eval(cond, ctx)?;
                let branch = if truthy(&c) { then } else { otherwise };
                return self.actions(branch, ctx, rec, fx, counter).map_err(|(f, _)| f);
            }
            Action::Raise(e) => {
                // dtrace_action_raise: a signal number out of range is illegal.
                let sig = int(&self.eval(e, ctx)?);
                let sig = i32::try_from(sig).ok().filter(|s| (1..=64).contains(s)).ok_or(Fault::IllegalOperation)?;
                fx.signals.push((firing_pid(ctx), sig));
            }
            Action::Stop => fx.signals.push((firing_pid(ctx), libc_sigstop())),
            Action::Ftruncate => rec.deferred.push((self.deferred_at(rec), Deferred::Ftruncate)),
            Action::Nop => {}
        }
        Ok(Flow::Continue)
    }

    /// Applies a `setopt()` to the options that change printing, with libdtrace's
    /// value rules (a bare or numeric value sets a toggle; "no", "off", "" unset it).
    /// An unknown option, a bad value or an option that cannot change while tracing
    /// is DTrace's error message.
    pub(super) fn setopt(&mut self, name: &str, value: Option<&str>) -> Result<(), String> {
        use udtrace_lang::options::{lookup, parse_option, OptionName as N, OptionValue as V};
        let why = match lookup(name) {
            None => Some("Invalid option name"),
            Some(d) if !d.runtime_settable() => Some("Operation illegal when tracing is active"),
            Some(_) => None,
        };
        let parsed = match why {
            Some(why) => Err(why),
            None => parse_option(name, value).map_err(|_| "Invalid value for specified option"),
        };
        let (opt, v) = parsed.map_err(|why| {
            // A toggle without a value is set to "1", as libdtrace records it.
            format!("couldn't set option \"{name}\" to \"{}\": {why}\n", value.unwrap_or("1"))
        })?;
        let on = v != V::Unset;
        let int = match v {
            V::Int(n) => n as usize,
            _ => 0,
        };
        let s = &mut self.settings;
        match opt {
            N::Quiet => s.quiet = on,
            N::Aggsortkey => s.sort.key = on,
            N::Aggsortrev => s.sort.rev = on,
            N::Aggsortpos => s.sort.pos = int,
            N::Aggsortkeypos => s.sort.keypos = int,
            N::Printsize => {
                s.printsize = udtrace_lang::options::printsize(matches!(v, V::Int(_)).then_some(int as u64)) as usize
            }
            _ => {}
        }
        Ok(())
    }
}
