// test_ad_lifetime.cpp — node lifetime on the tape: graphs freed when no handle reaches them,
// released by backward unless retained, and training loops without scopes or rewinds that stay
// flat in nodes and memory for 10,000 steps.
#include <cstdio>
#include <fstream>

#include "ad_test_util.hpp"

namespace {

using namespace ascan_test;
namespace ad = ascan::ad;
using TF = ascan::Tensor<float>;
using VF = ad::Var<float>;

// Resident set size of this process in bytes (Linux), 0 where /proc is absent.
int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * 4096;
}

int64_t allocator_bytes() {
  const auto s = ascan::allocator_stats();
  return s.bytes_in_use + s.bytes_cached;
}

// What one training loop does to the tape and the allocator, measured after a warm-up.
struct Footprint {
  int64_t live_nodes, slots, bytes_in_use, allocator_bytes, rss;
};

template <class T>
Footprint footprint(const ad::detail::TapeState<T>& s) {
  return {s.num_live, s.slots(), ascan::allocator_stats().bytes_in_use, allocator_bytes(), resident_bytes()};
}

void expect_flat(const Footprint& warm, const Footprint& end, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(end.live_nodes, warm.live_nodes);
  EXPECT_EQ(end.slots, warm.slots);
  EXPECT_EQ(end.bytes_in_use, warm.bytes_in_use);
  EXPECT_EQ(end.allocator_bytes, warm.allocator_bytes);
  // The tape's and the allocator's own counts are exact; the process's resident set may move by
  // a few pages (gtest, the C++ runtime), never by a step's graph per step. Under AddressSanitizer
  // freed heap blocks sit in its quarantine (256 MiB by default), so the resident set grows there
  // whatever the program frees: only the exact counts are checked.
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(end.rss - warm.rss, int64_t{4} << 20) << "resident set grew from " << warm.rss << " to " << end.rss;
#endif
}

constexpr int kSteps = 10000;
constexpr int kWarmup = 50;

// The README's loop: parameters made once, then scan, loss, backward, step, zero_grad per step,
// on the thread's default tape, with no Tape scope and no rewind.
TEST(AdLifetime, TrainingLoopOnTheDefaultTapeStaysFlat) {
  const int64_t T = 64, N = 16;
  VF a = ad::param(TF::random({T, N}, 1, 0.5f, 0.99f));
  VF b = ad::param(TF::randn({T, N}, 2));
  const TF w = TF::randn({T, N}, 3);
  ad::SGD<float> opt({a, b}, 1e-4f);
  const auto& tape = *ad::detail::current_state<float>();
  const int64_t nodes_before = tape.num_live;
  Footprint warm{};
  float first_loss = 0, second_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kWarmup) warm = footprint(tape);
    auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
    VF loss = ad::sum(yb * ad::constant(w));
    ad::backward(loss);
    opt.step();
    opt.zero_grad();
    if (step < 2) (step == 0 ? first_loss : second_loss) = loss.value().data()[0];
  }
  expect_flat(warm, footprint(tape), "linear recurrence");
  EXPECT_EQ(tape.num_live, nodes_before);  // every step's nodes are gone
  EXPECT_LT(second_loss, first_loss);      // and it trains
}

// A Generic combine that captures a parameter: the scan's backward function holds the parameter;
// both the forward's scratch tape and the backward's nested tapes import it.
TEST(AdLifetime, GenericCombineCapturingAParameterStaysFlat) {
  VD W = ad::param(randn({2, 2}, 1) * 0.5);
  VD x = ad::param(randn({6, 2, 2}, 2) * 0.5);
  const TD w = randn({6, 2, 2}, 3);
  ad::SGD<double> opt({W, x}, 1e-4);
  const auto& tape = *ad::detail::current_state<double>();
  const int64_t nodes_before = tape.num_live;
  const auto f = ascan::generic([W](const auto& A, const auto& B) { return matmul(matmul(A, W), B); });
  Footprint warm{};
  for (int step = 0; step < kSteps; ++step) {
    if (step == kWarmup) warm = footprint(tape);
    VD loss = ad::sum(ascan::associative_scan(f, x, 0) * ad::constant(w));
    ad::backward(loss);
    if (step == 0) {  // the captured parameter got its gradient
      EXPECT_GT(std::abs(W.grad().data()[0]) + std::abs(W.grad().data()[3]), 0.0);
    }
    opt.step();
    opt.zero_grad();
  }
  expect_flat(warm, footprint(tape), "generic combine");
  EXPECT_EQ(tape.num_live, nodes_before);
}

