// var.hpp — ascan::ad::Var<T>: a tensor-valued node handle on a tape; param, constant, backward.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "ascan/ad/tape.hpp"
#include "ascan/error.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad {

template <class T>
class Var {
 public:
  using value_type = T;

  // An empty handle; using it throws ascan::Error.
  Var() = default;

  // The forward value (shares storage with the tape's copy; do not modify it). Returned as a
  // handle, not a reference: the tape's arrays grow (and move) while ops record nodes, e.g. when
  // a Var of an enclosing tape is imported.
  Tensor<T> value() const { return state("ascan::ad::Var::value()").values[id_]; }
  // The accumulated gradient (zeros of the value's shape before any backward reached it).
  Tensor<T> grad() const {
    const auto& s = state("ascan::ad::Var::grad()");
    return s.has_grad[id_] ? s.grads[id_] : Tensor<T>::zeros(s.values[id_].shape());
  }
  void zero_grad() const {
    auto& s = state("ascan::ad::Var::zero_grad()");
    s.has_grad[id_] = 0;
    s.grads[id_] = Tensor<T>();
  }
  Shape shape() const { return state("ascan::ad::Var::shape()").values[id_].shape(); }
  int64_t rank() const { return value().rank(); }
  int64_t numel() const { return value().numel(); }
  bool requires_grad() const { return state("ascan::ad::Var::requires_grad()").requires_grad[id_] != 0; }
  bool valid() const { return tape_ && tape_->alive && id_ < tape_->size() && tape_->serials[id_] == serial_; }

  // Internal: the node behind the handle.
  Var(std::shared_ptr<detail::TapeState<T>> tape, int32_t id)
      : tape_(std::move(tape)), id_(id), serial_(tape_->serials[id]) {}
  int32_t id() const { return id_; }
  const std::shared_ptr<detail::TapeState<T>>& tape() const { return tape_; }
  detail::TapeState<T>& state(std::string_view where) const {
    if (!tape_)
      ascan::detail::raise("{}: the Var is empty, expected a Var made by ascan::ad::param, constant or an op", where);
    if (!valid())
      ascan::detail::raise("{}: the Var's tape was destroyed or rewound past it, expected a live Var", where);
    return *tape_;
  }

 private:
  std::shared_ptr<detail::TapeState<T>> tape_;
  int32_t id_ = -1;
  uint32_t serial_ = 0;
};

// A leaf that requires grad, on the current tape.
template <class T>
Var<T> param(const Tensor<T>& value) {
  const auto& tape = detail::current_state<T>();
  return Var<T>(tape, tape->push(value, true, true, {}));
}

// A leaf that does not require grad, on the current tape.
template <class T>
Var<T> constant(const Tensor<T>& value) {
  const auto& tape = detail::current_state<T>();
  return Var<T>(tape, tape->push(value, false, true, {}));
}

namespace detail {

// The id of `v` on the current tape: its own id, or a proxy leaf when v lives on an enclosing
// tape (imported once per tape). Throws for Vars of dead or unrelated tapes.
template <class T>
int32_t id_on_current(const Var<T>& v, std::string_view where) {
  auto& src = v.state(where);
  const auto& cur = current_state<T>();
  if (&src == cur.get()) return v.id();
  for (auto* t = cur->outer.get(); t; t = t->outer.get()) {
    if (t != &src) continue;
    const auto key = std::make_pair(static_cast<const TapeState<T>*>(&src), v.id());
    if (auto it = cur->import_ids.find(key); it != cur->import_ids.end()) return it->second;
    const int32_t proxy = cur->push(src.values[v.id()], src.requires_grad[v.id()] != 0, true, {});
    cur->imports[proxy] = {v.tape(), v.id(), src.serials[v.id()]};
    cur->import_ids[key] = proxy;
    return proxy;
  }
  ascan::detail::raise("{}: the Var belongs to a tape that is not the current one or one enclosing "
                       "it, expected Vars of the current tape (create them inside its scope)", where);
}

// Records an op's node on the current tape: requires grad when grad mode is on and any parent
// requires grad; `fn` receives the tape and the node id and accumulates into the parents.
template <class T>
Var<T> record(Tensor<T> value, std::initializer_list<int32_t> parents, BackwardFn<T> fn) {
  const auto& cur = current_state<T>();
  bool req = false;
  if (grad_mode_enabled())
    for (int32_t p : parents) req = req || cur->requires_grad[p];
  return Var<T>(cur, cur->push(std::move(value), req, false, req ? std::move(fn) : BackwardFn<T>{}));
}

template <class T>
void sweep(TapeState<T>& s, int32_t root, const Tensor<T>& seed) {
  for (int32_t i = 0; i < s.size(); ++i)  // intermediate gradients restart; leaves accumulate
    if (!s.is_leaf[i]) {
      s.has_grad[i] = 0;
      s.grads[i] = Tensor<T>();
    }
  if (!s.requires_grad[root]) return;
  // The seed is used without a copy; accumulate() copies it only into a leaf's gradient.
  struct SeedScope {
    TapeState<T>& s;
    ~SeedScope() { s.seed = Tensor<T>(); }
  } scope{s};
  s.seed = seed;
  if (s.is_leaf[root]) {
    s.accumulate(root, seed);
    return;
  }
  s.grads[root] = seed;
  s.has_grad[root] = 1;
  // From the top: a multi-output node's head (above root when root is one of its other outputs)
  // must run too; nodes without a gradient are skipped.
  for (int32_t i = s.size() - 1; i >= 0; --i)
    if ((s.has_grad[i] || s.always_run[i]) && s.backward_fns[i]) s.backward_fns[i](s, i);
}

}  // namespace detail

// Reverse sweep from a single-element `loss` (seed 1): accumulates d loss / d leaf into the
// grad() of every leaf that requires grad. Intermediate gradients are recomputed each call, so
// repeated calls give identical results (leaf gradients add up; zero them between steps).
template <class T>
void backward(const Var<T>& loss) {
  auto& s = loss.state("ascan::ad::backward()");
  if (loss.numel() != 1)
    ascan::detail::raise("ascan::ad::backward(): loss has shape {}, expected a single element (or "
                         "pass a seed of the same shape)", format_shape(loss.shape()));
  detail::sweep(s, loss.id(), Tensor<T>::full(loss.shape(), T(1)));
}

// Reverse sweep with an explicit cotangent `seed` of y's shape.
template <class T>
void backward(const Var<T>& y, const Tensor<T>& seed) {
  auto& s = y.state("ascan::ad::backward()");
  if (seed.shape() != y.shape())
    ascan::detail::raise("ascan::ad::backward(): seed has shape {}, expected {} (the shape of y)",
                         format_shape(seed.shape()), format_shape(y.shape()));
  detail::sweep(s, y.id(), seed);
}

template <class T>
void zero_grad(const std::vector<Var<T>>& vars) {
  for (const auto& v : vars) v.zero_grad();
}

}  // namespace ascan::ad
