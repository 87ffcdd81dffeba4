// line_sweeps.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the closed-form adjoints of the
// first-order builtins swept backwards whole cache lines of lanes at a time
// (first_order_vjp_lines, logaddexp_vjp_lines).
#pragma once

#include "ascan/config.hpp"
#include "ascan/ad/vjp/first_order_scan.hpp"

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN

// The adjoint of the cumulative product (L == 1) and of the linear recurrence with its loss on
// y^b alone (L == 2) swept backwards along the scan, whole cache lines of lanes at a time, with
// the Jacobians in closed form: g_s = ḡ_s + a_{s+1} g_{s+1} (a the product's x or the
// recurrence's decay), then ∂a_s = g_s y_{s-1} (the product's ∂x; g_0 at s = 0 for the product,
// 0 for the recurrence, whose y_0 is its x_0) and the recurrence's ∂b_s = g_s. The same
// arithmetic as the column sweep's (A_{s+1} = a_{s+1}, B_s = y_{s-1}), but each line of gradient
// is stored as soon as it is computed (streaming stores for large outputs, see stream_line)
// instead of a row at a time from a scratch row.
// The recurrence reads ḡ, a and y_{s-1} and writes ∂a and ∂b (5 streams). The product reads ḡ
// and x and writes ∂x (3 streams): y_{s-1} is recomputed from x, LineSweepPolicy::product_recompute_rows steps at a
// time, forwards from the stored y at the block's start (one row read per block) into a buffer
// that stays in cache, and the backward sweep then reads that block's x from cache too (the
// rounding of the recomputed products differs from the scan's by a few ulps).
// Leaves a and b may be broadcast as in the column sweep (one value over the lanes, or constant
// along the scan and summed); lanes are cut into items as there (sweep_lanes).
// Each step prefetches the lines it will read LineSweepPolicy::prefetch_rows steps later: an item reads
// up to 2 KiB of each row, rows a row stride apart going down, which the hardware prefetchers
// followed poorly.

