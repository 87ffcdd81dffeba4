// test_ad_scan.cpp — gradients of the differentiable scan against float64 finite differences over
// the combine catalogue × dims × reverse × sizes, random cotangents per output.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include <stdexcept>
#include <type_traits>
#include <tuple>

#include "ad_test_util.hpp"

namespace {

using namespace ascan_test;
namespace ad = ascan::ad;

// Non-commutative affine maps x -> a x + b composed left first (same algebra as the linear
// recurrence, written by the user).
const auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a2 * a1, a2 * b1 + b2};
};
// Welford / Chan merge of (count, mean, M2) summaries.
const auto welford = [](auto l, auto r) {
  auto [n1, m1, s1] = l;
  auto [n2, m2, s2] = r;
  auto n = n1 + n2;
  auto delta = m2 - m1;
  return std::tuple{n, m1 + delta * n2 / n, s1 + s2 + delta * delta * n1 * n2 / n};
};
// S5-style diagonal complex linear recurrence h_t = λ_t h_{t-1} + u_t on (Re λ, Im λ, Re u, Im u):
// four coupled leaves.
const auto s5 = [](auto l, auto r) {
  auto [lr1, li1, ur1, ui1] = l;
  auto [lr2, li2, ur2, ui2] = r;
  return std::tuple{lr2 * lr1 - li2 * li1, lr2 * li1 + li2 * lr1,
                    lr2 * ur1 - li2 * ui1 + ur2, lr2 * ui1 + li2 * ur1 + ui2};
};

// Sizes along the scan dim: empty, copy, one combine, odd, 5, a prime, and a power of two.
// Under the sanitizers (an order of magnitude slower) the longest size is left to the normal build.
#if defined(__SANITIZE_ADDRESS__)
const int64_t kSizes[] = {0, 1, 2, 3, 5, 17};
#else
const int64_t kSizes[] = {0, 1, 2, 3, 5, 17, 64};
#endif

ascan::Shape shape_with(int64_t T, int64_t dim) {
  ascan::Shape s{2, 3};
  s.insert(s.begin() + dim, T);
  return s;
}

TEST(AdScan, SingleLeafCombines) {
  for (int64_t T : kSizes)
    for (int64_t dim : {0, 1, 2})
      for (bool rev : {false, true}) {
        SCOPED_TRACE(testing::Message() << "T=" << T << " dim=" << dim << " reverse=" << rev);
        const ascan::Shape s = shape_with(T, dim);
        const int64_t d = dim == 2 ? -1 : dim;  // negative dims too
        const ascan::ScanOptions o{.reverse = rev};
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(ascan::add, x[0], d, o); }, {randn(s, 1)});
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(ascan::mul, x[0], d, o); },
                         {uniform(s, 2, 0.5, 1.5)});
        // max/min away from ties: distinct values spaced far more than eps apart.
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(ascan::max, x[0], d, o); }, {randn(s, 3)});
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(ascan::min, x[0], d, o); }, {randn(s, 4)});
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(ascan::logaddexp, x[0], d, o); },
                         {randn(s, 5)});
      }
}

TEST(AdScan, CoupledLeafCombines) {
  for (int64_t T : kSizes)
    for (int64_t dim : {0, 2})
      for (bool rev : {false, true}) {
        SCOPED_TRACE(testing::Message() << "T=" << T << " dim=" << dim << " reverse=" << rev);
        const ascan::Shape s = shape_with(T, dim);
        const ascan::ScanOptions o{.reverse = rev};
        // gradcheck checks each output on its own with its own random cotangent: a loss that
        // touches only the second output of the linear recurrence or of S5 is included.
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, dim, o); },
                         {uniform(s, 1, -1.0, 1.0), randn(s, 2)});
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(affine, std::tuple{x[0], x[1]}, dim, o); },
                         {uniform(s, 3, -1.2, 1.2), randn(s, 4)});
        EXPECT_GRADCHECK([=](const auto& x) { return ascan::associative_scan(welford, std::tuple{x[0], x[1], x[2]}, dim, o); },
                         {uniform(s, 5, 1.0, 3.0), randn(s, 6), uniform(s, 7, 0.0, 1.0)});
        EXPECT_GRADCHECK([=](const auto& x) {
          return ascan::associative_scan(s5, std::tuple{x[0], x[1], x[2], x[3]}, dim, o);
        }, {uniform(s, 8, -0.7, 0.7), uniform(s, 9, -0.7, 0.7), randn(s, 10), randn(s, 11)});
      }
}

TEST(AdScan, NestedTuplesOfLeaves) {
  const auto nested = [](auto l, auto r) {
    auto [ab1, c1] = l;
    auto [ab2, c2] = r;
    auto [a1, b1] = ab1;
    auto [a2, b2] = ab2;
    return std::tuple{std::tuple{a1 * a2, a2 * b1 + b2}, c1 + c2 * a2};
  };
  EXPECT_GRADCHECK([=](const auto& x) {
    return ascan::associative_scan(nested, std::tuple{std::tuple{x[0], x[1]}, x[2]}, 1);
  }, {uniform({2, 9}, 1, -1.0, 1.0), randn({2, 9}, 2), randn({2, 9}, 3)});
}

TEST(AdScan, BroadcastLeavesGetGradientsOfTheirOwnShape) {
  // A decay constant over the last dim, and one constant along the scan dim itself.
  EXPECT_GRADCHECK([](const auto& x) { return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 1); },
                   {uniform({2, 7, 1}, 1, 0.3, 0.9), randn({2, 7, 4}, 2)});
  EXPECT_GRADCHECK([](const auto& x) { return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 1); },
                   {uniform({1, 1, 4}, 3, 0.3, 0.9), randn({2, 7, 4}, 4)});
  VD a = ad::param(uniform({2, 7, 1}, 1, 0.3, 0.9)), b = ad::param(randn({2, 7, 4}, 2));
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 1);
  ad::backward(ad::sum(yb));
  EXPECT_EQ(a.grad().shape(), (ascan::Shape{2, 7, 1}));
  EXPECT_EQ(yb.shape(), (ascan::Shape{2, 7, 4}));
}

TEST(AdScan, GenericMatrixChainAndCapturedParameter) {
  for (int64_t T : kSizes)
    for (bool rev : {false, true}) {
      SCOPED_TRACE(testing::Message() << "T=" << T << " reverse=" << rev);
      const ascan::ScanOptions o{.reverse = rev};
      EXPECT_GRADCHECK([=](const auto& x) {
        return ascan::associative_scan(ascan::generic([](const auto& A, const auto& B) { return matmul(A, B); }), x[0], 0, o);
      }, {randn({T, 2, 2}, 1)});
      // f(A, B) = A W B is associative for any W; W is a parameter captured by the combine.
      EXPECT_GRADCHECK([=](const VarList& x) {
        const VD W = x[1];
        return ascan::associative_scan(ascan::generic([W](const auto& A, const auto& B) { return matmul(matmul(A, W), B); }),
                                       x[0], 1, o);
      }, {randn({2, T, 2, 2}, 2) * 0.7, randn({2, 2}, 3)});
    }
}

