// Compile-fail: a pointwise combine written for scalars, used on a tuple of tensors.
#include <ascan/ascan.hpp>

int main() {
  auto a = ascan::Tensor<float>::zeros({4}), b = ascan::Tensor<float>::zeros({4});
#ifdef ASCAN_COMPILE_FAIL_CONTROL
  auto f = [](auto l, auto r) { return std::tuple{std::get<0>(l) + std::get<0>(r), std::get<1>(l) + std::get<1>(r)}; };
#else
  auto f = [](float l, float r) { return l + r; };
#endif
  auto ys = ascan::associative_scan(f, std::tuple{a, b}, 0);
  return static_cast<int>(std::get<0>(ys).numel());
}
