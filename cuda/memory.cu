// memory.cu — checked CUDA errors, pooled stream-ordered allocation and copies for the backend.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "ascan/cuda/check.cuh"

namespace ascan::cuda::detail {

void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // non-sticky errors would otherwise be reported again later
  ascan::detail::raise("{}:{}: {} failed: {} ({})", file, line, call, cudaGetErrorString(err),
                       cudaGetErrorName(err));
}

namespace {

// The default pool returns freed memory to the driver at every synchronisation; a threshold of
// "never" keeps it, so repeated scans of one size allocate from the cache.
void configure_pool_once() {
  static std::mutex mutex;
  static bool configured[64] = {};
  int device = 0;
  ASCAN_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0 || device >= 64 || configured[device]) return;
  cudaMemPool_t pool{};
  ASCAN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  ASCAN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  configured[device] = true;
}

}  // namespace

void* device_allocate(size_t bytes, const char* where) {
  if (bytes == 0) return nullptr;
  configure_pool_once();
  void* ptr = nullptr;
  const cudaError_t err = cudaMallocAsync(&ptr, bytes, cudaStream_t{0});
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ascan::detail::raise("{}: cannot allocate {} bytes of device memory: cudaMallocAsync failed: {}",
                         where, bytes, cudaGetErrorString(err));
  }
  return ptr;
}

void device_free(void* ptr) noexcept {
  // A destructor cannot throw; a failed free means the context is already broken, and the next
  // checked call reports that.
  if (ptr != nullptr) (void)cudaFreeAsync(ptr, cudaStream_t{0});
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ASCAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ASCAN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ASCAN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStream_t{0}));
}

}  // namespace ascan::cuda::detail