TEST(AdScan, LeavesWithoutGradAndPartialLosses) {
  VD a = ad::constant(uniform({5, 3}, 1, 0.5, 1.0));
  VD b = ad::param(randn({5, 3}, 2));
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
  EXPECT_FALSE(ya.requires_grad() && !b.requires_grad());
  ad::backward(ad::sum(yb));
  // h_t = a_t h_{t-1} + b_t: d sum(h) / d b_t = 1 + a_{t+1} + a_{t+1} a_{t+2} + ...
  for (int64_t j = 0; j < 3; ++j) {
    double acc = 0;
    for (int64_t t = 4; t >= 0; --t) {
      acc = 1.0 + (t < 4 ? a.value()(t + 1, j) * acc : 0.0);
      EXPECT_NEAR(b.grad()(t, j), acc, 1e-12);
    }
  }
  EXPECT_EQ(a.grad(), TD::zeros({5, 3}));  // constants get nothing
}

TEST(AdScan, ScanTwiceAndAlongTwoDims) {
  EXPECT_GRADCHECK([](const auto& x) {
    auto y = ascan::associative_scan(ascan::logaddexp, x[0], 0);
    return ascan::associative_scan(ascan::add, y, 1, {.reverse = true});
  }, {randn({4, 5}, 1)});
  EXPECT_GRADCHECK([](const auto& x) {
    auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 2);
    return ascan::associative_scan(ascan::mul, yb, 0);
  }, {uniform({3, 2, 6}, 2, -0.9, 0.9), uniform({3, 2, 6}, 3, 0.5, 1.5)});
}

TEST(AdScan, ErrorsMatchThePlainScan) {
  // Both throw: a bad dim, mismatched lengths.
  EXPECT_TRUE(ad::gradcheck([](const auto& x) { return ascan::associative_scan(ascan::add, x[0], 2); }, {randn({3, 4}, 1)}).ok);
  EXPECT_TRUE(ad::gradcheck([](const auto& x) {
    return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 0);
  }, {randn({3, 4}, 1), randn({5, 4}, 2)}).ok);
  VD x = ad::param(randn({3, 4}, 1));
  try {
    ad::associative_scan(ascan::add, x, -3);
    FAIL() << "expected ascan::Error";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::StartsWith("ascan::ad::associative_scan(): dim -3"));
  }
}

TEST(AdScan, EmptyScanHasEmptyGradients) {
  VD x = ad::param(TD::zeros({0, 3}));
  const VD y = ascan::associative_scan(ascan::add, x, 0);
  EXPECT_EQ(y.shape(), (ascan::Shape{0, 3}));
  ad::backward(ad::sum(y));
  EXPECT_EQ(x.grad().shape(), (ascan::Shape{0, 3}));
}

// Wide layouts (>= 256 independent columns) take the one-pass column sweep; few columns take the
// two-pass segment sweep. Both must give the same gradients (on any layout), and the column sweep
// must pass gradcheck.
template <size_t L, class F>
void expect_paths_agree(const F& f, const std::vector<TD>& xs, int64_t dim, bool reverse, uint64_t seed) {
  using X = decltype(ascan::ad::detail::as_tuple<L>(xs));
  using Elem = std::conditional_t<L == 1, double, typename ascan::detail::Tree<X>::Elem>;
  std::vector<TD> ys;
  if constexpr (L == 1) {
    ys = {ascan::associative_scan(f, xs[0], dim, {.reverse = reverse})};
  } else {
    ys = ascan::ad::detail::as_vector<double>(
        ascan::associative_scan(f, ascan::ad::detail::as_tuple<L>(xs), dim, {.reverse = reverse}));
  }
  std::vector<TD> gbar;
  for (size_t l = 0; l < L; ++l) gbar.push_back(randn(ys[l].shape(), seed + l));
  std::vector<ascan::Shape> shapes;
  for (const auto& x : xs) shapes.push_back(x.shape());
  const auto plan = ascan::detail::make_pointwise_plan(shapes, dim, "test");
  std::array<bool, L> need;
  need.fill(true);
  const auto a = ascan::ad::detail::pointwise_vjp_columns<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
  const auto b = ascan::ad::detail::pointwise_vjp_segments<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
  for (size_t l = 0; l < L; ++l) EXPECT_TRUE(ascan::allclose(a[l], b[l], 1e-10, 1e-10)) << "leaf " << l;
}

TEST(AdScan, ColumnSweepAndSegmentSweepAgree) {
  for (bool rev : {false, true}) {
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({3, 40, 100}, 1, -1.0, 1.0), randn({3, 40, 100}, 2)}, 1, rev, 3);
    expect_paths_agree<4>(s5, {uniform({50, 300}, 4, -0.7, 0.7), uniform({50, 300}, 5, -0.7, 0.7), randn({50, 300}, 6),
                               randn({50, 300}, 7)}, 0, rev, 8);
    expect_paths_agree<1>(ascan::logaddexp, {randn({2, 300, 17}, 9)}, 1, rev, 10);
  }
}

