// test_nan.cpp — NaN through max and min scans: NaN wins, as in NumPy's maximum.accumulate and
// torch.cummax. A running max (min) is NaN from the first NaN on, on every path (one sequence,
// chained over threads, rows of 7 lanes as windows, rows of 3 in chunks, rows of 256 as lanes,
// transposed blocks along a leading dim, the out-overload in place, a user combine compiled in
// this file, Generic mode), at every ISA level and thread count; and the gradient goes to the
// NaN's element. The reference is a sequential loop written here with std::isnan.
#include <gtest/gtest.h>

#include <ascan/ascan.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;

struct ForcedIsa {
  explicit ForcedIsa(ascan::Isa level) { ascan::force_isa(level); }
  ~ForcedIsa() { ascan::unforce_isa(); }
};
struct Threads {
  explicit Threads(int n) : saved(ascan::num_threads()) { ascan::set_num_threads(n); }
  ~Threads() { ascan::set_num_threads(saved); }
  int saved;
};

std::vector<ascan::Isa> levels() {
  std::vector<ascan::Isa> l;
  for (ascan::Isa i : {ascan::Isa::baseline, ascan::Isa::avx2, ascan::Isa::avx512})
    if (ascan::isa_available(i)) l.push_back(i);
  return l;
}

// Values with NaNs (about one element in `nan_every`), infinities and ties.
template <class T>
Tensor<T> with_nans(const Shape& shape, uint64_t seed, int nan_every) {
  Tensor<T> t = Tensor<T>::randn(shape, seed);
  std::mt19937_64 rng(seed + 101);
  std::uniform_int_distribution<int> pick(0, nan_every - 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int r = pick(rng);
    if (r == 0) t.data()[i] = std::numeric_limits<T>::quiet_NaN();
    else if (r == 1) t.data()[i] = std::numeric_limits<T>::infinity();
    else if (r == 2) t.data()[i] = -std::numeric_limits<T>::infinity();
    else if (r == 3) t.data()[i] = T(0.5);  // ties
  }
  return t;
}

// The sequential scan along `dim` with NaN winning; `is_max` picks max or min.
template <class T>
Tensor<T> reference(const Tensor<T>& x, int64_t dim, bool reverse, bool is_max) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[dim];
  Tensor<T> y = Tensor<T>::empty(s);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      T acc = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t t = reverse ? n - 1 - k : k;
        const int64_t at = (o * n + t) * inner + i;
        const T v = x.data()[at];
        if (k == 0 || std::isnan(v)) acc = std::isnan(acc) && k > 0 ? acc : v;
        else if (!std::isnan(acc)) acc = is_max ? (v >= acc ? v : acc) : (v <= acc ? v : acc);
        y.data()[at] = acc;
      }
    }
  return y;
}

// Equal as values, NaN where the reference has NaN.
template <class T>
void expect_same(const Tensor<T>& got, const Tensor<T>& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const T g = got.data()[i], w = want.data()[i];
    if (std::isnan(w) ? !std::isnan(g) : !(g == w)) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << w;
      ++bad;
    }
  }
}

struct Case {
  Shape shape;
  int64_t dim;
  int nan_every;
};

// One sequence short and long (threads chain its blocks), rows of 7 (windows), 3 (chunks), 256
// (lanes), a leading-dim scan of [T, 5, 3]'s dim 1 and dim 0 of [T, 16] (transposed blocks).
const Case kCases[] = {
    {{1}, 0, 2},           {{5}, 0, 3},           {{1000}, 0, 50},       {{300001}, 0, 20000},
    {{300001}, 0, 1000000}, {{4001, 7}, 0, 500},  {{3001, 3}, 0, 400},  {{2003, 256}, 0, 700},
    {{6, 401, 3}, 1, 90},  {{20011, 16}, 0, 3000}, {{16, 20011}, 1, 3000},
};

template <class T>
void check_builtins() {
  for (const Case& c : kCases)
    for (bool reverse : {false, true}) {
      const Tensor<T> x = with_nans<T>(c.shape, c.shape[0] + 7 * c.dim, c.nan_every);
      const Tensor<T> want_max = reference(x, c.dim, reverse, true), want_min = reference(x, c.dim, reverse, false);
      const std::string tag = "shape " + std::to_string(c.shape[0]) + "x.. dim " + std::to_string(c.dim) +
                              (reverse ? " reverse" : "") + " " + std::string(ascan::isa_name(ascan::active_isa())) +
                              " threads " + std::to_string(ascan::num_threads());
      const ascan::ScanOptions o{.reverse = reverse};
      expect_same(ascan::associative_scan(ascan::max, x, c.dim, o), want_max, "max " + tag);
      expect_same(ascan::associative_scan(ascan::min, x, c.dim, o), want_min, "min " + tag);
      // A user combine of the same math, instantiated in this file (at its ISA level).
      const auto user_max = [](auto a, auto b) { return ascan::max(a, b); };
      expect_same(ascan::associative_scan(user_max, x, c.dim, o), want_max, "user max " + tag);
      // In place through the out-overload.
      Tensor<T> y = x.clone();
      ascan::associative_scan(ascan::min, y, c.dim, o, y);
      expect_same(y, want_min, "in-place min " + tag);
    }
}

