// fuzz_tape.cpp — libFuzzer target: bytes decode into a small float64 program on the tape (1-3
// parameters of shape [T, n] or [1, n]; up to 8 ops among elementwise arithmetic with
// broadcasting, tanh, sigmoid, softplus, square, log_softmax, mean, a roll by slice + concat, and
// scans: builtins, a user pointwise combine, Generic and batched Generic on Var slices), run in
// one of several lifetimes (the default tape, a nested ad::Tape whose gradients are propagated
// out, dead-end nodes dropped by a rewind, a retained graph swept twice, a released graph swept
// again, an explicit seed). The parameters' gradients are checked against fourth-order central
// differences of the same program, in float64, at three step sizes (check_gradients). A mismatch,
// an unexpected exception, a second backward through a released graph that does not throw
// ascan::Error, a crash or a sanitizer report is a finding (abort).
#include <ascan/ascan.hpp>
#include <ascan/autodiff.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "fuzz_input.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;
using fuzz::Input;
using TD = Tensor<double>;
using VD = ad::Var<double>;

[[noreturn]] void finding(const char* what, int64_t at, double got = 0, double want = 0) {
  std::fprintf(stderr, "fuzz_tape: %s (element %lld: %.17g, expected %.17g)\n", what, static_cast<long long>(at), got,
               want);
  std::abort();
}

constexpr int kOps = 16;

struct Op {
  int code, a, b;
  bool reverse;
};

struct Program {
  int64_t T = 1, n = 1;
  std::vector<Shape> param_shapes;
  std::vector<Op> ops;
  TD weights;  // the loss is sum(result * weights), or backward with `weights` as the seed
};

Program decode(Input& in) {
  Program p;
  p.T = 1 + in.below(8);
  p.n = 1 + in.below(3);
  const int params = 1 + in.below(3);
  for (int i = 0; i < params; ++i)
    p.param_shapes.push_back(i > 0 && in.below(4) == 0 ? Shape{1, p.n} : Shape{p.T, p.n});
  const int ops = 1 + in.below(8);
  for (int i = 0; i < ops; ++i) {
    Op op;
    op.code = in.below(kOps);
    op.a = in.below(params + i);
    op.b = in.below(params + i);
    op.reverse = in.below(2);
    p.ops.push_back(op);
  }
  p.weights = TD::empty({p.T, p.n});
  for (int64_t i = 0; i < p.weights.numel(); ++i) p.weights.data()[i] = (in.below(64) - 32) / 16.0;
  return p;
}

VD full(const VD& v, int64_t T, int64_t n) { return v.shape()[0] == T ? v : ad::broadcast_to(v, Shape{T, n}); }

double peak_of(const VD& v) {
  double m = 0;
  for (int64_t i = 0; i < v.value().numel(); ++i) m = std::max(m, std::abs(v.value().data()[i]));
  return std::isnan(m) ? INFINITY : m;
}

