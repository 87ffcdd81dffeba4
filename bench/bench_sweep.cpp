// bench_sweep.cpp — throughput against size: 1-D and [T, 256] float add scans from in-cache to
// out-of-cache sizes, next to the copy roof and the peers, for scripts/bench_plot.py.
//
// Names are "sweep/<layout>/<impl>/<log2 n>". Every size gets fresh inputs and a reused output
// (the output is written by each call, as in a training loop). impls: ascan (all threads),
// ascan_t1 (one thread), copy (memcpy of the same bytes into a reused buffer, one thread),
// copy_mt (the same, split over the library's threads), copy_stream (as copy_mt with streaming
// stores, which write around the caches), seq (the plain loop), std_par (std::inclusive_scan
// with the parallel policy, when TBB is there).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#if ASCAN_BENCH_HAVE_TBB
#include <execution>
#endif

#include <ascan/ascan.hpp>
#include <ascan/detail/stream_store.hpp>

#include "bench_small.hpp"

namespace {

using ascan::Tensor;

Tensor<float> input(int64_t n, int64_t inner) {
  return ascan_bench::small_input(n).reshape(inner == 1 ? ascan::Shape{n} : ascan::Shape{n / inner, inner});
}

void seq_scan(const float* x, float* y, int64_t n, int64_t inner) {
  if (inner == 1) return ascan_bench::seq_add(x, y, n);
  std::copy(x, x + inner, y);
  for (int64_t i = inner; i < n; ++i) y[i] = y[i - inner] + x[i];
}

enum class Impl { ascan, ascan_t1, copy, copy_mt, copy_stream, seq, std_par };

void run(benchmark::State& st, int64_t n, int64_t inner, Impl impl) {
  const auto x = input(n, inner);
  auto y = Tensor<float>::zeros(x.shape());
  auto want = Tensor<float>::zeros(x.shape());
  seq_scan(x.data(), want.data(), n, inner);
  const int saved = ascan::num_threads();
  if (impl == Impl::ascan_t1) ascan::set_num_threads(1);
  const auto once = [&] {
    switch (impl) {
      case Impl::ascan:
      case Impl::ascan_t1: ascan::associative_scan(ascan::add, x, 0, {}, y); break;
      case Impl::copy: std::memcpy(y.data(), x.data(), sizeof(float) * n); break;
      case Impl::copy_mt:
        ascan::detail::parallel_for(n, int64_t{1} << 16, [&](int64_t b, int64_t e) {
          std::memcpy(y.data() + b, x.data() + b, sizeof(float) * (e - b));
        });
        break;
      case Impl::copy_stream:
        ascan::detail::parallel_for(n, int64_t{1} << 16, [&](int64_t b, int64_t e) {
          ascan::detail::stream_copy(y.data() + b, x.data() + b, sizeof(float) * (e - b));
          ascan::detail::stream_fence();
        });
        break;
      case Impl::seq: seq_scan(x.data(), y.data(), n, inner); break;
      case Impl::std_par:
#if ASCAN_BENCH_HAVE_TBB
        if (inner == 1) std::inclusive_scan(std::execution::par, x.data(), x.data() + n, y.data());
#endif
        break;
    }
  };
  once();
  const bool is_scan = impl != Impl::copy && impl != Impl::copy_mt && impl != Impl::copy_stream;
  if (is_scan && !(y == want)) st.SkipWithError("wrong result");
  for (auto _ : st) {
    once();
    benchmark::ClobberMemory();
  }
  ascan::set_num_threads(saved);
  ascan_bench::set_small_counters(st, n, 1);
}

void register_all() {
  const std::pair<const char*, Impl> impls[] = {{"ascan", Impl::ascan}, {"ascan_t1", Impl::ascan_t1},
                                                {"copy", Impl::copy},   {"copy_mt", Impl::copy_mt},
                                                {"copy_stream", Impl::copy_stream},
                                                {"seq", Impl::seq},     {"std_par", Impl::std_par}};
  for (int64_t inner : {int64_t{1}, int64_t{256}})
    for (int lg = 10; lg <= 26; lg += 2)
      for (const auto& [name, impl] : impls) {
        if (impl == Impl::std_par && (inner != 1 || !ASCAN_BENCH_HAVE_TBB)) continue;
        const std::string full = std::string("sweep/") + (inner == 1 ? "1d" : "T_inner256") + "/" + name + "/" +
                                 std::to_string(lg);
        benchmark::RegisterBenchmark(full.c_str(), [n = int64_t{1} << lg, inner, impl = impl](benchmark::State& st) {
          run(st, n, inner, impl);
        })->UseRealTime();
      }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::AddCustomContext("ascan_threads", std::to_string(ascan::num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
