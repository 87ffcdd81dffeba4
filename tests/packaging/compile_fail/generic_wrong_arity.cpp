// Compile-fail: a generic combine over a pair of leaves that returns a single tensor.
#include <ascan/ascan.hpp>

int main() {
  auto m = ascan::Tensor<double>::zeros({4, 2, 2}), v = ascan::Tensor<double>::zeros({4, 2});
  auto f = [](const auto& l, const auto& r) {
#ifdef ASCAN_COMPILE_FAIL_CONTROL
    return std::tuple{matmul(std::get<0>(r), std::get<0>(l)), std::get<1>(r)};
#else
    return matmul(std::get<0>(r), std::get<0>(l));
#endif
  };
  auto ys = ascan::associative_scan(ascan::generic(f), std::tuple{m, v}, 0);
  return static_cast<int>(std::get<0>(ys).numel());
}