// Rows of fewer than 16 lanes run the column sweep's lane loops over 8 or 16 lanes. Packed rows
// ([T, R]: a step's lanes next to the following step's) are read and written in place as
// windows reaching into the steps swept after them, the first steps of a column through staging
// buffers; other layouts are staged at every step. Every width 3..16 in both directions, short
// columns (every step staged), several columns at once on two threads (a window must not reach
// into another column), layouts that are not packed, leaves of 1 and 4 components, leaves
// constant over the lanes or along the scan: against the segment sweep, an independent
// algorithm, in float64.
TEST(AdScan, ColumnSweepNarrowRows) {
  for (bool rev : {false, true}) {
    // 32 lanes: runs under 48 lanes are swept in items of 16; 64: one item of a runtime count.
    for (int64_t R : {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32, 64}) {
      expect_paths_agree<2>(ascan::linear_recurrence, {uniform({41, R}, R, -1.0, 1.0), randn({41, R}, 100 + R)}, 0, rev,
                            200 + R);
    }
    for (int64_t T : {1, 2, 3, 4})
      expect_paths_agree<2>(ascan::linear_recurrence, {uniform({T, 3}, 1, -1.0, 1.0), randn({T, 3}, 2)}, 0, rev, 3);
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({3, 40, 7}, 4, -1.0, 1.0), randn({3, 40, 7}, 5)}, 1, rev, 6);
    // Leaves broadcast over the middle dim: runs of 3 lanes 12 apart (not packed), 4 columns.
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({30, 1, 3}, 7, -1.0, 1.0), randn({30, 4, 3}, 8)}, 0, rev, 9);
    expect_paths_agree<1>(ascan::logaddexp, {randn({60, 5}, 13)}, 0, rev, 14);
    expect_paths_agree<4>(s5, {uniform({40, 6}, 15, -0.7, 0.7), uniform({40, 6}, 16, -0.7, 0.7), randn({40, 6}, 17),
                               randn({40, 6}, 18)}, 0, rev, 19);
    // A decay constant over the lanes (one value per step), and one constant along the scan
    // (read through the staging buffer at every step; its gradient summed per lane).
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({50, 1}, 20, 0.3, 0.9), randn({50, 7}, 21)}, 0, rev, 22);
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({1, 7}, 23, 0.3, 0.9), randn({50, 7}, 24)}, 0, rev, 25);
  }
}

// Gradients of MemoryPolicy::stream_min_bytes or more leave the column sweep through scratch rows copied with
// streaming stores: wide items ([T, 1024]: items of 512 lanes; [T, 256]: two of 128), items of
// 16 lanes ([T, 32]), two items per row with a decay constant along the scan (its gradient
// summed, not streamed), against the segment sweep, both directions.
TEST(AdScan, ColumnSweepStreamsLargeGradients) {
  const int64_t bytes = ascan::detail::MemoryPolicy::stream_min_bytes;  // float64, two leaves: 16 bytes per element
  for (bool rev : {false, true}) {
    const int64_t T1 = bytes / (16 * 1024) + 3, T2 = bytes / (16 * 256) + 1, T3 = bytes / (8 * 1000) + 1;
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({T1, 1024}, 1, -1.0, 1.0), randn({T1, 1024}, 2)}, 0, rev, 3);
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({T2, 256}, 4, -1.0, 1.0), randn({T2, 256}, 5)}, 0, rev, 6);
    const int64_t T4 = bytes / (16 * 32) + 1;
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({T4, 32}, 10, -1.0, 1.0), randn({T4, 32}, 11)}, 0, rev, 12);
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({1, 1000}, 7, 0.3, 0.9), randn({T3, 1000}, 8)}, 0, rev, 9);
  }
}

// Many columns of one lane, contiguous along the scan ([B, T] scanned along T, B >= 256): the
// segment sweep with each column one whole segment (its first pass skipped, operands staged by
// register transposes), against the column sweep (one padded lane per column); through the
// tape against float64 finite differences.
TEST(AdScan, ManyColumnsAlongTheScan) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  for (bool rev : {false, true}) {
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({300, 40}, 1, -1.0, 1.0), randn({300, 40}, 2)}, 1, rev, 3);
    // Columns longer than a segment of 512 steps, decays near 1.
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({260, 600}, 4, 0.99, 0.999), randn({260, 600}, 5)}, 1, rev,
                          6);
    // One decay for all (its gradient summed over every step and column).
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({1, 1}, 7, 0.3, 0.9), randn({256, 50}, 8)}, 1, rev, 9);
    expect_paths_agree<1>(ascan::logaddexp, {randn({270, 33}, 10)}, 1, rev, 11);
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 1, {.reverse = rev});
    }, {uniform({256, 9}, 12, -1.0, 1.0), randn({256, 9}, 13)}, fast);
  }
}

// The same narrow rows through the tape against float64 finite differences, and with a loss on
// one output only (no upstream gradient for the other) against the recurrence as a loop on
// the tape.
TEST(AdScan, NarrowRowsGradients) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  for (bool rev : {false, true}) {
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 0, {.reverse = rev});
    }, {uniform({37, 7}, 1, -1.0, 1.0), randn({37, 7}, 2)}, fast);
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(welford, std::tuple{x[0], x[1], x[2]}, 1, {.reverse = rev});
    }, {uniform({2, 19, 5}, 3, 1.0, 3.0), randn({2, 19, 5}, 4), uniform({2, 19, 5}, 5, 0.0, 1.0)}, fast);
  }
  const int64_t T = 60, R = 7;
  const TD a = uniform({1, R}, 6, 0.5, 0.99), b = randn({T, R}, 7), w = randn({T, R}, 8);
  VD va = ad::param(a), vb = ad::param(b);
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{va, vb}, 0);
  ad::backward(ad::sum(yb * ad::constant(w)));
  VD va2 = ad::param(a), vb2 = ad::param(b), h;
  std::vector<VD> hs;
  for (int64_t t = 0; t < T; ++t) {
    VD bt = ad::select(vb2, 0, t);
    h = t == 0 ? bt : ad::select(va2, 0, 0) * h + bt;
    hs.push_back(h);
  }
  ad::backward(ad::sum(ad::stack(hs, 0) * ad::constant(w)));
  EXPECT_TRUE(ascan::allclose(vb.grad(), vb2.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(ascan::allclose(va.grad(), va2.grad(), 1e-12, 1e-12));
}

// The linear recurrence with an upstream gradient on y^b alone (the usual loss: the products y^a
// unused) in rows of fewer than 1024 lanes (16 with a decay constant along the scan) takes its
// adjoint as a linear-recurrence scan in the other direction plus an elementwise pass
// (first_order_vjp_by_scan). Against float64 finite differences with random cotangents on y^b:
// lengths 1, 2, 3 and odd ones; rows of 1, 2, 7 and 300 lanes (two work items of 256 and 44);
// several columns ([B, T] along T, [2, T, 5] along T); rows of 2 lanes 6 apart (a decay broadcast
// over the middle dim); a decay constant along the scan, over the lanes or everywhere, a b
// constant along the scan or over the lanes; a decay that is not a parameter; both directions.
TEST(AdScan, LinearRecurrenceAdjointAsAScan) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  struct Case {
    ascan::Shape a, b;
    int64_t dim;
  };
  const Case cases[] = {{{1}, {1}, 0},         {{2}, {2}, 0},          {{3}, {3}, 0},
                        {{37}, {37}, 0},       {{41, 2}, {41, 2}, 0},  {{23, 7}, {23, 7}, 0},
                        {{4, 19}, {4, 19}, 1}, {{2, 13, 5}, {2, 13, 5}, 1}, {{1}, {29}, 0},
                        {{1, 7}, {17, 7}, 0},  {{17, 1}, {17, 7}, 0},   {{1, 1}, {3, 11}, -1},
                        {{19, 3}, {1, 3}, 0},  {{19, 3}, {19, 1}, 0},   {{13, 3, 1}, {13, 3, 2}, 0},
                        {{9, 300}, {9, 300}, 0}};
  for (bool rev : {false, true}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << "a " << ascan::format_shape(c.a) << ", b " << ascan::format_shape(c.b)
                                      << ", dim " << c.dim << ", rev " << rev);
      EXPECT_GRADCHECK([rev, dim = c.dim](const auto& x) {
        return std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, dim, {.reverse = rev}));
      }, {uniform(c.a, 1, -1.2, 1.2), randn(c.b, 2)}, fast);
      // The decay as a constant: only ∂b.
      const TD a = uniform(c.a, 3, -1.2, 1.2);
      EXPECT_GRADCHECK([rev, dim = c.dim, a](const auto& x) {
        using V = std::decay_t<decltype(x[0])>;
        V ca;
        if constexpr (std::is_same_v<V, VD>) ca = ad::constant(a);
        else ca = a;
        return std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{ca, x[0]}, dim, {.reverse = rev}));
      }, {randn(c.b, 4)}, fast);
    }
  }
}

