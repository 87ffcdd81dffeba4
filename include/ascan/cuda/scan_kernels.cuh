// scan_kernels.cuh — the device scan engines: CUB single-pass scans over computed iterators, a
// span engine (reduce, scan the span totals, rescan) for rows of kMinSpanSegment positions or
// more, and a lane-parallel kernel for wide [outer, T, inner] layouts.
//
// Every engine sees a sequence position k through an index map (no transposes, no key storage):
// rows of the canonical [outer, T, inner] view are segments of one by-key scan, and reverse
// reads step s at T-1-s. Loads and stores are functors, so the same engine serves the forward
// scan (leaf loads) and the adjoint scan (Jacobians computed on the fly).
#pragma once

#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ascan/config.hpp"
#include "ascan/cuda/check.cuh"
#include "ascan/cuda/element.cuh"

namespace ascan::cuda::detail {

// Division by a run-time constant, done per element in the index maps: a 64-bit division is
// dozens of instructions (enough to make a bandwidth-bound scan compute-bound), so dividends below
// 2^31 use a multiply-high by a magic number (as CUTLASS's FastDivmod); larger ones divide.
struct Divider {
  int64_t d = 1;
  uint32_t mul = 0, shr = 0;
  bool fast = false;
  Divider() = default;
  Divider(int64_t divisor, int64_t max_dividend) : d(divisor) {
    fast = divisor >= 1 && divisor < (int64_t{1} << 31) && max_dividend < (int64_t{1} << 31);
    if (fast && divisor > 1) {
      uint32_t log2 = 0;
      while ((int64_t{1} << log2) < divisor) ++log2;  // ceil(log2(divisor))
      const uint64_t p = 31 + log2;
      const uint64_t d64 = static_cast<uint64_t>(divisor);
      mul = static_cast<uint32_t>(((uint64_t{1} << p) + d64 - 1) / d64);
      shr = static_cast<uint32_t>(p - 32);
    }
  }
  ASCAN_HD int64_t operator()(int64_t k) const {
    if (!fast) return k / d;
    if (mul == 0) return k;  // d == 1
    const uint32_t x = static_cast<uint32_t>(k);
#if defined(__CUDA_ARCH__)
    return static_cast<int64_t>(__umulhi(x, mul) >> shr);
#else
    return static_cast<int64_t>(((static_cast<uint64_t>(x) * mul) >> 32) >> shr);
#endif
  }
};

// Sequence position k -> element offset. Rows of `length` steps (k = row * length + s); a row is
// a lane (o, i) of the [outer, length, inner] view when Strided, else a contiguous row (inner is 1,
// or a whole row of inner elements is one packed unit).
template <bool Strided>
struct StepIndex {
  int64_t length;
  bool reverse;
  Divider by_length;  // k -> row
  Divider by_inner;   // row -> o (Strided)
  StepIndex(int64_t length_, int64_t inner, bool reverse_, int64_t n)
      : length(length_), reverse(reverse_), by_length(length_, n), by_inner(inner, n) {}
  ASCAN_HD int64_t operator()(int64_t k) const {
    const int64_t lane = by_length(k);
    const int64_t s = k - lane * length;
    const int64_t t = reverse ? length - 1 - s : s;
    if constexpr (Strided) {
      const int64_t o = by_inner(lane), i = lane - o * by_inner.d;
      return (o * length + t) * by_inner.d + i;
    } else {
      return lane * length + t;
    }
  }
};

// Segment id of position k (rows of `length`), computed on the fly: by-key scans restart here.
struct RowKey {
  Divider by_length;
  ASCAN_HD int64_t operator()(int64_t k) const { return by_length(k); }
};

// Forward loads/stores of leaf elements, W lanes of a row at a time when W > 1.
template <int W, class Map, class... Ts>
struct LeafIo {
  LeafPtrs<Ts...> ptrs;
  Map map;
  using E = elem_t<Ts...>;
  using Unit = std::conditional_t<W == 1, E, Lanes<E, W>>;
  static constexpr bool kStagedTiles = true;  // plain element loads and stores (span_kernel)
  ASCAN_HD Unit operator()(int64_t k) const {
    const int64_t at = map(k);
    if constexpr (W == 1) {
      return ptrs.load(at);
    } else {
      Unit u;
#pragma unroll
      for (int j = 0; j < W; ++j) u.v[j] = ptrs.load(at * W + j);
      return u;
    }
  }
  ASCAN_HD void operator()(int64_t k, const Unit& u) const {
    const int64_t at = map(k);
    if constexpr (W == 1) {
      ptrs.store(at, u);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) ptrs.store(at * W + j, u.v[j]);
    }
  }
};

