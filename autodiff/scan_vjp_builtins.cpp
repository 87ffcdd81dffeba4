// The builtin combines' scan gradients on float and double, instantiated once (ad/vjp/builtins.hpp).
#include "ascan/ad/vjp/builtins.hpp"

#include "ascan/ad/scan_vjp.hpp"

namespace ascan::ad::detail {
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

std::vector<Tensor<float>> builtin_scan_vjp(BuiltinOp op, const ascan::detail::PointwisePlan& plan,
                                            const std::vector<Tensor<float>>& xs, const std::vector<Tensor<float>>& ys,
                                            const std::vector<Tensor<float>>& gbar, const bool* need, bool reverse) {
  return vjp_builtin(op, plan, xs, ys, gbar, need, reverse);
}

std::vector<Tensor<double>> builtin_scan_vjp(BuiltinOp op, const ascan::detail::PointwisePlan& plan,
                                             const std::vector<Tensor<double>>& xs, const std::vector<Tensor<double>>& ys,
                                             const std::vector<Tensor<double>>& gbar, const bool* need, bool reverse) {
  return vjp_builtin(op, plan, xs, ys, gbar, need, reverse);
}

}  // namespace ascan::ad::detail