// The same path over many blocks of its scan (the gradients computed from each block's rows as
// they become final, the blocks chained through a side buffer), in float64 against the adjoint
// as a sequential loop, g_t = ḡ_t + a_{t+1} g_{t+1}, ∂b_t = g_t, ∂a_t = g_t y^b_{t-1}: one long
// sequence, [T, 3], [T, 300] and [3, T] (columns along T), a decay constant along the scan
// (summed per lane and block) or a b constant along it, also in rows of 700 lanes (a row's sums
// held per lane), outputs large enough to be streamed (one sequence, also with a summed decay,
// whose own rows are never stored; [T, 128]; [T, 2048] in groups of 1024 lanes, streamed row by
// row); rows of 16 to 127 lanes (the line sweep a cache line of lanes at a time, with a remainder
// of lanes, a decay constant along the scan or one value, several columns); both directions.
// And a product of decays that
// overflows: with decays of 2 in float32, the scan's product of the later decays is infinite far
// from the end, and a zero cotangent at the last step must not turn it into NaN (the loss here
// only sees early steps).
TEST(AdScan, LinearRecurrenceAdjointAsAScanLong) {
  struct Case {
    ascan::Shape a, b;
    int64_t dim;
  };
  // The last length streams the scan's outputs (16 MiB or more), from a view one element into
  // the gradient's buffer in one direction.
  const int64_t streamed = ascan::detail::MemoryPolicy::stream_min_bytes / 16 + 7;
  for (const Case& c : {Case{{30001}, {30001}, 0}, Case{{20011, 3}, {20011, 3}, 0}, Case{{3, 9001}, {3, 9001}, 1},
                        Case{{1}, {30001}, 0}, Case{{1, 3}, {20011, 3}, 0}, Case{{20011, 3}, {1, 3}, 0},
                        Case{{4001, 300}, {4001, 300}, 0}, Case{{streamed / 128 + 1, 128}, {streamed / 128 + 1, 128}, 0},
                        Case{{streamed / 2048 + 1, 2048}, {streamed / 2048 + 1, 2048}, 0},
                        Case{{2001, 700}, {1, 700}, 0}, Case{{1, 700}, {2001, 700}, 0},
                        Case{{2001, 20}, {2001, 20}, 0}, Case{{1, 33}, {2001, 33}, 0}, Case{{1, 1}, {2001, 64}, 0},
                        Case{{3, 501, 40}, {3, 501, 40}, 1},
                        Case{{streamed}, {streamed}, 0}, Case{{1}, {streamed}, 0}}) {
    for (bool rev : {false, true}) {
      SCOPED_TRACE(testing::Message() << "a " << ascan::format_shape(c.a) << ", b " << ascan::format_shape(c.b)
                                      << ", rev " << rev);
      // The output's shape: one of the two (the other is broadcast to it).
      const ascan::Shape& shape = ascan::shape_numel(c.a) > ascan::shape_numel(c.b) ? c.a : c.b;
      const TD a = uniform(c.a, 5, 0.9, 1.05), b = randn(c.b, 6), w = randn(shape, 7);
      VD va = ad::param(a), vb = ad::param(b);
      auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{va, vb}, c.dim, {.reverse = rev});
      ad::backward(yb, w);
      // The reference, on the [columns, T, lanes] view of the output, a and b broadcast to it.
      const int64_t axis = c.dim, T = shape[axis], lanes = axis + 1 < static_cast<int64_t>(shape.size()) ? shape[axis + 1] : 1;
      const int64_t cols = ascan::shape_numel(shape) / (T * lanes);
      // a at output offset i: one value, one per lane (constant along the scan), or its own.
      const auto at_a = [&](int64_t i) {
        return a.numel() == 1 ? a.data()[0] : a.shape()[axis] == 1 ? a.data()[i % lanes] : a.data()[i];
      };
      TD da = TD::zeros(shape), db = TD::zeros(shape);
      for (int64_t col = 0; col < cols; ++col)
        for (int64_t j = 0; j < lanes; ++j) {
          const auto idx = [&](int64_t s) { return (col * T + (rev ? T - 1 - s : s)) * lanes + j; };
          double g = 0;
          for (int64_t s = T - 1; s >= 0; --s) {
            g = w.data()[idx(s)] + (s + 1 < T ? at_a(idx(s + 1)) * g : 0.0);
            db.data()[idx(s)] = g;
            da.data()[idx(s)] = s > 0 ? g * yb.value().data()[idx(s - 1)] : 0.0;
          }
        }
      EXPECT_TRUE(ascan::allclose(vb.grad(), ascan::reduce_to(db, b.shape()), 1e-9, 1e-9));
      const TD da_ref = ascan::reduce_to(da, a.shape());
      EXPECT_TRUE(ascan::allclose(va.grad(), da_ref, 1e-9, 1e-9))
          << (a.numel() == 1 ? testing::Message() << va.grad().data()[0] << " vs " << da_ref.data()[0] : testing::Message());
    }
  }
  for (bool rev : {false, true}) {
    const int64_t T = 300, early = 40;  // 2^40 fits a float; 2^299 does not
    auto a = ascan::Tensor<float>::full({T}, 2.0f), b = ascan::Tensor<float>::zeros({T});
    auto w = ascan::Tensor<float>::zeros({T});
    const TD w64 = randn({early}, 8);
    for (int64_t s = 0; s < early; ++s) w.data()[rev ? T - 1 - s : s] = static_cast<float>(w64.data()[s]);
    ad::Var<float> va = ad::param(a), vb = ad::param(b);
    auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{va, vb}, 0, {.reverse = rev});
    ad::backward(yb, w);
    double g = 0;
    for (int64_t s = T - 1; s >= 0; --s) {
      const int64_t i = rev ? T - 1 - s : s;
      g = w.data()[i] + 2.0 * g;
      ASSERT_NEAR(vb.grad().data()[i], g, 1e-5 * std::abs(g) + 1e-30) << "step " << s << ", rev " << rev;
      ASSERT_EQ(va.grad().data()[i], 0.0f) << "step " << s;  // y^b is zero
    }
  }
}

