// discounted_returns/main.cpp — RL returns, GAE, REINFORCE and d(loss)/d(gamma), each from one reverse scan.
#include <ascan/ascan.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ad = ascan::ad;
using ascan::Tensor;

namespace {

struct Options {
  bool short_mode = false;
  uint64_t seed = 2024;
  int iters = -1;  // -1: the mode's default
};

int g_failures = 0;

void report(bool ok, std::string_view what) {
  fmt::print("  [{}] {}\n", ok ? " ok " : "FAIL", what);
  if (!ok) ++g_failures;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// h_t = coef_t * h_{t+1} + x_t for t = T-1 .. 0 along dim 1. The reverse scan with
// linear_recurrence composes the affine maps h -> coef_t h + x_t from the right, so the whole
// backwards recursion is one parallel scan; element 1 of the result is h (element 0 is the
// running product of the coefficients).
template <class Leaf>
Leaf backward_recursion(const Leaf& coef, const Leaf& x) {
  return std::get<1>(ascan::associative_scan(ascan::linear_recurrence, std::tuple{coef, x}, 1, {.reverse = true}));
}

// ---- Part 1: returns and GAE against the textbook loop ---------------------------------------

// The textbook loops, float64, written from the definitions and sharing no code with the scan.
// The *_scale fields bound |terms| summed along each recursion: max_t sum_k |prod coef| |x_k|,
// which sets the floating-point error any evaluation order can make.
struct Reference {
  std::vector<double> returns, advantages;
  double returns_scale = 0, advantages_scale = 0;
};

Reference textbook_loop(const Tensor<double>& r, const Tensor<double>& v, const Tensor<double>& d, double gamma,
                        double lambda) {
  const int64_t B = r.size(0), T = r.size(1);
  Reference ref{std::vector<double>(B * T), std::vector<double>(B * T)};
  for (int64_t b = 0; b < B; ++b) {
    double G = v(b, T), A = 0, sG = std::abs(v(b, T)), sA = 0;  // bootstrap from V_T when not done
    for (int64_t t = T - 1; t >= 0; --t) {
      const double not_done = 1.0 - d(b, t);
      G = r(b, t) + gamma * not_done * G;
      const double delta = r(b, t) + gamma * not_done * v(b, t + 1) - v(b, t);
      A = delta + gamma * lambda * not_done * A;
      sG = std::abs(r(b, t)) + gamma * not_done * sG;
      sA = std::abs(r(b, t)) + gamma * not_done * std::abs(v(b, t + 1)) + std::abs(v(b, t)) +
           gamma * lambda * not_done * sA;
      ref.returns[b * T + t] = G;
      ref.advantages[b * T + t] = A;
      ref.returns_scale = std::max(ref.returns_scale, sG);
      ref.advantages_scale = std::max(ref.advantages_scale, sA);
    }
  }
  return ref;
}

double max_abs_diff(const Tensor<double>& x, const std::vector<double>& y) {
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::abs(x.data()[i] - y[i]));
  return m;
}

void error_row(const char* what, const char* dtype, double err, double tol) {
  fmt::print("  {:<22} {:<8} {:>18.3e} {:>12.3e}  {}\n", what, dtype, err, tol, err <= tol ? "ok" : "FAIL");
  if (!(err <= tol)) ++g_failures;
}

// Returns and GAE advantages in precision T by two reverse scans; checked against the float64 loop
// run on exactly the same (rounded) inputs, so the difference is the scan's own rounding.
template <class T>
std::pair<Tensor<T>, Tensor<T>> check_returns_and_gae(const Tensor<double>& r64, const Tensor<double>& v64,
                                                      const Tensor<double>& d64, double gamma64, double lambda64,
                                                      const char* dtype) {
  const int64_t B = r64.size(0), Tn = r64.size(1);
  const Tensor<T> r = r64.cast<T>(), v = v64.cast<T>(), d = d64.cast<T>();
  const T gamma = static_cast<T>(gamma64), lambda = static_cast<T>(lambda64);

  auto v_now = Tensor<T>::empty({B, Tn}), v_next = Tensor<T>::empty({B, Tn});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) v_now(b, t) = v(b, t), v_next(b, t) = v(b, t + 1);
  const Tensor<T> coef = (T(1) + (-d)) * gamma;  // gamma (1 - d_t): a done step cuts the recursion
  // The bootstrap value gamma (1 - d_{T-1}) V_T is one more reward at the last step: the scan
  // itself never needs an initial state.
  Tensor<T> rewards = r.clone();
  for (int64_t b = 0; b < B; ++b) rewards(b, Tn - 1) += coef(b, Tn - 1) * v(b, Tn);
  const Tensor<T> returns = backward_recursion(coef, rewards);
  const Tensor<T> delta = r + coef * v_next - v_now;
  const Tensor<T> advantages = backward_recursion(coef * lambda, delta);