// Nested tapes: parameters on a user Tape (kept in scope, never rewound), each step's VJP taken
// on an inner Tape that imports them and sends their gradient back.
TEST(AdLifetime, NestedTapesStayFlat) {
  ad::Tape<double> outer;
  VD a = ad::param(uniform({32, 4}, 1, 0.5, 0.99)), b = ad::param(randn({32, 4}, 2));
  const TD w = randn({32, 4}, 3);
  Footprint warm{}, warm_inner{};
  int64_t inner_nodes = -1;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kWarmup) warm = footprint(*outer.state());
    // Outer-tape work each step (freed when the step's handles go).
    VD scaled = a * 0.5 + 0.5;
    {
      ad::Tape<double> inner;
      auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{scaled, b}, 0);
      ad::backward(ad::sum(yb * ad::constant(w)));
      inner.propagate_to_outer();  // into scaled's and b's gradients on the outer tape
      if (step == kWarmup) warm_inner = footprint(*inner.state());
      if (step == kSteps - 1) inner_nodes = inner.size();
    }
    ad::backward(scaled, scaled.grad());  // scaled is a leaf of neither tape: its gradient reached it
    a.zero_grad();
    b.zero_grad();
  }
  expect_flat(warm, footprint(*outer.state()), "outer tape");
  EXPECT_EQ(outer.size(), 2);  // a and b
  EXPECT_EQ(inner_nodes, warm_inner.live_nodes);
}

TEST(AdLifetime, AGraphIsFreedWhenItsLastHandleGoes) {
  ad::Tape<double> tape;
  VD x = ad::param(randn({1000}, 1));
  const int64_t in_use = ascan::allocator_stats().bytes_in_use;
  {
    VD y = ad::exp(x) * x;
    VD z = ad::sum(ad::tanh(y));
    EXPECT_EQ(tape.size(), 5);  // x, exp, *, tanh, sum
    EXPECT_GT(ascan::allocator_stats().bytes_in_use, in_use);
    y = VD();  // z still reaches y's node through its parents
    EXPECT_EQ(tape.size(), 5);
  }
  EXPECT_EQ(tape.size(), 1);
  EXPECT_EQ(ascan::allocator_stats().bytes_in_use, in_use);
}

TEST(AdLifetime, BackwardReleasesTheGraphButKeepsTheValues) {
  ad::Tape<double> tape;
  {  // Only the loss is held: the values of exp and tanh are freed by backward, not x's gradient.
    VD x = ad::param(randn({4096}, 1));
    VD loss = ad::sum(ad::tanh(ad::exp(x)));
    int64_t block = -ascan::allocator_stats().bytes_in_use;  // one [4096] double tensor's block
    block += (TD::empty({4096}), ascan::allocator_stats().bytes_in_use);
    const int64_t in_use = ascan::allocator_stats().bytes_in_use;
    ad::backward(loss);
    EXPECT_EQ(ascan::allocator_stats().bytes_in_use, in_use - block);  // 2 values freed, 1 gradient made
    EXPECT_EQ(tape.size(), 2);
  }
  VD x = ad::param(TD::from({1.0, 2.0, 3.0}, {3}));
  VD y = ad::square(x);
  VD loss = ad::sum(y);
  ad::backward(loss);
  EXPECT_EQ(x.grad(), TD::from({2.0, 4.0, 6.0}, {3}));
  EXPECT_EQ(loss.value().data()[0], 14.0);
  EXPECT_EQ(y.value(), TD::from({1.0, 4.0, 9.0}, {3}));
  try {
    ad::backward(loss);
    ADD_FAILURE() << "a second backward through a released graph did not throw";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("ascan::ad::backward()"));
    EXPECT_THAT(e.what(), testing::HasSubstr("released by an earlier backward()"));
    EXPECT_THAT(e.what(), testing::HasSubstr("retain_graph"));
  }
  // A new op on a released node reaches it: refused too, naming the input.
  VD again = ad::sum(y * 2.0);
  try {
    ad::backward(again);
    ADD_FAILURE() << "backward through a released input did not throw";
  } catch (const ascan::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("an input of this Var"));
  }
  EXPECT_EQ(x.grad(), TD::from({2.0, 4.0, 6.0}, {3}));  // the refused calls added nothing
  // Graphs built afresh from the leaves work as before.
  ad::backward(ad::sum(ad::square(x)));
  EXPECT_EQ(x.grad(), TD::from({4.0, 8.0, 12.0}, {3}));
}

