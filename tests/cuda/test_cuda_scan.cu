// test_cuda_scan.cu — device scan vs host scan on every kernel path (plain, by-key, packed, lanes).
#include <ascan/combine.hpp>

#include <vector>

#include "cuda_test_util.cuh"

namespace {

using ascan::Shape;
using ascan::Tensor;
using ascan_test::expect_parity;
using ascan_test::expect_parity2;

using ascan_test::Layout;

// Each layout names the engine it reaches through the [outer, T, inner] view.
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {{1000}, 0},           // inner 1, one row: plain single-pass scan
      {{1}, 0},              // T = 1: a copy
      {{6, 300}, -1},        // inner 1, six rows: by-key scan
      {{50, 2}, 0},          // packed rows, width 2, one row
      {{4, 50, 3}, 1},       // packed width 3, by key
      {{3, 40, 4}, 1},       // packed width 4
      {{2, 33, 5}, 1},       // packed width 5
      {{2, 30, 6}, -2},      // packed width 6, negative dim
      {{4, 50, 7}, 1},       // packed width 7
      {{5, 40, 8}, -2},      // packed width 8
      {{40, 33}, 0},         // lanes, axis too short to chunk
      {{3, 20, 300}, 1},     // lanes, many of them
      {{2, 3000, 20}, 1},    // few lanes, long axis: chunked (totals, carries, rescan)
      {{1000, 9}, 0},        // chunked with a short last chunk
      {{3, 1, 4}, 1},        // T = 1 in the middle
      {{3, 0, 4}, 1},        // T = 0: empty output
      {{0, 5}, 1},           // no rows
      {{5, 0}, 0},           // no lanes
  };
  return all;
}

TEST(CudaScan, AddFloatMatchesHostOnEveryPath) {
  ASCAN_REQUIRE_DEVICE();
  uint64_t seed = 1;
  for (const auto& [shape, dim] : layouts())
    for (bool reverse : {false, true})
      expect_parity(ascan::add, Tensor<float>::random(shape, seed++, -1.0f, 1.0f), dim, reverse);
}

TEST(CudaScan, AddInt32IsExactOnEveryPath) {
  ASCAN_REQUIRE_DEVICE();
  uint64_t seed = 100;
  for (const auto& [shape, dim] : layouts())
    for (bool reverse : {false, true})
      expect_parity(ascan::add, Tensor<int32_t>::random(shape, seed++, -100, 100), dim, reverse);
}

// Not commutative: a path that swaps operands or re-associates wrongly fails here.
TEST(CudaScan, LinearRecurrenceMatchesHostOnEveryPath) {
  ASCAN_REQUIRE_DEVICE();
  uint64_t seed = 200;
  for (const auto& [shape, dim] : layouts())
    for (bool reverse : {false, true}) {
      const auto a = Tensor<float>::random(shape, seed++, 0.5f, 1.0f);
      const auto b = Tensor<float>::random(shape, seed++, -1.0f, 1.0f);
      expect_parity2(ascan::linear_recurrence, a, b, dim, reverse);
    }
}

// 2^20 elements: many CUB tiles, so the decoupled look-back chain is exercised.
TEST(CudaScan, LargeOneDimensional) {
  ASCAN_REQUIRE_DEVICE();
  const Shape shape{int64_t{1} << 20};
  for (bool reverse : {false, true}) {
    expect_parity(ascan::add, Tensor<int32_t>::random(shape, 7, -100, 100), 0, reverse);
    expect_parity(ascan::add, Tensor<float>::random(shape, 8, 0.0f, 1.0f), 0, reverse, {.rtol = 1e-4, .atol = 1e-2});
  }
  const auto a = Tensor<float>::random(shape, 9, 0.9f, 1.0f);
  const auto b = Tensor<float>::random(shape, 10, -1.0f, 1.0f);
  expect_parity2(ascan::linear_recurrence, a, b, 0, false, {.rtol = 1e-3, .atol = 1e-3});
}

