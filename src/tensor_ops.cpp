// tensor_ops.cpp — eager Tensor arithmetic, compiled once per element type, through Eigen.
#include "ascan/tensor_ops.hpp"

#include "ascan/config.hpp"
#include "ascan/parallel.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ascan {
namespace {

template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Extents of a result shape, on the stack up to rank 8 (small tensors are made without a Shape
// vector: see detail::TensorAccess).
class Dims {
 public:
  void push(int64_t d) {
    if (n_ < kInline) {
      inline_[n_++] = d;
      return;
    }
    if (heap_.empty()) heap_.assign(inline_, inline_ + kInline);
    heap_.push_back(d);
    ++n_;
  }
  const int64_t* data() const { return n_ <= kInline ? inline_ : heap_.data(); }
  size_t size() const { return n_; }
  template <class T>
  Tensor<T> empty() const { return detail::TensorAccess<T>::empty(data(), n_); }

 private:
  static constexpr size_t kInline = 8;
  int64_t inline_[kInline];
  std::vector<int64_t> heap_;
  size_t n_ = 0;
};

using detail::broadcast_strides;

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

// o[m, n] = a[m, k] · b[k, n] (row-major), for the small products of Generic-mode combines,
// where Eigen's dynamic-size path costs more than the arithmetic. Each element is summed over k in
// order, so a product does not depend on where it runs.
template <class T, int M, int K, int N>
void small_product_fixed(const T* ASCAN_RESTRICT a, const T* ASCAN_RESTRICT b, T* ASCAN_RESTRICT o) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      T s = a[i * K] * b[j];
      for (int q = 1; q < K; ++q) s += a[i * K + q] * b[q * N + j];
      o[i * N + j] = s;
    }
}
template <class T>
void small_product(const T* ASCAN_RESTRICT a, const T* ASCAN_RESTRICT b, T* ASCAN_RESTRICT o, int64_t m, int64_t k,
                   int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T s = a[i * k] * b[j];
      for (int64_t q = 1; q < k; ++q) s += a[i * k + q] * b[q * n + j];
      o[i * n + j] = s;
    }
}
constexpr int64_t kSmallProduct = 512;  // m * k * n up to this: the plain loops above

// `count` products o_i = a_i · b_i, operands advancing by step_a / step_b elements (0: one
// operand for all), with the size dispatch hoisted out of the loop (a batch of 2x2 products,
// as a batched Generic-mode combine makes, costs the arithmetic). Every product is computed as a
// single one would be. o is a fresh output that overlaps neither operand: without the restrict
// qualifiers GCC keeps every product scalar (the store to o may change a or b), with them it
// vectorises the batch.
template <class T, int M, int K, int N>
void small_products_fixed(const T* ASCAN_RESTRICT a, const T* ASCAN_RESTRICT b, T* ASCAN_RESTRICT o, int64_t count,
                          int64_t step_a, int64_t step_b) {
  for (int64_t i = 0; i < count; ++i) small_product_fixed<T, M, K, N>(a + i * step_a, b + i * step_b, o + i * M * N);
}
template <class T>
void products(const T* ASCAN_RESTRICT a, const T* ASCAN_RESTRICT b, T* ASCAN_RESTRICT o, int64_t m, int64_t k,
              int64_t n, int64_t count, int64_t step_a, int64_t step_b) {
  if (k > 0 && m * k * n <= kSmallProduct) {
    if (m == k && k == n) {
      switch (m) {
        case 2: return small_products_fixed<T, 2, 2, 2>(a, b, o, count, step_a, step_b);
        case 3: return small_products_fixed<T, 3, 3, 3>(a, b, o, count, step_a, step_b);
        case 4: return small_products_fixed<T, 4, 4, 4>(a, b, o, count, step_a, step_b);
        default: break;
      }
    } else if (n == 1 && m == k) {  // matrix x vector (affine maps)
      switch (m) {
        case 2: return small_products_fixed<T, 2, 2, 1>(a, b, o, count, step_a, step_b);
        case 3: return small_products_fixed<T, 3, 3, 1>(a, b, o, count, step_a, step_b);
        case 4: return small_products_fixed<T, 4, 4, 1>(a, b, o, count, step_a, step_b);
        default: break;
      }
    }
    for (int64_t i = 0; i < count; ++i) small_product(a + i * step_a, b + i * step_b, o + i * m * n, m, k, n);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    Eigen::Map<const RowMatrix<T>> ma(a + i * step_a, m, k);
    Eigen::Map<const RowMatrix<T>> mb(b + i * step_b, k, n);
    Eigen::Map<RowMatrix<T>> mo(o + i * m * n, m, n);
    mo.noalias() = ma * mb;
  }
}
template <class T>
void product(const T* a, const T* b, T* o, int64_t m, int64_t k, int64_t n) {
  products(a, b, o, m, k, n, 1, 0, 0);
}

}  // namespace

