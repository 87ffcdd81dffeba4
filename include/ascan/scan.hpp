// scan.hpp — ascan::associative_scan on host tensors (Pointwise and Generic modes).
//
// Contract (docs/design.md §1): y_0 = x_0, y_t = f(y_{t-1}, x_t); with reverse, y_{T-1} = x_{T-1},
// y_t = f(y_{t+1}, x_t). f must be associative and pure; it need not be commutative.
//   Pointwise (a plain callable or ascan::pointwise(f)): f gets elements; leaves broadcast to one
//     common shape (NumPy rules, the scan length too); every output has that shape. O(N) work,
//     one read of the inputs and one write of the outputs, parallel over threads; results do
//     not depend on the thread count.
//   Generic (ascan::generic(f)): f gets slices (Tensors without the scan dim) and returns the
//     same structure with the same slice shapes; leaves may differ in shape but share the scan
//     length. About 2T calls of f in O(log T) parallel levels.
//   Batched Generic (ascan::generic_batched(f)): the same tree, f called once per level and thread
//     on batches of slices ([m, slice...] per leaf); long scans fold runs of rows side by side,
//     a batch of one pair per run.
// dim may be negative and is resolved against the first leaf. Throws ascan::Error on a bad dim,
// a leaf of rank <= dim, mismatched scan lengths, incompatible broadcast shapes, and (Generic) a
// combine result with wrong slice shapes. Misuse visible at compile time is a static_assert.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ascan/detail/builtin_scan.hpp"
#include "ascan/detail/generic_batched.hpp"
#include "ascan/detail/generic_scan.hpp"
#include "ascan/detail/pointwise_scan.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/options.hpp"
#include "ascan/parallel.hpp"
#include "ascan/tensor.hpp"

