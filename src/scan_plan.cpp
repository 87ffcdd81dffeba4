// scan_plan.cpp — builds the [columns, length, run] plan of a pointwise scan.
#include "ascan/detail/scan_plan.hpp"

#include <algorithm>
#include <array>

#include "ascan/error.hpp"

namespace ascan::detail {

void PointwisePlan::column_offsets(int64_t c, int64_t* leaf_offsets, int64_t& out_offset) const {
  if (trivial_columns) {
    out_offset = c * length * run;  // run == everything after the axis: columns are the outer dims
    for (size_t l = 0; l < leaves.size(); ++l) leaf_offsets[l] = out_offset;
    return;
  }
  for (size_t l = 0; l < leaves.size(); ++l) leaf_offsets[l] = 0;
  out_offset = 0;
  for (size_t d = column_extents.size(); d-- > 0;) {
    const int64_t e = column_extents[d];
    const int64_t i = c % e;
    c /= e;
    out_offset += i * out_column_strides[d];
    for (size_t l = 0; l < leaves.size(); ++l) leaf_offsets[l] += i * leaves[l].column_strides[d];
  }
}

PointwisePlan make_pointwise_plan(const std::vector<Shape>& leaf_shapes, int64_t dim, std::string_view where) {
  PointwisePlan plan;
  const int64_t rank0 = static_cast<int64_t>(leaf_shapes[0].size());
  const int64_t d0 = resolve_dim(dim, rank0, where, "leaf 0");
  for (size_t l = 1; l < leaf_shapes.size(); ++l) {
    const int64_t rank = static_cast<int64_t>(leaf_shapes[l].size());
    if (rank <= d0)
      detail::raise("{}: leaf {} has rank {} (shape {}), expected rank > {} (the scan dim)", where, l,
                    rank, format_shape(leaf_shapes[l]), d0);
  }
  // Scan lengths first (trailing dims aligned, NumPy style): equal, or 1 to broadcast; a leaf
  // of lower rank without the scan axis is constant along it.
  int64_t rank = 0;
  for (const Shape& s : leaf_shapes) rank = std::max<int64_t>(rank, static_cast<int64_t>(s.size()));
  plan.axis = d0 + (rank - rank0);
  const auto length_of = [&](const Shape& s) {
    const int64_t idx = plan.axis - (rank - static_cast<int64_t>(s.size()));
    return idx >= 0 ? s[idx] : int64_t{1};
  };
  plan.length = 1;
  size_t first = 0;  // the first leaf that is not broadcast along the scan axis sets T
  for (size_t l = 0; l < leaf_shapes.size(); ++l) {
    const int64_t len = length_of(leaf_shapes[l]);
    if (len == 1 || len == plan.length) continue;
    if (plan.length != 1)
      detail::raise("{}: leaf {} of shape {} has length {} on the scan dim, expected {} (the length "
                    "of leaf {}, shape {}) or 1 to broadcast", where, l, format_shape(leaf_shapes[l]),
                    len, plan.length, first, format_shape(leaf_shapes[first]));
    plan.length = len;
    first = l;
  }
  Shape out = leaf_shapes[0];
  for (size_t l = 1; l < leaf_shapes.size(); ++l) {
    const Shape& s = leaf_shapes[l];
    try {
      out = broadcast_shapes(out, s, where);
    } catch (const Error&) {
      detail::raise("{}: leaf {} of shape {} does not broadcast with the leaves before it (common "
                    "shape so far {}), expected NumPy-compatible shapes", where, l, format_shape(s),
                    format_shape(out));
    }
  }
  plan.out_shape = out;
  const Shape out_strides = contiguous_strides(out);
  plan.out_t_stride = out_strides[plan.axis];

  // Per leaf: strides in the output's index space (0 where the leaf is stretched or absent).
  std::vector<Shape> strides(leaf_shapes.size(), Shape(rank, 0));
  std::vector<Shape> extents(leaf_shapes.size(), Shape(rank, 1));
  for (size_t l = 0; l < leaf_shapes.size(); ++l) {
    const Shape& s = leaf_shapes[l];
    const Shape own = contiguous_strides(s);
    const int64_t lead = rank - static_cast<int64_t>(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      extents[l][lead + i] = s[i];
      strides[l][lead + i] = s[i] == 1 ? 0 : own[i];
    }
  }
  // Longest suffix of dims after the axis over which each leaf is full or constant.
  int64_t run_begin = rank;
  for (int64_t d = rank - 1; d > plan.axis; --d) {
    bool ok = true;
    for (size_t l = 0; l < leaf_shapes.size() && ok; ++l) {
      bool full = true, constant = true;
      for (int64_t k = d; k < rank; ++k) {
        if (extents[l][k] != out[k]) full = false;
        if (extents[l][k] != 1 && out[k] != 1) constant = false;
      }
      ok = full || constant;
    }
    if (!ok) break;
    run_begin = d;
  }
  plan.run = 1;
  for (int64_t k = run_begin; k < rank; ++k) plan.run *= out[k];
  plan.leaves.resize(leaf_shapes.size());
  bool all_full = true;
  for (size_t l = 0; l < leaf_shapes.size(); ++l) {
    LeafLayout& leaf = plan.leaves[l];
    leaf.t_stride = strides[l][plan.axis];
    bool full = true;
    for (int64_t k = run_begin; k < rank; ++k)
      if (extents[l][k] != out[k]) full = false;
    leaf.lane_contiguous = full;
    if (extents[l] != out) all_full = false;
  }
  plan.num_columns = 1;
  for (int64_t d = 0; d < run_begin; ++d) {
    if (d == plan.axis) continue;
    plan.column_extents.push_back(out[d]);
    plan.out_column_strides.push_back(out_strides[d]);
    for (size_t l = 0; l < leaf_shapes.size(); ++l) plan.leaves[l].column_strides.push_back(strides[l][d]);
    plan.num_columns *= out[d];
  }
  // Fast column decode when nothing broadcasts and the run covers every dim after the axis.
  plan.trivial_columns = all_full && run_begin == plan.axis + 1;
  return plan;
}

std::shared_ptr<const PointwisePlan> cached_pointwise_plan(const Shape* const* shapes, size_t n, int64_t dim,
                                                           std::string_view where) {
  struct Entry {
    std::vector<Shape> shapes;
    int64_t dim = 0;
    std::shared_ptr<const PointwisePlan> plan;
  };
  constexpr size_t kEntries = 8;
  thread_local std::array<Entry, kEntries> cache;
  thread_local size_t next = 0;
  for (const Entry& e : cache) {
    if (!e.plan || e.dim != dim || e.shapes.size() != n) continue;
    bool same = true;
    for (size_t l = 0; l < n && same; ++l) same = *shapes[l] == e.shapes[l];
    if (same) return e.plan;
  }
  Entry e;
  e.dim = dim;
  for (size_t l = 0; l < n; ++l) e.shapes.push_back(*shapes[l]);
  e.plan = std::make_shared<const PointwisePlan>(make_pointwise_plan(e.shapes, dim, where));
  cache[next] = std::move(e);
  const auto plan = cache[next].plan;
  next = (next + 1) % kEntries;
  return plan;
}

void check_outputs(const std::vector<Shape>& out_shapes, const Shape& shape, std::string_view where) {
  for (size_t l = 0; l < out_shapes.size(); ++l)
    if (out_shapes[l] != shape)
      detail::raise("{}: output {} has shape {}, expected {}", where, l, format_shape(out_shapes[l]),
                    format_shape(shape));
}

void check_output_aliasing(std::span<const LeafStorage> ins, std::span<const LeafStorage> outs,
                           std::string_view where) {
  for (size_t o = 0; o < outs.size(); ++o) {
    if (outs[o].numel == 0) continue;
    for (size_t p = 0; p < o; ++p)
      if (outs[p].numel > 0 && outs[p].storage == outs[o].storage)
        detail::raise("{}: outputs {} and {} share storage, expected distinct outputs", where, p, o);
    for (size_t l = 0; l < ins.size(); ++l)
      if (ins[l].storage == outs[o].storage && *ins[l].shape != *outs[o].shape)
        detail::raise("{}: output {} shares storage with input leaf {} of shape {}, expected it to "
                      "share storage only with an input of its own shape {}", where, o, l,
                      format_shape(*ins[l].shape), format_shape(*outs[o].shape));
  }
}

int64_t check_generic_leaves(const std::vector<Shape>& shapes, int64_t dim, std::string_view where) {
  const int64_t d = resolve_dim(dim, static_cast<int64_t>(shapes[0].size()), where, "leaf 0");
  for (size_t l = 1; l < shapes.size(); ++l) {
    if (static_cast<int64_t>(shapes[l].size()) <= d)
      detail::raise("{}: leaf {} has rank {} (shape {}), expected rank > {} (the scan dim)", where, l,
                    shapes[l].size(), format_shape(shapes[l]), d);
    if (shapes[l][d] != shapes[0][d])
      detail::raise("{}: leaf {} has length {} on dim {}, expected {} (leaf 0); generic mode does "
                    "not broadcast", where, l, shapes[l][d], d, shapes[0][d]);
  }
  return d;
}

void check_generic_outputs(const std::vector<Shape>& in, const std::vector<Shape>& out,
                           std::string_view where) {
  for (size_t l = 0; l < in.size(); ++l)
    if (out[l] != in[l])
      detail::raise("{}: output {} has shape {}, expected {} (its input's shape)", where, l,
                    format_shape(out[l]), format_shape(in[l]));
}

}  // namespace ascan::detail
