#!/usr/bin/env bash
# What the exec gate of a `pid*` session costs the machine's execs (issue 27,
# docs/pid-provider.md, "The exec gate"), interleaved in one run: the wall time of
#   - the first exec of a new image (a fresh copy of the usdt fixture, `usdt 1`), which
#     the gate holds until udtrace has seized and armed it;
#   - an exec of an image the session has seen (/bin/true, mapped by some process at
#     start or armed since), which never reaches the gate;
# each untraced and under `udtrace -Z -n 'pid*:usdt-gate-bench:fire:entry'`, ROUNDS
# rounds of REPS execs, medians per round. The firings are counted: every fresh copy's
# one firing must be there (an exact count, not a time).
#
#   bench/gate.sh                 # 5 rounds of 20
#   ROUNDS=3 REPS=50 bench/gate.sh
#
# Needs root (BPF, fanotify). Not part of the tests: tests/usdt.rs checks the counts.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
REPS=${REPS:-20}
cargo build --release --quiet
U=${CARGO_TARGET_DIR:-$PWD/target}/release/udtrace
USDT=$(ls -t "${CARGO_TARGET_DIR:-$PWD/target}"/release/build/udtrace-*/out/fixtures/usdt | head -1)
[ -x "$U" ] && [ -x "$USDT" ] || { echo "gate: no udtrace or usdt fixture built" >&2; exit 1; }
W=$(mktemp -d)
upid=
trap '[ -n "$upid" ] && kill "$upid" 2>/dev/null; rm -rf "$W"' EXIT

# Microseconds of one exec of "$@" (its whole run: fork, exec, exit).
one() {
  local s e
  s=$(date +%s%N)
  "$@" >/dev/null
  e=$(date +%s%N)
  echo $(((e - s) / 1000))
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# REPS execs of fresh copies (new images) and of /bin/true; medians in µs.
round() {
  local tag=$1 i
  : >"$W/new" && : >"$W/seen"
  for i in $(seq "$REPS"); do
    cp "$USDT" "$W/$tag-$i/usdt-gate-bench"
    one "$W/$tag-$i/usdt-gate-bench" 1 >>"$W/new"
    one /bin/true >>"$W/seen"
  done
  echo "$(median <"$W/new") $(median <"$W/seen")"
}

total=0
for r in $(seq "$ROUNDS"); do
  for i in $(seq "$REPS"); do mkdir -p "$W/u$r-$i" "$W/t$r-$i"; done
  read -r un us < <(round "u$r")
  "$U" -Z -q -n 'pid*:usdt-gate-bench:fire:entry { @ = count(); } BEGIN { printf("ready\n"); }
                 END { printa("count %@d\n", @); }' >"$W/out" 2>"$W/err" &
  upid=$!
  for _ in $(seq 200); do grep -q ready "$W/out" && break; sleep 0.05; done
  read -r tn ts < <(round "t$r")
  kill -INT "$upid"
  wait "$upid" || true
  upid=
  count=$(awk '/^count/ { print $2 }' "$W/out")
  [ "${count:-0}" = "$REPS" ] || { echo "gate: round $r counted ${count:-0} of $REPS firings" >&2; cat "$W/err" >&2; exit 1; }
  total=$((total + count))
  echo "round $r: new image ${un} µs untraced, ${tn} µs under the gate; seen image ${us} µs untraced, ${ts} µs under it"
done
echo "firings counted: $total of $((ROUNDS * REPS))"
