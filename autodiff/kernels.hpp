// kernels.hpp — Tensor helpers for the autodiff ops (internal to the compiled autodiff layer).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "ascan/ad/var.hpp"
#include "ascan/config.hpp"
#include "ascan/detail/elementary.hpp"
#include "ascan/parallel.hpp"
#include "ascan/error.hpp"
#include "ascan/shape.hpp"
#include "ascan/tensor.hpp"
#include "ascan/tensor_ops.hpp"

namespace ascan::ad::kernels {

// Elements per task: below this an op runs on the calling thread (waking the pool costs more).
inline constexpr int64_t kGrain = int64_t{1} << 15;

// Elementwise work splits anywhere on the pool, so its results never depend on the thread count.
using ascan::detail::parallel_elements;

template <class T, class Fn>
Tensor<T> map(const Tensor<T>& a, Fn fn) {
  auto out = Tensor<T>::empty(a.shape());
  const T* ASCAN_RESTRICT pa = a.data();
  T* ASCAN_RESTRICT po = out.data();
  parallel_elements(a.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = fn(pa[i]);
  });
  return out;
}

// Same-shape elementwise zip.
template <class T, class Fn>
Tensor<T> zip(const Tensor<T>& a, const Tensor<T>& b, Fn fn) {
  ASCAN_ASSERT(a.shape() == b.shape());
  auto out = Tensor<T>::empty(a.shape());
  const T* ASCAN_RESTRICT pa = a.data();
  const T* ASCAN_RESTRICT pb = b.data();
  T* ASCAN_RESTRICT po = out.data();
  parallel_elements(a.numel(), kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = fn(pa[i], pb[i]);
  });
  return out;
}

template <class T, class Fn>
Tensor<T> zip3(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, Fn fn) {
  ASCAN_ASSERT(a.shape() == b.shape() && a.shape() == c.shape());
  auto out = Tensor<T>::empty(a.shape());
  const T* ASCAN_RESTRICT pa = a.data();
  const T* ASCAN_RESTRICT pb = b.data();
  const T* ASCAN_RESTRICT pc = c.data();
  T* ASCAN_RESTRICT po = out.data();
  parallel_elements(a.numel(), kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = fn(pa[i], pb[i], pc[i]);
  });
  return out;
}

template <class T>
Tensor<T> fill(const Shape& shape, T value) {
  auto out = Tensor<T>::empty(shape);
  T* po = out.data();
  parallel_elements(out.numel(), kGrain, [&](int64_t b, int64_t e) { std::fill(po + b, po + e, value); });
  return out;
}

using ascan::detail::broadcast_strides;

// out = fn(a, b) with NumPy broadcasting, in parallel over rows of the result's last dim; each
// row's inner loop is specialised on which operand advances (so it vectorises).
template <class T, class Fn>
Tensor<T> broadcast_zip_to(const Tensor<T>& a, const Tensor<T>& b, const Shape& shape, Fn fn) {
  auto out = Tensor<T>::empty(shape);
  const T* pa = a.data();
  const T* pb = b.data();
  T* po = out.data();
  const int64_t n = out.numel();
  if (n == 0) return out;
  if (shape.empty() || (a.numel() == 1 && b.numel() == 1)) {
    const T v = fn(pa[0], pb[0]);
    parallel_elements(n, kGrain, [&](int64_t s, int64_t e) { std::fill(po + s, po + e, v); });
    return out;
  }
  if (b.numel() == 1 && a.numel() == n) {
    const T sb = pb[0];
    parallel_elements(n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = fn(pa[i], sb);
    });
    return out;
  }
  if (a.numel() == 1 && b.numel() == n) {
    const T sa = pa[0];
    parallel_elements(n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = fn(sa, pb[i]);
    });
    return out;
  }
  const Shape sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
  const size_t rank = shape.size();
  const int64_t len = shape[rank - 1], rows = n / len;
  const int64_t da = sa[rank - 1], db = sb[rank - 1];
  parallel_elements(rows, std::max<int64_t>(1, kGrain / len), [&](int64_t r0, int64_t r1) {
    // The operands' offsets of row r0, then an odometer over the leading dims.
    std::vector<int64_t> idx(rank, 0);
    int64_t oa = 0, ob = 0;
    for (int64_t r = r0, d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
      idx[d] = r % shape[d];
      r /= shape[d];
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* ASCAN_RESTRICT ra = pa + oa;
      const T* ASCAN_RESTRICT rb = pb + ob;
      T* ASCAN_RESTRICT ro = po + r * len;
      if (da && db) {
        for (int64_t k = 0; k < len; ++k) ro[k] = fn(ra[k], rb[k]);
      } else if (da) {
        const T vb = rb[0];
        for (int64_t k = 0; k < len; ++k) ro[k] = fn(ra[k], vb);
      } else if (db) {
        const T va = ra[0];
        for (int64_t k = 0; k < len; ++k) ro[k] = fn(va, rb[k]);
      } else {
        const T v = fn(ra[0], rb[0]);
        for (int64_t k = 0; k < len; ++k) ro[k] = v;
      }
      for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
        if (++idx[d] < shape[d]) {
          oa += sa[d];
          ob += sb[d];
          break;
        }
        oa -= sa[d] * (shape[d] - 1);
        ob -= sb[d] * (shape[d] - 1);
        idx[d] = 0;
      }
    }
  });
  return out;
}

