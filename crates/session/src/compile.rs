//! From the command line's programs to one checked program with its enabled probes:
//! read (and preprocess) each source, parse, check, match probe descriptions, apply
//! pragmas, validate formats. Every failure is rendered as dtrace renders it.

use std::collections::HashSet;
use std::rc::Rc;

use udtrace_lang::ast::{self, ProbeDesc};
use udtrace_lang::capture::{stash_plan, StashPlan};
use udtrace_lang::check::Checker;
use udtrace_lang::diag::{self, Origin, Style};
use udtrace_lang::firing::{usdt_at_firing, usdt_dispatch, FiringPlan, ProbeFacts, UsdtSiteArgs};
use udtrace_lang::ir::{visit_actions, visit_expr, Action, Builtin, CheckedProgram, Clause, ExprKind};
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::options::Options;
use udtrace_lang::parser::{self, DescAlign};
use udtrace_lang::{CompileError, Tag};
use udtrace_messages::{debug, note};
use udtrace_providers::backend::{ProbeOps, ProbeWork};
use udtrace_providers::pid::is_pid_provider;
use udtrace_providers::registry::Registry;
use udtrace_providers::usdt;
use udtrace_runtime::{Ecb, Probe};

use crate::preprocess;
use crate::request::{Align, ProgramSource, Request};

/// One source as dtrace reports it: `description 'BEGIN '` or `script 'x.d'`.
pub struct SourceInfo {
    pub kind: &'static str,
    pub name: String,
    pub text: String,
    pub origin: Origin,
    /// Probes matched by its clauses (counted per clause, as dtrace counts).
    pub matched: usize,
}

pub struct Compiled {
    pub program: Rc<CheckedProgram>,
    /// The command line's options with the program's pragmas applied.
    pub options: Options,
    pub sources: Vec<SourceInfo>,
    pub ecbs: Vec<Ecb>,
    /// Arguments saved at one pid firing for a later one's reads.
    pub stash: StashPlan,
    /// Per pid probe, the stash ops of the clauses enabled on it so far (the ecbs'
    /// now; the followers add those of probes found later).
    pub probe_ops: ProbeOps,
    /// What runs where the probes fire (docs/firing.md).
    pub firing: Rc<FiringPlan>,
    /// Per pid probe, the programs of the clauses enabled on it so far, as
    /// `probe_ops`.
    pub work: ProbeWork,
}

/// Enables clause `clause` of `program` on pid probe `probe` in `work`: its program
/// where it runs at the firing, else a record for the consumer.
/// `usdt`: a USDT probe's sites' arguments (`PidProvider::usdt_site_args`), which its
/// programs read instead of the ABI's registers (docs/usdt.md).
pub fn add_work(
    program: &CheckedProgram,
    plan: &FiringPlan,
    work: &ProbeWork,
    clause: usize,
    probe: &Probe,
    usdt: Option<&[UsdtSiteArgs]>,
) {
    let facts = ProbeFacts {
        id: probe.id,
        provider: &probe.provider,
        module: &probe.module,
        function: &probe.function,
        name: &probe.name,
        usdt,
    };
    let is_pid = |d: &ProbeDesc| is_pid_provider(&d.provider) || is_usdt_desc(d);
    // A USDT probe without sites udtrace knows (never), or whose sites' arguments no
    // program can tell apart: its clauses run in the consumer (docs/usdt.md; one at
    // the firing by the plan then loses this probe's firings). A probe found after the
    // plan with an argument in memory off the stack runs at the firing all the same
    // (reading 0 from a page the process never touched), not to lose its firings.
    let usdt_probe = probe.provider != "pid" && !is_pid_provider(&probe.provider);
    if usdt_probe && usdt.and_then(usdt_dispatch).is_none() {
        work.add(probe.id, &udtrace_dif::Program::default(), true);
        return;
    }
    match plan.program(program, clause, &facts) {
        Some(p) => work.add(probe.id, &p, false),
        None => match plan.gate(program, clause, &facts, &is_pid) {
            // The consumer still evaluates the predicate on the record.
            Some(g) => work.add(probe.id, &g, false),
            None => work.add(probe.id, &udtrace_dif::Program::default(), true),
        },
    }
}

