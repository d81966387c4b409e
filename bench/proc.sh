#!/usr/bin/env bash
# Side-by-side benchmark of the proc provider: udtrace's proc probes against bpftrace on
# the kernel hooks they stand for, on two workloads, in one interleaved run. Prints, per
# workload and tracer, how many events were counted against the exact number, the
# per-event overhead (traced loop time minus untraced, per event; medians of ROUNDS) and
# the udtrace/bpftrace ratio.
#
#   bench/proc.sh              # ROUNDS=5, SIGNALS=200000, FORKS=2000: about a minute
#   ROUNDS=9 bench/proc.sh
#   SIGNALS=500000 FORKS=5000 EXEC_PATH=/bin/true bench/proc.sh
#   UDTRACE=/path/to/udtrace bench/proc.sh   # another udtrace binary than the release build
#
# Workloads (bench/workloads/): `sigstorm N` sends itself N SIGUSR1 with kill() (each
# handled); `forkexec N PATH` forks N children one at a time, each execs PATH. Each
# prints its own loop time, so tracer start-up is excluded.
#
# A udtrace that fails (e.g. without the proc provider) gets a "failed" row, with its
# first line of output, and the rest of the run goes on. Needs root, gcc and bpftrace
# (apt-get install -y bpftrace). Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
NS=${SIGNALS:-200000}        # signals per sigstorm run
NF=${FORKS:-2000}            # fork+exec per forkexec run
EXE=${EXEC_PATH:-/bin/true}  # what forkexec's children exec

[ "$(id -u)" = 0 ] || { echo "proc: needs root (tracepoints, BPF)" >&2; exit 1; }
for t in gcc bpftrace; do
  command -v "$t" >/dev/null || { echo "proc: $t is not installed (apt-get install -y bpftrace gcc)" >&2; exit 1; }
done
cargo build --release --quiet || echo "proc: cargo build --release failed; udtrace rows will fail" >&2
U=${UDTRACE:-${CARGO_TARGET_DIR:-$PWD/target}/release/udtrace}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O2 -o "$W/sigstorm" bench/workloads/sigstorm.c
gcc -O2 -o "$W/forkexec" bench/workloads/forkexec.c
EXECNAME=$(basename "$EXE" | cut -c1-15)   # the kernel's comm after exec: at most 15 bytes

# bpftrace 0.21 and later spell tracepoint arguments args.sig; older ones args->sig.
A='args->'
if bpftrace -e 'tracepoint:signal:signal_generate /args.sig == 0/ { exit(); }' -c /bin/true >/dev/null 2>&1; then
  A='args.'
fi
BT_SIG="tracepoint:signal:signal_generate /${A}sig == 10/ { @[comm, ${A}sig] = count(); }"
UD_SIG='proc:::signal-send /args[2] == SIGUSR1/ { @[execname, args[2]] = count(); }'
BT_FE='tracepoint:sched:sched_process_exec { @execs[comm] = count(); } tracepoint:sched:sched_process_fork { @forks = count(); }'
UD_FE='proc:::exec-success { @execs[execname] = count(); } proc:::create { @forks = count(); }'

# Runs a command; its output goes to $W/out, and the CPU time (user + system, ns) it and
# every process it waited for used is printed: the workload's, the kernel's work in
# its hooks, and the tracer's own (bpftrace aggregates in the kernel, udtrace in its
# consumer).
cpu_run() {
  local TIMEFORMAT='%3U %3S'
  { time "$@" >"$W/out" 2>&1; } 2>"$W/cpu.t" || true
  awk 'NF == 2 {printf "%.0f\n", ($1 + $2) * 1e9}' "$W/cpu.t"
}

median() { sort -n | awk 'NF {a[++n]=$1} END {if (!n) print ""; else print (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2}'; }
# The loop time from a workload's own line, whatever a tracer printed around it.
sig_ns() { awk '$1 == "sigstorm:" && $3 == "signals" && $4 == "in" && $6 == "ns" {t=$5} END {if (t != "") print t}'; }
fe_ns() { awk '$1 == "forkexec:" && $3 == "in" && $5 == "ns" {t=$4} END {if (t != "") print t}'; }
# Counts. bpftrace: "@[sigstorm, 10]: N", "@execs[true]: N", "@forks: N". udtrace (as
# dtrace -q): "  sigstorm  10  N", "  true  N", and a bare "  N" for @forks.
b_sig() { awk '$1 == "@[sigstorm," && $2 == "10]:" {c=$3} END {print c+0}'; }
u_sig() { awk 'NF == 3 && $1 == "sigstorm" && $2 == "10" {c=$3} END {print c+0}'; }
b_execs() { awk -v k="@execs[$EXECNAME]:" '$1 == k {c=$2} END {print c+0}'; }
u_execs() { awk -v k="$EXECNAME" 'NF == 2 && $1 == k {c=$2} END {print c+0}'; }
b_forks() { awk '$1 == "@forks:" {c=$2} END {print c+0}'; }
u_forks() { awk 'NF == 1 && $1 ~ /^[0-9]+$/ {c=$1} END {print c+0}'; }

