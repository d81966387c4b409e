//! `-l`: dtrace's probe listing, `ID PROVIDER MODULE FUNCTION NAME`.

use crate::cli::Cli;
use crate::compile::{full_name, Compiled};
use crate::probes::Registry;

/// Lists as dtrace.c's list_prog() does: every probe description of every clause in
/// program order, each followed by the probes it matches (so a probe named twice is
/// listed twice); a description that matches nothing gets `failed to match` on
/// stderr and the listing goes on. Without programs, every probe.
pub fn list(cli: &Cli, compiled: &Compiled, registry: &mut Registry) -> i32 {
    let mut out = String::new();
    out.push_str(&format!("{:>5} {:>10} {:>17} {:>33} {}\n", "ID", "PROVIDER", "MODULE", "FUNCTION", "NAME"));
    let row = |out: &mut String, p: &udtrace_runtime::Probe| {
        out.push_str(&format!("{:>5} {:>10} {:>17} {:>33} {}\n", p.id, p.provider, p.module, p.function, p.name));
        if cli.verbose {
            out.push_str(if p.provider == "profile" { VERBOSE_PROFILE } else { VERBOSE_STABLE });
        }
    };
    if cli.programs.is_empty() {
        for p in registry.all() {
            row(&mut out, p);
        }
    } else {
        for clause in &compiled.program.clauses {
            for desc in &clause.probes {
                let found = registry.matching(desc);
                if found.is_empty() {
                    // Printed in order with the table, as dtrace's error() interleaves.
                    print!("{out}");
                    out.clear();
                    eprintln!("udtrace: failed to match {}: No probe matches description", full_name(desc));
                }
                for p in &found {
                    row(&mut out, p);
                }
            }
        }
    }
    print!("{out}");
    0
}

/// dtrace -lv's attribute block for the dtrace provider (Stable).
const VERBOSE_STABLE: &str = "\n\tProbe Description Attributes\n\t\tIdentifier Names: Stable\n\t\tData Semantics:   Stable\n\t\tDependency Class: Common\n\n\tArgument Attributes\n\t\tIdentifier Names: Stable\n\t\tData Semantics:   Stable\n\t\tDependency Class: Common\n\n\tArgument Types\n\t\tNone\n\n";

/// The same for the profile provider, whose name and argument attributes are
/// Evolving (profile.c's `profile_attr`; empty module and function fields do not
/// lower the minimum).
const VERBOSE_PROFILE: &str = "\n\tProbe Description Attributes\n\t\tIdentifier Names: Evolving\n\t\tData Semantics:   Evolving\n\t\tDependency Class: Common\n\n\tArgument Attributes\n\t\tIdentifier Names: Evolving\n\t\tData Semantics:   Evolving\n\t\tDependency Class: Common\n\n\tArgument Types\n\t\tNone\n\n";
