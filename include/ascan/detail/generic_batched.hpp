// generic_batched.hpp — the host scan of batched Generic mode (ascan::generic_batched(f)).
//
// Up to one chunk of rows, the odd/even tree of generic_scan.hpp (the same association, so the
// same results bitwise), but each level is one call of f per thread on batches of slices: leaf l
// of an operand is a contiguous [m, slice_l...] tensor holding the m left (right) slices of the
// level's pairs, and f returns the m results the same way. The operands are gathered from their
// rows (the even and odd positions of the level below) with fixed-size copies for small slices,
// so a chain of 2x2 matrix products costs its arithmetic and about a dozen row copies per element
// instead of two Tensor calls per element. Longer scans fold segments of rows side by side
// (scan_interleaved, below): 2 combines and 2 row copies per element.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ascan/detail/generic_scan.hpp"
#include "ascan/detail/pointwise_scan.hpp"
#include "ascan/detail/scan_chain.hpp"

namespace ascan::detail {

template <size_t B>
void copy_rows_fixed(char* d, std::ptrdiff_t ds, const char* s, std::ptrdiff_t ss, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, B);
}
// dst.row(i) = src.row(i) for i < n (row sizes equal). A runtime-sized memcpy per row would cost
// more than the copy for the small slices this mode is for: common sizes copy with fixed moves.
inline void copy_rows(const RowSet& dst, const RowSet& src, int64_t n) {
  char* d = dst.first;
  const char* s = src.first;
  const std::ptrdiff_t ds = dst.step, ss = src.step;
  switch (dst.bytes) {
    case 4: return copy_rows_fixed<4>(d, ds, s, ss, n);
    case 8: return copy_rows_fixed<8>(d, ds, s, ss, n);
    case 16: return copy_rows_fixed<16>(d, ds, s, ss, n);
    case 24: return copy_rows_fixed<24>(d, ds, s, ss, n);
    case 32: return copy_rows_fixed<32>(d, ds, s, ss, n);
    case 36: return copy_rows_fixed<36>(d, ds, s, ss, n);
    case 64: return copy_rows_fixed<64>(d, ds, s, ss, n);
    case 72: return copy_rows_fixed<72>(d, ds, s, ss, n);
    case 128: return copy_rows_fixed<128>(d, ds, s, ss, n);
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, dst.bytes);
  }
}

// Calls fn(l, a_leaf, b_leaf) on the corresponding Tensor leaves of two structures of one type.
template <class S, class Fn>
void zip_leaves(S& a, const S& b, Fn&& fn, size_t& l) {
  if constexpr (is_std_tuple_v<S>) {
    [&]<size_t... K>(std::index_sequence<K...>) {
      (zip_leaves(std::get<K>(a), std::get<K>(b), fn, l), ...);
    }(std::make_index_sequence<std::tuple_size_v<S>>{});
  } else if constexpr (is_tensor_list<S>::value) {
    for (size_t i = 0; i < a.size(); ++i) fn(l++, a[i], b[i]);
  } else {
    fn(l++, a, b);
  }
}
template <class S, class Fn>
void zip_leaves(S& a, const S& b, Fn&& fn) {
  size_t l = 0;
  zip_leaves(a, b, fn, l);
}

// Batched Generic mode's knobs (docs/design.md §2); the measurements that chose them are in
// docs/performance/history.md under their names.
struct BatchedPolicy {
  // Scans of up to chunk_bytes of slices (all leaves), and at least chunk_min_rows rows, run the
  // tree (Generic mode's association); longer ones fold segments side by side (scan_interleaved).
  // The tree's levels go through memory, so a chain of trees over cache-sized chunks beats one
  // tree over the whole scan.
  static constexpr int64_t chunk_bytes = int64_t{128} << 10;
  static constexpr int64_t chunk_min_rows = 1024;
  // scan_interleaved: segments per group such that one step's batch (all segments) holds about
  // interleaved_batch_bytes of slices (fewer segments: a shorter tree over their totals), with at
  // least interleaved_min_steps rows per segment.
  static constexpr int64_t interleaved_batch_bytes = int64_t{16} << 10;
  static constexpr int64_t interleaved_min_steps = 16;
  // Groups of this many bytes of slices, each on one thread and chained: larger groups scanned
  // by all threads paid a parallel region's wake-ups per group.
  static constexpr int64_t interleaved_group_bytes = int64_t{256} << 10;
  // Transposes in tiles of this many bytes of one step's rows.
  static constexpr int64_t transpose_tile_bytes = 1024;
};

