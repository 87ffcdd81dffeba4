// main.cpp — a find_package(ascan) consumer: scans through the installed headers and library.
#include <ascan/ascan.hpp>

#include <cstdio>
#include <tuple>

int main() {
  auto x = ascan::Tensor<double>::from({1, 2, 3, 4}, {4});
  auto y = ascan::associative_scan(ascan::add, x, 0);
  auto a = ascan::Tensor<double>::full({3}, 0.5), b = ascan::Tensor<double>::full({3}, 1.0);
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, -1);
  bool ok = y(3) == 10.0 && yb(2) == 1.75 && ya(2) == 0.125;
  // User combines compile the kernels here, at this file's ISA level: a pair of float leaves
  // (the register transposes) on one sequence, and float rows of 5 lanes.
  const auto affine = [](auto l, auto r) {
    auto [a1, b1] = l;
    auto [a2, b2] = r;
    return std::tuple{a2 * a1, a2 * b1 + b2};
  };
  const int64_t n = 100000;
  auto fa = ascan::Tensor<float>::full({n}, 0.5f), fb = ascan::Tensor<float>::full({n}, 1.0f);
  auto [fya, fyb] = ascan::associative_scan(affine, std::tuple{fa, fb}, 0);
  ok = ok && fyb(n - 1) == 2.0f && fya(n - 1) == 0.0f;  // b converges to 2, a underflows to 0
  auto rows = ascan::Tensor<float>::full({1000, 5}, 1.0f);
  auto sums = ascan::associative_scan([](float p, float q) { return p + q; }, rows, 0);
  ok = ok && sums(999, 4) == 1000.0f;
  // The builtins run at the CPU's level, or at a forced one.
  for (ascan::Isa level : {ascan::Isa::baseline, ascan::Isa::avx2, ascan::Isa::avx512}) {
    if (!ascan::isa_available(level)) continue;
    ascan::force_isa(level);
    ok = ok && ascan::associative_scan(ascan::add, rows, 0)(999, 0) == 1000.0f;
  }
  ascan::unforce_isa();
  std::printf("consumer: %s (builtins at %s)\n", ok ? "ok" : "WRONG", ascan::isa_name(ascan::active_isa()).data());
  return ok ? 0 : 1;
}
