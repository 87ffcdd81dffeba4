// test_paths.cpp — every local scan of the host forward scan and every adjoint path of its
// gradient, forced by name (detail/path_override.hpp), over the shapes at their boundaries.
// Forward results are checked against the sequential reference (exact for integer combines,
// within the rounding bound for floats); gradients against float64 directional finite
// differences with random cotangents and directions, and float32 gradients against float64 ones.
// A forced local scan counts the blocks it ran and each case expects some; a forced adjoint path
// that does not apply throws, so a gradient case that passes ran its path. A change of a threshold
// in the policy structs cannot silently move coverage away from an engine.
#include <gtest/gtest.h>

#include <ascan/ascan.hpp>
#include <ascan/detail/path_override.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;
using ascan::detail::AdjointPath;
using ascan::detail::ForcePath;
using ascan::detail::LocalScan;

using ref::bicyclic;  // exact and order-sensitive (a user combine, no vector path)
// The linear recurrence written by a user: non-commutative, evaluated on dual numbers.
constexpr auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a1 * a2, a2 * b1 + b2};
};

std::string describe(const Shape& shape, int64_t dim, bool reverse) {
  return ref::str(shape) + " dim " + std::to_string(dim) + (reverse ? " reverse" : "");
}

template <class U, class T>
Tensor<U> convert(const Tensor<T>& t) {
  auto out = Tensor<U>::empty(t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<U>(t.data()[i]);
  return out;
}

// ---- forward: local scans --------------------------------------------------------------------

enum class Comb { add_i64, bicyclic, add_f32, add_f64, logaddexp_f32, logaddexp_f64, linrec_f32, affine_f32 };
const char* comb_name(Comb c) {
  constexpr const char* names[] = {"add int64", "bicyclic",      "add float32",      "add float64",
                                   "logaddexp float32", "logaddexp float64", "linrec float32", "affine float32"};
  return names[static_cast<int>(c)];
}

// Scans with combine c under the forced local scan k, checks against the reference and returns
// the number of blocks k ran.
int64_t forward_case(LocalScan k, Comb c, const Shape& shape, int64_t dim, bool rev, uint64_t seed) {
  SCOPED_TRACE(std::string(comb_name(c)) + " " + describe(shape, dim, rev) + " forced " + ascan::detail::name(k));
  const ascan::ScanOptions opts{.reverse = rev};
  ForcePath force(k);
  switch (c) {
    case Comb::add_i64: {
      const auto x = Tensor<int64_t>::random(shape, seed, -1000, 1000);
      const auto y = ascan::associative_scan(ascan::add, x, dim, opts);
      const auto plus = [](auto a, auto b) { return a + b; };
      const auto r = ref::pointwise<int64_t, int64_t>(plus, {ref::leaf<int64_t>(x)}, dim, rev);
      EXPECT_TRUE(ref::exact(y, r.leaves[0], r.shape));
      break;
    }
    case Comb::bicyclic: {
      const auto a = Tensor<int64_t>::random(shape, seed, 0, 3);
      const auto b = Tensor<int64_t>::random(shape, seed + 1, 0, 3);
      const auto [ya, yb] = ascan::associative_scan(bicyclic, std::tuple{a, b}, dim, opts);
      using E = std::tuple<int64_t, int64_t>;
      const auto r = ref::pointwise<E, int64_t>(bicyclic, {ref::leaf<int64_t>(a), ref::leaf<int64_t>(b)}, dim, rev);
      EXPECT_TRUE(ref::exact(ya, r.leaves[0], r.shape));
      EXPECT_TRUE(ref::exact(yb, r.leaves[1], r.shape));
      break;
    }
    case Comb::add_f32:
    case Comb::add_f64: {
      const auto check = [&](auto zero) {
        using T = decltype(zero);
        const auto x = ref::data<T>(shape, seed);
        const auto y = ascan::associative_scan(ascan::add, x, dim, opts);
        const auto plus = [](auto a, auto b) { return a + b; };
        const auto r = ref::pointwise<double, double>(plus, {ref::leaf<double>(x)}, dim, rev);
        const auto m = ref::pointwise<double, double>(plus, {ref::abs(ref::leaf<double>(x))}, dim, rev);
        EXPECT_TRUE(ref::near(y, r.leaves[0], r.shape, ref::tolerance<T>(r.steps, m.leaves[0])));
      };
      if (c == Comb::add_f32) check(float{});
      else check(double{});
      break;
    }
    case Comb::logaddexp_f32:
    case Comb::logaddexp_f64: {
      const auto check = [&](auto zero) {
        using T = decltype(zero);
        const auto x = ref::data<T>(shape, seed, -3, 3);
        const auto y = ascan::associative_scan(ascan::logaddexp, x, dim, opts);
        const auto lse = [](double a, double b) { return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b))); };
        const auto r = ref::pointwise<double, double>(lse, {ref::leaf<double>(x)}, dim, rev);
        std::vector<double> magnitude = ref::abs(r.leaves[0]);
        for (double& v : magnitude) v += 4;  // max|x| + |y| + 1
        EXPECT_TRUE(ref::near(y, r.leaves[0], r.shape, ref::tolerance<T>(r.steps, magnitude)));
      };
      if (c == Comb::logaddexp_f32) check(float{});
      else check(double{});
      break;
    }
    case Comb::linrec_f32:
    case Comb::affine_f32: {
      const auto a = ref::data<float>(shape, seed, -0.95, 0.95);
      const auto b = ref::data<float>(shape, seed + 1);
      std::tuple<Tensor<float>, Tensor<float>> y;
      if (c == Comb::linrec_f32) y = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, dim, opts);
      else y = ascan::associative_scan(affine, std::tuple{a, b}, dim, opts);
      using E = std::tuple<double, double>;
      const auto r = ref::pointwise<E, double>(affine, {ref::leaf<double>(a), ref::leaf<double>(b)}, dim, rev);
      const auto m = ref::pointwise<E, double>(affine, {ref::abs(ref::leaf<double>(a)), ref::abs(ref::leaf<double>(b))},
                                               dim, rev);
      EXPECT_TRUE(ref::near(std::get<0>(y), r.leaves[0], r.shape, ref::tolerance<float>(r.steps, m.leaves[0], 8, 1e-30)));
      EXPECT_TRUE(ref::near(std::get<1>(y), r.leaves[1], r.shape, ref::tolerance<float>(r.steps, m.leaves[1], 8, 1e-30)));
      break;
    }
  }
  return ForcePath::blocks_forced();
}