template <class X>
struct BatchedGenericScan {
  X blank;                          // the structure with empty leaves
  std::vector<Shape> slice_shapes;  // of each leaf
  std::vector<size_t> slice_bytes;
  std::string_view where;
  int64_t grain = 1;     // rows per call of f, at least (when a level is split over threads)
  bool parallel = true;  // false inside the workers of a chained scan

  // Bytes of one row of slices, all leaves (at least 1).
  int64_t row_bytes() const {
    int64_t r = 0;
    for (size_t b : slice_bytes) r += static_cast<int64_t>(b);
    return std::max<int64_t>(r, 1);
  }

  template <class Body>
  void for_range(int64_t n, int64_t g, const Body& body) const {
    if (parallel && n > g) parallel_for(n, g, body);
    else body(0, n);
  }

  // Fresh [rows, slice...] leaves.
  X alloc(int64_t rows) const {
    X r = blank;
    for_each_leaf(r, [&](size_t l, auto& t) {
      using T = leaf_value_t<decltype(t)>;
      Shape dims{rows};
      dims.insert(dims.end(), slice_shapes[l].begin(), slice_shapes[l].end());
      t = Tensor<T>::empty(dims);
    });
    return r;
  }
  std::vector<RowSet> rows_of(const X& x) const {
    std::vector<RowSet> sets;
    for_each_leaf(x, [&](size_t l, const auto& t) {
      using T = leaf_value_t<decltype(t)>;
      const auto step = static_cast<std::ptrdiff_t>(slice_bytes[l]);
      sets.push_back({reinterpret_cast<char*>(const_cast<T*>(t.data())), step, slice_bytes[l]});
    });
    return sets;
  }
  static std::vector<RowSet> every(const std::vector<RowSet>& sets, int64_t start, int64_t stride) {
    std::vector<RowSet> r;
    r.reserve(sets.size());
    for (const RowSet& s : sets) r.push_back(s.every(start, stride));
    return r;
  }

  // dst rows [0, n) = src rows [0, n), split over threads for long levels.
  void copy(const std::vector<RowSet>& dst, const std::vector<RowSet>& src, int64_t n) const {
    for_range(n, std::max<int64_t>(grain, 4096), [&](int64_t b, int64_t e) {
      for (size_t l = 0; l < dst.size(); ++l) copy_rows(dst[l].every(b, 1), src[l].every(b, 1), e - b);
    });
  }
  X gather(const std::vector<RowSet>& src, int64_t n) const {
    X r = alloc(n);
    copy(rows_of(r), src, n);
    return r;
  }

  // Rows [b, e) of the leaves of x, as views.
  X view_rows(const X& x, int64_t b, int64_t e) const {
    X r = blank;
    zip_leaves(r, x, [&](size_t l, auto& out, const auto& src) {
      using T = leaf_value_t<decltype(out)>;
      const Shape& slice = slice_shapes[l];
      int64_t dims_small[8];
      Shape dims_large;
      int64_t* dims = dims_small;
      if (slice.size() + 1 > 8) {
        dims_large.resize(slice.size() + 1);
        dims = dims_large.data();
      }
      dims[0] = e - b;
      std::copy(slice.begin(), slice.end(), dims + 1);
      const int64_t numel = static_cast<int64_t>(slice_bytes[l] / sizeof(T));
      StorageHeader* h = TensorAccess<T>::make_view_header(src, dims, slice.size() + 1);
      TensorAccess<T>::bind(out, h, const_cast<T*>(src.data()) + b * numel, (e - b) * numel);  // takes h's reference
    });
    return r;
  }

