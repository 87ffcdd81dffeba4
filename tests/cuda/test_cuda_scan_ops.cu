// test_cuda_scan_ops.cu — every builtin and user combines (ASCAN_COMBINE) on device vs host.
#include <ascan/combine.hpp>

#include <limits>
#include <tuple>
#include <vector>

#include "cuda_test_util.cuh"

namespace {

using ascan::Shape;
using ascan::Tensor;
using ascan_test::expect_parity;
using ascan_test::expect_parity2;

// Layouts for the ops: one long row, several rows, wide lanes (chunked), a short axis.
using ascan_test::Layout;
const std::vector<Layout> kLayouts = {{{1000}, 0}, {{7, 129}, 1}, {{3, 200, 40}, -2}, {{5, 3, 7}, 0}};

template <class F, class T>
void check_all(const F& f, T lo, T hi, uint64_t seed, ascan_test::Tol tol = {}) {
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true})
      expect_parity(f, Tensor<T>::random(shape, seed++, lo, hi), dim, reverse, tol);
}

// User combines, one definition each for host, device and dual numbers.
ASCAN_COMBINE(AbsMax, l, r, return (l < 0 ? -l : l) > (r < 0 ? -r : r) ? l : r;);  // ties to the right
// (count, sum) with different leaf types: the tuple protocol with mixed dtypes.
ASCAN_COMBINE(CountSum, l, r, using std::get; return std::tuple{get<0>(l) + get<0>(r), get<1>(l) + get<1>(r)};);
// Running argmax (value, index); ties go to the right as ascan::max does.
ASCAN_COMBINE(ArgMax, l, r, using std::get; return get<0>(l) > get<0>(r) ? l : r;);

TEST(CudaScanOps, Mul) {
  ASCAN_REQUIRE_DEVICE();
  check_all(ascan::mul, 0.99f, 1.01f, 1);
}

TEST(CudaScanOps, MaxMinIntegersAreExact) {
  ASCAN_REQUIRE_DEVICE();
  check_all(ascan::max, int32_t{-1000}, int32_t{1000}, 10);
  check_all(ascan::min, int64_t{-1000}, int64_t{1000}, 20);
  check_all(ascan::add, std::numeric_limits<int64_t>::min() / 4096, std::numeric_limits<int64_t>::max() / 4096, 30);
}

TEST(CudaScanOps, MaxFloatMinDouble) {
  ASCAN_REQUIRE_DEVICE();
  check_all(ascan::max, -1.0f, 1.0f, 40, {.rtol = 0, .atol = 0});  // selection: exact
  check_all(ascan::min, -1.0, 1.0, 50, {.rtol = 0, .atol = 0});
}

TEST(CudaScanOps, LogAddExp) {
  ASCAN_REQUIRE_DEVICE();
  check_all(ascan::logaddexp, -5.0f, 5.0f, 60, {.rtol = 1e-5, .atol = 1e-4});
  check_all(ascan::logaddexp, -5.0, 5.0, 70, {.rtol = 1e-12, .atol = 1e-11});
}

TEST(CudaScanOps, LinearRecurrenceDouble) {
  ASCAN_REQUIRE_DEVICE();
  uint64_t seed = 80;
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true})
      expect_parity2(ascan::linear_recurrence, Tensor<double>::random(shape, seed++, -1.0, 1.0),
                     Tensor<double>::random(shape, seed++, -1.0, 1.0), dim, reverse, {.rtol = 1e-11, .atol = 1e-12});
}

TEST(CudaScanOps, UserCombineOneLeaf) {
  ASCAN_REQUIRE_DEVICE();
  check_all(AbsMax{}, -1.0f, 1.0f, 90, {.rtol = 0, .atol = 0});
}

TEST(CudaScanOps, UserCombineMixedLeafTypes) {
  ASCAN_REQUIRE_DEVICE();
  uint64_t seed = 100;
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true}) {
      expect_parity2(CountSum{}, Tensor<int32_t>::random(shape, seed++, 0, 3),
                     Tensor<double>::random(shape, seed++, -1.0, 1.0), dim, reverse, {.rtol = 1e-12, .atol = 1e-12});
      // Few distinct values, so ties happen and their side matters.
      expect_parity2(ArgMax{}, Tensor<int32_t>::random(shape, seed++, 0, 3).cast<float>(),
                     Tensor<int64_t>::random(shape, seed++, 0, 1 << 20), dim, reverse, {.rtol = 0, .atol = 0});
    }
}

// The user combine also runs on the host scan without any device (the same struct).
TEST(CudaScanOps, UserCombineRunsOnHost) {
  const auto x = Tensor<float>::from({0.5f, -2.0f, 1.0f, 3.0f}, {4});
  const auto y = ascan::associative_scan(AbsMax{}, x, 0);
  EXPECT_TRUE(y == Tensor<float>::from({0.5f, -2.0f, -2.0f, 3.0f}, {4}));
}

}  // namespace