for f in sig-base sig-bt sig-ud fe-base fe-bt fe-ud sig-btc sig-udc fe-btx fe-btf fe-udx fe-udf; do : >"$W/$f"; done
for f in sig-base sig-bt sig-ud fe-base fe-bt fe-ud; do : >"$W/$f-cpu"; : >"$W/$f-cpu0"; done
ud_sig_err=; ud_fe_err=
echo "signals: sigstorm $NS (SIGUSR1 to itself, handled); fork+exec: forkexec $NF $EXE"
echo "bpftrace tracepoint arguments: ${A}sig; $ROUNDS interleaved rounds"
for _ in $(seq "$ROUNDS"); do
  cpu_run "$W/sigstorm" "$NS" >>"$W/sig-base-cpu"; sig_ns <"$W/out" >>"$W/sig-base"
  cpu_run "$W/sigstorm" 0 >>"$W/sig-base-cpu0"

  cpu_run bpftrace -e "$BT_SIG" -c "$W/sigstorm $NS" >>"$W/sig-bt-cpu"; out=$(cat "$W/out")
  echo "$out" | sig_ns >>"$W/sig-bt"; echo "$out" | b_sig >>"$W/sig-btc"
  cpu_run bpftrace -e "$BT_SIG" -c "$W/sigstorm 0" >>"$W/sig-bt-cpu0"

  c=$(cpu_run "$U" -q -n "$UD_SIG" -c "$W/sigstorm $NS"); out=$(cat "$W/out")
  t=$(echo "$out" | sig_ns)
  if [ -n "$t" ] && ! echo "$out" | grep -q '^udtrace: '; then
    echo "$t" >>"$W/sig-ud"; echo "$out" | u_sig >>"$W/sig-udc"; echo "$c" >>"$W/sig-ud-cpu"
    cpu_run "$U" -q -n "$UD_SIG" -c "$W/sigstorm 0" >>"$W/sig-ud-cpu0"
  else
    ud_sig_err=${ud_sig_err:-"$(echo "$out" | awk '$1 != "sigstorm:" {print; exit}')"}
  fi

  cpu_run "$W/forkexec" "$NF" "$EXE" >>"$W/fe-base-cpu"; fe_ns <"$W/out" >>"$W/fe-base"
  cpu_run "$W/forkexec" 0 "$EXE" >>"$W/fe-base-cpu0"

  cpu_run bpftrace -e "$BT_FE" -c "$W/forkexec $NF $EXE" >>"$W/fe-bt-cpu"; out=$(cat "$W/out")
  echo "$out" | fe_ns >>"$W/fe-bt"
  echo "$out" | b_execs >>"$W/fe-btx"; echo "$out" | b_forks >>"$W/fe-btf"
  cpu_run bpftrace -e "$BT_FE" -c "$W/forkexec 0 $EXE" >>"$W/fe-bt-cpu0"

  c=$(cpu_run "$U" -q -n "$UD_FE" -c "$W/forkexec $NF $EXE"); out=$(cat "$W/out")
  t=$(echo "$out" | fe_ns)
  if [ -n "$t" ] && ! echo "$out" | grep -q '^udtrace: '; then
    echo "$t" >>"$W/fe-ud"; echo "$c" >>"$W/fe-ud-cpu"
    echo "$out" | u_execs >>"$W/fe-udx"; echo "$out" | u_forks >>"$W/fe-udf"
    cpu_run "$U" -q -n "$UD_FE" -c "$W/forkexec 0 $EXE" >>"$W/fe-ud-cpu0"
  else
    ud_fe_err=${ud_fe_err:-"$(echo "$out" | awk '$1 != "forkexec:" {print; exit}')"}
  fi
done

# "N (k/R exact)": the median count and in how many rounds it was exactly the expected.
counted() { # file expected
  [ -s "$1" ] || { echo "-"; return; }
  printf '%s (%s/%s exact)' "$(median <"$1")" "$(awk -v e="$2" '$1 == e {k++} END {print k+0}' "$1")" "$(wc -l <"$1")"
}
per_event() { # traced-file base-file events -> ns per event, or empty
  local t b
  t=$(median <"$1"); b=$(median <"$2")
  [ -n "$t" ] && [ -n "$b" ] || return 0
  awk -v t="$t" -v b="$b" -v n="$3" 'BEGIN {printf "%.0f", (t - b) / n}'
}
ratio() { # udtrace-ns bpftrace-ns
  [ -n "$1" ] && [ -n "$2" ] || { echo "-"; return; }
  awk -v u="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", u / b; else print "n/a"}'
}

