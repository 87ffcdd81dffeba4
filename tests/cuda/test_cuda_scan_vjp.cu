// test_cuda_scan_vjp.cu — device scan gradients vs the host autodiff gradient (random cotangents),
// and one ASCAN_COMBINE definition serving the host scan, dual numbers and the device.
#include <ascan/ascan.hpp>
#include <ascan/dual.hpp>

#include <tuple>
#include <vector>

#include "cuda_test_util.cuh"

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;
using ascan_test::expect_same;
using ascan_test::Tol;

// The affine-map combine of the ASCAN_COMBINE documentation (a user-defined linear recurrence).
ASCAN_COMBINE(Affine, l, r, using std::get;
              return std::tuple{get<0>(l) * get<0>(r), get<0>(r) * get<1>(l) + get<1>(r)};);


using ascan_test::Layout;
// Each layout names the engine of the adjoint it reaches.
const std::vector<Layout> kLayouts = {
    {{1000}, 0},          // one row: plain CUB adjoint scan
    {{6, 300}, -1},       // rows: by-key adjoint scan
    {{30011}, 0},         // one long row: the span engine (many spans, a short last tile)
    {{3, 9001}, 1},       // long rows: spans by row
    {{3, 50, 5}, 1},      // few lanes: the lane engine over affine elements
    {{2, 3000, 20}, 1},   // few lanes, long axis: the lane engine, chunked
    {{20000, 7}, 0},      // 7 lanes, 625 chunks each: the carries' by-key scan spans CUB tiles
    {{2, 1 << 18}, 0},    // enough lanes for the one-thread-per-lane backward sweep
    {{3, 1, 4}, 1},       // T = 1: the gradient is the cotangent
    {{3, 0, 4}, 1},       // T = 0: empty
};

template <class F, class T>
Tensor<T> host_grad(const F& f, const Tensor<T>& x, const Tensor<T>& g, int64_t dim, bool reverse) {
  ad::Tape<T> tape;
  const auto xv = ad::param(x);
  const auto y = ad::associative_scan(f, xv, dim, {.reverse = reverse});
  ad::backward(ad::sum(y * ad::constant(g)));
  return xv.grad();
}

template <class F, class T>
std::tuple<Tensor<T>, Tensor<T>> host_grad2(const F& f, const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& ga,
                                            const Tensor<T>& gb, int64_t dim, bool reverse) {
  ad::Tape<T> tape;
  const auto av = ad::param(a);
  const auto bv = ad::param(b);
  const auto [ya, yb] = ad::associative_scan(f, std::tuple{av, bv}, dim, {.reverse = reverse});
  ad::backward(ad::sum(ya * ad::constant(ga)) + ad::sum(yb * ad::constant(gb)));
  return {av.grad(), bv.grad()};
}

// One leaf: device gradient (from the host forward values) == host autodiff gradient.
template <class F, class T>
void expect_grad_parity(const F& f, T lo, T hi, uint64_t seed, Tol tol) {
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true}) {
      const auto x = Tensor<T>::random(shape, seed++, lo, hi);
      const auto g = Tensor<T>::randn(shape, seed++);
      const auto y = ascan::associative_scan(f, x, dim, {.reverse = reverse});
      const auto dx = ascan::cuda::to_device(x);
      const auto dy = ascan::cuda::to_device(y);
      const auto dg = ascan::cuda::to_device(g);
      const auto grad = ascan::cuda::associative_scan_vjp(f, dx, dy, dg, dim, {.reverse = reverse});
      expect_same(host_grad(f, x, g, dim, reverse), ascan::cuda::to_host(grad),
                  ascan_test::describe(shape, dim, reverse), tol);
    }
}

template <class F, class T>
void expect_grad_parity2(const F& f, uint64_t seed, Tol tol) {
  for (const auto& [shape, dim] : kLayouts)
    for (bool reverse : {false, true}) {
      const auto a = Tensor<T>::random(shape, seed++, T(0.5), T(1));
      const auto b = Tensor<T>::randn(shape, seed++);
      const auto ga = Tensor<T>::randn(shape, seed++);
      const auto gb = Tensor<T>::randn(shape, seed++);
      const auto [ya, yb] = ascan::associative_scan(f, std::tuple{a, b}, dim, {.reverse = reverse});
      const auto da = ascan::cuda::to_device(a), db = ascan::cuda::to_device(b);
      const auto dya = ascan::cuda::to_device(ya), dyb = ascan::cuda::to_device(yb);
      const auto dga = ascan::cuda::to_device(ga), dgb = ascan::cuda::to_device(gb);
      const auto [gra, grb] = ascan::cuda::associative_scan_vjp(f, std::tie(da, db), std::tie(dya, dyb),
                                                                std::tie(dga, dgb), dim, {.reverse = reverse});
      const auto [wa, wb] = host_grad2(f, a, b, ga, gb, dim, reverse);
      const std::string what = ascan_test::describe(shape, dim, reverse);
      expect_same(wa, ascan::cuda::to_host(gra), what + " d/da", tol);
      expect_same(wb, ascan::cuda::to_host(grb), what + " d/db", tol);
    }
}

