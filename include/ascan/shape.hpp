// shape.hpp — shapes (std::vector<int64_t>), numel, NumPy broadcasting, dim resolution.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ascan {

using Shape = std::vector<int64_t>;

// Product of the extents (1 for rank 0). Throws ascan::Error from `where` on a negative extent
// or a product beyond int64_t (extents with a 0 among them count 0 elements, whatever the rest).
int64_t shape_numel(const Shape& shape, std::string_view where = "ascan::shape_numel()");
int64_t shape_numel(const int64_t* dims, size_t rank, std::string_view where);

// "[2, 3, 4]".
std::string format_shape(const Shape& shape);

// Row-major contiguous strides (in elements) of `shape`.
Shape contiguous_strides(const Shape& shape);

// NumPy broadcasting of two shapes (trailing dims aligned, size-1 stretches). Throws
// ascan::Error naming `where` when the shapes are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view where);

// Resolves a possibly negative `dim` against `rank`; throws ascan::Error naming `where` and
// `what` (e.g. "leaf 0") when it is out of range.
int64_t resolve_dim(int64_t dim, int64_t rank, std::string_view where, std::string_view what);

// The canonical [outer, length, inner] view of a contiguous tensor scanned along `dim`.
struct ScanView {
  int64_t outer = 1;
  int64_t length = 0;
  int64_t inner = 1;
};
ScanView scan_view(const Shape& shape, int64_t dim);

// `shape` without its `dim` axis (the shape of one slice along dim).
Shape remove_dim(const Shape& shape, int64_t dim);

}  // namespace ascan
