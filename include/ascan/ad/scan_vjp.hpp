// scan_vjp.hpp — the exact adjoint of a pointwise scan (DESIGN §4), on host tensors.
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

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ascan/detail/block_transpose.hpp"
#include "ascan/detail/log1p_exp.hpp"
#include "ascan/detail/pointwise_scan.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/combine.hpp"
#include "ascan/dual.hpp"
#include "ascan/parallel.hpp"
#include "ascan/scan.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad::detail {

// Number of scalars in an element structure.
template <class E> struct elem_size : std::integral_constant<size_t, 1> {};
template <class... Es>
struct elem_size<std::tuple<Es...>> : std::integral_constant<size_t, (size_t{0} + ... + elem_size<Es>::value)> {};

// E with every scalar replaced by D.
template <class E, class D> struct rebind { using type = D; };
template <class... Es, class D> struct rebind<std::tuple<Es...>, D> {
  using type = std::tuple<typename rebind<Es, D>::type...>;
};

// Builds the structure E (scalars of type D) from flat[pos...], depth first.
template <class E, class D>
ASCAN_ALWAYS_INLINE typename rebind<E, D>::type build_elem(const D* flat, size_t& pos) {
  if constexpr (ascan::detail::is_std_tuple_v<E>) {
    return [&]<size_t... K>(std::index_sequence<K...>) {
      // Braced init evaluates left to right, so leaves are taken in order.
      return typename rebind<E, D>::type{build_elem<std::tuple_element_t<K, E>, D>(flat, pos)...};
    }(std::make_index_sequence<std::tuple_size_v<E>>{});
  } else {
    return flat[pos++];
  }
}

// Flattens a combine result (tuple-like or scalar) into flat[pos...], converting to D.
template <class D, class R>
ASCAN_ALWAYS_INLINE void scatter_elem(const R& r, D* flat, size_t& pos) {
  if constexpr (ascan::detail::is_tuple_like<std::decay_t<R>>::value) {
    [&]<size_t... K>(std::index_sequence<K...>) {
      using std::get;
      (scatter_elem<D>(get<K>(r), flat, pos), ...);
    }(std::make_index_sequence<std::tuple_size_v<std::decay_t<R>>>{});
  } else {
    flat[pos++] = D(r);
  }
}

// A (∂out/∂left) and, with WithB, B (∂out/∂right), row-major [out leaf][in leaf], at one
// element, from one call of f on duals with L (or 2L) tangents.
template <class Elem, size_t L, bool WithB, class T, class F>
ASCAN_ALWAYS_INLINE void dual_jacobians(const F& f, const std::array<T, L>& left, const std::array<T, L>& right,
                                        std::array<T, L * L>& A, std::array<T, L * L>* B) {
  constexpr size_t N = WithB ? 2 * L : L;
  using D = Dual<T, static_cast<int>(N)>;
  std::array<D, L> l, r, o;
  for (size_t i = 0; i < L; ++i) {
    l[i] = D(left[i]);
    l[i].d[i] = T(1);
    r[i] = D(right[i]);
    if constexpr (WithB) r[i].d[L + i] = T(1);
  }
  size_t pl = 0, pr = 0, po = 0;
  const auto out = f(build_elem<Elem, D>(l.data(), pl), build_elem<Elem, D>(r.data(), pr));
  scatter_elem<D>(out, o.data(), po);
  for (size_t k = 0; k < L; ++k)
    for (size_t i = 0; i < L; ++i) {
      A[k * L + i] = o[k].d[i];
      if constexpr (WithB) (*B)[k * L + i] = o[k].d[L + i];
    }
}

template <class Elem, size_t L, class T, class F>
ASCAN_ALWAYS_INLINE void jacobians(const F& f, const std::array<T, L>& left, const std::array<T, L>& right,
                                   std::array<T, L * L>& A, std::array<T, L * L>& B) {
  dual_jacobians<Elem, L, true>(f, left, right, A, &B);
}

// A alone: the segment sweep's first pass needs no B.
template <class Elem, size_t L, class T, class F>
ASCAN_ALWAYS_INLINE void left_jacobian(const F& f, const std::array<T, L>& left, const std::array<T, L>& right,
                                       std::array<T, L * L>& A) {
  dual_jacobians<Elem, L, false>(f, left, right, A, static_cast<std::array<T, L * L>*>(nullptr));
}

template <size_t N, class T>
auto as_tuple(const std::vector<Tensor<T>>& v) {
  return [&]<size_t... I>(std::index_sequence<I...>) { return std::make_tuple(v[I]...); }(std::make_index_sequence<N>{});
}

template <class T, class Tup>
std::vector<Tensor<T>> as_vector(const Tup& t) {
  return std::apply([](const auto&... x) { return std::vector<Tensor<T>>{x...}; }, t);
}

// Where the sweeps put ∂x of each leaf: leaves of the output's shape directly into their
// gradient (in the output layout); leaves constant along the axis summed over the steps (float64
// accumulators for float) into a tensor of the output's shape without the axis; other broadcast
// leaves into a full-shape tensor that is reduced afterwards. Leaves without `need` get nothing.
template <class T, size_t L>
struct GradOutputs {
  enum class Mode { none, direct, summed };
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  std::array<Mode, L> mode{};
  std::vector<Tensor<T>> full;
  int64_t length = 0, step = 1;

  GradOutputs(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
              const std::array<bool, L>& need)
      : full(L), length(plan.length), step(plan.out_t_stride) {
    Shape summed_shape = plan.out_shape;
    summed_shape[plan.axis] = 1;
    for (size_t l = 0; l < L; ++l) {
      if (!need[l]) continue;
      const bool summed = xs[l].shape() != plan.out_shape && plan.leaves[l].t_stride == 0;
      mode[l] = summed ? Mode::summed : Mode::direct;
      full[l] = Tensor<T>::empty(summed ? summed_shape : plan.out_shape);
    }
  }
  // Bytes of the gradients written in the output layout (what a sweep may stream).
  int64_t direct_bytes() const {
    int64_t bytes = 0;
    for (size_t l = 0; l < L; ++l)
      if (mode[l] == Mode::direct) bytes += full[l].numel() * int64_t{sizeof(T)};
    return bytes;
  }
  bool any_summed() const {
    return std::find(mode.begin(), mode.end(), Mode::summed) != mode.end();
  }
  // The summed tensor's offset of an output offset at axis index 0.
  int64_t summed_offset(int64_t out_offset) const {
    return out_offset / (length * step) * step + out_offset % step;
  }
  // ∂x in each leaf's own shape (default tensors where not needed).
  std::vector<Tensor<T>> finish(const std::vector<Tensor<T>>& xs) const {
    std::vector<Tensor<T>> dx(L);
    for (size_t l = 0; l < L; ++l)
      if (mode[l] != Mode::none)
        dx[l] = full[l].shape() == xs[l].shape() ? full[l] : reduce_to(full[l], xs[l].shape());
    return dx;
  }
};

inline constexpr int64_t kMinColumnsForSweep = 256;
// Rows at least this wide take the column sweep even as one long column block ([T, 7]): its one
// pass with R lanes walking T backwards (one thread for R <= 16) measured 1.4x (R = 3), 2.6x
// (R = 7) and 3x (R = 16) faster than the segment sweep's two passes on two threads, on the
// 2-core development machine ([2^22 / R, R] float32 linear recurrence). At R = 2 the two tie and
// one lane alone is 3x slower, so narrower rows keep the segment sweep, whose passes scale with
// threads (with many cores it would win for moderate R too; the choice is by shape alone, so
// gradients do not depend on the thread count).
inline constexpr int64_t kMinRunForColumns = 3;

// Lanes per work item of the column sweep, at most: 512 (rows of 2 KiB float per stream walk
// backwards at streaming speed; 64-lane rows ran at half of it), fewer for large L so that the
// per-lane state (g, A_{s+1}, row buffers: about L² + 4L values per lane) stays in a 32 KiB
// stack frame. The state lives on the stack so the compiler sees that the tensors' rows do not
// alias it, and vectorises the lane loops.
template <size_t L, class T>
struct SweepLanes {
  static constexpr int64_t max = std::clamp<int64_t>(int64_t(32768 / (sizeof(T) * (L * L + 4 * L))) / 16 * 16, 16, 512);
};

