// test_stress_threads.cpp — user threads against the shared pool: each runs its own training
// loop on its own tape (results bitwise those of the same loop run alone), scans race a thread
// that keeps changing the pool's size, and the process exits with scans in flight. Built and run
// under ThreadSanitizer by scripts/tsan.sh; here (Release, ASan) at a smaller size.
#include <gtest/gtest.h>

#include <ascan/ascan.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "reference.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Tensor;

// Steps of a training loop: a linear recurrence whose decay and input come from parameters,
// a squared loss against a target, Adam. Returns the final parameters.
std::vector<Tensor<float>> train(uint64_t seed, int steps) {
  const int64_t T = 257, W = 24;
  ad::Tape<float> tape;
  ad::Var<float> a = ad::param(Tensor<float>::random({T, W}, seed, 0.5f, 0.95f));
  ad::Var<float> b = ad::param(Tensor<float>::randn({T, W}, seed + 1));
  const Tensor<float> target = Tensor<float>::randn({T, W}, seed + 2);
  ad::Adam<float> opt({a, b}, 1e-2f);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto [pa, y] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
    const ad::Var<float> z = ascan::associative_scan([](auto l, auto r) { return l + r; }, y, 0, {.reverse = true});
    const ad::Var<float> loss = ad::mean(ad::square(z - ad::constant(target)));
    ad::backward(loss);
    opt.step();
  }
  return {a.value().clone(), b.value().clone()};
}

constexpr int kSteps = ref::kSanitized ? 3 : 8;

TEST(StressThreads, TrainingLoopsOnTheirOwnTapes) {
  constexpr int kUsers = 4;
  std::vector<std::vector<Tensor<float>>> alone(kUsers), together(kUsers);
  for (int u = 0; u < kUsers; ++u) alone[u] = train(10 * u + 1, kSteps);
  std::vector<std::thread> users;
  for (int u = 0; u < kUsers; ++u) users.emplace_back([&, u] { together[u] = train(10 * u + 1, kSteps); });
  for (auto& t : users) t.join();
  for (int u = 0; u < kUsers; ++u)
    for (size_t p = 0; p < 2; ++p) EXPECT_TRUE(alone[u][p] == together[u][p]) << "user " << u << " param " << p;
}

TEST(StressThreads, ScansWhileThePoolIsResized) {
  const int saved = ascan::num_threads();
  const auto x = Tensor<int64_t>::random({ref::large(1 << 18), 3}, 4, -9, 9);
  const auto want = ascan::associative_scan(ascan::add, x, 0);
  std::atomic<bool> done{false};
  std::thread resizer([&] {
    for (int i = 0; !done.load(); ++i) {
      ascan::set_num_threads(1 + i % 3);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> scanners;
  std::atomic<int> wrong{0};
  for (int u = 0; u < 2; ++u)
    scanners.emplace_back([&] {
      for (int i = 0; i < 20; ++i)
        if (!(ascan::associative_scan(ascan::add, x, 0) == want)) ++wrong;
    });
  for (auto& t : scanners) t.join();
  done = true;
  resizer.join();
  ascan::set_num_threads(saved);
  EXPECT_EQ(wrong.load(), 0);
}

// The process exits (std::exit from main's thread) while another thread is inside a scan: no
// crash, no hang, exit status 0.
TEST(StressThreadsDeathTest, ExitWithScansInFlight) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::thread([] {
          const auto x = Tensor<float>::randn({1 << 20}, 3);
          for (;;) ascan::associative_scan(ascan::add, x, 0);
        }).detach();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
