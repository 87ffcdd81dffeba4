// first_order_scan.hpp — part of the scan adjoint (ad/scan_vjp.hpp): the closed-form adjoint of
// the first-order builtins (linear recurrence, cumulative product, logaddexp) as a scan in the
// other direction (first_order_vjp_by_scan).
#pragma once

#include "ascan/config.hpp"
#include "ascan/ad/vjp/segment_sweep.hpp"

namespace ascan::ad::detail {
ASCAN_ISA_BEGIN

// The linear recurrence's adjoint is itself a linear recurrence. The combine (a1, b1), (a2, b2)
// -> (a1 a2, a2 b1 + b2) has closed-form Jacobians: A_t = a_t I, and B_tᵀ maps (g^a, g^b) to
// (g^a y^a_{t-1} + g^b y^b_{t-1}, g^b). Without an upstream gradient on the products y^a (the
// usual case: only y^b is used), g^a = 0 and
//     g_t = ḡ_t + a_{t+1} g_{t+1},   ∂b_t = g_t,   ∂a_t = g_t y^b_{t-1} (t >= 1),   ∂a_0 = 0.
// A cumulative product y_t = y_{t-1} x_t has the same adjoint with a = x and y^b = y, except at
// the first step (y_0 = x_0): ∂x_t = g_t y_{t-1} (t >= 1), ∂x_0 = g_0, and g is not returned
// (no division by x: zeros in x are exact).
// So the backward is the forward scan kernel run in the other direction over the pairs
// (a_{t+1}, ḡ_t), t < T - 1, and one elementwise pass. The scan's h_t starts from ḡ_{T-2}
// instead of ḡ_{T-2} + a_{T-1} ḡ_{T-1} (its inputs are the caller's tensors): the missing term
// reaches step t multiplied by a_{t+1} ... a_{T-1}, which is the scan's other output P_t, so the
// elementwise pass takes g_t = h_t + P_t ḡ_{T-1} (without the term where ḡ_{T-1} is zero, so
// that a product that overflowed does not turn a zero into a NaN). The pass runs on each block of
// the scan while it is in cache (FirstOrderEpilogue), so the backward reads a, ḡ and y_{t-1} and
// writes ∂a and ∂b: five streams for the linear recurrence, four for the product (P and h are
// never stored), where a separate elementwise pass would read them again. The column and segment sweeps evaluate the Jacobians on dual numbers per element
// instead.

// The logaddexp combine's Jacobians at (left, right) = (y_{t-1}, x_t), as its evaluation on dual
// numbers gives them, with the exponential of detail/log1p_exp.hpp: with d = min - max <= 0 and
// e = exp(d), ∂/∂max = 1 - e / (1 + e) and ∂/∂min = e / (1 + e) (on a tie the left operand is the
// min); where d is NaN (equal infinities, a NaN) the combine returns left + right, whose
// Jacobians are 1 and 1.
template <class T>
ASCAN_ALWAYS_INLINE void logaddexp_partials(T left, T right, T& A, T& B) {
  const bool left_larger = left > right;
  const T d = left_larger ? right - left : left - right;
  const T e = ascan::detail::exp_nonpositive(d);
  const T s = e / (T(1) + e);
  const bool nan = d != d;
  A = nan ? T(1) : left_larger ? T(1) - s : s;
  B = nan ? T(1) : left_larger ? s : T(1) - s;
}

// The elementwise pass of first_order_vjp_by_scan as an epilogue of its scan (see
// PointwiseRunner): each block's rows (P_t, h_t), still in cache, become
// g_t = h_t + P_t ḡ_{T-1}, ∂b_t = g_t over h_t and ∂a_t = g_t y_{t-1} over P_t, and are stored
// only where a gradient is returned in the output's shape. Rows that are local scans after a
// carry (P_c, h_c) are final as (P_t P_c, h_t + P_t h_c), so g_t = h_t + P_t G with
// G = h_c + P_c ḡ_{T-1} per lane: the carry costs one multiply-add per lane, not a pass over the
// rows. Gradients summed over the steps (a leaf broadcast along the scan) are summed per work
// item and lane into `sums`.
template <class T, bool kProduct>
struct FirstOrderEpilogue {
  static constexpr bool active = true;
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  static constexpr int64_t kPattern = 256;  // elements of ḡ_{T-1} repeated for packed narrow rows

