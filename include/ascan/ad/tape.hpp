// tape.hpp — the reverse-mode tape: flat node arrays addressed by integer ids, nodes reference-counted.
//
// A Tape<T> records one node per tensor operation (never per scalar): its value, its gradient
// (allocated by backward), whether it requires grad, the parents it needs gradients for, and a
// backward function that pulls the node's gradient into its parents' gradients.
//
// Lifetime follows the handles, as in PyTorch: a node is referenced by the Vars that name it and
// by the nodes that list it as a parent. When the count drops to zero the node, its value, its
// gradient and the tensors its backward function saved are freed, and its slot is reused, so a
// training loop that builds a graph per step needs no scope and no rewind. backward() releases
// the graph it swept (backward functions and parent links) unless asked to retain it; the Vars
// keep their values, and a second backward through a released node throws.
//
// backward() visits the nodes reachable from the root through parent links, in reverse creation
// order (a sequence number, since slots are reused) — no recursion. Tapes nest (RAII): a Tape
// object is the current tape of this thread from construction to destruction, so a VJP can be
// taken on a fresh tape inside a backward sweep; a Var of an enclosing tape used on the current
// one is imported as a proxy leaf (which keeps the outer node alive) whose gradient can be sent
// back (propagate_to_outer). Without a user tape, each thread has a default one. Not
// thread-safe: one tape is used by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ascan/error.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad {

template <class T> class Tape;

// Options of ascan::ad::backward().
struct BackwardOptions {
  // Keep the swept graph (backward functions and the tensors they saved) so that backward can run
  // through it again; by default it is released as it is swept, as in PyTorch.
  bool retain_graph = false;
};

namespace detail {

template <class T>
struct TapeState;

// a + b for gradients of one shape, a copy of a gradient, and a gradient of one value, in
// parallel (compiled for float and double).
template <class T>
Tensor<T> add_gradients(const Tensor<T>& a, const Tensor<T>& b);
template <class T>
Tensor<T> copy_gradient(const Tensor<T>& a);
extern template Tensor<float> add_gradients(const Tensor<float>&, const Tensor<float>&);
extern template Tensor<double> add_gradients(const Tensor<double>&, const Tensor<double>&);
extern template Tensor<float> copy_gradient(const Tensor<float>&);
extern template Tensor<double> copy_gradient(const Tensor<double>&);
template <class T>
Tensor<T> fill_gradient(const Shape& shape, T value);
extern template Tensor<float> fill_gradient(const Shape&, float);
extern template Tensor<double> fill_gradient(const Shape&, double);

template <class T>
using BackwardFn = std::function<void(TapeState<T>&, int32_t self)>;

template <class T>
struct TapeState {
  struct Import {
    std::shared_ptr<TapeState> outer;
    int32_t outer_id;
    uint32_t outer_serial;
  };

  // One entry per slot; a slot is live (a node) or free (on free_ids, reused by push()).
  std::vector<Tensor<T>> values;
  std::vector<Tensor<T>> grads;            // numel 0 shape {0} when absent
  std::vector<uint8_t> has_grad;
  std::vector<uint8_t> requires_grad;
  std::vector<uint8_t> is_leaf;
  std::vector<uint8_t> live;
  std::vector<uint8_t> released;           // backward freed its graph (no function, no parents)
  std::vector<uint32_t> serials;           // a new one each time a slot becomes a node
  std::vector<uint32_t> refs;              // Vars, child nodes and proxies that reference it
  std::vector<int64_t> seqs;               // creation order (slots are reused out of order)
  std::vector<uint8_t> always_run;         // multi-output heads: run even without own gradient
  std::vector<uint8_t> uniform_aware;      // its function reads uniform_grad() (else materialised first)
  std::vector<std::vector<int32_t>> parents;  // its inputs (each holds a ref) while it has a function
  std::vector<BackwardFn<T>> backward_fns;
  std::vector<int32_t> free_ids;
  std::map<int32_t, Import> imports;       // proxy id -> the enclosing tape's node
  std::map<std::pair<const TapeState*, int32_t>, int32_t> import_ids;
  std::shared_ptr<TapeState> outer;        // the enclosing tape (nullptr for a default tape)
  // Tensors a sweep's gradients may share without owning them (the caller's cotangent, an
  // operand a product's gradient passes on): a leaf's gradient never shares their storage.
  std::vector<Tensor<T>> borrowed;
  // Gradients that are one value broadcast to the node's shape (a sum's), not yet materialised:
  // their node has has_grad set and an empty grads entry; grad_of() fills them on first read.
  std::vector<std::pair<int32_t, T>> uniform_grads;
  bool alive = true;
  uint32_t next_serial = 1;
  int64_t next_seq = 0;
  int64_t num_live = 0;
  std::vector<int32_t> pending;            // nodes whose count reached zero, being freed
  bool draining = false;

