// bench_user.cpp — what a user's build gets: every builtin on one sequence, [T, 7] and [T, 256],
// forward and backward (forward on the tape + backward with a given cotangent), and a user
// lambda of the same math, next to a copy of the same bytes (the roof). float32, 2^24 elements.
#include <benchmark/benchmark.h>

#include <ascan/ascan.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;
using T = float;

constexpr int64_t kElements = int64_t{1} << 24;

struct Layout {
  const char* name;
  Shape shape;
};
const Layout kLayouts[] = {{"1d", {kElements}}, {"T7", {kElements / 7, 7}}, {"T256", {kElements / 256, 256}}};

// The builtins and the same math as user lambdas (generic, so that the gradient's dual numbers
// pass through them).
const auto user_add = [](auto a, auto b) { return a + b; };
const auto user_mul = [](auto a, auto b) { return a * b; };
const auto user_max = [](auto a, auto b) { return a > b ? a : b; };
const auto user_min = [](auto a, auto b) { return a < b ? a : b; };
const auto user_logaddexp = [](auto a, auto b) {
  using std::exp;
  using std::log1p;
  const auto m = a > b ? a : b;
  const auto d = a > b ? b - a : a - b;
  return m + log1p(exp(d));
};
const auto user_linrec = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a2 * a1, a2 * b1 + b2};
};

Tensor<T> input(const Shape& s, int which) {
  return which == 1 ? Tensor<T>::random(s, 2, T(0.5), T(0.99)) : Tensor<T>::randn(s, 1);
}
Tensor<T> mul_input(const Shape& s) { return Tensor<T>::random(s, 3, T(0.9999), T(1.0001)); }

template <class F>
void forward1(benchmark::State& st, const F& f, const Tensor<T>& x) {
  Tensor<T> y = Tensor<T>::empty(x.shape());
  for (auto _ : st) {
    ascan::associative_scan(f, x, 0, {}, y);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * 2 * x.numel() * int64_t{sizeof(T)});
}

template <class F>
void backward1(benchmark::State& st, const F& f, const Tensor<T>& x) {
  const Tensor<T> g = Tensor<T>::randn(x.shape(), 9);
  for (auto _ : st) {
    ad::Tape<T> tape;
    const ad::Var<T> v = ad::param(x);
    ad::backward(ascan::associative_scan(f, v, 0), g);
    benchmark::DoNotOptimize(v.grad().data());
  }
  st.SetBytesProcessed(st.iterations() * 2 * x.numel() * int64_t{sizeof(T)});
}

template <class F>
void forward2(benchmark::State& st, const F& f, const Tensor<T>& a, const Tensor<T>& b) {
  Tensor<T> ya = Tensor<T>::empty(a.shape()), yb = Tensor<T>::empty(a.shape());
  for (auto _ : st) {
    ascan::associative_scan(f, std::tuple{a, b}, 0, {}, std::tuple{ya, yb});
    benchmark::DoNotOptimize(yb.data());
  }
  st.SetBytesProcessed(st.iterations() * 4 * a.numel() * int64_t{sizeof(T)});
}

template <class F>
void backward2(benchmark::State& st, const F& f, const Tensor<T>& a, const Tensor<T>& b) {
  const Tensor<T> g = Tensor<T>::randn(a.shape(), 9);
  for (auto _ : st) {
    ad::Tape<T> tape;
    const ad::Var<T> va = ad::param(a), vb = ad::param(b);
    ad::backward(std::get<1>(ascan::associative_scan(f, std::tuple{va, vb}, 0)), g);
    benchmark::DoNotOptimize(vb.grad().data());
  }
  st.SetBytesProcessed(st.iterations() * 4 * a.numel() * int64_t{sizeof(T)});
}

// The roof: a copy of the forward's bytes (2^24 elements in, 2^24 out) on the pool's threads.
void copy_roof(benchmark::State& st) {
  const Tensor<T> x = Tensor<T>::randn({kElements}, 1);
  Tensor<T> y = Tensor<T>::empty({kElements});
  const int workers = ascan::num_threads();
  const int64_t chunk = (kElements + workers - 1) / workers;
  for (auto _ : st) {
    ascan::detail::run_workers(workers, [&](int i) {
      const int64_t lo = i * chunk, hi = std::min(kElements, lo + chunk);
      if (lo < hi) std::memcpy(y.data() + lo, x.data() + lo, sizeof(T) * static_cast<size_t>(hi - lo));
    });
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * 2 * kElements * int64_t{sizeof(T)});
}

template <bool pair, class B, class U>
void register_op(const std::string& op, const B& builtin, const U& lambda, bool mul) {
  for (const Layout& l : kLayouts) {
    const std::string tail = std::string("/") + l.name;
    const Shape s = l.shape;
    if constexpr (!pair) {
      const auto in = [s, mul] { return mul ? mul_input(s) : input(s, 0); };
      benchmark::RegisterBenchmark(("fwd/" + op + "/builtin" + tail).c_str(),
                                   [=](benchmark::State& st) { forward1(st, builtin, in()); });
      benchmark::RegisterBenchmark(("fwd/" + op + "/lambda" + tail).c_str(),
                                   [=](benchmark::State& st) { forward1(st, lambda, in()); });
      benchmark::RegisterBenchmark(("bwd/" + op + "/builtin" + tail).c_str(),
                                   [=](benchmark::State& st) { backward1(st, builtin, in()); });
      benchmark::RegisterBenchmark(("bwd/" + op + "/lambda" + tail).c_str(),
                                   [=](benchmark::State& st) { backward1(st, lambda, in()); });
    } else {
      benchmark::RegisterBenchmark(("fwd/" + op + "/builtin" + tail).c_str(),
                                   [=](benchmark::State& st) { forward2(st, builtin, input(s, 1), input(s, 0)); });
      benchmark::RegisterBenchmark(("fwd/" + op + "/lambda" + tail).c_str(),
                                   [=](benchmark::State& st) { forward2(st, lambda, input(s, 1), input(s, 0)); });
      benchmark::RegisterBenchmark(("bwd/" + op + "/builtin" + tail).c_str(),
                                   [=](benchmark::State& st) { backward2(st, builtin, input(s, 1), input(s, 0)); });
      benchmark::RegisterBenchmark(("bwd/" + op + "/lambda" + tail).c_str(),
                                   [=](benchmark::State& st) { backward2(st, lambda, input(s, 1), input(s, 0)); });
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("copy/roof", copy_roof);
  register_op<false>("add", ascan::add, user_add, false);
  register_op<false>("mul", ascan::mul, user_mul, true);
  register_op<false>("max", ascan::max, user_max, false);
  register_op<false>("min", ascan::min, user_min, false);
  register_op<false>("logaddexp", ascan::logaddexp, user_logaddexp, false);
  register_op<true>("linrec", ascan::linear_recurrence, user_linrec, false);
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("ascan_isa", std::string(ascan::isa_name(ascan::active_isa())));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
