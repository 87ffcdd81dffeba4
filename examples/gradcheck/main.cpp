// gradcheck_catalogue — the scan's gradient against float64 finite differences, for builtin and user combines alike.
#include <ascan/ascan.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

namespace ad = ascan::ad;
using TD = ascan::Tensor<double>;
using ascan::Shape;

// ---- user-defined combines (pointwise: written on elements, so duals and doubles both work) ----

// Affine maps x -> a x + b composed left first: not commutative, same algebra as linear_recurrence.
const auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a2 * a1, a2 * b1 + b2};
};

// Online softmax normaliser (m, s): running max and sum of exp(x - m). The s output depends on both leaves.
const auto softmax_pair = [](auto l, auto r) {
  using std::exp;
  auto [m1, s1] = l;
  auto [m2, s2] = r;
  auto m = m1 > m2 ? m1 : m2;
  return std::tuple{m, s1 * exp(m1 - m) + s2 * exp(m2 - m)};
};

// Welford / Chan merge of (count, mean, M2) summaries.
const auto welford = [](auto l, auto r) {
  auto [n1, m1, s1] = l;
  auto [n2, m2, s2] = r;
  auto n = n1 + n2;
  auto delta = m2 - m1;
  return std::tuple{n, m1 + delta * n2 / n, s1 + s2 + delta * delta * n1 * n2 / n};
};

// S5-style diagonal complex recurrence h_t = λ_t h_{t-1} + u_t on (Re λ, Im λ, Re u, Im u): four coupled leaves.
const auto s5 = [](auto l, auto r) {
  auto [lr1, li1, ur1, ui1] = l;
  auto [lr2, li2, ur2, ui2] = r;
  return std::tuple{lr2 * lr1 - li2 * li1, lr2 * li1 + li2 * lr1, lr2 * ur1 - li2 * ui1 + ur2,
                    lr2 * ui1 + li2 * ur1 + ui2};
};

// Discounted returns with a per-step keep factor (1 - done, relaxed to be differentiable) and a discount gamma that
// is constant along the scan dim: gamma is a broadcast leaf ([1] or [B, 1, ...]) and its gradient is summed back.
// The step map h -> gamma * keep * h + r composes associatively.
const auto discounted = [](auto l, auto r) {
  auto [r1, g1, k1] = l;
  auto [r2, g2, k2] = r;
  return std::tuple{g2 * k2 * r1 + r2, g1 * g2, k1 * k2};
};

// ---- inputs ----

// A leaf generator: given leaf 0's shape and the resolved scan dim, makes one seeded input.
using Leaf = std::function<TD(const Shape&, int64_t, uint64_t)>;

Leaf normal(double scale = 1.0) {
  return [scale](const Shape& s, int64_t, uint64_t seed) { return TD::randn(s, seed) * scale; };
}
Leaf uniform(double lo, double hi) {
  return [lo, hi](const Shape& s, int64_t, uint64_t seed) { return TD::random(s, seed, lo, hi); };
}
// max/min are not differentiable at ties, and a finite difference that straddles a near-tie fails although the
// gradient is right: n evenly spaced values in [-scale, scale], shuffled and jittered, keep every gap above half
// the spacing (far wider than any step gradcheck takes).
Leaf distinct(double scale) {
  return [scale](const Shape& s, int64_t, uint64_t seed) {
    auto t = TD::empty(s);
    const int64_t n = t.numel();
    const auto jitter = TD::random(s, seed, -0.25, 0.25);
    for (int64_t i = 0; i < n; ++i) t.data()[i] = i + jitter.data()[i];
    std::shuffle(t.data(), t.data() + n, std::mt19937_64(seed));
    return t * (2 * scale / static_cast<double>(n)) + (-scale);
  };
}
// Size 1 along the scan dim and every other dim but the first non-scan one: [1] for rank 1, [B, 1] / [1, B] etc.
Leaf per_sequence(double lo, double hi) {
  return [lo, hi](const Shape& s, int64_t dim, uint64_t seed) {
    Shape g(s.size(), 1);
    for (size_t i = 0; i < s.size(); ++i)
      if (static_cast<int64_t>(i) != dim) {
        g[i] = s[i];
        break;
      }
    return TD::random(g, seed, lo, hi);
  };
}
// The same shape as leaf 0 with the trailing [2, 2] of a matrix leaf replaced by [2, 1] (a column vector).
Leaf column(double scale) {
  return [scale](const Shape& s, int64_t, uint64_t seed) {
    Shape c = s;
    c.back() = 1;
    return TD::randn(c, seed) * scale;
  };
}
// A parameter of fixed shape that does not depend on the layout (captured or applied before the scan).
Leaf fixed(Shape shape, double lo, double hi) {
  return [shape, lo, hi](const Shape&, int64_t, uint64_t seed) { return TD::random(shape, seed, lo, hi); };
}

