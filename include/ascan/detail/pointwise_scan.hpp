// pointwise_scan.hpp — the host pointwise scan kernel: chained blocks, lanes and segments.
//
// Work is split by shape only, never by thread count, so results are bitwise identical for any
// number of threads. The output is cut into column groups (a column and up to BlockPolicy::max_lanes
// adjacent lanes) and, along the scan axis, into blocks of rows sized to stay in L2. Threads take
// (group, block) items in order from one counter. An item scans its block locally (one read of
// x, one write of y), waits for its predecessor block to publish, then applies the predecessor's
// last row — the inclusive prefix — to its rows while they are still in cache
// (y = f(prefix, y_local), valid by associativity). A predecessor was always taken earlier by a
// running thread and never waits on a later item, so the chain cannot deadlock.
// Within a block, narrow groups (few lanes) cut the rows into K segments scanned as interleaved
// independent chains, so the latency of f overlaps (a single float add chain runs at ~1 element
// per 4 cycles; 8 chains at ~2 per cycle); segment k is then fixed up with the prefix of
// segments < k in a vectorisable pass. Wide groups get the same overlap from their lanes: f runs
// over a row of lanes in a loop the compiler vectorises, the previous output row as accumulator.
// Rows narrower than 16 lanes are scanned in chunks of 8, 4, 2 and 1 lanes with accumulators in
// registers, and one sequence of several float or double leaves scans its segments as vector
// lanes through register transposes.
// Size: this header is one class, PointwiseRunner, whose local scans, block I/O and per-item agent
// still share its 33 fields; the redesign (docs/design.md §2) splits those layers next. The
// constants, the chain's wait, the lane helpers and the epilogue contract already live in
// scan_policy.hpp, scan_chain.hpp, scan_lanes.hpp and scan_epilogue.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "ascan/config.hpp"
#include "ascan/detail/block_transpose.hpp"
#include "ascan/detail/path_override.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/combine.hpp"
#include "ascan/detail/stream_store.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/detail/scan_chain.hpp"
#include "ascan/detail/scan_epilogue.hpp"
#include "ascan/detail/scan_lanes.hpp"
#include "ascan/detail/scan_policy.hpp"
#include "ascan/parallel.hpp"

namespace ascan::detail {

template <class X, class F, class Epi = NoEpilogue>
class PointwiseRunner {
  using Node = Tree<X>;
  using Elem = typename Node::Elem;
  using Ptrs = typename Node::FlatPtrs;
  using Access = ElemAccess<X, 0>;
  static constexpr size_t L = Node::num_leaves;
  using Steps = std::array<int64_t, L>;
  using Leaf0 = std::remove_pointer_t<std::tuple_element_t<0, Ptrs>>;
  using BT = BlockTranspose<Leaf0>;
  using Local = LocalScanPolicy;
  static constexpr bool kSameLeaves = []<size_t... I>(std::index_sequence<I...>) {
    return (std::is_same_v<std::tuple_element_t<I, Ptrs>, Leaf0*> && ...);
  }(std::make_index_sequence<L>{});
  // The combine runs on vectors of the leaves' element type (see vector_combine); VecElem is
  // the element structure with vectors for scalars.
  static constexpr bool kVectorCombine = kSameLeaves && BT::V > 0 && vector_combine<F, Elem, Leaf0>;
  template <class Vec>
  using VecElem = std::conditional_t<L == 1, Vec, std::tuple<Vec, Vec>>;
  template <class Vec, class Fn>
  ASCAN_ALWAYS_INLINE static VecElem<Vec> make_vec_elem(Fn&& leaf) {
    if constexpr (L == 1) {
      return leaf(std::integral_constant<size_t, 0>{});
    } else {
      return VecElem<Vec>{leaf(std::integral_constant<size_t, 0>{}), leaf(std::integral_constant<size_t, 1>{})};
    }
  }
  template <class Vec, class R>
  ASCAN_ALWAYS_INLINE static VecElem<Vec> vec_elem(const R& r) {
    if constexpr (L == 1) return r;
    else return make_vec_elem<Vec>([&](auto I) -> Vec { using std::get; return get<I>(r); });
  }
  template <size_t I, class V>
  ASCAN_ALWAYS_INLINE static auto vec_leaf(const V& v) {
    if constexpr (L == 1) return v; else return std::get<I>(v);
  }

