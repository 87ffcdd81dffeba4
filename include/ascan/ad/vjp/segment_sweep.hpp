// segment_sweep.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the adjoint for few long
// columns, cut into segments that are chained and then swept again (pointwise_vjp_segments).
#pragma once

#include "ascan/config.hpp"
#include "ascan/ad/vjp/column_sweep.hpp"

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN

// The adjoint for few long columns (one long sequence, rows of two lanes): each column is cut
// into segments of SegmentSweepPolicy::segment_steps steps, and the segments of all columns are the lanes of a
// sweep, SegmentSweepPolicy::lanes_per_tile at a time. With many columns (AdjointPathPolicy::min_columns_for_sweep or more) each column is
// one whole segment and step 1 is skipped. Two sweeps over each tile's data (the second on the
// buffers the first staged) and no per-step arrays:
//   1. per segment [t0, t1), walking backwards from zero: g_s = c_s + M_s g_{t1} with
//      c_s = ḡ_s + A_{s+1}ᵀ c_{s+1} and M_s = A_{s+1}ᵀ M_{s+1} (c = 0, M = I at t1);
//   2. g_{t1} of every segment from its successor's (c, M), chained from tile to tile (O(lanes));
//   3. per segment again from the true g_{t1}: g_s and ∂x_s = B_sᵀ g_s, as in the column sweep.
// The lanes' operands are staged SegmentSweepPolicy::stage_steps steps at a time: each lane copies its stretch of
// every stream (sequential reads the prefetchers follow and the core overlaps) into step-major
// tile buffers, which the lane loops read contiguously. When step 1 runs, the buffers hold the
// whole segment: step 3 reads them as step 1 left them instead of staging every stream again
// (segments are shortened so that the buffers stay within SegmentSweepPolicy::resident_bytes, about a third of L2;
// 96 KiB for the float32 linear recurrence).
// A tile holds segments of one length (the columns' last segments, which may be shorter, have
// tiles of their own) and always VW lanes (the last tile repeats a lane and drops its results),
// so the lane loops are straight-line code over a constant count and vectorise. Segment lengths
// depend on T, L and the element type only, so the gradients do not depend on the thread count.

// Reads one byte of every 64-byte line of the n elements at p: brings them into the caches.
template <class T>
unsigned char touch_lines(const T* p, int64_t n) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  unsigned char seen = 0;
  for (int64_t e = 0; e < n * int64_t{sizeof(T)}; e += 64) seen ^= bytes[e];
  return seen;
}

template <class T, size_t L>
constexpr int64_t segment_steps() {
  constexpr int64_t fit = SegmentSweepPolicy::resident_bytes / (3 * int64_t{L} * SegmentSweepPolicy::lanes_per_tile * int64_t{sizeof(T)});
  return std::clamp<int64_t>(fit / SegmentSweepPolicy::stage_steps * SegmentSweepPolicy::stage_steps, 2 * SegmentSweepPolicy::stage_steps, SegmentSweepPolicy::segment_steps);
}

template <class T, size_t L>
struct SegmentTile {
  static constexpr int64_t VW = SegmentSweepPolicy::lanes_per_tile, Q = SegmentSweepPolicy::stage_steps;
  int64_t w = 0, len = 0;            // lanes with results, steps per lane
  std::array<int64_t, VW> v, n, t0;  // lane j: segment v = n * S + k from t0
  // Staged operands of leaf l: gb[l][step * VW + lane] for `steps` steps (a stage, or a whole
  // segment); ∂x of the current stage: d[l][step in stage][lane].
  std::array<T*, L> gb, left, right;
  std::array<std::array<std::array<T, VW>, Q>, L> d;
  explicit SegmentTile(int64_t steps) : store(Tensor<T>::empty({3 * int64_t{L} * steps * VW})) {
    for (size_t l = 0; l < L; ++l) {
      gb[l] = store.data() + (3 * l + 0) * steps * VW;
      left[l] = store.data() + (3 * l + 1) * steps * VW;
      right[l] = store.data() + (3 * l + 2) * steps * VW;
    }
  }

 private:
  Tensor<T> store;  // 64-byte aligned, not zeroed
};

