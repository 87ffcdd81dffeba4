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
#include <utility>
#include <vector>

#include "ascan/detail/pointwise_scan.hpp"
#include "ascan/detail/tree.hpp"
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

// The same adjoint swept backwards along the scan axis, one column (an [outer, inner] position)
// per lane, many lanes at a time: one evaluation of f on duals per element gives B_t for ∂x_t
// and A_t for the next step's g. One pass over xs, ys and ḡ, no per-step Jacobian arrays; used
// when there are enough independent columns to keep the threads and vector lanes busy.
template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_vjp_columns(const F& f, const std::vector<Tensor<T>>& xs,
                                             const std::vector<Tensor<T>>& ys,
                                             const std::vector<Tensor<T>>& gbar, int64_t dim, bool reverse) {
  constexpr int64_t W = 64;  // lanes per work item
  const Shape shape = ys[0].shape();
  const ScanView v = scan_view(shape, dim);
  const int64_t T_len = v.length;
  std::vector<Tensor<T>> dx(L);
  for (size_t l = 0; l < L; ++l) dx[l] = Tensor<T>::empty(shape);
  const int64_t chunks = (v.inner + W - 1) / W;
  ascan::detail::parallel_for(v.outer * chunks, 1, [&](int64_t ib, int64_t ie) {
    std::array<std::array<T, W>, L> g;
    std::array<std::array<T, W>, L * L> a_next;  // A_{s+1} per lane
    std::array<T, L> left, right;
    std::array<T, L * L> A, B;
    for (int64_t item = ib; item < ie; ++item) {
      const int64_t o = item / chunks, i0 = (item % chunks) * W, w = std::min(W, v.inner - i0);
      const auto row = [&](int64_t s) { return (o * T_len + (reverse ? T_len - 1 - s : s)) * v.inner + i0; };
      for (int64_t s = T_len - 1; s >= 0; --s) {
        const int64_t at = row(s);
        if (s == T_len - 1) {
          for (size_t l = 0; l < L; ++l)
            for (int64_t j = 0; j < w; ++j) g[l][j] = gbar[l].data()[at + j];
        } else {  // g_s = ḡ_s + A_{s+1}ᵀ g_{s+1}, every component from the old g
          for (int64_t j = 0; j < w; ++j) {
            std::array<T, L> old;
            for (size_t l = 0; l < L; ++l) old[l] = g[l][j];
            for (size_t l = 0; l < L; ++l) {
              T acc = gbar[l].data()[at + j];
              for (size_t k = 0; k < L; ++k) acc += a_next[k * L + l][j] * old[k];
              g[l][j] = acc;
            }
          }
        }
        if (s == 0) {
          for (size_t l = 0; l < L; ++l) std::copy(g[l].begin(), g[l].begin() + w, dx[l].data() + at);
          continue;
        }
        const int64_t prev = row(s - 1);
        for (int64_t j = 0; j < w; ++j) {
          for (size_t l = 0; l < L; ++l) {
            left[l] = ys[l].data()[prev + j];
            right[l] = xs[l].data()[at + j];
          }
          jacobians<Elem, L>(f, left, right, A, B);
          for (size_t m = 0; m < L; ++m) {  // ∂x_s = B_sᵀ g_s
            T acc = T(0);
            for (size_t k = 0; k < L; ++k) acc += B[k * L + m] * g[k][j];
            dx[m].data()[at + j] = acc;
          }
          for (size_t e = 0; e < L * L; ++e) a_next[e][j] = A[e];
        }
      }
    }
  });
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

// Gradients with respect to the (broadcast, full-shape) inputs of a pointwise scan.
//   xs, ys, gbar: L tensors of the output shape each; dim: resolved scan axis of that shape.
// Many independent columns take the one-pass column sweep, few long ones the flipped scan; the
// choice depends on the shape only, so gradients do not depend on the thread count.
template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_scan_vjp(const F& f, const std::vector<Tensor<T>>& xs,
                                          const std::vector<Tensor<T>>& ys,
                                          const std::vector<Tensor<T>>& gbar, int64_t dim, bool reverse) {
  const ScanView v = scan_view(ys[0].shape(), dim);
  if (v.outer * v.inner >= kMinColumnsForSweep)
    return pointwise_vjp_columns<Elem, L>(f, xs, ys, gbar, dim, reverse);
  return pointwise_vjp_flipped<Elem, L>(f, xs, ys, gbar, dim, reverse);
}

}  // namespace ascan::ad::detail
