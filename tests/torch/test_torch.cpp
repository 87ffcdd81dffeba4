// test_torch.cpp — the LibTorch bridge (include/ascan/torch.hpp) against independent references:
// the same recurrence as a loop of LibTorch ops (values, and gradients by torch autograd through
// the loop, with random cotangents, float64), central differences of the bridge's own loss in
// float64, float32 against float64, and the errors a torch user can make.
#include <ascan/torch.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;
using List = std::vector<Tensor>;
// A combine on whole slices of LibTorch tensors, for the reference loop.
using TorchCombine = std::function<List(const List&, const List&)>;
// The op under test: leaves -> outputs (one of the bridge's overloads).
using Op = std::function<List(const List&)>;

// The scan as a loop of LibTorch ops: leaves broadcast, then y_t = f(y_{t-1}, x_t) over the
// slices along dim (reverse: from the end), stacked back. Differentiable by torch autograd.
List loop_scan(const TorchCombine& f, const List& leaves, int64_t dim, bool reverse) {
  const List xs = at::broadcast_tensors(leaves);
  const int64_t rank = xs[0].dim();
  const int64_t d = dim < 0 ? dim + rank : dim;
  const int64_t n = xs[0].size(d);
  const size_t L = xs.size();
  if (n == 0) {
    List out;
    for (const auto& x : xs) out.push_back(x.clone());
    return out;
  }
  std::vector<List> steps(n);
  List acc;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t t = reverse ? n - 1 - s : s;
    List x_t;
    for (const auto& x : xs) x_t.push_back(x.select(d, t));
    acc = s == 0 ? x_t : f(acc, x_t);
    steps[t] = acc;
  }
  List out;
  for (size_t l = 0; l < L; ++l) {
    List slices;
    for (int64_t t = 0; t < n; ++t) slices.push_back(steps[t][l]);
    out.push_back(at::stack(slices, d));
  }
  return out;
}

const TorchCombine t_add = [](const List& a, const List& b) { return List{a[0] + b[0]}; };
const TorchCombine t_mul = [](const List& a, const List& b) { return List{a[0] * b[0]}; };
const TorchCombine t_max = [](const List& a, const List& b) {
  return List{at::where((a[0] > b[0]).logical_or(at::isnan(a[0])), a[0], b[0])};
};
const TorchCombine t_min = [](const List& a, const List& b) {
  return List{at::where((a[0] < b[0]).logical_or(at::isnan(a[0])), a[0], b[0])};
};
const TorchCombine t_logaddexp = [](const List& a, const List& b) { return List{at::logaddexp(a[0], b[0])}; };
const TorchCombine t_linrec = [](const List& l, const List& r) { return List{l[0] * r[0], r[0] * l[1] + r[1]}; };
// Complex diagonal recurrence h_t = λ_t h_{t-1} + b_t on (Re λ, Im λ, Re b, Im b).
const TorchCombine t_complex = [](const List& l, const List& r) {
  const Tensor &ar1 = l[0], &ai1 = l[1], &br1 = l[2], &bi1 = l[3];
  const Tensor &ar2 = r[0], &ai2 = r[1], &br2 = r[2], &bi2 = r[3];
  return List{ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2, ar2 * br1 - ai2 * bi1 + br2, ar2 * bi1 + ai2 * br1 + bi2};
};

}  // namespace

// User combines, for host and device (ASCAN_COMBINE) and as a generic lambda.
ASCAN_COMBINE(Affine, l, r, using std::get; return std::tuple{get<0>(l) * get<0>(r), get<0>(r) * get<1>(l) + get<1>(r)};);
ASCAN_COMBINE(ComplexDiagonal, l, r, {
  const auto& [ar1, ai1, br1, bi1] = l;
  const auto& [ar2, ai2, br2, bi2] = r;
  return std::tuple{ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2, ar2 * br1 - ai2 * bi1 + br2,
                    ar2 * bi1 + ai2 * br1 + bi2};
});

