// stream_store.hpp — copies that write around the caches (non-temporal stores).
//
// A plain store to a line that is not cached first reads the line from memory (the core must own
// it before it can modify part of it), so writing n bytes of a large output moves 2n bytes over
// the memory bus. A streaming store writes whole lines without that read. Kernels whose output
// is far larger than the caches, and not read again soon, finish their blocks through these.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>

#include "ascan/config.hpp"
#define ASCAN_HAS_STREAM_STORES 1
#else
#define ASCAN_HAS_STREAM_STORES 0
#endif

#define ASCAN_STREAM_INLINE inline __attribute__((always_inline))

namespace ascan::detail {

// A streaming copy (stream_copy's signature). active_stream_copy (src/isa.cpp): the copy of the
// level active_isa() runs, compiled into ascan::core with the builtins.
using StreamCopy = void (*)(void* dst, const void* src, size_t bytes);
StreamCopy active_stream_copy();

ASCAN_ISA_BEGIN

// Copies `bytes` bytes from `src` to `dst` (no overlap) with this translation unit's vectors; the
// aligned middle is written with streaming stores, the unaligned head and tail with plain ones.
// With AVX-512 each store writes a whole 64-byte line, one store per line instead of two 32-byte
// ones. Call stream_fence() before another thread is told the data is there.
inline void stream_copy_here(void* dst, const void* src, size_t bytes) {
#if ASCAN_HAS_STREAM_STORES
#if ASCAN_ISA_LEVEL >= 3
  using Word = __m512i;
#elif ASCAN_ISA_LEVEL >= 1
  using Word = __m256i;
#else
  using Word = __m128i;
#endif
  constexpr size_t W = sizeof(Word);
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  const size_t head = std::min(bytes, (W - reinterpret_cast<uintptr_t>(d) % W) % W);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= W; bytes -= W, d += W, s += W) {
#if ASCAN_ISA_LEVEL >= 3
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(reinterpret_cast<const __m512i*>(s)));
#elif ASCAN_ISA_LEVEL >= 1
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
#else
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
#endif
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// The streaming copy kernels call. Code compiled below AVX-512 outside the library's level files
// (a user's combine in a default build) calls the library's copy for the running CPU: the
// scan's output went out several times slower through 16-byte streaming stores than through
// 64-byte ones on an AVX-512 machine (docs/performance/user_build.md), a cost the user's flags
// should not decide. Fetch it once per loop: it is an indirect call.
inline StreamCopy stream_copier() {
#if ASCAN_HAS_STREAM_STORES && ASCAN_ISA_LEVEL < 3 && !defined(ASCAN_DISPATCH_ISA)
  return active_stream_copy();
#else
  return &stream_copy_here;
#endif
}

inline void stream_copy(void* dst, const void* src, size_t bytes) { stream_copier()(dst, src, bytes); }

// Orders the streaming stores before any later store (they are weakly ordered otherwise).
// One 64-byte cache line of T as a vector (GCC vector extension: one AVX-512 register, two AVX
// or four SSE ones), for kernels that compute their output a line at a time. Lines are passed by
// reference and loaded into out-parameters: returning a 64-byte vector by value from a function
// changes the ABI between AVX-512 and older targets (a -Wpsabi warning).
template <class T>
struct LineOf {
  typedef T type __attribute__((vector_size(64)));
  static constexpr int64_t size = 64 / sizeof(T);
};
template <class T>
using Line = typename LineOf<T>::type;

template <class T>
ASCAN_STREAM_INLINE void load_line(Line<T>& v, const T* p) {
  std::memcpy(&v, p, sizeof v);
}

template <class T>
ASCAN_STREAM_INLINE void store_line(T* p, const Line<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// Writes the line v to dst (64-byte aligned) with streaming stores. Storing each line as it is
// computed keeps the writes interleaved with the kernel's loads: a row computed into a scratch
// buffer and streamed out afterwards (stream_copy) issues its stores in one burst, during which
// the loads of the next row wait.
template <class T>
ASCAN_STREAM_INLINE void stream_line(T* dst, const Line<T>& v) {
  // The float / double forms of the streaming stores: their pointer types are T's own, so the
  // compiler knows what they write (an integer-vector store into a float array is invisible to
  // later float loads under strict aliasing).
#if ASCAN_HAS_STREAM_STORES && ASCAN_ISA_LEVEL >= 3
  if constexpr (std::is_same_v<T, float>) { _mm512_stream_ps(dst, reinterpret_cast<const __m512&>(v)); return; }
  if constexpr (std::is_same_v<T, double>) { _mm512_stream_pd(dst, reinterpret_cast<const __m512d&>(v)); return; }
#elif ASCAN_HAS_STREAM_STORES && ASCAN_ISA_LEVEL >= 1
  if constexpr (std::is_same_v<T, float>) {
    for (int k = 0; k < 2; ++k) _mm256_stream_ps(dst + 8 * k, reinterpret_cast<const __m256*>(&v)[k]);
    return;
  }
  if constexpr (std::is_same_v<T, double>) {
    for (int k = 0; k < 2; ++k) _mm256_stream_pd(dst + 4 * k, reinterpret_cast<const __m256d*>(&v)[k]);
    return;
  }
#elif ASCAN_HAS_STREAM_STORES
  if constexpr (std::is_same_v<T, float>) {
    for (int k = 0; k < 4; ++k) _mm_stream_ps(dst + 4 * k, reinterpret_cast<const __m128*>(&v)[k]);
    return;
  }
  if constexpr (std::is_same_v<T, double>) {
    for (int k = 0; k < 4; ++k) _mm_stream_pd(dst + 2 * k, reinterpret_cast<const __m128d*>(&v)[k]);
    return;
  }
#endif
  store_line(dst, v);
}

inline void stream_fence() {
#if ASCAN_HAS_STREAM_STORES
  _mm_sfence();
#endif
}

ASCAN_ISA_END
}  // namespace ascan::detail