  int32_t slots() const { return static_cast<int32_t>(values.size()); }
  bool holds(int32_t id, uint32_t serial) const {
    return alive && id >= 0 && id < slots() && live[id] && serials[id] == serial;
  }

  // Records a node; it holds a reference on each parent (every input its function names by id,
  // also those that need no gradient: their slots must not be reused while the function may
  // read them). The node itself starts with no reference: the Var made for it takes the first.
  int32_t push(Tensor<T> value, bool req, bool leaf, BackwardFn<T> fn, std::vector<int32_t> links = {}) {
    int32_t id;
    if (!free_ids.empty()) {
      id = free_ids.back();
      free_ids.pop_back();
      values[id] = std::move(value);
      grads[id] = Tensor<T>();
      has_grad[id] = 0;
      drop_uniform(id);
      requires_grad[id] = req ? 1 : 0;
      is_leaf[id] = leaf ? 1 : 0;
      live[id] = 1;
      released[id] = 0;
      serials[id] = next_serial++;
      refs[id] = 0;
      seqs[id] = next_seq++;
      always_run[id] = 0;
      uniform_aware[id] = 0;
      parents[id] = std::move(links);
      backward_fns[id] = req ? std::move(fn) : BackwardFn<T>{};
    } else {
      id = slots();
      values.push_back(std::move(value));
      grads.emplace_back();
      has_grad.push_back(0);
      requires_grad.push_back(req ? 1 : 0);
      is_leaf.push_back(leaf ? 1 : 0);
      live.push_back(1);
      released.push_back(0);
      serials.push_back(next_serial++);
      refs.push_back(0);
      seqs.push_back(next_seq++);
      always_run.push_back(0);
      uniform_aware.push_back(0);
      parents.push_back(std::move(links));
      backward_fns.push_back(req ? std::move(fn) : BackwardFn<T>{});
    }
    for (int32_t p : parents[id]) ++refs[p];
    ++num_live;
    return id;
  }

  void retain(int32_t id, uint32_t serial) {
    if (holds(id, serial)) ++refs[id];
  }
  void release(int32_t id, uint32_t serial) {
    if (!holds(id, serial) || refs[id] == 0) return;
    if (--refs[id] == 0) free_node(id);
  }

  // Frees a node now, whatever its count (rewind), or when its count reached zero. Freeing drops
  // its parent links and its function's captures, which may free more nodes: they are queued and
  // freed here in a loop, never by recursion.
  void free_node(int32_t id) {
    pending.push_back(id);
    if (draining) return;
    draining = true;
    while (!pending.empty()) {
      const int32_t n = pending.back();
      pending.pop_back();
      if (!live[n]) continue;
      // Moved out first: destroying them may release Vars of this tape (re-entering release()).
      BackwardFn<T> fn = std::move(backward_fns[n]);
      Tensor<T> value = std::move(values[n]), grad = std::move(grads[n]);
      std::vector<int32_t> links = std::move(parents[n]);
      backward_fns[n] = BackwardFn<T>{};
      values[n] = Tensor<T>();
      grads[n] = Tensor<T>();
      parents[n].clear();
      live[n] = 0;
      has_grad[n] = 0;
      drop_uniform(n);
      refs[n] = 0;
      --num_live;
      free_ids.push_back(n);
      std::shared_ptr<TapeState> import_outer;
      int32_t import_id = -1;
      uint32_t import_serial = 0;
      if (auto it = imports.find(n); it != imports.end()) {
        import_outer = std::move(it->second.outer);
        import_id = it->second.outer_id;
        import_serial = it->second.outer_serial;
        import_ids.erase({import_outer.get(), import_id});
        imports.erase(it);
      }
      for (int32_t p : links)
        if (live[p] && refs[p] > 0 && --refs[p] == 0) pending.push_back(p);
      fn = BackwardFn<T>{};
      if (import_outer) import_outer->release(import_id, import_serial);
    }
    draining = false;
  }

