// scan_vjp.hpp — the exact adjoint of a pointwise scan (docs/design.md §4), on host tensors.
//
// With per-step Jacobians A_t = ∂f/∂left, B_t = ∂f/∂right at (y_{t-1}, x_t) (L×L per element,
// from one call of f on dual numbers with 2L tangents):
//     g_{T-1} = ḡ_{T-1},   g_t = ḡ_t + A_{t+1}ᵀ g_{t+1},   ∂x_t = B_tᵀ g_t (t ≥ 1),  ∂x_0 = g_0.
// Exact for any upstream gradients, coupled leaves included. Indices are in scan order (reverse
// mirrors them). The adjoint recurrence is linear, so it associates like the forward scan: over
// a stretch [t0, t1) it is g_{t0} = c + M g_{t1} with (M, c) composed from the steps. Two fused
// sweeps evaluate the Jacobians where they are needed and store nothing per step: many columns
// walk back one lane per column (one pass); few long columns are cut into segments whose (M, c)
// are chained first (two passes). Memory: xs, ys, ḡ and the gradients. Builtins whose
// Jacobians are closed forms skip the duals: a sum's adjoint is the reverse sum of ḡ, the linear
// recurrence's (and the cumulative product's) a linear recurrence in the other direction, taken
// as a scan (first_order_vjp_by_scan) or, in wide rows, as a sweep a cache line of lanes at a
// time (first_order_vjp_lines); logaddexp's Jacobians are closed forms too, evaluated in such a
// sweep in wide rows (logaddexp_vjp_lines), in narrow ones per block of the same scan by its
// epilogue's prologue (FirstOrderEpilogue::fill_inputs).
#pragma once

#include "ascan/config.hpp"
#include "ascan/ad/vjp/builtins.hpp"
#include "ascan/ad/vjp/line_sweeps.hpp"
#include "ascan/parallel.hpp"

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN

using ascan::detail::AdjointPath;

template <class F, size_t L> inline constexpr bool is_linrec = L == 2 && std::is_same_v<F, ascan::LinearRecurrence>;
template <class F, size_t L> inline constexpr bool is_product = L == 1 && std::is_same_v<F, ascan::Mul>;
template <class F, size_t L, class T>
inline constexpr bool is_float_logaddexp =
    L == 1 && std::is_same_v<F, ascan::LogAddExp> && (std::is_same_v<T, float> || std::is_same_v<T, double>);

// Whether adjoint path p computes this combine's gradient with these upstream gradients: the
// closed forms need their combine (and the first-order ones an upstream gradient where their
// algebra assumes one), the dual-number sweeps take any combine.
template <class F, size_t L, class T>
bool adjoint_path_applies(AdjointPath p, const std::vector<Tensor<T>>& gbar) {
  bool linrec_b_only = false, has_g0 = false;
  if constexpr (is_linrec<F, L>) linrec_b_only = !gbar[0].storage_id() && gbar[1].storage_id();
  if constexpr (L == 1) has_g0 = gbar[0].storage_id();
  switch (p) {
    case AdjointPath::sum_by_scan: return L == 1 && std::is_same_v<F, ascan::Add>;
    case AdjointPath::first_order_lines: return linrec_b_only || (is_product<F, L> && has_g0);
    case AdjointPath::first_order_by_scan:
      return linrec_b_only || ((is_product<F, L> || is_float_logaddexp<F, L, T>) && has_g0);
    case AdjointPath::logaddexp_lines: return is_float_logaddexp<F, L, T> && has_g0;
    case AdjointPath::column_sweep:
    case AdjointPath::segment_sweep: return true;
    default: return false;
  }
}

// The automatic choice, by shape only (so gradients do not depend on the thread count). The
// closed forms read fewer streams than the dual-number sweeps: a sum reads ḡ alone; the
// first-order builtins take their line sweep in rows wide enough to fill cache lines and items,
// their adjoint as a scan in narrower ones (AdjointPathPolicy). Other combines take the one-pass
// column sweep where it has lanes enough (rows of 3 or more lanes, many columns of two lanes or
// strided ones), and the segment sweep, whose two passes split a column over the threads, for
// one long sequence, few long narrow columns and many contiguous one-lane columns ([B, T] along
// T, whose columns become the segment sweep's lanes: the column sweep would run one real lane of
// 8 per column).
template <class F, size_t L, class T>
AdjointPath choose_adjoint_path(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& gbar) {
  using Policy = AdjointPathPolicy;
  const int64_t run = plan.run;
  const bool few_lanes = plan.num_columns * run < Policy::min_columns_for_sweep;
  if constexpr (L == 1 && std::is_same_v<F, ascan::Add>) return AdjointPath::sum_by_scan;
  if constexpr (is_linrec<F, L>) {
    if (adjoint_path_applies<F, L>(AdjointPath::first_order_lines, gbar))
      return run >= Policy::min_run_for_linrec_lines ? AdjointPath::first_order_lines : AdjointPath::first_order_by_scan;
  }
  if constexpr (is_product<F, L>) {
    // By scan in few columns of narrow rows (the column sweep would run them as mostly padded
    // lanes) and in rows of wide items below the line sweep's width.
    if (gbar[0].storage_id()) {
      if (run >= Policy::min_run_for_product_lines) return AdjointPath::first_order_lines;
      const bool wide_by_scan = run >= ColumnSweepPolicy::min_run_for_wide_items;
      if ((run < Policy::max_run_for_product_by_scan && few_lanes) || wide_by_scan) return AdjointPath::first_order_by_scan;
    }
  }
  if constexpr (is_float_logaddexp<F, L, T>) {
    if (gbar[0].storage_id())
      return run >= Policy::min_run_for_logaddexp_lines ? AdjointPath::logaddexp_lines : AdjointPath::first_order_by_scan;
  }
  const bool lanes_across_columns = run == 1 && plan.out_t_stride == 1;
  if (run >= Policy::min_run_for_columns || (!few_lanes && !lanes_across_columns)) return AdjointPath::column_sweep;
  return AdjointPath::segment_sweep;
}