/// Where everything runs: at the firing where it can, unless `-x nodif`, or an
/// option the firing cannot honour (`aggpercpu` keeps per-CPU values, `cpu` traces
/// one CPU's firings: the consumer does both).
///
/// `usdt_apart`: descriptions (`full_name`) of USDT probes kept in the consumer
/// (`usdt_at_firing`, or matching none yet): their clauses run there.
fn firing_plan(program: &CheckedProgram, o: &Options, usdt_apart: &HashSet<String>) -> FiringPlan {
    if o.nodif || o.aggpercpu || o.cpu.is_some() {
        return FiringPlan::none(program);
    }
    let is_usdt = |d: &ProbeDesc| is_usdt_desc(d) && !usdt_apart.contains(&full_name(d));
    FiringPlan::with_usdt(program, &|d| is_pid_provider(&d.provider), &is_usdt, o.strsize)
}

/// Whether a description names USDT probes (`postgresql123`, `python*`).
fn is_usdt_desc(d: &ProbeDesc) -> bool {
    !is_pid_provider(&d.provider)
        && (usdt::provider_process(&d.provider).is_some() || usdt::all_processes_provider(&d.provider).is_some())
}

/// A compile failure, already rendered (without the leading `udtrace: `).
#[derive(Debug)]
pub struct Failure(pub String);

fn render(err: &CompileError, src: &SourceInfo, style: Style) -> Failure {
    Failure(diag::render(err, &src.origin, &src.text, style))
}

/// Renders an error that dtrace raises after parsing, at the lexer's last line
/// (`xyerror` uses `yylineno`, which is one past the last newline at end of input):
/// scripts get `line N:`, descriptions no place.
fn at_end(src: &SourceInfo, tag: Tag, msg: &str, style: Style) -> Failure {
    let end = src.text.len();
    let err = CompileError::new(tag, udtrace_lang::Span::new(end, end), msg);
    match &src.origin {
        Origin::Script(_) => Failure(diag::render(&err, &src.origin, &src.text, style)),
        Origin::Description => plain(src, &err, style),
    }
}

/// Renders an error that belongs to no place in the source (a line-less message).
fn plain(src: &SourceInfo, err: &CompileError, style: Style) -> Failure {
    Failure(diag::render_unplaced(err, &src.origin, &src.text, style))
}

/// How compile errors are shown: tagged with `-x errtags`, with a source excerpt only
/// for a person at a terminal.
pub fn style(options: &Options) -> Style {
    use std::io::IsTerminal;
    Style { errtags: options.errtags, excerpt: std::io::stderr().is_terminal() }
}

fn align(a: Align) -> DescAlign {
    match a {
        Align::Provider => DescAlign::Provider,
        Align::Module => DescAlign::Module,
        Align::Function => DescAlign::Function,
        Align::Name => DescAlign::Name,
    }
}

/// dtrace names a description source by its text cut at the first `{`, `/` or `;`.
fn description_name(text: &str) -> String {
    match text.find(['{', '/', ';']) {
        Some(i) => text[..i].to_string(),
        None => text.to_string(),
    }
}

/// Reads one command-line program: its text, how to parse it, how to name it.
fn load(p: &ProgramSource, options: &Options) -> Result<(SourceInfo, DescAlign, bool), Failure> {
    Ok(match p {
        ProgramSource::Description { text, align: a } => {
            let info = SourceInfo {
                kind: "description",
                name: description_name(text),
                text: text.clone(),
                origin: Origin::Description,
                matched: 0,
            };
            (info, align(*a), false)
        }
        ProgramSource::Script(path) => {
            let shown = path.to_string_lossy().into_owned();
            let raw = std::fs::read(path).map_err(|e| Failure(format!("failed to open {shown}: {}", io_reason(&e))))?;
            let raw = String::from_utf8_lossy(&raw).into_owned();
            let text = if options.cpp {
                preprocess::preprocess(&raw, options)
                    .map_err(|e| Failure(format!("failed to compile script {shown}: {e}")))?
                    .text
            } else {
                raw
            };
            let info =
                SourceInfo { kind: "script", name: shown.clone(), text, origin: Origin::Script(shown), matched: 0 };
            (info, DescAlign::Name, true)
        }
    })
}

