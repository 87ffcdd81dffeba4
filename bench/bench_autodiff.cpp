// bench_autodiff.cpp — cost of scan gradients: forward alone, forward + backward through
// ascan::ad::associative_scan, and (for [T = 4096, 1024]) the same gradient written as a
// sequential loop on the tape (what a user writes without the scan), float32. Layouts: many
// columns [4096, 1024] and [16384, 256], one long sequence [2^22] and narrow rows [599186, 7].
// The loss is on y^b alone, so the linear recurrence and the discounted return (γ constant along
// the scan) take their adjoint as a scan on one sequence and [599186, 7], as a sweep a line of
// lanes at a time on [4096, 1024] and [16384, 256]; the cumulative product as a scan on all but
// [4096, 1024] (the line sweep), and a sum its reverse sum everywhere. The running log-sum-exp
// (ascan::logaddexp, no loop on the tape) evaluates its Jacobians in closed form: in a sweep a
// row of lanes at a time on [4096, 1024], per block of the product's adjoint as a scan on the
// others.
// ASCAN_BENCH_T_SCALE=k in the environment multiplies every layout's T (and names it so);
// ASCAN_BENCH_INNER=R adds the layout [2^22 / R, R].
//
// Names: "<case>/<layout>/forward", ".../scan_grad", ".../loop_grad" (both grads: forward +
// backward with a given cotangent). Ratios to report: backward / forward = (scan_grad - forward)
// / forward; loop_grad / scan_grad.
#include <benchmark/benchmark.h>

#include <ascan/ascan.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace ad = ascan::ad;
using TF = ascan::Tensor<float>;
using VF = ad::Var<float>;

constexpr int64_t kT = 4096, kInner = 1024;  // the layout of the loop comparison

enum class Case { cumsum, cumprod, linrec, discounted, logcumsumexp };

struct Layout {
  int64_t T, inner;
};

struct Data {
  TF a, b, w, gamma, x;
  explicit Data(Layout l)
      : a(TF::random({l.T, l.inner}, 1, 0.5f, 0.99f)),
        b(TF::randn({l.T, l.inner}, 2)),
        w(TF::randn({l.T, l.inner}, 3)),
        gamma(TF::full({1, 1}, 0.99f)),
        x(TF::random({l.T, l.inner}, 4, 0.999f, 1.001f)) {}  // products stay normal numbers
};

// One data set at a time (the long layouts take 64 MiB each): the benchmarks run layout by layout.
const Data& data(Layout l) {
  static Layout current{0, 0};
  static std::unique_ptr<Data> d;
  if (!d || current.T != l.T || current.inner != l.inner) {
    d.reset();
    d = std::make_unique<Data>(l);
    current = l;
  }
  return *d;
}

void set_items(benchmark::State& st, Layout l) { st.SetItemsProcessed(st.iterations() * l.T * l.inner); }

