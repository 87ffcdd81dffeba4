// builtin_scan.hpp — the builtin combines' host scans, compiled once into ascan::core.
//
// A scan with a builtin combine (add, mul, max, min, logaddexp, linear_recurrence) on float or
// double tensors does not depend on anything in the user's file, so it is instantiated in
// src/builtin_scan.cpp, once per ISA level (isa.hpp), and called through these declarations: a
// user file that includes ascan.hpp compiles no kernel for it (docs/design.md §2). The kernels
// are the same templates a user combine instantiates: at the same ISA level, results are bitwise
// the header path's.
#pragma once

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "ascan/combine.hpp"
#include "ascan/detail/scan_plan.hpp"
#include "ascan/detail/stream_store.hpp"
#include "ascan/tensor.hpp"

namespace ascan::detail {

enum class BuiltinOp : uint8_t { add, mul, max, min, logaddexp, linear_recurrence };

template <class F> struct builtin_op { static constexpr bool known = false; };
template <> struct builtin_op<Add> { static constexpr bool known = true; static constexpr BuiltinOp op = BuiltinOp::add; };
template <> struct builtin_op<Mul> { static constexpr bool known = true; static constexpr BuiltinOp op = BuiltinOp::mul; };
template <> struct builtin_op<Max> { static constexpr bool known = true; static constexpr BuiltinOp op = BuiltinOp::max; };
template <> struct builtin_op<Min> { static constexpr bool known = true; static constexpr BuiltinOp op = BuiltinOp::min; };
template <> struct builtin_op<LogAddExp> { static constexpr bool known = true; static constexpr BuiltinOp op = BuiltinOp::logaddexp; };
template <> struct builtin_op<LinearRecurrence> {
  static constexpr bool known = true;
  static constexpr BuiltinOp op = BuiltinOp::linear_recurrence;
};

template <class T> inline constexpr bool is_compiled_scalar = std::is_same_v<T, float> || std::is_same_v<T, double>;

// The scalar type of a structure X the library holds a compiled scan of F for (void if none):
// one float or double tensor for the scalar builtins, a pair of them for the linear recurrence.
template <class F, class X> struct compiled_builtin_scalar { using type = void; };
template <class F, class T>
  requires(builtin_op<F>::known && builtin_op<F>::op != BuiltinOp::linear_recurrence && is_compiled_scalar<T>)
struct compiled_builtin_scalar<F, Tensor<T>> { using type = T; };
template <class T>
  requires is_compiled_scalar<T>
struct compiled_builtin_scalar<LinearRecurrence, std::tuple<Tensor<T>, Tensor<T>>> { using type = T; };

template <class F, class X>
inline constexpr bool has_compiled_builtin = !std::is_void_v<typename compiled_builtin_scalar<F, X>::type>;

// Scans the leaves xs[0 .. n) into ys[0 .. n) (n = 2 for the linear recurrence, else 1) as
// pointwise_scan does, at active_isa()'s level. The caller has checked shapes and aliasing and
// set the float mode.
void builtin_pointwise_scan(BuiltinOp op, const Tensor<float>* xs, const Tensor<float>* ys, const PointwisePlan& plan,
                            bool reverse);
void builtin_pointwise_scan(BuiltinOp op, const Tensor<double>* xs, const Tensor<double>* ys, const PointwisePlan& plan,
                            bool reverse);

// One ISA level's compiled scans (src/builtin_scan.cpp defines builtin_scans_<namespace>).
struct BuiltinScans {
  void (*f32)(BuiltinOp, const Tensor<float>*, const Tensor<float>*, const PointwisePlan&, bool);
  void (*f64)(BuiltinOp, const Tensor<double>*, const Tensor<double>*, const PointwisePlan&, bool);
  StreamCopy stream_copy;  // the level's streaming copy (stream_store.hpp)
};

// The index of active_isa() among the compiled levels (0 baseline, 1 AVX2, 2 AVX-512), for the
// dispatch tables of ascan::core and ascan::autodiff.
int active_isa_slot();

}  // namespace ascan::detail
