// test_vjp.cpp — ascan::associative_scan_vjp (the host adjoint without a tape) against central
// differences of the sequential reference scan (reference.hpp) in float64, with random
// cotangents; and Tensor::external (elements another library owns).
#include <ascan/ascan.hpp>
#include <ascan/vjp.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

using ascan::Tensor;
using TD = Tensor<double>;

// <w, ref(x)> summed over leaves, for the reference scan of combine f with element structure E.
template <class E, class F>
double pairing(const F& f, const std::vector<TD>& xs, const std::vector<TD>& ws, int64_t dim, bool reverse) {
  std::vector<ref::Leaf<double>> leaves;
  for (const auto& x : xs) leaves.push_back(ref::leaf<double>(x));
  const auto ys = ref::pointwise<E>(f, leaves, dim, reverse);
  double s = 0;
  for (size_t l = 0; l < ws.size(); ++l)
    for (int64_t i = 0; i < ws[l].numel(); ++i) s += ws[l].data()[i] * ys.leaves[l][i];
  return s;
}

// Checks dx (the VJP with cotangents ws) against central differences along random directions.
template <class E, class F>
void expect_matches_differences(const F& f, const std::vector<TD>& xs, const std::vector<TD>& ws,
                                const std::vector<TD>& dx, int64_t dim, bool reverse) {
  std::mt19937_64 gen(11);
  std::normal_distribution<double> normal;
  for (int d = 0; d < 4; ++d) {
    std::vector<TD> up, down;
    double analytic = 0;
    const double eps = 1e-6;
    for (size_t k = 0; k < xs.size(); ++k) {
      ASSERT_EQ(dx[k].shape(), xs[k].shape()) << "gradient of leaf " << k;
      TD u = xs[k].clone(), w = xs[k].clone();
      for (int64_t i = 0; i < xs[k].numel(); ++i) {
        const double v = normal(gen);
        analytic += dx[k].data()[i] * v;
        u.data()[i] += eps * v;
        w.data()[i] -= eps * v;
      }
      up.push_back(u), down.push_back(w);
    }
    const double numeric = (pairing<E>(f, up, ws, dim, reverse) - pairing<E>(f, down, ws, dim, reverse)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 1e-6 * (1 + std::abs(numeric))) << "direction " << d;
  }
}

TD randn(const ascan::Shape& s, uint64_t seed) { return TD::randn(s, seed); }

}  // namespace