struct ShapeCase {
  Shape shape;
  int64_t dim;
};

// Runs local scan k over every combine and shape and expects it to have run blocks of each.
void forward_engine(LocalScan k, const std::vector<Comb>& combs, const std::vector<ShapeCase>& shapes) {
  uint64_t seed = 100;
  for (const ShapeCase& s : shapes)
    for (bool rev : {false, true})
      for (Comb c : combs)
        EXPECT_GT(forward_case(k, c, s.shape, s.dim, rev, seed++), 0)
            << ascan::detail::name(k) << " did not run for " << comb_name(c) << " " << describe(s.shape, s.dim, rev);
}

const std::vector<Comb> kAllCombs = {Comb::add_i64,       Comb::bicyclic,      Comb::add_f32,    Comb::add_f64,
                                     Comb::logaddexp_f32, Comb::logaddexp_f64, Comb::linrec_f32, Comb::affine_f32};
// The combines the vector local scans take (float or double leaves of one type).
const std::vector<Comb> kVectorCombs = {Comb::add_f32,       Comb::add_f64,    Comb::logaddexp_f32,
                                        Comb::logaddexp_f64, Comb::linrec_f32, Comb::affine_f32};
const std::vector<Comb> kWideCombs = {Comb::logaddexp_f32, Comb::logaddexp_f64};

// Rows per segment, and so the rows a segmented local scan needs, come from LocalScanPolicy:
// the shapes sit at those minimums, one above, and at many blocks (2^17 + 3 rows).
constexpr int64_t kMinRows = ascan::detail::LocalScanPolicy::min_segment_rows;
constexpr int64_t kManyBlocks = (int64_t{1} << 17) + 3;
// Rows of 16 or more lanes this many elements or fewer run in one pass (no blocks to force).
constexpr int64_t kOnePass = ascan::detail::ThreadPolicy::one_pass_max_elements;

TEST(LocalScans, SequenceVectorsWide) {
  const int64_t n = 8 * ascan::detail::LocalScanPolicy::wide_segment_groups * kMinRows;
  forward_engine(LocalScan::sequence_vectors_wide, kWideCombs, {{{n}, 0}, {{n + 1}, 0}, {{kManyBlocks}, 0}, {{3, n + 5}, 1}});
}

