// tensor_ops.cpp — eager Tensor arithmetic, compiled once per element type, through Eigen.
#include "ascan/tensor_ops.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstring>

namespace ascan {
namespace {

template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Strides of `in` (of shape `in_shape`) seen from a broadcast `out_shape`: 0 where stretched.
Shape broadcast_strides(const Shape& in_shape, const Shape& out_shape) {
  Shape strides(out_shape.size(), 0);
  const Shape own = contiguous_strides(in_shape);
  const size_t lead = out_shape.size() - in_shape.size();
  for (size_t i = 0; i < in_shape.size(); ++i)
    strides[lead + i] = in_shape[i] == 1 ? 0 : own[i];
  return strides;
}

// Calls row(out_index, a_offset, b_offset, n, a_step, b_step) for every run of the last dim of
// out_shape (n elements, operands advancing by a_step / b_step, each 0 or 1 in practice), in
// row-major order. The odometer runs once per row, so the inner loops stay tight.
template <class Row>
void for_each_broadcast_row(const Shape& out_shape, const Shape& sa, const Shape& sb, Row row) {
  const int64_t n = shape_numel(out_shape);
  if (n == 0) return;
  if (out_shape.empty()) {
    row(0, 0, 0, 1, 0, 0);
    return;
  }
  const size_t rank = out_shape.size();
  const int64_t len = out_shape[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; i += len) {
    row(i, oa, ob, len, sa[rank - 1], sb[rank - 1]);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < out_shape[d]) {
        oa += sa[d];
        ob += sb[d];
        break;
      }
      oa -= sa[d] * (out_shape[d] - 1);
      ob -= sb[d] * (out_shape[d] - 1);
      idx[d] = 0;
    }
  }
}

template <class T, class Op, class EigenOp>
Tensor<T> binary(const Tensor<T>& a, const Tensor<T>& b, const char* name, Op op, EigenOp eigen_op) {
  if (a.shape() == b.shape()) {  // the common case: one vectorised Eigen expression
    auto out = Tensor<T>::empty(a.shape());
    ArrayMap<T>(out.data(), out.numel()) =
        eigen_op(ConstArrayMap<T>(a.data(), a.numel()), ConstArrayMap<T>(b.data(), b.numel()));
    return out;
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  auto out = Tensor<T>::empty(shape);
  const Shape sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
  const T* pa = a.data();
  const T* pb = b.data();
  T* po = out.data();
  for_each_broadcast_row(shape, sa, sb, [&](int64_t i, int64_t oa, int64_t ob, int64_t n, int64_t da, int64_t db) {
    for (int64_t k = 0; k < n; ++k) po[i + k] = op(pa[oa + k * da], pb[ob + k * db]);
  });
  return out;
}

}  // namespace

template <class T>
Tensor<T> operator+(const Tensor<T>& a, const Tensor<T>& b) {
  return binary(a, b, "ascan::operator+()", [](T x, T y) { return x + y; },
                [](const auto& x, const auto& y) { return (x + y).eval(); });
}
template <class T>
Tensor<T> operator-(const Tensor<T>& a, const Tensor<T>& b) {
  return binary(a, b, "ascan::operator-()", [](T x, T y) { return x - y; },
                [](const auto& x, const auto& y) { return (x - y).eval(); });
}
template <class T>
Tensor<T> operator*(const Tensor<T>& a, const Tensor<T>& b) {
  return binary(a, b, "ascan::operator*()", [](T x, T y) { return x * y; },
                [](const auto& x, const auto& y) { return (x * y).eval(); });
}
template <class T>
Tensor<T> operator/(const Tensor<T>& a, const Tensor<T>& b) {
  return binary(a, b, "ascan::operator/()", [](T x, T y) { return x / y; },
                [](const auto& x, const auto& y) { return (x / y).eval(); });
}
template <class T>
Tensor<T> operator-(const Tensor<T>& a) {
  auto out = Tensor<T>::empty(a.shape());
  ArrayMap<T>(out.data(), out.numel()) = -ConstArrayMap<T>(a.data(), a.numel());
  return out;
}
template <class T>
Tensor<T> operator+(const Tensor<T>& a, T s) {
  auto out = Tensor<T>::empty(a.shape());
  ArrayMap<T>(out.data(), out.numel()) = ConstArrayMap<T>(a.data(), a.numel()) + s;
  return out;
}
template <class T>
Tensor<T> operator*(const Tensor<T>& a, T s) {
  auto out = Tensor<T>::empty(a.shape());
  ArrayMap<T>(out.data(), out.numel()) = ConstArrayMap<T>(a.data(), a.numel()) * s;
  return out;
}