template <class T, size_t L>
std::vector<Tensor<T>> first_order_vjp_lines(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                             const std::vector<Tensor<T>>& ys, const Tensor<T>& gbar,
                                             const std::array<bool, L>& need, bool reverse) {
  static_assert(L == 1 || L == 2);
  constexpr bool kProduct = L == 1;
  using Outs = GradOutputs<T, L>;
  using Acc = typename Outs::Acc;
  using Line = ascan::detail::Line<T>;
  constexpr int64_t V = ascan::detail::LineOf<T>::size;
  const int64_t T_len = plan.length, run = plan.run, step = plan.out_t_stride;
  Outs outs(plan, xs, need);
  const int64_t lanes = sweep_lanes(run, plan.num_columns, LineSweepPolicy::max_lanes);
  const int64_t chunks = (run + lanes - 1) / lanes;
  const bool stream = ASCAN_HAS_STREAM_STORES && outs.direct_bytes() >= ascan::detail::MemoryPolicy::stream_min_bytes;
  const T* const y_data = ys[L - 1].data();
  const T* const g_data = gbar.data();
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    alignas(64) T g[LineSweepPolicy::max_lanes];
    alignas(64) Acc sums[L][LineSweepPolicy::max_lanes];
    Tensor<T> yb_rows;
    if constexpr (kProduct) yb_rows = Tensor<T>::empty({LineSweepPolicy::product_recompute_rows, lanes});
    T* const yb = kProduct ? yb_rows.data() : nullptr;
    std::array<int64_t, L> leaf_off{};
    for (int64_t item = ib; item < ie; ++item) {
      const int64_t c = item / chunks, i0 = (item % chunks) * lanes, w = std::min(lanes, run - i0);
      int64_t out_off = 0;
      plan.column_offsets(c, leaf_off.data(), out_off);
      const T* const gp = g_data + out_off + i0;
      const T* const yp = y_data + out_off + i0;
      const bool a_lanes = plan.leaves[0].lane_contiguous;
      const T* const ap = xs[0].data() + leaf_off[0] + (a_lanes ? i0 : 0);
      const int64_t a_stride = plan.leaves[0].t_stride;
      // The gradients' rows at index 0 (null where not stored directly) and which are summed.
      std::array<T*, L> dp{};
      std::array<bool, L> summed{};
      bool aligned = stream && step * int64_t(sizeof(T)) % 64 == 0;
      for (size_t l = 0; l < L; ++l) {
        summed[l] = outs.mode[l] == Outs::Mode::summed;
        if (outs.mode[l] == Outs::Mode::direct) {
          dp[l] = outs.full[l].data() + out_off + i0;
          aligned = aligned && reinterpret_cast<uintptr_t>(dp[l]) % 64 == 0;
        }
        if (summed[l]) std::fill_n(sums[l], w, Acc(0));
      }
      std::fill_n(g, w, T(0));
      const auto at = [&](int64_t s) { return reverse ? T_len - 1 - s : s; };  // scan step -> index
      const int64_t wv = w / V * V;  // lanes in whole lines
      // Lanes [j, j + V) of gradient leaf l at row r: stored (streamed where the rows are
      // aligned) or summed.
      const auto put = [&](size_t l, int64_t r, int64_t j, const Line& v) {
        if (dp[l]) {
          if (aligned) ascan::detail::stream_line(dp[l] + r + j, v);
          else ascan::detail::store_line(dp[l] + r + j, v);
        } else if (summed[l]) {
          for (int64_t k = 0; k < V; ++k) sums[l][j + k] += Acc(v[k]);
        }
      };
      const auto put_one = [&](size_t l, int64_t r, int64_t j, T v) {
        if (dp[l]) dp[l][r + j] = v;
        else if (summed[l]) sums[l][j] += Acc(v);
      };
      // The product's y_{s-1} for steps [s0, s1), recomputed into rows [0, s1 - s0) of yb.
      const auto recompute_block = [&](int64_t s0, int64_t s1) {
        if (s0 > 0) std::copy_n(yp + at(s0 - 1) * step, w, yb);
        for (int64_t k = 1; k < s1 - s0; ++k) {
          const T* const xr = ap + at(s0 + k - 1) * a_stride;  // x_{s0+k-1}
          T* const out = yb + k * lanes;
          const T* const prev = yb + (k - 1) * lanes;
          if (s0 + k == 1) {  // y_0 = x_0
            for (int64_t j = 0; j < w; ++j) out[j] = a_lanes ? xr[j] : *xr;
            continue;
          }
          Line xv{};
          if (!a_lanes) xv = Line{} + *xr;
          const int64_t ahead = s0 + k - 1 + LineSweepPolicy::prefetch_rows;
          const T* const xpf = a_lanes && ahead < T_len ? ap + at(ahead) * a_stride : nullptr;
          for (int64_t j = 0; j < wv; j += V) {
            Line pv;
            if (xpf) __builtin_prefetch(xpf + j);
            ascan::detail::load_line(pv, prev + j);
            if (a_lanes) ascan::detail::load_line(xv, xr + j);
            ascan::detail::store_line(out + j, pv * xv);
          }
          for (int64_t j = wv; j < w; ++j) out[j] = prev[j] * (a_lanes ? xr[j] : *xr);
        }
      };
      int64_t s0 = T_len;
      for (int64_t s = T_len - 1; s >= 0; --s) {
        if (kProduct && s < s0) {
          s0 = std::max<int64_t>(0, s + 1 - LineSweepPolicy::product_recompute_rows);
          recompute_block(s0, s + 1);
        }
        const int64_t r = at(s) * step;
        const T* const gr = gp + r;
        // a_{s+1} (none at the last step: g = ḡ there) and y_{s-1} (none at the first).
        const T* const an = s + 1 < T_len ? ap + at(s + 1) * a_stride : nullptr;
        const T* const yr = s == 0 ? nullptr : kProduct ? yb + (s - s0) * lanes : yp + at(s - 1) * step;
        Line av{};
        if (an && !a_lanes) av = Line{} + *an;
        const int64_t sp = s - LineSweepPolicy::prefetch_rows;
        const T* const gpf = sp >= 0 ? gp + at(sp) * step : nullptr;
        const T* const ypf = gpf && !kProduct && sp >= 1 ? yp + at(sp - 1) * step : nullptr;
        const T* const apf = gpf && !kProduct && a_lanes ? ap + at(sp + 1) * a_stride : nullptr;
        for (int64_t j = 0; j < wv; j += V) {
          Line gv, hv, yv;
          if (gpf) __builtin_prefetch(gpf + j);
          if (ypf) __builtin_prefetch(ypf + j);
          if (apf) __builtin_prefetch(apf + j);
          ascan::detail::load_line(gv, gr + j);
          if (an) {
            ascan::detail::load_line(hv, g + j);
            if (a_lanes) ascan::detail::load_line(av, an + j);
            gv += av * hv;
          }
          ascan::detail::store_line(g + j, gv);
          if (yr) {
            ascan::detail::load_line(yv, yr + j);
            put(0, r, j, gv * yv);
          } else {
            put(0, r, j, kProduct ? gv : Line{});
          }
          if constexpr (L == 2) put(1, r, j, gv);
        }
        for (int64_t j = wv; j < w; ++j) {
          T gv = gr[j];
          if (an) gv += (a_lanes ? an[j] : *an) * g[j];
          g[j] = gv;
          put_one(0, r, j, yr ? gv * yr[j] : kProduct ? gv : T(0));
          if constexpr (L == 2) put_one(1, r, j, gv);
        }
      }
      for (size_t l = 0; l < L; ++l)
        if (summed[l])
          for (int64_t j = 0; j < w; ++j) outs.full[l].data()[outs.summed_offset(out_off) + i0 + j] = T(sums[l][j]);
    }
    if (stream) ascan::detail::stream_fence();
  });
  return outs.finish(xs);
}

