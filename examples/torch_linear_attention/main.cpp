// torch_linear_attention — the linear-attention demo's model written in LibTorch, its recurrence
// through the bridge (ascan::torch::associative_scan), trained with torch::optim::Adam on
// associative recall; next to it the same model with the recurrence as a loop of LibTorch ops.
//
// 1. From the same initial values and batches, a few steps of both: losses and gradients must
//    agree (float32 rounding), and the time per training step of each is printed;
// 2. trains the bridge's model (the loop's too with --train-loop), with a progress bar,
//    evaluates on held-out sequences, and writes the curve to CSV and (with gnuplot) to a PNG.
// The task, the initial values and the schedule are examples/linear_attention's (model.hpp), so
// the accuracies compare. Printing uses <cstdio>: LibTorch 2.x brings its own fmt.
#include <ascan/torch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "../linear_attention/model.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using at::Tensor;

struct Flags {
  la::Config model;
  int64_t steps = 800;
  double lr = 3e-3;
  uint64_t seed = 1;
  int threads = 0;  // 0: torch's default
  std::string out = "torch_linear_attention_out";
  bool plot = true;
  bool short_mode = false;
  bool train_loop = false;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: torch_linear_attention [--steps N] [--keys N] [--pairs N] [--queries N] [--dim N] [--dk N]\n"
               "                              [--dv N] [--batch N] [--lr X] [--seed N] [--threads N] [--out DIR]\n"
               "                              [--no-plot] [--train-loop] [--short]\n"
               "  --threads N   torch's intra-op threads (at::set_num_threads; the bridge follows them)\n"
               "  --train-loop  also train the model with the recurrence as a LibTorch loop\n"
               "  --short       a small configuration: the checks and 20 training steps (for tests)\n");
  std::exit(code);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "torch_linear_attention: %s needs a value\n", argv[i]);
        usage(2);
      }
      return argv[++i];
    };
    auto count = [&]() {
      const std::string s = next();
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (*end != '\0' || v < 1) {
        std::fprintf(stderr, "torch_linear_attention: %s got '%s', expected a positive integer\n", argv[i - 1], s.c_str());
        usage(2);
      }
      return static_cast<int64_t>(v);
    };
    if (a == "--steps") f.steps = count();
    else if (a == "--keys") f.model.num_keys = f.model.num_values = count();
    else if (a == "--pairs") f.model.pairs = count();
    else if (a == "--queries") f.model.queries = count();
    else if (a == "--dim") f.model.dim = count();
    else if (a == "--dk") f.model.dk = count();
    else if (a == "--dv") f.model.dv = count();
    else if (a == "--batch") f.model.batch = count();
    else if (a == "--seed") f.seed = static_cast<uint64_t>(count());
    else if (a == "--threads") f.threads = static_cast<int>(count());
    else if (a == "--lr") f.lr = std::atof(next().c_str());
    else if (a == "--out") f.out = next();
    else if (a == "--no-plot") f.plot = false;
    else if (a == "--train-loop") f.train_loop = true;
    else if (a == "--short") f.short_mode = true;
    else if (a == "--help" || a == "-h") usage(0);
    else {
      std::fprintf(stderr, "torch_linear_attention: unknown flag '%s'\n", argv[i]);
      usage(2);
    }
  }
  if (f.model.pairs > f.model.num_keys) {
    std::fprintf(stderr, "torch_linear_attention: --pairs %lld exceeds the %lld distinct keys\n",
                 static_cast<long long>(f.model.pairs), static_cast<long long>(f.model.num_keys));
    usage(2);
  }
  if (!(f.lr > 0)) {
    std::fprintf(stderr, "torch_linear_attention: --lr must be positive\n");
    usage(2);
  }
  return f;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A copy of an ascan tensor as a torch tensor (the task's batches and initial values).
template <class T>
Tensor to_torch(const ascan::Tensor<T>& t) {
  const std::vector<int64_t> sizes(t.shape().begin(), t.shape().end());
  const auto dtype = std::is_same_v<T, float> ? at::kFloat : at::kLong;
  return torch::from_blob(const_cast<T*>(t.data()), sizes, at::TensorOptions().dtype(dtype)).clone();
}

struct Batch {
  Tensor onehot, targets, mask;  // [B * L, vocab], [B * L] (int64), [B * L]
  int64_t scored = 0;
};

Batch make_batch(const la::Config& c, uint64_t seed) {
  const auto b = la::make_batch<float>(c, seed);
  return {to_torch(b.onehot), to_torch(b.targets), to_torch(b.mask), b.scored};
}

// The parameters emb, wq, wk, wv, wg, bg, wo, bo with the demo's initial values.
std::vector<Tensor> init_params(const la::Config& c, uint64_t seed) {
  std::vector<Tensor> ps;
  for (const auto& v : la::init_values<float>(c, seed)) ps.push_back(to_torch(v).set_requires_grad(true));
  return ps;
}

enum class Recurrence { kScan, kLoop };

// S_t = alpha_t * S_{t-1} + kv_t along dim 1 as LibTorch ops, the way a LibTorch user writes it
// (unbind: select's backward would write a zero tensor of the whole input per step).
Tensor recurrence_loop(const Tensor& alpha, const Tensor& kv) {
  const int64_t L = kv.size(1);
  const std::vector<Tensor> a = alpha.unbind(1), x = kv.unbind(1);
  std::vector<Tensor> states;
  states.reserve(static_cast<size_t>(L));
  Tensor s = x[0];
  states.push_back(s);
  for (int64_t t = 1; t < L; ++t) {
    s = a[t] * s + x[t];
    states.push_back(s);
  }
  return torch::stack(states, 1);
}

// Logits [B * L, vocab]: model.hpp's la::logits, op for op, on torch tensors.
Tensor logits(const la::Config& c, const std::vector<Tensor>& p, const Batch& b, Recurrence rec) {
  const int64_t B = c.batch, L = c.seq_len();
  const Tensor e = b.onehot.matmul(p[0]);  // [B*L, dim]
  const Tensor e3 = e.view({B, L, c.dim});
  const Tensor prev = torch::cat({torch::zeros({B, 1, c.dim}), e3.slice(1, 0, L - 1)}, 1).reshape({B * L, c.dim});
  const Tensor q = e.matmul(p[1]).view({B, L, 1, c.dk}) * (1.0 / std::sqrt(static_cast<double>(c.dk)));
  const Tensor k = prev.matmul(p[2]).view({B, L, c.dk, 1});
  const Tensor v = e.matmul(p[3]).view({B, L, 1, c.dv});
  const Tensor alpha = torch::sigmoid(e.matmul(p[4]) + p[5]).view({B, L, c.dk, 1});  // broadcast over dv
  const Tensor kv = k * v;                                                             // [B, L, dk, dv]
  const Tensor S = rec == Recurrence::kScan
                       ? std::get<1>(ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{alpha, kv}, 1))
                       : recurrence_loop(alpha, kv);
  const Tensor o = q.matmul(S).view({B * L, c.dv});
  return o.matmul(p[6]) + p[7];
}

