// tensor_ops.hpp — eager arithmetic on Tensor (broadcasting elementwise ops, matmul, slices).
//
// These are what a Generic-mode combine writes on slices (e.g. matmul(A, B)); the same
// expressions compile on ascan::ad::Var, found by ADL. Compiled once in src/ for float, double,
// int32_t and int64_t; the element loops and products go through Eigen.
#pragma once

#include <cstdint>
#include <vector>

#include "ascan/tensor.hpp"

namespace ascan {

// Elementwise with NumPy broadcasting; throws ascan::Error on incompatible shapes.
template <class T> Tensor<T> operator+(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> operator-(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> operator*(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> operator/(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> operator-(const Tensor<T>& a);

// With a scalar on either side.
template <class T> Tensor<T> operator+(const Tensor<T>& a, T s);
template <class T> Tensor<T> operator*(const Tensor<T>& a, T s);
template <class T> Tensor<T> operator+(T s, const Tensor<T>& a) { return a + s; }
template <class T> Tensor<T> operator*(T s, const Tensor<T>& a) { return a * s; }

// Matrix product: [m, k] x [k, n] -> [m, n]; [k] x [k, n] -> [n]; [m, k] x [k] -> [m];
// [..., m, k] x [..., k, n] with equal leading (batch) dims. Throws on mismatched extents.
template <class T> Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b);

// Transpose of a rank-2 tensor (a copy).
template <class T> Tensor<T> transpose(const Tensor<T>& a);

// Sum of all elements (as a rank-0 tensor).
template <class T> Tensor<T> sum(const Tensor<T>& a);

// Materialises `a` broadcast to `shape` (NumPy rules); throws when not broadcastable.
template <class T> Tensor<T> broadcast_to(const Tensor<T>& a, const Shape& shape);

// Sums `a` over the broadcast dims so the result has `shape` (the adjoint of broadcast_to), on the
// thread pool, each element summed in an order fixed by the shapes (not by the thread count).
template <class T> Tensor<T> reduce_to(const Tensor<T>& a, const Shape& shape);

// The slice at `index` along `dim` (shape without dim), a copy.
template <class T> Tensor<T> select(const Tensor<T>& a, int64_t dim, int64_t index);

namespace detail {
// Strides of a tensor of shape `in` seen from the broadcast shape `out` (0 where stretched).
Shape broadcast_strides(const Shape& in, const Shape& out);
// reduce_to(a, shape) on a of shape `in` as one [outer, length, inner] reduction: dims
// [first, last] reduced (length 1 and first < 0: nothing to reduce). When kept dims sit between
// reduced ones, `partial` is the shape to reduce to first (the dims after the last kept one).
struct ReduceView {
  int64_t outer = 1, length = 1, inner = 1;
  int64_t first = -1, last = -1;
  Shape partial;
};
ReduceView reduce_view(const Shape& in, const Shape& shape);
// out[o, i] = sum over t of a[(o * length + t) * inner + i], on the thread pool, each output summed
// in an order that depends on the shape only (blocks of rows added in order).
template <class T> void reduce_middle(const T* a, T* out, int64_t outer, int64_t length, int64_t inner);
// All slices of `a` along `dim` (a resolved, valid dim), in order. They share storage with `a`
// (views; for dim > 0 views of one gathered copy) and keep it alive: read-only use only.
template <class T> std::vector<Tensor<T>> split_slices(const Tensor<T>& a, int64_t dim);
// Writes `slices` (each of shape remove_dim(out.shape(), dim)) into `out` along `dim`; the slices
// must not view `out` at other positions than their own.
template <class T> void join_slices(const std::vector<Tensor<T>>& slices, int64_t dim, Tensor<T>& out);
}  // namespace detail

#define ASCAN_DECLARE_TENSOR_OPS(T)                                                              \
  extern template Tensor<T> operator+(const Tensor<T>&, const Tensor<T>&);                       \
  extern template Tensor<T> operator-(const Tensor<T>&, const Tensor<T>&);                       \
  extern template Tensor<T> operator*(const Tensor<T>&, const Tensor<T>&);                       \
  extern template Tensor<T> operator/(const Tensor<T>&, const Tensor<T>&);                       \
  extern template Tensor<T> operator-(const Tensor<T>&);                                         \
  extern template Tensor<T> operator+(const Tensor<T>&, T);                                      \
  extern template Tensor<T> operator*(const Tensor<T>&, T);                                      \
  extern template Tensor<T> matmul(const Tensor<T>&, const Tensor<T>&);                          \
  extern template Tensor<T> transpose(const Tensor<T>&);                                         \
  extern template Tensor<T> sum(const Tensor<T>&);                                               \
  extern template Tensor<T> broadcast_to(const Tensor<T>&, const Shape&);                        \
  extern template Tensor<T> reduce_to(const Tensor<T>&, const Shape&);                           \
  extern template Tensor<T> select(const Tensor<T>&, int64_t, int64_t);                          \
  extern template std::vector<Tensor<T>> detail::split_slices(const Tensor<T>&, int64_t);        \
  extern template void detail::join_slices(const std::vector<Tensor<T>>&, int64_t, Tensor<T>&);
ASCAN_DECLARE_TENSOR_OPS(float)
ASCAN_DECLARE_TENSOR_OPS(double)
extern template void detail::reduce_middle(const float*, float*, int64_t, int64_t, int64_t);
extern template void detail::reduce_middle(const double*, double*, int64_t, int64_t, int64_t);
extern template void detail::reduce_middle(const int32_t*, int32_t*, int64_t, int64_t, int64_t);
extern template void detail::reduce_middle(const int64_t*, int64_t*, int64_t, int64_t, int64_t);
ASCAN_DECLARE_TENSOR_OPS(int32_t)
ASCAN_DECLARE_TENSOR_OPS(int64_t)
#undef ASCAN_DECLARE_TENSOR_OPS

}  // namespace ascan
