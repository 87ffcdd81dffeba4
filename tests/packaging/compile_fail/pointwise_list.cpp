// Compile-fail: a pointwise combine over a std::vector of tensors (run-time arity).
#include <ascan/ascan.hpp>

#include <vector>

int main() {
  std::vector<ascan::Tensor<float>> xs{ascan::Tensor<float>::zeros({4})};
#ifdef ASCAN_COMPILE_FAIL_CONTROL
  auto ys = ascan::associative_scan(ascan::generic([](const auto& a, const auto&) { return a; }), xs, 0);
#else
  auto ys = ascan::associative_scan(ascan::add, xs, 0);
#endif
  return static_cast<int>(ys.size());
}
