//! `-v`: dtrace's stability report for each program, the minimum stability
//! attributes of its probe descriptions and of its statements, computed as
//! libdtrace computes them (dt_probe_info, dt_node attributes) from the attributes
//! DTrace for Linux's providers and built-in identifiers declare.

use udtrace_lang::ast::ProbeDesc;
use udtrace_lang::ir::{self, Builtin, Clause, ExprKind, Subr};

/// Stability levels, lowest first (those no provider or built-in of udtrace has
/// are left out: Internal, Obsolete, External).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stability {
    Private,
    Unstable,
    Evolving,
    Stable,
    Standard,
}

/// Dependency classes, lowest first (without CPU, Platform and Group, which none
/// of udtrace's providers has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Unknown,
    Isa,
    Common,
}

/// Identifier names, data semantics, dependency class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attr(Stability, Stability, Class);

impl Attr {
    fn min(self, o: Attr) -> Attr {
        Attr(self.0.min(o.0), self.1.min(o.1), self.2.min(o.2))
    }
}

const MAX: Attr = Attr(Stability::Standard, Stability::Standard, Class::Common);
const STABLE: Attr = Attr(Stability::Stable, Stability::Stable, Class::Common);
const EVOLVING: Attr = Attr(Stability::Evolving, Stability::Evolving, Class::Common);
const UNSTABLE: Attr = Attr(Stability::Unstable, Stability::Unstable, Class::Common);
const PRIVATE: Attr = Attr(Stability::Private, Stability::Private, Class::Unknown);

/// A provider's attributes: provider, module, function, name, arguments.
type ProviderAttrs = [Attr; 5];

/// Unknown or glob-named providers: Unstable throughout.
const ANY_PROVIDER: ProviderAttrs = [UNSTABLE; 5];

fn provider_attrs(name: &str) -> Option<ProviderAttrs> {
    let isa = |s| Attr(s, s, Class::Isa);
    Some(match name {
        "dtrace" => [STABLE, PRIVATE, PRIVATE, STABLE, STABLE],
        "profile" => {
            [EVOLVING, Attr(Stability::Unstable, Stability::Unstable, Class::Unknown), PRIVATE, EVOLVING, EVOLVING]
        }
        "proc" => [isa(Stability::Evolving), PRIVATE, PRIVATE, isa(Stability::Evolving), isa(Stability::Evolving)],
        p if p.starts_with("pid") => [isa(Stability::Evolving), PRIVATE, PRIVATE, isa(Stability::Evolving), PRIVATE],
        _ => return None,
    })
}

/// strisglob, or an empty field (which matches anything).
fn is_glob(field: &str) -> bool {
    field.is_empty() || field.contains(['[', '?', '*', '\\'])
}

fn provider_of(d: &ProbeDesc) -> ProviderAttrs {
    if is_glob(&d.provider) {
        return ANY_PROVIDER;
    }
    provider_attrs(&d.provider).unwrap_or(ANY_PROVIDER)
}

/// dt_probe_info: the provider's attributes, lowered by those of each field given
/// without globbing.
fn description(d: &ProbeDesc) -> Attr {
    let p = provider_of(d);
    let mut a = p[0];
    for (field, attr) in [(&d.module, p[1]), (&d.function, p[2]), (&d.name, p[3])] {
        if !is_glob(field) {
            a = a.min(attr);
        }
    }
    a
}

/// The attributes of a statement: Stable, lowered by the built-ins it uses (the
/// probe's own names and arguments take its provider's).
fn statements(c: &Clause) -> Attr {
    let providers: Vec<ProviderAttrs> = c.probes.iter().map(provider_of).collect();
    let from_provider = |i: usize| providers.iter().fold(MAX, |a, p| a.min(p[i]));
    let mut attr = STABLE;
    let mut see = |e: &ir::Expr| {
        let a = match &e.kind {
            ExprKind::Builtin(Builtin::Probeprov) => from_provider(0),
            ExprKind::Builtin(Builtin::Probemod) => from_provider(1),
            ExprKind::Builtin(Builtin::Probefunc) => from_provider(2),
            ExprKind::Builtin(Builtin::Probename) => from_provider(3),
            ExprKind::Args(_) => from_provider(4),
            ExprKind::Builtin(Builtin::Curthread) => Attr(Stability::Stable, Stability::Private, Class::Common),
            ExprKind::Call(Subr::Htons | Subr::Htonl | Subr::Htonll | Subr::Ntohs | Subr::Ntohl | Subr::Ntohll, _) => {
                EVOLVING
            }
            _ => STABLE,
        };
        attr = attr.min(a);
    };
    if let Some(p) = &c.predicate {
        ir::visit_expr(p, &mut see);
    }
    ir::visit_actions(&c.actions, &mut see);
    attr
}

fn stability_name(s: Stability) -> &'static str {
    match s {
        Stability::Private => "Private",
        Stability::Unstable => "Unstable",
        Stability::Evolving => "Evolving",
        Stability::Stable => "Stable",
        Stability::Standard => "Standard",
    }
}

fn class_name(c: Class) -> &'static str {
    match c {
        Class::Unknown => "Unknown",
        Class::Isa => "ISA",
        Class::Common => "Common",
    }
}

fn block(title: &str, a: Attr) -> String {
    format!(
        "\n\t{title}\n\t\tIdentifier Names: {}\n\t\tData Semantics:   {}\n\t\tDependency Class: {}\n",
        stability_name(a.0),
        stability_name(a.1),
        class_name(a.2)
    )
}

/// dtrace's `-v` report for one program (`kind` and `name` as in its "matched"
/// notice), from the clauses it contributed.
pub fn report(kind: &str, name: &str, clauses: &[Clause]) -> String {
    let (desc, stmt) = clauses.iter().fold((MAX, MAX), |(d, s), c| {
        let d = c.probes.iter().fold(d, |d, p| d.min(description(p)));
        (d, s.min(statements(c)))
    });
    let mut out = format!("\nStability attributes for {kind} {name}:\n");
    out.push_str(&block("Minimum Probe Description Attributes", desc));
    out.push_str(&block("Minimum Statement Attributes", stmt));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(p: &str, m: &str, f: &str, n: &str) -> ProbeDesc {
        ProbeDesc {
            text: String::new(),
            provider: p.into(),
            module: m.into(),
            function: f.into(),
            name: n.into(),
            id: None,
            span: udtrace_lang::Span::new(0, 0),
        }
    }

    #[test]
    fn descriptions_take_their_provider_s_attributes() {
        // No provider named: Unstable.
        assert_eq!(description(&desc("", "", "", "BEGIN")), UNSTABLE);
        assert_eq!(description(&desc("dtrace", "", "", "BEGIN")), STABLE);
        // A named module of the pid provider is Private.
        assert_eq!(description(&desc("pid123", "libc.so.6", "malloc", "entry")).0, Stability::Private);
        assert_eq!(description(&desc("profile", "", "", "tick-1s")), EVOLVING);
    }
}
