// Compile-fail: a generic combine written for scalars (it must take slices).
#include <ascan/ascan.hpp>

int main() {
  auto m = ascan::Tensor<double>::zeros({4, 2, 2});
#ifdef ASCAN_COMPILE_FAIL_CONTROL
  auto f = [](const ascan::Tensor<double>& a, const ascan::Tensor<double>& b) { return matmul(a, b); };
#else
  auto f = [](double a, double b) { return a * b; };
#endif
  auto ys = ascan::associative_scan(ascan::generic(f), m, 0);
  return static_cast<int>(ys.numel());
}
