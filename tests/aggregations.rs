//! Aggregations: the default printing at exit (golden file), printa() with and
//! without a format, joined printa(), the aggsort* options, trunc(), clear(),
//! normalize() and denormalize().
//!
//! Layout facts (libdtrace dt_consume.c): keys "  %-50s" for strings and " %3d",
//! " %5d", " %8d", " %16lld" for 1, 2, 4, 8-byte integers (read back unsigned below
//! 8 bytes); values " %16lld"; distributions start on a new line with
//! "%16s %41s %-9s" and end with a blank line. Order (dt_aggregate.c): by value, ties
//! by key (integers compared unsigned), aggregations in order of first use.

mod common;

use common::*;

/// A string key column.
fn skey(k: &str) -> String {
    format!("  {k:<50}")
}

/// A value column.
fn val(v: i64) -> String {
    format!(" {v:>16}")
}

#[test]
fn golden_default_printing_at_exit() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let script = dir.join("aggregations.d");
    let want = std::fs::read_to_string(dir.join("aggregations.out")).unwrap();
    let r = udtrace(&["-q", "-s", script.to_str().unwrap()]);
    assert_eq!(r.ok(), want);
}

#[test]
fn printa_with_a_format() {
    // Sorted by value, ties by key; no leading newline with a format.
    let out = quiet(
        r#"BEGIN { @["b"] = count(); @["b"] = count(); @["c"] = count(); @["a"] = count();
           printa("%-20s %@d\n", @); exit(0); }"#,
    );
    assert_eq!(out, format!("{:<20} 1\n{:<20} 1\n{:<20} 2\n\n", "a", "c", "b"));
}

#[test]
fn printa_with_several_keys_and_value_conversions() {
    let out = quiet(
        r#"BEGIN { @[ "x", 2 ] = sum(5); @[ "x", 1 ] = sum(5); @[ "a", 7 ] = sum(-1);
           printa("%s:%d=%@d|%@x\n", @); exit(0); }"#,
    );
    // Repeated %@ conversions print the (last) aggregation's value again.
    assert_eq!(out, "a:7=-1|ffffffffffffffff\nx:1=5|5\nx:2=5|5\n\n");
}

