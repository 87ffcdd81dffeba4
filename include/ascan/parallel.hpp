// parallel.hpp — the host thread pool used by the scans.
//
// One process-wide pool of num_threads() - 1 workers plus the calling thread. Parallel regions
// are not nested: a region started from inside a region runs inline on the calling thread.
// Results of the pointwise scans do not depend on the thread count (work is split by shape).
#pragma once

#include <cstdint>
#include <functional>

namespace ascan {

// Threads used by host scans (default: std::thread::hardware_concurrency(), or the
// ASCAN_NUM_THREADS environment variable). Throws ascan::Error when n < 1.
void set_num_threads(int n);
int num_threads();

// Host scans (pointwise and generic, and the pointwise gradients) run with subnormal (denormal)
// floating-point numbers flushed to zero: results below the smallest normal number (about
// 1.2e-38 in float32, 2.2e-308 in float64) become zero and subnormal inputs read as zero (x86:
// the MXCSR FTZ and DAZ bits; AArch64: FPCR.FZ), on every thread that works on the call, the
// caller's included, for the call only (the caller's setting is restored when it returns; the
// setting is read when the call starts). On by default: arithmetic on subnormals costs 10-100x an
// ordinary operation on many x86 CPUs, and products of decays in (0, 1) over long sequences
// (the linear recurrence's y^a, its adjoint's products) reach them and, with decays close to 1,
// stay there (0.99 times a small subnormal rounds back to itself). The first step of a scan is a
// copy of its input and keeps a subnormal one. Off: IEEE gradual underflow, at that cost. Other
// host operations (tensor arithmetic, matmul, the tape's ops), outside a Generic-mode combine
// that a scan calls, keep the caller's setting.
void set_flush_denormals(bool on);
bool flush_denormals();

namespace detail {

// Runs body(worker) for worker = 0 .. num_workers-1, concurrently where the pool allows, and
// returns when all have finished. The caller runs worker 0. The first exception thrown by any
// worker is rethrown here. Bodies must not rely on running concurrently with each other (the
// pool may run them one after another), only on all of them running.
void run_workers(int num_workers, const std::function<void(int)>& body);

// Splits [0, n) into chunks of at least `grain` and runs body(begin, end) on the pool.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

bool in_parallel_region();

// body(begin, end) over [0, n) on the pool in chunks of at least `grain`, inline on the caller
// when n <= grain (waking the pool costs more than such work).
template <class Body>
void parallel_elements(int64_t n, int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (n <= grain) {
    body(int64_t{0}, n);
    return;
  }
  parallel_for(n, grain, [&](int64_t b, int64_t e) { body(b, e); });
}

// The floating-point mode of ascan::flush_denormals() on this thread for the scope's lifetime,
// then the previous one; a no-op inside another scope or a parallel region (which already has it).
// Every host scan entry point holds one, so a whole call runs in one mode.
class FloatModeScope {
 public:
  FloatModeScope();
  ~FloatModeScope();
  FloatModeScope(const FloatModeScope&) = delete;
  FloatModeScope& operator=(const FloatModeScope&) = delete;

 private:
  bool active_ = false;
  uint64_t saved_ = 0;
};

}  // namespace detail
}  // namespace ascan
