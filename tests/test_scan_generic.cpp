// test_scan_generic.cpp — generic-mode associative_scan (combines on slices) vs sequential loops.
#include <ascan/ascan.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;

const auto matmul_combine = ascan::generic([](const auto& a, const auto& b) { return matmul(a, b); });

// Affine maps x -> A x + b as (A [2, 2], b [2]): apply the left one first, then the right one,
// (A, b) ∘ (C, d) = (C·A, C·b + d). Leaves of different shapes with one scan length.
const auto affine_fn = [](const auto& l, const auto& r) {
  const auto& [A, b] = l;
  const auto& [C, d] = r;
  return std::tuple{matmul(C, A), matmul(C, b) + d};
};
const auto affine_combine = ascan::generic(affine_fn);

using Mat = std::array<double, 4>;  // row-major 2x2, multiplied by hand below
Mat mul(const Mat& x, const Mat& y) {
  return {x[0] * y[0] + x[1] * y[2], x[0] * y[1] + x[1] * y[3], x[2] * y[0] + x[3] * y[2],
          x[2] * y[1] + x[3] * y[3]};
}
Mat abs(Mat m) {
  for (double& v : m) v = std::abs(v);
  return m;
}

// Signed permutation matrices (the dihedral group of order 8): exact in int64, bounded, and
// non-commutative.
Tensor<int64_t> signed_permutations(const Shape& shape, uint64_t seed) {  // shape [..., 2, 2]
  auto m = Tensor<int64_t>::zeros(shape);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < m.numel(); i += 4) {
    const uint64_t r = gen();
    const int64_t s0 = r & 1 ? 1 : -1, s1 = r & 2 ? 1 : -1;
    if (r & 4) m.data()[i] = s0, m.data()[i + 3] = s1;  // diagonal
    else m.data()[i + 1] = s0, m.data()[i + 2] = s1;    // anti-diagonal
  }
  return m;
}

class GenericLength : public ::testing::TestWithParam<int64_t> {};

// The matrix chain against a hand-written loop of 2x2 products in float64 (forward: y_t =
// y_{t-1}·M_t; reverse: y_t = y_{t+1}·M_t), with the worst-case bound for matrix products.
// Entries are in [0, 1): without cancellation |M_0|···|M_t| is the size of the product itself,
// so the bound stays relative to the values (signed entries make products shrink far faster
// than their magnitudes, and the check would lose its teeth for long chains).
TEST_P(GenericLength, MatrixChainFloat64MatchesSequentialProducts) {
  const int64_t T = GetParam();
  const auto m = ref::data<double>({T, 2, 2}, 1, 0, 1);
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    const auto y = ascan::associative_scan(matmul_combine, m, 0, {.reverse = reverse});
    std::vector<double> want(4 * T), magnitude(4 * T);
    std::vector<int64_t> steps(4 * T);
    Mat acc{}, acc_abs{};
    for (int64_t k = 0; k < T; ++k) {
      const int64_t t = reverse ? T - 1 - k : k;
      const Mat x{m.data()[4 * t], m.data()[4 * t + 1], m.data()[4 * t + 2], m.data()[4 * t + 3]};
      acc = k == 0 ? x : mul(acc, x);
      acc_abs = k == 0 ? abs(x) : mul(acc_abs, abs(x));
      for (int e = 0; e < 4; ++e) want[4 * t + e] = acc[e], magnitude[4 * t + e] = acc_abs[e], steps[4 * t + e] = k + 1;
    }
    EXPECT_TRUE(ref::near(y, want, {T, 2, 2}, ref::linear_tolerance<double>(steps, magnitude)));
  }
}

// float32 slices against the float64 loop: the same worst-case bound with float32's roundoff.
TEST_P(GenericLength, MatrixChainFloat32WithinDerivedTolerance) {
  const int64_t T = GetParam();
  const auto m = ref::data<float>({T, 2, 2}, 2, 0, 1);
  const auto y = ascan::associative_scan(matmul_combine, m, 0);
  std::vector<double> want(4 * T), magnitude(4 * T);
  std::vector<int64_t> steps(4 * T);
  Mat acc{}, acc_abs{};
  for (int64_t t = 0; t < T; ++t) {
    const Mat x{m.data()[4 * t], m.data()[4 * t + 1], m.data()[4 * t + 2], m.data()[4 * t + 3]};
    acc = t == 0 ? x : mul(acc, x);
    acc_abs = t == 0 ? abs(x) : mul(acc_abs, abs(x));
    for (int e = 0; e < 4; ++e) want[4 * t + e] = acc[e], magnitude[4 * t + e] = acc_abs[e], steps[4 * t + e] = t + 1;
  }
  EXPECT_TRUE(ref::near(y, want, {T, 2, 2}, ref::linear_tolerance<float>(steps, magnitude)));
}