  // The m results of f on the rows of a and b (each [m, slice...]) into dst rows [0, m).
  template <class F>
  void apply(const F& f, const X& a, const X& b, int64_t m, const std::vector<RowSet>& dst) const {
    for_range(m, grain, [&](int64_t lo, int64_t hi) {
      const X r = f(view_rows(a, lo, hi), view_rows(b, lo, hi));
      check(r, hi - lo);
      for_each_leaf(r, [&](size_t l, const auto& t) {
        const auto step = static_cast<std::ptrdiff_t>(slice_bytes[l]);
        copy_rows(dst[l].every(lo, 1), {reinterpret_cast<char*>(const_cast<leaf_value_t<decltype(t)>*>(t.data())), step, slice_bytes[l]}, hi - lo);
      });
    });
  }

  void check(const X& r, int64_t m) const {
    if constexpr (is_tensor_list<X>::value) {
      if (r.size() != slice_shapes.size())
        raise("{}: the batched generic combine returned {} leaves, expected {} (one per input leaf)",
              where, r.size(), slice_shapes.size());
    }
    for_each_leaf(r, [&](size_t l, const auto& t) {
      const Shape& got = t.shape();
      bool same = got.size() == slice_shapes[l].size() + 1 && got[0] == m;
      for (size_t i = 0; same && i < slice_shapes[l].size(); ++i) same = got[i + 1] == slice_shapes[l][i];
      if (!same) {
        Shape want{m};
        want.insert(want.end(), slice_shapes[l].begin(), slice_shapes[l].end());
        raise("{}: the batched generic combine returned leaf {} of shape {} for a batch of {} pairs, "
              "expected {} (a batch of slices of leaf {}: one result per pair, with the leaf's slice "
              "shape)", where, l, format_shape(got), m, format_shape(want), l);
      }
    });
  }

  // Slice i of the batch x (views without the batch dim).
  X slice_at(const X& x, int64_t i) const {
    X r = blank;
    zip_leaves(r, x, [&](size_t l, auto& out, const auto& src) {
      using T = leaf_value_t<decltype(out)>;
      const Shape& dims = slice_shapes[l];
      const int64_t numel = static_cast<int64_t>(slice_bytes[l] / sizeof(T));
      StorageHeader* h = TensorAccess<T>::make_view_header(src, dims.data(), dims.size());
      TensorAccess<T>::bind(out, h, const_cast<T*>(src.data()) + i * numel, numel);
    });
    return r;
  }

  // The contract check, once per scan: the first and last pairs of the first batch, combined on
  // their slices alone, agree with the batched results (to rounding: a batch may be computed in
  // another order). A combine that mixes the pairs of a batch (reads one element of its operands,
  // multiplies vectors with matmul) fails it instead of returning wrong scans.
  template <class F>
  void verify(const F& f, const X& left, const X& right, const X& batched, int64_t m) const {
    for (int64_t i : {int64_t{0}, m - 1}) {
      X single = f(slice_at(left, i), slice_at(right, i));
      if constexpr (is_tensor_list<X>::value) {
        if (single.size() != slice_shapes.size())
          raise("{}: the batched generic combine returned {} leaves for one pair, expected {} (one "
                "per input leaf)", where, single.size(), slice_shapes.size());
      }
      zip_leaves(single, batched, [&](size_t l, const auto& one, const auto& all) {
        using T = leaf_value_t<decltype(one)>;
        if (one.shape() != slice_shapes[l])
          raise("{}: the batched generic combine returned leaf {} of shape {} for a single pair of "
                "slices, expected {} (f must also combine single slices)", where, l,
                format_shape(one.shape()), format_shape(slice_shapes[l]));
        const T* b = all.data() + i * one.numel();
        for (int64_t e = 0; e < one.numel(); ++e) {
          const T u = one.data()[e], v = b[e];
          bool same = u == v;
          if constexpr (std::is_floating_point_v<T>) {
            same = same || (u != u && v != v) ||
                   std::abs(static_cast<double>(u) - static_cast<double>(v)) <=
                       1e-3 * std::max(std::abs(static_cast<double>(u)), std::abs(static_cast<double>(v)));
          }
          if (!same)
            raise("{}: the batched generic combine gave pair {} of a batch of {} another result than "
                  "on that pair's slices alone (leaf {}, element {}: {} batched, {} alone), expected "
                  "the same: f must combine the pairs of a batch independently, as elementwise ops "
                  "and matmul of matrices (rank >= 2) do. Use ascan::generic(f) for a combine that "
                  "does not batch", where, i, m, l, e, v, u);
        }
      });
    }
  }

