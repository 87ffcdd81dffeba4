// scan_policy.hpp — the host pointwise scan's policy layer (docs/design.md §2): its tuning knobs as
// named policy structs, and the traits that choose a local scan by combine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "ascan/combine.hpp"
#include "ascan/config.hpp"

namespace ascan::detail {

// Each knob says what it trades; the measurements that chose its value are in
// docs/performance/history.md under the knob's name. Changing one moves work between the local
// scans: tests/test_paths.cpp forces each one by name, so coverage does not depend on them.

ASCAN_ISA_BEGIN
// The vector width the kernels are written for (GCC vector types, register transposes): the
// widest the translation unit's ISA level has, but 32 bytes with AVX-512 too (its 64-byte
// transposes and windows were not written: see history.md). Per level, so a baseline build
// never passes a vector wider than its registers.
struct VectorPolicy {
  static constexpr int64_t bytes = ASCAN_ISA_LEVEL >= 1 ? 32 : 16;
};
ASCAN_ISA_END

// When a scan hands work to the pool's threads.
struct ThreadPolicy {
  // Below this many elements x leaves a scan stays on the calling thread: waking a pool thread
  // costs about as much as scanning 2^17 elements.
  static constexpr int64_t parallel_min_elements = 1 << 18;
  // Rows of lanes this small are scanned in one pass on one thread, each block continuing from
  // its predecessor's last row: in cache the chained two-pass scan (local scan, then a fix-up
  // re-reading the block) costs twice a plain loop. Chosen by size, so results still do not
  // depend on the thread count.
  static constexpr int64_t one_pass_max_elements = 1 << 19;
  // Pauses a worker spins on its predecessor before it yields the core: a predecessor about to
  // finish is waited for without a trip through the scheduler.
  static constexpr int spins_before_yield = 64;
};

// How the output is cut into work items: column groups of lanes, blocks of rows.
struct BlockPolicy {
  // Lanes per column group (the accumulator tile). A group narrower than its rows reads pieces
  // of each row a row apart, a new page per row, which hardware prefetchers follow poorly.
  static constexpr int64_t max_lanes = 1024;
  // Inputs + outputs of one block: small enough to stay in L2 between the local scan and the
  // fix-up that re-reads it.
  static constexpr int64_t block_bytes = 96 << 10;
  // The same for a scan with an epilogue in groups of fewer than LocalScanPolicy::narrow_lanes
  // lanes: the epilogue reads a further stream, and longer blocks amortise its per-block set-up;
  // wide rows ran slower with it, so they keep block_bytes.
  static constexpr int64_t epilogue_block_bytes = 384 << 10;
  // Blocks of a scan with an epilogue have at least this many rows: each block pays its carries,
  // a wait on its predecessor and the epilogue's per-lane set-up, which a few rows do not repay.
  static constexpr int64_t min_epilogue_block_rows = 32;
  // Scratch for the streamed partial rows of one leaf, at most (see the streamed blocks).
  static constexpr int64_t max_partial_scratch_bytes = 1 << 20;
};

// How blocks meet memory: streaming stores and software prefetches.
struct MemoryPolicy {
  // Outputs of at least this many bytes bypass the caches (stream_store.hpp): a block is scanned
  // into the worker's scratch and copied out. Smaller outputs are stored plainly, so they are
  // still in the cache for the next step of a computation; at this size outputs and inputs fill
  // a 32 MiB last-level cache anyway.
  static constexpr int64_t stream_min_bytes = int64_t{16} << 20;
  // Output bytes streamed between two bursts of input prefetches (see InputPrefetch).
  static constexpr size_t prefetch_pace_bytes = 2048;
  // Software prefetch distance of the blocked scan of one sequence, in steps.
  static constexpr int64_t prefetch_steps = 128;
};

// Which local scan a block gets and how it is cut into segments (independent chains).
struct LocalScanPolicy {
  // Shorter blocks are not cut into segments: the fix-up pass would cost more than the latency
  // the chains hide.
  static constexpr int64_t min_segment_rows = 16;
  // Narrower groups scan in fixed-width chunks of lanes with accumulators in registers.
  static constexpr int64_t narrow_lanes = 16;
  // fix_up repeats a carry over a stretch of packed rows up to this width; wider rows are a
  // vectorisable loop each.
  static constexpr int64_t max_repeated_carry_lanes = 64;
  // Vectors of segments a wide combine's blocked scan of one sequence runs as independent
  // chains (wide_segment_groups x V segments per block): more hide more of logaddexp's latency
  // until the chains' state spills from registers.
  static constexpr int wide_segment_groups = 4;
  // Segments per block of a wide combine's rows of 2 to 15 lanes, gathered into one row of
  // chains (scan_narrow_wide); the same trade.
  static constexpr int wide_narrow_segments = 8;
};

// Builtin combines whose operations are elementwise on GCC vector types (a + b, a * b, a > b ?
// a : b), on the element structure they take: the blocked scan of one sequence runs them on whole
// vectors (one segment per vector lane) with the accumulator in registers, and narrow float rows
// run as one vector per row (scan_windows). Other combines run element by element through small
// local arrays. Not in translation units compiled by nvcc, which rejects vector types in the
// builtins' __host__ __device__ call operators.
template <class F, class Elem, class T> inline constexpr bool vector_combine = false;
#if !defined(__CUDACC__)
template <class T> inline constexpr bool vector_combine<Add, T, T> = true;
template <class T> inline constexpr bool vector_combine<Mul, T, T> = true;
template <class T> inline constexpr bool vector_combine<Max, T, T> = true;
template <class T> inline constexpr bool vector_combine<Min, T, T> = true;
template <class T> inline constexpr bool vector_combine<LinearRecurrence, std::tuple<T, T>, T> = true;
#endif

// Builtin combines of many operations per element whose element loop vectorises (logaddexp:
// about 50, detail/log1p_exp.hpp): one sequence is scanned as vector lanes through local arrays
// (scan_sequences_blocked) rather than in 8 scalar chains, which suit combines of a few
// operations.
template <class F> inline constexpr bool wide_combine = std::is_same_v<F, LogAddExp>;

}  // namespace ascan::detail
