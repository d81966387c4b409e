//! `-l`: dtrace's probe listing, `ID PROVIDER MODULE FUNCTION NAME`, and with `-v`
//! each probe's stability attributes and argument types.

use std::io::Write;

use udtrace_lang::proc_types::ArgType;
use udtrace_messages::note;
use udtrace_providers::proc;
use udtrace_providers::registry::Registry;
use udtrace_runtime::Probe;

use crate::compile::{full_name, Compiled};
use crate::request::Request;

/// Lists as dtrace.c's list_prog() does: every probe description of every clause in
/// program order, each followed by the probes it matches (so a probe named twice is
/// listed twice); a description that matches nothing gets `failed to match` on
/// stderr and the listing goes on. Without programs, every probe. The listing goes to
/// `sink` (stdout, or the `-o` file).
pub fn list(req: &Request, compiled: &Compiled, registry: &mut Registry, sink: &mut dyn Write) -> i32 {
    let mut out = String::new();
    out.push_str(&format!("{:>5} {:>10} {:>17} {:>33} {}\n", "ID", "PROVIDER", "MODULE", "FUNCTION", "NAME"));
    let row = |out: &mut String, p: &Probe, registry: &Registry| {
        out.push_str(&format!("{:>5} {:>10} {:>17} {:>33} {}\n", p.id, p.provider, p.module, p.function, p.name));
        if req.verbose {
            out.push_str(&verbose(p, registry.pid.usdt_arg_types(p.id)));
        }
    };
    if req.programs.is_empty() {
        for p in registry.all() {
            row(&mut out, p, registry);
        }
    } else {
        for clause in &compiled.program.clauses {
            for desc in &clause.probes {
                // Compiling matched every description already; this finds the same probes.
                let found = registry.matching(desc).unwrap_or_default();
                if found.is_empty() {
                    // Printed in order with the table, as dtrace's error() interleaves.
                    let _ = sink.write_all(out.as_bytes()).and_then(|()| sink.flush());
                    out.clear();
                    note!("failed to match {}: No probe matches description", full_name(desc));
                }
                for p in &found {
                    row(&mut out, p, registry);
                }
            }
        }
    }
    let _ = sink.write_all(out.as_bytes()).and_then(|()| sink.flush());
    // Said when asked for (-x inprocess), or without root, where there is no fallback.
    if req.verbose && (compiled.options.inprocess || !nix::unistd::geteuid().is_root()) {
        report_patchability(compiled, registry);
    }
    0
}

/// `-l -v`: how many of the listed pid probes' sites an in-process backend could not
/// patch, and why (they would use uprobes, or stay unarmed without BPF).
fn report_patchability(compiled: &Compiled, registry: &Registry) {
    let ids = compiled.ecbs.iter().filter(|e| registry.pid.owns(e.probe.id)).map(|e| e.probe.id).collect();
    let (total, refusals) = registry.pid.patch_refusals(&ids);
    let refused: usize = refusals.values().sum();
    if total == 0 {
        return;
    }
    note!(
        "{} of {total} pid probe site{} can be patched in-process",
        total - refused,
        if total == 1 { "" } else { "s" }
    );
    for (why, n) in refusals {
        note!("{n} site{} cannot: {why}", if n == 1 { "" } else { "s" });
    }
}

/// (identifier names, data semantics, dependency class) of a probe description and of
/// its arguments, as each provider declares them in DTrace.
fn attributes(p: &Probe) -> [(&'static str, &'static str, &'static str); 2] {
    match p.provider.as_str() {
        "dtrace" => [("Stable", "Stable", "Common"), ("Stable", "Stable", "Common")],
        // profile.c's profile_attr; empty module and function fields do not lower it.
        "profile" => [("Evolving", "Evolving", "Common"), ("Evolving", "Evolving", "Common")],
        // The proc provider's (sdt's stab_attr) for provider, name and arguments.
        "proc" => [("Evolving", "Evolving", "ISA"), ("Evolving", "Evolving", "ISA")],
        // The pid provider: function names and arguments are Private.
        _ => [("Private", "Private", "Unknown"), ("Private", "Private", "Unknown")],
    }
}

/// `usdt`: a USDT probe's argument types, from its descriptors.
fn verbose(p: &Probe, usdt: Option<Vec<&'static str>>) -> String {
    let [desc, args] = attributes(p);
    let block = |title: &str, (names, data, class): (&str, &str, &str)| {
        format!(
            "\t{title}\n\t\tIdentifier Names: {names}\n\t\tData Semantics:   {data}\n\t\tDependency Class: {class}\n\n"
        )
    };
    let types = match proc::probe(&p.name).filter(|_| p.provider == "proc") {
        Some(pp) if !pp.args.is_empty() => pp
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let t = match a {
                    ArgType::Int(n) => n.to_string(),
                    ArgType::String => "string".to_string(),
                    ArgType::Ptr(n) => format!("{n} *"),
                };
                format!("\t\targs[{i}]: {t}\n")
            })
            .collect::<String>(),
        _ => match usdt.filter(|t| !t.is_empty()) {
            Some(types) => types.iter().enumerate().map(|(i, t)| format!("\t\targs[{i}]: {t}\n")).collect(),
            None => "\t\tNone\n".to_string(),
        },
    };
    format!(
        "\n{}{}\tArgument Types\n{types}\n",
        block("Probe Description Attributes", desc),
        block("Argument Attributes", args)
    )
}