 public:
  PointwiseRunner(const F& f, const typename Node::Flat& xs, const typename Node::Flat& ys,
                  const PointwisePlan& plan, bool reverse, const Epi& epi)
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
      line_extent_ = plan.column_extents.back();
      bundle_ = std::min(line_extent_, BlockPolicy::max_lanes / plan.run);
      bundles_per_line_ = (line_extent_ + bundle_ - 1) / bundle_;
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
    // inputs: rows as windows of 8 lanes, one AVX vector (scan_windows).
    if constexpr (kVectorCombine && sizeof(Leaf0) == 4) {
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
    // lines were read before being written, a third stream: with groups of 256 lanes, float32 add
    // [4096, 1024] ran at 0.4 of [16384, 256] on the AMD VM.
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
    // block to a misaligned address, reading the scratch across lines ([2^22 + 1] float32 linear
    // recurrence in reverse, medians of five processes: 8.6 -> 7.6 ms). The cut depends on the length and
    // on where the output starts within a line (the start of a tensor always: it is 64-byte
    // aligned), not on the thread count.
    if (streamed_ && group_lanes_ == 1 && blocked_sequences_) {
      const int64_t unit = 64 / max_elem_bytes_;
      if (rows_ >= 2 * unit) {
        rows_ = rows_ / unit * unit;
        const auto at = static_cast<int64_t>(reinterpret_cast<uintptr_t>(std::get<0>(y_data_)) / max_elem_bytes_ % unit);
        lead_ = y_step_ > 0 ? at : (unit - (at + T_) % unit) % unit;
        num_blocks_ = (T_ + lead_ + rows_ - 1) / rows_;
      }
    }
    const int64_t num_groups = bundle_ > 1 ? plan.num_columns / line_extent_ * bundles_per_line_
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

  int64_t num_items() const { return num_items_; }
  int64_t group_lanes() const { return group_lanes_; }  // lanes of a work item, at most

  void run() {
    if (plan_.numel() == 0) return;
    ItemChain chain(num_blocks_ > 1 ? num_items_ : 0);
    chain_ = &chain;
    const int64_t total = plan_.numel() * static_cast<int64_t>(L);
    const int workers = total < ThreadPolicy::parallel_min_elements || one_pass_
                            ? 1
                            : static_cast<int>(std::min<int64_t>(num_threads(), num_items_));
    // 64-byte aligned and uninitialised (new[] of a struct with alignment, not zeroed).
    struct alignas(64) Line { std::byte b[64]; };
    // Then a prologue's two blocks of rows (see fill_inputs), zeroed once: windows may read
    // the slack around rows that were never written.
    const auto make_scratch = [&] {
      const int64_t bytes = scratch_bytes_ + 2 * pro_leaf_bytes_;
      std::unique_ptr<Line[]> p(bytes > 0 ? new Line[bytes / 64] : nullptr);
      if (pro_leaf_bytes_ > 0) std::memset(reinterpret_cast<std::byte*>(p.get()) + scratch_bytes_, 0, 2 * pro_leaf_bytes_);
      return p;
    };
    if (workers == 1) {
      // On the calling thread without a worker body (small scans in a loop: about a fifth of a
      // [4, 256] float add's 0.17 us went to the std::function call and the item counter).
      const FloatModeScope mode;
      const auto scratch = make_scratch();
      bool cached = false;
      for (int64_t item = 0; item < num_items_; ++item) {
        NextItem following;
        process(item, reinterpret_cast<std::byte*>(scratch.get()), following, cached);
        cached = following.prefetched;
      }
      return;
    }
    chain.run(workers, [&](int) {
      const auto scratch = make_scratch();
      // process may claim the worker's next item before it ends (NextItem). Each item still
      // waits only on its predecessor, claimed earlier, so claims made early do not deadlock.
      int64_t item = chain.claim();
      bool cached = false;
      while (item < num_items_ && !chain.failed()) {
        NextItem following{&chain};
        if (!process(item, reinterpret_cast<std::byte*>(scratch.get()), following, cached)) return;
        item = following.get(item);
        cached = following.prefetched;
      }
    });
  }

 private:
  struct Group {  // one column group: pointers at logical step `base`, lane count and columns
    Ptrs x0, y0;
    int64_t w;
    int64_t cols = 1;
    int64_t base = 0;
  };

  // Reads the inputs of the worker's next block into the caches while the current block's output
  // is streamed out, a few lines per piece of output (MemoryPolicy::prefetch_pace_bytes). Without it a core
  // scanned a block (reading memory, writing only its cache) and then streamed it out (writing
  // memory, reading nothing), its reads and writes one after the other. Only leaves whose rows
  // are packed, and only rows of one leaf or groups of LocalScanPolicy::narrow_lanes or more lanes: a linear
  // recurrence in narrow chunks ran slower with it. AMD EPYC (Zen 5) VM, float32, two threads,
  // medians of 5 of bench_scan_host in alternating runs, both directions, without -> with: add
  // [2^25] 7.9-9.5 -> 6.8-7.7 ms, [2^25 / 7, 7] 10.9-11.5 -> 8.1-8.6, [2^17, 256] 8.7-9.8 ->
  // 6.4-7.1 (one thread 13.6-14.7 -> 9.9-10.2), linear recurrence [2^17, 256] 14.8-17.3 ->
  // 12.5-15.1; the linear recurrence [2^25 / 7, 7] 19.8-23.5 -> 29.3-34.4 when it was
  // prefetched too.
  struct InputPrefetch {
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

  int64_t phys(int64_t s) const { return reverse_ ? T_ - 1 - s : s; }

  // Groups of w lanes scanned by scan_lanes (not one sequence, not the chunked narrow path).
  bool lanes_path(int64_t w) const { return w > 1 && !(w < LocalScanPolicy::narrow_lanes && bundle_ == 1); }

  Ptrs x_row(const Group& g, int64_t s) const {
    Ptrs p = g.x0;
    static_for<L>([&](auto I) { std::get<I>(p) += (s - g.base) * x_step_[I]; });
    return p;
  }
  Ptrs y_row(const Group& g, int64_t s) const {
    Ptrs p = g.y0;
    static_for<L>([&](auto I) { std::get<I>(p) += (s - g.base) * y_step_; });
    return p;
  }

  // Bytes of leaf I's part of the scratch: one block of outputs at the output's row stride,
  // rounded up to whole lines.
  template <size_t I>
  int64_t scratch_leaf_bytes() const {
    using P = std::tuple_element_t<I, Ptrs>;
    return (rows_ * std::abs(y_step_) * int64_t{sizeof(*P{})} + 63) / 64 * 64;
  }

  // Where a block's rows [s0, s1) of group g are scanned when its output is streamed: the
  // worker's scratch, laid out like the output (rows the output's row stride apart, in the same
  // direction).
  Group scratch_group(const Group& g, int64_t s0, int64_t s1, std::byte* scratch) const {
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
  void copy_rows(const Group& g, const Group& from, int64_t a, int64_t e, bool streaming,
                 InputPrefetch* pf = nullptr) const {
    if (a >= e) return;
    const int64_t lo = y_step_ > 0 ? a : e - 1;  // the rows' lowest address
    const bool packed = std::abs(y_step_) == g.w;
    const int64_t stretches = packed ? 1 : e - a, row_stride = std::abs(y_step_);
    const Ptrs dst = y_row(g, lo), src = y_row(from, lo);
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
          stream_copy(d, p, bytes);
        } else {
          for (size_t o = 0; o < bytes; o += MemoryPolicy::prefetch_pace_bytes) {
            const size_t n = std::min(bytes - o, MemoryPolicy::prefetch_pace_bytes);
            stream_copy(reinterpret_cast<std::byte*>(d) + o, reinterpret_cast<const std::byte*>(p) + o, n);
            pf->advance(static_cast<int64_t>(n));
          }
        }
      }
    });
  }