TEST(NanMaxMin, EveryPathLevelAndThreadCount) {
  for (ascan::Isa level : levels()) {
    ForcedIsa forced(level);
    for (int threads : {1, 2, 3}) {
      Threads t(threads);
      check_builtins<float>();
      check_builtins<double>();
    }
  }
}

TEST(NanMaxMin, GenericMode) {
  // The combine on slices, elementwise with NaN winning (as ascan::max on each element).
  const auto slice_max = [](const Tensor<double>& a, const Tensor<double>& b) {
    Tensor<double> r = Tensor<double>::empty(a.shape());
    for (int64_t i = 0; i < a.numel(); ++i) r.data()[i] = ascan::max(a.data()[i], b.data()[i]);
    return r;
  };
  const Tensor<double> x = with_nans<double>({513, 4}, 5, 60);
  expect_same(ascan::associative_scan(ascan::generic(slice_max), x, 0), reference(x, 0, false, true), "generic max");
  expect_same(ascan::associative_scan(ascan::generic(slice_max), x, 0, {.reverse = true}),
              reference(x, 0, true, true), "generic max reverse");
}

TEST(NanMaxMin, PeersRule) {
  // The example: [1, 1, NaN, 1, inf, 2] -> [1, 1, NaN, NaN, NaN, NaN].
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor<double> x = Tensor<double>::from({1, 1, nan, 1, inf, 2}, {6});
  const Tensor<double> y = ascan::associative_scan(ascan::max, x, 0);
  EXPECT_EQ(y.data()[0], 1);
  EXPECT_EQ(y.data()[1], 1);
  for (int i = 2; i < 6; ++i) EXPECT_TRUE(std::isnan(y.data()[i])) << i;
  const Tensor<double> z = ascan::associative_scan(ascan::min, x, 0, {.reverse = true});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(z.data()[i])) << i;
  EXPECT_EQ(z.data()[3], 1);
  EXPECT_EQ(z.data()[4], 2);
  EXPECT_EQ(z.data()[5], 2);
}

// The gradient of sum(g * y) goes to the element each y_t selected: the first NaN from its
// position on, else the running max (ties to the later element).
template <class T>
void check_gradient(const Shape& shape, bool reverse, bool is_max) {
  const Tensor<T> xv = with_nans<T>(shape, 11 + shape[0], 40);
  const Tensor<T> g = Tensor<T>::randn(shape, 12);
  ad::Tape<T> tape;
  const ad::Var<T> x = ad::param(xv);
  const ascan::ScanOptions o{.reverse = reverse};
  const ad::Var<T> y = is_max ? ascan::associative_scan(ascan::max, x, 0, o) : ascan::associative_scan(ascan::min, x, 0, o);
  ad::backward(y, g);
  const int64_t n = shape[0], w = xv.numel() / n;
  std::vector<double> want(xv.numel(), 0.0);
  for (int64_t j = 0; j < w; ++j) {
    int64_t sel = -1;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t t = reverse ? n - 1 - k : k;
      const T v = xv.data()[t * w + j];
      if (sel < 0) {
        sel = t;
      } else {
        const T a = xv.data()[sel * w + j];
        if (!std::isnan(a) && (std::isnan(v) || (is_max ? v >= a : v <= a))) sel = t;
      }
      want[sel * w + j] += static_cast<double>(g.data()[t * w + j]);
    }
  }
  const std::string tag = std::string(is_max ? "max" : "min") + (reverse ? " reverse" : "") + " rows " + std::to_string(w);
  // Sums of up to n cotangents, in float or double (a misplaced one moves about 1).
  const double tol = std::is_same_v<T, float> ? 1e-3 : 1e-10;
  for (int64_t i = 0; i < xv.numel(); ++i)
    ASSERT_NEAR(static_cast<double>(x.grad().data()[i]), want[i], tol * (1 + std::abs(want[i])))
        << tag << " element " << i;
}

TEST(NanMaxMin, GradientGoesToTheNan) {
  for (ascan::Isa level : levels()) {
    ForcedIsa forced(level);
    for (bool reverse : {false, true})
      for (bool is_max : {true, false}) {
        check_gradient<double>({2001}, reverse, is_max);
        check_gradient<double>({501, 7}, reverse, is_max);
        check_gradient<double>({301, 256}, reverse, is_max);
        check_gradient<float>({2001}, reverse, is_max);
      }
  }
}

}  // namespace
