// test_isa.cpp — the compiled builtins at every ISA level this machine runs (ascan/isa.hpp).
//
// Each level is forced in turn; every builtin's forward scan and gradient, on one sequence,
// [T, 7] and [T, 256], forward and reverse, float and double, is compared with a sequential
// float64 reference written here (the recurrences and their adjoints as plain loops, with a
// random cotangent). max and min only select values, so their results are compared bit for bit
// across the levels too. Also: forcing an unavailable level, and the environment variable
// ASCAN_ISA (ctest runs this binary again with ASCAN_ISA set: tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <ascan/ascan.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "reference.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Isa;
using ascan::Shape;
using ascan::Tensor;

enum class Op { add, mul, max, min, logaddexp, linrec };
const char* name(Op op) {
  switch (op) {
    case Op::add: return "add";
    case Op::mul: return "mul";
    case Op::max: return "max";
    case Op::min: return "min";
    case Op::logaddexp: return "logaddexp";
    case Op::linrec: return "linear_recurrence";
  }
  return "?";
}

// Restores the automatic level when a test ends.
struct ForcedIsa {
  explicit ForcedIsa(Isa level) { ascan::force_isa(level); }
  ~ForcedIsa() { ascan::unforce_isa(); }
};

// Inputs of a case: x (the decay a for the linear recurrence), b (its input), the cotangent.
template <class T>
struct Inputs {
  Tensor<T> x, b, g;
};

template <class T>
Inputs<T> inputs(Op op, const Shape& shape, uint64_t seed) {
  Inputs<T> in;
  switch (op) {
    case Op::mul: in.x = Tensor<T>::random(shape, seed, T(0.999), T(1.001)); break;
    case Op::linrec: in.x = Tensor<T>::random(shape, seed, T(0.5), T(0.99)); break;
    default: in.x = Tensor<T>::randn(shape, seed);
  }
  in.b = Tensor<T>::randn(shape, seed + 1);
  in.g = Tensor<T>::randn(shape, seed + 2);
  return in;
}

// The reference along dim 0 of [n, c] (c = 1 for one sequence): outputs y (for the linear
// recurrence its b half), the gradient of <g, y> with respect to x and, for the linear
// recurrence, b, and for each a bound on the rounding (the sum of the magnitudes of the terms).
struct Reference {
  std::vector<double> y, y_mag, dx, dx_mag, db, db_mag;
};