TEST(LocalScans, SequenceVectors) {
  forward_engine(LocalScan::sequence_vectors, kVectorCombs,
                 {{{8 * kMinRows}, 0}, {{8 * kMinRows + 1}, 0}, {{kManyBlocks}, 0}, {{5, 300}, 1}});
}

TEST(LocalScans, SequenceChains) {
  forward_engine(LocalScan::sequence_chains, kAllCombs,
                 {{{8 * kMinRows}, 0}, {{8 * kMinRows + 1}, 0}, {{kManyBlocks}, 0}, {{5, 300}, -1}});
}

TEST(LocalScans, Sequence) {
  forward_engine(LocalScan::sequence, kAllCombs, {{{1}, 0}, {{2}, 0}, {{8 * kMinRows + 1}, 0}, {{kManyBlocks}, 0}, {{5, 37}, 1}});
}

TEST(LocalScans, NarrowWide) {
  const int64_t n = ascan::detail::LocalScanPolicy::wide_narrow_segments * kMinRows;
  forward_engine(LocalScan::narrow_wide, kWideCombs, {{{n, 2}, 0}, {{n + 1, 7}, 0}, {{5000, 15}, 0}});
}

TEST(LocalScans, NarrowChains) {
  forward_engine(LocalScan::narrow_chains, kAllCombs, {{{2 * kMinRows, 2}, 0}, {{2 * kMinRows + 1, 7}, 0}, {{5000, 15}, 0}});
}

TEST(LocalScans, LanesChains) {
  // Rows of 16 lanes or more with more elements than a one-pass scan takes.
  const int64_t rows16 = kOnePass / 16 + 1, rows31 = kOnePass / 31 + 1;
  forward_engine(LocalScan::lanes_chains, kAllCombs,
                 {{{4 * kMinRows, 2}, 0}, {{4 * kMinRows + 1, 3}, 0}, {{rows16, 16}, 0}, {{rows31, 31}, 0}});
}

TEST(LocalScans, Narrow) {
  forward_engine(LocalScan::narrow, kAllCombs, {{{1, 2}, 0}, {{31, 7}, 0}, {{5000, 15}, 0}});
}

TEST(LocalScans, Lanes) {
  forward_engine(LocalScan::lanes, kAllCombs,
                 {{{3, 2}, 0}, {{kOnePass / 17 + 1, 17}, 0}, {{kOnePass / 1025 + 1, 1025}, 0}, {{3, 900, 5}, 1}});
}

// ---- gradients: adjoint paths ----------------------------------------------------------------

enum class Grad { add, mul, max, logaddexp, linrec_b, linrec_both, affine_both };
const char* grad_name(Grad g) {
  constexpr const char* names[] = {"add", "mul", "max", "logaddexp", "linrec (loss on y^b)", "linrec", "affine"};
  return names[static_cast<int>(g)];
}

// The inputs of a gradient case (leaf 1's shape is used by the two-leaf combines).
template <class T>
std::vector<Tensor<T>> grad_inputs(Grad g, const Shape& s0, const Shape& s1, uint64_t seed) {
  switch (g) {
    case Grad::mul: return {Tensor<T>::random(s0, seed, T(0.9), T(1.1))};
    case Grad::logaddexp: return {Tensor<T>::random(s0, seed, T(-2), T(2))};
    case Grad::linrec_b:
    case Grad::linrec_both:
    case Grad::affine_both: return {Tensor<T>::random(s0, seed, T(-0.95), T(0.95)), Tensor<T>::random(s1, seed + 1, T(-1), T(1))};
    default: return {Tensor<T>::random(s0, seed, T(-1), T(1))};
  }
}

// The scan's outputs for inputs xs (Vars on the current tape), as a list.
template <class T>
std::vector<ad::Var<T>> grad_scan(Grad g, const std::vector<ad::Var<T>>& xs, int64_t dim, bool rev) {
  const ascan::ScanOptions opts{.reverse = rev};
  switch (g) {
    case Grad::add: return {ascan::associative_scan(ascan::add, xs[0], dim, opts)};
    case Grad::mul: return {ascan::associative_scan(ascan::mul, xs[0], dim, opts)};
    case Grad::max: return {ascan::associative_scan(ascan::max, xs[0], dim, opts)};
    case Grad::logaddexp: return {ascan::associative_scan(ascan::logaddexp, xs[0], dim, opts)};
    case Grad::affine_both: {
      const auto [ya, yb] = ascan::associative_scan(affine, std::tuple{xs[0], xs[1]}, dim, opts);
      return {ya, yb};
    }
    default: {
      const auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{xs[0], xs[1]}, dim, opts);
      return {ya, yb};
    }
  }
}

