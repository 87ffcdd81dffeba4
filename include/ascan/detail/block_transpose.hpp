// block_transpose.hpp — register transposes of V x V blocks of float or double.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "ascan/config.hpp"
#include "ascan/detail/scan_policy.hpp"

namespace ascan::detail {
ASCAN_ISA_BEGIN

// V x V blocks of float or double (vectors of VectorPolicy::bytes) transposed in registers: V sequences' stretches
// of V steps become V steps across the sequences, and back. Used where independent stretches of
// one stream are processed as vector lanes (the 1-D forward scan's segments, the gradient's
// segment sweep), which element by element cost more than the arithmetic. Stretches run up
// (dir 1) or down (dir -1) from a pointer.
template <class T> struct BlockTranspose {
  static constexpr int64_t V = 0;  // no vector path for other element types
};
template <class T>
  requires(std::is_same_v<T, float> || std::is_same_v<T, double>)
struct BlockTranspose<T> {
  static constexpr int64_t V = VectorPolicy::bytes / sizeof(T);
  static_assert(V == 2 || V == 4 || V == 8, "the transposes are written for 2, 4 or 8 lanes");
  typedef T Vec __attribute__((vector_size(VectorPolicy::bytes)));
  // Unaligned, aliasing access as one vector (a memcpy through the stack was split into halves
  // and reloaded whole: a failed store forward per vector).
  typedef T Unaligned __attribute__((vector_size(VectorPolicy::bytes), aligned(alignof(T)), may_alias));
  static Vec ld(const T* p) { return *reinterpret_cast<const Unaligned*>(p); }
  static void st(T* p, Vec v) { *reinterpret_cast<Unaligned*>(p) = v; }

  static Vec load(const T* p, int64_t dir) {  // p[0], p[dir], ..., p[(V - 1) * dir]
    return dir > 0 ? ld(p) : reversed(ld(p - (V - 1)));
  }
  static void store(T* p, int64_t dir, Vec v) {
    if (dir > 0) st(p, v); else st(p - (V - 1), reversed(v));
  }
  static Vec reversed(Vec v) {
    if constexpr (V == 8) return __builtin_shufflevector(v, v, 7, 6, 5, 4, 3, 2, 1, 0);
    else if constexpr (V == 4) return __builtin_shufflevector(v, v, 3, 2, 1, 0);
    else return __builtin_shufflevector(v, v, 1, 0);
  }
  // r[i][k] -> r[k][i].
  static void transpose(Vec (&r)[V]) {
    if constexpr (V == 8) {
      Vec t[8], u[8];
      for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
      }
      for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
      }
      for (int i = 0; i < 4; ++i) {
        r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
      }
    } else if constexpr (V == 2) {
      const Vec t0 = __builtin_shufflevector(r[0], r[1], 0, 2), t1 = __builtin_shufflevector(r[0], r[1], 1, 3);
      r[0] = t0;
      r[1] = t1;
    } else {
      const Vec t0 = __builtin_shufflevector(r[0], r[1], 0, 4, 2, 6), t1 = __builtin_shufflevector(r[0], r[1], 1, 5, 3, 7);
      const Vec t2 = __builtin_shufflevector(r[2], r[3], 0, 4, 2, 6), t3 = __builtin_shufflevector(r[2], r[3], 1, 5, 3, 7);
      r[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
      r[1] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
      r[2] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
      r[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
    }
  }
  // Lane i's stretch src[i][k * dir] (k < V) into dst[k * dst_stride + i].
  static void gather(const std::array<const T*, V>& src, int64_t dir, T* dst, int64_t dst_stride) {
    Vec r[V];
    for (int64_t i = 0; i < V; ++i) r[i] = load(src[i], dir);
    transpose(r);
    for (int64_t k = 0; k < V; ++k) st(dst + k * dst_stride, r[k]);
  }
  // The inverse: src[k * src_stride + i] into lane i's stretch dst[i][k * dir].
  static void scatter(const T* src, int64_t src_stride, const std::array<T*, V>& dst, int64_t dir) {
    Vec r[V];
    for (int64_t k = 0; k < V; ++k) r[k] = ld(src + k * src_stride);
    transpose(r);
    for (int64_t i = 0; i < V; ++i) store(dst[i], dir, r[i]);
  }
};

ASCAN_ISA_END
}  // namespace ascan::detail