  // Bytes of output that copy_rows streams for rows [s0, s1) of group g.
  int64_t block_out_bytes(const Group& g, int64_t s0, int64_t s1) const {
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
  // prefetchers did not follow: reading the block upwards first took a [2^17, 256] float32
  // reverse add from 26-28 to 21-23 ms (forward 20 ms), a linear recurrence from 50-60 to
  // 39-45 ms. Forward scans, one sequence and narrow rows ran as fast or faster without it.
  // Skipped when the worker's previous block prefetched them (InputPrefetch reads the same lines).
  void touch_inputs(const Group& g, int64_t s0, int64_t s1) const {
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

  // Work item `item`: its group (pointers at logical step 0), block index and rows [s0, s1).
  struct ItemRows {
    Group g;
    int64_t b, s0, s1;
  };
  ItemRows item_rows(int64_t item) const {
    const int64_t gi = item / num_blocks_, b = item - gi * num_blocks_;
    Group g;
    int64_t c, j0 = 0;
    if (bundle_ > 1) {
      const int64_t line = gi / bundles_per_line_, k0 = (gi - line * bundles_per_line_) * bundle_;
      c = line * line_extent_ + k0;
      g.cols = std::min(bundle_, line_extent_ - k0);
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
  InputPrefetch input_prefetch(int64_t next, int64_t out_bytes) const {
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

  // A worker's next item, claimed when first asked for: a streamed block asks once it is
  // published and its output goes out (InputPrefetch), so that items are still claimed about in
  // the order they start.
  struct NextItem {
    ItemChain* chain = nullptr;  // null: the items in order on one worker
    int64_t item = -1;
    bool prefetched = false;  // its packed inputs were prefetched (InputPrefetch)
    int64_t get(int64_t current) {
      if (item < 0) item = chain ? chain->claim() : current + 1;
      return item;
    }
  };

  // Whether local scan k can run a block of `rows` rows of groups w lanes wide: its segments
  // need enough rows, its layout the right width (and the vector ones the blocked layout).
  bool local_scan_applies(LocalScan k, int64_t w, int64_t rows) const {
    const int64_t min_rows = Local::min_segment_rows;
    const bool narrow = w > 1 && w < Local::narrow_lanes && bundle_ == 1;
    switch (k) {
      case LocalScan::sequence_vectors_wide:
        return wide_combine<F> && w == 1 && blocked_sequences_ && rows >= 8 * Local::wide_segment_groups * min_rows;
      case LocalScan::sequence_vectors: return w == 1 && blocked_sequences_ && rows >= 8 * min_rows;
      case LocalScan::sequence_chains: return w == 1 && rows >= 8 * min_rows;
      case LocalScan::narrow_wide: return wide_combine<F> && narrow && rows >= Local::wide_narrow_segments * min_rows;
      case LocalScan::narrow_chains: return narrow && rows >= 2 * min_rows;
      case LocalScan::lanes_chains: return w > 1 && w < 32 && rows >= 4 * min_rows;
      case LocalScan::sequence: return w == 1;
      case LocalScan::narrow: return narrow;
      case LocalScan::lanes: return w > 1;
      default: return false;
    }
  }
  // The automatic choice: the first local scan, in LocalScan's order, that applies. The segmented
  // ones come first: their chains overlap f's latency, which a single chain leaves exposed.
  LocalScan first_local_scan(int64_t w, int64_t rows) const {
    for (int k = static_cast<int>(LocalScan::sequence_vectors_wide); k <= static_cast<int>(LocalScan::narrow); ++k)
      if (local_scan_applies(static_cast<LocalScan>(k), w, rows)) return static_cast<LocalScan>(k);
    return LocalScan::lanes;
  }

  // Processes one item; returns false when it gave up because another item failed. `scratch`
  // (null unless outputs are streamed) holds one block of outputs; `next` is the worker's next
  // item, asked for only by streamed blocks; `cached`: the previous item prefetched this one's
  // inputs.
  bool process(int64_t item, std::byte* scratch, NextItem& next, bool cached) {
    const auto [g, b, s0, s1] = item_rows(item);
    if (one_pass_ && lanes_path(g.w)) {  // rows of lanes, one thread
      // Blocks run in order on the one worker: the predecessor's last row is final.
      if (b > 0 && !chain_->wait(item - 1)) return false;
      scan_lanes<1>(g, s0, s1, s1 - s0, b > 0);
      if (num_blocks_ > 1) chain_->publish(item);
      return true;
    }
    // A streamed output (or an epilogue's with dropped leaves): the block is scanned into the
    // worker's scratch (`out`) and copied to the output when it is final; without an epilogue
    // its last row first, before it is published.
    const bool stream = scratch_bytes_ > 0 && (std::abs(y_step_) == g.w || partial_rows_);
    const Group out = stream ? scratch_group(g, s0, s1, scratch) : g;
    if (stream && reverse_ && lanes_path(g.w) && !cached) touch_inputs(g, s0, s1);
    // What the local scans read: `out`, or with a prologue leaf 0 from the rows it fills.
    Group in = out;
    Leaf0* aux = nullptr;  // the prologue's own rows at step s0
    if constexpr (Epi::active) {
      if (pro_leaf_bytes_ > 0) {
        std::byte* pro = scratch + scratch_bytes_;
        Leaf0* const a_lo = reinterpret_cast<Leaf0*>(pro + pro_slack_);
        Leaf0* const aux_lo = reinterpret_cast<Leaf0*>(pro + pro_leaf_bytes_ + pro_slack_);
        const int64_t lo = y_step_ > 0 ? s0 : s1 - 1, span = y_step_ > 0 ? 0 : (s1 - s0 - 1) * -y_step_;
        epi_.fill_inputs(item, a_lo, aux_lo, std::get<0>(y_row(g, lo)) - std::get<0>(y_data_), s1 - s0, g.w, lo);
        in.x0 = x_row(out, s0);
        in.y0 = y_row(out, s0);
        in.base = s0;
        std::get<0>(in.x0) = a_lo + span;
        aux = aux_lo + span;
      }
    }
    int num_segments = 1;
    int64_t seg = s1 - s0;
    LocalScan local = first_local_scan(g.w, s1 - s0);
    if (const LocalScan forced = forced_local_scan.load(std::memory_order_relaxed);
        forced != LocalScan::automatic && local_scan_applies(forced, g.w, s1 - s0)) [[unlikely]] {
      local = forced;
      forced_local_scan_blocks.fetch_add(1, std::memory_order_relaxed);
    }
    const auto segments = [&](int k) {
      num_segments = k;
      seg = segment_rows(s1 - s0, k, g.w);
    };
    switch (local) {
      case LocalScan::sequence_vectors_wide:
        segments(static_cast<int>(Local::wide_segment_groups * BT::V));
        scan_sequences_blocked<Local::wide_segment_groups>(in, s0, s1, seg);
        break;
      case LocalScan::sequence_vectors:
        segments(static_cast<int>(BT::V));
        scan_sequences_blocked<1>(in, s0, s1, seg);
        break;
      case LocalScan::sequence_chains:
        segments(8);
        scan_sequences<8>(in, s0, s1, seg);
        break;
      case LocalScan::narrow_wide:
        segments(Local::wide_narrow_segments);
        scan_narrow_wide<Local::wide_narrow_segments>(in, s0, s1, seg);
        break;
      case LocalScan::narrow_chains:
        // Two chains overlap f's latency; more spill the chunks' accumulators out of registers.
        segments(2);
        scan_narrow<2>(in, s0, s1, seg);
        break;
      case LocalScan::lanes_chains:
        segments(4);
        scan_lanes<4>(in, s0, s1, seg);
        break;
      case LocalScan::sequence: scan_sequences<1>(in, s0, s1, seg); break;
      case LocalScan::narrow: scan_narrow<1>(in, s0, s1, seg); break;
      default: scan_lanes<1>(in, s0, s1, seg); break;
    }
    // Segment k needs the inclusive prefix of everything before it (carry k): the predecessor
    // block's last row for k = 0 (none in the first block), then carry_{k+1} = f(carry_k, the
    // local last row of segment k). The carries are O(K) row combines, so the block's own last
    // row is made final and published right away, and the fix-up of the rows — the bulk of the
    // second pass — runs while the successor block is already going (a single-pass chain:
    // only an aggregate-sized step is serialised between blocks, not a whole block).
    Ptrs carry0{};
    const bool have0 = b > 0;
    if (have0) {
      if (!chain_->wait(item - 1)) return false;
      carry0 = Epi::active ? carry_row(item - 1) : y_row(g, s0 - 1);
    }
    LaneBuffers<Ptrs> carry_buf;  // carries 1 .. K-1, w lanes each ((K - 1) * w <= BlockPolicy::max_lanes)
    const auto carry = [&](int k) {
      if (k == 0) return carry0;
      Ptrs p = carry_buf.ptrs();
      static_for<L>([&](auto I) { std::get<I>(p) += (k - 1) * g.w; });
      return p;
    };
    for (int k = 1; k < num_segments; ++k) {
      const Ptrs last = y_row(out, s0 + k * seg - 1), dst = carry(k);
      if (k == 1 && !have0) {
        static_for<L>([&](auto I) { std::memcpy(std::get<I>(dst), std::get<I>(last), g.w * sizeof(*std::get<I>(dst))); });
      } else {
        const Ptrs prev = carry(k - 1);
        for (int64_t j = 0; j < g.w; ++j) Access::store(dst, j, to_elem<Elem>(f_(Access::load(prev, j), Access::load(last, j))));
      }
    }
    if (num_segments > 1 || have0) fix_up(out, carry(num_segments - 1), s1 - 1, s1);
    if constexpr (Epi::active) {
      if (num_blocks_ > 1) {  // the successor's carry, before the epilogue overwrites the row
        const Ptrs last = y_row(out, s1 - 1), dst = carry_row(item);
        static_for<L>([&](auto I) { std::memcpy(std::get<I>(dst), std::get<I>(last), g.w * sizeof(*std::get<I>(dst))); });
      }
    } else {
      if (stream) copy_rows(g, out, s1 - 1, s1, false);  // published, so plainly
    }
    if (num_blocks_ > 1) chain_->publish(item);
    InputPrefetch pf;
    if constexpr (!Epi::active) {
      if (stream) pf = input_prefetch(next.get(item), block_out_bytes(g, s0, s1));
      next.prefetched = pf.lines > 0;
    }
    for (int k = 0; k < num_segments; ++k) {
      const int64_t a = s0 + k * seg, e = k + 1 == num_segments ? s1 - 1 : a + seg;
      if constexpr (Epi::active) {
        // The epilogue applies the segment's carry; the block's last row is final already.
        const auto epilogue = [&](int64_t r0, int64_t r1, const Ptrs& c) {
          if (r0 >= r1) return;
          const int64_t lo = y_step_ > 0 ? r0 : r1 - 1;
          epi_(item, y_row(out, lo), std::get<0>(y_row(g, lo)) - std::get<0>(y_data_), r1 - r0, g.w, lo, c,
               aux ? aux + (lo - s0) * y_step_ : nullptr);
        };
        epilogue(a, e, k > 0 || have0 ? carry(k) : Ptrs{});
        if (k + 1 == num_segments) epilogue(s1 - 1, s1, Ptrs{});
        const int64_t end = k + 1 == num_segments ? s1 : e;
        if (stream && a < end) copy_rows(g, out, a, end, streamed_);
      } else {
        if (k > 0 || have0) fix_up(out, carry(k), a, e);
        if (stream) copy_rows(g, out, a, e, true, &pf);
      }
    }
    if (stream && streamed_) pf.advance(0), stream_fence();
    return true;
  }

  // Item `item`'s last row in the side buffer of an epilogue's scan.
  Ptrs carry_row(int64_t item) const {
    Ptrs p;
    std::byte* base = carries_.get();
    static_for<L>([&](auto I) {
      using P = std::tuple_element_t<I, Ptrs>;
      std::get<I>(p) = reinterpret_cast<P>(base) + item * group_lanes_;
      base += num_items_ * group_lanes_ * int64_t{sizeof(*P{})};
    });
    return p;
  }

  // Rows per segment when `n` rows are cut into K segments of w lanes (the last one takes the
  // remainder). Segments that start a multiple of 4 KiB apart make the K interleaved load and
  // store streams alias in L1 (a store seems to feed a later load with the same low 12 address
  // bits), which halves the speed at power-of-two sizes. So the length is nudged down (by at most
  // 1/16) until the starts lie about 4096 / K + 64 bytes apart modulo 4 KiB.
  int64_t segment_rows(int64_t n, int K, int64_t w) const {
    const int64_t nominal = n / K;
    const int64_t row_bytes = w * max_elem_bytes_;
    // The K segments start at k * cand * row_bytes: their offsets modulo 4096 (the L1 set index)
    // should be far apart, or the K streams of every leaf land in the same sets (a block of 8192
    // steps cut at 1024 steps of 4 bytes ran at a quarter of the speed of one cut at 1000).
    // Score: the smallest distance, modulo 4096, between two segments' starts.
    const auto score = [&](int64_t cand) {
      int64_t worst = 4096;
      for (int64_t k = 1; k < K; ++k) {
        const int64_t m = k * cand * row_bytes % 4096;
        worst = std::min(worst, std::min(m, 4096 - m));
      }
      return worst;
    };
    int64_t best = nominal, best_score = -1;
    for (int64_t cand = nominal; cand >= std::max(LocalScanPolicy::min_segment_rows, nominal - nominal / 16); --cand) {
      const int64_t s = score(cand);
      if (s > best_score) {
        best = cand;
        best_score = s;
      }
      if (s >= 4096 / K / 2) break;
    }
    return best;
  }

  // Local scans of K segments of one sequence (one lane), interleaved to overlap f's latency.
  template <int K>
  void scan_sequences(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
    std::array<Elem, K> acc;
    std::array<Ptrs, K> xb, yb;
    for (int k = 0; k < K; ++k) {
      xb[k] = x_row(g, s0 + k * seg);
      yb[k] = y_row(g, s0 + k * seg);
    }
    const Steps zero{};
    static_for<K>([&](auto k) {
      acc[k] = Access::load_at(xb[k], zero);
      Access::store(yb[k], 0, acc[k]);
    });
    Steps off;
    for (int64_t s = 1; s < seg; ++s) {
      static_for<L>([&](auto I) { off[I] = s * x_step_[I]; });
      const int64_t yo = s * y_step_;
      static_for<K>([&](auto k) {
        acc[k] = to_elem<Elem>(f_(acc[k], Access::load_at(xb[k], off)));
        Access::store(yb[k], yo, acc[k]);
      });
    }
    for (int64_t s = seg; s < s1 - s0 - (K - 1) * seg; ++s) {  // the last segment's remainder
      static_for<L>([&](auto I) { off[I] = s * x_step_[I]; });
      acc[K - 1] = to_elem<Elem>(f_(acc[K - 1], Access::load_at(xb[K - 1], off)));
      Access::store(yb[K - 1], s * y_step_, acc[K - 1]);
    }
  }

  // Local scans of M x V segments of one sequence (V = 8 floats or 4 doubles) as vector lanes: V
  // steps of every segment are loaded and transposed in registers, V segments at a time, f runs
  // across the segments and the results go back transposed. A vector combine (vector_combine,
  // M = 1) runs on the registers with its accumulator in one (about 12 % faster in cache than
  // through memory, where the accumulator's stores and reloads are on the chain); other combines
  // run across the segments as a loop over local arrays that the compiler vectorises, M
  // independent vectors of segments for a wide combine (LocalScanPolicy::wide_segment_groups), whose latency one
  // vector chain does not hide. With one chain per segment in scalar code, the pointers of 8
  // segments x 4 streams did not fit in registers.
  template <int M>
  void scan_sequences_blocked(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
    if constexpr (BT::V > 0 && kSameLeaves && (M == 1 || !kVectorCombine)) {
      constexpr int64_t V = BT::V, S = M * V;
      using Vec = typename BT::Vec;
      LocalLanes<Ptrs, S> acc, row;
      std::array<Ptrs, S> xb, yb;
      for (int64_t k = 0; k < S; ++k) {
        xb[k] = x_row(g, s0 + k * seg);
        yb[k] = y_row(g, s0 + k * seg);
        // Every leaf is read before any is written: an output may be another leaf's input.
        static_for<L>([&](auto I) { std::get<I>(acc.v)[k] = std::get<I>(xb[k])[0]; });
        static_for<L>([&](auto I) { std::get<I>(yb[k])[0] = std::get<I>(acc.v)[k]; });
      }
      [[maybe_unused]] VecElem<Vec> va;
      if constexpr (kVectorCombine) va = make_vec_elem<Vec>([&](auto I) { return BT::ld(std::get<I>(acc.v).data()); });
      int64_t s = 1;
      // Tiles of V steps of every segment. In a reverse scan every stream runs down: a tile is
      // loaded and stored in address order and its steps are taken from the last row up. (A
      // reversal of every vector cost two permutes per vector and leaf: float32 [2^18] in cache,
      // AMD EPYC VM, best of six processes' medians: linear recurrence in reverse 0.215 -> 0.170
      // ms, the cumulative product's backward 0.263 -> 0.204.)
      const auto tiles = [&](auto down) ASCAN_INLINE_LAMBDA {
        constexpr bool kDown = decltype(down)::value;
        constexpr int64_t d = kDown ? -1 : 1;
        const auto at = [](auto* p) { return kDown ? p - (BT::V - 1) : p; };  // a tile row's lowest address
        for (; s + V <= seg; s += V) {
          Vec r[L][M][V];  // r[leaf][m][q]: step s + q (s + V - 1 - q when kDown) of segments m V ..
          static_for<L>([&](auto I) {
            if (x_step_[I] == 0) {  // a leaf constant along the scan (a broadcast decay)
              const Vec c = Vec{} + std::get<I>(xb[0])[0];
              for (int64_t m = 0; m < M; ++m)
                for (int64_t q = 0; q < V; ++q) r[I][m][q] = c;
              return;
            }
            // S * L streams, all running down in a reverse scan: fetch ahead explicitly (0-25 %
            // faster in A/B runs on the noisy 2-core VM, most in reverse).
            for (int64_t k = 0; k < S; ++k) {
              __builtin_prefetch(std::get<I>(xb[k]) + (s + MemoryPolicy::prefetch_steps) * d);
              __builtin_prefetch(std::get<I>(yb[k]) + (s + MemoryPolicy::prefetch_steps) * d, 1);
            }
            for (int64_t m = 0; m < M; ++m) {
              for (int64_t k = 0; k < V; ++k) r[I][m][k] = BT::ld(at(std::get<I>(xb[m * V + k]) + s * d));
              BT::transpose(r[I][m]);
            }
          });
          for (int64_t i = 0; i < V; ++i) {
            const int64_t q = kDown ? V - 1 - i : i;
            if constexpr (kVectorCombine) {
              va = vec_elem<Vec>(f_(va, make_vec_elem<Vec>([&](auto I) { return r[I][0][q]; })));
              static_for<L>([&](auto I) { r[I][0][q] = vec_leaf<I>(va); });
            } else {
              static_for<L>([&](auto I) {
                for (int64_t m = 0; m < M; ++m) BT::st(std::get<I>(row.v).data() + m * V, r[I][m][q]);
              });
              const Ptrs pa = acc.ptrs(), pr = row.ptrs();
#pragma GCC ivdep
              for (int64_t j = 0; j < S; ++j) Access::store(pa, j, to_elem<Elem>(f_(Access::load(pa, j), Access::load(pr, j))));
              static_for<L>([&](auto I) {
                for (int64_t m = 0; m < M; ++m) r[I][m][q] = BT::ld(std::get<I>(acc.v).data() + m * V);
              });
            }
          }
          static_for<L>([&](auto I) {
            for (int64_t m = 0; m < M; ++m) {
              BT::transpose(r[I][m]);
              for (int64_t k = 0; k < V; ++k) BT::st(at(std::get<I>(yb[m * V + k]) + s * d), r[I][m][k]);
            }
          });
        }
      };
      if (y_step_ < 0) tiles(std::true_type{});
      else tiles(std::false_type{});
      if constexpr (kVectorCombine) static_for<L>([&](auto I) { BT::st(std::get<I>(acc.v).data(), vec_leaf<I>(va)); });
      // The segments' last steps (fewer than V), then the last segment's remainder.
      const Ptrs a = acc.ptrs();
      const auto scalar_step = [&](int64_t k, int64_t t) {
        Steps off;
        static_for<L>([&](auto I) { off[I] = t * x_step_[I]; });
        const Elem e = to_elem<Elem>(f_(Access::load(a, k), Access::load_at(xb[k], off)));
        Access::store(a, k, e);
        Access::store(yb[k], t * y_step_, e);
      };
      for (; s < seg; ++s)
        for (int64_t k = 0; k < S; ++k) scalar_step(k, s);
      for (int64_t t = seg; t < s1 - s0 - (S - 1) * seg; ++t) scalar_step(S - 1, t);
    }
  }

  // Local scans of K segments of w < LocalScanPolicy::narrow_lanes lanes of one column for a wide combine: the K
  // segments' w lanes are gathered into one row of K w elements per step and f runs over it as
  // one loop the compiler vectorises (K w independent chains; chunks of 8, 4, 2 and 1 lanes in
  // two chains left f's latency exposed).
  template <int K>
  void scan_narrow_wide(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
    const int64_t w = g.w, n = K * w;
    LocalLanes<Ptrs, K * LocalScanPolicy::narrow_lanes> acc, in;
    std::array<Ptrs, K> x, y;
    const auto load = [&](LocalLanes<Ptrs, K * LocalScanPolicy::narrow_lanes>& dst, int k) ASCAN_INLINE_LAMBDA {
      static_for<L>([&](auto I) {
        auto* d = std::get<I>(dst.v).data() + k * w;
        const auto* src = std::get<I>(x[k]);
        if (plan_.leaves[I].lane_contiguous) {
          for (int64_t j = 0; j < w; ++j) d[j] = src[j];
        } else {
          for (int64_t j = 0; j < w; ++j) d[j] = src[0];
        }
      });
    };
    const auto store = [&](int k) ASCAN_INLINE_LAMBDA {
      static_for<L>([&](auto I) {
        const auto* a = std::get<I>(acc.v).data() + k * w;
        for (int64_t j = 0; j < w; ++j) std::get<I>(y[k])[j] = a[j];
      });
    };
    const auto advance = [&](int k) ASCAN_INLINE_LAMBDA {
      static_for<L>([&](auto I) {
        std::get<I>(x[k]) += x_step_[I];
        std::get<I>(y[k]) += y_step_;
      });
    };
    for (int k = 0; k < K; ++k) {
      x[k] = x_row(g, s0 + k * seg);
      y[k] = y_row(g, s0 + k * seg);
      load(acc, k);
    }
    for (int k = 0; k < K; ++k) store(k);  // after all reads: an output may be another leaf's input
    const Ptrs a = acc.ptrs(), b = in.ptrs();
    for (int64_t s = 1; s < seg; ++s) {
      for (int k = 0; k < K; ++k) {
        advance(k);
        load(in, k);
      }
#pragma GCC ivdep
      for (int64_t j = 0; j < n; ++j) Access::store(a, j, to_elem<Elem>(f_(Access::load(a, j), Access::load(b, j))));
      for (int k = 0; k < K; ++k) store(k);
    }
    for (int64_t s = s0 + K * seg; s < s1; ++s) {  // the last segment's remainder
      advance(K - 1);
      load(in, K - 1);
      for (int64_t j = (K - 1) * w; j < n; ++j) Access::store(a, j, to_elem<Elem>(f_(Access::load(a, j), Access::load(b, j))));
      store(K - 1);
    }
  }

  // Local scans of K segments of w < LocalScanPolicy::narrow_lanes lanes of one column (a leaf is contiguous over
  // them or constant, as a decay broadcast over the lanes). A
  // row loop of a runtime w that short stays scalar and keeps the accumulator in memory (a
  // store-to-load round trip per step), so the lanes are cut into chunks of compile-time width
  // 8, 4, 2, 1 (the bits of w), each scanned with its accumulators in registers, one sweep over
  // the (L2-resident) block per chunk, which keeps few accumulators live at a time.
  template <int K>
  void scan_narrow(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
    if constexpr (kVectorCombine && sizeof(Leaf0) == 4) {
      if (windows_) return scan_windows<K>(g, s0, s1, seg);
    }
    int64_t j0 = 0;
    static_for<4>([&](auto b) {
      constexpr int W = 8 >> b;
      if (g.w & W) {
        scan_chunk<K, W>(g, j0, s0, s1, seg);
        j0 += W;
      }
    });
  }

  // Local scans of K segments of 4 to 7 packed lanes (rows back to back, outputs apart from the
  // inputs) with a vector combine: each row is one vector of 8 lanes, a window that reaches into
  // the row scanned after it (up, or down in a reverse scan). The extra lanes compute on that
  // row's values and their stores are overwritten when it comes, so a segment's last row stores
  // its own lanes only (the row after it is written already, or is another block's), and the
  // scan's last row reads its own lanes only. Each input is read a row ahead: a load issued after
  // a store to an address a multiple of 4096 bytes apart waits for the store (the CPU predicts
  // that they overlap), and a row's input and output often are. Narrower rows would spend most
  // of a vector on other rows, and waited on their own stores even read three rows ahead.
  template <int K>
  void scan_windows(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
    constexpr int W = 8;
    using VW = typename Lanes<Leaf0, W>::Vec;
    using UW = typename Lanes<Leaf0, W>::Unaligned;
    using VE = VecElem<VW>;
    const int64_t w = g.w, pad = y_step_ > 0 ? 0 : W - w;  // a window starts pad lanes lower
    std::array<VE, K> acc, ahead;  // ahead: the input of the row after the current one
    std::array<Ptrs, K> x, y;      // the segments' current rows
    std::array<bool, L> lanes;
    static_for<L>([&](auto I) { lanes[I] = plan_.leaves[I].lane_contiguous; });
    const auto load = [&](const Ptrs& row, bool whole) ASCAN_INLINE_LAMBDA {
      return make_vec_elem<VW>([&](auto I) -> VW {
        const Leaf0* p = std::get<I>(row);
        if (!lanes[I]) return VW{} + p[0];
        if (whole) return *reinterpret_cast<const UW*>(p - pad);
        VW v{};
        for (int64_t j = 0; j < w; ++j) v[pad + j] = p[j];
        return v;
      });
    };
    const auto store = [&](const Ptrs& row, const VE& e, bool whole) ASCAN_INLINE_LAMBDA {
      static_for<L>([&](auto I) {
        Leaf0* p = std::get<I>(row);
        const VW v = vec_leaf<I>(e);
        if (whole) {
          *reinterpret_cast<UW*>(p - pad) = v;
        } else {
          for (int64_t j = 0; j < w; ++j) p[j] = v[pad + j];
        }
      });
    };
    const auto advance = [&](auto k) ASCAN_INLINE_LAMBDA {
      static_for<L>([&](auto I) {
        std::get<I>(x[k]) += x_step_[I];
        std::get<I>(y[k]) += y_step_;
      });
    };
    static_for<K>([&](auto k) {  // a segment's first row is its input
      x[k] = x_row(g, s0 + k * seg);
      y[k] = y_row(g, s0 + k * seg);
      acc[k] = load(x[k], false);
      store(y[k], acc[k], false);
    });
    const int64_t last = s0 + (K - 1) * seg;  // the last segment runs to s1
    // Rows whose successor's window (read ahead) still lies before the scan's end.
    const int64_t piped = std::clamp<int64_t>(T_ - 2 - last, 1, seg - 1);
    std::array<Ptrs, K> xa;  // the row after the current one
    if (piped > 1) {
      static_for<K>([&](auto k) {
        xa[k] = x_row(g, s0 + k * seg + 1);
        ahead[k] = load(xa[k], true);
      });
    }
    for (int64_t i = 1; i < piped; ++i) {
      static_for<K>([&](auto k) {
        const VE in = ahead[k];
        advance(k);
        static_for<L>([&](auto I) { std::get<I>(xa[k]) += x_step_[I]; });
        ahead[k] = load(xa[k], true);
        acc[k] = vec_elem<VW>(f_(acc[k], in));
        store(y[k], acc[k], true);
      });
    }
    // The rest, each row's input read as it comes.
    const auto next = [&](auto k, bool whole_in, bool whole_out) ASCAN_INLINE_LAMBDA {
      advance(k);
      acc[k] = vec_elem<VW>(f_(acc[k], load(x[k], whole_in)));
      store(y[k], acc[k], whole_out);
    };
    for (int64_t i = piped; i < seg - 1; ++i) static_for<K>([&](auto k) { next(k, true, true); });
    static_for<K - 1>([&](auto k) { next(k, true, false); });
    for (int64_t s = std::max(last + 1, last + seg - 1); s < s1; ++s)
      next(std::integral_constant<size_t, K - 1>{}, s + 1 < T_, s + 1 < s1);
  }

  template <int K, int W>
  void scan_chunk(const Group& g, int64_t j0, int64_t s0, int64_t s1, int64_t seg) {
    // Accumulators and inputs are kept leaf by leaf (arrays of W per leaf, like the tensors), so
    // the combine over the W lanes can group into vector instructions (it does for add; the
    // linear recurrence stays scalar).
    std::array<LocalLanes<Ptrs, W>, K> acc;
    LocalLanes<Ptrs, W> in;
    std::array<Ptrs, K> x, y;
    static_for<K>([&](auto k) {
      x[k] = x_row(g, s0 + k * seg);
      y[k] = y_row(g, s0 + k * seg);
      static_for<L>([&](auto I) {
        const bool lanes = plan_.leaves[I].lane_contiguous;
        if (lanes) std::get<I>(x[k]) += j0;
        std::get<I>(y[k]) += j0;
        auto& a = std::get<I>(acc[k].v);
        for (int j = 0; j < W; ++j) a[j] = std::get<I>(x[k])[lanes ? j : 0];
      });
      static_for<L>([&](auto I) {  // after all reads: an output may be another leaf's input
        const auto& a = std::get<I>(acc[k].v);
        for (int j = 0; j < W; ++j) std::get<I>(y[k])[j] = a[j];
      });
    });
    // Inlined by force, with its inner loops: for 8 lanes of a linear recurrence GCC called it
    // (or, in the adjoint's scan, its loops) out of line, as scalar code (rows of 8 and 9 lanes
    // scanned at 0.6 of the speed of 7 or 12).
    const auto step = [&](auto k) ASCAN_INLINE_LAMBDA {
      static_for<L>([&](auto I) ASCAN_INLINE_LAMBDA {
        std::get<I>(x[k]) += x_step_[I];
        std::get<I>(y[k]) += y_step_;
        auto& v = std::get<I>(in.v);
        if (plan_.leaves[I].lane_contiguous) {
          static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { v[j] = std::get<I>(x[k])[j]; });
        } else {
          const auto c = std::get<I>(x[k])[0];
          static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { v[j] = c; });
        }
      });
      // All loads, then all combines, then all stores: y may alias x, so interleaved they
      // could not be grouped into vectors.
      const Ptrs a = acc[k].ptrs(), b = in.ptrs();
      static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { Access::store(a, j, to_elem<Elem>(f_(Access::load(a, j), Access::load(b, j)))); });
      static_for<L>([&](auto I) ASCAN_INLINE_LAMBDA {
        const auto& a = std::get<I>(acc[k].v);
        static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { std::get<I>(y[k])[j] = a[j]; });
      });
    };
    for (int64_t s = 1; s < seg; ++s) static_for<K>(step);
    for (int64_t s = s0 + K * seg; s < s1; ++s) step(std::integral_constant<size_t, K - 1>{});
  }

  // Local scans of K segments of w lanes each; lanes vectorise, segments add independent work.
  // The previous output row is the accumulator (as in a plain loop): one load of it, one of x
  // and one store per element.
  template <int K>
  void scan_lanes(const Group& g, int64_t s0, int64_t s1, int64_t seg, bool from_previous = false) {
    const int64_t w = g.w;
    std::optional<LaneBuffers<Ptrs>> gather_buf;
    Ptrs gathered{};
    if (any_gather_) gathered = gather_buf.emplace().ptrs();
    // An input row as lanes: leaves that are not contiguous over the group's lanes (constant
    // over the run, or columns of the bundle not adjacent) are gathered into a small buffer.
    const int64_t span = g.w / g.cols;
    const auto lanes_of = [&](const Ptrs& row) {
      Ptrs p = row;
      if (!any_gather_) return p;
      static_for<L>([&](auto I) {
        if (!gather_[I]) return;
        auto* dst = std::get<I>(gathered);
        const auto* src = std::get<I>(row);
        for (int64_t k = 0; k < g.cols; ++k, dst += span, src += bundle_stride_[I]) {
          if (plan_.leaves[I].lane_contiguous)
            std::memcpy(dst, src, span * sizeof(*dst));
          else
            std::fill_n(dst, span, *src);
        }
        std::get<I>(p) = std::get<I>(gathered);
      });
      return p;
    };
    const auto first = [&](int64_t s) {
      const Ptrs xl = lanes_of(x_row(g, s)), y = y_row(g, s);
      static_for<L>([&](auto I) {
        if (std::get<I>(y) != std::get<I>(xl)) std::memcpy(std::get<I>(y), std::get<I>(xl), w * sizeof(*std::get<I>(y)));
      });
    };
    // Row pointers advance in place: building a fresh pointer tuple per row made GCC store its
    // fields one by one and reload them as one vector (a failed store forward, ~45 % of the time
    // of rows of 7 lanes).
    const int64_t prev_off = -y_step_;
    const auto step = [&](Ptrs& x, Ptrs& y) {
      static_for<L>([&](auto I) {
        std::get<I>(x) += x_step_[I];
        std::get<I>(y) += y_step_;
      });
      const auto body = [&](const Ptrs& xl) {
        // Lanes are independent (y may be x itself, at the same lane; the previous row is
        // another row), which the compiler cannot prove through the pointers: say so, or it
        // emits scalar code.
#pragma GCC ivdep
        for (int64_t j = 0; j < w; ++j)
          Access::store(y, j, to_elem<Elem>(f_(Access::load(y, j + prev_off), Access::load(xl, j))));
      };
      if (any_gather_) body(lanes_of(x)); else body(x);
    };
    if (from_previous) {  // K == 1, s0 > 0: row s0 continues from the final row s0 - 1
      Ptrs x = x_row(g, s0 - 1), y = y_row(g, s0 - 1);
      for (int64_t s = s0; s < s1; ++s) step(x, y);
      return;
    }
    std::array<Ptrs, K> xs, ys;
    for (int k = 0; k < K; ++k) {
      first(s0 + k * seg);
      xs[k] = x_row(g, s0 + k * seg);
      ys[k] = y_row(g, s0 + k * seg);
    }
    for (int64_t s = 1; s < seg; ++s)
      for (int k = 0; k < K; ++k) step(xs[k], ys[k]);
    for (int64_t s = s0 + K * seg; s < s1; ++s) step(xs[K - 1], ys[K - 1]);
  }

  // y_s = f(carry, y_s) for logical steps s in [a, e); `carry` holds w final lanes.
  void fix_up(const Group& g, const Ptrs& carry, int64_t a, int64_t e) {
    if (a >= e) return;
    if (g.w == 1) {
      const Elem c = Access::load(carry, 0);
      if (y_step_ == 1 || y_step_ == -1) {  // contiguous: one ascending, vectorisable loop
        const Ptrs lo = y_row(g, y_step_ == 1 ? a : e - 1);
        for (int64_t i = 0; i < e - a; ++i) Access::store(lo, i, f_(c, Access::load(lo, i)));
      } else {
        const Ptrs base = y_row(g, a);
        for (int64_t i = 0; i < e - a; ++i)
          Access::store(base, i * y_step_, f_(c, Access::load(base, i * y_step_)));
      }
      return;
    }
    if ((y_step_ == g.w || y_step_ == -g.w) && g.w <= LocalScanPolicy::max_repeated_carry_lanes) {
      // Narrow rows packed back to back: one flat, vectorisable loop over the rows' span, with
      // the carry repeated to a stretch of whole rows (a loop of w per row would be scalar). The
      // repeats are copied in doubling pieces: an element loop with a wrapping index ran scalar
      // (a carry of 256 lanes repeated to 1024 took a tenth of a one-thread [2^17, 256] add).
      const int64_t n = (e - a) * g.w, stretch = std::min(BlockPolicy::max_lanes / g.w * g.w, n);
      LaneBuffers<Ptrs> rep_buf;
      const Ptrs rep = rep_buf.ptrs();
      static_for<L>([&](auto I) {
        auto* r = std::get<I>(rep);
        std::memcpy(r, std::get<I>(carry), g.w * sizeof(*r));
        for (int64_t len = g.w; len < stretch; len *= 2)
          std::memcpy(r + len, r, std::min(len, stretch - len) * sizeof(*r));
      });
      Ptrs lo = y_row(g, y_step_ > 0 ? a : e - 1);
      for (int64_t i = 0; i < n; i += stretch) {
        const int64_t m = std::min(stretch, n - i);
#pragma GCC ivdep
        for (int64_t j = 0; j < m; ++j) Access::store(lo, j, f_(Access::load(rep, j), Access::load(lo, j)));
        static_for<L>([&](auto I) { std::get<I>(lo) += stretch; });
      }
      return;
    }
    Ptrs row = y_row(g, a);
    for (int64_t s = a; s < e; ++s) {
#pragma GCC ivdep
      for (int64_t j = 0; j < g.w; ++j) Access::store(row, j, f_(Access::load(carry, j), Access::load(row, j)));
      static_for<L>([&](auto I) { std::get<I>(row) += y_step_; });
    }
  }

  const F& f_;
  const PointwisePlan& plan_;
  bool reverse_;
  const Epi& epi_;
  std::unique_ptr<std::byte[]> carries_;  // an epilogue's scan: each item's last row (carry_row)
  int64_t T_, group_lanes_, groups_per_column_, rows_, num_blocks_, num_items_;
  int64_t lead_ = 0;  // rows the first block is short of rows_ (aligned streamed blocks)
  Ptrs x_data_, y_data_;
  Steps x_step_;
  int64_t y_step_;
  int64_t bundle_ = 1, line_extent_ = 1, bundles_per_line_ = 1, max_elem_bytes_ = 1;
  Steps bundle_stride_{};        // a leaf's stride between the columns of a bundle
  std::array<bool, L> gather_{};  // leaf rows are gathered into lanes (see lanes_of)
  bool any_gather_ = false;
  bool blocked_sequences_ = false;
  bool windows_ = false;  // narrow rows scanned as windows (scan_windows)
  bool one_pass_ = false;  // see ThreadPolicy::one_pass_max_elements
  int64_t scratch_bytes_ = 0;  // a worker's scratch (one block of outputs); 0: stored in place
  bool streamed_ = false;      // the scratch's rows go out with streaming stores
  int64_t pro_leaf_bytes_ = 0, pro_slack_ = 0;  // a prologue's blocks of rows, their slack
  bool partial_rows_ = false;  // streamed groups that are parts of output rows
  ItemChain* chain_ = nullptr;  // the running scan's (run())
};

// Scans all leaves of `xs` into `ys` (flat tuples of tensors) following `plan`.
// With an epilogue (see PointwiseRunner), each block's final rows are transformed before they
// are stored.
template <class X, class F, class Epi = NoEpilogue>
void pointwise_scan(const F& f, const typename Tree<X>::Flat& xs, const typename Tree<X>::Flat& ys,
                    const PointwisePlan& plan, bool reverse, const Epi& epi = {}) {
  PointwiseRunner<X, F, Epi>(f, xs, ys, plan, reverse, epi).run();
}

}  // namespace ascan::detail
