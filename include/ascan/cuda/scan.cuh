// scan.cuh — ascan::cuda::associative_scan: the pointwise associative scan on device tensors.
//
// Contract (docs/design.md §1, as the host): y_0 = x_0, y_t = f(y_{t-1}, x_t); with reverse,
// y_{T-1} = x_{T-1}, y_t = f(y_{t+1}, x_t). f must be associative and pure; it need not be
// commutative. f is called on elements exactly as on the host (a scalar for one leaf, a
// std::tuple of scalars for a tuple of leaves) in device code, so it must be a struct with a
// templated ASCAN_HD call operator (the builtins, or one made with ASCAN_COMBINE).
// Leaves: one DeviceTensor, or a flat std::tuple of DeviceTensors / references to them
// (std::tie); element types may differ, shapes may not (broadcasting is host-only). dim may be
// negative. Results are asynchronous on the default stream; errors in arguments throw
// ascan::Error before any device work. Float results may differ from the host's in the last
// bits (the association order differs); integer results are exact.
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ascan/cuda/device_tensor.cuh"
#include "ascan/cuda/element.cuh"
#include "ascan/cuda/scan_kernels.cuh"
#include "ascan/options.hpp"
#include "ascan/shape.hpp"

// Widest inner extent scanned as packed rows (one CUB by-key scan per width, which is what
// dominates compile time); wider layouts take the lane kernels. Define as 1 to compile only the
// inner == 1 CUB scan and the lane kernels.
#ifndef ASCAN_CUDA_PACKED_MAX_INNER
#define ASCAN_CUDA_PACKED_MAX_INNER 8
#endif

