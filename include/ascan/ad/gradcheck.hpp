// gradcheck.hpp — finite differences against reverse mode, in float64.
//
// gradcheck(fn, inputs, opts) checks a function of Vars (returning a Var, a std::tuple of Vars or
// a std::vector of Vars):
//   * analytical: for each output o, backward of <w_o, out_o> with a random cotangent w_o
//     (all-ones only if asked) gives one row of vector-Jacobian products per input;
//   * numerical: central differences of the same scalar in float64 ("full": every element of every
//     input; "fast": a few random unit directions over all inputs, compared as directional
//     derivatives, for long inputs);
//   * when fn also accepts plain Tensors (a generic lambda), the AD values must equal the plain
//     values, and the AD function must throw exactly when the plain one throws.
// Tolerances live in GradcheckOptions. The report lists every mismatch: output, input, flat index,
// numerical and analytical values and the tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ascan/ad/ops.hpp"
#include "ascan/ad/tape.hpp"
#include "ascan/ad/var.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad {

struct GradcheckOptions {
  double eps = 1e-6;         // central-difference step
  double atol = 1e-5;        // |numerical - analytical| <= atol + rtol * |numerical|
  double rtol = 1e-3;
  bool fast = false;         // random directional derivatives instead of every element
  int num_directions = 8;    // in fast mode
  bool random_cotangents = true;
  uint64_t seed = 0x5eed;
  int max_reported = 10;     // mismatches listed in the message
};

struct GradcheckReport {
  bool ok = true;
  int64_t num_checked = 0;
  int64_t num_failed = 0;
  double max_abs_error = 0;
  std::string message;  // empty when ok
  explicit operator bool() const { return ok; }
};

namespace detail {

// The outputs of fn as a flat list of leaves (Var<double> or Tensor<double>): a single leaf, a
// std::vector of them, or a (nested) std::tuple.
template <class Leaf, class R> struct Leaves;
template <class Leaf> struct Leaves<Leaf, Leaf> {
  static std::vector<Leaf> list(const Leaf& v) { return {v}; }
};
template <class Leaf> struct Leaves<Leaf, std::vector<Leaf>> {
  static std::vector<Leaf> list(const std::vector<Leaf>& v) { return v; }
};
template <class Leaf, class... Vs> struct Leaves<Leaf, std::tuple<Vs...>> {
  static std::vector<Leaf> list(const std::tuple<Vs...>& t) {
    std::vector<Leaf> out;
    std::apply([&](const auto&... v) { (append(out, v), ...); }, t);
    return out;
  }
  template <class V> static void append(std::vector<Leaf>& out, const V& v) {
    for (const auto& x : Leaves<Leaf, V>::list(v)) out.push_back(x);
  }
};
template <class R> using Outputs = Leaves<Var<double>, R>;
template <class R> using PlainOutputs = Leaves<Tensor<double>, R>;

// Runs fn on fresh Vars of `inputs` on a scratch tape; returns the output values.
template <class Fn>
std::vector<Tensor<double>> eval_values(const Fn& fn, const std::vector<Tensor<double>>& inputs) {
  Tape<double> tape;
  NoGradGuard no_grad;
  std::vector<Var<double>> vs;
  for (const auto& t : inputs) vs.push_back(constant(t));
  std::vector<Tensor<double>> out;
  for (const auto& v : Outputs<std::decay_t<decltype(fn(vs))>>::list(fn(vs))) out.push_back(v.value().clone());
  return out;
}

inline double dot(const Tensor<double>& a, const Tensor<double>& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data()[i] * b.data()[i];
  return s;
}

}  // namespace detail

