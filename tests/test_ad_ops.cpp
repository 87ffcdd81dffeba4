// test_ad_ops.cpp — every differentiable op against float64 central differences (random
// cotangents), and error parity with the plain Tensor function where one exists.
#include "ad_test_util.hpp"

namespace {

using namespace ascan_test;
namespace ad = ascan::ad;

TEST(AdOps, ArithmeticWithBroadcasting) {
  // Generic lambdas: the harness also checks values and errors against the plain Tensor ops.
  EXPECT_GRADCHECK([](const auto& x) { return x[0] + x[1]; }, {randn({3, 1}, 1), randn({1, 4}, 2)});
  EXPECT_GRADCHECK([](const auto& x) { return x[0] - x[1]; }, {randn({2, 3}, 3), randn({3}, 4)});
  EXPECT_GRADCHECK([](const auto& x) { return x[0] * x[1]; }, {randn({2, 3}, 5), randn({2, 1}, 6)});
  EXPECT_GRADCHECK([](const auto& x) { return x[0] / x[1]; }, {randn({2, 3}, 7), uniform({3}, 8, 0.5, 2.0)});
  EXPECT_GRADCHECK([](const auto& x) { return -x[0]; }, {randn({4}, 9)});
  EXPECT_GRADCHECK([](const auto& x) { return x[0] * 2.5 + 1.0; }, {randn({2, 2}, 10)});
  EXPECT_GRADCHECK([](const VarList& x) { return 3.0 - x[0] / 2.0; }, {randn({3}, 11)});
}

TEST(AdOps, IncompatibleShapesThrowLikeThePlainOp) {
  const auto report = ad::gradcheck([](const auto& x) { return x[0] + x[1]; }, {randn({2, 3}, 1), randn({4}, 2)});
  EXPECT_TRUE(report.ok) << report.message;  // both versions throw: parity holds
  VD a = ad::param(randn({2, 3}, 1)), b = ad::param(randn({4}, 2));
  try {
    (void)(a * b);
    FAIL() << "expected ascan::Error";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("ascan::ad::operator*()"));
    EXPECT_THAT(e.what(), testing::HasSubstr("[2, 3] and [4]"));
  }
}

TEST(AdOps, UnaryFunctions) {
  EXPECT_GRADCHECK([](const VarList& x) { return ad::exp(x[0]); }, {randn({5}, 1)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::log(x[0]); }, {uniform({5}, 2, 0.2, 3.0)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::tanh(x[0]); }, {randn({5}, 3)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sigmoid(x[0]); }, {randn({5}, 4) * 4.0});
  // relu away from its kink at 0 (central differences straddle it otherwise).
  EXPECT_GRADCHECK([](const VarList& x) { return ad::relu(x[0]); },
                   {TD::from({-2.0, -0.5, 0.3, 1.5, -1.1, 0.7}, {6})});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::softplus(x[0]); }, {randn({5}, 5) * 10.0});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::square(x[0]); }, {randn({5}, 6)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sqrt(x[0]); }, {uniform({5}, 7, 0.2, 3.0)});
}

TEST(AdOps, SoftplusIsStableForLargeInputs) {
  VD x = ad::param(TD::from({-800.0, 800.0}, {2}));
  const VD y = ad::softplus(x);
  EXPECT_EQ(y.value()(0), 0.0);
  EXPECT_EQ(y.value()(1), 800.0);
  ad::backward(ad::sum(y));
  EXPECT_NEAR(x.grad()(0), 0.0, 1e-300);
  EXPECT_EQ(x.grad()(1), 1.0);
}

TEST(AdOps, Matmul) {
  EXPECT_GRADCHECK([](const auto& x) { return matmul(x[0], x[1]); }, {randn({3, 4}, 1), randn({4, 2}, 2)});
  EXPECT_GRADCHECK([](const auto& x) { return matmul(x[0], x[1]); }, {randn({4}, 3), randn({4, 2}, 4)});
  EXPECT_GRADCHECK([](const auto& x) { return matmul(x[0], x[1]); }, {randn({3, 4}, 5), randn({4}, 6)});
  EXPECT_GRADCHECK([](const auto& x) { return matmul(x[0], x[1]); }, {randn({2, 3, 4}, 7), randn({2, 4, 2}, 8)});
  EXPECT_GRADCHECK([](const auto& x) { return matmul(x[0], x[1]); }, {randn({2, 3, 4}, 9), randn({4, 2}, 10)});
  EXPECT_GRADCHECK([](const auto& x) { return matmul(x[0], x[1]); }, {randn({3, 4}, 11), randn({2, 4, 2}, 12)});
  // Mismatched inner dims: both versions throw.
  const auto report = ad::gradcheck([](const auto& x) { return matmul(x[0], x[1]); }, {randn({3, 4}, 1), randn({3, 2}, 2)});
  EXPECT_TRUE(report.ok) << report.message;
}