  const auto ref = textbook_loop(r.template cast<double>(), v.template cast<double>(), d.template cast<double>(),
                                 static_cast<double>(gamma), static_cast<double>(lambda));
  // Any order of evaluating a sum of T products of up to T factors errs by at most ~2T u |terms|
  // (first order, u = unit roundoff); x2 for the rounded inputs (delta, gamma * lambda).
  const double u = std::numeric_limits<T>::epsilon() / 2;
  const double tol_G = 4.0 * Tn * u * ref.returns_scale, tol_A = 4.0 * Tn * u * ref.advantages_scale;
  const double err_G = max_abs_diff(returns.template cast<double>(), ref.returns);
  const double err_A = max_abs_diff(advantages.template cast<double>(), ref.advantages);
  error_row("returns G_t", dtype, err_G, tol_G);
  error_row("GAE advantages A_t", dtype, err_A, tol_A);
  return {returns, advantages};
}

void part1_returns_and_gae(const Options& opt) {
  const int64_t B = 32, T = 256;
  const double gamma = 0.99, lambda = 0.95, p_done = 0.02;
  const auto r = Tensor<double>::randn({B, T}, opt.seed + 1);
  const auto v = Tensor<double>::randn({B, T + 1}, opt.seed + 2);
  auto d = Tensor<double>::random({B, T}, opt.seed + 3);
  int64_t num_done = 0;
  for (int64_t i = 0; i < d.numel(); ++i) num_done += (d.data()[i] = d.data()[i] < p_done ? 1.0 : 0.0) > 0;
  fmt::print("\nPart 1: returns and GAE, one reverse scan each\n");
  fmt::print("  {} trajectories x {} steps, gamma {}, lambda {}, {} done flags; V has T+1 columns (bootstrap)\n\n",
             B, T, gamma, lambda, num_done);
  fmt::print("  {:<22} {:<8} {:>18} {:>12}\n", "quantity", "dtype", "max|scan - loop|", "tolerance");
  check_returns_and_gae<float>(r, v, d, gamma, lambda, "float32");
  const auto [G, A] = check_returns_and_gae<double>(r, v, d, gamma, lambda, "float64");

  // A look at one trajectory around its first episode boundary: G restarts at the done step.
  int64_t b0 = 0, t0 = -1;
  for (int64_t b = 0; b < B && t0 < 0; ++b)
    for (int64_t t = 3; t < T - 3 && t0 < 0; ++t)
      if (d(b, t) > 0) b0 = b, t0 = t;
  if (t0 >= 0) {
    fmt::print("\n  trajectory {} near its episode end at t = {}:\n", b0, t0);
    fmt::print("  {:>5} {:>8} {:>5} {:>9} {:>9}\n", "t", "r_t", "d_t", "G_t", "A_t");
    for (int64_t t = t0 - 2; t <= t0 + 2; ++t)
      fmt::print("  {:>5} {:>8.3f} {:>5} {:>9.3f} {:>9.3f}\n", t, r(b0, t), d(b0, t) > 0 ? "done" : "", G(b0, t),
                 A(b0, t));
  }
}

// ---- Part 2: REINFORCE with a learned baseline on a chain walk -------------------------------

// States 0..N-1, start at 0, goal N-1; actions left / right. The only positive reward is at the
// goal, so credit has to travel back through the discounted return. A slip (the other action
// happens) makes returns noisy, which is what the baseline is for.
struct ChainWalk {
  int64_t num_states = 16;
  int64_t horizon = 64;  // episodes are cut at, and padded to, this many steps
  double slip = 0.1;
  float goal_reward = 1.0f;
  float step_penalty = 0.01f;
};

struct Rollout {
  Tensor<int64_t> states, actions;    // [E, H]
  Tensor<float> rewards, done, alive; // [E, H]; padding: reward 0, done 1, alive 0
  double mean_return = 0, mean_length = 0, success_rate = 0;
};