// The cumulative product takes the same adjoint as a scan on few columns of fewer than 8 lanes,
// with ∂x_0 = g_0 at the first step (y_{-1} = 1): against float64 finite differences, lengths 1,
// 2, 3 and odd ones, rows of 1, 2, 5 and 7 lanes, a few columns ([4, T] along T) (and rows of 15
// lanes, which take the column sweep), signs changing, exact zeros in x (the gradient of a
// product through a zero factor, which a division by x would lose), both directions; and at
// lengths of many blocks of the scan and of streamed outputs, and in rows of 1024 lanes or more
// (the line sweep), against the adjoint as a float64 sequential loop,
// g_t = ḡ_t + x_{t+1} g_{t+1}, ∂x_t = g_t y_{t-1}, ∂x_0 = g_0.
TEST(AdScan, CumulativeProductAdjointAsAScan) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  const std::pair<ascan::Shape, int64_t> cases[] = {{{1}, 0},     {{2}, 0},         {{3}, 0},       {{37}, 0},
                                                   {{41, 2}, 0}, {{23, 7}, 0},     {{9, 15}, 0},   {{4, 19}, 1},
                                                   {{2, 13, 5}, 1}, {{3, 11}, -1},
                                                   // rows of 48 to 1023 lanes (also by scan)
                                                   {{7, 64}, 0},   {{2, 5, 48}, 1},  {{4, 300}, 0}, {{5, 700}, 0}};
  for (bool rev : {false, true}) {
    for (const auto& c : cases) {
      const auto& shape = c.first;
      const int64_t dim = c.second;  // (a variable, not a binding: the lambdas below capture it)
      SCOPED_TRACE(testing::Message() << ascan::format_shape(shape) << ", dim " << dim << ", rev " << rev);
      TD x = uniform(shape, 1, -1.3, 1.3);
      EXPECT_GRADCHECK([rev, dim](const auto& v) { return ascan::associative_scan(ascan::mul, v[0], dim, {.reverse = rev}); },
                       {x}, fast);
      for (int64_t i = 0; i < x.numel(); i += 5) x.data()[i] = 0.0;  // every lane meets zeros
      EXPECT_GRADCHECK([rev, dim](const auto& v) { return ascan::associative_scan(ascan::mul, v[0], dim, {.reverse = rev}); },
                       {x}, fast);
    }
  }
  const int64_t streamed = ascan::detail::MemoryPolicy::stream_min_bytes / 8 + 7;  // 16 MiB of P, float64
  for (const auto& [shape, dim] : {std::pair{ascan::Shape{30001}, int64_t{0}}, std::pair{ascan::Shape{20011, 2}, int64_t{0}},
                                   std::pair{ascan::Shape{20011, 7}, int64_t{0}}, std::pair{ascan::Shape{2001, 300}, int64_t{0}},
                                   std::pair{ascan::Shape{3, 1001, 64}, int64_t{1}},
                                   std::pair{ascan::Shape{3, 9001}, int64_t{1}}, std::pair{ascan::Shape{streamed}, int64_t{0}},
                                   // rows of 1024 lanes or more: the sweep a line of lanes at a
                                   // time (items of 512 lanes and a remainder of 76, not whole
                                   // lines), also with streamed gradients
                                   std::pair{ascan::Shape{301, 1100}, int64_t{0}},
                                   std::pair{ascan::Shape{streamed / 1024 + 1, 1024}, int64_t{0}}}) {
    for (bool rev : {false, true}) {
      SCOPED_TRACE(testing::Message() << ascan::format_shape(shape) << ", rev " << rev);
      TD x = uniform(shape, 5, 0.9999, 1.0001), w = randn(shape, 7);
      x.data()[x.numel() / 2] = 0.0;  // one lane's products vanish from the middle on
      VD vx = ad::param(x);
      const VD y = ascan::associative_scan(ascan::mul, vx, dim, {.reverse = rev});
      ad::backward(y, w);
      const int64_t T = shape[dim], lanes = dim + 1 < static_cast<int64_t>(shape.size()) ? shape[dim + 1] : 1;
      const int64_t cols = ascan::shape_numel(shape) / (T * lanes);
      TD dx = TD::zeros(shape);
      for (int64_t col = 0; col < cols; ++col)
        for (int64_t j = 0; j < lanes; ++j) {
          const auto idx = [&](int64_t s) { return (col * T + (rev ? T - 1 - s : s)) * lanes + j; };
          double g = 0;
          for (int64_t s = T - 1; s >= 0; --s) {
            g = w.data()[idx(s)] + (s + 1 < T ? x.data()[idx(s + 1)] * g : 0.0);
            dx.data()[idx(s)] = s > 0 ? g * y.value().data()[idx(s - 1)] : g;
          }
        }
      EXPECT_TRUE(ascan::allclose(vx.grad(), dx, 1e-9, 1e-9));
    }
  }
}