// Runs narrower than this are swept in items of 16 lanes (a constant lane count, see
// kPaddedLanes); wider ones in items of up to SweepLanes::max lanes with a runtime count. On an
// Intel Xeon server VM (2 threads, float32 linear recurrence, backward alone, medians of 9, old
// -> new path), wide items won from 48 lanes on: [16384, 256] 15.5-17.3 -> 8.7 ms, with a
// decay broadcast in reverse 13.4-14.0 -> 4.9-6.1, [32768, 128] 15.7 -> 6.6-6.8, [65536, 64]
// 12-16 -> 7-9.6, [87381, 48] 14-16 -> 7-9.4, the cumulative product [16384, 256] 7.9-8.6 ->
// 3.1-3.6; at 32 lanes the two tied (6.1 vs 6.3-6.7 ms). Rows of 16 lanes there walk the rows
// of a wide layout a 64-byte piece at a time, a row stride apart. (On an AMD EPYC VM the
// runtime count had run at 0.5-0.7 of the speed of items of 16 for 64..256 lanes.) [T, 1024]
// runs best as two items of 512 (1.7 vs 3.1 ns per element in items of 32).
inline constexpr int64_t kMinRunForWideItems = 48;
inline constexpr int64_t kPaddedLanes = 16;  // narrower items run padded to 8 or 16 lanes

// Lanes per work item: 16 for runs under kMinRunForWideItems, otherwise up to `max_lanes` of one
// run, fewer when that would leave threads idle. Only the split depends on the thread count;
// every lane's arithmetic does not.
inline int64_t sweep_lanes(int64_t run, int64_t columns, int64_t max_lanes) {
  if (run < kMinRunForWideItems) return std::min(run, kPaddedLanes);
  int64_t chunks = (run + max_lanes - 1) / max_lanes;
  const int64_t threads = ascan::num_threads();
  if (columns * chunks < threads) chunks = std::min((run + 15) / 16, (threads + columns - 1) / columns);
  const int64_t lanes = (run + chunks - 1) / chunks;
  return std::min(run, (lanes + 15) / 16 * 16);
}

// Copies m < 32 elements with fixed-size moves (a runtime-length loop or memcpy call would cost
// more than the copy).
template <class T>
ASCAN_ALWAYS_INLINE void copy_short(const T* src, T* dst, int64_t m) {
  if (m & 16) { std::memcpy(dst, src, 16 * sizeof(T)); src += 16; dst += 16; }
  if (m & 8) { std::memcpy(dst, src, 8 * sizeof(T)); src += 8; dst += 8; }
  if (m & 4) { std::memcpy(dst, src, 4 * sizeof(T)); src += 4; dst += 4; }
  if (m & 2) { std::memcpy(dst, src, 2 * sizeof(T)); src += 2; dst += 2; }
  if (m & 1) *dst = *src;
}

// The adjoint swept backwards along the scan axis, one output column position per lane, many
// lanes at a time: one evaluation of f on duals per element gives B_t for ∂x_t and A_t for the
// next step's g. One pass over xs, ys and ḡ; no per-step Jacobian arrays, no broadcast copies.
//   xs: the leaves in their own shapes (broadcast per `plan`); ys: outputs (plan.out_shape);
//   gbar: upstream gradients of plan.out_shape, a default-constructed tensor (no storage) for
//   zero; need: which input gradients to compute. Returns ∂x in each leaf's own shape (a
//   default tensor where not needed): leaves constant along the axis sum their gradient over
//   the steps in the lanes (float64 accumulators for float), other broadcast leaves are reduced
//   from a full-shape gradient.
// Items narrower than kPaddedLanes ([T, 7]) run their lane loops over a compile-time count n of
// 8 or 16 lanes: a loop of 7 runtime iterations is all scalar remainder (it was 5x slower per
// element than wide rows). The w real lanes sit at [lo, lo + w) of the n; the others are
// padding, whose results are never stored. Packed rows (a step's w lanes adjacent to the next
// step's in every stream: [T, 7]) are read and written in place as windows that reach into the
// steps swept after this one (lower indices forward, higher in reverse): pad lanes read real
// neighbouring elements, and what they write there is overwritten when that step comes. Steps
// whose window would leave the column, and layouts that are not packed, are staged through
// small buffers (copying every row measured 2x slower than the windows).
inline constexpr int64_t kSweepPrefetchBytes = 1024;  // how far ahead (per stream) padded items fetch rows

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
  static_assert(W::max >= kPaddedLanes);
  const int64_t lanes = sweep_lanes(run, plan.num_columns, W::max);
  const int64_t chunks = (run + lanes - 1) / lanes;
  // Large gradients go out with streaming stores (see stream_store.hpp), a row of an item at a
  // time from the scratch rows; padded items write their windows in place.
  const bool stream_dx = ASCAN_HAS_STREAM_STORES && outs.direct_bytes() >= ascan::detail::kStreamMinBytes;
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    // Per-lane state and row buffers: g, A_{s+1}, broadcast x rows, scratch ∂x rows, zeros (for
    // absent ḡ), the sums of summed leaves, staged rows of narrow items. Lane j of slot k is
    // [k * n + j], n the item's loop count.
    alignas(64) std::array<T, L * W::max> g;
    alignas(64) std::array<T, L * L * W::max> a_next;
    alignas(64) std::array<T, L * W::max> xb, scratch;
    alignas(64) std::array<T, W::max> zeros;
    alignas(64) std::array<Acc, L * W::max> sums;
    alignas(64) std::array<T, L * kPaddedLanes> staged_g, staged_y, staged_x;
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
              ascan::detail::stream_copy(d_base[l] + at(s) * step, dr[l], w * sizeof(T));
            }
          }
        };
        // Narrow rows of many streams walking backwards outrun the hardware prefetchers (the
        // sweep waited on their loads): each step fetches the rows of a step further on.
        const int64_t ahead = std::max<int64_t>(1, kSweepPrefetchBytes / (w * int64_t(sizeof(T))));
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
#pragma GCC ivdep
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
      if (w <= kPaddedLanes / 2) {
        sweep(std::integral_constant<int64_t, kPaddedLanes / 2>{});
      } else if (w <= kPaddedLanes) {
        sweep(std::integral_constant<int64_t, kPaddedLanes>{});
      } else {
        sweep(w);
      }
    }
  });
  return outs.finish(xs);
}

// The adjoint for few long columns (one long sequence, rows of two lanes): each column is cut
// into segments of kSegmentSteps steps, and the segments of all columns are the lanes of a
// sweep, kLanesPerTile at a time. With many columns (kMinColumnsForSweep or more) each column is
// one whole segment and step 1 is skipped. Two sweeps over each tile's data (the second on the
// buffers the first staged) and no per-step arrays:
//   1. per segment [t0, t1), walking backwards from zero: g_s = c_s + M_s g_{t1} with
//      c_s = ḡ_s + A_{s+1}ᵀ c_{s+1} and M_s = A_{s+1}ᵀ M_{s+1} (c = 0, M = I at t1);
//   2. g_{t1} of every segment from its successor's (c, M), chained from tile to tile (O(lanes));
//   3. per segment again from the true g_{t1}: g_s and ∂x_s = B_sᵀ g_s, as in the column sweep.
// The lanes' operands are staged kStageSteps steps at a time: each lane copies its stretch of
// every stream (sequential reads the prefetchers follow and the core overlaps) into step-major
// tile buffers, which the lane loops read contiguously. When step 1 runs, the buffers hold the
// whole segment: step 3 reads them as step 1 left them instead of staging every stream again
// (segments are shortened so that the buffers stay within kResidentBytes, about a third of L2;
// 96 KiB for the float32 linear recurrence).
// A tile holds segments of one length (the columns' last segments, which may be shorter, have
// tiles of their own) and always VW lanes (the last tile repeats a lane and drops its results),
// so the lane loops are straight-line code over a constant count and vectorise. Segment lengths
// depend on T, L and the element type only, so the gradients do not depend on the thread count.
inline constexpr int64_t kSegmentSteps = 512;
// 8 lanes: one vector of floats. 16 measured 10% slower in L3 (0.27 vs 0.24 ms for 2^16 steps of a
// linear recurrence, one thread) and not faster out of cache: step 1's lane state (c, M, A)
// spills from the registers.
inline constexpr int64_t kLanesPerTile = 8;
inline constexpr int64_t kStageSteps = 32;
inline constexpr int64_t kResidentBytes = int64_t{192} << 10;