// Gradients of sum_l <gbar_l, y_l> (gbar_0 absent for the loss on y^b alone) under path p.
template <class T>
std::vector<Tensor<T>> grads(Grad g, AdjointPath p, const std::vector<Tensor<T>>& x, const std::vector<Tensor<T>>& gbar,
                             int64_t dim, bool rev) {
  ad::Tape<T> tape;
  std::vector<ad::Var<T>> xs;
  for (const auto& t : x) xs.push_back(ad::param(t));
  const auto ys = grad_scan(g, xs, dim, rev);
  ad::Var<T> loss;
  for (size_t l = (g == Grad::linrec_b ? 1 : 0); l < ys.size(); ++l) {
    const auto term = ad::sum(ys[l] * ad::constant(gbar[l]));
    loss = loss.valid() ? loss + term : term;
  }
  {
    ForcePath force(p);
    ad::backward(loss);
  }
  std::vector<Tensor<T>> out;
  for (const auto& v : xs) out.push_back(v.grad());
  return out;
}

// sum_l <gbar_l, y_l(x)> in float64 (the forward scan alone).
double loss_at(Grad g, const std::vector<Tensor<double>>& x, const std::vector<Tensor<double>>& gbar, int64_t dim, bool rev) {
  ad::Tape<double> tape;
  ad::NoGradGuard no_grad;
  std::vector<ad::Var<double>> xs;
  for (const auto& t : x) xs.push_back(ad::constant(t));
  const auto ys = grad_scan(g, xs, dim, rev);
  double sum = 0;
  for (size_t l = (g == Grad::linrec_b ? 1 : 0); l < ys.size(); ++l)
    for (int64_t i = 0; i < ys[l].numel(); ++i) sum += ys[l].value().data()[i] * gbar[l].data()[i];
  return sum;
}

void grad_case(AdjointPath p, Grad g, const Shape& s0, const Shape& s1, int64_t dim, bool rev, uint64_t seed) {
  SCOPED_TRACE(std::string(grad_name(g)) + " " + describe(s0, dim, rev) + " leaf 1 " + ref::str(s1) + " forced " +
               ascan::detail::name(p));
  const auto x = grad_inputs<double>(g, s0, s1, seed);
  Shape out = s0;  // the broadcast shape: each leaf's dims of 1 stretched
  if (x.size() > 1)
    for (size_t d = 0; d < out.size(); ++d) out[d] = std::max(s0[d], s1[d]);
  const size_t outputs = x.size();
  std::vector<Tensor<double>> gbar;
  for (size_t l = 0; l < outputs; ++l) gbar.push_back(Tensor<double>::randn(out, seed + 10 + l));
  const auto dx = grads(g, p, x, gbar, dim, rev);
  // Directional derivatives along two random directions, by central differences in float64.
  const double h = 1e-5;
  for (uint64_t dir = 0; dir < 2; ++dir) {
    std::vector<Tensor<double>> plus, minus;
    double analytic = 0, scale = 1;
    for (size_t l = 0; l < x.size(); ++l) {
      const auto v = Tensor<double>::randn(x[l].shape(), seed + 20 + 2 * dir + l);
      auto xp = Tensor<double>::empty(x[l].shape()), xm = Tensor<double>::empty(x[l].shape());
      for (int64_t i = 0; i < x[l].numel(); ++i) {
        xp.data()[i] = x[l].data()[i] + h * v.data()[i];
        xm.data()[i] = x[l].data()[i] - h * v.data()[i];
        analytic += dx[l].data()[i] * v.data()[i];
        scale += std::abs(dx[l].data()[i] * v.data()[i]);
      }
      plus.push_back(xp);
      minus.push_back(xm);
    }
    const double numeric = (loss_at(g, plus, gbar, dim, rev) - loss_at(g, minus, gbar, dim, rev)) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-6 * scale) << "direction " << dir;
  }
  // The same path in float32 against the float64 gradients.
  std::vector<Tensor<float>> xf, gf;
  for (const auto& t : x) xf.push_back(convert<float>(t));
  for (const auto& t : gbar) gf.push_back(convert<float>(t));
  const auto dxf = grads(g, p, xf, gf, dim, rev);
  for (size_t l = 0; l < x.size(); ++l) {
    double max_abs = 0;
    for (int64_t i = 0; i < dx[l].numel(); ++i) max_abs = std::max(max_abs, std::abs(dx[l].data()[i]));
    const int64_t steps = out[dim < 0 ? dim + static_cast<int64_t>(out.size()) : dim];
    const double tol = 64 * std::sqrt(static_cast<double>(steps)) * 6e-8 * (1 + max_abs);
    for (int64_t i = 0; i < dx[l].numel(); ++i)
      ASSERT_NEAR(dxf[l].data()[i], dx[l].data()[i], tol) << "leaf " << l << " element " << i;
  }
}

