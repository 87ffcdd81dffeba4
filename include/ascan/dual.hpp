// dual.hpp — forward-mode dual numbers: a value and N tangents, for per-element Jacobians.
//
// Pointwise combines are written generically, so the library instantiates them with Dual<T, N>
// to get ∂f/∂left and ∂f/∂right in one call (N = 2L tangent directions). Comparisons look at the
// value only (max/min pick a branch, as their derivative does). ASCAN_HD so the same type
// serves device code.
#pragma once

#include <array>
#include <cmath>
#include <type_traits>

#include "ascan/config.hpp"

namespace ascan {

template <class T, int N>
struct Dual {
  T v{};
  std::array<T, N> d{};

  ASCAN_HD Dual() = default;
  ASCAN_HD Dual(T value) : v(value) {}  // NOLINT: constants promote implicitly
  template <class S, std::enable_if_t<std::is_arithmetic_v<S> && !std::is_same_v<S, T>, int> = 0>
  ASCAN_HD Dual(S value) : v(static_cast<T>(value)) {}  // NOLINT

  ASCAN_HD explicit operator T() const { return v; }

  ASCAN_HD Dual& operator+=(const Dual& o) { return *this = *this + o; }
  ASCAN_HD Dual& operator-=(const Dual& o) { return *this = *this - o; }
  ASCAN_HD Dual& operator*=(const Dual& o) { return *this = *this * o; }
  ASCAN_HD Dual& operator/=(const Dual& o) { return *this = *this / o; }

  ASCAN_HD friend Dual operator+(const Dual& a, const Dual& b) {
    Dual r(a.v + b.v);
    for (int i = 0; i < N; ++i) r.d[i] = a.d[i] + b.d[i];
    return r;
  }
  ASCAN_HD friend Dual operator-(const Dual& a, const Dual& b) {
    Dual r(a.v - b.v);
    for (int i = 0; i < N; ++i) r.d[i] = a.d[i] - b.d[i];
    return r;
  }
  ASCAN_HD friend Dual operator-(const Dual& a) {
    Dual r(-a.v);
    for (int i = 0; i < N; ++i) r.d[i] = -a.d[i];
    return r;
  }
  ASCAN_HD friend Dual operator*(const Dual& a, const Dual& b) {
    Dual r(a.v * b.v);
    for (int i = 0; i < N; ++i) r.d[i] = a.d[i] * b.v + a.v * b.d[i];
    return r;
  }
  ASCAN_HD friend Dual operator/(const Dual& a, const Dual& b) {
    Dual r(a.v / b.v);
    const T inv = T(1) / b.v;
    for (int i = 0; i < N; ++i) r.d[i] = (a.d[i] - r.v * b.d[i]) * inv;
    return r;
  }
  ASCAN_HD friend bool operator<(const Dual& a, const Dual& b) { return a.v < b.v; }
  ASCAN_HD friend bool operator>(const Dual& a, const Dual& b) { return a.v > b.v; }
  ASCAN_HD friend bool operator<=(const Dual& a, const Dual& b) { return a.v <= b.v; }
  ASCAN_HD friend bool operator>=(const Dual& a, const Dual& b) { return a.v >= b.v; }
  ASCAN_HD friend bool operator==(const Dual& a, const Dual& b) { return a.v == b.v; }
  ASCAN_HD friend bool operator!=(const Dual& a, const Dual& b) { return a.v != b.v; }

  // f(v) with derivative df at v: chain rule on every tangent.
  ASCAN_HD static Dual chain(T value, T df, const Dual& a) {
    Dual r(value);
    for (int i = 0; i < N; ++i) r.d[i] = df * a.d[i];
    return r;
  }
  ASCAN_HD friend Dual exp(const Dual& a) {
    using std::exp;
    const T e = exp(a.v);
    return chain(e, e, a);
  }
  ASCAN_HD friend Dual expm1(const Dual& a) {
    using std::exp;
    using std::expm1;
    return chain(expm1(a.v), exp(a.v), a);
  }
  ASCAN_HD friend Dual log(const Dual& a) {
    using std::log;
    return chain(log(a.v), T(1) / a.v, a);
  }
  ASCAN_HD friend Dual log1p(const Dual& a) {
    using std::log1p;
    return chain(log1p(a.v), T(1) / (T(1) + a.v), a);
  }
  ASCAN_HD friend Dual sqrt(const Dual& a) {
    using std::sqrt;
    const T s = sqrt(a.v);
    return chain(s, T(0.5) / s, a);
  }
  ASCAN_HD friend Dual tanh(const Dual& a) {
    using std::tanh;
    const T t = tanh(a.v);
    return chain(t, T(1) - t * t, a);
  }
  ASCAN_HD friend Dual sin(const Dual& a) {
    using std::cos;
    using std::sin;
    return chain(sin(a.v), cos(a.v), a);
  }
  ASCAN_HD friend Dual cos(const Dual& a) {
    using std::cos;
    using std::sin;
    return chain(cos(a.v), -sin(a.v), a);
  }
  ASCAN_HD friend Dual abs(const Dual& a) { return a.v < T(0) ? -a : a; }
  ASCAN_HD friend Dual fabs(const Dual& a) { return a.v < T(0) ? -a : a; }
};

// Mixed arithmetic with plain numbers (2 * x, x + 1.0, ...).
#define ASCAN_DUAL_SCALAR_OP(op)                                                             \
  template <class T, int N, class S, std::enable_if_t<std::is_arithmetic_v<S>, int> = 0>    \
  ASCAN_HD Dual<T, N> operator op(const Dual<T, N>& a, S s) { return a op Dual<T, N>(static_cast<T>(s)); } \
  template <class T, int N, class S, std::enable_if_t<std::is_arithmetic_v<S>, int> = 0>    \
  ASCAN_HD Dual<T, N> operator op(S s, const Dual<T, N>& a) { return Dual<T, N>(static_cast<T>(s)) op a; }
ASCAN_DUAL_SCALAR_OP(+)
ASCAN_DUAL_SCALAR_OP(-)
ASCAN_DUAL_SCALAR_OP(*)
ASCAN_DUAL_SCALAR_OP(/)
#undef ASCAN_DUAL_SCALAR_OP

#define ASCAN_DUAL_SCALAR_CMP(op)                                                            \
  template <class T, int N, class S, std::enable_if_t<std::is_arithmetic_v<S>, int> = 0>    \
  ASCAN_HD bool operator op(const Dual<T, N>& a, S s) { return a.v op static_cast<T>(s); }  \
  template <class T, int N, class S, std::enable_if_t<std::is_arithmetic_v<S>, int> = 0>    \
  ASCAN_HD bool operator op(S s, const Dual<T, N>& a) { return static_cast<T>(s) op a.v; }
ASCAN_DUAL_SCALAR_CMP(<)
ASCAN_DUAL_SCALAR_CMP(>)
ASCAN_DUAL_SCALAR_CMP(<=)
ASCAN_DUAL_SCALAR_CMP(>=)
ASCAN_DUAL_SCALAR_CMP(==)
ASCAN_DUAL_SCALAR_CMP(!=)
#undef ASCAN_DUAL_SCALAR_CMP

}  // namespace ascan
