#!/usr/bin/env bash
# Work at the firing (issue 26, docs/firing.md), side by side with peers in one run:
#   - per-firing cost of a counting clause and of DTrace's latency idiom, in-process
#     (default backend) and with uprobes (-x uprobes), beside bpftrace's and uftrace's;
#   - what was counted and dropped, udtrace's own CPU time beside the traced program's,
#     and the end-to-end wall time beside the untraced program's, as ratios.
#
#   bench/firing.sh                 # ROUNDS=3; CALLS=20000000 per thread, 2 threads
#   ROUNDS=5 CALLS=5000000 bench/firing.sh
#
# Needs root, gcc, bpftrace; uftrace adds its column when installed. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-20000000}
# A uprobe costs microseconds: the uprobe rows make fewer calls so a round takes seconds.
UCALLS=${UCALLS:-200000}
THREADS=2
command -v bpftrace >/dev/null || { echo "bench: bpftrace is not installed (apt-get install -y bpftrace)" >&2; exit 1; }
cargo build --release --quiet
U=$PWD/target/release/udtrace
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
chmod 755 "$W" # the unprivileged row runs the workload as nobody
gcc -O2 -pthread -o "$W/calls" bench/workloads/calls.c
UFTRACE=$(command -v uftrace || true)

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
loop_ns() { { grep -Eo '^[0-9]+ calls [0-9]+ ns' || echo "0 calls 0 ns"; } | awk '{print $3}' | tail -1; }
prog_cpu() { { grep -Eo '^cpu [0-9]+ ns' || echo "cpu 0 ns"; } | awk '{print $2}' | tail -1; }
# The CPU time in ns of this shell and of the children it waited for, as `times`
# writes it to file $1 (1 ms steps; /proc's clock ticks were 10 ms, as much as
# udtrace's whole start-up).
cpu_of() { awk '{ for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } } END { printf "%d", t * 1e9 }' "$1"; }
# Runs "$@", printing its output, then "wall NS" and "tree_cpu NS" (the CPU time of
# everything it ran: the tracer and the traced program).
timed() {
  local s e
  times >"$W/times0"
  s=$(date +%s%N)
  "$@" </dev/null 2>&1 || true
  e=$(date +%s%N)
  times >"$W/times1"
  echo "wall $((e - s))"
  echo "tree_cpu $(( $(cpu_of "$W/times1") - $(cpu_of "$W/times0") ))"
}

COUNT='{ @ = count(); } END { printa("counted %@d\n", @); }'
LAT_ENTRY='self->ts = timestamp;'
LAT_RET='/self->ts/ { @q = quantize(timestamp - self->ts); @n = count(); self->ts = 0; } END { printa("counted %@d\n", @n); }'

# name | mode | calls per thread | tracer | command (CALLS_ARGS replaced)
rows() {
  local n=$1 un=$2
  echo "count|hot|$n|udtrace|$U -q -n 'pid\$target::f_hot:entry $COUNT' -c '$W/calls hot $n $THREADS'"
  echo "count|hot|$n|udtrace nobody|setpriv --reuid=65534 --regid=65534 --clear-groups $U -q -n 'pid\$target::f_hot:entry $COUNT' -c '$W/calls hot $n $THREADS'"
  [ -n "$UFTRACE" ] && echo "count|hot|$n|uftrace|$UFTRACE record -d $W/uft -P f_hot --no-libcall $W/calls hot $n $THREADS"
  echo "count|hot|$un|udtrace -x uprobes|$U -q -x uprobes -n 'pid\$target::f_hot:entry $COUNT' -c '$W/calls hot $un $THREADS'"
  echo "count|hot|$un|bpftrace|bpftrace -e 'uprobe:$W/calls:f_hot { @ = count(); }' -c '$W/calls hot $un $THREADS'"
  echo "latency|pair|$n|udtrace|$U -q -n 'pid\$target::f_pair:entry { $LAT_ENTRY } pid\$target::f_pair:return $LAT_RET' -c '$W/calls pair $n $THREADS'"
  echo "latency|pair|$un|udtrace -x uprobes|$U -q -x uprobes -n 'pid\$target::f_pair:entry { $LAT_ENTRY } pid\$target::f_pair:return $LAT_RET' -c '$W/calls pair $un $THREADS'"
  echo "latency|pair|$un|bpftrace|bpftrace -e 'uprobe:$W/calls:f_pair { @s[tid] = nsecs; } uretprobe:$W/calls:f_pair /@s[tid]/ { @q = hist(nsecs - @s[tid]); @n = count(); delete(@s[tid]); }' -c '$W/calls pair $un $THREADS'"
}

printf '%-8s %-18s %10s %11s %9s %10s %12s %10s %10s\n' clause tracer calls counted dropped "ns/firing" "tracer cpu" "÷ prog cpu" "÷ wall"
while IFS='|' read -r clause mode n tracer cmd; do
  : >"$W/base"; : >"$W/loop"; : >"$W/tcpu"; : >"$W/pcpu"; : >"$W/wall"; : >"$W/bwall"
  counted=-; dropped=0
  for _ in $(seq "$ROUNDS"); do
    timed "$W/calls" "$mode" "$n" "$THREADS" >"$W/b"
    loop_ns <"$W/b" >>"$W/base"; awk '/^wall/ {print $2}' "$W/b" >>"$W/bwall"
    rm -rf "$W/uft"
    timed bash -c "$cmd" >"$W/o"
    loop_ns <"$W/o" >>"$W/loop"
    p=$(prog_cpu <"$W/o"); echo "$p" >>"$W/pcpu"
    t=$(awk '/^tree_cpu/ {print $2}' "$W/o"); echo $((t - p)) >>"$W/tcpu"
    awk '/^wall/ {print $2}' "$W/o" >>"$W/wall"
    counted=$({ grep -Eo '^(counted |@: |@n: )[0-9]+' "$W/o" || echo -; } | grep -Eo '[0-9]+$|^-$' | tail -1)
    dropped=$({ grep -Eo '[0-9]+ drops? on CPU' "$W/o" || true; } | awk '{s += $1} END {print s + 0}')
    if [ "$tracer" = uftrace ]; then
      counted=$("$UFTRACE" report -d "$W/uft" 2>/dev/null | awk '$NF == "f_hot" {print $(NF-1)}' | head -1)
    fi
  done
  base=$(median <"$W/base"); loop=$(median <"$W/loop"); tcpu=$(median <"$W/tcpu"); pcpu=$(median <"$W/pcpu")
  wall=$(median <"$W/wall"); bwall=$(median <"$W/bwall")
  awk -v c="$clause" -v t="$tracer" -v n="$n" -v th="$THREADS" -v k="$counted" -v d="$dropped" -v base="$base" \
      -v loop="$loop" -v tcpu="$tcpu" -v pcpu="$pcpu" -v wall="$wall" -v bwall="$bwall" 'BEGIN {
    printf "%-8s %-18s %10d %11s %9s %10.1f %10.0f ms %9.3fx %9.2fx\n", c, t, n * th, k, d, (loop - base) / n,
      tcpu / 1e6, (pcpu > 0 ? tcpu / pcpu : 0), (bwall > 0 ? wall / bwall : 0) }'
done < <(rows "$CALLS" "$UCALLS")
cat <<'EOF'

ns/firing: (traced loop time - untraced) / calls per thread, each thread calling at once.
tracer cpu: CPU time of the tracer's processes (everything run minus the program's own);
÷ prog cpu: that over the traced program's own CPU time; ÷ wall: end-to-end wall time
(start-up included) over the untraced program's.
EOF
