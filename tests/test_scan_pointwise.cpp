// test_scan_pointwise.cpp — pointwise associative_scan vs the sequential reference: combines, shapes, sizes, broadcasting, out.
#include <ascan/ascan.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "reference.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;

ascan::ScanOptions direction(bool reverse) { return {.reverse = reverse}; }

std::string describe(const char* what, const Shape& shape, int64_t dim, bool reverse) {
  return std::string(what) + " shape " + ref::str(shape) + " dim " + std::to_string(dim) +
         (reverse ? " reverse" : " forward");
}

// The reference's combines are written here, independently of the library's builtins.
constexpr auto plus = [](auto a, auto b) { return a + b; };
constexpr auto times = [](auto a, auto b) { return a * b; };
constexpr auto larger = [](auto a, auto b) { return b > a ? b : a; };
constexpr auto smaller = [](auto a, auto b) { return b < a ? b : a; };
constexpr auto log_sum_exp = [](double a, double b) {
  if (a == -INFINITY && b == -INFINITY) return -double(INFINITY);
  const double m = std::max(a, b);
  return m + std::log(std::exp(a - m) + std::exp(b - m));
};
constexpr auto linrec = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a1 * a2, a2 * b1 + b2};
};
using ref::bicyclic;
// Composition of affine maps x -> a x + b, the right one applied first:
// (a1, b1) ∘ (a2, b2) = (a1 a2, a1 b2 + b1). Not commutative (the linear recurrence is the other order).
constexpr auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a1 * a2, a1 * b2 + b1};
};

template <class T>
using RefScalar = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

// Integers exact; floats within the tolerance derived in reference.hpp from |partial sums|.
template <class T>
void check_add(const Shape& shape, int64_t dim, bool reverse, uint64_t seed) {
  SCOPED_TRACE(describe("add", shape, dim, reverse));
  using S = RefScalar<T>;
  const auto x = std::is_integral_v<T> ? ref::data<T>(shape, seed, -50, 50) : ref::data<T>(shape, seed);
  const auto y = ascan::associative_scan(ascan::add, x, dim, direction(reverse));
  const auto r = ref::pointwise<S, S>(plus, {ref::leaf<S>(x)}, dim, reverse);
  if constexpr (std::is_integral_v<T>) {
    EXPECT_TRUE(ref::exact(y, r.leaves[0], r.shape));
  } else {
    const auto m = ref::pointwise<S, S>(plus, {ref::abs(ref::leaf<S>(x))}, dim, reverse);
    EXPECT_TRUE(ref::near(y, r.leaves[0], r.shape, ref::tolerance<T>(r.steps, m.leaves[0])));
  }
}

// h_t = a_t h_{t-1} + b_t with |a| in [0.5, 1): both outputs vs the float64 reference. a and b
// may have different (broadcastable) shapes.
template <class T>
void check_linrec(const Shape& a_shape, const Shape& b_shape, int64_t dim, bool reverse, uint64_t seed) {
  SCOPED_TRACE(describe("linear_recurrence", b_shape, dim, reverse) + " a " + ref::str(a_shape));
  auto a = ref::data<T>(a_shape, seed, 0.5, 1.0);
  for (int64_t i = 0; i < a.numel(); i += 3) a.data()[i] = -a.data()[i];
  const auto b = ref::data<T>(b_shape, seed + 1000);
  const auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, dim,
                                                direction(reverse));
  using E = std::tuple<double, double>;
  const auto r = ref::pointwise<E, double>(linrec, {ref::leaf<double>(a), ref::leaf<double>(b)}, dim, reverse);
  const auto m = ref::pointwise<E, double>(
      linrec, {ref::abs(ref::leaf<double>(a)), ref::abs(ref::leaf<double>(b))}, dim, reverse);
  const double floor = 4 * std::numeric_limits<T>::min();  // products of |a| < 1 may underflow
  EXPECT_TRUE(ref::near(ya, r.leaves[0], r.shape, ref::tolerance<T>(r.steps, m.leaves[0], 8, floor)));
  EXPECT_TRUE(ref::near(yb, r.leaves[1], r.shape, ref::tolerance<T>(r.steps, m.leaves[1], 8, floor)));
}

// Bicyclic monoid in int64 through a plain (non-builtin) lambda: exact, and order-sensitive.
void check_bicyclic(const Shape& shape, int64_t dim, bool reverse, uint64_t seed) {
  SCOPED_TRACE(describe("bicyclic", shape, dim, reverse));
  const auto a = Tensor<int64_t>::random(shape, seed, 0, 3);
  const auto b = Tensor<int64_t>::random(shape, seed + 1, 0, 3);
  const auto [ya, yb] = ascan::associative_scan(bicyclic, std::tuple{a, b}, dim, direction(reverse));
  using E = std::tuple<int64_t, int64_t>;
  const auto r = ref::pointwise<E, int64_t>(bicyclic, {ref::leaf<int64_t>(a), ref::leaf<int64_t>(b)}, dim, reverse);
  EXPECT_TRUE(ref::exact(ya, r.leaves[0], r.shape));
  EXPECT_TRUE(ref::exact(yb, r.leaves[1], r.shape));
}

