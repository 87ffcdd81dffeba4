// scan_demo.cpp — a first look at ascan: cumulative sums, a linear recurrence, a matrix chain.
#include <ascan/ascan.hpp>
#include <ascan/fmt.hpp>

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

  // Any associative combine, written generically on elements: affine maps x -> a x + b composed
  // left first (not commutative).
  auto affine = [](auto l, auto r) {
    auto [a1, b1] = l;
    auto [a2, b2] = r;
    return std::tuple{a2 * a1, a2 * b1 + b2};
  };
  auto [ca, cb] = ascan::associative_scan(affine, std::tuple{a, b}, 0);
  fmt::print("composed affine maps: a = {}, b = {}\n", ca, cb);

  // Gradients: d/db of sum(w * h) through the scan, exact (the adjoint recurrence swept backwards).
  namespace ad = ascan::ad;
  auto av = ad::param(a), bv = ad::param(b);
  auto [ya_v, h_v] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{av, bv}, 0);
  ad::backward(ad::sum(h_v * ad::constant(ascan::Tensor<float>::from({0, 0, 0, 0, 0, 1}, {6}))));
  fmt::print("d h_5 / d b        = {}\n", bv.grad());

  // Generic mode: running product of 2x2 matrices (non-commutative), left to right.
  auto m = ascan::Tensor<double>::from({1, 1, 0, 1, /**/ 1, 0, 1, 1, /**/ 0, 1, 1, 0}, {3, 2, 2});
  auto chain = ascan::associative_scan(
      ascan::generic([](const auto& A, const auto& B) { return matmul(A, B); }), m, 0);
  fmt::print("matrix chain       = {}\n", chain);
  return 0;
}