  // After a sweep that does not retain the graph: the node keeps its value, loses its function
  // (and what it saved) and its parent links.
  void release_graph(int32_t id) {
    BackwardFn<T> fn = std::move(backward_fns[id]);
    std::vector<int32_t> links = std::move(parents[id]);
    backward_fns[id] = BackwardFn<T>{};
    parents[id].clear();
    released[id] = 1;
    for (int32_t p : links)
      if (live[p] && refs[p] > 0 && --refs[p] == 0) free_node(p);
  }

  // grad[id] += g (g has the node's shape). Gradients are never modified in place: the stored
  // tensor may be shared with another node's gradient (an add passes its gradient through).
  void accumulate(int32_t id, const Tensor<T>& g) {
    if (!requires_grad[id]) return;
    if (!has_grad[id]) {
      // A leaf's gradient is the user's to keep (and to modify): it must not share storage with
      // a borrowed tensor, which may reach it unchanged (through a reshape, an add, a scan of
      // length one). Everything else is shared without a copy.
      grads[id] = is_leaf[id] && shares_borrowed(g) ? copy_gradient(g) : g;
      has_grad[id] = 1;
      return;
    }
    grads[id] = accumulate_sum(grad_of(id), g);
  }

  // grad[id] += c broadcast to the node's shape; kept as the value alone on intermediate nodes.
  void accumulate_uniform(int32_t id, T c) {
    if (!requires_grad[id]) return;
    if (T* u = find_uniform(id)) {
      *u += c;
    } else if (!has_grad[id] && !is_leaf[id]) {
      uniform_grads.emplace_back(id, c);
      grads[id] = Tensor<T>();
      has_grad[id] = 1;
    } else {
      accumulate(id, fill_gradient(values[id].shape(), c));
    }
  }

  // The node's gradient when it is one value broadcast to its shape and not yet materialised.
  std::optional<T> uniform_grad(int32_t id) {
    if (T* u = find_uniform(id)) return *u;
    return std::nullopt;
  }

  // The node's gradient as a tensor (a uniform one materialised here).
  const Tensor<T>& grad_of(int32_t id) {
    if (T* u = find_uniform(id)) {
      grads[id] = fill_gradient(values[id].shape(), *u);
      drop_uniform(id);
    }
    return grads[id];
  }

  void borrow(const Tensor<T>& t) {
    if (t.storage_id()) borrowed.push_back(t);
  }
  bool shares_borrowed(const Tensor<T>& g) const {
    for (const Tensor<T>& b : borrowed)
      if (g.shares_storage_with(b)) return true;
    return false;
  }

  T* find_uniform(int32_t id) {
    for (auto& [n, c] : uniform_grads)
      if (n == id) return &c;
    return nullptr;
  }
  void drop_uniform(int32_t id) {
    for (size_t k = 0; k < uniform_grads.size(); ++k)
      if (uniform_grads[k].first == id) {
        uniform_grads.erase(uniform_grads.begin() + static_cast<std::ptrdiff_t>(k));
        return;
      }
  }

  // Drops every node created at or after sequence number `mark`, newest first.
  void rewind(int64_t mark) {
    std::vector<int32_t> drop;
    for (int32_t i = 0; i < slots(); ++i)
      if (live[i] && seqs[i] >= mark) drop.push_back(i);
    std::sort(drop.begin(), drop.end(), [&](int32_t a, int32_t b) { return seqs[a] > seqs[b]; });
    for (int32_t i : drop)
      if (live[i]) free_node(i);
  }

