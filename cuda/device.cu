// device.cu — device discovery; the CUDA backend's first translation unit.
#include <cuda_runtime.h>

#include "ascan/cuda.cuh"

namespace ascan::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  const int n = device_count();
  if (index < 0 || index >= n)
    ascan::detail::raise("ascan::cuda::device_name(): index {} is out of range, expected 0 <= index < {} "
                  "(visible devices)", index, n);
  cudaDeviceProp prop{};
  ASCAN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

}  // namespace ascan::cuda
