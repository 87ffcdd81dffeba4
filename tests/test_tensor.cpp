// test_tensor.cpp — Tensor creation, access, reshape, comparison, formatting, allocator reuse.
#include <ascan/ascan.hpp>
#include <ascan/fmt.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>

// The out-of-memory test asks for more than the address space: under AddressSanitizer the
// allocation returns null (and ascan throws) instead of ASan reporting it.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace {

using ascan::Shape;
using ascan::Tensor;

TEST(Tensor, FromShapeAndAccess) {
  auto t = ascan::Tensor<float>::from({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.shape(), (ascan::Shape{2, 3}));
  EXPECT_EQ(t(1, 2), 6.0f);
  EXPECT_EQ(t.at({0, 1}), 2.0f);
  EXPECT_THROW(t(2, 0), ascan::Error);
  EXPECT_THROW(ascan::Tensor<float>::from({1, 2, 3}, {2, 2}), ascan::Error);
}

TEST(Tensor, ZerosFullAndShapeQueries) {
  const auto z = Tensor<double>::zeros({2, 0, 3});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(z.rank(), 3);
  const auto f = Tensor<int32_t>::full({2, 3, 4}, 7);
  EXPECT_EQ(f.numel(), 24);
  EXPECT_EQ(f.size(1), 3);
  EXPECT_EQ(f.size(-1), 4);
  EXPECT_THROW(f.size(3), ascan::Error);
  for (int64_t i = 0; i < f.numel(); ++i) ASSERT_EQ(f.data()[i], 7);
  const auto s = Tensor<float>::full({}, 2.5f);  // rank 0: one element
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.data()[0], 2.5f);
  const auto d = Tensor<double>::zeros({3, 2});
  for (int64_t i = 0; i < d.numel(); ++i) ASSERT_EQ(d.data()[i], 0.0);
}

TEST(Tensor, RandomIsSeededAndInRange) {
  const auto a = Tensor<double>::random({1000}, 42, -2.0, 3.0), b = Tensor<double>::random({1000}, 42, -2.0, 3.0);
  const auto c = Tensor<double>::random({1000}, 43, -2.0, 3.0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_TRUE(a.data()[i] >= -2.0 && a.data()[i] < 3.0) << a.data()[i];
  // Integers: inclusive bounds, every value reached.
  const auto k = Tensor<int32_t>::random({2000}, 7, -2, 2);
  std::set<int32_t> seen(k.data(), k.data() + k.numel());
  EXPECT_EQ(seen, (std::set<int32_t>{-2, -1, 0, 1, 2}));
  // randn: seeded, roughly standard normal.
  const auto n1 = Tensor<float>::randn({20000}, 5), n2 = Tensor<float>::randn({20000}, 5);
  EXPECT_EQ(n1, n2);
  EXPECT_NE(n1, Tensor<float>::randn({20000}, 6));
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n1.numel(); ++i) mean += n1.data()[i];
  mean /= n1.numel();
  for (int64_t i = 0; i < n1.numel(); ++i) var += (n1.data()[i] - mean) * (n1.data()[i] - mean);
  var /= n1.numel();
  EXPECT_NEAR(mean, 0.0, 0.05);  // 7 standard errors
  EXPECT_NEAR(var, 1.0, 0.07);
}

TEST(Tensor, ReshapeSharesStorageAndInfers) {
  auto t = Tensor<int64_t>::from({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  auto r = t.reshape({2, -1, 3});
  EXPECT_EQ(r.shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(r.shares_storage_with(t));
  EXPECT_EQ(r.data(), t.data());
  r(1, 1, 2) = 100;  // writes through to t
  EXPECT_EQ(t(2, 3), 100);
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{12}));
  EXPECT_EQ(t.reshape({12, 1, 1}).shape(), (Shape{12, 1, 1}));
  EXPECT_THROW(t.reshape({5, -1}), ascan::Error);      // 12 is not a multiple of 5
  EXPECT_THROW(t.reshape({-1, -1}), ascan::Error);     // two unknowns
  EXPECT_THROW(t.reshape({2, 5}), ascan::Error);       // wrong count
  EXPECT_THROW(t.reshape({-2, -6}), ascan::Error);     // negative extents
  EXPECT_THROW(Tensor<float>::zeros({0, 3}).reshape({0, -1}), ascan::Error);  // -1 ambiguous
  try {
    t.reshape({5, 3});
  } catch (const ascan::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ascan::Tensor::reshape()"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[5, 3]"), std::string::npos) << e.what();
  }
}

