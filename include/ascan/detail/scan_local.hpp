// scan_local.hpp — the thread-level local scans of the host pointwise scan (docs/design.md §2),
// members of PointwiseRunner (scan_runner.hpp). One block of rows is scanned in place (or in a
// worker's scratch) by one of them: narrow groups (few lanes) cut the rows into K segments scanned
// as interleaved independent chains, so the latency of f overlaps (a single float add chain runs at
// about 1 element per 4 cycles, 8 chains at about 2 per cycle); segment k is then fixed up with the
// prefix of segments < k in a vectorisable pass (fix_up). Wide groups get the same overlap from
// their lanes: f runs over a row of lanes in a loop the compiler vectorises, the previous output
// row as accumulator. Rows narrower than 16 lanes are scanned in chunks of 8, 4, 2 and 1 lanes with
// accumulators in registers, and one sequence of several float or double leaves scans its
// segments as vector lanes through register transposes. The agent (pointwise_scan.hpp) picks one
// per block (LocalScan, detail/path_override.hpp).
#pragma once

#include "ascan/config.hpp"
#include "ascan/detail/scan_runner.hpp"

namespace ascan::detail {
ASCAN_ISA_BEGIN

// Rows per segment when `n` rows are cut into K segments of w lanes (the last one takes the
// remainder). Segments that start a multiple of 4 KiB apart make the K interleaved load and
// store streams alias in L1 (a store seems to feed a later load with the same low 12 address
// bits), which halves the speed at power-of-two sizes. So the length is nudged down (by at most
// 1/16) until the starts lie about 4096 / K + 64 bytes apart modulo 4 KiB.
template <class X, class F, class Epi>
inline int64_t PointwiseRunner<X, F, Epi>::segment_rows(int64_t n, int K, int64_t w) const {
  const int64_t nominal = n / K;
  const int64_t row_bytes = w * max_elem_bytes_;
  // The K segments start at k * cand * row_bytes: their offsets modulo 4096 (the L1 set index)
  // should be far apart, or the K streams of every leaf land in the same sets.
  // Score: the smallest distance, modulo 4096, between two segments' starts.
  const auto score = [&](int64_t cand) {
    int64_t worst = 4096;
    for (int64_t k = 1; k < K; ++k) {
      const int64_t m = k * cand * row_bytes % 4096;
      worst = std::min(worst, std::min(m, 4096 - m));
    }
    return worst;
  };
  int64_t best = nominal, best_score = -1;
  for (int64_t cand = nominal; cand >= std::max(LocalScanPolicy::min_segment_rows, nominal - nominal / 16); --cand) {
    const int64_t s = score(cand);
    if (s > best_score) {
      best = cand;
      best_score = s;
    }
    if (s >= 4096 / K / 2) break;
  }
  return best;
}

// Local scans of K segments of one sequence (one lane), interleaved to overlap f's latency.
template <class X, class F, class Epi>
template <int K>
inline void PointwiseRunner<X, F, Epi>::scan_sequences(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
  std::array<Elem, K> acc;
  std::array<Ptrs, K> xb, yb;
  for (int k = 0; k < K; ++k) {
    xb[k] = x_row(g, s0 + k * seg);
    yb[k] = y_row(g, s0 + k * seg);
  }
  const Steps zero{};
  static_for<K>([&](auto k) {
    acc[k] = Access::load_at(xb[k], zero);
    Access::store(yb[k], 0, acc[k]);
  });
  Steps off;
  for (int64_t s = 1; s < seg; ++s) {
    static_for<L>([&](auto I) { off[I] = s * x_step_[I]; });
    const int64_t yo = s * y_step_;
    static_for<K>([&](auto k) {
      acc[k] = to_elem<Elem>(f_(acc[k], Access::load_at(xb[k], off)));
      Access::store(yb[k], yo, acc[k]);
    });
  }
  for (int64_t s = seg; s < s1 - s0 - (K - 1) * seg; ++s) {  // the last segment's remainder
    static_for<L>([&](auto I) { off[I] = s * x_step_[I]; });
    acc[K - 1] = to_elem<Elem>(f_(acc[K - 1], Access::load_at(xb[K - 1], off)));
    Access::store(yb[K - 1], s * y_step_, acc[K - 1]);
  }
}

// Local scans of M x V segments of one sequence (V = 8 floats or 4 doubles) as vector lanes: V
// steps of every segment are loaded and transposed in registers, V segments at a time, f runs
// across the segments and the results go back transposed. A vector combine (vector_combine,
// M = 1) runs on the registers with its accumulator in one (through memory, the accumulator's
// stores and reloads would be on the chain); other combines run across the segments as a loop
// over local arrays that the compiler vectorises, M independent vectors of segments for a wide
// combine (LocalScanPolicy::wide_segment_groups), whose latency one vector chain does not hide.
// With one chain per segment in scalar code, the pointers of 8 segments x 4 streams did not fit
// in registers.
template <class X, class F, class Epi>
template <int M>
inline void PointwiseRunner<X, F, Epi>::scan_sequences_blocked(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
  if constexpr (BT::V > 0 && kSameLeaves && (M == 1 || !kVectorCombine)) {
    constexpr int64_t V = BT::V, S = M * V;
    using Vec = typename BT::Vec;
    LocalLanes<Ptrs, S> acc, row;
    std::array<Ptrs, S> xb, yb;
    for (int64_t k = 0; k < S; ++k) {
      xb[k] = x_row(g, s0 + k * seg);
      yb[k] = y_row(g, s0 + k * seg);
      // Every leaf is read before any is written: an output may be another leaf's input.
      static_for<L>([&](auto I) { std::get<I>(acc.v)[k] = std::get<I>(xb[k])[0]; });
      static_for<L>([&](auto I) { std::get<I>(yb[k])[0] = std::get<I>(acc.v)[k]; });
    }
    [[maybe_unused]] VecElem<Vec> va;
    if constexpr (kVectorCombine) va = make_vec_elem<Vec>([&](auto I) { return BT::ld(std::get<I>(acc.v).data()); });
    int64_t s = 1;
    // Tiles of V steps of every segment. In a reverse scan every stream runs down: a tile is
    // loaded and stored in address order and its steps are taken from the last row up. (A
    // reversal of every vector cost two permutes per vector and leaf.)
    const auto tiles = [&](auto down) ASCAN_INLINE_LAMBDA {
      constexpr bool kDown = decltype(down)::value;
      constexpr int64_t d = kDown ? -1 : 1;
      const auto at = [](auto* p) { return kDown ? p - (BT::V - 1) : p; };  // a tile row's lowest address
      for (; s + V <= seg; s += V) {
        Vec r[L][M][V];  // r[leaf][m][q]: step s + q (s + V - 1 - q when kDown) of segments m V ..
        static_for<L>([&](auto I) {
          if (x_step_[I] == 0) {  // a leaf constant along the scan (a broadcast decay)
            const Vec c = Vec{} + std::get<I>(xb[0])[0];
            for (int64_t m = 0; m < M; ++m)
              for (int64_t q = 0; q < V; ++q) r[I][m][q] = c;
            return;
          }
          // S * L streams, all running down in a reverse scan: fetch ahead explicitly (it pays
          // most in reverse).
          for (int64_t k = 0; k < S; ++k) {
            __builtin_prefetch(std::get<I>(xb[k]) + (s + MemoryPolicy::prefetch_steps) * d);
            __builtin_prefetch(std::get<I>(yb[k]) + (s + MemoryPolicy::prefetch_steps) * d, 1);
          }
          for (int64_t m = 0; m < M; ++m) {
            for (int64_t k = 0; k < V; ++k) r[I][m][k] = BT::ld(at(std::get<I>(xb[m * V + k]) + s * d));
            BT::transpose(r[I][m]);
          }
        });
        for (int64_t i = 0; i < V; ++i) {
          const int64_t q = kDown ? V - 1 - i : i;
          if constexpr (kVectorCombine) {
            va = vec_elem<Vec>(f_(va, make_vec_elem<Vec>([&](auto I) { return r[I][0][q]; })));
            static_for<L>([&](auto I) { r[I][0][q] = vec_leaf<I>(va); });
          } else {
            static_for<L>([&](auto I) {
              for (int64_t m = 0; m < M; ++m) BT::st(std::get<I>(row.v).data() + m * V, r[I][m][q]);
            });
            const Ptrs pa = acc.ptrs(), pr = row.ptrs();
ASCAN_IVDEP
            for (int64_t j = 0; j < S; ++j) Access::store(pa, j, to_elem<Elem>(f_(Access::load(pa, j), Access::load(pr, j))));
            static_for<L>([&](auto I) {
              for (int64_t m = 0; m < M; ++m) r[I][m][q] = BT::ld(std::get<I>(acc.v).data() + m * V);
            });
          }
        }
        static_for<L>([&](auto I) {
          for (int64_t m = 0; m < M; ++m) {
            BT::transpose(r[I][m]);
            for (int64_t k = 0; k < V; ++k) BT::st(at(std::get<I>(yb[m * V + k]) + s * d), r[I][m][k]);
          }
        });
      }
    };
    if (y_step_ < 0) tiles(std::true_type{});
    else tiles(std::false_type{});
    if constexpr (kVectorCombine) static_for<L>([&](auto I) { BT::st(std::get<I>(acc.v).data(), vec_leaf<I>(va)); });
    // The segments' last steps (fewer than V), then the last segment's remainder.
    const Ptrs a = acc.ptrs();
    const auto scalar_step = [&](int64_t k, int64_t t) {
      Steps off;
      static_for<L>([&](auto I) { off[I] = t * x_step_[I]; });
      const Elem e = to_elem<Elem>(f_(Access::load(a, k), Access::load_at(xb[k], off)));
      Access::store(a, k, e);
      Access::store(yb[k], t * y_step_, e);
    };
    for (; s < seg; ++s)
      for (int64_t k = 0; k < S; ++k) scalar_step(k, s);
    for (int64_t t = seg; t < s1 - s0 - (S - 1) * seg; ++t) scalar_step(S - 1, t);
  }
}

// Local scans of K segments of w < LocalScanPolicy::narrow_lanes lanes of one column for a wide combine: the K
// segments' w lanes are gathered into one row of K w elements per step and f runs over it as
// one loop the compiler vectorises (K w independent chains; chunks of 8, 4, 2 and 1 lanes in
// two chains left f's latency exposed).
template <class X, class F, class Epi>
template <int K>
inline void PointwiseRunner<X, F, Epi>::scan_narrow_wide(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
  const int64_t w = g.w, n = K * w;
  LocalLanes<Ptrs, K * LocalScanPolicy::narrow_lanes> acc, in;
  std::array<Ptrs, K> x, y;
  const auto load = [&](LocalLanes<Ptrs, K * LocalScanPolicy::narrow_lanes>& dst, int k) ASCAN_INLINE_LAMBDA {
    static_for<L>([&](auto I) {
      auto* d = std::get<I>(dst.v).data() + k * w;
      const auto* src = std::get<I>(x[k]);
      if (plan_.leaves[I].lane_contiguous) {
        for (int64_t j = 0; j < w; ++j) d[j] = src[j];
      } else {
        for (int64_t j = 0; j < w; ++j) d[j] = src[0];
      }
    });
  };
  const auto store = [&](int k) ASCAN_INLINE_LAMBDA {
    static_for<L>([&](auto I) {
      const auto* a = std::get<I>(acc.v).data() + k * w;
      for (int64_t j = 0; j < w; ++j) std::get<I>(y[k])[j] = a[j];
    });
  };
  const auto advance = [&](int k) ASCAN_INLINE_LAMBDA {
    static_for<L>([&](auto I) {
      std::get<I>(x[k]) += x_step_[I];
      std::get<I>(y[k]) += y_step_;
    });
  };
  for (int k = 0; k < K; ++k) {
    x[k] = x_row(g, s0 + k * seg);
    y[k] = y_row(g, s0 + k * seg);
    load(acc, k);
  }
  for (int k = 0; k < K; ++k) store(k);  // after all reads: an output may be another leaf's input
  const Ptrs a = acc.ptrs(), b = in.ptrs();
  for (int64_t s = 1; s < seg; ++s) {
    for (int k = 0; k < K; ++k) {
      advance(k);
      load(in, k);
    }
ASCAN_IVDEP
    for (int64_t j = 0; j < n; ++j) Access::store(a, j, to_elem<Elem>(f_(Access::load(a, j), Access::load(b, j))));
    for (int k = 0; k < K; ++k) store(k);
  }
  for (int64_t s = s0 + K * seg; s < s1; ++s) {  // the last segment's remainder
    advance(K - 1);
    load(in, K - 1);
    for (int64_t j = (K - 1) * w; j < n; ++j) Access::store(a, j, to_elem<Elem>(f_(Access::load(a, j), Access::load(b, j))));
    store(K - 1);
  }
}

// Local scans of K segments of w < LocalScanPolicy::narrow_lanes lanes of one column (a leaf is contiguous over
// them or constant, as a decay broadcast over the lanes). A
// row loop of a runtime w that short stays scalar and keeps the accumulator in memory (a
// store-to-load round trip per step), so the lanes are cut into chunks of compile-time width
// 8, 4, 2, 1 (the bits of w), each scanned with its accumulators in registers, one sweep over
// the (L2-resident) block per chunk, which keeps few accumulators live at a time.
template <class X, class F, class Epi>
template <int K>
inline void PointwiseRunner<X, F, Epi>::scan_narrow(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
  if constexpr (kWindows) {
    if (windows_) return scan_windows<K>(g, s0, s1, seg);
  }
  int64_t j0 = 0;
  static_for<4>([&](auto b) {
    constexpr int W = 8 >> b;
    if (g.w & W) {
      scan_chunk<K, W>(g, j0, s0, s1, seg);
      j0 += W;
    }
  });
}

// Local scans of K segments of 4 to 7 packed lanes (rows back to back, outputs apart from the
// inputs) with a vector combine: each row is one vector of 8 lanes, a window that reaches into
// the row scanned after it (up, or down in a reverse scan). The extra lanes compute on that
// row's values and their stores are overwritten when it comes, so a segment's last row stores
// its own lanes only (the row after it is written already, or is another block's), and the
// scan's last row reads its own lanes only. Each input is read a row ahead: a load issued after
// a store to an address a multiple of 4096 bytes apart waits for the store (the CPU predicts
// that they overlap), and a row's input and output often are. Narrower rows would spend most
// of a vector on other rows, and waited on their own stores even read three rows ahead.
template <class X, class F, class Epi>
template <int K>
inline void PointwiseRunner<X, F, Epi>::scan_windows(const Group& g, int64_t s0, int64_t s1, int64_t seg) {
  constexpr int W = 8;
  using VW = typename Lanes<Leaf0, W>::Vec;
  using UW = typename Lanes<Leaf0, W>::Unaligned;
  using VE = VecElem<VW>;
  const int64_t w = g.w, pad = y_step_ > 0 ? 0 : W - w;  // a window starts pad lanes lower
  std::array<VE, K> acc, ahead;  // ahead: the input of the row after the current one
  std::array<Ptrs, K> x, y;      // the segments' current rows
  std::array<bool, L> lanes;
  static_for<L>([&](auto I) { lanes[I] = plan_.leaves[I].lane_contiguous; });
  const auto load = [&](const Ptrs& row, bool whole) ASCAN_INLINE_LAMBDA {
    return make_vec_elem<VW>([&](auto I) -> VW {
      const Leaf0* p = std::get<I>(row);
      if (!lanes[I]) return VW{} + p[0];
      if (whole) return *reinterpret_cast<const UW*>(p - pad);
      VW v{};
      for (int64_t j = 0; j < w; ++j) v[pad + j] = p[j];
      return v;
    });
  };
  const auto store = [&](const Ptrs& row, const VE& e, bool whole) ASCAN_INLINE_LAMBDA {
    static_for<L>([&](auto I) {
      Leaf0* p = std::get<I>(row);
      const VW v = vec_leaf<I>(e);
      if (whole) {
        *reinterpret_cast<UW*>(p - pad) = v;
      } else {
        for (int64_t j = 0; j < w; ++j) p[j] = v[pad + j];
      }
    });
  };
  const auto advance = [&](auto k) ASCAN_INLINE_LAMBDA {
    static_for<L>([&](auto I) {
      std::get<I>(x[k]) += x_step_[I];
      std::get<I>(y[k]) += y_step_;
    });
  };
  static_for<K>([&](auto k) {  // a segment's first row is its input
    x[k] = x_row(g, s0 + k * seg);
    y[k] = y_row(g, s0 + k * seg);
    acc[k] = load(x[k], false);
    store(y[k], acc[k], false);
  });
  const int64_t last = s0 + (K - 1) * seg;  // the last segment runs to s1
  // Rows whose successor's window (read ahead) still lies before the scan's end.
  const int64_t piped = std::clamp<int64_t>(T_ - 2 - last, 1, seg - 1);
  std::array<Ptrs, K> xa;  // the row after the current one
  if (piped > 1) {
    static_for<K>([&](auto k) {
      xa[k] = x_row(g, s0 + k * seg + 1);
      ahead[k] = load(xa[k], true);
    });
  }
  for (int64_t i = 1; i < piped; ++i) {
    static_for<K>([&](auto k) {
      const VE in = ahead[k];
      advance(k);
      static_for<L>([&](auto I) { std::get<I>(xa[k]) += x_step_[I]; });
      ahead[k] = load(xa[k], true);
      acc[k] = vec_elem<VW>(f_(acc[k], in));
      store(y[k], acc[k], true);
    });
  }
  // The rest, each row's input read as it comes.
  const auto next = [&](auto k, bool whole_in, bool whole_out) ASCAN_INLINE_LAMBDA {
    advance(k);
    acc[k] = vec_elem<VW>(f_(acc[k], load(x[k], whole_in)));
    store(y[k], acc[k], whole_out);
  };
  for (int64_t i = piped; i < seg - 1; ++i) static_for<K>([&](auto k) { next(k, true, true); });
  static_for<K - 1>([&](auto k) { next(k, true, false); });
  for (int64_t s = std::max(last + 1, last + seg - 1); s < s1; ++s)
    next(std::integral_constant<size_t, K - 1>{}, s + 1 < T_, s + 1 < s1);
}

template <class X, class F, class Epi>
template <int K, int W>
inline void PointwiseRunner<X, F, Epi>::scan_chunk(const Group& g, int64_t j0, int64_t s0, int64_t s1, int64_t seg) {
  // Accumulators and inputs are kept leaf by leaf (arrays of W per leaf, like the tensors), so
  // the combine over the W lanes can group into vector instructions (it does for add; the
  // linear recurrence stays scalar).
  std::array<LocalLanes<Ptrs, W>, K> acc;
  LocalLanes<Ptrs, W> in;
  std::array<Ptrs, K> x, y;
  static_for<K>([&](auto k) {
    x[k] = x_row(g, s0 + k * seg);
    y[k] = y_row(g, s0 + k * seg);
    static_for<L>([&](auto I) {
      const bool lanes = plan_.leaves[I].lane_contiguous;
      if (lanes) std::get<I>(x[k]) += j0;
      std::get<I>(y[k]) += j0;
      auto& a = std::get<I>(acc[k].v);
      for (int j = 0; j < W; ++j) a[j] = std::get<I>(x[k])[lanes ? j : 0];
    });
    static_for<L>([&](auto I) {  // after all reads: an output may be another leaf's input
      const auto& a = std::get<I>(acc[k].v);
      for (int j = 0; j < W; ++j) std::get<I>(y[k])[j] = a[j];
    });
  });
  // Inlined by force, with its inner loops: for 8 lanes of a linear recurrence GCC called it
  // (or, in the adjoint's scan, its loops) out of line, as scalar code.
  const auto step = [&](auto k) ASCAN_INLINE_LAMBDA {
    static_for<L>([&](auto I) ASCAN_INLINE_LAMBDA {
      std::get<I>(x[k]) += x_step_[I];
      std::get<I>(y[k]) += y_step_;
      auto& v = std::get<I>(in.v);
      if (plan_.leaves[I].lane_contiguous) {
        static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { v[j] = std::get<I>(x[k])[j]; });
      } else {
        const auto c = std::get<I>(x[k])[0];
        static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { v[j] = c; });
      }
    });
    // All loads, then all combines, then all stores: y may alias x, so interleaved they
    // could not be grouped into vectors.
    const Ptrs a = acc[k].ptrs(), b = in.ptrs();
    static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { Access::store(a, j, to_elem<Elem>(f_(Access::load(a, j), Access::load(b, j)))); });
    static_for<L>([&](auto I) ASCAN_INLINE_LAMBDA {
      const auto& a = std::get<I>(acc[k].v);
      static_for<W>([&](auto j) ASCAN_INLINE_LAMBDA { std::get<I>(y[k])[j] = a[j]; });
    });
  };
  for (int64_t s = 1; s < seg; ++s) static_for<K>(step);
  for (int64_t s = s0 + K * seg; s < s1; ++s) step(std::integral_constant<size_t, K - 1>{});
}

