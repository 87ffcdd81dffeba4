// test_properties.cpp — property tests (RapidCheck): random shapes, dims, directions, broadcast
// leaves, modes and thread counts, each case checked against an independent reference:
//   - the scan equals the sequential fold of tests/reference.hpp (exact where the values make
//     every association exact, within the rounding bound of reference.hpp for float32);
//   - results and gradients are bitwise identical on 1, 2, 3 and 8 threads (8 oversubscribes);
//   - float64 gradients equal central differences of the forward, for random cotangents;
//   - the out-overload in place equals the out-of-place result, bitwise.
// RC_PARAMS sets the number of cases (tests/CMakeLists.txt: 300 per property, fewer under the
// sanitizers; scripts/properties.sh runs thousands).
#include <ascan/ascan.hpp>
#include <ascan/autodiff.hpp>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;

// The reference's combines, written independently of the library's builtins.
constexpr auto plus = [](auto a, auto b) { return a + b; };
constexpr auto larger = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : (b > a ? b : a); };
constexpr auto smaller = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : (b < a ? b : a); };
constexpr auto log_sum_exp = [](double a, double b) {
  if (a == -INFINITY && b == -INFINITY) return -double(INFINITY);
  const double m = std::max(a, b);
  return m + std::log(std::exp(a - m) + std::exp(b - m));
};
// The linear recurrence h = a h + b as a user combine (the library's builtin is another path).
constexpr auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a1 * a2, a2 * b1 + b2};
};
// The same on whole slices, for Generic and batched Generic mode.
constexpr auto affine_slices = [](const auto& l, const auto& r) {
  const auto& [a1, b1] = l;
  const auto& [a2, b2] = r;
  return std::tuple{a1 * a2, a2 * b1 + b2};
};

using ref::ThreadCount;

// Fails the property with the gtest-style message of a reference check.
void require(const ::testing::AssertionResult& r, const std::string& what) {
  if (!r) RC_FAIL(what + ": " + r.message());
}

struct Case {
  Shape shape;
  int64_t dim;  // as passed: -rank .. rank-1
  bool reverse;
  uint64_t seed;
};

std::string str(const Case& c) {
  return "shape " + ref::str(c.shape) + " dim " + std::to_string(c.dim) + (c.reverse ? " reverse" : " forward");
}

// A random shape of rank 1-4 with extents 0-6 (0 rarely), sometimes one long dim (up to `max_numel`
// elements in all), so blocks, chunks, carries and the thread pool are reached.
Case draw_case(int64_t max_numel) {
  Case c;
  const int rank = *rc::gen::inRange(1, 5);
  c.shape.resize(rank);
  for (auto& e : c.shape) e = *rc::gen::inRange(0, 12) == 0 ? 0 : *rc::gen::inRange<int64_t>(1, 7);
  if (*rc::gen::inRange(0, 3) == 0) {
    const int d = *rc::gen::inRange(0, rank);
    c.shape[d] = 1;
    const int64_t rest = std::max<int64_t>(ref::numel(c.shape), 1);
    c.shape[d] = *rc::gen::inRange<int64_t>(7, std::max<int64_t>(8, max_numel / rest + 1));
  }
  while (ref::numel(c.shape) > max_numel) {
    auto& e = *std::max_element(c.shape.begin(), c.shape.end());
    e /= 2;
  }
  c.dim = *rc::gen::inRange(-rank, rank);
  c.reverse = *rc::gen::arbitrary<bool>();
  c.seed = *rc::gen::inRange<uint64_t>(0, 1u << 30);
  RC_TAG(ref::numel(c.shape) >= 4096 ? "large" : "small");
  return c;
}

// A leaf that broadcasts against `full`: some extents 1 and, unless it is leaf 0 (against which
// the dim is resolved), sometimes fewer (leading) dims, keeping rank > dim (DESIGN.md).
Shape draw_broadcast(const Shape& full, const Case& c, bool leaf0) {
  Shape s = full;
  for (auto& e : s)
    if (*rc::gen::inRange(0, 3) == 0) e = 1;
  const int rank = static_cast<int>(full.size());
  const int dim = static_cast<int>(c.dim < 0 ? c.dim + rank : c.dim);
  const int drop = leaf0 ? 0 : *rc::gen::inRange(0, rank - dim);
  s.erase(s.begin(), s.begin() + drop);
  return s;
}

