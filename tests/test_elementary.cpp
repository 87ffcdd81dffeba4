// The tape's unary functions without libm (detail/elementary.hpp): exp, log, tanh, sigmoid and
// softplus against long double libm in ulps of the result, over their whole float and double
// ranges (random arguments, and narrow intervals where each is delicate: near 0, near 1 for log,
// the subnormal results of exp and the subnormal arguments of log), and their special values.
#include <gtest/gtest.h>

#include <ascan/detail/elementary.hpp>

#include <cmath>
#include <limits>
#include <random>

namespace {

using namespace ascan::detail;

template <class T>
double ulps_from(T got, long double want) {
  if (std::isinf(want)) return got == static_cast<T>(want) ? 0.0 : 1e30;
  const T w = static_cast<T>(want);
  const long double ulp = static_cast<long double>(std::nextafter(std::fabs(w), std::numeric_limits<T>::infinity())) -
                          std::fabs(w);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// Worst ulps of fn(x) against want(x) over random x = arg(u), u uniform in [lo, hi].
template <class T, class Fn, class Want, class Arg>
void check_range(const char* name, const Fn& fn, const Want& want_of, const Arg& arg, double lo, double hi,
                 double bound, bool normal_results_only = false) {
  std::mt19937_64 gen(static_cast<uint64_t>(lo * 1000 + hi * 7 + 11));
  std::uniform_real_distribution<double> uniform(lo, hi);
  double worst = 0;
  T worst_x = 0;
  for (int i = 0; i < 500000; ++i) {
    const T x = static_cast<T>(arg(uniform(gen)));
    const long double want = want_of(static_cast<long double>(x));
    if (normal_results_only && std::fabs(want) < std::numeric_limits<T>::min()) continue;
    const double u = ulps_from(fn(x), want);
    if (u > worst) worst = u, worst_x = x;
  }
  EXPECT_LE(worst, bound) << name << " at x = " << worst_x << " on [" << lo << ", " << hi << "]";
}

const auto identity = [](double u) { return u; };

template <class T>
void check_exp() {
  const auto fn = [](T x) { return exp_any(x); };
  const auto want = [](long double x) { return std::exp(x); };
  using E = ElementaryConsts<T>;
  for (auto [lo, hi] : {std::pair{-1e-3, 1e-3}, {-1.0, 1.0}, {-30.0, 30.0}, {double(E::kLowArg), double(E::kMaxArg)}})
    check_range<T>("exp", fn, want, identity, lo, hi, 2.0);
  // Subnormal results: rounded to the subnormal grid (within one of its steps).
  check_range<T>("exp", fn, want, identity, double(E::kLowArg), std::log(double(std::numeric_limits<T>::min())), 1.0);
  using L = std::numeric_limits<T>;
  EXPECT_EQ(exp_any(T(0)), T(1));
  EXPECT_EQ(exp_any(L::infinity()), L::infinity());
  EXPECT_EQ(exp_any(E::kMaxArg * T(1.001)), L::infinity());
  EXPECT_EQ(exp_any(-L::infinity()), T(0));
  EXPECT_EQ(exp_any(-L::max()), T(0));
  EXPECT_EQ(exp_any(std::log(L::denorm_min())), L::denorm_min());
  EXPECT_TRUE(std::isnan(exp_any(L::quiet_NaN())));
}

template <class T>
void check_log() {
  const auto fn = [](T x) { return log_any(x); };
  const auto want = [](long double x) { return std::log(x); };
  using L = std::numeric_limits<T>;
  const double lo = std::log(double(L::denorm_min())), hi = std::log(double(L::max()));
  // Magnitudes across the whole range, subnormals included, then near 1 (log x near 0).
  check_range<T>("log", fn, want, [](double u) { return std::exp(u); }, lo, hi, 2.0);
  check_range<T>("log", fn, want, [](double u) { return std::exp(u); }, lo, std::log(double(L::min())), 2.0);
  check_range<T>("log", fn, want, identity, 0.5, 2.0, 2.0);
  check_range<T>("log", fn, want, identity, 1 - 1e-3, 1 + 1e-3, 2.0);
  EXPECT_EQ(log_any(T(1)), T(0));
  EXPECT_EQ(log_any(T(0)), -L::infinity());
  EXPECT_EQ(log_any(T(-0.0)), -L::infinity());
  EXPECT_EQ(log_any(L::infinity()), L::infinity());
  EXPECT_TRUE(std::isnan(log_any(T(-1))));
  EXPECT_TRUE(std::isnan(log_any(-L::infinity())));
  EXPECT_TRUE(std::isnan(log_any(L::quiet_NaN())));
  EXPECT_EQ(log_any(L::max()), std::log(L::max()));
}

template <class T>
void check_tanh() {
  const auto fn = [](T x) { return tanh_any(x); };
  const auto want = [](long double x) { return std::tanh(x); };
  for (auto [lo, hi] : {std::pair{-1e-6, 1e-6}, {-1e-2, 1e-2}, {-0.7, 0.7}, {-5.0, 5.0}, {-25.0, 25.0}})
    check_range<T>("tanh", fn, want, identity, lo, hi, 3.0);
  using L = std::numeric_limits<T>;
  EXPECT_EQ(tanh_any(T(0)), T(0));
  EXPECT_TRUE(std::signbit(tanh_any(T(-0.0))));
  EXPECT_EQ(tanh_any(L::denorm_min()), L::denorm_min());
  EXPECT_EQ(tanh_any(L::infinity()), T(1));
  EXPECT_EQ(tanh_any(-L::infinity()), T(-1));
  EXPECT_EQ(tanh_any(L::max()), T(1));
  EXPECT_TRUE(std::isnan(tanh_any(L::quiet_NaN())));
}

template <class T>
void check_sigmoid_softplus() {
  const auto sig = [](T x) { return sigmoid_any(x); };
  const auto sig_want = [](long double x) { return 1 / (1 + std::exp(-x)); };
  const auto sp = [](T x) { return softplus_any(x); };
  const auto sp_want = [](long double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); };
  using E = ElementaryConsts<T>;
  for (auto [lo, hi] : {std::pair{-1e-3, 1e-3}, {-2.0, 2.0}, {-40.0, 40.0}, {double(E::kLowArg), double(E::kMaxArg)}}) {
    check_range<T>("sigmoid", sig, sig_want, identity, lo, hi, 3.0, true);
    check_range<T>("softplus", sp, sp_want, identity, lo, hi, 3.0, true);
  }
  using L = std::numeric_limits<T>;
  EXPECT_EQ(sigmoid_any(T(0)), T(0.5));
  EXPECT_EQ(sigmoid_any(L::infinity()), T(1));
  EXPECT_EQ(sigmoid_any(-L::infinity()), T(0));
  EXPECT_TRUE(std::isnan(sigmoid_any(L::quiet_NaN())));
  EXPECT_EQ(softplus_any(L::infinity()), L::infinity());
  EXPECT_EQ(softplus_any(-L::infinity()), T(0));
  EXPECT_EQ(softplus_any(L::max()), L::max());
  EXPECT_TRUE(std::isnan(softplus_any(L::quiet_NaN())));
}

TEST(Elementary, ExpFloat) { check_exp<float>(); }
TEST(Elementary, ExpDouble) { check_exp<double>(); }
TEST(Elementary, LogFloat) { check_log<float>(); }
TEST(Elementary, LogDouble) { check_log<double>(); }
TEST(Elementary, TanhFloat) { check_tanh<float>(); }
TEST(Elementary, TanhDouble) { check_tanh<double>(); }
TEST(Elementary, SigmoidSoftplusFloat) { check_sigmoid_softplus<float>(); }
TEST(Elementary, SigmoidSoftplusDouble) { check_sigmoid_softplus<double>(); }

}  // namespace
