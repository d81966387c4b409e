#!/usr/bin/env bash
# The consumer's cost per record and udtrace's resident size (issue 26, items 4 and 5).
#
#   bench/consumer.sh [UDTRACE]        # default target/release/udtrace; ROUNDS=3
#
# Per record: udtrace's own CPU time (perf stat --no-inherit: not the traced program's)
# on `calls malloc N` under `printf("%d\n", arg0)` to a file, minus the same with N = 0
# (start-up, matching, arming), divided by the records written. The peer is the
# traced program itself: its loop time untraced and traced, as a ratio.
# RSS: udtrace's peak resident size (VmHWM, polled) under a count-only clause on a
# 3-instruction function, 1 thread × 2,000,000 and 2 × 5,000,000 calls.
# Needs perf and gcc; root for the BPF fallback (as the default backend runs).
set -euo pipefail
cd "$(dirname "$0")/.."
U=${1:-$PWD/target/release/udtrace}
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O2 -pthread -o "$W/calls" bench/workloads/calls.c
cat >"$W/spin.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long ho_twork(long x) { __asm__ volatile(""); return x + 1; }
static long per; static volatile long sink;
static void *w(void *a) { (void)a; for (long i = 0; i < per; i++) sink += ho_twork(i); return NULL; }
int main(int argc, char **argv) {
  int t = atoi(argv[1]); per = atol(argv[2]); pthread_t th[64];
  for (int i = 0; i < t; i++) pthread_create(&th[i], 0, w, 0);
  for (int i = 0; i < t; i++) pthread_join(th[i], 0);
  printf("%d x %ld calls\n", t, per); return 0; }
C
gcc -O2 -pthread -o "$W/spin" "$W/spin.c"
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
task_ms() { # N -> "task_ms records drops loop_ns"
  rm -f "$W/out"
  perf stat -i -e task-clock -x, -o "$W/stat" "$U" -q -n 'pid$target:libc:malloc:entry { printf("%d\n", arg0); }' \
    -c "$W/calls malloc $1" -o "$W/out" >"$W/prog" 2>"$W/err"
  echo "$(grep task-clock "$W/stat" | cut -d, -f1) $(wc -l <"$W/out") \
$(grep -o '[0-9]* drops\? on CPU' "$W/err" | awk '{s+=$1} END {print s+0}') $(awk '{print $3}' "$W/prog")"
}
N=300000
: >"$W/per"; : >"$W/ratio"
for _ in $(seq "$ROUNDS"); do
  read -r t0 _ _ _ < <(task_ms 0)
  read -r t rec drops traced < <(task_ms $N)
  base=$("$W/calls" malloc $N | awk '{print $3}')
  awk -v t="$t" -v t0="$t0" -v r="$rec" 'BEGIN { printf "%.0f\n", (t - t0) * 1e6 / r }' >>"$W/per"
  awk -v a="$traced" -v b="$base" 'BEGIN { printf "%.2f\n", a / b }' >>"$W/ratio"
  echo "round: $t ms for $rec records ($drops dropped), start-up $t0 ms" >&2
done
echo "consumer: $(median <"$W/per") ns of udtrace CPU per printf record (median of $ROUNDS, $N malloc calls)"
echo "traced loop / untraced loop: $(median <"$W/ratio")x"
for a in "1 2000000" "2 5000000"; do
  "$U" -q -n 'pid$target::ho_twork:entry { @ = count(); }' -c "$W/spin $a" >"$W/out" 2>"$W/err" &
  p=$!; hwm=0
  while kill -0 $p 2>/dev/null; do
    h=$(awk '/VmHWM/ {print $2}' /proc/$p/status 2>/dev/null || true)
    [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
    sleep 0.02
  done
  wait $p || true
  echo "count-only $a: udtrace peak RSS $((hwm / 1024)) MiB, counted $(grep -Eo '^ *[0-9]+ *$' "$W/out" | tr -d ' '), \
dropped $(grep -o '[0-9]* drops\? on CPU' "$W/err" | awk '{s+=$1} END {print s+0}')"
done
