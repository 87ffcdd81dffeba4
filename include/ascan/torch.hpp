// torch.hpp — ascan's scans as differentiable ops on torch::Tensor (the LibTorch bridge).
//
//   #include <ascan/torch.hpp>                                  // link ascan::torch
//   at::Tensor y = ascan::torch::associative_scan(ascan::add, x, 1);
//   auto [a, h] = ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{decay, input}, 1);
//   std::vector<at::Tensor> ys = ascan::torch::associative_scan<2>(Affine{}, std::vector{a, b}, -1, {.reverse = true});
//
// f is a pointwise combine, as ascan::associative_scan takes it (builtins, generic lambdas,
// ASCAN_COMBINE structs). The results take part in torch autograd: their backward is ascan's exact
// vector-Jacobian product (ascan::associative_scan_vjp), every leaf's gradient in its own shape
// (broadcast leaves summed back). Double backward (create_graph=True through the scan) is
// refused with a c10::Error.
//
// What runs where: CPU tensors run ascan's host kernels on the tensors' own memory (contiguous
// float32/float64/int32/int64 inputs are read in place; others are made contiguous once, a copy
// torch counts); results are torch tensors over ascan's buffers, without a copy. The host scans
// use torch's intra-op thread count (at::get_num_threads(): each call sizes ascan's pool to it)
// and flush subnormals as ascan::set_flush_denormals says (on by default, unlike torch's CPU
// ops). CUDA tensors are refused with a c10::Error (the device path is not part of this header
// yet). Integer dtypes run forward only (torch gives them no gradients).
//
// Errors: every bad input (leaves on different devices or of different dtypes, an unsupported
// dtype, shapes that do not broadcast, dim out of range, an undefined tensor) is a c10::Error
// (Python sees a RuntimeError) whose message starts with "ascan::torch::associative_scan()", names
// the argument, what was found and what was expected.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ascan/error.hpp"
#include "ascan/options.hpp"
#include "ascan/parallel.hpp"
#include "ascan/scan.hpp"
#include "ascan/tensor.hpp"
#include "ascan/vjp.hpp"