// Where the scan runs: leaf 0's shape and the dim as passed (negative dims resolved against leaf 0).
struct Layout {
  Shape shape;
  int64_t dim;
};

// Pointwise layouts: ranks 1..3, the scan dim in every position, half of them negative; the last has 256
// independent columns, the threshold at which the backward switches to its one-pass column sweep.
std::vector<Layout> element_layouts(int64_t T) {
  return {{{T}, 0},        {{T}, -1},       {{T, 3}, 0},      {{2, T}, -1},
          {{T, 2, 3}, -3}, {{2, T, 3}, 1},  {{2, 3, T}, -1},  {{16, T, 16}, 1}};
}
// Generic layouts: leaf 0 is a batch of 2x2 matrices, the scan dim among the batch dims.
std::vector<Layout> matrix_layouts(int64_t T) {
  return {{{T, 2, 2}, 0}, {{T, 2, 2}, -3}, {{3, T, 2, 2}, 1}, {{T, 3, 2, 2}, -4}};
}

// ---- the catalogue ----

using Inputs = std::vector<TD>;
using Check = std::function<ad::GradcheckReport(const Inputs&, const ad::GradcheckOptions&)>;

template <class Fn>
Check check_of(Fn fn) {
  return [fn](const Inputs& xs, const ad::GradcheckOptions& o) { return ad::gradcheck(fn, xs, o); };
}

struct Family {
  std::string name;
  std::vector<Layout> (*layouts)(int64_t T);
  std::vector<Leaf> leaves;
  std::function<Check(int64_t dim, ascan::ScanOptions)> check;
};

// A pointwise combine over L leaves. The gradcheck function is a generic lambda, so it also runs on plain Tensors
// and gradcheck compares values and error behaviour with the non-differentiable scan.
template <size_t L, class F>
Family element_family(std::string name, F f, std::vector<Leaf> leaves) {
  auto check = [f](int64_t dim, ascan::ScanOptions o) {
    return check_of([f, dim, o](const auto& x) {
      return [&]<size_t... I>(std::index_sequence<I...>) {
        if constexpr (L == 1) return ascan::associative_scan(f, x[0], dim, o);
        else return ascan::associative_scan(f, std::tuple{x[I]...}, dim, o);
      }(std::make_index_sequence<L>{});
    });
  };
  return {std::move(name), element_layouts, std::move(leaves), check};
}

