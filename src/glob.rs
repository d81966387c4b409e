//! DTrace's probe-description globs: `*`, `?`, `[set]`, `[!set]`, `[a-z]` and `\`
//! escapes, matched against a whole field. An empty pattern matches everything.

/// Whether `pat` contains glob characters (a plain name is matched exactly and can
/// create probes on demand, a glob never does).
pub fn is_glob(pat: &str) -> bool {
    pat.bytes().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

pub fn matches(pat: &str, text: &str) -> bool {
    pat.is_empty() || glob(pat.as_bytes(), text.as_bytes())
}

fn glob(p: &[u8], t: &[u8]) -> bool {
    // Iterative matcher with one backtrack point for the last `*`: linear enough for
    // probe names and never recursive on hostile input.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class(&p[pi..], t[ti]) {
                        if ok {
                            pi += next;
                            ti += 1;
                            continue;
                        }
                    } else if t[ti] == b'[' {
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() && p[pi + 1] == t[ti] => {
                    pi += 2;
                    ti += 1;
                    continue;
                }
                c if c == t[ti] => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the bracket expression at the start of `p`; returns whether it
/// matched and the expression's length, or `None` if the bracket is unterminated.
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some(b'!') | Some(b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        let lo = p[i];
        if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            if lo <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if lo == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
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