namespace {

auto opts64() { return at::TensorOptions().dtype(at::kDouble); }

// Σ_o <w_o, y_o>: the scalar whose gradient is the vector-Jacobian product with cotangents w.
Tensor pair_loss(const List& ys, const List& ws) {
  Tensor loss = at::zeros({}, ys[0].options());
  for (size_t o = 0; o < ys.size(); ++o) loss = loss + (ys[o] * ws[o]).sum();
  return loss;
}

List with_grad(const List& xs) {
  List out;
  for (const auto& x : xs) out.push_back(x.detach().clone().set_requires_grad(true));
  return out;
}

double max_abs(const Tensor& a) { return a.numel() == 0 ? 0.0 : a.abs().max().item<double>(); }

double max_abs_diff(const Tensor& a, const Tensor& b) { return max_abs(a.to(at::kDouble) - b.to(at::kDouble)); }

// Checks one case: values and gradients (random cotangents) against the loop, the gradient
// against central differences of the bridge's own loss along random directions, and float32
// against float64. rtol scales the float32 comparison.
void check_case(const Op& op, const TorchCombine& f, const List& inputs, int64_t dim, bool reverse,
                double f32_tol = 2e-4) {
  at::manual_seed(7);
  const List xs_ref = with_grad(inputs), xs = with_grad(inputs);
  const List y_ref = loop_scan(f, xs_ref, dim, reverse);
  const List y = op(xs);
  ASSERT_EQ(y.size(), y_ref.size());
  List ws;
  for (size_t o = 0; o < y.size(); ++o) {
    ASSERT_EQ(y[o].sizes(), y_ref[o].sizes()) << "output " << o;
    ASSERT_EQ(y[o].scalar_type(), at::kDouble);
    EXPECT_LE(max_abs_diff(y[o], y_ref[o]), 1e-10 * (1 + max_abs(y_ref[o]))) << "output " << o;
    ws.push_back(at::randn(y[o].sizes(), opts64()));
  }
  if (y[0].numel() == 0) return;
  const List g_ref = torch::autograd::grad({pair_loss(y_ref, ws)}, xs_ref);
  const List g = torch::autograd::grad({pair_loss(y, ws)}, xs);
  for (size_t k = 0; k < xs.size(); ++k) {
    ASSERT_EQ(g[k].sizes(), xs[k].sizes()) << "gradient of leaf " << k;
    EXPECT_LE(max_abs_diff(g[k], g_ref[k]), 1e-9 * (1 + max_abs(g_ref[k]))) << "gradient of leaf " << k;
  }
  // Central differences of <w, scan(x)> along random directions v: (L(x + εv) - L(x - εv)) / 2ε
  // against Σ_k <g_k, v_k>, with no autograd involved in the differences.
  for (int dir = 0; dir < 3; ++dir) {
    List up, down;
    double analytic = 0;
    const double eps = 1e-6;
    for (size_t k = 0; k < xs.size(); ++k) {
      const Tensor v = at::randn(xs[k].sizes(), opts64());
      analytic += (g[k] * v).sum().item<double>();
      up.push_back(inputs[k].detach() + eps * v);
      down.push_back(inputs[k].detach() - eps * v);
    }
    at::NoGradGuard no_grad;
    const double numeric = (pair_loss(op(up), ws) - pair_loss(op(down), ws)).item<double>() / (2 * eps);
    EXPECT_NEAR(numeric, analytic, 1e-6 * (1 + std::abs(analytic))) << "direction " << dir;
  }
  // float32: values and gradients within f32_tol (relative to the float64 magnitude).
  List xs32;
  for (const auto& x : inputs) xs32.push_back(x.detach().to(at::kFloat).set_requires_grad(true));
  const List y32 = op(xs32);
  List ws32;
  for (const auto& w : ws) ws32.push_back(w.to(at::kFloat));
  const List g32 = torch::autograd::grad({pair_loss(y32, ws32)}, xs32);
  for (size_t o = 0; o < y.size(); ++o) {
    ASSERT_EQ(y32[o].scalar_type(), at::kFloat);
    EXPECT_LE(max_abs_diff(y32[o], y[o]), f32_tol * (1 + max_abs(y[o]))) << "float32 output " << o;
  }
  for (size_t k = 0; k < xs.size(); ++k)
    EXPECT_LE(max_abs_diff(g32[k], g[k]), f32_tol * (1 + max_abs(g[k]))) << "float32 gradient " << k;
}

Op single(const auto& combine, int64_t dim, bool reverse) {
  return [=](const List& xs) { return List{ascan::torch::associative_scan(combine, xs[0], dim, {.reverse = reverse})}; };
}

Op pair(const auto& combine, int64_t dim, bool reverse) {
  return [=](const List& xs) {
    auto [a, b] = ascan::torch::associative_scan(combine, std::tuple{xs[0], xs[1]}, dim, {.reverse = reverse});
    return List{a, b};
  };
}

struct Layout {
  std::vector<int64_t> shape;
  int64_t dim;
  bool reverse;
};

// Shapes with the scan dim first, inner, last; negative dims; reverse; T = 1.
const std::vector<Layout> kLayouts = {{{37}, 0, false},       {{5, 29}, 1, false},     {{5, 29}, -1, true},
                                      {{23, 4, 3}, 0, true},  {{3, 19, 6}, -2, false}, {{2, 3, 1}, 2, false},
                                      {{1, 7}, 0, true}};

Tensor decays(const std::vector<int64_t>& shape) { return at::rand(shape, opts64()) * 0.6 + 0.4; }

}  // namespace