// A few layouts: one long row, the scan in the middle, many lanes, a negative dim.
struct Case {
  Shape shape;
  int64_t dim;
};
const std::vector<Case> kCases = {{{1000}, 0}, {{6, 300, 5}, 1}, {{70, 33}, 0}, {{3, 4, 50}, -1}};

template <class Fn>
void for_each_case(Fn fn) {
  uint64_t seed = 1;
  for (const Case& c : kCases)
    for (bool reverse : {false, true}) fn(c.shape, c.dim, reverse, seed++);
}

// ---- catalogue of combines ----------------------------------------------------------------

TEST(ScanPointwise, AddFloat32) { for_each_case(check_add<float>); }
TEST(ScanPointwise, AddFloat64) { for_each_case(check_add<double>); }
TEST(ScanPointwise, AddInt32Exact) { for_each_case(check_add<int32_t>); }
TEST(ScanPointwise, AddInt64Exact) { for_each_case(check_add<int64_t>); }

// Factors near 1 (1 +- spread): 1000 factors of spread 0.1 stay in range.
template <class T>
void check_mul(const Shape& shape, int64_t dim, bool reverse, uint64_t seed, double spread = 0.1) {
  SCOPED_TRACE(describe("mul", shape, dim, reverse));
  const auto x = ref::data<T>(shape, seed, 1 - spread, 1 + spread);
  const auto y = ascan::associative_scan(ascan::mul, x, dim, direction(reverse));
  const auto r = ref::pointwise<double, double>(times, {ref::leaf<double>(x)}, dim, reverse);
  EXPECT_TRUE(ref::near(y, r.leaves[0], r.shape, ref::tolerance<T>(r.steps, r.leaves[0])));
}
TEST(ScanPointwise, MulFloat32) { for_each_case([](auto... args) { check_mul<float>(args...); }); }
TEST(ScanPointwise, MulFloat64) { for_each_case([](auto... args) { check_mul<double>(args...); }); }

// max and min only select inputs, so even float32 must match the float64 reference exactly.
template <class T>
void check_max_min(const Shape& shape, int64_t dim, bool reverse, uint64_t seed) {
  SCOPED_TRACE(describe("max/min", shape, dim, reverse));
  using S = RefScalar<T>;
  const auto x = ref::data<T>(shape, seed, -1000, 1000);
  const auto r_max = ref::pointwise<S, S>(larger, {ref::leaf<S>(x)}, dim, reverse);
  const auto r_min = ref::pointwise<S, S>(smaller, {ref::leaf<S>(x)}, dim, reverse);
  EXPECT_TRUE(ref::exact(ascan::associative_scan(ascan::max, x, dim, direction(reverse)), r_max.leaves[0], r_max.shape));
  EXPECT_TRUE(ref::exact(ascan::associative_scan(ascan::min, x, dim, direction(reverse)), r_min.leaves[0], r_min.shape));
}
TEST(ScanPointwise, MaxMinFloat32Exact) { for_each_case(check_max_min<float>); }
TEST(ScanPointwise, MaxMinInt32Exact) { for_each_case(check_max_min<int32_t>); }

// One long sequence of one float leaf with a builtin that runs on whole vectors (add, mul, max,
// min): each block's segments are scanned as vector lanes with the accumulator in registers, and
// the blocks chain across the pool's threads.
TEST(ScanPointwise, OneSequenceOfVectorCombines) {
  const int64_t T = ref::large(1 << 20) + 1;  // past ThreadPolicy::parallel_min_elements also with sanitizers
  for (bool reverse : {false, true}) {
    check_max_min<float>({T}, 0, reverse, 1);
    check_max_min<double>({T}, 0, reverse, 2);
    check_mul<float>({T}, 0, reverse, 3, 0.01);  // 2^20 factors of 1 +- 0.01 stay in range
    check_mul<double>({T}, 0, reverse, 4, 0.01);
    check_add<float>({T}, 0, reverse, 5);
  }
}

// logaddexp with -inf entries: a sequence starting with -inf stays exactly -inf until the first
// finite value; a -inf in the middle leaves the running value unchanged.
template <class T>
void check_logaddexp(const Shape& shape, int64_t dim, bool reverse, uint64_t seed) {
  SCOPED_TRACE(describe("logaddexp", shape, dim, reverse));
  auto x = ref::data<T>(shape, seed, -20, 20);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (gen() % 4 == 0) x.data()[i] = -std::numeric_limits<T>::infinity();
  const auto y = ascan::associative_scan(ascan::logaddexp, x, dim, direction(reverse));
  const auto r = ref::pointwise<double, double>(log_sum_exp, {ref::leaf<double>(x)}, dim, reverse);
  auto finite_abs = ref::leaf<double>(x);
  for (double& v : finite_abs.data) v = std::isinf(v) ? 0 : std::abs(v);
  const auto m = ref::pointwise<double, double>(larger, {finite_abs}, dim, reverse);
  std::vector<double> magnitude(m.leaves[0].size());
  for (size_t i = 0; i < magnitude.size(); ++i)
    magnitude[i] = m.leaves[0][i] + (std::isinf(r.leaves[0][i]) ? 0 : std::abs(r.leaves[0][i])) + 1;
  EXPECT_TRUE(ref::near(y, r.leaves[0], r.shape, ref::tolerance<T>(r.steps, magnitude)));
}
TEST(ScanPointwise, LogAddExpFloat32WithMinusInf) { for_each_case(check_logaddexp<float>); }
TEST(ScanPointwise, LogAddExpFloat64WithMinusInf) { for_each_case(check_logaddexp<double>); }