TEST_P(GenericLength, SignedPermutationChainInt64Exact) {
  const int64_t T = GetParam();
  const auto m = signed_permutations({T, 2, 2}, 3);
  const auto matmul_fn = [](const auto& a, const auto& b) { return matmul(a, b); };
  for (bool reverse : {false, true})
    EXPECT_EQ(ascan::associative_scan(matmul_combine, m, 0, {.reverse = reverse}),
              ref::generic(matmul_fn, m, 0, reverse))
        << (reverse ? "reverse" : "forward");
}

TEST_P(GenericLength, AffineMapsWithLeavesOfDifferentShapes) {
  const int64_t T = GetParam();
  const auto A = ref::data<double>({T, 2, 2}, 4, 0, 1), b = ref::data<double>({T, 2}, 5, 0, 1);
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    const auto [yA, yb] = ascan::associative_scan(affine_combine, std::tuple{A, b}, 0, {.reverse = reverse});
    ASSERT_EQ(yA.shape(), (Shape{T, 2, 2}));
    ASSERT_EQ(yb.shape(), (Shape{T, 2}));
    // By hand: the composed map (P, q) and its entrywise magnitude (|P|, |q|).
    std::vector<double> wantA(4 * T), wantb(2 * T), magA(4 * T), magb(2 * T);
    std::vector<int64_t> stepsA(4 * T), stepsb(2 * T);
    Mat P{}, P_abs{};
    std::array<double, 2> q{}, q_abs{};
    for (int64_t k = 0; k < T; ++k) {
      const int64_t t = reverse ? T - 1 - k : k;
      const Mat C{A.data()[4 * t], A.data()[4 * t + 1], A.data()[4 * t + 2], A.data()[4 * t + 3]};
      const std::array<double, 2> d{b.data()[2 * t], b.data()[2 * t + 1]};
      if (k == 0) {
        P = C, P_abs = abs(C), q = d, q_abs = {std::abs(d[0]), std::abs(d[1])};
      } else {
        P = mul(C, P), P_abs = mul(abs(C), P_abs);
        q = {C[0] * q[0] + C[1] * q[1] + d[0], C[2] * q[0] + C[3] * q[1] + d[1]};
        q_abs = {std::abs(C[0]) * q_abs[0] + std::abs(C[1]) * q_abs[1] + std::abs(d[0]),
                 std::abs(C[2]) * q_abs[0] + std::abs(C[3]) * q_abs[1] + std::abs(d[1])};
      }
      for (int e = 0; e < 4; ++e) wantA[4 * t + e] = P[e], magA[4 * t + e] = P_abs[e], stepsA[4 * t + e] = k + 1;
      for (int e = 0; e < 2; ++e) wantb[2 * t + e] = q[e], magb[2 * t + e] = q_abs[e], stepsb[2 * t + e] = k + 1;
    }
    EXPECT_TRUE(ref::near(yA, wantA, {T, 2, 2}, ref::linear_tolerance<double>(stepsA, magA)));
    EXPECT_TRUE(ref::near(yb, wantb, {T, 2}, ref::linear_tolerance<double>(stepsb, magb)));
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GenericLength,
                         ::testing::Values(0,      // empty outputs, g never called
                                           1,      // a copy
                                           2,      // one combine
                                           3,      // odd: the last element has no partner
                                           5,      // odd at two levels of the tree
                                           33,     // one past a power of two: a deep tree
                                           1000),  // many levels, pairs combined in parallel
                         [](const auto& info) { return fmt::format("T{}", info.param); });

// ---- several dims --------------------------------------------------------------------------