  const T* gbar;      // ḡ and y^b (the product's y) in the output's layout, whole tensors
  const T* y;
  int64_t shift;      // the adjoint scan's outputs start `shift` rows into the whole tensors
  int64_t ts;         // the output's row stride
  int64_t adj_len;    // steps of the adjoint scan (T - 1)
  bool adj_reverse;   // its direction
  int64_t last, first, dir;     // the forward scan's last and first step indices, its direction
  // logaddexp's x (whole tensor, the output's layout), or null: with it the scan's decay is
  // A_{t+1} and ∂x_t = B_t g_t (logaddexp_partials at (y_{t-1}, x_t)), both evaluated per block
  // by fill_inputs, leaf 0 of the scan being a placeholder.
  const T* lse_x = nullptr;
  std::array<bool, 2> keep{};   // ∂a (over P), ∂b (over h) stored
  std::array<bool, 2> sum{};    // summed into `sums`
  bool want_a = false, want_b = false;
  Acc* sums = nullptr;          // per item: 2 x `lanes` partial sums (∂a, then ∂b)
  int64_t* column_offset = nullptr;  // per item: the output offset of its lane 0 at step 0
  int64_t* width = nullptr;          // per item: its lanes
  int64_t lanes = 0;

  bool keeps(size_t leaf) const { return keep[leaf]; }
  bool has_prologue() const { return lse_x != nullptr; }

  // logaddexp: the Jacobians Q_k = (A, B) at rows k of the block (the pair at (y_{t-1}, x_t) of
  // the row's step t) go to a (A_{t+1} of the adjoint's row t: Q_{k+dir} into row k) and aux
  // (B_t: Q_k into row k). Rows k = -1 .. n (as far as they exist) are evaluated once each; the
  // ones that land outside [0, n) go to the slack. The forward's first step has no Q.
  void fill_inputs(int64_t, T* a, T* aux, int64_t offset, int64_t n, int64_t w, int64_t lo) const {
    const int64_t t_lo = (adj_reverse ? adj_len - 1 - lo : lo) + shift;
    const int64_t o = offset + shift * ts;
    int64_t k0 = dir > 0 ? 0 : -1, k1 = dir > 0 ? n + 1 : n;
    if (t_lo + k0 == first) ++k0;
    if (t_lo + k1 - 1 == first) --k1;
    const T* __restrict xq = lse_x + o;
    const T* __restrict yq = y + o - dir * ts;
    T* __restrict ak = a - dir * ts;
    if (ts == w) {  // packed rows: one flat loop
      for (int64_t m = k0 * w; m < k1 * w; ++m) logaddexp_partials(yq[m], xq[m], ak[m], aux[m]);
      return;
    }
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t j = k * ts; j < k * ts + w; ++j) logaddexp_partials(yq[j], xq[j], ak[j], aux[j]);
  }