// Values whose sums and products are exact in double whatever the association: multiples of
// 1/8 below 4 in magnitude (sums of at most 2^16 of them) or, for decays, -1, 0 and 1.
Tensor<double> eighths(const Shape& s, uint64_t seed) {
  Tensor<double> t = Tensor<double>::random(s, seed, -4, 4);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = std::round(t.data()[i] * 8) / 8;
  return t;
}
Tensor<double> unit_decays(const Shape& s, uint64_t seed) {
  Tensor<double> t = Tensor<double>::random(s, seed, -1.5, 1.5);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = std::round(t.data()[i]);
  return t;
}

template <class T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
  return a.shape() == b.shape() && (a.numel() == 0 || std::memcmp(a.data(), b.data(), a.numel() * sizeof(T)) == 0);
}

// ---- the scan equals the sequential fold --------------------------------------------------

RC_GTEST_PROP(Properties, ScanEqualsTheSequentialFold, ()) {
  const Case c = draw_case(1 << 16);
  const ThreadCount threads(*rc::gen::inRange(1, 4));
  const ascan::ScanOptions o{.reverse = c.reverse};
  const int kind = *rc::gen::inRange(0, 7);
  RC_CLASSIFY(true, "kind " + std::to_string(kind));
  switch (kind) {
    case 0: {  // add on doubles: exact
      const auto x = eighths(c.shape, c.seed);
      const auto r = ref::pointwise<double, double>(plus, {ref::leaf<double>(x)}, c.dim, c.reverse);
      require(ref::exact(ascan::associative_scan(ascan::add, x, c.dim, o), r.leaves[0], r.shape), "add " + str(c));
      break;
    }
    case 1:
    case 2: {  // the linear recurrence, builtin and as a user combine, with a broadcast leaf: exact
      const auto a = unit_decays(*rc::gen::arbitrary<bool>() ? draw_broadcast(c.shape, c, true) : c.shape, c.seed);
      const auto b = eighths(*rc::gen::arbitrary<bool>() ? draw_broadcast(c.shape, c, false) : c.shape, c.seed + 1);
      using E = std::tuple<double, double>;
      const auto r = ref::pointwise<E, double>(affine, {ref::leaf<double>(a), ref::leaf<double>(b)}, c.dim, c.reverse);
      const auto [ya, yb] = kind == 1 ? ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, c.dim, o)
                                      : ascan::associative_scan(affine, std::tuple{a, b}, c.dim, o);
      require(ref::exact(ya, r.leaves[0], r.shape), "linear recurrence, decays, " + str(c));
      require(ref::exact(yb, r.leaves[1], r.shape), "linear recurrence, states, " + str(c));
      break;
    }
    case 3:
    case 4: {  // max and min with NaNs and infinities: exact (NaN from its position on)
      auto x = eighths(c.shape, c.seed);
      const Tensor<double> pick = Tensor<double>::random(c.shape, c.seed + 2, 0, 1);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double p = pick.data()[i];
        if (p < 0.01) x.data()[i] = NAN;
        else if (p < 0.03) x.data()[i] = INFINITY;
        else if (p < 0.05) x.data()[i] = -INFINITY;
      }
      const auto r = kind == 3 ? ref::pointwise<double, double>(larger, {ref::leaf<double>(x)}, c.dim, c.reverse)
                               : ref::pointwise<double, double>(smaller, {ref::leaf<double>(x)}, c.dim, c.reverse);
      const auto y = kind == 3 ? ascan::associative_scan(ascan::max, x, c.dim, o)
                               : ascan::associative_scan(ascan::min, x, c.dim, o);
      require(ref::near(y, r.leaves[0], r.shape, std::vector<double>(r.leaves[0].size(), 0.0)),
              (kind == 3 ? "max " : "min ") + str(c));
      break;
    }
    case 5: {  // add on float32 against float64: within the rounding bound
      const auto x = ref::data<float>(c.shape, c.seed);
      const auto r = ref::pointwise<double, double>(plus, {ref::leaf<double>(x)}, c.dim, c.reverse);
      const auto m = ref::pointwise<double, double>(plus, {ref::abs(ref::leaf<double>(x))}, c.dim, c.reverse);
      require(ref::near(ascan::associative_scan(ascan::add, x, c.dim, o), r.leaves[0], r.shape,
                        ref::tolerance<float>(r.steps, m.leaves[0])),
              "float32 add " + str(c));
      break;
    }
    case 6: {  // logaddexp on float32 against float64: within the rounding bound
      const auto x = ref::data<float>(c.shape, c.seed, -3, 3);
      const auto r = ref::pointwise<double, double>(log_sum_exp, {ref::leaf<double>(x)}, c.dim, c.reverse);
      std::vector<double> mag(r.leaves[0].size());
      for (size_t i = 0; i < mag.size(); ++i) mag[i] = 3 + std::abs(r.leaves[0][i]) + 1;
      require(ref::near(ascan::associative_scan(ascan::logaddexp, x, c.dim, o), r.leaves[0], r.shape,
                        ref::tolerance<float>(r.steps, mag)),
              "float32 logaddexp " + str(c));
      break;
    }
  }
}

