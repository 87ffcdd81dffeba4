#!/usr/bin/env bash
# demo.sh — builds and runs the main demo: a gated linear-attention model trained on associative
# recall (examples/linear_attention). Extra arguments go to the program (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target linear_attention
./build/examples/linear_attention --out build/linear_attention "$@"
