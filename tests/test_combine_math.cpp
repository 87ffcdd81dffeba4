// The arithmetic behind the builtin logaddexp on the host: log1p(exp(d)) and exp(d) for d <= 0
// without libm calls, against long double std::log1pl(std::expl(d)) in ulps of the result (random d over the
// whole range, small |d| where log1p(e) is near ln 2, large |d| where it is near e, and the
// edges of the range), and the combine: its special values (infinities, NaNs) and random pairs
// against the long double formula, commutative bit for bit.
#include <gtest/gtest.h>

#include <ascan/combine.hpp>

#include <cmath>
#include <limits>
#include <random>

namespace {

template <class T>
double ulps_from(T got, long double want) {
  const T w = static_cast<T>(want);
  const long double ulp = static_cast<long double>(std::nextafter(w, std::numeric_limits<T>::infinity())) - w;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// Worst ulps of fn(d) against want(d) (long double) over 2M random d in [lo, 0].
template <class T, class Fn, class Want>
void check_nonpositive(const Fn& fn, const Want& want_of, double lo, uint64_t seed, double bound) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uniform(lo, 0.0);
  double worst = 0, worst_d = 0;
  for (int i = 0; i < 2000000; ++i) {
    const T d = static_cast<T>(uniform(gen));
    const long double want = want_of(static_cast<long double>(d));
    if (want < std::numeric_limits<T>::min()) continue;  // a subnormal result: flushed by the scans
    const double u = ulps_from(fn(d), want);
    if (u > worst) worst = u, worst_d = d;
  }
  EXPECT_LE(worst, bound) << "at d = " << worst_d << " on [" << lo << ", 0]";
}

template <class T>
void check_log1p_exp(double lo, uint64_t seed) {
  check_nonpositive<T>([](T d) { return ascan::detail::log1p_exp_nonpositive(d); },
                       [](long double d) { return std::log1p(std::exp(d)); }, lo, seed, 3.0);
}

TEST(CombineMath, Log1pExpFloatWithinThreeUlps) {
  check_log1p_exp<float>(-1e-3, 1);
  check_log1p_exp<float>(-1.0, 2);
  check_log1p_exp<float>(-20.0, 3);
  check_log1p_exp<float>(-87.4, 4);
}

TEST(CombineMath, Log1pExpDoubleWithinThreeUlps) {
  check_log1p_exp<double>(-1e-3, 5);
  check_log1p_exp<double>(-1.0, 6);
  check_log1p_exp<double>(-40.0, 7);
  check_log1p_exp<double>(-708.4, 8);
}

// The exponential alone (logaddexp's adjoint): within 2 ulps over the range, exact at 0, zero
// below the smallest normal result and at -inf, NaN for NaN.
template <class T>
void check_exp(double lo, uint64_t seed) {
  check_nonpositive<T>([](T d) { return ascan::detail::exp_nonpositive(d); }, [](long double d) { return std::exp(d); },
                       lo, seed, 2.0);
}

TEST(CombineMath, ExpNonpositive) {
  for (double lo : {-1e-3, -1.0, -20.0, -87.4}) check_exp<float>(lo, 9);
  for (double lo : {-1e-3, -1.0, -40.0, -708.4}) check_exp<double>(lo, 10);
  using ascan::detail::exp_nonpositive;
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive(-0.0), 1.0);
  EXPECT_EQ(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_nonpositive(-std::numeric_limits<double>::max()), 0.0);
  EXPECT_EQ(exp_nonpositive(-100.0f), 0.0f);  // exp(-100) is subnormal in float
  EXPECT_TRUE(std::isnan(exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_nonpositive(std::numeric_limits<double>::quiet_NaN())));
}

template <class T>
void check_edges() {
  using ascan::detail::log1p_exp_nonpositive;
  using Lim = std::numeric_limits<T>;
  EXPECT_EQ(log1p_exp_nonpositive(T(0)), std::log1p(std::exp(T(0))));
  EXPECT_EQ(log1p_exp_nonpositive(T(-0.0)), std::log1p(std::exp(T(0))));
  EXPECT_EQ(log1p_exp_nonpositive(-Lim::infinity()), T(0));
  EXPECT_EQ(log1p_exp_nonpositive(-Lim::max()), T(0));
  EXPECT_TRUE(std::isnan(log1p_exp_nonpositive(Lim::quiet_NaN())));
  // The smallest normal result and just above it.
  const T edge = std::log(Lim::min());
  for (T d : {edge, std::nextafter(edge, T(0)), T(edge * 0.999)}) {
    const long double want = std::log1p(std::exp(static_cast<long double>(d)));
    if (want >= Lim::min()) {
      EXPECT_LE(ulps_from(log1p_exp_nonpositive(d), want), 3.0) << "d = " << d;
    }
  }
}

TEST(CombineMath, Log1pExpEdges) {
  check_edges<float>();
  check_edges<double>();
}

// The combine: max + log1p(exp(-|a - b|)), equal infinities and NaNs as a + b.
template <class T>
void check_logaddexp_values() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const auto f = ascan::logaddexp;
  EXPECT_EQ(f(inf, inf), inf);
  EXPECT_EQ(f(-inf, -inf), -inf);
  EXPECT_EQ(f(inf, T(3)), inf);
  EXPECT_EQ(f(T(3), inf), inf);
  EXPECT_EQ(f(-inf, T(3)), T(3));
  EXPECT_EQ(f(T(3), -inf), T(3));
  EXPECT_TRUE(std::isnan(f(nan, T(1))));
  EXPECT_TRUE(std::isnan(f(T(1), nan)));
  EXPECT_EQ(f(inf, -inf), inf);
  EXPECT_EQ(f(-inf, inf), inf);
  std::mt19937_64 gen(9);
  std::normal_distribution<double> normal(0.0, 30.0);
  for (int i = 0; i < 100000; ++i) {
    const T a = static_cast<T>(normal(gen)), b = static_cast<T>(normal(gen));
    const long double la = a, lb = b, m = std::max(la, lb);
    const long double l = std::log1p(std::exp(std::min(la, lb) - m)), want = m + l;
    // The sum may cancel (m < 0 < l): 4 ulps of each term, absolute.
    const auto ulp = [](long double v) {
      const T t = static_cast<T>(std::fabs(v));
      return static_cast<long double>(std::nextafter(t, std::numeric_limits<T>::infinity())) - t;
    };
    ASSERT_LE(std::fabs(static_cast<long double>(f(a, b)) - want), 4 * (ulp(m) + ulp(l))) << a << ", " << b;
    ASSERT_EQ(f(a, b), f(b, a)) << a << ", " << b;
  }
}

TEST(CombineMath, LogAddExpValues) {
  check_logaddexp_values<float>();
  check_logaddexp_values<double>();
}

}  // namespace
