// allocator.cpp — size-class caching allocator for host tensor storage, with per-thread caches
// of small blocks.
#include "ascan/allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ascan/error.hpp"

namespace ascan {
namespace {

using detail::StorageHeader;

constexpr size_t kAlignment = 64;
// Size classes (bytes of a block, its 64-byte header included): multiples of 64 up to 512, then
// four per octave up to 2 MiB (at most 25 % above the request, also for power-of-two tensors
// whose header pushes them past a power of two), then multiples of 1 MiB.
constexpr size_t kSmallLimit = size_t{2} << 20;
constexpr size_t kLargeStep = size_t{1} << 20;
constexpr int kNumSmallClasses = 56;                     // 64 B .. 2 MiB
constexpr int kNumThreadClasses = 36;                    // 64 B .. 64 KiB: cached per thread
constexpr size_t kThreadClassLimit = size_t{64} << 10;
constexpr int64_t kThreadCacheBytes = int64_t{1} << 20;  // per thread, at most
constexpr size_t kThreadListBytes = size_t{256} << 10;   // per thread and class, about

size_t size_class(size_t bytes) {
  if (bytes <= 512) return bytes <= kAlignment ? kAlignment : (bytes + 63) & ~size_t{63};
  if (bytes <= kSmallLimit) {
    const size_t step = size_t{1} << (std::bit_width(bytes - 1) - 3);  // a quarter octave
    return (bytes + step - 1) & ~(step - 1);
  }
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}
int small_index(size_t cls) {  // cls a class <= kSmallLimit
  if (cls <= 512) return static_cast<int>(cls / 64) - 1;
  const int e = static_cast<int>(std::bit_width(cls - 1)) - 1;  // 2^e < cls <= 2^(e+1)
  return 8 + (e - 9) * 4 + static_cast<int>(cls >> (e - 2)) - 5;
}
size_t class_bytes(int index) {  // the inverse of small_index
  if (index < 8) return static_cast<size_t>(index + 1) * 64;
  const int e = 9 + (index - 8) / 4;
  return (size_t{1} << e) + static_cast<size_t>((index - 8) % 4 + 1) * (size_t{1} << (e - 2));
}
// Blocks a thread keeps per class: about kThreadListBytes, at least 8.
const std::array<size_t, kNumThreadClasses>& thread_list_caps() {
  static const auto caps = [] {
    std::array<size_t, kNumThreadClasses> c{};
    for (int i = 0; i < kNumThreadClasses; ++i) c[i] = std::max<size_t>(8, kThreadListBytes / class_bytes(i));
    return c;
  }();
  return caps;
}
size_t thread_list_cap(size_t cls) { return thread_list_caps()[small_index(cls)]; }

StorageHeader* system_allocate(size_t cls) {
  void* p = std::aligned_alloc(kAlignment, cls);
  if (p == nullptr) throw std::bad_alloc();
  auto* h = new (p) StorageHeader();
  h->size_class = cls;
  h->shape.reserve(4);  // kept with the block: later shapes up to rank 4 need no allocation
  return h;
}
void system_free(StorageHeader* h) {
  h->~StorageHeader();
  std::free(h);
}

// Test-and-set lock: taken by its owner thread on every cached operation (uncontended), and by
// allocator_stats() / empty_cache() from other threads.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

void add_stats(AllocatorStats& to, const AllocatorStats& s) {
  to.system_allocations += s.system_allocations;
  to.system_frees += s.system_frees;
  to.cache_hits += s.cache_hits;
  to.bytes_in_use += s.bytes_in_use;
  to.bytes_cached += s.bytes_cached;
}

struct ThreadCache {
  SpinLock lock;
  std::array<std::vector<StorageHeader*>, kNumThreadClasses> lists;
  AllocatorStats stats;  // this thread's share (bytes_in_use may be negative: frees of others' blocks)
};

// The shared cache. Lock order: registry_mutex -> a ThreadCache lock -> mutex.
struct Cache {
  std::mutex mutex;
  std::array<std::vector<StorageHeader*>, kNumSmallClasses> small;
  std::unordered_map<size_t, std::vector<StorageHeader*>> large;
  AllocatorStats stats;  // includes the shares of threads that have exited
  std::atomic<int64_t> limit{int64_t{4} << 30};

