//! `-F` (`-x flowindent`): the record prefix that shows calls nested, as dtrace(1M)
//! prints it. A probe named `entry` (or `…-entry`) opens a level, one named `return`
//! (or `…-return`) closes one; any other probe is shown at the current level with
//! its name. The CPU column goes in testing mode, as dtrace's.

/// dtrace's flowindent header, "%3s %-41s\n".
pub const HEADER: &str = "CPU FUNCTION                                 \n";
/// The header in dtrace's testing mode, "%-41s\n".
pub const TESTING_HEADER: &str = "FUNCTION                                 \n";

/// What a record does to the indentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Entry,
    Return,
    Other,
}

/// `entry` or a name ending in `-entry` (`function-entry`, not `carpentry`), and the
/// same for `return`.
pub fn flow_of(name: &str) -> Flow {
    let ends = |word: &str| name.strip_suffix(word).is_some_and(|rest| rest.is_empty() || rest.ends_with('-'));
    if ends("entry") {
        Flow::Entry
    } else if ends("return") {
        Flow::Return
    } else {
        Flow::Other
    }
}

/// The indentation as records are printed, and the record printed last.
#[derive(Debug, Default)]
pub struct FlowIndent {
    indent: usize,
    /// (probe id, epid) of the last record.
    last: Option<(u32, u32)>,
}

/// One record's probe, for [`FlowIndent::prefix`].
pub struct FlowRecord<'a> {
    pub cpu: u32,
    pub probe_id: u32,
    pub epid: u32,
    pub provider: &'a str,
    pub function: &'a str,
    pub name: &'a str,
    /// Whether no later clause on this probe records: only the last record of a
    /// return probe's firing closes the level (several clauses on one probe are one
    /// call).
    pub last_on_probe: bool,
}

impl FlowIndent {
    /// Writes the prefix of a record, "%3d %-41s " (no CPU in testing mode).
    pub fn prefix(&mut self, out: &mut Vec<u8>, r: &FlowRecord, testing: bool) {
        let mut flow = flow_of(r.name);
        // A second clause's record of the same firing opens no level of its own.
        if flow == Flow::Entry && self.last.is_some_and(|(probe, epid)| probe == r.probe_id && epid != r.epid) {
            flow = Flow::Other;
        }
        if flow == Flow::Return && !r.last_on_probe {
            flow = Flow::Other;
        }
        self.last = Some((r.probe_id, r.epid));
        if flow == Flow::Return {
            self.indent = self.indent.saturating_sub(2);
        }
        let syscall = r.provider == "syscall";
        let mut name = " ".repeat(self.indent);
        match flow {
            Flow::Entry => name.push_str(if syscall { " => " } else { " -> " }),
            Flow::Return => name.push_str(if syscall { " <= " } else { " <- " }),
            Flow::Other => name.push_str("| "),
        }
        name.push_str(r.function);
        if flow == Flow::Other {
            name.push(':');
            name.push_str(r.name);
        }
        if !testing {
            out.extend_from_slice(format!("{:>3} ", r.cpu).as_bytes());
        }
        out.extend_from_slice(format!("{name:<41} ").as_bytes());
        if flow == Flow::Entry {
            self.indent += 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec<'a>(id: u32, epid: u32, function: &'a str, name: &'a str) -> FlowRecord<'a> {
        FlowRecord { cpu: 1, probe_id: id, epid, provider: "pid12", function, name, last_on_probe: true }
    }

    #[test]
    fn headers_are_dtraces() {
        assert_eq!(HEADER, format!("{:>3} {:<41}\n", "CPU", "FUNCTION"));
        assert_eq!(TESTING_HEADER, format!("{:<41}\n", "FUNCTION"));
    }

    #[test]
    fn names_that_open_and_close() {
        assert_eq!(flow_of("entry"), Flow::Entry);
        assert_eq!(flow_of("function-entry"), Flow::Entry);
        assert_eq!(flow_of("carpentry"), Flow::Other);
        assert_eq!(flow_of("return"), Flow::Return);
        assert_eq!(flow_of("miniatureturn"), Flow::Other);
        assert_eq!(flow_of("BEGIN"), Flow::Other);
    }

    #[test]
    fn calls_nest_and_unnest() {
        let mut f = FlowIndent::default();
        let mut out = Vec::new();
        for r in [rec(1, 1, "a", "entry"), rec(2, 2, "b", "entry"), rec(9, 9, "b", "tick"), rec(3, 3, "b", "return")] {
            f.prefix(&mut out, &r, true);
            out.push(b'\n');
        }
        f.prefix(&mut out, &rec(4, 4, "a", "return"), false);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(lines, [" -> a", "   -> b", "    | b:tick", "   <- b", "  1  <- a"]);
    }

    #[test]
    fn a_second_clause_on_a_probe_opens_and_closes_nothing() {
        let mut f = FlowIndent::default();
        let mut out = Vec::new();
        f.prefix(&mut out, &rec(1, 1, "a", "entry"), true);
        f.prefix(&mut out, &rec(1, 2, "a", "entry"), true);
        let first = FlowRecord { last_on_probe: false, ..rec(3, 3, "a", "return") };
        f.prefix(&mut out, &first, true);
        f.prefix(&mut out, &rec(3, 4, "a", "return"), true);
        let text = String::from_utf8(out).unwrap();
        let names: Vec<&str> = text.split("  ").map(str::trim).filter(|s| !s.is_empty()).collect();
        assert_eq!(names, ["-> a", "| a:entry", "| a:return", "<- a"]);
    }
}