  // y rows [0, n) = the inclusive scan of x rows [0, n): the odd/even tree of GenericScan.
  template <class F>
  void scan(const F& f, const std::vector<RowSet>& x, int64_t n, const std::vector<RowSet>& y, bool top) const {
    if (n == 0) return;
    copy(y, x, 1);
    if (n == 1) return;
    const int64_t m = n / 2;
    {
      X pairs = alloc(m);
      {
        const X left = gather(every(x, 0, 2), m), right = gather(every(x, 1, 2), m);
        apply(f, left, right, m, rows_of(pairs));
        if (top) verify(f, left, right, pairs, m);
      }
      scan(f, rows_of(pairs), m, every(y, 1, 2), false);  // y_{2i+1}
    }
    const int64_t k = (n - 1) / 2;  // y_{2i+2} = f(y_{2i+1}, x_{2i+2})
    if (k > 0) apply(f, gather(every(y, 1, 2), k), gather(every(x, 2, 2), k), k, every(y, 2, 2));
  }

  // Long scans (more rows than one chunk of the tree, above) go in groups of rows that stay in
  // a core's cache. A group is cut into segments of K consecutive rows (the last one shorter),
  // scanned side by side: step k combines every segment's prefix with its row k in one call of f, a
  // batch of one pair per segment. A first pass folds the segments into their totals and the tree scans
  // them (its last row is the group's total); a second pass folds every segment again from what
  // precedes it (the carry into the group combined with the totals of the segments before it) and
  // writes its rows. The group is transposed to step-major rows once, so each step's operands
  // are views, and the second pass's results are transposed back into y: each element costs 2
  // combines and 2 row copies, where a chain of trees over cache-sized chunks costs 3 combines
  // (the tree's 2, the chunk's carry) and about a dozen copies (each level gathers its operands
  // and copies its results). Groups go to the threads in order, each scanned by one; a group
  // publishes its carry out (the carry in combined with its total) as soon as its first pass
  // and tree are done, so a group waits for its predecessor only between its passes and the
  // chain costs one combine per group. The association depends on n and the constants only,
  // not on the thread count.
  template <class F>
  void scan_interleaved(const F& f, const std::vector<RowSet>& x, int64_t n, const std::vector<RowSet>& y) const {
    const int64_t group = std::max(BatchedPolicy::interleaved_group_bytes / row_bytes(), 2 * BatchedPolicy::interleaved_min_steps);
    const int64_t groups = (n + group - 1) / group;
    ItemChain items(groups);
    std::vector<X> carry_out(static_cast<size_t>(groups));  // the scan's row at the group's end
    BatchedGenericScan serial = *this;
    serial.parallel = false;
    const int workers = static_cast<int>(std::min<int64_t>(parallel ? num_threads() : 1, groups));
    items.run(workers, [&](int) {
      while (!items.failed()) {
        const int64_t g = items.claim();
        if (g >= groups) return;
        const int64_t g0 = g * group, len = std::min(group, n - g0);
        const int64_t segments = std::clamp<int64_t>(BatchedPolicy::interleaved_batch_bytes / row_bytes(), 1,
                                                 std::max<int64_t>(1, len / BatchedPolicy::interleaved_min_steps));
        // Called between the passes with the group's total: publishes the group's carry out and
        // sets the carry into it (null for the first); false when another group failed.
        const auto chain = [&](const X& total, const X*& carry) {
          if (g == 0) {
            carry_out[0] = total;
          } else {
            if (!items.wait(g - 1)) return false;
            carry_out[g] = f(carry_out[g - 1], total);
            check(carry_out[g], 1);
            carry = &carry_out[g - 1];
          }
          items.publish(g);
          return true;
        };
        if (!serial.scan_segments(f, every(x, g0, 1), len, every(y, g0, 1), segments, chain, g == 0)) return;
      }
    });
  }