// Reads one byte of every 64-byte line of the n elements at p: brings them into the caches.
template <class T>
unsigned char touch_lines(const T* p, int64_t n) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  unsigned char seen = 0;
  for (int64_t e = 0; e < n * int64_t{sizeof(T)}; e += 64) seen ^= bytes[e];
  return seen;
}

template <class T, size_t L>
constexpr int64_t segment_steps() {
  constexpr int64_t fit = kResidentBytes / (3 * int64_t{L} * kLanesPerTile * int64_t{sizeof(T)});
  return std::clamp<int64_t>(fit / kStageSteps * kStageSteps, 2 * kStageSteps, kSegmentSteps);
}

template <class T, size_t L>
struct SegmentTile {
  static constexpr int64_t VW = kLanesPerTile, Q = kStageSteps;
  int64_t w = 0, len = 0;            // lanes with results, steps per lane
  std::array<int64_t, VW> v, n, t0;  // lane j: segment v = n * S + k from t0
  // Staged operands of leaf l: gb[l][step * VW + lane] for `steps` steps (a stage, or a whole
  // segment); ∂x of the current stage: d[l][step in stage][lane].
  std::array<T*, L> gb, left, right;
  std::array<std::array<std::array<T, VW>, Q>, L> d;
  explicit SegmentTile(int64_t steps) : store(Tensor<T>::empty({3 * int64_t{L} * steps * VW})) {
    for (size_t l = 0; l < L; ++l) {
      gb[l] = store.data() + (3 * l + 0) * steps * VW;
      left[l] = store.data() + (3 * l + 1) * steps * VW;
      right[l] = store.data() + (3 * l + 2) * steps * VW;
    }
  }

 private:
  Tensor<T> store;  // 64-byte aligned, not zeroed
};