namespace ascan {
namespace detail {

inline constexpr const char* kScanName = "ascan::associative_scan()";

template <class Flat>
std::vector<Shape> leaf_shapes(const Flat& flat) {
  return std::apply([](const auto&... t) { return std::vector<Shape>{t.shape()...}; }, flat);
}

template <class Flat>
Flat empty_like_leaves(const Flat& flat, const Shape* common) {
  return std::apply(
      [&](const auto&... t) {
        return Flat{std::decay_t<decltype(t)>::empty(common ? *common : t.shape())...};
      },
      flat);
}

// Allocation-free views of the leaves (small scans in a loop must not pay for the checks).
template <class Flat>
auto leaf_storage(const Flat& flat) {
  return std::apply(
      [](const auto&... t) { return std::array<LeafStorage, sizeof...(t)>{LeafStorage{t.storage_id(), &t.shape(), t.numel()}...}; },
      flat);
}
template <class Flat>
auto leaf_shape_ptrs(const Flat& flat) {
  return std::apply([](const auto&... t) { return std::array<const Shape*, sizeof...(t)>{&t.shape()...}; }, flat);
}

template <class Flat>
void check_output_aliasing(const Flat& xs, const Flat& ys, std::string_view where) {
  const auto ins = leaf_storage(xs), outs = leaf_storage(ys);
  check_output_aliasing(std::span<const LeafStorage>(ins), std::span<const LeafStorage>(outs), where);
}

// Runs the scan kernel: the library's compiled copy for a builtin combine on float or double
// (builtin_scan.hpp), else the kernel instantiated here for f.
template <class X, class Fn>
void run_pointwise_scan(const Fn& f, const typename Tree<X>::Flat& xs, const typename Tree<X>::Flat& ys,
                        const PointwisePlan& plan, bool reverse) {
  if constexpr (has_compiled_builtin<Fn, X>) {
    const auto xs_array = std::apply([](const auto&... t) { return std::array{t...}; }, xs);
    const auto ys_array = std::apply([](const auto&... t) { return std::array{t...}; }, ys);
    builtin_pointwise_scan(builtin_op<Fn>::op, xs_array.data(), ys_array.data(), plan, reverse);
  } else {
    pointwise_scan<X>(f, xs, ys, plan, reverse);
  }
}

// The inputs with every leaf whose storage another leaf's output shares replaced by a copy: the
// kernels write a position's outputs leaf by leaf, so only an output over its own input (in
// place) is sure to find each element read before it overwrites it.
template <class Flat>
Flat unaliased_leaves(const Flat& xs, const Flat& ys) {
  const auto ins = leaf_storage(xs), outs = leaf_storage(ys);
  const auto crossed = [&](size_t l) {
    for (size_t o = 0; o < outs.size(); ++o)
      if (o != l && ins[l].numel > 0 && outs[o].numel > 0 && outs[o].storage == ins[l].storage) return true;
    return false;
  };
  bool any = false;
  for (size_t l = 0; l < ins.size(); ++l) any = any || crossed(l);
  if (!any) return xs;
  return [&]<size_t... L>(std::index_sequence<L...>) {
    return Flat{(crossed(L) ? std::get<L>(xs).clone() : std::get<L>(xs))...};
  }(std::make_index_sequence<std::tuple_size_v<Flat>>{});
}

template <class X, class Fn>
void scan_pointwise(const Fn& f, const typename Tree<X>::Flat& xs, typename Tree<X>::Flat* ys_given,
                    typename Tree<X>::Flat& ys, int64_t dim, const ScanOptions& opts) {
  const FloatModeScope mode;  // subnormals (ascan::set_flush_denormals) for the whole call
  const auto shapes = leaf_shape_ptrs(xs);
  const auto plan_ptr = cached_pointwise_plan(shapes.data(), shapes.size(), dim, kScanName);
  const PointwisePlan& plan = *plan_ptr;
  if (ys_given) {
    const auto out_shapes = leaf_shape_ptrs(*ys_given);
    for (const Shape* s : out_shapes)
      if (*s != plan.out_shape) check_outputs(leaf_shapes(*ys_given), plan.out_shape, kScanName);
    check_output_aliasing(xs, *ys_given, kScanName);
    // (ys stays empty: the caller has them)
    run_pointwise_scan<X>(f, unaliased_leaves(xs, *ys_given), *ys_given, plan, opts.reverse);
    return;
  }
  ys = empty_like_leaves(xs, &plan.out_shape);
  run_pointwise_scan<X>(f, xs, ys, plan, opts.reverse);
}

template <class X, bool Batched, class Fn>
void scan_generic(const Fn& f, const typename Tree<X>::Flat& xs, typename Tree<X>::Flat* ys_given,
                  typename Tree<X>::Flat& ys, int64_t dim, const ScanOptions& opts) {
  const FloatModeScope mode;
  const std::vector<Shape> shapes = leaf_shapes(xs);
  const int64_t d = check_generic_leaves(shapes, dim, kScanName);
  if (ys_given) {
    check_generic_outputs(shapes, leaf_shapes(*ys_given), kScanName);
    check_output_aliasing(xs, *ys_given, kScanName);
    ys = *ys_given;
  } else {
    ys = empty_like_leaves(xs, nullptr);
  }
  if constexpr (Batched) generic_batched_scan<X>(f, X{}, xs, ys, d, opts.reverse, kScanName);
  else generic_scan<X>(f, xs, ys, d, opts.reverse, kScanName);
}

template <class Combine, class T>
void scan_list(const Combine& combine, const std::vector<Tensor<T>>& xs, int64_t dim,
               const ScanOptions& opts, std::vector<Tensor<T>>& ys, bool ys_given) {
  using X = std::vector<Tensor<T>>;
  static_assert(combine_mode<Combine>::generic,
                "ascan::associative_scan(): a std::vector of tensors has a run-time number of "
                "leaves, which only Generic mode supports: pass ascan::generic(f), or use a "
                "std::tuple of tensors for a pointwise combine.");
  if constexpr (combine_mode<Combine>::generic) {
    using Fn = std::decay_t<decltype(combine_fn(combine))>;
    static_assert(std::is_invocable_r_v<X, const Fn&, const X&, const X&>,
                  "ascan::associative_scan(): the generic combine over a std::vector of tensors must "
                  "take two std::vector<ascan::Tensor<T>> (the slices) and return one.");
    if constexpr (std::is_invocable_r_v<X, const Fn&, const X&, const X&>) {
      if (xs.empty()) raise("{}: xs is an empty list, expected at least one leaf", kScanName);
      const FloatModeScope mode;
      std::vector<Shape> shapes;
      std::vector<LeafStorage> in_storage, out_storage;
      for (const auto& t : xs) {
        shapes.push_back(t.shape());
        in_storage.push_back({t.storage_id(), &t.shape(), t.numel()});
      }
      const int64_t d = check_generic_leaves(shapes, dim, kScanName);
      if (ys_given) {
        std::vector<Shape> out_shapes;
        for (const auto& t : ys) {
          out_shapes.push_back(t.shape());
          out_storage.push_back({t.storage_id(), &t.shape(), t.numel()});
        }
        if (ys.size() != xs.size())
          raise("{}: out has {} leaves, expected {} (one per input leaf)", kScanName, ys.size(), xs.size());
        check_generic_outputs(shapes, out_shapes, kScanName);
        check_output_aliasing(std::span<const LeafStorage>(in_storage), std::span<const LeafStorage>(out_storage), kScanName);
      } else {
        ys.clear();
        for (const auto& t : xs) ys.push_back(Tensor<T>::empty(t.shape()));
      }
      if constexpr (combine_mode<Combine>::batched)
        generic_batched_scan<X>(combine_fn(combine), X(xs.size()), xs, ys, d, opts.reverse, kScanName);
      else
        generic_scan_list(combine_fn(combine), xs, ys, d, opts.reverse, kScanName);
    }
  }
}

// Shared front end: compile-time checks of the combine against the structure, then dispatch.
template <class Combine, class Xs>
normalize_t<Xs> scan_dispatch(const Combine& combine, const Xs& xs, int64_t dim, const ScanOptions& opts,
                              typename Tree<normalize_t<Xs>>::Flat* ys_given) {
  using X = normalize_t<Xs>;
  using Node = Tree<X>;
  static_assert(Node::valid,
                "ascan::associative_scan(): xs must be an ascan::Tensor<T> or a (nested) std::tuple "
                "of ascan::Tensor, with at least one leaf");
  if constexpr (Node::valid) {
    using Mode = combine_mode<Combine>;
    using Fn = std::decay_t<decltype(combine_fn(combine))>;
    const Fn& f = combine_fn(combine);
    typename Node::Flat ys;
    if constexpr (!Mode::generic) {
      using Elem = typename Node::Elem;
      constexpr bool callable = std::is_invocable_v<const Fn&, Elem, Elem>;
      static_assert(callable,
                    "ascan::associative_scan(): the pointwise combine cannot be called with two "
                    "elements. Write it generically on elements: [](auto a, auto b) { return a + b; } "
                    "for one tensor, or [](auto l, auto r) { auto [a1, b1] = l; auto [a2, b2] = r; "
                    "return std::tuple{...}; } for a tuple of tensors (nested tuples mirror nested "
                    "inputs). To combine whole slices (e.g. matrices), pass ascan::generic(f).");
      if constexpr (callable) {
        using R = std::invoke_result_t<const Fn&, Elem, Elem>;
        static_assert(result_matches<X, R>::value,
                      "ascan::associative_scan(): the pointwise combine returns the wrong structure. "
                      "Return a scalar for a single tensor, or a std::tuple with one value per "
                      "tensor of the input tuple (same arity, same nesting).");
        if constexpr (result_matches<X, R>::value)
          scan_pointwise<X>(f, Node::flatten(xs), ys_given, ys, dim, opts);
      }
    } else {
      constexpr bool callable = std::is_invocable_v<const Fn&, const X&, const X&>;
      static_assert(callable,
                    "ascan::associative_scan(): the generic combine cannot be called with two slices. "
                    "Write it on the input structure with the scan dim removed: "
                    "[](const auto& a, const auto& b) { return matmul(a, b); } for one tensor, "
                    "std::tuple arguments for a tuple of tensors.");
      if constexpr (callable) {
        using R = std::invoke_result_t<const Fn&, const X&, const X&>;
        static_assert(slice_result_matches<X, R>::value,
                      "ascan::associative_scan(): the generic combine returns the wrong structure. "
                      "Return an ascan::Tensor<T> for a single tensor, or a std::tuple with one "
                      "tensor per input leaf (same arity, nesting and element types).");
        if constexpr (slice_result_matches<X, R>::value)
          scan_generic<X, Mode::batched>(f, Node::flatten(xs), ys_given, ys, dim, opts);
      }
    }
    return Node::template unflatten<0>(ys);
  } else {
    return X{};
  }
}

}  // namespace detail

// Generic mode over a run-time list of same-typed leaves: f takes and returns
// std::vector<Tensor<T>> of slices; a result with the wrong number of leaves or wrong slice
// shapes throws ascan::Error.
template <class Combine, class T>
std::vector<Tensor<T>> associative_scan(const Combine& combine, const std::vector<Tensor<T>>& xs,
                                        int64_t dim, const ScanOptions& opts = {}) {
  std::vector<Tensor<T>> ys;
  detail::scan_list(combine, xs, dim, opts, ys, false);
  return ys;
}

template <class Combine, class T>
void associative_scan(const Combine& combine, const std::vector<Tensor<T>>& xs, int64_t dim,
                      const ScanOptions& opts, std::vector<Tensor<T>>& out) {
  detail::scan_list(combine, xs, dim, opts, out, true);
}

// Returns the scan of xs (a Tensor or a nested std::tuple of Tensors) along dim.
template <class Combine, class Xs>
detail::normalize_t<Xs> associative_scan(const Combine& combine, const Xs& xs, int64_t dim,
                                         const ScanOptions& opts = {}) {
  return detail::scan_dispatch(combine, xs, dim, opts, nullptr);
}

// Writes the scan into caller-provided outputs `out` (the structure of xs; a std::tuple of
// Tensors or of Tensor& from std::tie). Pointwise: each output must have the broadcast shape;
// Generic: each its input's shape. An output may be the input leaf itself (in place). Nothing
// is allocated beyond small per-call bookkeeping, so a loop of calls reaches a steady state.
template <class Combine, class Xs, class Out>
void associative_scan(const Combine& combine, const Xs& xs, int64_t dim, const ScanOptions& opts,
                      Out&& out) {
  using X = detail::normalize_t<Xs>;
  static_assert(std::is_same_v<detail::normalize_t<Out>, X>,
                "ascan::associative_scan(): `out` must have the structure and element types of xs "
                "(a Tensor, or a std::tuple / std::tie of Tensors mirroring xs)");
  auto flat_out = detail::Tree<X>::flatten(out);
  detail::scan_dispatch(combine, xs, dim, opts, &flat_out);
}

}  // namespace ascan
