// ascan.hpp — umbrella header: tensors, builtin combines, the host scan and autodiff.
#pragma once

#include "ascan/allocator.hpp"
#include "ascan/autodiff.hpp"
#include "ascan/combine.hpp"
#include "ascan/error.hpp"
#include "ascan/format.hpp"
#include "ascan/isa.hpp"
#include "ascan/options.hpp"
#include "ascan/parallel.hpp"
#include "ascan/scan.hpp"
#include "ascan/shape.hpp"
#include "ascan/tensor.hpp"
#include "ascan/tensor_ops.hpp"