template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_vjp_segments(const F& f, const ascan::detail::PointwisePlan& plan,
                                              const std::vector<Tensor<T>>& xs, const std::vector<Tensor<T>>& ys,
                                              const std::vector<Tensor<T>>& gbar, const std::array<bool, L>& need,
                                              bool reverse) {
  using Tile = SegmentTile<T, L>;
  using Outs = GradOutputs<T, L>;
  using Acc = typename Outs::Acc;
  constexpr int64_t VW = Tile::VW, Q = Tile::Q;
  const int64_t T_len = plan.length, R = plan.run, step = plan.out_t_stride;
  const int64_t N = plan.num_columns * R;  // columns of the output, one lane each
  // Many columns: each is one segment (one lane of the sweep), so the first pass has nothing to
  // chain and is skipped.
  const bool whole_columns = N >= kMinColumnsForSweep;
  const int64_t seg = whole_columns ? T_len : std::min(T_len, segment_steps<T, L>()), S = (T_len + seg - 1) / seg;
  // With step 1 (more than one segment per column) the tile buffers hold whole segments.
  const bool resident = S > 1;
  const int64_t buffer_steps = resident ? (seg + Q - 1) / Q * Q : Q;
  const int64_t last_len = T_len - (S - 1) * seg;
  Outs outs(plan, xs, need);
  // Element offsets of column n at index 0: in the output and in each leaf.
  std::vector<int64_t> out_base(N);
  std::vector<std::array<int64_t, L>> leaf_base(N);
  {
    std::array<int64_t, L> leaf_off{};
    int64_t out_off = 0;
    for (int64_t c = 0; c < plan.num_columns; ++c) {
      plan.column_offsets(c, leaf_off.data(), out_off);
      for (int64_t i = 0; i < R; ++i) {
        out_base[c * R + i] = out_off + i;
        for (size_t l = 0; l < L; ++l) leaf_base[c * R + i][l] = leaf_off[l] + (plan.leaves[l].lane_contiguous ? i : 0);
      }
    }
  }
  std::array<const T*, L> y_ptr, x_ptr, g_ptr;
  std::array<T*, L> dx_ptr;
  std::array<int64_t, L> x_step;
  for (size_t l = 0; l < L; ++l) {
    y_ptr[l] = ys[l].data();
    x_ptr[l] = xs[l].data();
    x_step[l] = plan.leaves[l].t_stride;
    g_ptr[l] = gbar[l].storage_id() ? gbar[l].data() : nullptr;
    dx_ptr[l] = outs.mode[l] == Outs::Mode::direct ? outs.full[l].data() : nullptr;
  }
  const auto at = [&](int64_t s) { return reverse ? T_len - 1 - s : s; };  // scan step -> index
  // Tiles: first the full segments (k < S - 1) of all columns, segment-major, then the last ones.
  const int64_t full_lanes = N * (S - 1), full_tiles = (full_lanes + VW - 1) / VW;
  const int64_t tiles = full_tiles + (N + VW - 1) / VW;
  // Tile `tile`: its first lane u0, lanes with results w, steps per lane len, and lane u's
  // segment k (of column u % N, or u itself among the last segments).
  struct TileSpan {
    bool last;
    int64_t u0, w, len;
  };
  const auto span_of = [&](int64_t tile) {
    const bool last = tile >= full_tiles;
    const int64_t u0 = (last ? tile - full_tiles : tile) * VW;
    return TileSpan{last, u0, std::min(VW, (last ? N : full_lanes) - u0), last ? last_len : seg};
  };
  const auto segment_of = [&](const TileSpan& t, int64_t u) { return t.last ? S - 1 : u / N; };
  const auto set_tile = [&](int64_t tile, Tile& r) {
    const TileSpan t = span_of(tile);
    r.w = t.w;
    r.len = t.len;
    for (int64_t j = 0; j < VW; ++j) {
      const int64_t u = t.u0 + std::min(j, r.w - 1), k = segment_of(t, u);
      r.n[j] = t.last ? u : u % N;
      r.t0[j] = k * seg;
      r.v[j] = r.n[j] * S + k;
    }
  };
  // One column block ([T, run] rows, the usual long layouts): a tile's lanes cover one contiguous
  // stretch of rows of every stream. Fetching it in order before its first stage lets the staging
  // gathers (VW * L * 4 interleaved streams, more than the hardware prefetchers follow) hit the
  // caches. Part `part` of `parts` of tile `tile`'s stretch (of every stream) is fetched: a worker
  // fetches its next tile in parts while its step 3 runs on resident buffers, so the fetch
  // overlaps arithmetic instead of preceding it. The fetch reads a byte of every line: software
  // prefetches of the same lines did not change the sweep's time at all (1-D [2^22] float32
  // linear recurrence, 18.5 ms backward with or without them, 14.9 ms with the reads).
  const bool fetch_tiles = plan.num_columns == 1;
  const auto fetch_tile = [&](int64_t tile, int64_t part, int64_t parts) {
    const TileSpan t = span_of(tile);  // its first lane's first step to its last lane's last
    const int64_t a = at(segment_of(t, t.u0) * seg), b = at(segment_of(t, t.u0 + t.w - 1) * seg + t.len - 1);
    const int64_t lo = std::min(a, b), rows = std::max(a, b) + 1 - lo;
    const int64_t r0 = lo + rows * part / parts, r1 = lo + rows * (part + 1) / parts;
    unsigned char seen = 0;
    for (size_t l = 0; l < L; ++l) {
      seen ^= touch_lines(y_ptr[l] + out_base[0] + r0 * step, (r1 - r0) * step);
      if (g_ptr[l]) seen ^= touch_lines(g_ptr[l] + out_base[0] + r0 * step, (r1 - r0) * step);
      seen ^= touch_lines(x_ptr[l] + leaf_base[0][l] + r0 * x_step[l], (r1 - r0) * x_step[l]);
    }
    [[maybe_unused]] volatile unsigned char keep = seen;  // the reads must happen
  };
  const int64_t dir = reverse ? -1 : 1;  // index step per scan step
  // Lanes j .. j + m - 1 (m <= end - j) that are neighbouring columns of one row in every stream
  // (the same segment of [T, 7]'s seven columns): each step of theirs is m adjacent elements. A
  // lane without such neighbours is a run of one.
  const auto row_run = [&](const Tile& r, int64_t j, int64_t end) {
    int64_t m = 1;
    for (; j + m < end && r.t0[j + m] == r.t0[j] && out_base[r.n[j + m]] == out_base[r.n[j]] + m; ++m) {
      bool adjacent = true;
      for (size_t l = 0; l < L; ++l)
        adjacent = adjacent && leaf_base[r.n[j + m]][l] == leaf_base[r.n[j]][l] + (plan.leaves[l].lane_contiguous ? m : 0);
      if (!adjacent) break;
    }
    return m;
  };
  // Stages steps q0 .. q0 + qn - 1 (relative to the lanes' t0) of a run of m lanes. The loops
  // use local pointers and strides only: the copies' stores may alias anything the lambdas
  // capture by reference, which would be reloaded after every copy (that made staging 2x
  // slower than the arithmetic it feeds).
  const auto stage_run = [&](Tile& r, int64_t j, int64_t m, int64_t q0, int64_t qn) {
    const int64_t ob = out_base[r.n[j]], s0 = r.t0[j] + q0, ydir = dir * step, row0 = (resident ? q0 : 0) * VW;
    for (size_t l = 0; l < L; ++l) {
      const int64_t xdir = dir * x_step[l];
      const T* yrow = y_ptr[l] + ob + at(s0) * step;  // rows of step s0
      const T* xrow = x_ptr[l] + leaf_base[r.n[j]][l] + at(s0) * x_step[l];
      const T* grow = g_ptr[l] ? g_ptr[l] + ob + at(s0) * step : nullptr;
      const bool x_lanes = plan.leaves[l].lane_contiguous;
      T* left = r.left[l] + row0 + j;
      T* right = r.right[l] + row0 + j;
      T* gb = r.gb[l] + row0 + j;
      // Step s reads y at index at(s - 1); step 0 has no y_{-1} and reads y_0 (its A is unused).
      copy_short(s0 > 0 ? yrow - ydir : yrow, left, m);
      for (int64_t qq = 1; qq < qn; ++qq) copy_short(yrow + (qq - 1) * ydir, left + qq * VW, m);
      for (int64_t qq = 0; qq < qn; ++qq) {
        if (x_lanes) copy_short(xrow + qq * xdir, right + qq * VW, m);
        else std::fill_n(right + qq * VW, m, xrow[qq * xdir]);
      }
      for (int64_t qq = 0; qq < qn; ++qq) {
        if (grow) copy_short(grow + qq * ydir, gb + qq * VW, m);
        else std::fill_n(gb + qq * VW, m, T(0));
      }
    }
  };
  const auto prefetch_lane = [&](Tile& r, int64_t j, int64_t q0) {
    const int64_t ob = out_base[r.n[j]], s0 = r.t0[j] + q0;
    // The next stage's stretch of every stream (the lanes walk VW * L * 4 of them, more than
    // the hardware prefetchers follow), so its loads hit while this stage is computed. Also
    // for one column block, whose tile fetch_tile read in order: without it, 1-D [2^22] took
    // 1.3x as long when that read preceded the tile (partly evicted by the time a late stage
    // was staged).
    if (q0 >= Q) {
      constexpr int64_t line = 64 / sizeof(T);
      const int64_t i0 = at(s0 - Q), i1 = at(s0 - 1), lo = std::min(i0, i1), hi = std::max(i0, i1);
      for (size_t l = 0; l < L; ++l) {
        const int64_t xo = leaf_base[r.n[j]][l];
        for (int64_t e = lo * step; e <= hi * step; e += line) {
          __builtin_prefetch(y_ptr[l] + ob + e);
          if (g_ptr[l]) __builtin_prefetch(g_ptr[l] + ob + e);
          if (dx_ptr[l]) __builtin_prefetch(dx_ptr[l] + ob + e, 1);
        }
        for (int64_t e = lo * x_step[l]; e <= hi * x_step[l]; e += line) __builtin_prefetch(x_ptr[l] + xo + e);
      }
    }
  };
  // Contiguous streams (unit steps along the scan) stage blocks of TV lanes x TV steps with
  // register transposes; other layouts, partial stages and blocks holding a column's step 0 (no
  // y_{-1} to read) go element by element.
  using BT = ascan::detail::BlockTranspose<T>;
  constexpr int64_t TV = BT::V;
  bool unit_steps = TV > 0 && (step == 1 || step == -1);
  for (size_t l = 0; l < L; ++l) unit_steps = unit_steps && (x_step[l] == 1 || x_step[l] == -1 || x_step[l] == 0);
  const auto stage_block = [&](Tile& r, int64_t j0, int64_t q0) {
    if constexpr (TV > 0) {
      const int64_t row0 = resident ? q0 : 0;
      for (size_t l = 0; l < L; ++l) {
        const int64_t ydir = dir * step, xdir = dir * x_step[l];
        std::array<const T*, TV> ysrc, xsrc, gsrc;
        for (int64_t i = 0; i < TV; ++i) {
          const int64_t j = j0 + i, s0 = r.t0[j] + q0;
          ysrc[i] = y_ptr[l] + out_base[r.n[j]] + at(s0) * step - ydir;  // y at step s0 - 1
          xsrc[i] = x_ptr[l] + leaf_base[r.n[j]][l] + at(s0) * x_step[l];
          gsrc[i] = g_ptr[l] ? g_ptr[l] + out_base[r.n[j]] + at(s0) * step : nullptr;
        }
        if (xdir == 0) {  // a leaf constant along the scan (a decay of shape [1, 1])
          std::array<T, TV> v;
          for (int64_t i = 0; i < TV; ++i) v[i] = *xsrc[i];
          for (int64_t k = 0; k < Q; ++k) std::copy(v.begin(), v.end(), r.right[l] + (row0 + k) * VW + j0);
        }
        for (int64_t k = 0; k < Q; k += TV) {
          BT::gather(ysrc, ydir, r.left[l] + (row0 + k) * VW + j0, VW);
          if (xdir != 0) BT::gather(xsrc, xdir, r.right[l] + (row0 + k) * VW + j0, VW);
          if (g_ptr[l]) BT::gather(gsrc, ydir, r.gb[l] + (row0 + k) * VW + j0, VW);
          for (int64_t i = 0; i < TV; ++i) {
            ysrc[i] += TV * ydir;
            xsrc[i] += TV * xdir;
            if (g_ptr[l]) gsrc[i] += TV * ydir;
          }
        }
        if (!g_ptr[l])
          for (int64_t k = 0; k < Q; ++k) std::fill_n(r.gb[l] + (row0 + k) * VW + j0, TV, T(0));
      }
    }
  };
  // Stages steps q0 .. q0 + qn - 1 (relative to each lane's t0) of the tile's lanes.
  const auto stage = [&](Tile& r, int64_t q0, int64_t qn) {
    int64_t blocked = 0;  // lanes [0, blocked) staged by blocks
    if (unit_steps && qn == Q) {
      for (; blocked < VW; blocked += TV) {
        bool has_step0 = false;
        for (int64_t i = 0; i < TV; ++i) has_step0 = has_step0 || r.t0[blocked + i] + q0 == 0;
        if (has_step0) break;
        stage_block(r, blocked, q0);
      }
    }
    for (int64_t j = blocked; j < VW;) {
      const int64_t m = row_run(r, j, VW);
      stage_run(r, j, m, q0, qn);
      j += m;
    }
    for (int64_t j = 0; j < VW; ++j)
      if (j == 0 || r.t0[j] != r.t0[j - 1] || r.n[j] != r.n[j - 1] + 1 || j + 1 == VW) prefetch_lane(r, j, q0);
  };
  // Walks a tile's steps from its last to its first, Q at a time, staging them unless `staged`
  // (resident buffers filled by step 1): lanes(row, qq) is the lane loop of step q0 + qq, whose
  // operands are at buffer row `row`; done(q0, qn) runs after each stage.
  const auto walk = [&](Tile& r, bool staged, const auto& lanes, const auto& done) {
    for (int64_t q0 = (r.len - 1) / Q * Q; q0 >= 0; q0 -= Q) {
      const int64_t qn = std::min(Q, r.len - q0), row0 = resident ? q0 : 0;
      if (!staged) stage(r, q0, qn);
      for (int64_t qq = qn - 1; qq >= 0; --qq) lanes((row0 + qq) * VW, qq);
      done(q0, qn);
    }
  };
  std::vector<T> agg(N * S * (L + L * L));  // pass 1: (c, M) at t0 of every segment
  std::vector<T> a_end(N * S * L * L);      // A_{t1} (zero for a column's last segment)
  std::vector<T> g_in(N * S * L);           // g_{t1}
  std::vector<Acc> sums(outs.any_summed() ? N * S * L : 0);
  struct State {  // a tile's lane state
    std::array<std::array<T, VW>, L> c, g;
    std::array<std::array<T, VW>, L * L> M, a_next;
  };
  // Pass 1: the segments' (c, M); also A_{t1} for pass 3.
  const auto pass1 = [&](Tile& r, State& st) {
    auto& c = st.c;
    auto& M = st.M;
    auto& a_next = st.a_next;
    for (int64_t j = 0; j < VW; ++j) {
      const int64_t t1 = r.t0[j] + r.len;
      std::array<T, L * L> A{};
      if (t1 < T_len) {
        std::array<T, L> left, right;
        for (size_t l = 0; l < L; ++l) {
          left[l] = y_ptr[l][out_base[r.n[j]] + at(t1 - 1) * step];
          right[l] = x_ptr[l][leaf_base[r.n[j]][l] + at(t1) * x_step[l]];
        }
        left_jacobian<Elem, L>(f, left, right, A);
      }
      for (size_t e = 0; e < L * L; ++e) {
        a_next[e][j] = A[e];
        if (j < r.w) a_end[r.v[j] * L * L + e] = A[e];
        M[e][j] = e / L == e % L ? T(1) : T(0);
      }
      for (size_t l = 0; l < L; ++l) c[l][j] = T(0);
    }
    walk(r, false, [&](int64_t row, int64_t) {
#pragma GCC ivdep
        for (int64_t j = 0; j < VW; ++j) {
          std::array<T, L> cn, left, right;
          std::array<T, L * L> Mn, A;
          for (size_t l = 0; l < L; ++l) {
            T acc = r.gb[l][row + j];
            for (size_t k = 0; k < L; ++k) acc += a_next[k * L + l][j] * c[k][j];
            cn[l] = acc;
            for (size_t m = 0; m < L; ++m) {
              T am = T(0);
              for (size_t k = 0; k < L; ++k) am += a_next[k * L + l][j] * M[k * L + m][j];
              Mn[l * L + m] = am;
            }
            left[l] = r.left[l][row + j];
            right[l] = r.right[l][row + j];
          }
          left_jacobian<Elem, L>(f, left, right, A);
          for (size_t l = 0; l < L; ++l) c[l][j] = cn[l];
          for (size_t e = 0; e < L * L; ++e) {
            M[e][j] = Mn[e];
            a_next[e][j] = A[e];
          }
        }
    }, [](int64_t, int64_t) {});
    for (int64_t j = 0; j < r.w; ++j) {
      T* out = agg.data() + r.v[j] * (L + L * L);
      for (size_t l = 0; l < L; ++l) out[l] = c[l][j];
      for (size_t e = 0; e < L * L; ++e) out[L + e] = M[e][j];
    }
  };
  // Pass 2 for one tile's lanes: g_{t1} of segment k is g_{t0} of segment k + 1 = c + M g_{t1}
  // of that one (zero past a column's last segment). Lane u = k * N + n depends on lane u + N:
  // later in the same tile (resolved first, lanes in descending order) or in a tile done before.
  const auto pass2 = [&](const Tile& r) {
    for (int64_t j = r.w - 1; j >= 0; --j) {
      const int64_t n = r.n[j], k = r.v[j] - n * S;
      T* g = g_in.data() + (n * S + k) * L;
      if (k == S - 1) {
        std::fill_n(g, L, T(0));
        continue;
      }
      const T* next = agg.data() + (n * S + k + 1) * (L + L * L);
      const T* g_next = g_in.data() + (n * S + k + 1) * L;
      for (size_t l = 0; l < L; ++l) {
        T acc = next[l];
        for (size_t m = 0; m < L; ++m) acc += next[L + l * L + m] * g_next[m];
        g[l] = acc;
      }
    }
  };
  // Pass 3: the sweep from the true g_{t1}.
  const auto pass3 = [&](Tile& r, State& st, int64_t fetch_next) {
    auto& g = st.g;
    auto& a_next = st.a_next;
    for (int64_t j = 0; j < VW; ++j) {
      for (size_t l = 0; l < L; ++l) g[l][j] = g_in[r.v[j] * L + l];
      for (size_t e = 0; e < L * L; ++e) a_next[e][j] = a_end[r.v[j] * L * L + e];
    }
    walk(r, resident, [&](int64_t row, int64_t qq) {
#pragma GCC ivdep
        for (int64_t j = 0; j < VW; ++j) {
          std::array<T, L> gn, left, right;
          std::array<T, L * L> A, B;
          for (size_t l = 0; l < L; ++l) {  // g_s = ḡ_s + A_{s+1}ᵀ g_{s+1}
            T acc = r.gb[l][row + j];
            for (size_t k = 0; k < L; ++k) acc += a_next[k * L + l][j] * g[k][j];
            gn[l] = acc;
            left[l] = r.left[l][row + j];
            right[l] = r.right[l][row + j];
          }
          jacobians<Elem, L>(f, left, right, A, B);
          for (size_t m = 0; m < L; ++m) {  // ∂x_s = B_sᵀ g_s
            T acc = T(0);
            for (size_t k = 0; k < L; ++k) acc += B[k * L + m] * gn[k];
            r.d[m][qq][j] = acc;
          }
          for (size_t l = 0; l < L; ++l) g[l][j] = gn[l];
          for (size_t e = 0; e < L * L; ++e) a_next[e][j] = A[e];
        }
    }, [&](int64_t q0, int64_t qn) {
      if (fetch_next >= 0) fetch_tile(fetch_next, q0 / Q, (r.len + Q - 1) / Q);
      if (q0 == 0)  // ∂x_0 = g_0 in the columns' first segments
        for (int64_t j = 0; j < VW; ++j)
          if (r.t0[j] == 0)
            for (size_t l = 0; l < L; ++l) r.d[l][0][j] = g[l][j];
      // Blocks of whole lanes written back by register transposes, as they were staged.
      int64_t blocked = 0;
      if constexpr (TV > 0) {
        if (unit_steps && qn == Q) {
          for (; blocked + TV <= r.w; blocked += TV) {
            for (size_t l = 0; l < L; ++l) {
              if (!dx_ptr[l]) continue;
              std::array<T*, TV> dst;
              for (int64_t i = 0; i < TV; ++i) {
                const int64_t j = blocked + i;
                dst[i] = dx_ptr[l] + out_base[r.n[j]] + at(r.t0[j] + q0) * step;
              }
              for (int64_t k = 0; k < Q; k += TV) {
                BT::scatter(&r.d[l][k][blocked], VW, dst, dir * step);
                for (int64_t i = 0; i < TV; ++i) dst[i] += TV * dir * step;
              }
            }
          }
        }
      }
      for (int64_t j = blocked; j < r.w;) {  // runs of a row's neighbouring columns, or lanes
        const int64_t m = row_run(r, j, r.w), ob = out_base[r.n[j]], s0 = r.t0[j] + q0, ddir = dir * step;
        for (size_t l = 0; l < L; ++l) {
          if (!dx_ptr[l]) continue;
          const T* src = &r.d[l][0][j];  // local pointers, as in stage_run
          T* dst = dx_ptr[l] + ob + at(s0) * step;
          for (int64_t qq = 0; qq < qn; ++qq) copy_short(src + qq * VW, dst + qq * ddir, m);
        }
        j += m;
      }
      for (int64_t j = 0; j < r.w; ++j)
        for (size_t l = 0; l < L; ++l) {
          if (outs.mode[l] != Outs::Mode::summed) continue;
          Acc acc = Acc(0);
          for (int64_t qq = 0; qq < qn; ++qq) acc += Acc(r.d[l][qq][j]);
          sums[r.v[j] * L + l] += acc;
        }
    });
  };
  // One chain over the tiles, in the adjoint's order (the columns' last segments first, then the
  // full segments from the end): a tile runs pass 1, waits for its predecessor in the chain to
  // publish, resolves its lanes' g_{t1} (O(lanes)), publishes, and runs pass 3 while its data is
  // still in L2 (pass 3 over all tiles after pass 1 over all re-read every stream from memory).
  // Tiles are claimed in chain order, so the one waited for is always running or done.
  const int64_t last_tiles = tiles - full_tiles;
  const auto tile_at = [&](int64_t p) { return p < last_tiles ? full_tiles + p : full_tiles - 1 - (p - last_tiles); };
  std::vector<std::atomic<uint8_t>> done(static_cast<size_t>(tiles));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  const int workers = static_cast<int>(std::min<int64_t>(ascan::num_threads(), tiles));
  // A worker claims its next tile when it starts step 3 of the current one (whose data is then
  // resident), to fetch the next one's streams meanwhile. Tiles still start in chain order, and a
  // claimed tile's predecessor is published or owned by a worker that does not wait before it.
  ascan::detail::run_workers(workers, [&](int) {
    const auto tile_buf = std::make_unique<Tile>(buffer_steps);
    const std::unique_ptr<State> state(new State);
    Tile& r = *tile_buf;
    const auto claim = [&] { return next.fetch_add(1, std::memory_order_relaxed); };
    int64_t p = claim();
    bool fetched = false;  // p's streams were fetched during the previous tile's step 3
    while (p < tiles && !failed.load(std::memory_order_relaxed)) {
      try {
        set_tile(tile_at(p), r);
        if (fetch_tiles && !fetched) fetch_tile(tile_at(p), 0, 1);
        if (S > 1) pass1(r, *state);  // one segment per column: g_{t1} = 0, A_{t1} = 0 (a_end)
        if (p > 0 && !ascan::detail::wait_published(done[p - 1], failed)) return;
        pass2(r);
        done[p].store(1, std::memory_order_release);
        const int64_t p_next = claim();
        fetched = fetch_tiles && resident && p_next < tiles;
        pass3(r, *state, fetched ? tile_at(p_next) : -1);
        p = p_next;
      } catch (...) {
        failed.store(true);
        throw;
      }
    }
  });
  // Summed leaves: the segments of a column in order, into the column's slot.
  if (outs.any_summed())
    for (int64_t n = 0; n < N; ++n)
      for (size_t l = 0; l < L; ++l) {
        if (outs.mode[l] != Outs::Mode::summed) continue;
        Acc total = Acc(0);
        for (int64_t k = 0; k < S; ++k) total += sums[(n * S + k) * L + l];
        outs.full[l].data()[outs.summed_offset(out_base[n])] = T(total);
      }
  return outs.finish(xs);
}

