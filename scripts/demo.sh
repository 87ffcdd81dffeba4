#!/usr/bin/env bash
# demo.sh — builds and runs the ascan demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target scan_demo
./build/examples/scan_demo "$@"
