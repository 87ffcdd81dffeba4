// ops_reduce.cpp — sums, means, softmax, log-softmax and gather on Var, with their VJPs.
#include <algorithm>
#include <limits>

#include "ascan/ad/ops.hpp"
#include "ascan/detail/log1p_exp.hpp"
#include "kernels.hpp"

namespace ascan::ad {
namespace {

using detail::id_on_current;
using detail::record;
using detail::TapeState;

// Calls fn(line, stride, length) for every 1-D line along a resolved dim of `t` (line = the
// line's flat index, o * inner + i), lines in parallel.
template <class T, class Fn>
void for_each_line(const Tensor<T>& t, int64_t dim, Fn fn) {
  const ScanView v = scan_view(t.shape(), dim);
  kernels::parallel_elements(v.outer * v.inner, std::max<int64_t>(1, kernels::kGrain / std::max<int64_t>(v.length, 1)),
                             [&](int64_t l0, int64_t l1) {
                               for (int64_t l = l0; l < l1; ++l) fn(l, v.inner, v.length);
                             });
}

// The flat offset of line `l` (o * inner + i) of a [outer, length, inner] view.
inline int64_t line_offset(int64_t l, int64_t stride, int64_t length) {
  return (l / stride) * length * stride + l % stride;
}

// A fresh tensor of a's shape whose every line along `dim` is fn(a_line, b_line, out_line,
// stride, length), lines in parallel (b may be a's own tensor when the op reads one).
template <class T, class Fn>
Tensor<T> map_lines(const Tensor<T>& a, const Tensor<T>& b, int64_t dim, Fn fn) {
  auto out = Tensor<T>::empty(a.shape());
  for_each_line(a, dim, [&](int64_t l, int64_t stride, int64_t n) {
    const int64_t off = line_offset(l, stride, n);
    fn(a.data() + off, b.data() + off, out.data() + off, stride, n);
  });
  return out;
}

// exp(d) for d <= 0 (an argument a rounding put above 0 reads as 0), inline instead of a libm call:
// softmax's exponentials all have arguments <= 0, and the libm calls dominated its time.
template <class T>
T exp_le0(T d) {
  return ascan::detail::exp_nonpositive(std::min(d, T(0)));
}

// Stable log-sum-exp of a strided line.
template <class T>
T line_logsumexp(const T* p, int64_t stride, int64_t n) {
  T m = -std::numeric_limits<T>::infinity(), z = 0;
  for (int64_t k = 0; k < n; ++k) m = std::max(m, p[k * stride]);
  if (std::isinf(m)) return m;
  for (int64_t k = 0; k < n; ++k) z += exp_le0(p[k * stride] - m);
  return m + std::log(z);
}

}  // namespace

template <class T>
Var<T> sum(const Var<T>& a) {
  const int32_t ia = id_on_current(a, "ascan::ad::sum()");
  const Shape in = a.shape();
  const Tensor<T> va = a.value();
  auto total = Tensor<T>::empty({});
  kernels::reduce_middle(va.data(), total.data(), 1, va.numel(), 1);
  return record<T>(total, {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate_uniform(ia, s.grad_of(self).data()[0]);  // materialised only where an op needs it
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
    s.accumulate(ia, kernels::broadcast_to(s.grad_of(self).reshape(kernels::keepdim_shape(in, d)), in));
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
  const Tensor<T> x = a.value();
  const Tensor<T> y = map_lines(x, x, d, [](const T* xp, const T*, T* yp, int64_t stride, int64_t n) {
    const T lse = line_logsumexp(xp, stride, n);
    for (int64_t k = 0; k < n; ++k) yp[k * stride] = exp_le0(xp[k * stride] - lse);
  });
  return record<T>(y, {ia}, [=](TapeState<T>& s, int32_t self) {
    // dx = y * (g - sum(g * y)), one line at a time.
    s.accumulate(ia, map_lines(s.grad_of(self), y, d, [](const T* gp, const T* yp, T* dx, int64_t stride, int64_t n) {
      T dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += gp[k * stride] * yp[k * stride];
      for (int64_t k = 0; k < n; ++k) dx[k * stride] = yp[k * stride] * (gp[k * stride] - dot);
    }));
  });
}

template <class T>
Var<T> log_softmax(const Var<T>& a, int64_t dim) {
  constexpr const char* where = "ascan::ad::log_softmax()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  const Tensor<T> x = a.value();
  const Tensor<T> y = map_lines(x, x, d, [](const T* xp, const T*, T* yp, int64_t stride, int64_t n) {
    const T lse = line_logsumexp(xp, stride, n);
    for (int64_t k = 0; k < n; ++k) yp[k * stride] = xp[k * stride] - lse;
  });
  return record<T>(y, {ia}, [=](TapeState<T>& s, int32_t self) {
    // dx = g - softmax * sum(g), one line at a time.
    s.accumulate(ia, map_lines(s.grad_of(self), y, d, [](const T* gp, const T* yp, T* dx, int64_t stride, int64_t n) {
      T total = 0;
      for (int64_t k = 0; k < n; ++k) total += gp[k * stride];
      for (int64_t k = 0; k < n; ++k) dx[k * stride] = gp[k * stride] - exp_le0(yp[k * stride]) * total;
    }));
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
    const T* go = s.grad_of(self).data();
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
