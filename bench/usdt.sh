#!/usr/bin/env bash
# Per-firing cost of a USDT probe behind a semaphore (tests/fixtures/usdt.c's `gated`),
# udtrace on both backends (and with -x nodif: every clause in the consumer, a record
# per firing) beside bpftrace's `usdt:`, interleaved, ROUNDS times; and without BPF
# (the user nobody: `nobody`, the gated site, a breakpoint in this fixture;
# `nobody-patched`, the `string` site, patched with a jump, beside `uprobes-string`, the
# same site as a uprobe). Each run's wall time at N firings (NB_N for the breakpoint)
# minus the same tracer's at 1 firing (start-up and teardown), divided by N. Needs
# root, gcc, bpftrace.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
N=${N:-400000}
NB_N=${NB_N:-20000}
cargo build --release --locked --bin udtrace >/dev/null 2>&1
target=${CARGO_TARGET_DIR:-target}
[[ $target = /* ]] || target=$PWD/$target
udtrace=$target/release/udtrace
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
gcc -O2 -mno-red-zone -fno-omit-frame-pointer -I tests/fixtures -o "$dir/usdt" tests/fixtures/usdt.c
wall() {
    local s e
    s=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
    e=$(date +%s%N)
    echo $(((e - s) / 1000))
}
declare -A sum
run() {
    local name=$1 n=$2
    shift 2
    case $name in
    udtrace) wall "$udtrace" -q -n 'fixture$target:::gated { @ = count(); }' -c "$dir/usdt $n" ;;
    uprobes) wall "$udtrace" -x uprobes -q -n 'fixture$target:::gated { @ = count(); }' -c "$dir/usdt $n" ;;
    nodif) wall "$udtrace" -x nodif -q -n 'fixture$target:::gated { @ = count(); }' -c "$dir/usdt $n" ;;
    bpftrace) wall bpftrace -q -e "usdt:$dir/usdt:fixture:gated { @ = count(); }" -c "$dir/usdt $n" ;;
    nobody) wall runuser -u nobody -- "$udtrace" -q -n 'fixture$target:::gated { @ = count(); }' -c "$dir/usdt $n" ;;
    nobody-patched) wall runuser -u nobody -- "$udtrace" -q -n 'fixture$target:::string { @ = count(); }' -c "$dir/usdt $n" ;;
    uprobes-string) wall "$udtrace" -x uprobes -q -n 'fixture$target:::string { @ = count(); }' -c "$dir/usdt $n" ;;
    esac
}
TRACERS=${TRACERS:-udtrace uprobes nodif bpftrace nobody nobody-patched uprobes-string}
for r in $(seq "$ROUNDS"); do
    for t in $TRACERS; do
        n=$N
        [ "$t" = nobody ] && n=$NB_N
        one=$(run $t 1)
        many=$(run $t "$n")
        per=$(((many - one) * 1000 / n))
        echo "round $r $t: $per ns a firing"
        sum[$t]="${sum[$t]:-} $per"
    done
done
for t in $TRACERS; do
    median=$(printf '%s\n' ${sum[$t]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    n=$N
    [ "$t" = nobody ] && n=$NB_N
    echo "$t: median $median ns a firing ($n firings, load $(cut -d' ' -f1 /proc/loadavg))"
done