TEST(TorchBridge, Add) {
  for (const auto& c : kLayouts) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << (c.reverse ? " reverse" : ""));
    check_case(single(ascan::add, c.dim, c.reverse), t_add, {at::randn(c.shape, opts64())}, c.dim, c.reverse);
  }
}

TEST(TorchBridge, Mul) {
  for (const auto& c : kLayouts) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << (c.reverse ? " reverse" : ""));
    check_case(single(ascan::mul, c.dim, c.reverse), t_mul, {at::rand(c.shape, opts64()) + 0.5}, c.dim, c.reverse);
  }
}

TEST(TorchBridge, MaxAndMin) {
  for (const auto& c : kLayouts) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << (c.reverse ? " reverse" : ""));
    check_case(single(ascan::max, c.dim, c.reverse), t_max, {at::randn(c.shape, opts64())}, c.dim, c.reverse);
    check_case(single(ascan::min, c.dim, c.reverse), t_min, {at::randn(c.shape, opts64())}, c.dim, c.reverse);
  }
}

TEST(TorchBridge, LogAddExp) {
  for (const auto& c : kLayouts) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << (c.reverse ? " reverse" : ""));
    check_case(single(ascan::logaddexp, c.dim, c.reverse), t_logaddexp, {at::randn(c.shape, opts64()) * 3}, c.dim,
               c.reverse);
  }
}

TEST(TorchBridge, LinearRecurrenceBuiltinAndUserCombines) {
  const auto lambda = [](auto l, auto r) {
    auto [a1, b1] = l;
    auto [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  for (const auto& c : kLayouts) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << (c.reverse ? " reverse" : ""));
    const List in{decays(c.shape), at::randn(c.shape, opts64())};
    check_case(pair(ascan::linear_recurrence, c.dim, c.reverse), t_linrec, in, c.dim, c.reverse);
    check_case(pair(Affine{}, c.dim, c.reverse), t_linrec, in, c.dim, c.reverse);
    check_case(pair(lambda, c.dim, c.reverse), t_linrec, in, c.dim, c.reverse);
  }
}

TEST(TorchBridge, ComplexDiagonalRecurrenceOfFourLeaves) {
  // S5-style: |λ| < 1, a loss on all four outputs (every leaf's gradient couples through λ).
  const Op op = [](const List& xs) {
    return ascan::torch::associative_scan<4>(ComplexDiagonal{}, xs, 1);
  };
  const std::vector<int64_t> shape{3, 41, 5};
  const Tensor radius = at::rand(shape, opts64()) * 0.5 + 0.45, angle = at::rand(shape, opts64()) * 6.28;
  const List in{radius * at::cos(angle), radius * at::sin(angle), at::randn(shape, opts64()), at::randn(shape, opts64())};
  check_case(op, t_complex, in, 1, false);
  const Op rev = [](const List& xs) { return ascan::torch::associative_scan<4>(ComplexDiagonal{}, xs, -2, {.reverse = true}); };
  check_case(rev, t_complex, in, -2, true);
}