Rollout sample_episodes(const ChainWalk& env, const Tensor<float>& logits, int64_t E, std::mt19937_64& gen) {
  const int64_t H = env.horizon;
  Rollout ro{Tensor<int64_t>::zeros({E, H}), Tensor<int64_t>::zeros({E, H}), Tensor<float>::zeros({E, H}),
             Tensor<float>::full({E, H}, 1.0f), Tensor<float>::zeros({E, H})};
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  for (int64_t e = 0; e < E; ++e) {
    int64_t s = 0, t = 0;
    double ret = 0;
    for (; t < H; ++t) {
      const double p_right = 1.0 / (1.0 + std::exp(double(logits(s, 0)) - double(logits(s, 1))));
      const int64_t action = unif(gen) < p_right ? 1 : 0;
      const int64_t moved = unif(gen) < env.slip ? 1 - action : action;
      const int64_t next = std::clamp<int64_t>(s + (moved ? 1 : -1), 0, env.num_states - 1);
      const bool at_goal = next == env.num_states - 1;
      const float reward = -env.step_penalty + (at_goal ? env.goal_reward : 0.0f);
      ro.states(e, t) = s, ro.actions(e, t) = action, ro.rewards(e, t) = reward, ro.alive(e, t) = 1.0f;
      ro.done(e, t) = (at_goal || t == H - 1) ? 1.0f : 0.0f;
      ret += reward;
      s = next;
      if (at_goal) break;
    }
    ro.mean_return += ret / E;
    ro.mean_length += double(std::min(t + 1, H)) / E;
    ro.success_rate += (t < H ? 1.0 : 0.0) / E;
  }
  return ro;
}

Tensor<float> one_hot(const Tensor<int64_t>& index, int64_t n) {
  auto out = Tensor<float>::zeros({index.numel(), n});
  for (int64_t i = 0; i < index.numel(); ++i) out(i, index.data()[i]) = 1.0f;
  return out;
}

void part2_reinforce(const Options& opt) {
  const ChainWalk env;
  const int64_t E = 64, H = env.horizon, N = env.num_states, M = E * H;
  const int iters = opt.iters > 0 ? opt.iters : (opt.short_mode ? 60 : 200);
  const int print_every = std::max(1, iters / 10), window = std::max(1, std::min(5, iters / 4));
  const float gamma = 0.97f, value_coef = 0.5f;
  fmt::print("\nPart 2: REINFORCE with a learned baseline on a chain walk\n");
  fmt::print("  {} states, start 0, goal {} (reward {}), step penalty {}, slip {}, horizon {}; {} episodes per "
             "iteration\n", N, N - 1, env.goal_reward, env.step_penalty, env.slip, H, E);
  fmt::print("  policy: softmax of a logit table [{}, 2]; baseline: value table [{}]; Adam, gamma {}\n\n", N, N, gamma);

  ad::Tape<float> tape;  // params live before the mark; each step's nodes are dropped after it
  auto policy = ad::param(Tensor<float>::zeros({N, 2}));  // uniform random walk to begin with
  auto baseline = ad::param(Tensor<float>::zeros({N}));
  ad::Adam<float> adam({policy, baseline}, 0.05f);
  std::mt19937_64 gen(opt.seed);
  std::vector<double> returns_per_iter;

  fmt::print("  {:>5} {:>11} {:>9} {:>10} {:>10} {:>9} {:>11}\n", "iter", "avg return", "success", "avg steps",
             "mean G_0", "V(start)", "P(right|0)");
  for (int it = 0; it < iters; ++it) {
    const Rollout ro = sample_episodes(env, policy.value(), E, gen);
    returns_per_iter.push_back(ro.mean_return);

    // Discounted returns of the padded batch: the done flags stop each episode's sum at its end.
    const Tensor<float> coef = (1.0f + (-ro.done)) * gamma;
    const Tensor<float> G = backward_recursion(coef, ro.rewards).reshape({M});
    double mean_G0 = 0;  // the discounted return from the start state: what V(start) should learn
    for (int64_t e = 0; e < E; ++e) mean_G0 += G(e * H) / E;
    const Tensor<float> alive = ro.alive.reshape({M});

    const auto mark = tape.mark();
    const auto features = ad::constant(one_hot(ro.states.reshape({M}), N));  // [M, N]
    const auto log_pi = ad::gather(ad::log_softmax(ad::matmul(features, policy), 1), 1, ro.actions.reshape({M}));
    const auto value = ad::matmul(features, baseline);                         // b(s_t), [M]
    // The advantage G - b(s) is a constant for the policy term (stop-gradient); the baseline
    // learns only through the squared error.
    const Tensor<float> advantage = (G - value.value()) * alive;
    const auto policy_loss = -ad::sum(log_pi * ad::constant(advantage));
    const auto value_loss = ad::sum(ad::constant(alive) * ad::square(ad::constant(G) - value));
    const auto loss = (policy_loss + value_loss * value_coef) * (1.0f / float(E));
    adam.zero_grad();
    ad::backward(loss);
    adam.step();
    tape.rewind(mark);

    if (it % print_every == 0 || it == iters - 1) {
      const auto& l = policy.value();
      const double p_right0 = 1.0 / (1.0 + std::exp(double(l(0, 0)) - double(l(0, 1))));
      fmt::print("  {:>5} {:>11.3f} {:>8.0f}% {:>10.1f} {:>10.3f} {:>9.3f} {:>11.3f}\n", it, ro.mean_return,
                 100 * ro.success_rate, ro.mean_length, mean_G0, baseline.value()(0), p_right0);
    }
  }

  auto window_mean = [&](int from) {
    double s = 0;
    for (int i = from; i < from + window; ++i) s += returns_per_iter[i];
    return s / window;
  };
  const double first = window_mean(0), last = window_mean(iters - window);
  fmt::print("\n  P(right|s) learned: ");
  for (int64_t s = 0; s < N - 1; ++s)
    fmt::print("{:.2f} ", 1.0 / (1.0 + std::exp(double(policy.value()(s, 0)) - double(policy.value()(s, 1)))));
  fmt::print("\n  mean return over the first {} iterations {:.3f}, over the last {} {:.3f}\n", window, first, window,
             last);
  // The uniform random walk mostly times out (return about -0.5). Always choosing right moves
  // right with probability 1 - 2 slip per step on average, so it needs (N-1)/(1 - 2 slip) steps:
  // return 1 - 0.01 * 18.75 = 0.81, the best on offer. Both modes reach ~0.79 by the end on every
  // seed tried (1..30), so the thresholds leave a wide margin while still meaning "learned".
  const double best = env.goal_reward - env.step_penalty * double(N - 1) / (1.0 - 2.0 * env.slip);
  fmt::print("  an always-right policy expects {:.3f}\n", best);
  if (iters < 20) {
    fmt::print("  (improvement check skipped: {} iterations are too few to judge learning)\n", iters);
    return;
  }
  report(last - first >= 0.6, fmt::format("average return improved by {:.3f} (required >= 0.6)", last - first));
  report(last >= 0.7, fmt::format("final average return {:.3f} (required >= 0.7)", last));
}

