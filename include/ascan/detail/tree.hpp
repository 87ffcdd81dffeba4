// tree.hpp — the structure of scan inputs: a Tensor or a (nested) std::tuple of them.
//
// Tree<X> flattens a structure into its leaves (depth-first), rebuilds it, and names the
// element type a pointwise combine sees (scalar / nested std::tuple of scalars) and the slice
// type a generic combine sees (Tensor / nested tuple of Tensors).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ascan/config.hpp"
#include "ascan/tensor.hpp"

namespace ascan::detail {

// Normalises a user structure type: references and cv are dropped at every level, so
// std::tie(a, b) and std::tuple{a, b} are the same structure.
template <class X> struct normalize { using type = std::decay_t<X>; };
template <class... Xs> struct normalize<std::tuple<Xs...>> {
  using type = std::tuple<typename normalize<std::decay_t<Xs>>::type...>;
};
template <class X> using normalize_t = typename normalize<std::decay_t<X>>::type;

template <class X> struct Tree {  // not a Tensor or tuple: rejected by a static_assert at the entry
  static constexpr bool valid = false;
  static constexpr size_t num_leaves = 0;
  using Flat = std::tuple<>;
};

template <class T> struct Tree<Tensor<T>> {
  static constexpr bool valid = true;
  static constexpr size_t num_leaves = 1;
  using Elem = T;
  using Flat = std::tuple<Tensor<T>>;
  using FlatPtrs = std::tuple<T*>;
  template <class S> static Flat flatten(const S& t) { return Flat{t}; }
  template <size_t Off, class F> static Tensor<T> unflatten(const F& flat) { return std::get<Off>(flat); }
};

template <class... Xs> struct Tree<std::tuple<Xs...>> {
  static constexpr bool valid = sizeof...(Xs) > 0 && (Tree<Xs>::valid && ...);
  static constexpr size_t num_leaves = (size_t{0} + ... + Tree<Xs>::num_leaves);
  // offsets[k]: index of child k's first leaf in the flat list.
  static constexpr std::array<size_t, sizeof...(Xs) + 1> offsets = [] {
    std::array<size_t, sizeof...(Xs) + 1> o{};
    size_t i = 0, acc = 0;
    ((o[i++] = acc, acc += Tree<Xs>::num_leaves), ...);
    o[i] = acc;
    return o;
  }();
  using Elem = std::tuple<typename Tree<Xs>::Elem...>;
  using Flat = decltype(std::tuple_cat(std::declval<typename Tree<Xs>::Flat>()...));
  using FlatPtrs = decltype(std::tuple_cat(std::declval<typename Tree<Xs>::FlatPtrs>()...));

  template <class S> static Flat flatten(const S& s) {
    return flatten_impl(s, std::index_sequence_for<Xs...>{});
  }
  template <size_t Off, class F> static std::tuple<Xs...> unflatten(const F& flat) {
    return unflatten_impl<Off>(flat, std::index_sequence_for<Xs...>{});
  }

 private:
  template <class S, size_t... K> static Flat flatten_impl(const S& s, std::index_sequence<K...>) {
    return std::tuple_cat(Tree<Xs>::flatten(std::get<K>(s))...);
  }
  template <size_t Off, class F, size_t... K>
  static std::tuple<Xs...> unflatten_impl(const F& flat, std::index_sequence<K...>) {
    return std::tuple<Xs...>{Tree<Xs>::template unflatten<Off + offsets[K]>(flat)...};
  }
};

template <class E> struct is_std_tuple : std::false_type {};
template <class... Es> struct is_std_tuple<std::tuple<Es...>> : std::true_type {};
template <class E> inline constexpr bool is_std_tuple_v = is_std_tuple<std::decay_t<E>>::value;

// ---- element access for the pointwise kernels ---------------------------------------------

template <class X, size_t Off> struct ElemAccess;

template <class T, size_t Off> struct ElemAccess<Tensor<T>, Off> {
  template <class Ptrs> ASCAN_ALWAYS_INLINE static T load(const Ptrs& p, int64_t i) {
    return std::get<Off>(p)[i];
  }
  template <class Ptrs, class R> ASCAN_ALWAYS_INLINE static void store(const Ptrs& p, int64_t i, const R& r) {
    std::get<Off>(p)[i] = static_cast<T>(r);
  }
  // With a per-leaf index (leaves advance at different strides, e.g. 0 when broadcast).
  template <class Ptrs, class Offs> ASCAN_ALWAYS_INLINE static T load_at(const Ptrs& p, const Offs& i) {
    return std::get<Off>(p)[i[Off]];
  }
};

template <class... Xs, size_t Off> struct ElemAccess<std::tuple<Xs...>, Off> {
  using Node = Tree<std::tuple<Xs...>>;
  template <class Ptrs> ASCAN_ALWAYS_INLINE static auto load(const Ptrs& p, int64_t i) {
    return load_impl(p, i, std::index_sequence_for<Xs...>{});
  }
  template <class Ptrs, class R> ASCAN_ALWAYS_INLINE static void store(const Ptrs& p, int64_t i, const R& r) {
    store_impl(p, i, r, std::index_sequence_for<Xs...>{});
  }
  template <class Ptrs, class Offs> ASCAN_ALWAYS_INLINE static auto load_at(const Ptrs& p, const Offs& i) {
    return load_at_impl(p, i, std::index_sequence_for<Xs...>{});
  }

 private:
  template <class Ptrs, size_t... K>
  ASCAN_ALWAYS_INLINE static auto load_impl(const Ptrs& p, int64_t i, std::index_sequence<K...>) {
    return typename Node::Elem{ElemAccess<Xs, Off + Node::offsets[K]>::load(p, i)...};
  }
  template <class Ptrs, class Offs, size_t... K>
  ASCAN_ALWAYS_INLINE static auto load_at_impl(const Ptrs& p, const Offs& i, std::index_sequence<K...>) {
    return typename Node::Elem{ElemAccess<Xs, Off + Node::offsets[K]>::load_at(p, i)...};
  }
  template <class Ptrs, class R, size_t... K>
  ASCAN_ALWAYS_INLINE static void store_impl(const Ptrs& p, int64_t i, const R& r, std::index_sequence<K...>) {
    using std::get;
    (ElemAccess<Xs, Off + Node::offsets[K]>::store(p, i, get<K>(r)), ...);
  }
};

// ---- does a combine's result have the structure X? ------------------------------------------

template <class R, class = void> struct is_tuple_like : std::false_type {};
template <class R>
struct is_tuple_like<R, std::void_t<decltype(std::tuple_size<R>::value)>> : std::true_type {};

template <class X, class R, class = void> struct result_matches : std::false_type {};
template <class T, class R>
struct result_matches<Tensor<T>, R, std::enable_if_t<!is_tuple_like<std::decay_t<R>>::value>>
    : std::is_convertible<R, T> {};
template <class... Xs, class R>
struct result_matches<std::tuple<Xs...>, R, std::enable_if_t<is_tuple_like<std::decay_t<R>>::value>> {
  template <size_t... K>
  static constexpr bool check(std::index_sequence<K...>) {
    if constexpr (std::tuple_size<std::decay_t<R>>::value != sizeof...(Xs)) {
      return false;
    } else {
      return (result_matches<Xs, std::tuple_element_t<K, std::decay_t<R>>>::value && ...);
    }
  }
  static constexpr bool value = check(std::index_sequence_for<Xs...>{});
};

// Generic mode: the result must be exactly the slice structure (Tensors of the same types).
template <class X, class R> struct slice_result_matches : std::is_same<normalize_t<R>, X> {};

}  // namespace ascan::detail
