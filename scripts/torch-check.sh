#!/usr/bin/env bash
# torch-check.sh — the LibTorch bridge against LibTorch 2.x: the libraries and CMake config inside
# PyPI's torch wheel, in a virtual environment. Builds ascan with that LibTorch in build-torch2/,
# runs the bridge's tests (test_torch), then scripts/torch_python_check.py: the bridge compiled
# with torch.utils.cpp_extension, checked against torch._higher_order_ops.associative_scan and
# torch.autograd.gradcheck.
#   scripts/torch-check.sh [TORCH_VERSION]        (default 2.15.0; venv: $ASCAN_TORCH_VENV or .venv-torch)
# The wheel is a CUDA build: its CMake config runs a GPU detection unless TORCH_CUDA_ARCH_LIST is
# set (9.0 here, the CUDA backend's architecture), and it needs C++20 (ascan does too).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.15.0}
venv=${ASCAN_TORCH_VENV:-$PWD/.venv-torch}
bash scripts/install_deps.sh
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  "$venv/bin/pip" install -q "torch==$version" numpy ninja
fi
"$venv/bin/pip" show ninja > /dev/null 2>&1 || "$venv/bin/pip" install -q ninja
torch_prefix=$("$venv/bin/python" -c "import os, torch; print(os.path.dirname(torch.__file__))")
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p build-torch2
# (Given Torch_DIR, ascan's CMake takes the wheel's libraries and Caffe2 config before those of a
# Debian libtorch-dev on the same machine.)
cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_prefix/share/cmake/Torch" -DASCAN_BUILD_BENCH=ON \
      -DASCAN_BUILD_EXAMPLES=ON -DASCAN_ENABLE_CUDA=OFF -DASCAN_RAPIDCHECK=OFF > build-torch2/configure.log
grep -q "building ascan::torch" build-torch2/configure.log || { cat build-torch2/configure.log; echo "torch-check: LibTorch not found"; exit 1; }
grep "LibTorch" build-torch2/configure.log
cmake --build build-torch2 -j"$(nproc)" --target test_torch torch_linear_attention ascan_core ascan_autodiff
ctest --test-dir build-torch2 -R "TorchBridge|TorchLinearAttention" --output-on-failure -j"$(nproc)"
PATH="$venv/bin:$PATH" "$venv/bin/python" scripts/torch_python_check.py build-torch2