// ---- Part 3: d loss / d gamma through the scan ------------------------------------------------

void part3_gamma_gradient(const Options& opt) {
  const int64_t B = 8, T = 64;
  const auto r = Tensor<double>::randn({B, T}, opt.seed + 11);
  const auto w = Tensor<double>::randn({B, T}, opt.seed + 12);  // random cotangent: sum(w G) probes all of G
  auto not_done = Tensor<double>::random({B, T}, opt.seed + 13);
  for (int64_t i = 0; i < not_done.numel(); ++i) not_done.data()[i] = not_done.data()[i] < 0.05 ? 0.0 : 1.0;

  // L = sum(w * G(gamma)); G from the reverse scan with coefficient gamma (1 - d), gamma broadcast
  // from [1, 1] or [B, 1]. xs = {gamma, rewards}; the same code runs on plain Tensors (values,
  // finite differences) and on Vars (reverse mode), which is what gradcheck compares.
  auto weighted_returns = [&](const auto& xs) {
    using Leaf = std::decay_t<decltype(xs[0])>;
    auto lift = [](const Tensor<double>& t) -> Leaf {
      if constexpr (std::is_same_v<Leaf, Tensor<double>>) return t;
      else return ad::constant(t);
    };
    return sum(lift(w) * backward_recursion(xs[0] * lift(not_done), xs[1]));
  };
  auto plain_loss = [&](double gamma) {
    return weighted_returns(std::vector<Tensor<double>>{Tensor<double>::full({1, 1}, gamma), r}).data()[0];
  };

  const double gamma0 = 0.95, eps = 1e-5;
  fmt::print("\nPart 3: d L / d gamma with L = sum(w * G), gamma a [1, 1] parameter, {} x {} steps\n\n", B, T);

  ad::Tape<double> tape;
  auto gamma = ad::param(Tensor<double>::full({1, 1}, gamma0));
  const auto loss = weighted_returns(std::vector<ad::Var<double>>{gamma, ad::constant(r)});
  ad::backward(loss);
  const double g_ad = gamma.grad()(0, 0);

  // Forward-mode loop, exact: dG_t = (1 - d_t) (G_{t+1} + gamma dG_{t+1}).
  double g_loop = 0;
  for (int64_t b = 0; b < B; ++b) {
    double G = 0, dG = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      dG = not_done(b, t) * (G + gamma0 * dG);
      G = r(b, t) + gamma0 * not_done(b, t) * G;
      g_loop += w(b, t) * dG;
    }
  }
  // Central difference with the plain Tensor scan: truncation ~eps^2 |L'''| / 6 and cancellation
  // ~u |L| / eps are both far below 1e-6 relative for eps = 1e-5 (gamma^k terms, k <= 64).
  const double g_fd = (plain_loss(gamma0 + eps) - plain_loss(gamma0 - eps)) / (2 * eps);
  const double scale = std::max(1.0, std::abs(g_loop));

  fmt::print("  L(gamma = {}) = {:.10f}\n", gamma0, loss.value().data()[0]);
  fmt::print("  {:<36} {:>18} {:>14} {:>10}\n", "method", "dL/dgamma", "|diff|", "tolerance");
  fmt::print("  {:<36} {:>18.10f}\n", "ad::backward (scan adjoint)", g_ad);
  fmt::print("  {:<36} {:>18.10f} {:>14.3e} {:>10.1e}\n", "forward-mode loop (exact, float64)", g_loop,
             std::abs(g_loop - g_ad), 1e-10 * scale);
  fmt::print("  {:<36} {:>18.10f} {:>14.3e} {:>10.1e}\n", fmt::format("central difference (eps {:.0e})", eps), g_fd,
             std::abs(g_fd - g_ad), 1e-6 * scale);
  report(std::abs(g_loop - g_ad) <= 1e-10 * scale, "reverse mode matches the exact forward-mode loop");
  report(std::abs(g_fd - g_ad) <= 1e-6 * scale, "reverse mode matches the central difference");

  // gradcheck: every element of gamma and of the rewards, by central differences, with a
  // random cotangent, plus value agreement between the Tensor and the Var version.
  for (const int64_t rows : {int64_t{1}, B}) {
    auto g = Tensor<double>::random({rows, 1}, opt.seed + 14, 0.8, 0.99);
    const auto rep = ad::gradcheck(weighted_returns, {g, r}, {.eps = 1e-6, .atol = 1e-6, .rtol = 1e-5});
    report(rep.ok, fmt::format("ad::gradcheck, gamma [{}, 1] and rewards [{}, {}]: {} checks, max |diff| {:.2e}{}",
                               rows, B, T, rep.num_checked, rep.max_abs_error, rep.ok ? "" : "\n" + rep.message));
  }
}

