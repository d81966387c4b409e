//! Plain clauses: a clause that is only printf()s of a firing's integer fields
//! (`printf("%d\n", arg0)`), with no predicate, recognised once when the consumer is
//! made and run on the firing's fields without the general path's set-up (the probe's
//! identity overlaid, scratch and temporaries reset, the actions' loop, a `Value` per
//! argument, the format looked up).
//!
//! The plan only picks which of the shared pieces run: the integers are read and
//! narrowed as `eval_datum` reads them ([`Context::builtin_int`], `int_of`) and
//! formatted by the engine's own [`PlainFormat`]; the record opens and ends through the
//! output format, and its header is decided as the general path decides it. A firing
//! whose context has no integer for a field goes the general way.

use udtrace_lang::ir::{Action, Builtin, Clause, ExprKind};

use crate::context::Context;
use crate::format::printf::PlainFormat;

/// One clause's plan: its printf()s in order, each with the fields it formats.
#[derive(Debug)]
pub(crate) struct PlainClause {
    printfs: Vec<(PlainFormat, Vec<Field>)>,
}

/// A field a printf() formats: the builtin, and its type's size and signedness.
type Field = (Builtin, u8, bool);

/// Builtins the consumer answers itself (the probe's identity, the clause's cached
/// `timestamp`), or reads without `builtin_int`: not a plain field.
fn is_field(b: Builtin) -> bool {
    !matches!(
        b,
        Builtin::Timestamp
            | Builtin::Probeprov
            | Builtin::Probemod
            | Builtin::Probefunc
            | Builtin::Probename
            | Builtin::Id
            | Builtin::Epid
            | Builtin::Cpu
            | Builtin::Curcpu
    )
}

impl PlainClause {
    /// `clause`'s plan, if it is a plain clause (`records_data`: it prints a record).
    pub(crate) fn of(clause: &Clause, records_data: bool, formats: &crate::output::FormatCache) -> Option<PlainClause> {
        if clause.predicate.is_some() || !records_data || clause.actions.is_empty() {
            return None;
        }
        let mut printfs = Vec::new();
        for a in &clause.actions {
            let Action::Printf { format, args, .. } = a else { return None };
            let plain = formats.plain(format)?;
            if plain.arg_count() != args.len() {
                return None;
            }
            // (An integer as `eval_datum` reads it: `int_of` its type.)
            let field = |e: &udtrace_lang::ir::Expr| match e.kind {
                ExprKind::Builtin(b) if is_field(b) && !e.ty.is_string() => {
                    e.ty.int_bits().map(|(size, signed)| (b, size, signed))
                }
                _ => None,
            };
            printfs.push((plain, args.iter().map(field).collect::<Option<Vec<_>>>()?));
        }
        Some(PlainClause { printfs })
    }

    /// Appends the clause's output; `false` (with `out` as it was) where the context
    /// has no integer for a field, which the general path then reads.
    #[inline]
    pub(crate) fn run(&self, out: &mut Vec<u8>, ctx: &dyn Context) -> bool {
        let start = out.len();
        for (format, fields) in &self.printfs {
            let read = |n: usize| {
                let &(b, size, signed) = fields.get(n)?;
                Some(crate::eval::int_sized(size, signed, ctx.builtin_int(b)?))
            };
            if !format.format_with(out, read) {
                out.truncate(start);
                return false;
            }
        }
        true
    }
}
