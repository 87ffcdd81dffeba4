// allocator.hpp — the caching host allocator behind Tensor storage.
//
// Blocks are 64-byte aligned and bucketed by size class (multiples of 64 B up to 512 B, four
// classes per octave up to 2 MiB, then multiples of 1 MiB); each starts with a 64-byte header (the
// tensor's reference count and shape), so elements are 64-byte aligned too. A freed block goes
// back to the cache, not to the operating system, so a training loop that allocates the same
// shapes every step reaches a steady state with no system calls and no page faults. The cache is
// bounded (cache_limit(), default 4 GiB); blocks beyond the bound are returned to the system.
// Small blocks (up to 64 KiB) are cached per thread first (up to min(1 MiB, limit / 8) per thread,
// on top of the bound), so the many small tensors of a Generic-mode scan take no shared lock.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ascan/shape.hpp"

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

// The header at the start of every block: the reference count of the tensor handles that use
// it and their shape. One allocation holds both the header and the elements (after
// kStorageHeaderBytes), and the header stays constructed while the block sits in the cache, so
// its shape vector keeps its capacity: a steady state makes no malloc for shapes either.
// A view header (no elements of its own) points at the header that owns the elements and holds
// a reference to it; handles of one view may point at different offsets (the slices of a tensor
// share one view header).
// Elements another library owns (Tensor::external): released with the last handle on them.
struct ExternalStorage {
  virtual ~ExternalStorage() = default;
  const void* identity = nullptr;  // the owning allocation, for aliasing checks
};

struct StorageHeader {
  std::atomic<int64_t> refs{1};
  StorageHeader* base = nullptr;  // for a view: the owner of the elements
  size_t size_class = 0;          // bytes of the whole block
  ExternalStorage* external = nullptr;  // elements outside the block (an owner without payload)
  Shape shape;

  void* payload() { return reinterpret_cast<char*>(this) + 64; }
  const StorageHeader* owner() const { return base ? base : this; }
  // What aliasing checks compare: the owner, or the allocation an external owner names.
  const void* identity() const {
    const StorageHeader* o = owner();
    return o->external && o->external->identity ? o->external->identity : static_cast<const void*>(o);
  }
};
inline constexpr size_t kStorageHeaderBytes = 64;
static_assert(sizeof(StorageHeader) <= kStorageHeaderBytes);

// The most bytes one storage may hold (Tensor checks shapes against it before allocating).
inline constexpr int64_t kMaxStorageBytes = int64_t{1} << 60;

// A block with room for `payload_bytes` after its header (64-byte aligned); refs = 1, no base,
// shape unspecified (the caller assigns it). When the system refuses, the cache's blocks are
// returned to it and the request tried once more; then ascan::OutOfMemory (a std::bad_alloc)
// says how many bytes were asked for and how many tensors hold.
StorageHeader* allocate_storage(size_t payload_bytes);

// Test hook (fault injection): the n-th allocate_storage() from now (1: the next) fails as if
// the system had refused it, cache or not; 0 disarms. One armed failure at a time, process-wide.
void fail_storage_allocation(int64_t n);
// Gives a block whose count reached zero back to the cache (and releases its base).
void free_storage(StorageHeader* h);

inline void retain_storage(StorageHeader* h) { h->refs.fetch_add(1, std::memory_order_relaxed); }
inline void retain_storage(StorageHeader* h, int64_t n) { h->refs.fetch_add(n, std::memory_order_relaxed); }
inline void release_storage(StorageHeader* h, int64_t n = 1) {
  if (h->refs.fetch_sub(n, std::memory_order_acq_rel) == n) free_storage(h);
}

}  // namespace detail
}  // namespace ascan
