// scan_vjp.cuh — ascan::cuda::associative_scan_vjp: the exact adjoint of a device pointwise scan.
//
// The math is the host's (include/ascan/ad/scan_vjp.hpp, docs/design.md §4): per-step L×L Jacobians
// A_t = ∂f/∂left, B_t = ∂f/∂right at (y_{t-1}, x_t), from one call of f on Dual<T, 2L> numbers
// in device code; g_{T-1} = ḡ_{T-1}, g_t = ḡ_t + A_{t+1}ᵀ g_{t+1}; ∂x_t = B_tᵀ g_t, ∂x_0 = g_0.
// The adjoint recurrence is a scan in the opposite direction over affine elements (M, c), with
// M_t = A_{t+1}ᵀ, c_t = ḡ_t. Three engines, all reading only xs, ys and ḡ (no Jacobian arrays):
//  - rows (inner == 1): one scan (CUB, or the span engine for rows of kMinSpanSegment steps and
//    coupled leaves), (M, c) built by the load and ∂x_t = B_tᵀ g_t written by the store;
//  - many lanes (inner > 1, >= 2^18 lanes): one thread per lane sweeps the axis backwards;
//  - fewer lanes: the forward's lane engine (chunked, coalesced) over the same affine elements.
#pragma once

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ascan/cuda/device_tensor.cuh"
#include "ascan/cuda/scan.cuh"
#include "ascan/cuda/scan_kernels.cuh"
#include "ascan/detail/element.hpp"
#include "ascan/dual.hpp"
#include "ascan/options.hpp"

