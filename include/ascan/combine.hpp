// combine.hpp — builtin associative combine functors, usable on host, device and dual numbers.
//
// Each is a struct with a templated ASCAN_HD call operator, so one definition is instantiated
// with float/double, integer types, dual numbers (for Jacobians) and in CUDA device code. On the
// host the call operators are always inlined: the library's AVX2 and AVX-512 kernels call them
// on vectors, and a call would cross from the kernel's ISA to this baseline code with two
// conventions for passing the vector (even at -O0). All
// are associative; add, mul, max, min and logaddexp are also commutative, the linear recurrence
// is not.
#pragma once

#include <cmath>
#include <tuple>
#include <type_traits>

#include "ascan/config.hpp"
#include "ascan/detail/log1p_exp.hpp"

namespace ascan {

struct Add {
  template <class A>
  ASCAN_HD ASCAN_HOST_INLINE A operator()(const A& a, const A& b) const { return a + b; }
};

struct Mul {
  template <class A>
  ASCAN_HD ASCAN_HOST_INLINE A operator()(const A& a, const A& b) const { return a * b; }
};

// NaN wins, as in NumPy's maximum.accumulate and torch.cummax: a running max is NaN from the
// first NaN on (the left operand when both are), and the gradient goes to that NaN's element.
// Otherwise ties go to the right operand (so its derivative receives the gradient). `|`, not
// `||`: on vector types the comparisons are lane masks.
struct Max {
  template <class A>
  ASCAN_HD ASCAN_HOST_INLINE A operator()(const A& a, const A& b) const { return ((a > b) | (a != a)) ? a : b; }
};

struct Min {
  template <class A>
  ASCAN_HD ASCAN_HOST_INLINE A operator()(const A& a, const A& b) const { return ((a < b) | (a != a)) ? a : b; }
};

// log(exp(a) + exp(b)) without overflow: max + log1p(exp(-|a - b|)); equal infinities (and NaNs)
// propagate as a + b does. On the host, float and double evaluate log1p(exp(d)) without libm
// calls (detail/log1p_exp.hpp, within 3 ulps), so that the scan loops vectorise.
struct LogAddExp {
  template <class A>
  ASCAN_HD ASCAN_HOST_INLINE A operator()(const A& a, const A& b) const {
    const bool a_larger = a > b;
    const A d = a_larger ? b - a : a - b;  // <= 0 unless NaN
#ifndef __CUDA_ARCH__
    if constexpr (std::is_same_v<A, float> || std::is_same_v<A, double>) {
      const A r = (a_larger ? a : b) + detail::log1p_exp_nonpositive(d);
      return d != d ? a + b : r;
    }
#endif
    using std::exp;
    using std::log1p;
    if (d != d) return a + b;
    return (a_larger ? a : b) + log1p(exp(d));
  }
};

// First-order linear recurrence h_t = a_t * h_{t-1} + b_t on pairs (a, b):
// (a1, b1), (a2, b2) -> (a1 * a2, a2 * b1 + b2). The b-output of the scan is h_t with h_{-1} = 0.
struct LinearRecurrence {
  template <class L, class R>
  ASCAN_HD ASCAN_HOST_INLINE auto operator()(const L& l, const R& r) const {
    using std::get;
    const auto& a1 = get<0>(l);
    const auto& b1 = get<1>(l);
    const auto& a2 = get<0>(r);
    const auto& b2 = get<1>(r);
    return std::tuple{a1 * a2, a2 * b1 + b2};
  }
};

// Defines a user combine usable everywhere a builtin is: host scans, device scans (nvcc rejects
// generic __host__ __device__ lambdas, so device combines must be structs) and dual numbers.
// Use it at namespace scope (a local class cannot have a member template):
//
//   ASCAN_COMBINE(Larger, l, r, return l > r ? l : r;);           // one leaf: scalars
//   ASCAN_COMBINE(Affine, l, r,                                   // two leaves: std::tuples
//                 using std::get;
//                 return std::tuple{get<0>(l) * get<0>(r), get<0>(r) * get<1>(l) + get<1>(r)};);
//   ys = ascan::associative_scan(Affine{}, std::tuple{a, b}, 0);
//
// l and r name the accumulated (left) and new (right) elements; the body (commas allowed) must
// return the combined element. Like every combine it must be associative and pure.
#define ASCAN_COMBINE(Name, l, r, ...)                                          \
  struct Name {                                                                 \
    template <class ascan_left_, class ascan_right_>                            \
    ASCAN_HD auto operator()(const ascan_left_& l, const ascan_right_& r) const { \
      __VA_ARGS__                                                               \
    }                                                                           \
  }

inline constexpr Add add{};
inline constexpr Mul mul{};
inline constexpr Max max{};
inline constexpr Min min{};
inline constexpr LogAddExp logaddexp{};
inline constexpr LinearRecurrence linear_recurrence{};

}  // namespace ascan