/// How dtrace begins a message about a program: `failed to compile script X: ` or
/// `invalid probe specifier X: `.
fn program_prefix(p: &ProgramSource) -> String {
    match p {
        ProgramSource::Script(path) => format!("failed to compile script {}: ", path.display()),
        ProgramSource::Description { text, .. } => format!("invalid probe specifier {text}: "),
    }
}

/// Checks the D libraries into the program before its own sources (numbered from
/// `first_source`). A library that depends on what is not there is skipped, as in
/// dtrace; any other failure is the compilation's, worded as for an included file.
fn load_libraries(checker: &mut Checker, options: &Options, first_source: usize, style: Style) -> Result<(), String> {
    let libraries = crate::dlibs::load_order(&options.library_dirs())?;
    for (k, lib) in libraries.iter().enumerate() {
        let path = lib.path.display().to_string();
        let checked =
            parser::parse_script(&lib.text).and_then(|ast| checker.add_library(&ast, first_source + k, &lib.text));
        match checked {
            Ok(()) => {}
            Err(e) if e.tag == Tag::D_PRAGMA_DEPEND => debug!("skipping library {path}: {}", e.message),
            Err(e) => {
                let at = (e.span.start as usize).min(lib.text.len());
                let line = lib.text.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
                let tag = diag::tag_prefix(&e, style);
                return Err(format!("{tag}\"{path}\", line {line}: {}", e.message));
            }
        }
    }
    Ok(())
}

/// The reason part of an OS error, as strerror words it.
pub fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

