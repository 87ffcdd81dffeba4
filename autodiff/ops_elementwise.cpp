// ops_elementwise.cpp — broadcasting arithmetic and unary functions on Var, with their VJPs.
#include "ascan/ad/ops.hpp"
#include "kernels.hpp"

namespace ascan::ad {
namespace {

using detail::id_on_current;
using detail::record;
using detail::record_uniform_aware;
using detail::TapeState;

// z = fwd(a, b) with broadcasting. bwd(g, a, b, z, k) returns operand k's gradient at z's shape
// (or at the operand's own shape, which is then used as is); it is summed down to the operand's
// shape in parallel, in an order fixed by the shapes.
template <class T, class Fwd, class Bwd>
Var<T> binary_op(const Var<T>& a, const Var<T>& b, const char* where, Fwd fwd, Bwd bwd) {
  const int32_t ia = id_on_current(a, where), ib = id_on_current(b, where);
  const Tensor<T> va = a.value(), vb = b.value();
  broadcast_shapes(va.shape(), vb.shape(), where);  // named error before any work
  Tensor<T> z = kernels::broadcast_zip(va, vb, where, fwd);
  return record<T>(z, {ia, ib}, [=](TapeState<T>& s, int32_t self) {
    const Tensor<T> g = s.grad_of(self);
    const Tensor<T> y = s.values[self];
    if (s.requires_grad[ia]) s.accumulate(ia, kernels::reduce_to(bwd(g, va, vb, y, 0), va.shape()));
    if (s.requires_grad[ib]) s.accumulate(ib, kernels::reduce_to(bwd(g, va, vb, y, 1), vb.shape()));
  });
}

// y = fn(a); the backward is g * deriv(x, y), deriv(y) or deriv(x) (Saves says which of a and y
// the backward reads: the fewer streams, the faster it runs).
enum class Saves { x, y, both };

template <Saves kSaves, class T, class Fn, class Deriv>
Var<T> unary_op(const Var<T>& a, const char* where, Fn fn, Deriv deriv) {
  const int32_t ia = id_on_current(a, where);
  const Tensor<T> va = a.value();
  Tensor<T> y = kernels::map(va, fn);
  return record_uniform_aware<T>(y, {ia}, [=](TapeState<T>& s, int32_t self) {
    if (const std::optional<T> c = s.uniform_grad(self)) {  // a sum's gradient: one stream fewer
      const T cc = *c;
      if constexpr (kSaves == Saves::x) {
        s.accumulate(ia, kernels::map(va, [&](T x) { return cc * deriv(x); }));
      } else if constexpr (kSaves == Saves::y) {
        s.accumulate(ia, kernels::map(s.values[self], [&](T yy) { return cc * deriv(yy); }));
      } else {
        s.accumulate(ia, kernels::zip(va, s.values[self], [&](T x, T yy) { return cc * deriv(x, yy); }));
      }
      return;
    }
    const Tensor<T>& g = s.grad_of(self);
    if constexpr (kSaves == Saves::x) {
      s.accumulate(ia, kernels::zip(g, va, [&](T gg, T x) { return gg * deriv(x); }));
    } else if constexpr (kSaves == Saves::y) {
      s.accumulate(ia, kernels::zip(g, s.values[self], [&](T gg, T yy) { return gg * deriv(yy); }));
    } else {
      s.accumulate(ia, kernels::zip3(g, va, s.values[self], [&](T gg, T x, T yy) { return gg * deriv(x, yy); }));
    }
  });
}

// y = fn(a) with a constant derivative: the backward scales the gradient (or passes it on).
template <class T, class Fn>
Var<T> linear_op(const Var<T>& a, const char* where, Fn fn, T slope) {
  const int32_t ia = id_on_current(a, where);
  return record_uniform_aware<T>(kernels::map(a.value(), fn), {ia}, [=](TapeState<T>& s, int32_t self) {
    if (const std::optional<T> c = s.uniform_grad(self)) return s.accumulate_uniform(ia, *c * slope);
    const Tensor<T>& g = s.grad_of(self);
    s.accumulate(ia, slope == T(1) ? g : kernels::map(g, [slope](T gg) { return gg * slope; }));
  });
}

template <class T>
Tensor<T> negate(const Tensor<T>& g) {
  return kernels::map(g, [](T v) { return -v; });
}

}  // namespace

namespace detail {
template <class T>
Tensor<T> add_gradients(const Tensor<T>& a, const Tensor<T>& b) {
  return kernels::zip(a, b, [](T x, T y) { return x + y; });
}
template <class T>
Tensor<T> copy_gradient(const Tensor<T>& a) {
  return kernels::map(a, [](T x) { return x; });
}
template Tensor<float> add_gradients(const Tensor<float>&, const Tensor<float>&);
template Tensor<double> add_gradients(const Tensor<double>&, const Tensor<double>&);
template Tensor<float> copy_gradient(const Tensor<float>&);
template Tensor<double> copy_gradient(const Tensor<double>&);
template <class T>
Tensor<T> fill_gradient(const Shape& shape, T value) {
  return kernels::fill(shape, value);
}
template Tensor<float> fill_gradient(const Shape&, float);
template Tensor<double> fill_gradient(const Shape&, double);
}  // namespace detail

namespace {

// a + sign * b: the gradients are the incoming one summed down to each operand's shape (a uniform
// one stays uniform: each element of an operand gathers the same number of copies).
template <class T>
Var<T> add_or_sub(const Var<T>& a, const Var<T>& b, T sign, const char* where) {
  const int32_t ia = id_on_current(a, where), ib = id_on_current(b, where);
  const Shape sa = a.shape(), sb = b.shape();
  const Shape out = broadcast_shapes(sa, sb, where);
  Tensor<T> z = sign > 0 ? kernels::broadcast_zip(a.value(), b.value(), where, [](T x, T y) { return x + y; })
                         : kernels::broadcast_zip(a.value(), b.value(), where, [](T x, T y) { return x - y; });
  return record_uniform_aware<T>(std::move(z), {ia, ib}, [=](TapeState<T>& s, int32_t self) {
    if (const std::optional<T> c = s.uniform_grad(self)) {
      const T n = static_cast<T>(shape_numel(out));
      if (s.requires_grad[ia]) s.accumulate_uniform(ia, *c * (n / static_cast<T>(std::max<int64_t>(1, shape_numel(sa)))));
      if (s.requires_grad[ib])
        s.accumulate_uniform(ib, sign * *c * (n / static_cast<T>(std::max<int64_t>(1, shape_numel(sb)))));
      return;
    }
    const Tensor<T> g = s.grad_of(self);
    if (s.requires_grad[ia]) s.accumulate(ia, kernels::reduce_to(g, sa));
    if (s.requires_grad[ib]) s.accumulate(ib, sign > 0 ? kernels::reduce_to(g, sb) : negate(kernels::reduce_to(g, sb)));
  });
}

}  // namespace
template <class T>
Var<T> operator+(const Var<T>& a, const Var<T>& b) {
  return add_or_sub(a, b, T(1), "ascan::ad::operator+()");
}
template <class T>
Var<T> operator-(const Var<T>& a, const Var<T>& b) {
  return add_or_sub(a, b, T(-1), "ascan::ad::operator-()");
}
// The gradient of a product is the incoming gradient times the other operand; when this node holds
// the only handle on its gradient and the shapes agree, the last of the two is made in place (two
// streams read, one written, no fresh buffer).
template <class T>
Var<T> operator*(const Var<T>& a, const Var<T>& b) {
  constexpr const char* where = "ascan::ad::operator*()";
  const int32_t ia = id_on_current(a, where), ib = id_on_current(b, where);
  const Tensor<T> va = a.value(), vb = b.value();
  broadcast_shapes(va.shape(), vb.shape(), where);
  const auto mul = [](T x, T y) { return x * y; };
  return record_uniform_aware<T>(kernels::broadcast_zip(va, vb, where, mul), {ia, ib}, [=](TapeState<T>& s, int32_t self) {
    const bool need_a = s.requires_grad[ia], need_b = s.requires_grad[ib];
    if (const std::optional<T> c = s.uniform_grad(self); c && va.shape() == vb.shape()) {
      // A sum's gradient: each operand's is c times the other, or the other itself (borrowed:
      // shared without a copy, except into a leaf's gradient).
      const auto scaled = [&](const Tensor<T>& other) {
        if (*c == T(1)) {
          s.borrow(other);
          return other;
        }
        return kernels::map(other, [cc = *c](T x) { return cc * x; });
      };
      if (need_a) s.accumulate(ia, scaled(vb));
      if (need_b) s.accumulate(ib, scaled(va));
      return;
    }
    s.grad_of(self);
    Tensor<T> g = std::move(s.grads[self]);  // read by no one else once this function ran
    s.grads[self] = Tensor<T>();
    s.has_grad[self] = 0;
    const auto grad = [&](const Tensor<T>& other, const Shape& own, bool last) {
      if (last && own == g.shape() && other.shape() == g.shape() && ascan::detail::TensorAccess<T>::unique(g)) {
        T* pg = g.data();
        const T* po = other.data();
        ascan::detail::parallel_elements(g.numel(), kernels::kGrain, [&](int64_t b0, int64_t b1) {
          for (int64_t i = b0; i < b1; ++i) pg[i] *= po[i];
        });
        return std::move(g);
      }
      if (own != g.shape())
        if (auto fused = kernels::mul_reduce_to(g, other, own)) return std::move(*fused);
      return kernels::reduce_to(kernels::broadcast_zip(g, other, where, mul), own);
    };
    if (need_a) s.accumulate(ia, grad(vb, va.shape(), !need_b));
    if (need_b) s.accumulate(ib, grad(va, vb.shape(), true));
  });
}
template <class T>
Var<T> operator/(const Var<T>& a, const Var<T>& b) {
  constexpr const char* where = "ascan::ad::operator/()";
  return binary_op(a, b, where, [](T x, T y) { return x / y; },
                   [](const Tensor<T>& g, const Tensor<T>&, const Tensor<T>& y, const Tensor<T>& z, int k) {
                     // d/dx = g / y; d/dy = -g x / y^2 = -(g z) / y with z = x / y.
                     if (k == 0) return kernels::broadcast_zip(g, y, where, [](T gg, T v) { return gg / v; });
                     const Tensor<T> gz = kernels::zip(g, z, [](T gg, T zz) { return gg * zz; });
                     return kernels::broadcast_zip(gz, y, where, [](T v, T yy) { return -v / yy; });
                   });
}
template <class T>
Var<T> operator-(const Var<T>& a) {
  return linear_op(a, "ascan::ad::operator-()", [](T x) { return -x; }, T(-1));
}
template <class T>
Var<T> operator+(const Var<T>& a, T s) {
  return linear_op(a, "ascan::ad::operator+()", [s](T x) { return x + s; }, T(1));
}
template <class T>
Var<T> operator*(const Var<T>& a, T s) {
  return linear_op(a, "ascan::ad::operator*()", [s](T x) { return x * s; }, s);
}

template <class T>
Var<T> exp(const Var<T>& a) {
  return unary_op<Saves::y>(a, "ascan::ad::exp()", [](T x) { return ascan::detail::exp_any(x); }, [](T y) { return y; });
}
template <class T>
Var<T> log(const Var<T>& a) {
  return unary_op<Saves::x>(a, "ascan::ad::log()", [](T x) { return ascan::detail::log_any(x); }, [](T x) { return T(1) / x; });
}
template <class T>
Var<T> tanh(const Var<T>& a) {
  return unary_op<Saves::y>(a, "ascan::ad::tanh()", [](T x) { return ascan::detail::tanh_any(x); }, [](T y) { return T(1) - y * y; });
}
template <class T>
Var<T> sigmoid(const Var<T>& a) {
  return unary_op<Saves::y>(a, "ascan::ad::sigmoid()", [](T x) { return ascan::detail::sigmoid_any(x); },
                            [](T y) { return y * (T(1) - y); });
}
template <class T>
Var<T> relu(const Var<T>& a) {
  return unary_op<Saves::x>(a, "ascan::ad::relu()", [](T x) { return x > 0 ? x : T(0); },
                            [](T x) { return x > 0 ? T(1) : T(0); });
}
template <class T>
Var<T> softplus(const Var<T>& a) {
  return unary_op<Saves::x>(a, "ascan::ad::softplus()", [](T x) { return ascan::detail::softplus_any(x); },
                            [](T x) { return ascan::detail::sigmoid_any(x); });
}
template <class T>
Var<T> square(const Var<T>& a) {
  return unary_op<Saves::x>(a, "ascan::ad::square()", [](T x) { return x * x; }, [](T x) { return 2 * x; });
}
template <class T>
Var<T> sqrt(const Var<T>& a) {
  return unary_op<Saves::y>(a, "ascan::ad::sqrt()", [](T x) { return std::sqrt(x); }, [](T y) { return T(0.5) / y; });
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

namespace detail {
template void sweep(TapeState<float>&, int32_t, const Tensor<float>&, const BackwardOptions&);
template void sweep(TapeState<double>&, int32_t, const Tensor<double>&, const BackwardOptions&);
template void close_tape(TapeState<float>&);
template void close_tape(TapeState<double>&);
}  // namespace detail

}  // namespace ascan::ad
