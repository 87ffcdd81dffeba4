// vjp.hpp — ascan::associative_scan_vjp: the exact adjoint of a host pointwise scan, without a
// tape, for callers with their own autodiff (the LibTorch bridge, ascan/torch.hpp).
//
// The same gradients as ad::associative_scan's backward (docs/design.md §4), from the same
// kernels: the builtins' compiled closed forms and sweeps, dual numbers for other combines.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ascan/ad/scan_vjp.hpp"
#include "ascan/ad/vjp/common.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/options.hpp"
#include "ascan/tensor.hpp"

namespace ascan {

namespace detail {
inline constexpr const char* kVjpName = "ascan::associative_scan_vjp()";
}  // namespace detail

// Gradients of the pointwise scan ys = associative_scan(f, xs, dim, opts) with respect to xs.
//   xs: the scan's inputs (a Tensor or a nested std::tuple of Tensors, float or double; leaves may
//       broadcast, as in the scan); ys: its outputs (the same structure, each of the broadcast
//       shape); gys: the upstream gradients ∂ℓ/∂ys (the same structure; a default-constructed
//       Tensor stands for zero).
// Returns ∂ℓ/∂xs with the structure of xs, each leaf in its own shape (broadcast leaves summed
// back). Exact for any gys, coupled leaves included. Throws ascan::Error naming the argument on a
// bad dim, shapes that do not broadcast, or ys / gys leaves of another shape than the scan's.
template <class Combine, class Xs, class Ys, class Gs>
detail::normalize_t<Xs> associative_scan_vjp(const Combine& combine, const Xs& xs, const Ys& ys, const Gs& gys,
                                             int64_t dim, const ScanOptions& opts = {}) {
  using X = detail::normalize_t<Xs>;
  using Node = detail::Tree<X>;
  static_assert(Node::valid && std::is_same_v<detail::normalize_t<Ys>, X> && std::is_same_v<detail::normalize_t<Gs>, X>,
                "ascan::associative_scan_vjp(): xs, ys and gys must have one structure (a Tensor<T> or a "
                "nested std::tuple of them) and the same element types");
  static_assert(!detail::combine_mode<Combine>::generic,
                "ascan::associative_scan_vjp(): pointwise combines only; differentiate a Generic scan "
                "with ascan::ad::associative_scan");
  if constexpr (Node::valid && !detail::combine_mode<Combine>::generic) {
    using Elem = typename Node::Elem;
    constexpr size_t L = Node::num_leaves;
    using Fn = std::decay_t<decltype(detail::combine_fn(combine))>;
    const Fn& f = detail::combine_fn(combine);
    const typename Node::Flat flat_x = Node::flatten(xs);
    using T = typename std::tuple_element_t<0, typename Node::Flat>::value_type;
    constexpr bool one_float_type = []<size_t... I>(std::index_sequence<I...>) {
      return (std::is_floating_point_v<T> && ... &&
              std::is_same_v<typename std::tuple_element_t<I, typename Node::Flat>::value_type, T>);
    }(std::make_index_sequence<L>{});
    static_assert(one_float_type, "ascan::associative_scan_vjp(): every leaf must have one floating type (float or double)");
    const std::vector<Tensor<T>> x = ad::detail::as_vector<T>(flat_x);
    const std::vector<Tensor<T>> y = ad::detail::as_vector<T>(Node::flatten(ys));
    const std::vector<Tensor<T>> g = ad::detail::as_vector<T>(Node::flatten(gys));
    std::vector<Shape> shapes;
    for (const auto& t : x) shapes.push_back(t.shape());
    const detail::PointwisePlan plan = detail::make_pointwise_plan(shapes, dim, detail::kVjpName);
    for (size_t l = 0; l < L; ++l) {
      if (y[l].shape() != plan.out_shape)
        detail::raise("{}: ys leaf {} has shape {}, expected {} (the scan's output shape)", detail::kVjpName, l,
                      format_shape(y[l].shape()), format_shape(plan.out_shape));
      if (g[l].storage_id() && g[l].shape() != plan.out_shape)
        detail::raise("{}: gys leaf {} has shape {}, expected {} (the scan's output shape) or an empty Tensor "
                      "for a zero gradient", detail::kVjpName, l, format_shape(g[l].shape()),
                      format_shape(plan.out_shape));
    }
    std::array<bool, L> need;
    need.fill(true);
    std::vector<Tensor<T>> dx(L);
    bool any_grad = false;
    for (const auto& t : g) any_grad = any_grad || t.storage_id();
    if (any_grad) dx = ad::detail::scan_vjp<X, Elem, L>(f, plan, x, y, g, need, opts.reverse);
    // Paths that skip a gradient they can prove zero leave it empty: give every leaf its tensor.
    for (size_t l = 0; l < L; ++l)
      if (!dx[l].storage_id()) dx[l] = Tensor<T>::zeros(x[l].shape());
    typename Node::Flat flat_dx = flat_x;
    [&]<size_t... I>(std::index_sequence<I...>) { ((std::get<I>(flat_dx) = dx[I]), ...); }(std::make_index_sequence<L>{});
    return Node::template unflatten<0>(flat_dx);
  } else {
    return X{};
  }
}

}  // namespace ascan