TEST(AdOps, ShapeOps) {
  EXPECT_GRADCHECK([](const VarList& x) { return ad::transpose(x[0]); }, {randn({3, 4}, 1)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::transpose(x[0]); }, {randn({2, 3, 4}, 2)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::outer(x[0], x[1]); }, {randn({3}, 3), randn({4}, 4)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::reshape(x[0], {4, -1}); }, {randn({2, 3, 2}, 5)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::select(x[0], 1, 2); }, {randn({2, 3, 2}, 6)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::select(x[0], -1, 0); }, {randn({2, 3, 2}, 7)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::slice(x[0], 1, 1, 3); }, {randn({2, 4, 2}, 8)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::stack(VarList{x[0], x[1], x[0]}, 1); }, {randn({2, 3}, 9), randn({2, 3}, 10)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::concat(VarList{x[0], x[1]}, 0); }, {randn({2, 3}, 11), randn({1, 3}, 12)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::broadcast_to(x[0], {2, 3, 4}); }, {randn({3, 1}, 13)});
}

TEST(AdOps, ShapeOpErrors) {
  VD a = ad::param(randn({2, 3}, 1));
  EXPECT_THROW(ad::select(a, 1, 3), ascan::Error);
  EXPECT_THROW(ad::select(a, 2, 0), ascan::Error);
  EXPECT_THROW(ad::slice(a, 1, 2, 1), ascan::Error);
  EXPECT_THROW(ad::concat(VarList{a, ad::param(randn({2, 4}, 2))}, 0), ascan::Error);
  EXPECT_THROW(ad::stack(VarList{a, ad::param(randn({3, 2}, 2))}, 0), ascan::Error);
  EXPECT_THROW(ad::transpose(ad::param(randn({3}, 3))), ascan::Error);
  EXPECT_THROW(ad::reshape(a, {4, 2}), ascan::Error);
}

TEST(AdOps, Reductions) {
  EXPECT_GRADCHECK([](const auto& x) { return sum(x[0]); }, {randn({2, 3}, 1)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::mean(x[0]); }, {randn({2, 3}, 2)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(x[0], 1); }, {randn({2, 3, 4}, 3)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(x[0], -1, true); }, {randn({2, 3, 4}, 4)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::mean(x[0], 0); }, {randn({2, 3, 4}, 5)});
}

TEST(AdOps, SoftmaxAndLogSoftmax) {
  EXPECT_GRADCHECK([](const VarList& x) { return ad::softmax(x[0], 1); }, {randn({2, 5, 3}, 1)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::softmax(x[0], -1); }, {randn({2, 5, 3}, 2)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::log_softmax(x[0], 1); }, {randn({2, 5, 3}, 3)});
  // Closed form: softmax rows sum to one; log_softmax = log(softmax).
  VD x = ad::constant(randn({4, 6}, 4) * 30.0);  // large logits: stability
  const TD s = ad::softmax(x, 1).value(), ls = ad::log_softmax(x, 1).value();
  for (int64_t i = 0; i < 4; ++i) {
    double total = 0;
    for (int64_t j = 0; j < 6; ++j) {
      total += s(i, j);
      EXPECT_NEAR(std::log(s(i, j)), ls(i, j), 1e-9 * (1 + std::abs(ls(i, j))));
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

TEST(AdOps, GatherForClassification) {
  const auto labels = ascan::Tensor<int64_t>::from({2, 0, 4}, {3});
  EXPECT_GRADCHECK([labels](const VarList& x) { return ad::gather(x[0], 1, labels); }, {randn({3, 5}, 1)});
  // Cross-entropy: -mean(log_softmax(logits)[label]).
  EXPECT_GRADCHECK([labels](const VarList& x) { return -ad::mean(ad::gather(ad::log_softmax(x[0], 1), 1, labels)); },
                   {randn({3, 5}, 2)});
  VD x = ad::param(randn({3, 5}, 3));
  EXPECT_THROW(ad::gather(x, 1, ascan::Tensor<int64_t>::from({2, 0, 5}, {3})), ascan::Error);
  EXPECT_THROW(ad::gather(x, 1, ascan::Tensor<int64_t>::from({2, 0}, {2})), ascan::Error);
}

TEST(AdOps, CompositeModel) {
  // A small MLP with a classification loss: composition of many ops at once.
  const auto labels = ascan::Tensor<int64_t>::from({1, 0, 2, 1}, {4});
  auto mlp = [labels](const VarList& p) {
    const VD h = ad::tanh(ad::matmul(p[0], p[1]) + p[2]);
    const VD logits = ad::matmul(h, p[3]);
    return -ad::mean(ad::gather(ad::log_softmax(logits, 1), 1, labels));
  };
  EXPECT_GRADCHECK(mlp, {randn({4, 3}, 1), randn({3, 5}, 2), randn({5}, 3), randn({5, 3}, 4)});
}

}  // namespace