// Adapts the two-argument store of an Io functor to tabulate_output_iterator's (index, value).
template <class Io>
struct StoreOf {
  Io io;
  template <class I, class U>
  ASCAN_HD void operator()(I k, const U& u) const { io(static_cast<int64_t>(k), u); }
};
template <class Io>
struct LoadOf {
  Io io;
  ASCAN_HD auto operator()(int64_t k) const { return io(k); }
};

// n positions in segments of seg_len: one CUB single-pass (decoupled look-back) scan, by key
// when there is more than one segment. Temporary storage comes from the pooled allocator.
template <class In, class Out, class Op>
void cub_scan_iters(In in, Out out, const Op& op, int64_t n, int64_t seg_len, const char* where) {
  size_t bytes = 0;
  if (seg_len >= n) {
    ASCAN_CUDA_CHECK(cub::DeviceScan::InclusiveScan(nullptr, bytes, in, out, op, n));
    void* temp = device_allocate(bytes, where);
    const cudaError_t err = cub::DeviceScan::InclusiveScan(temp, bytes, in, out, op, n);
    device_free(temp);
    ASCAN_CUDA_CHECK(err);
  } else {
    auto keys = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowKey{Divider(seg_len, n)});
    ASCAN_CUDA_CHECK(cub::DeviceScan::InclusiveScanByKey(nullptr, bytes, keys, in, out, op, n));
    void* temp = device_allocate(bytes, where);
    const cudaError_t err = cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, in, out, op, n);
    device_free(temp);
    ASCAN_CUDA_CHECK(err);
  }
  ASCAN_CUDA_CHECK(cudaGetLastError());
}

// The same over an Io functor: position k is loaded as io(k) and stored by io(k, value).
template <class Io, class Op>
void cub_scan(const Io& io, const Op& op, int64_t n, int64_t seg_len, const char* where) {
  cub_scan_iters(thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), LoadOf<Io>{io}),
                 thrust::make_tabulate_output_iterator(StoreOf<Io>{io}), op, n, seg_len, where);
}

// Phase 2 reads and writes the totals in place through this Io: per lane, total c becomes the
// combined value of chunks 0..c (the carry into chunk c + 1).
template <class E>
struct TotalsIo {
  E* totals;
  ASCAN_HD E operator()(int64_t k) const { return totals[k]; }
  ASCAN_HD void operator()(int64_t k, const E& e) const { totals[k] = e; }
};

// ---- long rows: reduce each span, scan the span totals, rescan each span from its carry -------
//
// CUB's single-pass scan keeps a value type other than a primitive in separate look-back
// descriptors fenced per tile, and shrinks its tiles for large values, which leaves scans of such
// values far below a copy's bandwidth. Rows of at least kMinSpanSegment positions take three
// launches instead: a block per span of consecutive positions folds it to its total (every span but
// each row's last), CUB scans those few totals by row (in place, as the lane engine's chunk
// totals), and a block per span rescans it from the total before it. Each thread takes kItems
// consecutive positions of a tile, scans them in registers, and the block scans the threads' totals
// in order (warp shuffles, then the warps' totals); nothing assumes an identity element or
// commutativity.

inline constexpr int kSpanThreads = 128;
inline constexpr int64_t kMinSpanSegment = 4096;

// Positions per thread and tile: fewer for large values, which live in registers.
template <class E>
inline constexpr int span_items() {
  return sizeof(E) <= 8 ? 8 : sizeof(E) <= 32 ? 4 : 2;
}

// Whether the span kernel moves a tile through shared memory, to load (values of at most 32
// bytes) and store it with consecutive threads at consecutive positions: Io types that load and
// store plain leaf elements say so (LeafIo); staged stores pay even for values too large to
// stage their loads. The adjoint's elements, computed from three tensors per load and store, ran
// slower staged.
template <class Io>
inline constexpr bool stages_tiles() {
  if constexpr (requires { Io::kStagedTiles; }) return Io::kStagedTiles;
  return false;
}

// Whether rows of kMinSpanSegment positions take the span engine (default) or stay with CUB: the
// one-leaf adjoint's 8-byte affine elements ran faster in CUB.
template <class Io>
inline constexpr bool span_engine_pays() {
  if constexpr (requires { Io::kSpanEngine; }) return Io::kSpanEngine;
  return true;
}