// logaddexp's adjoint in closed form (float32 and float64): its Jacobians from one exponential
// per element, then the adjoint recurrence as a scan over many blocks, its Jacobians evaluated
// per block (rows under 1024 lanes: one sequence, [20011, 7], [2001, 300], [3, 1001, 64]), or
// swept backwards a row of lanes at a time (1024 lanes or more: [301, 1100] in items of 512
// lanes and a remainder). Through the tape against a
// long double sequential reference that uses the other closed form, A_t = exp(y_{t-1} - y_t),
// B_t = exp(x_t - y_t) (g_t = ḡ_t + A_{t+1} g_{t+1}, ∂x_t = B_t g_t, ∂x_0 = g_0): one long
// sequence, rows of 7, 300 and 1100 lanes, along a middle dim and along the last dim (also many
// sequences of 2 steps), lengths 1 and 2, both directions; float32 within a depth-scaled bound (8 sqrt(T) u32) of the same
// reference.
TEST(AdScan, LogAddExpAdjointClosedForm) {
  using LD = long double;
  const auto lae = [](LD a, LD b) { return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))); };
  const std::pair<ascan::Shape, int64_t> cases[] = {
      {{1}, 0},          {{2}, 0},           {{30001}, 0},      {{20011, 7}, 0}, {{2001, 300}, 0},
      {{301, 1100}, 0},  {{3, 1001, 64}, 1}, {{3, 9001}, 1},    {{30000, 2}, 1}};
  for (const auto& [shape, dim] : cases)
    for (bool rev : {false, true}) {
      SCOPED_TRACE(testing::Message() << ascan::format_shape(shape) << ", dim " << dim << ", rev " << rev);
      TD x = randn(shape, 11), w = randn(shape, 12);
      for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] *= 3.0;
      const int64_t T = shape[dim], lanes = dim + 1 < static_cast<int64_t>(shape.size()) ? shape[dim + 1] : 1;
      const int64_t cols = ascan::shape_numel(shape) / (T * lanes);
      TD ref = TD::zeros(shape);
      double scale = 0;
      for (int64_t col = 0; col < cols; ++col)
        for (int64_t j = 0; j < lanes; ++j) {
          const auto idx = [&](int64_t s) { return (col * T + (rev ? T - 1 - s : s)) * lanes + j; };
          std::vector<LD> y(T);
          for (int64_t s = 0; s < T; ++s) y[s] = s == 0 ? LD(x.data()[idx(0)]) : lae(y[s - 1], x.data()[idx(s)]);
          LD g = 0;
          for (int64_t s = T - 1; s >= 0; --s) {
            g = w.data()[idx(s)] + (s + 1 < T ? std::exp(y[s] - y[s + 1]) * g : LD(0));
            const LD dx = s > 0 ? std::exp(LD(x.data()[idx(s)]) - y[s]) * g : g;
            ref.data()[idx(s)] = static_cast<double>(dx);
            scale = std::max(scale, std::abs(static_cast<double>(dx)));
          }
        }
      VD vx = ad::param(x);
      ad::backward(ascan::associative_scan(ascan::logaddexp, vx, dim, {.reverse = rev}), w);
      EXPECT_TRUE(ascan::allclose(vx.grad(), ref, 1e-9, 1e-9));
      ad::Var<float> vx32 = ad::param(x.cast<float>());
      ad::backward(ascan::associative_scan(ascan::logaddexp, vx32, dim, {.reverse = rev}), w.cast<float>());
      // The float32 forward's y_t is off by a random walk of roundings (about sqrt(T) ulps of
      // |y|, which reaches about 12 here), which every B_t = exp(x_t - y_t) inherits: the
      // maximum errors measured 13-370 u32 x scale for T = 301..30001, and the same order for
      // the column and segment sweeps on dual numbers.
      const double bound = 0x1.0p-24 * 8 * std::sqrt(double(T)) * scale;
      const TD g32 = vx32.grad().cast<double>();
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(g32.data()[i], ref.data()[i], bound) << "i=" << i;
    }
}

// Infinite inputs: the closed-form Jacobians take the values the combine's evaluation on dual
// numbers gives (a NaN difference, where the combine returns left + right, has Jacobians 1 and 1;
// exp(-inf) = 0 gives 0 and 1), so the new path agrees with the column sweep on duals: columns
// starting with -inf (equal infinities at their first steps), one of -inf throughout, a +inf in
// the middle, two +inf in a row; float64, both directions, [40, 6], [40, 20], [40, 1030] (the
// line sweep) and one sequence.
TEST(AdScan, LogAddExpAdjointInfinities) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const ascan::Shape& shape : {ascan::Shape{40, 6}, ascan::Shape{40}, ascan::Shape{40, 20}, ascan::Shape{40, 1030}})
    for (bool rev : {false, true}) {
      SCOPED_TRACE(testing::Message() << ascan::format_shape(shape) << ", rev " << rev);
      const int64_t lanes = shape.size() > 1 ? shape[1] : 1;
      TD x = randn(shape, 21);
      const auto at = [&](int64_t s, int64_t j) -> double& { return x.data()[(rev ? 39 - s : s) * lanes + j]; };
      for (int64_t s = 0; s < 3; ++s) at(s, 0) = -inf;
      at(20, 0) = inf;
      if (lanes > 1) {
        for (int64_t s = 0; s < 40; ++s) at(s, 1) = -inf;
        at(10, 2) = at(11, 2) = inf;
        at(0, 3) = -inf;
      }
      const std::vector<TD> xs{x};
      const std::vector<TD> ys{ascan::associative_scan(ascan::logaddexp, x, 0, {.reverse = rev})};
      const std::vector<TD> gbar{randn(shape, 22)};
      const auto plan = ascan::detail::make_pointwise_plan({shape}, 0, "test");
      const auto got = ascan::ad::detail::pointwise_scan_vjp<double, 1>(ascan::logaddexp, plan, xs, ys, gbar, {true}, rev);
      const auto want = ascan::ad::detail::pointwise_vjp_columns<double, 1>(ascan::logaddexp, plan, xs, ys, gbar, {true}, rev);
      for (int64_t i = 0; i < x.numel(); ++i) {
        ASSERT_TRUE(std::isfinite(want[0].data()[i])) << "i=" << i;
        ASSERT_NEAR(got[0].data()[i], want[0].data()[i], 1e-12 * (1 + std::abs(want[0].data()[i]))) << "i=" << i;
      }
    }
}

// Long columns are cut into segments (512 steps; 256 for float64 S5, whose tile buffers would
// outgrow their budget), chained by their (M, c): lengths with a short last segment (one step
// for S5), every leaf kind (full, constant along the axis and summed across segments,
// constant over the lanes), both directions, against float64 finite differences; and against the
// column sweep on the same long layouts. Decays are close to 1 (products over a segment of about
// 0.4), so what a segment receives from the next one matters; the complex decays rotate, so M is
// not symmetric.
TEST(AdScan, SegmentSweepAcrossSegments) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  for (bool rev : {false, true}) {
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 0, {.reverse = rev});
    }, {uniform({1100}, 1, 0.997, 0.9995), randn({1100}, 2)}, fast);
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 0, {.reverse = rev});
    }, {uniform({1, 3}, 3, 0.997, 0.9995), randn({1030, 3}, 4)}, fast);
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, -1, {.reverse = rev});
    }, {uniform({2, 1030}, 5, 0.997, 0.9995), randn({1, 1030}, 6)}, fast);
    EXPECT_GRADCHECK([rev](const auto& x) {
      return ascan::associative_scan(s5, std::tuple{x[0], x[1], x[2], x[3]}, 0, {.reverse = rev});
    }, {uniform({1025}, 7, 0.997, 0.998), uniform({1025}, 8, -0.05, 0.05), randn({1025}, 9), randn({1025}, 10)}, fast);
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({1100, 5}, 11, 0.997, 0.9995), randn({1100, 5}, 12)}, 0, rev, 13);
    expect_paths_agree<4>(s5, {uniform({1025, 3}, 14, 0.997, 0.998), uniform({1025, 3}, 15, -0.05, 0.05),
                               randn({1025, 3}, 16), randn({1025, 3}, 17)}, 0, rev, 18);
    expect_paths_agree<1>(ascan::logaddexp, {randn({2, 1537}, 19)}, 1, rev, 20);
    // 20 columns of 3 segments: a lane's successor segment (20 lanes on) lies in another tile of
    // 16, which the chain must have finished first.
    expect_paths_agree<2>(ascan::linear_recurrence, {uniform({1100, 20}, 21, 0.997, 0.9995), randn({1100, 20}, 22)}, 0,
                          rev, 23);
  }
}

