// test_scan_generic_batched.cpp — batched Generic mode (ascan::generic_batched(f)): f called on
// batches of slices. Checked against the sequential reference (exact in int64), against
// Generic mode (the same association: equal bitwise), and for its contract checks.
#include <ascan/ascan.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

using ascan::Shape;
using ascan::Tensor;

const auto matmul_fn = [](const auto& a, const auto& b) { return matmul(a, b); };

// Affine maps x -> A x + b with b a [2, 1] column (a matrix, so matmul batches), composed left to
// right: (A, b) then (C, d) is (C A, C b + d).
const auto affine_fn = [](const auto& l, const auto& r) {
  const auto& [A, b] = l;
  const auto& [C, d] = r;
  return std::tuple{matmul(C, A), matmul(C, b) + d};
};

// Signed permutation matrices (exact in int64, bounded, non-commutative), shape [..., 2, 2].
Tensor<int64_t> signed_permutations(const Shape& shape, uint64_t seed) {
  auto m = Tensor<int64_t>::zeros(shape);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < m.numel(); i += 4) {
    const uint64_t r = gen();
    const int64_t s0 = r & 1 ? 1 : -1, s1 = r & 2 ? 1 : -1;
    if (r & 4) m.data()[i] = s0, m.data()[i + 3] = s1;
    else m.data()[i + 1] = s0, m.data()[i + 2] = s1;
  }
  return m;
}

// Runs body with 1, 2 and 3 threads (levels and runs split into several batches with 2 and 3).
template <class Body>
void on_threads(const Body& body) {
  const int saved = ascan::num_threads();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(fmt::format("{} threads", threads));
    ascan::set_num_threads(threads);
    body();
  }
  ascan::set_num_threads(saved);
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ascan::Error& e) {
    return e.what();
  }
  return "no error";
}

class BatchedLength : public ::testing::TestWithParam<int64_t> {};

TEST_P(BatchedLength, MatrixChainInt64ExactAgainstSequentialReference) {
  const int64_t T = GetParam();
  const auto m = signed_permutations({T, 2, 2}, 3);
  on_threads([&] {
    for (bool reverse : {false, true})
      EXPECT_EQ(ascan::associative_scan(ascan::generic_batched(matmul_fn), m, 0, {.reverse = reverse}),
                ref::generic(matmul_fn, m, 0, reverse))
          << (reverse ? "reverse" : "forward");
  });
}

// Up to one chunk (at least 1024 rows) Generic mode associates the same way: equal results
// bitwise, in float64 and float32, 2x2 and 4x4 (entries in [0, 0.5) keep the products bounded),
// and within rounding of the float64 reference. Longer scans fold runs side by side: equal
// bitwise for any thread count (their exactness is checked in int64 above and below).
TEST_P(BatchedLength, MatrixChainsEqualGenericModeBitwise) {
  const int64_t T = GetParam();
  for (int64_t n : {2, 4}) {
    const auto md = ref::data<double>({T, n, n}, 7 + n, 0, 0.5);
    const auto mf = ref::data<float>({T, n, n}, 8 + n, 0, 0.5);
    Tensor<double> first_d;
    Tensor<float> first_f;
    bool have_first = false;
    on_threads([&] {
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(fmt::format("{}x{}{}", n, n, reverse ? " reverse" : ""));
        const auto yd = ascan::associative_scan(ascan::generic_batched(matmul_fn), md, 0, {.reverse = reverse});
        const auto yf = ascan::associative_scan(ascan::generic_batched(matmul_fn), mf, 0, {.reverse = reverse});
        if (T <= 1024) {
          EXPECT_EQ(yd, ascan::associative_scan(ascan::generic(matmul_fn), md, 0, {.reverse = reverse}));
          EXPECT_EQ(yf, ascan::associative_scan(ascan::generic(matmul_fn), mf, 0, {.reverse = reverse}));
          EXPECT_TRUE(ascan::allclose(yd, ref::generic(matmul_fn, md, 0, reverse), 1e-12, 1e-300));
        }
        if (reverse) continue;
        if (!have_first) {
          first_d = yd, first_f = yf, have_first = true;
        } else {
          EXPECT_EQ(yd, first_d);  // 2 and 3 threads as 1
          EXPECT_EQ(yf, first_f);
        }
      }
    });
  }
}

