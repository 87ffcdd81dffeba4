// scan.hpp — ascan::ad::associative_scan: the differentiable scan (docs/design.md §4).
//
// Pointwise mode: the forward is the host scan on the values; the backward node solves the exact
// adjoint recurrence in fused backward sweeps (scan_vjp.hpp), Jacobians from dual numbers.
// It keeps only the inputs and outputs. Broadcast leaves get their gradient summed back to their
// own shape. Generic mode: f is called on Var slices only — in the forward (on a scratch tape, no
// gradients recorded) and in the backward, an exact VJP sweep that re-runs f at (y_{t-1}, x_t) on
// a nested tape for t = T-1 … 1; Vars that f captures (parameters) receive their gradients.
// The scan's L outputs are L nodes; the last one carries the backward function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ascan/ad/ops.hpp"
#include "ascan/ad/scan_vjp.hpp"
#include "ascan/ad/vjp/builtins.hpp"
#include "ascan/ad/var.hpp"
#include "ascan/detail/generic_scan.hpp"
#include "ascan/options.hpp"
#include "ascan/scan.hpp"

namespace ascan::ad {
namespace detail {

template <class V> struct is_var_tree : std::false_type {};
template <class T> struct is_var_tree<Var<T>> : std::true_type {};
template <class... Vs>
struct is_var_tree<std::tuple<Vs...>>
    : std::bool_constant<(sizeof...(Vs) > 0) && (is_var_tree<Vs>::value && ...)> {};

template <class V> struct VarTree {
  static constexpr bool valid = false;
};

template <class T> struct VarTree<Var<T>> {
  static constexpr bool valid = true;
  using Scalar = T;
  using Values = Tensor<T>;
  static Values values(const Var<T>& v) { return v.value(); }
  static void flatten(const Var<T>& v, std::vector<Var<T>>& out) { out.push_back(v); }
  static Var<T> build(const std::vector<Var<T>>& flat, size_t& pos) { return flat[pos++]; }
};

template <class... Vs> struct VarTree<std::tuple<Vs...>> {
  static constexpr bool valid = sizeof...(Vs) > 0 && (VarTree<Vs>::valid && ...);
  using Scalar = typename VarTree<std::tuple_element_t<0, std::tuple<Vs...>>>::Scalar;
  static constexpr bool same_scalar = (std::is_same_v<typename VarTree<Vs>::Scalar, Scalar> && ...);
  using Values = std::tuple<typename VarTree<Vs>::Values...>;
  static Values values(const std::tuple<Vs...>& v) {
    return std::apply([](const auto&... c) { return Values{VarTree<Vs>::values(c)...}; }, v);
  }
  static void flatten(const std::tuple<Vs...>& v, std::vector<Var<Scalar>>& out) {
    std::apply([&](const auto&... c) { (VarTree<Vs>::flatten(c, out), ...); }, v);
  }
  static std::tuple<Vs...> build(const std::vector<Var<Scalar>>& flat, size_t& pos) {
    return std::tuple<Vs...>{VarTree<Vs>::build(flat, pos)...};
  }
};

template <class V> struct normalize_var { using type = std::decay_t<V>; };
template <class... Vs> struct normalize_var<std::tuple<Vs...>> {
  using type = std::tuple<typename normalize_var<std::decay_t<Vs>>::type...>;
};
template <class V> using normalize_var_t = typename normalize_var<std::decay_t<V>>::type;

inline constexpr const char* kAdScanName = "ascan::ad::associative_scan()";

// Re-raises a host-scan error under this function's name.
[[noreturn]] inline void rethrow_as_ad(const Error& e) {
  std::string msg = e.what();
  const std::string host = "ascan::associative_scan()";
  if (msg.rfind(host, 0) == 0) msg = kAdScanName + msg.substr(host.size());
  throw Error(msg);
}

// Pushes the L output nodes. The last one (the head) links to `parents` (all of them: `fn` reads
// their flags by id) and gets `fn`, which
// runs whenever the sweep reaches it; the others link to the head, so a sweep from any output
// reaches it. The head is pushed first (older than its siblings, so it runs after every consumer
// of any output), and reads its siblings' gradients by (id, serial): a sibling that was freed had
// no consumer left and contributes nothing.
template <class T>
std::vector<Var<T>> push_outputs(const std::vector<Tensor<T>>& ys, bool req, std::vector<int32_t>& out_ids,
                                 std::vector<uint32_t>& out_serials, const std::vector<int32_t>& parents,
                                 BackwardFn<T> fn) {
  const auto& cur = current_state<T>();
  const size_t L = ys.size();
  std::vector<Var<T>> outs(L);
  out_ids.assign(L, -1);
  out_serials.assign(L, 0);
  if (!req) {
    for (size_t l = 0; l < L; ++l) outs[l] = Var<T>(cur, cur->push(ys[l], false, false, {}));
  } else {
    std::vector<int32_t> links;
    for (int32_t p : parents)
      if (std::find(links.begin(), links.end(), p) == links.end()) links.push_back(p);
    const int32_t head = cur->push(ys[L - 1], true, false, std::move(fn), std::move(links));
    cur->always_run[head] = 1;
    outs[L - 1] = Var<T>(cur, head);
    for (size_t l = 0; l + 1 < L; ++l) outs[l] = Var<T>(cur, cur->push(ys[l], true, false, {}, {head}));
  }
  for (size_t l = 0; l < L; ++l) {
    out_ids[l] = outs[l].id();
    out_serials[l] = outs[l].serial();
  }
  return outs;
}

// The gradient reaching output `id` during a sweep (absent when it was freed or got none).
template <class T>
const Tensor<T>* output_grad(TapeState<T>& s, int32_t id, uint32_t serial) {
  return s.holds(id, serial) && s.has_grad[id] ? &s.grad_of(id) : nullptr;
}

// The leaves of a Var structure: their ids on the current tape, values and shapes.
template <class Tree, class V>
auto collect_inputs(const V& vars) {
  using T = typename Tree::Scalar;
  std::vector<Var<T>> in;
  Tree::flatten(vars, in);
  std::vector<int32_t> ids;
  std::vector<Tensor<T>> values;
  std::vector<Shape> shapes;
  for (const auto& v : in) {
    ids.push_back(id_on_current(v, kAdScanName));
    values.push_back(v.value());
    shapes.push_back(v.shape());
  }
  return std::tuple{ids, values, shapes};
}

template <class V, class Fn>
V scan_pointwise(const Fn& f, const V& vars, int64_t dim, const ScanOptions& opts) {
  using Tree = VarTree<V>;
  using T = typename Tree::Scalar;
  using X = typename Tree::Values;
  using Elem = typename ascan::detail::Tree<X>::Elem;
  constexpr size_t L = ascan::detail::Tree<X>::num_leaves;
  // (Not a structured binding: lambdas below capture these, which Clang accepts from 16 on.)
  const auto inputs = collect_inputs<Tree>(vars);
  const auto& in_ids = std::get<0>(inputs);
  const auto& xs = std::get<1>(inputs);
  const auto& shapes = std::get<2>(inputs);
  ascan::detail::PointwisePlan plan;
  X ys_struct;
  try {
    plan = ascan::detail::make_pointwise_plan(shapes, dim, "ascan::associative_scan()");
    ys_struct = ascan::associative_scan(ascan::pointwise(f), Tree::values(vars), dim, opts);
  } catch (const Error& e) {
    rethrow_as_ad(e);
  }
  const std::vector<Tensor<T>> ys = as_vector<T>(ascan::detail::Tree<X>::flatten(ys_struct));
  const auto& cur = current_state<T>();
  bool req = false;
  if (grad_enabled())
    for (int32_t id : in_ids) req = req || cur->requires_grad[id];
  auto out_ids = std::make_shared<std::vector<int32_t>>();
  auto out_serials = std::make_shared<std::vector<uint32_t>>();
  const bool reverse = opts.reverse;
  BackwardFn<T> fn = [=](TapeState<T>& s, int32_t) {
    std::vector<Tensor<T>> gbar(L);  // default tensors stand for zero upstream gradients
    std::array<bool, L> need{};
    bool any_grad = false, any_need = false;
    for (size_t l = 0; l < L; ++l) {
      const Tensor<T>* g = output_grad(s, (*out_ids)[l], (*out_serials)[l]);
      if (g) gbar[l] = *g;
      any_grad = any_grad || g;
      need[l] = s.requires_grad[in_ids[l]];
      any_need = any_need || need[l];
    }
    if (!any_grad || !any_need) return;
    const std::vector<Tensor<T>> dx = scan_vjp<X, Elem, L>(f, plan, xs, ys, gbar, need, reverse);
    for (size_t l = 0; l < L; ++l)
      if (need[l]) s.accumulate(in_ids[l], dx[l]);
  };
  const auto outs = push_outputs(ys, req, *out_ids, *out_serials, in_ids, std::move(fn));
  size_t pos = 0;
  return Tree::build(outs, pos);
}

template <class V, class Fn>
V scan_generic(const Fn& f, const V& vars, int64_t dim, const ScanOptions& opts) {
  using Tree = VarTree<V>;
  using T = typename Tree::Scalar;
  // (Not a structured binding: lambdas below capture these, which Clang accepts from 16 on.)
  const auto inputs = collect_inputs<Tree>(vars);
  const auto& in_ids = std::get<0>(inputs);
  const auto& xs = std::get<1>(inputs);
  const auto& shapes = std::get<2>(inputs);
  const size_t L = xs.size();
  const int64_t d = ascan::detail::check_generic_leaves(shapes, dim, kAdScanName);
  const int64_t T_len = shapes[0][d];
  const bool reverse = opts.reverse;
  const auto step = [reverse, T_len](int64_t s) { return reverse ? T_len - 1 - s : s; };  // scan order -> index
  std::vector<std::vector<Tensor<T>>> x_slices(L);
  for (size_t l = 0; l < L; ++l) x_slices[l] = ascan::detail::split_slices(xs[l], d);
  ascan::detail::GenericScan<V> scanner;
  scanner.where = kAdScanName;
  scanner.parallel = false;
  for (size_t l = 0; l < L; ++l) scanner.slice_shapes.push_back(remove_dim(shapes[l], d));

  // Forward on a scratch tape without gradients; note the captured Vars that require grad.
  std::vector<Tensor<T>> ys;
  bool captured_req = false;
  std::vector<int32_t> parent_ids = in_ids;
  const std::shared_ptr<TapeState<T>> caller = current_state<T>();
  {
    Tape<T> scratch;
    NoGradGuard no_grad;
    std::vector<V> elems;
    for (int64_t s = 0; s < T_len; ++s) {
      std::vector<Var<T>> flat;
      for (size_t l = 0; l < L; ++l) flat.push_back(constant(x_slices[l][step(s)]));
      size_t pos = 0;
      elems.push_back(Tree::build(flat, pos));
    }
    const std::vector<V> out = scanner.scan(f, std::move(elems));
    std::vector<std::vector<Tensor<T>>> y_slices(L, std::vector<Tensor<T>>(T_len));
    for (int64_t s = 0; s < T_len; ++s) {
      size_t l = 0;
      ascan::detail::visit_leaves(out[s], [&](const Var<T>& y) { y_slices[l++][step(s)] = y.value(); });
    }
    for (size_t l = 0; l < L; ++l) {
      ys.push_back(Tensor<T>::empty(shapes[l]));
      if (T_len > 0) ascan::detail::join_slices(y_slices[l], d, ys[l]);
    }
    for (const auto& [proxy, imp] : scratch.state()->imports) {
      captured_req = captured_req || imp.outer->requires_grad[imp.outer_id];
      // Vars of the current tape that f captures are the scan's parents too: the backward sends
      // them gradient, and they must run after it.
      if (imp.outer == caller) parent_ids.push_back(imp.outer_id);
    }
  }
  const auto& cur = current_state<T>();
  bool req = captured_req;
  for (int32_t id : in_ids) req = req || cur->requires_grad[id];
  req = req && grad_enabled();
  auto out_ids = std::make_shared<std::vector<int32_t>>();
  auto out_serials = std::make_shared<std::vector<uint32_t>>();
  BackwardFn<T> fn = [=](TapeState<T>& s, int32_t) {
    bool any = false;
    for (size_t l = 0; l < L; ++l) any = any || output_grad(s, (*out_ids)[l], (*out_serials)[l]);
    if (!any || T_len == 0) return;
    std::vector<std::vector<Tensor<T>>> gbar(L), y_sl(L), dx(L, std::vector<Tensor<T>>(T_len));
    for (size_t l = 0; l < L; ++l) {
      const Tensor<T>* gl = output_grad(s, (*out_ids)[l], (*out_serials)[l]);
      gbar[l] = ascan::detail::split_slices(gl ? *gl : Tensor<T>::zeros(shapes[l]), d);
      y_sl[l] = ascan::detail::split_slices(ys[l], d);
    }
    std::vector<Tensor<T>> g(L);  // adjoint at the current scan step
    for (size_t l = 0; l < L; ++l) g[l] = gbar[l][step(T_len - 1)];
    Tape<T> nested;
    EnableGradGuard record_vjps;
    for (int64_t t = T_len - 1; t >= 1; --t) {
      const int64_t mark = nested.mark();
      std::vector<Var<T>> left, right;
      for (size_t l = 0; l < L; ++l) {
        left.push_back(param(y_sl[l][step(t - 1)]));
        right.push_back(param(x_slices[l][step(t)]));
      }
      size_t pl = 0, pr = 0;
      const V out = scanner.combine(f, Tree::build(left, pl), Tree::build(right, pr));
      Var<T> loss;
      size_t l = 0;
      ascan::detail::visit_leaves(out, [&](const Var<T>& y) {
        const Var<T> term = ad::sum(y * constant(g[l++]));
        loss = loss.valid() ? loss + term : term;
      });
      ad::backward(loss);
      nested.propagate_to_outer();
      for (size_t k = 0; k < L; ++k) {
        dx[k][step(t)] = right[k].grad();
        g[k] = gbar[k][step(t - 1)] + left[k].grad();
      }
      nested.rewind(mark);
    }
    for (size_t l = 0; l < L; ++l) {
      dx[l][step(0)] = g[l];
      if (!s.requires_grad[in_ids[l]]) continue;
      auto full = Tensor<T>::empty(shapes[l]);
      ascan::detail::join_slices(dx[l], d, full);
      s.accumulate(in_ids[l], full);
    }
  };
  const auto outs = push_outputs(ys, req, *out_ids, *out_serials, parent_ids, std::move(fn));
  size_t pos = 0;
  return Tree::build(outs, pos);
}

}  // namespace detail

// Differentiable scan of a Var or a (nested) std::tuple of Vars (all of one element type),
// with the semantics, modes and errors of ascan::associative_scan. Returns Vars of the same
// structure; backward() through them gives exact gradients for every input leaf (and, in Generic
// mode, for Vars captured by the combine).
template <class Combine, class Vs>
detail::normalize_var_t<Vs> associative_scan(const Combine& combine, const Vs& vars, int64_t dim,
                                             const ScanOptions& opts = {}) {
  using V = detail::normalize_var_t<Vs>;
  static_assert(detail::is_var_tree<V>::value,
                "ascan::ad::associative_scan(): vars must be an ascan::ad::Var<T> or a (nested) "
                "std::tuple of them, with at least one leaf");
  if constexpr (detail::is_var_tree<V>::value) {
    using Mode = ascan::detail::combine_mode<Combine>;
    const auto& f = ascan::detail::combine_fn(combine);
    if constexpr (Mode::generic) {
      return detail::scan_generic(f, vars, dim, opts);
    } else {
      return detail::scan_pointwise(f, vars, dim, opts);
    }
  } else {
    return V{};
  }
}

}  // namespace ascan::ad

namespace ascan {

// ascan::associative_scan on Vars is the differentiable scan, so one generic function written
// against ascan::associative_scan serves plain tensors and Vars alike.
template <class Combine, class Vs>
  requires ad::detail::is_var_tree<ad::detail::normalize_var_t<Vs>>::value
ad::detail::normalize_var_t<Vs> associative_scan(const Combine& combine, const Vs& vars, int64_t dim,
                                                 const ScanOptions& opts = {}) {
  return ad::associative_scan(combine, vars, dim, opts);
}

}  // namespace ascan