// The linear recurrence's adjoint is itself a linear recurrence. The combine (a1, b1), (a2, b2)
// -> (a1 a2, a2 b1 + b2) has closed-form Jacobians: A_t = a_t I, and B_tᵀ maps (g^a, g^b) to
// (g^a y^a_{t-1} + g^b y^b_{t-1}, g^b). Without an upstream gradient on the products y^a (the
// usual case: only y^b is used), g^a = 0 and
//     g_t = ḡ_t + a_{t+1} g_{t+1},   ∂b_t = g_t,   ∂a_t = g_t y^b_{t-1} (t >= 1),   ∂a_0 = 0.
// A cumulative product y_t = y_{t-1} x_t has the same adjoint with a = x and y^b = y, except at
// the first step (y_0 = x_0): ∂x_t = g_t y_{t-1} (t >= 1), ∂x_0 = g_0, and g is not returned
// (no division by x: zeros in x are exact).
// So the backward is the forward scan kernel run in the other direction over the pairs
// (a_{t+1}, ḡ_t), t < T - 1, and one elementwise pass. The scan's h_t starts from ḡ_{T-2}
// instead of ḡ_{T-2} + a_{T-1} ḡ_{T-1} (its inputs are the caller's tensors): the missing term
// reaches step t multiplied by a_{t+1} ... a_{T-1}, which is the scan's other output P_t, so the
// elementwise pass takes g_t = h_t + P_t ḡ_{T-1} (without the term where ḡ_{T-1} is zero, so
// that a product that overflowed does not turn a zero into a NaN). The pass runs on each block of
// the scan while it is in cache (FirstOrderEpilogue), so the backward reads a, ḡ and y_{t-1} and
// writes ∂a and ∂b: five streams for the linear recurrence, four for the product (P and h are
// never stored). Fusing it took the float32 backward through the tape, medians of 11, two
// processes each, from 5.6-5.8 to 4.0-5.6 ms on [2^22] (linear recurrence), 5.9-7.1 -> 4.4-5.1
// on [599186, 7], and 5.8-6.4 -> 3.7-4.2 ms on [2^22] for the product, 6.1-7.2 -> 4.1-4.2 on
// [2^21, 2]. The column and segment sweeps evaluate the Jacobians on dual numbers per element
// instead.
// The linear recurrence's adjoint as a scan against the column sweep, measured before
// first_order_vjp_lines took rows of kMinRunForLinrecLines lanes or more from both (the scan
// then ran below 2048 lanes, below 1024 with a decay constant along the scan). Intel Xeon
// VM, float32, two threads, backward through the tape, three processes' medians of 21 each
// (sweep -> by scan), 2^22 elements as [2^22 / R, R]: R = 16: 6.3-8.7 -> 5.0-6.3 ms, 64: 4.8-7.6
// -> 4.0-4.5, 256: 4.8-6.5 -> 4.2-4.9, 1024: 3.1-4.3 -> 3.5-4.2. Once the scan's blocks held at
// least kMinEpilogueBlockRows rows and its lanes went in groups of up to 1024, on an AMD EPYC VM
// (backward alone, two alternating processes' medians of 11, sweep -> by scan): R = 64:
// 15.6/17.3 -> 7.5/10.0 ms, 256: 11.5/13.1 -> 6.9/7.1, 512: 9.2/8.9 -> 7.6/6.5, 1024: 8.5/6.9
// -> 5.8/6.1, 2048: 7.6/8.1 -> 7.1/7.5, 4096: equal.
// The same with a decay constant along the scan (its gradient summed per lane by the scan's
// epilogue). Same runs as above (sweep -> by scan): R = 16: 8.5 -> 7.6-8.0 ms, 64: 14.4/16.5 ->
// 6.2/5.8, 256: 7.6/10.0 -> 5.8/6.2, 512: 8.1/7.3 -> 5.6/4.9, 1024: 5.3/5.8 -> 5.0/5.7, 2048:
// 7.1/8.0 -> 7.0/6.8; on the Intel VM, before those two changes, the sweep won from R = 256 on.
// The cumulative product takes its adjoint as a scan in few columns of rows narrower than this,
// and in rows of kMinRunForWideItems lanes to fewer than kMinRunForProductLines
// (pointwise_scan_vjp).
inline constexpr int64_t kMaxRunForProductByScan = 8;