// A wide combine's own paths: one long sequence in 32 segments (4 vectors of 8 float or 4 double
// chains) per block, blocks chained across threads; rows of 2..15 lanes in 8 segments per block,
// gathered into one row of 8 w chains; rows of 3 lanes along a middle dim.
TEST(ScanPointwise, LogAddExpLongSequencesAndNarrowRows) {
  const int64_t T = ref::large(1 << 20) + 3;
  for (bool reverse : {false, true}) {
    check_logaddexp<float>({T}, 0, reverse, 7);
    check_logaddexp<double>({T / 4}, 0, reverse, 8);
    for (int64_t w = 2; w < 16; ++w) check_logaddexp<float>({ref::large(40000) / w + 5, w}, 0, reverse, 9 + w);
    check_logaddexp<double>({ref::large(40000) / 7, 7}, 0, reverse, 30);
    check_logaddexp<float>({2, 3001, 3}, 1, reverse, 31);
  }
}

TEST(ScanPointwise, LogAddExpAllMinusInfStaysMinusInf) {
  const auto x = Tensor<float>::full({40}, -INFINITY);
  EXPECT_EQ(ascan::associative_scan(ascan::logaddexp, x, 0), x);
}

TEST(ScanPointwise, LinearRecurrenceFloat32) {
  for_each_case([](const Shape& s, int64_t d, bool rev, uint64_t seed) { check_linrec<float>(s, s, d, rev, seed); });
}
TEST(ScanPointwise, LinearRecurrenceFloat64) {
  for_each_case([](const Shape& s, int64_t d, bool rev, uint64_t seed) { check_linrec<double>(s, s, d, rev, seed); });
}

TEST(ScanPointwise, BicyclicMonoidInt64Exact) { for_each_case(check_bicyclic); }

// The data must be order-sensitive, or the non-commutative checks could not fail.
TEST(ScanPointwise, NonCommutativeDataIsOrderSensitive) {
  const auto a = Tensor<int64_t>::random({1000}, 7, 0, 3), b = Tensor<int64_t>::random({1000}, 8, 0, 3);
  const auto swapped = [](auto l, auto r) { return bicyclic(r, l); };
  using E = std::tuple<int64_t, int64_t>;
  const std::vector<ref::Leaf<int64_t>> xs = {ref::leaf<int64_t>(a), ref::leaf<int64_t>(b)};
  const auto in_order = ref::pointwise<E, int64_t>(bicyclic, xs, 0), out_of_order = ref::pointwise<E, int64_t>(swapped, xs, 0);
  EXPECT_NE(in_order.leaves, out_of_order.leaves);
  const auto [ya, yb] = ascan::associative_scan(bicyclic, std::tuple{a, b}, 0);
  EXPECT_FALSE(ref::exact(ya, out_of_order.leaves[0], {1000}) && ref::exact(yb, out_of_order.leaves[1], {1000}));
}

// Affine maps with a in {-1, 1} and small integer b: exact in int64, and non-commutative.
TEST(ScanPointwise, AffineCompositionInt64Exact) {
  for_each_case([](const Shape& shape, int64_t dim, bool reverse, uint64_t seed) {
    SCOPED_TRACE(describe("affine", shape, dim, reverse));
    auto a = Tensor<int64_t>::random(shape, seed, 0, 1);
    for (int64_t i = 0; i < a.numel(); ++i) a.data()[i] = 2 * a.data()[i] - 1;
    const auto b = Tensor<int64_t>::random(shape, seed + 1, -5, 5);
    const auto [ya, yb] = ascan::associative_scan(affine, std::tuple{a, b}, dim, direction(reverse));
    using E = std::tuple<int64_t, int64_t>;
    const auto r = ref::pointwise<E, int64_t>(affine, {ref::leaf<int64_t>(a), ref::leaf<int64_t>(b)}, dim, reverse);
    EXPECT_TRUE(ref::exact(ya, r.leaves[0], r.shape));
    EXPECT_TRUE(ref::exact(yb, r.leaves[1], r.shape));
  });
}