template <class T>
Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b) {
  constexpr const char* where = "ascan::matmul()";
  if (a.rank() == 0 || b.rank() == 0)
    detail::raise("{}: operands have shapes {} and {}, expected rank >= 1 for both", where,
                  format_shape(a.shape()), format_shape(b.shape()));
  // Promote vectors to matrices, multiply, then drop the added dims (NumPy rules).
  const bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  const Tensor<T> A = a_vec ? a.reshape({1, a.shape()[0]}) : a;
  const Tensor<T> B = b_vec ? b.reshape({b.shape()[0], 1}) : b;
  const int64_t m = A.shape()[A.rank() - 2], k = A.shape()[A.rank() - 1];
  const int64_t k2 = B.shape()[B.rank() - 2], n = B.shape()[B.rank() - 1];
  const Shape batch_a(A.shape().begin(), A.shape().end() - 2), batch_b(B.shape().begin(), B.shape().end() - 2);
  if (k != k2 || (batch_a != batch_b && !batch_a.empty() && !batch_b.empty()))
    detail::raise("{}: cannot multiply shapes {} and {}, expected [..., m, k] x [..., k, n] with "
                  "equal batch dims", where, format_shape(a.shape()), format_shape(b.shape()));
  const Shape batch = batch_a.empty() ? batch_b : batch_a;
  const int64_t num_batch = shape_numel(batch);
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  auto out = Tensor<T>::empty(out_shape);
  const int64_t step_a = batch_a.empty() ? 0 : m * k, step_b = batch_b.empty() ? 0 : k * n;
  for (int64_t i = 0; i < num_batch; ++i) {
    Eigen::Map<const RowMatrix<T>> ma(A.data() + i * step_a, m, k);
    Eigen::Map<const RowMatrix<T>> mb(B.data() + i * step_b, k, n);
    Eigen::Map<RowMatrix<T>> mo(out.data() + i * m * n, m, n);
    mo.noalias() = ma * mb;
  }
  return out;
}

template <class T>
Tensor<T> transpose(const Tensor<T>& a) {
  if (a.rank() != 2)
    detail::raise("ascan::transpose(): operand has shape {}, expected rank 2", format_shape(a.shape()));
  const int64_t m = a.shape()[0], n = a.shape()[1];
  auto out = Tensor<T>::empty({n, m});
  Eigen::Map<RowMatrix<T>>(out.data(), n, m) = Eigen::Map<const RowMatrix<T>>(a.data(), m, n).transpose();
  return out;
}

template <class T>
Tensor<T> sum(const Tensor<T>& a) {
  auto out = Tensor<T>::empty({});
  out.data()[0] = a.numel() == 0 ? T(0) : ConstArrayMap<T>(a.data(), a.numel()).sum();
  return out;
}

template <class T>
Tensor<T> broadcast_to(const Tensor<T>& a, const Shape& shape) {
  const Shape result = broadcast_shapes(a.shape(), shape, "ascan::broadcast_to()");
  if (result != shape)
    detail::raise("ascan::broadcast_to(): shape {} cannot be broadcast to {}, expected a target "
                  "that contains it", format_shape(a.shape()), format_shape(shape));
  auto out = Tensor<T>::empty(shape);
  const Shape sa = broadcast_strides(a.shape(), shape);
  const T* pa = a.data();
  T* po = out.data();
  for_each_broadcast_row(shape, sa, sa, [&](int64_t i, int64_t oa, int64_t, int64_t n, int64_t da, int64_t) {
    if (da == 0) std::fill_n(po + i, n, pa[oa]);
    else std::copy_n(pa + oa, n, po + i);
  });
  return out;
}

