// fold.hpp — the fuzz targets' reference: a sequential fold along one dim of a (broadcast)
// shape, written without the library's scan code.
#pragma once

#include <ascan/tensor.hpp>

#include <cstdint>

#include "fuzz_input.hpp"

namespace fuzz {

// The most elements a leaf that broadcasts against `full` may have: a 0 extent in `full` may be
// a 1 in the leaf, so the targets bound this rather than numel(full).
inline int64_t leaf_numel_bound(const ascan::Shape& full) {
  int64_t n = 1;
  for (int64_t e : full) n *= e > 1 ? e : 1;
  return n;
}

// Element `i` of the full (broadcast) shape read from a leaf `t` (same rank, extents 1 broadcast).
template <class T>
T at(const ascan::Tensor<T>& t, const ascan::Shape& full, int64_t i) {
  const ascan::Shape& s = t.shape();
  int64_t off = 0, stride = 1;
  for (size_t d = full.size(); d-- > 0;) {
    const int64_t idx = i % full[d];
    i /= full[d];
    if (s[d] != 1) off += idx * stride;
    stride *= s[d];
  }
  return t.data()[off];
}

// The sequential fold along `dim` of the full shape: for each line, acc = f(acc, x_t).
template <class Step>
void fold(const ascan::Shape& full, int64_t dim, bool reverse, Step&& step) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= full[d];
  for (size_t d = dim + 1; d < full.size(); ++d) inner *= full[d];
  const int64_t n = full[dim];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j)
      for (int64_t k = 0; k < n; ++k) {
        const int64_t t = reverse ? n - 1 - k : k;
        step(k == 0, (o * n + t) * inner + j);
      }
}

// A leaf's shape for a scan of several leaves: the full shape with some extents 1 (broadcast
// over that dim; along the scan dim, a leaf constant over the steps).
inline ascan::Shape leaf_shape(Input& in, const ascan::Shape& full) {
  ascan::Shape s = full;
  for (auto& e : s)
    if (in.below(4) == 0) e = 1;
  return s;
}

}  // namespace fuzz
