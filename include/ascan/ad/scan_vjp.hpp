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

#include "ascan/ad/vjp/line_sweeps.hpp"

namespace ascan::ad::detail {

// Gradients of a pointwise scan with respect to its inputs, in each leaf's own shape.
//   plan: the scan's plan (output shape, axis, broadcast layout of xs); xs: the leaves as given;
//   ys: outputs; gbar: upstream gradients (a default-constructed tensor for zero); need: which
//   gradients to return (the others are default tensors).
// The linear recurrence with an upstream gradient on y^b alone takes first_order_vjp_lines in
// rows of kMinRunForLinrecLines lanes or more, first_order_vjp_by_scan in narrower ones; the
// cumulative product takes first_order_vjp_lines in rows of kMinRunForProductLines lanes or
// more, first_order_vjp_by_scan in few columns of rows narrower than kMaxRunForProductByScan
// lanes and in rows of kMinRunForWideItems to kMinRunForProductLines - 1 lanes; logaddexp
// (float, double, with an upstream gradient) takes logaddexp_vjp_lines in rows of
// kMinRunForLogAddExpLines lanes or more, first_order_vjp_by_scan in narrower ones. Otherwise rows
// of 3 or more lanes and many columns of two lanes (or strided ones) take the one-pass column
// sweep; one long sequence, few long narrow columns and many contiguous one-lane columns the
// segment sweep. The choice depends on the shape only, so gradients do not depend on the thread
// count.
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
  if constexpr (L == 1 && std::is_same_v<F, ascan::Add>) {
    // A sum's Jacobians are identities: the adjoint is the scan of ḡ in the other direction,
    // which reads ḡ alone (the general sweeps also read xs and ys to evaluate them).
    if (!gbar[0].storage_id()) {
      dx[0] = Tensor<T>::zeros(xs[0].shape());
    } else {
      const Tensor<T> g = ascan::associative_scan(ascan::add, gbar[0], plan.axis, {.reverse = !reverse});
      dx[0] = xs[0].shape() == shape ? g : reduce_to(g, xs[0].shape());
    }
    return dx;
  }
  if constexpr (L == 2 && std::is_same_v<F, ascan::LinearRecurrence>) {
    if (!gbar[0].storage_id() && gbar[1].storage_id())
      return plan.run >= kMinRunForLinrecLines
                 ? first_order_vjp_lines<T, 2>(plan, xs, ys, gbar[1], {need[0], need[1]}, reverse)
                 : first_order_vjp_by_scan<T, 2>(plan, xs, ys, gbar[1], {need[0], need[1]}, reverse);
  }
  // Many columns of one lane, contiguous along the scan ([B, T] scanned along T), take the segment
  // sweep with whole columns as its lanes (one pass, staged by register transposes): the column
  // sweep would run one real lane of 8 per column (discounted return on [512, 8192]: 45 -> 15 ms
  // backward in alternating runs; the linear recurrence about equal, 19.6 vs 18.9 ms).
  const bool lanes_across_columns = plan.run == 1 && plan.out_t_stride == 1;
  const bool few_lanes = plan.num_columns * plan.run < kMinColumnsForSweep;
  if constexpr (L == 1 && std::is_same_v<F, ascan::Mul>) {
    // Few columns of rows narrower than 8 lanes. Alternating runs, float32, backward alone,
    // medians of 15 (segment sweep -> by scan, before the scan's epilogue): [2^22] 7.7-8.2 ->
    // 5.9-6.5 ms, reverse 7.0-7.5 -> 5.5-5.7, [2^21, 2] 10.4-14.4 -> 6.3-7.7; against the
    // segment sweep with whole columns as lanes the scan lost ([512, 8192] along the 8192:
    // 4.7-5.4 against 8.2-9.3). Against the column sweep, with the epilogue, backward through the
    // tape, three processes' medians of 21, [2^22 / R, R]: R = 3: 7.7-12.0 -> 5.4-5.6 ms, 5:
    // 4.7-8.6 -> 3.9-4.8, 7: 3.9-4.3 -> 3.6-4.2; R = 8: 4.4-5.1 against 6.5-7.4, 16: 3.7-4.7
    // against 5.3-6.5.
    // Rows of kMinRunForWideItems to kMinRunForProductLines - 1 lanes as well (first measured
    // for rows of up to 1023 lanes): the column sweep walks rows under 512 lanes as items
    // narrower than its widest, rows of under 2 KiB per stream, at part of streaming speed.
    // AMD EPYC VM, float32 [2^22 / R, R], backward through the tape, three processes' medians of
    // 15 (sweep -> by scan): R = 64: 17.1-19.3 -> 7.7-9.2 ms, 128: 11.3-14.8 -> 7.7-10.0, 256:
    // 8.8-12.0 -> 7.1-10.4 (in reverse 10.4-14.0 -> 7.5-8.8); R = 32: 6.4-9.7 against 8.3-9.4,
    // 512: 7.3-12.6 against 15.2-22.7, [4096, 1024]: 8.8-9.1 against 20.6-25.3. Once the scan's
    // blocks held at least kMinEpilogueBlockRows rows and its lanes went in groups of up to
    // 1024 (backward alone, two alternating processes' medians of 11, sweep -> by scan): R = 64:
    // 10.8/11.4 -> 7.9/8.3 ms, 256: 6.4/6.9 -> 5.2/5.5, 512: 5.9/5.5 -> 4.9/4.9; R = 1024:
    // 4.4/4.3 against 5.4/5.1, 2048: 4.9/4.5 against 7.4/6.8. (On an AMD EPYC Zen 5 VM with
    // AVX-512 and 2 MiB of L2, [4096, 1024] forward + backward ran faster by scan, 2.2-2.4
    // against 3.1 ms in three alternating runs: the best limit depends on the machine.)
    if (gbar[0].storage_id() && plan.run >= kMinRunForProductLines)
      return first_order_vjp_lines<T, 1>(plan, xs, ys, gbar[0], {need[0]}, reverse);
    const bool wide_by_scan = plan.run >= kMinRunForWideItems && plan.run < kMinRunForProductLines;
    if (gbar[0].storage_id() && ((plan.run < kMaxRunForProductByScan && few_lanes) || wide_by_scan))
      return first_order_vjp_by_scan<T, 1>(plan, xs, ys, gbar[0], {need[0]}, reverse);
  }
  if constexpr (L == 1 && std::is_same_v<F, ascan::LogAddExp> &&
                (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    if (!need[0]) return dx;
    if (gbar[0].storage_id())
      return plan.run >= kMinRunForLogAddExpLines ? logaddexp_vjp_lines<T>(plan, xs, ys, gbar[0], reverse)
                                                  : first_order_vjp_by_scan<T, 1>(plan, xs, ys, gbar[0], {true}, reverse, true);
  }
  if (plan.run >= kMinRunForColumns || (!few_lanes && !lanes_across_columns))
    return pointwise_vjp_columns<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
  return pointwise_vjp_segments<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
}

}  // namespace ascan::ad::detail