namespace detail {

// Strides of `in` (of shape `in_shape`) seen from a broadcast `out_shape`: 0 where stretched.
Shape broadcast_strides(const Shape& in_shape, const Shape& out_shape) {
  Shape strides(out_shape.size(), 0);
  const Shape own = contiguous_strides(in_shape);
  const size_t lead = out_shape.size() - in_shape.size();
  for (size_t i = 0; i < in_shape.size(); ++i)
    strides[lead + i] = in_shape[i] == 1 ? 0 : own[i];
  return strides;
}

ReduceView reduce_view(const Shape& in, const Shape& shape) {
  const size_t rank = in.size();
  Shape target(rank, 1);
  for (size_t i = 0; i < shape.size(); ++i) target[rank - shape.size() + i] = shape[i];
  ReduceView v;
  for (size_t d = 0; d < rank; ++d)
    if (target[d] != in[d]) {
      if (v.first < 0) v.first = static_cast<int64_t>(d);
      v.last = static_cast<int64_t>(d);
    }
  if (v.first < 0) {
    v.outer = shape_numel(in);
    return v;
  }
  for (int64_t d = v.first; d <= v.last; ++d)
    if (target[d] == in[d] && in[d] > 1) {  // a kept dim inside: reduce the dims after it first
      v.partial = in;
      for (int64_t e = d + 1; e <= v.last; ++e) v.partial[e] = target[e];
      return v;
    }
  for (int64_t d = 0; d < v.first; ++d) v.outer *= in[d];
  for (int64_t d = v.first; d <= v.last; ++d) v.length *= in[d];
  for (size_t d = static_cast<size_t>(v.last) + 1; d < rank; ++d) v.inner *= in[d];
  return v;
}

}  // namespace detail

