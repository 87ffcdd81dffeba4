// path_override.hpp — a test-only way to force the host scan's local scan and the gradient's
// adjoint path by name (docs/design.md §2, §9), so that tests reach every engine whatever the
// thresholds in the policy structs say.
//
// Not for users: the forced choice is process-wide (a scan's blocks run on the pool's threads),
// so a test sets it, runs its scans and restores it (ForcePath), with no concurrent scans.
// A forced local scan runs every block it applies to (its segments need enough rows, its
// width the right lanes) and the automatic choice the others; blocks_forced() counts the blocks
// it ran. A forced adjoint path that does not apply to the combine and upstream gradients
// throws ascan::Error.
#pragma once

#include <atomic>
#include <cstdint>

namespace ascan::detail {

// The local scans of one block of the forward scan (PointwiseRunner::process), in the order the
// automatic choice tries them.
enum class LocalScan : uint8_t {
  automatic,
  sequence_vectors_wide,  // one column of one lane: segments as vector lanes, several vectors (wide combines)
  sequence_vectors,       // one column of one lane: segments as vector lanes (register transposes)
  sequence_chains,        // one column of one lane: 8 interleaved scalar chains
  narrow_wide,            // rows of 2-15 lanes, a wide combine: segments gathered into one row of chains
  narrow_chains,          // rows of 2-15 lanes: 2 chains of fixed-width chunks
  lanes_chains,           // rows of 2-31 lanes: 4 segments of rows
  sequence,               // one column of one lane, one chain
  narrow,                 // rows of 2-15 lanes, one chain of fixed-width chunks
  lanes,                  // rows of lanes, one chain
};

// The paths of a pointwise scan's gradient (pointwise_scan_vjp).
enum class AdjointPath : uint8_t {
  automatic,
  sum_by_scan,          // add: the reverse scan of the upstream gradient
  first_order_lines,    // linear recurrence (loss on y^b), cumulative product: line sweep
  first_order_by_scan,  // the same and logaddexp: the adjoint as a scan with an epilogue
  logaddexp_lines,      // logaddexp: line sweep
  column_sweep,         // any combine: one lane per output column, one pass
  segment_sweep,        // any combine: segments chained, two passes
};

inline std::atomic<LocalScan> forced_local_scan{LocalScan::automatic};
inline std::atomic<AdjointPath> forced_adjoint_path{AdjointPath::automatic};
inline std::atomic<int64_t> forced_local_scan_blocks{0};

inline const char* name(LocalScan s) {
  constexpr const char* names[] = {"automatic",     "sequence_vectors_wide", "sequence_vectors", "sequence_chains",
                                   "narrow_wide",   "narrow_chains",         "lanes_chains",     "sequence",
                                   "narrow",        "lanes"};
  return names[static_cast<int>(s)];
}
inline const char* name(AdjointPath p) {
  constexpr const char* names[] = {"automatic",       "sum_by_scan",  "first_order_lines", "first_order_by_scan",
                                   "logaddexp_lines", "column_sweep", "segment_sweep"};
  return names[static_cast<int>(p)];
}

// Forces a local scan or an adjoint path for its lifetime (tests only; see above).
class ForcePath {
 public:
  explicit ForcePath(LocalScan s) : scan_(forced_local_scan.exchange(s)), path_(forced_adjoint_path.load()) {
    forced_local_scan_blocks.store(0);
  }
  explicit ForcePath(AdjointPath p) : scan_(forced_local_scan.load()), path_(forced_adjoint_path.exchange(p)) {}
  ~ForcePath() {
    forced_local_scan.store(scan_);
    forced_adjoint_path.store(path_);
  }
  ForcePath(const ForcePath&) = delete;
  ForcePath& operator=(const ForcePath&) = delete;
  // Blocks the forced local scan ran since this guard was made.
  static int64_t blocks_forced() { return forced_local_scan_blocks.load(); }

 private:
  LocalScan scan_;
  AdjointPath path_;
};

}  // namespace ascan::detail