TEST(CudaScan, LargeTwoDimensional) {
  ASCAN_REQUIRE_DEVICE();
  expect_parity(ascan::add, Tensor<int32_t>::random({4096, 256}, 11, -100, 100), 0, false);   // chunked lanes
  expect_parity(ascan::add, Tensor<int32_t>::random({1 << 18, 4}, 12, -100, 100), 0, true);   // packed, long
  expect_parity(ascan::add, Tensor<int32_t>::random({256, 4096}, 13, -100, 100), 1, false);   // by key, long rows
  // Few lanes, thousands of chunks each: the chunk carries' by-key scan runs over several tiles
  // per lane; the linear recurrence checks that carries compose in scan order.
  for (bool reverse : {false, true}) {
    expect_parity(ascan::add, Tensor<int32_t>::random({100000, 9}, 14, -100, 100), 0, reverse);
    const auto a = Tensor<float>::random({30000, 9}, 15, 0.9f, 1.0f);
    const auto b = Tensor<float>::random({30000, 9}, 16, -1.0f, 1.0f);
    expect_parity2(ascan::linear_recurrence, a, b, 0, reverse, {.rtol = 1e-3, .atol = 1e-3});
  }
}

// Rows of kMinSpanSegment positions or more take the span engine (reduce, scan the totals,
// rescan): odd lengths leave short last tiles and spans, several rows test the restart per row,
// packed widths test large scan values (fewer positions per thread). Integers are exact; the
// composition of affine maps in int64 (a in {-1, 0, 1}) is exact and not commutative.
TEST(CudaScan, LongRowsTakeTheSpanEngine) {
  ASCAN_REQUIRE_DEVICE();
  const std::vector<Layout> rows = {{{30011}, 0}, {{3, 9001}, 1}, {{2, 5000, 1}, 1}, {{7001, 7}, 0},
                                    {{4099, 2}, 0}, {{4200, 8}, -2}, {{1 << 17}, 0}};
  uint64_t seed = 300;
  for (const auto& [shape, dim] : rows)
    for (bool reverse : {false, true}) {
      expect_parity(ascan::add, Tensor<int32_t>::random(shape, seed++, -100, 100), dim, reverse);
      expect_parity(ascan::max, Tensor<int32_t>::random(shape, seed++, -100000, 100000), dim, reverse);
      const auto a = Tensor<int64_t>::random(shape, seed++, -1, 1);
      const auto b = Tensor<int64_t>::random(shape, seed++, -100, 100);
      expect_parity2(Compose{}, a, b, dim, reverse, {.rtol = 0, .atol = 0});
      const auto fa = Tensor<float>::random(shape, seed++, 0.9f, 1.0f);
      const auto fb = Tensor<float>::random(shape, seed++, -1.0f, 1.0f);
      expect_parity2(ascan::linear_recurrence, fa, fb, dim, reverse, {.rtol = 1e-3, .atol = 1e-3});
      const auto da = Tensor<double>::random(shape, seed++, 0.9, 1.0);
      const auto db = Tensor<double>::random(shape, seed++, -1.0, 1.0);
      expect_parity2(ascan::linear_recurrence, da, db, dim, reverse, {.rtol = 1e-9, .atol = 1e-9});
    }
}

// Outputs are fresh tensors; the inputs are left untouched.
TEST(CudaScan, InputsAreNotModified) {
  ASCAN_REQUIRE_DEVICE();
  const auto x = Tensor<int32_t>::random({4, 50, 7}, 14, -5, 5);
  const auto dx = ascan::cuda::to_device(x);
  for (int64_t dim : {0, 1, 2}) (void)ascan::cuda::associative_scan(ascan::add, dx, dim);
  EXPECT_TRUE(ascan::cuda::to_host(dx) == x);
}

// A training loop calls the scan repeatedly; results must not depend on pooled, reused memory.
TEST(CudaScan, RepeatedCallsAgree) {
  ASCAN_REQUIRE_DEVICE();
  const auto x = Tensor<int32_t>::random({2, 3000, 20}, 15, -5, 5);
  const auto dx = ascan::cuda::to_device(x);
  const auto first = ascan::cuda::to_host(ascan::cuda::associative_scan(ascan::add, dx, 1));
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(ascan::cuda::to_host(ascan::cuda::associative_scan(ascan::add, dx, 1)) == first);
}

}  // namespace