template <class T>
Reference reference(Op op, const Inputs<T>& in, int64_t n, int64_t c, bool reverse) {
  const size_t N = static_cast<size_t>(n * c);
  Reference r{std::vector<double>(N), std::vector<double>(N), std::vector<double>(N, 0.0), std::vector<double>(N, 0.0),
              std::vector<double>(N, 0.0), std::vector<double>(N, 0.0)};
  const auto at = [&](const Tensor<T>& t, int64_t s, int64_t j) { return static_cast<double>(t.data()[s * c + j]); };
  for (int64_t j = 0; j < c; ++j) {
    // s(k): the k-th step in scan order.
    const auto s = [&](int64_t k) { return reverse ? n - 1 - k : k; };
    const auto idx = [&](int64_t k) { return static_cast<size_t>(s(k) * c + j); };
    std::vector<double> h(n), hm(n);
    std::vector<int64_t> arg(n);  // max / min: the step whose value the output holds
    for (int64_t k = 0; k < n; ++k) {
      const double x = at(in.x, s(k), j);
      if (k == 0) {
        h[0] = op == Op::linrec ? at(in.b, s(0), j) : x;
        hm[0] = std::abs(h[0]);
        arg[0] = 0;
        continue;
      }
      switch (op) {
        case Op::add: h[k] = h[k - 1] + x; hm[k] = hm[k - 1] + std::abs(x); break;
        case Op::mul: h[k] = h[k - 1] * x; hm[k] = std::abs(h[k]); break;
        case Op::max: arg[k] = x >= h[k - 1] ? k : arg[k - 1]; h[k] = at(in.x, s(arg[k]), j); break;
        case Op::min: arg[k] = x <= h[k - 1] ? k : arg[k - 1]; h[k] = at(in.x, s(arg[k]), j); break;
        case Op::logaddexp: {
          const double m = std::max(h[k - 1], x);
          h[k] = m + std::log(std::exp(h[k - 1] - m) + std::exp(x - m));
          hm[k] = std::abs(h[k]) + 1;
          break;
        }
        case Op::linrec: {
          const double b = at(in.b, s(k), j);
          h[k] = x * h[k - 1] + b;
          hm[k] = std::abs(x) * hm[k - 1] + std::abs(b);
          break;
        }
      }
    }
    for (int64_t k = 0; k < n; ++k) r.y[idx(k)] = h[k], r.y_mag[idx(k)] = op == Op::max || op == Op::min ? 0 : hm[k];
    // Adjoints: dL/dx_k = sum over outputs t >= k of g_t * dy_t/dx_k.
    switch (op) {
      case Op::add: {
        double acc = 0, mag = 0;
        for (int64_t k = n - 1; k >= 0; --k) {
          acc += at(in.g, s(k), j), mag += std::abs(at(in.g, s(k), j));
          r.dx[idx(k)] = acc, r.dx_mag[idx(k)] = mag;
        }
        break;
      }
      case Op::mul: {  // dy_t/dx_k = y_t / x_k
        double acc = 0, mag = 0;
        for (int64_t k = n - 1; k >= 0; --k) {
          acc += at(in.g, s(k), j) * h[k], mag += std::abs(at(in.g, s(k), j) * h[k]);
          r.dx[idx(k)] = acc / at(in.x, s(k), j), r.dx_mag[idx(k)] = mag / std::abs(at(in.x, s(k), j));
        }
        break;
      }
      case Op::max:
      case Op::min:
        for (int64_t k = 0; k < n; ++k) {
          r.dx[idx(arg[k])] += at(in.g, s(k), j);
          r.dx_mag[idx(arg[k])] += std::abs(at(in.g, s(k), j));
        }
        break;
      case Op::logaddexp: {  // dy_t/dx_k = exp(x_k - y_t): exp(x_k) times a suffix sum
        double acc = 0, mag = 0;
        for (int64_t k = n - 1; k >= 0; --k) {
          const double g = at(in.g, s(k), j), w = std::exp(-h[k]);
          acc += g * w, mag += std::abs(g) * w;
          const double e = std::exp(at(in.x, s(k), j));
          r.dx[idx(k)] = e * acc, r.dx_mag[idx(k)] = e * mag + std::abs(e * acc);
        }
        break;
      }
      case Op::linrec: {  // lambda_k = g_k + a_{k+1} lambda_{k+1}; db_k = lambda_k, da_k = lambda_k h_{k-1}
        double lambda = 0, lmag = 0;
        for (int64_t k = n - 1; k >= 0; --k) {
          const double a_next = k + 1 < n ? at(in.x, s(k + 1), j) : 0;
          lambda = at(in.g, s(k), j) + a_next * lambda;
          lmag = std::abs(at(in.g, s(k), j)) + std::abs(a_next) * lmag;
          r.db[idx(k)] = lambda, r.db_mag[idx(k)] = lmag;
          r.dx[idx(k)] = k > 0 ? lambda * h[k - 1] : 0.0;
          r.dx_mag[idx(k)] = k > 0 ? lmag * hm[k - 1] : 0.0;
        }
        break;
      }
    }
  }
  return r;
}

// The library's scan and gradient of <g, y> (y: the output the reference holds).
template <class T>
struct Result {
  Tensor<T> y, dx, db;
};

template <class T>
Result<T> run(Op op, const Inputs<T>& in, bool reverse) {
  const ascan::ScanOptions o{.reverse = reverse};
  ad::Tape<T> tape;
  const ad::Var<T> x = ad::param(in.x), b = ad::param(in.b);
  ad::Var<T> y;
  switch (op) {
    case Op::add: y = ascan::associative_scan(ascan::add, x, 0, o); break;
    case Op::mul: y = ascan::associative_scan(ascan::mul, x, 0, o); break;
    case Op::max: y = ascan::associative_scan(ascan::max, x, 0, o); break;
    case Op::min: y = ascan::associative_scan(ascan::min, x, 0, o); break;
    case Op::logaddexp: y = ascan::associative_scan(ascan::logaddexp, x, 0, o); break;
    case Op::linrec: y = std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{x, b}, 0, o)); break;
  }
  ad::backward(y, in.g);
  Result<T> r{y.value(), x.grad(), op == Op::linrec ? b.grad() : Tensor<T>{}};
  return r;
}

