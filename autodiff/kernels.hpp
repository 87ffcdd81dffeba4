// kernels.hpp — Tensor helpers for the autodiff ops (internal to the compiled autodiff layer).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "ascan/ad/var.hpp"
#include "ascan/config.hpp"
#include "ascan/parallel.hpp"
#include "ascan/error.hpp"
#include "ascan/shape.hpp"
#include "ascan/tensor.hpp"
#include "ascan/tensor_ops.hpp"

namespace ascan::ad::kernels {

// Elements per task: below this an op runs on the calling thread (waking the pool costs more).
inline constexpr int64_t kGrain = int64_t{1} << 15;

// body(begin, end) over [0, n) on the library's thread pool. Elementwise work splits anywhere, so
// results never depend on the thread count.
template <class Body>
void parallel_elements(int64_t n, int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (n <= grain) {
    body(int64_t{0}, n);
    return;
  }
  ascan::detail::parallel_for(n, grain, [&](int64_t b, int64_t e) { body(b, e); });
}

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

// Strides of a tensor of shape `in` seen from the broadcast shape `out` (0 where stretched).
inline Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    strides[out.size() - in.size() + i] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

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

// Sum of n contiguous elements in a fixed order (32 interleaved partial sums, so that several
// vector additions are in flight, then pairwise), so a sum does not depend on where or on how
// many threads it runs.
template <class T>
T sum_run(const T* ASCAN_RESTRICT p, int64_t n) {
  constexpr int kAcc = 32;
  T acc[kAcc] = {};
  int64_t i = 0;
  for (; i + kAcc <= n; i += kAcc)
    for (int j = 0; j < kAcc; ++j) acc[j] += p[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += p[i];
  for (int w = kAcc / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// out[o, i] = sum over t of a[o, t, i] for the [outer, length, inner] view. Each output sums in a
// fixed order that depends on the shape only: lines of consecutive elements when inner == 1,
// blocks of kBlockRows rows (summed in order) otherwise.
template <class T>
void reduce_middle(const T* a, T* out, int64_t outer, int64_t length, int64_t inner) {
  if (outer * inner == 0) return;
  if (length == 0) {
    std::fill(out, out + outer * inner, T(0));
    return;
  }
  if (inner == 1) {
    if (outer == 1) {  // one long sum: fixed blocks, partial sums added in order
      constexpr int64_t kBlock = int64_t{1} << 14;
      const int64_t blocks = (length + kBlock - 1) / kBlock;
      std::vector<T> partial(static_cast<size_t>(blocks));
      parallel_elements(blocks, std::max<int64_t>(1, kGrain / kBlock), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
          partial[b] = sum_run(a + b * kBlock, std::min(kBlock, length - b * kBlock));
      });
      T total = T(0);
      for (T v : partial) total += v;
      out[0] = total;
      return;
    }
    parallel_elements(outer, std::max<int64_t>(1, kGrain / length), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) out[o] = sum_run(a + o * length, length);
    });
    return;
  }
  // Rows of `inner` lanes added in order, over blocks of rows; the blocks' partial rows are
  // then added in order. Work splits over (outer, lane chunk, row block).
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks = (length + kBlockRows - 1) / kBlockRows;
  const int64_t lane_chunk = std::min<int64_t>(inner, 4096);
  const int64_t chunks = (inner + lane_chunk - 1) / lane_chunk;
  std::vector<T> partial(static_cast<size_t>(blocks > 1 ? outer * blocks * inner : 0));
  const int64_t tasks = outer * chunks * blocks;
  parallel_elements(tasks, std::max<int64_t>(1, kGrain / (kBlockRows * lane_chunk)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t blk = t % blocks, c = (t / blocks) % chunks, o = t / (blocks * chunks);
      const int64_t i0 = c * lane_chunk, ni = std::min(lane_chunk, inner - i0);
      const int64_t r0 = blk * kBlockRows, r1 = std::min(length, r0 + kBlockRows);
      T* ASCAN_RESTRICT dst = blocks > 1 ? partial.data() + (o * blocks + blk) * inner + i0 : out + o * inner + i0;
      const T* src = a + (o * length + r0) * inner + i0;
      for (int64_t i = 0; i < ni; ++i) dst[i] = src[i];
      for (int64_t r = r0 + 1; r < r1; ++r) {
        const T* ASCAN_RESTRICT row = a + (o * length + r) * inner + i0;
        for (int64_t i = 0; i < ni; ++i) dst[i] += row[i];
      }
    }
  });
  if (blocks > 1)
    parallel_elements(outer * inner, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t k = s; k < e; ++k) {
        const int64_t o = k / inner, i = k % inner;
        const T* p = partial.data() + o * blocks * inner + i;
        T acc = p[0];
        for (int64_t blk = 1; blk < blocks; ++blk) acc += p[blk * inner];
        out[k] = acc;
      }
    });
}

// Sums `a` over its broadcast dims down to `shape` (the adjoint of broadcasting), in parallel and
// in an order fixed by the shapes. Common layouts (one group of reduced dims, possibly between
// kept ones) take reduce_middle; others reduce one group at a time.
template <class T>
Tensor<T> reduce_to(const Tensor<T>& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  const Shape check = broadcast_shapes(shape, a.shape(), "ascan::ad: reduce_to()");
  ASCAN_ASSERT(check == a.shape());
  const Shape& in = a.shape();
  const size_t rank = in.size();
  // Padded target extents, and the first and last reduced dims.
  Shape target(rank, 1);
  for (size_t i = 0; i < shape.size(); ++i) target[rank - shape.size() + i] = shape[i];
  int64_t first = -1, last = -1;
  for (size_t d = 0; d < rank; ++d)
    if (target[d] != in[d]) {
      if (first < 0) first = static_cast<int64_t>(d);
      last = static_cast<int64_t>(d);
    }
  if (first < 0) return a.reshape(shape);
  // Dims between first and last that are kept with extent > 1 make two groups: reduce the last
  // group first, then recurse.
  for (int64_t d = first; d <= last; ++d)
    if (target[d] == in[d] && in[d] > 1) {
      Shape partial = in;
      for (int64_t e = d + 1; e <= last; ++e) partial[e] = target[e];
      return kernels::reduce_to(kernels::reduce_to(a, partial), shape);
    }
  int64_t outer = 1, length = 1, inner = 1;
  for (int64_t d = 0; d < first; ++d) outer *= in[d];
  for (int64_t d = first; d <= last; ++d) length *= in[d];
  for (size_t d = static_cast<size_t>(last) + 1; d < rank; ++d) inner *= in[d];
  auto out = Tensor<T>::empty(shape);
  reduce_middle(a.data(), out.data(), outer, length, inner);
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

// The stable log(1 + exp(x)) and the logistic function.
template <class T>
T softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}
template <class T>
T sigmoid(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

}  // namespace ascan::ad::kernels