struct SpanLayout {
  int64_t seg_len;        // positions per row (segment)
  int64_t span;           // positions per block, a multiple of the tile except in short rows
  int64_t spans_per_seg;  // ceil(seg_len / span)
  int64_t segs;
};

// v of the lane `delta` below (its own value in lanes below delta), for any trivially copyable
// value: shuffled as 32-bit words.
template <class E>
__device__ __forceinline__ E shfl_up_value(const E& v, unsigned delta) {
  constexpr int kWords = static_cast<int>((sizeof(E) + 3) / 4);
  uint32_t w[kWords] = {};
  memcpy(w, &v, sizeof(E));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_up_sync(0xffffffffu, w[i], delta);
  E r;
  memcpy(&r, w, sizeof(E));
  return r;
}

// A tile's values in shared memory as 32-bit words, word-major, one padding word after every 32
// positions: a thread's kItems consecutive positions and 32 consecutive positions (a warp's
// striped access) both fall in 32 different banks. (Values stored whole were read with 8- to
// 16-way bank conflicts.)
template <class E, int kTile>
struct StageTile {
  static constexpr int kWords = static_cast<int>((sizeof(E) + 3) / 4);
  static constexpr int kRow = kTile + kTile / 32;
  uint32_t w[kWords * kRow];
  __device__ __forceinline__ static int at(int q) { return q + q / 32; }
  __device__ __forceinline__ void put(int q, const E& v) {
    uint32_t t[kWords] = {};
    memcpy(t, &v, sizeof(E));
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i * kRow + at(q)] = t[i];
  }
  __device__ __forceinline__ E get(int q) const {
    uint32_t t[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) t[i] = w[i * kRow + at(q)];
    E v;
    memcpy(&v, t, sizeof(E));
    return v;
  }
};

// kStore: rescan span c of its row from the total of the spans before it (totals[.. c - 1]) and
// store; else fold span c (never a row's last) to its total. blockIdx.x = row * spans + c.
template <bool kStore, class Io, class Op, class E>
__global__ void __launch_bounds__(kSpanThreads) span_kernel(Io io, Op op, SpanLayout lay, E* totals) {
  constexpr int kItems = span_items<E>();
  constexpr int kTile = kSpanThreads * kItems;
  constexpr int kWarps = kSpanThreads / 32;
  __shared__ E warp_total[kWarps];
  // The tile's values, loaded and stored by consecutive threads (a thread's own kItems positions
  // are a sector apart from its neighbour's: each warp instruction touched 32 sectors).
  constexpr bool kStageStores = stages_tiles<Io>(), kStageLoads = kStageStores && sizeof(E) <= 32;
  __shared__ StageTile<E, kStageStores ? kTile : 32> stage;
  const int64_t spans = kStore ? lay.spans_per_seg : lay.spans_per_seg - 1;
  const int64_t seg = blockIdx.x / spans, c = blockIdx.x - seg * spans;
  const int64_t row0 = seg * lay.seg_len;
  const int64_t lo = row0 + c * lay.span;
  const int64_t hi = lo + lay.span < row0 + lay.seg_len ? lo + lay.span : row0 + lay.seg_len;
  const int64_t slot0 = seg * (lay.spans_per_seg - 1);
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  bool has_run = false;  // the combined value of everything before the tile (uniform per block)
  E run;
  if (kStore && c > 0) {
    run = totals[slot0 + c - 1];
    has_run = true;
  }
  for (int64_t base = lo; base < hi; base += kTile) {
    const int64_t k0 = base + static_cast<int64_t>(threadIdx.x) * kItems;
    const int64_t left = hi - k0;
    const int valid = left <= 0 ? 0 : left >= kItems ? kItems : static_cast<int>(left);
    const int64_t rest = (hi - base + kItems - 1) / kItems;
    const int threads = rest >= kSpanThreads ? kSpanThreads : static_cast<int>(rest);  // a prefix
    const int count = hi - base < kTile ? static_cast<int>(hi - base) : kTile;
    E item[kItems];
    if constexpr (kStageLoads) {
      E in[kItems];  // all loads in flight before the first shared-memory store
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int q = static_cast<int>(threadIdx.x) + j * kSpanThreads;
        if (q < count) in[j] = io(base + q);
      }
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int q = static_cast<int>(threadIdx.x) + j * kSpanThreads;
        if (q < count) stage.put(q, in[j]);
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kItems; ++j)
        if (j < valid) item[j] = stage.get(static_cast<int>(threadIdx.x) * kItems + j);
    } else {
#pragma unroll
      for (int j = 0; j < kItems; ++j)
        if (j < valid) item[j] = io(k0 + j);
    }
    E agg = item[0];
