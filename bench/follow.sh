#!/usr/bin/env bash
# Side-by-side benchmark of following children (issue 5): udtrace against bpftrace,
# ltrace and (when installed) uftrace on a daemon (bench/workloads/forker.c) that forks workers which call target(),
# in one interleaved run. Prints how many target() firings each tracer counted against
# the exact total, the per-firing overhead in the workers (traced loop time minus
# untraced, per call) and the udtrace/bpftrace ratio, then fork+exec latency.
#
#   bench/follow.sh            # ROUNDS=5 by default, under a minute
#   ROUNDS=9 bench/follow.sh
#   WORKERS=200 CALLS=2000 EXEC_EVERY=5 SPAWNS=200 LTRACE_WORKERS=20 LTRACE_CALLS=100
#
# Needs root, gcc, bpftrace and ltrace (apt-get install -y bpftrace ltrace); uftrace
# (apt-get install -y uftrace) adds its row. Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
NW=${WORKERS:-200}          # workers the daemon forks
NM=${CALLS:-2000}           # target() calls per worker
NE=${EXEC_EVERY:-5}         # every NE-th worker execs (forker child) before its loop
NF=${SPAWNS:-200}           # fork(+exec)+wait per latency run
LW=${LTRACE_WORKERS:-20}    # ltrace stops the tracee at every firing (~0.3 ms each):
LM=${LTRACE_CALLS:-100}     # it gets a smaller run of its own

[ "$(id -u)" = 0 ] || { echo "follow: needs root (uprobes)" >&2; exit 1; }
for t in gcc bpftrace ltrace; do
  command -v "$t" >/dev/null ||
    { echo "follow: $t is not installed (apt-get install -y bpftrace ltrace gcc)" >&2; exit 1; }
done
cargo build --release --quiet
U=${CARGO_TARGET_DIR:-$PWD/target}/release/udtrace
[ -x "$U" ] || { echo "follow: no udtrace binary at $U" >&2; exit 1; }
W=$(mktemp -d)
bg=
trap '[ -n "$bg" ] && kill "$bg" 2>/dev/null; rm -rf "$W"' EXIT
gcc -O2 -o "$W/forker" bench/workloads/forker.c

UDESC='pid$target::target:entry'
BPROBE="uprobe:$W/forker:target"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# A field of the workload's "forker: ..." line, from whatever a tracer printed around it.
field() { grep -E '^forker: ' | tail -1 | grep -Eo "$1 [0-9]+" | awk '{print $2}'; }
# udtrace -q prints a bare number for `@ = count()`, and nothing when nothing fired.
ucount_of() { local c; c=$(grep -Eo '^ *[0-9]+ *$' | tr -d ' ' | tail -1); echo "${c:-0}"; }
bcount_of() { local c; c=$(grep -Eo '^@: [0-9]+' | awk '{print $2}' | tail -1); echo "${c:-0}"; }
# ltrace -c's summary: "% time  seconds  usecs/call  calls  function".
lcount_of() { local c; c=$(awk '$NF == "target" {print $4}' "$1" | tail -1); echo "${c:-0}"; }
# uftrace report's "Total time  Self time  Calls  Function", every task of the record.
fcount_of() { local c; c=$(uftrace report -d "$1" 2>/dev/null | awk '$NF == "target" {print $(NF-1)}' | head -1); echo "${c:-0}"; }
UFTRACE=$(command -v uftrace || true)

total=$((NW * NM))
ltotal=$((LW * LM))
work=("$W/forker" work "$NW" "$NM" "$NE")
lwork=("$W/forker" work "$LW" "$LM" "$NE")

echo "forker: $NW workers x $NM calls of target() = $total calls; every ${NE}th worker execs first"
echo "ltrace runs its own smaller forker: $LW workers x $LM calls = $ltotal, one worker at a time"
echo
for f in base ud ip bt btp lbase lt uf; do : >"$W/$f"; done
uc=(); ic=(); bc=(); bpc=(); lc=(); fc=()
for _ in $(seq "$ROUNDS"); do
  "${work[@]}" | field loop_ns >>"$W/base"
  out=$("$U" -q -x uprobes -n "$UDESC { @ = count(); }" -c "${work[*]}" 2>&1)
  echo "$out" | field loop_ns >>"$W/ud"; uc+=("$(echo "$out" | ucount_of)")
  out=$("$U" -q -x inprocess -n "$UDESC { @ = count(); }" -c "${work[*]}" 2>&1)
  echo "$out" | field loop_ns >>"$W/ip"; ic+=("$(echo "$out" | ucount_of)")
  out=$(bpftrace -e "$BPROBE { @ = count(); }" -c "${work[*]}" 2>&1)
  echo "$out" | field loop_ns >>"$W/bt"; bc+=("$(echo "$out" | bcount_of)")
  out=$(bpftrace -e "$BPROBE /pid == cpid/ { @ = count(); }" -c "${work[*]}" 2>&1)
  echo "$out" | field loop_ns >>"$W/btp"; bpc+=("$(echo "$out" | bcount_of)")
  if [ -n "$UFTRACE" ]; then
    # Dynamic patching of target in every image (forked and exec'd workers alike: its
    # libmcount is preloaded through exec).
    rm -rf "$W/uft"
    out=$("$UFTRACE" record -d "$W/uft" -P target --no-libcall "${work[@]}" 2>&1)
    echo "$out" | field loop_ns >>"$W/uf"; fc+=("$(fcount_of "$W/uft")")
  fi
  FORKER_SERIAL=1 "${lwork[@]}" | field loop_wall_ns >>"$W/lbase"
  out=$(FORKER_SERIAL=1 ltrace -f -c -x target@MAIN -o "$W/lsum" "${lwork[@]}" 2>&1)
  echo "$out" | field loop_wall_ns >>"$W/lt"; lc+=("$(lcount_of "$W/lsum")")
