// bench_cuda.cu — device scans (forward and gradient) against the copy roof and thrust::inclusive_scan.
//
// Names are "<kind>/<op>/<layout>/<log2 N>": kind fwd | grad | copy | thrust; op add (1 leaf) or
// linrec (2 leaves); layout 1d, T_inner7, T_inner256 (dim 0 of [N / inner, inner]). Each timed
// iteration is one call as a training loop makes it (inputs resident, pooled allocations warm),
// timed with CUDA events (manual time). Bytes: forward and copy move 2·L·N floats, the gradient
// reads xs, ys, ḡ and writes ∂xs (4·L·N floats). Without a device every benchmark reports an
// error and returns at once.
#include <benchmark/benchmark.h>
#include <thrust/execution_policy.h>
#include <thrust/scan.h>

#include <ascan/cuda.cuh>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace {

using ascan::cuda::DeviceTensor;

enum class Kind { fwd, grad, copy, thrust };
enum class Op { add, linrec };

// Deterministic values without a host round trip: a ∈ [0.5, 1) keeps linear recurrences bounded.
__global__ void fill_kernel(float* p, int64_t n, uint32_t seed, float lo, float hi) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 0x9E3779B9u;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  p[i] = lo + (hi - lo) * static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
}

DeviceTensor<float> filled(const ascan::Shape& shape, uint32_t seed, float lo, float hi) {
  DeviceTensor<float> t(shape);
  const int64_t n = t.numel();
  fill_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(t.data(), n, seed, lo, hi);
  ASCAN_CUDA_CHECK(cudaGetLastError());
  return t;
}

// The tensors of one case, kept while consecutive benchmarks share them (one case at a time, so
// the largest, 2^28 floats × 8 leaves, fits comfortably).
struct Case {
  int64_t n = 0, inner = 0;
  std::vector<DeviceTensor<float>> xs, ys, gs;
};
std::unique_ptr<Case> g_case;

Case& get_case(int64_t n, int64_t inner, int leaves) {
  if (!g_case || g_case->n != n || g_case->inner != inner || static_cast<int>(g_case->xs.size()) != leaves) {
    g_case.reset();  // free the previous case first
    auto c = std::make_unique<Case>();
    c->n = n;
    c->inner = inner;
    const ascan::Shape shape = inner == 1 ? ascan::Shape{n} : ascan::Shape{n / inner, inner};
    for (int l = 0; l < leaves; ++l) {
      c->xs.push_back(filled(shape, 11 + l, leaves == 2 && l == 0 ? 0.5f : -1.0f, 1.0f));
      c->ys.push_back(filled(shape, 21 + l, -1.0f, 1.0f));  // overwritten by the forward scan
      c->gs.push_back(filled(shape, 31 + l, -1.0f, 1.0f));
    }
    g_case = std::move(c);
  }
  return *g_case;
}

// Runs `body` once per iteration between two events; the event time is the iteration time.
template <class Body>
void timed(benchmark::State& st, Body&& body) {
  cudaEvent_t start, stop;
  ASCAN_CUDA_CHECK(cudaEventCreate(&start));
  ASCAN_CUDA_CHECK(cudaEventCreate(&stop));
  body();  // warm-up: pool allocations, CUB temp sizes, first-launch costs
  ASCAN_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : st) {
    ASCAN_CUDA_CHECK(cudaEventRecord(start));
    body();
    ASCAN_CUDA_CHECK(cudaEventRecord(stop));
    ASCAN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ASCAN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    st.SetIterationTime(ms * 1e-3);
  }
  ASCAN_CUDA_CHECK(cudaEventDestroy(start));
  ASCAN_CUDA_CHECK(cudaEventDestroy(stop));
}

void run(benchmark::State& st, Kind kind, Op op, int64_t inner, int64_t n) {
  if (ascan::cuda::device_count() == 0) {
    st.SkipWithError("no CUDA device visible");
    return;
  }
  const int leaves = op == Op::add ? 1 : 2;
  try {
    Case& c = get_case(n, inner, leaves);
    const int64_t floats_moved = (kind == Kind::grad ? 4 : 2) * leaves * n;
    switch (kind) {
      case Kind::copy:
        timed(st, [&] {
          for (int l = 0; l < leaves; ++l)
            ASCAN_CUDA_CHECK(cudaMemcpyAsync(c.ys[l].data(), c.xs[l].data(), c.xs[l].bytes(),
                                             cudaMemcpyDeviceToDevice));
        });
        break;
      case Kind::thrust:
        timed(st, [&] {
          thrust::inclusive_scan(thrust::device, c.xs[0].data(), c.xs[0].data() + n, c.ys[0].data());
        });
        break;
      case Kind::fwd:
        if (op == Op::add)
          timed(st, [&] { c.ys[0] = ascan::cuda::associative_scan(ascan::add, c.xs[0], 0); });
        else
          timed(st, [&] {
            std::tie(c.ys[0], c.ys[1]) =
                ascan::cuda::associative_scan(ascan::linear_recurrence, std::tie(c.xs[0], c.xs[1]), 0);
          });
        break;
      case Kind::grad:
        if (op == Op::add) {
          c.ys[0] = ascan::cuda::associative_scan(ascan::add, c.xs[0], 0);
          timed(st, [&] { (void)ascan::cuda::associative_scan_vjp(ascan::add, c.xs[0], c.ys[0], c.gs[0], 0); });
        } else {
          std::tie(c.ys[0], c.ys[1]) =
              ascan::cuda::associative_scan(ascan::linear_recurrence, std::tie(c.xs[0], c.xs[1]), 0);
          timed(st, [&] {
            (void)ascan::cuda::associative_scan_vjp(ascan::linear_recurrence, std::tie(c.xs[0], c.xs[1]),
                                                    std::tie(c.ys[0], c.ys[1]), std::tie(c.gs[0], c.gs[1]), 0);
          });
        }
        break;
    }
    st.SetBytesProcessed(st.iterations() * floats_moved * static_cast<int64_t>(sizeof(float)));
    st.SetItemsProcessed(st.iterations() * n);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void register_all() {
  const char* op_names[] = {"add", "linrec"};
  for (int log2n = 20; log2n <= 28; log2n += 2) {
    const int64_t n = int64_t{1} << log2n;
    const std::string size = std::to_string(log2n);
    for (Op op : {Op::add, Op::linrec}) {
      const std::string o = op_names[static_cast<int>(op)];
      benchmark::RegisterBenchmark(("copy/" + o + "/1d/" + size).c_str(),
                                   [=](benchmark::State& st) { run(st, Kind::copy, op, 1, n); })
          ->UseManualTime()->Unit(benchmark::kMicrosecond);
      for (int64_t inner : {int64_t{1}, int64_t{7}, int64_t{256}}) {
        const std::string layout = inner == 1 ? "1d" : "T_inner" + std::to_string(inner);
        const int64_t n_layout = n / inner * inner;  // whole rows
        for (Kind kind : {Kind::fwd, Kind::grad})
          benchmark::RegisterBenchmark(((kind == Kind::fwd ? "fwd/" : "grad/") + o + "/" + layout + "/" + size).c_str(),
                                       [=](benchmark::State& st) { run(st, kind, op, inner, n_layout); })
              ->UseManualTime()->Unit(benchmark::kMicrosecond);
      }
    }
    benchmark::RegisterBenchmark(("thrust/add/1d/" + size).c_str(),
                                 [=](benchmark::State& st) { run(st, Kind::thrust, Op::add, 1, n); })
        ->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