namespace {
using detail::parallel_elements;
// Elements per task of the reductions: smaller tasks cost more to hand out than they take.
constexpr int64_t kGrain = int64_t{1} << 15;

// Sum of n contiguous elements in a fixed order (32 interleaved partial sums, so that several
// vector additions are in flight, then pairwise), so a sum does not depend on where or on how
// many threads it runs.
template <class T>
T sum_run(const T* ASCAN_RESTRICT p, int64_t n) {
  constexpr int kAcc = 32;
  T acc[kAcc] = {};
  int64_t i = 0;
  for (; i + kAcc <= n; i += kAcc)
    for (int j = 0; j < kAcc; ++j) acc[j] += p[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += p[i];
  for (int w = kAcc / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

}  // namespace

namespace detail {
// out[o, i] = sum over t of a[o, t, i] for the [outer, length, inner] view. Each output sums in a
// fixed order that depends on the shape only: lines of consecutive elements when inner == 1,
// blocks of kBlockRows rows (summed in order) otherwise.
template <class T>
void reduce_middle(const T* a, T* out, int64_t outer, int64_t length, int64_t inner) {
  if (outer * inner == 0) return;
  if (length == 0) {
    std::fill(out, out + outer * inner, T(0));
    return;
  }
  if (inner == 1) {
    if (outer == 1) {  // one long sum: fixed blocks, partial sums added in order
      constexpr int64_t kBlock = int64_t{1} << 14;
      const int64_t blocks = (length + kBlock - 1) / kBlock;
      std::vector<T> partial(static_cast<size_t>(blocks));
      parallel_elements(blocks, std::max<int64_t>(1, kGrain / kBlock), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
          partial[b] = sum_run(a + b * kBlock, std::min(kBlock, length - b * kBlock));
      });
      T total = T(0);
      for (T v : partial) total += v;
      out[0] = total;
      return;
    }
    parallel_elements(outer, std::max<int64_t>(1, kGrain / length), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) out[o] = sum_run(a + o * length, length);
    });
    return;
  }
  // Rows of `inner` lanes added in order, over blocks of rows; the blocks' partial rows are
  // then added in order. Work splits over (outer, lane chunk, row block).
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks = (length + kBlockRows - 1) / kBlockRows;
  const int64_t lane_chunk = std::min<int64_t>(inner, 4096);
  const int64_t chunks = (inner + lane_chunk - 1) / lane_chunk;
  std::vector<T> partial(static_cast<size_t>(blocks > 1 ? outer * blocks * inner : 0));
  const int64_t tasks = outer * chunks * blocks;
  parallel_elements(tasks, std::max<int64_t>(1, kGrain / (kBlockRows * lane_chunk)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t blk = t % blocks, c = (t / blocks) % chunks, o = t / (blocks * chunks);
      const int64_t i0 = c * lane_chunk, ni = std::min(lane_chunk, inner - i0);
      const int64_t r0 = blk * kBlockRows, r1 = std::min(length, r0 + kBlockRows);
      T* ASCAN_RESTRICT dst = blocks > 1 ? partial.data() + (o * blocks + blk) * inner + i0 : out + o * inner + i0;
      const T* src = a + (o * length + r0) * inner + i0;
      for (int64_t i = 0; i < ni; ++i) dst[i] = src[i];
      for (int64_t r = r0 + 1; r < r1; ++r) {
        const T* ASCAN_RESTRICT row = a + (o * length + r) * inner + i0;
        for (int64_t i = 0; i < ni; ++i) dst[i] += row[i];
      }
    }
  });
  // The blocks' partial rows, added in block order a row at a time (contiguous, vectorised).
  if (blocks > 1)
    parallel_elements(outer * chunks, std::max<int64_t>(1, kGrain / (blocks * lane_chunk)), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / chunks, i0 = (t % chunks) * lane_chunk, ni = std::min(lane_chunk, inner - i0);
        const T* p = partial.data() + o * blocks * inner + i0;
        T* ASCAN_RESTRICT dst = out + o * inner + i0;
        for (int64_t i = 0; i < ni; ++i) dst[i] = p[i];
        for (int64_t blk = 1; blk < blocks; ++blk) {
          const T* ASCAN_RESTRICT row = p + blk * inner;
          for (int64_t i = 0; i < ni; ++i) dst[i] += row[i];
        }
      }
    });
}

}  // namespace detail

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
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const size_t ra = sa.size(), rb = sb.size();
  if (ra == 0 || rb == 0)
    detail::raise("{}: operands have shapes {} and {}, expected rank >= 1 for both", where,
                  format_shape(sa), format_shape(sb));
  // Vectors act as [1, k] and [k, 1]; the added dims are dropped from the result (NumPy rules).
  const bool a_vec = ra == 1, b_vec = rb == 1;
  const size_t nba = a_vec ? 0 : ra - 2, nbb = b_vec ? 0 : rb - 2;  // batch dims
  const int64_t m = a_vec ? 1 : sa[ra - 2], k = sa[ra - 1];
  const int64_t k2 = b_vec ? sb[0] : sb[rb - 2], n = b_vec ? 1 : sb[rb - 1];
  if (k != k2 || (nba > 0 && nbb > 0 && !std::equal(sa.begin(), sa.begin() + nba, sb.begin(), sb.begin() + nbb)))
    detail::raise("{}: cannot multiply shapes {} and {}, expected [..., m, k] x [..., k, n] with "
                  "equal batch dims", where, format_shape(sa), format_shape(sb));
  if (nba == 0 && nbb == 0 && !a_vec && !b_vec) {  // the common case: two matrices
    const int64_t dims[2] = {m, n};
    auto out = detail::TensorAccess<T>::empty(dims, 2);
    product(a.data(), b.data(), out.data(), m, k, n);
    return out;
  }
  const Shape& batch_src = nba > 0 ? sa : sb;
  const size_t nbatch = nba > 0 ? nba : nbb;
  Dims out_dims;
  int64_t num_batch = 1;
  for (size_t i = 0; i < nbatch; ++i) {
    out_dims.push(batch_src[i]);
    num_batch *= batch_src[i];
  }
  if (!a_vec) out_dims.push(m);
  if (!b_vec) out_dims.push(n);
  auto out = out_dims.empty<T>();
  const int64_t step_a = nba == 0 ? 0 : m * k, step_b = nbb == 0 ? 0 : k * n;
  products(a.data(), b.data(), out.data(), m, k, n, num_batch, step_a, step_b);
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

