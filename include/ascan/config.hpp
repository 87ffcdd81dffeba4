// config.hpp — build-wide macros: the host/device annotation, the restrict qualifier, inlining.
#pragma once

// ASCAN_HD marks functions that must compile for the host and for CUDA device code (combine
// functors, dual numbers). It is empty in plain C++ translation units.
#if defined(__CUDACC__)
#define ASCAN_HD __host__ __device__
#else
#define ASCAN_HD
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ASCAN_RESTRICT __restrict__
#define ASCAN_ALWAYS_INLINE inline __attribute__((always_inline))
#define ASCAN_INLINE_LAMBDA __attribute__((always_inline))  // [&](auto x) ASCAN_INLINE_LAMBDA { ... }
#else
#define ASCAN_RESTRICT
#define ASCAN_ALWAYS_INLINE inline
#define ASCAN_INLINE_LAMBDA
#endif

// Forces inlining of a member function in host code (the scan loops vectorise only over what
// they inline); nothing under nvcc.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define ASCAN_HOST_INLINE __attribute__((always_inline))
#else
#define ASCAN_HOST_INLINE
#endif

// The host kernels (the pointwise scan's runner and local scans, the register transposes,
// streaming stores, the gradient sweeps) live in an inline namespace named after the vector ISA
// the translation unit is compiled for: two files built with different -march flags (a user's
// file and the library, or a .cu file's host code) then instantiate differently named functions
// instead of one symbol with two calling conventions for its vector arguments (an ODR violation
// the linker would resolve by picking either).
#if defined(__AVX512F__)
#define ASCAN_ISA_NAMESPACE isa_avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define ASCAN_ISA_NAMESPACE isa_avx2
#elif defined(__AVX__)
#define ASCAN_ISA_NAMESPACE isa_avx
#else
#define ASCAN_ISA_NAMESPACE isa_base
#endif
