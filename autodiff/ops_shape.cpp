// ops_shape.cpp — matmul, transposes, reshapes, slicing and joining on Var, with their VJPs.
#include "ascan/ad/ops.hpp"
#include "kernels.hpp"

namespace ascan::ad {
namespace {

using detail::id_on_current;
using detail::record;
using detail::TapeState;

}  // namespace

template <class T>
Var<T> matmul(const Var<T>& a, const Var<T>& b) {
  constexpr const char* where = "ascan::ad::matmul()";
  const int32_t ia = id_on_current(a, where), ib = id_on_current(b, where);
  const Tensor<T> va = a.value(), vb = b.value();
  if (va.rank() == 0 || vb.rank() == 0)
    ascan::detail::raise("{}: operands have shapes {} and {}, expected rank >= 1 for both", where,
                         format_shape(va.shape()), format_shape(vb.shape()));
  // Vectors become matrices ([k] -> [1, k] on the left, [k, 1] on the right) for the VJP.
  const Tensor<T> A = va.rank() == 1 ? va.reshape({1, va.shape()[0]}) : va;
  const Tensor<T> B = vb.rank() == 1 ? vb.reshape({vb.shape()[0], 1}) : vb;
  Tensor<T> out;
  try {
    out = ascan::matmul(va, vb);
  } catch (const Error&) {
    ascan::detail::raise("{}: cannot multiply shapes {} and {}, expected [..., m, k] x [..., k, n] "
                         "with equal batch dims", where, format_shape(va.shape()), format_shape(vb.shape()));
  }
  return record<T>(out, {ia, ib}, [=](TapeState<T>& s, int32_t self) {
    Shape g_shape = A.shape().size() >= B.shape().size() ? A.shape() : B.shape();
    g_shape[g_shape.size() - 2] = A.shape()[A.rank() - 2];
    g_shape[g_shape.size() - 1] = B.shape()[B.rank() - 1];
    const Tensor<T> G = s.grads[self].reshape(g_shape);
    if (s.requires_grad[ia])
      s.accumulate(ia, reduce_to(ascan::matmul(G, kernels::transpose_last2(B)), A.shape()).reshape(va.shape()));
    if (s.requires_grad[ib])
      s.accumulate(ib, reduce_to(ascan::matmul(kernels::transpose_last2(A), G), B.shape()).reshape(vb.shape()));
  });
}

template <class T>
Var<T> transpose(const Var<T>& a) {
  constexpr const char* where = "ascan::ad::transpose()";
  const int32_t ia = id_on_current(a, where);
  if (a.rank() < 2)
    ascan::detail::raise("{}: operand has shape {}, expected rank >= 2 (the last two dims are swapped)",
                         where, format_shape(a.shape()));
  return record<T>(kernels::transpose_last2(a.value()), {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, kernels::transpose_last2(s.grads[self]));
  });
}

template <class T>
Var<T> outer(const Var<T>& a, const Var<T>& b) {
  constexpr const char* where = "ascan::ad::outer()";
  if (a.rank() != 1 || b.rank() != 1)
    ascan::detail::raise("{}: operands have shapes {} and {}, expected two vectors", where,
                         format_shape(a.shape()), format_shape(b.shape()));
  return matmul(reshape(a, {a.shape()[0], 1}), reshape(b, {1, b.shape()[0]}));
}

template <class T>
Var<T> reshape(const Var<T>& a, Shape shape) {
  const int32_t ia = id_on_current(a, "ascan::ad::reshape()");
  const Shape in = a.shape();
  return record<T>(a.value().reshape(std::move(shape)), {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, s.grads[self].reshape(in));
  });
}

template <class T>
Var<T> select(const Var<T>& a, int64_t dim, int64_t index) {
  constexpr const char* where = "ascan::ad::select()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  if (index < 0 || index >= a.shape()[d])
    ascan::detail::raise("{}: index {} is out of range on dim {} of shape {}, expected 0 <= index < {}",
                         where, index, d, format_shape(a.shape()), a.shape()[d]);
  const Shape in = a.shape();
  return record<T>(ascan::select(a.value(), d, index), {ia}, [=](TapeState<T>& s, int32_t self) {
    auto g = Tensor<T>::zeros(in);
    kernels::add_into_dim(g, d, index, s.grads[self].reshape(kernels::keepdim_shape(in, d)));
    s.accumulate(ia, g);
  });
}

