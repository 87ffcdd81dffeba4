// scan_kernels.cuh — the device scan engines: CUB single-pass scans over computed iterators, and
// a lane-parallel kernel for wide [outer, T, inner] layouts.
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
// global-memory round trips when lanes are few and chunks many: on an H200, [T, 7] gradients
// ran 10-55x slower than their forward).
ASCAN_HD inline int64_t total_slot(const LaneLayout& lay, int64_t lane, int64_t c) {
  return lane * (lay.chunks - 1) + c;
}

// Phase 1 (chunks > 1): the combined value of each chunk but the last; id = c * lanes + lane
// (neighbouring threads read neighbouring lanes).
template <class Ptrs, class Op, class E>
ASCAN_HD void chunk_total_at(const Ptrs& ptrs, const Op& op, const LaneLayout& lay, E* totals, int64_t id) {
  const int64_t lanes = lay.lanes();
  const int64_t c = id / lanes, lane = id - c * lanes;
  const int64_t s0 = c * lay.chunk_len, s1 = s0 + lay.chunk_len;  // never past T: not the last chunk
  E acc = ptrs.load(lay.at(lane, s0));
  for (int64_t s = s0 + 1; s < s1; ++s) acc = op(acc, ptrs.load(lay.at(lane, s)));
  totals[total_slot(lay, lane, c)] = acc;
}

// Phase 2 reads and writes the totals in place through this Io: per lane, total c becomes the
// combined value of chunks 0..c (the carry into chunk c + 1).
template <class E>
struct TotalsIo {
  E* totals;
  ASCAN_HD E operator()(int64_t k) const { return totals[k]; }
  ASCAN_HD void operator()(int64_t k, const E& e) const { totals[k] = e; }
};

// Phase 3: each chunk scanned sequentially, starting from its carry; id = c * lanes + lane.
template <class Ptrs, class Op, class E>
ASCAN_HD void chunk_scan_at(const Ptrs& ptrs, const Op& op, const LaneLayout& lay, const E* carries, int64_t id) {
  const int64_t lanes = lay.lanes();
  const int64_t c = id / lanes, lane = id - c * lanes;
  const int64_t s0 = c * lay.chunk_len;
  const int64_t s1 = s0 + lay.chunk_len < lay.length ? s0 + lay.chunk_len : lay.length;
  int64_t at = lay.at(lane, s0);
  E acc = c == 0 ? ptrs.load(at) : op(carries[total_slot(lay, lane, c - 1)], ptrs.load(at));
  ptrs.store(at, acc);
  for (int64_t s = s0 + 1; s < s1; ++s) {
    at = lay.at(lane, s);
    acc = op(acc, ptrs.load(at));
    ptrs.store(at, acc);
  }
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
