// linear_attention — trains a gated linear-attention model on associative recall with ascan.
//
// 1. gradchecks a tiny float64 instance of the model (the scan's gradient against finite
//    differences, through every layer);
// 2. runs the same model with its recurrence as a sequential loop on the tape, checks that loss
//    and gradients agree with the scan for a few training steps, and times both;
// 3. trains with Adam, with a progress bar, evaluates on held-out sequences, and writes the
//    loss/accuracy curve to CSV and (with gnuplot) to a PNG.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "model.hpp"

namespace {

namespace ad = ascan::ad;
using Clock = std::chrono::steady_clock;

struct Flags {
  la::Config model;
  int64_t steps = 800;
  double lr = 3e-3;
  uint64_t seed = 1;
  int threads = 0;  // 0: library default
  std::string out = "linear_attention_out";
  bool plot = true;
  bool short_mode = false;
};

[[noreturn]] void usage(int code) {
  fmt::print(code ? stderr : stdout,
             "usage: linear_attention [--steps N] [--keys N] [--pairs N] [--queries N] [--dim N] [--dk N] [--dv N]\n"
             "                        [--batch N] [--lr X] [--seed N] [--threads N] [--out DIR] [--no-plot]\n"
             "                        [--short]\n"
             "  --keys N     distinct key tokens and value tokens (vocabulary 2 * N)\n"
             "  --pairs N    key-value pairs per sequence (sequence length 2 * (pairs + queries))\n"
             "  --short      a small configuration: the checks and 20 training steps (for tests)\n");
  std::exit(code);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "linear_attention: {} needs a value\n", a);
        usage(2);
      }
      return argv[++i];
    };
    auto count = [&]() {
      const std::string s = next();
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (*end != '\0' || v < 1) {
        fmt::print(stderr, "linear_attention: {} got '{}', expected a positive integer\n", a, s);
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
    else if (a == "--short") f.short_mode = true;
    else if (a == "--help" || a == "-h") usage(0);
    else {
      fmt::print(stderr, "linear_attention: unknown flag '{}'\n", a);
      usage(2);
    }
  }
  if (f.model.pairs > f.model.num_keys) {
    fmt::print(stderr, "linear_attention: --pairs {} exceeds the {} distinct keys\n", f.model.pairs, f.model.num_keys);
    usage(2);
  }
  if (!(f.lr > 0)) {
    fmt::print(stderr, "linear_attention: --lr must be positive\n");
    usage(2);
  }
  return f;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// 1. The whole model in float64 on a tiny instance, against central differences.
bool gradcheck_tiny(uint64_t seed) {
  la::Config c;
  c.num_keys = 4, c.num_values = 3, c.pairs = 2, c.queries = 2, c.dim = 5, c.dk = 3, c.dv = 2, c.batch = 2;
  const auto batch = la::make_batch<double>(c, seed);
  const auto init = la::init_values<double>(c, seed);
  auto fn = [&](const std::vector<ad::Var<double>>& ps) {
    return la::loss(c, la::make_params(ps), batch, la::Recurrence::kScan);
  };
  const auto report = ad::gradcheck(fn, init);
  fmt::print("gradcheck (float64, B={} L={} dim={} dk={} dv={}): {} of {} partial derivatives match, "
             "max |error| {:.2e}  {}\n",
             c.batch, c.seq_len(), c.dim, c.dk, c.dv, report.num_checked - report.num_failed, report.num_checked,
             report.max_abs_error, report.ok ? "OK" : "FAILED");
  if (!report.ok) fmt::print("{}\n", report.message);
  return report.ok;
}

// 2. Scan and loop from the same initial values and batches: a few Adam steps each; losses and
// gradients must agree to float32 rounding, and the time per step gives the speedup.
bool loop_matches_scan(const Flags& f) {
  const la::Config& c = f.model;
  const int steps = 4;  // the first is not timed (it warms the allocator's cache)
  double worst_loss = 0, worst_grad = 0, t_scan = 0, t_loop = 0;
  std::vector<ad::Var<float>> ps[2];
  for (int r = 0; r < 2; ++r)
    for (const auto& v : la::init_values<float>(c, f.seed)) ps[r].push_back(ad::param(v));
  ad::Adam<float> opt_scan(ps[0], static_cast<float>(f.lr)), opt_loop(ps[1], static_cast<float>(f.lr));
  for (int s = 0; s < steps; ++s) {
    const auto batch = la::make_batch<float>(c, f.seed * 1000003 + static_cast<uint64_t>(s));
    float losses[2];
    for (int r = 0; r < 2; ++r) {
      const auto t0 = Clock::now();
      auto L = la::loss(c, la::make_params(ps[r]), batch, r == 0 ? la::Recurrence::kScan : la::Recurrence::kLoop);
      ad::backward(L);
      if (s > 0) (r == 0 ? t_scan : t_loop) += seconds_since(t0);
      losses[r] = L.value().data()[0];
    }
    worst_loss = std::max(worst_loss, std::abs(static_cast<double>(losses[0] - losses[1])) / std::abs(losses[1]));
    for (size_t i = 0; i < ps[0].size(); ++i) {
      const auto g0 = ps[0][i].grad(), g1 = ps[1][i].grad();
      double num = 0, den = 0;
      for (int64_t j = 0; j < g0.numel(); ++j) {
        num = std::max(num, static_cast<double>(std::abs(g0.data()[j] - g1.data()[j])));
        den = std::max(den, static_cast<double>(std::abs(g1.data()[j])));
      }
      worst_grad = std::max(worst_grad, num / std::max(den, 1e-30));
    }
    opt_scan.step(), opt_loop.step();
    opt_scan.zero_grad(), opt_loop.zero_grad();
  }
  // float32 sums over L steps and the model's reductions: a few hundred ulps is the right scale.
  const bool ok = worst_loss < 1e-4 && worst_grad < 1e-3;
  fmt::print("scan vs loop on the tape ({} Adam steps, B={} L={} dk={} dv={}): max rel. loss diff {:.1e}, "
             "max rel. gradient diff {:.1e}  {}\n",
             steps, c.batch, c.seq_len(), c.dk, c.dv, worst_loss, worst_grad, ok ? "OK" : "FAILED");
  fmt::print("  forward+backward per step: scan {:.1f} ms, loop {:.1f} ms -> {:.1f}x faster with the scan\n",
             1e3 * t_scan / (steps - 1), 1e3 * t_loop / (steps - 1), t_loop / t_scan);
  return ok;
}

struct Point {
  int64_t step;
  double loss, acc, seconds;
};

void progress(const Flags& f, const Point& p, double steps_per_s, bool final) {
  const int width = 30;
  const int filled = static_cast<int>(width * p.step / f.steps);
  const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.');
  const bool tty = isatty(fileno(stdout));
  if (!tty && !final && p.step % std::max<int64_t>(1, f.steps / 10) != 0) return;
  fmt::print("{}[{}] step {:>5}/{}  loss {:.3f}  acc {:5.1f}%  {:.1f} steps/s{}", tty ? "\r" : "", bar, p.step,
             f.steps, p.loss, 100 * p.acc, steps_per_s, tty && !final ? "" : "\n");
  std::fflush(stdout);
}

bool write_outputs(const Flags& f, const std::vector<Point>& curve, double chance) {
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  const auto dir = std::filesystem::path(f.out);
  const auto csv = dir / "training.csv";
  std::FILE* fp = std::fopen(csv.c_str(), "w");
  if (!fp) {
    fmt::print(stderr, "linear_attention: cannot write {}\n", csv.string());
    return false;
  }
  fmt::print(fp, "step,loss,accuracy,seconds\n");
  for (const auto& p : curve) fmt::print(fp, "{},{:.6f},{:.6f},{:.3f}\n", p.step, p.loss, p.acc, p.seconds);
  std::fclose(fp);
  fmt::print("wrote {}\n", csv.string());
  if (!f.plot) return true;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fmt::print("gnuplot not found: no plot (install gnuplot-nox)\n");
    return true;
  }
  const auto png = dir / "training.png", script = dir / "training.gp";
  fp = std::fopen(script.c_str(), "w");
  if (!fp) return false;
  fmt::print(fp,
             "set terminal pngcairo size 900,500 font 'sans,11'\n"
             "set output '{}'\n"
             "set datafile separator ','\n"
             "set title 'Gated linear attention on associative recall (ascan)'\n"
             "set xlabel 'training step'\n"
             "set ylabel 'cross-entropy loss'\n"
             "set y2label 'accuracy on queried values'\n"
             "set yrange [0:*]\n"
             "set y2range [0:1]\n"
             "set ytics nomirror\n"
             "set y2tics 0.1\n"
             "set grid\n"
             "set key center right\n"
             "plot '{}' using 1:2 skip 1 with lines lw 2 title 'loss', \\\n"
             "     '' using 1:3 skip 1 axes x1y2 with lines lw 2 title 'accuracy (batch)', \\\n"
             "     {} axes x1y2 with lines dt 2 title 'chance'\n",
             png.string(), csv.string(), chance);
  std::fclose(fp);
  const int rc = std::system(fmt::format("gnuplot '{}'", script.string()).c_str());
  if (rc != 0) {
    fmt::print(stderr, "linear_attention: gnuplot failed on {}\n", script.string());
    return false;
  }
  fmt::print("wrote {}\n", png.string());
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
  if (f.threads) ascan::set_num_threads(f.threads);
  const la::Config& c = f.model;
  fmt::print("ascan linear attention: associative recall, {} keys, {} values, {} pairs + {} queries (L = {}), "
             "dim {}, dk {}, dv {}, batch {}, {} threads\n",
             c.num_keys, c.num_values, c.pairs, c.queries, c.seq_len(), c.dim, c.dk, c.dv, c.batch,
             ascan::num_threads());

  bool ok = gradcheck_tiny(f.seed);
  ok = loop_matches_scan(f) && ok;

  // No tape scope and no rewind: each step's graph is released by backward() and freed with
  // the step's Vars.
  std::vector<ad::Var<float>> params;
  for (const auto& v : la::init_values<float>(c, f.seed)) params.push_back(ad::param(v));
  ad::Adam<float> opt(params, static_cast<float>(f.lr));
  const auto model = la::make_params(params);
  std::vector<Point> curve;
  const auto t0 = Clock::now();
  for (int64_t step = 1; step <= f.steps; ++step) {
    // Cosine decay to a tenth of the rate: late steps polish instead of bouncing.
    const double frac = static_cast<double>(step - 1) / static_cast<double>(f.steps);
    opt.set_lr(static_cast<float>(f.lr * (0.55 + 0.45 * std::cos(M_PI * frac))));
    const auto batch = la::make_batch<float>(c, f.seed * 7777 + static_cast<uint64_t>(step));
    auto logits = la::logits(c, model, batch, la::Recurrence::kScan);
    auto L = la::cross_entropy(logits, batch);  // (the logits also give the batch accuracy)
    opt.zero_grad();
    ad::backward(L);
    opt.step();
    const Point p{step, L.value().data()[0], la::accuracy(logits.value(), batch), seconds_since(t0)};
    curve.push_back(p);
    progress(f, p, static_cast<double>(step) / p.seconds, step == f.steps);
  }

  // Held-out sequences (a seed range the training batches never use).
  double acc = 0;
  const int eval_batches = f.short_mode ? 2 : 16;
  {
    ad::NoGradGuard no_grad;
    for (int i = 0; i < eval_batches; ++i) {
      const auto batch = la::make_batch<float>(c, (f.seed + 1) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i));
      acc += la::accuracy(la::logits(c, model, batch, la::Recurrence::kScan).value(), batch);
    }
  }
  acc /= eval_batches;
  const double chance = 1.0 / static_cast<double>(c.num_values);
  fmt::print("held-out accuracy on {} queried values: {:.1f}% (chance {:.1f}%), {:.1f} s of training\n",
             eval_batches * c.batch * c.queries, 100 * acc, 100 * chance, curve.empty() ? 0.0 : curve.back().seconds);
  ok = write_outputs(f, curve, chance) && ok;
  if (!ok) fmt::print("FAILED: see the checks above\n");
  return ok ? 0 : 1;
}
