// isa.cpp — the ISA level the compiled builtins run at (isa.hpp): the CPU's, the environment's or
// a forced one, and the dispatch of the builtin scans to that level's kernels.
#include "ascan/isa.hpp"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

#include "ascan/detail/builtin_scan.hpp"
#include "ascan/error.hpp"

// ASCAN_ISA_DISPATCH (set by CMake on x86-64 with GCC or Clang): the builtins are compiled for
// the baseline, AVX2 and AVX-512; elsewhere for the baseline only.
namespace ascan::detail {
extern const BuiltinScans builtin_scans_isa_base;
#if ASCAN_ISA_DISPATCH
extern const BuiltinScans builtin_scans_isa_avx2;
extern const BuiltinScans builtin_scans_isa_avx512;
#endif
}  // namespace ascan::detail

namespace ascan {
namespace {

constexpr int kUnforced = -1;
std::atomic<int> forced_level{kUnforced};

bool cpu_runs(Isa level) {
  switch (level) {
    case Isa::baseline: return true;
#if ASCAN_ISA_DISPATCH
    // libgcc's CPU model also checks that the operating system saves the wide registers (XCR0).
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
             __builtin_cpu_supports("bmi2");
    case Isa::avx512:
      return cpu_runs(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512cd");
#endif
    default: return false;
  }
}

bool known_level(int v) { return v == 0 || v == 2 || v == 3; }

// Why an unavailable level is: completes "a level this ...".
const char* unavailable_because(Isa level) {
  return ASCAN_ISA_DISPATCH || level == Isa::baseline ? "CPU does not run" : "build did not compile";
}

// ASCAN_ISA, read once: kUnforced when unset, empty or "auto".
int environment_level() {
  static const int level = [] {
    const char* env = std::getenv("ASCAN_ISA");
    if (!env || !*env) return kUnforced;
    std::string v(env);
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v == "auto") return kUnforced;
    for (Isa l : {Isa::baseline, Isa::avx2, Isa::avx512})
      if (v == isa_name(l)) {
        if (!isa_available(l))
          detail::raise("ascan: the environment variable ASCAN_ISA is \"{}\", a level this {}; expected one of "
                        "the available levels (at most \"{}\") or \"auto\"",
                        env, unavailable_because(l), isa_name(cpu_isa()));
        return static_cast<int>(l);
      }
    detail::raise("ascan: the environment variable ASCAN_ISA is \"{}\"; expected \"baseline\", \"avx2\", "
                  "\"avx512\" or \"auto\"",
                  env);
  }();
  return level;
}

}  // namespace

std::string_view isa_name(Isa level) {
  switch (level) {
    case Isa::baseline: return "baseline";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

bool isa_available(Isa level) {
  if (!known_level(static_cast<int>(level))) return false;
#if !ASCAN_ISA_DISPATCH
  if (level != Isa::baseline) return false;
#endif
  return cpu_runs(level);
}

Isa cpu_isa() {
  static const Isa best = isa_available(Isa::avx512) ? Isa::avx512
                          : isa_available(Isa::avx2) ? Isa::avx2
                                                     : Isa::baseline;
  return best;
}

Isa active_isa() {
  const int forced = forced_level.load(std::memory_order_relaxed);
  if (forced != kUnforced) return static_cast<Isa>(forced);
  const int env = environment_level();
  return env != kUnforced ? static_cast<Isa>(env) : cpu_isa();
}

void force_isa(Isa level) {
  if (!known_level(static_cast<int>(level)))
    detail::raise("ascan::force_isa(): level is {}; expected Isa::baseline, Isa::avx2 or Isa::avx512",
                  static_cast<int>(level));
  if (!isa_available(level))
    detail::raise("ascan::force_isa(): level is {}, which this {}; expected at most {}", isa_name(level),
                  unavailable_because(level), isa_name(cpu_isa()));
  forced_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void unforce_isa() { forced_level.store(kUnforced, std::memory_order_relaxed); }

namespace detail {

int active_isa_slot() {
  switch (active_isa()) {
    case Isa::avx2: return 1;
    case Isa::avx512: return 2;
    default: return 0;
  }
}

namespace {
const BuiltinScans* active_scans() {
#if ASCAN_ISA_DISPATCH
  static const BuiltinScans* const table[] = {&builtin_scans_isa_base, &builtin_scans_isa_avx2,
                                              &builtin_scans_isa_avx512};
  return table[active_isa_slot()];
#else
  return &builtin_scans_isa_base;
#endif
}
}  // namespace

StreamCopy active_stream_copy() { return active_scans()->stream_copy; }

void builtin_pointwise_scan(BuiltinOp op, const Tensor<float>* xs, const Tensor<float>* ys, const PointwisePlan& plan,
                            bool reverse) {
  active_scans()->f32(op, xs, ys, plan, reverse);
}

void builtin_pointwise_scan(BuiltinOp op, const Tensor<double>* xs, const Tensor<double>* ys, const PointwisePlan& plan,
                            bool reverse) {
  active_scans()->f64(op, xs, ys, plan, reverse);
}

}  // namespace detail
}  // namespace ascan