// Welford's parallel combine on (count, mean, M2) with an int64 count and float64 moments (mixed
// leaf types), against the closed-form running mean and sum of squared deviations.
TEST(ScanPointwise, WelfordMeanVarianceMatchesClosedForm) {
  const auto welford = [](auto l, auto r) {
    auto [n1, m1, q1] = l;
    auto [n2, m2, q2] = r;
    using F = decltype(m1);
    const auto n = n1 + n2;
    const F w2 = static_cast<F>(n2) / static_cast<F>(n), w12 = static_cast<F>(n1) * w2;
    const F d = m2 - m1;
    return std::tuple{n, m1 + d * w2, q1 + q2 + d * d * w12};
  };
  for (const Case& c : {Case{{1000}, 0}, Case{{6, 300, 5}, 1}}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(describe("welford", c.shape, c.dim, reverse));
      const auto x = ref::data<double>(c.shape, 11, -3, 5);
      const auto [n, mean, m2] = ascan::associative_scan(
          welford, std::tuple{Tensor<int64_t>::full(c.shape, 1), x, Tensor<double>::zeros(c.shape)},
          c.dim, direction(reverse));
      const int64_t dim = c.dim < 0 ? c.dim + x.rank() : c.dim, T = c.shape[dim];
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= c.shape[d];
      for (size_t d = dim + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i)
          for (int64_t t = 0; t < T; ++t) {
            const auto at = [&](int64_t s) { return (o * T + s) * inner + i; };
            const int64_t lo = reverse ? t : 0, hi = reverse ? T : t + 1;  // the folded steps
            double s = 0, q = 0;
            for (int64_t k = lo; k < hi; ++k) s += x.data()[at(k)];
            const double mu = s / static_cast<double>(hi - lo);
            for (int64_t k = lo; k < hi; ++k) q += (x.data()[at(k)] - mu) * (x.data()[at(k)] - mu);
            ASSERT_EQ(n.data()[at(t)], hi - lo) << "at " << at(t);
            ASSERT_NEAR(mean.data()[at(t)], mu, 1e-12 * (1 + std::abs(mu))) << "at " << at(t);
            ASSERT_NEAR(m2.data()[at(t)], q, 1e-10 * (1 + q)) << "at " << at(t);
          }
    }
  }
}

// ((linear recurrence), add) on std::tuple<std::tuple<Tensor, Tensor>, Tensor>: the combine sees
// the same nesting, and the result has it too.
TEST(ScanPointwise, NestedTuples) {
  const auto nested = [](auto l, auto r) {
    auto [ab1, c1] = l;
    auto [ab2, c2] = r;
    return std::tuple{linrec(ab1, ab2), c1 + c2};
  };
  for_each_case([&](const Shape& shape, int64_t dim, bool reverse, uint64_t seed) {
    SCOPED_TRACE(describe("nested", shape, dim, reverse));
    const auto a = ref::data<double>(shape, seed, 0.5, 1), b = ref::data<double>(shape, seed + 1),
               c = ref::data<double>(shape, seed + 2);
    const std::tuple<std::tuple<Tensor<double>, Tensor<double>>, Tensor<double>> xs{{a, b}, c};
    const auto ys = ascan::associative_scan(nested, xs, dim, direction(reverse));
    using E = std::tuple<std::tuple<double, double>, double>;
    const auto r = ref::pointwise<E, double>(
        nested, {ref::leaf<double>(a), ref::leaf<double>(b), ref::leaf<double>(c)}, dim, reverse);
    const auto m = ref::pointwise<E, double>(
        nested, {ref::leaf<double>(a), ref::abs(ref::leaf<double>(b)), ref::abs(ref::leaf<double>(c))}, dim, reverse);
    EXPECT_TRUE(ref::near(std::get<0>(std::get<0>(ys)), r.leaves[0], r.shape, ref::tolerance<double>(r.steps, m.leaves[0])));
    EXPECT_TRUE(ref::near(std::get<1>(std::get<0>(ys)), r.leaves[1], r.shape, ref::tolerance<double>(r.steps, m.leaves[1])));
    EXPECT_TRUE(ref::near(std::get<1>(ys), r.leaves[2], r.shape, ref::tolerance<double>(r.steps, m.leaves[2])));
  });
}

TEST(ScanPointwise, ExplicitPointwiseWrapperMatchesPlainCallable) {
  const auto x = Tensor<int64_t>::random({50, 9}, 3, -9, 9);
  EXPECT_EQ(ascan::associative_scan(ascan::pointwise(plus), x, 0), ascan::associative_scan(plus, x, 0));
  EXPECT_EQ(ascan::associative_scan(ascan::pointwise(plus), x, 0), ascan::associative_scan(ascan::add, x, 0));
}

// ---- every rank and every dim --------------------------------------------------------------

TEST(ScanPointwise, RanksOneToFiveEveryDim) {
  std::mt19937_64 gen(2024);
  uint64_t seed = 100;
  for (int rank = 1; rank <= 5; ++rank) {
    for (int rep = 0; rep < 2; ++rep) {
      Shape shape(rank);
      for (auto& e : shape) e = 1 + static_cast<int64_t>(gen() % (rank <= 2 ? 40 : 6));
      for (int64_t dim = -rank; dim < rank; ++dim) {
        for (bool reverse : {false, true}) {
          check_add<double>(shape, dim, reverse, ++seed);
          check_add<int32_t>(shape, dim, reverse, ++seed);
          check_bicyclic(shape, dim, reverse, ++seed);
          check_linrec<float>(shape, shape, dim, reverse, ++seed);
        }
      }
    }
  }
}

TEST(ScanPointwise, ZeroExtentsOutsideTheScanDim) {
  for (const Shape& shape : {Shape{0, 5}, Shape{5, 0}, Shape{3, 0, 4}})
    for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) check_add<int64_t>(shape, dim, false, 1);
}

// ---- lengths along the scan dim ------------------------------------------------------------

class ScanLength : public ::testing::TestWithParam<int64_t> {};