// Gradients of a pointwise scan with respect to its inputs, in each leaf's own shape.
//   plan: the scan's plan (output shape, axis, broadcast layout of xs); xs: the leaves as given;
//   ys: outputs; gbar: upstream gradients (a default-constructed tensor for zero); need: which
//   gradients to return (the others are default tensors).
// The path is choose_adjoint_path's, or the one a test forces (detail/path_override.hpp).
template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_scan_vjp(const F& f, const ascan::detail::PointwisePlan& plan,
                                          const std::vector<Tensor<T>>& xs, const std::vector<Tensor<T>>& ys,
                                          const std::vector<Tensor<T>>& gbar, const std::array<bool, L>& need,
                                          bool reverse) {
  const Shape& shape = plan.out_shape;
  std::vector<Tensor<T>> dx(L);
  if (plan.numel() == 0) {
    for (size_t l = 0; l < L; ++l)
      if (need[l]) dx[l] = Tensor<T>::zeros(xs[l].shape());
    return dx;
  }
  if constexpr (is_float_logaddexp<F, L, T>) {
    if (!need[0]) return dx;
  }
  AdjointPath path = choose_adjoint_path<F, L, T>(plan, gbar);
  if (const AdjointPath forced = ascan::detail::forced_adjoint_path.load(std::memory_order_relaxed);
      forced != AdjointPath::automatic) [[unlikely]] {
    if (!adjoint_path_applies<F, L, T>(forced, gbar))
      ascan::detail::raise("ascan::ad::backward(): the forced adjoint path {} does not apply to this combine "
                           "and its upstream gradients", ascan::detail::name(forced));
    path = forced;
  }
  switch (path) {
    case AdjointPath::sum_by_scan:
      if constexpr (L == 1 && std::is_same_v<F, ascan::Add>) {
        // A sum's Jacobians are identities: the adjoint is the scan of ḡ in the other direction.
        if (!gbar[0].storage_id()) {
          dx[0] = Tensor<T>::zeros(xs[0].shape());
        } else {
          const Tensor<T> g = ascan::associative_scan(ascan::add, gbar[0], plan.axis, {.reverse = !reverse});
          dx[0] = xs[0].shape() == shape ? g : reduce_to(g, xs[0].shape());
        }
      }
      return dx;
    case AdjointPath::first_order_lines:
      if constexpr (is_linrec<F, L>) return first_order_vjp_lines<T, 2>(plan, xs, ys, gbar[1], {need[0], need[1]}, reverse);
      if constexpr (is_product<F, L>) return first_order_vjp_lines<T, 1>(plan, xs, ys, gbar[0], {need[0]}, reverse);
      return dx;
    case AdjointPath::first_order_by_scan:
      if constexpr (is_linrec<F, L>)
        return first_order_vjp_by_scan<T, 2>(plan, xs, ys, gbar[1], {need[0], need[1]}, reverse);
      if constexpr (is_product<F, L>) return first_order_vjp_by_scan<T, 1>(plan, xs, ys, gbar[0], {need[0]}, reverse);
      if constexpr (is_float_logaddexp<F, L, T>)
        return first_order_vjp_by_scan<T, 1>(plan, xs, ys, gbar[0], {true}, reverse, true);
      return dx;
    case AdjointPath::logaddexp_lines:
      if constexpr (is_float_logaddexp<F, L, T>) return logaddexp_vjp_lines<T>(plan, xs, ys, gbar[0], reverse);
      return dx;
    case AdjointPath::column_sweep: return pointwise_vjp_columns<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
    default: return pointwise_vjp_segments<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
  }
}

// The gradients as ad::associative_scan's backward and ascan::associative_scan_vjp take them:
// the library's compiled copy for a builtin on float or double (X: the scan's leaf structure),
// else pointwise_scan_vjp instantiated for f; subnormals as ascan::set_flush_denormals says.
template <class X, class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> scan_vjp(const F& f, const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                const std::vector<Tensor<T>>& ys, const std::vector<Tensor<T>>& gbar,
                                const std::array<bool, L>& need, bool reverse) {
  const ascan::detail::FloatModeScope mode;
  if constexpr (ascan::detail::has_compiled_builtin<F, X>)
    return builtin_scan_vjp(ascan::detail::builtin_op<F>::op, plan, xs, ys, gbar, need.data(), reverse);
  else
    return pointwise_scan_vjp<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
}

ASCAN_ISA_END
}  // namespace ascan::ad::detail