  std::mutex registry_mutex;
  std::vector<ThreadCache*> threads;

  std::vector<StorageHeader*>& list(size_t cls) {
    return cls <= kSmallLimit ? small[small_index(cls)] : large[cls];
  }

  // Under `mutex`: a block for `cls` from the cache, or nullptr.
  StorageHeader* take_locked(size_t cls, AllocatorStats& s) {
    auto& l = list(cls);
    if (l.empty()) return nullptr;
    StorageHeader* h = l.back();
    l.pop_back();
    stats.bytes_cached -= static_cast<int64_t>(cls);
    ++s.cache_hits;
    s.bytes_in_use += static_cast<int64_t>(cls);
    return h;
  }

  // Under `mutex`: caches `h` if the bound allows, else returns it for the caller to free.
  StorageHeader* put_locked(StorageHeader* h) {
    const size_t cls = h->size_class;
    if (stats.bytes_cached + static_cast<int64_t>(cls) <= limit.load(std::memory_order_relaxed)) {
      list(cls).push_back(h);
      stats.bytes_cached += static_cast<int64_t>(cls);
      return nullptr;
    }
    ++stats.system_frees;
    return h;
  }

  StorageHeader* allocate(size_t cls) {
    {
      std::lock_guard g(mutex);
      if (StorageHeader* h = take_locked(cls, stats)) return h;
      ++stats.system_allocations;
      stats.bytes_in_use += static_cast<int64_t>(cls);
    }
    try {
      return system_allocate(cls);
    } catch (...) {
      std::lock_guard g(mutex);
      --stats.system_allocations;
      stats.bytes_in_use -= static_cast<int64_t>(cls);
      throw;
    }
  }

