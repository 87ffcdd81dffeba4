// test_scan_list.cpp — Generic mode over a run-time list of leaves (std::vector<Tensor<T>>).
#include <ascan/ascan.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

using TensorList = std::vector<ascan::Tensor<double>>;

// Affine maps x -> A x + b composed left to right: (A, b) then (C, d) is (C A, C b + d).
TensorList compose(const TensorList& l, const TensorList& r) {
  return {matmul(r[0], l[0]), matmul(r[0], l[1]) + r[1]};
}

// Sequential reference written with plain loops on the raw data (2x2 matrices, 2-vectors).
void reference(const ascan::Tensor<double>& m, const ascan::Tensor<double>& v, bool reverse,
               std::vector<double>& ym, std::vector<double>& yv) {
  const int64_t T = m.shape()[0];
  ym.assign(T * 4, 0.0);
  yv.assign(T * 2, 0.0);
  double A[4], b[2];
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    const double* C = m.data() + 4 * t;
    const double* d = v.data() + 2 * t;
    if (s == 0) {
      std::copy(C, C + 4, A);
      std::copy(d, d + 2, b);
    } else {
      const double nA[4] = {C[0] * A[0] + C[1] * A[2], C[0] * A[1] + C[1] * A[3],
                            C[2] * A[0] + C[3] * A[2], C[2] * A[1] + C[3] * A[3]};
      const double nb[2] = {C[0] * b[0] + C[1] * b[1] + d[0], C[2] * b[0] + C[3] * b[1] + d[1]};
      std::copy(nA, nA + 4, A);
      std::copy(nb, nb + 2, b);
    }
    std::copy(A, A + 4, ym.begin() + 4 * t);
    std::copy(b, b + 2, yv.begin() + 2 * t);
  }
}

TEST(ScanList, AffineChainMatchesSequentialReference) {
  for (bool reverse : {false, true}) {
    for (int64_t T : {0, 1, 2, 5, 33}) {
      auto m = ascan::Tensor<double>::random({T, 2, 2}, 7 + T, -1.0, 1.0);
      auto v = ascan::Tensor<double>::random({T, 2}, 8 + T, -1.0, 1.0);
      const TensorList ys = ascan::associative_scan(ascan::generic(compose), TensorList{m, v}, 0,
                                                    {.reverse = reverse});
      std::vector<double> ym, yv;
      reference(m, v, reverse, ym, yv);
      ASSERT_EQ(ys.size(), 2u);
      ASSERT_EQ(ys[0].shape(), m.shape());
      ASSERT_EQ(ys[1].shape(), v.shape());
      for (int64_t i = 0; i < T * 4; ++i) EXPECT_NEAR(ys[0].data()[i], ym[i], 1e-12) << "T=" << T;
      for (int64_t i = 0; i < T * 2; ++i) EXPECT_NEAR(ys[1].data()[i], yv[i], 1e-12) << "T=" << T;
    }
  }
}

TEST(ScanList, WritesIntoProvidedOutputs) {
  auto m = ascan::Tensor<double>::random({9, 2, 2}, 1), v = ascan::Tensor<double>::random({9, 2}, 2);
  TensorList out{ascan::Tensor<double>::zeros({9, 2, 2}), ascan::Tensor<double>::zeros({9, 2})};
  ascan::associative_scan(ascan::generic(compose), TensorList{m, v}, 0, {}, out);
  const TensorList ys = ascan::associative_scan(ascan::generic(compose), TensorList{m, v}, 0);
  EXPECT_EQ(out[0], ys[0]);
  EXPECT_EQ(out[1], ys[1]);
}

TEST(ScanList, CombineReturningWrongNumberOfLeavesThrows) {
  auto m = ascan::Tensor<double>::random({4, 2, 2}, 1), v = ascan::Tensor<double>::random({4, 2}, 2);
  auto drops_a_leaf = [](const TensorList& l, const TensorList& r) { return TensorList{matmul(r[0], l[0])}; };
  try {
    ascan::associative_scan(ascan::generic(drops_a_leaf), TensorList{m, v}, 0);
    FAIL() << "expected ascan::Error";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("ascan::associative_scan()"));
    EXPECT_THAT(e.what(), testing::HasSubstr("returned 1 leaves, expected 2"));
  }
}

TEST(ScanList, CombineReturningWrongSliceShapeThrows) {
  auto m = ascan::Tensor<double>::random({4, 2, 2}, 1), v = ascan::Tensor<double>::random({4, 2}, 2);
  auto wrong_shape = [](const TensorList& l, const TensorList& r) {
    return TensorList{matmul(r[0], l[0]), matmul(r[0], l[0])};  // leaf 1 comes back 2x2, not [2]
  };
  try {
    ascan::associative_scan(ascan::generic(wrong_shape), TensorList{m, v}, 0);
    FAIL() << "expected ascan::Error";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("leaf 1 of shape [2, 2], expected [2]"));
  }
}

TEST(ScanList, BadListsThrow) {
  auto m = ascan::Tensor<double>::random({4, 2, 2}, 1), v = ascan::Tensor<double>::random({5, 2}, 2);
  EXPECT_THROW(ascan::associative_scan(ascan::generic(compose), TensorList{}, 0), ascan::Error);
  try {
    ascan::associative_scan(ascan::generic(compose), TensorList{m, v}, 0);
    FAIL() << "expected ascan::Error";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("leaf 1 has length 5 on dim 0, expected 4 (leaf 0)"));
  }
  TensorList short_out{ascan::Tensor<double>::zeros({4, 2, 2})};
  EXPECT_THROW(ascan::associative_scan(ascan::generic(compose), TensorList{m, m}, 0, {}, short_out),
               ascan::Error);
}

}  // namespace
