// bench_torch.cpp — the LibTorch bridge at [T, D] = [4096, 1024], float32, the linear recurrence
// h_t = a_t h_{t-1} + b_t along dim 0 (scripts/bench_torch.sh; docs/performance/torch.md):
//   copy                 the roof: copying a and b (the bytes a forward reads and writes)
//   forward/direct       ascan::associative_scan on ascan tensors
//   forward/bridge       ascan::torch::associative_scan on torch tensors (no graph)
//   fwd_bwd/direct       ascan's forward + ascan::associative_scan_vjp with a given upstream gradient
//   fwd_bwd/bridge       the bridge's forward + torch::autograd::backward with that gradient
//   fwd_bwd/torch_loop   the recurrence as a loop of LibTorch ops, forward + torch autograd backward
// The bridge's overhead is bridge / direct; the loop's cost against the bridge, loop / bridge.
#include <ascan/torch.hpp>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace {

constexpr int64_t kT = 4096, kD = 1024;

struct Data {
  at::Tensor a, b, g;                    // decays in (0.4, 1), inputs, the upstream gradient of h
  ascan::Tensor<float> aa, ab, ag;       // the same elements as ascan tensors
  Data() {
    ascan::set_num_threads(at::get_num_threads());  // direct calls at the bridge's thread count
    at::manual_seed(1);
    a = at::rand({kT, kD}) * 0.6 + 0.4;
    b = at::randn({kT, kD});
    g = at::randn({kT, kD});
    aa = copy(a), ab = copy(b), ag = copy(g);
  }
  // The same bytes as ascan tensors (views, no copy): direct and bridge calls read one memory.
  static ascan::Tensor<float> copy(const at::Tensor& t) {
    return ascan::Tensor<float>::external(t.data_ptr<float>(), {t.size(0), t.size(1)}, [] {}, t.storage().data());
  }
};

Data& data() {
  static Data d;
  return d;
}

void set_bytes(benchmark::State& st, int64_t streams) {
  st.SetBytesProcessed(st.iterations() * streams * kT * kD * int64_t{sizeof(float)});
}

void BM_Copy(benchmark::State& st) {
  Data& d = data();
  at::Tensor ya = at::empty_like(d.a), yb = at::empty_like(d.b);
  for (auto _ : st) {
    ya.copy_(d.a);
    yb.copy_(d.b);
    benchmark::DoNotOptimize(yb.data_ptr());
  }
  set_bytes(st, 4);
}

void BM_ForwardDirect(benchmark::State& st) {
  Data& d = data();
  for (auto _ : st) {
    auto ys = ascan::associative_scan(ascan::linear_recurrence, std::tuple{d.aa, d.ab}, 0);
    benchmark::DoNotOptimize(std::get<1>(ys).data());
  }
  set_bytes(st, 4);
}

void BM_ForwardBridge(benchmark::State& st) {
  Data& d = data();
  at::NoGradGuard no_grad;
  for (auto _ : st) {
    auto ys = ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{d.a, d.b}, 0);
    benchmark::DoNotOptimize(std::get<1>(ys).data_ptr());
  }
  set_bytes(st, 4);
}

void BM_FwdBwdDirect(benchmark::State& st) {
  Data& d = data();
  const ascan::Tensor<float> none;
  for (auto _ : st) {
    auto ys = ascan::associative_scan(ascan::linear_recurrence, std::tuple{d.aa, d.ab}, 0);
    auto dx = ascan::associative_scan_vjp(ascan::linear_recurrence, std::tuple{d.aa, d.ab}, ys, std::tuple{none, d.ag}, 0);
    benchmark::DoNotOptimize(std::get<0>(dx).data());
  }
}

void BM_FwdBwdBridge(benchmark::State& st) {
  Data& d = data();
  const at::Tensor a = d.a.clone().set_requires_grad(true), b = d.b.clone().set_requires_grad(true);
  for (auto _ : st) {
    auto [ya, h] = ascan::torch::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
    torch::autograd::backward({h}, {d.g});
    benchmark::DoNotOptimize(a.grad().data_ptr());
    a.mutable_grad().reset();
    b.mutable_grad().reset();
  }
}

void BM_FwdBwdTorchLoop(benchmark::State& st) {
  Data& d = data();
  const at::Tensor a = d.a.clone().set_requires_grad(true), b = d.b.clone().set_requires_grad(true);
  for (auto _ : st) {
    // unbind, not select per step: select's backward writes a zero tensor of the whole input
    // per step (4096 x 16 MiB here, over a minute per iteration).
    const std::vector<at::Tensor> as = a.unbind(0), bs = b.unbind(0);
    std::vector<at::Tensor> hs;
    hs.reserve(kT);
    at::Tensor h = bs[0];
    hs.push_back(h);
    for (int64_t t = 1; t < kT; ++t) {
      h = as[t] * h + bs[t];
      hs.push_back(h);
    }
    torch::autograd::backward({at::stack(hs, 0)}, {d.g});
    benchmark::DoNotOptimize(a.grad().data_ptr());
    a.mutable_grad().reset();
    b.mutable_grad().reset();
  }
}

}  // namespace

BENCHMARK(BM_Copy)->Name("linrec/4096x1024/copy")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ForwardDirect)->Name("linrec/4096x1024/forward/direct")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ForwardBridge)->Name("linrec/4096x1024/forward/bridge")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FwdBwdDirect)->Name("linrec/4096x1024/fwd_bwd/direct")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FwdBwdBridge)->Name("linrec/4096x1024/fwd_bwd/bridge")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FwdBwdTorchLoop)->Name("linrec/4096x1024/fwd_bwd/torch_loop")->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("torch_version", TORCH_VERSION);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
