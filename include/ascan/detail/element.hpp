// element.hpp — the element structure a pointwise combine sees (a scalar, or a nested std::tuple
// of scalars), converted to and from flat arrays of leaves, and the combine's Jacobians on dual
// numbers. One copy, used by the host scan (scan_lanes.hpp), the host gradients (ad/vjp/) and the
// CUDA gradients (cuda/scan_vjp.cuh); every function compiles for the host and the device.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ascan/config.hpp"
#include "ascan/dual.hpp"

namespace ascan::detail {

template <class E> struct is_elem_tuple : std::false_type {};
template <class... Es> struct is_elem_tuple<std::tuple<Es...>> : std::true_type {};

template <class R, class = void> struct is_result_tuple : std::false_type {};
template <class R>
struct is_result_tuple<R, std::void_t<decltype(std::tuple_size<R>::value)>> : std::true_type {};

// The flat element of L scalars of type T: T itself for one, std::tuple<T, ..., T> for several.
template <class T, class Seq> struct flat_elem_of;
template <class T, size_t... I> struct flat_elem_of<T, std::index_sequence<I...>> {
  using type = std::tuple<std::conditional_t<I == I, T, void>...>;
};
template <class T> struct flat_elem_of<T, std::index_sequence<0>> { using type = T; };
template <class T, size_t L> using flat_elem_t = typename flat_elem_of<T, std::make_index_sequence<L>>::type;

// Converts a combine result to the element structure E (static_cast at the leaves).
template <class E, class R>
ASCAN_HD ASCAN_ALWAYS_INLINE E to_elem(const R& r) {
  if constexpr (is_elem_tuple<E>::value) {
    return [&]<size_t... K>(std::index_sequence<K...>) {
      using std::get;
      return E{to_elem<std::tuple_element_t<K, E>>(get<K>(r))...};
    }(std::make_index_sequence<std::tuple_size_v<E>>{});
  } else {
    return static_cast<E>(r);
  }
}

// E with every scalar replaced by D.
template <class E, class D> struct rebind_elem { using type = D; };
template <class... Es, class D> struct rebind_elem<std::tuple<Es...>, D> {
  using type = std::tuple<typename rebind_elem<Es, D>::type...>;
};

// Builds the structure E (scalars of type D) from flat[pos...], depth first.
template <class E, class D>
ASCAN_HD ASCAN_ALWAYS_INLINE typename rebind_elem<E, D>::type build_elem(const D* flat, size_t& pos) {
  if constexpr (is_elem_tuple<E>::value) {
    return [&]<size_t... K>(std::index_sequence<K...>) {
      // Braced init evaluates left to right, so leaves are taken in order.
      return typename rebind_elem<E, D>::type{build_elem<std::tuple_element_t<K, E>, D>(flat, pos)...};
    }(std::make_index_sequence<std::tuple_size_v<E>>{});
  } else {
    return flat[pos++];
  }
}

// Flattens a combine result (tuple-like or scalar) into flat[pos...], converting to D.
template <class D, class R>
ASCAN_HD ASCAN_ALWAYS_INLINE void scatter_elem(const R& r, D* flat, size_t& pos) {
  if constexpr (is_result_tuple<std::decay_t<R>>::value) {
    [&]<size_t... K>(std::index_sequence<K...>) {
      using std::get;
      (scatter_elem<D>(get<K>(r), flat, pos), ...);
    }(std::make_index_sequence<std::tuple_size_v<std::decay_t<R>>>{});
  } else {
    flat[pos++] = D(r);
  }
}

// A (∂out/∂left) and, with WithB, B (∂out/∂right), row-major [out leaf][in leaf], at one element
// of L leaves of structure Elem, from one call of f on duals with L (or 2L) tangents.
template <class Elem, size_t L, bool WithB, class T, class F>
ASCAN_HD ASCAN_ALWAYS_INLINE void dual_jacobians(const F& f, const T* left, const T* right, T* A, T* B) {
  constexpr size_t N = WithB ? 2 * L : L;
  using D = Dual<T, static_cast<int>(N)>;
  D l[L], r[L], o[L];
  for (size_t i = 0; i < L; ++i) {
    l[i] = D(left[i]);
    l[i].d[i] = T(1);
    r[i] = D(right[i]);
    if constexpr (WithB) r[i].d[L + i] = T(1);
  }
  size_t pl = 0, pr = 0, po = 0;
  const auto out = f(build_elem<Elem, D>(l, pl), build_elem<Elem, D>(r, pr));
  scatter_elem<D>(out, o, po);
  for (size_t k = 0; k < L; ++k)
    for (size_t i = 0; i < L; ++i) {
      A[k * L + i] = o[k].d[i];
      if constexpr (WithB) B[k * L + i] = o[k].d[L + i];
    }
}

}  // namespace ascan::detail
