// ops_reduce.cpp — sums, means, softmax, log-softmax and gather on Var, with their VJPs.
#include <limits>

#include "ascan/ad/ops.hpp"
#include "kernels.hpp"

namespace ascan::ad {
namespace {

using detail::id_on_current;
using detail::record;
using detail::TapeState;

// Calls fn(row_pointer, stride, length) for every 1-D line along a resolved dim.
template <class T, class Fn>
void for_each_line(Tensor<T>& t, int64_t dim, Fn fn) {
  const ScanView v = scan_view(t.shape(), dim);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) fn(t.data() + o * v.length * v.inner + i, v.inner, v.length);
}

// Stable log-sum-exp of a strided line.
template <class T>
T line_logsumexp(const T* p, int64_t stride, int64_t n) {
  T m = -std::numeric_limits<T>::infinity(), z = 0;
  for (int64_t k = 0; k < n; ++k) m = std::max(m, p[k * stride]);
  if (std::isinf(m)) return m;
  for (int64_t k = 0; k < n; ++k) z += std::exp(p[k * stride] - m);
  return m + std::log(z);
}

}  // namespace

template <class T>
Var<T> sum(const Var<T>& a) {
  const int32_t ia = id_on_current(a, "ascan::ad::sum()");
  const Shape in = a.shape();
  return record<T>(ascan::sum(a.value()), {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, Tensor<T>::full(in, s.grads[self].data()[0]));
  });
}

template <class T>
Var<T> mean(const Var<T>& a) {
  if (a.numel() == 0)
    ascan::detail::raise("ascan::ad::mean(): operand of shape {} is empty, expected at least one element",
                         format_shape(a.shape()));
  return sum(a) * (T(1) / static_cast<T>(a.numel()));
}

template <class T>
Var<T> sum(const Var<T>& a, int64_t dim, bool keepdim) {
  constexpr const char* where = "ascan::ad::sum()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  const Shape in = a.shape();
  return record<T>(kernels::sum_dim(a.value(), d, keepdim), {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, ascan::broadcast_to(s.grads[self].reshape(kernels::keepdim_shape(in, d)), in));
  });
}

template <class T>
Var<T> mean(const Var<T>& a, int64_t dim, bool keepdim) {
  const int64_t d = resolve_dim(dim, a.rank(), "ascan::ad::mean()", "the operand");
  if (a.shape()[d] == 0)
    ascan::detail::raise("ascan::ad::mean(): dim {} of shape {} is empty, expected extent >= 1", d,
                         format_shape(a.shape()));
  return sum(a, d, keepdim) * (T(1) / static_cast<T>(a.shape()[d]));
}

template <class T>
Var<T> softmax(const Var<T>& a, int64_t dim) {
  constexpr const char* where = "ascan::ad::softmax()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  Tensor<T> y = a.value().clone();
  for_each_line(y, d, [](T* p, int64_t stride, int64_t n) {
    const T lse = line_logsumexp(p, stride, n);
    for (int64_t k = 0; k < n; ++k) p[k * stride] = std::exp(p[k * stride] - lse);
  });
  return record<T>(y, {ia}, [=](TapeState<T>& s, int32_t self) {
    // dx = y * (g - sum(g * y))
    Tensor<T> gy = kernels::zip(s.grads[self], y, [](T g, T yy) { return g * yy; });
    const Tensor<T> dot = kernels::sum_dim(gy, d, true);
    s.accumulate(ia, gy - y * dot);
  });
}

template <class T>
Var<T> log_softmax(const Var<T>& a, int64_t dim) {
  constexpr const char* where = "ascan::ad::log_softmax()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  Tensor<T> y = a.value().clone();
  for_each_line(y, d, [](T* p, int64_t stride, int64_t n) {
    const T lse = line_logsumexp(p, stride, n);
    for (int64_t k = 0; k < n; ++k) p[k * stride] -= lse;
  });
  return record<T>(y, {ia}, [=](TapeState<T>& s, int32_t self) {
    // dx = g - softmax * sum(g)
    const Tensor<T> g = s.grads[self];
    const Tensor<T> total = kernels::sum_dim(g, d, true);
    s.accumulate(ia, g - kernels::map(y, [](T v) { return std::exp(v); }) * total);
  });
}

template <class T>
Var<T> gather(const Var<T>& a, int64_t dim, const Tensor<int64_t>& index) {
  constexpr const char* where = "ascan::ad::gather()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  const Shape out_shape = remove_dim(a.shape(), d);
  if (index.shape() != out_shape)
    ascan::detail::raise("{}: index has shape {}, expected {} (the operand's shape without dim {})",
                         where, format_shape(index.shape()), format_shape(out_shape), d);
  const ScanView v = scan_view(a.shape(), d);
  for (int64_t i = 0; i < index.numel(); ++i)
    if (index.data()[i] < 0 || index.data()[i] >= v.length)
      ascan::detail::raise("{}: index {} at flat position {} is out of range, expected 0 <= index < {}",
                           where, index.data()[i], i, v.length);
  auto out = Tensor<T>::empty(out_shape);
  const Tensor<T> va = a.value();
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i)
      out.data()[o * v.inner + i] = va.data()[(o * v.length + index.data()[o * v.inner + i]) * v.inner + i];
  const Shape in = a.shape();
  return record<T>(out, {ia}, [=](TapeState<T>& s, int32_t self) {
    auto g = Tensor<T>::zeros(in);
    const T* go = s.grads[self].data();
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t i = 0; i < v.inner; ++i)
        g.data()[(o * v.length + index.data()[o * v.inner + i]) * v.inner + i] += go[o * v.inner + i];
    s.accumulate(ia, g);
  });
}

#define ASCAN_AD_INSTANTIATE(T)                                            \
  template Var<T> sum(const Var<T>&);                                      \
  template Var<T> mean(const Var<T>&);                                     \
  template Var<T> sum(const Var<T>&, int64_t, bool);                       \
  template Var<T> mean(const Var<T>&, int64_t, bool);                      \
  template Var<T> softmax(const Var<T>&, int64_t);                         \
  template Var<T> log_softmax(const Var<T>&, int64_t);                     \
  template Var<T> gather(const Var<T>&, int64_t, const Tensor<int64_t>&);
ASCAN_AD_INSTANTIATE(float)
ASCAN_AD_INSTANTIATE(double)

}  // namespace ascan::ad
