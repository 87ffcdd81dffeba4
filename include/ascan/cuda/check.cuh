// check.cuh — checked CUDA runtime calls and the raw device memory helpers of the backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "ascan/error.hpp"

namespace ascan::cuda::detail {

// Throws ascan::Error "<file>:<line>: <call> failed: <cudaGetErrorString>" and clears the
// runtime's last-error slot, so a recoverable error (an allocation failure) does not resurface
// at the next unrelated check.
[[noreturn]] void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line);

// Stream-ordered allocation on the legacy default stream from the device's memory pool, which is
// configured once to keep freed blocks (a training loop reaches a steady state with no trips to
// the driver). bytes == 0 returns nullptr without touching the device. Throws ascan::Error naming
// `where` and the size on failure.
void* device_allocate(size_t bytes, const char* where);
void device_free(void* ptr) noexcept;

// Synchronous copies (legacy default stream); bytes == 0 touches nothing.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);  // asynchronous D2D on stream 0

}  // namespace ascan::cuda::detail

// Every CUDA runtime call in the backend goes through this: a failure throws ascan::Error with
// file:line, the call text and the CUDA error string.
#define ASCAN_CUDA_CHECK(call)                                                        \
  do {                                                                                \
    const cudaError_t ascan_cuda_err_ = (call);                                       \
    if (ascan_cuda_err_ != cudaSuccess)                                               \
      ::ascan::cuda::detail::raise_cuda_error(ascan_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)
