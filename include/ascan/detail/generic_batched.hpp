// generic_batched.hpp — the host scan of batched Generic mode (ascan::generic_batched(f)).
//
// The odd/even tree of generic_scan.hpp (the same association, so the same results bitwise, up
// to one chunk of rows; longer scans chain chunks, below), but each level is one call of f per
// thread on batches of slices: leaf l of an operand is a
// contiguous [m, slice_l...] tensor holding the m left (right) slices of the level's pairs, and f
// returns the m results the same way. The operands are gathered from their rows (the even and odd
// positions of the level below) with fixed-size copies for small slices, so a chain of 2x2 matrix
// products costs its arithmetic and about a dozen row copies per element (the tree's levels go
// through memory) instead of two Tensor calls per element.
#pragma once

#include <algorithm>
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

// Long scans run in chunks of about kBatchedChunkBytes of slices (all leaves), at least
// kBatchedChunkMinRows rows (a chunk's tree makes 2 log2(rows) calls of f). Chunks of 128 KiB
// measured 1.3-1.5x faster than one tree over 65536 4x4 matrices (whose levels go through
// memory) and 1.4x on two threads for 2x2; 512 KiB and more lost most of it.
inline constexpr int64_t kBatchedChunkBytes = int64_t{128} << 10;
inline constexpr int64_t kBatchedChunkMinRows = 1024;

template <class X>
struct BatchedGenericScan {
  X blank;                          // the structure with empty leaves
  std::vector<Shape> slice_shapes;  // of each leaf
  std::vector<size_t> slice_bytes;
  std::string_view where;
  int64_t grain = 1;     // rows per call of f, at least (when a level is split over threads)
  bool parallel = true;  // false inside the workers of a chained scan

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

  // Long sequences: chunks of `chunk` rows, each scanned by the tree while it is in cache (the
  // tree alone sweeps every level through memory), chained in order: a chunk's last row combines
  // the previous chunk's final last row and is published, then the chunk's other rows combine it
  // too (one batch). Chunks go to the threads; the association depends on n and the chunk length
  // only, so results do not depend on the thread count.
  template <class F>
  void scan_chained(const F& f, const std::vector<RowSet>& x, int64_t n, const std::vector<RowSet>& y,
                    int64_t chunk) const {
    const int64_t chunks = (n + chunk - 1) / chunk;
    std::vector<std::atomic<uint8_t>> done(static_cast<size_t>(chunks));
    std::atomic<int64_t> next{0};
    std::atomic<bool> failed{false};
    BatchedGenericScan serial = *this;
    serial.parallel = false;
    const int workers = static_cast<int>(std::min<int64_t>(num_threads(), chunks));
    run_workers(workers, [&](int) {
      while (!failed.load(std::memory_order_relaxed)) {
        const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
        if (c >= chunks) return;
        try {
          const int64_t b = c * chunk, len = std::min(chunk, n - b);
          const std::vector<RowSet> yc = every(y, b, 1);
          serial.scan(f, every(x, b, 1), len, yc, c == 0);
          if (c > 0) {
            if (!wait_published(done[c - 1], failed)) return;
            X carry = serial.gather(every(y, b - 1, 1), 1);  // y_{b-1}, final once published
            const std::vector<RowSet> last = every(yc, len - 1, 1);
            serial.apply(f, carry, serial.gather(last, 1), 1, last);
            done[c].store(1, std::memory_order_release);
            if (len > 1) {
              X carries = serial.alloc(len - 1);
              serial.copy(rows_of(carries), every(rows_of(carry), 0, 0), len - 1);
              serial.apply(f, carries, serial.gather(yc, len - 1), len - 1, yc);
            }
          } else {
            done[c].store(1, std::memory_order_release);
          }
        } catch (...) {
          failed.store(true);
          throw;
        }
      }
    });
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
  int64_t row_bytes = 0;
  for (size_t b : scanner.slice_bytes) row_bytes += static_cast<int64_t>(b);
  const int64_t chunk = std::max<int64_t>(kBatchedChunkMinRows, kBatchedChunkBytes / std::max<int64_t>(row_bytes, 1));
  if (T_len > chunk) scanner.scan_chained(f, in_rows, T_len, out_rows, chunk);
  else scanner.scan(f, in_rows, T_len, out_rows, true);
  zip_leaves(out_blocks, ys, [&](size_t l, const auto&, const auto& y) {
    if (!strided_out[l]) return;
    const auto w = SliceWriter::of(const_cast<std::decay_t<decltype(y)>&>(y), dim);
    for (int64_t t = 0; t < T_len; ++t)
      w.write_bytes(reverse ? T_len - 1 - t : t, out_rows[l].row(t));
  });
}

}  // namespace ascan::detail