void forward(benchmark::State& st, Case c, Layout l) {
  const Data& d = data(l);
  TF y = TF::empty({l.T, l.inner}), ya = TF::empty({l.T, l.inner});
  for (auto _ : st) {
    switch (c) {
      case Case::cumsum: ascan::associative_scan(ascan::add, d.b, 0, {}, y); break;
      case Case::cumprod: ascan::associative_scan(ascan::mul, d.x, 0, {}, y); break;
      case Case::logcumsumexp: ascan::associative_scan(ascan::logaddexp, d.b, 0, {}, y); break;
      case Case::linrec: ascan::associative_scan(ascan::linear_recurrence, std::tuple{d.a, d.b}, 0, {}, std::tie(ya, y)); break;
      case Case::discounted:
        ascan::associative_scan(ascan::linear_recurrence, std::tuple{d.gamma, d.b}, 0, {.reverse = true}, std::tie(ya, y));
        break;
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_items(st, l);
}

void scan_grad(benchmark::State& st, Case c, Layout l) {
  const Data& d = data(l);
  for (auto _ : st) {
    ad::Tape<float> tape;
    VF a = ad::param(c == Case::discounted ? d.gamma : d.a), b = ad::param(c == Case::cumprod ? d.x : d.b);
    VF y;
    if (c == Case::cumsum) {
      y = ad::associative_scan(ascan::add, b, 0);
    } else if (c == Case::cumprod) {
      y = ad::associative_scan(ascan::mul, b, 0);
    } else if (c == Case::logcumsumexp) {
      y = ad::associative_scan(ascan::logaddexp, b, 0);
    } else {
      y = std::get<1>(ad::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0,
                                           {.reverse = c == Case::discounted}));
    }
    ad::backward(y, d.w);  // the cotangent w given directly: the scan's own VJP is what is timed
    benchmark::DoNotOptimize(b.grad().data());
  }
  set_items(st, l);
}

// The recurrence as T steps of tape ops on [inner] rows; per-step inputs are leaves of their own.
void loop_grad(benchmark::State& st, Case c) {
  const Layout l{kT, kInner};
  const Data& d = data(l);
  std::vector<TF> a_rows, b_rows;
  for (int64_t t = 0; t < kT; ++t) {
    a_rows.push_back(ascan::select(d.a, 0, t));
    b_rows.push_back(ascan::select(c == Case::cumprod ? d.x : d.b, 0, t));
  }
  for (auto _ : st) {
    ad::Tape<float> tape;
    std::vector<VF> as, bs, hs(kT);
    for (int64_t t = 0; t < kT; ++t) {
      as.push_back(ad::param(a_rows[t]));
      bs.push_back(ad::param(b_rows[t]));
    }
    VF gamma = ad::param(TF::full({1}, 0.99f));
    for (int64_t s = 0; s < kT; ++s) {
      const int64_t t = c == Case::discounted ? kT - 1 - s : s;
      if (s == 0) {
        hs[t] = bs[t];
      } else {
        const VF& prev = hs[c == Case::discounted ? t + 1 : t - 1];
        if (c == Case::cumsum) hs[t] = prev + bs[t];
        else if (c == Case::cumprod) hs[t] = prev * bs[t];
        else if (c == Case::linrec) hs[t] = as[t] * prev + bs[t];
        else hs[t] = gamma * prev + bs[t];
      }
    }
    ad::backward(ad::stack(hs, 0), d.w);
    benchmark::DoNotOptimize(bs[0].grad().data());
  }
  set_items(st, l);
}

void register_all() {
  const std::pair<const char*, Case> cases[] = {
      {"cumsum", Case::cumsum},         {"cumprod", Case::cumprod}, {"linrec", Case::linrec},
      {"discounted", Case::discounted}, {"logcumsumexp", Case::logcumsumexp}};
  std::vector<Layout> layouts = {{kT, kInner}, {1 << 22, 1}, {16384, 256}, {599186, 7}};
  // ASCAN_BENCH_INNER=R adds the layout [2^22 / R, R] (scaled too).
  if (const char* inner = std::getenv("ASCAN_BENCH_INNER")) {
    const int64_t r = std::max<int64_t>(1, std::atoll(inner));
    layouts.push_back({std::max<int64_t>(1, (int64_t{1} << 22) / r), r});
  }
  // ASCAN_BENCH_T_SCALE=k multiplies T of every layout (the loop on the tape keeps [4096, 1024]):
  // 4 makes the leaves 64 MiB, out of a 32 MiB L3, where the forward no longer runs from cache.
  const char* env = std::getenv("ASCAN_BENCH_T_SCALE");
  const int64_t scale = env ? std::max(1, std::atoi(env)) : 1;
  for (const Layout& layout1 : layouts)
    for (const auto& [name, c] : cases) {
      const Layout layout{layout1.T * scale, layout1.inner};
      std::string n = name;
      n += "/T" + std::to_string(layout.T);
      if (layout.inner > 1) n += "_inner" + std::to_string(layout.inner);
      n += "/";
      benchmark::RegisterBenchmark((n + "forward").c_str(), forward, c, layout)->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark((n + "scan_grad").c_str(), scan_grad, c, layout)->Unit(benchmark::kMillisecond)->UseRealTime();
      if (layout.inner == kInner && layout.T == kT && c != Case::logcumsumexp)
        benchmark::RegisterBenchmark((n + "loop_grad").c_str(), loop_grad, c)
            ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
    }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
