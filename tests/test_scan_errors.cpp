// test_scan_errors.cpp — associative_scan rejects bad arguments with ascan::Error naming function, argument, found and expected.
#include <ascan/ascan.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ascan::Tensor;

// Runs `call`, expects an ascan::Error (also an std::invalid_argument) and returns its message.
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ascan::Error& e) {
    const std::invalid_argument& base = e;
    EXPECT_STREQ(base.what(), e.what());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

constexpr const char* kScan = "ascan::associative_scan()";
const auto matmul_combine = ascan::generic([](const auto& a, const auto& b) { return matmul(a, b); });

TEST(ScanErrors, DimOutOfRangePositive) {
  const auto x = Tensor<float>::zeros({2, 3, 4});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::add, x, 3); }),
              AllOf(HasSubstr(kScan), HasSubstr("dim 3"), HasSubstr("leaf 0"), HasSubstr("rank 3"),
                    HasSubstr("-3 <= dim < 3")));
  EXPECT_THAT(error_of([&] { ascan::associative_scan(matmul_combine, x, 7); }),
              AllOf(HasSubstr(kScan), HasSubstr("dim 7"), HasSubstr("-3 <= dim < 3")));
}

TEST(ScanErrors, DimOutOfRangeNegative) {
  const auto x = Tensor<double>::zeros({2, 3, 4});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::add, x, -4); }),
              AllOf(HasSubstr(kScan), HasSubstr("dim -4"), HasSubstr("leaf 0"), HasSubstr("-3 <= dim < 3")));
  EXPECT_NO_THROW(ascan::associative_scan(ascan::add, x, -3));
}

TEST(ScanErrors, RankZeroLeaf) {
  const auto x = Tensor<float>::zeros({});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::add, x, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("dim 0"), HasSubstr("rank 0"), HasSubstr("expected")));
}

TEST(ScanErrors, LeafRankNotAboveDim) {
  const auto a = Tensor<float>::zeros({3, 5}), b = Tensor<float>::zeros({5});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 1); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("rank 1"), HasSubstr("[5]"),
                    HasSubstr("expected rank > 1")));
  const auto m = Tensor<double>::zeros({3, 2, 2}), v = Tensor<double>::zeros({2});
  const auto g = ascan::generic([](const auto& l, const auto& r) { return l; });
  EXPECT_THAT(error_of([&] { ascan::associative_scan(g, std::tuple{m, v}, 1); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("rank 1"), HasSubstr("expected rank > 1")));
}

TEST(ScanErrors, PointwiseScanLengthsMustMatchOrBeOne) {
  const auto a3 = Tensor<float>::zeros({3, 4}), b5 = Tensor<float>::zeros({5, 4});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::linear_recurrence, std::tuple{a3, b5}, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("[5, 4]"), HasSubstr("[3, 4]"),
                    HasSubstr("expected")));
  const auto a1 = Tensor<float>::full({1, 4}, 1.0f);  // length 1 broadcasts along the scan dim
  const auto [ya, yb] = ascan::associative_scan(ascan::linear_recurrence, std::tuple{a1, b5}, 0);
  EXPECT_EQ(yb.shape(), (ascan::Shape{5, 4}));
}

