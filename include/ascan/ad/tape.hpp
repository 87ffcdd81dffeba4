// tape.hpp — the reverse-mode tape: flat node arrays addressed by integer ids.
//
// A Tape<T> records one node per tensor operation (never per scalar): its value, its gradient
// (allocated by backward), whether it requires grad, and a backward function that pulls the
// node's gradient into its parents' gradients. backward() sweeps ids in reverse creation order —
// no recursion, no pointer graph. Tapes nest (RAII): constructing a Tape makes it the current
// tape of this thread until it is destroyed, so a VJP can be taken on a fresh tape inside a
// backward sweep; a Var of an enclosing tape used on the current one is imported as a proxy leaf
// whose gradient can be sent back (propagate_to_outer). Without a user tape, each thread has a
// default one. Not thread-safe: one tape is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ascan/error.hpp"
#include "ascan/tensor.hpp"

namespace ascan::ad {

template <class T> class Tape;

namespace detail {

template <class T>
struct TapeState;

template <class T>
using BackwardFn = std::function<void(TapeState<T>&, int32_t self)>;

template <class T>
struct TapeState {
  struct Import {
    std::shared_ptr<TapeState> outer;
    int32_t outer_id;
    uint32_t outer_serial;
  };

  std::vector<Tensor<T>> values;
  std::vector<Tensor<T>> grads;            // numel 0 shape {0} when absent
  std::vector<uint8_t> has_grad;
  std::vector<uint8_t> requires_grad;
  std::vector<uint8_t> is_leaf;
  std::vector<uint32_t> serials;           // bumped when an id is reused after rewind
  std::vector<uint8_t> always_run;         // multi-output heads: run even without own gradient
  std::vector<BackwardFn<T>> backward_fns;
  std::map<int32_t, Import> imports;       // proxy id -> the enclosing tape's node
  std::map<std::pair<const TapeState*, int32_t>, int32_t> import_ids;
  std::shared_ptr<TapeState> outer;        // the enclosing tape (nullptr for a default tape)
  Tensor<T> seed;                          // the caller's cotangent while a sweep runs
  bool alive = true;
  uint32_t next_serial = 1;

  int32_t size() const { return static_cast<int32_t>(values.size()); }

  int32_t push(Tensor<T> value, bool req, bool leaf, BackwardFn<T> fn) {
    const int32_t id = size();
    values.push_back(std::move(value));
    grads.emplace_back();
    has_grad.push_back(0);
    requires_grad.push_back(req ? 1 : 0);
    is_leaf.push_back(leaf ? 1 : 0);
    serials.push_back(next_serial++);
    always_run.push_back(0);
    backward_fns.push_back(req ? std::move(fn) : BackwardFn<T>{});
    return id;
  }

  // grad[id] += g (g has the node's shape). Gradients are never modified in place: the stored
  // tensor may be shared with another node's gradient (an add passes its gradient through).
  void accumulate(int32_t id, const Tensor<T>& g) {
    if (!requires_grad[id]) return;
    if (!has_grad[id]) {
      // A leaf's gradient is the user's to keep (and to modify): it must not share storage with
      // the caller's seed, which may reach it unchanged (through a reshape, an add, a scan of
      // length one). Everything else is shared without a copy.
      grads[id] = is_leaf[id] && seed.storage_id() && g.shares_storage_with(seed) ? g.clone() : g;
      has_grad[id] = 1;
      return;
    }
    auto sum = Tensor<T>::empty(g.shape());
    const T* a = grads[id].data();
    const T* b = g.data();
    for (int64_t i = 0; i < sum.numel(); ++i) sum.data()[i] = a[i] + b[i];
    grads[id] = sum;
  }

  void rewind(int32_t mark) {
    for (auto it = imports.lower_bound(mark); it != imports.end();) {
      import_ids.erase({it->second.outer.get(), it->second.outer_id});
      it = imports.erase(it);
    }
    values.resize(mark);
    grads.resize(mark);
    has_grad.resize(mark);
    requires_grad.resize(mark);
    is_leaf.resize(mark);
    serials.resize(mark);
    always_run.resize(mark);
    backward_fns.resize(mark);
  }
};

// Ends a tape: backward functions may hold Vars of their own tape (a generic combine that
// captures a parameter), a reference cycle that is broken here.
template <class T>
void close_tape(TapeState<T>& s) {
  s.alive = false;
  s.backward_fns.clear();
  s.imports.clear();
  s.import_ids.clear();
}

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
// in reverse order of creation (they are scopes).
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

  int32_t size() const { return state_->size(); }
  // A position to rewind to: nodes created after mark() are dropped by rewind(mark), e.g. at the
  // end of each training step, keeping the parameters made before it.
  int32_t mark() const { return state_->size(); }
  void rewind(int32_t mark) {
    if (mark < 0 || mark > state_->size())
      ascan::detail::raise("ascan::ad::Tape::rewind(): mark {} is out of range, expected 0 <= mark <= {}",
                           mark, state_->size());
    state_->rewind(mark);
  }
  // Adds the gradients of proxies of enclosing-tape Vars to those Vars' gradients.
  void propagate_to_outer() { propagate_imports(*state_); }

  const std::shared_ptr<detail::TapeState<T>>& state() const { return state_; }

  static void propagate_imports(detail::TapeState<T>& s) {
    for (const auto& [proxy, imp] : s.imports) {
      if (!s.has_grad[proxy] || !imp.outer->alive) continue;
      if (imp.outer_id >= imp.outer->size() || imp.outer->serials[imp.outer_id] != imp.outer_serial) continue;
      imp.outer->accumulate(imp.outer_id, s.grads[proxy]);
    }
  }

 private:
  std::shared_ptr<detail::TapeState<T>> state_;
};

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
