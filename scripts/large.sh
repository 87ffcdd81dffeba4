#!/usr/bin/env bash
# large.sh — scans over more than 2^31 elements (tests/test_large.cpp), never in CI:
#   scripts/large.sh
# The forward tests need 17 GB of memory, the gradient 34 GB: with less memory and swap than
# 36 GiB the gradient test is skipped, and says so (a swap file gives it room, slowly:
# fallocate -l 24G /swapfile && chmod 600 /swapfile && mkswap /swapfile && swapon /swapfile).
# Builds build-large/ (Release, only this test) and prints each test's time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build-large -DCMAKE_BUILD_TYPE=Release -DASCAN_LARGE_TESTS=ON -DASCAN_BUILD_BENCH=OFF \
      -DASCAN_BUILD_EXAMPLES=OFF -DASCAN_ENABLE_CUDA=OFF > /dev/null
cmake --build build-large -j"$(nproc)" --target test_large
grep -E 'model name' /proc/cpuinfo | head -1
grep -E 'MemTotal|SwapTotal' /proc/meminfo
/usr/bin/time -v build-large/tests/test_large 2>&1 | grep -Ev '^\s+(Average|Exit|File|Major|Minor|Page|Signals|Socket|Swaps|Voluntary|Involuntary|Percent|System|User|Command)'
