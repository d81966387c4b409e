//! DTrace's probe-description globs: `*`, `?`, `[set]`, `[!set]`, `[a-z]` and `\`
//! escapes, matched against a whole field. An empty pattern matches everything. The
//! matcher itself is udtrace-object's (`gmatch`), shared with module matching.

use udtrace_object::modules;

/// Whether `pat` contains glob characters (a plain name is matched exactly and can
/// create probes on demand, a glob never does).
pub fn is_glob(pat: &str) -> bool {
    modules::is_glob(pat)
}

/// Matches a whole probe-description field; an empty field matches everything.
pub fn matches(pat: &str, text: &str) -> bool {
    pat.is_empty() || modules::glob_match(pat, text)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_whole_fields() {
        assert!(matches("", "anything"));
        assert!(matches("BEGIN", "BEGIN"));
        assert!(!matches("BEGIN", "BEGINX"));
        assert!(matches("B*", "BEGIN"));
        assert!(matches("*N", "BEGIN"));
        assert!(matches("B?GIN", "BEGIN"));
        assert!(matches("[BE]*", "END"));
        assert!(!matches("[!BE]*", "END"));
        assert!(matches("tick-[0-9]*", "tick-10ms"));
        assert!(matches("str\\*", "str*"));
        assert!(!matches("str\\*", "strlen"));
        assert!(matches("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!matches("*a*b*c*", "xxaxxcxxbxx"));
    }
}
