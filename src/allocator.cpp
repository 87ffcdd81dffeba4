// allocator.cpp — size-class caching allocator for host tensor storage.
#include "ascan/allocator.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace ascan {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kSmallLimit = size_t{1} << 20;

size_t size_class(size_t bytes) {
  if (bytes <= kAlignment) return kAlignment;
  if (bytes <= kSmallLimit) {
    size_t c = kAlignment;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kSmallLimit - 1) / kSmallLimit * kSmallLimit;
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats;
  int64_t limit = int64_t{4} << 30;

  void* take(size_t cls) {
    {
      std::lock_guard lock(mutex);
      auto it = free_blocks.find(cls);
      if (it != free_blocks.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        ++stats.cache_hits;
        stats.bytes_cached -= static_cast<int64_t>(cls);
        stats.bytes_in_use += static_cast<int64_t>(cls);
        return p;
      }
      ++stats.system_allocations;
      stats.bytes_in_use += static_cast<int64_t>(cls);
    }
    void* p = std::aligned_alloc(kAlignment, cls);
    if (p == nullptr) {
      std::lock_guard lock(mutex);
      stats.bytes_in_use -= static_cast<int64_t>(cls);
      throw std::bad_alloc();
    }
    return p;
  }

  void give_back(void* p, size_t cls) {
    {
      std::lock_guard lock(mutex);
      stats.bytes_in_use -= static_cast<int64_t>(cls);
      if (stats.bytes_cached + static_cast<int64_t>(cls) <= limit) {
        free_blocks[cls].push_back(p);
        stats.bytes_cached += static_cast<int64_t>(cls);
        return;
      }
      ++stats.system_frees;
    }
    std::free(p);
  }

  void release_all() {
    std::vector<void*> blocks;
    {
      std::lock_guard lock(mutex);
      for (auto& [cls, list] : free_blocks) {
        stats.system_frees += static_cast<int64_t>(list.size());
        blocks.insert(blocks.end(), list.begin(), list.end());
      }
      free_blocks.clear();
      stats.bytes_cached = 0;
    }
    for (void* p : blocks) std::free(p);
  }
};

// Never destroyed: tensors held in static objects may be released after main() returns.
Cache& cache() {
  static Cache* instance = new Cache;
  return *instance;
}

}  // namespace

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.stats;
}

void empty_cache() { cache().release_all(); }

void set_cache_limit(int64_t bytes) {
  {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    c.limit = bytes < 0 ? 0 : bytes;
  }
  empty_cache();
}

int64_t cache_limit() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.limit;
}

namespace detail {

std::shared_ptr<void> allocate_storage(size_t bytes) {
  const size_t cls = size_class(bytes);
  void* p = cache().take(cls);
  return std::shared_ptr<void>(p, [cls](void* q) { cache().give_back(q, cls); });
}

}  // namespace detail
}  // namespace ascan
