// scan_chain.hpp — the chain/scheduler layer (docs/design.md §2): work items claimed in order,
// each publishing its carry with a release store for its successor, which spins, then yields,
// until it is published or the chain has failed.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "ascan/detail/scan_policy.hpp"
#include "ascan/parallel.hpp"

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

// The chained work-item scheduler shared by the pointwise scan (blocks), batched Generic mode
// (groups of rows) and the gradient's segment sweep (tiles). Items are claimed in order from
// one counter; an item that needs its predecessor's carry waits for it to be published, then
// publishes its own. A predecessor was claimed earlier by a running worker and never waits on a
// later item, so the chain cannot deadlock. An exception in any worker marks the chain failed:
// the others stop at their next claim or wait, and run() rethrows it on the caller's thread.
class ItemChain {
 public:
  // `items` publication flags (none when no item waits on another).
  explicit ItemChain(int64_t items) : done_(static_cast<size_t>(items)) {}

  // The next unclaimed item (items are claimed in increasing order).
  int64_t claim() { return next_.fetch_add(1, std::memory_order_relaxed); }
  // Waits until item i has published; false if the chain failed meanwhile.
  bool wait(int64_t i) const { return wait_published(done_[static_cast<size_t>(i)], failed_); }
  // Publishes item i's carry (release: what it wrote before is visible to its waiter).
  void publish(int64_t i) { done_[static_cast<size_t>(i)].store(1, std::memory_order_release); }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  // Runs worker(w) on `workers` threads of the pool (w = 0 on the caller); an exception marks
  // the chain failed and is rethrown here once every worker has stopped.
  template <class Worker>
  void run(int workers, Worker&& worker) {
    run_workers(workers, [&](int w) {
      try {
        worker(w);
      } catch (...) {
        failed_.store(true);
        throw;
      }
    });
  }

 private:
  std::vector<std::atomic<uint8_t>> done_;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> failed_{false};
};

}  // namespace ascan::detail