Tensor cross_entropy(const Tensor& logit, const Batch& b) {
  const Tensor lp = torch::log_softmax(logit, 1).gather(1, b.targets.unsqueeze(1)).squeeze(1);
  return -(lp * b.mask).sum() / static_cast<double>(b.scored);
}

double accuracy(const Tensor& logit, const Batch& b) {
  const Tensor hit = (logit.argmax(1) == b.targets).to(at::kFloat) * b.mask;
  return hit.sum().item<double>() / static_cast<double>(b.scored);
}

// 1. Scan and loop from the same initial values and batches: a few Adam steps each; losses and
// gradients must agree to float32 rounding; the untimed first step warms both.
bool loop_matches_scan(const Flags& f, double& ms_scan, double& ms_loop) {
  const la::Config& c = f.model;
  const int steps = 4;
  std::vector<Tensor> ps[2] = {init_params(c, f.seed), init_params(c, f.seed)};
  torch::optim::Adam opt_scan(ps[0], torch::optim::AdamOptions(f.lr)), opt_loop(ps[1], torch::optim::AdamOptions(f.lr));
  double worst_loss = 0, worst_grad = 0, t[2] = {0, 0};
  for (int s = 0; s < steps; ++s) {
    const Batch batch = make_batch(c, f.seed * 1000003 + static_cast<uint64_t>(s));
    double losses[2];
    for (int r = 0; r < 2; ++r) {
      const auto t0 = Clock::now();
      const Tensor loss = cross_entropy(logits(c, ps[r], batch, r == 0 ? Recurrence::kScan : Recurrence::kLoop), batch);
      loss.backward();
      if (s > 0) t[r] += seconds_since(t0);
      losses[r] = loss.item<double>();
    }
    worst_loss = std::max(worst_loss, std::abs(losses[0] - losses[1]) / std::abs(losses[1]));
    for (size_t i = 0; i < ps[0].size(); ++i) {
      const Tensor g0 = ps[0][i].grad(), g1 = ps[1][i].grad();
      const double den = std::max(g1.abs().max().item<double>(), 1e-30);
      worst_grad = std::max(worst_grad, (g0 - g1).abs().max().item<double>() / den);
    }
    opt_scan.step(), opt_loop.step();
    opt_scan.zero_grad(), opt_loop.zero_grad();
  }
  const bool ok = worst_loss < 1e-4 && worst_grad < 1e-3;  // float32 sums over L steps: a few hundred ulps
  ms_scan = 1e3 * t[0] / (steps - 1), ms_loop = 1e3 * t[1] / (steps - 1);
  std::printf("bridge scan vs LibTorch loop (%d Adam steps, B=%lld L=%lld dk=%lld dv=%lld): max rel. loss diff %.1e, "
              "max rel. gradient diff %.1e  %s\n",
              steps, static_cast<long long>(c.batch), static_cast<long long>(c.seq_len()), static_cast<long long>(c.dk),
              static_cast<long long>(c.dv), worst_loss, worst_grad, ok ? "OK" : "FAILED");
  std::printf("  forward+backward per step: bridge %.1f ms, LibTorch loop %.1f ms -> %.1fx faster with the bridge\n",
              ms_scan, ms_loop, ms_loop / ms_scan);
  return ok;
}

