// scan_chain.hpp — waiting on a predecessor work item in the chained scan: items publish
// their carry with a release store; a successor spins, then yields, until it is published or the
// scan has failed.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "ascan/detail/scan_policy.hpp"

namespace ascan::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `flag` is published (acquire); false if `failed` is raised meanwhile. A
// predecessor on a running core publishes within microseconds; past a short spin it is likely
// descheduled (more runnable threads than cores), so the core is given away.
inline bool wait_published(const std::atomic<uint8_t>& flag, const std::atomic<bool>& failed) {
  for (int spins = 0; !flag.load(std::memory_order_acquire); ++spins) {
    if (failed.load(std::memory_order_relaxed)) return false;
    if (spins > ThreadPolicy::spins_before_yield) std::this_thread::yield(); else cpu_relax();
  }
  return true;
}

}  // namespace ascan::detail
