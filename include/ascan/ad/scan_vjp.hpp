// scan_vjp.hpp — the exact adjoint of a pointwise scan (DESIGN §4), on host tensors.
//
// With per-step Jacobians A_t = ∂f/∂left, B_t = ∂f/∂right at (y_{t-1}, x_t) (L×L per element,
// from one call of f on dual numbers with 2L tangents):
//     g_{T-1} = ḡ_{T-1},   g_t = ḡ_t + A_{t+1}ᵀ g_{t+1},   ∂x_t = B_tᵀ g_t (t ≥ 1),  ∂x_0 = g_0.
// The adjoint recurrence is solved by an associative scan in the opposite direction over pairs
// (M, c) with M_t = A_{t+1}ᵀ, c_t = ḡ_t and (M, c) ⊕ (M', c') = (M'·M, c' + M'·c). Exact for any
// upstream gradients, coupled leaves included. Indices are in scan order (reverse mirrors them).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

// A (∂out/∂left) and B (∂out/∂right), row-major [out leaf][in leaf], at one element.
template <class Elem, size_t L, class T, class F>
ASCAN_ALWAYS_INLINE void jacobians(const F& f, const std::array<T, L>& left, const std::array<T, L>& right,
               std::array<T, L * L>& A, std::array<T, L * L>& B) {
  using D = Dual<T, static_cast<int>(2 * L)>;
  std::array<D, L> l, r, o;
  for (size_t i = 0; i < L; ++i) {
    l[i] = D(left[i]);
    l[i].d[i] = T(1);
    r[i] = D(right[i]);
    r[i].d[L + i] = T(1);
  }
  size_t pl = 0, pr = 0, po = 0;
  const auto out = f(build_elem<Elem, D>(l.data(), pl), build_elem<Elem, D>(r.data(), pr));
  scatter_elem<D>(out, o.data(), po);
  for (size_t k = 0; k < L; ++k)
    for (size_t i = 0; i < L; ++i) {
      A[k * L + i] = o[k].d[i];
      B[k * L + i] = o[k].d[L + i];
    }
}

// (M, c) ⊕ (M', c') = (M'·M, c' + M'·c) on a flat tuple of L*L + L scalars (M row-major, then c),
// written as straight-line code on the tuple elements so the lane loops vectorise.
template <size_t L>
struct AdjointCombine {
  template <class Tup>
  ASCAN_ALWAYS_INLINE Tup operator()(const Tup& a, const Tup& b) const {
    return [&]<size_t... K>(std::index_sequence<K...>) { return Tup{entry<K>(a, b)...}; }(
        std::make_index_sequence<L * L + L>{});
  }

 private:
  template <size_t K, class Tup>
  ASCAN_ALWAYS_INLINE static auto entry(const Tup& a, const Tup& b) {
    if constexpr (K < L * L) {  // (M'·M)[i][j] = sum_k M'[i][k] M[k][j]
      constexpr size_t i = K / L, j = K % L;
      return [&]<size_t... k>(std::index_sequence<k...>) {
        return ((std::get<i * L + k>(b) * std::get<k * L + j>(a)) + ...);
      }(std::make_index_sequence<L>{});
    } else {  // (c' + M'·c)[i]
      constexpr size_t i = K - L * L;
      return [&]<size_t... k>(std::index_sequence<k...>) {
        return (std::get<L * L + i>(b) + ... + (std::get<i * L + k>(b) * std::get<L * L + k>(a)));
      }(std::make_index_sequence<L>{});
    }
  }
};

template <size_t N, class T>
auto as_tuple(const std::vector<Tensor<T>>& v) {
  return [&]<size_t... I>(std::index_sequence<I...>) { return std::make_tuple(v[I]...); }(std::make_index_sequence<N>{});
}

template <class T, class Tup>
std::vector<Tensor<T>> as_vector(const Tup& t) {
  return std::apply([](const auto&... x) { return std::vector<Tensor<T>>{x...}; }, t);
}

inline constexpr int64_t kMinColumnsForSweep = 256;