// The program's ops on the Vars `vals` (the parameters first); returns the last value, [T, n].
// With `peak`, also the largest magnitude of any intermediate value (NaN: infinity).
VD run_ops(const Program& p, std::vector<VD> vals, double* peak = nullptr) {
  const int64_t T = p.T, n = p.n;
  for (const Op& op : p.ops) {
    const VD& a = vals[op.a];
    const VD& b = vals[op.b];
    const ascan::ScanOptions o{.reverse = op.reverse};
    VD r;
    switch (op.code) {
      case 0: r = a + b; break;
      case 1: r = a - b * 0.5; break;
      case 2: r = a * b; break;
      case 3: r = ad::tanh(a) * 1.5; break;
      case 4: r = ad::sigmoid(a); break;
      case 5: r = ad::softplus(a) - 0.5; break;
      case 6: r = ad::square(a) * 0.5; break;
      case 7: r = ascan::associative_scan(ascan::add, full(a, T, n), op.reverse ? -2 : 0, o) * 0.5; break;
      case 8: r = ascan::associative_scan(ascan::mul, full(a, T, n), 0, o); break;
      case 9: r = ascan::associative_scan(ascan::logaddexp, full(a, T, n), 0, o); break;
      case 10: {  // broadcast leaves: the decay may be [1, n]
        auto [ya, h] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{ad::tanh(a), b}, 0, o);
        r = h;
        break;
      }
      case 11: {  // a user pointwise combine (its Jacobians from dual numbers)
        const auto affine = [](auto l, auto rr) {
          auto [a1, b1] = l;
          auto [a2, b2] = rr;
          return std::tuple{a1 * a2, a2 * b1 + b2};
        };
        auto [ya, h] = ascan::associative_scan(affine, std::tuple{full(ad::tanh(a), T, n), full(b, T, n)}, 0, o);
        r = h + ya;
        break;
      }
      case 12:
      case 13: {  // Generic and batched Generic on Var slices (the combine runs on the tape)
        const auto affine = [](const auto& l, const auto& rr) {
          const auto& [a1, b1] = l;
          const auto& [a2, b2] = rr;
          return std::tuple{a1 * a2, a2 * b1 + b2};
        };
        const auto xs = std::tuple{full(ad::tanh(a), T, n), full(b, T, n)};
        auto [ya, h] = op.code == 12 ? ascan::associative_scan(ascan::generic(affine), xs, 0, o)
                                     : ascan::associative_scan(ascan::generic_batched(affine), xs, 0, o);
        r = h;
        break;
      }
      case 14: r = ad::log_softmax(a, 1) + ad::mean(b, 0, true); break;
      case 15: {  // roll along dim 0 by slices and a concat
        const VD f = full(a, T, n);
        const int64_t k = T > 1 ? 1 : 0;
        r = k ? ad::concat<double>({ad::slice(f, 0, k, T), ad::slice(f, 0, 0, k)}, 0) : f * 1.0;
        break;
      }
    }
    vals.push_back(full(r, T, n));
    if (peak) *peak = std::max(*peak, peak_of(vals.back()));
  }
  return vals.back();
}

double loss_value(const Program& p, const std::vector<TD>& xs) {
  const ad::NoGradGuard no_grad;
  std::vector<VD> vals;
  for (const TD& x : xs) vals.push_back(ad::constant(x));
  return ad::sum(run_ops(p, vals) * ad::constant(p.weights)).value().data()[0];
}

// Checks the gradient of each parameter against fourth-order central differences
// (f'(x) ~ [8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))] / 12h) at steps h = 1e-3, 5e-4, 2.5e-4: steps
// this large keep the forward's rounding (a few ulps of intermediates up to 1e5 or so, amplified
// by 1 / h) far below the tolerance, and the fourth order keeps the truncation there too. A
// coordinate where the three estimates spread by more than an eighth of the tolerance is too
// curved at these steps to judge and is skipped. `times`
// backward sweeps have accumulated into the gradients.
void check_gradients(const Program& p, std::vector<TD> xs, const std::vector<TD>& grads, double times) {
  for (size_t k = 0; k < xs.size(); ++k) {
    if (grads[k].shape() != xs[k].shape()) finding("a gradient has the wrong shape", static_cast<int64_t>(k));
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double x0 = xs[k].data()[i];
      const auto at = [&](double dx) {
        xs[k].data()[i] = x0 + dx;
        const double v = loss_value(p, xs);
        xs[k].data()[i] = x0;
        return v;
      };
      double fd[3];
      for (int s = 0; s < 3; ++s) {
        const double h = 1e-3 / (1 << s);
        fd[s] = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
      }
      const double tol = 1e-5 * (1 + std::abs(fd[2]));
      bool judged = true;
      for (int s = 0; s < 3; ++s) judged = judged && std::isfinite(fd[s]) && std::abs(fd[s] - fd[2]) <= tol / 8;
      if (!judged) continue;
      const double got = grads[k].data()[i] / times;
      if (!(std::abs(got - fd[2]) <= tol)) finding("a gradient differs from central differences", i, got, fd[2]);
    }
  }
}