pub fn compile(req: &Request, macros: &MacroArgs, registry: &mut Registry) -> Result<Compiled, Failure> {
    let options = &req.options;
    let style = style(options);
    let mut checker = Checker::new(macros);
    checker.set_scratchsize(options.scratchsize);
    checker.set_probe_args(&Registry::arg_types);
    // The kernel's types, read only if the program names one D does not know.
    checker.set_kernel_types(Box::new(|| std::fs::read("/sys/kernel/btf/vmlinux").ok()));
    if let Some(v) = options.version.as_deref().and_then(udtrace_lang::options::parse_version) {
        checker.set_version(v);
    }
    if let Some(first) = req.programs.first() {
        load_libraries(&mut checker, options, req.programs.len(), style)
            .map_err(|m| Failure(format!("{}{m}", program_prefix(first))))?;
    }
    let mut sources = Vec::new();
    let mut clause_ranges = Vec::new();
    for (i, p) in req.programs.iter().enumerate() {
        let (info, al, is_script) = load(p, options)?;
        debug!("compiling {} {}", info.kind, info.name);
        macros.start_program();
        // Declarations are checked as the parser reads them, clauses once it is done.
        checker.begin_source(i, &info.text);
        let parsed = parser::parse_with(&info.text, al, is_script, &mut checker);
        let mut program = parsed.map_err(|e| render(&e, &info, style))?;
        resolve_probe_ids(&mut program, registry).map_err(|e| render(&e, &info, style))?;
        let before = checker.program().clauses.len();
        checker.add_clauses(&program).map_err(|e| render(&e, &info, style))?;
        let after = checker.program().clauses.len();
        if after == before && !has_clause(&program) && !options.empty {
            return Err(at_end(&info, Tag::D_EMPTY, "empty D program translation unit", style));
        }
        if let Err(e) = macros.check_unused() {
            return Err(at_end(&info, Tag::D_MACRO_UNUSED, &e.to_string(), style));
        }
        clause_ranges.push(before..after);
        sources.push(info);
    }
    let program = checker.finish();

    // Pragmas apply in program order, after -x on the command line (the libraries'
    // own options are theirs).
    let mut effective = options.clone();
    for o in program.options.iter().filter(|o| o.source < sources.len()) {
        if let Err(e) = effective.set_from_program(&o.name, o.value.as_deref()) {
            let err = CompileError::new(Tag::D_PRAGMA_OPTSET, o.span, e.pragma_message());
            return Err(render(&err, &sources[o.source], style));
        }
    }
    let have_target = !req.commands.is_empty() || !req.pids.is_empty();
    udtrace_runtime::output::validate_formats(&program, have_target)
        .map_err(|(s, e)| render(&e, &sources[s], style))?;

    check_tuples(&program, &effective, &sources, style)?;

    let zdefs = effective.zdefs;
    let mut ecbs = Vec::new();
    for (si, range) in clause_ranges.iter().enumerate() {
        for ci in range.clone() {
            let first_stmt = first_statement(&program, ci);
            for (di, desc) in program.clauses[ci].probes.iter().enumerate() {
                let found = match registry.matching(desc) {
                    Ok(f) => f,
                    Err((tag, msg)) => {
                        let err = CompileError::new(tag, desc.span, msg);
                        return Err(match sources[si].origin {
                            Origin::Description => plain(&sources[si], &err, style),
                            Origin::Script(_) => render(&err, &sources[si], style),
                        });
                    }
                };
                if found.is_empty() && !zdefs {
                    let why = registry.pid.why_no_match(desc).map(|w| format!(": {w}")).unwrap_or_default();
                    let err = CompileError::new(
                        Tag::D_PDESC_ZERO,
                        desc.span,
                        format!("probe description {} does not match any probes{why}", full_name(desc)),
                    );
                    return Err(match sources[si].origin {
                        Origin::Description => plain(&sources[si], &err, style),
                        Origin::Script(_) => render(&err, &sources[si], style),
                    });
                }
                debug!("probe description {} matched {} probes", full_name(desc), found.len());
                sources[si].matched += found.len();
                for probe in found {
                    ecbs.push(Ecb { epid: ecbs.len() as u32 + 1, clause: ci, stmt: first_stmt + di, probe });
                }
            }
        }
    }
    note_go_arguments(&program, &ecbs, registry);
    let stash = stash_plan(&program, |cl| cl.probes.iter().any(|d| is_pid_provider(&d.provider)));
    let probe_ops = ProbeOps::default();
    // A program's probes fire in its own process tree only, and a BPF uprobe (with
    // `-x uprobes`, or an in-process site's fallback) is shared by every traced process
    // mapping the file: its program cannot tell one traced tree from another, where the
    // consumer can (by the firing's root). With several roots (`-p A -p B`, `-c` and
    // `-p`), every clause runs in the consumer.
    let roots = req.commands.len() + req.pids.len();
    // USDT descriptions whose probes' clauses run in the consumer: those matching a
    // probe whose arguments no program reads, and those matching none yet (a probe
    // found later, in an object loaded later, could be such: the plan is made once).
    let mut usdt_apart = HashSet::new();
    let mut usdt_matched = HashSet::new();
    for e in &ecbs {
        let di = e.stmt - first_statement(&program, e.clause);
        let name = program.clauses[e.clause].probes.get(di).map(full_name);
        match registry.pid.usdt_site_args(e.probe.id) {
            Some(s) if !usdt_at_firing(&s) => usdt_apart.extend(name),
            _ => usdt_matched.extend(name),
        }
    }
    for cl in &program.clauses {
        usdt_apart.extend(cl.probes.iter().map(full_name).filter(|n| !usdt_matched.contains(n)));
    }
    let firing = if roots > 1 { FiringPlan::none(&program) } else { firing_plan(&program, &effective, &usdt_apart) };
    let work = if effective.timeline.is_some() { ProbeWork::recording_every_firing() } else { ProbeWork::default() };
    for e in ecbs.iter().filter(|e| registry.pid.owns(e.probe.id)) {
        probe_ops.add(e.probe.id, stash.clause_ops.get(e.clause).copied().unwrap_or(0));
        let usdt = registry.pid.usdt_site_args(e.probe.id);
        add_work(&program, &firing, &work, e.clause, &e.probe, usdt.as_deref());
    }
    let firing = Rc::new(firing);
    Ok(Compiled { program: Rc::new(program), options: effective, sources, ecbs, stash, probe_ops, firing, work })
}

/// DTrace's statement number (the N of `dt_clause_N`) of a clause's first probe
/// description: DTrace makes one statement of each description, numbered in program
/// order, so a clause on three descriptions takes three numbers.
pub fn first_statement(program: &CheckedProgram, clause: usize) -> usize {
    program.clauses[..clause].iter().map(|c| c.probes.len().max(1)).sum()
}