  void operator()(int64_t item, std::tuple<T*, T*> rows, int64_t offset, int64_t n, int64_t w, int64_t lo,
                  std::tuple<T*, T*> carry, const T* aux) const {
    T* const P = std::get<0>(rows);
    T* const H = std::get<1>(rows);
    // Rows ascend in address with the forward's step index; the lowest is step t_lo, at offset o.
    const int64_t t_lo = (adj_reverse ? adj_len - 1 - lo : lo) + shift;
    const int64_t o = offset + shift * ts;
    const T* g_last = gbar + o + (last - t_lo) * ts;  // ḡ_{T-1} of the lanes
    // G per lane: ḡ_{T-1}, or h_c + P_c ḡ_{T-1} after a carry (w <= BlockPolicy::max_lanes).
    T G[ascan::detail::BlockPolicy::max_lanes];
    const T* gl = g_last;
    if (const T* pc = std::get<0>(carry)) {
      const T* hc = std::get<1>(carry);
      for (int64_t j = 0; j < w; ++j) G[j] = adjoint(hc[j], pc[j], g_last[j]);
      gl = G;
    }
    // y_{t-1} of the lowest row (not read at step `first`), or logaddexp's B_t.
    const T* yp = aux ? aux : y + o - dir * ts;
    const bool summing = sum[0] || sum[1];
    // Sums per position of a period of whole rows (vector lanes), folded into the w lanes at the
    // end: 16 positions for one lane, 16 rows of narrow packed rows, one row otherwise.
    const bool packed = ts == w && w < 16;
    const int64_t period = w == 1 ? 16 : packed ? 16 * w : w;
    Acc part[2][std::max(kPattern, ascan::detail::BlockPolicy::max_lanes)];  // period <= kPattern or w
    if (summing) {
      std::fill_n(part[0], period, Acc(0));
      std::fill_n(part[1], period, Acc(0));
    }
    const auto add_sums = [&](const T* p, const T* h, int64_t m) {  // m elements, whole rows
      for (int l = 0; l < 2; ++l) {
        if (!sum[l]) continue;
        const T* v = l == 0 ? p : h;
        Acc* a = part[l];
        int64_t e = 0;
        for (; e + period <= m; e += period)
          for (int64_t q = 0; q < period; ++q) a[q] += Acc(v[e + q]);
        for (int64_t q = 0; e + q < m; ++q) a[q] += Acc(v[e + q]);
      }
    };
    int64_t i0 = 0, i1 = n;
    // The forward's first step: y_{-1} is the product's identity 1, y^b_{-1} is 0.
    const auto first_row = [&](int64_t i) {
      T* p = P + i * ts;
      T* h = H + i * ts;
      for (int64_t j = 0; j < w; ++j) {
        h[j] = adjoint(h[j], p[j], gl[j]);
        p[j] = kProduct ? h[j] : T(0);
      }
      if (summing) add_sums(p, h, w);
    };
    if (t_lo == first) first_row(i0++);
    else if (t_lo + n - 1 == first) first_row(--i1);
    if (packed) {
      // Packed narrow rows: flat loops over whole rows (a loop of w per row would be scalar),
      // with ḡ_{T-1} one value (one lane) or repeated to 16 rows, in pieces of kPattern / 16 rows.
      T pattern[kPattern];
      const int64_t piece = w == 1 ? kPattern : 16 * w;
      if (w > 1)
        for (int64_t q = 0; q < piece; ++q) pattern[q] = gl[q % w];
      const int64_t e1 = i1 * w;
      for (int64_t e = i0 * w; e < e1; e += piece) {
        const int64_t len = std::min(piece, e1 - e);
        if (w == 1) stretch<true>(P + e, H + e, gl, yp + e, len);
        else stretch<false>(P + e, H + e, pattern, yp + e, len);
        if (summing) add_sums(P + e, H + e, len);
      }
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        stretch<false>(P + i * ts, H + i * ts, gl, yp + i * ts, w);
        if (summing) add_sums(P + i * ts, H + i * ts, w);
      }
    }
    if (summing) {
      column_offset[item] = o - t_lo * ts;
      width[item] = w;
      for (int l = 0; l < 2; ++l) {
        if (!sum[l]) continue;
        Acc* dst = sums + (item * 2 + l) * lanes;
        for (int64_t q = 0, j = 0; q < period; ++q) {
          dst[j] += part[l][q];
          if (++j == w) j = 0;
        }
      }
    }
  }

  // g = h + P G, without the term where G is zero (so that a product that overflowed does not
  // turn a zero into a NaN).
  static T adjoint(T h, T p, T G) { return G != T(0) ? h + p * G : h; }

  // n elements: g stored over h, ∂a = g y_{t-1} over P. G is gl[m], or gl[0] for all (kOne).
  template <bool kOne>
  void stretch(T* __restrict p, T* __restrict h, const T* __restrict gl, const T* __restrict yp, int64_t n) const {
    const auto g = [&](int64_t m) { return adjoint(h[m], p[m], gl[kOne ? 0 : m]); };
    if (want_a && want_b) {
      for (int64_t m = 0; m < n; ++m) {
        const T v = g(m);
        h[m] = v;
        p[m] = v * yp[m];
      }
    } else if (want_a) {
      for (int64_t m = 0; m < n; ++m) p[m] = g(m) * yp[m];
    } else {
      for (int64_t m = 0; m < n; ++m) h[m] = g(m);
    }
  }
};

