// common.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the Jacobians of a combine on dual
// numbers (detail/element.hpp) as the sweeps call them, the gradients a backward returns (GradOutputs) and the lane counts
// the sweeps share.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ascan/config.hpp"
#include "ascan/ad/vjp/policy.hpp"
#include "ascan/detail/block_transpose.hpp"
#include "ascan/detail/element.hpp"
#include "ascan/detail/log1p_exp.hpp"
#include "ascan/detail/pointwise_scan.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/combine.hpp"
#include "ascan/dual.hpp"
#include "ascan/parallel.hpp"
#include "ascan/scan.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN

// Number of scalars in an element structure.
template <class E> struct elem_size : std::integral_constant<size_t, 1> {};
template <class... Es>
struct elem_size<std::tuple<Es...>> : std::integral_constant<size_t, (size_t{0} + ... + elem_size<Es>::value)> {};

// The element helpers and the dual-number Jacobians are shared with the host scan and the CUDA
// gradients (detail/element.hpp).
using ascan::detail::build_elem;
using ascan::detail::scatter_elem;

template <class Elem, size_t L, class T, class F>
ASCAN_ALWAYS_INLINE void jacobians(const F& f, const std::array<T, L>& left, const std::array<T, L>& right,
                                   std::array<T, L * L>& A, std::array<T, L * L>& B) {
  ascan::detail::dual_jacobians<Elem, L, true>(f, left.data(), right.data(), A.data(), B.data());
}

// A alone: the segment sweep's first pass needs no B.
template <class Elem, size_t L, class T, class F>
ASCAN_ALWAYS_INLINE void left_jacobian(const F& f, const std::array<T, L>& left, const std::array<T, L>& right,
                                       std::array<T, L * L>& A) {
  ascan::detail::dual_jacobians<Elem, L, false>(f, left.data(), right.data(), A.data(), static_cast<T*>(nullptr));
}

template <size_t N, class T>
auto as_tuple(const std::vector<Tensor<T>>& v) {
  return [&]<size_t... I>(std::index_sequence<I...>) { return std::make_tuple(v[I]...); }(std::make_index_sequence<N>{});
}

template <class T, class Tup>
std::vector<Tensor<T>> as_vector(const Tup& t) {
  return std::apply([](const auto&... x) { return std::vector<Tensor<T>>{x...}; }, t);
}

// Where the sweeps put ∂x of each leaf: leaves of the output's shape directly into their
// gradient (in the output layout); leaves constant along the axis summed over the steps (float64
// accumulators for float) into a tensor of the output's shape without the axis; other broadcast
// leaves into a full-shape tensor that is reduced afterwards. Leaves without `need` get nothing.
template <class T, size_t L>
struct GradOutputs {
  enum class Mode { none, direct, summed };
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  std::array<Mode, L> mode{};
  std::vector<Tensor<T>> full;
  int64_t length = 0, step = 1;

  GradOutputs(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
              const std::array<bool, L>& need)
      : full(L), length(plan.length), step(plan.out_t_stride) {
    Shape summed_shape = plan.out_shape;
    summed_shape[plan.axis] = 1;
    for (size_t l = 0; l < L; ++l) {
      if (!need[l]) continue;
      const bool summed = xs[l].shape() != plan.out_shape && plan.leaves[l].t_stride == 0;
      mode[l] = summed ? Mode::summed : Mode::direct;
      full[l] = Tensor<T>::empty(summed ? summed_shape : plan.out_shape);
    }
  }
  // Bytes of the gradients written in the output layout (what a sweep may stream).
  int64_t direct_bytes() const {
    int64_t bytes = 0;
    for (size_t l = 0; l < L; ++l)
      if (mode[l] == Mode::direct) bytes += full[l].numel() * int64_t{sizeof(T)};
    return bytes;
  }
  bool any_summed() const {
    return std::find(mode.begin(), mode.end(), Mode::summed) != mode.end();
  }
  // The summed tensor's offset of an output offset at axis index 0.
  int64_t summed_offset(int64_t out_offset) const {
    return out_offset / (length * step) * step + out_offset % step;
  }
  // ∂x in each leaf's own shape (default tensors where not needed).
  std::vector<Tensor<T>> finish(const std::vector<Tensor<T>>& xs) const {
    std::vector<Tensor<T>> dx(L);
    for (size_t l = 0; l < L; ++l)
      if (mode[l] != Mode::none)
        dx[l] = full[l].shape() == xs[l].shape() ? full[l] : reduce_to(full[l], xs[l].shape());
    return dx;
  }
};


// Lanes per work item of the column sweep, at most: 512 (rows of 2 KiB float per stream walk
// backwards at streaming speed, narrower ones slower), fewer for large L so that the
// per-lane state (g, A_{s+1}, row buffers: about L² + 4L values per lane) stays in a 32 KiB
// stack frame. The state lives on the stack so the compiler sees that the tensors' rows do not
// alias it, and vectorises the lane loops.
template <size_t L, class T>
struct SweepLanes {
  static constexpr int64_t max = std::clamp<int64_t>(int64_t(32768 / (sizeof(T) * (L * L + 4 * L))) / 16 * 16, 16, 512);
};


// Lanes per work item: 16 for runs under ColumnSweepPolicy::min_run_for_wide_items, otherwise up to `max_lanes` of one
// run, fewer when that would leave threads idle. Only the split depends on the thread count;
// every lane's arithmetic does not.
inline int64_t sweep_lanes(int64_t run, int64_t columns, int64_t max_lanes) {
  if (run < ColumnSweepPolicy::min_run_for_wide_items) return std::min(run, ColumnSweepPolicy::padded_lanes);
  int64_t chunks = (run + max_lanes - 1) / max_lanes;
  const int64_t threads = ascan::num_threads();
  if (columns * chunks < threads) chunks = std::min((run + 15) / 16, (threads + columns - 1) / columns);
  const int64_t lanes = (run + chunks - 1) / chunks;
  return std::min(run, (lanes + 15) / 16 * 16);
}

// Copies m < 32 elements with fixed-size moves (a runtime-length loop or memcpy call would cost
// more than the copy).
template <class T>
ASCAN_ALWAYS_INLINE void copy_short(const T* src, T* dst, int64_t m) {
  if (m & 16) { std::memcpy(dst, src, 16 * sizeof(T)); src += 16; dst += 16; }
  if (m & 8) { std::memcpy(dst, src, 8 * sizeof(T)); src += 8; dst += 8; }
  if (m & 4) { std::memcpy(dst, src, 4 * sizeof(T)); src += 4; dst += 4; }
  if (m & 2) { std::memcpy(dst, src, 2 * sizeof(T)); src += 2; dst += 2; }
  if (m & 1) *dst = *src;
}

ASCAN_ISA_END
}  // namespace ascan::ad::detail
