// bench_common.cpp — case data (one case resident at a time), inputs and the sampled reference.
#include "bench_common.hpp"

#include <algorithm>
#include <map>

namespace ascan_bench {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// add: values in {-1, 0, 1}, so every association order gives the exact same sums (|sum| < 2^24).
// linrec: a in [0.99, 1) (a decay, as in a state-space model; products stay normal within a
// block and underflow only after ~2e4 steps, to subnormals flushed to zero), b in [-1, 1).
void fill_inputs(CaseData& c) {
  uint64_t s = 0x5EED0000ull + static_cast<uint64_t>(c.inner) * 7919 + static_cast<uint64_t>(c.op);
  const int64_t n = c.numel();
  if (c.op == Op::add) {
    float* x = c.xs[0].data();
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>(splitmix64(s) % 3) - 1);
  } else {
    float* a = c.xs[0].data();
    float* b = c.xs[1].data();
    for (int64_t i = 0; i < n; ++i) {
      const double u = static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53;
      const double v = static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53;
      a[i] = static_cast<float>(0.99 + 0.01 * u);
      b[i] = static_cast<float>(2.0 * v - 1.0);
    }
  }
}

struct Resident {
  std::unique_ptr<CaseData> data;
  std::map<bool, Reference> refs;  // by reverse
};

Resident& resident() {
  static Resident r;
  return r;
}

}  // namespace

std::string layout_name(int64_t inner) {
  return inner == 1 ? std::string("1d") : "T_inner" + std::to_string(inner);
}

std::string case_name(const CaseSpec& c, const std::string& impl) {
  return std::string(op_name(c.op)) + "/" + layout_name(c.inner) + "/" + (c.reverse ? "rev" : "fwd") +
         "/" + impl;
}

CaseData& get_case(Op op, int64_t inner) {
  Resident& r = resident();
  if (r.data && r.data->op == op && r.data->inner == inner) return *r.data;
  r.data.reset();
  r.refs.clear();
  ascan::empty_cache();  // the previous case's blocks go back to the system
  auto c = std::make_unique<CaseData>();
  c->op = op;
  c->inner = inner;
  c->T = rows_of(inner);
  const ascan::Shape shape = inner == 1 ? ascan::Shape{c->T} : ascan::Shape{c->T, inner};
  for (int l = 0; l < num_leaves(op); ++l) {
    c->xs.push_back(ascan::Tensor<float>::empty(shape));
    c->ys.push_back(ascan::Tensor<float>::zeros(shape));  // zeros: pages touched before timing
  }
  fill_inputs(*c);
  r.data = std::move(c);
  return *r.data;
}

const Reference& reference(const CaseData& c, bool reverse) {
  Resident& res = resident();
  auto it = res.refs.find(reverse);
  if (it != res.refs.end()) return it->second;
  Reference& ref = res.refs[reverse];
  const int64_t T = c.T, inner = c.inner;
  const int L = num_leaves(c.op);
  ref.stride = std::max<int64_t>(T / 1024, 2);
  std::vector<double> acc_a(inner), acc_b(inner);
  std::map<int64_t, std::vector<double>> rows;
  for (int64_t k = 0; k < T; ++k) {
    const int64_t t = reverse ? T - 1 - k : k;
    const float* x0 = c.xs[0].data() + t * inner;
    const float* x1 = L > 1 ? c.xs[1].data() + t * inner : nullptr;
    for (int64_t j = 0; j < inner; ++j) {
      if (c.op == Op::add) {
        acc_a[j] = k == 0 ? x0[j] : acc_a[j] + x0[j];
      } else if (k == 0) {
        acc_a[j] = x0[j];
        acc_b[j] = x1[j];
      } else {  // (A, H) <- f((A, H), (a, b)) = (A a, a H + b)
        acc_a[j] = acc_a[j] * x0[j];
        acc_b[j] = x0[j] * acc_b[j] + x1[j];
      }
    }
    if (t < 2 || t >= T - 2 || t % ref.stride == 1) {
      std::vector<double>& row = rows[t];
      row.insert(row.end(), acc_a.begin(), acc_a.end());
      if (L > 1) row.insert(row.end(), acc_b.begin(), acc_b.end());
    }
  }
  for (auto& [t, v] : rows) {
    ref.rows.push_back(t);
    ref.values.insert(ref.values.end(), v.begin(), v.end());
  }
  return ref;
}

std::string check_ys(const CaseData& c, bool reverse) {
  return check_output(c, reverse, [&](int64_t t, int64_t j, int leaf) {
    return c.ys[leaf].data()[t * c.inner + j];
  });
}

void set_counters(benchmark::State& st, const CaseData& c) {
  const int64_t L = num_leaves(c.op);
  st.SetBytesProcessed(st.iterations() * 2 * L * c.numel() * static_cast<int64_t>(sizeof(float)));
  st.SetItemsProcessed(st.iterations() * c.numel());
}

}  // namespace ascan_bench