template <class Fn>
GradcheckReport gradcheck(const Fn& fn, const std::vector<Tensor<double>>& inputs, const GradcheckOptions& opts = {}) {
  GradcheckReport report;
  std::string lines;
  auto fail = [&](std::string line) {
    report.ok = false;
    ++report.num_failed;
    if (report.num_failed <= opts.max_reported) lines += line + "\n";
  };

  // Error parity and value agreement with the plain function, when fn accepts Tensors.
  bool ad_threw = false;
  std::string ad_error;
  std::vector<Tensor<double>> ad_values;
  try {
    ad_values = detail::eval_values(fn, inputs);
  } catch (const std::exception& e) {
    ad_threw = true;
    ad_error = e.what();
  }
  if constexpr (std::is_invocable_v<const Fn&, const std::vector<Tensor<double>>&>) {
    bool plain_threw = false;
    std::string plain_error;
    std::vector<Tensor<double>> plain_values;
    try {
      using R = std::decay_t<std::invoke_result_t<const Fn&, const std::vector<Tensor<double>>&>>;
      plain_values = detail::PlainOutputs<R>::list(fn(inputs));
    } catch (const std::exception& e) {
      plain_threw = true;
      plain_error = e.what();
    }
    if (plain_threw != ad_threw) {
      fail(ascan::detail::format("error parity: the plain function {} but the AD function {}",
                       plain_threw ? "threw (" + plain_error + ")" : "did not throw",
                       ad_threw ? "threw (" + ad_error + ")" : "did not throw"));
    } else if (!plain_threw) {
      for (size_t o = 0; o < plain_values.size() && o < ad_values.size(); ++o)
        if (!allclose(ad_values[o], plain_values[o], opts.rtol, opts.atol))
          fail(ascan::detail::format("output {}: AD value differs from the plain function's value", o));
    }
  }
  if (ad_threw) {  // nothing to differentiate: parity with the plain function is the test
    if (!std::is_invocable_v<const Fn&, const std::vector<Tensor<double>>&>)
      fail(ascan::detail::format("the function threw: {}", ad_error));
    if (!report.ok) report.message = "gradcheck failed:\n" + lines;
    return report;
  }

  std::mt19937_64 gen(opts.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const size_t num_outputs = ad_values.size();
  std::vector<Tensor<double>> cotangents;
  for (const auto& v : ad_values) {
    auto w = Tensor<double>::empty(v.shape());
    for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = opts.random_cotangents ? normal(gen) : 1.0;
    cotangents.push_back(w);
  }
  // <w_o, out_o(x)> for every output o from one evaluation, in float64, without gradients.
  auto scalars = [&](const std::vector<Tensor<double>>& xs) {
    const auto values = detail::eval_values(fn, xs);
    std::vector<double> out(num_outputs);
    for (size_t o = 0; o < num_outputs; ++o) out[o] = detail::dot(values[o], cotangents[o]);
    return out;
  };
  // analytical[o][k]: the vector-Jacobian product of output o with its cotangent, for input k.
  std::vector<std::vector<Tensor<double>>> analytical(num_outputs);
  for (size_t o = 0; o < num_outputs; ++o) {
    Tape<double> tape;
    std::vector<Var<double>> vs;
    for (const auto& t : inputs) vs.push_back(param(t));
    const auto outs = detail::Outputs<std::decay_t<decltype(fn(vs))>>::list(fn(vs));
    if (outs[o].requires_grad()) backward(outs[o], cotangents[o]);
    for (const auto& v : vs) analytical[o].push_back(v.grad().clone());
  }
  auto check = [&](size_t o, double num, double ana, const std::string& where) {
    ++report.num_checked;
    const double err = std::abs(num - ana), tol = opts.atol + opts.rtol * std::abs(num);
    report.max_abs_error = std::max(report.max_abs_error, err);
    if (!(err <= tol))
      fail(ascan::detail::format("output {}, {}: numerical {:.10g} vs analytical {:.10g} (|diff| {:.3g} > tol {:.3g})",
                       o, where, num, ana, err, tol));
  };
  if (!opts.fast) {
    for (size_t k = 0; k < inputs.size(); ++k)
      for (int64_t i = 0; i < inputs[k].numel(); ++i) {
        std::vector<Tensor<double>> xs(inputs.begin(), inputs.end());
        xs[k] = inputs[k].clone();
        const double x0 = xs[k].data()[i];
        xs[k].data()[i] = x0 + opts.eps;
        const auto up = scalars(xs);
        xs[k].data()[i] = x0 - opts.eps;
        const auto down = scalars(xs);
        for (size_t o = 0; o < num_outputs; ++o)
          check(o, (up[o] - down[o]) / (2 * opts.eps), analytical[o][k].data()[i],
                ascan::detail::format("input {}, index {}", k, i));
      }
  } else {
    for (int d = 0; d < opts.num_directions; ++d) {
      std::vector<Tensor<double>> up(inputs.size()), down(inputs.size());
      std::vector<Tensor<double>> dir;
      double norm = 0;
      for (const auto& t : inputs) {
        auto v = Tensor<double>::empty(t.shape());
        for (int64_t i = 0; i < v.numel(); ++i) norm += (v.data()[i] = normal(gen)) * v.data()[i];
        dir.push_back(v);
      }
      norm = std::sqrt(norm);
      std::vector<double> ana(num_outputs, 0.0);
      for (size_t k = 0; k < inputs.size(); ++k) {
        up[k] = inputs[k].clone();
        down[k] = inputs[k].clone();
        for (int64_t i = 0; i < inputs[k].numel(); ++i) {
          const double step = dir[k].data()[i] / norm;
          for (size_t o = 0; o < num_outputs; ++o) ana[o] += analytical[o][k].data()[i] * step;
          up[k].data()[i] += opts.eps * step;
          down[k].data()[i] -= opts.eps * step;
        }
      }
      const auto su = scalars(up), sd = scalars(down);
      for (size_t o = 0; o < num_outputs; ++o)
        check(o, (su[o] - sd[o]) / (2 * opts.eps), ana[o], ascan::detail::format("random direction {}", d));
    }
  }
  if (!report.ok)
    report.message = ascan::detail::format("gradcheck failed: {} of {} checks (max |diff| {:.3g}; eps {}, atol {}, rtol {})\n{}",
                                 report.num_failed, report.num_checked, report.max_abs_error, opts.eps,
                                 opts.atol, opts.rtol, lines);
  return report;
}

}  // namespace ascan::ad
