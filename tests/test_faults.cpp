// test_faults.cpp — fault injection: a combine that throws at a random call on every path (host
// forward: pointwise on one sequence, on rows and across lanes, a tuple into given outputs,
// Generic, batched Generic, a std::vector of leaves; backward: a user pointwise combine on dual
// numbers, Generic and batched Generic on Vars), and the caching allocator failing its n-th
// request during a scan and a training step. After each fault: the exception reaches the caller
// as itself, the caller's floating-point mode is as it was, given outputs keep their shape and
// storage, the pool and the tape serve the next call with the bits of a clean run, and nothing
// leaks (the ASan+UBSan build runs this file with leak detection).
#include <ascan/ascan.hpp>
#include <ascan/autodiff.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cfenv>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

#include "reference.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;
using TD = Tensor<double>;
using VD = ad::Var<double>;

struct Boom {
  int64_t call;
};

// Counts combine calls and throws Boom at call `at` (none when at < 0).
struct Fault {
  std::atomic<int64_t> calls{0};
  int64_t at = -1;
  void hit() {
    const int64_t c = calls.fetch_add(1, std::memory_order_relaxed);
    if (c == at) throw Boom{c};
  }
  void arm(int64_t n) {
    calls = 0;
    at = n;
  }
};

// The caller's floating-point control state: MXCSR on x86-64 (the library sets FTZ/DAZ in it),
// else the rounding mode.
unsigned float_mode() {
#if defined(__x86_64__) || defined(_M_X64)
  return _mm_getcsr() & ~0x3fu;  // without the sticky exception flags
#else
  return static_cast<unsigned>(std::fegetround());
#endif
}

using ref::ThreadCount;

bool same_bits(const std::vector<TD>& a, const std::vector<TD>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].shape() != b[k].shape() ||
        (a[k].numel() && std::memcmp(a[k].data(), b[k].data(), a[k].numel() * sizeof(double)) != 0))
      return false;
  return true;
}

// Runs `path` once unarmed (its calls counted, its result kept), then armed at the first, the
// last and random calls: each must throw Boom with the caller's float mode intact, and the next
// unarmed run must give the clean run's bits.
void inject(const std::string& name, Fault& fault, const std::function<std::vector<TD>()>& path, uint64_t seed) {
  SCOPED_TRACE(name);
  fault.arm(-1);
  const std::vector<TD> clean = path();
  const int64_t calls = fault.calls;
  ASSERT_GT(calls, 0) << "the path never called the combine";
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ats{0, calls - 1};
  for (int i = 0; i < 4; ++i) ats.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(calls)));
  for (int64_t at : ats) {
    SCOPED_TRACE("throwing at call " + std::to_string(at) + " of " + std::to_string(calls));
    for (bool flush : {false, true}) {
      ascan::set_flush_denormals(flush);
#if defined(__x86_64__) || defined(_M_X64)
      // The caller's own mode is the opposite of the library's, so a missing restore shows.
      const unsigned saved_csr = _mm_getcsr();
      _mm_setcsr(flush ? saved_csr & ~0x8040u : saved_csr | 0x8040u);
#endif
      const unsigned before = float_mode();
      fault.arm(at);
      bool thrown = false;
      try {
        path();
      } catch (const Boom& b) {
        thrown = true;
        EXPECT_EQ(b.call, at);
      }
      EXPECT_TRUE(thrown) << "no exception";
      EXPECT_EQ(float_mode(), before) << "the caller's floating-point mode changed";
#if defined(__x86_64__) || defined(_M_X64)
      _mm_setcsr(saved_csr);
#endif
      ascan::set_flush_denormals(false);
    }
    fault.arm(-1);
    EXPECT_TRUE(same_bits(path(), clean)) << "the call after the fault differs from the clean run";
  }
}

