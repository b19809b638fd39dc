// The caching allocator behind Storage.
//
// A training step allocates the same buffers every step: activations, gradients, temporaries.
// Going back to the system for each (and, for large blocks, getting fresh pages from the
// kernel, each faulted in on first touch) costs as much as the arithmetic at these sizes. So
// freed blocks are kept in per-size free lists and handed out again.
//
// The cache is capped (cache_limit(), 1 GiB unless set_cache_limit() says otherwise): when a
// freed block would take it past the cap, the sizes freed longest ago are given back to the
// system first, so a run whose shapes keep changing (a new batch length every step) keeps
// the sizes it still uses and never holds more than the cap idle.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cppgrad {

void* allocate_bytes(size_t nbytes);            // 64-byte aligned; never null (throws bad_alloc)
void deallocate_bytes(void* data, size_t nbytes);  // nbytes as passed to allocate_bytes

struct AllocatorStats {
  int64_t in_use_bytes = 0;  // held by live storages (rounded sizes)
  int64_t peak_bytes = 0;    // the most in use at once since start (or reset_peak)
  int64_t cached_bytes = 0;  // freed, kept for reuse
  int64_t cache_hits = 0;    // allocations served from the cache since start
  int64_t cache_misses = 0;  // allocations that went to the system
};
AllocatorStats allocator_stats();
// The machine's physical memory in bytes: what a request larger than it is refused against (a
// tensor's, a model's), as such a request could only fail, or be granted by overcommit and end
// the process when its pages are touched.
double machine_memory_bytes();
void reset_peak_allocated();
// Returns every cached block to the system.
void empty_cache();

// The most bytes the cache keeps for reuse. 0 turns caching off (every block goes back to the
// system at once); lowering the limit trims the cache to it at once.
void set_cache_limit(size_t bytes);
size_t cache_limit();
// The default: 1 GiB (see runtime/allocator.cpp for why).
inline constexpr size_t kDefaultCacheLimit = size_t{1} << 30;

}  // namespace cppgrad