template <class T, class Fn>
Tensor<T> broadcast_zip(const Tensor<T>& a, const Tensor<T>& b, const char* where, Fn fn) {
  if (a.shape() == b.shape()) return zip(a, b, fn);
  return broadcast_zip_to(a, b, broadcast_shapes(a.shape(), b.shape(), where), fn);
}

// Materialises `a` broadcast to `shape` (which must contain it).
template <class T>
Tensor<T> broadcast_to(const Tensor<T>& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  return broadcast_zip_to(a, a, shape, [](T x, T) { return x; });
}

// out[o, i] = sum over t of a[o, t, i] (ascan::detail::reduce_middle: parallel, in an order
// fixed by the shape).
using ascan::detail::reduce_middle;

using ascan::reduce_to;

// Dot products in a fixed order: 32 interleaved partial sums (several vector operations in
// flight), then pairwise; or one after another along a stride.
template <class T>
T dot_run(const T* ASCAN_RESTRICT a, const T* ASCAN_RESTRICT b, int64_t n) {
  constexpr int kAcc = 32;
  T acc[kAcc] = {};
  int64_t i = 0;
  for (; i + kAcc <= n; i += kAcc)
    for (int j = 0; j < kAcc; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = kAcc / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
template <class T>
T dot_strided(const T* a, const T* b, int64_t stride, int64_t n) {
  T acc = T(0);
  for (int64_t t = 0; t < n; ++t) acc += a[t] * b[t * stride];
  return acc;
}

// reduce_to(g * other, shape) without the full-size product, where g has the broadcast shape of
// both and `shape` reduces one group of its dims: out[o, i] = sum over t of g[o, t, i] *
// other[o, t, i] on the [outer, length, inner] view, in an order fixed per output (dot_run, or t
// in order), so the result depends on the shapes only. Runs in parallel over o; returns nothing (the caller
// takes the unfused path) when there are too few o to share out or when other's elements are not
// at one stride along t and along i.
template <class T>
std::optional<Tensor<T>> mul_reduce_to(const Tensor<T>& g, const Tensor<T>& other, const Shape& shape) {
  const Shape& full = g.shape();
  const size_t rank = full.size();
  if (shape.size() > rank || other.shape().size() > rank) return std::nullopt;
  const ascan::detail::ReduceView v = ascan::detail::reduce_view(full, shape);
  if (v.first < 0 || !v.partial.empty()) return std::nullopt;  // nothing to reduce, or two groups
  const int64_t first = v.first, last = v.last, outer = v.outer, length = v.length, inner = v.inner;
  const Shape so = broadcast_strides(other.shape(), full);
  // other's stride over a group of dims, when one stride walks it (-1 otherwise).
  const auto group_stride = [&](int64_t d0, int64_t d1) -> int64_t {
    int64_t stride = -1, expect = -1;
    for (int64_t d = d1; d >= d0; --d) {
      if (full[d] == 1) continue;
      if (stride < 0) {
        stride = so[d];
      } else if (so[d] != expect) {
        return -1;
      }
      expect = so[d] == 0 ? 0 : so[d] * full[d];
      if (stride == 0 && so[d] != 0) return -1;
    }
    return stride < 0 ? 0 : stride;
  };
  const int64_t st = group_stride(first, last);
  const int64_t si = group_stride(last + 1, static_cast<int64_t>(rank) - 1);
  if (st < 0 || si < 0 || outer < 64) return std::nullopt;
  auto out = Tensor<T>::empty(shape);
  const T* pg = g.data();
  const T* po = other.data();
  T* pout = out.data();
  parallel_elements(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, length * inner)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t base = 0;  // other's offset of (o, 0, 0)
      for (int64_t d = first - 1, r = o; d >= 0; --d) {
        base += (r % full[d]) * so[d];
        r /= full[d];
      }
      const T* gr = pg + o * length * inner;
      T* dst = pout + o * inner;
      if (inner == 1) {
        dst[0] = st == 1 ? dot_run(gr, po + base, length) : dot_strided(gr, po + base, st, length);
        continue;
      }
      for (int64_t i = 0; i < inner; ++i) dst[i] = gr[i] * po[base + i * si];
      for (int64_t t = 1; t < length; ++t) {
        const T* ASCAN_RESTRICT grow = gr + t * inner;
        const T* ASCAN_RESTRICT orow = po + base + t * st;
        T* ASCAN_RESTRICT d = dst;
        if (si == 1) {
          for (int64_t i = 0; i < inner; ++i) d[i] += grow[i] * orow[i];
        } else {
          const T v = orow[0];
          for (int64_t i = 0; i < inner; ++i) d[i] += grow[i] * (si == 0 ? v : orow[i * si]);
        }
      }
    }
  });
  return out;
}

