// builtins.hpp — the builtin combines' scan gradients, compiled once into ascan::autodiff.
//
// pointwise_scan_vjp for add, mul, max, min, logaddexp and linear_recurrence on float or double
// is instantiated in autodiff/scan_vjp_builtins.cpp, once per ISA level (isa.hpp);
// ad::associative_scan calls it through these declarations, so a user file compiles no gradient
// kernel for a builtin (docs/design.md §2).
#pragma once

#include <vector>

#include "ascan/detail/builtin_scan.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad::detail {

// pointwise_scan_vjp(f, plan, xs, ys, gbar, need, reverse) for the builtin `op`, at
// active_isa()'s level; need[l] for l < 2 (linear_recurrence) or l < 1 (the others).
std::vector<Tensor<float>> builtin_scan_vjp(ascan::detail::BuiltinOp op, const ascan::detail::PointwisePlan& plan,
                                            const std::vector<Tensor<float>>& xs, const std::vector<Tensor<float>>& ys,
                                            const std::vector<Tensor<float>>& gbar, const bool* need, bool reverse);
std::vector<Tensor<double>> builtin_scan_vjp(ascan::detail::BuiltinOp op, const ascan::detail::PointwisePlan& plan,
                                             const std::vector<Tensor<double>>& xs, const std::vector<Tensor<double>>& ys,
                                             const std::vector<Tensor<double>>& gbar, const bool* need, bool reverse);

// One ISA level's compiled gradients (autodiff/scan_vjp_builtins.cpp defines
// builtin_vjps_<namespace>).
struct BuiltinVjps {
  std::vector<Tensor<float>> (*f32)(ascan::detail::BuiltinOp, const ascan::detail::PointwisePlan&,
                                    const std::vector<Tensor<float>>&, const std::vector<Tensor<float>>&,
                                    const std::vector<Tensor<float>>&, const bool*, bool);
  std::vector<Tensor<double>> (*f64)(ascan::detail::BuiltinOp, const ascan::detail::PointwisePlan&,
                                     const std::vector<Tensor<double>>&, const std::vector<Tensor<double>>&,
                                     const std::vector<Tensor<double>>&, const bool*, bool);
};

}  // namespace ascan::ad::detail