// Lanes per work item of the column sweep, at most: 512 (rows of 2 KiB float per stream walk
// backwards at streaming speed; 64-lane rows ran at half of it), fewer for large L so that the
// per-lane state (g, A_{s+1}, row buffers: about L² + 4L values per lane) stays in a 32 KiB
// stack frame. The state lives on the stack so the compiler sees that the tensors' rows do not
// alias it, and vectorises the lane loops.
template <size_t L, class T>
struct SweepLanes {
  static constexpr int64_t max = std::clamp<int64_t>(int64_t(32768 / (sizeof(T) * (L * L + 4 * L))) / 16 * 16, 16, 512);
};

// Lanes per work item: up to `max_lanes` of one run, fewer when that would leave threads idle.
// Only the split depends on the thread count; every lane's arithmetic does not.
inline int64_t sweep_lanes(int64_t run, int64_t columns, int64_t max_lanes) {
  int64_t chunks = (run + max_lanes - 1) / max_lanes;
  const int64_t threads = ascan::num_threads();
  if (columns * chunks < threads) chunks = std::min((run + 15) / 16, (threads + columns - 1) / columns);
  const int64_t lanes = (run + chunks - 1) / chunks;
  return std::min(run, (lanes + 15) / 16 * 16);
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
template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_vjp_columns(const F& f, const ascan::detail::PointwisePlan& plan,
                                             const std::vector<Tensor<T>>& xs, const std::vector<Tensor<T>>& ys,
                                             const std::vector<Tensor<T>>& gbar, const std::array<bool, L>& need,
                                             bool reverse) {
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  enum class Out { none, direct, summed };  // direct: into a tensor in the output layout
  const Shape& shape = plan.out_shape;
  const int64_t T_len = plan.length, run = plan.run, step = plan.out_t_stride;
  std::array<Out, L> mode{};
  std::vector<Tensor<T>> dx(L), full(L);  // full: output-layout gradient (dx itself or reduced later)
  Shape summed_shape = shape;
  summed_shape[plan.axis] = 1;
  for (size_t l = 0; l < L; ++l) {
    if (!need[l]) continue;
    if (xs[l].shape() != shape && plan.leaves[l].t_stride == 0) {
      mode[l] = Out::summed;
      full[l] = Tensor<T>::empty(summed_shape);
    } else {
      mode[l] = Out::direct;
      full[l] = Tensor<T>::empty(shape);
    }
  }
  using W = SweepLanes<L, T>;
  const int64_t lanes = sweep_lanes(run, plan.num_columns, W::max);
  const int64_t chunks = (run + lanes - 1) / lanes;
  ascan::detail::parallel_for(plan.num_columns * chunks, 1, [&](int64_t ib, int64_t ie) {
    // Per-lane state and row buffers: g, A_{s+1}, broadcast x rows, scratch ∂x rows, zeros (for
    // absent ḡ), the sums of summed leaves. Lane j of slot k is [k * lanes + j].
    std::array<T, L * W::max> g;
    std::array<T, L * L * W::max> a_next;
    std::array<T, L * W::max> xb, scratch;
    std::array<T, W::max> zeros;
    std::array<Acc, L * W::max> sums;
    zeros.fill(T(0));
    std::array<int64_t, L> leaf_off{};
    for (int64_t item = ib; item < ie; ++item) {
      const int64_t c = item / chunks, i0 = (item % chunks) * lanes, w = std::min(lanes, run - i0);
      int64_t out_off = 0;
      plan.column_offsets(c, leaf_off.data(), out_off);
      sums.fill(Acc(0));
      const auto at = [&](int64_t s) { return reverse ? T_len - 1 - s : s; };  // scan step -> index
      std::array<const T*, L> gb, yp, xr;
      std::array<T*, L> dr;
      for (int64_t s = T_len - 1; s >= 0; --s) {
        const int64_t t = at(s), row = out_off + t * step + i0;
        for (size_t l = 0; l < L; ++l) {
          gb[l] = gbar[l].storage_id() ? gbar[l].data() + row : zeros.data();
          dr[l] = mode[l] == Out::direct ? full[l].data() + row : scratch.data() + l * lanes;
        }
        // g_s = ḡ_s + A_{s+1}ᵀ g_{s+1}, every component from the old g (g_{T-1} = ḡ_{T-1})
        if (s == T_len - 1) {
          for (size_t l = 0; l < L; ++l) std::copy_n(gb[l], w, g.data() + l * lanes);
        } else {
#pragma GCC ivdep
          for (int64_t j = 0; j < w; ++j) {
            std::array<T, L> old;
            for (size_t l = 0; l < L; ++l) old[l] = g[l * lanes + j];
            for (size_t l = 0; l < L; ++l) {
              T acc = gb[l][j];
              for (size_t k = 0; k < L; ++k) acc += a_next[(k * L + l) * lanes + j] * old[k];
              g[l * lanes + j] = acc;
            }
          }
        }
        if (s == 0) {  // ∂x_0 = g_0
          for (size_t l = 0; l < L; ++l) std::copy_n(g.data() + l * lanes, w, dr[l]);
        } else {
          const int64_t prev = out_off + at(s - 1) * step + i0;
          for (size_t l = 0; l < L; ++l) {
            yp[l] = ys[l].data() + prev;
            const ascan::detail::LeafLayout& lay = plan.leaves[l];
            const T* p = xs[l].data() + leaf_off[l] + t * lay.t_stride;
            if (lay.lane_contiguous) {
              xr[l] = p + i0;
            } else {  // constant over the run: one value for every lane
              std::fill_n(xb.data() + l * lanes, w, *p);
              xr[l] = xb.data() + l * lanes;
            }
          }
          std::array<T, L> left, right;
          std::array<T, L * L> A, B;
          // Rows of different tensors (and the stack buffers) never overlap.
#pragma GCC ivdep
          for (int64_t j = 0; j < w; ++j) {
            for (size_t l = 0; l < L; ++l) {
              left[l] = yp[l][j];
              right[l] = xr[l][j];
            }
            jacobians<Elem, L>(f, left, right, A, B);
            for (size_t m = 0; m < L; ++m) {  // ∂x_s = B_sᵀ g_s
              T acc = T(0);
              for (size_t k = 0; k < L; ++k) acc += B[k * L + m] * g[k * lanes + j];
              dr[m][j] = acc;
            }
            for (size_t e = 0; e < L * L; ++e) a_next[e * lanes + j] = A[e];
          }
        }
        for (size_t l = 0; l < L; ++l)
          if (mode[l] == Out::summed)
            for (int64_t j = 0; j < w; ++j) sums[l * lanes + j] += Acc(dr[l][j]);
      }
      // The summed leaves' column: out_off with the axis index dropped (it is 0 at the column base).
      const int64_t sum_off = out_off / (T_len * step) * step + out_off % step + i0;
      for (size_t l = 0; l < L; ++l)
        if (mode[l] == Out::summed)
          for (int64_t j = 0; j < w; ++j) full[l].data()[sum_off + j] = T(sums[l * lanes + j]);
    }
  });
  for (size_t l = 0; l < L; ++l)
    if (need[l]) dx[l] = full[l].shape() == xs[l].shape() ? full[l] : reduce_to(full[l], xs[l].shape());
  return dx;
}

// The adjoint by the flipped associative scan: O(log T) depth along the scan axis, for few long
// columns (one long sequence). Materialises M_t = A_{t+1}ᵀ for the adjoint scan.
template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_vjp_flipped(const F& f, const std::vector<Tensor<T>>& xs,
                                             const std::vector<Tensor<T>>& ys,
                                             const std::vector<Tensor<T>>& gbar, int64_t dim, bool reverse) {
  const Shape shape = ys[0].shape();
  const ScanView v = scan_view(shape, dim);
  const int64_t T_len = v.length;
  const auto index = [&](int64_t o, int64_t s, int64_t i) {  // flat index of scan step s
    return (o * T_len + (reverse ? T_len - 1 - s : s)) * v.inner + i;
  };
  // M_s = A_{s+1}ᵀ at every step but the last (whose M never multiplies anything).
  std::vector<Tensor<T>> adj_leaves;
  std::vector<T*> m_ptr;
  for (size_t k = 0; k < L * L; ++k) {  // every entry is written below: no zero-fill pass
    adj_leaves.push_back(Tensor<T>::empty(shape));
    m_ptr.push_back(adj_leaves.back().data());
  }
  for (size_t l = 0; l < L; ++l) adj_leaves.push_back(gbar[l]);
  // Rows (o, s) are independent in both passes; lanes i are contiguous, so rows stream.
  const int64_t num_rows = v.outer * T_len;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(v.inner, 1));
  ascan::detail::parallel_for(num_rows, grain, [&](int64_t rb, int64_t re) {
    std::array<T, L> left, right;
    std::array<T, L * L> A, B;
    for (int64_t row = rb; row < re; ++row) {
      const int64_t o = row / T_len, s = row % T_len;
      if (s + 1 >= T_len) {  // the last step's M never multiplies anything: zero it
        const int64_t at = index(o, s, 0);
        for (size_t e = 0; e < L * L; ++e) std::fill_n(m_ptr[e] + at, v.inner, T(0));
        continue;
      }
      const int64_t at = index(o, s, 0), next = index(o, s + 1, 0);
      for (int64_t i = 0; i < v.inner; ++i) {
        for (size_t l = 0; l < L; ++l) {
          left[l] = ys[l].data()[at + i];
          right[l] = xs[l].data()[next + i];
        }
        jacobians<Elem, L>(f, left, right, A, B);
        for (size_t k = 0; k < L; ++k)
          for (size_t j = 0; j < L; ++j) m_ptr[k * L + j][at + i] = A[j * L + k];  // transpose
      }
    }
  });
  const std::vector<Tensor<T>> adj = as_vector<T>(ascan::associative_scan(
      AdjointCombine<L>{}, as_tuple<L * L + L>(adj_leaves), dim, {.reverse = !reverse}));
  const std::vector<Tensor<T>> g(adj.begin() + L * L, adj.end());
  std::vector<Tensor<T>> dx(L);
  for (size_t l = 0; l < L; ++l) dx[l] = Tensor<T>::empty(shape);
  ascan::detail::parallel_for(num_rows, grain, [&](int64_t rb, int64_t re) {
    std::array<T, L> left, right;
    std::array<T, L * L> A, B;
    for (int64_t row = rb; row < re; ++row) {
      const int64_t o = row / T_len, s = row % T_len;
      const int64_t at = index(o, s, 0);
      if (s == 0) {  // ∂x_0 = g_0
        for (size_t l = 0; l < L; ++l)
          std::copy(g[l].data() + at, g[l].data() + at + v.inner, dx[l].data() + at);
        continue;
      }
      const int64_t prev = index(o, s - 1, 0);
      for (int64_t i = 0; i < v.inner; ++i) {
        for (size_t l = 0; l < L; ++l) {
          left[l] = ys[l].data()[prev + i];
          right[l] = xs[l].data()[at + i];
        }
        jacobians<Elem, L>(f, left, right, A, B);
        for (size_t j = 0; j < L; ++j) {
          T acc = T(0);
          for (size_t k = 0; k < L; ++k) acc += B[k * L + j] * g[k].data()[at + i];
          dx[j].data()[at + i] = acc;
        }
      }
    }
  });
  return dx;
}

