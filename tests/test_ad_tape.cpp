// test_ad_tape.cpp — tape semantics: accumulation, zeroing, no-grad, nested tapes, rewind, optimizers.
#include "ad_test_util.hpp"

namespace {

using namespace ascan_test;
namespace ad = ascan::ad;

TEST(AdTape, GradientAccumulatesWhenAVarIsUsedTwice) {
  VD x = ad::param(TD::from({1.5, -2.0}, {2}));
  ad::backward(ad::sum(x * x + x));  // d/dx = 2x + 1
  EXPECT_EQ(x.grad(), TD::from({4.0, -3.0}, {2}));
}

TEST(AdTape, LeafGradientsAddUpAcrossBackwardCallsUntilZeroed) {
  VD x = ad::param(TD::from({1.0, 2.0}, {2}));
  const VD loss = ad::sum(x * 3.0);
  ad::backward(loss, {.retain_graph = true});
  ad::backward(loss, {.retain_graph = true});
  EXPECT_EQ(x.grad(), TD::from({6.0, 6.0}, {2}));
  x.zero_grad();
  EXPECT_EQ(x.grad(), TD::zeros({2}));
  ad::backward(loss);
  EXPECT_EQ(x.grad(), TD::from({3.0, 3.0}, {2}));
}

TEST(AdTape, ConstantsAndNoGradScopesRecordNoGradient) {
  VD x = ad::param(randn({3}, 1));
  VD c = ad::constant(randn({3}, 2));
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(c.requires_grad());
  EXPECT_FALSE((c * c).requires_grad());
  {
    ad::NoGradGuard guard;
    EXPECT_FALSE(ad::grad_enabled());
    EXPECT_FALSE((x * c).requires_grad());
  }
  EXPECT_TRUE(ad::grad_enabled());
  EXPECT_TRUE((x * c).requires_grad());
}

TEST(AdTape, BackwardNeedsAScalarOrASeedOfTheRightShape) {
  VD x = ad::param(randn({3}, 1));
  EXPECT_THROW(ad::backward(x * 2.0), ascan::Error);
  EXPECT_THROW(ad::backward(x * 2.0, TD::zeros({4})), ascan::Error);
  const TD seed = randn({3}, 2);
  ad::backward(x * 2.0, seed);  // a vector-Jacobian product with an explicit cotangent
  EXPECT_EQ(x.grad(), seed * 2.0);
}

// The seed is not copied for the sweep, but a leaf gradient it reaches unchanged is a copy:
// modifying the gradient in place must not change the caller's seed (nor the other way round).
TEST(AdTape, LeafGradientsDoNotShareTheSeedsStorage) {
  const TD seed = randn({2, 3}, 3), kept = seed.clone();
  VD x = ad::param(randn({6}, 4)), y = ad::param(randn({2, 3}, 5));
  ad::backward(ad::reshape(x, {2, 3}), seed);
  ad::backward(y, seed);  // the root itself is the leaf
  for (const VD& v : {x, y}) {
    EXPECT_FALSE(v.grad().shares_storage_with(seed));
    v.grad().data()[0] += 1.0;
  }
  EXPECT_EQ(seed, kept);
  EXPECT_EQ(x.grad().reshape({2, 3}).at({0, 1}), kept.at({0, 1}));
  EXPECT_EQ(y.grad().at({0, 0}), kept.at({0, 0}) + 1.0);
}

TEST(AdTape, NestedTapeTakesAVjpInsideAnOuterComputation) {
  ad::Tape<double> outer;
  VD w = ad::param(TD::from({2.0, -1.0}, {2}));
  {
    ad::Tape<double> inner;  // w is imported as a proxy leaf on the inner tape
    VD z = ad::param(TD::from({3.0, 5.0}, {2}));
    ad::backward(ad::sum(w * z));
    EXPECT_EQ(z.grad(), TD::from({2.0, -1.0}, {2}));
    EXPECT_EQ(w.grad(), TD::zeros({2}));  // not yet sent to the outer tape
    inner.propagate_to_outer();
    EXPECT_EQ(w.grad(), TD::from({3.0, 5.0}, {2}));
  }
  // The outer tape is current again.
  ad::backward(ad::sum(w));
  EXPECT_EQ(w.grad(), TD::from({4.0, 6.0}, {2}));
}

// Importing an outer Var records a node, which may move the tape's arrays: an argument taken
// from another Var (its shape or value) must stay valid across it.
TEST(AdTape, ArgumentsFromVarsSurviveImportingAnOuterVar) {
  ad::Tape<double> outer;
  VD p = ad::param(TD::randn({2, 2}, 1));
  for (int n = 1; n <= 64; n *= 2) {  // several sizes, so one import lands on a reallocation
    ad::Tape<double> inner;
    std::vector<VD> keep;
    for (int i = 0; i < n - 1; ++i) keep.push_back(ad::param(TD::zeros({1})));
    VD a = ad::param(TD::randn({3, 2, 2}, 2));
    VD b = ad::broadcast_to(p, a.shape());
    ASSERT_EQ(b.shape(), (ascan::Shape{3, 2, 2}));
    EXPECT_EQ(b.value(), ascan::broadcast_to(p.value(), ascan::Shape{3, 2, 2}));
  }
}

TEST(AdTape, VarsOfADestroyedTapeAreRejected) {
  VD stale;
  {
    ad::Tape<double> tape;
    stale = ad::param(randn({2}, 1));
  }
  EXPECT_FALSE(stale.valid());
  EXPECT_THROW(stale.value(), ascan::Error);
  EXPECT_THROW(ad::exp(stale), ascan::Error);
  EXPECT_THROW(VD().value(), ascan::Error);
}

TEST(AdTape, RewindKeepsParametersAndDropsTheStep) {
  ad::Tape<double> tape;
  VD w = ad::param(TD::from({1.0, 2.0}, {2}));
  const int64_t mark = tape.mark();
  for (int step = 0; step < 3; ++step) {
    const VD loss = ad::sum(ad::square(w));
    ad::backward(loss);
    tape.rewind(mark);
    EXPECT_EQ(tape.size(), 1);
    EXPECT_FALSE(loss.valid());
    EXPECT_THROW(loss.value(), ascan::Error);
  }
  EXPECT_EQ(w.grad(), TD::from({6.0, 12.0}, {2}));  // 3 steps of 2w
  EXPECT_THROW(tape.rewind(tape.mark() + 1), ascan::Error);
  EXPECT_THROW(tape.rewind(-1), ascan::Error);
}

TEST(AdTape, RepeatedBackwardIsBitwiseIdentical) {
  VD a = ad::param(uniform({3, 64, 2}, 1, 0.5, 1.0)), b = ad::param(randn({3, 64, 2}, 2));
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 1);
  const VD loss = ad::sum(ad::tanh(yb) * ad::constant(randn({3, 64, 2}, 3))) + ad::sum(ya);
  ad::backward(loss, {.retain_graph = true});
  const TD ga = a.grad().clone(), gb = b.grad().clone();
  a.zero_grad();
  b.zero_grad();
  ad::backward(loss);
  EXPECT_EQ(a.grad(), ga);
  EXPECT_EQ(b.grad(), gb);
}

