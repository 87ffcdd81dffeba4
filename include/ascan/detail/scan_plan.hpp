// scan_plan.hpp — shape analysis of a pointwise scan, done once per call in compiled code.
//
// The output (the broadcast of all leaves) is viewed as [columns, length, run]: `run` is the
// longest suffix of the dims after the scan axis over which every leaf is either contiguous
// (lane stride 1) or constant (lane stride 0); every other dim (before the axis, or after it but
// outside the run) enumerates independent columns. Each leaf has its own stride along the scan
// axis (0 when it broadcasts there) and its own column strides (0 on broadcast dims).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ascan/shape.hpp"

namespace ascan::detail {

struct LeafLayout {
  int64_t t_stride = 0;        // elements between consecutive steps (0: broadcast along axis)
  bool lane_contiguous = true;  // lane stride 1 (true) or 0 (constant over the run)
  std::vector<int64_t> column_strides;  // one per column dim
};

struct PointwisePlan {
  Shape out_shape;
  int64_t axis = 0;     // scan axis in out_shape
  int64_t length = 0;   // T
  int64_t run = 1;      // lanes per column (contiguous in the output)
  int64_t num_columns = 0;
  std::vector<int64_t> column_extents;        // mixed radix of the column index
  std::vector<int64_t> out_column_strides;
  int64_t out_t_stride = 1;                   // == product of dims after the axis
  std::vector<LeafLayout> leaves;
  bool trivial_columns = false;  // all leaves full: leaf offset == output offset for every column

  int64_t numel() const { return num_columns * length * run; }
  // Offsets of column c in each leaf (leaf_offsets[l]) and in the output.
  void column_offsets(int64_t c, int64_t* leaf_offsets, int64_t& out_offset) const;
};

// Validates leaf ranks, dim and broadcastability (throwing ascan::Error from `where`) and builds
// the plan. `dim` is resolved against leaf 0.
PointwisePlan make_pointwise_plan(const std::vector<Shape>& leaf_shapes, int64_t dim, std::string_view where);

// The plan for leaf shapes *shapes[0 .. n) and dim, from a small per-thread cache of recent plans:
// a training loop repeats the same shapes, and building a plan allocates (about a microsecond,
// which small scans would pay on every call). Errors are thrown as by make_pointwise_plan.
std::shared_ptr<const PointwisePlan> cached_pointwise_plan(const Shape* const* shapes, size_t n, int64_t dim,
                                                           std::string_view where);

// Checks that every output has `shape`.
void check_outputs(const std::vector<Shape>& out_shapes, const Shape& shape, std::string_view where);

struct LeafStorage {
  const void* storage;
  const Shape* shape;  // the tensor's own (outlives the check)
  int64_t numel;
};
// An output may share storage only with an input leaf of exactly its own shape (in place; over
// another leaf's input, that input is copied first); outputs must not share storage with each other.
void check_output_aliasing(std::span<const LeafStorage> ins, std::span<const LeafStorage> outs,
                           std::string_view where);

// Generic mode: resolves dim against leaf 0 and checks every leaf has rank > dim and the same
// length on it; returns the resolved dim.
int64_t check_generic_leaves(const std::vector<Shape>& shapes, int64_t dim, std::string_view where);
// Generic mode: each output must have its input's shape.
void check_generic_outputs(const std::vector<Shape>& in, const std::vector<Shape>& out, std::string_view where);

}  // namespace ascan::detail
