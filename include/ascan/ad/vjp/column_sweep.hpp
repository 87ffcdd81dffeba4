// column_sweep.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the adjoint swept backwards
// one output column per lane, many lanes at a time (pointwise_vjp_columns).
#pragma once

#include "ascan/config.hpp"
#include "ascan/ad/vjp/common.hpp"

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN

// The adjoint swept backwards along the scan axis, one output column position per lane, many
// lanes at a time: one evaluation of f on duals per element gives B_t for ∂x_t and A_t for the
// next step's g. One pass over xs, ys and ḡ; no per-step Jacobian arrays, no broadcast copies.
//   xs: the leaves in their own shapes (broadcast per `plan`); ys: outputs (plan.out_shape);
//   gbar: upstream gradients of plan.out_shape, a default-constructed tensor (no storage) for
//   zero; need: which input gradients to compute. Returns ∂x in each leaf's own shape (a
//   default tensor where not needed): leaves constant along the axis sum their gradient over
//   the steps in the lanes (float64 accumulators for float), other broadcast leaves are reduced
//   from a full-shape gradient.
// Items narrower than ColumnSweepPolicy::padded_lanes ([T, 7]) run their lane loops over a compile-time count n of
// 8 or 16 lanes: a loop of 7 runtime iterations is all scalar remainder. The w real lanes sit at
// [lo, lo + w) of the n; the others are padding, whose results are never stored. Packed rows (a
// step's w lanes adjacent to the next step's in every stream: [T, 7]) are read and written in
// place as windows that reach into the steps swept after this one (lower indices forward, higher
// in reverse): pad lanes read real neighbouring elements, and what they write there is
// overwritten when that step comes. Steps whose window would leave the column, and layouts that
// are not packed, are staged through small buffers (copying every row costs more than the
// windows).