void print_usage(std::FILE* to) {
  fmt::print(to,
      "usage: discounted_returns [--short] [--seed N] [--iters N] [--help]\n"
      "  Discounted returns and GAE as one reverse linear-recurrence scan each, checked against the\n"
      "  textbook loop; REINFORCE with a learned baseline on a chain walk; d(loss)/d(gamma) through\n"
      "  the scan, checked by finite differences and ad::gradcheck. Exits non-zero if a check fails.\n"
      "  --short    fewer training iterations (the ctest mode)\n"
      "  --seed N   seed for data and episode sampling (default 2024)\n"
      "  --iters N  training iterations for part 2 (default 200, 60 with --short)\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto number = [&]() -> long long {
      if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{} needs a value", arg));
      const std::string text = argv[++i];
      size_t used = 0;
      long long v = -1;
      try { v = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
      if (used == 0 || used != text.size() || v < 0)
        throw std::invalid_argument(fmt::format("{} {}: expected a non-negative integer", arg, text));
      return v;
    };
    try {
      if (arg == "--help" || arg == "-h") return print_usage(stdout), 0;
      if (arg == "--short") opt.short_mode = true;
      else if (arg == "--seed") opt.seed = static_cast<uint64_t>(number());
      else if (arg == "--iters") opt.iters = static_cast<int>(std::max(1LL, number()));
      else throw std::invalid_argument(fmt::format("unknown argument {}", arg));
    } catch (const std::exception& e) {
      fmt::print(stderr, "discounted_returns: {}\n", e.what());
      print_usage(stderr);
      return 2;
    }
  }

  fmt::print("discounted_returns{}: seed {}\n", opt.short_mode ? " --short" : "", opt.seed);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (auto part : {part1_returns_and_gae, part2_reinforce, part3_gamma_gradient}) {
      const auto t = std::chrono::steady_clock::now();
      part(opt);
      fmt::print("  ({:.2f} s)\n", seconds_since(t));
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "discounted_returns: error: {}\n", e.what());
    return 1;
  }
  const std::string verdict = g_failures == 0 ? "all checks passed" : fmt::format("{} check(s) FAILED", g_failures);
  fmt::print("\n{} in {:.2f} s\n", verdict, seconds_since(t0));
  return g_failures == 0 ? 0 : 1;
}
