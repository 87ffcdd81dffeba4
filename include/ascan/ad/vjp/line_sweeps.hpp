// line_sweeps.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the closed-form adjoints of the
// first-order builtins swept backwards whole cache lines of lanes at a time
// (first_order_vjp_lines, logaddexp_vjp_lines).
#pragma once

#include "ascan/ad/vjp/first_order_scan.hpp"

namespace ascan::ad::detail {

// The adjoint of the cumulative product (L == 1) and of the linear recurrence with its loss on
// y^b alone (L == 2) swept backwards along the scan, whole cache lines of lanes at a time, with
// the Jacobians in closed form: g_s = ḡ_s + a_{s+1} g_{s+1} (a the product's x or the
// recurrence's decay), then ∂a_s = g_s y_{s-1} (the product's ∂x; g_0 at s = 0 for the product,
// 0 for the recurrence, whose y_0 is its x_0) and the recurrence's ∂b_s = g_s. The same
// arithmetic as the column sweep's (A_{s+1} = a_{s+1}, B_s = y_{s-1}), but each line of gradient
// is stored as soon as it is computed (streaming stores for large outputs, see stream_line)
// instead of a row at a time from a scratch row: alternating runs (float32, two threads,
// forward + backward through the tape, medians of 5) in the comments below.
// The recurrence reads ḡ, a and y_{s-1} and writes ∂a and ∂b (5 streams). The product reads ḡ
// and x and writes ∂x (3 streams): y_{s-1} is recomputed from x, kProductRecomputeRows steps at a
// time, forwards from the stored y at the block's start (one row read per block) into a buffer
// that stays in cache, and the backward sweep then reads that block's x from cache too (the
// rounding of the recomputed products differs from the scan's by a few ulps).
// Leaves a and b may be broadcast as in the column sweep (one value over the lanes, or constant
// along the scan and summed); lanes are cut into items as there (sweep_lanes).
// Each step prefetches the lines it will read kLineSweepPrefetchRows steps later: an item reads
// up to 2 KiB of each row, rows a row stride apart going down, which the hardware prefetchers
// followed poorly (the loads of ḡ took half of the sweep's samples in a profile).
inline constexpr int64_t kLineSweepMaxLanes = 512;
inline constexpr int64_t kProductRecomputeRows = 64;
inline constexpr int64_t kLineSweepPrefetchRows = 4;
// The linear recurrence (loss on y^b) takes first_order_vjp_lines in rows of at least
// kMinRunForLinrecLines lanes, with or without a decay constant along the scan; the cumulative
// product from kMinRunForProductLines lanes on.
// AMD EPYC Zen 5 VM, float32, two threads, forward + backward through the tape, medians of 5,
// alternating runs (ms). With the prefetches and the recomputed products, [2^24 / R, R] (64 MiB
// per leaf): R = 1024 cumulative product 11.2-11.9 (prefetch, y read) -> 10.1-10.7 (prefetch,
// recomputed) [12.0-14.3 with neither]; linear recurrence 16.9/19.5 -> 14.4/16.2, discounted
// return 16.9/17.0 -> 11.5/12.2; R = 256 linear recurrence 16.2/16.9 -> 15.7/17.0, discounted
// 18.7/19.4 -> 13.1/13.2. Against the adjoint as a scan (scan -> line sweep): R = 16 linear
// recurrence 22.4/25.9 -> 15.6/17.5 (one item of 16 lanes on one thread), discounted 24.6/30.9
// -> 20.3/24.2; R = 32 20.6/20.8 -> 16.2/16.2, 21.7/22.0 -> 14.7/15.5; R = 64 18.3/20.5 ->
// 17.9/18.0, 20.7/22.7 -> 18.2/18.4; in cache ([2^22 / R, R]) R = 16 5.72/6.02 -> 4.39/5.09,
// 6.76/8.03 -> 4.94/5.94, R = 32 5.76/6.37 -> 4.28/4.49. Cumulative product (by scan or column
// sweep -> line sweep): R = 128 14.2/15.7 -> 12.8/13.6 (in cache 3.78/4.68 -> 3.67/3.78), R = 256
// 12.8-14.2 -> 9.7-10.2 (in cache 3.0-3.4 -> 2.1-2.3), R = 512 12.7/14.6 -> 10.5/10.7; it lost
// at R = 64 (15.9/16.3 -> 19.3/20.5) and R = 16 (12.0/13.2 -> 21.9/26.2).
// Before the prefetches and the recomputed products (same VM and method, old path -> line
// sweep, cumulative product / linear recurrence / discounted return): R = 128: 13.3 -> 13.2-13.4
// / 17.5-17.8 -> 16.3-16.5 / 16.7 -> 11.3; R = 512: 12.9-13.4 -> 11.2-13.1 / 17.0-20.7 ->
// 15.9-17.1 / 17.8-19.3 -> 14.9-15.1; R = 1024: 12.3-13.4 -> 11.5-12.4 / 16.6-19.1 -> 16.0-16.6 /
// 15.4-18.6 -> 15.0-16.3; R = 2048: 13.7-16.1 -> 12.2-13.0 / 24.9-25.3 -> 17.5-18.9 / 20.5-22.2
// -> 18.1-18.3; R = 4096: 14.4-15.0 -> 11.0-13.3 / 28.1-29.1 -> 17.9-20.8 / 21.4-24.5 ->
// 18.5-22.0; at R = 64 (two items of 32 lanes) the sweep lost then (cumulative product 13.5-14.0
// -> 19.7-20.2, discounted return 18.0-18.2 -> 33.2-33.4).
inline constexpr int64_t kMinRunForLinrecLines = 16;
// logaddexp takes logaddexp_vjp_lines in rows of this many lanes or more, its adjoint as a scan
// (with the Jacobians evaluated per block, FirstOrderEpilogue::fill_inputs) in narrower ones.
// Float32 backward alone, 2 threads, [2^22 / R, R], two runs of medians of 11, each path twice
// per run (line sweep against scan): R = 64: 7.1-7.3 / 4.1-4.3 against 5.6-5.9 / 4.2-4.8 ms
// (in reverse 5.8 / 4.3-5.1 against 4.9-5.0 / 4.1-4.2), 256: 7.3-7.5 / 6.2 against 5.5-5.7 /
// 4.7-4.8 (4.5-4.6 / 5.0-5.4 against 4.1-4.5 / 4.4), 512: 4.7-5.1 / 6.5-6.6 against 4.4-4.5 /
// 5.4-5.5; R = 1024: 4.1-5.2 / 3.9-5.2 against 4.0-4.6 / 4.2 (3.7 / 3.8-4.1 against 4.0 /
// 4.2), 2048: 3.7 / 3.5-5.2 against 4.4-4.5 / 4.2-4.3 (3.9-4.0 / 4.1-4.9 against 4.5-4.9 /
// 4.9-5.2). (Against the scan that stored its Jacobians in two tensors first, the sweep had won
// from R = 16.)
inline constexpr int64_t kMinRunForLogAddExpLines = 1024;
inline constexpr int64_t kMinRunForProductLines = 128;

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
  const int64_t lanes = sweep_lanes(run, plan.num_columns, kLineSweepMaxLanes);
  const int64_t chunks = (run + lanes - 1) / lanes;
  const bool stream = ASCAN_HAS_STREAM_STORES && outs.direct_bytes() >= ascan::detail::kStreamMinBytes;
  const T* const y_data = ys[L - 1].data();
  const T* const g_data = gbar.data();
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    alignas(64) T g[kLineSweepMaxLanes];
    alignas(64) Acc sums[L][kLineSweepMaxLanes];
    Tensor<T> yb_rows;
    if constexpr (kProduct) yb_rows = Tensor<T>::empty({kProductRecomputeRows, lanes});
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
          const int64_t ahead = s0 + k - 1 + kLineSweepPrefetchRows;
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
          s0 = std::max<int64_t>(0, s + 1 - kProductRecomputeRows);
          recompute_block(s0, s + 1);
        }
        const int64_t r = at(s) * step;
        const T* const gr = gp + r;
        // a_{s+1} (none at the last step: g = ḡ there) and y_{s-1} (none at the first).
        const T* const an = s + 1 < T_len ? ap + at(s + 1) * a_stride : nullptr;
        const T* const yr = s == 0 ? nullptr : kProduct ? yb + (s - s0) * lanes : yp + at(s - 1) * step;
        Line av{};
        if (an && !a_lanes) av = Line{} + *an;
        const int64_t sp = s - kLineSweepPrefetchRows;
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

