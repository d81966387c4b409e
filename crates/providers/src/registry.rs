//! The probes udtrace can enable: the `dtrace` provider (BEGIN, END, ERROR), the
//! `profile` provider's timer probes (`tick-<rate>`, `profile-<rate>`), created on
//! demand for any valid rate as DTrace's profile provider does, the `proc` provider's
//! probes, and the pid provider's (see [`PidProvider`]).

use std::rc::Rc;

use udtrace_lang::ast::ProbeDesc;
use udtrace_lang::proc_types::ArgType;
use udtrace_process::procfs::LoadedObject;
use udtrace_runtime::Probe;

use crate::glob;
use crate::pid::PidProvider;
use crate::proc;

pub const BEGIN: u32 = 1;
pub const END: u32 = 2;

/// The profile provider's probes that exist before anyone asks (as in DTrace).
const PRECREATED: &[&str] = &[
    "profile-97",
    "profile-199",
    "profile-499",
    "profile-997",
    "profile-1999",
    "profile-4001",
    "profile-4999",
    "tick-1",
    "tick-10",
    "tick-100",
    "tick-500",
    "tick-1000",
    "tick-5000",
];

/// DTrace refuses timer probes faster than this (profile_interval_min).
const MIN_INTERVAL_NS: u64 = 200_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// `tick-N`: fires on one CPU.
    Tick,
    /// `profile-N`: fires on every CPU.
    Profile,
}