// Gradients of a pointwise scan with respect to its inputs, in each leaf's own shape.
//   plan: the scan's plan (output shape, axis, broadcast layout of xs); xs: the leaves as given;
//   ys: outputs; gbar: upstream gradients (a default-constructed tensor for zero); need: which
//   gradients to return (the others are default tensors).
// Many independent columns take the one-pass column sweep, few long ones the flipped scan; the
// choice depends on the shape only, so gradients do not depend on the thread count.
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
  if (plan.num_columns * plan.run >= kMinColumnsForSweep)
    return pointwise_vjp_columns<Elem, L>(f, plan, xs, ys, gbar, need, reverse);
  std::vector<Tensor<T>> xs_full(L), gbar_full(L);
  for (size_t l = 0; l < L; ++l) {
    xs_full[l] = xs[l].shape() == shape ? xs[l] : ascan::broadcast_to(xs[l], shape);
    gbar_full[l] = gbar[l].storage_id() ? gbar[l] : Tensor<T>::zeros(shape);
  }
  const auto full = pointwise_vjp_flipped<Elem, L>(f, xs_full, ys, gbar_full, plan.axis, reverse);
  for (size_t l = 0; l < L; ++l)
    if (need[l]) dx[l] = xs[l].shape() == shape ? full[l] : reduce_to(full[l], xs[l].shape());
  return dx;
}

}  // namespace ascan::ad::detail