TEST(AdLifetime, RetainGraphAllowsRepeatedBackwardWithRandomCotangents) {
  VD a = ad::param(uniform({40, 3}, 1, 0.5, 1.0)), b = ad::param(randn({40, 3}, 2));
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
  VD h = ad::tanh(yb);
  const TD w1 = randn({40, 3}, 3), w2 = randn({40, 3}, 4);
  ad::backward(h, w1, {.retain_graph = true});
  const TD g1 = b.grad().clone();
  b.zero_grad();
  a.zero_grad();
  ad::backward(h, w2, {.retain_graph = true});
  const TD g2 = b.grad().clone();
  b.zero_grad();
  a.zero_grad();
  ad::backward(h, w1 + w2);  // linear in the cotangent; releases the graph
  EXPECT_TRUE(ascan::allclose(b.grad(), g1 + g2, 1e-12, 1e-12));
  EXPECT_THROW(ad::backward(h, w1), ascan::Error);
  // Independent reference for g1: d/db of <w1, tanh(y)>, y_t = a_t y_{t-1} + b_t.
  const TD y = yb.value();
  TD ref = TD::zeros({40, 3});
  for (int64_t j = 0; j < 3; ++j) {
    double g = 0;
    for (int64_t t = 39; t >= 0; --t) {
      const double th = std::tanh(y.at({t, j}));
      g = w1.at({t, j}) * (1 - th * th) + (t + 1 < 40 ? a.value().at({t + 1, j}) * g : 0.0);
      ref.at({t, j}) = g;
    }
  }
  EXPECT_TRUE(ascan::allclose(g1, ref, 1e-10, 1e-10));
}

// A scan's outputs are one node per leaf; a sweep from any of them runs the scan's backward, and
// dropping one output early leaves the others' gradients exact.
TEST(AdLifetime, ScanOutputsDroppedOrUsedAlone) {
  const TD a0 = uniform({30, 2}, 1, 0.5, 1.0), b0 = randn({30, 2}, 2), w = randn({30, 2}, 3);
  TD ga_ref, gb_ref;
  {
    VD a = ad::param(a0), b = ad::param(b0);
    auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
    ad::backward(ad::sum(ya * ad::constant(w)));  // from the first output (not the head)
    ga_ref = a.grad().clone();
    gb_ref = b.grad().clone();
  }
  // d/da of <w, cumprod(a)>: sum over s >= t of w_s prod_{r <= s, r != t} a_r.
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t t = 0; t < 30; ++t) {
      double g = 0;
      for (int64_t s = t; s < 30; ++s) {
        double p = w.at({s, j});
        for (int64_t r = 0; r <= s; ++r)
          if (r != t) p *= a0.at({r, j});
        g += p;
      }
      EXPECT_NEAR(ga_ref.at({t, j}), g, 1e-10 * (1 + std::abs(g)));
    }
  EXPECT_EQ(gb_ref, TD::zeros({30, 2}));
  VD a = ad::param(a0), b = ad::param(b0);
  VD yb;
  {
    auto outs = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
    yb = std::get<1>(outs);
  }  // ya's handle is gone: its node is freed, the head still runs
  ad::backward(ad::sum(yb * ad::constant(w)));
  EXPECT_EQ(a.grad().shape(), (ascan::Shape{30, 2}));
  EXPECT_GT(std::abs(a.grad().at({3, 1})), 0.0);
}

// A Generic combine that captures an intermediate Var (not a leaf): the scan's backward sends it
// gradient, and its own node must run after the scan's.
TEST(AdLifetime, GenericCombineCapturingAnIntermediateVar) {
  EXPECT_GRADCHECK([](const VarList& x) {
    const VD W = ad::tanh(x[1]) * 2.0;
    return ascan::associative_scan(ascan::generic([W](const auto& A, const auto& B) { return matmul(matmul(A, W), B); }),
                                   x[0], 0);
  }, {randn({5, 2, 2}, 1) * 0.6, randn({2, 2}, 2)});
}

// An op's inputs that need no gradient (a temporary constant) stay alive with the op: their slots
// are not handed to new nodes that the op's backward would then mistake for its input.
TEST(AdLifetime, InputsWithoutGradientKeepTheirSlots) {
  ad::Tape<double> tape;
  const TD c = randn({5}, 1);
  VD x = ad::param(randn({5}, 2));
  VD y = ad::constant(c) * x;  // the constant's handle is gone after this line
  std::vector<VD> later;
  for (int i = 0; i < 4; ++i) later.push_back(ad::param(TD::zeros({5})));
  ad::backward(ad::sum(y));
  EXPECT_EQ(x.grad(), c);
  for (const VD& v : later) EXPECT_EQ(v.grad(), TD::zeros({5}));
}

TEST(AdLifetime, RewindDropsNodesThatHandlesStillName) {
  ad::Tape<double> tape;
  VD w = ad::param(TD::from({1.0, 2.0}, {2}));
  const int64_t mark = tape.mark();
  VD y = ad::exp(w);
  VD kept = y * 2.0;
  tape.rewind(mark);
  EXPECT_EQ(tape.size(), 1);
  EXPECT_FALSE(y.valid());
  EXPECT_FALSE(kept.valid());
  EXPECT_THROW(kept.value(), ascan::Error);
  // New nodes reuse the slots; the stale handles stay invalid (and harmless when destroyed).
  VD z = ad::square(w);
  EXPECT_FALSE(y.valid());
  y = VD();
  kept = VD();
  EXPECT_TRUE(z.valid());
  ad::backward(ad::sum(z));
  EXPECT_EQ(w.grad(), TD::from({2.0, 4.0}, {2}));
}

}  // namespace