#pragma unroll
    for (int j = 1; j < kItems; ++j)
      if (j < valid) {
        item[j] = op(item[j - 1], item[j]);
        agg = item[j];
      }
    // Inclusive scan of the threads' totals within each warp (lanes at or past `threads` hold
    // nothing; they only ever read lanes below them).
    E incl = agg;
#pragma unroll
    for (unsigned off = 1; off < 32; off <<= 1) {
      const E up = shfl_up_value(incl, off);
      if (lane >= static_cast<int>(off) && static_cast<int>(threadIdx.x) < threads) incl = op(up, incl);
    }
    const E before_lane = shfl_up_value(incl, 1);
    const int warps = (threads + 31) / 32;
    const int last_lane = ((warp + 1) * 32 < threads ? (warp + 1) * 32 : threads) - 1;  // of this warp
    if (static_cast<int>(threadIdx.x) == last_lane) warp_total[warp] = incl;
    __syncthreads();
    if (kStore && valid > 0) {
      bool has = has_run;
      E pre = run;
      for (int w = 0; w < warp; ++w) {
        pre = has ? op(pre, warp_total[w]) : warp_total[w];
        has = true;
      }
      if (lane > 0) {
        pre = has ? op(pre, before_lane) : before_lane;
        has = true;
      }
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        if (j >= valid) continue;
        if constexpr (kStageStores)
          stage.put(static_cast<int>(threadIdx.x) * kItems + j, has ? op(pre, item[j]) : item[j]);
        else
          io(k0 + j, has ? op(pre, item[j]) : item[j]);
      }
    }
    if constexpr (kStore && kStageStores) {
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int q = static_cast<int>(threadIdx.x) + j * kSpanThreads;
        if (q < count) io(base + q, stage.get(q));
      }
    }
    for (int w = 0; w < warps; ++w) {
      run = has_run ? op(run, warp_total[w]) : warp_total[w];
      has_run = true;
    }
    __syncthreads();  // warp_total is rewritten by the next tile
  }
  if (!kStore && threadIdx.x == 0) totals[slot0 + c] = run;
}

inline int64_t device_sm_count() {
  int dev = 0, sms = 0;
  ASCAN_CUDA_CHECK(cudaGetDevice(&dev));
  ASCAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms > 0 ? sms : 1;
}

// n positions in rows of seg_len (seg_len >= kMinSpanSegment): spans sized for about 16 blocks
// per multiprocessor over the whole scan.
template <class Io, class Op>
void span_scan(const Io& io, const Op& op, int64_t n, int64_t seg_len, const char* where) {
  using E = std::decay_t<decltype(io(int64_t{0}))>;
  constexpr int64_t kTile = int64_t{kSpanThreads} * span_items<E>();
  const int64_t blocks = device_sm_count() * 16;
  const int64_t want = (n + blocks - 1) / blocks;
  SpanLayout lay{};
  lay.seg_len = seg_len;
  lay.segs = n / seg_len;
  lay.span = std::max<int64_t>(kTile, (want + kTile - 1) / kTile * kTile);
  lay.spans_per_seg = (seg_len + lay.span - 1) / lay.span;
  struct Totals {  // returned to the pool on every exit (stream-ordered)
    E* p = nullptr;
    ~Totals() { device_free(p); }
  } totals;
  if (lay.spans_per_seg > 1) {
    const int64_t count = lay.segs * (lay.spans_per_seg - 1);
    totals.p = static_cast<E*>(device_allocate(sizeof(E) * count, where));
    span_kernel<false><<<static_cast<unsigned>(count), kSpanThreads>>>(io, op, lay, totals.p);
    ASCAN_CUDA_CHECK(cudaGetLastError());
    cub_scan(TotalsIo<E>{totals.p}, op, count, lay.spans_per_seg - 1, where);
  }
  span_kernel<true><<<static_cast<unsigned>(lay.segs * lay.spans_per_seg), kSpanThreads>>>(io, op, lay, totals.p);
  ASCAN_CUDA_CHECK(cudaGetLastError());
}

