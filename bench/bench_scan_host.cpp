// bench_scan_host.cpp — host forward scans (float32, ~2^25 elements) against peers and the copy roof.
//
// Per case "<op>/<layout>/<dir>": ascan through the public API into a reused output; the roof
// (copy: one memcpy thread, copy_mt: the same bytes split over ascan::num_threads() threads;
// copy_stream: as copy_mt with streaming stores, which write around the caches: glibc's memcpy
// switches to them only past a size derived from the reported cache size);
// seq (a plain single-thread loop); std_seq / std_par (std::inclusive_scan; par needs TBB);
// eigen / eigen_tp2 (Eigen Tensor cumsum, default device and a 2-thread pool; add only);
// thrust_* (bench_thrust.cpp). Peers that scan one value type see a row of [T, inner] as one
// element (Row<N>, RowPair<N> for the linear recurrence: same bytes, array-of-structs layout).
// Every thread flushes subnormals to zero, as ascan's scans do: main holds ascan's floating-point
// mode scope for the whole run, and threads created after it (the peers' pools) inherit the mode
// (POSIX). The linear recurrence's products of decays in [0.99, 1) underflow after ~2 * 10^4
// steps and stay subnormal (0.995 times a small subnormal rounds back to itself), where each
// operation took ~100x longer on an x86 server CPU: a plain loop over 2^25 steps measured 1.78 s
// with them against ~0.05 s flushed.
#define EIGEN_USE_THREADS  // before any Eigen header: enables ThreadPoolDevice
#include <unsupported/Eigen/CXX11/Tensor>

#include <algorithm>
#include <cstring>
#include <execution>
#include <iterator>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ascan/detail/stream_store.hpp>

#include "bench_common.hpp"

namespace ascan_bench {
namespace {

// ---- ascan ----------------------------------------------------------------------------------
void bench_ascan(benchmark::State& st, CaseSpec spec) {
  CaseData& c = get_case(spec.op, spec.inner);
  const ascan::ScanOptions opts{.reverse = spec.reverse};
  if (spec.op == Op::add) {
    run_timed(st, c, [&] { ascan::associative_scan(ascan::add, c.xs[0], 0, opts, c.ys[0]); },
              [&] { return check_ys(c, spec.reverse); });
  } else {
    const std::tuple<ascan::Tensor<float>, ascan::Tensor<float>> xs{c.xs[0], c.xs[1]};
    run_timed(st, c,
              [&] { ascan::associative_scan(ascan::linear_recurrence, xs, 0, opts, std::tie(c.ys[0], c.ys[1])); },
              [&] { return check_ys(c, spec.reverse); });
  }
}

// ---- the roof: the same bytes copied into a reused buffer ---------------------------------------
void copy_leaves(CaseData& c, int num_parts, bool streaming) {
  const auto part = [&](int w) {
    const int64_t n = c.numel();
    const int64_t b = n * w / num_parts, e = n * (w + 1) / num_parts;
    for (size_t l = 0; l < c.xs.size(); ++l) {
      const size_t bytes = static_cast<size_t>(e - b) * sizeof(float);
      if (streaming) ascan::detail::stream_copy(c.ys[l].data() + b, c.xs[l].data() + b, bytes);
      else std::memcpy(c.ys[l].data() + b, c.xs[l].data() + b, bytes);
    }
    if (streaming) ascan::detail::stream_fence();
  };
  std::vector<std::thread> helpers;
  for (int w = 1; w < num_parts; ++w) helpers.emplace_back(part, w);
  part(0);
  for (std::thread& h : helpers) h.join();
}

void bench_copy(benchmark::State& st, CaseSpec spec, bool multi_thread, bool streaming = false) {
  CaseData& c = get_case(spec.op, spec.inner);
  const int parts = multi_thread ? ascan::num_threads() : 1;
  run_timed(st, c, [&] { copy_leaves(c, parts, streaming); }, [] { return std::string(); });
}

// ---- seq: the plain single-thread loop on the ascan layout (lanes vectorise for N > 1) ---------
template <Op O, int N>
void seq_scan(CaseData& c, bool reverse) {
  const int64_t T = c.T;
  const int64_t first = reverse ? T - 1 : 0;
  const int64_t step = reverse ? -N : N;
  const float* xa = c.xs[0].data() + first * N;
  float* ya = c.ys[0].data() + first * N;
  float acc_a[N];
  for (int j = 0; j < N; ++j) ya[j] = acc_a[j] = xa[j];
  if constexpr (O == Op::add) {
    for (int64_t k = 1; k < T; ++k) {
      xa += step;
      ya += step;
      for (int j = 0; j < N; ++j) ya[j] = acc_a[j] = acc_a[j] + xa[j];
    }
  } else {
    const float* xb = c.xs[1].data() + first * N;
    float* yb = c.ys[1].data() + first * N;
    float acc_b[N];
    for (int j = 0; j < N; ++j) yb[j] = acc_b[j] = xb[j];
    for (int64_t k = 1; k < T; ++k) {
      xa += step;
      ya += step;
      xb += step;
      yb += step;
      for (int j = 0; j < N; ++j) {
        ya[j] = acc_a[j] = acc_a[j] * xa[j];
        yb[j] = acc_b[j] = xa[j] * acc_b[j] + xb[j];
      }
    }
  }
}

template <Op O, int N>
void bench_seq(benchmark::State& st, CaseSpec spec) {
  CaseData& c = get_case(O, N);
  run_timed(st, c, [&] { seq_scan<O, N>(c, spec.reverse); }, [&] { return check_ys(c, spec.reverse); });
}

// ---- std::inclusive_scan ------------------------------------------------------------------------
template <Op O, int N, class Policy>
void bench_std(benchmark::State& st, CaseSpec spec, const Policy& policy) {
  CaseData& c = get_case(O, N);
  const PeerIo<O, N> io = peer_io<O, N>(c);
  const auto op = peer_op<O, N>();
  const auto once = [&] {
    if (!spec.reverse) {
      std::inclusive_scan(policy, io.in, io.in + io.n, io.out, op);
    } else {  // the accumulated (later) value stays on the left, as in ascan's reverse
      std::inclusive_scan(policy, std::make_reverse_iterator(io.in + io.n), std::make_reverse_iterator(io.in),
                          std::make_reverse_iterator(io.out + io.n), op);
    }
  };
  run_timed(st, c, once, [&] { return check_peer<O, N>(c, io.out, spec.reverse); });
}

// ---- Eigen Tensor cumsum (add only) -------------------------------------------------------------
template <int N, class Device>
void eigen_cumsum(const Device& dev, CaseData& c, bool reverse) {
  constexpr int R = N == 1 ? 1 : 2;
  using In = Eigen::TensorMap<Eigen::Tensor<const float, R, Eigen::RowMajor>>;
  using Out = Eigen::TensorMap<Eigen::Tensor<float, R, Eigen::RowMajor>>;
  const auto make = [&](auto* p) {
    using M = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(p)>>, In, Out>;
    if constexpr (R == 1) return M(p, c.T); else return M(p, c.T, N);
  };
  const In in = make(static_cast<const float*>(c.xs[0].data()));
  Out out = make(c.ys[0].data());
  if (!reverse) {
    out.device(dev) = in.cumsum(0);
  } else {  // Eigen has no reverse scan: scan the reversed view into the reversed output
    Eigen::array<bool, R> rev;
    rev.fill(false);
    rev[0] = true;
    out.reverse(rev).device(dev) = in.reverse(rev).cumsum(0);
  }
}

Eigen::ThreadPoolDevice& eigen_pool_device() {
  static Eigen::ThreadPool pool(2);
  static Eigen::ThreadPoolDevice device(&pool, 2);
  return device;
}

template <int N>
void bench_eigen(benchmark::State& st, CaseSpec spec, bool thread_pool) {
  CaseData& c = get_case(Op::add, N);
  const Eigen::DefaultDevice default_device;
  const auto once = [&] {
    if (thread_pool) eigen_cumsum<N>(eigen_pool_device(), c, spec.reverse);
    else eigen_cumsum<N>(default_device, c, spec.reverse);
  };
  run_timed(st, c, once, [&] { return check_ys(c, spec.reverse); });
}

// ---- threads: ascan at 1 and 2 threads --------------------------------------------------------
void bench_ascan_threads(benchmark::State& st, int64_t inner, int threads) {
  const int saved = ascan::num_threads();
  ascan::set_num_threads(threads);
  bench_ascan(st, CaseSpec{Op::add, inner, false});
  ascan::set_num_threads(saved);
}

// ---- registration ---------------------------------------------------------------------------
template <class Fn>
void add(const std::string& name, Fn&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))->UseRealTime();
}