// Local scans of K segments of w lanes each; lanes vectorise, segments add independent work.
// The previous output row is the accumulator (as in a plain loop): one load of it, one of x
// and one store per element.
template <class X, class F, class Epi>
template <int K>
inline void PointwiseRunner<X, F, Epi>::scan_lanes(const Group& g, int64_t s0, int64_t s1, int64_t seg, bool from_previous) {
  const int64_t w = g.w;
  std::optional<LaneBuffers<Ptrs>> gather_buf;
  Ptrs gathered{};
  if (any_gather_) gathered = gather_buf.emplace().ptrs();
  // An input row as lanes: leaves that are not contiguous over the group's lanes (constant
  // over the run, or columns of the bundle not adjacent) are gathered into a small buffer.
  const int64_t span = g.w / g.cols;
  const auto lanes_of = [&](const Ptrs& row) {
    Ptrs p = row;
    if (!any_gather_) return p;
    static_for<L>([&](auto I) {
      if (!gather_[I]) return;
      auto* dst = std::get<I>(gathered);
      const auto* src = std::get<I>(row);
      for (int64_t k = 0; k < g.cols; ++k, dst += span, src += bundle_stride_[I]) {
        if (plan_.leaves[I].lane_contiguous)
          std::memcpy(dst, src, span * sizeof(*dst));
        else
          std::fill_n(dst, span, *src);
      }
      std::get<I>(p) = std::get<I>(gathered);
    });
    return p;
  };
  const auto first = [&](int64_t s) {
    const Ptrs xl = lanes_of(x_row(g, s)), y = y_row(g, s);
    static_for<L>([&](auto I) {
      if (std::get<I>(y) != std::get<I>(xl)) std::memcpy(std::get<I>(y), std::get<I>(xl), w * sizeof(*std::get<I>(y)));
    });
  };
  // Row pointers advance in place: building a fresh pointer tuple per row made GCC store its
  // fields one by one and reload them as one vector (a failed store forward).
  const int64_t prev_off = -y_step_;
  const auto step = [&](Ptrs& x, Ptrs& y) {
    static_for<L>([&](auto I) {
      std::get<I>(x) += x_step_[I];
      std::get<I>(y) += y_step_;
    });
    const auto body = [&](const Ptrs& xl) {
      // Lanes are independent (y may be x itself, at the same lane; the previous row is
      // another row), which the compiler cannot prove through the pointers: say so, or it
      // emits scalar code.
ASCAN_IVDEP
      for (int64_t j = 0; j < w; ++j)
        Access::store(y, j, to_elem<Elem>(f_(Access::load(y, j + prev_off), Access::load(xl, j))));
    };
    if (any_gather_) body(lanes_of(x)); else body(x);
  };
  if (from_previous) {  // K == 1, s0 > 0: row s0 continues from the final row s0 - 1
    Ptrs x = x_row(g, s0 - 1), y = y_row(g, s0 - 1);
    for (int64_t s = s0; s < s1; ++s) step(x, y);
    return;
  }
  std::array<Ptrs, K> xs, ys;
  for (int k = 0; k < K; ++k) {
    first(s0 + k * seg);
    xs[k] = x_row(g, s0 + k * seg);
    ys[k] = y_row(g, s0 + k * seg);
  }
  for (int64_t s = 1; s < seg; ++s)
    for (int k = 0; k < K; ++k) step(xs[k], ys[k]);
  for (int64_t s = s0 + K * seg; s < s1; ++s) step(xs[K - 1], ys[K - 1]);
}