  void give_back(StorageHeader* h) {
    StorageHeader* to_free;
    {
      std::lock_guard g(mutex);
      stats.bytes_in_use -= static_cast<int64_t>(h->size_class);
      to_free = put_locked(h);
    }
    if (to_free) system_free(to_free);
  }
};

// Never destroyed: tensors held in static objects may be released after main() returns.
Cache& cache() {
  static Cache* instance = new Cache;
  return *instance;
}

// The calling thread's cache, registered on first use and drained into the shared cache when the
// thread exits (after that, and on threads being torn down, `t_cache` is null: the shared path).
thread_local ThreadCache* t_cache = nullptr;
thread_local bool t_cache_dead = false;

struct ThreadCacheOwner {
  ThreadCache* tc = nullptr;
  ~ThreadCacheOwner() {
    t_cache = nullptr;
    t_cache_dead = true;
    if (!tc) return;
    Cache& c = cache();
    std::vector<StorageHeader*> to_free;
    {
      std::lock_guard r(c.registry_mutex);
      std::lock_guard g(tc->lock);
      std::lock_guard m(c.mutex);
      add_stats(c.stats, tc->stats);  // the thread's share stays counted; its blocks move over
      for (auto& l : tc->lists)
        for (StorageHeader* h : l) {
          c.stats.bytes_cached -= static_cast<int64_t>(h->size_class);
          if (StorageHeader* f = c.put_locked(h)) to_free.push_back(f);
        }
      c.threads.erase(std::find(c.threads.begin(), c.threads.end(), tc));
    }
    for (StorageHeader* h : to_free) system_free(h);
    delete tc;
  }
};

[[gnu::noinline]] ThreadCache* register_thread_cache() {
  if (t_cache_dead) return nullptr;
  thread_local ThreadCacheOwner owner;
  auto* tc = new ThreadCache;
  {
    Cache& c = cache();
    std::lock_guard r(c.registry_mutex);
    c.threads.push_back(tc);
  }
  owner.tc = tc;
  t_cache = tc;
  return tc;
}

inline ThreadCache* thread_cache() {
  if (ThreadCache* tc = t_cache) [[likely]] return tc;
  return register_thread_cache();
}


// A block another thread has cached (before going to the system: otherwise blocks drift into the
// caches of the threads that free them and a steady state keeps allocating). Takes the registry
// and that thread's lock, so the caller holds no cache lock.
StorageHeader* steal_cached(const ThreadCache& self, int index) {
  Cache& c = cache();
  std::lock_guard r(c.registry_mutex);
  for (ThreadCache* other : c.threads) {
    if (other == &self) continue;
    std::lock_guard g(other->lock);
    auto& l = other->lists[index];
    if (l.empty()) continue;
    StorageHeader* h = l.back();
    l.pop_back();
    other->stats.bytes_cached -= static_cast<int64_t>(h->size_class);
    return h;
  }
  return nullptr;
}

// A block of class `cls` for the calling thread: its own list, refilled in batches from the
// shared cache, else one cached by another thread, else the system.
StorageHeader* take_thread_cached(ThreadCache& tc, size_t cls) {
  Cache& c = cache();
  const int index = small_index(cls);
  {
    std::lock_guard g(tc.lock);
    auto& l = tc.lists[index];
    if (l.empty()) {
      const size_t want = thread_list_cap(cls) / 2;
      std::lock_guard m(c.mutex);
      auto& shared = c.small[index];
      const size_t n = std::min(want, shared.size());
      l.insert(l.end(), shared.end() - static_cast<std::ptrdiff_t>(n), shared.end());
      shared.resize(shared.size() - n);
      c.stats.bytes_cached -= static_cast<int64_t>(n * cls);
      tc.stats.bytes_cached += static_cast<int64_t>(n * cls);
    }
    if (!l.empty()) {
      StorageHeader* h = l.back();
      l.pop_back();
      tc.stats.bytes_cached -= static_cast<int64_t>(cls);
      tc.stats.bytes_in_use += static_cast<int64_t>(cls);
      ++tc.stats.cache_hits;
      return h;
    }
  }
  StorageHeader* stolen = steal_cached(tc, index);
  std::lock_guard g(tc.lock);
  tc.stats.bytes_in_use += static_cast<int64_t>(cls);
  if (stolen) {
    ++tc.stats.cache_hits;
    return stolen;
  }
  ++tc.stats.system_allocations;
  try {
    return system_allocate(cls);
  } catch (...) {
    --tc.stats.system_allocations;
    tc.stats.bytes_in_use -= static_cast<int64_t>(cls);
    throw;
  }
}

// Caches a freed small block in the calling thread's list; a full list (or a thread over its
// budget) hands its older half (all of it) to the shared cache, which applies the bound.
void put_thread_cached(ThreadCache& tc, StorageHeader* h) {
  Cache& c = cache();
  const size_t cls = h->size_class;
  const int64_t budget = std::min(kThreadCacheBytes, c.limit.load(std::memory_order_relaxed) / 8);
  std::vector<StorageHeader*> to_free;
  {
    std::lock_guard g(tc.lock);
    tc.stats.bytes_in_use -= static_cast<int64_t>(cls);
    auto& l = tc.lists[small_index(cls)];
    const bool over_budget = tc.stats.bytes_cached + static_cast<int64_t>(cls) > budget;
    if (!over_budget && l.size() < thread_list_cap(cls)) {
      l.push_back(h);
      tc.stats.bytes_cached += static_cast<int64_t>(cls);
      return;
    }
    const size_t n = over_budget ? l.size() : l.size() / 2;
    tc.stats.bytes_cached -= static_cast<int64_t>(n * cls);
    std::lock_guard m(c.mutex);
    for (size_t i = 0; i < n; ++i)
      if (StorageHeader* f = c.put_locked(l[i])) to_free.push_back(f);
    l.erase(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(n));
    if (StorageHeader* f = c.put_locked(h)) to_free.push_back(f);
  }
  for (StorageHeader* f : to_free) system_free(f);
}

}  // namespace

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard r(c.registry_mutex);
  AllocatorStats s;
  for (ThreadCache* tc : c.threads) tc->lock.lock();  // all held: a consistent snapshot
  {
    std::lock_guard g(c.mutex);
    add_stats(s, c.stats);
  }
  for (ThreadCache* tc : c.threads) {
    add_stats(s, tc->stats);
    tc->lock.unlock();
  }
  return s;
}