template <class T>
Var<T> slice(const Var<T>& a, int64_t dim, int64_t start, int64_t stop) {
  constexpr const char* where = "ascan::ad::slice()";
  const int32_t ia = id_on_current(a, where);
  const int64_t d = resolve_dim(dim, a.rank(), where, "the operand");
  if (start < 0 || stop < start || stop > a.shape()[d])
    ascan::detail::raise("{}: range [{}, {}) is invalid on dim {} of shape {}, expected 0 <= start <= "
                         "stop <= {}", where, start, stop, d, format_shape(a.shape()), a.shape()[d]);
  const Shape in = a.shape();
  return record<T>(kernels::slice_dim(a.value(), d, start, stop), {ia}, [=](TapeState<T>& s, int32_t self) {
    auto g = Tensor<T>::zeros(in);
    kernels::add_into_dim(g, d, start, s.grads[self]);
    s.accumulate(ia, g);
  });
}

template <class T>
Var<T> concat(const std::vector<Var<T>>& vs, int64_t dim) {
  constexpr const char* where = "ascan::ad::concat()";
  if (vs.empty()) ascan::detail::raise("{}: got no Vars, expected at least one", where);
  const int64_t d = resolve_dim(dim, vs[0].rank(), where, "Var 0");
  Shape out_shape = vs[0].shape();
  std::vector<int32_t> ids;
  std::vector<int64_t> starts;
  out_shape[d] = 0;
  for (size_t i = 0; i < vs.size(); ++i) {
    ids.push_back(id_on_current(vs[i], where));
    Shape si = vs[i].shape(), s0 = vs[0].shape();
    if (si.size() != s0.size() || (si[d] = s0[d], si != s0))
      ascan::detail::raise("{}: Var {} has shape {}, expected {} except on dim {}", where, i,
                           format_shape(vs[i].shape()), format_shape(vs[0].shape()), d);
    starts.push_back(out_shape[d]);
    out_shape[d] += vs[i].shape()[d];
  }
  auto out = Tensor<T>::zeros(out_shape);
  for (size_t i = 0; i < vs.size(); ++i) kernels::add_into_dim(out, d, starts[i], vs[i].value());
  std::vector<int64_t> lens;
  for (const auto& v : vs) lens.push_back(v.shape()[d]);
  return detail::record_node<T>(out, ids, [=](TapeState<T>& s, int32_t self) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (s.requires_grad[ids[i]]) s.accumulate(ids[i], kernels::slice_dim(s.grads[self], d, starts[i], starts[i] + lens[i]));
  });
}

template <class T>
Var<T> stack(const std::vector<Var<T>>& vs, int64_t dim) {
  constexpr const char* where = "ascan::ad::stack()";
  if (vs.empty()) ascan::detail::raise("{}: got no Vars, expected at least one", where);
  const int64_t d = resolve_dim(dim, vs[0].rank() + 1, where, "the result");
  std::vector<Var<T>> expanded;
  for (size_t i = 0; i < vs.size(); ++i) {
    if (vs[i].shape() != vs[0].shape())
      ascan::detail::raise("{}: Var {} has shape {}, expected {} (the shape of Var 0)", where, i,
                           format_shape(vs[i].shape()), format_shape(vs[0].shape()));
    Shape s = vs[i].shape();
    s.insert(s.begin() + d, 1);
    expanded.push_back(reshape(vs[i], s));
  }
  return concat(expanded, d);
}

template <class T>
Var<T> broadcast_to(const Var<T>& a, const Shape& shape) {
  const int32_t ia = id_on_current(a, "ascan::ad::broadcast_to()");
  const Shape in = a.shape();
  return record<T>(ascan::broadcast_to(a.value(), shape), {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, reduce_to(s.grads[self], in));
  });
}

#define ASCAN_AD_INSTANTIATE(T)                                            \
  template Var<T> matmul(const Var<T>&, const Var<T>&);                    \
  template Var<T> transpose(const Var<T>&);                                \
  template Var<T> outer(const Var<T>&, const Var<T>&);                     \
  template Var<T> reshape(const Var<T>&, Shape);                           \
  template Var<T> select(const Var<T>&, int64_t, int64_t);                 \
  template Var<T> slice(const Var<T>&, int64_t, int64_t, int64_t);         \
  template Var<T> stack(const std::vector<Var<T>>&, int64_t);              \
  template Var<T> concat(const std::vector<Var<T>>&, int64_t);             \
  template Var<T> broadcast_to(const Var<T>&, const Shape&);
ASCAN_AD_INSTANTIATE(float)
ASCAN_AD_INSTANTIATE(double)

}  // namespace ascan::ad