TEST(TorchBridge, BroadcastLeavesGetGradientsInTheirOwnShape) {
  // A decay shared over the feature dim ([B, T, 1]) and over the batch ([1, T, D]); a scalar
  // decay per step ([T, 1]) against a rank-3 input.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{4, 31, 1}, {4, 31, 6}}, {{1, 31, 6}, {4, 31, 6}}, {{31, 1}, {4, 31, 6}}, {{4, 1, 6}, {4, 31, 6}}};
  for (const auto& [sa, sb] : shapes) {
    SCOPED_TRACE(testing::Message() << "decay rank " << sa.size() << ", extents " << sa[0] << " x " << sa[1]);
    const List in{decays(sa), at::randn(sb, opts64())};
    check_case(pair(ascan::linear_recurrence, -2, false), t_linrec, in, -2, false);
    check_case(pair(Affine{}, -2, true), t_linrec, in, -2, true);
  }
}

TEST(TorchBridge, EmptyAndSingleStepScans) {
  for (int64_t n : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "T = " << n);
    check_case(single(ascan::add, 1, false), t_add, {at::randn({3, n, 2}, opts64())}, 1, false);
    check_case(pair(ascan::linear_recurrence, 0, true), t_linrec, {decays({n, 4}), at::randn({n, 4}, opts64())}, 0,
               true);
  }
  const Tensor x = at::randn({3, 0, 2}, opts64()).set_requires_grad(true);
  const Tensor y = ascan::torch::associative_scan(ascan::add, x, 1);
  EXPECT_EQ(y.sizes(), x.sizes());
  y.sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(TorchBridge, IntegerDtypesRunForwardExactly) {
  const Tensor a = at::randint(-1000, 1000, {6, 40}, at::TensorOptions().dtype(at::kLong));
  const Tensor ref = loop_scan(t_add, {a}, 1, false)[0];
  EXPECT_TRUE(at::equal(ascan::torch::associative_scan(ascan::add, a, 1), ref));
  const Tensor b = at::randint(-3, 4, {40, 6}, at::TensorOptions().dtype(at::kInt));
  EXPECT_TRUE(at::equal(ascan::torch::associative_scan(ascan::max, b, 0, {.reverse = true}),
                        loop_scan(t_max, {b}, 0, true)[0]));
  const auto [p, q] = ascan::torch::associative_scan(Affine{}, std::tuple{b, b}, 0);
  const List r = loop_scan(t_linrec, {b, b}, 0, false);
  EXPECT_TRUE(at::equal(p, r[0]) && at::equal(q, r[1]));
  EXPECT_EQ(p.scalar_type(), at::kInt);
}

TEST(TorchBridge, NonContiguousInputsAndGradients) {
  // A transposed input, a sliced one (storage offset, stride 2) and an expanded upstream
  // gradient: values and gradients as for contiguous copies.
  const Tensor base = at::randn({12, 40}, opts64());
  const Tensor xt = base.t();                      // [40, 12], strides (1, 40)
  const Tensor xs = base.slice(1, 1, 40, 2);       // [12, 20], offset 1, stride 2
  for (const Tensor& x : {xt, xs}) {
    ASSERT_FALSE(x.is_contiguous());
    EXPECT_TRUE(at::allclose(ascan::torch::associative_scan(ascan::logaddexp, x, 0),
                             loop_scan(t_logaddexp, {x}, 0, false)[0], 1e-12, 1e-12));
  }
  const Tensor x = xt.detach().set_requires_grad(true);
  const Tensor y = ascan::torch::associative_scan(ascan::mul, x, 0);
  y.sum().backward();  // the upstream gradient is an expanded (stride 0) tensor of ones
  const Tensor xr = xt.detach().set_requires_grad(true);
  loop_scan(t_mul, {xr}, 0, false)[0].sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), xr.grad(), 1e-10, 1e-10));
}

