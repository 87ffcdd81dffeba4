// ops_shape.cpp — matmul, transposes, reshapes, slicing and joining on Var, with their VJPs.
#include <Eigen/Core>

#include <algorithm>

#include "ascan/ad/ops.hpp"
#include "kernels.hpp"

namespace ascan::ad {
namespace {

using detail::id_on_current;
using detail::record;
using detail::TapeState;

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Mat = Eigen::Map<const RowMatrix<T>>;
template <class T>
using MutMat = Eigen::Map<RowMatrix<T>>;

// A row-major operand of a product: a [rows, cols] matrix, or the transpose of the stored one.
template <class T>
struct Operand {
  const T* data;
  bool transposed;  // stored as [cols, rows]
};

template <class T>
void product_into(T* out, Operand<T> a, Operand<T> b, int64_t m, int64_t k, int64_t n, bool accumulate) {
  MutMat<T> o(out, m, n);
  auto run = [&](const auto& x, const auto& y) {
    if (accumulate) o.noalias() += x * y;
    else o.noalias() = x * y;
  };
  if (!a.transposed && !b.transposed) run(Mat<T>(a.data, m, k), Mat<T>(b.data, k, n));
  else if (!a.transposed) run(Mat<T>(a.data, m, k), Mat<T>(b.data, n, k).transpose());
  else if (!b.transposed) run(Mat<T>(a.data, k, m).transpose(), Mat<T>(b.data, k, n));
  else run(Mat<T>(a.data, k, m).transpose(), Mat<T>(b.data, n, k).transpose());
}

// out[batch, m, n] = op(a)[batch] · op(b)[batch], where an operand with step 0 is shared by every
// batch. When `sum_batches`, out is one [m, n] matrix, the sum over batches (in batch order).
// Batches run in parallel; one large product is split into fixed blocks of rows of out (the split
// depends on the shape only, and every element is summed over k in the same order either way).
template <class T>
Tensor<T> products(Operand<T> a, int64_t step_a, Operand<T> b, int64_t step_b, int64_t batches, int64_t m,
                   int64_t k, int64_t n, bool sum_batches, Shape out_shape) {
  auto out = Tensor<T>::empty(out_shape);
  T* po = out.data();
  if (m * n == 0) return out;
  if (k == 0 || batches == 0) {
    std::fill(po, po + out.numel(), T(0));
    return out;
  }
  const int64_t flops = m * k * n;
  if (sum_batches) {
    for (int64_t bt = 0; bt < batches; ++bt)
      product_into(po, {a.data + bt * step_a, a.transposed}, {b.data + bt * step_b, b.transposed}, m, k, n, bt > 0);
    return out;
  }
  if (batches > 1) {
    kernels::parallel_elements(batches, std::max<int64_t>(1, (int64_t{1} << 18) / flops), [&](int64_t b0, int64_t b1) {
      for (int64_t bt = b0; bt < b1; ++bt)
        product_into(po + bt * m * n, {a.data + bt * step_a, a.transposed}, {b.data + bt * step_b, b.transposed}, m,
                     k, n, false);
    });
    return out;
  }
  // One product: blocks of rows of out (rows of op(a)).
  constexpr int64_t kRowBlock = 64;
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  kernels::parallel_elements(blocks, std::max<int64_t>(1, (int64_t{1} << 18) / (kRowBlock * k * n)), [&](int64_t r0, int64_t r1) {
    for (int64_t blk = r0; blk < r1; ++blk) {
      const int64_t i0 = blk * kRowBlock, rows = std::min(kRowBlock, m - i0);
      T* dst = po + i0 * n;
      if (!a.transposed) {
        MutMat<T> o(dst, rows, n);
        const Mat<T> x(a.data + i0 * k, rows, k);
        if (!b.transposed) o.noalias() = x * Mat<T>(b.data, k, n);
        else o.noalias() = x * Mat<T>(b.data, n, k).transpose();
      } else {  // rows of op(a) = columns i0.. of the stored [k, m] matrix
        using Strided = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
        const Strided x(a.data + i0, k, rows, Eigen::OuterStride<>(m));
        MutMat<T> o(dst, rows, n);
        if (!b.transposed) o.noalias() = x.transpose() * Mat<T>(b.data, k, n);
        else o.noalias() = x.transpose() * Mat<T>(b.data, n, k).transpose();
      }
    }
  });
  return out;
}

}  // namespace

template <class T>
Var<T> matmul(const Var<T>& a, const Var<T>& b) {
  constexpr const char* where = "ascan::ad::matmul()";
  const int32_t ia = id_on_current(a, where), ib = id_on_current(b, where);
  const Tensor<T> va = a.value(), vb = b.value();
  const Shape& sa = va.shape();
  const Shape& sb = vb.shape();
  if (va.rank() == 0 || vb.rank() == 0)
    ascan::detail::raise("{}: operands have shapes {} and {}, expected rank >= 1 for both", where,
                         format_shape(sa), format_shape(sb));
  // Vectors act as [1, k] on the left and [k, 1] on the right; the added dims are dropped.
  const bool a_vec = va.rank() == 1, b_vec = vb.rank() == 1;
  const size_t nba = a_vec ? 0 : sa.size() - 2, nbb = b_vec ? 0 : sb.size() - 2;
  const int64_t m = a_vec ? 1 : sa[sa.size() - 2], k = sa.back();
  const int64_t k2 = b_vec ? sb[0] : sb[sb.size() - 2], n = b_vec ? 1 : sb.back();
  if (k != k2 || (nba > 0 && nbb > 0 && !std::equal(sa.begin(), sa.begin() + nba, sb.begin(), sb.begin() + nbb)))
    ascan::detail::raise("{}: cannot multiply shapes {} and {}, expected [..., m, k] x [..., k, n] "
                         "with equal batch dims", where, format_shape(sa), format_shape(sb));
  const Shape& batch_src = nba > 0 ? sa : sb;
  const size_t nbatch = std::max(nba, nbb);
  Shape out_shape(batch_src.begin(), batch_src.begin() + nbatch);
  int64_t batches = 1;
  for (size_t i = 0; i < nbatch; ++i) batches *= batch_src[i];
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  const int64_t step_a = nba ? m * k : 0, step_b = nbb ? k * n : 0;
  Tensor<T> out = products<T>({va.data(), false}, step_a, {vb.data(), false}, step_b, batches, m, k, n, false, out_shape);
  return record<T>(out, {ia, ib}, [=](TapeState<T>& s, int32_t self) {
    const Tensor<T>& G = s.grad_of(self);  // [batches, m, n]
    const int64_t step_g = m * n;
    if (s.requires_grad[ia]) {
      // dA = G · Bᵀ per batch (summed over batches when A has none). With A batched and B shared,
      // all batches are one [batches * m, n] x [n, k] product.
      Tensor<T> dA;
      if (nba > 0 && nbb == 0)
        dA = products<T>({G.data(), false}, 0, {vb.data(), true}, 0, 1, batches * m, n, k, false, sa);
      else
        dA = products<T>({G.data(), false}, step_g, {vb.data(), true}, step_b, batches, m, n, k, nba == 0, sa);
      s.accumulate(ia, dA);
    }
    if (s.requires_grad[ib]) {
      // dB = Aᵀ · G per batch (summed when B has none: one [k, batches * m] x [batches * m, n]
      // product when A is batched).
      Tensor<T> dB;
      if (nbb == 0 && nba > 0)
        dB = products<T>({va.data(), true}, 0, {G.data(), false}, 0, 1, k, batches * m, n, false, sb);
      else
        dB = products<T>({va.data(), true}, step_a, {G.data(), false}, step_g, batches, k, m, n, nbb == 0, sb);
      s.accumulate(ib, dB);
    }
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
    s.accumulate(ia, kernels::transpose_last2(s.grad_of(self)));
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
  return detail::record_uniform_aware<T>(a.value().reshape(std::move(shape)), {ia}, [=](TapeState<T>& s, int32_t self) {
    if (const std::optional<T> c = s.uniform_grad(self)) return s.accumulate_uniform(ia, *c);
    s.accumulate(ia, s.grad_of(self).reshape(in));
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
    kernels::add_into_dim(g, d, index, s.grad_of(self).reshape(kernels::keepdim_shape(in, d)));
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
    kernels::add_into_dim(g, d, start, s.grad_of(self));
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
      if (s.requires_grad[ids[i]]) s.accumulate(ids[i], kernels::slice_dim(s.grad_of(self), d, starts[i], starts[i] + lens[i]));
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
  const Shape result = broadcast_shapes(in, shape, "ascan::ad::broadcast_to()");
  if (result != shape)
    ascan::detail::raise("ascan::ad::broadcast_to(): shape {} cannot be broadcast to {}, expected a target "
                         "that contains it", format_shape(in), format_shape(shape));
  return record<T>(kernels::broadcast_to(a.value(), shape), {ia}, [=](TapeState<T>& s, int32_t self) {
    s.accumulate(ia, kernels::reduce_to(s.grad_of(self), in));
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