void empty_cache() {
  Cache& c = cache();
  std::vector<StorageHeader*> blocks;
  {
    std::lock_guard r(c.registry_mutex);
    for (ThreadCache* tc : c.threads) {
      std::lock_guard g(tc->lock);
      for (auto& l : tc->lists) {
        for (StorageHeader* h : l) tc->stats.bytes_cached -= static_cast<int64_t>(h->size_class);
        tc->stats.system_frees += static_cast<int64_t>(l.size());
        blocks.insert(blocks.end(), l.begin(), l.end());
        l.clear();
      }
    }
    std::lock_guard g(c.mutex);
    const auto take = [&](std::vector<StorageHeader*>& l) {
      c.stats.system_frees += static_cast<int64_t>(l.size());
      blocks.insert(blocks.end(), l.begin(), l.end());
      l.clear();
    };
    for (auto& l : c.small) take(l);
    for (auto& [cls, l] : c.large) take(l);
    c.large.clear();
    c.stats.bytes_cached = 0;
  }
  for (StorageHeader* h : blocks) system_free(h);
}

void set_cache_limit(int64_t bytes) {
  cache().limit.store(bytes < 0 ? 0 : bytes, std::memory_order_relaxed);
  empty_cache();
}

int64_t cache_limit() { return cache().limit.load(std::memory_order_relaxed); }

namespace detail {

namespace {

std::atomic<int64_t> fail_countdown{0};  // fail_storage_allocation(): requests until the failure

StorageHeader* allocate_once(size_t cls) {
  ThreadCache* tc = cls <= kThreadClassLimit ? thread_cache() : nullptr;
  return tc ? take_thread_cached(*tc, cls) : cache().allocate(cls);
}

[[noreturn]] void out_of_memory(size_t payload_bytes, const char* after) {
  const AllocatorStats s = allocator_stats();
  throw OutOfMemory(fmt::format("ascan: out of memory: a tensor storage of {} bytes ({:.1f} GiB) could not be "
                                "allocated{}; tensors hold {} bytes, the cache {}",
                                payload_bytes, static_cast<double>(payload_bytes) / (1 << 30), after,
                                s.bytes_in_use, s.bytes_cached));
}

}  // namespace

StorageHeader* allocate_storage(size_t payload_bytes) {
  if (payload_bytes > static_cast<size_t>(kMaxStorageBytes)) out_of_memory(payload_bytes, " (more than a storage may hold)");
  if (fail_countdown.load(std::memory_order_relaxed) > 0 && fail_countdown.fetch_sub(1) == 1)
    out_of_memory(payload_bytes, " (fail_storage_allocation)");
  const size_t cls = size_class(payload_bytes + kStorageHeaderBytes);
  StorageHeader* h;
  try {
    h = allocate_once(cls);
  } catch (const std::bad_alloc&) {
    // The cache's blocks may be what the system lacks: return them and try once more.
    empty_cache();
    try {
      h = allocate_once(cls);
    } catch (const std::bad_alloc&) {
      out_of_memory(payload_bytes, ", also after the cache returned its blocks to the system");
    }
  }
  h->refs.store(1, std::memory_order_relaxed);
  h->base = nullptr;
  return h;
}

void fail_storage_allocation(int64_t n) { fail_countdown.store(n < 0 ? 0 : n, std::memory_order_relaxed); }

void free_storage(StorageHeader* h) {
  if (StorageHeader* base = h->base) {
    h->base = nullptr;
    release_storage(base);
  }
  if (ExternalStorage* e = h->external) {
    h->external = nullptr;
    delete e;  // (the releases that Tensor::external accepts do not throw)
  }
  ThreadCache* tc = h->size_class <= kThreadClassLimit ? thread_cache() : nullptr;
  if (tc) put_thread_cached(*tc, h);
  else cache().give_back(h);
}

}  // namespace detail
}  // namespace ascan