namespace ascan::torch {

struct Options {
  bool reverse = false;  // as ascan::ScanOptions: the suffix on the left
};

namespace detail {

inline constexpr const char* kName = "ascan::torch::associative_scan()";

// A c10::Error with this message (TORCH_CHECK's, which adds where it was raised).
[[noreturn]] void fail(const std::string& message);
// An ascan::Error from the host scan, re-raised as a c10::Error under the bridge's name.
[[noreturn]] void fail_from(const ascan::Error& e);
// The checks that need no scan: a defined tensor per leaf, one device, one supported dtype.
// Shapes and dim are checked by ascan's plan (its errors re-raised under kName).
void check_leaves(const std::vector<at::Tensor>& xs);
// Sizes ascan's thread pool to torch's intra-op thread count.
void follow_torch_threads();

template <class T> constexpr at::ScalarType scalar_type();
template <> constexpr at::ScalarType scalar_type<float>() { return at::kFloat; }
template <> constexpr at::ScalarType scalar_type<double>() { return at::kDouble; }
template <> constexpr at::ScalarType scalar_type<int32_t>() { return at::kInt; }
template <> constexpr at::ScalarType scalar_type<int64_t>() { return at::kLong; }

// ascan's view of a contiguous CPU tensor's elements (no copy; it keeps the tensor's storage
// alive). Aliasing checks see torch's storage as the owner.
template <class T>
ascan::Tensor<T> view_of(const at::Tensor& t) {
  const Shape shape(t.sizes().begin(), t.sizes().end());
  at::Tensor keep = t;
  const void* identity = t.storage().data();
  return ascan::Tensor<T>::external(t.data_ptr<T>(), shape, [keep]() mutable noexcept { keep.reset(); }, identity);
}

// A torch tensor over an ascan result (no copy; it keeps ascan's buffer alive).
template <class T>
at::Tensor as_torch(const ascan::Tensor<T>& t) {
  const std::vector<int64_t> sizes(t.shape().begin(), t.shape().end());
  // The deleter's copy of the handle keeps the buffer: it goes with the deleter, whether torch's
  // storage dies or from_blob throws.
  auto keep = std::make_shared<ascan::Tensor<T>>(t);
  T* data = keep->data();
  return ::torch::from_blob(data, sizes, [keep](void*) {}, at::TensorOptions().dtype(scalar_type<T>()).device(at::kCPU));
}

template <class T, size_t L>
using Leaves = std::conditional_t<L == 1, ascan::Tensor<T>, decltype(std::tuple_cat(std::array<ascan::Tensor<T>, L>{}))>;

template <class T, size_t L>
Leaves<T, L> to_leaves(const std::vector<ascan::Tensor<T>>& v) {
  if constexpr (L == 1) {
    return v[0];
  } else {
    return [&]<size_t... I>(std::index_sequence<I...>) { return Leaves<T, L>{v[I]...}; }(std::make_index_sequence<L>{});
  }
}

template <class T, size_t L>
std::vector<at::Tensor> from_leaves(const Leaves<T, L>& leaves) {
  if constexpr (L == 1) {
    return {as_torch(leaves)};
  } else {
    return std::apply([](const auto&... t) { return std::vector<at::Tensor>{as_torch(t)...}; }, leaves);
  }
}

// Views of the leaves (contiguous first; undefined tensors, zero gradients, as empty tensors).
template <class T>
std::vector<ascan::Tensor<T>> views(const std::vector<at::Tensor>& ts) {
  std::vector<ascan::Tensor<T>> out;
  out.reserve(ts.size());
  for (const at::Tensor& t : ts) out.push_back(t.defined() ? view_of<T>(t.contiguous()) : ascan::Tensor<T>());
  return out;
}

// The host scan of leaves of element type T, as torch tensors.
template <class T, size_t L, class F>
std::vector<at::Tensor> scan_host(const F& f, const std::vector<at::Tensor>& xs, int64_t dim, bool reverse) {
  follow_torch_threads();
  try {
    const auto ys = ascan::associative_scan(ascan::pointwise(f), to_leaves<T, L>(views<T>(xs)), dim, {.reverse = reverse});
    return from_leaves<T, L>(ys);
  } catch (const ascan::Error& e) {
    fail_from(e);
  }
}

template <class T, size_t L, class F>
std::vector<at::Tensor> scan_vjp_host(const F& f, const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& ys,
                                      const std::vector<at::Tensor>& gys, int64_t dim, bool reverse) {
  follow_torch_threads();
  try {
    const auto dx = ascan::associative_scan_vjp(ascan::pointwise(f), to_leaves<T, L>(views<T>(xs)),
                                                to_leaves<T, L>(views<T>(ys)), to_leaves<T, L>(views<T>(gys)), dim,
                                                {.reverse = reverse});
    return from_leaves<T, L>(dx);
  } catch (const ascan::Error& e) {
    fail_from(e);
  }
}

// The combine, kept by the autograd node for its backward.
template <class F>
struct CombineHolder : ::torch::CustomClassHolder {
  explicit CombineHolder(const F& fn) : f(fn) {}
  F f;
};

// The differentiable scan of L floating leaves (torch::autograd::Function: forward and backward).
template <class F, size_t L>
struct ScanFunction : ::torch::autograd::Function<ScanFunction<F, L>> {
  static ::torch::autograd::variable_list forward(::torch::autograd::AutogradContext* ctx, at::TensorList xs,
                                                  int64_t dim, bool reverse, const F& f) {
    // Contiguous once: the backward reads the same copies (and a non-contiguous leaf is not
    // copied again there).
    std::vector<at::Tensor> in;
    for (const at::Tensor& x : xs) in.push_back(x.contiguous());
    std::vector<at::Tensor> ys = xs[0].scalar_type() == at::kFloat ? scan_host<float, L>(f, in, dim, reverse)
                                                                   : scan_host<double, L>(f, in, dim, reverse);
    std::vector<at::Tensor> saved = in;
    saved.insert(saved.end(), ys.begin(), ys.end());
    ctx->save_for_backward(saved);
    // Outputs without a gradient stay undefined in backward (zeros would cost a stream, and they
    // would turn the linear recurrence's closed-form adjoint into the general one).
    ctx->set_materialize_grads(false);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["combine"] = c10::IValue::make_capsule(c10::make_intrusive<CombineHolder<F>>(f));
    return ys;
  }