  static Tensor<T> accumulate_sum(const Tensor<T>& a, const Tensor<T>& b) { return add_gradients(a, b); }
};

// Ends a tape: frees every node (Vars of it become invalid) and releases the enclosing tapes'
// nodes its proxies kept alive.
template <class T>
void close_tape(TapeState<T>& s) {
  if (!s.alive) return;
  std::vector<typename TapeState<T>::Import> imports;
  for (auto& [proxy, imp] : s.imports) imports.push_back(std::move(imp));
  s.imports.clear();
  s.import_ids.clear();
  s.alive = false;
  // Moved out before destruction: functions may hold Vars of this tape (a generic combine that
  // captures a parameter); they see a dead tape and do nothing.
  auto fns = std::move(s.backward_fns);
  auto values = std::move(s.values);
  auto grads = std::move(s.grads);
  s.backward_fns.clear();
  s.values.clear();
  s.grads.clear();
  s.parents.clear();
  s.num_live = 0;
  fns.clear();
  for (auto& imp : imports) imp.outer->release(imp.outer_id, imp.outer_serial);
}
extern template void close_tape(TapeState<float>&);  // compiled once, in autodiff/ops_elementwise.cpp
extern template void close_tape(TapeState<double>&);

template <class T>
struct TapeStack {
  std::vector<std::shared_ptr<TapeState<T>>> tapes;
  ~TapeStack() {
    for (auto& t : tapes) close_tape(*t);
  }
};

template <class T>
std::vector<std::shared_ptr<TapeState<T>>>& tape_stack() {
  thread_local TapeStack<T> stack;
  return stack.tapes;
}

// The innermost live tape of this thread (a default tape when the user made none).
template <class T>
const std::shared_ptr<TapeState<T>>& current_state() {
  auto& stack = tape_stack<T>();
  if (stack.empty()) stack.push_back(std::make_shared<TapeState<T>>());
  return stack.back();
}

inline bool& grad_mode_enabled() {
  thread_local bool enabled = true;
  return enabled;
}

}  // namespace detail

// RAII tape: current for this thread from construction to destruction. Tapes must be destroyed
// in reverse order of creation (they are scopes). Destroying a tape frees all its nodes.
template <class T>
class Tape {
 public:
  Tape() {
    auto& stack = detail::tape_stack<T>();
    state_ = std::make_shared<detail::TapeState<T>>();
    if (!stack.empty()) state_->outer = stack.back();
    stack.push_back(state_);
  }
  ~Tape() {
    detail::close_tape(*state_);
    auto& stack = detail::tape_stack<T>();
    if (!stack.empty() && stack.back() == state_) stack.pop_back();
  }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // The number of live nodes (freed nodes are not counted).
  int64_t size() const { return state_->num_live; }
  // A position to rewind to: nodes created after mark() are dropped by rewind(mark), whether or
  // not Vars still name them (those Vars become invalid).
  int64_t mark() const { return state_->next_seq; }
  void rewind(int64_t mark) {
    if (mark < 0 || mark > state_->next_seq)
      ascan::detail::raise("ascan::ad::Tape::rewind(): mark {} is out of range, expected a value returned by "
                           "mark() (0 <= mark <= {})", mark, state_->next_seq);
    state_->rewind(mark);
  }
  // Adds the gradients of proxies of enclosing-tape Vars to those Vars' gradients.
  void propagate_to_outer() { propagate_imports(*state_); }

  const std::shared_ptr<detail::TapeState<T>>& state() const { return state_; }

  static void propagate_imports(detail::TapeState<T>& s) {
    for (const auto& [proxy, imp] : s.imports) {
      if (!s.has_grad[proxy] || !imp.outer->holds(imp.outer_id, imp.outer_serial)) continue;
      imp.outer->accumulate(imp.outer_id, s.grad_of(proxy));
    }
  }

 private:
  std::shared_ptr<detail::TapeState<T>> state_;
};

// The number of live nodes on this thread's current tape (the default tape when no Tape object
// is in scope): constant from step to step in a training loop that keeps no graph alive.
template <class T>
int64_t live_nodes() {
  return detail::current_state<T>()->num_live;
}

// Sets whether operations record backward functions for a scope, restoring the previous mode.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(detail::grad_mode_enabled()) {
    detail::grad_mode_enabled() = enabled;
  }
  ~GradModeGuard() { detail::grad_mode_enabled() = previous_; }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Within a NoGradGuard, operations record no backward functions (values only).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

// Turns recording on for a scope (where a VJP must be recorded, e.g. inside a backward sweep
// started under a NoGradGuard).
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

inline bool grad_enabled() { return detail::grad_mode_enabled(); }

}  // namespace ascan::ad
