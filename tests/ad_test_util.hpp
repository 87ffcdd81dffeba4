// ad_test_util.hpp — shared helpers for the autodiff tests: seeded inputs and a gradcheck assert.
#pragma once

#include <ascan/ascan.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace ascan_test {

using TD = ascan::Tensor<double>;
using VD = ascan::ad::Var<double>;
using VarList = std::vector<VD>;

inline TD randn(ascan::Shape s, uint64_t seed) { return TD::randn(std::move(s), seed); }
inline TD uniform(ascan::Shape s, uint64_t seed, double lo, double hi) { return TD::random(std::move(s), seed, lo, hi); }

inline int64_t total_numel(const std::vector<TD>& inputs) {
  int64_t n = 0;
  for (const auto& t : inputs) n += t.numel();
  return n;
}

// Fails the test with the harness's report when the gradients disagree; also fails when the
// harness checked nothing although the inputs have elements (a check that cannot fail).
template <class Fn>
void expect_gradcheck(const char* file, int line, const Fn& fn, const std::vector<TD>& inputs,
                      const ascan::ad::GradcheckOptions& opts = {}) {
  const auto report = ascan::ad::gradcheck(fn, inputs, opts);
  const testing::ScopedTrace trace(file, line, "gradcheck");
  EXPECT_TRUE(report.ok) << report.message;
  if (total_numel(inputs) > 0) {
    EXPECT_GT(report.num_checked, 0);
  }
}
#define EXPECT_GRADCHECK(...) ::ascan_test::expect_gradcheck(__FILE__, __LINE__, __VA_ARGS__)

}  // namespace ascan_test