  static ::torch::autograd::variable_list backward(::torch::autograd::AutogradContext* ctx,
                                                   ::torch::autograd::variable_list grads) {
    if (at::GradMode::is_enabled())
      fail(std::string(kName) + ": backward was called with create_graph=True, expected a first-order backward: "
           "the scan's gradient is not differentiable again (double backward is not supported)");
    const auto saved = ctx->get_saved_variables();
    const std::vector<at::Tensor> xs(saved.begin(), saved.begin() + L), ys(saved.begin() + L, saved.end());
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto holder = ctx->saved_data["combine"].toCapsule();
    const F& f = static_cast<const CombineHolder<F>*>(holder.get())->f;
    std::vector<at::Tensor> g(grads.begin(), grads.end());
    std::vector<at::Tensor> dx = xs[0].scalar_type() == at::kFloat ? scan_vjp_host<float, L>(f, xs, ys, g, dim, reverse)
                                                                   : scan_vjp_host<double, L>(f, xs, ys, g, dim, reverse);
    for (size_t l = 0; l < L; ++l)
      if (!ctx->needs_input_grad(l)) dx[l] = at::Tensor();
    dx.resize(L + 3);  // dim, reverse and f get no gradient
    return dx;
  }
};

template <size_t L, class Combine>
std::vector<at::Tensor> scan_leaves(const Combine& combine, const std::vector<at::Tensor>& xs, int64_t dim,
                                    const Options& opts) {
  static_assert(!ascan::detail::combine_mode<Combine>::generic,
                "ascan::torch::associative_scan(): pointwise combines only (a combine on elements, as "
                "ascan::associative_scan takes it); Generic mode does not apply to torch tensors");
  using F = std::decay_t<decltype(ascan::detail::combine_fn(combine))>;
  const F& f = ascan::detail::combine_fn(combine);
  if (xs.size() != L)
    fail(std::string(kName) + ": xs has " + std::to_string(xs.size()) + " tensors, expected " + std::to_string(L) +
         " (the leaf count the call was compiled for)");
  check_leaves(xs);
  switch (xs[0].scalar_type()) {
    case at::kInt: return scan_host<int32_t, L>(f, xs, dim, opts.reverse);
    case at::kLong: return scan_host<int64_t, L>(f, xs, dim, opts.reverse);
    default: break;
  }
  bool any_grad = false;
  for (const auto& x : xs) any_grad = any_grad || x.requires_grad();
  if (!any_grad || !at::GradMode::is_enabled())
    return xs[0].scalar_type() == at::kFloat ? scan_host<float, L>(f, xs, dim, opts.reverse)
                                             : scan_host<double, L>(f, xs, dim, opts.reverse);
  return ScanFunction<F, L>::apply(at::TensorList(xs), dim, opts.reverse, f);
}

}  // namespace detail

// The scan of one tensor along dim (negative counts from the end).
template <class Combine>
at::Tensor associative_scan(const Combine& f, const at::Tensor& x, int64_t dim, const Options& opts = {}) {
  return detail::scan_leaves<1>(f, {x}, dim, opts)[0];
}

// The scan of a tuple of tensors (leaves broadcast to one shape): f takes and returns a std::tuple
// of scalars, one per leaf; returns one tensor per leaf, each of the broadcast shape.
template <class Combine, class... Ts>
  requires(sizeof...(Ts) > 0 && (std::is_convertible_v<const Ts&, const at::Tensor&> && ...))
std::tuple<std::conditional_t<true, at::Tensor, Ts>...> associative_scan(const Combine& f, const std::tuple<Ts...>& xs,
                                                                          int64_t dim, const Options& opts = {}) {
  constexpr size_t L = sizeof...(Ts);
  const std::vector<at::Tensor> leaves = std::apply([](const auto&... t) { return std::vector<at::Tensor>{t...}; }, xs);
  const std::vector<at::Tensor> ys = detail::scan_leaves<L>(f, leaves, dim, opts);
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<std::conditional_t<true, at::Tensor, Ts>...>{ys[I]...};
  }(std::make_index_sequence<L>{});
}

// The same for a run-time list: L, the number of leaves f combines, is a template argument
// (associative_scan<2>(f, {a, b}, dim)); a list of another length is a c10::Error.
template <size_t L, class Combine>
std::vector<at::Tensor> associative_scan(const Combine& f, const std::vector<at::Tensor>& xs, int64_t dim,
                                         const Options& opts = {}) {
  static_assert(L > 0, "ascan::torch::associative_scan<L>(): L must be at least 1");
  return detail::scan_leaves<L>(f, xs, dim, opts);
}

}  // namespace ascan::torch