std::vector<Family> catalogue() {
  std::vector<Family> fs;
  fs.push_back(element_family<1>("add", ascan::add, {normal()}));
  // mul and the recurrences: magnitudes near 1 so long products neither overflow nor drown the differences.
  fs.push_back(element_family<1>("mul", ascan::mul, {uniform(0.5, 1.5)}));
  fs.push_back(element_family<1>("max", ascan::max, {distinct(3.0)}));
  fs.push_back(element_family<1>("min", ascan::min, {distinct(3.0)}));
  fs.push_back(element_family<1>("logaddexp", ascan::logaddexp, {normal(2.0)}));
  fs.push_back(element_family<2>("linear_recurrence", ascan::linear_recurrence, {uniform(-0.95, 0.95), normal()}));
  fs.push_back(element_family<2>("user:affine", affine, {uniform(-1.2, 1.2), normal()}));
  fs.push_back(element_family<2>("user:softmax_pair", softmax_pair, {distinct(4.0), uniform(0.5, 2.0)}));
  fs.push_back(element_family<3>("user:welford", welford, {uniform(1.0, 3.0), normal(), uniform(0.0, 1.0)}));
  fs.push_back(element_family<4>("user:s5_complex", s5,
                                 {uniform(-0.7, 0.7), uniform(-0.7, 0.7), normal(), normal()}));
  fs.push_back(element_family<3>("user:discounted_bcast", discounted,
                                 {normal(), per_sequence(0.8, 0.99), uniform(0.5, 1.0)}));

  // Generic mode: the combine sees matrix slices and uses matmul, the same lambda on Tensors and on Vars.
  const auto chain = [](const auto& A, const auto& B) { return matmul(A, B); };
  fs.push_back({"generic:matrix_chain", matrix_layouts, {normal(0.7)}, [chain](int64_t dim, ascan::ScanOptions o) {
                  return check_of(
                      [=](const auto& x) { return ascan::associative_scan(ascan::generic(chain), x[0], dim, o); });
                }});
  // (A, B) -> A P B with P captured is associative for any P: (A P B) P C = A P (B P C). P is a gradcheck input,
  // so its gradient (accumulated by the combine's backward sweep) is checked too.
  fs.push_back({"generic:captured_P", matrix_layouts, {normal(0.7), fixed({2, 2}, -1.0, 1.0)},
                [](int64_t dim, ascan::ScanOptions o) {
                  return check_of([=](const auto& x) {
                    const auto P = x[1];
                    auto apb = [P](const auto& A, const auto& B) { return matmul(matmul(A, P), B); };
                    return ascan::associative_scan(ascan::generic(apb), x[0], dim, o);
                  });
                }});
  // Affine maps on R^2, (A, b) with b a column: leaves of different shapes. W scales the A's elementwise before
  // the scan, so its gradient flows through the scan into an ordinary op.
  fs.push_back({"generic:affine2d_scaled", matrix_layouts, {normal(0.8), column(1.0), fixed({2, 2}, 0.5, 1.2)},
                [](int64_t dim, ascan::ScanOptions o) {
                  return check_of([=](const auto& x) {
                    auto compose = [](const auto& l, const auto& r) {
                      const auto& [A1, b1] = l;
                      const auto& [A2, b2] = r;
                      return std::tuple{matmul(A2, A1), matmul(A2, b1) + b2};
                    };
                    return ascan::associative_scan(ascan::generic(compose), std::tuple{x[0] * x[2], x[1]}, dim, o);
                  });
                }});
  return fs;
}

// ---- the harness ----

struct Options {
  bool short_mode = false;
  std::string filter;
};

struct Case {
  const Family* family;
  Layout layout;
  bool reverse;
  int64_t T;
};