template <Op O, int N>
void register_case(bool reverse) {
  const CaseSpec spec{O, N, reverse};
  const auto name = [&](const char* impl) { return case_name(spec, impl); };
  add(name("ascan"), [spec](benchmark::State& st) { bench_ascan(st, spec); });
  add(name("copy"), [spec](benchmark::State& st) { bench_copy(st, spec, false); });
  add(name("copy_mt"), [spec](benchmark::State& st) { bench_copy(st, spec, true); });
  add(name("copy_stream"), [spec](benchmark::State& st) { bench_copy(st, spec, true, true); });
  add(name("seq"), [spec](benchmark::State& st) { bench_seq<O, N>(st, spec); });
  add(name("std_seq"), [spec](benchmark::State& st) { bench_std<O, N>(st, spec, std::execution::seq); });
#if ASCAN_BENCH_HAVE_TBB  // libstdc++'s par backend is TBB; without it par would run serially
  add(name("std_par"), [spec](benchmark::State& st) { bench_std<O, N>(st, spec, std::execution::par); });
#endif
  if constexpr (O == Op::add) {
    add(name("eigen"), [spec](benchmark::State& st) { bench_eigen<N>(st, spec, false); });
    add(name("eigen_tp2"), [spec](benchmark::State& st) { bench_eigen<N>(st, spec, true); });
  }
  register_thrust_peers(spec);
}

template <Op O, int N>
void register_layout() {
  register_case<O, N>(false);
  register_case<O, N>(true);
  if constexpr (O == Op::add && (N == 1 || N == 256)) {  // thread scaling on the case's data
    for (int threads : {1, 2}) {
      const std::string name = "threads/" + layout_name(N) + "/fwd/ascan_t" + std::to_string(threads);
      add(name, [threads](benchmark::State& st) { bench_ascan_threads(st, N, threads); });
    }
  }
}

void register_all() {
  benchmark::AddCustomContext("ascan_threads", std::to_string(ascan::num_threads()));
#if ASCAN_BENCH_HAVE_TBB
  benchmark::AddCustomContext("std_par", "libstdc++ parallel algorithms on TBB");
#else
  benchmark::AddCustomContext("std_par", "skipped: TBB not found at configure time");
#endif
  register_layout<Op::add, 1>();
  register_layout<Op::add, 7>();
  register_layout<Op::add, 256>();
  register_layout<Op::linrec, 1>();
  register_layout<Op::linrec, 7>();
  register_layout<Op::linrec, 256>();
  register_micro_benchmarks();
}

}  // namespace
}  // namespace ascan_bench

int main(int argc, char** argv) {
  const ascan::detail::FloatModeScope flush;  // before any thread: the peers' pools inherit it
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("flush_denormals", "every thread (peers too)");
  ascan_bench::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
