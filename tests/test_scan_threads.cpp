// test_scan_threads.cpp — scan results do not depend on the thread count; exceptions from combines cross the pool.
#include <ascan/ascan.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;

// Sets the thread count for one scope and restores the previous one.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(ascan::num_threads()) { ascan::set_num_threads(n); }
  ~ThreadCount() { ascan::set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

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
  for (const Shape& shape : {Shape{ref::large(1 << 20)}, Shape{ref::large(4096), 300}}) {
    const auto x = ref::data<float>(shape, 1);
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(ref::str(shape) + (reverse ? " reverse" : " forward"));
      expect_same_for_thread_counts([&] { return ascan::associative_scan(ascan::add, x, 0, {.reverse = reverse}); },
                                    {2, 3});  // 3: more threads than cores
    }
  }
}

TEST(ScanThreads, PointwiseLinearRecurrenceIsBitwiseIdentical) {
  for (const Shape& shape : {Shape{ref::large(1 << 20)}, Shape{ref::large(4096), 300}}) {
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
  const int64_t n = int64_t{1} << 18;
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
  const auto x = Tensor<int64_t>::random({1 << 18}, 8, -9, 9), z = Tensor<int64_t>::random({512, 300}, 9, -9, 9);
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

}  // namespace
