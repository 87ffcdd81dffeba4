// pointwise_scan.hpp — the agent per work item and the chained run of the host pointwise scan
// (docs/design.md §2), and pointwise_scan(), which the dispatch (scan.hpp, builtin_scan.cpp)
// calls. An item scans its block locally (one read of x, one write of y), waits for its
// predecessor block to publish, then applies the predecessor's last row — the inclusive prefix —
// to its rows while they are still in cache (y = f(prefix, y_local), valid by associativity).
// The layers below: scan_runner.hpp (the runner's types and fields), scan_block_io.hpp, scan_local.hpp,
// scan_chain.hpp (ItemChain) and scan_policy.hpp.
#pragma once

#include "ascan/config.hpp"
#include "ascan/detail/scan_block_io.hpp"
#include "ascan/detail/scan_chain.hpp"
#include "ascan/detail/scan_local.hpp"
#include "ascan/detail/scan_runner.hpp"

namespace ascan::detail {
ASCAN_ISA_BEGIN

template <class X, class F, class Epi>
inline void PointwiseRunner<X, F, Epi>::run() {
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
    // On the calling thread without a worker body (small scans in a loop: the std::function
    // call and the item counter are a sizeable part of their time).
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

// Whether local scan k can run a block of `rows` rows of groups w lanes wide: its segments
// need enough rows, its layout the right width (and the vector ones the blocked layout).
template <class X, class F, class Epi>
inline bool PointwiseRunner<X, F, Epi>::local_scan_applies(LocalScan k, int64_t w, int64_t rows) const {
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
template <class X, class F, class Epi>
inline LocalScan PointwiseRunner<X, F, Epi>::first_local_scan(int64_t w, int64_t rows) const {
  for (int k = static_cast<int>(LocalScan::sequence_vectors_wide); k <= static_cast<int>(LocalScan::narrow); ++k)
    if (local_scan_applies(static_cast<LocalScan>(k), w, rows)) return static_cast<LocalScan>(k);
  return LocalScan::lanes;
}

// Processes one item; returns false when it gave up because another item failed. `scratch`
// (null unless outputs are streamed) holds one block of outputs; `next` is the worker's next
// item, asked for only by streamed blocks; `cached`: the previous item prefetched this one's
// inputs.
template <class X, class F, class Epi>
inline bool PointwiseRunner<X, F, Epi>::process(int64_t item, std::byte* scratch, NextItem& next, bool cached) {
  // (Not a structured binding: lambdas below capture these, which Clang accepts from 16 on.)
  const ItemRows rows = item_rows(item);
  const Group& g = rows.g;
  const int64_t b = rows.b, s0 = rows.s0, s1 = rows.s1;
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
    case LocalScan::sequence_vectors_wide:  // (wide combines only: no code for the others)
      if constexpr (wide_combine<F>) {
        segments(static_cast<int>(Local::wide_segment_groups * BT::V));
        scan_sequences_blocked<Local::wide_segment_groups>(in, s0, s1, seg);
      }
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
      if constexpr (wide_combine<F>) {
        segments(Local::wide_narrow_segments);
        scan_narrow_wide<Local::wide_narrow_segments>(in, s0, s1, seg);
      }
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

// Scans all leaves of `xs` into `ys` (flat tuples of tensors) following `plan`.
// With an epilogue (see PointwiseRunner), each block's final rows are transformed before they
// are stored.
template <class X, class F, class Epi = NoEpilogue>
void pointwise_scan(const F& f, const typename Tree<X>::Flat& xs, const typename Tree<X>::Flat& ys,
                    const PointwisePlan& plan, bool reverse, const Epi& epi = {}) {
  PointwiseRunner<X, F, Epi>(f, xs, ys, plan, reverse, epi).run();
}

ASCAN_ISA_END
}  // namespace ascan::detail
