// log1p_exp.hpp — log1p(exp(d)) and exp(d) for d <= 0 in float and double without calls into
// libm, written as straight-line arithmetic and selects so that a loop over them vectorises
// (logaddexp's scans run log1p_exp once per combine and its adjoint exp once per element; the libm
// calls were slow per element and kept the loops scalar).
//
// exp(d) = 2^n e^r with n = round(d / ln 2), r = d - n ln 2 in two parts (|r| <= ln 2 / 2), e^r
// by its Taylor polynomial (degree 7 in float, 13 in double: truncation below 1e-8 and 1e-17
// relative), 2^n by its exponent bits; d below the smallest normal result gives 0 (the scans
// flush subnormals to zero). log1p(e) for e in [0, 1] as fdlibm does: u = 1 + e rounded,
// c = (e - (u - 1)) / u the part of e that u lost, u = 2^k m with m in [1/sqrt 2, sqrt 2), and
// log m = 2 atanh(s), s = (m - 1) / (m + 1), by its odd series (|s| <= 0.172). A NaN d returns
// NaN. Within 3 ulps of log1p(exp(d)) with or without fused multiply-adds
// (tests/test_combine_math.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "ascan/config.hpp"

namespace ascan::detail {

template <class T>
struct Log1pExpConsts;

template <>
struct Log1pExpConsts<float> {
  using Int = int32_t;
  static constexpr float kMinArg = -87.3365447f;  // log of the smallest normal float
  static constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860676533018704e-06f;
  static constexpr float kSqrt2 = 1.41421356237309505f;
  static constexpr int kMantissaBits = 23, kBias = 127;
  static constexpr int kExpTerms = 7, kLogTerms = 5;
};

template <>
struct Log1pExpConsts<double> {
  using Int = int64_t;
  static constexpr double kMinArg = -708.39641853226408;  // log of the smallest normal double
  static constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kLog2e = 1.44269504088896340736;
  static constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  static constexpr double kSqrt2 = 1.41421356237309504880;
  static constexpr int kMantissaBits = 52, kBias = 1023;
  static constexpr int kExpTerms = 13, kLogTerms = 11;
};

// Coefficients: 1 / k! for the exponential, 1 / (2k + 1) for the atanh series.
template <class T, int N>
struct Log1pExpSeries {
  T exp[N + 1]{}, atanh[N + 1]{};
  constexpr Log1pExpSeries() {
    double f = 1;
    for (int k = 0; k <= N; ++k) {
      if (k > 0) f /= k;
      exp[k] = static_cast<T>(f);
      atanh[k] = static_cast<T>(1.0 / (2 * k + 1));
    }
  }
};

// exp(d) for d <= 0 (d = -inf included): 0 below the smallest normal result; NaN for a NaN d.
template <class T>
ASCAN_ALWAYS_INLINE T exp_nonpositive(T d) {
  using C = Log1pExpConsts<T>;
  using Int = typename C::Int;
  constexpr Log1pExpSeries<T, C::kExpTerms> series{};
  const T dc = d < C::kMinArg ? C::kMinArg : d;
  const T shifted = dc * C::kLog2e + C::kRound;
  const T n = shifted - C::kRound;
  Int n_int, round_bits;
  std::memcpy(&n_int, &shifted, sizeof n_int);
  constexpr T kRound = C::kRound;
  std::memcpy(&round_bits, &kRound, sizeof round_bits);
  n_int -= round_bits;  // n as an integer: the low bits of the shifted sum
  const T r = (dc - n * C::kLn2Hi) - n * C::kLn2Lo;
  T p = series.exp[C::kExpTerms];
  for (int k = C::kExpTerms - 1; k >= 0; --k) p = p * r + series.exp[k];
  // Below the range the scale's bits are cleared (2^n becomes 0) rather than the result
  // selected: a select of 0 lets GCC split every caller into a copy for e = 0 and one for e > 0.
  const Int keep = d < C::kMinArg ? Int{0} : Int{-1};
  const Int scale_bits = ((n_int + C::kBias) << C::kMantissaBits) & keep;
  T scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

template <class T>
ASCAN_ALWAYS_INLINE T log1p_exp_nonpositive(T d) {
  using C = Log1pExpConsts<T>;
  constexpr Log1pExpSeries<T, C::kLogTerms> series{};
  const T e = exp_nonpositive(d);
  // log1p(e) = k ln 2 + log(1 + f) + c with 1 + f = m, f exact; log(1 + f) = 2s + sR as
  // f - (f²/2 - s (f²/2 + R)), f itself carrying the bulk, as fdlibm writes it.
  const T u = T(1) + e;
  const T c = (e - (u - T(1))) / u;
  // The halving is a multiply by a selected factor, not a select of two values: GCC turns the
  // latter into two masked copies of everything below (three divisions instead of two).
  const T h = u > C::kSqrt2 ? T(1) : T(0);
  const T f = u * (T(1) - T(0.5) * h) - T(1);
  const T s = f / (T(2) + f);
  const T z = s * s;
  T q = series.atanh[C::kLogTerms];  // R = 2 sum_{k >= 1} z^k / (2k + 1)
  for (int k = C::kLogTerms - 1; k >= 1; --k) q = q * z + series.atanh[k];
  const T R = T(2) * z * q;
  const T hfsq = T(0.5) * f * f;
  const T k_lo = h * C::kLn2Lo, k_hi = h * C::kLn2Hi;
  const T result = k_hi - ((hfsq - (s * (hfsq + R) + (k_lo + c))) - f);
  return d != d ? d : result;
}

}  // namespace ascan::detail