// ---- bitwise identical on 1, 2, 3 and 8 threads -------------------------------------------

// One scan in mode `mode` on float32 inputs, its outputs as a list.
std::vector<Tensor<float>> scan_in_mode(int mode, const Tensor<float>& a, const Tensor<float>& b, int64_t dim,
                                        bool reverse) {
  const ascan::ScanOptions o{.reverse = reverse};
  switch (mode) {
    case 0: return {ascan::associative_scan(ascan::add, b, dim, o)};
    case 1: return {ascan::associative_scan(ascan::mul, a, dim, o)};
    case 2: return {ascan::associative_scan(ascan::logaddexp, b, dim, o)};
    case 3: {
      auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, dim, o);
      return {ya, yb};
    }
    case 4: {
      auto [ya, yb] = ascan::associative_scan(affine, std::tuple{a, b}, dim, o);
      return {ya, yb};
    }
    case 5: {
      auto [ya, yb] = ascan::associative_scan(ascan::generic(affine_slices), std::tuple{a, b}, dim, o);
      return {ya, yb};
    }
    default: {
      auto [ya, yb] = ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{a, b}, dim, o);
      return {ya, yb};
    }
  }
}

// The gradients of sum(w * y) with respect to a and b (mode as above), on float32.
std::vector<Tensor<float>> gradients_in_mode(int mode, const Tensor<float>& a, const Tensor<float>& b,
                                             const Tensor<float>& w, int64_t dim, bool reverse) {
  const ascan::ScanOptions o{.reverse = reverse};
  ad::Tape<float> tape;
  const ad::Var<float> va = ad::param(a), vb = ad::param(b);
  ad::Var<float> y;
  switch (mode) {
    case 0: y = ascan::associative_scan(ascan::add, vb, dim, o); break;
    case 1: y = ascan::associative_scan(ascan::mul, va, dim, o); break;
    case 2: y = ascan::associative_scan(ascan::logaddexp, vb, dim, o); break;
    case 3: y = std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{va, vb}, dim, o)); break;
    case 4: y = std::get<1>(ascan::associative_scan(affine, std::tuple{va, vb}, dim, o)); break;
    case 5: y = std::get<1>(ascan::associative_scan(ascan::generic(affine_slices), std::tuple{va, vb}, dim, o)); break;
    default:
      y = std::get<1>(ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{va, vb}, dim, o));
  }
  ad::backward(ad::sum(y * ad::constant(w)));
  return {va.grad(), vb.grad()};
}

