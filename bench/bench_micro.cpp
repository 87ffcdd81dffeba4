// bench_micro.cpp — small benchmarks: in-cache 1-D scans, and the in-block row combine (Eigen vs loop).
//
// incache/n<N>/fwd/{ascan,seq}: 1-D float add of 2^10..2^16 elements, where the call overhead and
// the thread hand-off (above 2^15 elements) show. rowcombine*/{loop,eigen,...}: the inner step of
// the host pointwise kernel, y_t = f(y_{t-1}, x_t) over 256 lanes for the rows of one L2 block
// (96 KiB of inputs + outputs), written as the library's loop (accumulator array, f per lane,
// memcpy to the output row) and as Eigen Array expressions; the design keeps Eigen as the host
// compute layer unless this shows the hand-written loop is faster.
#include <Eigen/Core>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "bench_small.hpp"

namespace ascan_bench {
namespace {

// ---- in-cache 1-D add -----------------------------------------------------------------------
void bench_incache(benchmark::State& st, int64_t n, bool use_ascan) {
  const auto x = small_input(n);
  auto y = ascan::Tensor<float>::zeros({n});
  auto want = ascan::Tensor<float>::zeros({n});
  seq_add(x.data(), want.data(), n);
  const auto once = [&] {
    if (use_ascan) ascan::associative_scan(ascan::add, x, 0, {}, y);
    else seq_add(x.data(), y.data(), n);
  };
  once();
  if (!(y == want)) {  // integer-valued inputs: every association order is exact
    st.SkipWithError("wrong result");
    return;
  }
  for (auto _ : st) {
    once();
    benchmark::ClobberMemory();
  }
  set_small_counters(st, n, 1);
}

// ---- row combine over 256 lanes -------------------------------------------------------------
constexpr int64_t kLanes = 256;

struct RowData {
  std::vector<float> xa, xb, ya, yb;
  RowData(int64_t rows, bool two_leaves) : xa(rows * kLanes), ya(rows * kLanes) {
    for (size_t i = 0; i < xa.size(); ++i) xa[i] = two_leaves ? 0.99f + 0.01f * ((i * 37) % 100) / 100.0f
                                                              : static_cast<float>(static_cast<int>(i * 7 % 3) - 1);
    if (two_leaves) {
      xb.resize(xa.size());
      yb.resize(xa.size());
      for (size_t i = 0; i < xb.size(); ++i) xb[i] = ((i * 53) % 200) / 100.0f - 1.0f;
    }
  }
};

// The library's loop (scan_local.hpp): accumulators in a local array, f per lane with a
// runtime lane count, then the row copied out.
void row_loop_add(const float* x, float* y, int64_t rows, int64_t w) {
  alignas(64) std::array<float, kLanes> acc;
  std::memcpy(acc.data(), x, w * sizeof(float));
  std::memcpy(y, acc.data(), w * sizeof(float));
  for (int64_t t = 1; t < rows; ++t) {
    const float* xr = x + t * w;
    for (int64_t j = 0; j < w; ++j) acc[j] = ascan::add(acc[j], xr[j]);
    std::memcpy(y + t * w, acc.data(), w * sizeof(float));
  }
}

void row_loop_linrec(const RowData& d, RowData& o, int64_t rows, int64_t w) {
  alignas(64) std::array<float, kLanes> acc_a, acc_b;
  std::memcpy(acc_a.data(), d.xa.data(), w * sizeof(float));
  std::memcpy(acc_b.data(), d.xb.data(), w * sizeof(float));
  std::memcpy(o.ya.data(), acc_a.data(), w * sizeof(float));
  std::memcpy(o.yb.data(), acc_b.data(), w * sizeof(float));
  for (int64_t t = 1; t < rows; ++t) {
    const float* xa = d.xa.data() + t * w;
    const float* xb = d.xb.data() + t * w;
    for (int64_t j = 0; j < w; ++j) {
      const auto r = ascan::linear_recurrence(std::tuple{acc_a[j], acc_b[j]}, std::tuple{xa[j], xb[j]});
      acc_a[j] = std::get<0>(r);
      acc_b[j] = std::get<1>(r);
    }
    std::memcpy(o.ya.data() + t * w, acc_a.data(), w * sizeof(float));
    std::memcpy(o.yb.data() + t * w, acc_b.data(), w * sizeof(float));
  }
}

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// binary_expr: acc.binaryExpr(x, f) with the library's functor (what a user combine would get);
// otherwise Eigen's own vectorised acc + x.
void row_eigen_add(const float* x, float* y, int64_t rows, int64_t w, bool binary_expr) {
  alignas(64) std::array<float, kLanes> buf;
  ArrayMap acc(buf.data(), w);
  acc = ConstArrayMap(x, w);
  ArrayMap(y, w) = acc;
  for (int64_t t = 1; t < rows; ++t) {
    if (binary_expr) acc = acc.binaryExpr(ConstArrayMap(x + t * w, w), ascan::add);
    else acc += ConstArrayMap(x + t * w, w);
    ArrayMap(y + t * w, w) = acc;
  }
}

void row_eigen_linrec(const RowData& d, RowData& o, int64_t rows, int64_t w) {
  alignas(64) std::array<float, kLanes> buf_a, buf_b;
  ArrayMap acc_a(buf_a.data(), w), acc_b(buf_b.data(), w);
  acc_a = ConstArrayMap(d.xa.data(), w);
  acc_b = ConstArrayMap(d.xb.data(), w);
  ArrayMap(o.ya.data(), w) = acc_a;
  ArrayMap(o.yb.data(), w) = acc_b;
  for (int64_t t = 1; t < rows; ++t) {
    const ConstArrayMap xa(d.xa.data() + t * w, w), xb(d.xb.data() + t * w, w);
    acc_b = xa * acc_b + xb;
    acc_a *= xa;
    ArrayMap(o.ya.data() + t * w, w) = acc_a;
    ArrayMap(o.yb.data() + t * w, w) = acc_b;
  }
}

enum class RowImpl { loop, eigen, eigen_binary_expr };

void bench_rowcombine(benchmark::State& st, bool linrec, RowImpl impl) {
  // Rows of one BlockPolicy::block_bytes (96 KiB) block of the library: 48 for one leaf, 24 for two.
  const int64_t rows = linrec ? 24 : 48;
  const RowData d(rows, linrec);
  RowData o(rows, linrec), want(rows, linrec);
  int64_t w = kLanes;
  benchmark::DoNotOptimize(w);  // the library's lane count is a runtime value
  const auto once = [&](RowData& out, RowImpl which) {
    if (linrec) {
      if (which == RowImpl::loop) row_loop_linrec(d, out, rows, w);
      else row_eigen_linrec(d, out, rows, w);
    } else if (which == RowImpl::loop) {
      row_loop_add(d.xa.data(), out.ya.data(), rows, w);
    } else {
      row_eigen_add(d.xa.data(), out.ya.data(), rows, w, which == RowImpl::eigen_binary_expr);
    }
  };
  once(want, RowImpl::loop);
  once(o, impl);
  for (size_t i = 0; i < o.ya.size(); ++i) {
    const bool ok = std::abs(o.ya[i] - want.ya[i]) <= 1e-5f * (1 + std::abs(want.ya[i])) &&
                    (!linrec || std::abs(o.yb[i] - want.yb[i]) <= 1e-5f * (1 + std::abs(want.yb[i])));
    if (!ok) {
      st.SkipWithError("row combine results differ from the loop");
      return;
    }
  }
  for (auto _ : st) {
    once(o, impl);
    benchmark::ClobberMemory();
  }
  set_small_counters(st, rows * kLanes, linrec ? 2 : 1);
}

}  // namespace

void register_micro_benchmarks() {
  for (int log_n : {10, 12, 14, 16}) {
    const int64_t n = int64_t{1} << log_n;
    for (bool use_ascan : {true, false}) {
      const std::string name = "incache/n" + std::to_string(n) + "/fwd/" + (use_ascan ? "ascan" : "seq");
      benchmark::RegisterBenchmark(name.c_str(), [n, use_ascan](benchmark::State& st) {
        bench_incache(st, n, use_ascan);
      })->UseRealTime();
    }
  }
  const std::pair<const char*, RowImpl> impls[] = {
      {"loop", RowImpl::loop}, {"eigen", RowImpl::eigen}, {"eigen_binaryexpr", RowImpl::eigen_binary_expr}};
  for (bool linrec : {false, true})
    for (const auto& [impl_name, impl] : impls) {
      if (linrec && impl == RowImpl::eigen_binary_expr) continue;  // binaryExpr is one-leaf
      const std::string name = std::string(linrec ? "rowcombine_linrec/" : "rowcombine/") + impl_name;
      benchmark::RegisterBenchmark(name.c_str(), [linrec, impl = impl](benchmark::State& st) {
        bench_rowcombine(st, linrec, impl);
      });
    }
}

}  // namespace ascan_bench
