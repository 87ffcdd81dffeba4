// scan_block_io.hpp — the block I/O layer of the host pointwise scan (docs/design.md §2), members
// of PointwiseRunner (scan_runner.hpp): how the output is laid out as work items (the
// constructor: column groups, blocks of rows, bundles of narrow columns, streamed scratch), where
// an item's rows are, the scratch a streamed block is scanned into and copied out from, and the
// prefetches of the next block's inputs.
#pragma once

#include "ascan/config.hpp"
#include "ascan/detail/scan_runner.hpp"

namespace ascan::detail {
ASCAN_ISA_BEGIN

// Lays the output out as work items: column groups of lanes, blocks of rows, bundles of narrow
// columns, scratch for streamed blocks, and which local scans the layout allows.
template <class X, class F, class Epi>
inline PointwiseRunner<X, F, Epi>::PointwiseRunner(const F& f, const typename Node::Flat& xs, const typename Node::Flat& ys, const PointwisePlan& plan, bool reverse, const Epi& epi)
    : f_(f), plan_(plan), reverse_(reverse), epi_(epi) {
  T_ = plan.length;
  if (plan.numel() == 0) {  // nothing to do (an extent of 0 anywhere); keep the sizes sane
    group_lanes_ = groups_per_column_ = rows_ = num_blocks_ = 1;
    num_items_ = 0;
    return;
  }
  group_lanes_ = std::min(plan.run, BlockPolicy::max_lanes);
  groups_per_column_ = (plan.run + group_lanes_ - 1) / group_lanes_;
  // Narrow runs whose neighbouring columns are adjacent in the output (e.g. [B, T, dk, dv]
  // with a leaf broadcast over dv) are bundled: a group spans `bundle_` columns of the innermost
  // column dim, so a row of the group is one contiguous stretch of the output instead of `run`
  // elements a whole row stride apart (a page apart, past the hardware prefetcher, when the
  // row is wide). Leaves that are not contiguous over a bundle are gathered into lanes per row.
  if (plan.run < BlockPolicy::max_lanes && !plan.trivial_columns && !plan.column_extents.empty() &&
      plan.out_column_strides.back() == plan.run && plan.column_extents.back() > 1) {
    bundled_extent_ = plan.column_extents.back();
    bundle_ = std::min(bundled_extent_, BlockPolicy::max_lanes / plan.run);
    bundles_per_extent_ = (bundled_extent_ + bundle_ - 1) / bundle_;
    group_lanes_ = bundle_ * plan.run;
  }
  int64_t bytes_per_lane_row = 0;
  static_for<L>([&](auto I) {
    using P = std::tuple_element_t<I, Ptrs>;
    bytes_per_lane_row += 2 * sizeof(*P{});
    max_elem_bytes_ = std::max<int64_t>(max_elem_bytes_, sizeof(*P{}));
    std::get<I>(x_data_) = const_cast<P>(std::get<I>(xs).data());
    std::get<I>(y_data_) = const_cast<P>(std::get<I>(ys).data());
    x_step_[I] = (reverse ? -1 : 1) * plan.leaves[I].t_stride;
  });
  y_step_ = (reverse ? -1 : 1) * plan.out_t_stride;
  static_for<L>([&](auto I) {
    const LeafLayout& leaf = plan.leaves[I];
    bundle_stride_[I] = bundle_ > 1 ? leaf.column_strides.back() : 0;
    gather_[I] = !leaf.lane_contiguous || (bundle_ > 1 && bundle_stride_[I] != plan.run);
    any_gather_ = any_gather_ || gather_[I];
  });
  // One sequence per group, every stream contiguous along the scan (or constant along it, as a
  // broadcast decay), one float or double type: the block's segments are scanned as vector
  // lanes (scan_sequences_blocked).
  // A single leaf does so with a vector combine or a wide one; otherwise it keeps its 8 scalar
  // chains, which measured as fast or faster than the blocked scan through local arrays.
  blocked_sequences_ = (L > 1 || kVectorCombine || wide_combine<F>) && kSameLeaves && BT::V > 0 && (y_step_ == 1 || y_step_ == -1);
  for (size_t l = 0; l < L; ++l) blocked_sequences_ = blocked_sequences_ && (x_step_[l] == 0 || x_step_[l] == y_step_);
  // Rows of 4 to 7 packed lanes of float with a vector combine and outputs apart from the
  // inputs: rows as windows of 8 lanes, one vector (scan_windows).
  if constexpr (kWindows) {
    windows_ = bundle_ == 1 && group_lanes_ >= 4 && group_lanes_ < 8 &&
               (y_step_ == group_lanes_ || y_step_ == -group_lanes_);
    static_for<L>([&](auto I) {
      const auto& x = std::get<I>(xs);
      if (plan.leaves[I].lane_contiguous) windows_ = windows_ && x_step_[I] == y_step_;
      static_for<L>([&](auto O) {
        const auto& y = std::get<O>(ys);
        const auto* x0 = reinterpret_cast<const std::byte*>(x.data());
        const auto* y0 = reinterpret_cast<const std::byte*>(y.data());
        const bool apart = x0 + x.numel() * sizeof(*x.data()) <= y0 || y0 + y.numel() * sizeof(*y.data()) <= x0;
        windows_ = windows_ && apart;
      });
    });
  }
  // Only layouts of rows of lanes (other layouts keep their threads from ThreadPolicy::parallel_min_elements).
  // (Not with an epilogue: the one pass reads the predecessor's last row from the output.)
  one_pass_ = !Epi::active && plan.numel() * static_cast<int64_t>(L) < ThreadPolicy::one_pass_max_elements && lanes_path(group_lanes_);
  const int64_t block_bytes = Epi::active && group_lanes_ < LocalScanPolicy::narrow_lanes ? BlockPolicy::epilogue_block_bytes : BlockPolicy::block_bytes;
  const int64_t min_rows = Epi::active ? BlockPolicy::min_epilogue_block_rows : 1;
  rows_ = std::clamp<int64_t>(std::max(block_bytes / (group_lanes_ * bytes_per_lane_row), min_rows), 1, std::max<int64_t>(T_, 1));
  num_blocks_ = (T_ + rows_ - 1) / rows_;
  // Streaming stores need each block's output rows back to back (one contiguous stretch per
  // leaf): a group spans whole output rows. The scratch holds one block of outputs.
  // Rows wider than a group (rows of 2048 lanes in groups of 1024) stream too when every group's
  // part of a row is whole, aligned lines: the scratch then keeps the output's row stride (its
  // rows' other lanes unused), at most BlockPolicy::max_partial_scratch_bytes per leaf. Stored plainly, their
  // lines were read before being written, a third stream.
  const bool packed_rows = std::abs(y_step_) == group_lanes_;
  bool partial_rows = bundle_ == 1 && !packed_rows && plan.run % group_lanes_ == 0;
  static_for<L>([&](auto I) {
    const int64_t elem = sizeof(*std::get<I>(Ptrs{}));
    partial_rows = partial_rows && group_lanes_ * elem % 64 == 0 && y_step_ * elem % 64 == 0 &&
                   rows_ * std::abs(y_step_) * elem <= BlockPolicy::max_partial_scratch_bytes;
  });
  // An epilogue's scan with leaves it does not keep (a product's h) scans into the scratch
  // too, at any size, and copies the kept rows out plainly when they are not streamed: the
  // leaves it drops are then never written to memory.
  const bool streamed = ASCAN_HAS_STREAM_STORES && plan.numel() * (bytes_per_lane_row / 2) >= MemoryPolicy::stream_min_bytes;
  bool dropped = false;
  if constexpr (Epi::active) static_for<L>([&](auto I) { dropped = dropped || !epi_.keeps(I); });
  if (!one_pass_ && (packed_rows || partial_rows) && (streamed || dropped)) {
    partial_rows_ = partial_rows;
    streamed_ = streamed;
    static_for<L>([&](auto I) { scratch_bytes_ += scratch_leaf_bytes<I>(); });
  }
  // Streamed blocks of one sequence are cut where the output is 64-byte aligned: the first
  // block (in scan order) is short by `lead_` rows, the others are a whole number of lines.
  // Otherwise a reverse scan of a length that is not a multiple of 16 floats streams every
  // block to a misaligned address, reading the scratch across lines. The cut depends on the
  // length and on where the output starts within a line (the start of a tensor always: it is
  // 64-byte aligned), not on the thread count.
  if (streamed_ && group_lanes_ == 1 && blocked_sequences_) {
    const int64_t unit = 64 / max_elem_bytes_;
    if (rows_ >= 2 * unit) {
      rows_ = rows_ / unit * unit;
      const auto at = static_cast<int64_t>(reinterpret_cast<uintptr_t>(std::get<0>(y_data_)) / max_elem_bytes_ % unit);
      lead_ = y_step_ > 0 ? at : (unit - (at + T_) % unit) % unit;
      num_blocks_ = (T_ + lead_ + rows_ - 1) / rows_;
    }
  }
  const int64_t num_groups = bundle_ > 1 ? plan.num_columns / bundled_extent_ * bundles_per_extent_
                                         : plan.num_columns * groups_per_column_;
  num_items_ = num_groups * num_blocks_;
  if constexpr (Epi::active) {
    if (epi_.has_prologue()) {
      // Leaf 0 read from the scratch: laid out like the output, one group per column. The
      // slack is a row (at least 64 bytes) plus 1 KiB, so that the two blocks of rows do not
      // start at the outputs' addresses modulo 4 KiB (tried against 4K aliasing for rows of 8
      // lanes; it measured neither faster nor slower, the cause was an outlined loop).
      ASCAN_ASSERT(x_step_[0] == y_step_ && bundle_ == 1 && !gather_[0]);
      pro_slack_ = std::max<int64_t>(64, (std::abs(y_step_) * int64_t{sizeof(Leaf0)} + 63) / 64 * 64) + 1024;
      pro_leaf_bytes_ = (rows_ * std::abs(y_step_) * int64_t{sizeof(Leaf0)} + 63) / 64 * 64 + 2 * pro_slack_;
    }
  }
  if constexpr (Epi::active) {
    if (num_blocks_ > 1) {  // every item's last row, group_lanes_ lanes per leaf
      int64_t bytes = 0;
      static_for<L>([&](auto I) { bytes += num_items_ * group_lanes_ * int64_t{sizeof(*std::get<I>(Ptrs{}))}; });
      carries_.reset(new std::byte[bytes]);
    }
  }
}

// Reads the inputs of the worker's next block into the caches while the current block's output
// is streamed out, a few lines per piece of output (MemoryPolicy::prefetch_pace_bytes). Without it a core
// scanned a block (reading memory, writing only its cache) and then streamed it out (writing
// memory, reading nothing), its reads and writes one after the other. Only leaves whose rows
// are packed, and only rows of one leaf or groups of LocalScanPolicy::narrow_lanes or more lanes: a linear
// recurrence in narrow chunks ran slower with it.
template <class X, class F, class Epi>
struct PointwiseRunner<X, F, Epi>::InputPrefetch {
  std::array<uintptr_t, L> at{};  // addresses: prefetches may reach past an input's ends
  std::array<int64_t, L> left{};  // bytes
  int64_t lines = 0, issued = 0, out_bytes = 0, copied = 0;
  // Issues the lines due once `bytes` more output bytes are copied (all when out_bytes is 0).
  void advance(int64_t bytes) {
    copied += bytes;
    const int64_t due = copied >= out_bytes ? lines : lines * copied / out_bytes;
    for (size_t l = 0; l < L && issued < due; ++l) {
      for (; left[l] > 0 && issued < due; ++issued) {
        __builtin_prefetch(reinterpret_cast<const void*>(at[l]), 0, 3);
        at[l] += 64;
        left[l] -= 64;
      }
    }
  }
};

template <class X, class F, class Epi>
inline auto PointwiseRunner<X, F, Epi>::x_row(const Group& g, int64_t s) const -> Ptrs {
  Ptrs p = g.x0;
  static_for<L>([&](auto I) { std::get<I>(p) += (s - g.base) * x_step_[I]; });
  return p;
}

template <class X, class F, class Epi>
inline auto PointwiseRunner<X, F, Epi>::y_row(const Group& g, int64_t s) const -> Ptrs {
  Ptrs p = g.y0;
  static_for<L>([&](auto I) { std::get<I>(p) += (s - g.base) * y_step_; });
  return p;
}

// Bytes of leaf I's part of the scratch: one block of outputs at the output's row stride,
// rounded up to whole lines.
template <class X, class F, class Epi>
template <size_t I>
inline int64_t PointwiseRunner<X, F, Epi>::scratch_leaf_bytes() const {
  using P = std::tuple_element_t<I, Ptrs>;
  return (rows_ * std::abs(y_step_) * int64_t{sizeof(*P{})} + 63) / 64 * 64;
}

// Where a block's rows [s0, s1) of group g are scanned when its output is streamed: the
// worker's scratch, laid out like the output (rows the output's row stride apart, in the same
// direction).
template <class X, class F, class Epi>
inline auto PointwiseRunner<X, F, Epi>::scratch_group(const Group& g, int64_t s0, int64_t s1, std::byte* scratch) const -> Group {
  Group sg = g;
  sg.base = s0;
  sg.x0 = x_row(g, s0);
  static_for<L>([&](auto I) {
    using P = std::tuple_element_t<I, Ptrs>;
    std::get<I>(sg.y0) = reinterpret_cast<P>(scratch) + (y_step_ > 0 ? 0 : (s1 - s0 - 1) * -y_step_);
    scratch += scratch_leaf_bytes<I>();
  });
  return sg;
}

// Copies rows [a, e) of a streamed block from the scratch group `from` to the output group g,
// with streaming stores or plain ones: one stretch when the rows are packed, else row by row.
template <class X, class F, class Epi>
inline void PointwiseRunner<X, F, Epi>::copy_rows(const Group& g, const Group& from, int64_t a, int64_t e, bool streaming, InputPrefetch* pf) const {
  if (a >= e) return;
  const int64_t lo = y_step_ > 0 ? a : e - 1;  // the rows' lowest address
  const bool packed = std::abs(y_step_) == g.w;
  const int64_t stretches = packed ? 1 : e - a, row_stride = std::abs(y_step_);
  const Ptrs dst = y_row(g, lo), src = y_row(from, lo);
  const StreamCopy copy = streaming ? stream_copier() : nullptr;
  static_for<L>([&](auto I) {
    if constexpr (Epi::active) {
      if (!epi_.keeps(I)) return;
    }
    const size_t bytes = (packed ? e - a : 1) * g.w * sizeof(*std::get<I>(dst));
    for (int64_t r = 0; r < stretches; ++r) {
      auto* d = std::get<I>(dst) + r * row_stride;
      const auto* p = std::get<I>(src) + r * row_stride;
      if (!streaming) {
        std::memcpy(d, p, bytes);
      } else if (pf == nullptr || pf->lines == 0) {
        copy(d, p, bytes);
      } else {
        for (size_t o = 0; o < bytes; o += MemoryPolicy::prefetch_pace_bytes) {
          const size_t n = std::min(bytes - o, MemoryPolicy::prefetch_pace_bytes);
          copy(reinterpret_cast<std::byte*>(d) + o, reinterpret_cast<const std::byte*>(p) + o, n);
          pf->advance(static_cast<int64_t>(n));
        }
      }
    }
  });
}

// Bytes of output that copy_rows streams for rows [s0, s1) of group g.
template <class X, class F, class Epi>
inline int64_t PointwiseRunner<X, F, Epi>::block_out_bytes(const Group& g, int64_t s0, int64_t s1) const {
  int64_t bytes = 0;
  static_for<L>([&](auto I) {
    if constexpr (Epi::active) {
      if (!epi_.keeps(I)) return;
    }
    bytes += (s1 - s0) * g.w * int64_t{sizeof(*std::get<I>(g.y0))};
  });
  return bytes;
}

// Reads a byte of every line of the block's packed inputs, in ascending order. A reverse scan
// of wide rows walks them down a row (1 KiB for 256 floats) at a time, which the hardware
// prefetchers did not follow; reading the block upwards first brings it into the caches. Forward
// scans, one sequence and narrow rows ran as fast or faster without it.
// Skipped when the worker's previous block prefetched them (InputPrefetch reads the same lines).
template <class X, class F, class Epi>
inline void PointwiseRunner<X, F, Epi>::touch_inputs(const Group& g, int64_t s0, int64_t s1) const {
  unsigned char seen = 0;
  static_for<L>([&](auto I) {
    if (x_step_[I] != g.w && x_step_[I] != -g.w) return;
    const auto* lo = reinterpret_cast<const unsigned char*>(
        std::min(std::get<I>(x_row(g, s0)), std::get<I>(x_row(g, s1 - 1))));
    const int64_t bytes = (s1 - s0) * g.w * int64_t{sizeof(*std::get<I>(g.x0))};
    for (int64_t e = 0; e < bytes; e += 64) seen ^= lo[e];
  });
  [[maybe_unused]] volatile unsigned char keep = seen;  // the reads must happen
}

template <class X, class F, class Epi>
inline auto PointwiseRunner<X, F, Epi>::item_rows(int64_t item) const -> ItemRows {
  const int64_t gi = item / num_blocks_, b = item - gi * num_blocks_;
  Group g;
  int64_t c, j0 = 0;
  if (bundle_ > 1) {
    const int64_t line = gi / bundles_per_extent_, k0 = (gi - line * bundles_per_extent_) * bundle_;
    c = line * bundled_extent_ + k0;
    g.cols = std::min(bundle_, bundled_extent_ - k0);
    g.w = g.cols * plan_.run;
  } else {
    c = gi / groups_per_column_;
    j0 = (gi - c * groups_per_column_) * group_lanes_;
    g.w = std::min(group_lanes_, plan_.run - j0);
  }
  std::array<int64_t, L> leaf_off;
  int64_t out_off;
  plan_.column_offsets(c, leaf_off.data(), out_off);
  static_for<L>([&](auto I) {
    const LeafLayout& leaf = plan_.leaves[I];
    std::get<I>(g.x0) = std::get<I>(x_data_) + leaf_off[I] + phys(0) * leaf.t_stride +
                        (leaf.lane_contiguous ? j0 : 0);
    std::get<I>(g.y0) = std::get<I>(y_data_) + out_off + phys(0) * plan_.out_t_stride + j0;
  });
  return {g, b, std::max<int64_t>(0, b * rows_ - lead_), std::min(T_, (b + 1) * rows_ - lead_)};
}

// The prefetches of item `next`'s inputs, paced over `out_bytes` bytes of output.
template <class X, class F, class Epi>
inline auto PointwiseRunner<X, F, Epi>::input_prefetch(int64_t next, int64_t out_bytes) const -> InputPrefetch {
  InputPrefetch pf;
  if (next >= num_items_) return pf;
  const ItemRows n = item_rows(next);
  if (L > 1 && !(lanes_path(n.g.w) && n.g.w >= LocalScanPolicy::narrow_lanes)) return pf;
  static_for<L>([&](auto I) {
    if (x_step_[I] != n.g.w && x_step_[I] != -n.g.w) return;
    const auto a = reinterpret_cast<uintptr_t>(std::get<I>(x_row(n.g, n.s0)));
    const auto z = reinterpret_cast<uintptr_t>(std::get<I>(x_row(n.g, n.s1 - 1)));
    const auto row_bytes = static_cast<uintptr_t>(n.g.w * sizeof(*std::get<I>(n.g.x0)));
    const uintptr_t lo = std::min(a, z) / 64 * 64;
    pf.at[I] = lo;
    pf.left[I] = static_cast<int64_t>(std::max(a, z) + row_bytes - lo);
    pf.lines += (pf.left[I] + 63) / 64;
  });
  pf.out_bytes = out_bytes;
  return pf;
}

// Item `item`'s last row in the side buffer of an epilogue's scan.
template <class X, class F, class Epi>
inline auto PointwiseRunner<X, F, Epi>::carry_row(int64_t item) const -> Ptrs {
  Ptrs p;
  std::byte* base = carries_.get();
  static_for<L>([&](auto I) {
    using P = std::tuple_element_t<I, Ptrs>;
    std::get<I>(p) = reinterpret_cast<P>(base) + item * group_lanes_;
    base += num_items_ * group_lanes_ * int64_t{sizeof(*P{})};
  });
  return p;
}

ASCAN_ISA_END
}  // namespace ascan::detail