TEST(ScanGeneric, MatrixChainAlongEveryDimInt64Exact) {
  const auto matmul_fn = [](const auto& a, const auto& b) { return matmul(a, b); };
  // Slices are [2, 2] matrices assembled from the dims around the scan dim.
  struct Case { Shape shape; int64_t dim; };
  for (const Case& c : {Case{{2, 37, 2}, 1}, Case{{2, 2, 37}, -1}, Case{{2, 2, 37}, 2}, Case{{37, 2, 2}, -3}}) {
    // Build matrices that are signed permutations in the slice's own (i, j) layout.
    const int64_t dim = c.dim < 0 ? c.dim + 3 : c.dim;
    const auto rows = signed_permutations({37, 2, 2}, 9);
    auto x = Tensor<int64_t>::zeros(c.shape);
    for (int64_t t = 0; t < 37; ++t)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          const int64_t idx[3] = {dim == 0 ? t : i, dim == 0 ? i : dim == 1 ? t : j, dim == 2 ? t : j};
          x.at({idx[0], idx[1], idx[2]}) = rows(t, i, j);
        }
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(ref::str(c.shape) + " dim " + std::to_string(c.dim) + (reverse ? " reverse" : ""));
      const auto y = ascan::associative_scan(matmul_combine, x, c.dim, {.reverse = reverse});
      EXPECT_EQ(y, ref::generic(matmul_fn, x, c.dim, reverse));
    }
  }
}

// Batched slices: [3, T, 2, 2] along dim 1 gives slices [3, 2, 2] (a batch of matrices).
TEST(ScanGeneric, BatchedMatrixSlices) {
  const auto x = signed_permutations({3, 50, 2, 2}, 10);
  const auto matmul_fn = [](const auto& a, const auto& b) { return matmul(a, b); };
  for (bool reverse : {false, true})
    EXPECT_EQ(ascan::associative_scan(matmul_combine, x, 1, {.reverse = reverse}), ref::generic(matmul_fn, x, 1, reverse));
}

// The linear recurrence written on whole slices, a in {-1, 1}: exact against the reference and
// against the pointwise builtin on the same data.
TEST(ScanGeneric, SliceLinearRecurrenceMatchesPointwise) {
  const auto slice_linrec = [](const auto& l, const auto& r) {
    const auto& [a1, b1] = l;
    const auto& [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  const auto a = ref::random_signs({4, 60, 5}, 1);
  const auto b = Tensor<int64_t>::random({4, 60, 5}, 2, -9, 9);
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (reverse ? " reverse" : ""));
      const auto ys = ascan::associative_scan(ascan::generic(slice_linrec), std::tuple{a, b}, dim, {.reverse = reverse});
      EXPECT_EQ(ys, ref::generic(slice_linrec, std::tuple{a, b}, dim, reverse));
      EXPECT_EQ(ys, ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, dim, {.reverse = reverse}));
    }
  }
}

// ---- edge lengths and outputs --------------------------------------------------------------

TEST(ScanGeneric, LengthZeroAndOneNeverCallTheCombine) {
  std::atomic<int> calls{0};
  const auto counting = ascan::generic([&](const auto& a, const auto& b) {
    ++calls;
    return matmul(a, b);
  });
  const auto empty = ascan::associative_scan(counting, Tensor<double>::zeros({0, 2, 2}), 0);
  EXPECT_EQ(empty.shape(), (Shape{0, 2, 2}));
  const auto one = ref::data<double>({2, 1, 2}, 1);
  const auto copy = ascan::associative_scan(counting, one.reshape({1, 2, 2}), 0);
  EXPECT_EQ(copy, one.reshape({1, 2, 2}));
  EXPECT_FALSE(copy.shares_storage_with(one));
  const auto along_middle = ascan::associative_scan(counting, one, 1, {.reverse = true});
  EXPECT_EQ(along_middle, one);
  EXPECT_EQ(calls.load(), 0);
}

TEST(ScanGeneric, OutOverloadAndInPlace) {
  const auto matmul_fn = [](const auto& a, const auto& b) { return matmul(a, b); };
  auto m = signed_permutations({100, 2, 2}, 11);
  const auto want = ref::generic(matmul_fn, m, 0);
  auto out = Tensor<int64_t>::full({100, 2, 2}, -7);
  ascan::associative_scan(matmul_combine, m, 0, {}, out);
  EXPECT_EQ(out, want);
  ascan::associative_scan(matmul_combine, m, 0, {}, m);  // in place
  EXPECT_EQ(m, want);

  const auto A = signed_permutations({20, 2, 2}, 12);
  const auto b = Tensor<int64_t>::random({20, 2}, 13, -9, 9);
  const auto [wantA, wantb] = ref::generic(affine_fn, std::tuple{A, b}, 0);
  auto oA = Tensor<int64_t>::zeros({20, 2, 2}), ob = Tensor<int64_t>::zeros({20, 2});
  ascan::associative_scan(affine_combine, std::tuple{A, b}, 0, {}, std::tie(oA, ob));
  EXPECT_EQ(oA, wantA);
  EXPECT_EQ(ob, wantb);
}

