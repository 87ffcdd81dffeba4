// kernels.hpp — Tensor helpers for the autodiff ops (internal to the compiled autodiff layer).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "ascan/ad/var.hpp"
#include "ascan/error.hpp"
#include "ascan/shape.hpp"
#include "ascan/tensor.hpp"
#include "ascan/tensor_ops.hpp"

namespace ascan::ad::kernels {

template <class T, class Fn>
Tensor<T> map(const Tensor<T>& a, Fn fn) {
  auto out = Tensor<T>::empty(a.shape());
  const T* pa = a.data();
  T* po = out.data();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = fn(pa[i]);
  return out;
}

// Same-shape elementwise zip.
template <class T, class Fn>
Tensor<T> zip(const Tensor<T>& a, const Tensor<T>& b, Fn fn) {
  ASCAN_ASSERT(a.shape() == b.shape());
  auto out = Tensor<T>::empty(a.shape());
  const T* pa = a.data();
  const T* pb = b.data();
  T* po = out.data();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = fn(pa[i], pb[i]);
  return out;
}

template <class T, class Fn>
Tensor<T> zip3(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, Fn fn) {
  ASCAN_ASSERT(a.shape() == b.shape() && a.shape() == c.shape());
  auto out = Tensor<T>::empty(a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) out.data()[i] = fn(a.data()[i], b.data()[i], c.data()[i]);
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
  auto out = Tensor<T>::zeros(keepdim ? keepdim_shape(a.shape(), dim) : remove_dim(a.shape(), dim));
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t t = 0; t < v.length; ++t) {
      const T* src = a.data() + (o * v.length + t) * v.inner;
      T* dst = out.data() + o * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) dst[i] += src[i];
    }
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
