//! D libraries: the `.d` files of the library directories (`-L`, `-x libdir`,
//! `-x syslibdir`), compiled before every program so that their inlines, types and
//! variables are defined, in the order their `#pragma D depends_on library` lines
//! require (dtrace's dt_dlibs.c: per directory, a topological sort of the
//! dependency graph; an unknown dependency or a cycle fails the compilation).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use udtrace_messages::debug;

/// One library to compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    pub path: PathBuf,
    pub text: String,
}

/// The libraries of `dirs`, directory by directory, each directory's in dependency
/// order (a library after those it depends on). Missing directories and unreadable
/// files are skipped, as dtrace skips them. `Err` is dtrace's message.
pub fn load_order(dirs: &[String]) -> Result<Vec<Library>, String> {
    let mut out = Vec::new();
    for dir in dirs {
        out.extend(dir_order(Path::new(dir))?);
    }
    Ok(out)
}

/// A library's file name: anything ending in `.d`.
fn is_library(name: &str) -> bool {
    name.len() > 2 && name.ends_with(".d")
}

fn dir_order(dir: &Path) -> Result<Vec<Library>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        debug!("skipping lib dir {}", dir.display());
        return Ok(Vec::new());
    };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| is_library(n)).collect();
    // Sorted, so that the order of libraries that do not depend on each other does
    // not change with the file system.
    names.sort();
    let mut libs: Vec<Library> = Vec::new();
    for name in names {
        let path = dir.join(&name);
        match std::fs::read_to_string(&path) {
            Ok(text) => libs.push(Library { path, text }),
            Err(e) => debug!("skipping library {}: {e}", path.display()),
        }
    }
    let order = sort(&libs)?;
    let mut slots: Vec<Option<Library>> = libs.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

/// The libraries a library names with `#pragma D depends_on library NAME`, as paths
/// in its own directory.
fn dependencies(lib: &Library) -> Vec<PathBuf> {
    let dir = lib.path.parent().unwrap_or(Path::new(""));
    lib.text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.trim_start().strip_prefix('#')?.split_whitespace().collect();
            match w.as_slice() {
                ["pragma", "D", "depends_on", "library", name, ..] => Some(dir.join(name)),
                _ => None,
            }
        })
        .collect()
}

/// dt_lib_depend_sort: a depth-first walk from each library through the libraries
/// that depend on it; the reverse of the finishing order puts every library after
/// its dependencies. Returns indexes into `libs`.
fn sort(libs: &[Library]) -> Result<Vec<usize>, String> {
    let index: HashMap<&Path, usize> = libs.iter().enumerate().map(|(i, l)| (l.path.as_path(), i)).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); libs.len()];
    for (i, lib) in libs.iter().enumerate() {
        for dep in dependencies(lib) {
            let Some(&d) = index.get(dep.as_path()) else {
                return Err(format!("Invalid library dependency in {}: {}", lib.path.display(), dep.display()));
            };
            dependents[d].push(i);
        }
    }
    let mut finish = vec![0usize; libs.len()];
    let mut started = vec![false; libs.len()];
    let mut finished = Vec::new();
    let mut clock = 0;
    for i in 0..libs.len() {
        if !started[i] {
            visit(i, libs, &dependents, &mut started, &mut finish, &mut clock, &mut finished);
        }
    }
    // A library finishing before one that depends on it closes a cycle.
    for (i, deps) in dependents.iter().enumerate() {
        if let Some(&d) = deps.iter().find(|&&d| finish[d] > finish[i]) {
            return Err(format!(
                "Cyclic dependency detected: {} => {}",
                libs[i].path.display(),
                libs[d].path.display()
            ));
        }
    }
    finished.reverse();
    Ok(finished)
}

fn visit(
    i: usize,
    libs: &[Library],
    dependents: &[Vec<usize>],
    started: &mut [bool],
    finish: &mut [usize],
    clock: &mut usize,
    finished: &mut Vec<usize>,
) {
    started[i] = true;
    *clock += 1;
    let start = *clock;
    for &d in &dependents[i] {
        if !started[d] {
            visit(d, libs, dependents, started, finish, clock, finished);
        }
    }
    *clock += 1;
    finish[i] = *clock;
    finished.push(i);
    debug!("library {} sorted ({start}/{})", libs[i].path.display(), finish[i]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, deps: &[&str]) -> Library {
        let text: String = deps.iter().map(|d| format!("#pragma D depends_on library {d}\n")).collect();
        Library { path: PathBuf::from("/l").join(name), text }
    }

    fn names(libs: &[Library], order: &[usize]) -> Vec<String> {
        order.iter().map(|&i| libs[i].path.file_name().unwrap().to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn dependencies_come_first() {
        let libs =
            [lib("a.d", &["d.d"]), lib("b.d", &[]), lib("c.d", &["e.d"]), lib("d.d", &["b.d"]), lib("e.d", &["a.d"])];
        assert_eq!(names(&libs, &sort(&libs).unwrap()), ["b.d", "d.d", "a.d", "e.d", "c.d"]);
    }

    #[test]
    fn unknown_dependencies_and_cycles_fail() {
        let libs = [lib("a.d", &["gone.d"])];
        assert_eq!(sort(&libs).unwrap_err(), "Invalid library dependency in /l/a.d: /l/gone.d");
        let libs = [lib("a.d", &["b.d"]), lib("b.d", &["c.d"]), lib("c.d", &["a.d"])];
        assert!(sort(&libs).unwrap_err().starts_with("Cyclic dependency detected: "));
    }

    #[test]
    fn only_d_files_are_libraries() {
        assert!(is_library("x.d"));
        assert!(!is_library(".d") && !is_library("x.dd") && !is_library("x.o") && !is_library("d"));
    }
}
