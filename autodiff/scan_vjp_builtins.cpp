// The builtin combines' scan gradients on float and double (ad/vjp/builtins.hpp), compiled once
// per ISA level: CMake builds this file for each level with ASCAN_DISPATCH_ISA set (config.hpp),
// and autodiff/scan_vjp_dispatch.cpp picks one at run time.
// The builtin functors (combine.hpp) are defined outside the kernels' target region, as baseline
// code, and the kernels call them on their level's vectors: GCC warns that such a call would pass
// a vector in memory, but the functors are always inlined, at -O0 too (tests/check_isa_objects.py
// fails on a call from a kernel to a function outside its level that takes or returns a vector).
#pragma GCC diagnostic ignored "-Wpsabi"

#include "ascan/ad/vjp/builtins.hpp"

#include "ascan/ad/scan_vjp.hpp"

#if !defined(ASCAN_DISPATCH_ISA)
#error "autodiff/scan_vjp_builtins.cpp is compiled once per ISA level, with ASCAN_DISPATCH_ISA set"
#endif

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN
namespace {

using ascan::detail::BuiltinOp;

template <class T>
std::vector<Tensor<T>> vjp_builtin(BuiltinOp op, const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                   const std::vector<Tensor<T>>& ys, const std::vector<Tensor<T>>& gbar, const bool* need,
                                   bool reverse) {
  const std::array<bool, 1> need1{need[0]};
  switch (op) {
    case BuiltinOp::add: return pointwise_scan_vjp<T, 1>(Add{}, plan, xs, ys, gbar, need1, reverse);
    case BuiltinOp::mul: return pointwise_scan_vjp<T, 1>(Mul{}, plan, xs, ys, gbar, need1, reverse);
    case BuiltinOp::max: return pointwise_scan_vjp<T, 1>(Max{}, plan, xs, ys, gbar, need1, reverse);
    case BuiltinOp::min: return pointwise_scan_vjp<T, 1>(Min{}, plan, xs, ys, gbar, need1, reverse);
    case BuiltinOp::logaddexp: return pointwise_scan_vjp<T, 1>(LogAddExp{}, plan, xs, ys, gbar, need1, reverse);
    case BuiltinOp::linear_recurrence:
      return pointwise_scan_vjp<std::tuple<T, T>, 2>(LinearRecurrence{}, plan, xs, ys, gbar, {need[0], need[1]}, reverse);
  }
  return {};
}

}  // namespace
ASCAN_ISA_END

extern const BuiltinVjps ASCAN_ISA_NAME(builtin_vjps);
const BuiltinVjps ASCAN_ISA_NAME(builtin_vjps){&vjp_builtin<float>, &vjp_builtin<double>};

}  // namespace ascan::ad::detail