// ---- wide layouts: one thread per (lane, chunk), lanes fastest so accesses coalesce ---------

struct LaneLayout {
  int64_t outer, length, inner;
  bool reverse;
  int64_t chunks, chunk_len;  // the scan axis is cut into `chunks` pieces when lanes are few
  Divider by_inner;           // lane -> o
  LaneLayout(int64_t outer_, int64_t length_, int64_t inner_, bool reverse_)
      : outer(outer_), length(length_), inner(inner_), reverse(reverse_), chunks(1), chunk_len(length_),
        by_inner(inner_, outer_ * inner_) {}
  ASCAN_HD int64_t lanes() const { return outer * inner; }
  ASCAN_HD int64_t at(int64_t lane, int64_t s) const {
    const int64_t o = by_inner(lane), i = lane - o * inner;
    return (o * length + (reverse ? length - 1 - s : s)) * inner + i;
  }
};

inline constexpr int kLaneThreads = 256;

// The kernels' bodies are ASCAN_HD functions of the thread id, so tests can run the exact same
// code sequentially on the host (the engines are then checked without a GPU).

// Chunk totals are stored lane-major, totals[lane * (chunks - 1) + c], so phase 2 is one by-key
// scan over runs of chunks - 1 (a sequential pass per lane serialised thousands of dependent
// global-memory round trips when lanes are few and chunks many).
ASCAN_HD inline int64_t total_slot(const LaneLayout& lay, int64_t lane, int64_t c) {
  return lane * (lay.chunks - 1) + c;
}

// A lane's steps are loaded lane_batch<E>() at a time before they are combined: one load in
// flight per thread leaves a lane scan well below a copy's bandwidth. The adjoint's larger values
// (the linear recurrence's 24-byte affine maps) load one step at a time: batches of them did not
// pay.
template <class E>
inline constexpr int lane_batch() {
  return sizeof(E) <= 8 ? 8 : 1;
}

// Steps s0 + 1 .. s1 - 1 of the lane whose step s0 is element at0, in order: visit(offset, value),
// the values loaded lane_batch<E>() steps at a time (step s + 1 is `inner` elements after step s,
// or before it in reverse).
template <class E, class Ptrs, class Visit>
ASCAN_HD void visit_lane_steps(const Ptrs& ptrs, const LaneLayout& lay, int64_t at0, int64_t s0, int64_t s1,
                               Visit&& visit) {
  constexpr int kBatch = lane_batch<E>();
  const int64_t step = lay.reverse ? -lay.inner : lay.inner;
  for (int64_t s = s0 + 1; s < s1; s += kBatch) {
    E v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (s + j < s1) v[j] = ptrs.load(at0 + (s + j - s0) * step);
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (s + j < s1) visit(at0 + (s + j - s0) * step, v[j]);
  }
}

// Phase 1 (chunks > 1): the combined value of each chunk but the last; id = c * lanes + lane
// (neighbouring threads read neighbouring lanes).
template <class Ptrs, class Op, class E>
ASCAN_HD void chunk_total_at(const Ptrs& ptrs, const Op& op, const LaneLayout& lay, E* totals, int64_t id) {
  const int64_t lanes = lay.lanes();
  const int64_t c = id / lanes, lane = id - c * lanes;
  const int64_t s0 = c * lay.chunk_len, s1 = s0 + lay.chunk_len;  // never past T: not the last chunk
  const int64_t at0 = lay.at(lane, s0);
  E acc = ptrs.load(at0);
  visit_lane_steps<E>(ptrs, lay, at0, s0, s1, [&](int64_t, const E& v) { acc = op(acc, v); });
  totals[total_slot(lay, lane, c)] = acc;
}

// Phase 3: each chunk scanned sequentially, starting from its carry; id = c * lanes + lane. (The
// batch's loads precede its stores: inputs and outputs never overlap.)
template <class Ptrs, class Op, class E>
ASCAN_HD void chunk_scan_at(const Ptrs& ptrs, const Op& op, const LaneLayout& lay, const E* carries, int64_t id) {
  const int64_t lanes = lay.lanes();
  const int64_t c = id / lanes, lane = id - c * lanes;
  const int64_t s0 = c * lay.chunk_len;
  const int64_t s1 = s0 + lay.chunk_len < lay.length ? s0 + lay.chunk_len : lay.length;
  const int64_t at0 = lay.at(lane, s0);
  E acc = c == 0 ? ptrs.load(at0) : op(carries[total_slot(lay, lane, c - 1)], ptrs.load(at0));
  ptrs.store(at0, acc);
  visit_lane_steps<E>(ptrs, lay, at0, s0, s1, [&](int64_t at, const E& v) {
    acc = op(acc, v);
    ptrs.store(at, acc);
  });
}