// L == 2: the linear recurrence (xs = {a, b}, the loss on ys[1]); L == 1: the cumulative product
// (xs = {x}), or with `logaddexp` (L == 1, x of the output's shape) the scan whose Jacobians are
// A_t = ∂y_t/∂y_{t-1} and B_t = ∂y_t/∂x_t of a logaddexp scan, evaluated per block by the
// epilogue's prologue (FirstOrderEpilogue::fill_inputs): g_t = ḡ_t + A_{t+1} g_{t+1},
// ∂x_t = B_t g_t (t >= 1), ∂x_0 = g_0.
template <class T, size_t L>
std::vector<Tensor<T>> first_order_vjp_by_scan(const ascan::detail::PointwisePlan& plan, const std::vector<Tensor<T>>& xs,
                                               const std::vector<Tensor<T>>& ys, const Tensor<T>& gbar,
                                               const std::array<bool, L>& need, bool reverse,
                                               bool logaddexp = false) {
  static_assert(L == 1 || L == 2);
  constexpr bool kProduct = L == 1;
  using Outs = GradOutputs<T, L>;
  using Acc = typename Outs::Acc;
  using Flat = std::tuple<Tensor<T>, Tensor<T>>;
  using Epilogue = FirstOrderEpilogue<T, kProduct>;
  const int64_t T_len = plan.length, ts = plan.out_t_stride;
  Outs outs(plan, xs, need);
  // The adjoint scan's leaf 0 (P, then ∂a) and leaf 1 (h, then ∂b) against the gradients: the
  // product's ∂x is leaf 0, its h is not returned.
  const auto grad = [](size_t leaf) { return L == 2 ? leaf : 0; };
  const auto mode = [&](size_t leaf) { return kProduct && leaf == 1 ? Outs::Mode::none : outs.mode[grad(leaf)]; };
  // ∂a over the scan's P, ∂b over its h: the gradients' own tensors where they are returned in
  // the output's shape (elsewhere the scan's scratch; a temporary when the scan stores in place).
  const auto buffer = [&](size_t leaf) {
    return mode(leaf) == Outs::Mode::direct ? outs.full[grad(leaf)] : Tensor<T>::empty(plan.out_shape);
  };
  Tensor<T> ga = buffer(0), gb = buffer(1);
  const int64_t last = reverse ? 0 : T_len - 1, first = reverse ? T_len - 1 : 0, dir = reverse ? -1 : 1;
  // The decay a_t (logaddexp: a placeholder of its layout, the rows come from fill_inputs) and
  // the factor of ∂a_t, y_{t-1}.
  const Tensor<T>& decay = logaddexp ? ys[0] : xs[0];
  const T* const y_prev = ys[L - 1].data();
  Epilogue epi{gbar.data(), y_prev, reverse ? 1 : 0, ts, T_len - 1, !reverse, last, first, dir};
  if (logaddexp) epi.lse_x = xs[0].data();
  for (size_t leaf = 0; leaf < 2; ++leaf) {
    epi.keep[leaf] = mode(leaf) == Outs::Mode::direct;
    epi.sum[leaf] = mode(leaf) == Outs::Mode::summed;
  }
  epi.want_a = mode(0) != Outs::Mode::none;
  epi.want_b = mode(1) != Outs::Mode::none;
  const bool summing = epi.sum[0] || epi.sum[1];
  std::vector<Acc> sums;
  std::vector<int64_t> column_offset, width;
  if (T_len > 1) {
    ascan::detail::PointwisePlan adj = plan;
    adj.length = T_len - 1;
    adj.out_shape[adj.axis] = T_len - 1;
    adj.trivial_columns = false;  // column offsets from the strides (trivial ones assume `length`)
    adj.leaves.resize(2);
    adj.leaves[1] = {ts, true, plan.out_column_strides};  // ḡ has the output's layout
    // Steps t < T - 1 of the scan: indices [0, T - 1) forward, [1, T) in reverse; a_{t+1} sits
    // one index further along the scan.
    const int64_t a_shift = reverse ? 0 : 1;
    const auto view = [&](const Tensor<T>& t, int64_t offset, const Shape& shape) {
      Tensor<T> v;
      ascan::detail::TensorAccess<T>::bind(
          v, ascan::detail::TensorAccess<T>::make_view_header(t, shape.data(), shape.size()),
          const_cast<T*>(t.data()) + offset, t.numel() - offset);
      return v;
    };
    const Flat in{view(decay, a_shift * plan.leaves[0].t_stride, decay.shape()), view(gbar, epi.shift * ts, adj.out_shape)};
    const Flat out{view(ga, epi.shift * ts, adj.out_shape), view(gb, epi.shift * ts, adj.out_shape)};
    const ascan::LinearRecurrence f{};
    ascan::detail::PointwiseRunner<Flat, ascan::LinearRecurrence, Epilogue> runner(f, in, out, adj, !reverse, epi);
    if (summing) {
      epi.lanes = runner.group_lanes();
      sums.assign(runner.num_items() * 2 * epi.lanes, Acc(0));
      column_offset.assign(runner.num_items(), 0);
      width.assign(runner.num_items(), 0);
      epi.sums = sums.data();
      epi.column_offset = column_offset.data();
      epi.width = width.data();
    }
    runner.run();
  }
  // The forward's last step, which the adjoint scan leaves out: g = ḡ_{T-1}.
  const T* g_bar = gbar.data();
  const auto last_step = [&](int64_t e, T& g, T& da) {  // e: an output offset at step `last`
    g = g_bar[e];
    if (T_len == 1) {
      da = kProduct ? g : T(0);
    } else if (logaddexp) {
      T A, B;
      logaddexp_partials(y_prev[e - dir * ts], epi.lse_x[e], A, B);
      da = B * g;
    } else {
      da = g * y_prev[e - dir * ts];
    }
  };
  const int64_t R = plan.run;
  ascan::detail::parallel_for(plan.num_columns, std::max<int64_t>(1, 4096 / R), [&](int64_t c0, int64_t c1) {
    std::array<int64_t, L> leaf_off{};
    for (int64_t c = c0; c < c1; ++c) {
      int64_t off = 0;
      plan.column_offsets(c, leaf_off.data(), off);
      for (int64_t j = 0; j < R; ++j) {
        const int64_t e = off + last * ts + j;
        T g, da;
        last_step(e, g, da);
        if (epi.keep[0]) ga.data()[e] = da;
        if (epi.keep[1]) gb.data()[e] = g;
      }
    }
  });
  if (summing) {
    // Summed leaves: each item's lanes in item order (a column's blocks in order), then the last
    // step, into the slots of the summed tensors.
    std::array<std::vector<Acc>, 2> total;
    for (size_t leaf = 0; leaf < 2; ++leaf)
      if (epi.sum[leaf]) total[leaf].assign(outs.full[grad(leaf)].numel(), Acc(0));
    for (size_t item = 0; item < width.size(); ++item)
      for (size_t leaf = 0; leaf < 2; ++leaf)
        if (epi.sum[leaf])
          for (int64_t j = 0; j < width[item]; ++j)
            total[leaf][outs.summed_offset(column_offset[item]) + j] += sums[(item * 2 + leaf) * epi.lanes + j];
    std::array<int64_t, L> leaf_off{};
    for (int64_t c = 0; c < plan.num_columns; ++c) {
      int64_t off = 0;
      plan.column_offsets(c, leaf_off.data(), off);
      for (int64_t j = 0; j < R; ++j) {
        T g, da;
        last_step(off + last * ts + j, g, da);
        if (epi.sum[0]) total[0][outs.summed_offset(off) + j] += Acc(da);
        if (epi.sum[1]) total[1][outs.summed_offset(off) + j] += Acc(g);
      }
    }
    for (size_t leaf = 0; leaf < 2; ++leaf)
      if (epi.sum[leaf]) std::transform(total[leaf].begin(), total[leaf].end(), outs.full[grad(leaf)].data(), [](Acc v) { return T(v); });
  }
  return outs.finish(xs);
}

ASCAN_ISA_END
}  // namespace ascan::ad::detail