// Compact shapes keep the table narrow ([2,7,3] rather than format_shape's [2, 7, 3]).
std::string format_dims(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

// Short mode: every family at every short length, both directions, its layouts taken in turn so that all of them
// (every rank, negative dims, the wide layout) come up. Full mode: the whole product, plus long sequences.
std::vector<Case> plan(const std::vector<Family>& fs, const Options& opt) {
  const std::vector<int64_t> lengths = opt.short_mode ? std::vector<int64_t>{1, 2, 3, 7, 16, 33}
                                                      : std::vector<int64_t>{1, 2, 3, 7, 16, 33, 100, 257};
  std::vector<Case> cases;
  for (const auto& f : fs) {
    if (f.name.find(opt.filter) == std::string::npos) continue;
    size_t turn = 0;
    for (int64_t T : lengths)
      for (bool reverse : {false, true}) {
        const auto layouts = f.layouts(T);
        if (opt.short_mode) {
          cases.push_back({&f, layouts[turn++ % layouts.size()], reverse, T});
        } else {
          for (const auto& l : layouts) cases.push_back({&f, l, reverse, T});
        }
      }
  }
  return cases;
}

int run(const Options& opt) {
  const auto fs = catalogue();
  const auto cases = plan(fs, opt);
  if (cases.empty()) {
    fmt::print(stderr, "no combine name contains \"{}\"\n", opt.filter);
    return 1;
  }
  fmt::print("{:<24} {:<14} {:>4} {:>4} {:>4} {:>4} {:>7} {:>10}  {}\n", "combine", "shape", "dim", "rev", "T", "mode",
             "checks", "max|err|", "result");
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  uint64_t seed = 1;
  for (const auto& c : cases) {
    Inputs xs;
    int64_t numel = 0;
    for (const auto& leaf : c.family->leaves) {
      const int64_t dim = c.layout.dim < 0 ? c.layout.dim + static_cast<int64_t>(c.layout.shape.size()) : c.layout.dim;
      xs.push_back(leaf(c.layout.shape, dim, seed++));
      numel += xs.back().numel();
    }
    // Every element costs two evaluations in full mode; long inputs take random directional derivatives instead.
    const bool fast = c.T >= 100 || numel > 1000;
    // A unit direction over n elements moves each by only eps / sqrt(n), while the rounding error of the n-term
    // scalar <w, y> grows with n: the default step drowns in it for inputs of 10^5 elements, a larger one does not
    // (and the truncation error, O(eps^2), stays far below the tolerance).
    const ad::GradcheckOptions go{.eps = fast ? 1e-4 : 1e-6, .fast = fast, .seed = seed};
    ad::GradcheckReport report;
    try {
      report = c.family->check(c.layout.dim, {.reverse = c.reverse})(xs, go);
    } catch (const std::exception& e) {  // gradcheck itself threw: a failed case, and the rest still run
      report.ok = false;
      report.message = fmt::format("gradcheck threw: {}", e.what());
    }
    // A check that compares nothing cannot fail, so it does not count as a pass.
    const bool ok = report.ok && report.num_checked > 0;
    failed += !ok;
    fmt::print("{:<24} {:<14} {:>4} {:>4} {:>4} {:>4} {:>7} {:>10.2e}  {}\n", c.family->name,
               format_dims(c.layout.shape), c.layout.dim, c.reverse ? "yes" : "no", c.T, fast ? "fast" : "full",
               report.num_checked, report.max_abs_error, ok ? "PASS" : "FAIL");
    if (!ok) fmt::print("{}\n", report.message.empty() ? std::string("  nothing was checked") : report.message);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("{} cases, {} failed ({:.1f} s)\n", cases.size(), failed, seconds);
  return failed ? 1 : 0;
}

void usage(const char* argv0) {
  fmt::print(
      "usage: {} [--short] [--filter SUBSTR]\n"
      "  Gradchecks ascan::associative_scan (float64 finite differences vs reverse mode) for every builtin\n"
      "  combine and a catalogue of user-defined ones. Exits 1 if any case fails.\n"
      "  --short          lengths up to 33 and one layout per case (seconds); default: all layouts, T up to 257\n"
      "  --filter SUBSTR  only combines whose name contains SUBSTR (e.g. user:, generic:, linear)\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--short") {
      opt.short_mode = true;
    } else if (arg == "--filter" && i + 1 < argc) {
      opt.filter = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      return 0;
    } else {
      fmt::print(stderr, "unknown or incomplete argument: {}\n", arg);
      usage(argv[0]);
      return 2;
    }
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {  // a harness that stops half-way must not look like a pass
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