TEST(ScanVjp, BuiltinsAndAUserCombineMatchDifferences) {
  const auto affine = [](auto l, auto r) {
    auto [a1, b1] = l;
    auto [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  for (const bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    const TD x = randn({5, 23}, 1), w = randn({5, 23}, 2);
    {
      const TD dx = ascan::associative_scan_vjp(ascan::add, x, ascan::associative_scan(ascan::add, x, 1, {reverse}), w, 1, {reverse});
      expect_matches_differences<double>(ascan::add, {x}, {w}, {dx}, 1, reverse);
    }
    {
      const TD y = ascan::associative_scan(ascan::logaddexp, x, -1, {reverse});
      const TD dx = ascan::associative_scan_vjp(ascan::logaddexp, x, y, w, -1, {reverse});
      expect_matches_differences<double>(ascan::logaddexp, {x}, {w}, {dx}, -1, reverse);
    }
    // The linear recurrence with a [5, 1] decay broadcast against [5, 23] and cotangents on both
    // outputs (the builtin's closed form applies to the h cotangent only), and the same pair
    // with only h's cotangent (an empty tensor for zero), as the builtin and as a user combine.
    const TD a = TD::random({5, 1}, 3, 0.5, 1.0), b = randn({5, 23}, 4), wa = randn({5, 23}, 5);
    for (const bool both : {true, false}) {
      SCOPED_TRACE(both ? "cotangents on both outputs" : "cotangent on h only");
      const TD ga = both ? wa : TD();
      const auto ys = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {reverse});
      const auto [da, db] = ascan::associative_scan_vjp(ascan::linear_recurrence, std::tuple{a, b}, ys, std::tuple{ga, w}, 0, {reverse});
      const auto ys_user = ascan::associative_scan(affine, std::tuple{a, b}, 0, {reverse});
      const auto [ua, ub] = ascan::associative_scan_vjp(affine, std::tuple{a, b}, ys_user, std::tuple{ga, w}, 0, {reverse});
      const TD wzero = TD::zeros({5, 23});
      expect_matches_differences<std::tuple<double, double>>(affine, {a, b}, {both ? wa : wzero, w}, {da, db}, 0, reverse);
      expect_matches_differences<std::tuple<double, double>>(affine, {a, b}, {both ? wa : wzero, w}, {ua, ub}, 0, reverse);
    }
  }
}

TEST(ScanVjp, FloatGradientsFollowDouble) {
  const TD x = randn({300, 7}, 6), w = randn({300, 7}, 7);
  const Tensor<float> xf = x.cast<float>(), wf = w.cast<float>();
  const TD d64 = ascan::associative_scan_vjp(ascan::mul, x, ascan::associative_scan(ascan::mul, x, 0), w, 0);
  const Tensor<float> d32 = ascan::associative_scan_vjp(ascan::mul, xf, ascan::associative_scan(ascan::mul, xf, 0), wf, 0);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_NEAR(d32.data()[i], d64.data()[i], 1e-4 * (1 + std::abs(d64.data()[i]))) << "element " << i;
}

TEST(ScanVjp, ZeroUpstreamGradientsAndEmptyScans) {
  const TD x = randn({4, 6}, 8);
  const TD dx = ascan::associative_scan_vjp(ascan::max, x, ascan::associative_scan(ascan::max, x, 1), TD(), 1);
  EXPECT_EQ(dx, TD::zeros({4, 6}));
  const TD e = TD::zeros({4, 0});
  EXPECT_EQ(ascan::associative_scan_vjp(ascan::add, e, e, e, 1).shape(), (ascan::Shape{4, 0}));
}

TEST(ScanVjp, BadShapesAreErrorsNamingTheArgument) {
  const TD x = randn({4, 6}, 9), y = ascan::associative_scan(ascan::add, x, 1);
  const auto throws_with = [](auto fn, const std::string& fragment) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const ascan::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  throws_with([&] { ascan::associative_scan_vjp(ascan::add, x, x.reshape({6, 4}), y, 1); },
              "ascan::associative_scan_vjp(): ys leaf 0 has shape [6, 4], expected [4, 6]");
  throws_with([&] { ascan::associative_scan_vjp(ascan::add, x, y, TD::zeros({4, 5}), 1); },
              "ascan::associative_scan_vjp(): gys leaf 0 has shape [4, 5], expected [4, 6]");
  throws_with([&] { ascan::associative_scan_vjp(ascan::add, x, y, y, 2); }, "ascan::associative_scan_vjp(): dim 2");
}

TEST(TensorExternal, ViewsForeignElementsAndReleasesThemOnce) {
  std::vector<double> buffer = {1, 2, 3, 4, 5, 6};
  int releases = 0;
  {
    Tensor<double> t = Tensor<double>::external(buffer.data(), {2, 3}, [&releases]() noexcept { ++releases; },
                                                buffer.data());
    EXPECT_EQ(t.data(), buffer.data());
    Tensor<double> flat = t.reshape({6});  // a view keeps the owner alive
    t = Tensor<double>();
    EXPECT_EQ(releases, 0);
    const Tensor<double> y = ascan::associative_scan(ascan::add, flat, 0);
    EXPECT_EQ(y, Tensor<double>::from({1, 3, 6, 10, 15, 21}, {6}));
    EXPECT_EQ(buffer[5], 6) << "the input is read, not written";
  }
  EXPECT_EQ(releases, 1);
}

TEST(TensorExternal, IdentityIsWhatAliasingChecksCompare) {
  std::vector<double> buffer(8, 1.0);
  // Two external tensors over one allocation, the output in place over the input: the scan
  // must treat them as the same storage (the in-place result is the prefix sum).
  Tensor<double> in = Tensor<double>::external(buffer.data(), {8}, [] {}, buffer.data());
  Tensor<double> out = Tensor<double>::external(buffer.data(), {8}, [] {}, buffer.data());
  EXPECT_TRUE(in.shares_storage_with(out));
  ascan::associative_scan(ascan::add, in, 0, {}, out);
  EXPECT_EQ(buffer[7], 8.0);
  // Without an identity each external tensor stands alone.
  Tensor<double> lone = Tensor<double>::external(buffer.data(), {8});
  EXPECT_FALSE(lone.shares_storage_with(in));
}

TEST(TensorExternal, BadArgumentsAreErrorsAndStillRelease) {
  int releases = 0;
  EXPECT_THROW(Tensor<float>::external(nullptr, {3}, [&releases]() noexcept { ++releases; }), ascan::Error);
  EXPECT_EQ(releases, 1);
  alignas(8) char bytes[16] = {};
  EXPECT_THROW(Tensor<float>::external(reinterpret_cast<float*>(bytes + 1), {2}), ascan::Error);
  EXPECT_NO_THROW(Tensor<float>::external(nullptr, {0}));
}