// The logaddexp combine's Jacobians at (left, right) = (y_{t-1}, x_t), as its evaluation on dual
// numbers gives them, with the exponential of detail/log1p_exp.hpp: with d = min - max <= 0 and
// e = exp(d), ∂/∂max = 1 - e / (1 + e) and ∂/∂min = e / (1 + e) (on a tie the left operand is the
// min); where d is NaN (equal infinities, a NaN) the combine returns left + right, whose
// Jacobians are 1 and 1.
template <class T>
ASCAN_ALWAYS_INLINE void logaddexp_partials(T left, T right, T& A, T& B) {
  const bool left_larger = left > right;
  const T d = left_larger ? right - left : left - right;
  const T e = ascan::detail::exp_nonpositive(d);
  const T s = e / (T(1) + e);
  const bool nan = d != d;
  A = nan ? T(1) : left_larger ? T(1) - s : s;
  B = nan ? T(1) : left_larger ? s : T(1) - s;
}

// The elementwise pass of first_order_vjp_by_scan as an epilogue of its scan (see
// PointwiseRunner): each block's rows (P_t, h_t), still in cache, become
// g_t = h_t + P_t ḡ_{T-1}, ∂b_t = g_t over h_t and ∂a_t = g_t y_{t-1} over P_t, and are stored
// only where a gradient is returned in the output's shape. Rows that are local scans after a
// carry (P_c, h_c) are final as (P_t P_c, h_t + P_t h_c), so g_t = h_t + P_t G with
// G = h_c + P_c ḡ_{T-1} per lane: the carry costs one multiply-add per lane, not a pass over the
// rows. Gradients summed over the steps (a leaf broadcast along the scan) are summed per work
// item and lane into `sums`.
template <class T, bool kProduct>
struct FirstOrderEpilogue {
  static constexpr bool active = true;
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  static constexpr int64_t kPattern = 256;  // elements of ḡ_{T-1} repeated for packed narrow rows

