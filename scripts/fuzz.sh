#!/usr/bin/env bash
# fuzz.sh — runs each fuzz target with libFuzzer under ASan+UBSan (docs/reliability.md).
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]      (default 600 s, every target)
# Builds build-fuzz/ with Clang 14 (Debian clang-14, libfuzzer-14-dev: installed here if missing),
# then fuzzes each target from its seed corpus (fuzz/corpus/<target>), new inputs going to
# build-fuzz/corpus/<target>; a finding stops that target and leaves its input in build-fuzz/
# (crash-*, add it to fuzz/corpus/<target> with its fix). Prints each target's execution count.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
need=()
command -v clang++-14 > /dev/null || need+=(clang-14)
[[ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ]] || need+=(libfuzzer-14-dev)
if ((${#need[@]})); then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"; fi
bash scripts/install_deps.sh
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASCAN_SANITIZE=ON \
      -DASCAN_LIBFUZZER=ON -DASCAN_BUILD_BENCH=OFF -DASCAN_BUILD_EXAMPLES=OFF -DASCAN_ENABLE_CUDA=OFF > /dev/null
targets=$(sed -n 's/^set(ASCAN_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/CMakeLists.txt)
if (($# > 1)); then shift; targets="$*"; fi
cmake --build build-fuzz -j"$(nproc)" --target $targets
status=0
for t in $targets; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "== $t, $seconds s"
  (cd build-fuzz && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "./fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 "corpus/$t" "../fuzz/corpus/$t" 2>&1 | tee "fuzz-$t.log" |
    grep -E "^stat::number_of_executed_units|^#.*DONE|ERROR|==ERROR|fuzz_scan:" ) || status=1
done
exit $status