/// Gives descriptions written as probe ids their probe's name, as dtrace's parser
/// does when it reads them.
/// One line per Go program whose entry or offset probes have clauses reading `argN` or
/// `args[N]`: those are the C ABI's registers, which Go functions do not take their
/// arguments in; printed as arguments they would be wrong numbers with no word said.
fn note_go_arguments(program: &CheckedProgram, ecbs: &[Ecb], registry: &Registry) {
    // The probes of clauses that read arguments, then those of them in Go programs: one
    // pass over the probes, however many match (libc's 3,700 entries).
    let reading: Vec<bool> = program.clauses.iter().map(reads_arguments).collect();
    let ids: HashSet<u32> = ecbs.iter().filter(|e| reading[e.clause]).map(|e| e.probe.id).collect();
    if ids.is_empty() {
        return;
    }
    let mut said = HashSet::new();
    for p in registry.pid.go_argument_probes(&ids) {
        if said.insert(p.module.as_str()) {
            note!(
                "{} is a Go program: arg0..arg9 and args[] are the C ABI's registers, not its Go functions' \
                 arguments (Go passes them in rax, rbx, rcx, rdi, rsi, r8-r11: uregs[R_RAX], uregs[R_RBX], ...)",
                p.module
            );
        }
    }
}

/// Whether a clause reads `argN` or `args[N]`.
fn reads_arguments(c: &Clause) -> bool {
    let mut reads = false;
    let mut look = |e: &udtrace_lang::ir::Expr| {
        reads |= matches!(e.kind, ExprKind::Builtin(Builtin::Arg(_)) | ExprKind::Args(_));
    };
    if let Some(p) = &c.predicate {
        visit_expr(p, &mut look);
    }
    visit_actions(&c.actions, &mut look);
    reads
}

fn resolve_probe_ids(program: &mut ast::Program, registry: &Registry) -> Result<(), CompileError> {
    let clauses = program.items.iter_mut().filter_map(|i| match i {
        ast::Item::Clause(c) => Some(c),
        _ => None,
    });
    for desc in clauses.flat_map(|c| c.probes.iter_mut()) {
        let Some(id) = desc.id else { continue };
        let probe = registry.by_id(id).ok_or_else(|| {
            CompileError::new(
                Tag::D_PDESC_INVAL,
                desc.span,
                format!("invalid probe identifier {id}: Unknown probe identifier"),
            )
        })?;
        desc.provider = probe.provider.clone();
        desc.module = probe.module.clone();
        desc.function = probe.function.clone();
        desc.name = probe.name.clone();
    }
    Ok(())
}

/// dt_cg_arglist's limit: a tuple (associative array or aggregation key) has at most
/// one element more than there are tuple registers (`-x tregs`, 8 by default).
fn check_tuples(
    program: &CheckedProgram,
    options: &Options,
    sources: &[SourceInfo],
    style: Style,
) -> Result<(), Failure> {
    let longest = |clause: &udtrace_lang::ir::Clause| {
        let mut n = 0;
        let mut see = |e: &udtrace_lang::ir::Expr| {
            use udtrace_lang::ir::{ExprKind, Place};
            match &e.kind {
                ExprKind::ArrayGet { keys, .. }
                | ExprKind::Assign { target: Place::Array { keys, .. }, .. }
                | ExprKind::IncDec { target: Place::Array { keys, .. }, .. } => n = n.max(keys.len()),
                _ => {}
            }
        };
        if let Some(p) = &clause.predicate {
            udtrace_lang::ir::visit_expr(p, &mut see);
        }
        udtrace_lang::ir::visit_actions(&clause.actions, &mut see);
        n.max(agg_keys(&clause.actions))
    };
    for c in &program.clauses {
        if longest(c) as u64 > options.tregs + 1 {
            let err = CompileError::new(Tag::D_UNKNOWN, c.span, "Insufficient tuple registers to generate code");
            let src = &sources[c.source];
            let plain_style = Style { errtags: false, ..style };
            return Err(plain(src, &err, plain_style));
        }
    }
    Ok(())
}

/// Whether CPU `n` is online (the kernel's list of ranges, `0-3,6`).
fn cpu_online(n: u64) -> bool {
    let Ok(list) = std::fs::read_to_string("/sys/devices/system/cpu/online") else { return true };
    list.trim().split(',').any(|r| {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        matches!((lo.parse::<u64>(), hi.parse::<u64>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&n))
    })
}

