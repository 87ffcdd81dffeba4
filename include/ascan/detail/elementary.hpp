// elementary.hpp — exp, expm1 (bounded), log, tanh, the logistic function and softplus for every
// float and double argument, as straight-line arithmetic and selects so that a loop over them
// vectorises (the tape's unary ops run them once per element; libm's calls kept those loops
// scalar and compute-bound).
//
// They build on log1p_exp.hpp's reduction: exp(d) = 2^n e^r with r = d - n ln 2 in two parts.
// Results that are subnormal are rounded to subnormals (exp scales by 2^n in two halves), except
// in sigmoid and softplus of arguments below about -87 (float) / -708 (double), whose results
// (below the smallest normal number) are returned as 0. NaN in, NaN out. Accuracy against long
// double libm is checked in tests/test_combine_math.cpp: within 2 ulps for exp and log, 3 for
// tanh, sigmoid and softplus.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ascan/config.hpp"
#include "ascan/detail/log1p_exp.hpp"

namespace ascan::detail {

template <class T>
struct ElementaryConsts;

template <>
struct ElementaryConsts<float> {
  static constexpr float kMaxArg = 88.7228394f;   // above: exp overflows
  static constexpr float kLowArg = -103.972084f;  // below: exp is 0 (half the smallest subnormal)
  static constexpr float kTanhSat = 9.1f;         // above: tanh rounds to 1
  static constexpr float kMinNormal = 1.17549435e-38f, kSubnormalScale = 8388608.0f;  // 2^23
};

template <>
struct ElementaryConsts<double> {
  static constexpr double kMaxArg = 709.782712893383973;
  static constexpr double kLowArg = -745.133219101941108;
  static constexpr double kTanhSat = 19.1;
  static constexpr double kMinNormal = 2.2250738585072014e-308, kSubnormalScale = 4503599627370496.0;  // 2^52
};

template <class T>
using BitsOf = typename Log1pExpConsts<T>::Int;

// 2^n for an integer n in the normal exponent range, from its bits.
template <class T>
ASCAN_ALWAYS_INLINE T pow2_int(BitsOf<T> n) {
  using C = Log1pExpConsts<T>;
  return std::bit_cast<T>(static_cast<BitsOf<T>>((n + C::kBias) << C::kMantissaBits));
}

// d = n ln 2 + r with n = round(d / ln 2) (as a float and as an integer), |r| <= ln 2 / 2; d must
// be within a few hundred (float) or thousand (double) of 0.
template <class T>
struct ExpReduced {
  T r;
  BitsOf<T> n;
};
template <class T>
ASCAN_ALWAYS_INLINE ExpReduced<T> exp_reduce(T d) {
  using C = Log1pExpConsts<T>;
  const T shifted = d * C::kLog2e + C::kRound;
  const T n = shifted - C::kRound;
  const BitsOf<T> n_int = std::bit_cast<BitsOf<T>>(shifted) - std::bit_cast<BitsOf<T>>(C::kRound);
  return {(d - n * C::kLn2Hi) - n * C::kLn2Lo, n_int};
}

// exp(d) for every d: +inf above the overflow bound, subnormal results rounded, 0 below.
template <class T>
ASCAN_ALWAYS_INLINE T exp_any(T d) {
  using C = Log1pExpConsts<T>;
  using E = ElementaryConsts<T>;
  constexpr Log1pExpSeries<T, C::kExpTerms> series{};
  const T dc = d < E::kLowArg ? E::kLowArg : (d > E::kMaxArg ? E::kMaxArg : d);
  const auto [r, n] = exp_reduce(dc);
  T p = series.exp[C::kExpTerms];
  for (int k = C::kExpTerms - 1; k >= 0; --k) p = p * r + series.exp[k];
  // 2^n in two factors, each a normal number for every n the clamped range gives.
  const BitsOf<T> half = n >> 1;
  const T scaled = p * pow2_int<T>(half) * pow2_int<T>(n - half);
  return d > E::kMaxArg ? std::numeric_limits<T>::infinity() : (d < E::kLowArg ? T(0) : scaled);
}

// exp(d) - 1 for d in [kMinArg, 64], without the cancellation near 0: 2^n expm1(r) + (2^n - 1),
// expm1(r) = r + r^2 (1/2 + r/6 + ...).
template <class T>
ASCAN_ALWAYS_INLINE T expm1_bounded(T d) {
  using C = Log1pExpConsts<T>;
  constexpr Log1pExpSeries<T, C::kExpTerms> series{};
  const T dc = d < C::kMinArg ? C::kMinArg : d;
  const auto [r, n] = exp_reduce(dc);
  T q = series.exp[C::kExpTerms];  // truncated after r^kExpTerms, as exp's: below 2e-8 of r
  for (int k = C::kExpTerms - 1; k >= 2; --k) q = q * r + series.exp[k];
  const T em1_r = r + r * r * q;
  const T scale = pow2_int<T>(n);
  return scale * em1_r + (scale - T(1));
}

// tanh(x) = expm1(2|x|) / (expm1(2|x|) + 2) with the sign of x; 1 in magnitude from kTanhSat on.
template <class T>
ASCAN_ALWAYS_INLINE T tanh_any(T x) {
  using E = ElementaryConsts<T>;
  const T ax = x < 0 ? -x : x;
  const T ac = ax > E::kTanhSat ? E::kTanhSat : ax;  // keeps a NaN
  const T em = expm1_bounded(T(2) * ac);
  const T t = em / (em + T(2));
  const T mag = ax > E::kTanhSat ? T(1) : t;
  return std::copysign(mag, x);  // -0 stays -0
}

// The logistic function 1 / (1 + exp(-x)): with t = exp(-|x|), 1 / (1 + t) for x >= 0 and
// t / (1 + t) below (no overflow, no cancellation).
template <class T>
ASCAN_ALWAYS_INLINE T sigmoid_any(T x) {
  const T t = exp_any(x < 0 ? x : -x);
  const T s = T(1) / (T(1) + t);
  return x < 0 ? t * s : s;
}

// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)).
template <class T>
ASCAN_ALWAYS_INLINE T softplus_any(T x) {
  return (x > 0 ? x : T(0)) + log1p_exp_nonpositive(x < 0 ? x : -x);  // a NaN x: NaN from the second term
}

// log(x): x = 2^k m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with s = (m - 1) / (m + 1),
// as fdlibm writes it; subnormals scaled up first. -inf at 0, NaN below 0, +inf at +inf.
template <class T>
ASCAN_ALWAYS_INLINE T log_any(T x) {
  using C = Log1pExpConsts<T>;
  using E = ElementaryConsts<T>;
  using Int = BitsOf<T>;
  constexpr Log1pExpSeries<T, C::kLogTerms> series{};
  constexpr Int kMantissaMask = (Int{1} << C::kMantissaBits) - 1;
  const bool sub = x < E::kMinNormal;
  const T xs = sub ? x * E::kSubnormalScale : x;
  const Int bits = std::bit_cast<Int>(xs);
  Int k = (bits >> C::kMantissaBits) - C::kBias - Int(sub) * C::kMantissaBits;
  T m = std::bit_cast<T>(static_cast<Int>((bits & kMantissaMask) | (Int{C::kBias} << C::kMantissaBits)));
  const bool high = m > C::kSqrt2;
  m *= high ? T(0.5) : T(1);  // a selected factor, not a select of two values (see log1p_exp.hpp)
  k += Int(high);
  const T f = m - T(1);
  const T s = f / (T(2) + f);
  const T z = s * s;
  T q = series.atanh[C::kLogTerms];
  for (int j = C::kLogTerms - 1; j >= 1; --j) q = q * z + series.atanh[j];
  const T R = T(2) * z * q;
  const T hfsq = T(0.5) * f * f;
  const T kf = static_cast<T>(k);
  const T result = kf * C::kLn2Hi - ((hfsq - (s * (hfsq + R) + kf * C::kLn2Lo)) - f);
  // Special values (NaN and +inf pass through, 0 gives -inf, negatives NaN) are added to the
  // finite result that their bits give: a select would let the compiler move the arithmetic into
  // a branch that it then cannot vectorise (the division may trap).
  const T special = x == T(0) ? -std::numeric_limits<T>::infinity() : (x < 0 ? std::numeric_limits<T>::quiet_NaN() : x);
  return result + (((x > 0) & (x < std::numeric_limits<T>::infinity())) ? T(0) : special);
}

}  // namespace ascan::detail
