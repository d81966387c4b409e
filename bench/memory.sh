#!/usr/bin/env bash
# Bounded memory over a long run (issue 15): a forking daemon (tests/fixtures/forker.c)
# starts WORKERS short-lived workers, at most 4 alive at a time (every fifth exec's
# worker2, the others are forked), under pid$target probes, and udtrace's resident set
# is sampled every second: RssAnon (its own heap) and RssShmem (the in-process rings it
# shares with the traced processes, touched up to their length, then reused). Prints,
# for each, the size after the first 10% of the run, at its end, the largest, and the
# growth per 1,000 processes over the last 90%; and checks that the count of target()
# firings is exact.
#
#   bench/memory.sh                  # 100,000 workers, a few minutes
#   WORKERS=20000 bench/memory.sh
#   UDTRACE_FLAGS="-x uprobes" bench/memory.sh
#
# Needs root for the default backend's BPF fallback and -x uprobes (without root,
# in-process probes alone). Not part of the tests: tests/memory.rs runs a short one.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${WORKERS:-100000}
M=2
K=1
cargo build --release --quiet
U=${CARGO_TARGET_DIR:-$PWD/target}/release/udtrace
FORKER=$(ls -t "${CARGO_TARGET_DIR:-$PWD/target}"/release/build/udtrace-*/out/fixtures/forker | head -1)
[ -x "$U" ] && [ -x "$FORKER" ] || { echo "memory: no udtrace or forker built" >&2; exit 1; }
W=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$W"' EXIT

start=$(date +%s)
# shellcheck disable=SC2086 # UDTRACE_FLAGS is a list of flags
"$U" ${UDTRACE_FLAGS:-} -q -n 'pid$target::target:entry { @ = count(); } END { printa("count %@d\n", @); }' \
  -c "$FORKER $N $M $K spawn" >"$W/out" 2>"$W/err" &
pid=$!
: >"$W/rss"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^RssAnon:/ { a = $2 } /^RssShmem:/ { s = $2 } END { if (a != "") print a, s }' \
    "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] && echo "$(($(date +%s) - start)) $rss" >>"$W/rss"
  sleep 1
done
wait "$pid" || { cat "$W/err" >&2; exit 1; }
secs=$(($(date +%s) - start))

E=$((N / 5))
want=$((3 + (N - E) * M + E * K))
got=$(awk '/^count / { print $2 }' "$W/out")
echo "workers: $N in ${secs}s; target() firings: $got of $want $([ "$got" = "$want" ] && echo exact || echo MISSED)"
awk -v n="$N" '
  { a[NR] = $2; s[NR] = $3; if ($2 > pa) pa = $2; if ($3 > ps) ps = $3 }
  END {
    f = int(NR / 10) + 1
    # Workers are started at an even pace: 90% of them over the last 90% of samples.
    k = n * 0.9 / 1000
    printf "udtrace heap (RssAnon): %d KiB after 10%% of the run, %d KiB at its end, %d KiB at most: %+.1f KiB per 1,000 processes\n", a[f], a[NR], pa, (a[NR] - a[f]) / k
    printf "rings (RssShmem):       %d KiB after 10%% of the run, %d KiB at its end, %d KiB at most: %+.1f KiB per 1,000 processes\n", s[f], s[NR], ps, (s[NR] - s[f]) / k
  }' "$W/rss"
[ "$got" = "$want" ]