// The same adjoint in rows of AdjointPathPolicy::min_run_for_logaddexp_lines lanes or more, swept backwards a row of
// up to LineSweepPolicy::max_lanes lanes at a time with the Jacobians evaluated where they are needed and
// nothing stored per step: at step s, (A_s, B_s) from (y_{s-1}, x_s), g_s = ḡ_s + A_{s+1} g_{s+1},
// ∂x_s = B_s g_s (g_0 at s = 0). Reads ḡ, x and y and writes ∂x: 4 streams against the 8 of the
// Jacobian pass and the scan. Rows are prefetched LineSweepPolicy::prefetch_rows steps ahead, as in
// first_order_vjp_lines.
template <class T>
std::vector<Tensor<T>> logaddexp_vjp_lines(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                           const std::vector<Tensor<T>>& ys, const Tensor<T>& gbar, bool reverse) {
  const int64_t T_len = plan.length, run = plan.run, step = plan.out_t_stride;
  const int64_t lanes = sweep_lanes(run, plan.num_columns, LineSweepPolicy::max_lanes);
  const int64_t chunks = (run + lanes - 1) / lanes;
  Tensor<T> dx = Tensor<T>::empty(plan.out_shape);
  const T* const x_data = xs[0].data();
  const T* const y_data = ys[0].data();
  const T* const g_data = gbar.data();
  T* const d_data = dx.data();
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    alignas(64) T g[LineSweepPolicy::max_lanes], a_next[LineSweepPolicy::max_lanes];
    std::array<int64_t, 1> leaf_off{};
    for (int64_t item = ib; item < ie; ++item) {
      const int64_t c = item / chunks, i0 = (item % chunks) * lanes, w = std::min(lanes, run - i0);
      int64_t out_off = 0;
      plan.column_offsets(c, leaf_off.data(), out_off);
      const int64_t base = out_off + i0;
      const auto row = [&](int64_t s) { return base + (reverse ? T_len - 1 - s : s) * step; };
      std::fill_n(g, w, T(0));
      std::fill_n(a_next, w, T(0));
      for (int64_t s = T_len - 1; s >= 0; --s) {
        const int64_t r = row(s);
        const T* __restrict gr = g_data + r;
        const T* __restrict xr = x_data + r;
        T* __restrict dr = d_data + r;
        if (const int64_t sp = s - LineSweepPolicy::prefetch_rows; sp >= 1) {
          const int64_t rp = row(sp), ryp = row(sp - 1);
          for (int64_t j = 0; j < w; j += 64 / int64_t{sizeof(T)}) {
            __builtin_prefetch(g_data + rp + j);
            __builtin_prefetch(x_data + rp + j);
            __builtin_prefetch(y_data + ryp + j);
          }
        }
        if (s == 0) {  // y_0 = x_0: ∂x_0 = g_0
          for (int64_t j = 0; j < w; ++j) dr[j] = gr[j] + a_next[j] * g[j];
          continue;
        }
        const T* __restrict yr = y_data + row(s - 1);
        for (int64_t j = 0; j < w; ++j) {
          T A, B;
          logaddexp_partials(yr[j], xr[j], A, B);
          const T gv = gr[j] + a_next[j] * g[j];
          g[j] = gv;
          a_next[j] = A;
          dr[j] = B * gv;
        }
      }
    }
  });
  return {dx};
}

ASCAN_ISA_END
}  // namespace ascan::ad::detail
