//! `-h` and `-G`: what a program instrumented for DTrace is built with. The
//! programs are compiled as for tracing (with `-Z`, as dtrace's `-h` and `-G` imply),
//! then the header of their provider definitions, or the object a DTrace build
//! links, is written (docs/usdt-header.md). Names and messages are dtrace's.

use std::path::{Path, PathBuf};

use udtrace_instrument::object::DataModel;
use udtrace_lang::macros::MacroArgs;
use udtrace_lang::options::{OptionName, OptionValue};
use udtrace_messages::note;
use udtrace_providers::registry::Registry;

use crate::compile::{self, io_reason};
use crate::request::{ProgramSource, Request};
use crate::run::EXIT_FAILURE;

/// dtrace's `E_USAGE`.
const EXIT_USAGE: i32 = 2;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generate {
    /// `-h`: a C header.
    Header,
    /// `-G`: the object to link.
    Object,
}

/// A script's base name without `.d`, if it is named `*.d`.
fn script_stem(p: &ProgramSource) -> Option<String> {
    let ProgramSource::Script(path) = p else { return None };
    let name = path.file_name()?.to_string_lossy().into_owned();
    name.strip_suffix(".d").map(str::to_string)
}

/// The file `-h`/`-G` writes, as dtrace names it: `-o`, else the script's base name
/// with `.h` (`.o`), else for `-G` `d.out`; `Err` is dtrace's usage message.
fn output_name(req: &Request, what: Generate) -> Result<PathBuf, &'static str> {
    if let Some(o) = &req.output {
        return Ok(o.clone());
    }
    let stem = req.programs.first().and_then(script_stem);
    match what {
        Generate::Header if req.programs.len() > 1 => {
            Err("-h requires an output file if multiple scripts are specified")
        }
        Generate::Header => stem
            .map(|s| PathBuf::from(format!("{s}.h")))
            .ok_or("-h requires an output file if no scripts are specified"),
        Generate::Object => Ok(PathBuf::from(stem.map_or_else(|| "d.out".to_string(), |s| format!("{s}.o")))),
    }
}

/// `-G`'s data model, guessed from the objects as dtrace does (the first ELF class
/// seen; none: the native one): the object written must be of their class for the
/// link to take it. `Err`: an object that cannot be read, or objects of both classes
/// (dtrace's words).
fn data_model(objects: &[String]) -> Result<Option<DataModel>, String> {
    let mut model = None;
    for o in objects {
        let mut head = [0u8; 5];
        let n = std::fs::File::open(o)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
            .map_err(|e| format!("failed to open {o}: {}", io_reason(&e)))?;
        let Some(m) = DataModel::of(&head[..n]) else { continue };
        if model.is_some_and(|seen| seen != m) {
            return Err("can't mix 32-bit and 64-bit object files".into());
        }
        model = Some(m);
    }
    Ok(model)
}

/// Runs `-h` or `-G`; returns the exit status. For `-G` the operands name the
/// program's objects, which the header's probes leave nothing to change in.
pub fn generate(mut req: Request, what: Generate) -> i32 {
    let flag = if what == Generate::Header { 'h' } else { 'G' };
    if req.programs.is_empty() {
        note!("-{flag} requires one or more scripts or enabling options");
        return EXIT_USAGE;
    }
    let path = match output_name(&req, what) {
        Ok(p) => p,
        Err(m) => {
            note!("{m}");
            return EXIT_USAGE;
        }
    };
    let mut model = None;
    if what == Generate::Object {
        match data_model(&std::mem::take(&mut req.macro_args)) {
            Ok(m) => model = m,
            Err(m) => {
                note!("{m}");
                return EXIT_FAILURE;
            }
        }
    }
    req.options.apply(OptionName::Zdefs, OptionValue::Set);
    let argv = req.programs.first().map(|p| req.macro_argv(p)).unwrap_or_default();
    let mut macros = MacroArgs::new(argv);
    macros.defaultargs = req.options.defaultargs;
    macros.argref = req.options.argref;
    let compiled = match compile::compile(&req, &macros, &mut Registry::default()) {
        Ok(c) => c,
        Err(f) => {
            note!("{}", f.0);
            return EXIT_FAILURE;
        }
    };
    let bytes = match what {
        Generate::Object => udtrace_instrument::object::empty_object(model.unwrap_or(DataModel::Lp64)),
        Generate::Header => {
            let name = path.to_string_lossy();
            match udtrace_instrument::header(&compiled.program.providers, &compiled.program.types, Some(&name)) {
                Ok(h) => h.into_bytes(),
                Err(e) => {
                    note!("failed to create header file {name}: {e}");
                    return EXIT_FAILURE;
                }
            }
        }
    };
    write(&path, &bytes, what)
}

fn write(path: &Path, bytes: &[u8], what: Generate) -> i32 {
    match std::fs::write(path, bytes) {
        Ok(()) => 0,
        Err(e) => {
            let kind = if what == Generate::Header { "header file" } else { "object file" };
            note!("failed to open {kind} '{}': {}", path.display(), io_reason(&e));
            EXIT_FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udtrace_lang::options::Options;

    fn req(programs: Vec<ProgramSource>, output: Option<&str>) -> Request {
        Request {
            argv0: "udtrace".into(),
            list: false,
            programs,
            commands: vec![],
            pids: vec![],
            verbose: false,
            output: output.map(PathBuf::from),
            exit_after_compile: false,
            macro_args: vec![],
            options: Options::default(),
        }
    }

    #[test]
    fn output_names_as_dtrace() {
        let s = |p: &str| ProgramSource::Script(p.into());
        let n = |t: &str| ProgramSource::Description { text: t.into(), align: crate::request::Align::Name };
        assert_eq!(output_name(&req(vec![s("dir/prov.d")], None), Generate::Header), Ok("prov.h".into()));
        assert_eq!(output_name(&req(vec![s("dir/prov.d")], Some("x.h")), Generate::Header), Ok("x.h".into()));
        assert!(output_name(&req(vec![s("a.d"), s("b.d")], None), Generate::Header).is_err());
        assert!(output_name(&req(vec![n("BEGIN")], None), Generate::Header).is_err());
        assert!(output_name(&req(vec![s("prov.txt")], None), Generate::Header).is_err());
        assert_eq!(output_name(&req(vec![s("dir/prov.d")], None), Generate::Object), Ok("prov.o".into()));
        assert_eq!(output_name(&req(vec![n("BEGIN")], None), Generate::Object), Ok("d.out".into()));
    }
}
