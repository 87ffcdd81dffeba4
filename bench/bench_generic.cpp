// bench_generic.cpp — Generic mode (odd/even tree over Tensor slices) against sequential loops of
// the same combine: chains of N x N matrix products, leaves [T = 65536, N, N].
//
// Per case "<type>/<N>x<N>/<impl>":
//   tree_1t      ascan::associative_scan(ascan::generic(matmul), xs, 0, {}, ys) on 1 thread
//   tree_all     the same on all threads (the default thread count of the process)
//   batched_1t   ascan::generic_batched(matmul): f on batches of slices (at this length runs of
//                rows folded side by side, one call per step), 1 thread
//   batched_all  the same on all threads
//   tensor_loop  y_t = g(y_{t-1}, x_t) on Tensor slices: select() from the input, results copied
//                into an output tensor, as a user writes the recurrence without the scan
//   raw_loop     the same products on plain arrays (fixed-size loops): the cost of the arithmetic
// Each runs as a training loop calls it (outputs reused, allocator warm). After the run the
// medians of the repetitions and the ratios tree / tensor_loop (the original target: within 2x) and
// batched / raw_loop are printed.
#include <benchmark/benchmark.h>

#include <ascan/ascan.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kT = 65536;
int g_all_threads = 1;

const auto g_matmul = [](const auto& a, const auto& b) { return matmul(a, b); };

// Random orthogonal N x N matrices (Gram-Schmidt of Gaussian ones): the products of a long chain
// stay bounded, so no overflow or denormals distort the timings.
template <class T>
ascan::Tensor<T> orthogonal_chain(int64_t n, uint64_t seed) {
  auto xs = ascan::Tensor<T>::empty({kT, n, n});
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> m(n * n);
  for (int64_t t = 0; t < kT; ++t) {
    for (auto& v : m) v = normal(gen);
    for (int64_t i = 0; i < n; ++i) {  // rows: orthonormalise against the previous ones
      for (int64_t j = 0; j < i; ++j) {
        double d = 0;
        for (int64_t k = 0; k < n; ++k) d += m[i * n + k] * m[j * n + k];
        for (int64_t k = 0; k < n; ++k) m[i * n + k] -= d * m[j * n + k];
      }
      double norm = 0;
      for (int64_t k = 0; k < n; ++k) norm += m[i * n + k] * m[i * n + k];
      norm = std::sqrt(norm);
      for (int64_t k = 0; k < n; ++k) m[i * n + k] /= norm;
    }
    for (int64_t k = 0; k < n * n; ++k) xs.data()[t * n * n + k] = static_cast<T>(m[k]);
  }
  return xs;
}

template <class T>
const ascan::Tensor<T>& input(int64_t n) {
  static std::map<int64_t, ascan::Tensor<T>> cache;
  auto it = cache.find(n);
  if (it == cache.end()) it = cache.emplace(n, orthogonal_chain<T>(n, 42 + n)).first;
  return it->second;
}

template <class T>
void tensor_loop_into(const ascan::Tensor<T>& xs, ascan::Tensor<T>& ys) {
  const int64_t T_len = xs.shape()[0], nn = xs.numel() / T_len;
  ascan::Tensor<T> acc = ascan::select(xs, 0, 0);
  std::memcpy(ys.data(), acc.data(), sizeof(T) * nn);
  for (int64_t t = 1; t < T_len; ++t) {
    acc = g_matmul(acc, ascan::select(xs, 0, t));
    std::memcpy(ys.data() + t * nn, acc.data(), sizeof(T) * nn);
  }
}

void set_items(benchmark::State& st) { st.SetItemsProcessed(st.iterations() * kT); }

template <class T, class Combine>
void tree(benchmark::State& st, int64_t n, bool all_threads, Combine combine) {
  const auto& xs = input<T>(n);
  auto ys = ascan::Tensor<T>::empty(xs.shape());
  auto ref = ascan::Tensor<T>::empty(xs.shape());
  tensor_loop_into(xs, ref);
  ascan::set_num_threads(all_threads ? g_all_threads : 1);
  ascan::associative_scan(combine, xs, 0, {}, ys);
  // Orthogonal products: a different association changes only rounding.
  if (!ascan::allclose(ys, ref, T(1e-2), T(1e-3))) st.SkipWithError("tree and loop disagree");
  for (auto _ : st) {
    ascan::associative_scan(combine, xs, 0, {}, ys);
    benchmark::DoNotOptimize(ys.data());
    benchmark::ClobberMemory();
  }
  ascan::set_num_threads(g_all_threads);
  st.counters["threads"] = all_threads ? g_all_threads : 1;
  set_items(st);
}