  // One group of scan_interleaved, on this thread: rows [0, n) of x into y. chain(total, carry)
  // takes the group's total (one row) and sets the carry into the group (null: none); false from
  // it (the chain failed elsewhere) ends the scan with false.
  template <class F, class Chain>
  bool scan_segments(const F& f, const std::vector<RowSet>& x, int64_t n, const std::vector<RowSet>& y, int64_t segments,
                 const Chain& chain, bool top) const {
    // Rows per segment, odd: with a power-of-two stride between the segments' rows the rows of one step
    // of a tile (in the transposes) would map to few cache sets.
    const int64_t K = std::min((n + segments - 1) / segments | 1, n);
    const int64_t C = (n + K - 1) / K;  // segments, the last of n - (C - 1) K rows (only it may end early)
    const int64_t last_len = n - (C - 1) * K;
    // Segments that hold step k: all but the last one past its length.
    const auto held = [&](int64_t k) { return k >= last_len ? C - 1 : C; };
    // The transposes between segment-major rows (row c K + k of the group is row k of segment c) and
    // step-major ones, in tiles of segments: copy(t0, k, rows) moves step k of segments [t0, t0 + rows),
    // contiguous rows on the step-major side.
    const int64_t tile = std::max<int64_t>(4, BatchedPolicy::transpose_tile_bytes / row_bytes());
    const auto transpose = [&](const auto& copy) {
      for (int64_t t0 = 0; t0 < C; t0 += tile) {
        const int64_t t1 = std::min(C, t0 + tile);
        for (int64_t k = 0; k < K; ++k) copy(t0, k, k >= last_len && t1 == C ? t1 - t0 - 1 : t1 - t0);
      }
    };
    // x transposed to step-major rows: row k C + c is row k of segment c.
    X xt = alloc(K * C);
    const std::vector<RowSet> xt_rows = rows_of(xt);
    transpose([&](int64_t t0, int64_t k, int64_t rows) {
      for (size_t l = 0; l < x.size(); ++l) copy_rows(xt_rows[l].every(k * C + t0, 1), x[l].every(t0 * K + k, K), rows);
    });
    // Step k of both passes: the segments' prefixes through step k - 1 (held(k - 1) rows) combined
    // with their rows k.
    const auto fold_step = [&](const X& prev, int64_t k) {
      const int64_t h = held(k);
      X r = f(h == held(k - 1) ? prev : view_rows(prev, 0, h), view_rows(xt, k * C, k * C + h));
      check(r, h);
      return r;
    };
    // Pass 1: the segments' totals (the last segment's when it ends), then their inclusive scan.
    X totals = alloc(C);
    const std::vector<RowSet> total_rows = rows_of(totals);
    X acc = view_rows(xt, 0, C);
    for (int64_t k = 1; k < K; ++k) {
      const int64_t h = held(k);
      if (h < held(k - 1)) copy(every(total_rows, C - 1, 1), every(rows_of(acc), C - 1, 1), 1);
      X r = fold_step(acc, k);
      if (top && k == 1) verify(f, view_rows(acc, 0, h), view_rows(xt, C, C + h), r, h);
      acc = std::move(r);
    }
    copy(total_rows, rows_of(acc), held(K - 1));
    X prefix = alloc(C);
    scan(f, total_rows, C, rows_of(prefix), false);
    const X* carry = nullptr;
    if (!chain(view_rows(prefix, C - 1, C), carry)) return false;
    // What segment c starts from: row c of `starts` (the carry, then the carry combined with the
    // prefixes), or without a carry row c - 1 of the prefixes (segment 0 from nothing).
    X starts;
    if (carry) {
      starts = alloc(C);
      copy(rows_of(starts), rows_of(*carry), 1);
      if (C > 1) {
        X carries = alloc(C - 1);
        copy(rows_of(carries), every(rows_of(*carry), 0, 0), C - 1);
        apply(f, carries, view_rows(prefix, 0, C - 1), C - 1, every(rows_of(starts), 1, 1));
      }
    } else {
      starts = view_rows(prefix, 0, C - 1);
    }
    // Pass 2: every segment from what precedes it; each step's results are kept, then written to y
    // transposed back.
    std::vector<X> steps;  // step k: rows for segments [0, held(k))
    steps.reserve(static_cast<size_t>(K));
    if (carry) {
      steps.push_back(f(starts, view_rows(xt, 0, C)));
      check(steps[0], C);
    } else {  // segment 0's row 0 as it is, the others after their starts
      steps.push_back(alloc(C));
      copy(rows_of(steps[0]), xt_rows, 1);
      if (C > 1) {
        const X r = f(starts, view_rows(xt, 1, C));
        check(r, C - 1);
        copy(every(rows_of(steps[0]), 1, 1), rows_of(r), C - 1);
      }
    }
    for (int64_t k = 1; k < K; ++k) steps.push_back(fold_step(steps.back(), k));
    std::vector<std::vector<RowSet>> step_rows;
    for (const X& r : steps) step_rows.push_back(rows_of(r));
    transpose([&](int64_t t0, int64_t k, int64_t rows) {
      for (size_t l = 0; l < y.size(); ++l) copy_rows(y[l].every(t0 * K + k, K), step_rows[k][l].every(t0, 1), rows);
    });
    return true;
  }
};