template <class T>
std::vector<double> bound(const std::vector<double>& mag, int64_t n) {
  // The sum's rounding grows at most linearly in the steps; 8·u·sqrt(n) is the usual statistical
  // bound (ref::tolerance), 4·u·n the worst case: the blocked scans' orders lie in between.
  std::vector<double> t(mag.size());
  for (size_t i = 0; i < mag.size(); ++i)
    t[i] = 16 * ref::kUnitRoundoff<T> * (std::sqrt(static_cast<double>(n)) + 8) * mag[i] + 1e-300;
  return t;
}

const std::vector<Shape> kShapes = {{ref::large(100003)}, {ref::large(20000), 7}, {ref::large(2000), 256}};
const Op kOps[] = {Op::add, Op::mul, Op::max, Op::min, Op::logaddexp, Op::linrec};

class IsaLevel : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!ascan::isa_available(GetParam()))
      GTEST_SKIP() << "this machine (or build) has no " << ascan::isa_name(GetParam()) << " level";
  }
};

template <class T>
void check_level(Isa level) {
  ForcedIsa forced(level);
  ASSERT_EQ(ascan::active_isa(), level);
  uint64_t seed = 10;
  for (const Shape& shape : kShapes) {
    const int64_t n = shape[0], c = shape.size() > 1 ? shape[1] : 1;
    for (Op op : kOps) {
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(std::string(name(op)) + " on " + ref::str(shape) + (reverse ? " reverse" : " forward"));
        const Inputs<T> in = inputs<T>(op, shape, seed += 3);
        const Reference want = reference(op, in, n, c, reverse);
        const Result<T> got = run(op, in, reverse);
        if (op == Op::max || op == Op::min) {
          EXPECT_TRUE(ref::exact(got.y, want.y, shape));
          // The gradient sums cotangents of the steps a value won: exact in float64, rounded once
          // per addition in T.
          EXPECT_TRUE(ref::near(got.dx, want.dx, shape, bound<T>(want.dx_mag, n)));
        } else {
          EXPECT_TRUE(ref::near(got.y, want.y, shape, bound<T>(want.y_mag, n)));
          EXPECT_TRUE(ref::near(got.dx, want.dx, shape, bound<T>(want.dx_mag, n)));
        }
        if (op == Op::linrec) {
          EXPECT_TRUE(ref::near(got.db, want.db, shape, bound<T>(want.db_mag, n)));
        }
      }
    }
  }
}

TEST_P(IsaLevel, FloatBuiltinsMatchTheSequentialReference) { check_level<float>(GetParam()); }
TEST_P(IsaLevel, DoubleBuiltinsMatchTheSequentialReference) { check_level<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Levels, IsaLevel, ::testing::Values(Isa::baseline, Isa::avx2, Isa::avx512),
                         [](const auto& info) { return std::string(ascan::isa_name(info.param)); });

// max and min select inputs: every level gives the same bits, forward and backward.
TEST(Isa, MaxAndMinAreBitwiseEqualAcrossLevels) {
  for (const Shape& shape : kShapes) {
    for (Op op : {Op::max, Op::min}) {
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(std::string(name(op)) + " on " + ref::str(shape) + (reverse ? " reverse" : " forward"));
        const Inputs<float> in = inputs<float>(op, shape, 99);
        Result<float> base;
        {
          ForcedIsa forced(Isa::baseline);
          base = run(op, in, reverse);
        }
        for (Isa level : {Isa::avx2, Isa::avx512}) {
          if (!ascan::isa_available(level)) continue;
          ForcedIsa forced(level);
          const Result<float> got = run(op, in, reverse);
          const std::vector<float> y(base.y.data(), base.y.data() + base.y.numel());
          EXPECT_TRUE(ref::exact(got.y, y, shape)) << ascan::isa_name(level);
          // The gradient adds the cotangents of the steps each value won, in an order that depends
          // on the blocks: equal to the rounding of float sums only.
          const Reference want = reference(op, in, shape[0], shape.size() > 1 ? shape[1] : 1, reverse);
          EXPECT_TRUE(ref::near(got.dx, want.dx, shape, bound<float>(want.dx_mag, shape[0])));
        }
      }
    }
  }
}

