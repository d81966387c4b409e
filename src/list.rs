//! `-l`: dtrace's probe listing, `ID PROVIDER MODULE FUNCTION NAME`, and with `-v`
//! each probe's stability attributes and argument types.

use std::collections::BTreeSet;

use udtrace_runtime::Probe;

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
            out.push_str(&verbose(&p));
        }
    }
    print!("{out}");
    for d in &compiled.unmatched {
        eprintln!("udtrace: failed to match {d}: No probe matches description");
    }
    0
}

/// (identifier names, data semantics, dependency class) of a probe description and of
/// its arguments, as each provider declares them in DTrace.
fn attributes(p: &Probe) -> [(&'static str, &'static str, &'static str); 2] {
    match p.provider.as_str() {
        "dtrace" => [("Stable", "Stable", "Common"), ("Stable", "Stable", "Common")],
        "profile" => [("Evolving", "Evolving", "Common"), ("Evolving", "Evolving", "Common")],
        // The pid provider: names Evolving/ISA at best, functions and arguments Private.
        _ => [("Private", "Private", "Unknown"), ("Private", "Private", "Unknown")],
    }
}

fn verbose(p: &Probe) -> String {
    let [desc, args] = attributes(p);
    let block = |title: &str, (names, data, class): (&str, &str, &str)| {
        format!("\t{title}\n\t\tIdentifier Names: {names}\n\t\tData Semantics:   {data}\n\t\tDependency Class: {class}\n\n")
    };
    format!(
        "\n{}{}\tArgument Types\n\t\tNone\n\n",
        block("Probe Description Attributes", desc),
        block("Argument Attributes", args)
    )
}
