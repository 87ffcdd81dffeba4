// isa.hpp — the vector instruction set the library's compiled builtins run with.
//
// The builtin combines' scans and scan gradients (add, mul, max, min, logaddexp,
// linear_recurrence on float and double) are compiled into the library once per ISA level and
// picked at run time for the running CPU: no -march flag is needed to get them at full width.
// A user combine is compiled in the user's file, for the level its flags give.
#pragma once

#include <cstdint>
#include <string_view>

namespace ascan {

// The levels: x86-64's baseline (SSE2; the only one on other architectures), AVX2 with FMA
// (x86-64-v3), AVX-512 F/VL/BW/DQ (x86-64-v4).
enum class Isa : uint8_t { baseline = 0, avx2 = 2, avx512 = 3 };

// "baseline", "avx2" or "avx512".
std::string_view isa_name(Isa level);

// Whether this build compiled `level` and this CPU (and its operating system) runs it.
bool isa_available(Isa level);

// The widest available level.
Isa cpu_isa();

// The level the builtins run at now: the one force_isa() set, else the environment variable
// ASCAN_ISA ("baseline", "avx2", "avx512" or "auto"; read once), else cpu_isa(). Throws
// ascan::Error when ASCAN_ISA names an unknown or unavailable level.
Isa active_isa();

// Runs the builtins at `level` from now on, in every thread (tests; one code path on every
// machine). Throws ascan::Error, and changes nothing, when the level is not available. Not to be
// called while another thread scans.
void force_isa(Isa level);

// Undoes force_isa(): back to ASCAN_ISA or cpu_isa().
void unforce_isa();

}  // namespace ascan
