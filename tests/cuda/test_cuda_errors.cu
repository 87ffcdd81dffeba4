// test_cuda_errors.cu — argument errors of the device API (raised before any device work, so
// they run without a GPU on empty tensors), the checked-call macro, and device tensor basics.
#include <ascan/combine.hpp>
#include <ascan/cuda.cuh>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#define ASCAN_REQUIRE_DEVICE() \
  if (ascan::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible"

namespace {

using ascan::cuda::DeviceTensor;

template <class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const ascan::Error& e) {
    return e.what();
  }
  return "(no ascan::Error thrown)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CudaErrors, CheckedCallNamesFileCallAndError) {
  const std::string msg = message_of([] { ASCAN_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_TRUE(contains(msg, "test_cuda_errors.cu:")) << msg;
  EXPECT_TRUE(contains(msg, "cudaErrorInvalidValue")) << msg;
  EXPECT_TRUE(contains(msg, cudaGetErrorString(cudaErrorInvalidValue))) << msg;
}

TEST(CudaErrors, EmptyDeviceTensorNeedsNoDevice) {
  DeviceTensor<float> a;
  EXPECT_EQ(a.shape(), ascan::Shape{0});
  EXPECT_EQ(a.numel(), 0);
  EXPECT_EQ(a.data(), nullptr);
  DeviceTensor<double> b(ascan::Shape{3, 0, 2});
  EXPECT_EQ(b.numel(), 0);
  EXPECT_EQ(b.size(-1), 2);
  DeviceTensor<double> c = std::move(b);
  EXPECT_EQ(c.shape(), (ascan::Shape{3, 0, 2}));
  EXPECT_EQ(b.shape(), ascan::Shape{0});  // NOLINT: moved-from is empty by contract
  const auto h = ascan::cuda::to_host(ascan::cuda::to_device(ascan::Tensor<int32_t>::empty({0, 4})));
  EXPECT_EQ(h.shape(), (ascan::Shape{0, 4}));
  EXPECT_THROW(DeviceTensor<float>(ascan::Shape{-1}), ascan::Error);
}

TEST(CudaErrors, BadDim) {
  const DeviceTensor<float> x(ascan::Shape{0, 3});
  const std::string msg = message_of([&] { (void)ascan::cuda::associative_scan(ascan::add, x, 2); });
  EXPECT_TRUE(contains(msg, "ascan::cuda::associative_scan():")) << msg;
  EXPECT_THROW((void)ascan::cuda::associative_scan(ascan::add, x, -3), ascan::Error);
  EXPECT_NO_THROW((void)ascan::cuda::associative_scan(ascan::add, x, -2));
}

TEST(CudaErrors, LeavesMustShareOneShape) {
  const DeviceTensor<float> a(ascan::Shape{0, 3});
  const DeviceTensor<float> b(ascan::Shape{0, 1});
  const std::string msg =
      message_of([&] { (void)ascan::cuda::associative_scan(ascan::linear_recurrence, std::tie(a, b), 0); });
  EXPECT_TRUE(contains(msg, "ascan::cuda::associative_scan(): leaf 1 has shape [0, 1], expected [0, 3]")) << msg;
  EXPECT_TRUE(contains(msg, "broadcasting is host-only")) << msg;
}

TEST(CudaErrors, EmptyScansReturnEmptyOutputs) {
  const DeviceTensor<int64_t> a(ascan::Shape{4, 0});
  const DeviceTensor<float> b(ascan::Shape{4, 0});
  const auto [ya, yb] = ascan::cuda::associative_scan(ascan::linear_recurrence, std::tie(a, b), 1, {.reverse = true});
  EXPECT_EQ(ya.shape(), (ascan::Shape{4, 0}));
  EXPECT_EQ(yb.shape(), (ascan::Shape{4, 0}));
}

TEST(CudaErrors, VjpShapes) {
  const DeviceTensor<double> x(ascan::Shape{0, 3});
  const DeviceTensor<double> y(ascan::Shape{0, 3});
  const DeviceTensor<double> bad(ascan::Shape{0, 4});
  std::string msg = message_of([&] { (void)ascan::cuda::associative_scan_vjp(ascan::add, x, y, bad, 0); });
  EXPECT_TRUE(contains(msg, "ascan::cuda::associative_scan_vjp(): dgys leaf 0 has shape [0, 4], expected [0, 3]"))
      << msg;
  msg = message_of([&] { (void)ascan::cuda::associative_scan_vjp(ascan::add, x, bad, y, 0); });
  EXPECT_TRUE(contains(msg, "dys leaf 0")) << msg;
  EXPECT_THROW((void)ascan::cuda::associative_scan_vjp(ascan::add, x, y, y, 5), ascan::Error);
  const auto dx = ascan::cuda::associative_scan_vjp(ascan::add, x, y, y, -1);
  EXPECT_EQ(dx.shape(), (ascan::Shape{0, 3}));
}

TEST(CudaDeviceTensor, RoundTripCloneAndMove) {
  ASCAN_REQUIRE_DEVICE();
  const auto x = ascan::Tensor<int64_t>::random({3, 5}, 1, -9, 9);
  DeviceTensor<int64_t> d = ascan::cuda::to_device(x);
  const DeviceTensor<int64_t> copy = d.clone();
  d = ascan::cuda::to_device(ascan::Tensor<int64_t>::zeros({3, 5}));  // the clone owns its memory
  EXPECT_TRUE(ascan::cuda::to_host(copy) == x);
  DeviceTensor<int64_t> moved = std::move(d);
  EXPECT_EQ(d.data(), nullptr);  // NOLINT: moved-from is empty by contract
  EXPECT_TRUE(ascan::cuda::to_host(moved) == ascan::Tensor<int64_t>::zeros({3, 5}));
}

TEST(CudaErrors, AllocationFailureThrows) {
  ASCAN_REQUIRE_DEVICE();
  const std::string msg = message_of([] { DeviceTensor<double> huge(ascan::Shape{int64_t{1} << 45}); });
  EXPECT_TRUE(contains(msg, "cannot allocate")) << msg;
  DeviceTensor<float> ok(ascan::Shape{16});  // the failure left the runtime usable
  EXPECT_EQ(ok.numel(), 16);
}

}  // namespace
