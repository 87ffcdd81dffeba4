// cuda_test_util.cuh — shared helpers of the CUDA tests: device skip, host/device parity checks.
#pragma once

#include <ascan/cuda.cuh>
#include <ascan/scan.hpp>
#include <ascan/tensor.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#define ASCAN_REQUIRE_DEVICE() \
  if (ascan::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible"

// Affine maps composed the other way round: (a1, b1) ∘ (a2, b2) = (a1 a2, a1 b2 + b1). Its left
// Jacobian [[a2, 0], [b2, 1]] is not symmetric, so a missing transpose in an adjoint shows (the
// linear recurrence's is diagonal and cannot tell).
ASCAN_COMBINE(Compose, l, r, using std::get;
              return std::tuple{get<0>(l) * get<0>(r), get<0>(l) * get<1>(r) + get<1>(l)};);

namespace ascan_test {

// A shape and the dim scanned along it.
struct Layout {
  ascan::Shape shape;
  int64_t dim;
};

// Float tolerances: host and device associate differently (blocked vs. decoupled look-back), so
// results agree to rounding, scaled by the magnitude of the values.
struct Tol {
  double rtol = 1e-4;
  double atol = 1e-4;
};

template <class T>
void expect_same(const ascan::Tensor<T>& want, const ascan::Tensor<T>& got, const std::string& what,
                 Tol tol = {}) {
  ASSERT_EQ(want.shape(), got.shape()) << what;
  if constexpr (std::is_integral_v<T>) {
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(want.data()[i], got.data()[i]) << what << " at flat index " << i;
  } else {
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double w = want.data()[i], g = got.data()[i];
      if (std::isnan(w) && std::isnan(g)) continue;
      if (std::isinf(w) && w == g) continue;
      ASSERT_LE(std::abs(w - g), tol.atol + tol.rtol * std::abs(w))
          << what << " at flat index " << i << ": host " << w << ", device " << g;
    }
  }
}

inline std::string describe(const ascan::Shape& shape, int64_t dim, bool reverse) {
  return ascan::format_shape(shape) + " dim " + std::to_string(dim) + (reverse ? " reverse" : "");
}

// One leaf: device result == host result.
template <class F, class T>
void expect_parity(const F& f, const ascan::Tensor<T>& x, int64_t dim, bool reverse, Tol tol = {}) {
  const auto want = ascan::associative_scan(f, x, dim, {.reverse = reverse});
  const auto dx = ascan::cuda::to_device(x);
  const auto dy = ascan::cuda::associative_scan(f, dx, dim, {.reverse = reverse});
  expect_same(want, ascan::cuda::to_host(dy), describe(x.shape(), dim, reverse), tol);
}

// Two leaves (element types may differ).
template <class F, class A, class B>
void expect_parity2(const F& f, const ascan::Tensor<A>& a, const ascan::Tensor<B>& b, int64_t dim, bool reverse,
                    Tol tol = {}) {
  const auto [wa, wb] = ascan::associative_scan(f, std::tuple{a, b}, dim, {.reverse = reverse});
  const auto da = ascan::cuda::to_device(a);
  const auto db = ascan::cuda::to_device(b);
  const auto [ya, yb] = ascan::cuda::associative_scan(f, std::tie(da, db), dim, {.reverse = reverse});
  const std::string what = describe(a.shape(), dim, reverse);
  expect_same(wa, ascan::cuda::to_host(ya), what + " leaf 0", tol);
  expect_same(wb, ascan::cuda::to_host(yb), what + " leaf 1", tol);
}

}  // namespace ascan_test
