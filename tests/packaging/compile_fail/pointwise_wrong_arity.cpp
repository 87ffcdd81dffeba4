// Compile-fail: a pointwise combine over two leaves that returns three values.
#include <ascan/ascan.hpp>

int main() {
  auto a = ascan::Tensor<float>::zeros({4}), b = ascan::Tensor<float>::zeros({4});
  auto f = [](auto l, auto r) {
    auto [a1, b1] = l;
    auto [a2, b2] = r;
#ifdef ASCAN_COMPILE_FAIL_CONTROL
    return std::tuple{a1 * a2, a2 * b1 + b2};
#else
    return std::tuple{a1 * a2, a2 * b1 + b2, b2};
#endif
  };
  auto ys = ascan::associative_scan(f, std::tuple{a, b}, 0);
  return static_cast<int>(std::get<0>(ys).numel());
}