void run(Input& in) {
  const Program p = decode(in);
  std::vector<TD> xs;
  for (const Shape& s : p.param_shapes) {
    TD x = TD::empty(s);
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = (in.below(64) - 32) / 40.0;
    xs.push_back(x);
  }
  const int lifetime = in.below(6);
  ascan::set_num_threads(1 + in.below(3));
  // Skip programs whose values grow beyond where float64 central differences are accurate: an
  // intermediate of 4e8 (a product of products) has rounding steps of 6e-8, which the loss can
  // keep while cancelling the value itself (log_softmax) and which 1 / h turns into 1e-5.
  {
    const ad::NoGradGuard no_grad;
    std::vector<VD> vals;
    for (const TD& x : xs) vals.push_back(ad::constant(x));
    double peak = 0;
    const double v = ad::sum(run_ops(p, vals, &peak) * ad::constant(p.weights)).value().data()[0];
    if (!std::isfinite(v) || std::abs(v) > 1e4 || peak > 1e4) return;
  }

  std::vector<TD> grads;
  double times = 1;
  const auto sweep = [&](ad::Tape<double>& outer, std::vector<VD>& params) {
    switch (lifetime) {
      case 0: {  // the default tape, one backward
        ad::backward(ad::sum(run_ops(p, params) * ad::constant(p.weights)));
        break;
      }
      case 1: {  // dead-end nodes dropped by a rewind before the step
        const int64_t mark = outer.mark();
        {
          const VD dead = ad::exp(run_ops(p, params));
          (void)dead;
        }
        outer.rewind(mark);
        ad::backward(ad::sum(run_ops(p, params) * ad::constant(p.weights)));
        break;
      }
      case 2: {  // a retained graph swept twice: the gradients add up
        const VD loss = ad::sum(run_ops(p, params) * ad::constant(p.weights));
        ad::backward(loss, {.retain_graph = true});
        ad::backward(loss);
        times = 2;
        bool refused = false;
        try {
          ad::backward(loss);
        } catch (const ascan::Error&) {
          refused = true;
        }
        if (!refused) finding("a third backward through a released graph ran", -1);
        break;
      }
      case 3: {  // a released graph swept again must throw and leave the gradients as they were
        const VD loss = ad::sum(run_ops(p, params) * ad::constant(p.weights));
        ad::backward(loss);
        bool refused = false;
        try {
          ad::backward(loss);
        } catch (const ascan::Error&) {
          refused = true;
        }
        if (!refused) finding("a second backward through a released graph ran", -1);
        break;
      }
      case 4: {  // an explicit seed on the [T, n] result
        ad::backward(run_ops(p, params), p.weights);
        break;
      }
      case 5: {  // a nested tape: the step runs inside, its gradients are propagated out
        ad::Tape<double> inner;
        ad::backward(ad::sum(run_ops(p, params) * ad::constant(p.weights)));
        inner.propagate_to_outer();
        break;
      }
    }
  };
  {
    ad::Tape<double> outer;
    std::vector<VD> params;
    for (const TD& x : xs) params.push_back(ad::param(x));
    sweep(outer, params);
    for (const VD& v : params) grads.push_back(v.grad());
  }
  if (std::getenv("FUZZ_VERBOSE")) {
    std::fprintf(stderr, "fuzz_tape: T %lld n %lld params %zu lifetime %d ops", static_cast<long long>(p.T),
                 static_cast<long long>(p.n), xs.size(), lifetime);
    for (const Op& op : p.ops) std::fprintf(stderr, " %d(%d,%d%s)", op.code, op.a, op.b, op.reverse ? ",rev" : "");
    std::fprintf(stderr, "\n");
    if (std::getenv("FUZZ_VERBOSE")[0] == '2') {
      for (const TD& x : xs) {
        std::fprintf(stderr, "  param %s:", ascan::format_shape(x.shape()).c_str());
        for (int64_t i = 0; i < x.numel(); ++i) std::fprintf(stderr, " %.17g", x.data()[i]);
        std::fprintf(stderr, "\n");
      }
      std::fprintf(stderr, "  weights:");
      for (int64_t i = 0; i < p.weights.numel(); ++i) std::fprintf(stderr, " %.17g", p.weights.data()[i]);
      std::fprintf(stderr, "\n  grads:");
      for (const TD& g : grads)
        for (int64_t i = 0; i < g.numel(); ++i) std::fprintf(stderr, " %.17g", g.data()[i]);
      std::fprintf(stderr, "\n");
    }
  }
  check_gradients(p, xs, grads, times);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  run(in);
  return 0;
}