TEST_P(BatchedLength, AffineMapsWithLeavesOfDifferentShapes) {
  const int64_t T = GetParam();
  const auto A = signed_permutations({T, 2, 2}, 4);
  const auto b = Tensor<int64_t>::random({T, 2, 1}, 5, -9, 9);
  on_threads([&] {
    for (bool reverse : {false, true}) {
      const auto ys = ascan::associative_scan(ascan::generic_batched(affine_fn), std::tuple{A, b}, 0, {.reverse = reverse});
      EXPECT_EQ(ys, ref::generic(affine_fn, std::tuple{A, b}, 0, reverse)) << (reverse ? "reverse" : "forward");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, BatchedLength,
                         ::testing::Values(0,      // empty outputs, f never called
                                           1,      // a copy
                                           2,      // one pair
                                           3,      // odd: the last element has no partner
                                           5,      // odd at two levels of the tree
                                           33,     // one past a power of two
                                           1000,   // many levels
                                           4100,   // runs side by side (past 4096 rows of 32 bytes): 242 of 17 rows, the last of 3
                                           16389,  // two groups of 8192 rows and one of 5 (a single run)
                                           20000,  // groups of 8192 rows on the threads, the last of 3616 (its last run of 12)
                                           20001), // the last group's last run of 13
                         [](const auto& info) { return fmt::format("T{}", info.param); });

// Strided slices (the scan dim not outermost): the inputs are gathered, the outputs scattered.
TEST(ScanGenericBatched, AlongEveryDimInt64Exact) {
  const auto x = signed_permutations({3, 50, 2, 2}, 10);  // dim 1: slices [3, 2, 2] (batches of matrices)
  const auto& slice_linrec = ascan::linear_recurrence;  // the builtin also combines tuples of slices
  const auto a = ref::random_signs({4, 60, 5}, 1);
  const auto b = Tensor<int64_t>::random({4, 60, 5}, 2, -9, 9);
  on_threads([&] {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(reverse ? "reverse" : "forward");
      EXPECT_EQ(ascan::associative_scan(ascan::generic_batched(matmul_fn), x, 1, {.reverse = reverse}),
                ref::generic(matmul_fn, x, 1, reverse));
      for (int64_t dim : {0, 1, 2, -1}) {
        SCOPED_TRACE("dim " + std::to_string(dim));
        const auto ys = ascan::associative_scan(ascan::generic_batched(slice_linrec), std::tuple{a, b}, dim,
                                                {.reverse = reverse});
        EXPECT_EQ(ys, ref::generic(slice_linrec, std::tuple{a, b}, dim, reverse));
      }
    }
  });
}

// Long scans along an inner dim: chained chunks written through the strided output path.
TEST(ScanGenericBatched, LongStridedScanChainsChunks) {
  const auto x = ref::random_signs({2, 20000, 2}, 40);  // slices [2, 2] of +-1: exact products
  const auto times = [](const auto& a, const auto& b) { return a * b; };
  on_threads([&] {
    for (bool reverse : {false, true})
      EXPECT_EQ(ascan::associative_scan(ascan::generic_batched(times), x, 1, {.reverse = reverse}),
                ascan::associative_scan(ascan::mul, x, 1, {.reverse = reverse}))
          << (reverse ? "reverse" : "forward");
  });
}

// Scans longer than a group (256 KiB of rows) continue each group from the previous one's last
// row: a non-commutative combine (the linear recurrence on slices, +-1 decays), exact in int64,
// against the pointwise scan; contiguous and strided slices, both directions.
TEST(ScanGenericBatched, LongScanContinuesAcrossGroups) {
  const auto a = ref::random_signs({10000, 64}, 44);  // rows of 1 KiB (two leaves): 40 groups of 256 rows
  const auto b = Tensor<int64_t>::random({10000, 64}, 45, -9, 9);
  const auto as = ref::random_signs({3, 9000, 40}, 46);  // strided slices [3, 40]: rows of 1920 bytes, 67 groups
  const auto bs = Tensor<int64_t>::random({3, 9000, 40}, 47, -9, 9);
  const auto& slice_linrec = ascan::linear_recurrence;
  on_threads([&] {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(reverse ? "reverse" : "forward");
      EXPECT_EQ(ascan::associative_scan(ascan::generic_batched(slice_linrec), std::tuple{a, b}, 0, {.reverse = reverse}),
                ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {.reverse = reverse}));
      EXPECT_EQ(ascan::associative_scan(ascan::generic_batched(slice_linrec), std::tuple{as, bs}, 1, {.reverse = reverse}),
                ascan::associative_scan(ascan::linear_recurrence, std::tuple{as, bs}, 1, {.reverse = reverse}));
    }
  });
}

