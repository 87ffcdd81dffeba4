#!/usr/bin/env bash
# bench_user_build.sh — what a user's build gets (docs/performance/user_build.md).
#
# Installs ascan twice from this tree: as a user gets it (default options) and built for this
# machine (ASCAN_NATIVE=ON). Builds bench/user_build — a find_package(ascan) consumer — against
# each: with default flags (CMAKE_BUILD_TYPE=Release: -O3 -DNDEBUG) against the first, with
# -march=native against the second. Runs the two alternately, ROUNDS times each, and prints the
# table of medians (scripts/bench_user_build_table.py).
#   scripts/bench_user_build.sh [WORK_DIR]      (default /tmp/ascan-user-build)
# Environment: ROUNDS (2), REPS (3 repetitions per round), MIN_TIME (0.2 s), FILTER (all).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/ascan-user-build}
rounds=${ROUNDS:-2}
reps=${REPS:-3}
min_time=${MIN_TIME:-0.2}
filter=${FILTER:-.}
jobs=$(nproc)
mkdir -p "$work"
for kind in default native; do
  native=OFF; user_native=OFF
  [[ $kind == native ]] && native=ON && user_native=ON
  cmake -S . -B "$work/lib-$kind" -DCMAKE_BUILD_TYPE=Release -DASCAN_NATIVE=$native -DASCAN_BUILD_TESTS=OFF \
        -DASCAN_BUILD_BENCH=OFF -DASCAN_BUILD_EXAMPLES=OFF -DASCAN_ENABLE_CUDA=OFF > "$work/lib-$kind.log"
  cmake --build "$work/lib-$kind" -j"$jobs" >> "$work/lib-$kind.log"
  cmake --install "$work/lib-$kind" --prefix "$work/prefix-$kind" >> "$work/lib-$kind.log"
  cmake -S bench/user_build -B "$work/user-$kind" -DCMAKE_BUILD_TYPE=Release -DUSER_NATIVE=$user_native \
        -DCMAKE_PREFIX_PATH="$work/prefix-$kind" > "$work/user-$kind.log"
  # The user's build must print no warning.
  cmake --build "$work/user-$kind" -j"$jobs" 2>&1 | tee -a "$work/user-$kind.log" | grep -i "warning" && {
    echo "bench_user_build.sh: the $kind user build printed warnings (see $work/user-$kind.log)" >&2; exit 1; } || true
done
rm -f "$work"/run-*.json
for ((r = 1; r <= rounds; ++r)); do
  for kind in default native; do
    "$work/user-$kind/bench_user" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
      --benchmark_min_time="$min_time" --benchmark_format=json --benchmark_out="$work/run-$kind-$r.json" \
      --benchmark_out_format=json > /dev/null
  done
done
python3 scripts/bench_user_build_table.py "$work"
