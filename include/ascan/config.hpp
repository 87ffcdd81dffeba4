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

// The vector ISA of the host kernels (the pointwise scan's runner and local scans, the register
// transposes, streaming stores, the gradient sweeps): ASCAN_ISA_LEVEL is 3 for AVX-512
// (x86-64-v4), 2 for AVX2 + FMA (x86-64-v3), 1 for AVX, 0 for the baseline (SSE2 on x86-64, the
// compiler's default elsewhere). A translation unit gets the level of its compiler flags; the
// library's dispatched builtins (src/isa/, docs/design.md §2) set ASCAN_DISPATCH_ISA to compile
// one file per level, and only the kernels get that level's instructions (a GCC/Clang target
// pragma around them), as Highway's HWY_BEFORE_NAMESPACE does: the inline functions they share
// with the rest of the program (the standard library, Tensor) stay baseline code.
#if defined(ASCAN_DISPATCH_ISA) && !defined(__CUDACC__)
#define ASCAN_ISA_LEVEL ASCAN_DISPATCH_ISA
#elif defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX2__) && defined(__FMA__)
#define ASCAN_ISA_LEVEL 3
#elif defined(__AVX2__) && defined(__FMA__)
#define ASCAN_ISA_LEVEL 2
#elif defined(__AVX__)
#define ASCAN_ISA_LEVEL 1
#else
#define ASCAN_ISA_LEVEL 0
#endif

// The kernels live in an inline namespace named after their ISA level: two files built for
// different levels (a user's file and the library's dispatched builtins, or a .cu file's host
// code) instantiate differently named functions instead of one symbol with two calling
// conventions for its vector arguments (an ODR violation the linker would resolve by picking
// either, and a CPU without the wider ISA would then fault).
#if ASCAN_ISA_LEVEL == 3
#define ASCAN_ISA_NAMESPACE isa_avx512
#elif ASCAN_ISA_LEVEL == 2
#define ASCAN_ISA_NAMESPACE isa_avx2
#elif ASCAN_ISA_LEVEL == 1
#define ASCAN_ISA_NAMESPACE isa_avx
#else
#define ASCAN_ISA_NAMESPACE isa_base
#endif

// The target pragma of a dispatched level (nothing elsewhere: the flags already say it): exactly
// the features src/isa.cpp checks the CPU for.
#if defined(ASCAN_DISPATCH_ISA) && !defined(__CUDACC__) && ASCAN_DISPATCH_ISA >= 2
#if ASCAN_DISPATCH_ISA == 3
#define ASCAN_ISA_TARGET "avx2,fma,bmi,bmi2,avx512f,avx512vl,avx512bw,avx512dq,avx512cd"
#else
#define ASCAN_ISA_TARGET "avx2,fma,bmi,bmi2"
#endif
#define ASCAN_ISA_PRAGMA_STR_(t) _Pragma(#t)
#define ASCAN_ISA_PRAGMA_(t) ASCAN_ISA_PRAGMA_STR_(t)  // expands ASCAN_ISA_TARGET, then stringizes
#if defined(__clang__)
// (A region that declares no function, such as a header of types, is not worth a warning.)
#define ASCAN_ISA_PUSH                                                                               \
  _Pragma("clang diagnostic push") _Pragma("clang diagnostic ignored \"-Wpragma-clang-attribute\"") \
      ASCAN_ISA_PRAGMA_(clang attribute push(__attribute__((target(ASCAN_ISA_TARGET))), apply_to = function))
#define ASCAN_ISA_POP _Pragma("clang attribute pop") _Pragma("clang diagnostic pop")
#elif defined(__GNUC__)
#define ASCAN_ISA_PUSH _Pragma("GCC push_options") ASCAN_ISA_PRAGMA_(GCC target(ASCAN_ISA_TARGET))
#define ASCAN_ISA_POP _Pragma("GCC pop_options")
#else
#error "ASCAN_DISPATCH_ISA needs GCC or Clang"
#endif
#else
#define ASCAN_ISA_PUSH
#define ASCAN_ISA_POP
#endif

// Before a loop whose iterations the compiler cannot prove independent (through pointers that
// may alias) but are: vectorise it anyway. Nothing with Clang: its equivalent (loop
// vectorize(assume_safety)) warns wherever the loop cannot be vectorised (a combine with calls),
// and without it Clang vectorises behind a run-time overlap check.
#if defined(__clang__)
#define ASCAN_IVDEP
#elif defined(__GNUC__)
#define ASCAN_IVDEP _Pragma("GCC ivdep")
#else
#define ASCAN_IVDEP
#endif

// A name suffixed with the kernels' namespace, for the one symbol each dispatched level exports:
// ASCAN_ISA_NAME(builtin_scans) is builtin_scans_isa_avx2 in the AVX2 level's file.
#define ASCAN_ISA_CAT2_(a, b) a##_##b
#define ASCAN_ISA_CAT_(a, b) ASCAN_ISA_CAT2_(a, b)
#define ASCAN_ISA_NAME(prefix) ASCAN_ISA_CAT_(prefix, ASCAN_ISA_NAMESPACE)

// Opens and closes the kernels' namespace (inside namespace ascan::detail or ascan::ad::detail).
#define ASCAN_ISA_BEGIN ASCAN_ISA_PUSH inline namespace ASCAN_ISA_NAMESPACE {
#define ASCAN_ISA_END } ASCAN_ISA_POP
