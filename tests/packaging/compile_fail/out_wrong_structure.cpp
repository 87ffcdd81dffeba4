// Compile-fail: caller-provided outputs whose structure differs from the inputs.
#include <ascan/ascan.hpp>

int main() {
  auto a = ascan::Tensor<float>::zeros({4}), b = ascan::Tensor<float>::zeros({4});
#ifdef ASCAN_COMPILE_FAIL_CONTROL
  auto out = std::tuple{ascan::Tensor<float>::zeros({4}), ascan::Tensor<float>::zeros({4})};
#else
  auto out = ascan::Tensor<float>::zeros({4});
#endif
  ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, out);
  return 0;
}
