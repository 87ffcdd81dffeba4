// cuda.cuh — the CUDA backend (nvcc translation units only). Depends on the core headers only.
//
// DeviceTensor<T>, to_device / to_host, associative_scan (pointwise) and associative_scan_vjp on
// the current device. All work is queued on the legacy default stream in call order (allocations
// too, from the device's stream-ordered pool), so results are ready for the next call or copy
// without explicit synchronisation; to_host waits. Combines used on the device are structs with a
// templated ASCAN_HD call operator (builtins in combine.hpp, or ASCAN_COMBINE).
#pragma once

#include <string>

#include "ascan/combine.hpp"
#include "ascan/config.hpp"
#include "ascan/cuda/check.cuh"
#include "ascan/cuda/device_tensor.cuh"
#include "ascan/cuda/scan.cuh"
#include "ascan/cuda/scan_vjp.cuh"
#include "ascan/error.hpp"

namespace ascan::cuda {

// Number of CUDA devices visible to this process (0 when there is no GPU or no driver; never
// throws for a missing device).
int device_count();

// Name of device `index`; throws ascan::Error when the index is out of range.
std::string device_name(int index);

}  // namespace ascan::cuda