// Shapes whose element count does not fit in int64_t are refused before anything is allocated,
// with the function and the shape; so are counts whose bytes a storage cannot hold.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ascan::Error& e) {
    return e.what();
  }
  return "(no ascan::Error)";
}

TEST(Tensor, ShapeOverflowIsAnError) {
  const int64_t big = (int64_t{1} << 61) + 1;
  EXPECT_EQ(error_of([&] { Tensor<float>::empty({big, 8}); }),
            "ascan::Tensor: shape [2305843009213693953, 8] has more elements than an int64_t counts (at most 2^63 - 1)");
  EXPECT_EQ(error_of([&] { Tensor<float>::zeros({int64_t{1} << 32, int64_t{1} << 31}); }),
            "ascan::Tensor: shape [4294967296, 2147483648] has more elements than an int64_t counts (at most 2^63 - 1)");
  const std::string bytes = error_of([&] { Tensor<double>::empty({int64_t{1} << 58, 2}); });
  EXPECT_EQ(bytes.rfind("ascan::Tensor: shape [288230376151711744, 2] needs 576460752303423488 elements of 8 bytes", 0), 0u)
      << bytes;
  EXPECT_EQ(error_of([&] { ascan::shape_numel({3, -1, 2}); }),
            "ascan::shape_numel(): shape [3, -1, 2] has a negative extent on dim 1, expected extents >= 0");
  // A zero extent makes any shape empty, however large the others.
  EXPECT_EQ(ascan::shape_numel({big, big, 0}), 0);
  EXPECT_EQ(Tensor<float>::empty({big, 0, big}).numel(), 0);
  // reshape: overflowing shapes, with and without the inferred extent.
  const auto t = Tensor<float>::zeros({4, 2});
  EXPECT_NE(error_of([&] { t.reshape({big, 8}); }).find("ascan::Tensor::reshape(): shape [2305843009213693953, 8] has more elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.reshape({big, -1, 8}); }).find("ascan::Tensor::reshape(): shape [2305843009213693953, 8] has more elements"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { t.reshape({3, -1}); }), "ascan::Tensor::reshape(): cannot view 8 elements of shape [4, 2] as shape [3, -1]");
}

// A request the system refuses is an ascan::OutOfMemory (a std::bad_alloc) that says how many
// bytes were asked for; the allocator stays usable. The injected failure (the test hook) does the
// same without asking the system.
TEST(Tensor, OutOfMemorySaysWhatWasAsked) {
  try {
    Tensor<float>::empty({int64_t{1} << 46});  // 256 TiB: more than the address space, even overcommitted
    FAIL() << "expected ascan::OutOfMemory";
  } catch (const ascan::OutOfMemory& e) {
    EXPECT_EQ(std::string(e.what()).rfind("ascan: out of memory: a tensor storage of 281474976710656 bytes (262144.0 GiB) "
                                          "could not be allocated, also after the cache returned its blocks",
                                          0),
              0u)
        << e.what();
  }
  EXPECT_THROW(Tensor<float>::empty({int64_t{1} << 46}), std::bad_alloc);
  EXPECT_EQ(Tensor<float>::full({1000}, 1.0f).data()[999], 1.0f);

  ascan::detail::fail_storage_allocation(2);
  const auto first = Tensor<double>::zeros({10});  // the first request succeeds
  try {
    Tensor<double>::zeros({3, 5});
    FAIL() << "expected ascan::OutOfMemory";
  } catch (const ascan::OutOfMemory& e) {
    EXPECT_EQ(std::string(e.what()).rfind("ascan: out of memory: a tensor storage of 120 bytes (0.0 GiB) could not be "
                                          "allocated (fail_storage_allocation); tensors hold ",
                                          0),
              0u)
        << e.what();
  }
  const auto after = Tensor<double>::full({3, 5}, 2.0);  // disarmed: the next request works
  EXPECT_EQ(after.data()[14], 2.0);
  EXPECT_EQ(first.data()[9], 0.0);
}

// A reshaped handle keeps the storage alive after the original handle is gone.
TEST(Tensor, ReshapeKeepsStorageAlive) {
  auto t = Tensor<int64_t>::from({1, 2, 3, 4, 5, 6}, {2, 3});
  auto r = t.reshape({3, 2});
  auto rr = r.reshape({6});
  t = Tensor<int64_t>();
  r = Tensor<int64_t>();
  EXPECT_EQ(t.shape(), (Shape{0}));  // a placeholder again
  EXPECT_EQ(rr, Tensor<int64_t>::from({1, 2, 3, 4, 5, 6}, {6}));
  EXPECT_TRUE(rr.reshape({2, 3}).shares_storage_with(rr));
  EXPECT_FALSE(Tensor<int64_t>().reshape({0}).shares_storage_with(Tensor<int64_t>()));
}

TEST(Tensor, CopiesShareStorageClonesDoNot) {
  auto t = Tensor<float>::from({1, 2, 3, 4}, {2, 2});
  auto shared = t;
  auto deep = t.clone();
  shared(0, 0) = 10;
  EXPECT_EQ(t(0, 0), 10);
  EXPECT_TRUE(shared.shares_storage_with(t));
  EXPECT_FALSE(deep.shares_storage_with(t));
  EXPECT_EQ(deep(0, 0), 1);
  deep(1, 1) = -1;
  EXPECT_EQ(t(1, 1), 4);
  auto target = Tensor<float>::zeros({2, 2});
  target.copy_from(t);
  EXPECT_EQ(target, t);
  EXPECT_FALSE(target.shares_storage_with(t));
  EXPECT_THROW(target.copy_from(Tensor<float>::zeros({4})), ascan::Error);
  const auto as_int = Tensor<float>::from({1.75f, -2.5f}, {2}).cast<int64_t>();
  EXPECT_EQ(as_int, Tensor<int64_t>::from({1, -2}, {2}));
}

TEST(Tensor, EqualityAndAllclose) {
  const auto a = Tensor<double>::from({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(a == Tensor<double>::from({1, 2, 3, 4}, {2, 2}));
  EXPECT_FALSE(a == Tensor<double>::from({1, 2, 3, 4}, {4}));      // shape matters
  EXPECT_FALSE(a == Tensor<double>::from({1, 2, 3, 4.0000001}, {2, 2}));
  const auto nan = Tensor<double>::full({1}, NAN);
  EXPECT_FALSE(nan == nan);  // exact: NaN != NaN
  EXPECT_TRUE(ascan::allclose(nan, nan));
  EXPECT_TRUE(ascan::allclose(a, Tensor<double>::from({1, 2, 3, 4.00001}, {2, 2}), 1e-5, 0));
  EXPECT_FALSE(ascan::allclose(a, Tensor<double>::from({1, 2, 3, 4.001}, {2, 2}), 1e-5, 0));
  EXPECT_TRUE(ascan::allclose(a, Tensor<double>::from({1, 2, 3, 4.001}, {2, 2}), 0, 2e-3));
  EXPECT_FALSE(ascan::allclose(a, a.reshape({4})));
  const auto inf = Tensor<double>::full({2}, INFINITY);
  EXPECT_TRUE(ascan::allclose(inf, inf));
  // Only equal infinities match: |a - b| = inf must not pass as "within rtol·|b| = inf".
  EXPECT_FALSE(ascan::allclose(inf, Tensor<double>::full({2}, -INFINITY)));
  EXPECT_FALSE(ascan::allclose(Tensor<double>::full({2}, 5.0), inf));
}

TEST(Tensor, Formatting) {
  const auto t = Tensor<float>::from({1, 2, 3, 4, 5.5f, 6}, {2, 3});
  EXPECT_EQ(fmt::format("{}", t), "Tensor<float>[2, 3] [[1, 2, 3], [4, 5.5, 6]]");
  std::ostringstream os;
  os << Tensor<int64_t>::from({-1, 2}, {2});
  EXPECT_EQ(os.str(), "Tensor<int64>[2] [-1, 2]");
  EXPECT_EQ(fmt::format("{}", Tensor<double>::full({}, 0.25)), "Tensor<double>[] 0.25");
  // Long dims are summarised as the first three, "...", the last three.
  auto long_t = Tensor<int32_t>::zeros({10});
  for (int i = 0; i < 10; ++i) long_t.data()[i] = i;
  EXPECT_EQ(fmt::format("{}", long_t), "Tensor<int32>[10] [0, 1, 2, ..., 7, 8, 9]");
  EXPECT_EQ(fmt::format("{}", Tensor<int32_t>::zeros({2, 7})),
            "Tensor<int32>[2, 7] [[0, 0, 0, ..., 0, 0, 0], [0, 0, 0, ..., 0, 0, 0]]");
  EXPECT_LT(fmt::format("{}", Tensor<float>::zeros({1000, 1000})).size(), 200u);
}

TEST(TensorOps, MatmulMatchesHandComputed) {
  const auto a = Tensor<double>::from({1, 2, 3, 4, 5, 6}, {2, 3});
  const auto b = Tensor<double>::from({7, 8, 9, 10, 11, 12}, {3, 2});
  // [1 2 3; 4 5 6] x [7 8; 9 10; 11 12] = [58 64; 139 154]
  EXPECT_EQ(matmul(a, b), Tensor<double>::from({58, 64, 139, 154}, {2, 2}));
  EXPECT_EQ(matmul(a, Tensor<double>::from({1, 0, -1}, {3})), Tensor<double>::from({-2, -2}, {2}));
  EXPECT_EQ(matmul(Tensor<double>::from({1, -1}, {2}), a), Tensor<double>::from({-3, -3, -3}, {3}));
  // Non-commutative: [0 1; 0 0] x [0 0; 1 0] = [1 0; 0 0], the other order [0 0; 0 1].
  const auto p = Tensor<int64_t>::from({0, 1, 0, 0}, {2, 2}), q = Tensor<int64_t>::from({0, 0, 1, 0}, {2, 2});
  EXPECT_EQ(matmul(p, q), Tensor<int64_t>::from({1, 0, 0, 0}, {2, 2}));
  EXPECT_EQ(matmul(q, p), Tensor<int64_t>::from({0, 0, 0, 1}, {2, 2}));
  // Batched: [2, 2, 2] x [2, 2, 2].
  const auto pq = Tensor<int64_t>::from({0, 1, 0, 0, 0, 0, 1, 0}, {2, 2, 2});
  const auto qp = Tensor<int64_t>::from({0, 0, 1, 0, 0, 1, 0, 0}, {2, 2, 2});
  EXPECT_EQ(matmul(pq, qp), Tensor<int64_t>::from({1, 0, 0, 0, 0, 0, 0, 1}, {2, 2, 2}));
  EXPECT_THROW(matmul(a, a), ascan::Error);
  EXPECT_EQ(transpose(a), Tensor<double>::from({1, 4, 2, 5, 3, 6}, {3, 2}));
}

// The small-product kernels (square 2-4, matrix-vector, any m*k*n <= 512) and the Eigen path
// against a plain loop, exactly in int64.
TEST(TensorOps, MatmulSmallAndLargeSizesMatchLoop) {
  const auto reference = [](const Tensor<int64_t>& a, const Tensor<int64_t>& b) {
    const int64_t m = a.shape()[0], k = a.shape()[1], n = b.rank() == 2 ? b.shape()[1] : 1;
    std::vector<int64_t> o(m * n, 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t q = 0; q < k; ++q) o[i * n + j] += a.data()[i * k + q] * b.data()[q * n + j];
    return Tensor<int64_t>::from(o, b.rank() == 2 ? Shape{m, n} : Shape{m});
  };
  const int64_t sizes[][3] = {{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}, {2, 2, 1}, {4, 4, 1}, {3, 5, 2},
                              {8, 8, 8}, {9, 9, 9}, {5, 0, 3}, {16, 3, 16}};
  uint64_t seed = 1;
  for (const auto& s : sizes) {
    const auto a = Tensor<int64_t>::random({s[0], s[1]}, seed++, -9, 9);
    const auto b = Tensor<int64_t>::random({s[1], s[2]}, seed++, -9, 9);
    SCOPED_TRACE(std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]));
    EXPECT_EQ(matmul(a, b), reference(a, b));
    if (s[2] == 1) {
      const auto v = b.reshape({s[1]});
      EXPECT_EQ(matmul(a, v), reference(a, v));
    }
  }
  // Batched 3x3 products go through the same kernels.
  const auto a = Tensor<int64_t>::random({5, 3, 3}, 40, -9, 9), b = Tensor<int64_t>::random({5, 3, 3}, 41, -9, 9);
  const auto ab = matmul(a, b);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(select(ab, 0, i), reference(select(a, 0, i), select(b, 0, i)));
}

// Long batches of small float products (the loops the compiler vectorises across the batch), with
// one operand shared by the batch or not, equal the same products one at a time bitwise (a product
// does not depend on the batch it is computed in), and a float64 loop within the rounding bound
// k * eps * sum_q |a_iq b_qj|.
template <class T>
void expect_product_near_f64(const Tensor<T>& o, const Tensor<T>& a, const Tensor<T>& b) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double p = double(a.data()[i * k + q]) * double(b.data()[q * n + j]);
        s += p;
        mag += std::abs(p);
      }
      EXPECT_NEAR(o.data()[i * n + j], s, double(k) * std::numeric_limits<T>::epsilon() * mag) << i << "," << j;
    }
}
template <class T>
void expect_batched_products_equal_single() {
  for (const int64_t n : {2, 3, 4}) {
    for (const int64_t count : {1, 7, 64, 1001}) {
      SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(n) + " x " + std::to_string(count));
      const auto a = Tensor<T>::randn({count, n, n}, 50 + n), b = Tensor<T>::randn({count, n, n}, 60 + n);
      const auto shared = Tensor<T>::randn({n, n}, 70 + n), v = Tensor<T>::randn({count, n, 1}, 80 + n);
      const auto ab = matmul(a, b), sb = matmul(shared, b), as = matmul(a, shared), av = matmul(a, v);
      for (int64_t i = 0; i < count; ++i) {
        const auto ai = select(a, 0, i), bi = select(b, 0, i), vi = select(v, 0, i);
        EXPECT_EQ(select(ab, 0, i), matmul(ai, bi));
        EXPECT_EQ(select(sb, 0, i), matmul(shared, bi));
        EXPECT_EQ(select(as, 0, i), matmul(ai, shared));
        EXPECT_EQ(select(av, 0, i), matmul(ai, vi));
        expect_product_near_f64(select(ab, 0, i), ai, bi);
        expect_product_near_f64(select(av, 0, i), ai, vi);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}
TEST(TensorOps, BatchedSmallProductsEqualSingleProducts) {
  expect_batched_products_equal_single<float>();
  expect_batched_products_equal_single<double>();
}

TEST(TensorOps, BroadcastingArithmetic) {
  const auto col = Tensor<int64_t>::from({1, 2, 3}, {3, 1});
  const auto row = Tensor<int64_t>::from({10, 20, 30, 40}, {1, 4});
  EXPECT_EQ(col + row, Tensor<int64_t>::from({11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43}, {3, 4}));
  EXPECT_EQ(row - col, Tensor<int64_t>::from({9, 19, 29, 39, 8, 18, 28, 38, 7, 17, 27, 37}, {3, 4}));
  EXPECT_EQ(col * row, Tensor<int64_t>::from({10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120}, {3, 4}));
  EXPECT_EQ(Tensor<double>::from({1, 2}, {2}) / Tensor<double>::from({4}, {1}), Tensor<double>::from({0.25, 0.5}, {2}));
  EXPECT_EQ(-col, Tensor<int64_t>::from({-1, -2, -3}, {3, 1}));
  EXPECT_EQ(col + int64_t{1}, Tensor<int64_t>::from({2, 3, 4}, {3, 1}));
  EXPECT_EQ(int64_t{2} * col, Tensor<int64_t>::from({2, 4, 6}, {3, 1}));
  EXPECT_EQ(sum(col * row).data()[0], 600);
  EXPECT_THROW(col + Tensor<int64_t>::zeros({2, 4}), ascan::Error);
}

// <broadcast_to(a), g> == <a, reduce_to(g)> for every a and g: reduce_to is the adjoint.
TEST(TensorOps, ReduceToIsTheAdjointOfBroadcastTo) {
  const Shape target{4, 3, 5};
  for (const Shape& small : {Shape{3, 1}, Shape{1, 3, 5}, Shape{5}, Shape{4, 1, 1}, Shape{}, Shape{4, 3, 5}}) {
    SCOPED_TRACE(ascan::format_shape(small));
    const auto a = Tensor<int64_t>::random(small, 1, -9, 9), g = Tensor<int64_t>::random(target, 2, -9, 9);
    const auto big = broadcast_to(a, target);
    ASSERT_EQ(big.shape(), target);
    const auto reduced = reduce_to(g, small);
    ASSERT_EQ(reduced.shape(), small);
    int64_t lhs = 0, rhs = 0;
    for (int64_t i = 0; i < big.numel(); ++i) lhs += big.data()[i] * g.data()[i];
    for (int64_t i = 0; i < a.numel(); ++i) rhs += a.data()[i] * reduced.data()[i];
    EXPECT_EQ(lhs, rhs);
  }
  EXPECT_EQ(broadcast_to(Tensor<int64_t>::from({1, 2}, {2, 1}), {2, 3}), Tensor<int64_t>::from({1, 1, 1, 2, 2, 2}, {2, 3}));
  EXPECT_EQ(reduce_to(Tensor<int64_t>::from({1, 2, 3, 4, 5, 6}, {2, 3}), {1, 3}), Tensor<int64_t>::from({5, 7, 9}, {1, 3}));
  EXPECT_THROW(broadcast_to(Tensor<int64_t>::zeros({3}), {4}), ascan::Error);
  EXPECT_THROW(broadcast_to(Tensor<int64_t>::zeros({2, 3}), {3}), ascan::Error);
  EXPECT_THROW(reduce_to(Tensor<int64_t>::zeros({3}), {4}), ascan::Error);
}

TEST(TensorOps, Select) {
  const auto t = Tensor<int64_t>::from({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}, {2, 3, 4});
  EXPECT_EQ(select(t, 0, 1), Tensor<int64_t>::from({12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}, {3, 4}));
  EXPECT_EQ(select(t, 1, 2), Tensor<int64_t>::from({8, 9, 10, 11, 20, 21, 22, 23}, {2, 4}));
  EXPECT_EQ(select(t, -1, 3), Tensor<int64_t>::from({3, 7, 11, 15, 19, 23}, {2, 3}));
  EXPECT_FALSE(select(t, 0, 0).shares_storage_with(t));
  EXPECT_THROW(select(t, 1, 3), ascan::Error);
  EXPECT_THROW(select(t, 3, 0), ascan::Error);
}

// The slices a Generic-mode scan hands to its combine: views that keep their storage alive
// (along dim 0 of the input itself; along an inner dim of one gathered copy).
TEST(TensorOps, SplitSlicesAreViewsThatKeepStorageAlive) {
  auto t = Tensor<int64_t>::from({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 2, 2});
  const int64_t* first = t.data();
  auto rows = ascan::detail::split_slices(t, 0);
  ASSERT_EQ(rows.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i].shape(), (Shape{2, 2}));
    EXPECT_EQ(rows[i].data(), first + 4 * i);  // no copy
    EXPECT_TRUE(rows[i].shares_storage_with(t));
  }
  auto cols = ascan::detail::split_slices(t, 1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_FALSE(cols[0].shares_storage_with(t));
  EXPECT_TRUE(cols[0].shares_storage_with(cols[1]));
  t = Tensor<int64_t>();  // the views keep the elements alive
  EXPECT_EQ(rows[2], Tensor<int64_t>::from({8, 9, 10, 11}, {2, 2}));
  EXPECT_EQ(cols[1], Tensor<int64_t>::from({2, 3, 6, 7, 10, 11}, {3, 2}));
  const auto copy = rows[1];  // handles of views copy and reshape like any other
  rows.clear();
  EXPECT_EQ(copy.reshape({4}), Tensor<int64_t>::from({4, 5, 6, 7}, {4}));
  EXPECT_EQ(copy.clone(), Tensor<int64_t>::from({4, 5, 6, 7}, {2, 2}));
}

// The caching allocator: a freed block is reused for the next allocation of its size class.
TEST(Allocator, FreedBlockIsReused) {
  const ascan::Shape shape{(3 << 20) / 8 + 5};  // ~3 MiB of doubles, a size class few others use
  { auto warm = Tensor<double>::zeros(shape); }
  const auto before = ascan::allocator_stats();
  {
    auto t = Tensor<double>::zeros(shape);
    EXPECT_GE(ascan::allocator_stats().bytes_in_use, before.bytes_in_use + (3 << 20));
  }
  { auto t = Tensor<double>::zeros(shape); }
  const auto after = ascan::allocator_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 2);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  // empty_cache() hands cached blocks back; the next allocation goes to the system again.
  ascan::empty_cache();
  EXPECT_EQ(ascan::allocator_stats().bytes_cached, 0);
  EXPECT_GT(ascan::allocator_stats().system_frees, after.system_frees);
  { auto t = Tensor<double>::zeros(shape); }
  EXPECT_EQ(ascan::allocator_stats().system_allocations, after.system_allocations + 1);
}

}  // namespace
