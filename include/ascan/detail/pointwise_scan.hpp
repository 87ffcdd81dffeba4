// pointwise_scan.hpp — the host pointwise scan kernel: chained blocks, lanes across `run`.
//
// Work is split by shape only, never by thread count, so results are bitwise identical for any
// number of threads. The output is cut into column groups (a column and up to kMaxLanes
// adjacent lanes) and, along the scan axis, into blocks of rows sized to stay in L2. Threads take
// (group, block) items in order from one counter. An item first scans its block locally
// (reading x, writing y), then waits for its predecessor block to publish, and applies the
// predecessor's last row — the inclusive prefix — to its rows while they are still in cache
// (y = f(prefix, y_local), valid by associativity). Memory traffic is one read of x and one write
// of y. A predecessor was always taken earlier by a running thread and never waits on a later
// item, so the chain cannot deadlock. The lane loops have no loop-carried dependency and the
// accumulators live in local arrays, so the compiler vectorises f across lanes.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "ascan/config.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/tree.hpp"
#include "ascan/parallel.hpp"

namespace ascan::detail {

inline constexpr int64_t kMaxLanes = 256;            // accumulator tile per column group
inline constexpr int64_t kBlockBytes = 96 << 10;     // inputs + outputs of one block (L2-resident)
inline constexpr int64_t kParallelMinElements = 1 << 15;  // below this, no thread hand-off

template <size_t N, class Fn>
ASCAN_ALWAYS_INLINE void static_for(Fn&& fn) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (fn(std::integral_constant<size_t, I>{}), ...);
  }(std::make_index_sequence<N>{});
}

template <class E> struct is_std_tuple : std::false_type {};
template <class... Es> struct is_std_tuple<std::tuple<Es...>> : std::true_type {};

