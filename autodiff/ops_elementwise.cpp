// ops_elementwise.cpp — broadcasting arithmetic and unary functions on Var, with their VJPs.
#include "ascan/ad/ops.hpp"
#include "kernels.hpp"

namespace ascan::ad {
namespace {

using detail::id_on_current;
using detail::record;
using detail::TapeState;

template <class T, class Fwd, class Bwd>
Var<T> binary_op(const Var<T>& a, const Var<T>& b, const char* where, Fwd fwd, Bwd bwd) {
  const int32_t ia = id_on_current(a, where), ib = id_on_current(b, where);
  const Tensor<T> va = a.value(), vb = b.value();
  broadcast_shapes(va.shape(), vb.shape(), where);  // named error before any work
  return record<T>(fwd(va, vb), {ia, ib}, [=](TapeState<T>& s, int32_t self) {
    const Tensor<T> g = s.grads[self];
    if (s.requires_grad[ia]) s.accumulate(ia, reduce_to(bwd(g, va, vb, 0), va.shape()));
    if (s.requires_grad[ib]) s.accumulate(ib, reduce_to(bwd(g, va, vb, 1), vb.shape()));
  });
}

// y = fn(a); dy/da computed from (a, y).
template <class T, class Fn, class Deriv>
Var<T> unary_op(const Var<T>& a, const char* where, Fn fn, Deriv deriv) {
  const int32_t ia = id_on_current(a, where);
  const Tensor<T> va = a.value();
  const Tensor<T> y = kernels::map(va, fn);
  return record<T>(y, {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, kernels::zip3(s.grads[self], va, y, [&](T g, T x, T yy) { return g * deriv(x, yy); }));
  });
}

}  // namespace

template <class T>
Var<T> operator+(const Var<T>& a, const Var<T>& b) {
  return binary_op(a, b, "ascan::ad::operator+()", [](const Tensor<T>& x, const Tensor<T>& y) { return x + y; },
                   [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>&, int) { return g; });
}
template <class T>
Var<T> operator-(const Var<T>& a, const Var<T>& b) {
  return binary_op(a, b, "ascan::ad::operator-()", [](const Tensor<T>& x, const Tensor<T>& y) { return x - y; },
                   [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>&, int k) { return k == 0 ? g : -g; });
}
template <class T>
Var<T> operator*(const Var<T>& a, const Var<T>& b) {
  return binary_op(a, b, "ascan::ad::operator*()", [](const Tensor<T>& x, const Tensor<T>& y) { return x * y; },
                   [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>& y, int k) { return k == 0 ? g * y : g * x; });
}
template <class T>
Var<T> operator/(const Var<T>& a, const Var<T>& b) {
  return binary_op(a, b, "ascan::ad::operator/()", [](const Tensor<T>& x, const Tensor<T>& y) { return x / y; },
                   [](const Tensor<T>& g, const Tensor<T>& x, const Tensor<T>& y, int k) {
                     return k == 0 ? g / y : -(g * x) / (y * y);
                   });
}
template <class T>
Var<T> operator-(const Var<T>& a) {
  return unary_op(a, "ascan::ad::operator-()", [](T x) { return -x; }, [](T, T) { return T(-1); });
}
template <class T>
Var<T> operator+(const Var<T>& a, T s) {
  return unary_op(a, "ascan::ad::operator+()", [s](T x) { return x + s; }, [](T, T) { return T(1); });
}
template <class T>
Var<T> operator*(const Var<T>& a, T s) {
  return unary_op(a, "ascan::ad::operator*()", [s](T x) { return x * s; }, [s](T, T) { return s; });
}

template <class T>
Var<T> exp(const Var<T>& a) {
  return unary_op(a, "ascan::ad::exp()", [](T x) { return std::exp(x); }, [](T, T y) { return y; });
}
template <class T>
Var<T> log(const Var<T>& a) {
  return unary_op(a, "ascan::ad::log()", [](T x) { return std::log(x); }, [](T x, T) { return T(1) / x; });
}
template <class T>
Var<T> tanh(const Var<T>& a) {
  return unary_op(a, "ascan::ad::tanh()", [](T x) { return std::tanh(x); }, [](T, T y) { return T(1) - y * y; });
}
template <class T>
Var<T> sigmoid(const Var<T>& a) {
  return unary_op(a, "ascan::ad::sigmoid()", [](T x) { return kernels::sigmoid(x); },
                  [](T, T y) { return y * (T(1) - y); });
}
template <class T>
Var<T> relu(const Var<T>& a) {
  return unary_op(a, "ascan::ad::relu()", [](T x) { return x > 0 ? x : T(0); },
                  [](T x, T) { return x > 0 ? T(1) : T(0); });
}
template <class T>
Var<T> softplus(const Var<T>& a) {
  return unary_op(a, "ascan::ad::softplus()", [](T x) { return kernels::softplus(x); },
                  [](T x, T) { return kernels::sigmoid(x); });
}
template <class T>
Var<T> square(const Var<T>& a) {
  return unary_op(a, "ascan::ad::square()", [](T x) { return x * x; }, [](T x, T) { return 2 * x; });
}
template <class T>
Var<T> sqrt(const Var<T>& a) {
  return unary_op(a, "ascan::ad::sqrt()", [](T x) { return std::sqrt(x); }, [](T, T y) { return T(0.5) / y; });
}

#define ASCAN_AD_INSTANTIATE(T)                                   \
  template Var<T> operator+(const Var<T>&, const Var<T>&);        \
  template Var<T> operator-(const Var<T>&, const Var<T>&);        \
  template Var<T> operator*(const Var<T>&, const Var<T>&);        \
  template Var<T> operator/(const Var<T>&, const Var<T>&);        \
  template Var<T> operator-(const Var<T>&);                       \
  template Var<T> operator+(const Var<T>&, T);                    \
  template Var<T> operator*(const Var<T>&, T);                    \
  template Var<T> exp(const Var<T>&);                             \
  template Var<T> log(const Var<T>&);                             \
  template Var<T> tanh(const Var<T>&);                            \
  template Var<T> sigmoid(const Var<T>&);                         \
  template Var<T> relu(const Var<T>&);                            \
  template Var<T> softplus(const Var<T>&);                        \
  template Var<T> square(const Var<T>&);                          \
  template Var<T> sqrt(const Var<T>&);
ASCAN_AD_INSTANTIATE(float)
ASCAN_AD_INSTANTIATE(double)

}  // namespace ascan::ad
