//! Module names of the pid provider: what `probemod` shows and which loaded objects a
//! probe description's module field names (design.md, "Probe names").
//!
//! Also DTrace's glob matching (`gmatch`), shared with function matching.

/// The basename: what `probemod` shows for an object.
pub fn module_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether the module field `pattern` names the object at `path`. Without glob characters:
/// the full path, the exact basename, a basename prefix ending where the basename has a
/// `.` (`libc`, `libc.so` for `libc.so.6`), or `a.out` for the executable. With glob
/// characters: the pattern matches the basename or the full path.
pub fn module_matches(pattern: &str, path: &str, is_main: bool) -> bool {
    let base = module_name(path);
    if is_glob(pattern) {
        return glob_match(pattern, base) || glob_match(pattern, path);
    }
    if pattern == path || pattern == base || (is_main && pattern == "a.out") {
        return true;
    }
    // `lib` must not name `libc.so.6`: the prefix has to end at a `.` of the basename.
    !pattern.is_empty()
        && base.len() > pattern.len()
        && base.starts_with(pattern)
        && base.as_bytes()[pattern.len()] == b'.'
}

/// Whether `s` contains a character special to [`glob_match`].
pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', '\\'])
}

/// DTrace's `gmatch`: `*` any run, `?` one character, `[a-z]` a set (`[!..]` negated),
/// `\c` the character `c` itself. A malformed set (no closing `]`) matches `[` literally.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where to resume after the last `*`: pattern index after it, text index it covers to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi + 1, ti));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => match match_set(&p[pi..], t[ti]) {
                Some((true, len)) => Some(len),
                Some((false, _)) => None,
                None => (t[ti] == '[').then_some(1),
            },
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == t[ti]).then_some(2),
            Some(&c) => (c == t[ti]).then_some(1),
            None => None,
        };
        match step {
            Some(n) => {
                pi += n;
                ti += 1;
            }
            None => match star {
                // Let the last `*` swallow one more character and retry.
                Some((sp, st)) => {
                    star = Some((sp, st + 1));
                    pi = sp;
                    ti = st + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Match `c` against the set at the start of `p` (which begins with `[`). Returns whether
/// it matched and the set's length in pattern characters, or None if the set is unclosed.
fn match_set(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    loop {
        let lo = *p.get(i)?;
        // A `]` right after the opening (or `!`) is a member, as in sh.
        if lo == ']' && !first {
            return Some((found != negate, i + 1));
        }
        first = false;
        let (lo, width) = if lo == '\\' { (*p.get(i + 1)?, 2) } else { (lo, 1) };
        i += width;
        if p.get(i) == Some(&'-') && p.get(i + 1).is_some_and(|&h| h != ']') {
            let hi = p[i + 1];
            i += 2;
            found |= lo <= c && c <= hi;
        } else {
            found |= lo == c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basenames() {
        assert_eq!(module_name("/usr/lib/x86_64-linux-gnu/libc.so.6"), "libc.so.6");
        assert_eq!(module_name("a.out"), "a.out");
        assert_eq!(module_name("[vdso]"), "[vdso]");
    }

    #[test]
    fn module_rules() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        for m in ["libc.so.6", "libc.so", "libc", libc, "libc*", "*.so.6", "/usr/lib/*"] {
            assert!(module_matches(m, libc, false), "{m}");
        }
        for m in ["lib", "libc.s", "libc.so.6.1", "a.out", "c.so.6", "", "libm", "libc?"] {
            assert!(!module_matches(m, libc, false), "{m}");
        }
        assert!(module_matches("a.out", "/tmp/prog", true));
        assert!(module_matches("prog", "/tmp/prog", true));
        assert!(!module_matches("a.out", "/tmp/prog", false));
        // A basename without a dot has no prefixes.
        assert!(!module_matches("pro", "/tmp/prog", true));
    }

    #[test]
    fn globs() {
        let yes = [
            ("", ""),
            ("*", ""),
            ("*", "abc"),
            ("a*c", "abbbc"),
            ("a*c", "ac"),
            ("*c*", "abcd"),
            ("?b?", "abc"),
            ("[a-c]x", "bx"),
            ("[!a-c]x", "dx"),
            ("[]]", "]"),
            ("\\*", "*"),
            ("a\\?", "a?"),
            ("[", "["),
            ("str*", "strlen"),
            ("*::bump*", "Counter::bump(int)"),
            ("a*b*c", "aXbYbZc"),
        ];
        for (p, t) in yes {
            assert!(glob_match(p, t), "{p} vs {t}");
        }
        let no = [
            ("", "a"),
            ("a", ""),
            ("?", ""),
            ("a*c", "abd"),
            ("[a-c]x", "dx"),
            ("[!a-c]x", "bx"),
            ("\\*", "a"),
            ("a\\?", "ab"),
            ("str*", "memcpy"),
        ];
        for (p, t) in no {
            assert!(!glob_match(p, t), "{p} vs {t}");
        }
    }
}
