// test_cuda_engines.cu — the device dispatch, index maps, element loads/stores, kernel bodies and
// adjoint run on a sequential host engine (no GPU needed) and must match the host scan and the
// host autodiff gradient. What this cannot check is CUB itself and the launches.
#include <ascan/ascan.hpp>

#include <tuple>
#include <type_traits>
#include <vector>

#include "cuda_test_util.cuh"

namespace {

namespace cd = ascan::cuda::detail;
namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;

// The DeviceEngine interface, run sequentially: a by-key scan restarts every seg_len positions
// (CUB's equality of RowKey), lanes run the same three chunk phases (the carries by this
// by-key scan), index work runs in order.
struct HostEngine {
  template <class Io, class Op>
  static void scan(const Io& io, const Op& op, int64_t n, int64_t seg_len, const char*) {
    using U = std::decay_t<decltype(io(int64_t{0}))>;
    U acc{};
    for (int64_t k = 0; k < n; ++k) {
      const U v = io(k);
      acc = k % seg_len == 0 ? v : op(acc, v);
      io(k, acc);
    }
  }
  template <class Ptrs, class Op>
  static void lanes(const Ptrs& ptrs, const Op& op, int64_t outer, int64_t length, int64_t inner, bool reverse,
                    const char*) {
    using E = typename Ptrs::E;
    const cd::LaneLayout lay = cd::lane_layout(outer, length, inner, reverse);
    const int64_t lanes = lay.lanes();
    std::vector<E> totals(static_cast<size_t>(lanes * (lay.chunks - 1)));
    for (int64_t id = 0; id < lanes * (lay.chunks - 1); ++id) cd::chunk_total_at(ptrs, op, lay, totals.data(), id);
    if (lay.chunks > 1) scan(cd::TotalsIo<E>{totals.data()}, op, lanes * (lay.chunks - 1), lay.chunks - 1, "");
    for (int64_t id = 0; id < lanes * lay.chunks; ++id) cd::chunk_scan_at(ptrs, op, lay, totals.data(), id);
  }
  template <class Fn>
  static void for_each_index(const Fn& fn, int64_t n) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
};


using ascan_test::Layout;
const std::vector<Layout> kLayouts = {
    {{1000}, 0},        {{1}, 0},          {{6, 300}, -1},    {{50, 2}, 0},      {{4, 50, 3}, 1},
    {{3, 40, 4}, 1},    {{2, 33, 5}, 1},   {{2, 30, 6}, -2},  {{4, 50, 7}, 1},   {{5, 40, 8}, -2},
    {{40, 33}, 0},      {{3, 20, 300}, 1}, {{2, 3000, 20}, 1}, {{1000, 9}, 0},   {{3, 1, 4}, 1},
    {{3, 50, 5}, 1},    {{2, 8, 20000}, 1}, {{2, 1 << 18}, 0},  // the last: enough lanes for the sweep
};

ascan::ScanView view_of(const Shape& shape, int64_t dim) {
  return ascan::scan_view(shape, ascan::resolve_dim(dim, static_cast<int64_t>(shape.size()), "test", "leaf 0"));
}

TEST(CudaEngines, ForwardAddInt32MatchesHost) {
  uint64_t seed = 1;
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true}) {
      const auto x = Tensor<int32_t>::random(shape, seed++, -100, 100);
      auto y = Tensor<int32_t>::empty(shape);
      cd::LeafPtrs<int32_t> p;
      cd::slot<0>(p.in) = x.data();
      cd::slot<0>(p.out) = y.data();
      cd::scan_leaves<HostEngine>(ascan::Add{}, p, view_of(shape, dim), reverse);
      ascan_test::expect_same(ascan::associative_scan(ascan::add, x, dim, {.reverse = reverse}), y,
                              ascan_test::describe(shape, dim, reverse));
    }
}