TEST_P(ScanLength, MatchesReference) {
  const int64_t T = GetParam();
  if (T > 5000) {  // the long sequence: fewer combinations, to keep sanitizer runs short
    check_add<int64_t>({T}, 0, false, 1);
    check_add<int64_t>({T}, 0, true, 1);
    check_add<double>({T}, 0, false, 2);
    check_bicyclic({T}, 0, true, 4);
    check_linrec<float>({T}, {T}, 0, false, 5);
    check_linrec<double>({T}, {T}, 0, true, 9);
    return;
  }
  for (bool reverse : {false, true}) {
    check_add<int64_t>({T}, 0, reverse, 1);
    check_add<double>({T}, 0, reverse, 2);
    check_add<float>({T}, 0, reverse, 3);
    check_bicyclic({T}, 0, reverse, 4);
    check_linrec<float>({T}, {T}, 0, reverse, 5);
    check_linrec<double>({T}, {T}, 0, reverse, 9);  // one sequence, two leaves of one float type:
                                                    // segments as vector lanes (4 or 8 wide)
    if (T > 1000) continue;
    // The same lengths inside other layouts: lanes after the scan dim, columns before it.
    check_bicyclic({T, 5}, 0, reverse, 6);
    check_linrec<double>({3, T, 2}, {3, T, 2}, 1, reverse, 7);
    check_add<float>({4, T}, -1, reverse, 8);
  }
}

// Each length with the reason it is here.
INSTANTIATE_TEST_SUITE_P(Sizes, ScanLength,
                         ::testing::Values(0,     // empty: empty outputs, f never called
                                           1,     // a copy, f never called
                                           2,     // the first combine
                                           3,     // odd: one pair and an unpaired last element
                                           5,     // odd with two pairs before the unpaired one
                                           31,    // one short of a SIMD-friendly 32
                                           32,    // a power of two, whole lane multiples
                                           33,    // one past: a remainder of 1
                                           129,   // a block cut into equal interleaved segments
                                                  // plus a remainder
                                           1000,  // several of everything, not a power of two
                                           4099,  // past one L2-sized block of two float64
                                                  // leaves: a short second block
                                           // One long sequence: many L2-sized blocks chained
                                           // across the pool's threads (1<<18 with sanitizers).
                                           ref::large(1 << 20)),
                         [](const auto& info) { return fmt::format("T{}", info.param); });

// [T, inner] layouts: rows narrower than 16 lanes are scanned in chunks of 8, 4, 2 and 1 lanes
// (the bits of inner: 2, 3 = 2+1, 5 = 4+1, 7 = 4+2+1, 9 = 8+1, 15 = 8+4+2+1); 16 (the narrowest
// row scanned as one lane loop), 256 and 300, 1024 (one full lane group), 1100 (more than 1024:
// two lane groups, the second partial); T = 2000 rows make dozens of row blocks (each about an
// L2's worth of bytes) that chain their prefixes one after another (500 rows, still ten or more
// blocks, in sanitizer builds).
class ScanLanes : public ::testing::TestWithParam<int64_t> {};

TEST_P(ScanLanes, MatchesReference) {
  const int64_t inner = GetParam(), T = ref::large(2000);
  check_add<float>({T, inner}, 0, false, 1);
  check_bicyclic({T, inner}, 0, false, 2);
  check_bicyclic({T, inner}, 0, true, 3);
  check_linrec<double>({T, inner}, {T, inner}, 0, true, 4);
}

INSTANTIATE_TEST_SUITE_P(Inner, ScanLanes, ::testing::Values(2, 3, 5, 7, 9, 15, 16, 256, 300, 1024, 1100),
                         [](const auto& info) { return fmt::format("Inner{}", info.param); });

// Rows of 4 to 7 packed float lanes with a builtin that runs on vectors: each row is a window of
// 8 lanes reaching into the row after it, with several blocks, a decay broadcast over the lanes,
// and columns of rows back to back ([B, T, w]: a column's last rows must neither read nor write
// the next column's).
TEST(ScanPointwise, NarrowRowsAsWindows) {
  const int64_t T = ref::large(3001);
  for (int64_t inner : {4, 5, 6, 7}) {
    for (bool reverse : {false, true}) {
      check_add<float>({T, inner}, 0, reverse, 1);
      check_max_min<float>({T, inner}, 0, reverse, 2);
      check_mul<float>({T, inner}, 0, reverse, 3, 0.01);
      check_linrec<float>({T, inner}, {T, inner}, 0, reverse, 4);
      check_linrec<float>({T, 1}, {T, inner}, 0, reverse, 5);
      check_add<float>({3, 200, inner}, 1, reverse, 6);
      check_linrec<float>({3, 200, inner}, {3, 200, inner}, 1, reverse, 7);
    }
  }
}

// Rows of lanes under ThreadPolicy::one_pass_max_elements (elements x leaves) run in one pass on one thread,
// each block continuing from its predecessor's last row: several blocks, both directions, a
// leaf gathered into lanes, a non-commutative combine.
TEST(ScanPointwise, SmallRowsOfLanesInOnePass) {
  for (bool reverse : {false, true}) {
    check_add<float>({400, 256}, 0, reverse, 1);           // 9 blocks of 48 rows
    check_bicyclic({400, 256}, 0, reverse, 2);
    check_linrec<double>({200, 256}, {200, 256}, 0, reverse, 3);  // 17 blocks of 12 rows
    check_linrec<double>({200, 1}, {200, 256}, 0, reverse, 4);    // the decay gathered per row
  }
}