#[test]
fn printa_without_a_format() {
    let out = quiet(r#"BEGIN { @["b"] = sum(20); @["a"] = sum(30); printa(@); exit(0); }"#);
    // printa() starts with a newline; each entry is keys then value.
    assert_eq!(out, format!("\n{}{}\n{}{}\n\n", skey("b"), val(20), skey("a"), val(30)));
}

#[test]
fn printa_of_an_unkeyed_and_a_multi_key_aggregation() {
    let out = quiet(r#"BEGIN { @n = sum(42); @m["k", 5] = count(); printa(@n); printa(@m); exit(0); }"#);
    assert_eq!(out, format!("\n{}\n\n{} {:>8}{}\n\n", val(42), skey("k"), 5, val(1)));
}

#[test]
fn printa_joins_aggregations_on_their_keys() {
    // Keys missing from one aggregation print its zero value; sorted by @a, then key.
    let prog = r#"BEGIN { @a["x"] = count(); @a["y"] = count(); @a["y"] = count();
                  @b["y"] = sum(7); @b["z"] = sum(1);
                  printa("%s %@d %@d\n", @a, @b); printa(@a, @b); exit(0); }"#;
    let out = quiet(prog);
    let joined = format!(
        "\n{}{}{}\n{}{}{}\n{}{}{}\n",
        skey("z"),
        val(0),
        val(1),
        skey("x"),
        val(1),
        val(0),
        skey("y"),
        val(2),
        val(7)
    );
    assert_eq!(out, format!("z 0 1\nx 1 0\ny 2 7\n{joined}\n"));
}

#[test]
fn printa_keys_must_match() {
    let r = udtrace(&["-n", "BEGIN { @a[1] = count(); @b[1, 2] = count(); printa(@a, @b); }"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.first_error_line(),
        "udtrace: invalid probe specifier BEGIN { @a[1] = count(); @b[1, 2] = count(); printa(@a, @b); }: \
         printa( ): @a and @b do not have matching key signatures: @a has 1 key, @b has 2 keys"
    );
}

#[test]
fn printed_aggregations_are_not_printed_again_at_exit() {
    let out = quiet(r#"BEGIN { @a = count(); @b = sum(9); exit(0); } END { printa("a=%@d\n", @a); }"#);
    // @a printed by printa in END; only @b is left for the exit printing.
    assert_eq!(out, format!("a=1\n\n{}\n", val(9)));
}

/// Three string keys whose order by value differs from their order by key.
const SORT_DATA: &str = r#"BEGIN { @["b"] = sum(1); @["c"] = sum(2); @["a"] = sum(3); exit(0); }"#;

fn order(out: &str) -> Vec<String> {
    out.lines().filter(|l| !l.is_empty()).map(|l| l.split_whitespace().next().unwrap().to_string()).collect()
}

#[test]
fn default_order_is_by_value() {
    assert_eq!(order(&quiet(SORT_DATA)), ["b", "c", "a"]);
}

#[test]
fn aggsortkey_sorts_by_key() {
    let r = udtrace(&["-q", "-x", "aggsortkey", "-n", SORT_DATA]);
    assert_eq!(order(r.ok()), ["a", "b", "c"]);
    let r = run_script(&["-q"], &format!("#pragma D option aggsortkey\n{SORT_DATA}\n"));
    assert_eq!(order(r.ok()), ["a", "b", "c"]);
}

#[test]
fn aggsortrev_reverses() {
    let r = udtrace(&["-q", "-x", "aggsortrev", "-n", SORT_DATA]);
    assert_eq!(order(r.ok()), ["a", "c", "b"]);
    let r = run_script(&["-q"], &format!("#pragma D option aggsortrev\n#pragma D option aggsortkey\n{SORT_DATA}\n"));
    assert_eq!(order(r.ok()), ["c", "b", "a"]);
}

#[test]
fn aggsortrev_also_reverses_the_aggregation_order() {
    let r = udtrace(&["-q", "-x", "aggsortrev", "-n", "BEGIN { @first = sum(1); @second = sum(2); exit(0); }"]);
    assert_eq!(r.ok(), format!("\n{}\n{}\n", val(2), val(1)));
}

#[test]
fn aggsortpos_picks_the_aggregation_that_sorts() {
    let prog = r#"BEGIN { @a["x"] = sum(1); @a["y"] = sum(2); @b["x"] = sum(20); @b["y"] = sum(10);
                  printa("%s %@d %@d\n", @a, @b); exit(0); }"#;
    assert_eq!(quiet(prog), "x 1 20\ny 2 10\n\n");
    let r = udtrace(&["-q", "-x", "aggsortpos=1", "-n", prog]);
    assert_eq!(r.ok(), "y 2 10\nx 1 20\n\n");
}

#[test]
fn aggsortkeypos_picks_the_key_compared_first() {
    let prog = r#"BEGIN { @["a", 2] = count(); @["b", 1] = count(); printa("%s %d\n", @); exit(0); }"#;
    // Equal values: ties go by key, first key first...
    assert_eq!(quiet(prog), "a 2\nb 1\n\n");
    // ...or from the second key on.
    let r = udtrace(&["-q", "-x", "aggsortkeypos=1", "-n", prog]);
    assert_eq!(r.ok(), "b 1\na 2\n\n");
    let r = udtrace(&["-q", "-x", "aggsortkey", "-x", "aggsortkeypos=1", "-n", prog]);
    assert_eq!(r.ok(), "b 1\na 2\n\n");
}

#[test]
fn integer_keys_tie_break_unsigned() {
    // -1 is 0xffffffff as a key: after 1 on equal values.
    let out = quiet(r#"BEGIN { @[-1] = count(); @[1] = count(); @[0] = count(); printa("%d ", @); exit(0); }"#);
    assert_eq!(out, "0 1 -1 \n");
}

const FOUR: &str = r#"@["c"] = sum(3); @["a"] = sum(1); @["b"] = sum(2); @["d"] = sum(4);"#;

#[test]
fn trunc_keeps_the_top_entries() {
    let out = quiet(&format!(r#"BEGIN {{ {FOUR} trunc(@, 2); printa("%s ", @); exit(0); }}"#));
    assert_eq!(out, "c d \n");
}

#[test]
fn trunc_with_a_negative_count_keeps_the_bottom_entries() {
    let out = quiet(&format!(r#"BEGIN {{ {FOUR} trunc(@, -2); printa("%s ", @); exit(0); }}"#));
    assert_eq!(out, "a b \n");
}

#[test]
fn trunc_without_a_count_empties() {
    let out = quiet(&format!(r#"BEGIN {{ {FOUR} trunc(@); @["e"] = sum(5); exit(0); }}"#));
    assert_eq!(out, format!("\n{}{}\n", skey("e"), val(5)));
}

#[test]
fn clear_zeroes_values_and_keeps_keys() {
    let out = quiet(r#"BEGIN { @["c"] = sum(3); @["d"] = sum(4); clear(@); @["e"] = sum(1); exit(0); }"#);
    assert_eq!(out, format!("\n{}{}\n{}{}\n{}{}\n", skey("c"), val(0), skey("d"), val(0), skey("e"), val(1)));
}

#[test]
fn normalize_divides_and_denormalize_restores() {
    let out = quiet(
        r#"BEGIN { @["x"] = sum(1000); @["y"] = sum(15); normalize(@, 10); printa(@);
           printa("%s=%@d\n", @); denormalize(@); printa(@); exit(0); }"#,
    );
    let norm = format!("\n{}{}\n{}{}\n", skey("y"), val(1), skey("x"), val(100));
    let raw = format!("\n{}{}\n{}{}\n", skey("y"), val(15), skey("x"), val(1000));
    assert_eq!(out, format!("{norm}y=1\nx=100\n{raw}\n"));
}

#[test]
fn normalized_aggregation_prints_normalized_at_exit() {
    let out = quiet(r#"BEGIN { @t = sum(3000); @u = avg(50); normalize(@t, 1000); normalize(@u, 10); exit(0); }"#);
    assert_eq!(out, format!("\n{}\n{}\n", val(3), val(5)));
}

#[test]
fn quantize_with_an_increment() {
    // quantize's optional second argument is the weight added to the bucket.
    let out = quiet("BEGIN { @ = quantize(8, 3); @ = quantize(9, 1); exit(0); }");
    let want = concat!(
        "\n\n",
        "           value  ------------- Distribution ------------- count    \n",
        "               4 |                                         0        \n",
        "               8 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 4        \n",
        "              16 |                                         0        \n",
        "\n",
    );
    assert_eq!(out, want);
}

#[test]
fn printa_of_a_keyed_quantize() {
    let out = quiet(r#"BEGIN { @["k"] = quantize(2); printa(@); exit(0); }"#);
    // The key, then the table on the following lines, then a blank line.
    let want = format!(
        "\n{}\n{}{}{}{}\n\n",
        skey("k"),
        "           value  ------------- Distribution ------------- count    \n",
        "               1 |                                         0        \n",
        "               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 1        \n",
        "               4 |                                         0        \n",
    );
    assert_eq!(out, want);
}

#[test]
fn empty_lquantize_after_clear_shows_the_first_rows() {
    // With no data dt_print_lquantize shows bins 0..2: "< base" and two levels.
    let out = quiet("BEGIN { @ = lquantize(5, 0, 10, 5); clear(@); exit(0); }");
    let want = concat!(
        "\n\n",
        "           value  ------------- Distribution ------------- count    \n",
        "             < 0 |                                         0        \n",
        "               0 |                                         0        \n",
        "               5 |                                         0        \n",
        "\n",
    );
    assert_eq!(out, want);
}