TEST(TorchBridge, OnlyLeavesThatRequireGradGetGradients) {
  const Tensor a = decays({5, 20});
  const Tensor b = at::randn({5, 20}, opts64()).set_requires_grad(true);
  auto [pa, h] = ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 1);
  EXPECT_TRUE(h.requires_grad() && pa.requires_grad()) << "outputs of a scan with a leaf that requires grad";
  h.sum().backward();
  EXPECT_FALSE(a.grad().defined());
  const Tensor br = b.detach().set_requires_grad(true);
  loop_scan(t_linrec, {a, br}, 1, false)[1].sum().backward();
  EXPECT_TRUE(at::allclose(b.grad(), br.grad(), 1e-10, 1e-10));
  // Under NoGradGuard no graph is recorded.
  at::NoGradGuard no_grad;
  EXPECT_FALSE(ascan::torch::associative_scan(ascan::add, b, 1).requires_grad());
}

TEST(TorchBridge, ResultsDoNotDependOnTorchsThreadCount) {
  const int saved = at::get_num_threads();
  const Tensor a = decays({8, 3000}), b = at::randn({8, 3000}, opts64());
  List results;
  for (int n : {1, 2}) {
    at::set_num_threads(n);
    const auto [pa, h] = ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 1);
    EXPECT_EQ(ascan::num_threads(), n) << "the bridge sizes ascan's pool to torch's thread count";
    results.push_back(h);
  }
  at::set_num_threads(saved);
  EXPECT_TRUE(at::equal(results[0], results[1]));
}

TEST(TorchBridge, ResultsShareNoMemoryWithInputs) {
  const Tensor x = at::randn({4, 9}, opts64());
  const Tensor before = x.clone();
  Tensor y = ascan::torch::associative_scan(ascan::add, x, 1);
  y.add_(1.0);  // writing the result leaves the input alone
  EXPECT_TRUE(at::equal(x, before));
  EXPECT_TRUE(at::allclose(y - 1.0, at::cumsum(x, 1), 1e-12, 1e-12));
}

namespace {
// Runs fn, expects a c10::Error whose message contains every fragment.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a c10::Error: " << e.what();
  }
}
}  // namespace

TEST(TorchBridge, BadInputIsAClearC10Error) {
  const Tensor x = at::randn({4, 9}, opts64());
  const std::string name = "ascan::torch::associative_scan()";
  expect_error([&] { ascan::torch::associative_scan(ascan::add, x, 2); }, {name, "dim 2", "out of range"});
  expect_error([&] { ascan::torch::associative_scan(ascan::add, x, -3); }, {name, "dim -3"});
  expect_error([&] { ascan::torch::associative_scan(ascan::add, x.to(at::kHalf), 0); },
               {name, "leaf 0", "Half", "expected Float, Double, Int or Long"});
  expect_error([&] { ascan::torch::associative_scan(ascan::add, x.to(at::kBool), 0); }, {name, "Bool"});
  expect_error([&] { ascan::torch::associative_scan(ascan::add, Tensor(), 0); }, {name, "leaf 0", "undefined"});
  expect_error([&] { ascan::torch::associative_scan(ascan::add, at::randn({}, opts64()), 0); }, {name, "rank 0"});
  expect_error([&] { ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{x, x.to(at::kFloat)}, 1); },
               {name, "leaf 1", "Float", "expected Double"});
  expect_error([&] { ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{x, x.to(at::kMeta)}, 1); },
               {name, "leaf 1", "meta", "expected cpu"});
  expect_error([&] { ascan::torch::associative_scan(ascan::add, x.to(at::kMeta), 1); }, {name, "meta", "expected CPU"});
  expect_error([&] { ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{x, at::randn({4, 8}, opts64())}, 1); },
               {name, "broadcast"});
  expect_error([&] { ascan::torch::associative_scan<2>(Affine{}, List{x, x, x}, 1); }, {name, "3 tensors", "expected 2"});
  expect_error([&] { ascan::torch::associative_scan<2>(Affine{}, List{}, 1); }, {name, "0 tensors"});
}

TEST(TorchBridge, DoubleBackwardIsRefused) {
  const Tensor x = at::randn({3, 8}, opts64()).set_requires_grad(true);
  const Tensor y = ascan::torch::associative_scan(ascan::mul, x, 1);
  expect_error([&] { torch::autograd::grad({y.sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true); },
               {"ascan::torch::associative_scan()", "create_graph=True", "double backward"});
  // A first-order backward of the same graph still works.
  const List g = torch::autograd::grad({y.sum()}, {x});
  EXPECT_EQ(g[0].sizes(), x.sizes());
}
