#!/usr/bin/env bash
# Every fuzz target for a fixed number of runs, starting from its seeds: a short,
# reproducible-in-size smoke run for CI (fuzz/README.md). A crash, timeout or
# out-of-memory stops libFuzzer with a non-zero status, and so this script.
# FUZZ_RUNS overrides the number of runs per target.
set -euo pipefail
cd "$(dirname "$0")"

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

runs=${FUZZ_RUNS:-100000}
cargo fuzz build -s none

# New inputs go to a scratch corpus, so seeds/ stays as committed.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fuzz() {
    local target=$1 seeds=$2
    shift 2
    mkdir -p "$scratch/$target"
    local log="$scratch/$target.log"
    if ! cargo fuzz run -s none "$target" "$scratch/$target" "seeds/$seeds" -- \
        -runs="$runs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" >"$log" 2>&1; then
        tail -n 80 "$log" >&2
        echo "fuzz: $target failed; the input is under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    echo "fuzz: $target: $(grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' "$log" | tr '\n' ' ')"
}

fuzz parse d -max_len=4096 -dict=d.dict
fuzz check d -max_len=4096 -dict=d.dict
fuzz format format -max_len=4096
fuzz elf elf -max_len=65536
fuzz record record -max_len=8192
fuzz procfs procfs -max_len=8192
