// scan_policy.hpp — the host pointwise scan's tuning constants (what each trades is said at
// it; the measurements behind them are in docs/performance/history.md) and the traits that
// choose a local scan by combine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "ascan/combine.hpp"

namespace ascan::detail {

// Lanes per column group (the accumulator tile). Groups narrower than their rows read pieces of
// each row a row apart, a new page per row, which the hardware prefetcher follows poorly: AMD
// EPYC VM, float32 add [4096, 1024] forward, alternating processes, 256 -> 1024 lanes:
// 4.0-5.5 -> 2.3-2.8 ms.
inline constexpr int64_t kMaxLanes = 1024;
inline constexpr int64_t kBlockBytes = 96 << 10;     // inputs + outputs of one block (L2-resident)
// The same for a scan with an epilogue (which reads a further stream of the block's size) in
// groups of fewer than kNarrowLanes lanes. AMD EPYC VM (512 KiB of L2), float32 cumulative
// product backward, three processes' medians of 21, 96 -> 384 KiB: [2^22] 7.2-10.1 -> 5.2-6.1
// ms, the linear recurrence [2^22] 8.8-11.6 -> 6.7-8.3, [599186, 7] 9.7-11.0 -> 8.2-8.8. Wide
// rows ran slower with it ([16384, 256]: 8.2-10.9 -> 10.7-13.6); the forward scan gained nothing.
inline constexpr int64_t kEpilogueBlockBytes = 384 << 10;
// Blocks of a scan with an epilogue have at least this many rows: wide groups at kBlockBytes got
// only a few rows each (6 for 1024 lanes of a float32 linear recurrence), and each block pays its
// carries, a wait on its predecessor and the epilogue's per-lane set-up. AMD EPYC VM, float32
// discounted return backward through the tape (by scan), 6 -> 32 rows: [4096, 1024] 9.4-10.7 ->
// 5.9-6.1 ms, [2048, 2048] 14.4-15.3 -> 9.2; [16384, 256] (24 -> 32 rows) 7.0-7.9 -> 6.0-6.1.
// The forward scans gained nothing clear from it and keep kBlockBytes.
inline constexpr int64_t kMinEpilogueBlockRows = 32;
inline constexpr int64_t kMaxPartialScratchBytes = 1 << 20;  // see the streamed partial rows
// fix_up repeats a carry over a stretch of packed rows up to this width; wider rows are a
// vectorisable loop each.
inline constexpr int64_t kMaxRepeatedCarryLanes = 64;
// Output bytes streamed between two bursts of input prefetches (see InputPrefetch).
inline constexpr size_t kPrefetchPaceBytes = 2048;
// Below this many elements x leaves, no thread hand-off. Waking the pool's thread costs about
// 10 us on the Intel Xeon VM: a float32 1-D add, medians of 9 x 200 calls in three processes,
// 1 -> 2 threads: 2^15 11.6-16.0 -> 21.0-23.0 us, 2^16 20.9-31.1 -> 35.9-40.1, 2^17 42.4-52.6
// -> 52.2-60.4, 2^18 91-101 -> 79-105. (2^15 on the AMD VM.)
inline constexpr int64_t kParallelMinElements = 1 << 18;
// Rows of lanes this small (elements x leaves, in cache) are scanned in one pass on one thread,
// each block continuing from its predecessor's last row: the chained two-pass scan (local scan,
// then a fix-up re-reading the block) ran at half the speed of a plain loop there. Chosen by
// size alone, so results still do not depend on the thread count. Intel Xeon VM (2 MiB of L2),
// float32 add, medians of 7 x 64 calls, two-pass -> one pass: [512, 256] 24-36 -> 15 us (a
// plain loop 13), [1024, 256] 62-72 -> 49-51 us (loop 38-44); [2048, 256] 119-128 -> 152 us,
// where the two passes on two threads win. (2^17 on an AMD EPYC VM with 512 KiB of L2.)
inline constexpr int64_t kOnePassMaxElements = 1 << 19;
// Outputs of at least this many bytes are written with streaming stores (stream_store.hpp): a
// block is scanned into a scratch buffer of the worker and copied out around the caches. Smaller
// outputs are stored plainly, so they are still in the cache for the next step of a computation.
// With inputs of the same size, 16 MiB of outputs fill the 32 MiB last-level cache of the
// development machine: from there plain stores only cost their line reads. Medians of 21 calls,
// 32 -> 16 MiB: float32 linear recurrence [3 * 10^6] 6.6 -> 4.7 ms, in reverse 6.3 -> 5.6 ms;
// add [2^14, 256] in reverse 4.3 -> 2.4 ms, forward and [2^22] about equal.
inline constexpr int64_t kStreamMinBytes = int64_t{16} << 20;
inline constexpr int64_t kMinSegmentRows = 16;       // shorter blocks are not cut into segments
inline constexpr int64_t kNarrowLanes = 16;          // narrower groups scan in fixed-width chunks
inline constexpr int64_t kPrefetchSteps = 128;       // software prefetch distance of the blocked scan
inline constexpr int kSpinsBeforeYield = 64;          // ~1-2 us of pause before yielding the core

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
// operations. Float32 [2^22] logaddexp forward, 2 threads, alternating runs: 21.6-21.7 ms in
// chains, 13.7-14.7 as lanes (latency-bound still: one vector of 8 segments per chain).
template <class F> inline constexpr bool wide_combine = std::is_same_v<F, LogAddExp>;
// Vectors of segments a wide combine's blocked scan of one sequence runs as independent chains
// (kWideSegmentGroups x V segments per block). Float32 logaddexp forward, 2 threads, AMD EPYC Zen
// 5 VM, alternating processes, medians of 15, 1 -> 2 / 4 / 8 vectors: [2^22] 16.7-18.6 ->
// 12.9-13.1 / 9.8-10.5 / 11.7-12.2 ms, [2^24] 64-77 -> 52-55 / 40-42 / 49-50.
inline constexpr int kWideSegmentGroups = 4;
// Segments per block of a wide combine's rows of 2 to 15 lanes, gathered into one row of chains
// (scan_narrow_wide). Same method, [599186, 7] / [2^18, 12]: chunks in 2 chains 26-43 / 21-31 ms,
// 4 segments 14.4-15.5 / 7.8-9.7, 8: 12.6-13.2 / 7.2-7.7 (reverse 12.8-17.7 / 7.2-10.3), 16:
// 12.0-15.1 / 8.7-11.2.
inline constexpr int kWideNarrowSegments = 8;

}  // namespace ascan::detail