template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_vjp_columns(const F& f, const ascan::detail::PointwisePlan& plan,
                                             const std::vector<Tensor<T>>& xs, const std::vector<Tensor<T>>& ys,
                                             const std::vector<Tensor<T>>& gbar, const std::array<bool, L>& need,
                                             bool reverse) {
  using Outs = GradOutputs<T, L>;
  using Acc = typename Outs::Acc;
  const int64_t T_len = plan.length, run = plan.run, step = plan.out_t_stride;
  Outs outs(plan, xs, need);
  using W = SweepLanes<L, T>;
  static_assert(W::max >= ColumnSweepPolicy::padded_lanes);
  const int64_t lanes = sweep_lanes(run, plan.num_columns, W::max);
  const int64_t chunks = (run + lanes - 1) / lanes;
  // Large gradients go out with streaming stores (see stream_store.hpp), a row of an item at a
  // time from the scratch rows; padded items write their windows in place.
  const bool stream_dx = ASCAN_HAS_STREAM_STORES && outs.direct_bytes() >= ascan::detail::MemoryPolicy::stream_min_bytes;
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    // Per-lane state and row buffers: g, A_{s+1}, broadcast x rows, scratch ∂x rows, zeros (for
    // absent ḡ), the sums of summed leaves, staged rows of narrow items. Lane j of slot k is
    // [k * n + j], n the item's loop count.
    alignas(64) std::array<T, L * W::max> g;
    alignas(64) std::array<T, L * L * W::max> a_next;
    alignas(64) std::array<T, L * W::max> xb, scratch;
    alignas(64) std::array<T, W::max> zeros;
    alignas(64) std::array<Acc, L * W::max> sums;
    alignas(64) std::array<T, L * ColumnSweepPolicy::padded_lanes> staged_g, staged_y, staged_x;
    zeros.fill(T(0));
    std::array<int64_t, L> leaf_off{};
    for (int64_t item = ib; item < ie; ++item) {
      const int64_t c = item / chunks, i0 = (item % chunks) * lanes, w = std::min(lanes, run - i0);
      int64_t out_off = 0;
      plan.column_offsets(c, leaf_off.data(), out_off);
      // count: the lanes of the loops, w itself or a constant >= w (padding around the w).
      const auto sweep = [&](const auto count) {
        const int64_t n = count;
        const bool padded = n != w;
        const bool streamed = stream_dx && !padded;
        const ascan::detail::StreamCopy stream_copy = streamed ? ascan::detail::stream_copier() : nullptr;
        const int64_t lo = padded && !reverse ? n - w : 0;  // the first real lane
        // Windows in place: the output rows are packed (ys and ḡ share its layout), and so are
        // the leaves read in place; steps s < first_window are staged.
        const bool packed = padded && step == w;
        std::array<bool, L> x_window{};
        for (size_t l = 0; l < L; ++l) x_window[l] = packed && plan.leaves[l].t_stride == w;
        const int64_t first_window = (n - w + w - 1) / w + 1;  // step s reads step s - 1's window
        sums.fill(Acc(0));
        const auto at = [&](int64_t s) { return reverse ? T_len - 1 - s : s; };  // scan step -> index
        // The streams at index 0 of the item, and the leaves' kinds, in locals: the loops store
        // through tensor pointers, so what they read through plan, outs or the tensors would be
        // reloaded at every step.
        std::array<const T*, L> g_base, y_base, x_base;
        std::array<T*, L> d_base;
        std::array<int64_t, L> x_stride;
        std::array<bool, L> x_lanes, summed;
        for (size_t l = 0; l < L; ++l) {
          g_base[l] = gbar[l].storage_id() ? gbar[l].data() + out_off + i0 : nullptr;
          d_base[l] = outs.mode[l] == Outs::Mode::direct ? outs.full[l].data() + out_off + i0 : nullptr;
          y_base[l] = ys[l].data() + out_off + i0;
          x_lanes[l] = plan.leaves[l].lane_contiguous;
          x_base[l] = xs[l].data() + leaf_off[l] + (x_lanes[l] ? i0 : 0);
          x_stride[l] = plan.leaves[l].t_stride;
          summed[l] = outs.mode[l] == Outs::Mode::summed;
        }
        if (padded) {  // staged pad lanes: ḡ = 0, y and x an element of the item
          for (size_t l = 0; l < L; ++l) {
            std::fill_n(staged_g.begin() + l * n, n, T(0));
            std::fill_n(staged_y.begin() + l * n, n, y_base[l][0]);
            std::fill_n(staged_x.begin() + l * n, n, x_base[l][0]);
          }
        }
        std::array<const T*, L> gb, yp, xr;
        std::array<T*, L> dr;
        bool staged = padded;  // the current step's rows go through the buffers
        // The rows of step s: ḡ_s and where ∂x_s goes.
        const auto begin_step = [&](int64_t s) {
          staged = padded && !(packed && s >= first_window);
          const int64_t row = at(s) * step;
          for (size_t l = 0; l < L; ++l) {
            gb[l] = zeros.data();
            if (g_base[l] && staged) {  // (no pointer before a tensor's start is formed)
              copy_short(g_base[l] + row, staged_g.data() + l * n + lo, w);
              gb[l] = staged_g.data() + l * n;
            } else if (g_base[l]) {
              gb[l] = g_base[l] + row - lo;
            }
            dr[l] = d_base[l] && !staged && !streamed ? d_base[l] + row - lo : scratch.data() + l * n;
          }
        };
        const auto end_step = [&](int64_t s) {
          for (size_t l = 0; l < L; ++l) {
            if (summed[l]) {
              for (int64_t j = 0; j < n; ++j) sums[l * n + j] += Acc(dr[l][j]);
            } else if (d_base[l] && staged) {
              copy_short(dr[l] + lo, d_base[l] + at(s) * step, w);
            } else if (d_base[l] && streamed) {
              stream_copy(d_base[l] + at(s) * step, dr[l], w * sizeof(T));
            }
          }
        };
        // Narrow rows of many streams walking backwards outrun the hardware prefetchers (the
        // sweep waited on their loads): each step fetches the rows of a step further on.
        const int64_t ahead = std::max<int64_t>(1, ColumnSweepPolicy::prefetch_bytes / (w * int64_t(sizeof(T))));
        constexpr int64_t line = 64 / sizeof(T);
        const auto prefetch_step = [&](int64_t s) {
          const int64_t t = at(s), row = t * step, prev = at(s - 1) * step;
          for (int64_t e = 0; e < w; e += line)
            for (size_t l = 0; l < L; ++l) {
              if (g_base[l]) __builtin_prefetch(g_base[l] + row + e);
              if (d_base[l]) __builtin_prefetch(d_base[l] + row + e, 1);
              __builtin_prefetch(y_base[l] + prev + e);
              if (x_lanes[l]) __builtin_prefetch(x_base[l] + t * x_stride[l] + e);
            }
        };
        // g_s = ḡ_s + A_{s+1}ᵀ g_{s+1} for lane j, every component from the old g; A_T = 0.
        std::fill_n(g.begin(), L * n, T(0));
        std::fill_n(a_next.begin(), L * L * n, T(0));
        const auto next_g = [&](int64_t j, std::array<T, L>& gn) {
          for (size_t l = 0; l < L; ++l) {
            T acc = gb[l][j];
            for (size_t k = 0; k < L; ++k) acc += a_next[(k * L + l) * n + j] * g[k * n + j];
            gn[l] = acc;
          }
          for (size_t l = 0; l < L; ++l) g[l * n + j] = gn[l];
        };
        for (int64_t s = T_len - 1; s >= 1; --s) {
          if (padded && s > ahead) prefetch_step(s - ahead);
          begin_step(s);
          const int64_t t = at(s), prev = at(s - 1) * step;
          for (size_t l = 0; l < L; ++l) {
            if (staged) {
              copy_short(y_base[l] + prev, staged_y.data() + l * n + lo, w);
              yp[l] = staged_y.data() + l * n;
            } else {
              yp[l] = y_base[l] + prev - lo;
            }
            const T* p = x_base[l] + t * x_stride[l];
            if (!x_lanes[l]) {  // constant over the run: one value for every lane
              std::fill_n(xb.data() + l * n, n, *p);
              xr[l] = xb.data() + l * n;
            } else if (padded && (staged || !x_window[l])) {
              copy_short(p, staged_x.data() + l * n + lo, w);
              xr[l] = staged_x.data() + l * n;
            } else {
              xr[l] = p - lo;
            }
          }
          // One loop per step (a separate loop for g of a constant 8 lanes was unrolled before
          // it could be vectorised). Rows of different tensors (and the stack buffers) never overlap.
ASCAN_IVDEP
          for (int64_t j = 0; j < n; ++j) {
            std::array<T, L> gn, left, right;
            std::array<T, L * L> A, B;
            next_g(j, gn);
            for (size_t l = 0; l < L; ++l) {
              left[l] = yp[l][j];
              right[l] = xr[l][j];
            }
            jacobians<Elem, L>(f, left, right, A, B);
            for (size_t m = 0; m < L; ++m) {  // ∂x_s = B_sᵀ g_s
              T acc = T(0);
              for (size_t k = 0; k < L; ++k) acc += B[k * L + m] * gn[k];
              dr[m][j] = acc;
            }
            for (size_t e = 0; e < L * L; ++e) a_next[e * n + j] = A[e];
          }
          end_step(s);
        }
        begin_step(0);  // ∂x_0 = g_0
        for (int64_t j = 0; j < n; ++j) {
          std::array<T, L> gn;
          next_g(j, gn);
          for (size_t l = 0; l < L; ++l) dr[l][j] = gn[l];
        }
        end_step(0);
        if (streamed) ascan::detail::stream_fence();
        for (size_t l = 0; l < L; ++l)
          if (summed[l])
            for (int64_t j = 0; j < w; ++j) outs.full[l].data()[outs.summed_offset(out_off) + i0 + j] = T(sums[l * n + lo + j]);
      };
      if (w <= ColumnSweepPolicy::padded_lanes / 2) {
        sweep(std::integral_constant<int64_t, ColumnSweepPolicy::padded_lanes / 2>{});
      } else if (w <= ColumnSweepPolicy::padded_lanes) {
        sweep(std::integral_constant<int64_t, ColumnSweepPolicy::padded_lanes>{});
      } else {
        sweep(w);
      }
    }
  });
  return outs.finish(xs);
}

ASCAN_ISA_END
}  // namespace ascan::ad::detail
