//! `-l`: dtrace's probe listing, `ID PROVIDER MODULE FUNCTION NAME`.

use std::collections::BTreeSet;

use crate::cli::Cli;
use crate::compile::Compiled;
use crate::probes::Registry;

pub fn list(cli: &Cli, compiled: &Compiled, registry: &Registry) -> i32 {
    let mut out = String::new();
    out.push_str(&format!("{:>5} {:>10} {:>17} {:>33} {}\n", "ID", "PROVIDER", "MODULE", "FUNCTION", "NAME"));
    let ids: BTreeSet<u32> = if cli.programs.is_empty() {
        registry.all().iter().map(|p| p.id).collect()
    } else {
        compiled.ecbs.iter().map(|e| e.probe.id).collect()
    };
    for id in ids {
        let Some(p) = registry.by_id(id) else { continue };
        out.push_str(&format!("{:>5} {:>10} {:>17} {:>33} {}\n", p.id, p.provider, p.module, p.function, p.name));
        if cli.verbose {
            out.push_str(if p.provider == "profile" { VERBOSE_PROFILE } else { VERBOSE_STABLE });
        }
    }
    print!("{out}");
    0
}

/// dtrace -lv's attribute block for the dtrace and profile providers (Stable).
const VERBOSE_STABLE: &str = "\n\tProbe Description Attributes\n\t\tIdentifier Names: Stable\n\t\tData Semantics:   Stable\n\t\tDependency Class: Common\n\n\tArgument Attributes\n\t\tIdentifier Names: Stable\n\t\tData Semantics:   Stable\n\t\tDependency Class: Common\n\n\tArgument Types\n\t\tNone\n\n";

/// The same for the profile provider, whose name and argument attributes are
/// Evolving (profile.c's `profile_attr`; empty module and function fields do not
/// lower the minimum).
const VERBOSE_PROFILE: &str = "\n\tProbe Description Attributes\n\t\tIdentifier Names: Evolving\n\t\tData Semantics:   Evolving\n\t\tDependency Class: Common\n\n\tArgument Attributes\n\t\tIdentifier Names: Evolving\n\t\tData Semantics:   Evolving\n\t\tDependency Class: Common\n\n\tArgument Types\n\t\tNone\n\n";