template <class T>
void tensor_loop(benchmark::State& st, int64_t n) {
  const auto& xs = input<T>(n);
  auto ys = ascan::Tensor<T>::empty(xs.shape());
  for (auto _ : st) {
    tensor_loop_into(xs, ys);
    benchmark::DoNotOptimize(ys.data());
    benchmark::ClobberMemory();
  }
  set_items(st);
}

template <class T, int N>
void raw_loop_fixed(const T* x, T* y) {
  std::memcpy(y, x, sizeof(T) * N * N);
  for (int64_t t = 1; t < kT; ++t) {
    const T* a = y + (t - 1) * N * N;
    const T* b = x + t * N * N;
    T* o = y + t * N * N;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) {
        T s = 0;
        for (int k = 0; k < N; ++k) s += a[i * N + k] * b[k * N + j];
        o[i * N + j] = s;
      }
  }
}

template <class T>
void raw_loop(benchmark::State& st, int64_t n) {
  const auto& xs = input<T>(n);
  std::vector<T> x(xs.data(), xs.data() + xs.numel()), y(xs.numel());
  for (auto _ : st) {
    if (n == 2) raw_loop_fixed<T, 2>(x.data(), y.data());
    else raw_loop_fixed<T, 4>(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_items(st);
}

// Console output as usual, plus a table of medians and tree / tensor_loop ratios at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median" && !r.error_occurred)
        medians_[r.run_name.function_name] = r.GetAdjustedRealTime();
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::map<std::string, std::map<std::string, double>> by_case;
    for (const auto& [name, ms] : medians_) {
      const auto slash = name.rfind('/');
      by_case[name.substr(0, slash)][name.substr(slash + 1)] = ms;
    }
    fmt::print("\n{:<14} {:>10} {:>11} {:>10} {:>11} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}\n", "case (median)",
               "tree_1t ms", "tree_all ms", "batch_1t", "batch_all", "loop ms", "raw ms", "1t/loop", "all/loop",
               "b1t/raw", "ball/raw");
    for (const auto& [c, m] : by_case) {
      const auto get = [&](const char* k) { auto it = m.find(k); return it == m.end() ? NAN : it->second; };
      const double t1 = get("tree_1t"), ta = get("tree_all"), b1 = get("batched_1t"), ba = get("batched_all"),
                   lp = get("tensor_loop"), raw = get("raw_loop");
      fmt::print("{:<14} {:>10.2f} {:>11.2f} {:>10.3f} {:>11.3f} {:>9.2f} {:>9.3f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f}\n",
                 c, t1, ta, b1, ba, lp, raw, t1 / lp, ta / lp, b1 / raw, ba / raw);
    }
  }

 private:
  std::map<std::string, double> medians_;
};

template <class T>
void register_type(const char* type_name) {
  for (int64_t n : {2, 4}) {
    const std::string c = fmt::format("{}/{}x{}/", type_name, n, n);
    const auto setup = [](benchmark::internal::Benchmark* b) {
      b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.2)->Repetitions(5)->ReportAggregatesOnly(true);
    };
    const auto generic = ascan::generic(g_matmul);
    const auto batched = ascan::generic_batched(g_matmul);
    setup(benchmark::RegisterBenchmark((c + "tree_1t").c_str(), tree<T, decltype(generic)>, n, false, generic));
    setup(benchmark::RegisterBenchmark((c + "tree_all").c_str(), tree<T, decltype(generic)>, n, true, generic));
    setup(benchmark::RegisterBenchmark((c + "batched_1t").c_str(), tree<T, decltype(batched)>, n, false, batched));
    setup(benchmark::RegisterBenchmark((c + "batched_all").c_str(), tree<T, decltype(batched)>, n, true, batched));
    setup(benchmark::RegisterBenchmark((c + "tensor_loop").c_str(), tensor_loop<T>, n));
    setup(benchmark::RegisterBenchmark((c + "raw_loop").c_str(), raw_loop<T>, n));
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_all_threads = ascan::num_threads();
  register_type<double>("double");
  register_type<float>("float");
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
