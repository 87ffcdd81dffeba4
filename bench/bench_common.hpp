// bench_common.hpp — shared cases, data, reference checks and peer element types of bench_scan_host.
//
// Every benchmark of a case reads the same inputs (one process-wide case held at a time, so the
// suite never holds more than one case's 128-512 MiB) and writes a reused output, as a training
// loop does. Names are "<op>/<layout>/<dir>/<impl>" so scripts/bench_report.py can group them.
#pragma once

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <ascan/ascan.hpp>

namespace ascan_bench {

enum class Op { add, linrec };

// A scan problem: `op` along dim 0 of [T, inner] (inner == 1 is the 1-D layout [T]).
struct CaseSpec {
  Op op;
  int64_t inner;
  bool reverse;
};

inline constexpr int64_t kTotal = int64_t{1} << 25;  // elements per leaf, about 2^25 in every layout

inline int num_leaves(Op op) { return op == Op::add ? 1 : 2; }
inline int64_t rows_of(int64_t inner) { return kTotal / inner; }
inline const char* op_name(Op op) { return op == Op::add ? "add" : "linrec"; }
std::string layout_name(int64_t inner);  // "1d", "T_inner7", ...
std::string case_name(const CaseSpec& c, const std::string& impl);

// Inputs, the reused output and lazily built peer buffers of the case being benchmarked.
struct CaseData {
  Op op = Op::add;
  int64_t T = 0, inner = 1;
  std::vector<ascan::Tensor<float>> xs, ys;  // L leaves, shape [T] or [T, inner]
  // PeerBuffers<O, N>: array-of-structs copies of xs and an output of the same type, for peers
  // that scan one value type (Row<N>, RowPair<N>); built on first use, same values as xs.
  std::shared_ptr<void> aos;
  int64_t numel() const { return T * inner; }
};

// The data of case (op, inner); switching to another case frees the previous one.
CaseData& get_case(Op op, int64_t inner);

// Compares an implementation's output with a double-precision sequential reference on sampled
// rows (first, last and about a thousand spread rows; a wrong carry shows on all later rows).
// get(t, j, leaf) returns the output value at row t, lane j. Returns "" or a description.
template <class Get>
std::string check_output(const CaseData& c, bool reverse, Get&& get);

// Sets bytes (2 * L * N floats read + written per iteration) and items (N) processed.
void set_counters(benchmark::State& st, const CaseData& c);

// ---- peer value types: one row of a [T, inner] layout as a single scan element ----------------
template <int N>
struct Row {
  float v[N];
};
template <int N>
struct RowPair {
  float a[N];
  float b[N];
};

struct RowAdd {
  template <int N>
  Row<N> operator()(const Row<N>& l, const Row<N>& r) const {
    Row<N> o;
    for (int j = 0; j < N; ++j) o.v[j] = l.v[j] + r.v[j];
    return o;
  }
};

// (a1, b1), (a2, b2) -> (a1 a2, a2 b1 + b2), accumulated value on the left, lane by lane.
struct RowLinrec {
  template <int N>
  RowPair<N> operator()(const RowPair<N>& l, const RowPair<N>& r) const {
    RowPair<N> o;
    for (int j = 0; j < N; ++j) {
      o.a[j] = l.a[j] * r.a[j];
      o.b[j] = r.a[j] * l.b[j] + r.b[j];
    }
    return o;
  }
};

// The peer value type of (op, N): float for 1-D add, Row<N> for wider add, RowPair<N> for linrec.
template <Op O, int N>
using PeerElem = std::conditional_t<O == Op::linrec, RowPair<N>, std::conditional_t<N == 1, float, Row<N>>>;

template <Op O, int N>
struct PeerBuffers {
  std::vector<PeerElem<O, N>> in, out;
};

// The array-of-structs buffers of the current case, built from xs on first use.
template <Op O, int N>
PeerBuffers<O, N>& peer_buffers(CaseData& c) {
  if (!c.aos) {
    auto bufs = std::make_shared<PeerBuffers<O, N>>();
    bufs->in.resize(c.T);
    bufs->out.resize(c.T);
    for (int64_t t = 0; t < c.T; ++t)
      for (int j = 0; j < N; ++j) {
        auto& e = bufs->in[t];
        if constexpr (O == Op::linrec) {
          e.a[j] = c.xs[0].data()[t * N + j];
          e.b[j] = c.xs[1].data()[t * N + j];
        } else if constexpr (N == 1) {
          e = c.xs[0].data()[t];
        } else {
          e.v[j] = c.xs[0].data()[t * N + j];
        }
      }
    c.aos = bufs;
  }
  return *static_cast<PeerBuffers<O, N>*>(c.aos.get());
}

// Reads lane j of leaf `leaf` from a peer element.
template <Op O, int N>
float peer_value(const PeerElem<O, N>& e, int j, int leaf) {
  if constexpr (O == Op::linrec) {
    return leaf == 0 ? e.a[j] : e.b[j];
  } else if constexpr (N == 1) {
    return e;
  } else {
    return e.v[j];
  }
}

// Input and output of a single-value-type peer: the tensors themselves for 1-D add (float),
// the case's array-of-structs buffers otherwise.
template <Op O, int N>
struct PeerIo {
  const PeerElem<O, N>* in;
  PeerElem<O, N>* out;
  int64_t n;
};

template <Op O, int N>
PeerIo<O, N> peer_io(CaseData& c) {
  if constexpr (O == Op::add && N == 1) {
    return {c.xs[0].data(), c.ys[0].data(), c.T};
  } else {
    PeerBuffers<O, N>& b = peer_buffers<O, N>(c);
    return {b.in.data(), b.out.data(), c.T};
  }
}

// The combine of a peer value type: y_t = op(y_{t-1}, x_t).
template <Op O, int N>
auto peer_op() {
  if constexpr (O == Op::linrec) {
    return RowLinrec{};
  } else if constexpr (N == 1) {
    return [](float a, float b) { return a + b; };
  } else {
    return RowAdd{};
  }
}

template <Op O, int N>
std::string check_peer(const CaseData& c, const PeerElem<O, N>* out, bool reverse) {
  return check_output(c, reverse, [&](int64_t t, int64_t j, int leaf) {
    return peer_value<O, N>(out[t], static_cast<int>(j), leaf);
  });
}

// Runs `once` untimed (outputs and thread pools warm), checks its result with `check` (returns
// "" or a description; a mismatch skips the benchmark with that error), then times repeated calls.
template <class Once, class Check>
void run_timed(benchmark::State& st, const CaseData& c, Once&& once, Check&& check) {
  once();
  if (const std::string err = check(); !err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  for (auto _ : st) {
    once();
    benchmark::ClobberMemory();
  }
  set_counters(st, c);
}

// ---- reference ------------------------------------------------------------------------------
struct Reference {
  int64_t stride = 1;  // sampled rows: t < 2, t >= T - 2, t % stride == 1
  std::vector<int64_t> rows;
  std::vector<double> values;  // [row index][leaf][lane]
};
const Reference& reference(const CaseData& c, bool reverse);

template <class Get>
std::string check_output(const CaseData& c, bool reverse, Get&& get) {
  const Reference& ref = reference(c, reverse);
  const int L = num_leaves(c.op);
  for (size_t r = 0; r < ref.rows.size(); ++r)
    for (int leaf = 0; leaf < L; ++leaf)
      for (int64_t j = 0; j < c.inner; ++j) {
        const double want = ref.values[(r * L + leaf) * c.inner + j];
        const double got = get(ref.rows[r], j, leaf);
        // add: inputs are small integers, every order of summation is exact. linrec: products
        // of ~1e4 factors carry ~1e-4 relative float error; the absolute part covers underflow.
        const double tol = c.op == Op::add ? 0.0 : 1e-3 * std::abs(want) + 1e-5;
        if (!(std::abs(got - want) <= tol))
          return "wrong result at row " + std::to_string(ref.rows[r]) + " lane " + std::to_string(j) +
                 " leaf " + std::to_string(leaf) + ": got " + std::to_string(got) + ", expected " +
                 std::to_string(want);
      }
  return "";
}

// Checks the case's ascan-layout output tensors (ys).
std::string check_ys(const CaseData& c, bool reverse);

// Registration of the peers that live in their own translation units.
void register_thrust_peers(const CaseSpec& c);  // bench_thrust.cpp (no-op without Thrust)
void register_micro_benchmarks();               // bench_micro.cpp

}  // namespace ascan_bench