echo
printf '%-22s %-9s %-40s %12s %9s\n' workload tracer counted "ns/event" "vs bpf"
sb=$(per_event "$W/sig-bt" "$W/sig-base" "$NS")
printf '%-22s %-9s %-40s %12s %9s\n' "signals ($NS)" bpftrace "sends $(counted "$W/sig-btc" "$NS")" "$sb" 1
if [ -s "$W/sig-ud" ]; then
  su=$(per_event "$W/sig-ud" "$W/sig-base" "$NS")
  printf '%-22s %-9s %-40s %12s %9s\n' "" udtrace "sends $(counted "$W/sig-udc" "$NS")" "$su" "$(ratio "$su" "$sb")"
else
  printf '%-22s %-9s %s\n' "" udtrace "failed ($ud_sig_err)"
fi
# Each fork+exec is two events: one fork (create) and one exec (exec-success).
fb=$(per_event "$W/fe-bt" "$W/fe-base" $((2 * NF)))
printf '%-22s %-9s %-40s %12s %9s\n' "fork+exec ($NF)" bpftrace "execs $(counted "$W/fe-btx" "$NF")" "$fb" 1
printf '%-22s %-9s %-40s\n' "" "" "forks $(counted "$W/fe-btf" "$NF")"
if [ -s "$W/fe-ud" ]; then
  fu=$(per_event "$W/fe-ud" "$W/fe-base" $((2 * NF)))
  printf '%-22s %-9s %-40s %12s %9s\n' "" udtrace "execs $(counted "$W/fe-udx" "$NF")" "$fu" "$(ratio "$fu" "$fb")"
  printf '%-22s %-9s %-40s\n' "" "" "forks $(counted "$W/fe-udf" "$NF")"
else
  printf '%-22s %-9s %s\n' "" udtrace "failed ($ud_fe_err)"
fi
# CPU per event: (tracer + workload at N − at 0) − (workload at N − at 0), over events.
cpu_per_event() { # tracer-prefix base-prefix events
  local a b c d
  a=$(median <"$1-cpu"); b=$(median <"$1-cpu0"); c=$(median <"$2-cpu"); d=$(median <"$2-cpu0")
  [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && [ -n "$d" ] || return 0
  awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v n="$3" 'BEGIN {printf "%.0f", ((a - b) - (c - d)) / n}'
}
echo
echo "CPU per event (user + system of workload and tracer, ns; startup cancelled out):"
sbc=$(cpu_per_event "$W/sig-bt" "$W/sig-base" "$NS"); suc=$(cpu_per_event "$W/sig-ud" "$W/sig-base" "$NS")
fbc=$(cpu_per_event "$W/fe-bt" "$W/fe-base" $((2 * NF))); fuc=$(cpu_per_event "$W/fe-ud" "$W/fe-base" $((2 * NF)))
printf '  %-10s bpftrace %8s   udtrace %8s   udtrace/bpftrace %s\n' signals "$sbc" "${suc:--}" "$(ratio "$suc" "$sbc")"
printf '  %-10s bpftrace %8s   udtrace %8s   udtrace/bpftrace %s\n' fork+exec "$fbc" "${fuc:--}" "$(ratio "$fuc" "$fbc")"
sbase=$(median <"$W/sig-base"); fbase=$(median <"$W/fe-base")
# Median loop time and the range over the rounds, in ms: the range is the noise floor.
ms() { sort -n "$1" | awk 'NF {a[++n]=$1} END {if (!n) {print "-"; exit}
  m = (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2; printf "%.1f ms [%.1f-%.1f]", m/1e6, a[1]/1e6, a[n]/1e6}'; }
echo "loop times, median [min-max] of the rounds:"
printf '  %-9s untraced %-26s bpftrace %-26s udtrace %s\n' sigstorm "$(ms "$W/sig-base")" "$(ms "$W/sig-bt")" "$(ms "$W/sig-ud")"
printf '  %-9s untraced %-26s bpftrace %-26s udtrace %s\n' forkexec "$(ms "$W/fe-base")" "$(ms "$W/fe-bt")" "$(ms "$W/fe-ud")"
echo "(medians of $ROUNDS; ns/event = (traced - untraced loop time) / events, whether or not"
echo " the tracer counted them; a fork+exec is 2 events. Untraced: $(awk -v t="$sbase" -v n="$NS" 'BEGIN {printf "%.0f", t / n}') ns per signal,"
echo " $(awk -v t="$fbase" -v n="$NF" 'BEGIN {printf "%.0f", t / n / 1000}') us per fork+exec+wait of $EXE. Both fork scripts count system-wide: other"
echo " processes' forks add to them, and bpftrace's sched_process_fork also counts new threads."
echo " Signals and execs are counted by name (sigstorm, $EXECNAME), so only the workload's count.)"
