// The builtin combines' host scans on float and double, instantiated once (builtin_scan.hpp).
#include "ascan/detail/builtin_scan.hpp"

#include "ascan/detail/pointwise_scan.hpp"

namespace ascan::detail {
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

void builtin_pointwise_scan(BuiltinOp op, const Tensor<float>* xs, const Tensor<float>* ys, const PointwisePlan& plan,
                            bool reverse) {
  scan_builtin(op, xs, ys, plan, reverse);
}

void builtin_pointwise_scan(BuiltinOp op, const Tensor<double>* xs, const Tensor<double>* ys, const PointwisePlan& plan,
                            bool reverse) {
  scan_builtin(op, xs, ys, plan, reverse);
}

}  // namespace ascan::detail