// An exception from f in any chunk or level reaches the caller (other chunks stop waiting), and
// the next scan runs normally.
TEST(ScanGenericBatched, ThrowingCombinePropagates) {
  const auto m = signed_permutations({20000, 2, 2}, 41);
  on_threads([&] {
    for (int throw_at : {1, 3, 12, 40}) {
      std::atomic<int> calls{0};
      const auto bad = [&](const auto& a, const auto& b) {
        if (++calls == throw_at) throw ascan::Error("combine failed on purpose");
        return matmul(a, b);
      };
      EXPECT_EQ(error_of([&] { ascan::associative_scan(ascan::generic_batched(bad), m, 0); }), "combine failed on purpose")
          << "throw at call " << throw_at;
    }
    EXPECT_EQ(ascan::associative_scan(ascan::generic_batched(matmul_fn), m, 0), ref::generic(matmul_fn, m, 0));
  });
}

// A run-time list of leaves (std::vector<Tensor<T>>).
TEST(ScanGenericBatched, TensorListMatchesReference) {
  using List = std::vector<Tensor<int64_t>>;
  const auto compose = [](const List& l, const List& r) { return List{matmul(r[0], l[0]), matmul(r[0], l[1]) + r[1]}; };
  const auto A = signed_permutations({300, 2, 2}, 14);
  const auto b = Tensor<int64_t>::random({300, 2, 1}, 15, -9, 9);
  const auto want = ref::generic([&](const auto& l, const auto& r) {
    return std::tuple{matmul(std::get<0>(r), std::get<0>(l)), matmul(std::get<0>(r), std::get<1>(l)) + std::get<1>(r)};
  }, std::tuple{A, b}, 0, true);
  const auto& wantA = std::get<0>(want);  // (not a binding: the lambda below captures them)
  const auto& wantb = std::get<1>(want);
  on_threads([&] {
    const List ys = ascan::associative_scan(ascan::generic_batched(compose), List{A, b}, 0, {.reverse = true});
    ASSERT_EQ(ys.size(), 2u);
    EXPECT_EQ(ys[0], wantA);
    EXPECT_EQ(ys[1], wantb);
  });
}

