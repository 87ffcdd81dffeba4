// var.hpp — ascan::ad::Var<T>: a tensor-valued node handle on a tape; param, constant, backward.
#pragma once

#include <algorithm>
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
  // A Var is a counted reference to its node: the node (and its graph) lives while a Var or a
  // dependent node names it.
  Var(const Var& o) : tape_(o.tape_), id_(o.id_), serial_(o.serial_) {
    if (tape_) tape_->retain(id_, serial_);
  }
  Var(Var&& o) noexcept : tape_(std::move(o.tape_)), id_(o.id_), serial_(o.serial_) { o.id_ = -1; }
  Var& operator=(const Var& o) {
    Var copy(o);
    swap(copy);
    return *this;
  }
  Var& operator=(Var&& o) noexcept {
    Var moved(std::move(o));
    swap(moved);
    return *this;
  }
  ~Var() {
    if (tape_) tape_->release(id_, serial_);
  }
  void swap(Var& o) noexcept {
    tape_.swap(o.tape_);
    std::swap(id_, o.id_);
    std::swap(serial_, o.serial_);
  }

  // The forward value (shares storage with the tape's copy; do not modify it). Returned as a
  // handle, not a reference: the tape's arrays grow (and move) while ops record nodes, e.g. when
  // a Var of an enclosing tape is imported.
  Tensor<T> value() const { return state("ascan::ad::Var::value()").values[id_]; }
  // The accumulated gradient of a leaf (zeros of the value's shape before any backward reached
  // it). Gradients of intermediate nodes are freed when the sweep ends, so they read as zeros.
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
  bool valid() const { return tape_ && tape_->holds(id_, serial_); }

  // Internal: a new reference to the node behind `id`.
  Var(std::shared_ptr<detail::TapeState<T>> tape, int32_t id)
      : tape_(std::move(tape)), id_(id), serial_(tape_->serials[id]) {
    tape_->retain(id_, serial_);
  }
  int32_t id() const { return id_; }
  uint32_t serial() const { return serial_; }
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
// tape (imported once per tape; the proxy and the outer node live until the current tape
// is rewound past the proxy or ends). Throws for Vars of dead
// or unrelated tapes.
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
    src.retain(v.id(), v.serial());
    ++cur->refs[proxy];  // the import's own reference: the proxy lives until rewind or the tape ends
    cur->imports[proxy] = {v.tape(), v.id(), v.serial()};
    cur->import_ids[key] = proxy;
    return proxy;
  }
  ascan::detail::raise("{}: the Var belongs to a tape that is not the current one or one enclosing "
                       "it, expected Vars of the current tape (create them inside its scope)", where);
}

// Records a node on the current tape with parents `ids`: it requires grad when grad mode is on
// and any parent requires grad; then it keeps `fn` (which receives the tape and the node id and
// accumulates into the parents) and links to its parents (all of them: `fn` reads their flags).
template <class T>
Var<T> record_node(Tensor<T> value, const std::vector<int32_t>& ids, BackwardFn<T> fn, bool uniform_aware = false) {
  const auto& cur = current_state<T>();
  bool req = false;
  if (grad_mode_enabled())
    for (int32_t p : ids) req = req || cur->requires_grad[p];
  if (!req) return Var<T>(cur, cur->push(std::move(value), false, false, {}));
  std::vector<int32_t> links;
  for (int32_t p : ids)
    if (std::find(links.begin(), links.end(), p) == links.end()) links.push_back(p);
  const int32_t id = cur->push(std::move(value), true, false, std::move(fn), std::move(links));
  cur->uniform_aware[id] = uniform_aware ? 1 : 0;
  return Var<T>(cur, id);
}

template <class T>
Var<T> record(Tensor<T> value, std::initializer_list<int32_t> parents, BackwardFn<T> fn) {
  return record_node<T>(std::move(value), std::vector<int32_t>(parents), std::move(fn));
}
// A node whose function handles a uniform gradient (TapeState::uniform_grad) itself.
template <class T>
Var<T> record_uniform_aware(Tensor<T> value, std::initializer_list<int32_t> parents, BackwardFn<T> fn) {
  return record_node<T>(std::move(value), std::vector<int32_t>(parents), std::move(fn), true);
}

