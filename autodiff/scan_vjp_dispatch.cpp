// The builtin combines' scan gradients, dispatched to the compiled ISA level active_isa() names
// (isa.hpp; the levels: autodiff/scan_vjp_builtins.cpp).
#include "ascan/ad/vjp/builtins.hpp"

namespace ascan::ad::detail {

extern const BuiltinVjps builtin_vjps_isa_base;
#if ASCAN_ISA_DISPATCH
extern const BuiltinVjps builtin_vjps_isa_avx2;
extern const BuiltinVjps builtin_vjps_isa_avx512;
#endif

namespace {
const BuiltinVjps* active_vjps() {
#if ASCAN_ISA_DISPATCH
  static const BuiltinVjps* const table[] = {&builtin_vjps_isa_base, &builtin_vjps_isa_avx2, &builtin_vjps_isa_avx512};
  return table[ascan::detail::active_isa_slot()];
#else
  return &builtin_vjps_isa_base;
#endif
}
}  // namespace

std::vector<Tensor<float>> builtin_scan_vjp(ascan::detail::BuiltinOp op, const ascan::detail::PointwisePlan& plan,
                                            const std::vector<Tensor<float>>& xs, const std::vector<Tensor<float>>& ys,
                                            const std::vector<Tensor<float>>& gbar, const bool* need, bool reverse) {
  return active_vjps()->f32(op, plan, xs, ys, gbar, need, reverse);
}

std::vector<Tensor<double>> builtin_scan_vjp(ascan::detail::BuiltinOp op, const ascan::detail::PointwisePlan& plan,
                                             const std::vector<Tensor<double>>& xs, const std::vector<Tensor<double>>& ys,
                                             const std::vector<Tensor<double>>& gbar, const bool* need, bool reverse) {
  return active_vjps()->f64(op, plan, xs, ys, gbar, need, reverse);
}

}  // namespace ascan::ad::detail