inline Shape keepdim_shape(Shape s, int64_t dim) {
  s[dim] = 1;
  return s;
}

// Sum along a resolved dim (keepdim: extent 1 kept).
template <class T>
Tensor<T> sum_dim(const Tensor<T>& a, int64_t dim, bool keepdim) {
  const ScanView v = scan_view(a.shape(), dim);
  auto out = Tensor<T>::empty(keepdim ? keepdim_shape(a.shape(), dim) : remove_dim(a.shape(), dim));
  reduce_middle(a.data(), out.data(), v.outer, v.length, v.inner);
  return out;
}

// Swaps the last two dims (rank >= 2).
template <class T>
Tensor<T> transpose_last2(const Tensor<T>& a) {
  Shape s = a.shape();
  const int64_t r = a.rank();
  const int64_t m = s[r - 2], n = s[r - 1];
  std::swap(s[r - 2], s[r - 1]);
  auto out = Tensor<T>::empty(s);
  const int64_t batch = m * n == 0 ? 0 : a.numel() / (m * n);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) out.data()[b * m * n + j * m + i] = a.data()[b * m * n + i * n + j];
  return out;
}

// Elements [start, stop) along a resolved dim.
template <class T>
Tensor<T> slice_dim(const Tensor<T>& a, int64_t dim, int64_t start, int64_t stop) {
  const ScanView v = scan_view(a.shape(), dim);
  Shape s = a.shape();
  s[dim] = stop - start;
  auto out = Tensor<T>::empty(s);
  const int64_t len = stop - start;
  for (int64_t o = 0; o < v.outer; ++o)
    if (len * v.inner > 0)
      std::memcpy(out.data() + o * len * v.inner, a.data() + (o * v.length + start) * v.inner,
                  sizeof(T) * len * v.inner);
  return out;
}

// dst[..., start:start+len, ...] += src along a resolved dim.
template <class T>
void add_into_dim(Tensor<T>& dst, int64_t dim, int64_t start, const Tensor<T>& src) {
  const ScanView vd = scan_view(dst.shape(), dim);
  const int64_t len = src.shape()[dim];
  for (int64_t o = 0; o < vd.outer; ++o) {
    T* d = dst.data() + (o * vd.length + start) * vd.inner;
    const T* s = src.data() + o * len * vd.inner;
    for (int64_t i = 0; i < len * vd.inner; ++i) d[i] += s[i];
  }
}

}  // namespace ascan::ad::kernels
