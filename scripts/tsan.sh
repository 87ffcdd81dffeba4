#!/usr/bin/env bash
# tsan.sh — the threaded tests under ThreadSanitizer (docs/reliability.md).
#   scripts/tsan.sh [--smoke]
# Builds build-tsan/ (RelWithDebInfo, -fsanitize=thread, no CUDA, benchmarks or examples) and runs
# the suites that start threads: the pool, concurrent callers and exceptions (test_scan_threads),
# user threads with their own tapes, scans while the pool is resized and exit with scans in
# flight (test_stress_threads), the tape's thread rules (test_ad_lifetime), every layout's
# threaded scan (test_scan_pointwise, test_paths) and gradients (test_ad_scan), exceptions and
# allocation failures on the pool (test_faults), bitwise results on 1-8 threads (test_properties,
# when RapidCheck is installed). --smoke: the first two only, in build-tsan-smoke/ with the builtins
# at the baseline only (CI: a third of their compile time; races do not depend on the ISA level).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
jobs=$(nproc)
tests=(test_scan_threads test_stress_threads)
dir=build-tsan
dispatch=ON
if [[ "${1:-}" == "--smoke" ]]; then
  dir=build-tsan-smoke
  dispatch=OFF  # the builtins at the baseline only: a third of their compile time (CI)
else
  tests+=(test_ad_lifetime test_scan_pointwise test_paths test_ad_scan test_faults test_properties)
fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASCAN_SANITIZE_THREAD=ON -DASCAN_BUILD_BENCH=OFF \
      -DASCAN_BUILD_EXAMPLES=OFF -DASCAN_ENABLE_CUDA=OFF -DASCAN_TORCH=OFF -DASCAN_DISPATCH=$dispatch > /dev/null
cmake --build "$dir" -j"$jobs" --target "${tests[@]}"
status=0
for t in "${tests[@]}"; do
  echo "== $t"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" "$dir/tests/$t" --gtest_brief=1 || status=1
done
exit $status
