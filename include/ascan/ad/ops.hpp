// ops.hpp — differentiable operations on ascan::ad::Var (float and double).
//
// Each op computes its value eagerly, records one node on the current tape and, when a parent
// requires grad, a backward function (its exact VJP). Elementwise ops broadcast with NumPy rules
// and sum gradients back to each operand's shape. Names mirror the Tensor ops so one generic
// combine serves both (found by ADL). Every op validates its arguments and throws ascan::Error
// naming itself ("ascan::ad::matmul(): ...").
#pragma once

#include <cstdint>
#include <vector>

#include "ascan/ad/var.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad {

// ---- elementwise, broadcasting --------------------------------------------------------------
template <class T> Var<T> operator+(const Var<T>& a, const Var<T>& b);
template <class T> Var<T> operator-(const Var<T>& a, const Var<T>& b);
template <class T> Var<T> operator*(const Var<T>& a, const Var<T>& b);
template <class T> Var<T> operator/(const Var<T>& a, const Var<T>& b);
template <class T> Var<T> operator-(const Var<T>& a);
template <class T> Var<T> operator+(const Var<T>& a, T s);
template <class T> Var<T> operator*(const Var<T>& a, T s);
template <class T> Var<T> operator+(T s, const Var<T>& a) { return a + s; }
template <class T> Var<T> operator-(const Var<T>& a, T s) { return a + (-s); }
template <class T> Var<T> operator-(T s, const Var<T>& a) { return -a + s; }
template <class T> Var<T> operator*(T s, const Var<T>& a) { return a * s; }
template <class T> Var<T> operator/(const Var<T>& a, T s) { return a * (T(1) / s); }

template <class T> Var<T> exp(const Var<T>& a);
template <class T> Var<T> log(const Var<T>& a);
template <class T> Var<T> tanh(const Var<T>& a);
template <class T> Var<T> sigmoid(const Var<T>& a);
template <class T> Var<T> relu(const Var<T>& a);
template <class T> Var<T> softplus(const Var<T>& a);   // log(1 + exp(a)), stable
template <class T> Var<T> square(const Var<T>& a);
template <class T> Var<T> sqrt(const Var<T>& a);

// ---- linear algebra and shape ---------------------------------------------------------------
// [m, k] x [k, n], vector cases ([k] x [k, n], [m, k] x [k]) and equal batch dims [..., m, k].
template <class T> Var<T> matmul(const Var<T>& a, const Var<T>& b);
// Swaps the last two dims (rank >= 2).
template <class T> Var<T> transpose(const Var<T>& a);
// Outer product of two vectors: [m] x [n] -> [m, n].
template <class T> Var<T> outer(const Var<T>& a, const Var<T>& b);
template <class T> Var<T> reshape(const Var<T>& a, Shape shape);
// The slice at `index` along `dim` (the dim removed).
template <class T> Var<T> select(const Var<T>& a, int64_t dim, int64_t index);
// Elements [start, stop) along `dim` (the dim kept).
template <class T> Var<T> slice(const Var<T>& a, int64_t dim, int64_t start, int64_t stop);
// Joins equal-shaped Vars along a new dim / tensors along an existing dim.
template <class T> Var<T> stack(const std::vector<Var<T>>& vs, int64_t dim);
template <class T> Var<T> concat(const std::vector<Var<T>>& vs, int64_t dim);
// Broadcasts to `shape` (NumPy rules).
template <class T> Var<T> broadcast_to(const Var<T>& a, const Shape& shape);

// ---- reductions -------------------------------------------------------------------------------
// Sum / mean of all elements: a rank-0 Var.
template <class T> Var<T> sum(const Var<T>& a);
template <class T> Var<T> mean(const Var<T>& a);
// Along `dim`; keepdim keeps it with extent 1.
template <class T> Var<T> sum(const Var<T>& a, int64_t dim, bool keepdim = false);
template <class T> Var<T> mean(const Var<T>& a, int64_t dim, bool keepdim = false);

// ---- classification -------------------------------------------------------------------------
template <class T> Var<T> softmax(const Var<T>& a, int64_t dim);
template <class T> Var<T> log_softmax(const Var<T>& a, int64_t dim);
// out[i...] = a[i..., index[i...], ...] along `dim`: index has a's shape without `dim`.
template <class T> Var<T> gather(const Var<T>& a, int64_t dim, const Tensor<int64_t>& index);

#define ASCAN_AD_DECLARE_OPS(T)                                                            \
  extern template Var<T> operator+(const Var<T>&, const Var<T>&);                          \
  extern template Var<T> operator-(const Var<T>&, const Var<T>&);                          \
  extern template Var<T> operator*(const Var<T>&, const Var<T>&);                          \
  extern template Var<T> operator/(const Var<T>&, const Var<T>&);                          \
  extern template Var<T> operator-(const Var<T>&);                                         \
  extern template Var<T> operator+(const Var<T>&, T);                                      \
  extern template Var<T> operator*(const Var<T>&, T);                                      \
  extern template Var<T> exp(const Var<T>&);                                               \
  extern template Var<T> log(const Var<T>&);                                               \
  extern template Var<T> tanh(const Var<T>&);                                              \
  extern template Var<T> sigmoid(const Var<T>&);                                           \
  extern template Var<T> relu(const Var<T>&);                                              \
  extern template Var<T> softplus(const Var<T>&);                                          \
  extern template Var<T> square(const Var<T>&);                                            \
  extern template Var<T> sqrt(const Var<T>&);                                              \
  extern template Var<T> matmul(const Var<T>&, const Var<T>&);                             \
  extern template Var<T> transpose(const Var<T>&);                                         \
  extern template Var<T> outer(const Var<T>&, const Var<T>&);                              \
  extern template Var<T> reshape(const Var<T>&, Shape);                                    \
  extern template Var<T> select(const Var<T>&, int64_t, int64_t);                          \
  extern template Var<T> slice(const Var<T>&, int64_t, int64_t, int64_t);                  \
  extern template Var<T> stack(const std::vector<Var<T>>&, int64_t);                       \
  extern template Var<T> concat(const std::vector<Var<T>>&, int64_t);                      \
  extern template Var<T> broadcast_to(const Var<T>&, const Shape&);                        \
  extern template Var<T> sum(const Var<T>&);                                               \
  extern template Var<T> mean(const Var<T>&);                                              \
  extern template Var<T> sum(const Var<T>&, int64_t, bool);                                \
  extern template Var<T> mean(const Var<T>&, int64_t, bool);                               \
  extern template Var<T> softmax(const Var<T>&, int64_t);                                  \
  extern template Var<T> log_softmax(const Var<T>&, int64_t);                              \
  extern template Var<T> gather(const Var<T>&, int64_t, const Tensor<int64_t>&);
ASCAN_AD_DECLARE_OPS(float)
ASCAN_AD_DECLARE_OPS(double)
#undef ASCAN_AD_DECLARE_OPS

}  // namespace ascan::ad
