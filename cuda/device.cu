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
    detail::raise("ascan::cuda::device_name(): index {} is out of range, expected 0 <= index < {} "
                  "(visible devices)", index, n);
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess)
    detail::raise("ascan::cuda::device_name(): cudaGetDeviceProperties failed at {}:{}: {}",
                  __FILE__, __LINE__, cudaGetErrorString(err));
  return prop.name;
}

}  // namespace ascan::cuda