done
mc() { printf '%s\n' "$@" | median; }
base=$(median <"$W/base"); lbase=$(median <"$W/lbase")
ud=$(median <"$W/ud"); ip=$(median <"$W/ip"); bt=$(median <"$W/bt"); btp=$(median <"$W/btp"); lt=$(median <"$W/lt")

printf '%-26s %9s %10s %14s %8s\n' tracer calls counted "ns/call" "vs bpf"
row() { # name calls counted traced-ns base-ns bpftrace-ns/call
  awk -v name="$1" -v n="$2" -v c="$3" -v t="$4" -v b="$5" -v ref="$6" 'BEGIN {
    u = (t - b) / n;
    printf "%-26s %9d %9d%s %14.0f %8s\n", name, n, c, (c < n ? "*" : " "), u,
      (ref > 0 ? sprintf("%.2fx", u / ref) : "") }'
}
bpn=$(awk -v t="$bt" -v b="$base" -v n="$total" 'BEGIN {print (t - b) / n}')
row "udtrace" "$total" "$(mc "${uc[@]}")" "$ud" "$base" "$bpn"
row "udtrace -x inprocess" "$total" "$(mc "${ic[@]}")" "$ip" "$base" "$bpn"
row "bpftrace (system-wide)" "$total" "$(mc "${bc[@]}")" "$bt" "$base" 0
row "bpftrace /pid == cpid/" "$total" "$(mc "${bpc[@]}")" "$btp" "$base" "$bpn"
if [ -n "$UFTRACE" ]; then
  uf=$(median <"$W/uf")
  row "uftrace -P target" "$total" "$(mc "${fc[@]}")" "$uf" "$base" "$bpn"
  awk -v ip="$ip" -v uf="$uf" -v b="$base" \
    'BEGIN { if (uf > b) printf "udtrace -x inprocess / uftrace, per call: %.2fx\n", (ip - b) / (uf - b) }'
fi
row "ltrace -f (wall, serial)" "$ltotal" "$(mc "${lc[@]}")" "$lt" "$lbase" "$bpn"
echo "(medians of $ROUNDS; ns/call = (traced - untraced sum of the workers' loop CPU times)"
echo " / calls, whether or not the tracer counted them; for ltrace wall time, since the"
echo " worker sleeps while ltrace handles each stop. Following fork but not exec would count"
echo " $((total - (NW / NE) * NM)); the daemon itself never calls target(). Untraced loops:"
echo " $base ns in all ($((base / NW)) ns per worker), ltrace's: $lbase ns."
echo " * counted fewer than the calls: its ns/call is what the calls cost the workers anyway.)"

echo
echo "fork+exec+wait latency, mean per child (median of $ROUNDS, us):"
SPAWN=("-" /bin/true "$W/forker")
for s in "${SPAWN[@]}"; do for t in base ud bt; do : >"$W/sp-${s//\//_}-$t"; done; done
for _ in $(seq "$ROUNDS"); do
  for s in "${SPAWN[@]}"; do
    k=${s//\//_}
    "$W/forker" spawn "$NF" "$s" | field fork_exec_ns >>"$W/sp-$k-base"
    "$U" -q -n "$UDESC { @ = count(); }" -c "$W/forker spawn $NF $s" 2>&1 | field fork_exec_ns >>"$W/sp-$k-ud"
    bpftrace -e "$BPROBE { @ = count(); }" -c "$W/forker spawn $NF $s" 2>&1 | field fork_exec_ns >>"$W/sp-$k-bt"
  done
done
printf '  %-31s %10s %10s %10s\n' child untraced udtrace bpftrace
for s in "${SPAWN[@]}"; do
  k=${s//\//_}
  case $s in -) what="fork, _exit (no exec)" ;; /bin/true) what="fork, exec /bin/true" ;; *) what="fork, exec forker (has target)" ;; esac
  printf '  %-31s %10.0f %10.0f %10.0f\n' "$what" \
    "$(awk '{print $1/1000}' "$W/sp-$k-base" | median)" \
    "$(awk '{print $1/1000}' "$W/sp-$k-ud" | median)" \
    "$(awk '{print $1/1000}' "$W/sp-$k-bt" | median)"
done

echo
echo "whose calls count: the traced forker runs while an unrelated copy of the same binary"
echo "makes 10 x 1000 calls (once each):"
for tr in udtrace bpftrace; do
  rm -f "$W/go" "$W/done"
  FORKER_WAIT_START=$W/go FORKER_TOUCH_END=$W/done "$W/forker" work 10 1000 >/dev/null &
  bg=$!
  if [ $tr = udtrace ]; then
    n=$(FORKER_TOUCH_START=$W/go FORKER_WAIT_END=$W/done "$U" -q -n "$UDESC { @ = count(); }" -c "${work[*]}" 2>&1 | ucount_of)
  else
    n=$(FORKER_TOUCH_START=$W/go FORKER_WAIT_END=$W/done bpftrace -e "$BPROBE { @ = count(); }" -c "${work[*]}" 2>&1 | bcount_of)
  fi
  wait "$bg"; bg=
  printf '  %-9s counted %s (traced tree: %s, unrelated copy: 10000)\n' "$tr" "$n" "$total"
done
