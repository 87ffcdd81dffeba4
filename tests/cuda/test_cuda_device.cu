// test_cuda_device.cu — device discovery; skips when no GPU is visible.
#include <ascan/cuda.cuh>
#include <gtest/gtest.h>

namespace {

__global__ void add_one(int* x) { *x += 1; }

TEST(CudaDevice, CountIsNonNegativeAndNamesAreChecked) {
  const int n = ascan::cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_THROW(ascan::cuda::device_name(n), ascan::Error);  // one past the last device
  EXPECT_THROW(ascan::cuda::device_name(-1), ascan::Error);
}

TEST(CudaDevice, RunsAKernel) {
  if (ascan::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  EXPECT_FALSE(ascan::cuda::device_name(0).empty());
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  const int one = 1;
  ASSERT_EQ(cudaMemcpy(d, &one, sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  add_one<<<1, 1>>>(d);
  int out = 0;
  ASSERT_EQ(cudaMemcpy(&out, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  EXPECT_EQ(out, 2);
}

}  // namespace
