// test_scan_threads.cpp — scan results do not depend on the thread count; exceptions from combines cross the pool.
#include <ascan/ascan.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;

using ref::FlushSetting;
using ref::ThreadCount;

template <class Fn>
auto with_threads(int n, Fn fn) {
  ThreadCount guard(n);
  return fn();
}

// Bitwise comparison (operator== is exact; no NaNs in these inputs).
template <class Fn>
void expect_same_for_thread_counts(Fn run, std::initializer_list<int> counts = {2}) {
  const auto one = with_threads(1, run);
  for (int n : counts) EXPECT_TRUE(one == with_threads(n, run)) << n << " threads differ from 1";
}

TEST(ScanThreads, PointwiseAddIsBitwiseIdentical) {
  for (const Shape& shape : {Shape{ref::large(1 << 20)}, Shape{ref::large(8192), 300}}) {
    const auto x = ref::data<float>(shape, 1);
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(ref::str(shape) + (reverse ? " reverse" : " forward"));
      expect_same_for_thread_counts([&] { return ascan::associative_scan(ascan::add, x, 0, {.reverse = reverse}); },
                                    {2, 3});  // 3: more threads than cores
    }
  }
}

TEST(ScanThreads, PointwiseLinearRecurrenceIsBitwiseIdentical) {
  for (const Shape& shape : {Shape{ref::large(1 << 20)}, Shape{ref::large(8192), 300}}) {
    const auto a = ref::data<float>(shape, 2, 0.5, 1), b = ref::data<float>(shape, 3);
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(ref::str(shape) + (reverse ? " reverse" : " forward"));
      expect_same_for_thread_counts(
          [&] { return ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {.reverse = reverse}); });
    }
  }
}

TEST(ScanThreads, GenericMatrixChainIsBitwiseIdentical) {
  const auto m = ref::data<double>({3000, 2, 2}, 4, 0, 1);
  const auto chain = ascan::generic([](const auto& a, const auto& b) { return matmul(a, b); });
  for (bool reverse : {false, true})
    expect_same_for_thread_counts([&] { return ascan::associative_scan(chain, m, 0, {.reverse = reverse}); });
}

TEST(ScanThreads, SetNumThreadsRejectsZero) {
  const int before = ascan::num_threads();
  EXPECT_THAT([] { ascan::set_num_threads(0); },
              ::testing::ThrowsMessage<ascan::Error>(::testing::HasSubstr("ascan::set_num_threads()")));
  EXPECT_EQ(ascan::num_threads(), before);
}

// An exception from the combine, on an input large enough to run on the pool (> 1<<16
// elements), reaches the caller as itself; the pool keeps working afterwards.
TEST(ScanThreads, CombineExceptionPropagatesAndPoolSurvives) {
  ThreadCount guard(2);
  constexpr int64_t kPoison = -1000000;
  const auto throwing = [](auto a, auto b) {
    if (b == kPoison || a == kPoison) throw std::runtime_error("combine saw the poisoned element");
    return a + b;
  };
  const int64_t n = int64_t{1} << 20;  // [n / 128, 128] too: past the one-pass size of rows
  for (int64_t where : {int64_t{1}, n / 2, n - 1}) {  // first, middle and last block
    for (const Shape& shape : {Shape{n}, Shape{n / 128, 128}}) {
      auto x = Tensor<int64_t>::random(shape, 5, 0, 9);
      x.data()[where] = kPoison;
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(ref::str(shape) + " poisoned at " + std::to_string(where) + (reverse ? " reverse" : ""));
        try {
          ascan::associative_scan(throwing, x, 0, {.reverse = reverse});
          ADD_FAILURE() << "no exception";
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "combine saw the poisoned element");
        }
      }
    }
  }
  // The pool still scans correctly.
  const auto x = Tensor<int64_t>::random({n, 3}, 6, -9, 9);
  const auto r = ref::pointwise<int64_t, int64_t>([](auto a, auto b) { return a + b; }, {ref::leaf<int64_t>(x)}, 0);
  EXPECT_TRUE(ref::exact(ascan::associative_scan(ascan::add, x, 0), r.leaves[0], r.shape));
}

