// scan_runner.hpp — the host pointwise scan's work item runner, PointwiseRunner: its types,
// fields and the declarations of its layers (docs/design.md §2). Its members are defined by layer:
//   scan_block_io.hpp   the layout (constructor) and block I/O: rows, scratch, copies, prefetches;
//   scan_local.hpp      the local scans of one block and the fix-up of its segments;
//   pointwise_scan.hpp  the agent per work item (process) and the chained run over the items.
// Work is split by shape only, never by thread count, so results are bitwise identical for any
// number of threads. The output is cut into column groups (a column and up to
// BlockPolicy::max_lanes adjacent lanes) and, along the scan axis, into blocks of rows sized to stay
// in L2. Threads take (group, block) items in order from one counter (ItemChain).
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

#include "ascan/combine.hpp"
#include "ascan/config.hpp"
#include "ascan/detail/block_transpose.hpp"
#include "ascan/detail/path_override.hpp"
#include "ascan/detail/scan_chain.hpp"
#include "ascan/detail/scan_epilogue.hpp"
#include "ascan/detail/scan_lanes.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/scan_policy.hpp"
#include "ascan/detail/stream_store.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/parallel.hpp"

namespace ascan::detail {
ASCAN_ISA_BEGIN

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
  // Narrow float rows as windows of 8 lanes (scan_windows), where 8 floats fit one vector.
  static constexpr bool kWindows = kVectorCombine && sizeof(Leaf0) == 4 && 8 * sizeof(Leaf0) <= VectorPolicy::bytes;
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
  // The layout: column groups, blocks of rows, bundles, scratch (scan_block_io.hpp).
  PointwiseRunner(const F& f, const typename Node::Flat& xs, const typename Node::Flat& ys,
                  const PointwisePlan& plan, bool reverse, const Epi& epi);

  int64_t num_items() const { return num_items_; }
  int64_t group_lanes() const { return group_lanes_; }  // lanes of a work item, at most

  // Runs every work item on the chained workers (pointwise_scan.hpp).
  void run();

 private:
  struct Group {  // one column group: pointers at logical step `base`, lane count and columns
    Ptrs x0, y0;
    int64_t w;
    int64_t cols = 1;
    int64_t base = 0;
  };
  // Work item `item`: its group (pointers at logical step 0), block index and rows [s0, s1).
  struct ItemRows {
    Group g;
    int64_t b, s0, s1;
  };
  struct InputPrefetch;

  int64_t phys(int64_t s) const { return reverse_ ? T_ - 1 - s : s; }
  // Groups of w lanes scanned by scan_lanes (not one sequence, not the chunked narrow path).
  bool lanes_path(int64_t w) const { return w > 1 && !(w < LocalScanPolicy::narrow_lanes && bundle_ == 1); }

  // ---- block I/O (scan_block_io.hpp) ----
  Ptrs x_row(const Group& g, int64_t s) const;
  Ptrs y_row(const Group& g, int64_t s) const;
  ItemRows item_rows(int64_t item) const;
  template <size_t I> int64_t scratch_leaf_bytes() const;
  Group scratch_group(const Group& g, int64_t s0, int64_t s1, std::byte* scratch) const;
  void copy_rows(const Group& g, const Group& from, int64_t a, int64_t e, bool streaming,
                 InputPrefetch* pf = nullptr) const;
  int64_t block_out_bytes(const Group& g, int64_t s0, int64_t s1) const;
  void touch_inputs(const Group& g, int64_t s0, int64_t s1) const;
  InputPrefetch input_prefetch(int64_t next, int64_t out_bytes) const;
  Ptrs carry_row(int64_t item) const;

  // ---- the local scans of one block (scan_local.hpp) ----
  int64_t segment_rows(int64_t n, int K, int64_t w) const;
  template <int K> void scan_sequences(const Group& g, int64_t s0, int64_t s1, int64_t seg);
  template <int M> void scan_sequences_blocked(const Group& g, int64_t s0, int64_t s1, int64_t seg);
  template <int K> void scan_narrow_wide(const Group& g, int64_t s0, int64_t s1, int64_t seg);
  template <int K> void scan_narrow(const Group& g, int64_t s0, int64_t s1, int64_t seg);
  template <int K> void scan_windows(const Group& g, int64_t s0, int64_t s1, int64_t seg);
  template <int K, int W> void scan_chunk(const Group& g, int64_t j0, int64_t s0, int64_t s1, int64_t seg);
  template <int K> void scan_lanes(const Group& g, int64_t s0, int64_t s1, int64_t seg, bool from_previous = false);
  void fix_up(const Group& g, const Ptrs& carry, int64_t a, int64_t e);

  // ---- the agent per work item (pointwise_scan.hpp) ----
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
  bool local_scan_applies(LocalScan k, int64_t w, int64_t rows) const;
  LocalScan first_local_scan(int64_t w, int64_t rows) const;
  bool process(int64_t item, std::byte* scratch, NextItem& next, bool cached);

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
  int64_t bundle_ = 1, bundled_extent_ = 1, bundles_per_extent_ = 1, max_elem_bytes_ = 1;
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

ASCAN_ISA_END
}  // namespace ascan::detail