/// The most keys an aggregation is updated with in these actions.
fn agg_keys(actions: &[Action]) -> usize {
    actions
        .iter()
        .map(|a| match a {
            Action::AggUpdate { keys, .. } => keys.len(),
            Action::If { then, otherwise, .. } => agg_keys(then).max(agg_keys(otherwise)),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// dtrace_go()'s checks of a compiled program before anything is enabled; `Err` is
/// libdtrace's reason, for `could not enable tracing: …`.
pub fn enable_check(c: &Compiled) -> Result<(), String> {
    // An ERROR firing writes a 64-byte record (perf header, record header and five
    // 64-bit values): the buffer must hold one; nothing fits in an empty buffer.
    const ERROR_RECORD: u64 = 8 + 16 + 5 * 8;
    let has_error_clause = c.ecbs.iter().any(|e| e.probe.provider == "dtrace" && e.probe.name == "ERROR");
    if c.options.bufsize == 0 || (has_error_clause && c.options.bufsize < ERROR_RECORD) {
        return Err("Enabling exceeds size of buffer".into());
    }
    if !dynamic_space_fits(&c.program, &c.options) {
        return Err("Enabling exceeds size of buffer".into());
    }
    if let Some(cpu) = c.options.cpu.filter(|&n| !cpu_online(n)) {
        return Err(format!("CPU {cpu} is not online"));
    }
    let enabled: std::collections::HashSet<usize> = c.ecbs.iter().map(|e| e.clause).collect();
    let destructive = enabled.iter().any(|&i| c.program.clauses[i].destructive);
    if destructive && !c.options.destructive {
        return Err("Destructive actions not allowed".into());
    }
    Ok(())
}

/// libdtrace sizes its aggregation and dynamic variable maps as the option's bytes
/// over the largest entry (largest key tuple plus largest value), and refuses to
/// enable a map that would hold no entry. Entries are estimated as DTrace lays them
/// out: a key takes 8 bytes (or `strsize`), a value its size, a tuple has an 8-byte
/// thread key, and an aggregation's data has an 8-byte counter before it.
fn dynamic_space_fits(p: &CheckedProgram, o: &Options) -> bool {
    use udtrace_lang::ir::AggKind;
    use udtrace_lang::types::Type;
    // A value takes its own size; a tuple component a whole 64-bit slot.
    let size = |t: &Type| -> u64 {
        if t.is_string() {
            o.strsize
        } else {
            p.types.size_of(t).unwrap_or(8)
        }
    };
    let tuple = |keys: &[Type]| 8 + keys.iter().map(|k| size(k).div_ceil(8) * 8).sum::<u64>();
    // Associative arrays only: DTrace runs thread-local scalars in a dynvarsize too
    // small for one of them (dynvarsize=5 with self->a), and refuses an array element.
    let dvars = p.globals.iter().chain(&p.thread_vars).filter(|v| v.keys.is_some());
    let dvar_tuple = dvars.clone().map(|v| tuple(v.keys.as_deref().unwrap_or_default())).max();
    let dvar_size = dvars.map(|v| size(&v.ty)).max();
    let agg_tuple = p.aggs.iter().map(|a| tuple(&a.keys)).max();
    let agg_size = p
        .aggs
        .iter()
        .map(|a| {
            8 * match a.kind {
                AggKind::Avg => 3,
                AggKind::Stddev => 5,
                AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => 3,
                _ => 2,
            }
        })
        .max();
    let max_tuple = dvar_tuple.max(agg_tuple).unwrap_or(0);
    let fits = |space: u64, value: Option<u64>| value.is_none_or(|v| space / (max_tuple + v) > 0);
    fits(o.aggsize, agg_size) && fits(o.dynvarsize, dvar_size)
}

/// Whether a program has a clause or a provider definition: both are nodes of
/// DTrace's parse tree, which must not be empty.
fn has_clause(p: &ast::Program) -> bool {
    p.items.iter().any(|i| matches!(i, ast::Item::Clause(_) | ast::Item::Provider(_)))
}

/// `provider:module:function:name` with empty fields kept.
pub fn full_name(d: &ProbeDesc) -> String {
    format!("{}:{}:{}:{}", d.provider, d.module, d.function, d.name)
}
