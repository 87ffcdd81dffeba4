// cuda.cuh — the CUDA backend (nvcc translation units only). Depends on the core headers only.
#pragma once

#include <string>

#include "ascan/combine.hpp"
#include "ascan/config.hpp"
#include "ascan/error.hpp"

namespace ascan::cuda {

// Number of CUDA devices visible to this process (0 when there is no GPU or no driver; never
// throws for a missing device).
int device_count();

// Name of device `index`; throws ascan::Error when the index is out of range.
std::string device_name(int index);

}  // namespace ascan::cuda
