//! The processes that already run below a `-p` process when it is grabbed (a daemon's
//! workers): found through /proc and grabbed as it is, so that they can be traced as
//! the children it forks later are. Children come from each thread's `children` file
//! (CONFIG_PROC_CHILDREN), else from every process's parent in its `stat`.
//!
//! Processes fork and exit meanwhile. A grabbed process is stopped and forks no more,
//! so the trees are listed again until a listing finds nothing new and every parent's
//! children are the same as in the listing before (a `children` file read while the
//! list changes may miss an entry). A process another tracer holds is not stopped
//! (see [`Target::grab`]) and may go on forking: the listings are bounded.

use std::collections::{HashMap, HashSet};

use crate::control::{ControlError, Target};
use crate::procfs;
use crate::refusal;
use crate::undertaker::UNDERTAKER_NAME;

/// Linux's PF_EXITING, in the flags of /proc/PID/stat: the process is exiting.
const PF_EXITING: u64 = 0x4;

/// Listings of the trees at most (only processes another tracer holds, which keep
/// running, can make them go on).
const MAX_LISTINGS: usize = 64;

/// A process found below a root at the grab.
#[derive(Debug)]
pub struct Descendant {
    /// Held as the root is, or watched when another tracer holds it (`tracer`).
    pub target: Target,
    /// Its parent when it was found (the root or another descendant).
    pub parent: i32,
    /// The `-p` process it descends from.
    pub root: i32,
}

/// What the grab of the descendants gave: those held or watched, and those that
/// could not be grabbed (another user's, not dumpable, …) with their parent and why.
#[derive(Debug, Default)]
pub struct Found {
    pub descendants: Vec<Descendant>,
    pub refused: Vec<(i32, i32, ControlError)>,
}

/// Grabs every process below `roots` (grabbed already), as [`Target::grab`] grabs
/// them. Left alone: the `targets` (every `-c`/`-p` process: one found below another
/// stays a root, or untraced when no description names it), what udtrace already
/// traces, zombies and exiting processes, kernel threads, udtrace and its children
/// (its undertaker, `-c` commands), any udtrace undertaker (it must be free to act
/// when its udtrace dies), and what lies below a process not grabbed.
pub fn grab(roots: &[i32], targets: &[i32]) -> Found {
    let me = std::process::id() as i32;
    // Every process met: grabbed, a target, or left alone (and not looked below).
    let mut met: HashSet<i32> = roots.iter().chain(targets).copied().chain([me]).collect();
    let mut found = Found::default();
    let mut before: HashMap<i32, Vec<i32>> = HashMap::new();
    for _ in 0..MAX_LISTINGS {
        let parents: Vec<(i32, i32)> =
            roots.iter().map(|&r| (r, r)).chain(found.descendants.iter().map(|d| (d.target.pid, d.root))).collect();
        let mut now: HashMap<i32, Vec<i32>> = HashMap::new();
        let mut new = false;
        for (parent, root) in parents {
            let kids = children(parent);
            for &child in &kids {
                if !met.insert(child) || left_alone(child) {
                    continue;
                }
                new = true;
                match Target::grab(child) {
                    // Held, or watched because another tracer holds it.
                    Ok(t) if !t.held.is_empty() || t.tracer.is_some() => {
                        found.descendants.push(Descendant { target: t, parent, root })
                    }
                    // Every thread ended while it was grabbed.
                    Ok(_) => {}
                    Err(_) if gone(child) => {}
                    Err(e) => found.refused.push((child, parent, e)),
                }
            }
            now.insert(parent, kids);
        }
        if !new && now == before {
            break;
        }
        before = now;
    }
    found
}

/// The child processes of `pid`, sorted.
pub fn children(pid: i32) -> Vec<i32> {
    let mut kids = match procfs::tasks(pid) {
        Ok(tids) if children_files() => tids
            .into_iter()
            .filter_map(|tid| std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")).ok())
            .flat_map(|text| text.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<i32>>())
            .collect(),
        Ok(_) => procfs::all_pids()
            .unwrap_or_default()
            .into_iter()
            .filter(|&p| procfs::stat(p).is_ok_and(|(_, ppid)| ppid == pid))
            .collect(),
        Err(_) => Vec::new(),
    };
    kids.sort_unstable();
    kids.dedup();
    kids
}

/// Whether the kernel lists children per thread (CONFIG_PROC_CHILDREN).
fn children_files() -> bool {
    std::path::Path::new("/proc/thread-self/children").exists()
}

/// Whether `pid` is not to be grabbed: it is ending (every thread a zombie, or
/// exiting), a kernel thread, an undertaker or exec gate keeper (stopped, it would hold
/// the machine's execs of new images), or udtrace traces it already.
fn left_alone(pid: i32) -> bool {
    let undertaker =
        procfs::stat(pid).map_or(true, |(comm, _)| comm == UNDERTAKER_NAME || comm == crate::gate::GATE_NAME);
    let ours = procfs::tracer_pid(pid) == Some(std::process::id() as i32);
    undertaker || ours || refusal::kernel_thread(pid).is_some() || ending(pid)
}

/// Whether no thread of `pid` runs on (a leader that ended alone shows Z, its
/// process runs on).
fn ending(pid: i32) -> bool {
    let runs = |tid: i32| {
        procfs::task_stat(pid, tid).is_ok_and(|(_, fields)| {
            let state = fields.first().and_then(|s| s.chars().next()).unwrap_or('X');
            // Fields after the name start at the state (field 3): flags are field 9.
            let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
            !matches!(state, 'Z' | 'X' | 'x') && flags & PF_EXITING == 0
        })
    };
    procfs::tasks(pid).map_or(true, |tids| !tids.into_iter().any(runs))
}

/// Whether `pid` has ended (or is ending) since it was listed.
fn gone(pid: i32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists() || ending(pid)
}
