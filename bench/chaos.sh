#!/usr/bin/env bash
# The chaos test at length: udtrace grabs the `chaos` fixture (threads, forks, execs,
# real-time signals between them; pid probes, strings captured, a proc probe) and is
# stopped by SIGINT, SIGTERM, SIGHUP or SIGKILL at a random moment, on each pid backend:
# in-process (BPF as fallback), `-x uprobes`, and in-process without BPF as the user
# nobody. Every round, once udtrace has gone: no thread of the program stopped, no probe
# left in its code (memory against the files), its output and exit status an untraced
# run's. .ci/run runs 60 rounds of each as part of the tests (tests/chaos.rs); this runs
# ROUNDS (default 1000) of each, release build, and prints the table of counts and the
# seeds, so that a failing sequence can be replayed with UDTRACE_CHAOS_SEED.
#
#   bench/chaos.sh                 # 1000 rounds of each
#   ROUNDS=5000 bench/chaos.sh
#   UDTRACE_CHAOS_SEED=123 ROUNDS=300 bench/chaos.sh
#
# Needs root (the proc probe, and nobody for the third backend). Not a timing
# measurement: it passes, or names the failed rounds and their seed.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "chaos: needs root (BPF for the proc probe)" >&2; exit 1; }
export UDTRACE_REQUIRE_BPF=1
# The whole output, each failure in full: LOG (default target/chaos.log).
log=${LOG:-target/chaos.log}
start=$(date +%s)
UDTRACE_CHAOS_ROUNDS=${ROUNDS:-1000} cargo test --release --locked --test chaos -- --nocapture 2>&1 | tee "$log" |
    grep -E '^chaos (FAILED|[a-z -]+: [0-9]+ rounds, UDTRACE)' | cut -c1-300
status=${PIPESTATUS[0]}
echo
echo "| backend | signal | rounds | harmed | stopped | leftover probes (rounds) | other tracers' uprobes |"
echo "|---|---|---|---|---|---|---|"
grep '^chaos summary' "$log" | grep -v '| all |' |
    awk -F' [|] ' '{ sub(/ rounds$/, "", $4); sub(/ harmed$/, "", $5); sub(/ stopped$/, "", $6);
        allowed = ($8 ~ /SIGKILL_LEAVES/) ? " allowed" : ""; split($7, l, " "); sub(/ other.*$/, "", $8);
        printf "| %s | %s | %s | %s | %s | %s (%s)%s | %s |\n", $2, $3, $4, $5, $6, l[1], l[5],
            allowed, $8 }'
grep '| all |' "$log" | sed 's/^chaos summary | /  /'
echo "wall time: $(( $(date +%s) - start )) s"
exit "$status"
