//! DTrace's string and number subroutines, with the results the kernel's DIF
//! implementations give (illumos dtrace.c, dtrace_dif_subr): substr's Perl-like
//! positions, index/rindex clamping, lltostr's base prefixes, basename/dirname as
//! basename(1)/dirname(1).

mod common;

use common::*;

/// Prints each expression with `fmt` separated by '|' and returns the line.
fn eval(fmt: &str, exprs: &[&str]) -> String {
    let f = vec![fmt; exprs.len()].join("|");
    let out = quiet(&format!(r#"BEGIN {{ printf("{f}\n", {}); exit(0); }}"#, exprs.join(", ")));
    out.strip_suffix("\n\n").expect("line then the final newline").to_string()
}

#[test]
fn strlen_and_strjoin() {
    assert_eq!(eval("%d", &[r#"strlen("hello")"#, r#"strlen("")"#, r#"strlen(strjoin("ab", "cde"))"#]), "5|0|5");
    assert_eq!(eval("%s", &[r#"strjoin("ab", "cde")"#, r#"strjoin("", "x")"#]), "abcde|x");
}

#[test]
fn substr_positions_and_lengths() {
    let cases = [
        ("1", None, "ello"),
        ("0", Some("2"), "he"),
        ("1", Some("3"), "ell"),
        // Negative start counts from the end.
        ("-3", None, "llo"),
        ("-3", Some("2"), "ll"),
        // A start before the string: the count still runs from that start.
        ("-7", Some("4"), "he"),
        ("-10", Some("3"), ""),
        ("-10", None, "hello"),
        // A negative count leaves that many characters off the end.
        ("0", Some("-1"), "hell"),
        ("1", Some("-1"), "ell"),
        ("1", Some("-10"), ""),
        // Past the end: empty. A count past the end stops there.
        ("10", None, ""),
        ("5", None, ""),
        ("2", Some("100"), "llo"),
    ];
    let exprs: Vec<String> = cases
        .iter()
        .map(|(i, c, _)| match c {
            Some(c) => format!(r#"substr("hello", {i}, {c})"#),
            None => format!(r#"substr("hello", {i})"#),
        })
        .collect();
    let refs: Vec<&str> = exprs.iter().map(String::as_str).collect();
    // Brackets show empty results.
    let want: Vec<String> = cases.iter().map(|c| format!("[{}]", c.2)).collect();
    assert_eq!(eval("[%s]", &refs), want.join("|"));
}

#[test]
fn index_and_rindex() {
    let r = eval(
        "%d",
        &[
            r#"index("hello", "l")"#,
            r#"index("hello", "l", 3)"#,
            r#"index("hello", "l", 4)"#,
            r#"index("hello", "z")"#,
            r#"index("hello", "")"#,
            r#"index("hello", "lo")"#,
            r#"index("hello", "l", -5)"#,
            r#"rindex("hello", "l")"#,
            r#"rindex("hello", "l", 2)"#,
            r#"rindex("hello", "l", 1)"#,
            r#"rindex("hello", "h", 100)"#,
            r#"rindex("hello", "")"#,
            r#"rindex("hello", "l", -1)"#,
        ],
    );
    assert_eq!(r, "2|3|-1|-1|0|3|2|3|2|-1|0|5|-1");
}

#[test]
fn strstr_strchr_strrchr() {
    assert_eq!(
        eval(
            "%s",
            &[
                r#"strstr("hello", "ll")"#,
                r#"strstr("hello", "hello")"#,
                r#"strchr("hello", 'l')"#,
                r#"strrchr("hello", 'l')"#,
                r#"strchr("a/b/c", '/')"#
            ]
        ),
        "llo|hello|llo|lo|/b/c"
    );
}

#[test]
fn strtok_continues_with_null() {
    // Runs of delimiters are skipped; NULL continues the previous string.
    let out = quiet(
        r#"BEGIN { printf("%s|", strtok("a,b,,c", ",")); printf("%s|", strtok(NULL, ","));
           printf("%s|", strtok(NULL, ",")); printf("%s\n", strtok("::x:y", ":")); exit(0); }"#,
    );
    assert_eq!(out, "a|b|c|x\n\n");
}

#[test]
fn basename_and_dirname() {
    let paths = ["/usr/lib/libc.so", "/usr/lib/", "libc.so", "/", "/a", "//a//b//", "a/", ""];
    let bases: Vec<String> = paths.iter().map(|p| format!(r#"basename("{p}")"#)).collect();
    let dirs: Vec<String> = paths.iter().map(|p| format!(r#"dirname("{p}")"#)).collect();
    let b: Vec<&str> = bases.iter().map(String::as_str).collect();
    let d: Vec<&str> = dirs.iter().map(String::as_str).collect();
    assert_eq!(eval("%s", &b), "libc.so|lib|libc.so|/|a|b|a|.");
    assert_eq!(eval("%s", &d), "/usr/lib|/usr|.|/|/|//a|.|.");
}

#[test]
fn lltostr_in_bases() {
    assert_eq!(
        eval(
            "%s",
            &[
                "lltostr(12345)",
                "lltostr(-42)",
                "lltostr(0)",
                "lltostr(255, 16)",
                "lltostr(0, 16)",
                "lltostr(8, 8)",
                "lltostr(5, 2)",
                "lltostr(35, 36)"
            ]
        ),
        // Base 16 gets "0x", base 8 a leading 0; only base 10 shows a sign.
        "12345|-42|0|0xff|0x0|010|101|z"
    );
    assert_eq!(eval("%s", &["lltostr(-1, 16)"]), "0xffffffffffffffff");
}

#[test]
fn lltostr_with_a_bad_base_faults() {
    let r = udtrace(&["-q", "-n", r#"BEGIN { trace(lltostr(5, 1)); } BEGIN { exit(0); }"#]);
    assert_eq!(r.stdout, "\n");
    assert_eq!(
        r.stderr,
        "udtrace: error in dt_clause_0 for probe ID 1 (dtrace:::BEGIN): illegal operation at BPF pc 2\n"
    );
}

#[test]
fn toupper_and_tolower() {
    assert_eq!(
        eval("%s", &[r#"toupper("Hello, World1")"#, r#"tolower("Hello, World1")"#]),
        "HELLO, WORLD1|hello, world1"
    );
}

#[test]
fn strtoll_parses_in_a_base() {
    assert_eq!(
        eval(
            "%d",
            &[
                r#"strtoll("123")"#,
                r#"strtoll("-42")"#,
                r#"strtoll("  17xyz")"#,
                r#"strtoll("ff", 16)"#,
                r#"strtoll("0x1f", 16)"#,
                r#"strtoll("077", 8)"#,
                r#"strtoll("z", 36)"#
            ]
        ),
        "123|-42|17|255|31|63|35"
    );
}

#[test]
fn byte_order_conversions() {
    // Little-endian host: hton* swap bytes, ntoh* undo it.
    assert_eq!(
        eval(
            "%x",
            &[
                "htons(0x1234)",
                "htonl(0x12345678)",
                "htonll(0x0102030405060708)",
                "ntohs(0x3412)",
                "ntohl(0x78563412)",
                "ntohll(htonll(0xabcdef))"
            ]
        ),
        "3412|78563412|807060504030201|1234|12345678|abcdef"
    );
    // htons takes and returns a 16-bit value.
    assert_eq!(eval("%x", &["htons(0x11234)"]), "3412");
}

#[test]
fn rand_gives_varying_ints() {
    let out =
        quiet(r#"BEGIN { i = 0; } tick-1ms /i < 20/ { printf("%d\n", rand()); i++; } tick-1ms /i == 20/ { exit(0); }"#);
    let vals: Vec<i64> = out.lines().filter(|l| !l.is_empty()).map(|l| l.parse().unwrap()).collect();
    assert_eq!(vals.len(), 20);
    // rand() is an int: every value fits in 32 bits, and they are not all the same.
    assert!(vals.iter().all(|v| i32::try_from(*v).is_ok()), "{vals:?}");
    assert!(vals.iter().any(|v| *v != vals[0]), "{vals:?}");
}
