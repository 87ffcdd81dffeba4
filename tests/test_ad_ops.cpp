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

namespace {

using namespace ascan_test;
namespace ad = ascan::ad;

// Shapes above the ops' parallel grain (2^15 elements), so the threaded, blocked paths run:
// values against the plain Tensor ops (single-threaded, independent code), gradients against
// float64 central differences along random directions.
// A sum's gradient is one value broadcast to its operand's shape; the ops after a sum take it as
// that value (TapeState::uniform_grad) and nodes that do not are given it materialised. The
// scalar loss gets a random cotangent here, so the value is not 1.
TEST(AdUniformGradients, OpsUnderASumMatchFiniteDifferences) {
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::exp(x[0])); }, {randn({3, 4}, 1)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::log(x[0])); }, {uniform({3, 4}, 2, 0.2, 3.0)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::tanh(x[0])); }, {randn({3, 4}, 3)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::sigmoid(x[0])); }, {randn({3, 4}, 4) * 3.0});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::softplus(x[0])); }, {randn({3, 4}, 5) * 3.0});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::sqrt(x[0])); }, {uniform({3, 4}, 6, 0.2, 3.0)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::mean(x[0] * x[1]); }, {randn({3, 4}, 7), randn({3, 4}, 8)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(x[0] * x[1]); }, {randn({3, 4}, 9), randn({4}, 10)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(x[0] + x[1]); }, {randn({3, 4}, 11), randn({3, 1}, 12)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(x[0] - x[1]); }, {randn({3, 4}, 13), randn({4}, 14)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(ad::reshape(x[0], {4, 3}) * 2.0 - x[1]); },
                   {randn({3, 4}, 15), randn({1, 3}, 16)});
  // A node reached by a uniform gradient and by a full one (either order).
  EXPECT_GRADCHECK([](const VarList& x) {
    const VD y = x[0] * 1.5;
    return ad::sum(y) + ad::sum(y * y);
  }, {randn({3, 4}, 17)});
  EXPECT_GRADCHECK([](const VarList& x) {
    const VD y = ad::tanh(x[0]);
    return ad::sum(y * y) + ad::sum(y) * 0.5;
  }, {randn({3, 4}, 18)});
  EXPECT_GRADCHECK([](const VarList& x) { return ad::sum(x[0]) * ad::sum(x[1]); }, {randn({3}, 19), randn({2}, 20)});
  // Into a scan, which reads it materialised.
  EXPECT_GRADCHECK([](const VarList& x) {
    const auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{x[0], x[1]}, 0);
    return ad::sum(yb * x[2]);
  }, {uniform({6, 3}, 21, 0.5, 0.9), randn({6, 3}, 22), randn({6, 3}, 23)});
}

// With the loss's cotangent 1, a product's gradient is the other operand itself: shared with the
// tape, never with a leaf's gradient (the user may modify that).
TEST(AdUniformGradients, ProductGradientIsTheOperandButALeafGetsACopy) {
  const TD w = randn({3, 4}, 1);
  VD x = ad::param(randn({3, 4}, 2));
  ad::backward(ad::sum(x * ad::constant(w)));
  EXPECT_EQ(x.grad(), w);
  EXPECT_FALSE(x.grad().shares_storage_with(w));
  TD g = x.grad();
  g.data()[0] += 1.0;
  EXPECT_EQ(w.data()[0], randn({3, 4}, 1).data()[0]);
  // Through an add that passes the gradient on to a leaf unchanged.
  VD z = ad::param(randn({3, 4}, 3));
  ad::backward(ad::sum((z + 0.0) * ad::constant(w)));
  EXPECT_EQ(z.grad(), w);
  EXPECT_FALSE(z.grad().shares_storage_with(w));
}

// An op recorded outside the library reads s.grads[self] and gets the materialised gradient.
TEST(AdUniformGradients, NodesThatDoNotAskGetAMaterialisedGradient) {
  VD x = ad::param(randn({2, 5}, 1));
  const int32_t ix = ad::detail::id_on_current(x, "test");
  const TD vx = x.value();
  VD y = ad::detail::record<double>(vx * TD::full({2, 5}, 3.0), {ix}, [=](ad::detail::TapeState<double>& s, int32_t self) {
    const TD g = s.grads[self];
    ASSERT_EQ(g.shape(), (ascan::Shape{2, 5}));
    s.accumulate(ix, g * TD::full({2, 5}, 3.0));
  });
  ad::backward(ad::sum(y) * 2.0);
  EXPECT_EQ(x.grad(), TD::full({2, 5}, 6.0));
}