/// Parses a profile provider probe name into its kind and period in nanoseconds.
pub fn timer_period(name: &str) -> Option<(TimerKind, u64)> {
    let (kind, rest) = if let Some(r) = name.strip_prefix("tick-") {
        (TimerKind::Tick, r)
    } else {
        (TimerKind::Profile, name.strip_prefix("profile-")?)
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = rest[..digits].parse().ok()?;
    if n == 0 {
        return None;
    }
    let unit_ns: u64 = match &rest[digits..] {
        "" | "hz" => return period_from_rate(n).map(|p| (kind, p)),
        "ns" | "nsec" => 1,
        "us" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" | "hour" => 3_600_000_000_000,
        "d" | "day" => 86_400_000_000_000,
        _ => return None,
    };
    let period = n.checked_mul(unit_ns)?;
    (period >= MIN_INTERVAL_NS).then_some((kind, period))
}

fn period_from_rate(hz: u64) -> Option<u64> {
    let p = 1_000_000_000 / hz;
    (p >= MIN_INTERVAL_NS).then_some(p)
}

pub struct Registry {
    probes: Vec<Rc<Probe>>,
    /// The pid provider's probes, created on demand; they share the id space.
    pub pid: PidProvider,
}

impl Default for Registry {
    fn default() -> Registry {
        let mut r = Registry { probes: Vec::new(), pid: PidProvider::default() };
        for name in ["BEGIN", "END", "ERROR"] {
            r.add("dtrace", name);
        }
        for name in PRECREATED {
            r.add("profile", name);
        }
        for p in proc::PROBES {
            r.add_full("proc", proc::MODULE, p.function, p.name);
        }
        r
    }
}

impl Registry {
    fn add(&mut self, provider: &str, name: &str) -> Rc<Probe> {
        self.add_full(provider, "", "", name)
    }

    fn add_full(&mut self, provider: &str, module: &str, function: &str, name: &str) -> Rc<Probe> {
        let id = self.probes.len() as u32 + 1;
        let p = Rc::new(Probe::new(id, provider, module, function, name));
        self.probes.push(Rc::clone(&p));
        p
    }

    /// The argument types of each probe `d` matches among those with typed arguments
    /// (the proc provider's); pid and other probes' are untyped.
    pub fn arg_types(d: &ProbeDesc) -> Vec<Vec<ArgType>> {
        if !glob::matches(&d.provider, "proc") || !glob::matches(&d.module, proc::MODULE) {
            return Vec::new();
        }
        proc::PROBES
            .iter()
            .filter(|p| glob::matches(&d.function, p.function) && glob::matches(&d.name, p.name))
            .map(|p| p.args.to_vec())
            .collect()
    }

    pub fn all(&self) -> &[Rc<Probe>] {
        &self.probes
    }

    pub fn by_id(&self, id: u32) -> Option<Rc<Probe>> {
        self.probes.get(id.checked_sub(1)? as usize).cloned()
    }

    /// Every probe the description matches, creating pid probes, and a timer probe when
    /// the description names one exactly (no globs), on demand. `Err` is DTrace's
    /// message for a description the pid provider rejects.
    pub fn matching(&mut self, d: &ProbeDesc) -> Result<Vec<Rc<Probe>>, crate::pid::DescError> {
        let known = self.pid.probes().len();
        let mut next = self.probes.len() as u32 + 1;
        if crate::pid::is_all_processes(&d.provider) {
            let found = self.pid.matching_all(d, &mut next);
            let new: Vec<Rc<Probe>> = self.pid.probes()[known..].iter().map(|p| Rc::clone(&p.probe)).collect();
            self.probes.extend(new);
            return Ok(found);
        }
        let found = match self.pid.matching(d, &mut next)? {
            Some(found) => Some(found),
            None => self.pid.matching_usdt(d, &mut next)?,
        };
        if let Some(found) = found {
            let new: Vec<Rc<Probe>> = self.pid.probes()[known..].iter().map(|p| Rc::clone(&p.probe)).collect();
            self.probes.extend(new);
            return Ok(found);
        }
        Ok(self.static_matching(d))
    }

    /// The probes `pid<root>` descriptions (`pid*` ones with `root` 0) have in objects
    /// process `pid` newly mapped (see [`PidProvider::rematch`]); new ones join the
    /// registry.
    pub fn rematch(&mut self, d: &ProbeDesc, root: i32, pid: i32, objects: &[LoadedObject]) -> Vec<Rc<Probe>> {
        let known = self.pid.probes().len();
        let mut next = self.probes.len() as u32 + 1;
        let found = if root == 0 {
            self.pid.rematch_all(d, pid, objects, &mut next)
        } else {
            self.pid.rematch(d, root, pid, objects, &mut next)
        };
        let new: Vec<Rc<Probe>> = self.pid.probes()[known..].iter().map(|p| Rc::clone(&p.probe)).collect();
        self.probes.extend(new);
        found
    }

    fn static_matching(&mut self, d: &ProbeDesc) -> Vec<Rc<Probe>> {
        let wants_profile = glob::matches(&d.provider, "profile") && d.module.is_empty() && d.function.is_empty();
        if wants_profile && !glob::is_glob(&d.name) && timer_period(&d.name).is_some() {
            let exists = self.probes.iter().any(|p| p.provider == "profile" && p.name == d.name);
            if !exists {
                self.add("profile", &d.name);
            }
        }
        self.probes
            .iter()
            .filter(|p| {
                glob::matches(&d.provider, &p.provider)
                    && glob::matches(&d.module, &p.module)
                    && glob::matches(&d.function, &p.function)
                    && glob::matches(&d.name, &p.name)
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_rates_parse_as_dtrace_does() {
        assert_eq!(timer_period("tick-1s"), Some((TimerKind::Tick, 1_000_000_000)));
        assert_eq!(timer_period("tick-10ms"), Some((TimerKind::Tick, 10_000_000)));
        assert_eq!(timer_period("profile-997"), Some((TimerKind::Profile, 1_003_009)));
        assert_eq!(timer_period("profile-97hz"), Some((TimerKind::Profile, 10_309_278)));
        assert_eq!(timer_period("tick-100us"), None, "below the 200us minimum");
        assert_eq!(timer_period("tick-5x"), None);
        assert_eq!(timer_period("tick-"), None);
        assert_eq!(timer_period("tick-0"), None);
    }
}
