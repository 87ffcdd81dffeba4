// test_ad_gradcheck.cpp — the harness must FAIL on planted wrong gradients (and pass the correct
// one), report what failed, and enforce error parity with the plain function.
#include <string>

#include "ad_test_util.hpp"

namespace {

using namespace ascan_test;
namespace ad = ascan::ad;

enum class Bug { kNone, kDroppedTerm, kSwappedOrder, kOffByOne, kWrongSign, kMissingCrossLeaf };

// h_t = a_t h_{t-1} + b_t (h_{-1} = 0) as one hand-written op whose VJP may carry a planted bug.
// Correct adjoint: λ_{T-1} = ḡ_{T-1}, λ_t = ḡ_t + a_{t+1} λ_{t+1}; ∂b_t = λ_t; ∂a_t = λ_t h_{t-1}.
VD linear_recurrence_op(const VD& a, const VD& b, Bug bug) {
  const int32_t ia = ad::detail::id_on_current(a, "test"), ib = ad::detail::id_on_current(b, "test");
  const TD av = a.value(), bv = b.value();
  const int64_t T = av.numel();
  TD h = TD::empty({T});
  for (int64_t t = 0; t < T; ++t) h(t) = (t > 0 ? av(t) * h(t - 1) : 0.0) + bv(t);
  return ad::detail::record<double>(h, {ia, ib}, [=](ad::detail::TapeState<double>& s, int32_t self) {
    const TD g = s.grads[self];
    TD lambda = TD::zeros({T}), da = TD::zeros({T}), db = TD::zeros({T});
    for (int64_t t = T - 1; t >= 0; --t) {
      const double carry = t + 1 < T ? lambda(t + 1) : 0.0;
      double decay = t + 1 < T ? av(t + 1) : 0.0;
      if (bug == Bug::kSwappedOrder) decay = av(t);  // uses the step's own factor
      lambda(t) = g(t) + (bug == Bug::kDroppedTerm ? 0.0 : decay * carry);
    }
    for (int64_t t = 0; t < T; ++t) {
      db(t) = bug == Bug::kOffByOne ? (t + 1 < T ? lambda(t + 1) : 0.0) : lambda(t);
      da(t) = t > 0 ? lambda(t) * h(t - 1) : 0.0;
      if (bug == Bug::kWrongSign) da(t) = -da(t);
      if (bug == Bug::kMissingCrossLeaf) da(t) = 0.0;  // forgets that h depends on a
    }
    s.accumulate(ia, da);
    s.accumulate(ib, db);
  });
}

ascan::ad::GradcheckReport check(Bug bug) {
  return ad::gradcheck([bug](const VarList& x) { return linear_recurrence_op(x[0], x[1], bug); },
                       {uniform({9}, 1, 0.3, 0.9), randn({9}, 2)});
}

TEST(Gradcheck, PassesTheCorrectVjp) {
  const auto report = check(Bug::kNone);
  EXPECT_TRUE(report.ok) << report.message;
  EXPECT_EQ(report.num_checked, 18);
}

TEST(Gradcheck, FailsOnEachPlantedBug) {
  for (Bug bug : {Bug::kDroppedTerm, Bug::kSwappedOrder, Bug::kOffByOne, Bug::kWrongSign, Bug::kMissingCrossLeaf}) {
    const auto report = check(bug);
    EXPECT_FALSE(report.ok) << "planted bug " << static_cast<int>(bug) << " was not caught";
    EXPECT_GT(report.num_failed, 0);
    EXPECT_THAT(report.message, testing::HasSubstr("numerical"));
    EXPECT_THAT(report.message, testing::HasSubstr("analytical"));
    EXPECT_THAT(report.message, testing::HasSubstr("input "));
    EXPECT_THAT(report.message, testing::HasSubstr("tol"));
  }
}

TEST(Gradcheck, FastModeAlsoCatchesPlantedBugs) {
  for (Bug bug : {Bug::kDroppedTerm, Bug::kOffByOne, Bug::kMissingCrossLeaf}) {
    const auto report = ad::gradcheck([bug](const VarList& x) { return linear_recurrence_op(x[0], x[1], bug); },
                                      {uniform({200}, 1, 0.3, 0.9), randn({200}, 2)}, {.fast = true});
    EXPECT_FALSE(report.ok) << "planted bug " << static_cast<int>(bug) << " was not caught in fast mode";
  }
  const auto good = ad::gradcheck([](const VarList& x) { return linear_recurrence_op(x[0], x[1], Bug::kNone); },
                                  {uniform({200}, 1, 0.3, 0.9), randn({200}, 2)}, {.fast = true});
  EXPECT_TRUE(good.ok) << good.message;
}

TEST(Gradcheck, ReportNamesOutputInputIndex) {
  const auto report = ad::gradcheck([](const VarList& x) {
    return std::tuple{x[0] * 2.0, linear_recurrence_op(x[0], x[1], Bug::kWrongSign)};
  }, {uniform({4}, 1, 0.3, 0.9), randn({4}, 2)});
  EXPECT_FALSE(report.ok);
  EXPECT_THAT(report.message, testing::HasSubstr("output 1, input 0, index"));
  EXPECT_THAT(report.message, testing::Not(testing::HasSubstr("output 0,")));
}

TEST(Gradcheck, EnforcesErrorParityWithThePlainFunction) {
  // Throws only when called with Vars: the harness must flag the mismatch.
  const auto only_ad_throws = [](const auto& x) {
    if constexpr (std::is_same_v<std::decay_t<decltype(x[0])>, VD>) ascan::detail::raise("planted");
    return x[0] + x[0];
  };
  const auto report = ad::gradcheck(only_ad_throws, {randn({3}, 1)});
  EXPECT_FALSE(report.ok);
  EXPECT_THAT(report.message, testing::HasSubstr("error parity"));
  // Values must agree too.
  const auto wrong_value = [](const auto& x) {
    if constexpr (std::is_same_v<std::decay_t<decltype(x[0])>, VD>) return x[0] * 2.0;
    else return x[0] * 3.0;
  };
  EXPECT_FALSE(ad::gradcheck(wrong_value, {randn({3}, 1)}).ok);
}

// y = 2x with a VJP that uses the mean of the cotangent instead of the cotangent itself: right
// for all-ones cotangents only. The default random cotangents must expose it.
VD uniform_cotangent_only_op(const VD& x) {
  const int32_t ix = ad::detail::id_on_current(x, "test");
  return ad::detail::record<double>(x.value() * 2.0, {ix}, [=](ad::detail::TapeState<double>& s, int32_t self) {
    const TD g = s.grads[self];
    double mean = 0;
    for (int64_t i = 0; i < g.numel(); ++i) mean += g.data()[i] / static_cast<double>(g.numel());
    s.accumulate(ix, TD::full(g.shape(), 2.0 * mean));
  });
}

TEST(Gradcheck, UsesRandomCotangentsByDefault) {
  const auto fn = [](const VarList& x) { return uniform_cotangent_only_op(x[0]); };
  const auto ones = ad::gradcheck(fn, {randn({6}, 1)}, {.random_cotangents = false});
  EXPECT_TRUE(ones.ok) << "all-ones cotangents cannot see this bug: " << ones.message;
  const auto random = ad::gradcheck(fn, {randn({6}, 1)});
  EXPECT_FALSE(random.ok) << "random cotangents must expose a VJP that only holds for uniform ones";
}

}  // namespace
