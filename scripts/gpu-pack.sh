#!/usr/bin/env bash
# gpu-pack.sh — builds the CUDA tests and device benchmarks here and packs them, with the shared
# libraries they load (this machine's C library and its loader included), for a GPU machine that
# has the CUDA driver but not the -dev packages:
#   scripts/gpu-pack.sh [archive]          (default gpu-pack/gpu-run.tgz; CUDA_ARCH=90 unless set)
# On the GPU machine, in a checkout of the same tree:
#   tar xzf gpu-pack/gpu-run.tgz && scripts/gpu-check.sh --packed [results-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
archive="${1:-gpu-pack/gpu-run.tgz}"
build="${BUILD_DIR:-build-gpu}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DASCAN_NATIVE=OFF \
      -DASCAN_BUILD_TESTS=ON -DASCAN_BUILD_BENCH=ON -DASCAN_BUILD_EXAMPLES=OFF > /dev/null
cmake --build "$build" -j"$(nproc)" --target ascan_cuda_checks
rm -rf gpu-run && mkdir -p gpu-run/tests/cuda gpu-run/bench gpu-run/lib
for t in "$build"/tests/cuda/test_cuda_*; do [[ -x "$t" && -f "$t" ]] && install -s "$t" gpu-run/tests/cuda/; done
install -s "$build/bench/bench_cuda" gpu-run/bench/
# Every library the binaries load, resolved here, and the loader that goes with this C library.
ldd gpu-run/bench/bench_cuda gpu-run/tests/cuda/* | awk '/=> \// {print $3} /ld-linux/ && $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do cp -L "$lib" gpu-run/lib/; done
mkdir -p "$(dirname "$archive")"
tar czf "$archive" gpu-run
echo "packed $(du -h "$archive" | cut -f1) into $archive"