// f sees batches: few calls, each with a leading batch dim, and as many pairs in all as Generic
// mode combines one by one (plus the two single pairs of the contract check).
TEST(ScanGenericBatched, CallsSeeBatchesOfSlices) {
  const int64_t T = 4096;
  const auto m = signed_permutations({T, 2, 2}, 16);
  std::atomic<int64_t> generic_calls{0}, batched_calls{0}, batched_pairs{0}, single_calls{0};
  ascan::associative_scan(ascan::generic([&](const auto& a, const auto& b) {
    ++generic_calls;
    return matmul(a, b);
  }), m, 0);
  on_threads([&] {
    batched_calls = 0, batched_pairs = 0, single_calls = 0;
    const auto y = ascan::associative_scan(ascan::generic_batched([&](const auto& a, const auto& b) {
      EXPECT_EQ(a.shape(), b.shape());
      if (a.rank() == 2) {
        ++single_calls;
      } else {
        ++batched_calls;
        batched_pairs += a.shape()[0];
        EXPECT_EQ(a.rank(), 3);
      }
      return matmul(a, b);
    }), m, 0);
    EXPECT_EQ(y, ref::generic(matmul_fn, m, 0));
    EXPECT_EQ(batched_pairs.load(), generic_calls.load());
    EXPECT_EQ(single_calls.load(), 2);
    EXPECT_LT(batched_calls.load(), 64);  // 2 log2(T) levels, a few batches each
  });
}

// Long scans fold runs side by side: about 2 pairs per element in all (each run folded twice,
// plus about 3 per run of at least 17 rows for the tree over the runs' totals and their carry),
// in few calls of f on batches of one pair per run; the same for any thread count.
TEST(ScanGenericBatched, LongScanCombinesAboutTwoPairsPerElement) {
  const int64_t T = 65536 + 77;
  const auto m = signed_permutations({T, 2, 2}, 17);
  on_threads([&] {
    std::atomic<int64_t> batched_calls{0}, batched_pairs{0};
    const auto y = ascan::associative_scan(ascan::generic_batched([&](const auto& a, const auto& b) {
      if (a.rank() == 3) {
        ++batched_calls;
        batched_pairs += a.shape()[0];
      }
      return matmul(a, b);
    }), m, 0);
    EXPECT_EQ(y, ref::generic(matmul_fn, m, 0));
    EXPECT_GE(batched_pairs.load(), 2 * (T - 1) - T / 8);
    EXPECT_LE(batched_pairs.load(), 2 * T + T / 4);
    EXPECT_LT(batched_calls.load(), T / 64);
  });
}

TEST(ScanGenericBatched, OutOverloadAndInPlace) {
  auto m = signed_permutations({100, 2, 2}, 11);
  const auto want = ref::generic(matmul_fn, m, 0);
  auto out = Tensor<int64_t>::full({100, 2, 2}, -7);
  ascan::associative_scan(ascan::generic_batched(matmul_fn), m, 0, {}, out);
  EXPECT_EQ(out, want);
  ascan::associative_scan(ascan::generic_batched(matmul_fn), m, 0, {.reverse = false}, m);  // in place
  EXPECT_EQ(m, want);
  auto x = signed_permutations({2, 40, 2}, 12);  // strided slices, in place
  const auto wantx = ref::generic([](const auto& a, const auto& b) { return a * b; }, x, 1, true);
  ascan::associative_scan(ascan::generic_batched([](const auto& a, const auto& b) { return a * b; }), x, 1,
                          {.reverse = true}, x);
  EXPECT_EQ(x, wantx);
}

// ---- the contract: errors instead of wrong scans -------------------------------------------

// A combine that reads one element of its operands (here: keeps the operand whose first entry is
// larger) is not batched: the check against single pairs catches it.
TEST(ScanGenericBatched, CombineThatMixesPairsThrows) {
  Tensor<int64_t> x = Tensor<int64_t>::random({64, 3}, 20, -99, 99);
  x.data()[0] = 100;  // pair 0 keeps its left operand; the last pair of the batch keeps its right one
  x.data()[62 * 3] = -100;
  const auto argmax = [](const auto& a, const auto& b) { return b.data()[0] > a.data()[0] ? b : a; };
  const std::string msg = error_of([&] { ascan::associative_scan(ascan::generic_batched(argmax), x, 0); });
  EXPECT_NE(msg.find("ascan::associative_scan(): the batched generic combine gave pair 31 of a batch of 32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Use ascan::generic(f)"), std::string::npos) << msg;
  EXPECT_EQ(ascan::associative_scan(ascan::generic(argmax), x, 0), ref::generic(argmax, x, 0));  // fine unbatched
}

