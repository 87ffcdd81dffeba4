// The builtin combines' host scans on float and double (builtin_scan.hpp), compiled once per ISA
// level: CMake builds this file for each level with ASCAN_DISPATCH_ISA set (config.hpp), and
// src/isa.cpp picks one at run time.
// The builtin functors (combine.hpp) are defined outside the kernels' target region, as baseline
// code, and the kernels call them on their level's vectors: GCC warns that such a call would pass
// a vector in memory, but the functors are always inlined, at -O0 too (tests/check_isa_objects.py
// fails on a call from a kernel to a function outside its level that takes or returns a vector).
#pragma GCC diagnostic ignored "-Wpsabi"

#include "ascan/detail/builtin_scan.hpp"

#include "ascan/detail/pointwise_scan.hpp"

#if !defined(ASCAN_DISPATCH_ISA)
#error "src/builtin_scan.cpp is compiled once per ISA level, with ASCAN_DISPATCH_ISA set"
#endif

namespace ascan::detail {
ASCAN_ISA_BEGIN
namespace {

template <class T>
void scan_builtin(BuiltinOp op, const Tensor<T>* xs, const Tensor<T>* ys, const PointwisePlan& plan, bool reverse) {
  using X1 = Tensor<T>;
  const std::tuple<Tensor<T>> x1{xs[0]}, y1{ys[0]};
  switch (op) {
    case BuiltinOp::add: return pointwise_scan<X1>(Add{}, x1, y1, plan, reverse);
    case BuiltinOp::mul: return pointwise_scan<X1>(Mul{}, x1, y1, plan, reverse);
    case BuiltinOp::max: return pointwise_scan<X1>(Max{}, x1, y1, plan, reverse);
    case BuiltinOp::min: return pointwise_scan<X1>(Min{}, x1, y1, plan, reverse);
    case BuiltinOp::logaddexp: return pointwise_scan<X1>(LogAddExp{}, x1, y1, plan, reverse);
    case BuiltinOp::linear_recurrence: {
      using X2 = std::tuple<Tensor<T>, Tensor<T>>;
      return pointwise_scan<X2>(LinearRecurrence{}, std::tuple{xs[0], xs[1]}, std::tuple{ys[0], ys[1]}, plan, reverse);
    }
  }
}

}  // namespace
ASCAN_ISA_END

extern const BuiltinScans ASCAN_ISA_NAME(builtin_scans);
const BuiltinScans ASCAN_ISA_NAME(builtin_scans){&scan_builtin<float>, &scan_builtin<double>, &stream_copy_here};

}  // namespace ascan::detail
