#!/usr/bin/env bash
# The chaos test at length: udtrace grabs the `chaos` fixture (threads, forks, execs;
# pid probes patched in-process, strings captured, a proc probe) and is stopped by
# SIGINT, SIGTERM or SIGKILL at a random moment; every round the program's output and
# exit status must be those of an untraced run. Twice: with BPF, and as the user nobody
# without it (a ptrace breakpoint, the loader hook on a debug register). .ci/run runs
# 100 rounds of each as part of the tests (tests/chaos.rs); this runs ROUNDS (default
# 1000) of each and prints the seeds, so that a failing sequence can be replayed with
# UDTRACE_CHAOS_SEED.
#
#   bench/chaos.sh                 # 1000 rounds of each, about 12 minutes
#   ROUNDS=5000 bench/chaos.sh
#   UDTRACE_CHAOS_SEED=123 ROUNDS=300 bench/chaos.sh
#
# Needs root (the proc probe). Not a timing measurement: it passes or names the round.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "chaos: needs root (BPF for the proc probe)" >&2; exit 1; }
export UDTRACE_REQUIRE_BPF=1
UDTRACE_CHAOS_ROUNDS=${ROUNDS:-1000} cargo test --release --locked --test chaos -- --nocapture