TEST(ScanThreads, GenericCombineExceptionPropagates) {
  ThreadCount guard(2);
  const auto m = ref::data<double>({4000, 2}, 7);
  const auto throwing = ascan::generic([](const auto& a, const auto& b) {
    if (a.data()[0] == 42.0 || b.data()[0] == 42.0) throw std::out_of_range("poisoned slice");
    return a + b;
  });
  auto poisoned = m.clone();
  poisoned.data()[2 * 3000] = 42.0;
  EXPECT_THROW(ascan::associative_scan(throwing, poisoned, 0), std::out_of_range);
  const auto y = ascan::associative_scan(ascan::generic([](const auto& a, const auto& b) { return a + b; }), m, 0);
  const auto r = ref::pointwise<double, double>([](auto a, auto b) { return a + b; }, {ref::leaf<double>(m)}, 0);
  const auto mag = ref::pointwise<double, double>([](auto a, auto b) { return a + b; }, {ref::abs(ref::leaf<double>(m))}, 0);
  EXPECT_TRUE(ref::near(y, r.leaves[0], r.shape, ref::linear_tolerance<double>(r.steps, mag.leaves[0])));
}

// Two user threads scanning at once: one gets the pool, the other runs inline; both are right.
TEST(ScanThreads, ConcurrentCallersGetCorrectResults) {
  ThreadCount guard(2);
  const auto x = Tensor<int64_t>::random({1 << 18}, 8, -9, 9), z = Tensor<int64_t>::random({2048, 300}, 9, -9, 9);
  const auto add = [](auto a, auto b) { return a + b; };
  const auto rx = ref::pointwise<int64_t, int64_t>(add, {ref::leaf<int64_t>(x)}, 0, true);
  const auto rz = ref::pointwise<int64_t, int64_t>(add, {ref::leaf<int64_t>(z)}, 0);
  std::vector<Tensor<int64_t>> got_x(4), got_z(4);
  std::thread other([&] {
    for (auto& g : got_z) g = ascan::associative_scan(ascan::add, z, 0);
  });
  for (auto& g : got_x) g = ascan::associative_scan(ascan::add, x, 0, {.reverse = true});
  other.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(ref::exact(got_x[i], rx.leaves[0], rx.shape)) << "call " << i;
    EXPECT_TRUE(ref::exact(got_z[i], rz.leaves[0], rz.shape)) << "call " << i;
  }
}

// Flushing subnormals (ascan::set_flush_denormals): a cumulative product whose second step
// underflows (1e-30 * 1e-10 = 1e-40, below float's smallest normal 1.18e-38) is 0 from there on
// when flushing (the default), and the IEEE subnormal when not, on one thread and on two, in
// both directions, and at lengths that run on one worker and on several; a subnormal input reads
// as zero when flushing. The caller's floating-point setting is restored when the call returns:
// its own arithmetic still produces subnormals.
TEST(ScanThreads, FlushesSubnormalsForTheCallOnly) {
  EXPECT_TRUE(ascan::flush_denormals());  // the default
  volatile float tiny = 1e-30f, small = 1e-10f;
  const float subnormal = tiny * small;  // this thread: IEEE
  ASSERT_GT(subnormal, 0.0f);
  ASSERT_LT(subnormal, std::numeric_limits<float>::min());
  for (int threads : {1, 2}) {
    ThreadCount count(threads);
    for (int64_t n : {int64_t{64}, ref::large(int64_t{1} << 20)}) {
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, n = " << n << ", reverse " << reverse);
        auto x = Tensor<float>::full({n}, 1.0f);
        const int64_t first = reverse ? n - 1 : 0, second = reverse ? n - 2 : 1;
        x.data()[first] = tiny;
        x.data()[second] = small;
        for (bool flush : {true, false}) {
          FlushSetting setting(flush);
          const auto y = ascan::associative_scan(ascan::mul, x, 0, {.reverse = reverse});
          const float expected = flush ? 0.0f : subnormal;
          int64_t wrong = 0;
          for (int64_t s = 1; s < n; ++s) wrong += y.data()[reverse ? n - 1 - s : s] != expected;
          EXPECT_EQ(wrong, 0) << "flush " << flush;
          EXPECT_EQ(y.data()[first], tiny);
          EXPECT_GT(tiny * small, 0.0f) << "the caller's setting after the call, flush " << flush;
        }
        // A subnormal input: read as zero by the combine when flushing (the first step, a copy of
        // its input, keeps it).
        auto z = Tensor<float>::full({n}, 1.0f);
        z.data()[first] = subnormal;
        z.data()[second] = 0x1p100f;
        volatile float big = 0x1p100f;
        for (bool flush : {true, false}) {
          FlushSetting setting(flush);
          const auto y = ascan::associative_scan(ascan::mul, z, 0, {.reverse = reverse});
          EXPECT_EQ(y.data()[first], subnormal);
          EXPECT_EQ(y.data()[second], flush ? 0.0f : subnormal * big) << "flush " << flush;
        }
      }
    }
  }
}

}  // namespace
