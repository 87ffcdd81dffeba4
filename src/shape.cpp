// shape.cpp — shape arithmetic shared by every layer.
#include "ascan/shape.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ascan/error.hpp"

namespace ascan {

int64_t shape_numel(const Shape& shape, std::string_view where) {
  return shape_numel(shape.data(), shape.size(), where);
}

int64_t shape_numel(const int64_t* dims, size_t rank, std::string_view where) {
  bool empty = false;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0)
      detail::raise("{}: shape {} has a negative extent on dim {}, expected extents >= 0", where,
                    format_shape(Shape(dims, dims + rank)), i);
    empty = empty || dims[i] == 0;
  }
  if (empty) return 0;
  int64_t n = 1;
  for (size_t i = 0; i < rank; ++i)
    if (__builtin_mul_overflow(n, dims[i], &n))
      detail::raise("{}: shape {} has more elements than an int64_t counts (at most 2^63 - 1)", where,
                    format_shape(Shape(dims, dims + rank)));
  return n;
}

std::string format_shape(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view where) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      detail::raise("{}: shapes {} and {} cannot be broadcast (dim {} of the result: {} vs {}), "
                    "expected equal extents or 1",
                    where, format_shape(a), format_shape(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t resolve_dim(int64_t dim, int64_t rank, std::string_view where, std::string_view what) {
  if (dim < -rank || dim >= rank) {
    if (rank == 0)
      detail::raise("{}: dim {} is out of range for {} of rank 0, expected a leaf of rank >= 1",
                    where, dim, what);
    detail::raise("{}: dim {} is out of range for {} of rank {}, expected {} <= dim < {}", where,
                  dim, what, rank, -rank, rank);
  }
  return dim < 0 ? dim + rank : dim;
}

ScanView scan_view(const Shape& shape, int64_t dim) {
  ScanView v;
  for (int64_t i = 0; i < dim; ++i) v.outer *= shape[i];
  v.length = shape[dim];
  for (size_t i = dim + 1; i < shape.size(); ++i) v.inner *= shape[i];
  return v;
}

Shape remove_dim(const Shape& shape, int64_t dim) {
  Shape out;
  out.reserve(shape.size() - 1);
  for (size_t i = 0; i < shape.size(); ++i)
    if (static_cast<int64_t>(i) != dim) out.push_back(shape[i]);
  return out;
}

}  // namespace ascan