struct Point {
  int64_t step;
  double loss, acc, seconds;
};

void progress(const Flags& f, const char* what, const Point& p, bool final) {
  const int width = 30;
  const int filled = static_cast<int>(width * p.step / f.steps);
  const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.');
  const bool tty = isatty(fileno(stdout));
  if (!tty && !final && p.step % std::max<int64_t>(1, f.steps / 10) != 0) return;
  std::printf("%s%-6s [%s] step %5lld/%lld  loss %.3f  acc %5.1f%%  %.1f ms/step%s", tty ? "\r" : "", what, bar.c_str(),
              static_cast<long long>(p.step), static_cast<long long>(f.steps), p.loss, 100 * p.acc,
              1e3 * p.seconds / static_cast<double>(p.step), tty && !final ? "" : "\n");
  std::fflush(stdout);
}

// 2. Training with Adam and the demo's cosine schedule; returns the curve.
std::vector<Point> train(const Flags& f, std::vector<Tensor>& ps, Recurrence rec) {
  const la::Config& c = f.model;
  torch::optim::Adam opt(ps, torch::optim::AdamOptions(f.lr));
  std::vector<Point> curve;
  const auto t0 = Clock::now();
  for (int64_t step = 1; step <= f.steps; ++step) {
    const double frac = static_cast<double>(step - 1) / static_cast<double>(f.steps);
    for (auto& group : opt.param_groups())
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(f.lr * (0.55 + 0.45 * std::cos(M_PI * frac)));
    const Batch batch = make_batch(c, f.seed * 7777 + static_cast<uint64_t>(step));
    const Tensor logit = logits(c, ps, batch, rec);
    const Tensor loss = cross_entropy(logit, batch);
    opt.zero_grad();
    loss.backward();
    opt.step();
    const Point p{step, loss.item<double>(), accuracy(logit.detach(), batch), seconds_since(t0)};
    curve.push_back(p);
    progress(f, rec == Recurrence::kScan ? "bridge" : "loop", p, step == f.steps);
  }
  return curve;
}

double held_out_accuracy(const Flags& f, const std::vector<Tensor>& ps, int batches) {
  torch::NoGradGuard no_grad;
  double acc = 0;
  for (int i = 0; i < batches; ++i) {
    const Batch batch = make_batch(f.model, (f.seed + 1) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i));
    acc += accuracy(logits(f.model, ps, batch, Recurrence::kScan), batch);
  }
  return acc / batches;
}

