// Compile-fail: scanning something that is not a Tensor or a tuple of Tensors.
#include <ascan/ascan.hpp>

#include <vector>

int main() {
#ifdef ASCAN_COMPILE_FAIL_CONTROL
  auto xs = ascan::Tensor<float>::from({1, 2, 3}, {3});
#else
  std::vector<float> xs{1, 2, 3};
#endif
  auto ys = ascan::associative_scan(ascan::add, xs, 0);
  (void)ys;
  return 0;
}