template <class T>
Tensor<T> reduce_to(const Tensor<T>& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  const Shape check = broadcast_shapes(shape, a.shape(), "ascan::reduce_to()");
  if (check != a.shape())
    detail::raise("ascan::reduce_to(): shape {} does not broadcast to {}, expected a shape that "
                  "does", format_shape(shape), format_shape(a.shape()));
  auto out = Tensor<T>::zeros(shape);
  const Shape so = broadcast_strides(shape, a.shape());
  const T* pa = a.data();
  T* po = out.data();
  for_each_broadcast_row(a.shape(), so, so, [&](int64_t i, int64_t oo, int64_t, int64_t n, int64_t d, int64_t) {
    if (d == 0) {
      T acc = T(0);
      for (int64_t k = 0; k < n; ++k) acc += pa[i + k];
      po[oo] += acc;
    } else {
      for (int64_t k = 0; k < n; ++k) po[oo + k] += pa[i + k];
    }
  });
  return out;
}

template <class T>
Tensor<T> select(const Tensor<T>& a, int64_t dim, int64_t index) {
  dim = resolve_dim(dim, a.rank(), "ascan::select()", "the tensor");
  const ScanView v = scan_view(a.shape(), dim);
  if (index < 0 || index >= v.length)
    detail::raise("ascan::select(): index {} is out of range on dim {} of shape {}, expected "
                  "0 <= index < {}", index, dim, format_shape(a.shape()), v.length);
  auto out = Tensor<T>::empty(remove_dim(a.shape(), dim));
  for (int64_t o = 0; o < v.outer; ++o)
    std::memcpy(out.data() + o * v.inner, a.data() + (o * v.length + index) * v.inner,
                sizeof(T) * v.inner);
  return out;
}

namespace detail {

template <class T>
std::vector<Tensor<T>> split_slices(const Tensor<T>& a, int64_t dim) {
  const ScanView v = scan_view(a.shape(), dim);
  const Shape slice_shape = remove_dim(a.shape(), dim);
  std::vector<Tensor<T>> slices;
  slices.reserve(v.length);
  for (int64_t t = 0; t < v.length; ++t) slices.push_back(Tensor<T>::empty(slice_shape));
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t t = 0; t < v.length; ++t)
      std::memcpy(slices[t].data() + o * v.inner, a.data() + (o * v.length + t) * v.inner,
                  sizeof(T) * v.inner);
  return slices;
}

template <class T>
void join_slices(const std::vector<Tensor<T>>& slices, int64_t dim, Tensor<T>& out) {
  const ScanView v = scan_view(out.shape(), dim);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t t = 0; t < v.length; ++t)
      std::memcpy(out.data() + (o * v.length + t) * v.inner, slices[t].data() + o * v.inner,
                  sizeof(T) * v.inner);
}

}  // namespace detail

#define ASCAN_INSTANTIATE_TENSOR_OPS(T)                                                   \
  template Tensor<T> operator+(const Tensor<T>&, const Tensor<T>&);                       \
  template Tensor<T> operator-(const Tensor<T>&, const Tensor<T>&);                       \
  template Tensor<T> operator*(const Tensor<T>&, const Tensor<T>&);                       \
  template Tensor<T> operator/(const Tensor<T>&, const Tensor<T>&);                       \
  template Tensor<T> operator-(const Tensor<T>&);                                         \
  template Tensor<T> operator+(const Tensor<T>&, T);                                      \
  template Tensor<T> operator*(const Tensor<T>&, T);                                      \
  template Tensor<T> matmul(const Tensor<T>&, const Tensor<T>&);                          \
  template Tensor<T> transpose(const Tensor<T>&);                                         \
  template Tensor<T> sum(const Tensor<T>&);                                               \
  template Tensor<T> broadcast_to(const Tensor<T>&, const Shape&);                        \
  template Tensor<T> reduce_to(const Tensor<T>&, const Shape&);                           \
  template Tensor<T> select(const Tensor<T>&, int64_t, int64_t);                          \
  template std::vector<Tensor<T>> detail::split_slices(const Tensor<T>&, int64_t);        \
  template void detail::join_slices(const std::vector<Tensor<T>>&, int64_t, Tensor<T>&);
ASCAN_INSTANTIATE_TENSOR_OPS(float)
ASCAN_INSTANTIATE_TENSOR_OPS(double)
ASCAN_INSTANTIATE_TENSOR_OPS(int32_t)
ASCAN_INSTANTIATE_TENSOR_OPS(int64_t)

}  // namespace ascan
