// scan_lanes.hpp — thread-level building blocks of the local scans: compile-time loops,
// element conversion, per-lane buffers and GCC vector types.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "ascan/detail/element.hpp"
#include "ascan/config.hpp"
#include "ascan/detail/scan_policy.hpp"
#include "ascan/detail/tree.hpp"

namespace ascan::detail {
ASCAN_ISA_BEGIN

template <size_t N, class Fn>
ASCAN_ALWAYS_INLINE void static_for(Fn&& fn) {
  [&]<size_t... I>(std::index_sequence<I...>) ASCAN_INLINE_LAMBDA {
    (fn(std::integral_constant<size_t, I>{}), ...);
  }(std::make_index_sequence<N>{});
}

template <class Ptrs> struct LaneBuffers;
// BlockPolicy::max_lanes elements per leaf, left uninitialised (a std::tuple of arrays would zero them on
// every construction, which small scans pay for).
template <class... Ts> struct LaneBuffers<std::tuple<Ts*...>> {
  alignas(64) std::byte raw[(sizeof(Ts) + ...) * BlockPolicy::max_lanes];
  std::tuple<Ts*...> ptrs() {
    size_t off = 0;
    return std::tuple<Ts*...>{take<Ts>(off)...};  // braced lists evaluate left to right
  }
  template <class U> U* take(size_t& off) {
    U* p = reinterpret_cast<U*>(raw + off);
    off += sizeof(U) * BlockPolicy::max_lanes;
    return p;
  }
};

// W lanes of every leaf in local arrays (structure of arrays), read and written as elements.
template <class Ptrs, int W> struct LocalLanes;
template <class... Ts, int W> struct LocalLanes<std::tuple<Ts*...>, W> {
  std::tuple<std::array<Ts, W>...> v;
  ASCAN_ALWAYS_INLINE std::tuple<Ts*...> ptrs() {
    return std::apply([](auto&... a) { return std::tuple<Ts*...>{a.data()...}; }, v);
  }
};

// W lanes of T as one GCC vector, and the same for unaligned, aliasing access.
template <class T, int W> struct Lanes {
  typedef T Vec __attribute__((vector_size(W * sizeof(T))));
  typedef T Unaligned __attribute__((vector_size(W * sizeof(T)), aligned(alignof(T)), may_alias));
};

ASCAN_ISA_END
}  // namespace ascan::detail
