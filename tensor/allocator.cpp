#include "tensor/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace cppgrad {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t{4} << 30;  // beyond this, freed blocks go back to the system

// Sizes are rounded so that nearly equal requests share a free list: to 64 bytes while small,
// to 4 KiB (a page) above that.
size_t bucket_size(size_t nbytes) {
  size_t step = nbytes <= 4096 ? kAlign : 4096;
  return std::max(kAlign, (nbytes + step - 1) / step * step);
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats;
};

// Never destroyed: storages freed during static destruction still find it.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

void* allocate_bytes(size_t nbytes) {
  const size_t size = bucket_size(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= static_cast<int64_t>(size);
      c.stats.in_use_bytes += static_cast<int64_t>(size);
      c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.in_use_bytes);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, size);
  if (p == nullptr) {
    empty_cache();  // try once more with the cache given back
    p = std::aligned_alloc(kAlign, size);
    if (p == nullptr) throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.in_use_bytes += static_cast<int64_t>(size);
  c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.in_use_bytes);
  return p;
}

void deallocate_bytes(void* data, size_t nbytes) {
  if (data == nullptr) return;
  const size_t size = bucket_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.in_use_bytes -= static_cast<int64_t>(size);
  if (c.stats.cached_bytes + static_cast<int64_t>(size) > static_cast<int64_t>(kMaxCached)) {
    std::free(data);
    return;
  }
  c.free_blocks[size].push_back(data);
  c.stats.cached_bytes += static_cast<int64_t>(size);
}

AllocatorStats allocator_stats() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().stats;
}

void reset_peak_allocated() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  cache().stats.peak_bytes = cache().stats.in_use_bytes;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [size, blocks] : c.free_blocks)
    for (void* p : blocks) std::free(p);
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

}  // namespace cppgrad