  const T* gbar;      // ḡ and y^b (the product's y) in the output's layout, whole tensors
  const T* y;
  int64_t shift;      // the adjoint scan's outputs start `shift` rows into the whole tensors
  int64_t ts;         // the output's row stride
  int64_t adj_len;    // steps of the adjoint scan (T - 1)
  bool adj_reverse;   // its direction
  int64_t last, first, dir;     // the forward scan's last and first step indices, its direction
  // logaddexp's x (whole tensor, the output's layout), or null: with it the scan's decay is
  // A_{t+1} and ∂x_t = B_t g_t (logaddexp_partials at (y_{t-1}, x_t)), both evaluated per block
  // by fill_inputs, leaf 0 of the scan being a placeholder.
  const T* lse_x = nullptr;
  std::array<bool, 2> keep{};   // ∂a (over P), ∂b (over h) stored
  std::array<bool, 2> sum{};    // summed into `sums`
  bool want_a = false, want_b = false;
  Acc* sums = nullptr;          // per item: 2 x `lanes` partial sums (∂a, then ∂b)
  int64_t* column_offset = nullptr;  // per item: the output offset of its lane 0 at step 0
  int64_t* width = nullptr;          // per item: its lanes
  int64_t lanes = 0;

  bool keeps(size_t leaf) const { return keep[leaf]; }
  bool has_prologue() const { return lse_x != nullptr; }

  // logaddexp: the Jacobians Q_k = (A, B) at rows k of the block (the pair at (y_{t-1}, x_t) of
  // the row's step t) go to a (A_{t+1} of the adjoint's row t: Q_{k+dir} into row k) and aux
  // (B_t: Q_k into row k). Rows k = -1 .. n (as far as they exist) are evaluated once each; the
  // ones that land outside [0, n) go to the slack. The forward's first step has no Q.
  void fill_inputs(int64_t, T* a, T* aux, int64_t offset, int64_t n, int64_t w, int64_t lo) const {
    const int64_t t_lo = (adj_reverse ? adj_len - 1 - lo : lo) + shift;
    const int64_t o = offset + shift * ts;
    int64_t k0 = dir > 0 ? 0 : -1, k1 = dir > 0 ? n + 1 : n;
    if (t_lo + k0 == first) ++k0;
    if (t_lo + k1 - 1 == first) --k1;
    const T* __restrict xq = lse_x + o;
    const T* __restrict yq = y + o - dir * ts;
    T* __restrict ak = a - dir * ts;
    if (ts == w) {  // packed rows: one flat loop
      for (int64_t m = k0 * w; m < k1 * w; ++m) logaddexp_partials(yq[m], xq[m], ak[m], aux[m]);
      return;
    }
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t j = k * ts; j < k * ts + w; ++j) logaddexp_partials(yq[j], xq[j], ak[j], aux[j]);
  }

  void operator()(int64_t item, std::tuple<T*, T*> rows, int64_t offset, int64_t n, int64_t w, int64_t lo,
                  std::tuple<T*, T*> carry, const T* aux) const {
    T* const P = std::get<0>(rows);
    T* const H = std::get<1>(rows);
    // Rows ascend in address with the forward's step index; the lowest is step t_lo, at offset o.
    const int64_t t_lo = (adj_reverse ? adj_len - 1 - lo : lo) + shift;
    const int64_t o = offset + shift * ts;
    const T* g_last = gbar + o + (last - t_lo) * ts;  // ḡ_{T-1} of the lanes
    // G per lane: ḡ_{T-1}, or h_c + P_c ḡ_{T-1} after a carry (w <= kMaxLanes).
    T G[ascan::detail::kMaxLanes];
    const T* gl = g_last;
    if (const T* pc = std::get<0>(carry)) {
      const T* hc = std::get<1>(carry);
      for (int64_t j = 0; j < w; ++j) G[j] = adjoint(hc[j], pc[j], g_last[j]);
      gl = G;
    }
    // y_{t-1} of the lowest row (not read at step `first`), or logaddexp's B_t.
    const T* yp = aux ? aux : y + o - dir * ts;
    const bool summing = sum[0] || sum[1];
    // Sums per position of a period of whole rows (vector lanes), folded into the w lanes at the
    // end: 16 positions for one lane, 16 rows of narrow packed rows, one row otherwise.
    const bool packed = ts == w && w < 16;
    const int64_t period = w == 1 ? 16 : packed ? 16 * w : w;
    Acc part[2][std::max(kPattern, ascan::detail::kMaxLanes)];  // period <= kPattern or w
    if (summing) {
      std::fill_n(part[0], period, Acc(0));
      std::fill_n(part[1], period, Acc(0));
    }
    const auto add_sums = [&](const T* p, const T* h, int64_t m) {  // m elements, whole rows
      for (int l = 0; l < 2; ++l) {
        if (!sum[l]) continue;
        const T* v = l == 0 ? p : h;
        Acc* a = part[l];
        int64_t e = 0;
        for (; e + period <= m; e += period)
          for (int64_t q = 0; q < period; ++q) a[q] += Acc(v[e + q]);
        for (int64_t q = 0; e + q < m; ++q) a[q] += Acc(v[e + q]);
      }
    };
    int64_t i0 = 0, i1 = n;
    // The forward's first step: y_{-1} is the product's identity 1, y^b_{-1} is 0.
    const auto first_row = [&](int64_t i) {
      T* p = P + i * ts;
      T* h = H + i * ts;
      for (int64_t j = 0; j < w; ++j) {
        h[j] = adjoint(h[j], p[j], gl[j]);
        p[j] = kProduct ? h[j] : T(0);
      }
      if (summing) add_sums(p, h, w);
    };
    if (t_lo == first) first_row(i0++);
    else if (t_lo + n - 1 == first) first_row(--i1);
    if (packed) {
      // Packed narrow rows: flat loops over whole rows (a loop of w per row would be scalar),
      // with ḡ_{T-1} one value (one lane) or repeated to 16 rows, in pieces of kPattern / 16 rows.
      T pattern[kPattern];
      const int64_t piece = w == 1 ? kPattern : 16 * w;
      if (w > 1)
        for (int64_t q = 0; q < piece; ++q) pattern[q] = gl[q % w];
      const int64_t e1 = i1 * w;
      for (int64_t e = i0 * w; e < e1; e += piece) {
        const int64_t len = std::min(piece, e1 - e);
        if (w == 1) stretch<true>(P + e, H + e, gl, yp + e, len);
        else stretch<false>(P + e, H + e, pattern, yp + e, len);
        if (summing) add_sums(P + e, H + e, len);
      }
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        stretch<false>(P + i * ts, H + i * ts, gl, yp + i * ts, w);
        if (summing) add_sums(P + i * ts, H + i * ts, w);
      }
    }
    if (summing) {
      column_offset[item] = o - t_lo * ts;
      width[item] = w;
      for (int l = 0; l < 2; ++l) {
        if (!sum[l]) continue;
        Acc* dst = sums + (item * 2 + l) * lanes;
        for (int64_t q = 0, j = 0; q < period; ++q) {
          dst[j] += part[l][q];
          if (++j == w) j = 0;
        }
      }
    }
  }

  // g = h + P G, without the term where G is zero (so that a product that overflowed does not
  // turn a zero into a NaN).
  static T adjoint(T h, T p, T G) { return G != T(0) ? h + p * G : h; }

  // n elements: g stored over h, ∂a = g y_{t-1} over P. G is gl[m], or gl[0] for all (kOne).
  template <bool kOne>
  void stretch(T* __restrict p, T* __restrict h, const T* __restrict gl, const T* __restrict yp, int64_t n) const {
    const auto g = [&](int64_t m) { return adjoint(h[m], p[m], gl[kOne ? 0 : m]); };
    if (want_a && want_b) {
      for (int64_t m = 0; m < n; ++m) {
        const T v = g(m);
        h[m] = v;
        p[m] = v * yp[m];
      }
    } else if (want_a) {
      for (int64_t m = 0; m < n; ++m) p[m] = g(m) * yp[m];
    } else {
      for (int64_t m = 0; m < n; ++m) h[m] = g(m);
    }
  }
};