namespace ascan::cuda {
namespace detail {

inline constexpr const char* kScanName = "ascan::cuda::associative_scan()";

template <class X> struct is_device_tensor : std::false_type {};
template <class T> struct is_device_tensor<DeviceTensor<T>> : std::true_type {};

// The leaves of a device structure: a DeviceTensor, or a flat tuple of (references to) them.
template <class X> struct DeviceTree { static constexpr bool valid = false; };
template <class T> struct DeviceTree<DeviceTensor<T>> {
  static constexpr bool valid = true;
  static constexpr size_t num_leaves = 1;
  using Result = DeviceTensor<T>;
  using Leaves = std::tuple<T>;
  static std::tuple<const DeviceTensor<T>&> refs(const DeviceTensor<T>& x) { return {x}; }
  static Result wrap(std::tuple<DeviceTensor<T>>&& t) { return std::move(std::get<0>(t)); }
};
template <class... Xs> struct DeviceTree<std::tuple<Xs...>> {
  static constexpr bool valid = sizeof...(Xs) > 0 && (is_device_tensor<std::decay_t<Xs>>::value && ...);
  static constexpr size_t num_leaves = sizeof...(Xs);
  using Result = std::tuple<std::decay_t<Xs>...>;
  using Leaves = std::tuple<typename std::decay_t<Xs>::value_type...>;
  template <class Tup>
  static std::tuple<const std::decay_t<Xs>&...> refs(const Tup& x) {
    return std::apply([](const auto&... t) { return std::tuple<const std::decay_t<Xs>&...>{t...}; }, x);
  }
  static Result wrap(Result&& t) { return std::move(t); }
};

template <class F> struct is_generic_combine : std::false_type {};
template <class F> struct is_generic_combine<Generic<F>> : std::true_type {};
template <class F> struct is_generic_combine<GenericBatched<F>> : std::true_type {};

// Does R (a combine's result) convert leaf by leaf to Ts...?
template <class R, class... Ts>
constexpr bool result_converts() {
  if constexpr (sizeof...(Ts) == 1) {
    return std::is_convertible_v<R, std::tuple_element_t<0, std::tuple<Ts...>>>;
  } else {
    using D = std::decay_t<R>;
    if constexpr (requires { std::tuple_size<D>::value; }) {
      if constexpr (std::tuple_size<D>::value != sizeof...(Ts)) {
        return false;
      } else {
        return []<size_t... I>(std::index_sequence<I...>) {
          return (std::is_convertible_v<std::tuple_element_t<I, D>, std::tuple_element_t<I, std::tuple<Ts...>>> && ...);
        }(std::index_sequence_for<Ts...>{});
      }
    } else {
      return false;
    }
  }
}

// Checks the leaves and returns the [outer, T, inner] view of their common shape.
template <class... Ts>
ScanView check_leaves(const std::tuple<const DeviceTensor<Ts>&...>& xs, int64_t dim, std::string_view where,
                      std::string_view what = "") {
  const Shape& shape = std::get<0>(xs).shape();
  size_t k = 0;
  std::apply([&](const auto&... t) {
    ((t.shape() == shape ? void(++k)
                         : ascan::detail::raise("{}: {}leaf {} has shape {}, expected {} (leaf 0): device leaves must "
                                                "share one shape (broadcasting is host-only)",
                                                where, what, k, format_shape(t.shape()), format_shape(shape))),
     ...);
  }, xs);
  const int64_t d = resolve_dim(dim, static_cast<int64_t>(shape.size()), where, "leaf 0");
  return scan_view(shape, d);
}

template <class... Ts, size_t... I>
LeafPtrs<Ts...> leaf_ptrs(const std::tuple<const DeviceTensor<Ts>&...>& xs, std::tuple<DeviceTensor<Ts>...>& ys,
                          std::index_sequence<I...>) {
  LeafPtrs<Ts...> p;
  ((slot<I>(p.in) = std::get<I>(xs).data()), ...);
  ((slot<I>(p.out) = std::get<I>(ys).data()), ...);
  return p;
}

// Any-shape scan of contiguous leaves: dispatch on the width of the [outer, T, inner] view.
template <class Engine, class Fn, class... Ts>
void scan_leaves(const Fn& f, const LeafPtrs<Ts...>& p, const ScanView& v, bool reverse) {
  using E = elem_t<Ts...>;
  const ElemOp<Fn, Ts...> op{f};
  const int64_t n = v.outer * v.length;
  const StepIndex<false> rows(v.length, 1, reverse, n);
  if (v.inner == 1) {
    Engine::scan(LeafIo<1, StepIndex<false>, Ts...>{p, rows}, op, n, v.length, kScanName);
    return;
  }
  // inner in 2..ASCAN_CUDA_PACKED_MAX_INNER: a row of inner elements is one scan value.
  const bool packed = [&]<int... K>(std::integer_sequence<int, K...>) {
    const auto run = [&]<int W>(std::integral_constant<int, W>) {
      Engine::scan(LeafIo<W, StepIndex<false>, Ts...>{p, rows}, LanesOp<ElemOp<Fn, Ts...>, E, W>{op}, n, v.length,
                   kScanName);
      return true;
    };
    return ((v.inner == K + 2 && run(std::integral_constant<int, K + 2>{})) || ...);
  }(std::make_integer_sequence<int, (ASCAN_CUDA_PACKED_MAX_INNER > 1 ? ASCAN_CUDA_PACKED_MAX_INNER - 1 : 0)>{});
  if (packed) return;
  Engine::lanes(p, op, v.outer, v.length, v.inner, reverse, kScanName);
}

template <class Fn, class... Ts>
std::tuple<DeviceTensor<Ts>...> scan_tuple(const Fn& f, const std::tuple<const DeviceTensor<Ts>&...>& xs,
                                           int64_t dim, bool reverse) {
  const ScanView v = check_leaves(xs, dim, kScanName);
  const Shape& shape = std::get<0>(xs).shape();
  std::tuple<DeviceTensor<Ts>...> ys{DeviceTensor<Ts>(shape)...};
  if (v.outer * v.length * v.inner == 0) return ys;
  constexpr auto seq = std::index_sequence_for<Ts...>{};
  if (v.length == 1) {  // a copy; no scan machinery for a one-step axis
    [&]<size_t... I>(std::index_sequence<I...>) {
      (copy_on_device(std::get<I>(ys).data(), std::get<I>(xs).data(), std::get<I>(ys).bytes()), ...);
    }(seq);
    return ys;
  }
  if constexpr (sizeof...(Ts) == 1) {
    if (v.inner == 1 && !reverse) {  // contiguous rows in order: CUB's vectorised pointer loads
      const ElemOp<Fn, Ts...> op{f};
      cub_scan_iters(std::get<0>(xs).data(), std::get<0>(ys).data(), op, v.outer * v.length, v.length, kScanName);
      return ys;
    }
  }
  scan_leaves<DeviceEngine>(f, leaf_ptrs(xs, ys, seq), v, reverse);
  return ys;
}

}  // namespace detail

// Returns the scan of dxs (a DeviceTensor or a flat std::tuple of them, e.g. std::tie(a, b))
// along dim: a DeviceTensor, or a std::tuple of DeviceTensors with the leaves' element types.
// Work O(N), one read and one write per element for layouts with inner == 1 or inner > 8
// (inner in 2..8 packs a row into one scan value); one kernel sequence for all rows.
// Throws ascan::Error on a bad dim, leaves of different shapes, or a failed CUDA call.
template <class Combine, class Xs>
auto associative_scan(const Combine& combine, const Xs& dxs, int64_t dim, const ScanOptions& opts = {}) {
  static_assert(!detail::is_generic_combine<Combine>::value,
                "ascan::cuda::associative_scan(): device scans are pointwise only; pass a pointwise "
                "combine (a struct with a templated ASCAN_HD operator() on elements, e.g. one made "
                "with ASCAN_COMBINE), or scan host tensors with ascan::associative_scan for Generic mode.");
  using Tree = detail::DeviceTree<std::decay_t<Xs>>;
  static_assert(Tree::valid,
                "ascan::cuda::associative_scan(): dxs must be an ascan::cuda::DeviceTensor<T> or a flat "
                "std::tuple of them (std::tie(a, b) works); nested tuples are host-only");
  if constexpr (!detail::is_generic_combine<Combine>::value && Tree::valid) {
    using Fn = std::decay_t<decltype(ascan::detail::combine_fn(combine))>;
    const Fn& f = ascan::detail::combine_fn(combine);
    return [&]<class... Ts>(std::tuple<Ts...>*) {
      using User = typename detail::ElemOf<Ts...>::user;
      constexpr bool callable = std::is_invocable_v<const Fn&, User, User>;
      static_assert(callable,
                    "ascan::cuda::associative_scan(): the combine cannot be called with two elements "
                    "(a scalar for one leaf, a std::tuple of scalars for a tuple of leaves). Define it "
                    "with ASCAN_COMBINE(Name, l, r, return ...;) or as a struct with a templated "
                    "ASCAN_HD operator().");
      if constexpr (callable) {
        static_assert(detail::result_converts<std::invoke_result_t<const Fn&, User, User>, Ts...>(),
                      "ascan::cuda::associative_scan(): the combine returns the wrong structure: a "
                      "scalar for one leaf, a std::tuple with one value per leaf for a tuple.");
      }
      return Tree::wrap(detail::scan_tuple<Fn, Ts...>(f, Tree::refs(dxs), dim, opts.reverse));
    }(static_cast<typename Tree::Leaves*>(nullptr));
  }
}

}  // namespace ascan::cuda
