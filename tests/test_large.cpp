// test_large.cpp — scans over more than 2^31 elements (scripts/large.sh; built with
// -DASCAN_LARGE_TESTS=ON, never in CI: a float32 input and its result take 17 GB, the gradient
// 34 GB). Exact checks: the inputs are differences of a hash s(t) in {0, 1, 2, 3}, so every
// prefix sum, block total and carry is a small integer (exact in float32 in any association)
// and the scan must give back s(t) itself, at every index; s is not periodic, so an index that
// wrapped at 2^31 (or 2^32 bytes) reads a different value.
#include <ascan/ascan.hpp>
#include <ascan/autodiff.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

namespace ad = ascan::ad;
using ascan::Tensor;

constexpr int64_t kN = (int64_t{1} << 31) + 7;

// A hash of (t, salt) in {0, 1, 2, 3}; s(-1) = 0.
float s(int64_t t, uint64_t salt = 0) {
  if (t < 0) return 0.0f;
  uint64_t z = static_cast<uint64_t>(t) * 0x9E3779B97F4A7C15ull + salt;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<float>((z ^ (z >> 31)) >> 62);
}

// Bytes of memory and swap available, from /proc/meminfo (0 where it cannot be read).
double available_gib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0, total = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:" || key == "SwapFree:") total += kib;
  return total / (1 << 20);
}

// The first index where y differs from want(t), or -1.
template <class Want>
int64_t first_mismatch(const float* y, int64_t n, const Want& want) {
  for (int64_t t = 0; t < n; ++t)
    if (y[t] != want(t)) return t;
  return -1;
}

TEST(Large, OneSequenceAddOver2To31Elements) {
  Tensor<float> x = Tensor<float>::empty({kN});
  float* p = x.data();
  for (int64_t t = 0; t < kN; ++t) p[t] = s(t) - s(t - 1);
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    if (reverse) {  // suffix sums: x_t = r(t) - r(t + 1), so y_t = r(t)
      for (int64_t t = 0; t < kN; ++t) p[t] = s(t, 1) - (t + 1 < kN ? s(t + 1, 1) : 0.0f);
    }
    const Tensor<float> y = ascan::associative_scan(ascan::add, x, 0, {.reverse = reverse});
    ASSERT_EQ(y.numel(), kN);
    const int64_t bad = first_mismatch(y.data(), kN, [&](int64_t t) { return s(t, reverse ? 1 : 0); });
    EXPECT_EQ(bad, -1) << "first wrong element " << bad << ": got " << (bad >= 0 ? y.data()[bad] : 0.0f)
                       << ", expected " << (bad >= 0 ? s(bad, reverse ? 1 : 0) : 0.0f);
  }
}

TEST(Large, RowsOfEightOver2To31Elements) {
  const int64_t T = (int64_t{1} << 28) + 1;  // 2^31 + 8 elements
  Tensor<float> x = Tensor<float>::empty({T, 8});
  float* p = x.data();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < 8; ++c) p[t * 8 + c] = s(t * 8 + c) - (t > 0 ? s((t - 1) * 8 + c) : 0.0f);
  const Tensor<float> y = ascan::associative_scan(ascan::add, x, 0);
  const int64_t bad = first_mismatch(y.data(), T * 8, [&](int64_t i) { return s(i); });
  EXPECT_EQ(bad, -1) << "first wrong element " << bad;
}

// d/dx_t of sum_u w_u y_u with y = cumsum(x) is sum_{u >= t} w_u: with w_u = r(u) - r(u + 1) that
// is r(t), exactly.
TEST(Large, GradientOver2To31Elements) {
  if (available_gib() < 36)
    GTEST_SKIP() << "needs 36 GiB of memory and swap (x, y, the seed and the gradient), "
                 << available_gib() << " GiB available";
  Tensor<float> w = Tensor<float>::empty({kN});
  for (int64_t t = 0; t < kN; ++t) w.data()[t] = s(t, 2) - (t + 1 < kN ? s(t + 1, 2) : 0.0f);
  Tensor<float> xv = Tensor<float>::empty({kN});
  for (int64_t t = 0; t < kN; ++t) xv.data()[t] = s(t) - s(t - 1);
  Tensor<float> g;
  {
    ad::Var<float> x = ad::param(xv);
    xv = Tensor<float>();
    {
      const ad::Var<float> y = ascan::associative_scan(ascan::add, x, 0);
      ad::backward(y, w);
    }
    w = Tensor<float>();
    g = x.grad();
  }
  ASSERT_EQ(g.numel(), kN);
  const int64_t bad = first_mismatch(g.data(), kN, [&](int64_t t) { return s(t, 2); });
  EXPECT_EQ(bad, -1) << "first wrong element " << bad << ": got " << (bad >= 0 ? g.data()[bad] : 0.0f)
                     << ", expected " << (bad >= 0 ? s(bad, 2) : 0.0f);
}

}  // namespace