// Scans the leaves `xs` (validated as for Generic mode) into `ys` (same shapes); Leaves is a
// std::tuple of Tensors (the flat leaves of X) or X itself for a std::vector of leaves.
template <class X, class F, class Leaves>
void generic_batched_scan(const F& f, const X& blank, const Leaves& xs, const Leaves& ys, int64_t dim,
                          bool reverse, std::string_view where) {
  int64_t T_len = 0;
  for_each_leaf(xs, [&](size_t l, const auto& x) { if (l == 0) T_len = x.shape()[dim]; });
  if (T_len == 0) return;
  BatchedGenericScan<X> scanner;
  scanner.blank = blank;
  scanner.where = where;
  int64_t slice_elems = 0;
  Leaves in_hold = xs, out_blocks = ys;
  std::vector<RowSet> in_rows, out_rows;
  std::vector<bool> strided_out;
  zip_leaves(in_hold, xs, [&](size_t, auto& hold, const auto& x) {
    using T = leaf_value_t<decltype(hold)>;
    scanner.slice_shapes.push_back(remove_dim(x.shape(), dim));
    const int64_t numel = shape_numel(scanner.slice_shapes.back());
    scanner.slice_bytes.push_back(sizeof(T) * static_cast<size_t>(numel));
    slice_elems += numel;
    in_rows.push_back(input_rows(x, ys, dim, reverse, hold));
  });
  // Outputs whose slices are contiguous are written in place; others through a block scattered
  // at the end.
  zip_leaves(out_blocks, ys, [&](size_t l, auto& block, const auto& y) {
    using T = leaf_value_t<decltype(block)>;
    const ScanView v = scan_view(y.shape(), dim);
    const auto step = static_cast<std::ptrdiff_t>(scanner.slice_bytes[l]);
    strided_out.push_back(v.outer > 1);
    if (v.outer == 1) {
      char* first = reinterpret_cast<char*>(const_cast<T*>(y.data()) + (reverse ? (v.length - 1) * v.inner : 0));
      out_rows.push_back({first, reverse ? -step : step, scanner.slice_bytes[l]});
    } else {
      Shape dims{v.length};
      const Shape& slice = scanner.slice_shapes[l];
      dims.insert(dims.end(), slice.begin(), slice.end());
      block = Tensor<T>::empty(dims);
      out_rows.push_back({reinterpret_cast<char*>(block.data()), step, scanner.slice_bytes[l]});
    }
  });
  scanner.grain = std::max<int64_t>(16, 16384 / std::max<int64_t>(slice_elems, 1));
  const int64_t chunk = std::max<int64_t>(BatchedPolicy::chunk_min_rows, BatchedPolicy::chunk_bytes / scanner.row_bytes());
  if (T_len > chunk) scanner.scan_interleaved(f, in_rows, T_len, out_rows);
  else scanner.scan(f, in_rows, T_len, out_rows, true);
  zip_leaves(out_blocks, ys, [&](size_t l, const auto&, const auto& y) {
    if (!strided_out[l]) return;
    const auto w = SliceWriter::of(const_cast<std::decay_t<decltype(y)>&>(y), dim);
    for (int64_t t = 0; t < T_len; ++t)
      w.write_bytes(reverse ? T_len - 1 - t : t, out_rows[l].row(t));
  });
}

}  // namespace ascan::detail