TEST(AdOpsParallel, LargeOperandsMatchPlainOpsAndFiniteDifferences) {
  const ad::GradcheckOptions fast{.fast = true, .num_directions = 4};
  const TD x = randn({300, 129}, 1), row = randn({129}, 2), col = uniform({300, 1}, 3, 0.5, 2.0);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] * v[1] + v[2]; }, {x, row, col}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] / v[2] - v[1]; }, {x, row, col}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] * v[1]; }, {randn({40, 64, 1}, 4), randn({40, 1, 50}, 5)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] - v[1]; }, {randn({1, 1}, 6), x}, fast);
  // A broadcast operand's gradient as one multiply-reduce (no full-size product): reduced along
  // the last dim, along a middle dim at stride 1 and at a longer stride, and a layout it declines.
  EXPECT_GRADCHECK([](const auto& v) { return v[0] * v[1]; }, {randn({80, 64, 1}, 23), randn({80, 1, 50}, 24)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] * v[1]; }, {randn({300, 1}, 25), randn({300, 129}, 26)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] * v[1]; }, {randn({100, 3, 40}, 27), randn({100, 1, 40}, 28)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return v[0] * v[1]; }, {randn({70, 5, 1, 40}, 29), randn({70, 1, 6, 40}, 30)}, fast);
  EXPECT_GRADCHECK([](const VarList& v) { return ad::sum(v[0]); }, {randn({70000}, 7)}, fast);
  for (int64_t dim : {0, 1, 2})
    EXPECT_GRADCHECK([dim](const VarList& v) { return ad::sum(v[0], dim, dim == 1); }, {randn({40, 300, 33}, 8)}, fast);
  EXPECT_GRADCHECK([](const VarList& v) { return ad::broadcast_to(v[0], {7, 300, 40}); }, {randn({300, 1}, 9)}, fast);
  EXPECT_GRADCHECK([](const VarList& v) { return ad::broadcast_to(v[0], {50, 20, 40}); }, {randn({50, 1, 40}, 10)}, fast);
  EXPECT_GRADCHECK([](const VarList& v) { return ad::softmax(v[0], 1); }, {randn({300, 129}, 11)}, fast);
  EXPECT_GRADCHECK([](const VarList& v) { return ad::log_softmax(v[0], 0); }, {randn({300, 129}, 12)}, fast);
  EXPECT_GRADCHECK([](const VarList& v) { return ad::exp(v[0]) + ad::tanh(v[0]) * ad::sigmoid(v[0]); }, {x}, fast);
  // Products: one large 2-D product (blocks of rows), batches, and a shared operand on either side.
  EXPECT_GRADCHECK([](const auto& v) { return matmul(v[0], v[1]); }, {randn({300, 70}, 13), randn({70, 120}, 14)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return matmul(v[0], v[1]); }, {randn({40, 30, 20}, 15), randn({40, 20, 25}, 16)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return matmul(v[0], v[1]); }, {randn({40, 30, 20}, 17), randn({20, 25}, 18)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return matmul(v[0], v[1]); }, {randn({30, 20}, 19), randn({40, 20, 25}, 20)}, fast);
  EXPECT_GRADCHECK([](const auto& v) { return matmul(v[0], v[1]); }, {randn({70}, 21), randn({70, 600}, 22)}, fast);
}

// Elementwise work splits anywhere and reductions sum in blocks fixed by the shape: a training
// step's values and gradients are bitwise the same with 1 and 2 threads.
TEST(AdOpsParallel, ResultsDoNotDependOnTheThreadCount) {
  const int saved = ascan::num_threads();
  auto run = [](int threads) {
    ascan::set_num_threads(threads);
    VD a = ad::param(randn({200, 300}, 1)), b = ad::param(randn({300}, 2)), w = ad::param(randn({300, 40}, 3));
    VD h = ad::tanh(a * b + 0.5);
    VD loss = ad::sum(ad::log_softmax(ad::matmul(h, w), 1)) + ad::mean(ad::sum(h, 0) * b) + ad::sum(ad::square(a));
    ad::backward(loss);
    return std::vector<TD>{loss.value().clone(), a.grad().clone(), b.grad().clone(), w.grad().clone()};
  };
  const auto one = run(1), two = run(2);
  ascan::set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "result " << i;
}

}  // namespace