TEST(Isa, LevelsAndNames) {
  EXPECT_EQ(ascan::isa_name(Isa::baseline), "baseline");
  EXPECT_EQ(ascan::isa_name(Isa::avx2), "avx2");
  EXPECT_EQ(ascan::isa_name(Isa::avx512), "avx512");
  EXPECT_TRUE(ascan::isa_available(Isa::baseline));
  EXPECT_TRUE(ascan::isa_available(ascan::cpu_isa()));
  // The levels are nested: a CPU that runs AVX-512 runs AVX2.
  if (ascan::isa_available(Isa::avx512)) {
    EXPECT_TRUE(ascan::isa_available(Isa::avx2));
  }
  EXPECT_EQ(ascan::cpu_isa(), ascan::isa_available(Isa::avx512) ? Isa::avx512
                              : ascan::isa_available(Isa::avx2) ? Isa::avx2
                                                                : Isa::baseline);
  EXPECT_FALSE(ascan::isa_available(static_cast<Isa>(1)));
}

TEST(Isa, ForcingAnUnavailableLevelThrowsAndChangesNothing) {
  const Isa before = ascan::active_isa();
  try {
    ascan::force_isa(static_cast<Isa>(7));
    FAIL() << "no exception";
  } catch (const ascan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ascan::force_isa(): level is 7"), std::string::npos) << e.what();
  }
  for (Isa level : {Isa::avx2, Isa::avx512}) {
    if (ascan::isa_available(level)) continue;
    EXPECT_THROW(ascan::force_isa(level), ascan::Error);
  }
  EXPECT_EQ(ascan::active_isa(), before);
}

TEST(Isa, ForcedLevelIsActiveUntilUnforced) {
  for (Isa level : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (!ascan::isa_available(level)) continue;
    ascan::force_isa(level);
    EXPECT_EQ(ascan::active_isa(), level);
  }
  ascan::unforce_isa();
  const char* env = std::getenv("ASCAN_ISA");
  if (!env || std::string(env).empty() || std::string(env) == "auto") {
    EXPECT_EQ(ascan::active_isa(), ascan::cpu_isa());
  }
}

// Run by ctest with ASCAN_ISA=baseline, =avx2 and =not-a-level (tests/CMakeLists.txt), and
// without it in the plain run.
TEST(IsaEnvironment, TheVariableSetsTheLevel) {
  const char* env = std::getenv("ASCAN_ISA");
  const std::string v = env ? env : "";
  const auto x = Tensor<float>::randn({1000}, 1);
  if (v.empty() || v == "auto") {
    EXPECT_EQ(ascan::active_isa(), ascan::cpu_isa());
    return;
  }
  for (Isa level : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (v != ascan::isa_name(level)) continue;
    if (!ascan::isa_available(level)) {
      EXPECT_THROW(ascan::active_isa(), ascan::Error);
      EXPECT_THROW(ascan::associative_scan(ascan::add, x, 0), ascan::Error);
      return;
    }
    EXPECT_EQ(ascan::active_isa(), level);
    // force_isa() overrides the environment, unforce_isa() returns to it.
    ascan::force_isa(Isa::baseline);
    EXPECT_EQ(ascan::active_isa(), Isa::baseline);
    ascan::unforce_isa();
    EXPECT_EQ(ascan::active_isa(), level);
    return;
  }
  // Not a level: the first builtin scan says so, and a forced level still works.
  try {
    ascan::associative_scan(ascan::add, x, 0);
    FAIL() << "no exception";
  } catch (const ascan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ASCAN_ISA is \"" + v + "\""), std::string::npos) << e.what();
  }
  ascan::force_isa(Isa::baseline);
  const Tensor<float> y = ascan::associative_scan(ascan::add, x, 0);
  ascan::unforce_isa();
  double acc = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    acc += x.data()[i];
    EXPECT_NEAR(y.data()[i], acc, 1e-4) << i;
  }
}

}  // namespace