// ---- broadcasting --------------------------------------------------------------------------

TEST(ScanPointwiseBroadcast, LengthOneLeafAlongTheScanDim) {
  for (bool reverse : {false, true}) {
    check_linrec<double>({1, 6}, {200, 6}, 0, reverse, 1);  // one decay per column
    check_linrec<float>({1}, {3000}, 0, reverse, 2);        // one decay for the whole sequence
    check_linrec<double>({3, 1, 4}, {3, 500, 4}, 1, reverse, 3);
    check_linrec<float>({1, 1}, {3000, 7}, 0, reverse, 4);  // a discount γ over narrow rows
  }
}

TEST(ScanPointwiseBroadcast, DecayBroadcastOverTheInnerDim) {
  for (bool reverse : {false, true}) {
    check_linrec<float>({2, 50, 3, 1}, {2, 50, 3, 8}, 1, reverse, 1);
    check_linrec<double>({2, 3000, 4, 1}, {2, 3000, 4, 16}, 1, reverse, 2);  // large: on the pool
    check_linrec<double>({1, 50, 1, 8}, {2, 50, 3, 8}, 1, reverse, 3);       // stretched outside the lanes
    check_linrec<double>({3000, 1}, {3000, 5}, 0, reverse, 4);             // narrow rows, one decay per row
  }
}

// Narrow runs with adjacent columns are scanned as bundles of columns; leaves that are not
// contiguous over a bundle are gathered per row.
TEST(ScanPointwiseBroadcast, ColumnsBundledIntoLanes) {
  for (bool reverse : {false, true}) {
    check_linrec<float>({2, 40, 60, 1}, {2, 40, 60, 5}, 1, reverse, 1);  // 300 lanes: a partial bundle
    check_linrec<double>({3000, 3, 1}, {3000, 3, 2}, 0, reverse, 2);    // 6 lanes: blocks and segments
    check_linrec<double>({50, 7, 1}, {50, 1, 9}, 0, reverse, 3);        // neither leaf contiguous
    check_linrec<float>({4, 30, 1, 4}, {4, 30, 5, 4}, 1, reverse, 4);   // leaf 0 repeats per column
    check_linrec<double>({2, 100, 16, 1}, {2, 100, 16, 32}, 1, reverse, 5);  // the attention layout
  }
}

TEST(ScanPointwiseBroadcast, LeavesOfDifferentRank) {
  for (bool reverse : {false, true}) {
    check_linrec<double>({40, 5}, {3, 40, 5}, 0, reverse, 1);   // leaf 0 rank 2: its dim 0 is output dim 1
    check_linrec<double>({40, 1}, {3, 40, 5}, -2, reverse, 2);  // negative dim resolved against leaf 0
    check_linrec<double>({2, 1, 40, 5}, {3, 40, 5}, -2, reverse, 3);  // b ranks lower
  }
}

// A leaf of lower rank whose dims all lie after the scan axis (rank 1 > dim 0) is constant
// along the scan, as NumPy stretches its missing leading dims.
TEST(ScanPointwiseBroadcast, LeafWithoutTheScanAxisIsConstantAlongIt) {
  for (bool reverse : {false, true}) {
    // [3] aligns with the last dim of [50, 3] (NumPy), so it has no scan axis. (A leaf whose rank
    // is <= dim is an error instead: see ScanErrors.)
    check_linrec<double>({50, 3}, {3}, 0, reverse, 1);
  }
}

TEST(ScanPointwiseBroadcast, OutputHasTheBroadcastShape) {
  const auto a = Tensor<float>::full({1, 7, 1}, 0.5f), b = Tensor<float>::zeros({4, 7, 3});
  const auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 1);
  EXPECT_EQ(ya.shape(), (Shape{4, 7, 3}));
  EXPECT_EQ(yb.shape(), (Shape{4, 7, 3}));
  EXPECT_EQ(ya(3, 2, 2), 0.125f);
}

// ---- caller-provided outputs ---------------------------------------------------------------

TEST(ScanPointwiseOut, WritesIntoProvidedTensors) {
  const auto a = ref::data<double>({300, 40}, 1, 0.5, 1), b = ref::data<double>({300, 40}, 2);
  auto oa = Tensor<double>::full({300, 40}, NAN), ob = Tensor<double>::full({300, 40}, NAN);
  const void* storage = ob.data();
  ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, std::tuple{oa, ob});
  EXPECT_EQ(ob.data(), storage);
  using E = std::tuple<double, double>;
  const auto r = ref::pointwise<E, double>(linrec, {ref::leaf<double>(a), ref::leaf<double>(b)}, 0);
  const auto m = ref::pointwise<E, double>(linrec, {ref::leaf<double>(a), ref::abs(ref::leaf<double>(b))}, 0);
  EXPECT_TRUE(ref::near(oa, r.leaves[0], r.shape, ref::tolerance<double>(r.steps, m.leaves[0])));
  EXPECT_TRUE(ref::near(ob, r.leaves[1], r.shape, ref::tolerance<double>(r.steps, m.leaves[1])));
}