// The segment sweep is one chain of tiles over the pool: its gradients are bitwise the same for
// any thread count (more threads than cores included), and a combine that throws in some tile
// stops the chain and reaches the caller without hanging the tiles waiting on it.
struct ThrowsOnPoison {
  static constexpr double kPoison = 12345.0;
  template <class A, class B>
  auto operator()(const A& a, const B& b) const {
    if constexpr (!std::is_arithmetic_v<B>) {
      if (b.v == kPoison) throw std::runtime_error("combine saw the poisoned element");
    }
    return a + b * 0.5;
  }
};

TEST(AdScan, SegmentSweepChainAcrossThreads) {
  const int saved = ascan::num_threads();
  const auto grads = [](const std::vector<TD>& xs, int64_t dim, bool rev, int threads) {
    ascan::set_num_threads(threads);
    auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{xs[0], xs[1]}, dim, {.reverse = rev});
    const std::vector<TD> gbar{randn(ya.shape(), 31), randn(yb.shape(), 32)};
    const auto plan = ascan::detail::make_pointwise_plan({xs[0].shape(), xs[1].shape()}, dim, "test");
    return ascan::ad::detail::pointwise_vjp_segments<std::tuple<double, double>, 2>(
        ascan::linear_recurrence, plan, xs, {ya, yb}, gbar, {true, true}, rev);
  };
  for (const ascan::Shape& shape : {ascan::Shape{512 * 70 + 5}, ascan::Shape{3000, 7}}) {
    const std::vector<TD> xs{uniform(shape, 1, 0.99, 0.9995), randn(shape, 2)};
    for (bool rev : {false, true}) {
      const auto one = grads(xs, 0, rev, 1);
      for (int threads : {2, 3}) {
        const auto many = grads(xs, 0, rev, threads);
        for (size_t l = 0; l < 2; ++l)
          EXPECT_TRUE(one[l] == many[l]) << threads << " threads, leaf " << l << ", rev " << rev;
      }
    }
  }
  ascan::set_num_threads(2);
  const int64_t n = 512 * 40;
  for (int64_t where : {int64_t{3}, n / 2, n - 2}) {
    auto x = randn({n}, 3);
    x.data()[where] = ThrowsOnPoison::kPoison;
    const auto y = ascan::associative_scan([](double a, double b) { return a + b * 0.5; }, x, 0);
    const auto plan = ascan::detail::make_pointwise_plan({x.shape()}, 0, "test");
    try {
      ascan::ad::detail::pointwise_vjp_segments<double, 1, double>(ThrowsOnPoison{}, plan, {x}, {y}, {randn({n}, 4)}, {true},
                                                          false);
      ADD_FAILURE() << "no exception, poison at " << where;
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "combine saw the poisoned element");
    }
  }
  ascan::set_num_threads(saved);
}

// The segment sweep stages contiguous streams in blocks of 8 (float) or 4 (double) lanes with
// register transposes and writes ∂x back the same way; partial stages, a column's first stage
// (no y_{-1}) and strided layouts go element by element. Cases: one long sequence of 21
// segments (three tiles of 8 lanes, the last partial), columns of a [3, T] layout (lanes of different
// columns in one block), a decay constant along the scan (a broadcast stream), both directions.
// float64 must match the column sweep; float32 the float64 column sweep on the same values.
template <class T>
std::vector<TD> linrec_segment_grads(const std::vector<TD>& xs64, int64_t dim, bool reverse, const std::vector<TD>& gbar64) {
  const auto cast = [](const TD& x) {
    auto y = ascan::Tensor<T>::empty(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<T>(x.data()[i]);
    return y;
  };
  const std::vector<ascan::Tensor<T>> xs{cast(xs64[0]), cast(xs64[1])}, gbar{cast(gbar64[0]), cast(gbar64[1])};
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{xs[0], xs[1]}, dim, {.reverse = reverse});
  const auto plan = ascan::detail::make_pointwise_plan({xs[0].shape(), xs[1].shape()}, dim, "test");
  using Elem = std::tuple<T, T>;
  const auto g = ascan::ad::detail::pointwise_vjp_segments<Elem, 2>(ascan::linear_recurrence, plan, xs, {ya, yb}, gbar,
                                                                    {true, true}, reverse);
  std::vector<TD> out;
  for (const auto& t : g) {
    auto d = TD::empty(t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) d.data()[i] = static_cast<double>(t.data()[i]);
    out.push_back(d);
  }
  return out;
}

TEST(AdScan, SegmentSweepBlockStagingFloat32AndFloat64) {
  const int64_t T = 512 * 20 + 37;
  struct Case { std::vector<TD> xs; int64_t dim; };
  const std::vector<Case> cases = {
      {{uniform({T}, 1, 0.997, 0.9995), randn({T}, 2)}, 0},
      {{uniform({3, 5000}, 3, 0.99, 0.9995), randn({3, 5000}, 4)}, 1},
      {{uniform({1}, 5, 0.998, 0.999), randn({T}, 6)}, 0},
  };
  for (const Case& c : cases) {
    for (bool rev : {false, true}) {
      // Round the inputs to float32 first, so both precisions see the same values.
      std::vector<TD> xs;
      for (const TD& x : c.xs) {
        auto r = TD::empty(x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) r.data()[i] = static_cast<float>(x.data()[i]);
        xs.push_back(r);
      }
      auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{xs[0], xs[1]}, c.dim, {.reverse = rev});
      std::vector<TD> gbar{randn(ya.shape(), 7), randn(yb.shape(), 8)};
      for (auto& g : gbar)
        for (int64_t i = 0; i < g.numel(); ++i) g.data()[i] = static_cast<float>(g.data()[i]);
      const auto plan = ascan::detail::make_pointwise_plan({xs[0].shape(), xs[1].shape()}, c.dim, "test");
      const auto ref = ascan::ad::detail::pointwise_vjp_columns<std::tuple<double, double>, 2>(
          ascan::linear_recurrence, plan, xs, {ya, yb}, gbar, {true, true}, rev);
      const auto g64 = linrec_segment_grads<double>(xs, c.dim, rev, gbar);
      const auto g32 = linrec_segment_grads<float>(xs, c.dim, rev, gbar);
      for (size_t l = 0; l < 2; ++l) {
        EXPECT_TRUE(ascan::allclose(g64[l], ref[l], 1e-10, 1e-10)) << "float64, leaf " << l << ", dim " << c.dim << ", rev " << rev;
        // float32 through ~10^4 steps of a decay near 1: relative error of a few 1e-5.
        EXPECT_TRUE(ascan::allclose(g32[l], ref[l], 1e-3, 1e-3)) << "float32, leaf " << l << ", dim " << c.dim << ", rev " << rev;
      }
    }
  }
}

