#!/usr/bin/env bash
# gpu-check.sh — builds and runs the CUDA tests and device benchmarks on a GPU machine.
#   scripts/gpu-check.sh [results-dir]     (default gpu-results/; CUDA_ARCH=90 unless set)
#   scripts/gpu-check.sh --packed [dir]   runs the binaries that scripts/gpu-pack.sh packed into
#                                         gpu-run/ (unpacked in the tree) with their own loader
# PREBUILT=1 runs the binaries already in $BUILD_DIR (built elsewhere, e.g. with
# -DASCAN_NATIVE=OFF and -static-libstdc++ for a machine without the -dev packages) instead of
# configuring and building; RUNNER is put before each binary (a loader with --library-path, say);
# SANITIZE=1 also runs test_cuda_scan and test_cuda_scan_vjp under compute-sanitizer memcheck and
# the span engine's test under racecheck.
# Writes the configure/build logs, the test output, bench JSON + console output and a summary
# (forward and gradient GB/s against the copy roof at 2^28, gradient/forward time ratios) there.
# Without a GPU the tests skip themselves and the benchmarks report "no CUDA device visible".
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == --packed ]]; then
  shift
  PREBUILT=1
  BUILD_DIR=gpu-run
  RUNNER="$PWD/gpu-run/lib/ld-linux-x86-64.so.2 --library-path $PWD/gpu-run/lib:${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu"
fi
out="${1:-gpu-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${BUILD_DIR:-build-gpu}"
arch="${CUDA_ARCH:-90}"
jobs="$(nproc)"
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "gpu-check: nvidia-smi failed (no GPU visible?)"

step() { echo "== $*"; }
tests=(test_cuda_device test_cuda_engines test_cuda_errors test_cuda_scan test_cuda_scan_ops test_cuda_scan_vjp)
if [[ "${PREBUILT:-0}" == 1 ]]; then
  step "prebuilt binaries in $build"
  for t in "${tests[@]}"; do [[ -x "$build/tests/cuda/$t" ]] || { echo "missing $build/tests/cuda/$t"; exit 1; }; done
else
  command -v nvcc >/dev/null || { echo "gpu-check: nvcc not found" | tee "$out/summary.txt"; exit 1; }
  step "configure ($build, sm_$arch)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
        -DASCAN_BUILD_TESTS=ON -DASCAN_BUILD_BENCH=ON -DASCAN_BUILD_EXAMPLES=OFF > "$out/configure.log" 2>&1 \
    || { tail -20 "$out/configure.log"; exit 1; }
  step "build CUDA targets (-j$jobs)"
  start=$SECONDS
  cmake --build "$build" -j"$jobs" --target ascan_cuda_checks > "$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; exit 1; }
  echo "   built in $((SECONDS - start)) s"
fi

step "tests"
status=0
for t in "${tests[@]}"; do
  ${RUNNER:-} "$build/tests/cuda/$t" --gtest_brief=0 > "$out/$t.txt" 2>&1 || status=1
  printf '   %-22s %s\n' "$t" "$(grep -E '^\[  (PASSED|FAILED) ' "$out/$t.txt" | tr '\n' ' ')$(grep -cE '^\[  SKIPPED \] [A-Za-z]+\.[A-Za-z]+ \(' "$out/$t.txt") skipped"
done

step "benchmarks"
${RUNNER:-} "$build/bench/bench_cuda" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.05 --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json \
  > "$out/bench_cuda.txt" 2>&1 || status=1
tail -5 "$out/bench_cuda.txt"

step "summary"
python3 - "$out/bench_cuda.json" > "$out/summary.txt" <<'PY' || echo "gpu-check: no benchmark results to summarise" > "$out/summary.txt"
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
med = {}
for r in runs:
    if r.get("aggregate_name") == "median" and not r.get("error_occurred"):
        med[r["run_name"].replace("/manual_time", "")] = r
if not med:
    print("no successful device benchmarks (no GPU visible?)")
    sys.exit(0)
def gbs(name):
    r = med.get(name)
    return r["bytes_per_second"] / 1e9 if r else None
print(f"{'case (2^28 elements)':<28}{'GB/s':>8}{'x copy':>8}{'grad/fwd time':>15}")
for op in ("add", "linrec"):
    copy = gbs(f"copy/{op}/1d/28")
    for layout in ("1d", "T_inner7", "T_inner256"):
        f, g = med.get(f"fwd/{op}/{layout}/28"), med.get(f"grad/{op}/{layout}/28")
        fb = gbs(f"fwd/{op}/{layout}/28")
        ratio = f"{fb / copy:.2f}" if fb and copy else "-"
        gr = f"{g['real_time'] / f['real_time']:.2f}" if f and g else "-"
        print(f"{'fwd/' + op + '/' + layout:<28}{fb or 0:>8.0f}{ratio:>8}{gr:>15}")
    print(f"{'copy/' + op:<28}{copy or 0:>8.0f}")
t = gbs("thrust/add/1d/28")
if t: print(f"{'thrust inclusive_scan':<28}{t:>8.0f}{t / gbs('copy/add/1d/28'):>8.2f}")
PY
cat "$out/summary.txt"

if [[ "${SANITIZE:-0}" == 1 ]] && command -v compute-sanitizer >/dev/null; then
  for t in test_cuda_scan test_cuda_scan_vjp; do
    step "compute-sanitizer memcheck ($t)"
    timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 1 ${RUNNER:-} "$build/tests/cuda/$t" \
      > "$out/memcheck_$t.txt" 2>&1 || status=1
    tail -3 "$out/memcheck_$t.txt"
  done
  step "compute-sanitizer racecheck (the span engine)"
  timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool racecheck --error-exitcode 1 ${RUNNER:-} \
    "$build/tests/cuda/test_cuda_scan" --gtest_filter='*LongRows*' > "$out/racecheck.txt" 2>&1 || status=1
  tail -3 "$out/racecheck.txt"
fi
echo "results in $out"
exit $status