TEST(ScanPointwiseOut, TiedOutputs) {
  const auto a = Tensor<int64_t>::random({500}, 1, 0, 3), b = Tensor<int64_t>::random({500}, 2, 0, 3);
  auto ya = Tensor<int64_t>::zeros({500}), yb = Tensor<int64_t>::zeros({500});
  ascan::associative_scan(bicyclic, std::tuple{a, b}, 0, {.reverse = true}, std::tie(ya, yb));
  using E = std::tuple<int64_t, int64_t>;
  const auto r = ref::pointwise<E, int64_t>(bicyclic, {ref::leaf<int64_t>(a), ref::leaf<int64_t>(b)}, 0, true);
  EXPECT_TRUE(ref::exact(ya, r.leaves[0], r.shape));
  EXPECT_TRUE(ref::exact(yb, r.leaves[1], r.shape));
}

// In place, large enough for chained blocks on the pool: each element is read before written.
TEST(ScanPointwiseOut, InPlace) {
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    auto x = Tensor<int64_t>::random({1 << 18}, 5, -50, 50);
    const auto r = ref::pointwise<int64_t, int64_t>(plus, {ref::leaf<int64_t>(x)}, 0, reverse);
    ascan::associative_scan(ascan::add, x, 0, direction(reverse), x);
    EXPECT_TRUE(ref::exact(x, r.leaves[0], r.shape));

    auto a = ref::data<double>({1, 64}, 6, 0.5, 1);  // broadcast decay, b scanned in place
    auto b = ref::data<double>({4000, 64}, 7);
    using E = std::tuple<double, double>;
    const auto rb = ref::pointwise<E, double>(linrec, {ref::leaf<double>(a), ref::leaf<double>(b)}, 0, reverse);
    const auto mb = ref::pointwise<E, double>(linrec, {ref::leaf<double>(a), ref::abs(ref::leaf<double>(b))}, 0, reverse);
    auto ya = Tensor<double>::empty({4000, 64});
    ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, direction(reverse), std::tie(ya, b));
    EXPECT_TRUE(ref::near(b, rb.leaves[1], rb.shape, ref::tolerance<double>(rb.steps, mb.leaves[1])));
  }
}

// Each output may alias an input of its own shape, even another leaf's (the pair is swapped).
TEST(ScanPointwiseOut, OutputsMayAliasOtherInputsOfTheirShape) {
  auto a = Tensor<int64_t>::random({3, 70000}, 1, 0, 3), b = Tensor<int64_t>::random({3, 70000}, 2, 0, 3);
  using E = std::tuple<int64_t, int64_t>;
  const auto r = ref::pointwise<E, int64_t>(bicyclic, {ref::leaf<int64_t>(a), ref::leaf<int64_t>(b)}, 1);
  ascan::associative_scan(bicyclic, std::tuple{a, b}, 1, {}, std::tie(b, a));
  EXPECT_TRUE(ref::exact(b, r.leaves[0], r.shape));
  EXPECT_TRUE(ref::exact(a, r.leaves[1], r.shape));
}

// An output over another leaf's input, that leaf broadcasting against the first (found by
// fuzz_out: the kernels wrote a row's outputs leaf by leaf, so the first output overwrote the
// second leaf's row before it was read; such an input is now copied first). Builtin and user
// combine, both directions; decays in {-1, 0, 1} and integer states, so every value is exact.
TEST(ScanPointwiseOut, OutputOverAnotherLeafsInputWithABroadcastLeaf) {
  for (const Shape& sa : {Shape{2, 1, 3}, Shape{300, 1, 3}, Shape{1, 4, 3}})
    for (bool builtin : {true, false})
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(ref::str(sa) + (builtin ? " builtin" : " user combine") + (reverse ? " reverse" : ""));
        const Shape sb{std::max<int64_t>(sa[0], 2), 4, 3};
        auto a = Tensor<double>::random(sa, 1, -1.5, 1.5), b = Tensor<double>::random(sb, 2, -20, 20);
        for (int64_t i = 0; i < a.numel(); ++i) a.data()[i] = std::round(a.data()[i]);
        for (int64_t i = 0; i < b.numel(); ++i) b.data()[i] = std::round(b.data()[i]);
        using E = std::tuple<double, double>;
        const auto r = ref::pointwise<E, double>(linrec, {ref::leaf<double>(a), ref::leaf<double>(b)}, 0, reverse);
        Tensor<double> yb = Tensor<double>::zeros(sb);
        Tensor<double> ya = b;  // the first output over the second input
        if (builtin) ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, direction(reverse), std::tie(ya, yb));
        else ascan::associative_scan(linrec, std::tuple{a, b}, 0, direction(reverse), std::tie(ya, yb));
        EXPECT_TRUE(ref::exact(ya, r.leaves[0], r.shape));
        EXPECT_TRUE(ref::exact(yb, r.leaves[1], r.shape));
      }
}