TEST(Faults, ForwardCombineThrowingAtARandomCall) {
  ThreadCount threads(2);
  Fault fault;
  Fault* f = &fault;
  const auto add = [f](auto a, auto b) {
    f->hit();
    return a + b;
  };
  const auto affine = [f](auto l, auto r) {
    f->hit();
    auto [a1, b1] = l;
    auto [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  const auto affine_slices = [f](const auto& l, const auto& r) {
    f->hit();
    const auto& [a1, b1] = l;
    const auto& [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  const int64_t n = ref::large(int64_t{1} << 18);  // past the one-pass sizes: blocks on the pool
  const TD x = ref::data<double>({n}, 1), rows = ref::data<double>({n / 7, 7}, 2),
           lanes = ref::data<double>({64, n / 64}, 3);
  const TD a = ref::data<double>({n / 256, 256}, 4, 0.5, 1), b = ref::data<double>({n / 256, 256}, 5);
  const TD sa = ref::data<double>({2000, 2}, 6, 0.5, 1), sb = ref::data<double>({2000, 2}, 7);
  inject("pointwise, one sequence", fault, [&] { return std::vector<TD>{ascan::associative_scan(add, x, 0)}; }, 11);
  inject("pointwise, rows of 7, reverse", fault,
         [&] { return std::vector<TD>{ascan::associative_scan(add, rows, 0, {.reverse = true})}; }, 12);
  inject("pointwise, along the last dim", fault, [&] { return std::vector<TD>{ascan::associative_scan(add, lanes, 1)}; },
         13);
  // Given outputs keep their shape and storage through the fault (their contents are unspecified).
  TD ya = TD::zeros(a.shape()), yb = TD::zeros(b.shape());
  const double* pa = ya.data();
  inject("pointwise tuple into given outputs", fault, [&] {
    ascan::associative_scan(affine, std::tuple{a, b}, 0, {}, std::tie(ya, yb));
    return std::vector<TD>{ya.clone(), yb.clone()};
  }, 14);
  EXPECT_EQ(ya.data(), pa);
  EXPECT_EQ(ya.shape(), a.shape());
  inject("generic", fault, [&] {
    auto [u, v] = ascan::associative_scan(ascan::generic(affine_slices), std::tuple{sa, sb}, 0);
    return std::vector<TD>{u, v};
  }, 15);
  inject("batched generic, reverse", fault, [&] {
    auto [u, v] = ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{sa, sb}, 0, {.reverse = true});
    return std::vector<TD>{u, v};
  }, 16);
  inject("generic, a std::vector of leaves", fault, [&] {
    const auto list = [f](const std::vector<TD>& l, const std::vector<TD>& r) {
      f->hit();
      return std::vector<TD>{l[0] * r[0], r[0] * l[1] + r[1]};
    };
    return ascan::associative_scan(ascan::generic(list), std::vector<TD>{sa, sb}, 0);
  }, 17);
}

TEST(Faults, BackwardCombineThrowingAtARandomCall) {
  ThreadCount threads(2);
  Fault fault;
  Fault* f = &fault;
  // Armed only in the backward: the forward runs unarmed (its calls are not counted).
  bool in_backward = false;
  const bool* armed = &in_backward;
  const auto affine = [f, armed](auto l, auto r) {
    if (*armed) f->hit();
    auto [a1, b1] = l;
    auto [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  const auto affine_slices = [f, armed](const auto& l, const auto& r) {
    if (*armed) f->hit();
    const auto& [a1, b1] = l;
    const auto& [a2, b2] = r;
    return std::tuple{a1 * a2, a2 * b1 + b2};
  };
  const int64_t T = ref::large(4096);
  const TD a = ref::data<double>({T, 7}, 1, 0.5, 1), b = ref::data<double>({T, 7}, 2), w = ref::data<double>({T, 7}, 3);
  const TD sa = ref::data<double>({500, 2}, 4, 0.5, 1), sb = ref::data<double>({500, 2}, 5), sw = ref::data<double>({500, 2}, 6);
  // One training step: forward, backward with the fault armed; the leaves' gradients are the result.
  const auto step = [&](int mode) {
    return [&, mode] {
      const bool small = mode > 0;
      VD va = ad::param(small ? sa : a), vb = ad::param(small ? sb : b);
      VD h;
      if (mode == 0) h = std::get<1>(ascan::associative_scan(affine, std::tuple{va, vb}, 0));
      if (mode == 1) h = std::get<1>(ascan::associative_scan(ascan::generic(affine_slices), std::tuple{va, vb}, 0));
      if (mode == 2)
        h = std::get<1>(ascan::associative_scan(ascan::generic_batched(affine_slices), std::tuple{va, vb}, 0,
                                                {.reverse = true}));
      const VD loss = ad::sum(h * ad::constant(small ? sw : w));
      struct Disarm {
        bool& on;
        ~Disarm() { on = false; }
      } disarm{in_backward};
      in_backward = true;
      ad::backward(loss);
      return std::vector<TD>{va.grad(), vb.grad()};
    };
  };
  inject("user pointwise combine, adjoint on dual numbers", fault, step(0), 21);
  inject("generic on Vars, adjoint sweep", fault, step(1), 22);
  inject("batched generic on Vars, adjoint sweep, reverse", fault, step(2), 23);
  EXPECT_EQ(ad::live_nodes<double>(), 0) << "a failed step left nodes on the tape";
}

// The caching allocator fails its n-th request, for every n up to the number a clean call makes:
// ascan::OutOfMemory (a std::bad_alloc) reaches the caller, and the next call gives the clean bits.
void fail_each_allocation(const std::string& name, const std::function<std::vector<TD>()>& path) {
  SCOPED_TRACE(name);
  const std::vector<TD> clean = path();
  int failures = 0;
  for (int64_t nth = 1;; ++nth) {
    ascan::detail::fail_storage_allocation(nth);
    bool failed = false;
    try {
      path();
    } catch (const ascan::OutOfMemory& e) {
      failed = true;
      ++failures;
      EXPECT_NE(std::string(e.what()).find("fail_storage_allocation"), std::string::npos) << e.what();
    }
    ascan::detail::fail_storage_allocation(0);
    EXPECT_TRUE(same_bits(path(), clean)) << "the call after failing allocation " << nth << " differs";
    if (!failed) break;  // the n-th request was never made: every one has failed once
    ASSERT_LT(nth, 2000) << "more allocations than a path this size should make";
  }
  EXPECT_GT(failures, 0) << "the path allocated nothing";
}

TEST(Faults, AllocatorFailingItsNthRequest) {
  ThreadCount threads(2);
  const int64_t T = ref::large(1 << 14);
  const TD a = ref::data<double>({T, 16}, 1, 0.5, 1), b = ref::data<double>({T, 16}, 2), w = ref::data<double>({T, 16}, 3);
  fail_each_allocation("forward, builtin", [&] {
    auto [u, v] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0);
    return std::vector<TD>{u, v};
  });
  fail_each_allocation("forward, generic", [&] {
    const auto sum = ascan::generic([](const auto& l, const auto& r) { return l + r; });
    return std::vector<TD>{ascan::associative_scan(sum, ref::data<double>({40, 3}, 4), 0)};
  });
  fail_each_allocation("training step", [&] {
    VD va = ad::param(a), vb = ad::param(b);
    auto [u, h] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{va, vb}, 0);
    ad::backward(ad::sum(ad::tanh(h) * ad::constant(w)));
    return std::vector<TD>{va.grad(), vb.grad()};
  });
  fail_each_allocation("training step, generic", [&] {
    const auto product = ascan::generic([](const auto& l, const auto& r) { return l * r; });
    VD v = ad::param(ref::data<double>({12, 2}, 5, 0.5, 1));
    ad::backward(ad::sum(ascan::associative_scan(product, v, 0)));
    return std::vector<TD>{v.grad()};
  });
  EXPECT_EQ(ad::live_nodes<double>(), 0) << "a failed step left nodes on the tape";
}

}  // namespace