TEST(AdOptim, SgdWithMomentumMinimisesAQuadratic) {
  ad::Tape<double> tape;
  const TD target = TD::from({1.0, -2.0, 0.5}, {3});
  VD x = ad::param(TD::zeros({3}));
  ad::SGD<double> opt({x}, 0.1, 0.5);
  const int64_t mark = tape.mark();
  for (int i = 0; i < 200; ++i) {
    opt.zero_grad();
    ad::backward(ad::sum(ad::square(x - ad::constant(target))));
    opt.step();
    tape.rewind(mark);
  }
  EXPECT_TRUE(ascan::allclose(x.value(), target, 0, 1e-8));
}

TEST(AdOptim, AdamFirstStepAndConvergence) {
  ad::Tape<double> tape;
  VD x = ad::param(TD::from({3.0, -4.0}, {2}));
  ad::Adam<double> opt({x}, 0.1);
  const int64_t mark = tape.mark();
  ad::backward(ad::sum(ad::square(x)));
  opt.step();  // the first Adam step moves each coordinate by lr * g / (|g| + eps') ~ lr
  EXPECT_NEAR(x.value()(0), 3.0 - 0.1, 1e-6);
  EXPECT_NEAR(x.value()(1), -4.0 + 0.1, 1e-6);
  tape.rewind(mark);
  for (int i = 0; i < 500; ++i) {
    opt.zero_grad();
    ad::backward(ad::sum(ad::square(x)));
    opt.step();
    tape.rewind(mark);
  }
  EXPECT_LT(std::abs(x.value()(0)) + std::abs(x.value()(1)), 1e-2);
}

TEST(AdOptim, RejectsBadSettingsAndNonParameters) {
  VD x = ad::param(TD::zeros({2}));
  EXPECT_THROW(ad::SGD<double>({x}, -1.0), ascan::Error);
  EXPECT_THROW(ad::Adam<double>({x}, 0.1, 1.0), ascan::Error);
  EXPECT_THROW(ad::SGD<double>({x * 2.0}, 0.1), ascan::Error);
}

}  // namespace