// Converts a combine result to the element structure E (static_cast at the leaves).
template <class E, class R>
ASCAN_ALWAYS_INLINE E to_elem(const R& r) {
  if constexpr (is_std_tuple<E>::value) {
    return [&]<size_t... K>(std::index_sequence<K...>) {
      using std::get;
      return E{to_elem<std::tuple_element_t<K, E>>(get<K>(r))...};
    }(std::make_index_sequence<std::tuple_size_v<E>>{});
  } else {
    return static_cast<E>(r);
  }
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <class Ptrs> struct LaneBuffers;
template <class... Ts> struct LaneBuffers<std::tuple<Ts*...>> {
  std::tuple<std::array<Ts, kMaxLanes>...> arrays;
  std::tuple<Ts*...> ptrs() {
    return std::apply([](auto&... a) { return std::tuple<Ts*...>{a.data()...}; }, arrays);
  }
};

// Scans all leaves of `xs` into `ys` (flat tuples of tensors) following `plan`.
template <class X, class F>
void pointwise_scan(const F& f, const typename Tree<X>::Flat& xs, const typename Tree<X>::Flat& ys,
                    const PointwisePlan& plan, bool reverse) {
  using Node = Tree<X>;
  using Elem = typename Node::Elem;
  using Ptrs = typename Node::FlatPtrs;
  using Access = ElemAccess<X, 0>;
  constexpr size_t L = Node::num_leaves;

  const int64_t T = plan.length;
  if (plan.numel() == 0) return;
  const int64_t run = plan.run;
  const int64_t group_lanes = std::min(run, kMaxLanes);
  const int64_t groups_per_column = (run + group_lanes - 1) / group_lanes;
  const int64_t num_groups = plan.num_columns * groups_per_column;
  int64_t bytes_per_lane_row = 0;
  static_for<L>([&](auto I) { bytes_per_lane_row += 2 * sizeof(*std::get<I>(Ptrs{})); });
  const int64_t rows = std::clamp<int64_t>(kBlockBytes / (group_lanes * bytes_per_lane_row), 1, T);
  const int64_t num_blocks = (T + rows - 1) / rows;
  const int64_t num_items = num_groups * num_blocks;

  Ptrs x_data, y_data;
  static_for<L>([&](auto I) {
    using P = std::tuple_element_t<I, Ptrs>;
    std::get<I>(x_data) = const_cast<P>(std::get<I>(xs).data());
    std::get<I>(y_data) = const_cast<P>(std::get<I>(ys).data());
  });
  const int64_t dir = reverse ? -1 : 1;

  std::vector<std::atomic<uint8_t>> done(num_blocks > 1 ? num_items : 0);
  std::atomic<bool> failed{false};

  // Processes one item; returns false when it gave up because another item failed.
  auto process = [&](int64_t item) -> bool {
    const int64_t g = item / num_blocks, b = item - g * num_blocks;
    const int64_t c = g / groups_per_column;
    const int64_t j0 = (g - c * groups_per_column) * group_lanes;
    const int64_t w = std::min(group_lanes, run - j0);
    const int64_t s0 = b * rows, s1 = std::min(T, s0 + rows);
    std::array<int64_t, L> leaf_off;
    int64_t out_off;
    plan.column_offsets(c, leaf_off.data(), out_off);
    const auto phys = [&](int64_t s) { return reverse ? T - 1 - s : s; };
    // Row pointers at step s0, and their per-step increments.
    Ptrs x_row, y_row;
    std::array<int64_t, L> x_step;
    static_for<L>([&](auto I) {
      const LeafLayout& leaf = plan.leaves[I];
      std::get<I>(x_row) = std::get<I>(x_data) + leaf_off[I] + phys(s0) * leaf.t_stride +
                           (leaf.lane_contiguous ? j0 : 0);
      std::get<I>(y_row) = std::get<I>(y_data) + out_off + phys(s0) * plan.out_t_stride + j0;
      x_step[I] = dir * leaf.t_stride;
    });
    const int64_t y_step = dir * plan.out_t_stride;

    if (w == 1) {  // one sequence: the dependency chain of f is the limit
      Elem acc = Access::load(x_row, 0);
      Access::store(y_row, 0, acc);
      for (int64_t s = s0 + 1; s < s1; ++s) {
        static_for<L>([&](auto I) {
          std::get<I>(x_row) += x_step[I];
          std::get<I>(y_row) += y_step;
        });
        acc = to_elem<Elem>(f(acc, Access::load(x_row, 0)));
        Access::store(y_row, 0, acc);
      }
    } else {
      LaneBuffers<Ptrs> acc_buf, bcast_buf;
      const Ptrs acc = acc_buf.ptrs();
      const Ptrs bcast = bcast_buf.ptrs();
      // Input row as lanes: broadcast leaves are splatted into a small buffer.
      const auto lanes_of = [&](const Ptrs& row) {
        Ptrs p = row;
        static_for<L>([&](auto I) {
          if (!plan.leaves[I].lane_contiguous) {
            std::fill_n(std::get<I>(bcast), w, *std::get<I>(row));
            std::get<I>(p) = std::get<I>(bcast);
          }
        });
        return p;
      };
      const auto copy_row = [&](const Ptrs& to, const Ptrs& from) {
        static_for<L>([&](auto I) {
          std::memcpy(std::get<I>(to), std::get<I>(from), w * sizeof(*std::get<I>(to)));
        });
      };
      copy_row(acc, lanes_of(x_row));
      copy_row(y_row, acc);
      for (int64_t s = s0 + 1; s < s1; ++s) {
        static_for<L>([&](auto I) {
          std::get<I>(x_row) += x_step[I];
          std::get<I>(y_row) += y_step;
        });
        const Ptrs xl = lanes_of(x_row);
        for (int64_t j = 0; j < w; ++j) Access::store(acc, j, f(Access::load(acc, j), Access::load(xl, j)));
        copy_row(y_row, acc);
      }
    }
    if (b == 0) {
      if (num_blocks > 1) done[item].store(1, std::memory_order_release);
      return true;
    }
    for (int spins = 0; !done[item - 1].load(std::memory_order_acquire); ++spins) {
      if (failed.load(std::memory_order_relaxed)) return false;
      if (spins > 2000) std::this_thread::yield(); else cpu_relax();
    }
    // Fix-up with the predecessor's last row (its inclusive prefix), rows still in cache.
    Ptrs prefix_row, y_fix;
    static_for<L>([&](auto I) {
      std::get<I>(prefix_row) = std::get<I>(y_data) + out_off + phys(s0 - 1) * plan.out_t_stride + j0;
      std::get<I>(y_fix) = std::get<I>(y_data) + out_off + phys(s0) * plan.out_t_stride + j0;
    });
    if (w == 1) {
      const Elem carry = Access::load(prefix_row, 0);
      for (int64_t s = s0; s < s1; ++s) {
        Access::store(y_fix, 0, f(carry, Access::load(y_fix, 0)));
        static_for<L>([&](auto I) { std::get<I>(y_fix) += y_step; });
      }
    } else {
      LaneBuffers<Ptrs> carry_buf;
      const Ptrs carry = carry_buf.ptrs();
      static_for<L>([&](auto I) {
        std::memcpy(std::get<I>(carry), std::get<I>(prefix_row), w * sizeof(*std::get<I>(carry)));
      });
      for (int64_t s = s0; s < s1; ++s) {
        for (int64_t j = 0; j < w; ++j)
          Access::store(y_fix, j, f(Access::load(carry, j), Access::load(y_fix, j)));
        static_for<L>([&](auto I) { std::get<I>(y_fix) += y_step; });
      }
    }
    done[item].store(1, std::memory_order_release);
    return true;
  };

  const int64_t total = plan.numel() * static_cast<int64_t>(L);
  const int workers = total < kParallelMinElements
                          ? 1
                          : static_cast<int>(std::min<int64_t>(num_threads(), num_items));
  std::atomic<int64_t> next{0};
  run_workers(workers, [&](int) {
    while (!failed.load(std::memory_order_relaxed)) {
      const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
      if (item >= num_items) return;
      try {
        if (!process(item)) return;
      } catch (...) {
        failed.store(true);
        throw;
      }
    }
  });
}

}  // namespace ascan::detail