// The bicyclic monoid on small integers in float32 (exact), each leaf's output written over
// the other leaf's input.
void check_swapped_float_outputs(const Shape& shape, bool reverse) {
  auto a = Tensor<float>::random(shape, 3, 0, 3), b = Tensor<float>::random(shape, 4, 0, 3);
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.data()[i] = std::floor(a.data()[i]);
    b.data()[i] = std::floor(b.data()[i]);
  }
  using E = std::tuple<double, double>;
  const auto r = ref::pointwise<E, double>(bicyclic, {ref::leaf<double>(a), ref::leaf<double>(b)}, 0, reverse);
  ascan::associative_scan(bicyclic, std::tuple{a, b}, 0, direction(reverse), std::tie(b, a));
  EXPECT_TRUE(ref::exact(b, r.leaves[0], r.shape)) << ref::str(shape) << " reverse " << reverse;
  EXPECT_TRUE(ref::exact(a, r.leaves[1], r.shape)) << ref::str(shape) << " reverse " << reverse;
}

// The same in float32 for one long sequence (its segments scanned as vector lanes, read and
// written back in transposed blocks) and for rows of 7 lanes (chunks of 4, 2 and 1 lanes).
TEST(ScanPointwiseOut, SwappedOutputsInFloat) {
  for (const Shape& shape : {Shape{70001}, Shape{10001, 7}})
    for (bool reverse : {false, true}) check_swapped_float_outputs(shape, reverse);
}

// ---- outputs written around the caches -----------------------------------------------------

// Outputs of MemoryPolicy::stream_min_bytes or more are scanned block by block into a worker's scratch buffer
// and copied out with streaming stores (each block's last row first, plainly, for the block
// after it). Every layout that streams, just past the threshold, both directions, also in place
// and with the outputs swapped between the leaves.
constexpr int64_t kStream = ascan::detail::MemoryPolicy::stream_min_bytes;

TEST(ScanPointwiseStreamed, OneSequence) {
  for (bool reverse : {false, true}) {
    check_add<int64_t>({kStream / 8 + 37}, 0, reverse, 1);                      // 8 scalar chains
    check_linrec<float>({kStream / 8 + 11}, {kStream / 8 + 11}, 0, reverse, 2);  // vector lanes
    check_linrec<double>({kStream / 16 + 5}, {kStream / 16 + 5}, 0, reverse, 3);
    check_linrec<float>({1}, {kStream / 8 + 11}, 0, reverse, 5);  // a constant decay, vector lanes
    check_add<float>({3, kStream / 12 + 1}, 1, reverse, 4);  // one sequence per row
  }
}

TEST(ScanPointwiseStreamed, RowsOfLanes) {
  for (bool reverse : {false, true}) {
    check_bicyclic({kStream / 112 + 1, 7}, 0, reverse, 1);  // chunks of 4, 2 and 1 lanes
    check_add<float>({kStream / 1024 + 3, 256}, 0, reverse, 2);
    check_linrec<double>({kStream / 4096 + 1, 256}, {kStream / 4096 + 1, 256}, 0, reverse, 3);
    // Rows of several groups of 1024 lanes, each streamed row by row.
    check_add<float>({kStream / 8192 + 3, 2048}, 0, reverse, 4);
    check_linrec<float>({kStream / 24576 + 5, 3072}, {kStream / 24576 + 5, 3072}, 0, reverse, 5);
    check_add<float>({2, kStream / 16384 + 1, 2048}, 1, reverse, 6);
  }
}

TEST(ScanPointwiseStreamed, InPlaceAndSwapped) {
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    auto x = Tensor<int64_t>::random({kStream / 8 + 3}, 5, -50, 50);
    const auto r = ref::pointwise<int64_t, int64_t>(plus, {ref::leaf<int64_t>(x)}, 0, reverse);
    ascan::associative_scan(ascan::add, x, 0, direction(reverse), x);
    EXPECT_TRUE(ref::exact(x, r.leaves[0], r.shape));

    for (const Shape& shape : {Shape{kStream / 8 + 9}, Shape{kStream / 56 + 1, 7}})
      check_swapped_float_outputs(shape, reverse);
  }
}

// A training loop: after the first call, reused outputs and the caching allocator mean no
// further trips to the operating system.
TEST(ScanPointwiseOut, RepeatedCallsReachSteadyState) {
  const int64_t n = 1 << 18;  // two leaves: enough elements to run on the pool
  const auto a = ref::data<float>({n}, 1, 0.5, 1), b = ref::data<float>({n}, 2);
  auto ya = Tensor<float>::empty({n}), yb = Tensor<float>::empty({n});
  ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, std::tie(ya, yb));
  const auto first = ascan::allocator_stats();
  for (int i = 1; i < 20; ++i)
    ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {.reverse = i % 2 == 1}, std::tie(ya, yb));
  EXPECT_EQ(ascan::allocator_stats().system_allocations, first.system_allocations);
  EXPECT_EQ(ascan::allocator_stats().bytes_in_use, first.bytes_in_use);

  // The returning overload too: after the first call its output comes back from the cache.
  EXPECT_EQ(ascan::associative_scan(ascan::add, b, 0).numel(), n);
  const auto warm = ascan::allocator_stats();
  for (int i = 1; i < 20; ++i) EXPECT_EQ(ascan::associative_scan(ascan::add, b, 0).numel(), n);
  EXPECT_EQ(ascan::allocator_stats().system_allocations, warm.system_allocations);
  EXPECT_GE(ascan::allocator_stats().cache_hits, warm.cache_hits + 19);
}

}  // namespace