bool write_outputs(const Flags& f, const std::vector<Point>& scan, const std::vector<Point>& loop, double chance) {
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  const auto dir = std::filesystem::path(f.out);
  const auto csv = dir / "training.csv";
  std::FILE* fp = std::fopen(csv.c_str(), "w");
  if (!fp) {
    std::fprintf(stderr, "torch_linear_attention: cannot write %s\n", csv.c_str());
    return false;
  }
  std::fprintf(fp, "step,loss,accuracy,seconds,loop_loss,loop_accuracy,loop_seconds\n");
  for (size_t i = 0; i < scan.size(); ++i) {
    std::fprintf(fp, "%lld,%.6f,%.6f,%.3f", static_cast<long long>(scan[i].step), scan[i].loss, scan[i].acc,
                 scan[i].seconds);
    if (i < loop.size()) std::fprintf(fp, ",%.6f,%.6f,%.3f\n", loop[i].loss, loop[i].acc, loop[i].seconds);
    else std::fprintf(fp, ",,,\n");
  }
  std::fclose(fp);
  std::printf("wrote %s\n", csv.c_str());
  if (!f.plot) return true;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("gnuplot not found: no plot (install gnuplot-nox)\n");
    return true;
  }
  const auto png = dir / "training.png", script = dir / "training.gp";
  fp = std::fopen(script.c_str(), "w");
  if (!fp) return false;
  std::fprintf(fp,
               "set terminal pngcairo size 900,500 font 'sans,11'\n"
               "set output '%s'\n"
               "set datafile separator ','\n"
               "set title 'Gated linear attention in LibTorch, recurrence through ascan::torch'\n"
               "set xlabel 'training step'\n"
               "set ylabel 'cross-entropy loss'\n"
               "set y2label 'accuracy on queried values'\n"
               "set yrange [0:*]\n"
               "set y2range [0:1]\n"
               "set ytics nomirror\n"
               "set y2tics 0.1\n"
               "set grid\n"
               "set key center right\n"
               "plot '%s' using 1:2 skip 1 with lines lw 2 title 'loss (bridge)', \\\n"
               "     '' using 1:3 skip 1 axes x1y2 with lines lw 2 title 'accuracy (bridge, batch)', \\\n"
               "%s"
               "     %g axes x1y2 with lines dt 2 title 'chance'\n",
               png.c_str(), csv.c_str(),
               loop.empty() ? "" : "     '' using 1:6 skip 1 axes x1y2 with lines lw 1 title 'accuracy (LibTorch loop, batch)', \\\n",
               chance);
  std::fclose(fp);
  const std::string cmd = "gnuplot '" + script.string() + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "torch_linear_attention: gnuplot failed on %s\n", script.c_str());
    return false;
  }
  std::printf("wrote %s\n", png.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = parse(argc, argv);
  if (f.short_mode) {  // a small configuration that still runs every stage (for the test suite)
    f.steps = std::min<int64_t>(f.steps, 20);
    f.model.num_keys = f.model.num_values = 16;
    f.model.pairs = f.model.queries = 8;
    f.model.batch = 8;
  }
  if (f.threads) at::set_num_threads(f.threads);
  const la::Config& c = f.model;
  std::printf("ascan::torch linear attention (LibTorch %s): associative recall, %lld keys, %lld pairs + %lld queries "
              "(L = %lld), dim %lld, dk %lld, dv %lld, batch %lld, %d threads\n",
              TORCH_VERSION, static_cast<long long>(c.num_keys), static_cast<long long>(c.pairs),
              static_cast<long long>(c.queries), static_cast<long long>(c.seq_len()), static_cast<long long>(c.dim),
              static_cast<long long>(c.dk), static_cast<long long>(c.dv), static_cast<long long>(c.batch),
              at::get_num_threads());
  double ms_scan = 0, ms_loop = 0;
  bool ok = loop_matches_scan(f, ms_scan, ms_loop);

  std::vector<Tensor> ps = init_params(c, f.seed);
  const auto curve = train(f, ps, Recurrence::kScan);
  std::vector<Point> loop_curve;
  std::vector<Tensor> loop_ps;
  if (f.train_loop) {
    loop_ps = init_params(c, f.seed);
    loop_curve = train(f, loop_ps, Recurrence::kLoop);
  }
  const int eval_batches = f.short_mode ? 2 : 16;
  const double chance = 1.0 / static_cast<double>(c.num_values);
  const double acc = held_out_accuracy(f, ps, eval_batches);
  std::printf("held-out accuracy on %lld queried values: %.1f%% with the bridge (chance %.1f%%), %.1f s of training\n",
              static_cast<long long>(eval_batches * c.batch * c.queries), 100 * acc, 100 * chance, curve.back().seconds);
  if (f.train_loop)
    std::printf("held-out accuracy with the LibTorch loop: %.1f%%, %.1f s of training\n",
                100 * held_out_accuracy(f, loop_ps, eval_batches), loop_curve.back().seconds);
  ok = write_outputs(f, curve, loop_curve, chance) && ok;
  if (!ok) std::printf("FAILED: see the checks above\n");
  return ok ? 0 : 1;
}