// One group of reduced dims (possibly between kept ones) is a [outer, length, inner] reduction
// (detail::reduce_middle); several groups are reduced one at a time, the last first.
template <class T>
Tensor<T> reduce_to(const Tensor<T>& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  const Shape check = broadcast_shapes(shape, a.shape(), "ascan::reduce_to()");
  if (check != a.shape())
    detail::raise("ascan::reduce_to(): shape {} does not broadcast to {}, expected a shape that "
                  "does", format_shape(shape), format_shape(a.shape()));
  const detail::ReduceView v = detail::reduce_view(a.shape(), shape);
  if (!v.partial.empty()) return reduce_to(reduce_to(a, v.partial), shape);
  if (v.first < 0) return a.reshape(shape);
  auto out = Tensor<T>::empty(shape);
  detail::reduce_middle(a.data(), out.data(), v.outer, v.length, v.inner);
  return out;
}

template <class T>
Tensor<T> select(const Tensor<T>& a, int64_t dim, int64_t index) {
  dim = resolve_dim(dim, a.rank(), "ascan::select()", "the tensor");
  const ScanView v = scan_view(a.shape(), dim);
  if (index < 0 || index >= v.length)
    detail::raise("ascan::select(): index {} is out of range on dim {} of shape {}, expected "
                  "0 <= index < {}", index, dim, format_shape(a.shape()), v.length);
  Dims dims;
  for (size_t i = 0; i < a.shape().size(); ++i)
    if (static_cast<int64_t>(i) != dim) dims.push(a.shape()[i]);
  auto out = dims.empty<T>();
  for (int64_t o = 0; o < v.outer; ++o)
    std::memcpy(out.data() + o * v.inner, a.data() + (o * v.length + index) * v.inner,
                sizeof(T) * v.inner);
  return out;
}

namespace detail {

template <class T>
std::vector<Tensor<T>> split_slices(const Tensor<T>& a, int64_t dim) {
  const ScanView v = scan_view(a.shape(), dim);
  Dims dims;
  for (size_t i = 0; i < a.shape().size(); ++i)
    if (static_cast<int64_t>(i) != dim) dims.push(a.shape()[i]);
  std::vector<Tensor<T>> slices(v.length);
  if (v.outer == 1) {  // slices are contiguous runs of `a`: views, nothing copied
    TensorAccess<T>::views(a, dims.data(), dims.size(), v.inner, v.length, slices.data());
    return slices;
  }
  // Strided slices: gather them once into a [length, slice...] block, then view that.
  Dims gathered;
  gathered.push(v.length);
  for (size_t i = 0; i < dims.size(); ++i) gathered.push(dims.data()[i]);
  auto block = gathered.empty<T>();
  const int64_t slice_numel = v.outer * v.inner;
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t t = 0; t < v.length; ++t)
      std::memcpy(block.data() + t * slice_numel + o * v.inner, a.data() + (o * v.length + t) * v.inner,
                  sizeof(T) * v.inner);
  TensorAccess<T>::views(block, dims.data(), dims.size(), slice_numel, v.length, slices.data());
  return slices;
}

template <class T>
void join_slices(const std::vector<Tensor<T>>& slices, int64_t dim, Tensor<T>& out) {
  const ScanView v = scan_view(out.shape(), dim);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t t = 0; t < v.length; ++t)
      std::memmove(out.data() + (o * v.length + t) * v.inner, slices[t].data() + o * v.inner,
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
template void detail::reduce_middle(const float*, float*, int64_t, int64_t, int64_t);
template void detail::reduce_middle(const double*, double*, int64_t, int64_t, int64_t);
template void detail::reduce_middle(const int32_t*, int32_t*, int64_t, int64_t, int64_t);
template void detail::reduce_middle(const int64_t*, int64_t*, int64_t, int64_t, int64_t);
ASCAN_INSTANTIATE_TENSOR_OPS(int32_t)
ASCAN_INSTANTIATE_TENSOR_OPS(int64_t)

}  // namespace ascan