template <class Ptrs, class Op, class E>
__global__ void chunk_totals_kernel(Ptrs ptrs, Op op, LaneLayout lay, E* totals) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id < lay.lanes() * (lay.chunks - 1)) chunk_total_at(ptrs, op, lay, totals, id);
}

template <class Ptrs, class Op, class E>
__global__ void chunk_scan_kernel(Ptrs ptrs, Op op, LaneLayout lay, const E* carries) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id < lay.lanes() * lay.chunks) chunk_scan_at(ptrs, op, lay, carries, id);
}

inline unsigned grid_for(int64_t threads) {
  return static_cast<unsigned>((threads + kLaneThreads - 1) / kLaneThreads);
}

// Enough threads to fill a large GPU several times over; below that the scan axis is chunked
// (reading the input twice), never into pieces shorter than kMinChunk steps.
inline LaneLayout lane_layout(int64_t outer, int64_t length, int64_t inner, bool reverse) {
  constexpr int64_t kTargetThreads = int64_t{1} << 18, kMinChunk = 32;
  LaneLayout lay(outer, length, inner, reverse);
  const int64_t lanes = outer * inner;
  if (lanes < kTargetThreads && length >= 2 * kMinChunk) {
    const int64_t want = (kTargetThreads + lanes - 1) / lanes;
    const int64_t chunks = std::min(want, length / kMinChunk);
    lay.chunk_len = (length + chunks - 1) / chunks;
    lay.chunks = (length + lay.chunk_len - 1) / lay.chunk_len;
  }
  return lay;
}

template <class Ptrs, class Op>
void lane_scan(const Ptrs& ptrs, const Op& op, int64_t outer, int64_t length, int64_t inner, bool reverse,
               const char* where) {
  using E = typename Ptrs::E;
  const LaneLayout lay = lane_layout(outer, length, inner, reverse);
  const int64_t lanes = lay.lanes();
  struct Totals {  // returned to the pool on every exit (stream-ordered: later work may reuse it)
    E* p = nullptr;
    ~Totals() { device_free(p); }
  } totals;
  if (lay.chunks > 1) {
    totals.p = static_cast<E*>(device_allocate(sizeof(E) * lanes * (lay.chunks - 1), where));
    chunk_totals_kernel<<<grid_for(lanes * (lay.chunks - 1)), kLaneThreads>>>(ptrs, op, lay, totals.p);
    ASCAN_CUDA_CHECK(cudaGetLastError());
    // In place: a single-pass scan loads each tile before storing it, and no tile reads another's.
    cub_scan(TotalsIo<E>{totals.p}, op, lanes * (lay.chunks - 1), lay.chunks - 1, where);
  }
  chunk_scan_kernel<<<grid_for(lanes * lay.chunks), kLaneThreads>>>(ptrs, op, lay, static_cast<const E*>(totals.p));
  ASCAN_CUDA_CHECK(cudaGetLastError());
}

// One thread per index in [0, n): fn(i). For per-lane work with a functor (no device lambdas).
template <class Fn>
__global__ void for_each_index_kernel(Fn fn, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) fn(i);
}

// The engines the dispatch code runs on. Tests substitute a sequential host engine with the same
// interface to check dispatch, index maps, loads/stores and kernel bodies without a GPU.
struct DeviceEngine {
  template <class Io, class Op>
  static void scan(const Io& io, const Op& op, int64_t n, int64_t seg_len, const char* where) {
    if (seg_len >= kMinSpanSegment && span_engine_pays<Io>())
      span_scan(io, op, n, seg_len, where);
    else
      cub_scan(io, op, n, seg_len, where);
  }
  template <class Ptrs, class Op>
  static void lanes(const Ptrs& ptrs, const Op& op, int64_t outer, int64_t length, int64_t inner, bool reverse,
                    const char* where) {
    lane_scan(ptrs, op, outer, length, inner, reverse, where);
  }
  template <class Fn>
  static void for_each_index(const Fn& fn, int64_t n) {
    for_each_index_kernel<<<grid_for(n), kLaneThreads>>>(fn, n);
    ASCAN_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace ascan::cuda::detail