TEST(AdScan, ColumnSweepPassesGradcheck) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  EXPECT_GRADCHECK([](const auto& x) { return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 1); },
                   {uniform({2, 30, 300}, 1, -1.0, 1.0), randn({2, 30, 300}, 2)}, fast);
  EXPECT_GRADCHECK([](const auto& x) {
    return ascan::associative_scan(welford, std::tuple{x[0], x[1], x[2]}, 0, {.reverse = true});
  }, {uniform({20, 260}, 3, 1.0, 3.0), randn({20, 260}, 4), uniform({20, 260}, 5, 0.0, 1.0)}, fast);
}

// Broadcast leaves in the column sweep: a decay constant over the lanes (gathered per step), one
// constant along the scan axis (summed over the steps in the lanes), a scalar, one broadcast over
// the leading dim (reduced from a full-shape gradient); partial losses (one output without an
// upstream gradient) and leaves that need no gradient.
TEST(AdScan, ColumnSweepWithBroadcastLeaves) {
  const ascan::ad::GradcheckOptions fast{.fast = true, .num_directions = 6};
  const auto linrec = [](int64_t dim, bool rev) {
    return [=](const auto& x) {
      return ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, dim, {.reverse = rev});
    };
  };
  for (bool rev : {false, true}) {
    EXPECT_GRADCHECK(linrec(1, rev), {uniform({2, 9, 1}, 1, 0.3, 0.9), randn({2, 9, 600}, 2)}, fast);
    // 600 lanes: two work items per column, so lane offsets within a run are exercised.
    EXPECT_GRADCHECK(linrec(1, rev), {uniform({2, 1, 600}, 3, 0.3, 0.9), randn({2, 9, 600}, 4)}, fast);
    EXPECT_GRADCHECK(linrec(-2, rev), {uniform({1, 1, 1}, 5, 0.3, 0.9), randn({2, 9, 300}, 6)}, fast);
    EXPECT_GRADCHECK(linrec(1, rev), {uniform({1, 9, 300}, 7, 0.3, 0.9), randn({3, 9, 1}, 8)}, fast);
    EXPECT_GRADCHECK(linrec(0, rev), {uniform({9, 1}, 9, 0.3, 0.9), randn({9, 260}, 10)}, fast);
  }
  // Only the second output carries a loss; the decay is a constant: the sweep must leave it alone
  // and give b the same gradient as a float64 sequential loop on the tape.
  const TD a = uniform({2, 1, 300}, 11, 0.3, 0.9), b = randn({2, 9, 300}, 12), w = randn({2, 9, 300}, 13);
  VD va = ad::constant(a), vb = ad::param(b);
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{va, vb}, 1);
  ad::backward(ad::sum(yb * ad::constant(w)));
  VD vb2 = ad::param(b), h;
  std::vector<VD> hs;
  for (int64_t t = 0; t < 9; ++t) {
    VD bt = ad::select(vb2, 1, t);
    h = t == 0 ? bt : ad::select(ad::constant(a), 1, 0) * h + bt;
    hs.push_back(h);
  }
  ad::backward(ad::sum(ad::stack(hs, 1) * ad::constant(w)));
  EXPECT_TRUE(ascan::allclose(vb.grad(), vb2.grad(), 1e-12, 1e-12));
}

// float32 gradients against float64 ones at long lengths. With decays a in [0.5, 0.99] the
// adjoint λ_t = ḡ_t + a_{t+1} λ_{t+1} sums a geometric series of effective depth
// D = 1 / (1 - 0.99) = 100 terms, each term a product of up to D float32 factors: the worst-case
// rounding error is about u32 * D relative to the largest gradient (u32 = 2^-24), independent
// of T — the blocked scan does not accumulate error along the whole sequence.
// The same for rows: [T, 7], [T, 256] and [T, 1024]. With the loss on y^b alone one long
// sequence and [T, 7] take the adjoint as a scan (first_order_vjp_by_scan), [T, 256] and
// [T, 1024] the sweep a line of lanes at a time (first_order_vjp_lines, items of 512 lanes).
TEST(AdScan, Float32GradientsMatchFloat64) {
  const double u32 = 0x1.0p-24, depth = 100;
  for (const ascan::Shape& shape : {ascan::Shape{1000}, ascan::Shape{100000}, ascan::Shape{20000, 7}, ascan::Shape{3000, 256},
                                   ascan::Shape{800, 1024}}) {
    const int64_t T = shape.front(), n = ascan::shape_numel(shape);
    const TD a64 = uniform(shape, 1, 0.5, 0.99), b64 = randn(shape, 2), w64 = randn(shape, 3);
    auto grads = [&](auto tag) {
      using S = decltype(tag);
      auto a = ad::param(a64.cast<S>()), b = ad::param(b64.cast<S>());
      auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
      ad::backward(ad::sum(yb * ad::constant(w64.cast<S>())));
      return std::pair{a.grad().template cast<double>(), b.grad().template cast<double>()};
    };
    const auto [ga32, gb32] = grads(float{});
    const auto [ga64, gb64] = grads(double{});
    double scale_a = 0, scale_b = 0;
    for (int64_t i = 0; i < n; ++i) {
      scale_a = std::max(scale_a, std::abs(ga64.data()[i]));
      scale_b = std::max(scale_b, std::abs(gb64.data()[i]));
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(gb32.data()[i], gb64.data()[i], u32 * depth * scale_b) << "T=" << T << " i=" << i;
      ASSERT_NEAR(ga32.data()[i], ga64.data()[i], u32 * depth * scale_a) << "T=" << T << " i=" << i;
    }
  }
}

}  // namespace
