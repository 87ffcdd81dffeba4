// generic_scan.hpp — the host Generic-mode scan: odd/even tree over slices.
//
// Level by level (as in JAX and PyTorch): combine adjacent pairs, scan the half-length sequence
// of pair results recursively, then fill the even positions with one more combine each. About
// 2T combines in 2·log2(T) levels; the combines of one level run in parallel. The association
// order depends only on T, so results are identical for any thread count.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ascan/detail/tree.hpp"
#include "ascan/parallel.hpp"
#include "ascan/tensor_ops.hpp"

namespace ascan::detail {

// Calls fn on every leaf of a (nested) tuple structure, depth first.
template <class S, class Fn>
void visit_leaves(const S& s, Fn&& fn) {
  if constexpr (is_std_tuple_v<S>) {
    std::apply([&](const auto&... c) { (visit_leaves(c, fn), ...); }, s);
  } else {
    fn(s);
  }
}

// A runtime-length list of same-typed leaves (Generic mode only).
template <class X> struct is_tensor_list : std::false_type {};
template <class T> struct is_tensor_list<std::vector<Tensor<T>>> : std::true_type {};

template <class X>
struct GenericScan {
  std::vector<Shape> slice_shapes;  // expected shape of each leaf's slices
  std::string_view where;
  int64_t grain = 1;
  bool parallel = true;  // false for slices that live on a (single-threaded) autodiff tape

  template <class Body>
  void for_range(int64_t n, const Body& body) const {
    if (parallel) parallel_for(n, grain, body); else body(0, n);
  }

  // Calls f and checks that the result has one leaf per input leaf, each of its slice shape.
  template <class F>
  X combine(const F& f, const X& a, const X& b) const {
    X r = f(a, b);
    if constexpr (is_tensor_list<X>::value) {
      if (r.size() != slice_shapes.size())
        raise("{}: the generic combine returned {} leaves, expected {} (one per input leaf)", where,
              r.size(), slice_shapes.size());
      for (size_t l = 0; l < r.size(); ++l) check_leaf(l, r[l].shape());
    } else {
      size_t leaf = 0;
      visit_leaves(r, [&](const auto& t) { check_leaf(leaf++, t.shape()); });
    }
    return r;
  }

  void check_leaf(size_t leaf, const Shape& got) const {
    if (got != slice_shapes[leaf])
      raise("{}: the generic combine returned leaf {} of shape {}, expected {} (the slice shape "
            "of leaf {}: its input shape without the scan dim)", where, leaf, format_shape(got),
            format_shape(slice_shapes[leaf]), leaf);
  }

  template <class F>
  std::vector<X> scan(const F& f, std::vector<X> xs) const {
    const int64_t n = static_cast<int64_t>(xs.size());
    if (n < 2) return xs;
    std::vector<X> pairs(n / 2);
    for_range(n / 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) pairs[i] = combine(f, xs[2 * i], xs[2 * i + 1]);
    });
    std::vector<X> odd = scan(f, std::move(pairs));  // odd[i] = y_{2i+1}
    std::vector<X> ys(n);
    ys[0] = xs[0];
    for (int64_t i = 0; i < n / 2; ++i) ys[2 * i + 1] = std::move(odd[i]);
    for_range((n - 1) / 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ys[2 * i + 2] = combine(f, ys[2 * i + 1], xs[2 * i + 2]);
    });
    return ys;
  }
};

// Scans the flat leaves `xs` (each already validated: rank > dim, equal length T on dim) into
// `ys` (same shapes).
template <class X, class F>
void generic_scan(const F& f, const typename Tree<X>::Flat& xs, const typename Tree<X>::Flat& ys,
                  int64_t dim, bool reverse, std::string_view where) {
  using Node = Tree<X>;
  constexpr size_t L = Node::num_leaves;
  const int64_t T = std::get<0>(xs).shape()[dim];
  if (T == 0) return;
  GenericScan<X> scanner;
  scanner.where = where;
  int64_t slice_elems = 0;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (scanner.slice_shapes.push_back(remove_dim(std::get<I>(xs).shape(), dim)), ...);
    ((slice_elems += shape_numel(scanner.slice_shapes[I])), ...);
  }(std::make_index_sequence<L>{});
  scanner.grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(slice_elems, 1));

  // Slices per leaf, then one structure per step (in scan order).
  std::vector<X> elems(T);
  [&]<size_t... I>(std::index_sequence<I...>) {
    auto slices = std::make_tuple(split_slices(std::get<I>(xs), dim)...);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t src = reverse ? T - 1 - t : t;
      elems[t] = Node::template unflatten<0>(std::make_tuple(std::get<I>(slices)[src]...));
    }
  }(std::make_index_sequence<L>{});

  std::vector<X> out = scanner.scan(f, std::move(elems));

  [&]<size_t... I>(std::index_sequence<I...>) {
    auto slices = std::make_tuple(std::vector<std::tuple_element_t<I, typename Node::Flat>>(T)...);
    for (int64_t t = 0; t < T; ++t) {
      auto flat = Node::flatten(out[t]);
      const int64_t dst = reverse ? T - 1 - t : t;
      ((std::get<I>(slices)[dst] = std::get<I>(flat)), ...);
    }
    (join_slices(std::get<I>(slices), dim, const_cast<std::tuple_element_t<I, typename Node::Flat>&>(std::get<I>(ys))), ...);
  }(std::make_index_sequence<L>{});
}

// The same for a std::vector of leaves; `ys` holds one output per leaf.
template <class T, class F>
void generic_scan_list(const F& f, const std::vector<Tensor<T>>& xs, std::vector<Tensor<T>>& ys,
                       int64_t dim, bool reverse, std::string_view where) {
  using X = std::vector<Tensor<T>>;
  const size_t L = xs.size();
  const int64_t T_len = xs[0].shape()[dim];
  if (T_len == 0) return;
  GenericScan<X> scanner;
  scanner.where = where;
  int64_t slice_elems = 0;
  std::vector<std::vector<Tensor<T>>> slices(L);
  for (size_t l = 0; l < L; ++l) {
    scanner.slice_shapes.push_back(remove_dim(xs[l].shape(), dim));
    slice_elems += shape_numel(scanner.slice_shapes[l]);
    slices[l] = split_slices(xs[l], dim);
  }
  scanner.grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(slice_elems, 1));
  std::vector<X> elems(T_len, X(L));
  for (int64_t t = 0; t < T_len; ++t)
    for (size_t l = 0; l < L; ++l) elems[t][l] = slices[l][reverse ? T_len - 1 - t : t];
  std::vector<X> out = scanner.scan(f, std::move(elems));
  for (size_t l = 0; l < L; ++l) {
    for (int64_t t = 0; t < T_len; ++t) slices[l][reverse ? T_len - 1 - t : t] = out[t][l];
    join_slices(slices[l], dim, ys[l]);
  }
}

}  // namespace ascan::detail
