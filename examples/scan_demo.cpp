// scan_demo.cpp — a first look at ascan: cumulative sums, a linear recurrence, a matrix chain.
#include <ascan/ascan.hpp>

#include <fmt/core.h>

#include <tuple>

int main() {
  auto x = ascan::Tensor<float>::from({1, 2, 3, 4, 5, 6}, {2, 3});
  fmt::print("x                  = {}\n", x);
  fmt::print("cumsum along dim 1 = {}\n", ascan::associative_scan(ascan::add, x, 1));
  ascan::ScanOptions reverse{.reverse = true};
  fmt::print("reverse cumsum     = {}\n", ascan::associative_scan(ascan::add, x, -1, reverse));
  fmt::print("running max dim 0  = {}\n", ascan::associative_scan(ascan::max, x, 0));

  // h_t = a_t * h_{t-1} + b_t: discounted sums with a = 0.9.
  auto a = ascan::Tensor<float>::full({6}, 0.9f);
  auto b = ascan::Tensor<float>::from({1, 0, 0, 1, 0, 0}, {6});
  auto [ya, h] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
  fmt::print("linear recurrence h = {}\n", h);

  // Generic mode: running product of 2x2 matrices (non-commutative), left to right.
  auto m = ascan::Tensor<double>::from({1, 1, 0, 1, /**/ 1, 0, 1, 1, /**/ 0, 1, 1, 0}, {3, 2, 2});
  auto chain = ascan::associative_scan(
      ascan::generic([](const auto& A, const auto& B) { return matmul(A, B); }), m, 0);
  fmt::print("matrix chain       = {}\n", chain);
  return 0;
}