RC_GTEST_PROP(Properties, ResultsAndGradientsAreBitwiseIdenticalOn1238Threads, ()) {
  const int mode = *rc::gen::inRange(0, 7);
  const bool generic = mode >= 5;
  // Generic mode calls the combine on slices (allocating per call): keep its cases smaller.
  const Case c = draw_case(generic ? 1 << 12 : 1 << 16);
  const bool gradients = *rc::gen::inRange(0, 3) == 0 && ref::numel(c.shape) <= (generic ? 1 << 10 : 1 << 14);
  RC_CLASSIFY(true, "mode " + std::to_string(mode) + (gradients ? " gradients" : ""));
  const auto a = Tensor<float>::random(c.shape, c.seed, 0.5f, 1.0f);
  const auto b = Tensor<float>::random(c.shape, c.seed + 1, -1.0f, 1.0f);
  const auto w = Tensor<float>::random(c.shape, c.seed + 2, -1.0f, 1.0f);
  std::vector<Tensor<float>> first;
  for (int n : {1, 2, 3, 8}) {
    const ThreadCount threads(n);
    const auto got = gradients ? gradients_in_mode(mode, a, b, w, c.dim, c.reverse)
                               : scan_in_mode(mode, a, b, c.dim, c.reverse);
    if (first.empty()) {
      first = got;
      continue;
    }
    for (size_t k = 0; k < got.size(); ++k)
      if (!same_bits(got[k], first[k]))
        RC_FAIL("mode " + std::to_string(mode) + (gradients ? " gradient " : " output ") + std::to_string(k) + " on " +
                std::to_string(n) + " threads differs from 1 thread, " + str(c));
  }
}

// ---- float64 gradients equal central differences ------------------------------------------

RC_GTEST_PROP(Properties, GradientsEqualCentralDifferences, ()) {
  Case c = draw_case(48);
  const int mode = *rc::gen::inRange(0, 8);
  RC_CLASSIFY(true, "mode " + std::to_string(mode));
  const ThreadCount threads(*rc::gen::inRange(1, 4));
  const ascan::ScanOptions o{.reverse = c.reverse};
  const bool broadcast = mode == 3 && *rc::gen::arbitrary<bool>();
  std::vector<Tensor<double>> xs{Tensor<double>::random(broadcast ? draw_broadcast(c.shape, c, true) : c.shape, c.seed, 0.5, 1.2),
                                 Tensor<double>::random(c.shape, c.seed + 1, -1, 1)};
  const auto w = Tensor<double>::random(c.shape, c.seed + 2, -1, 1);  // the random cotangent
  const auto f = [&](const std::vector<ad::Var<double>>& v) -> ad::Var<double> {
    const auto& a = v[0];
    const auto& b = v[1];
    switch (mode) {
      case 0: return ascan::associative_scan(ascan::add, b, c.dim, o) + a;
      case 1: return ascan::associative_scan(ascan::mul, a, c.dim, o) * b;
      case 2: return ascan::associative_scan(ascan::logaddexp, b, c.dim, o) * a;
      case 3: return std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, c.dim, o));
      case 4: return ascan::associative_scan(ascan::max, b, c.dim, o) * a;
      case 5: return std::get<1>(ascan::associative_scan(affine, std::tuple{a, b}, c.dim, o));
      case 6: return std::get<1>(ascan::associative_scan(ascan::generic(affine_slices), std::tuple{a, b}, c.dim, o));
      default:
        return std::get<1>(ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{a, b}, c.dim, o));
    }
  };
  const auto loss = [&](const std::vector<Tensor<double>>& in) {
    const ad::NoGradGuard no_grad;
    std::vector<ad::Var<double>> v;
    for (const auto& t : in) v.push_back(ad::constant(t));
    const Tensor<double> y = f(v).value();
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += y.data()[i] * w.data()[i];
    return s;
  };
  std::vector<Tensor<double>> grads;
  {
    ad::Tape<double> tape;
    std::vector<ad::Var<double>> v{ad::param(xs[0]), ad::param(xs[1])};
    ad::backward(f(v), w);
    for (const auto& p : v) grads.push_back(p.grad());
  }
  int checked = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    RC_ASSERT(grads[k].shape() == xs[k].shape());
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      // Fourth-order central differences at three steps large enough that the forward's rounding,
      // divided by the step, stays far below the tolerance. Where they spread the function is not
      // smooth enough there (max near a tie) to judge, and the coordinate is skipped.
      double fd[3];
      const double x0 = xs[k].data()[i];
      const auto at = [&](double dx) {
        xs[k].data()[i] = x0 + dx;
        const double v = loss(xs);
        xs[k].data()[i] = x0;
        return v;
      };
      for (int s = 0; s < 3; ++s) {
        const double h = 1e-3 / (1 << s);
        fd[s] = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
      }
      const double tol = 1e-6 * (1 + std::abs(fd[2]));
      if (std::abs(fd[0] - fd[2]) > tol / 8 || std::abs(fd[1] - fd[2]) > tol / 8) continue;
      ++checked;
      if (!(std::abs(grads[k].data()[i] - fd[2]) <= tol))
        RC_FAIL("mode " + std::to_string(mode) + " leaf " + std::to_string(k) + " element " + std::to_string(i) +
                ": gradient " + std::to_string(grads[k].data()[i]) + ", central difference " + std::to_string(fd[2]) +
                ", " + str(c));
    }
  }
  RC_CLASSIFY(checked == 0, "nothing to check");
}