constexpr Tol kDouble{.rtol = 1e-9, .atol = 1e-10};
constexpr Tol kFloat{.rtol = 1e-3, .atol = 1e-3};

TEST(CudaScanVjp, ScalarBuiltinsDouble) {
  ASCAN_REQUIRE_DEVICE();
  expect_grad_parity(ascan::add, -1.0, 1.0, 1, kDouble);
  expect_grad_parity(ascan::mul, 0.9, 1.1, 100, kDouble);
  expect_grad_parity(ascan::max, -1.0, 1.0, 200, kDouble);
  expect_grad_parity(ascan::logaddexp, -3.0, 3.0, 300, kDouble);
}

TEST(CudaScanVjp, AddFloat) {
  ASCAN_REQUIRE_DEVICE();
  expect_grad_parity(ascan::add, -1.0f, 1.0f, 400, kFloat);
}

// Coupled leaves with different cotangents per leaf: a sum of per-leaf VJPs would fail here.
TEST(CudaScanVjp, LinearRecurrence) {
  ASCAN_REQUIRE_DEVICE();
  expect_grad_parity2<ascan::LinearRecurrence, double>(ascan::linear_recurrence, 500, kDouble);
  expect_grad_parity2<ascan::LinearRecurrence, float>(ascan::linear_recurrence, 600, kFloat);
}

TEST(CudaScanVjp, UserCombine) {
  ASCAN_REQUIRE_DEVICE();
  expect_grad_parity2<Affine, double>(Affine{}, 700, kDouble);
  expect_grad_parity2<Compose, double>(Compose{}, 900, kDouble);
}

// End to end on the device: forward scan, then its gradient, for a long sequence.
TEST(CudaScanVjp, ForwardThenGradientOnDevice) {
  ASCAN_REQUIRE_DEVICE();
  const Shape shape{int64_t{1} << 20};
  const auto a = Tensor<float>::random(shape, 800, 0.9f, 1.0f);
  const auto b = Tensor<float>::randn(shape, 801);
  const auto ga = Tensor<float>::randn(shape, 802);
  const auto gb = Tensor<float>::randn(shape, 803);
  const auto da = ascan::cuda::to_device(a), db = ascan::cuda::to_device(b);
  const auto dga = ascan::cuda::to_device(ga), dgb = ascan::cuda::to_device(gb);
  const auto [ya, yb] = ascan::cuda::associative_scan(Affine{}, std::tie(da, db), 0);
  const auto [gra, grb] = ascan::cuda::associative_scan_vjp(Affine{}, std::tie(da, db), std::tie(ya, yb),
                                                            std::tie(dga, dgb), 0);
  const auto [wa, wb] = host_grad2(Affine{}, a, b, ga, gb, 0, false);
  expect_same(wa, ascan::cuda::to_host(gra), "d/da", {.rtol = 1e-2, .atol = 1e-2});
  expect_same(wb, ascan::cuda::to_host(grb), "d/db", {.rtol = 1e-2, .atol = 1e-2});
}

// One definition: host scan, dual numbers (the Jacobian evaluation), host autodiff. Needs no GPU.
TEST(CudaCombineMacro, OneDefinitionServesHostAndDuals) {
  const auto [ya, yb] = ascan::associative_scan(
      Affine{}, std::tuple{Tensor<double>::from({2, 3, 4}, {3}), Tensor<double>::from({1, 1, 1}, {3})}, 0);
  EXPECT_TRUE(ya == Tensor<double>::from({2, 6, 24}, {3}));
  EXPECT_TRUE(yb == Tensor<double>::from({1, 4, 17}, {3}));  // h_t = a_t h_{t-1} + b_t
  using D = ascan::Dual<double, 4>;
  D a1(2.0), b1(1.0), a2(3.0), b2(5.0);
  a1.d[0] = b1.d[1] = a2.d[2] = b2.d[3] = 1.0;
  const auto [ra, rb] = Affine{}(std::tuple{a1, b1}, std::tuple{a2, b2});
  EXPECT_EQ(rb.v, 8.0);           // a2 * b1 + b2
  EXPECT_EQ(rb.d[1], 3.0);        // ∂/∂b1 = a2
  EXPECT_EQ(rb.d[2], 1.0);        // ∂/∂a2 = b1
  EXPECT_EQ(ra.d[0], 3.0);        // ∂(a1 a2)/∂a1 = a2
}

}  // namespace
