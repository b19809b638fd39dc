// The caching allocator behind Storage.
//
// A training step allocates the same buffers every step: activations, gradients, temporaries.
// Going back to the system for each (and, for large blocks, getting fresh pages from the
// kernel, each faulted in on first touch) costs as much as the arithmetic at these sizes. So
// freed blocks are kept in per-size free lists and handed out again; memory is returned to the
// system only by empty_cache() or at exit.
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
};
AllocatorStats allocator_stats();
void reset_peak_allocated();
// Returns every cached block to the system.
void empty_cache();

}  // namespace cppgrad