// ---- the out-overload in place equals out of place ----------------------------------------

RC_GTEST_PROP(Properties, InPlaceEqualsOutOfPlace, ()) {
  const int mode = *rc::gen::inRange(0, 8);
  const Case c = draw_case(mode >= 5 ? 1 << 12 : 1 << 16);
  RC_CLASSIFY(true, "mode " + std::to_string(mode));
  const ThreadCount threads(*rc::gen::inRange(1, 4));
  const ascan::ScanOptions o{.reverse = c.reverse};
  const auto a = Tensor<float>::random(c.shape, c.seed, 0.5f, 1.0f);
  const auto b = Tensor<float>::random(c.shape, c.seed + 1, -1.0f, 1.0f);
  const auto want = mode == 7 ? std::vector<Tensor<float>>{} : scan_in_mode(mode, a, b, c.dim, c.reverse);
  Tensor<float> ya = a.clone(), yb = b.clone();
  switch (mode) {
    case 0: ascan::associative_scan(ascan::add, yb, c.dim, o, yb); break;
    case 1: ascan::associative_scan(ascan::mul, ya, c.dim, o, ya); break;
    case 2: ascan::associative_scan(ascan::logaddexp, yb, c.dim, o, yb); break;
    case 3: ascan::associative_scan(ascan::linear_recurrence, std::tuple{ya, yb}, c.dim, o, std::tie(ya, yb)); break;
    case 4: ascan::associative_scan(affine, std::tuple{ya, yb}, c.dim, o, std::tie(ya, yb)); break;
    case 5: ascan::associative_scan(ascan::generic(affine_slices), std::tuple{ya, yb}, c.dim, o, std::tie(ya, yb)); break;
    case 6:
      ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{ya, yb}, c.dim, o, std::tie(ya, yb));
      break;
    case 7: {  // a std::vector of leaves in Generic mode, against the tuple's out-of-place result
      const auto list_affine = [](const std::vector<Tensor<float>>& l, const std::vector<Tensor<float>>& r) {
        return std::vector<Tensor<float>>{l[0] * r[0], r[0] * l[1] + r[1]};
      };
      std::vector<Tensor<float>> ys{ya, yb};
      ascan::associative_scan(ascan::generic(list_affine), ys, c.dim, o, ys);
      const auto ref = scan_in_mode(5, a, b, c.dim, c.reverse);
      RC_ASSERT(same_bits(ya, ref[0]));
      RC_ASSERT(same_bits(yb, ref[1]));
      return;
    }
  }
  if (mode == 1) {
    RC_ASSERT(same_bits(ya, want[0]));
  } else if (mode == 0 || mode == 2) {
    RC_ASSERT(same_bits(yb, want[0]));
  } else {
    RC_ASSERT(same_bits(ya, want[0]));
    RC_ASSERT(same_bits(yb, want[1]));
  }
}

}  // namespace