// Combines that return one of their arguments: the slices they get view the input, but the
// results are copies, so writing into them leaves the input alone.
TEST(ScanGeneric, ResultsDoNotAliasTheInput) {
  const auto x = Tensor<int64_t>::random({50, 2, 3}, 21, -9, 9);
  const auto keep = x.clone();
  for (bool take_left : {false, true}) {
    const auto pick = ascan::generic([take_left](const auto& a, const auto& b) { return take_left ? a : b; });
    for (int64_t dim : {0, 1}) {
      auto y = ascan::associative_scan(pick, x, dim);
      EXPECT_FALSE(y.shares_storage_with(x));
      EXPECT_EQ(y, take_left ? ref::generic([](const auto& a, const auto&) { return a; }, x, dim) : x);
      for (int64_t i = 0; i < y.numel(); ++i) y.data()[i] = 1000;
      EXPECT_EQ(x, keep);
    }
  }
}

// In place with a combine that returns one of its arguments (the slice with the larger first
// element, the left one on ties: associative): the outputs overwrite the storage the slices view,
// so the scan must read a copy of the input.
TEST(ScanGeneric, InPlaceWithCombinePassingSlicesThrough) {
  const auto argmax = [](const auto& a, const auto& b) { return b.data()[0] > a.data()[0] ? b : a; };
  for (int64_t dim : {0, 1})
    for (bool reverse : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (reverse ? " reverse" : " forward"));
      const auto x = Tensor<int64_t>::random({40, 30, 2}, 22 + dim, -99, 99);
      const auto want = ref::generic(argmax, x, dim, reverse);
      auto y = x.clone();
      ascan::associative_scan(ascan::generic(argmax), y, dim, {.reverse = reverse}, y);
      EXPECT_EQ(y, want);
      // Two leaves swapped in place (each output is the other input's storage).
      const auto x2 = Tensor<int64_t>::random({40, 30, 2}, 32 + dim, -99, 99);
      auto a = x.clone(), b = x2.clone();
      const auto both = [&](const auto& l, const auto& r) {
        return std::tuple{argmax(std::get<0>(l), std::get<0>(r)), argmax(std::get<1>(l), std::get<1>(r))};
      };
      ascan::associative_scan(ascan::generic(both), std::tuple{a, b}, dim, {.reverse = reverse}, std::tie(b, a));
      EXPECT_EQ(b, want);
      EXPECT_EQ(a, ref::generic(argmax, x2, dim, reverse));
    }
}

// A training loop of Generic-mode scans on the pool reaches a steady state: no new blocks from the
// system, nothing left in use; empty_cache() also drains the cached blocks of the pool's threads.
TEST(ScanGeneric, RepeatedScansReachSteadyStateOnThreads) {
  const int saved = ascan::num_threads();
  ascan::set_num_threads(2);
  const auto m = signed_permutations({4096, 2, 2}, 31);
  auto out = Tensor<int64_t>::empty(m.shape());
  for (int i = 0; i < 5; ++i) ascan::associative_scan(matmul_combine, m, 0, {}, out);
  const auto warm = ascan::allocator_stats();
  for (int i = 0; i < 5; ++i) ascan::associative_scan(matmul_combine, m, 0, {.reverse = i % 2 == 1}, out);
  const auto after = ascan::allocator_stats();
  EXPECT_EQ(after.system_allocations, warm.system_allocations);
  EXPECT_EQ(after.bytes_in_use, warm.bytes_in_use);
  EXPECT_GT(after.cache_hits, warm.cache_hits);
  ascan::empty_cache();
  EXPECT_EQ(ascan::allocator_stats().bytes_cached, 0);
  EXPECT_EQ(ascan::allocator_stats().bytes_in_use, warm.bytes_in_use);
  ascan::set_num_threads(saved);
}

// A thread that exits hands its cached blocks to the shared cache; the counts stay exact.
TEST(ScanGeneric, ExitingThreadReturnsItsCachedBlocks) {
  const auto before = ascan::allocator_stats();
  std::thread worker([] {
    std::vector<Tensor<double>> keep;
    for (int i = 0; i < 100; ++i) keep.push_back(Tensor<double>::zeros({2, 2}));
  });
  worker.join();
  const auto after = ascan::allocator_stats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.bytes_cached - before.bytes_cached,
            (after.system_allocations - before.system_allocations) * 128 - (after.system_frees - before.system_frees) * 128);
}

}  // namespace
