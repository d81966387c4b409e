#!/usr/bin/env bash
# Side-by-side benchmark of the profile provider (issue 14): the same sampling rate
# (997 Hz) on the same workload (tests/fixtures/busy.c: 10 s in heavy() and light(),
# built -O2, so without frame pointers) under
#   udtrace   profile-997 /pid == $target/ { @[ustack()] = count(); }   (-x stackfmt=folded)
#   bpftrace  profile:hz:997 /pid == cpid/ { @[ustack] = count(); }     (frame pointers)
#   perf      perf record -F 997 -g                                     (frame pointers)
#   perf      perf record -F 997 --call-graph dwarf                     (stack copies)
# each followed by what it takes to print the stacks (perf script for perf). For each:
# the samples of the workload, the share of them whose stack reaches main(), the CPU
# time per sample (all the machine used beyond an untraced run: the tracer, what runs
# in the sampled thread's context, the post-processing), and the time from the
# workload's end to the printed result.
#
#   bench/profile.sh            # ROUNDS=3 of 10 s each, about three minutes
#   ROUNDS=5 SECONDS_BUSY=20 bench/profile.sh
#
# Needs root, gcc, bpftrace and perf (apt-get install -y bpftrace linux-perf). Not part
# of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_BUSY:-10}

[ "$(id -u)" = 0 ] || { echo "profile: needs root (BPF, perf events)" >&2; exit 1; }
for t in gcc bpftrace perf; do
  command -v "$t" >/dev/null || { echo "profile: $t is not installed" >&2; exit 1; }
done
cargo build --release --quiet
U=${CARGO_TARGET_DIR:-$PWD/target}/release/udtrace
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O2 -g -pthread -o "$W/busy" tests/fixtures/busy.c
MS=$((SECS * 1000))

# Non-idle CPU time of the whole machine so far, in seconds (/proc/stat, USER_HZ 100):
# the workload runs a fixed time on one CPU, so what a traced run uses beyond an
# untraced one is the tracer's cost: its process, the programs or copies run in the
# sampled thread's context, and the post-processing.
busy_cpu() { awk '/^cpu /{print ($2 + $3 + $4 + $7 + $8 + $9) / 100}' /proc/stat; }
now() { date +%s.%N; }

# Folded lines "frame;frame;... count" -> "samples complete".
folded_stats() { awk '{n=$NF; s+=n; if ($0 ~ /busy`main;/) c+=n} END {print s+0, c+0}'; }
# bpftrace: blocks "@[\n frames \n]: count".
bpf_stats() { awk '/^@\[/{m=0} /^ *main\+/{m=1} /^\]: /{n=$2; s+=n; if (m) c+=n} END {print s+0, c+0}'; }
# perf script: one sample per paragraph, its first line the command's name.
perf_stats() {
  awk 'BEGIN{RS=""} /^busy/ {s++; n=split($0, l, "\n"); for (i = 2; i <= n; i++) if (l[i] ~ /^[ \t]*[0-9a-f]+ main$/) {c++; break}}
       END {print s+0, c+0}'
}

# name samples complete cpu-seconds-beyond-untraced seconds-from-workload-end-to-result
row() {
  awk -v n="$1" -v s="$2" -v c="$3" -v cpu="$4" -v after="$5" 'BEGIN {
    printf "%-22s %8d %9.1f%% %12.1f %10.2f\n", n, s, s ? 100 * c / s : 0, s ? cpu / s * 1e6 : 0, after }'
}
# Runs a tracer command (its output to $1), then prints "cpu after": the machine's CPU
# time beyond the untraced run's, and the time past the workload's $SECS.
measure() {
  local out=$1; shift
  local c0 t0 c1 t1
  c0=$(busy_cpu); t0=$(now)
  "$@" > "$out" 2> "$out.err" || true
  c1=$(busy_cpu); t1=$(now)
  echo "$c1 - $c0 - $base" | bc -l
  echo "$t1 - $t0 - $SECS" | bc -l
}

printf '%-22s %8s %10s %12s %10s\n' tracer samples "to main" "us/sample" "result s"
for r in $(seq 1 "$ROUNDS"); do
  c0=$(busy_cpu); "$W/busy" "$MS" > /dev/null; c1=$(busy_cpu)
  base=$(echo "$c1 - $c0" | bc -l)

  { read -r cpu; read -r after; } < <(measure "$W/u" "$U" -q -x stackfmt=folded \
    -n 'profile-997 /pid == $target/ { @[ustack()] = count(); }' -c "$W/busy $MS")
  read -r n c < <(folded_stats < "$W/u")
  row udtrace "$n" "$c" "$cpu" "$after"

  { read -r cpu; read -r after; } < <(measure "$W/b" bpftrace \
    -e 'profile:hz:997 /pid == cpid/ { @[ustack] = count(); }' -c "$W/busy $MS")
  read -r n c < <(bpf_stats < "$W/b")
  row "bpftrace (fp)" "$n" "$c" "$cpu" "$after"

  for mode in fp dwarf; do
    cg=(-g); [ "$mode" = dwarf ] && cg=(--call-graph dwarf)
    { read -r cpu; read -r after; } < <(measure "$W/p" bash -c \
      'perf record -q -F 997 "${@:3}" -o "$1/perf.data" -- "$1/busy" "$2" && perf script -i "$1/perf.data" -F comm,ip,sym' \
      _ "$W" "$MS" "${cg[@]}")
    read -r n c < <(perf_stats < "$W/p")
    row "perf ($mode)" "$n" "$c" "$cpu" "$after"
  done
  echo
done