// y_s = f(carry, y_s) for logical steps s in [a, e); `carry` holds w final lanes.
template <class X, class F, class Epi>
inline void PointwiseRunner<X, F, Epi>::fix_up(const Group& g, const Ptrs& carry, int64_t a, int64_t e) {
  if (a >= e) return;
  if (g.w == 1) {
    const Elem c = Access::load(carry, 0);
    if (y_step_ == 1 || y_step_ == -1) {  // contiguous: one ascending, vectorisable loop
      const Ptrs lo = y_row(g, y_step_ == 1 ? a : e - 1);
      for (int64_t i = 0; i < e - a; ++i) Access::store(lo, i, f_(c, Access::load(lo, i)));
    } else {
      const Ptrs base = y_row(g, a);
      for (int64_t i = 0; i < e - a; ++i)
        Access::store(base, i * y_step_, f_(c, Access::load(base, i * y_step_)));
    }
    return;
  }
  if ((y_step_ == g.w || y_step_ == -g.w) && g.w <= LocalScanPolicy::max_repeated_carry_lanes) {
    // Narrow rows packed back to back: one flat, vectorisable loop over the rows' span, with
    // the carry repeated to a stretch of whole rows (a loop of w per row would be scalar). The
    // repeats are copied in doubling pieces: an element loop with a wrapping index ran scalar.
    const int64_t n = (e - a) * g.w, stretch = std::min(BlockPolicy::max_lanes / g.w * g.w, n);
    LaneBuffers<Ptrs> rep_buf;
    const Ptrs rep = rep_buf.ptrs();
    static_for<L>([&](auto I) {
      auto* r = std::get<I>(rep);
      std::memcpy(r, std::get<I>(carry), g.w * sizeof(*r));
      for (int64_t len = g.w; len < stretch; len *= 2)
        std::memcpy(r + len, r, std::min(len, stretch - len) * sizeof(*r));
    });
    Ptrs lo = y_row(g, y_step_ > 0 ? a : e - 1);
    for (int64_t i = 0; i < n; i += stretch) {
      const int64_t m = std::min(stretch, n - i);
ASCAN_IVDEP
      for (int64_t j = 0; j < m; ++j) Access::store(lo, j, f_(Access::load(rep, j), Access::load(lo, j)));
      static_for<L>([&](auto I) { std::get<I>(lo) += stretch; });
    }
    return;
  }
  Ptrs row = y_row(g, a);
  for (int64_t s = a; s < e; ++s) {
ASCAN_IVDEP
    for (int64_t j = 0; j < g.w; ++j) Access::store(row, j, f_(Access::load(carry, j), Access::load(row, j)));
    static_for<L>([&](auto I) { std::get<I>(row) += y_step_; });
  }
}

ASCAN_ISA_END
}  // namespace ascan::detail
