//! Provider definitions (`provider p { probe a(int) : (long); };`): the rules and
//! messages of DTrace's `dt_node_provider`, `dt_node_probe` and `dt_cook_provider`.
//! A checked definition is kept in the program (`ir::ProviderInfo`) for `-h`.

use super::*;
use crate::ir::{ProbeInfo, ProviderInfo};

/// DTRACE_PROVNAMELEN and DTRACE_NAMELEN: a provider's and a probe's longest name
/// is one less.
const PROVNAMELEN: usize = 64;
const NAMELEN: usize = 64;

/// dt_node_is_argcompat for two types: a native argument that D sees as the
/// translated type without a translator.
fn arg_compatible(native: &Type, translated: &Type) -> bool {
    let stringish = |t: &Type| t.is_string() || t.is_char_pointer_or_array();
    (native.is_integer() && translated.is_integer())
        || (stringish(native) && stringish(translated))
        || native == translated
        || matches!((native.pointee(), translated.pointee()), (Some(a), Some(b)) if a.is_void() || b.is_void() || a == b)
}

impl Checker<'_> {
    /// Checks a provider definition; a second definition of a provider must agree
    /// with the first. DTrace names a probe `provider:::name` in these messages
    /// (its identifier is `::name`).
    pub(super) fn define_provider(&mut self, p: &ast::ProviderDef) -> Result<()> {
        let bad = |what: &str| err(Tag::D_PROV_BADNAME, p.span, what.to_string());
        if p.name.contains('`') {
            return bad(&format!("provider name may not contain scoping operator: {}", p.name));
        }
        if p.name.len() >= PROVNAMELEN {
            return bad(&format!("provider name may not exceed {} characters: {}", PROVNAMELEN - 1, p.name));
        }
        if p.name.ends_with(|c: char| c.is_ascii_digit()) {
            return bad(&format!("provider name may not end with a digit: {}", p.name));
        }
        let prov = &p.name;
        let mut probes: Vec<ProbeInfo> = Vec::new();
        for d in &p.probes {
            let name = d.name.replace("__", "-");
            if name.len() >= NAMELEN {
                let msg = format!("probe name may not exceed {} characters: ::{name}", NAMELEN - 1);
                return err(Tag::D_PROV_BADNAME, d.span, msg);
            }
            let native = self.probe_types(&d.native)?;
            let translated = match &d.translated {
                Some(params) => self.probe_types(params)?,
                None => native.clone(),
            };
            for (kind, n) in [("input", native.len()), ("output", translated.len())] {
                if n > usize::from(u8::MAX) {
                    let msg =
                        format!("probe ::{name} {kind} prototype exceeds {} parameters: {n} params used", u8::MAX);
                    return err(Tag::D_PROV_PRARGLEN, d.span, msg);
                }
            }
            if probes.iter().any(|q| q.name == name) {
                return err(Tag::D_PROV_PRDUP, d.span, format!("probe redeclared: {prov}:::{name}"));
            }
            let probe = ProbeInfo { name, declared: d.name.clone(), native, translated };
            self.check_translations(prov, d, &probe)?;
            probes.push(probe);
        }
        let Some(old) = self.prog.providers.iter().find(|q| q.name == *prov) else {
            self.prog.providers.push(ProviderInfo { name: prov.clone(), probes });
            return Ok(());
        };
        for (new, d) in probes.iter().zip(&p.probes) {
            let Some(prev) = old.probes.iter().find(|q| q.name == new.name) else {
                let probe = &new.name;
                let msg = format!(
                    "provider interface mismatch: {prov}\n\t current: probe {prov}:::{probe} defined\n\tprevious: probe {prov}:::{probe} not defined"
                );
                return err(Tag::D_PROV_INCOMPAT, d.span, msg);
            };
            self.same_prototype(prov, new, prev, d.span)?;
        }
        Ok(())
    }

    fn probe_types(&mut self, params: &[ast::Param]) -> Result<Vec<Type>> {
        params.iter().filter_map(|p| p.ty.as_ref()).map(|t| self.resolve_type(t)).collect()
    }

    /// dt_cook_probe: each translated argument (the native one of the same name, else
    /// of the same position) needs a translator unless the types are compatible.
    fn check_translations(&self, prov: &str, d: &ast::ProbeDef, probe: &ProbeInfo) -> Result<()> {
        let Some(xparams) = &d.translated else { return Ok(()) };
        for (i, (xp, x)) in xparams.iter().zip(&probe.translated).enumerate() {
            let k = match &xp.name {
                Some(n) => d.native.iter().position(|p| p.name.as_ref() == Some(n)).unwrap_or(d.native.len()),
                None => i,
            };
            let Some(n) = probe.native.get(k) else {
                let msg = format!("probe {prov}:::{} output argument #{} maps to no input argument", probe.name, i + 1);
                return err(Tag::D_PROV_PRXLATOR, d.span, msg);
            };
            if arg_compatible(n, x) || self.has_translator(n, x) {
                continue;
            }
            let msg = format!(
                "translator for {prov}:::{} output argument #{} from {} to {} is not defined",
                probe.name,
                i + 1,
                self.type_name(n),
                self.type_name(x)
            );
            return err(Tag::D_PROV_PRXLATOR, d.span, msg);
        }
        Ok(())
    }

    /// dt_xlator_lookup with DT_XLATE_FUZZY: a translator to `to` (or to what `to`
    /// points to) from `from` or a type `from` may be passed as.
    fn has_translator(&self, from: &Type, to: &Type) -> bool {
        let target = to.pointee().filter(|t| matches!(t, Type::Struct(_) | Type::Union(_))).unwrap_or(to);
        self.translators.iter().any(|x| x.output == *target && (x.input == *from || arg_compatible(from, &x.input)))
    }

    /// dt_node_provider_cmp_argv on the output prototypes.
    fn same_prototype(&self, prov: &str, new: &ProbeInfo, old: &ProbeInfo, span: Span) -> Result<()> {
        let (n, o) = (new.translated.len(), old.translated.len());
        let s = |k: usize| if k == 1 { "" } else { "s" };
        let probe = &new.name;
        if n != o {
            let msg = format!(
                "probe {prov}:::{probe} output prototype mismatch:\n\t current: {n} arg{}\n\tprevious: {o} arg{}",
                s(n),
                s(o)
            );
            return err(Tag::D_PROV_INCOMPAT, span, msg);
        }
        for (i, (a, b)) in new.translated.iter().zip(&old.translated).enumerate() {
            if a != b {
                let msg = format!(
                    "probe {prov}:::{probe} output prototype argument #{} mismatch:\n\t current: {}\n\tprevious: {}",
                    i + 1,
                    self.type_name(a),
                    self.type_name(b)
                );
                return err(Tag::D_PROV_INCOMPAT, span, msg);
            }
        }
        Ok(())
    }
}