// The same adjoint in rows of kMinRunForLogAddExpLines lanes or more, swept backwards a row of
// up to kLineSweepMaxLanes lanes at a time with the Jacobians evaluated where they are needed and
// nothing stored per step: at step s, (A_s, B_s) from (y_{s-1}, x_s), g_s = ḡ_s + A_{s+1} g_{s+1},
// ∂x_s = B_s g_s (g_0 at s = 0). Reads ḡ, x and y and writes ∂x: 4 streams against the 8 of the
// Jacobian pass and the scan. Rows are prefetched kLineSweepPrefetchRows steps ahead, as in
// first_order_vjp_lines.
template <class T>
std::vector<Tensor<T>> logaddexp_vjp_lines(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                           const std::vector<Tensor<T>>& ys, const Tensor<T>& gbar, bool reverse) {
  const int64_t T_len = plan.length, run = plan.run, step = plan.out_t_stride;
  const int64_t lanes = sweep_lanes(run, plan.num_columns, kLineSweepMaxLanes);
  const int64_t chunks = (run + lanes - 1) / lanes;
  Tensor<T> dx = Tensor<T>::empty(plan.out_shape);
  const T* const x_data = xs[0].data();
  const T* const y_data = ys[0].data();
  const T* const g_data = gbar.data();
  T* const d_data = dx.data();
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    alignas(64) T g[kLineSweepMaxLanes], a_next[kLineSweepMaxLanes];
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
        if (const int64_t sp = s - kLineSweepPrefetchRows; sp >= 1) {
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

}  // namespace ascan::ad::detail
