#!/usr/bin/env bash
# bench_torch.sh — the LibTorch bridge's benchmarks (docs/performance/torch.md): bench_torch (the
# bridge against ascan called directly, the copy roof and a LibTorch loop, medians of 7) in build/
# (Debian's LibTorch) and, with --torch2, in build-torch2/ (LibTorch 2.x from scripts/torch-check.sh)
# plus the Python comparison with PyTorch's associative_scan.
#   scripts/bench_torch.sh [--torch2] [THREADS]     (THREADS: torch's intra-op threads, default torch's)
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=(build)
if [[ "${1:-}" == "--torch2" ]]; then dirs=(build-torch2); shift; fi
[[ -n "${1:-}" ]] && export OMP_NUM_THREADS=$1
for d in "${dirs[@]}"; do
  cmake --build "$d" --target bench_torch -j"$(nproc)" > /dev/null
  lscpu | grep "Model name"
  "$d/bench/bench_torch" --benchmark_repetitions=7 \
    --benchmark_report_aggregates_only=true 2>&1 | grep -E "median|torch_"
done
if [[ "${dirs[0]}" == "build-torch2" ]]; then
  venv=${ASCAN_TORCH_VENV:-$PWD/.venv-torch}
  "$venv/bin/python" scripts/torch_python_check.py build-torch2 --bench | grep -E "^bench|^torch"
fi