// Not commutative, two leaves of different types (packed elements): operand order shows.
TEST(CudaEngines, ForwardLinearRecurrenceMixedTypesMatchesHost) {
  uint64_t seed = 100;
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true}) {
      const auto a = Tensor<double>::random(shape, seed++, 0.5, 1.0);
      const auto b = Tensor<float>::random(shape, seed++, -1.0f, 1.0f);
      auto ya = Tensor<double>::empty(shape);
      auto yb = Tensor<float>::empty(shape);
      cd::LeafPtrs<double, float> p;
      cd::slot<0>(p.in) = a.data();
      cd::slot<1>(p.in) = b.data();
      cd::slot<0>(p.out) = ya.data();
      cd::slot<1>(p.out) = yb.data();
      cd::scan_leaves<HostEngine>(ascan::LinearRecurrence{}, p, view_of(shape, dim), reverse);
      const auto [wa, wb] =
          ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, dim, {.reverse = reverse});
      const std::string what = ascan_test::describe(shape, dim, reverse);
      ascan_test::expect_same(wa, ya, what + " a", {.rtol = 1e-12, .atol = 1e-12});
      ascan_test::expect_same(wb, yb, what + " b", {.rtol = 1e-5, .atol = 1e-5});
    }
}

template <size_t L, class F>
void expect_gradients(const F& f, uint64_t seed) {
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true}) {
      std::vector<Tensor<double>> xs, gs, dxs;
      for (size_t l = 0; l < L; ++l) {
        xs.push_back(Tensor<double>::random(shape, seed++, 0.5, 1.0));
        gs.push_back(Tensor<double>::randn(shape, seed++));
        dxs.push_back(Tensor<double>::empty(shape));
      }
      ad::Tape<double> tape;
      std::vector<ad::Var<double>> vs;
      for (const auto& x : xs) vs.push_back(ad::param(x));
      std::vector<Tensor<double>> ys;
      ad::Var<double> loss;
      if constexpr (L == 1) {
        const auto y = ad::associative_scan(f, vs[0], dim, {.reverse = reverse});
        ys = {y.value()};
        loss = ad::sum(y * ad::constant(gs[0]));
      } else {
        const auto [y0, y1] = ad::associative_scan(f, std::tuple{vs[0], vs[1]}, dim, {.reverse = reverse});
        ys = {y0.value(), y1.value()};
        loss = ad::sum(y0 * ad::constant(gs[0])) + ad::sum(y1 * ad::constant(gs[1]));
      }
      ad::backward(loss);
      cd::VjpPtrs<double, L> p;
      for (size_t l = 0; l < L; ++l) {
        p.x[l] = xs[l].data();
        p.y[l] = ys[l].data();
        p.g[l] = gs[l].data();
        p.dx[l] = dxs[l].data();
      }
      cd::vjp_leaves<HostEngine, L>(f, p, view_of(shape, dim), reverse);
      for (size_t l = 0; l < L; ++l)
        ascan_test::expect_same(vs[l].grad(), dxs[l],
                                ascan_test::describe(shape, dim, reverse) + " leaf " + std::to_string(l),
                                {.rtol = 1e-9, .atol = 1e-10});
    }
}

TEST(CudaEngines, GradientsMatchHostAutodiff) {
  expect_gradients<1>(ascan::Add{}, 1000);
  expect_gradients<1>(ascan::Mul{}, 2000);
  expect_gradients<1>(ascan::LogAddExp{}, 3000);
  expect_gradients<2>(ascan::LinearRecurrence{}, 4000);
  expect_gradients<2>(Compose{}, 5000);
}

}  // namespace

namespace {

// The magic-number division against plain division, at the edges that break such schemes.
TEST(CudaEngines, DividerMatchesDivision) {
  const int64_t max31 = (int64_t{1} << 31) - 1;
  for (int64_t d : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{8}, int64_t{255}, int64_t{256},
                    int64_t{1000}, int64_t{65537}, (int64_t{1} << 30) + 1, max31}) {
    const cd::Divider fast(d, max31);
    const cd::Divider slow(d, int64_t{1} << 40);
    EXPECT_TRUE(fast.fast);
    EXPECT_FALSE(slow.fast);
    for (int64_t k : {int64_t{0}, int64_t{1}, d - 1, d, d + 1, 3 * d - 1, max31 - 1, max31, int64_t{123456789}}) {
      if (k < 0 || k > max31) continue;
      ASSERT_EQ(fast(k), k / d) << k << " / " << d;
      ASSERT_EQ(slow(k), k / d) << k << " / " << d;
    }
    for (int64_t k = 0; k < 100000; k += 7) ASSERT_EQ(fast(k), k / d) << k << " / " << d;
  }
  EXPECT_EQ(cd::Divider(3, int64_t{1} << 40)(int64_t{1} << 40), (int64_t{1} << 40) / 3);
}

}  // namespace