// Vectors multiplied with matmul: a dot product per pair, but a matrix product of the batches.
TEST(ScanGenericBatched, VectorMatmulIsNotBatchedAndThrows) {
  const auto A = signed_permutations({20, 2, 2}, 21);
  const auto v = Tensor<int64_t>::random({20, 2}, 22, -9, 9);
  const auto affine_vec = [](const auto& l, const auto& r) {
    return std::tuple{matmul(std::get<0>(r), std::get<0>(l)), matmul(std::get<0>(r), std::get<1>(l)) + std::get<1>(r)};
  };
  const std::string msg = error_of([&] { ascan::associative_scan(ascan::generic_batched(affine_vec), std::tuple{A, v}, 0); });
  EXPECT_NE(msg.find("ascan::matmul(): cannot multiply shapes [10, 2, 2] and [10, 2]"), std::string::npos) << msg;
}

TEST(ScanGenericBatched, WrongResultShapesThrow) {
  const auto m = signed_permutations({50, 2, 2}, 23);
  // Drops the batch dim.
  std::string msg = error_of([&] {
    ascan::associative_scan(ascan::generic_batched([](const auto& a, const auto& b) { return ascan::select(matmul(a, b), 0, 0); }), m, 0);
  });
  EXPECT_NE(msg.find("ascan::associative_scan(): the batched generic combine returned leaf 0 of shape [2, 2] for a batch of 25 pairs, expected [25, 2, 2]"),
            std::string::npos) << msg;
  // Wrong number of leaves in a list.
  using List = std::vector<Tensor<int64_t>>;
  msg = error_of([&] {
    ascan::associative_scan(ascan::generic_batched([](const List& a, const List&) { return List{a[0]}; }), List{m, m}, 0);
  });
  EXPECT_NE(msg.find("returned 1 leaves, expected 2"), std::string::npos) << msg;
}

// Autodiff calls f on single Var slices, as in Generic mode: the same values and gradients.
TEST(ScanGenericBatched, AutodiffMatchesGenericMode) {
  namespace ad = ascan::ad;
  const auto m = ref::data<double>({40, 2, 2}, 30, -1, 1);
  const auto w = ref::data<double>({40, 2, 2}, 31, -1, 1);  // a random cotangent
  Tensor<double> grads[2], values[2];
  for (int batched = 0; batched < 2; ++batched) {
    ad::Tape<double> tape;
    auto x = ad::param(m);
    auto y = batched ? ad::associative_scan(ascan::generic_batched(matmul_fn), x, 0)
                     : ad::associative_scan(ascan::generic(matmul_fn), x, 0);
    ad::backward(ad::sum(y * ad::constant(w)));
    grads[batched] = x.grad();
    values[batched] = y.value();
  }
  EXPECT_EQ(values[1], values[0]);
  EXPECT_EQ(grads[1], grads[0]);
  EXPECT_TRUE(ascan::allclose(values[1], ref::generic(matmul_fn, m, 0), 1e-12, 1e-12));
}

// Repeated scans reach a steady state: no new blocks from the system.
TEST(ScanGenericBatched, RepeatedScansReachSteadyState) {
  const auto m = signed_permutations({4096, 2, 2}, 31);
  auto out = Tensor<int64_t>::empty(m.shape());
  on_threads([&] {
    for (int i = 0; i < 5; ++i) ascan::associative_scan(ascan::generic_batched(matmul_fn), m, 0, {}, out);
    const auto warm = ascan::allocator_stats();
    for (int i = 0; i < 5; ++i) ascan::associative_scan(ascan::generic_batched(matmul_fn), m, 0, {.reverse = i % 2 == 1}, out);
    const auto after = ascan::allocator_stats();
    EXPECT_EQ(after.system_allocations, warm.system_allocations);
    EXPECT_EQ(after.bytes_in_use, warm.bytes_in_use);
  });
}

}  // namespace
