#!/usr/bin/env bash
# install_deps.sh — installs the Debian packages ascan needs to build, test and benchmark, if missing.
set -euo pipefail
# g++-aarch64-linux-gnu: the tests compile the kernels for aarch64 too (tests/portability).
# libtorch-dev (LibTorch 1.13, CPU): the LibTorch bridge (ascan::torch) and its tests.
packages=(cmake make g++ libeigen3-dev libfmt-dev libgtest-dev libbenchmark-dev libtbb-dev gnuplot-nox python3
          binutils g++-aarch64-linux-gnu librapidcheck-dev libtorch-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# The CUDA toolkit is optional (not a Debian package here): with nvcc on PATH (or in
# /usr/local/cuda/bin) the CUDA backend is built too.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: nvcc found in /usr/local/cuda/bin (add it to PATH to build the CUDA backend)"
fi
