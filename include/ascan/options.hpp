// options.hpp — ScanOptions and the combine-mode wrappers (pointwise / generic).
#pragma once

#include <type_traits>
#include <utility>

namespace ascan {

struct ScanOptions {
  // false: y_t = f(y_{t-1}, x_t) (prefix). true: y_t = f(y_{t+1}, x_t) (suffix on the left).
  bool reverse = false;
};

// Pointwise mode (the default for a plain callable): f is called on elements — a scalar for a
// single tensor, a std::tuple of scalars for a tuple of tensors (nested tuples mirror nested
// inputs). Leaves broadcast to a common shape.
template <class F>
struct Pointwise {
  F f;
};

// Generic mode: f is called on slices (each leaf with the scan dim removed), as Tensor<T> on
// the host and as ad::Var<T> under autodiff. Leaves may have different shapes.
template <class F>
struct Generic {
  F f;
};

template <class F>
Pointwise<std::decay_t<F>> pointwise(F&& f) {
  return {std::forward<F>(f)};
}

template <class F>
Generic<std::decay_t<F>> generic(F&& f) {
  return {std::forward<F>(f)};
}

namespace detail {
template <class F> struct combine_mode { using type = Pointwise<F>; static constexpr bool generic = false; };
template <class F> struct combine_mode<Pointwise<F>> { using type = Pointwise<F>; static constexpr bool generic = false; };
template <class F> struct combine_mode<Generic<F>> { using type = Generic<F>; static constexpr bool generic = true; };

template <class F> const F& combine_fn(const F& f) { return f; }
template <class F> const F& combine_fn(const Pointwise<F>& p) { return p.f; }
template <class F> const F& combine_fn(const Generic<F>& g) { return g.f; }
}  // namespace detail

}  // namespace ascan
