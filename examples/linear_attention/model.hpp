// model.hpp — a one-layer causal gated linear-attention model and the associative-recall task.
//
// Tokens are embedded (one-hot times a table), the key of step t is read from the previous token
// (a token shift, so a value can be bound to the key just before it), and the state
//     S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,      alpha_t = sigmoid(W_g x_t + b_g)
// is one differentiable associative scan (ascan::linear_recurrence over the pair (alpha, k v^T),
// with alpha of shape [B, T, dk, 1] broadcast over the value dim). The readout o_t = q_t^T S_t
// goes through an output projection to logits over the vocabulary. The same model can run its
// recurrence as a sequential loop on the tape, to check the scan against it.
#pragma once

#include <ascan/ascan.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

namespace la {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;

struct Config {
  int64_t num_keys = 64;     // key tokens 0 .. num_keys-1
  int64_t num_values = 64;   // value tokens num_keys .. num_keys+num_values-1
  int64_t pairs = 24;        // key-value pairs shown before the queries
  int64_t queries = 24;      // queried pairs after them (keys drawn from the shown ones)
  int64_t dim = 64;          // embedding width
  int64_t dk = 32;           // key / query width (state rows)
  int64_t dv = 32;           // value width (state columns)
  int64_t batch = 32;
  int64_t vocab() const { return num_keys + num_values; }
  int64_t seq_len() const { return 2 * (pairs + queries); }
};

// One batch of multi-query associative recall: "k1 v1 k2 v2 ... kN vN  q1 a1 q2 a2 ...", where
// every q is one of the shown keys and a is its value. The model must predict a at the position
// of q (loss and accuracy only there); the answers are fed in as inputs afterwards (teacher
// forcing), as in the usual formulation of the task.
template <class T>
struct Batch {
  Tensor<T> onehot;          // [B * L, vocab]
  Tensor<int64_t> targets;   // [B * L] (0 where not scored)
  Tensor<T> mask;            // [B * L], 1 where scored
  int64_t scored = 0;
};

template <class T>
Batch<T> make_batch(const Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t L = c.seq_len(), n = c.batch * L;
  Batch<T> b{Tensor<T>::zeros({n, c.vocab()}), Tensor<int64_t>::zeros({n}), Tensor<T>::zeros({n}), 0};
  std::vector<int64_t> keys(static_cast<size_t>(c.num_keys));
  for (int64_t s = 0; s < c.batch; ++s) {
    for (int64_t i = 0; i < c.num_keys; ++i) keys[i] = i;
    std::shuffle(keys.begin(), keys.end(), rng);  // distinct keys within a sequence
    std::vector<int64_t> vals(static_cast<size_t>(c.pairs));
    std::uniform_int_distribution<int64_t> value(c.num_keys, c.vocab() - 1), pick(0, c.pairs - 1);
    std::vector<int64_t> tokens;
    for (int64_t p = 0; p < c.pairs; ++p) {
      vals[p] = value(rng);
      tokens.insert(tokens.end(), {keys[p], vals[p]});
    }
    for (int64_t q = 0; q < c.queries; ++q) {
      const int64_t p = pick(rng);
      const int64_t row = s * L + static_cast<int64_t>(tokens.size());
      b.targets.data()[row] = vals[p];
      b.mask.data()[row] = T(1);
      ++b.scored;
      tokens.insert(tokens.end(), {keys[p], vals[p]});
    }
    for (int64_t t = 0; t < L; ++t) b.onehot.data()[(s * L + t) * c.vocab() + tokens[t]] = T(1);
  }
  return b;
}

template <class T>
struct Params {
  ad::Var<T> emb, wq, wk, wv, wg, bg, wo, bo;
  std::vector<ad::Var<T>> list() const { return {emb, wq, wk, wv, wg, bg, wo, bo}; }
};

// Shapes of the parameters, in Params::list() order.
inline std::vector<Shape> param_shapes(const Config& c) {
  return {{c.vocab(), c.dim}, {c.dim, c.dk}, {c.dim, c.dk}, {c.dim, c.dv},
          {c.dim, c.dk},      {c.dk},         {c.dv, c.vocab()}, {c.vocab()}};
}

// Scaled normal initial values; the gate bias starts at 3 (alpha ~ 0.95: remember by default) and
// the output projection small, so the first loss is near log(vocab) instead of saturating.
template <class T>
std::vector<Tensor<T>> init_values(const Config& c, uint64_t seed) {
  std::vector<Tensor<T>> out;
  const auto shapes = param_shapes(c);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& s = shapes[i];
    if (s.size() == 1) {
      out.push_back(Tensor<T>::full(s, i == 5 ? T(3) : T(0)));
      continue;
    }
    const T scale = i == 0 ? T(1) : (i == 6 ? T(0.1) : T(1)) / std::sqrt(static_cast<T>(s[0]));
    out.push_back(Tensor<T>::randn(s, seed + 7919 * i) * scale);
  }
  return out;
}

