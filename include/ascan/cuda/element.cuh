// element.cuh — packed scan elements for device kernels and the adaptors around a user combine.
//
// CUB stores scan values in shared memory and in its look-back tile descriptors, so the value type
// is a trivially copyable aggregate (Packed<Ts...>: one slot per leaf, no padding beyond natural
// alignment). The user's combine still sees exactly what the host passes it: a scalar for one
// leaf, a std::tuple of scalars for several; ElemOp converts around the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ascan/config.hpp"

namespace ascan::cuda::detail {

template <size_t I, class T>
struct Slot {
  T v;
};

template <class Seq, class... Ts>
struct PackedImpl;
template <size_t... I, class... Ts>
struct PackedImpl<std::index_sequence<I...>, Ts...> : Slot<I, Ts>... {};

template <class... Ts>
using Packed = PackedImpl<std::index_sequence_for<Ts...>, Ts...>;

template <size_t I, class... Ts>
using nth_t = std::tuple_element_t<I, std::tuple<Ts...>>;

template <size_t I, size_t... J, class... Ts>
ASCAN_HD auto& slot(PackedImpl<std::index_sequence<J...>, Ts...>& p) {
  return static_cast<Slot<I, nth_t<I, Ts...>>&>(p).v;
}
template <size_t I, size_t... J, class... Ts>
ASCAN_HD const auto& slot(const PackedImpl<std::index_sequence<J...>, Ts...>& p) {
  return static_cast<const Slot<I, nth_t<I, Ts...>>&>(p).v;
}

// The value a scan stores per position: the scalar itself for one leaf, Packed for several.
template <class... Ts>
struct ElemOf {
  using type = Packed<Ts...>;
  using user = std::tuple<Ts...>;  // what the combine is called with
};
template <class T>
struct ElemOf<T> {
  using type = T;
  using user = T;
};
template <class... Ts>
using elem_t = typename ElemOf<Ts...>::type;

template <size_t... J, class... Ts, size_t... I>
ASCAN_HD std::tuple<Ts...> to_user(const PackedImpl<std::index_sequence<J...>, Ts...>& p, std::index_sequence<I...>) {
  return std::tuple<Ts...>{slot<I>(p)...};
}

// Calls f on user elements and packs the result; the result converts leaf by leaf to the leaf
// types, as the host converts when it stores.
template <class F, class... Ts>
struct ElemOp {
  F f;
  using E = elem_t<Ts...>;
  ASCAN_HD E operator()(const E& a, const E& b) const {
    if constexpr (sizeof...(Ts) == 1) {
      return static_cast<E>(f(a, b));
    } else {
      using Seq = std::index_sequence_for<Ts...>;
      const auto r = f(to_user(a, Seq{}), to_user(b, Seq{}));
      return pack(r, Seq{});
    }
  }

 private:
  template <class R, size_t... I>
  ASCAN_HD static E pack(const R& r, std::index_sequence<I...>) {
    using std::get;
    E e;
    ((slot<I>(e) = static_cast<nth_t<I, Ts...>>(get<I>(r))), ...);
    return e;
  }
};

// W neighbouring lanes of a row as one scan value, combined lane by lane: a narrow [T, inner]
// layout becomes one sequence of rows, which CUB scans at full width.
template <class E, int W>
struct Lanes {
  E v[W];
};

template <class Op, class E, int W>
struct LanesOp {
  Op op;
  ASCAN_HD Lanes<E, W> operator()(const Lanes<E, W>& a, const Lanes<E, W>& b) const {
    Lanes<E, W> r;
#pragma unroll
    for (int j = 0; j < W; ++j) r.v[j] = op(a.v[j], b.v[j]);
    return r;
  }
};

// Pointers to the L leaves (Packed<const T*...> / Packed<T*...>), element loads and stores.
template <class... Ts>
struct LeafPtrs {
  Packed<const Ts*...> in;
  Packed<Ts*...> out;
  using E = elem_t<Ts...>;

  ASCAN_HD E load(int64_t i) const {
    if constexpr (sizeof...(Ts) == 1) {
      return slot<0>(in)[i];
    } else {
      return load_impl(i, std::index_sequence_for<Ts...>{});
    }
  }
  ASCAN_HD void store(int64_t i, const E& e) const {
    if constexpr (sizeof...(Ts) == 1) {
      slot<0>(out)[i] = e;
    } else {
      store_impl(i, e, std::index_sequence_for<Ts...>{});
    }
  }

 private:
  template <size_t... I>
  ASCAN_HD E load_impl(int64_t i, std::index_sequence<I...>) const {
    E e;
    ((slot<I>(e) = slot<I>(in)[i]), ...);
    return e;
  }
  template <size_t... I>
  ASCAN_HD void store_impl(int64_t i, const E& e, std::index_sequence<I...>) const {
    ((slot<I>(out)[i] = slot<I>(e)), ...);
  }
};

}  // namespace ascan::cuda::detail