// L == 2: the linear recurrence (xs = {a, b}, the loss on ys[1]); L == 1: the cumulative product
// (xs = {x}), or with `logaddexp` (L == 1, x of the output's shape) the scan whose Jacobians are
// A_t = ∂y_t/∂y_{t-1} and B_t = ∂y_t/∂x_t of a logaddexp scan, evaluated per block by the
// epilogue's prologue (FirstOrderEpilogue::fill_inputs): g_t = ḡ_t + A_{t+1} g_{t+1},
// ∂x_t = B_t g_t (t >= 1), ∂x_0 = g_0.
template <class T, size_t L>
std::vector<Tensor<T>> first_order_vjp_by_scan(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                               const std::vector<Tensor<T>>& ys, const Tensor<T>& gbar,
                                               const std::array<bool, L>& need, bool reverse,
                                               bool logaddexp = false) {
  static_assert(L == 1 || L == 2);
  constexpr bool kProduct = L == 1;
  using Outs = GradOutputs<T, L>;
  using Acc = typename Outs::Acc;
  using Flat = std::tuple<Tensor<T>, Tensor<T>>;
  using Epilogue = FirstOrderEpilogue<T, kProduct>;
  const int64_t T_len = plan.length, ts = plan.out_t_stride;
  Outs outs(plan, xs, need);
  // The adjoint scan's leaf 0 (P, then ∂a) and leaf 1 (h, then ∂b) against the gradients: the
  // product's ∂x is leaf 0, its h is not returned.
  const auto grad = [](size_t leaf) { return L == 2 ? leaf : 0; };
  const auto mode = [&](size_t leaf) { return kProduct && leaf == 1 ? Outs::Mode::none : outs.mode[grad(leaf)]; };
  // ∂a over the scan's P, ∂b over its h: the gradients' own tensors where they are returned in
  // the output's shape (elsewhere the scan's scratch; a temporary when the scan stores in place).
  const auto buffer = [&](size_t leaf) {
    return mode(leaf) == Outs::Mode::direct ? outs.full[grad(leaf)] : Tensor<T>::empty(plan.out_shape);
  };
  Tensor<T> ga = buffer(0), gb = buffer(1);
  const int64_t last = reverse ? 0 : T_len - 1, first = reverse ? T_len - 1 : 0, dir = reverse ? -1 : 1;
  // The decay a_t (logaddexp: a placeholder of its layout, the rows come from fill_inputs) and
  // the factor of ∂a_t, y_{t-1}.
  const Tensor<T>& decay = logaddexp ? ys[0] : xs[0];
  const T* const y_prev = ys[L - 1].data();
  Epilogue epi{gbar.data(), y_prev, reverse ? 1 : 0, ts, T_len - 1, !reverse, last, first, dir};
  if (logaddexp) epi.lse_x = xs[0].data();
  for (size_t leaf = 0; leaf < 2; ++leaf) {
    epi.keep[leaf] = mode(leaf) == Outs::Mode::direct;
    epi.sum[leaf] = mode(leaf) == Outs::Mode::summed;
  }
  epi.want_a = mode(0) != Outs::Mode::none;
  epi.want_b = mode(1) != Outs::Mode::none;
  const bool summing = epi.sum[0] || epi.sum[1];
  std::vector<Acc> sums;
  std::vector<int64_t> column_offset, width;
  if (T_len > 1) {
    ascan::detail::PointwisePlan adj = plan;
    adj.length = T_len - 1;
    adj.out_shape[adj.axis] = T_len - 1;
    adj.trivial_columns = false;  // column offsets from the strides (trivial ones assume `length`)
    adj.leaves.resize(2);
    adj.leaves[1] = {ts, true, plan.out_column_strides};  // ḡ has the output's layout
    // Steps t < T - 1 of the scan: indices [0, T - 1) forward, [1, T) in reverse; a_{t+1} sits
    // one index further along the scan.
    const int64_t a_shift = reverse ? 0 : 1;
    const auto view = [&](const Tensor<T>& t, int64_t offset, const Shape& shape) {
      Tensor<T> v;
      ascan::detail::TensorAccess<T>::bind(
          v, ascan::detail::TensorAccess<T>::make_view_header(t, shape.data(), shape.size()),
          const_cast<T*>(t.data()) + offset, t.numel() - offset);
      return v;
    };
    const Flat in{view(decay, a_shift * plan.leaves[0].t_stride, decay.shape()), view(gbar, epi.shift * ts, adj.out_shape)};
    const Flat out{view(ga, epi.shift * ts, adj.out_shape), view(gb, epi.shift * ts, adj.out_shape)};
    const ascan::LinearRecurrence f{};
    ascan::detail::PointwiseRunner<Flat, ascan::LinearRecurrence, Epilogue> runner(f, in, out, adj, !reverse, epi);
    if (summing) {
      epi.lanes = runner.group_lanes();
      sums.assign(runner.num_items() * 2 * epi.lanes, Acc(0));
      column_offset.assign(runner.num_items(), 0);
      width.assign(runner.num_items(), 0);
      epi.sums = sums.data();
      epi.column_offset = column_offset.data();
      epi.width = width.data();
    }
    runner.run();
  }
  // The forward's last step, which the adjoint scan leaves out: g = ḡ_{T-1}.
  const T* g_bar = gbar.data();
  const auto last_step = [&](int64_t e, T& g, T& da) {  // e: an output offset at step `last`
    g = g_bar[e];
    if (T_len == 1) {
      da = kProduct ? g : T(0);
    } else if (logaddexp) {
      T A, B;
      logaddexp_partials(y_prev[e - dir * ts], epi.lse_x[e], A, B);
      da = B * g;
    } else {
      da = g * y_prev[e - dir * ts];
    }
  };
  const int64_t R = plan.run;
  ascan::detail::parallel_for(plan.num_columns, std::max<int64_t>(1, 4096 / R), [&](int64_t c0, int64_t c1) {
    std::array<int64_t, L> leaf_off{};
    for (int64_t c = c0; c < c1; ++c) {
      int64_t off = 0;
      plan.column_offsets(c, leaf_off.data(), off);
      for (int64_t j = 0; j < R; ++j) {
        const int64_t e = off + last * ts + j;
        T g, da;
        last_step(e, g, da);
        if (epi.keep[0]) ga.data()[e] = da;
        if (epi.keep[1]) gb.data()[e] = g;
      }
    }
  });
  if (summing) {
    // Summed leaves: each item's lanes in item order (a column's blocks in order), then the last
    // step, into the slots of the summed tensors.
    std::array<std::vector<Acc>, 2> total;
    for (size_t leaf = 0; leaf < 2; ++leaf)
      if (epi.sum[leaf]) total[leaf].assign(outs.full[grad(leaf)].numel(), Acc(0));
    for (size_t item = 0; item < width.size(); ++item)
      for (size_t leaf = 0; leaf < 2; ++leaf)
        if (epi.sum[leaf])
          for (int64_t j = 0; j < width[item]; ++j)
            total[leaf][outs.summed_offset(column_offset[item]) + j] += sums[(item * 2 + leaf) * epi.lanes + j];
    std::array<int64_t, L> leaf_off{};
    for (int64_t c = 0; c < plan.num_columns; ++c) {
      int64_t off = 0;
      plan.column_offsets(c, leaf_off.data(), off);
      for (int64_t j = 0; j < R; ++j) {
        T g, da;
        last_step(off + last * ts + j, g, da);
        if (epi.sum[0]) total[0][outs.summed_offset(off) + j] += Acc(da);
        if (epi.sum[1]) total[1][outs.summed_offset(off) + j] += Acc(g);
      }
    }
    for (size_t leaf = 0; leaf < 2; ++leaf)
      if (epi.sum[leaf]) std::transform(total[leaf].begin(), total[leaf].end(), outs.full[grad(leaf)].data(), [](Acc v) { return T(v); });
  }
  return outs.finish(xs);
}

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