template <class Elem, size_t L, class T, class F>
std::vector<Tensor<T>> pointwise_vjp_segments(const F& f, const ascan::detail::PointwisePlan& plan,
                                              const std::vector<Tensor<T>>& xs, const std::vector<Tensor<T>>& ys,
                                              const std::vector<Tensor<T>>& gbar, const std::array<bool, L>& need,
                                              bool reverse) {
  using Tile = SegmentTile<T, L>;
  using Outs = GradOutputs<T, L>;
  using Acc = typename Outs::Acc;
  constexpr int64_t VW = Tile::VW, Q = Tile::Q;
  const int64_t T_len = plan.length, R = plan.run, step = plan.out_t_stride;
  const int64_t N = plan.num_columns * R;  // columns of the output, one lane each
  // Many columns: each is one segment (one lane of the sweep), so the first pass has nothing to
  // chain and is skipped.
  const bool whole_columns = N >= AdjointPathPolicy::min_columns_for_sweep;
  const int64_t seg = whole_columns ? T_len : std::min(T_len, segment_steps<T, L>()), S = (T_len + seg - 1) / seg;
  // With step 1 (more than one segment per column) the tile buffers hold whole segments.
  const bool resident = S > 1;
  const int64_t buffer_steps = resident ? (seg + Q - 1) / Q * Q : Q;
  const int64_t last_len = T_len - (S - 1) * seg;
  Outs outs(plan, xs, need);
  // Element offsets of column n at index 0: in the output and in each leaf.
  std::vector<int64_t> out_base(N);
  std::vector<std::array<int64_t, L>> leaf_base(N);
  {
    std::array<int64_t, L> leaf_off{};
    int64_t out_off = 0;
    for (int64_t c = 0; c < plan.num_columns; ++c) {
      plan.column_offsets(c, leaf_off.data(), out_off);
      for (int64_t i = 0; i < R; ++i) {
        out_base[c * R + i] = out_off + i;
        for (size_t l = 0; l < L; ++l) leaf_base[c * R + i][l] = leaf_off[l] + (plan.leaves[l].lane_contiguous ? i : 0);
      }
    }
  }
  std::array<const T*, L> y_ptr, x_ptr, g_ptr;
  std::array<T*, L> dx_ptr;
  std::array<int64_t, L> x_step;
  for (size_t l = 0; l < L; ++l) {
    y_ptr[l] = ys[l].data();
    x_ptr[l] = xs[l].data();
    x_step[l] = plan.leaves[l].t_stride;
    g_ptr[l] = gbar[l].storage_id() ? gbar[l].data() : nullptr;
    dx_ptr[l] = outs.mode[l] == Outs::Mode::direct ? outs.full[l].data() : nullptr;
  }
  const auto at = [&](int64_t s) { return reverse ? T_len - 1 - s : s; };  // scan step -> index
  // Tiles: first the full segments (k < S - 1) of all columns, segment-major, then the last ones.
  const int64_t full_lanes = N * (S - 1), full_tiles = (full_lanes + VW - 1) / VW;
  const int64_t tiles = full_tiles + (N + VW - 1) / VW;
  // Tile `tile`: its first lane u0, lanes with results w, steps per lane len, and lane u's
  // segment k (of column u % N, or u itself among the last segments).
  struct TileSpan {
    bool last;
    int64_t u0, w, len;
  };
  const auto span_of = [&](int64_t tile) {
    const bool last = tile >= full_tiles;
    const int64_t u0 = (last ? tile - full_tiles : tile) * VW;
    return TileSpan{last, u0, std::min(VW, (last ? N : full_lanes) - u0), last ? last_len : seg};
  };
  const auto segment_of = [&](const TileSpan& t, int64_t u) { return t.last ? S - 1 : u / N; };
  const auto set_tile = [&](int64_t tile, Tile& r) {
    const TileSpan t = span_of(tile);
    r.w = t.w;
    r.len = t.len;
    for (int64_t j = 0; j < VW; ++j) {
      const int64_t u = t.u0 + std::min(j, r.w - 1), k = segment_of(t, u);
      r.n[j] = t.last ? u : u % N;
      r.t0[j] = k * seg;
      r.v[j] = r.n[j] * S + k;
    }
  };
  // One column block ([T, run] rows, the usual long layouts): a tile's lanes cover one contiguous
  // stretch of rows of every stream. Fetching it in order before its first stage lets the staging
  // gathers (VW * L * 4 interleaved streams, more than the hardware prefetchers follow) hit the
  // caches. Part `part` of `parts` of tile `tile`'s stretch (of every stream) is fetched: a worker
  // fetches its next tile in parts while its step 3 runs on resident buffers, so the fetch
  // overlaps arithmetic instead of preceding it. The fetch reads a byte of every line: software
  // prefetches of the same lines did not change the sweep's time at all, the reads did.
  const bool fetch_tiles = plan.num_columns == 1;
  const auto fetch_tile = [&](int64_t tile, int64_t part, int64_t parts) {
    const TileSpan t = span_of(tile);  // its first lane's first step to its last lane's last
    const int64_t a = at(segment_of(t, t.u0) * seg), b = at(segment_of(t, t.u0 + t.w - 1) * seg + t.len - 1);
    const int64_t lo = std::min(a, b), rows = std::max(a, b) + 1 - lo;
    const int64_t r0 = lo + rows * part / parts, r1 = lo + rows * (part + 1) / parts;
    unsigned char seen = 0;
    for (size_t l = 0; l < L; ++l) {
      seen ^= touch_lines(y_ptr[l] + out_base[0] + r0 * step, (r1 - r0) * step);
      if (g_ptr[l]) seen ^= touch_lines(g_ptr[l] + out_base[0] + r0 * step, (r1 - r0) * step);
      seen ^= touch_lines(x_ptr[l] + leaf_base[0][l] + r0 * x_step[l], (r1 - r0) * x_step[l]);
    }
    [[maybe_unused]] volatile unsigned char keep = seen;  // the reads must happen
  };
  const int64_t dir = reverse ? -1 : 1;  // index step per scan step
  // Lanes j .. j + m - 1 (m <= end - j) that are neighbouring columns of one row in every stream
  // (the same segment of [T, 7]'s seven columns): each step of theirs is m adjacent elements. A
  // lane without such neighbours is a run of one.
  const auto row_run = [&](const Tile& r, int64_t j, int64_t end) {
    int64_t m = 1;
    for (; j + m < end && r.t0[j + m] == r.t0[j] && out_base[r.n[j + m]] == out_base[r.n[j]] + m; ++m) {
      bool adjacent = true;
      for (size_t l = 0; l < L; ++l)
        adjacent = adjacent && leaf_base[r.n[j + m]][l] == leaf_base[r.n[j]][l] + (plan.leaves[l].lane_contiguous ? m : 0);
      if (!adjacent) break;
    }
    return m;
  };
  // Stages steps q0 .. q0 + qn - 1 (relative to the lanes' t0) of a run of m lanes. The loops
  // use local pointers and strides only: the copies' stores may alias anything the lambdas
  // capture by reference, which would be reloaded after every copy (that made staging cost more
  // than the arithmetic it feeds).
  const auto stage_run = [&](Tile& r, int64_t j, int64_t m, int64_t q0, int64_t qn) {
    const int64_t ob = out_base[r.n[j]], s0 = r.t0[j] + q0, ydir = dir * step, row0 = (resident ? q0 : 0) * VW;
    for (size_t l = 0; l < L; ++l) {
      const int64_t xdir = dir * x_step[l];
      const T* yrow = y_ptr[l] + ob + at(s0) * step;  // rows of step s0
      const T* xrow = x_ptr[l] + leaf_base[r.n[j]][l] + at(s0) * x_step[l];
      const T* grow = g_ptr[l] ? g_ptr[l] + ob + at(s0) * step : nullptr;
      const bool x_lanes = plan.leaves[l].lane_contiguous;
      T* left = r.left[l] + row0 + j;
      T* right = r.right[l] + row0 + j;
      T* gb = r.gb[l] + row0 + j;
      // Step s reads y at index at(s - 1); step 0 has no y_{-1} and reads y_0 (its A is unused).
      copy_short(s0 > 0 ? yrow - ydir : yrow, left, m);
      for (int64_t qq = 1; qq < qn; ++qq) copy_short(yrow + (qq - 1) * ydir, left + qq * VW, m);
      for (int64_t qq = 0; qq < qn; ++qq) {
        if (x_lanes) copy_short(xrow + qq * xdir, right + qq * VW, m);
        else std::fill_n(right + qq * VW, m, xrow[qq * xdir]);
      }
      for (int64_t qq = 0; qq < qn; ++qq) {
        if (grow) copy_short(grow + qq * ydir, gb + qq * VW, m);
        else std::fill_n(gb + qq * VW, m, T(0));
      }
    }
  };
  const auto prefetch_lane = [&](Tile& r, int64_t j, int64_t q0) {
    const int64_t ob = out_base[r.n[j]], s0 = r.t0[j] + q0;
    // The next stage's stretch of every stream (the lanes walk VW * L * 4 of them, more than
    // the hardware prefetchers follow), so its loads hit while this stage is computed. Also
    // for one column block, whose tile fetch_tile read in order: when that read preceded the
    // tile, it was partly evicted by the time a late stage was staged.
    if (q0 >= Q) {
      constexpr int64_t line = 64 / sizeof(T);
      const int64_t i0 = at(s0 - Q), i1 = at(s0 - 1), lo = std::min(i0, i1), hi = std::max(i0, i1);
      for (size_t l = 0; l < L; ++l) {
        const int64_t xo = leaf_base[r.n[j]][l];
        for (int64_t e = lo * step; e <= hi * step; e += line) {
          __builtin_prefetch(y_ptr[l] + ob + e);
          if (g_ptr[l]) __builtin_prefetch(g_ptr[l] + ob + e);
          if (dx_ptr[l]) __builtin_prefetch(dx_ptr[l] + ob + e, 1);
        }
        for (int64_t e = lo * x_step[l]; e <= hi * x_step[l]; e += line) __builtin_prefetch(x_ptr[l] + xo + e);
      }
    }
  };
  // Contiguous streams (unit steps along the scan) stage blocks of TV lanes x TV steps with
  // register transposes; other layouts, partial stages and blocks holding a column's step 0 (no
  // y_{-1} to read) go element by element.
  using BT = ascan::detail::BlockTranspose<T>;
  constexpr int64_t TV = BT::V;
  bool unit_steps = TV > 0 && (step == 1 || step == -1);
  for (size_t l = 0; l < L; ++l) unit_steps = unit_steps && (x_step[l] == 1 || x_step[l] == -1 || x_step[l] == 0);
  const auto stage_block = [&](Tile& r, int64_t j0, int64_t q0) {
    if constexpr (TV > 0) {
      const int64_t row0 = resident ? q0 : 0;
      for (size_t l = 0; l < L; ++l) {
        const int64_t ydir = dir * step, xdir = dir * x_step[l];
        std::array<const T*, TV> ysrc, xsrc, gsrc;
        for (int64_t i = 0; i < TV; ++i) {
          const int64_t j = j0 + i, s0 = r.t0[j] + q0;
          ysrc[i] = y_ptr[l] + out_base[r.n[j]] + at(s0) * step - ydir;  // y at step s0 - 1
          xsrc[i] = x_ptr[l] + leaf_base[r.n[j]][l] + at(s0) * x_step[l];
          gsrc[i] = g_ptr[l] ? g_ptr[l] + out_base[r.n[j]] + at(s0) * step : nullptr;
        }
        if (xdir == 0) {  // a leaf constant along the scan (a decay of shape [1, 1])
          std::array<T, TV> v;
          for (int64_t i = 0; i < TV; ++i) v[i] = *xsrc[i];
          for (int64_t k = 0; k < Q; ++k) std::copy(v.begin(), v.end(), r.right[l] + (row0 + k) * VW + j0);
        }
        for (int64_t k = 0; k < Q; k += TV) {
          BT::gather(ysrc, ydir, r.left[l] + (row0 + k) * VW + j0, VW);
          if (xdir != 0) BT::gather(xsrc, xdir, r.right[l] + (row0 + k) * VW + j0, VW);
          if (g_ptr[l]) BT::gather(gsrc, ydir, r.gb[l] + (row0 + k) * VW + j0, VW);
          for (int64_t i = 0; i < TV; ++i) {
            ysrc[i] += TV * ydir;
            xsrc[i] += TV * xdir;
            if (g_ptr[l]) gsrc[i] += TV * ydir;
          }
        }
        if (!g_ptr[l])
          for (int64_t k = 0; k < Q; ++k) std::fill_n(r.gb[l] + (row0 + k) * VW + j0, TV, T(0));
      }
    }
  };
  // Stages steps q0 .. q0 + qn - 1 (relative to each lane's t0) of the tile's lanes.
  const auto stage = [&](Tile& r, int64_t q0, int64_t qn) {
    int64_t blocked = 0;  // lanes [0, blocked) staged by blocks
    if (unit_steps && qn == Q) {
      for (; blocked < VW; blocked += TV) {
        bool has_step0 = false;
        for (int64_t i = 0; i < TV; ++i) has_step0 = has_step0 || r.t0[blocked + i] + q0 == 0;
        if (has_step0) break;
        stage_block(r, blocked, q0);
      }
    }
    for (int64_t j = blocked; j < VW;) {
      const int64_t m = row_run(r, j, VW);
      stage_run(r, j, m, q0, qn);
      j += m;
    }
    for (int64_t j = 0; j < VW; ++j)
      if (j == 0 || r.t0[j] != r.t0[j - 1] || r.n[j] != r.n[j - 1] + 1 || j + 1 == VW) prefetch_lane(r, j, q0);
  };
  // Walks a tile's steps from its last to its first, Q at a time, staging them unless `staged`
  // (resident buffers filled by step 1): lanes(row, qq) is the lane loop of step q0 + qq, whose
  // operands are at buffer row `row`; done(q0, qn) runs after each stage.
  const auto walk = [&](Tile& r, bool staged, const auto& lanes, const auto& done) {
    for (int64_t q0 = (r.len - 1) / Q * Q; q0 >= 0; q0 -= Q) {
      const int64_t qn = std::min(Q, r.len - q0), row0 = resident ? q0 : 0;
      if (!staged) stage(r, q0, qn);
      for (int64_t qq = qn - 1; qq >= 0; --qq) lanes((row0 + qq) * VW, qq);
      done(q0, qn);
    }
  };
  std::vector<T> agg(N * S * (L + L * L));  // pass 1: (c, M) at t0 of every segment
  std::vector<T> a_end(N * S * L * L);      // A_{t1} (zero for a column's last segment)
  std::vector<T> g_in(N * S * L);           // g_{t1}
  std::vector<Acc> sums(outs.any_summed() ? N * S * L : 0);
  struct State {  // a tile's lane state
    std::array<std::array<T, VW>, L> c, g;
    std::array<std::array<T, VW>, L * L> M, a_next;
  };
  // Pass 1: the segments' (c, M); also A_{t1} for pass 3.
  const auto pass1 = [&](Tile& r, State& st) {
    auto& c = st.c;
    auto& M = st.M;
    auto& a_next = st.a_next;
    for (int64_t j = 0; j < VW; ++j) {
      const int64_t t1 = r.t0[j] + r.len;
      std::array<T, L * L> A{};
      if (t1 < T_len) {
        std::array<T, L> left, right;
        for (size_t l = 0; l < L; ++l) {
          left[l] = y_ptr[l][out_base[r.n[j]] + at(t1 - 1) * step];
          right[l] = x_ptr[l][leaf_base[r.n[j]][l] + at(t1) * x_step[l]];
        }
        left_jacobian<Elem, L>(f, left, right, A);
      }
      for (size_t e = 0; e < L * L; ++e) {
        a_next[e][j] = A[e];
        if (j < r.w) a_end[r.v[j] * L * L + e] = A[e];
        M[e][j] = e / L == e % L ? T(1) : T(0);
      }
      for (size_t l = 0; l < L; ++l) c[l][j] = T(0);
    }
    walk(r, false, [&](int64_t row, int64_t) {
ASCAN_IVDEP
        for (int64_t j = 0; j < VW; ++j) {
          std::array<T, L> cn, left, right;
          std::array<T, L * L> Mn, A;
          for (size_t l = 0; l < L; ++l) {
            T acc = r.gb[l][row + j];
            for (size_t k = 0; k < L; ++k) acc += a_next[k * L + l][j] * c[k][j];
            cn[l] = acc;
            for (size_t m = 0; m < L; ++m) {
              T am = T(0);
              for (size_t k = 0; k < L; ++k) am += a_next[k * L + l][j] * M[k * L + m][j];
              Mn[l * L + m] = am;
            }
            left[l] = r.left[l][row + j];
            right[l] = r.right[l][row + j];
          }
          left_jacobian<Elem, L>(f, left, right, A);
          for (size_t l = 0; l < L; ++l) c[l][j] = cn[l];
          for (size_t e = 0; e < L * L; ++e) {
            M[e][j] = Mn[e];
            a_next[e][j] = A[e];
          }
        }
    }, [](int64_t, int64_t) {});
    for (int64_t j = 0; j < r.w; ++j) {
      T* out = agg.data() + r.v[j] * (L + L * L);
      for (size_t l = 0; l < L; ++l) out[l] = c[l][j];
      for (size_t e = 0; e < L * L; ++e) out[L + e] = M[e][j];
    }
  };
  // Pass 2 for one tile's lanes: g_{t1} of segment k is g_{t0} of segment k + 1 = c + M g_{t1}
  // of that one (zero past a column's last segment). Lane u = k * N + n depends on lane u + N:
  // later in the same tile (resolved first, lanes in descending order) or in a tile done before.
  const auto pass2 = [&](const Tile& r) {
    for (int64_t j = r.w - 1; j >= 0; --j) {
      const int64_t n = r.n[j], k = r.v[j] - n * S;
      T* g = g_in.data() + (n * S + k) * L;
      if (k == S - 1) {
        std::fill_n(g, L, T(0));
        continue;
      }
      const T* next = agg.data() + (n * S + k + 1) * (L + L * L);
      const T* g_next = g_in.data() + (n * S + k + 1) * L;
      for (size_t l = 0; l < L; ++l) {
        T acc = next[l];
        for (size_t m = 0; m < L; ++m) acc += next[L + l * L + m] * g_next[m];
        g[l] = acc;
      }
    }
  };
  // Pass 3: the sweep from the true g_{t1}.
  const auto pass3 = [&](Tile& r, State& st, int64_t fetch_next) {
    auto& g = st.g;
    auto& a_next = st.a_next;
    for (int64_t j = 0; j < VW; ++j) {
      for (size_t l = 0; l < L; ++l) g[l][j] = g_in[r.v[j] * L + l];
      for (size_t e = 0; e < L * L; ++e) a_next[e][j] = a_end[r.v[j] * L * L + e];
    }
    walk(r, resident, [&](int64_t row, int64_t qq) {
ASCAN_IVDEP
        for (int64_t j = 0; j < VW; ++j) {
          std::array<T, L> gn, left, right;
          std::array<T, L * L> A, B;
          for (size_t l = 0; l < L; ++l) {  // g_s = ḡ_s + A_{s+1}ᵀ g_{s+1}
            T acc = r.gb[l][row + j];
            for (size_t k = 0; k < L; ++k) acc += a_next[k * L + l][j] * g[k][j];
            gn[l] = acc;
            left[l] = r.left[l][row + j];
            right[l] = r.right[l][row + j];
          }
          jacobians<Elem, L>(f, left, right, A, B);
          for (size_t m = 0; m < L; ++m) {  // ∂x_s = B_sᵀ g_s
            T acc = T(0);
            for (size_t k = 0; k < L; ++k) acc += B[k * L + m] * gn[k];
            r.d[m][qq][j] = acc;
          }
          for (size_t l = 0; l < L; ++l) g[l][j] = gn[l];
          for (size_t e = 0; e < L * L; ++e) a_next[e][j] = A[e];
        }
    }, [&](int64_t q0, int64_t qn) {
      if (fetch_next >= 0) fetch_tile(fetch_next, q0 / Q, (r.len + Q - 1) / Q);
      if (q0 == 0)  // ∂x_0 = g_0 in the columns' first segments
        for (int64_t j = 0; j < VW; ++j)
          if (r.t0[j] == 0)
            for (size_t l = 0; l < L; ++l) r.d[l][0][j] = g[l][j];
      // Blocks of whole lanes written back by register transposes, as they were staged.
      int64_t blocked = 0;
      if constexpr (TV > 0) {
        if (unit_steps && qn == Q) {
          for (; blocked + TV <= r.w; blocked += TV) {
            for (size_t l = 0; l < L; ++l) {
              if (!dx_ptr[l]) continue;
              std::array<T*, TV> dst;
              for (int64_t i = 0; i < TV; ++i) {
                const int64_t j = blocked + i;
                dst[i] = dx_ptr[l] + out_base[r.n[j]] + at(r.t0[j] + q0) * step;
              }
              for (int64_t k = 0; k < Q; k += TV) {
                BT::scatter(&r.d[l][k][blocked], VW, dst, dir * step);
                for (int64_t i = 0; i < TV; ++i) dst[i] += TV * dir * step;
              }
            }
          }
        }
      }
      for (int64_t j = blocked; j < r.w;) {  // runs of a row's neighbouring columns, or lanes
        const int64_t m = row_run(r, j, r.w), ob = out_base[r.n[j]], s0 = r.t0[j] + q0, ddir = dir * step;
        for (size_t l = 0; l < L; ++l) {
          if (!dx_ptr[l]) continue;
          const T* src = &r.d[l][0][j];  // local pointers, as in stage_run
          T* dst = dx_ptr[l] + ob + at(s0) * step;
          for (int64_t qq = 0; qq < qn; ++qq) copy_short(src + qq * VW, dst + qq * ddir, m);
        }
        j += m;
      }
      for (int64_t j = 0; j < r.w; ++j)
        for (size_t l = 0; l < L; ++l) {
          if (outs.mode[l] != Outs::Mode::summed) continue;
          Acc acc = Acc(0);
          for (int64_t qq = 0; qq < qn; ++qq) acc += Acc(r.d[l][qq][j]);
          sums[r.v[j] * L + l] += acc;
        }
    });
  };
  // One chain over the tiles, in the adjoint's order (the columns' last segments first, then the
  // full segments from the end): a tile runs pass 1, waits for its predecessor in the chain to
  // publish, resolves its lanes' g_{t1} (O(lanes)), publishes, and runs pass 3 while its data is
  // still in L2 (pass 3 over all tiles after pass 1 over all re-read every stream from memory).
  // Tiles are claimed in chain order, so the one waited for is always running or done.
  const int64_t last_tiles = tiles - full_tiles;
  const auto tile_at = [&](int64_t p) { return p < last_tiles ? full_tiles + p : full_tiles - 1 - (p - last_tiles); };
  ascan::detail::ItemChain chain(tiles);
  const int workers = static_cast<int>(std::min<int64_t>(ascan::num_threads(), tiles));
  // A worker claims its next tile when it starts step 3 of the current one (whose data is then
  // resident), to fetch the next one's streams meanwhile. Tiles still start in chain order, and a
  // claimed tile's predecessor is published or owned by a worker that does not wait before it.
  chain.run(workers, [&](int) {
    const auto tile_buf = std::make_unique<Tile>(buffer_steps);
    const std::unique_ptr<State> state(new State);
    Tile& r = *tile_buf;
    int64_t p = chain.claim();
    bool fetched = false;  // p's streams were fetched during the previous tile's step 3
    while (p < tiles && !chain.failed()) {
      set_tile(tile_at(p), r);
      if (fetch_tiles && !fetched) fetch_tile(tile_at(p), 0, 1);
      if (S > 1) pass1(r, *state);  // one segment per column: g_{t1} = 0, A_{t1} = 0 (a_end)
      if (p > 0 && !chain.wait(p - 1)) return;
      pass2(r);
      chain.publish(p);
      const int64_t p_next = chain.claim();
      fetched = fetch_tiles && resident && p_next < tiles;
      pass3(r, *state, fetched ? tile_at(p_next) : -1);
      p = p_next;
    }
  });
  // Summed leaves: the segments of a column in order, into the column's slot.
  if (outs.any_summed())
    for (int64_t n = 0; n < N; ++n)
      for (size_t l = 0; l < L; ++l) {
        if (outs.mode[l] != Outs::Mode::summed) continue;
        Acc total = Acc(0);
        for (int64_t k = 0; k < S; ++k) total += sums[(n * S + k) * L + l];
        outs.full[l].data()[outs.summed_offset(out_base[n])] = T(total);
      }
  return outs.finish(xs);
}

ASCAN_ISA_END
}  // namespace ascan::ad::detail
