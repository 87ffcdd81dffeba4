// bench_tape.cpp — the tape's ops at memory speed: elementwise, broadcasting, reductions and
// matmul, forward and forward + backward, next to a copy of the same bytes (the roof), and a
// training step around a scan as a ratio to the scan's own forward + backward.
//
// Each iteration builds its graph on the tape that holds the parameters and lets backward() and
// the end of the iteration free it, as a training loop does (a build from before node lifetime
// followed the handles needs a Tape scope per iteration instead, or its tape grows).
// Names are "<op>/<what>"; each benchmark sets bytes_per_second from the streams the op must
// move at least (read and written once), so its rate divided by copy's is the fraction of the
// roof. Out of cache: [4096, 1024] float32 (16 MiB a tensor). ASCAN_NUM_THREADS sets the threads.
#include <benchmark/benchmark.h>

#include <cstring>
#include <tuple>

#include <ascan/ascan.hpp>

namespace {

namespace ad = ascan::ad;
using TF = ascan::Tensor<float>;
using VF = ad::Var<float>;

constexpr int64_t kRows = 4096, kCols = 1024, kN = kRows * kCols;

struct Data {
  TF x = TF::randn({kRows, kCols}, 1), y = TF::randn({kRows, kCols}, 2), w = TF::randn({kRows, kCols}, 3);
  TF row = TF::randn({kCols}, 4), col = TF::randn({kRows, 1}, 5);
  TF decay = TF::random({kRows, kCols}, 6, 0.9f, 0.999f);
  TF out = TF::empty({kRows, kCols});
};
const Data& data() {
  static const Data d;
  return d;
}

void set_bytes(benchmark::State& st, int64_t streams) {
  st.SetBytesProcessed(st.iterations() * streams * kN * static_cast<int64_t>(sizeof(float)));
}

// The roof: a parallel copy of one tensor into another (2 streams).
void copy(benchmark::State& st) {
  const Data& d = data();
  TF out = TF::empty({kRows, kCols});
  for (auto _ : st) {
    ascan::detail::parallel_for(kN, 1 << 16, [&](int64_t b, int64_t e) {
      std::memcpy(out.data() + b, d.x.data() + b, sizeof(float) * (e - b));
    });
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2);
}

enum class Op { add, mul, mul_row, mul_col, scale, exp, tanh, sigmoid, softplus, log, sum, sum_dim0, sum_dim1 };

VF apply(Op op, const VF& x, const VF& y, const VF& row, const VF& col, const VF& pos) {
  switch (op) {
    case Op::add: return x + y;
    case Op::mul: return x * y;
    case Op::mul_row: return x * row;
    case Op::mul_col: return x * col;
    case Op::scale: return x * 0.5f;
    case Op::exp: return ad::exp(x);
    case Op::tanh: return ad::tanh(x);
    case Op::sigmoid: return ad::sigmoid(x);
    case Op::softplus: return ad::softplus(x);
    case Op::log: return ad::log(pos);
    case Op::sum: return ad::sum(x);
    case Op::sum_dim0: return ad::sum(x, 0);
    case Op::sum_dim1: return ad::sum(x, 1);
  }
  return x;
}

// Streams of the forward and of forward + backward (the backward of a binary op reads the seed
// and both operands and writes both gradients; a broadcast operand's gradient is a reduction).
int64_t fwd_streams(Op op) {
  switch (op) {
    case Op::add: case Op::mul: return 3;
    case Op::sum: case Op::sum_dim0: case Op::sum_dim1: return 1;
    default: return 2;
  }
}
int64_t fwd_bwd_streams(Op op) {
  switch (op) {
    case Op::add: return 3 + 3;               // g read, two gradients written
    case Op::mul: return 3 + 5;               // g, x, y read; two gradients written
    case Op::mul_row: case Op::mul_col: return 2 + 4;  // g, x, row read; dx written; drow reduced from g * x
    case Op::scale: return 2 + 2;
    case Op::exp: case Op::tanh: case Op::sigmoid: case Op::softplus: case Op::log:
      return 2 + 3;  // g and x or y read, dx written
    default: return 1 + 1;                    // reductions: the gradient is a broadcast
  }
}

// As a training loop runs them: parameters made once, each iteration's graph freed with its Vars;
// with_backward adds the backward from a cotangent of the result's shape.
void op_bench(benchmark::State& st, Op op, bool with_backward) {
  const Data& d = data();
  ad::Tape<float> tape;
  VF x = ad::param(d.x), y = ad::param(d.y), row = ad::param(d.row), col = ad::param(d.col), pos = ad::param(d.decay);
  for (auto _ : st) {
    {
      VF r = apply(op, x, y, row, col, pos);
      if (with_backward) {
        const TF seed = op == Op::sum ? TF::full({}, 1.0f) : op == Op::sum_dim0 ? d.row : op == Op::sum_dim1
                                          ? d.col.reshape({kRows}) : d.w;
        ad::backward(r, seed);
      }
      benchmark::DoNotOptimize(r.value().data());
    }
    if (with_backward)
      for (VF* v : {&x, &y, &row, &col, &pos}) v->zero_grad();
  }
  set_bytes(st, with_backward ? fwd_bwd_streams(op) : fwd_streams(op));
}

// The user-level step of a linear recurrence: params, scan, loss = sum(y_b * W), backward; or
// (scan_only) the scan's own forward + backward with the cotangent W given directly.
void linrec_step(benchmark::State& st, bool scan_only) {
  const Data& d = data();
  ad::Tape<float> tape;
  VF a = ad::param(d.decay), b = ad::param(d.x);
  for (auto _ : st) {
    {
      auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
      if (scan_only) ad::backward(yb, d.w);
      else ad::backward(ad::sum(yb * ad::constant(d.w)));
      benchmark::DoNotOptimize(b.grad().data());
    }
    a.zero_grad();
    b.zero_grad();
  }
}

// The linear-attention demo's matmuls, forward + backward: [B*L, dim] x [dim, dk] and the batched
// [B, L, 1, dk] x [B, L, dk, dv] readout.
void matmul_bench(benchmark::State& st, ascan::Shape sa, ascan::Shape sb, ascan::Shape sg) {
  ad::Tape<float> tape;
  VF a = ad::param(TF::randn(sa, 1)), b = ad::param(TF::randn(sb, 2));
  const TF g = TF::randn(sg, 3);
  for (auto _ : st) {
    ad::backward(ad::matmul(a, b), g);
    a.zero_grad();
    b.zero_grad();
  }
}

void register_all() {
  benchmark::RegisterBenchmark("copy/roof", copy)->UseRealTime()->Unit(benchmark::kMillisecond);
  const std::pair<Op, const char*> ops[] = {{Op::add, "add"}, {Op::mul, "mul"}, {Op::mul_row, "mul_row_broadcast"},
                                            {Op::mul_col, "mul_col_broadcast"}, {Op::scale, "mul_scalar"},
                                            {Op::exp, "exp"}, {Op::tanh, "tanh"}, {Op::sigmoid, "sigmoid"},
                                            {Op::softplus, "softplus"}, {Op::log, "log"}, {Op::sum, "sum"},
                                            {Op::sum_dim0, "sum_dim0"}, {Op::sum_dim1, "sum_dim1"}};
  for (const auto& [op, name] : ops) {
    benchmark::RegisterBenchmark((std::string(name) + "/fwd").c_str(), op_bench, op, false)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string(name) + "/fwd_bwd").c_str(), op_bench, op, true)
        ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("linrec_4096x1024/user_step", linrec_step, false)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("linrec_4096x1024/scan_fwd_bwd", linrec_step, true)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("matmul_3072x64x32/fwd_bwd", matmul_bench, ascan::Shape{3072, 64},
                               ascan::Shape{64, 32}, ascan::Shape{3072, 32})
      ->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("matmul_batched_32x96_1x32x32/fwd_bwd", matmul_bench, ascan::Shape{32, 96, 1, 32},
                               ascan::Shape{32, 96, 32, 32}, ascan::Shape{32, 96, 1, 32})
      ->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