template <class T>
Params<T> make_params(const std::vector<ad::Var<T>>& v) {
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
}

enum class Recurrence { kScan, kLoop };

// S_t = alpha_t * S_{t-1} + kv_t along dim 1, S_0 = kv_0, written as a loop of tape ops: the
// baseline a user would write without the scan.
template <class T>
ad::Var<T> recurrence_loop(const ad::Var<T>& alpha, const ad::Var<T>& kv) {
  const int64_t L = kv.shape()[1];
  std::vector<ad::Var<T>> states;
  states.reserve(static_cast<size_t>(L));
  ad::Var<T> s = ad::select(kv, 1, 0);
  states.push_back(s);
  for (int64_t t = 1; t < L; ++t) {
    s = ad::select(alpha, 1, t) * s + ad::select(kv, 1, t);
    states.push_back(s);
  }
  return ad::stack(states, 1);
}

// Logits [B * L, vocab] for a batch.
template <class T>
ad::Var<T> logits(const Config& c, const Params<T>& p, const Batch<T>& b, Recurrence rec) {
  const int64_t B = c.batch, L = c.seq_len();
  auto e = ad::matmul(ad::constant(b.onehot), p.emb);                  // [B*L, dim]
  auto e3 = ad::reshape(e, {B, L, c.dim});
  auto shifted = ad::concat<T>({ad::constant(Tensor<T>::zeros({B, 1, c.dim})), ad::slice(e3, 1, 0, L - 1)}, 1);
  auto prev = ad::reshape(shifted, {B * L, c.dim});                     // token t-1 at row t
  auto q = ad::reshape(ad::matmul(e, p.wq), {B, L, 1, c.dk}) * (T(1) / std::sqrt(static_cast<T>(c.dk)));
  auto k = ad::reshape(ad::matmul(prev, p.wk), {B, L, c.dk, 1});
  auto v = ad::reshape(ad::matmul(e, p.wv), {B, L, 1, c.dv});
  auto alpha = ad::reshape(ad::sigmoid(ad::matmul(e, p.wg) + p.bg), {B, L, c.dk, 1});
  auto kv = k * v;                                                      // [B, L, dk, dv]
  ad::Var<T> S;
  if (rec == Recurrence::kScan)
    S = std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{alpha, kv}, 1));
  else
    S = recurrence_loop(alpha, kv);
  auto o = ad::reshape(ad::matmul(q, S), {B * L, c.dv});               // q_t^T S_t
  return ad::matmul(o, p.wo) + p.bo;
}

// Mean cross-entropy of `logits` over the scored positions.
template <class T>
ad::Var<T> cross_entropy(const ad::Var<T>& logits, const Batch<T>& b) {
  auto lp = ad::gather(ad::log_softmax(logits, 1), 1, b.targets);
  return -ad::sum(lp * ad::constant(b.mask)) / static_cast<T>(b.scored);
}

template <class T>
ad::Var<T> loss(const Config& c, const Params<T>& p, const Batch<T>& b, Recurrence rec) {
  return cross_entropy(logits(c, p, b, rec), b);
}

// Fraction of scored positions whose arg-max logit is the target.
template <class T>
double accuracy(const Tensor<T>& logit_values, const Batch<T>& b) {
  const int64_t n = logit_values.size(0), V = logit_values.size(1);
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (b.mask.data()[r] == T(0)) continue;
    const T* row = logit_values.data() + r * V;
    correct += std::max_element(row, row + V) - row == b.targets.data()[r];
  }
  return static_cast<double>(correct) / static_cast<double>(b.scored);
}

}  // namespace la
