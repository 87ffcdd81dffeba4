// bench_small.hpp — inputs, the plain loop and counters shared by the in-cache and the size-sweep benchmarks.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

#include <ascan/tensor.hpp>

namespace ascan_bench {

// n values in {-1, 0, 1}: float sums are exact for every association order, so any scan's
// result can be compared exactly with the loop's.
inline ascan::Tensor<float> small_input(int64_t n) {
  auto x = ascan::Tensor<float>::empty({n});
  for (int64_t i = 0; i < n; ++i) x.data()[i] = static_cast<float>(static_cast<int>((i * 2654435761u) % 3) - 1);
  return x;
}

// Bytes (2 * leaves * n floats read + written per iteration) and items (n) processed.
inline void set_small_counters(benchmark::State& st, int64_t n, int64_t leaves) {
  st.SetBytesProcessed(st.iterations() * 2 * leaves * n * static_cast<int64_t>(sizeof(float)));
  st.SetItemsProcessed(st.iterations() * n);
}

// The sequential cumulative sum with the accumulator in a register.
inline void seq_add(const float* x, float* y, int64_t n) {
  float acc = x[0];
  y[0] = acc;
  for (int64_t i = 1; i < n; ++i) y[i] = acc = acc + x[i];
}

}  // namespace ascan_bench
