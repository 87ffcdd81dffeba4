// policy.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the gradient's tuning knobs as named
// policy structs (docs/design.md §4). Each says what it trades; the measurements that chose its
// value are in docs/performance/history.md under the knob's name. tests/test_paths.cpp
// forces every path by name, so coverage does not depend on these thresholds.
#pragma once

#include <cstdint>

namespace ascan::ad::detail {

// Which adjoint path a pointwise scan's gradient takes (choose_adjoint_path, scan_vjp.hpp).
// Every threshold is a row width (lanes, plan.run) or a lane count, never a thread count, so
// gradients do not depend on the threads.
struct AdjointPathPolicy {
  // With at least this many lanes (columns x run) the column sweep has work for every thread in
  // one pass; fewer, long columns go to the segment sweep, whose two passes split a column.
  static constexpr int64_t min_columns_for_sweep = 256;
  // Rows at least this wide take the column sweep even as one long block of rows ([T, 7]): its
  // one pass beats the segment sweep's two from 3 lanes on; at 2 they tie, and one lane alone is
  // slower, so narrower rows keep the segment sweep, whose passes scale with threads.
  static constexpr int64_t min_run_for_columns = 3;
  // The cumulative product takes its adjoint as a scan in few columns of rows narrower than this
  // (the column sweep runs such rows as mostly padded vector lanes).
  static constexpr int64_t max_run_for_product_by_scan = 8;
  // The line sweeps (a cache line of lanes per item, gradients stored as they are computed)
  // against the adjoint as a scan: the sweep reads rows a row stride apart, which pays once rows
  // are wide enough to fill lines and items. The recurrence gains from 16 lanes, the product
  // (which recomputes y and so reads less) only from 128, logaddexp (whose scan evaluates its
  // Jacobians per block in cache) from 1024.
  static constexpr int64_t min_run_for_linrec_lines = 16;
  static constexpr int64_t min_run_for_product_lines = 128;
  static constexpr int64_t min_run_for_logaddexp_lines = 1024;
};

// The column sweep (column_sweep.hpp).
struct ColumnSweepPolicy {
  // Rows at least this wide are swept in items of a run-time lane count (up to
  // SweepLanes::max); narrower ones in items of padded_lanes, a compile-time count whose lane
  // loops vectorise without a scalar remainder.
  static constexpr int64_t min_run_for_wide_items = 48;
  static constexpr int64_t padded_lanes = 16;  // narrower items run padded to 8 or 16 lanes
  // How far ahead (per stream) padded items fetch rows: rows a row stride apart are not
  // followed by the hardware prefetchers.
  static constexpr int64_t prefetch_bytes = 1024;
};

// The line sweeps (line_sweeps.hpp).
struct LineSweepPolicy {
  // Lanes per item, at most: 2 KiB rows per float stream, long enough to stream.
  static constexpr int64_t max_lanes = 512;
  // The product recomputes y from x in blocks of this many steps kept in cache, reading 3
  // streams instead of 4 (the recomputed products round a few ulps from the scan's).
  static constexpr int64_t product_recompute_rows = 64;
  // Steps ahead each step prefetches the rows it will read (a row stride apart, going down).
  static constexpr int64_t prefetch_rows = 4;
};

// The segment sweep (segment_sweep.hpp).
struct SegmentSweepPolicy {
  // Steps per segment: long enough that the chaining pass over segments is negligible, short
  // enough that a tile's staged operands stay in L2 (resident_bytes).
  static constexpr int64_t segment_steps = 512;
  // One vector of floats: 16 lanes spill step 1's lane state (c, M, A) from the registers.
  static constexpr int64_t lanes_per_tile = 8;
  // Steps staged per copy of each lane's stretch into the tile buffers (sequential reads).
  static constexpr int64_t stage_steps = 32;
  // Staged bytes of a tile kept for the second pass, at most: about a third of L2.
  static constexpr int64_t resident_bytes = int64_t{192} << 10;
};

}  // namespace ascan::ad::detail