struct GradShape {
  Shape s0, s1;  // leaf shapes (s1 for the two-leaf combines)
  int64_t dim;
};

// Boundary shapes of the adjoint paths: one step, two, a sequence, rows of 2 and 3 lanes (the
// column sweep's minimum), of 7, of 16 and 17 (the padded items' width), 48 (wide items), 130
// (more than a line sweep's minimum for the product), one-lane columns contiguous along the scan
// ([B, T] along T), a scan in the middle, broadcast leaves (a decay constant along the scan, one
// value over the lanes), and the sizes past the segment sweep's segment (512 steps), its
// whole-column mode (256 columns or more) and a line sweep's item (512 lanes).
const std::vector<GradShape> kGradShapes = {
    {{1}, {1}, 0},           {{2}, {2}, 0},           {{300}, {300}, 0},       {{40, 2}, {40, 2}, 0},
    {{40, 3}, {40, 3}, 0},   {{30, 7}, {30, 7}, 0},   {{20, 16}, {20, 16}, 0}, {{10, 17}, {10, 17}, 0},
    {{6, 48}, {6, 48}, 0},   {{5, 130}, {5, 130}, 0}, {{6, 60}, {6, 60}, 1},   {{3, 20, 5}, {3, 20, 5}, 1},
    {{1, 7}, {30, 7}, 0},    {{30, 1}, {30, 7}, 0},   {{2, 1, 9}, {2, 25, 9}, 1},
    // Longer than one segment of the segment sweep (its two passes and the chain between them),
    // many one-lane columns (whole columns as its lanes), rows wider than a line sweep's item.
    {{1100}, {1100}, 0},     {{600, 2}, {600, 2}, 0}, {{300, 16}, {300, 16}, 1}, {{3, 600}, {3, 600}, 0}};

void adjoint_path(AdjointPath p, const std::vector<Grad>& gs) {
  uint64_t seed = 500;
  for (const GradShape& s : kGradShapes)
    for (bool rev : {false, true})
      for (Grad g : gs) {
        const bool two_leaves = g == Grad::linrec_b || g == Grad::linrec_both || g == Grad::affine_both;
        if (!two_leaves && s.s0 != s.s1) continue;  // broadcasting needs a second leaf
        grad_case(p, g, s.s0, s.s1, s.dim, rev, seed++);
      }
}

TEST(AdjointPaths, SumByScan) { adjoint_path(AdjointPath::sum_by_scan, {Grad::add}); }
TEST(AdjointPaths, FirstOrderLines) { adjoint_path(AdjointPath::first_order_lines, {Grad::linrec_b, Grad::mul}); }
TEST(AdjointPaths, FirstOrderByScan) {
  adjoint_path(AdjointPath::first_order_by_scan, {Grad::linrec_b, Grad::mul, Grad::logaddexp});
}
TEST(AdjointPaths, LogAddExpLines) { adjoint_path(AdjointPath::logaddexp_lines, {Grad::logaddexp}); }
TEST(AdjointPaths, ColumnSweep) {
  adjoint_path(AdjointPath::column_sweep,
               {Grad::add, Grad::mul, Grad::max, Grad::logaddexp, Grad::linrec_both, Grad::affine_both});
}
TEST(AdjointPaths, SegmentSweep) {
  adjoint_path(AdjointPath::segment_sweep,
               {Grad::add, Grad::mul, Grad::max, Grad::logaddexp, Grad::linrec_both, Grad::affine_both});
}

// A forced path that does not apply to the combine is an error, not a silent fallback.
TEST(AdjointPaths, ForcedPathThatDoesNotApplyThrows) {
  const auto x = Tensor<double>::randn({10}, 1);
  EXPECT_THROW(grads<double>(Grad::max, AdjointPath::sum_by_scan, {x}, {x}, 0, false), ascan::Error);
  EXPECT_THROW(grads<double>(Grad::linrec_both, AdjointPath::first_order_lines, {x, x}, {x, x}, 0, false), ascan::Error);
}

}  // namespace