TEST(ScanErrors, GenericScanLengthsMustMatchExactly) {
  const auto g = ascan::generic([](const auto& l, const auto& r) { return l; });
  const auto a = Tensor<double>::zeros({3, 2}), b5 = Tensor<double>::zeros({5, 2}), b1 = Tensor<double>::zeros({1, 2});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(g, std::tuple{a, b5}, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("length 5"), HasSubstr("dim 0"),
                    HasSubstr("expected 3")));
  // Generic mode does not broadcast, not even a length of 1.
  EXPECT_THAT(error_of([&] { ascan::associative_scan(g, std::tuple{a, b1}, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("length 1"), HasSubstr("expected 3")));
  // A negative dim is resolved against leaf 0: -1 is dim 1 of every leaf, of extent 2 in both.
  EXPECT_NO_THROW(ascan::associative_scan(g, std::tuple{a, b5}, -1));
}

TEST(ScanErrors, NonBroadcastableLeaves) {
  const auto a = Tensor<float>::zeros({4, 3}), b = Tensor<float>::zeros({4, 2});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("[4, 2]"), HasSubstr("[4, 3]"),
                    HasSubstr("broadcast"), HasSubstr("expected")));
  const auto c = Tensor<float>::zeros({2, 4, 1});
  EXPECT_THAT(error_of([&] {
                ascan::associative_scan([](auto l, auto r) { return l; }, std::tuple{a, a, c, b}, 1);
              }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 3"), HasSubstr("[4, 2]")));
}

TEST(ScanErrors, GenericCombineReturnsWrongSliceShape) {
  const auto m = Tensor<double>::zeros({6, 2, 2});
  const auto flatten = ascan::generic([](const auto& a, const auto& b) { return (a + b).reshape({4}); });
  EXPECT_THAT(error_of([&] { ascan::associative_scan(flatten, m, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("generic combine"), HasSubstr("leaf 0"), HasSubstr("[4]"),
                    HasSubstr("expected [2, 2]")));
  const auto v = Tensor<double>::zeros({6, 2});
  const auto bad_second = ascan::generic([](const auto& l, const auto& r) {
    return std::tuple{std::get<0>(l), std::get<0>(r)};  // a [2, 2] matrix where a [2] vector belongs
  });
  EXPECT_THAT(error_of([&] { ascan::associative_scan(bad_second, std::tuple{m, v}, 0); }),
              AllOf(HasSubstr(kScan), HasSubstr("leaf 1"), HasSubstr("[2, 2]"), HasSubstr("expected [2]")));
}

TEST(ScanErrors, OutputOfWrongShape) {
  const auto a = Tensor<float>::zeros({1, 4}), b = Tensor<float>::zeros({5, 4});
  auto ya = Tensor<float>::zeros({5, 4}), yb = Tensor<float>::zeros({4, 5});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, std::tie(ya, yb)); }),
              AllOf(HasSubstr(kScan), HasSubstr("output 1"), HasSubstr("[4, 5]"), HasSubstr("expected [5, 4]")));
  // Pointwise outputs have the broadcast shape, not their input's.
  auto ya_small = Tensor<float>::zeros({1, 4});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, std::tie(ya_small, ya)); }),
              AllOf(HasSubstr(kScan), HasSubstr("output 0"), HasSubstr("[1, 4]"), HasSubstr("expected [5, 4]")));
  // Generic outputs have their input's shape.
  const auto m = Tensor<double>::zeros({3, 2, 2});
  auto wrong = Tensor<double>::zeros({3, 4});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(matmul_combine, m, 0, {}, wrong); }),
              AllOf(HasSubstr(kScan), HasSubstr("output 0"), HasSubstr("[3, 4]"), HasSubstr("expected [3, 2, 2]")));
}

TEST(ScanErrors, OutputsSharingStorage) {
  const auto a = Tensor<float>::zeros({5, 4}), b = Tensor<float>::zeros({5, 4});
  auto y = Tensor<float>::zeros({5, 4});
  auto y_view = y.reshape({5, 4});
  EXPECT_THAT(error_of([&] { ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, std::tie(y, y_view)); }),
              AllOf(HasSubstr(kScan), HasSubstr("outputs 0 and 1"), HasSubstr("share storage"), HasSubstr("expected")));
  const auto g = ascan::generic([](const auto& l, const auto& r) { return r; });
  EXPECT_THAT(error_of([&] { ascan::associative_scan(g, std::tuple{a, b}, 0, {}, std::tie(y, y)); }),
              AllOf(HasSubstr(kScan), HasSubstr("outputs 0 and 1"), HasSubstr("share storage")));
}

// A failed call leaves caller-provided outputs untouched (validation happens before writing).
TEST(ScanErrors, FailedCallDoesNotWriteOutputs) {
  const auto a = Tensor<float>::full({5, 4}, 2.0f), b = Tensor<float>::full({5, 4}, 3.0f);
  auto ya = Tensor<float>::full({5, 4}, 7.0f), yb = Tensor<float>::full({5, 3}, 7.0f);
  EXPECT_THROW(ascan::associative_scan(ascan::linear_recurrence, std::tuple{a, b}, 0, {}, std::tie(ya, yb)),
               ascan::Error);
  EXPECT_EQ(ya, Tensor<float>::full({5, 4}, 7.0f));
}

}  // namespace