// Reverse sweep from `root` with cotangent `seed` over the nodes reachable from it through
// parent links, newest first. Leaf gradients accumulate; intermediate gradients live only during
// the sweep. Without retain_graph, the swept nodes' functions and links are released (also when
// a backward function throws).
template <class T>
void sweep(TapeState<T>& s, int32_t root, const Tensor<T>& seed, const BackwardOptions& opts) {
  if (!s.requires_grad[root]) return;
  std::vector<int32_t> order{root};
  std::vector<uint8_t> seen(static_cast<size_t>(s.slots()), 0);
  seen[root] = 1;
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t n = order[k];
    if (s.released[n])
      ascan::detail::raise("ascan::ad::backward(): the graph behind {} was released by an earlier backward(), "
                           "expected a graph not yet swept (pass {{.retain_graph = true}} to the earlier "
                           "backward() to run backward through it again)",
                           n == root ? "this Var" : "an input of this Var");
    for (int32_t p : s.parents[n])
      if (!seen[p] && s.requires_grad[p]) {
        seen[p] = 1;
        order.push_back(p);
      }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s.seqs[a] > s.seqs[b]; });
  for (int32_t n : order)  // what propagate_to_outer() left on intermediates is not this sweep's
    if (!s.is_leaf[n]) {
      s.has_grad[n] = 0;
      s.grads[n] = Tensor<T>();
    }
  struct Finish {
    TapeState<T>& s;
    const std::vector<int32_t>& order;
    bool retain;
    ~Finish() {
      s.borrowed.clear();
      s.uniform_grads.clear();
      for (int32_t n : order)
        if (s.live[n] && !s.is_leaf[n]) {
          s.has_grad[n] = 0;
          s.grads[n] = Tensor<T>();
        }
      if (retain) return;
      // Dropping links may free parents; freeing never reuses a slot, so `live` tells.
      for (int32_t n : order)
        if (s.live[n] && !s.is_leaf[n]) s.release_graph(n);
    }
  } finish{s, order, opts.retain_graph};
  // The seed is used without a copy; accumulate() copies it only into a leaf's gradient.
  s.uniform_grads.clear();
  s.borrowed.clear();
  s.borrow(seed);
  if (s.is_leaf[root]) {
    s.accumulate(root, seed);
    return;
  }
  s.grads[root] = seed;
  s.has_grad[root] = 1;
  for (int32_t n : order)
    if ((s.has_grad[n] || s.always_run[n]) && s.backward_fns[n]) {
      if (!s.uniform_aware[n]) s.grad_of(n);
      s.backward_fns[n](s, n);
    }
}

// Compiled once, in autodiff/ops_elementwise.cpp.
extern template void sweep(TapeState<float>&, int32_t, const Tensor<float>&, const BackwardOptions&);
extern template void sweep(TapeState<double>&, int32_t, const Tensor<double>&, const BackwardOptions&);

}  // namespace detail

// Reverse sweep from a single-element `loss` (seed 1): accumulates d loss / d leaf into the
// grad() of every leaf that requires grad (leaf gradients add up across calls; zero them between
// steps). The swept graph is released unless opts.retain_graph: a second backward through it
// throws ascan::Error.
template <class T>
void backward(const Var<T>& loss, const BackwardOptions& opts = {}) {
  auto& s = loss.state("ascan::ad::backward()");
  if (loss.numel() != 1)
    ascan::detail::raise("ascan::ad::backward(): loss has shape {}, expected a single element (or "
                         "pass a seed of the same shape)", format_shape(loss.shape()));
  detail::sweep(s, loss.id(), Tensor<T>::full(loss.shape(), T(1)), opts);
}

// Reverse sweep with an explicit cotangent `seed` of y's shape.
template <class T>
void backward(const Var<T>& y, const Tensor<T>& seed, const BackwardOptions& opts = {}) {
  auto& s = y.state("ascan::ad::backward()");
  if (seed.shape() != y.shape())
    ascan::detail::raise("ascan::ad::backward(): seed has shape {}, expected {} (the shape of y)",
                         format_shape(seed.shape()), format_shape(y.shape()));
  detail::sweep(s, y.id(), seed, opts);
}

template <class T>
void zero_grad(const std::vector<Var<T>>& vars) {
  for (const auto& v : vars) v.zero_grad();
}

}  // namespace ascan::ad