namespace ascan::cuda {
namespace detail {

inline constexpr const char* kVjpName = "ascan::cuda::associative_scan_vjp()";

// A (∂out/∂left) and B (∂out/∂right) at one element, row-major [out leaf][in leaf]: the host's
// Jacobians (detail/element.hpp) on the flat element the device combine sees.
template <size_t L, class Fn, class T>
ASCAN_HD void jacobians(const Fn& f, const T* left, const T* right, T* A, T* B) {
  ascan::detail::dual_jacobians<ascan::detail::flat_elem_t<T, L>, L, true>(f, left, right, A, B);
}

template <class T, size_t L>
struct VjpPtrs {
  const T* x[L];
  const T* y[L];
  const T* g[L];
  T* dx[L];
};

// One step of the adjoint at element `at` (not the first scan step): the Jacobians at
// (y[prev], x[at]), ∂x = B_sᵀ g written to dx, and A_s returned for the step before.
template <size_t L, class Fn, class T>
ASCAN_HD void adjoint_step(const Fn& f, const VjpPtrs<T, L>& p, int64_t at, int64_t prev, const T* g, T* A) {
  T left[L], right[L], B[L * L];
  for (size_t l = 0; l < L; ++l) {
    left[l] = p.y[l][prev];
    right[l] = p.x[l][at];
  }
  jacobians<L>(f, left, right, A, B);
  for (size_t m = 0; m < L; ++m) {
    T acc = T(0);
    for (size_t k = 0; k < L; ++k) acc += B[k * L + m] * g[k];
    p.dx[m][at] = acc;
  }
}

// ∂x at element `at` given g there: B_sᵀ g with B_s at (y[prev], x[at]), or g itself at the first
// scan step (prev < 0).
template <size_t L, class Fn, class T>
ASCAN_HD void write_dx(const Fn& f, const VjpPtrs<T, L>& p, int64_t at, int64_t prev, const T* g) {
  if (prev < 0) {
    for (size_t l = 0; l < L; ++l) p.dx[l][at] = g[l];
    return;
  }
  T A[L * L];
  adjoint_step<L>(f, p, at, prev, g, A);
}

// One lane, backwards along the scan axis; A_{s+1} is carried in registers. (An ASCAN_HD body so
// tests can run it on the host.)
template <size_t L, class Fn, class T>
ASCAN_HD void vjp_sweep_lane(const Fn& f, const VjpPtrs<T, L>& p, const LaneLayout& lay, int64_t lane) {
  T g[L] = {}, a_next[L * L] = {};
  for (int64_t s = lay.length - 1; s >= 0; --s) {
    const int64_t at = lay.at(lane, s);
    T old[L];
    for (size_t l = 0; l < L; ++l) old[l] = g[l];
    for (size_t l = 0; l < L; ++l) {
      T acc = p.g[l][at];
      if (s + 1 < lay.length)
        for (size_t k = 0; k < L; ++k) acc += a_next[k * L + l] * old[k];
      g[l] = acc;
    }
    if (s == 0) {
      for (size_t l = 0; l < L; ++l) p.dx[l][at] = g[l];
      break;
    }
    adjoint_step<L>(f, p, at, lay.at(lane, s - 1), g, a_next);  // g is done with the old A
  }
}

template <size_t L, class Fn, class T>
struct SweepLane {
  Fn f;
  VjpPtrs<T, L> p;
  LaneLayout lay;
  ASCAN_HD void operator()(int64_t lane) const { vjp_sweep_lane<L>(f, p, lay, lane); }
};

// The adjoint scan's value: the affine map g -> M g + c, M row-major.
template <class T, size_t L>
struct Affine {
  T m[L * L];
  T c[L];
};

// (M, c) ⊕ (M', c') = (M'·M, c' + M'·c): accumulated on the left, as every scan here.
template <class T, size_t L>
struct AffineOp {
  ASCAN_HD Affine<T, L> operator()(const Affine<T, L>& a, const Affine<T, L>& b) const {
    Affine<T, L> r;
    for (size_t i = 0; i < L; ++i) {
      for (size_t j = 0; j < L; ++j) {
        T acc = T(0);
        for (size_t k = 0; k < L; ++k) acc += b.m[i * L + k] * a.m[k * L + j];
        r.m[i * L + j] = acc;
      }
      T acc = b.c[i];
      for (size_t k = 0; k < L; ++k) acc += b.m[i * L + k] * a.c[k];
      r.c[i] = acc;
    }
    return r;
  }
};

// The adjoint scan's element at `at`: (A_{s+1}ᵀ, ḡ_s), A_{s+1} at (y[at], x[next]); M = 0 at the
// last scan step (next < 0), whose M never multiplies anything.
template <size_t L, class Fn, class T>
ASCAN_HD Affine<T, L> adjoint_elem(const Fn& f, const VjpPtrs<T, L>& p, int64_t at, int64_t next) {
  Affine<T, L> e;
  for (size_t l = 0; l < L; ++l) e.c[l] = p.g[l][at];
  if (next < 0) {
    for (size_t q = 0; q < L * L; ++q) e.m[q] = T(0);
    return e;
  }
  T left[L], right[L], A[L * L], B[L * L];
  for (size_t l = 0; l < L; ++l) {
    left[l] = p.y[l][at];
    right[l] = p.x[l][next];
  }
  jacobians<L>(f, left, right, A, B);
  for (size_t i = 0; i < L; ++i)
    for (size_t j = 0; j < L; ++j) e.m[i * L + j] = A[j * L + i];
  return e;
}

// Row engine (CUB or spans): position k of the adjoint scan is scan step s = T-1-u of lane k / T (u = k % T);
// loads build (A_{s+1}ᵀ, ḡ_s), stores turn g_s into ∂x_s.
template <size_t L, class Fn, class T>
struct AdjointIo {
  static constexpr bool kSpanEngine = L >= 2;  // see span_engine_pays
  Fn f;
  VjpPtrs<T, L> p;
  LaneLayout lay;
  Divider by_length;  // k -> lane
  ASCAN_HD Affine<T, L> operator()(int64_t k) const {
    const int64_t lane = by_length(k), s = lay.length - 1 - (k - lane * lay.length);
    return adjoint_elem<L>(f, p, lay.at(lane, s), s + 1 < lay.length ? lay.at(lane, s + 1) : -1);
  }
  ASCAN_HD void operator()(int64_t k, const Affine<T, L>& e) const {
    const int64_t lane = by_length(k), s = lay.length - 1 - (k - lane * lay.length);
    write_dx<L>(f, p, lay.at(lane, s), s > 0 ? lay.at(lane, s - 1) : -1, e.c);
  }
};

// Lane engine (scan run with the opposite direction over the same [outer, T, inner] view): loads
// and stores by element offset, the scan step recovered from it; neighbours are one row away.
template <size_t L, class Fn, class T>
struct AdjointLanes {
  using E = Affine<T, L>;
  Fn f;
  VjpPtrs<T, L> p;
  int64_t length, inner;
  bool reverse;  // of the forward scan
  Divider by_inner, by_length;
  AdjointLanes(const Fn& f_, const VjpPtrs<T, L>& p_, const ScanView& v, bool reverse_)
      : f(f_), p(p_), length(v.length), inner(v.inner), reverse(reverse_),
        by_inner(v.inner, v.outer * v.length * v.inner), by_length(v.length, v.outer * v.length) {}
  ASCAN_HD int64_t step_of(int64_t at) const {
    const int64_t row = by_inner(at);  // o * length + t
    const int64_t t = row - by_length(row) * length;
    return reverse ? length - 1 - t : t;
  }
  ASCAN_HD int64_t to_next() const { return reverse ? -inner : inner; }  // offset of step s + 1
  ASCAN_HD E load(int64_t at) const {
    return adjoint_elem<L>(f, p, at, step_of(at) + 1 < length ? at + to_next() : -1);
  }
  ASCAN_HD void store(int64_t at, const E& e) const {
    write_dx<L>(f, p, at, step_of(at) > 0 ? at - to_next() : -1, e.c);
  }
};

// Lanes from which one pass of the sweep (one thread per lane) fills the GPU; fewer lanes take
// the chunked lane engine (which reads the input twice) over the adjoint's affine elements.
inline constexpr int64_t kMinLanesForSweep = int64_t{1} << 18;

// Engine choice for the gradient of an [outer, T, inner] view (T >= 1): rows (inner == 1) by the
// row adjoint scan (Engine::scan: CUB or spans), coalesced lanes by the sweep or the lane engine.
template <class Engine, size_t L, class Fn, class T>
void vjp_leaves(const Fn& f, const VjpPtrs<T, L>& p, const ScanView& v, bool reverse) {
  const LaneLayout lay(v.outer, v.length, v.inner, reverse);
  const int64_t n = lay.lanes() * v.length;
  if (v.inner == 1)
    Engine::scan(AdjointIo<L, Fn, T>{f, p, lay, Divider(v.length, n)}, AffineOp<T, L>{}, n, v.length, kVjpName);
  else if (lay.lanes() >= kMinLanesForSweep)
    Engine::for_each_index(SweepLane<L, Fn, T>{f, p, lay}, lay.lanes());
  else
    Engine::lanes(AdjointLanes<L, Fn, T>(f, p, v, reverse), AffineOp<T, L>{}, v.outer, v.length, v.inner, !reverse,
                  kVjpName);
}

template <class... R>
void check_like(const std::tuple<const R&...>& leaves, const Shape& shape, const char* arg) {
  size_t k = 0;
  std::apply([&](const auto&... t) {
    ((t.shape() == shape ? void(++k)
                         : ascan::detail::raise("{}: {} leaf {} has shape {}, expected {} (the shape of dxs)",
                                                kVjpName, arg, k, format_shape(t.shape()), format_shape(shape))),
     ...);
  }, leaves);
}

template <class Fn, class T, size_t... I, class Refs>
auto vjp_tuple(const Fn& f, const Refs& xs, const Refs& ys, const Refs& gs, int64_t dim, bool reverse,
               std::index_sequence<I...>) {
  constexpr size_t L = sizeof...(I);
  const ScanView v = check_leaves(xs, dim, kVjpName);
  const Shape& shape = std::get<0>(xs).shape();
  check_like(ys, shape, "dys");
  check_like(gs, shape, "dgys");
  std::tuple<DeviceTensor<std::conditional_t<true, T, decltype(I)>>...> dx{
      DeviceTensor<std::conditional_t<true, T, decltype(I)>>(shape)...};
  if (v.outer * v.length * v.inner == 0) return dx;
  VjpPtrs<T, L> p{{std::get<I>(xs).data()...}, {std::get<I>(ys).data()...}, {std::get<I>(gs).data()...},
                  {std::get<I>(dx).data()...}};
  vjp_leaves<DeviceEngine>(f, p, v, reverse);
  return dx;
}

}  // namespace detail

// Gradients of a device pointwise scan: given xs (dxs), the forward result ys (dys) of
// associative_scan(f, dxs, dim, opts) and upstream gradients ḡ (dgys), all of one shape and one
// floating type, returns ∂ℓ/∂xs with the structure of dxs. Exact for any ḡ, coupled leaves
// included (the full L×L Jacobians, never a sum of per-leaf VJPs). Work O(N L²); reads xs, ys, ḡ
// once (twice for the neighbours in the row engine; the span engine reads rows of
// kMinSpanSegment steps once more for its span totals) and writes the gradients once.
// Throws ascan::Error on a bad dim or any leaf whose shape differs from dxs's leaf 0.
template <class Combine, class Xs, class Ys, class Gs>
auto associative_scan_vjp(const Combine& combine, const Xs& dxs, const Ys& dys, const Gs& dgys, int64_t dim,
                          const ScanOptions& opts = {}) {
  static_assert(!detail::is_generic_combine<Combine>::value,
                "ascan::cuda::associative_scan_vjp(): device scans are pointwise only; pass a pointwise "
                "combine (a struct with a templated ASCAN_HD operator() on elements).");
  using Tree = detail::DeviceTree<std::decay_t<Xs>>;
  using YTree = detail::DeviceTree<std::decay_t<Ys>>;
  using GTree = detail::DeviceTree<std::decay_t<Gs>>;
  static_assert(Tree::valid && std::is_same_v<typename Tree::Leaves, typename YTree::Leaves> &&
                    std::is_same_v<typename Tree::Leaves, typename GTree::Leaves>,
                "ascan::cuda::associative_scan_vjp(): dxs, dys and dgys must have one structure (a "
                "DeviceTensor or a flat std::tuple of them) with the same element types");
  if constexpr (!detail::is_generic_combine<Combine>::value && Tree::valid) {
    using Fn = std::decay_t<decltype(ascan::detail::combine_fn(combine))>;
    const Fn& f = ascan::detail::combine_fn(combine);
    return [&]<class T0, class... Ts>(std::tuple<T0, Ts...>*) {
      static_assert(std::is_floating_point_v<T0> && (std::is_same_v<T0, Ts> && ...),
                    "ascan::cuda::associative_scan_vjp(): every leaf must have one floating type "
                    "(float or double)");
      constexpr auto seq = std::make_index_sequence<1 + sizeof...(Ts)>{};
      return Tree::wrap(
          detail::vjp_tuple<Fn, T0>(f, Tree::refs(dxs), YTree::refs(dys), GTree::refs(dgys), dim, opts.reverse, seq));
    }(static_cast<typename Tree::Leaves*>(nullptr));
  }
}

}  // namespace ascan::cuda
