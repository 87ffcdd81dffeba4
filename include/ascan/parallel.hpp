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

namespace detail {

// Runs body(worker) for worker = 0 .. num_workers-1, concurrently where the pool allows, and
// returns when all have finished. The caller runs worker 0. The first exception thrown by any
// worker is rethrown here. Bodies must not rely on running concurrently with each other (the
// pool may run them one after another), only on all of them running.
void run_workers(int num_workers, const std::function<void(int)>& body);

// Splits [0, n) into chunks of at least `grain` and runs body(begin, end) on the pool.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

bool in_parallel_region();

}  // namespace detail
}  // namespace ascan
