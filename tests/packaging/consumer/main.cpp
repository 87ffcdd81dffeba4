// main.cpp — a find_package(ascan) consumer: scans through the installed headers and library.
#include <ascan/ascan.hpp>

#include <cstdio>
#include <tuple>

int main() {
  auto x = ascan::Tensor<double>::from({1, 2, 3, 4}, {4});
  auto y = ascan::associative_scan(ascan::add, x, 0);
  auto a = ascan::Tensor<double>::full({3}, 0.5), b = ascan::Tensor<double>::full({3}, 1.0);
  auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, -1);
  const bool ok = y(3) == 10.0 && yb(2) == 1.75 && ya(2) == 0.125;
  std::printf("consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
