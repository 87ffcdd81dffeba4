#!/usr/bin/env bash
# test.sh — builds ascan and runs the whole test suite.
#   scripts/test.sh              Release build in build/ (tests, examples, benchmarks compiled)
#   scripts/test.sh --sanitize   ASan+UBSan Debug build in build-asan/ (tests and the examples' short modes)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
jobs=$(nproc)
if [[ "${1:-}" == "--sanitize" ]]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DASCAN_SANITIZE=ON -DASCAN_BUILD_BENCH=OFF \
        -DASCAN_BUILD_EXAMPLES=ON
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:protect_shadow_gap=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$jobs"
  ctest --test-dir build --output-on-failure -j"$jobs"
fi
