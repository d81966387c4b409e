#!/usr/bin/env bash
# Side-by-side benchmark of udtrace against bpftrace and uftrace on the same workloads,
# in one interleaved run. Prints per-firing overhead (traced loop time minus untraced,
# per call) for each tracer and the udtrace/bpftrace and in-process/uftrace ratios,
# then start-up and arming times.
#
#   bench/run.sh            # ROUNDS=5 by default
#   ROUNDS=9 bench/run.sh
#
# Needs root, gcc and bpftrace (apt-get install -y bpftrace); uftrace
# (apt-get install -y uftrace) adds its column when installed. Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
command -v bpftrace >/dev/null || { echo "bench: bpftrace is not installed (apt-get install -y bpftrace)" >&2; exit 1; }
cargo build --release --quiet
U=$PWD/target/release/udtrace
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O2 -pthread -o "$W/calls" bench/workloads/calls.c
LIBC=$(ldd "$W/calls" | awk '/libc.so.6/ {print $3}')

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# The workload's own "N calls T ns" line, from whatever a tracer printed around it.
loop_ns() { grep -Eo '^[0-9]+ calls [0-9]+ ns' | awk '{print $3}' | tail -1; }
count_of() { grep -Eo '^ *[0-9]+ *$' | tr -d ' ' | tail -1; }

# workload  mode  N  udtrace-description  bpftrace-probe
# uftrace patches functions of the program dynamically (-P) and always records both
# entry and return; library calls it records through the PLT, under a traced main
# (so the malloc row also records free, and each call is two records).
WORKLOADS=(
  "lea|lea|200000|pid\$target::f_lea:entry|uprobe:$W/calls:f_lea|-P f_lea --no-libcall|f_lea"
  "push|push|1000000|pid\$target::f_push:entry|uprobe:$W/calls:f_push|-P f_push --no-libcall|f_push"
  "malloc|malloc|1000000|pid\$target:libc:malloc:entry|uprobe:$LIBC:malloc|-P main|malloc"
  "4 threads|threads|1000000|pid\$target::f_push:entry|uprobe:$W/calls:f_push|-P f_push --no-libcall|f_push"
  "return|ret|200000|pid\$target::f_lea:return|uretprobe:$W/calls:f_lea|-P f_lea --no-libcall|f_lea"
)
UFTRACE=$(command -v uftrace || true)

printf '%-10s %9s %10s %10s %10s %10s %13s %12s %13s %12s %7s %7s %9s\n' workload calls "udtrace n" "inproc n" \
  "bpftrace n" "uftrace n" "udtrace ns/f" "inproc ns/f" "bpftrace ns/f" "uftrace ns/f" ratio inproc "ip/uftr"
for w in "${WORKLOADS[@]}"; do
  IFS='|' read -r name mode n udesc bprobe uargs ufunc <<<"$w"
  : >"$W/base"; : >"$W/ud"; : >"$W/ip"; : >"$W/bt"; : >"$W/uf"
  ucount=?; icount=?; bcount=?; fcount=-
  for _ in $(seq "$ROUNDS"); do
    "$W/calls" "$mode" "$n" | loop_ns >>"$W/base"
    out=$("$U" -q -x uprobes -n "$udesc { @ = count(); }" -c "$W/calls $mode $n" 2>&1)
    echo "$out" | loop_ns >>"$W/ud"; ucount=$(echo "$out" | count_of)
    out=$("$U" -q -x inprocess -n "$udesc { @ = count(); }" -c "$W/calls $mode $n" 2>&1)
    echo "$out" | loop_ns >>"$W/ip"; icount=$(echo "$out" | count_of)
    out=$(bpftrace -e "$bprobe { @ = count(); }" -c "$W/calls $mode $n" 2>&1)
    echo "$out" | loop_ns >>"$W/bt"; bcount=$(echo "$out" | grep -Eo '^@: [0-9]+' | awk '{print $2}')
    if [ -n "$UFTRACE" ]; then
      rm -rf "$W/uft"
      # shellcheck disable=SC2086 # uargs is a list of options
      "$UFTRACE" record -d "$W/uft" $uargs "$W/calls" "$mode" "$n" 2>&1 | loop_ns >>"$W/uf"
      fcount=$("$UFTRACE" report -d "$W/uft" 2>/dev/null | awk -v f="$ufunc" '$NF == f {print $(NF-1)}' | head -1)
    fi
  done
  base=$(median <"$W/base"); ud=$(median <"$W/ud"); ip=$(median <"$W/ip"); bt=$(median <"$W/bt")
  uf=$( [ -s "$W/uf" ] && median <"$W/uf" || echo 0)
  awk -v name="$name" -v n="$n" -v uc="$ucount" -v ic="$icount" -v bc="$bcount" -v fc="$fcount" -v base="$base" \
      -v ud="$ud" -v ip="$ip" -v bt="$bt" -v uf="$uf" 'BEGIN {
    u = (ud - base) / n; i = (ip - base) / n; b = (bt - base) / n; f = (uf > 0 ? (uf - base) / n : 0);
    printf "%-10s %9d %10s %10s %10s %10s %13.0f %12.0f %13.0f %12.0f %6.2fx %6.3fx %8.2fx\n", name, n, uc, ic, bc,
      fc, u, i, b, f, (b > 0 ? u / b : 0), (b > 0 ? i / b : 0), (f > 0 ? i / f : 0) }'
done

echo
echo "start-up to exit, empty workload (median of $ROUNDS, ms):"
: >"$W/ud"; : >"$W/bt"
for _ in $(seq "$ROUNDS"); do
  s=$(date +%s%N); "$U" -q -n 'pid$target::f_push:entry { @ = count(); }' -c "$W/calls push 0" >/dev/null 2>&1; e=$(date +%s%N)
  echo $(( (e - s) / 1000000 )) >>"$W/ud"
  s=$(date +%s%N); bpftrace -e "uprobe:$W/calls:f_push { @ = count(); }" -c "$W/calls push 0" >/dev/null 2>&1; e=$(date +%s%N)
  echo $(( (e - s) / 1000000 )) >>"$W/bt"
done
printf '  udtrace %s ms, bpftrace %s ms\n' "$(median <"$W/ud")" "$(median <"$W/bt")"

echo
echo "arming every entry probe of libc (median of $ROUNDS, ms, start to exit):"
: >"$W/ud"
for _ in $(seq "$ROUNDS"); do
  s=$(date +%s%N); "$U" -q -n 'pid$target:libc::entry { @ = count(); }' -c "$W/calls push 0" >"$W/out" 2>&1; e=$(date +%s%N)
  echo $(( (e - s) / 1000000 )) >>"$W/ud"
done
probes=$("$U" -l -n 'pid$target:libc::entry' -c "$W/calls push 0" 2>/dev/null | tail -n +2 | wc -l)
printf '  udtrace: %s probes in %s ms\n' "$probes" "$(median <"$W/ud")"
s=$(date +%s%N); bpftrace -e "uprobe:$LIBC:mem* { @ = count(); }" -c "$W/calls push 0" >/dev/null 2>&1; e=$(date +%s%N)
bn=$(bpftrace -l "uprobe:$LIBC:mem*" 2>/dev/null | wc -l)
printf '  bpftrace: %s probes (mem* only: one perf uprobe each, slow to detach) in %s ms\n' "$bn" $(( (e - s) / 1000000 ))
