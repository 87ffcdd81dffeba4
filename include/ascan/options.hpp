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

// Batched Generic mode: as Generic, but on the host f is called on batches of slices, each leaf
// with one leading batch dim ([m, slice...]), and must combine the m pairs independently and in the
// same way as it combines single slices: elementwise ops and matmul on matrix slices (rank >= 2) do
// (matmul of two rank-1 slices is a dot product, of their batches a matrix product: not batched).
// The odd/even tree then calls f once per level and thread instead of once per pair, so
// small slices (2x2 matrices) cost their arithmetic, not a Tensor call each. Up to one chunk of
// rows (128 KiB of slices, at least 1024) the association is Generic mode's (equal results,
// bitwise); longer scans fold segments of consecutive rows side by side, one pair per segment in each
// call (about 2 combines per element, as the tree), and their results, like every scan's, do not
// depend on the thread count. Each scan checks its first and last pair of the first batch against f on
// their slices alone (ascan::Error on a mismatch). Under autodiff (ad::associative_scan) f is
// called on single Var slices, as in Generic mode.
template <class F>
struct GenericBatched {
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

template <class F>
GenericBatched<std::decay_t<F>> generic_batched(F&& f) {
  return {std::forward<F>(f)};
}

namespace detail {
template <class F> struct combine_mode { static constexpr bool generic = false, batched = false; };
template <class F> struct combine_mode<Pointwise<F>> { static constexpr bool generic = false, batched = false; };
template <class F> struct combine_mode<Generic<F>> { static constexpr bool generic = true, batched = false; };
template <class F> struct combine_mode<GenericBatched<F>> { static constexpr bool generic = true, batched = true; };

template <class F> const F& combine_fn(const F& f) { return f; }
template <class F> const F& combine_fn(const Pointwise<F>& p) { return p.f; }
template <class F> const F& combine_fn(const Generic<F>& g) { return g.f; }
template <class F> const F& combine_fn(const GenericBatched<F>& g) { return g.f; }
}  // namespace detail

}  // namespace ascan
