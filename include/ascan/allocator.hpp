// allocator.hpp — the caching host allocator behind Tensor storage.
//
// Blocks are 64-byte aligned and bucketed by size class (powers of two up to 1 MiB, then
// multiples of 1 MiB). A freed block goes back to the cache, not to the operating system, so a
// training loop that allocates the same shapes every step reaches a steady state with no system
// calls and no page faults. The cache is bounded (cache_limit(), default 4 GiB); blocks beyond the
// bound are returned to the system. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ascan {

struct AllocatorStats {
  int64_t system_allocations = 0;  // blocks obtained from the operating system
  int64_t system_frees = 0;        // blocks returned to it
  int64_t cache_hits = 0;          // allocations served from the cache
  int64_t bytes_in_use = 0;        // held by live storage
  int64_t bytes_cached = 0;        // held by the cache, free for reuse
};

AllocatorStats allocator_stats();
// Returns every cached (unused) block to the operating system.
void empty_cache();
// Bytes the cache may hold; 0 disables caching.
void set_cache_limit(int64_t bytes);
int64_t cache_limit();

namespace detail {

// Raw storage of `bytes` bytes (64-byte aligned) from the cache; the deleter gives it back.
std::shared_ptr<void> allocate_storage(size_t bytes);

}  // namespace detail
}  // namespace ascan
