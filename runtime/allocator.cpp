#include "runtime/allocator.h"

#include "runtime/allocation_limit.h"
#include "runtime/error.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace cppgrad {

namespace {

constexpr size_t kAlign = 64;

// The default limit, 1 GiB, grows to the most bytes the process has had in use at once: the
// cache pays off by serving the next step the same temporaries, so it must hold one step's working
// set (a cap below it gives back and faults in again the largest blocks every step), yet never
// keeps idle more than a step has shown it needs.
// set_cache_limit() to any other value makes it fixed (0 turns caching off).

// Sizes are rounded so that nearly equal requests share a free list: to 64 bytes while small,
// to 4 KiB (a page) above that.
size_t bucket_size(size_t nbytes) {
  size_t step = nbytes <= 4096 ? kAlign : 4096;
  return std::max(kAlign, (nbytes + step - 1) / step * step);
}

// The cached blocks of one rounded size, and when a block of that size was last freed.
struct FreeList {
  std::vector<void*> blocks;
  uint64_t last_freed = 0;
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, FreeList> free_blocks;
  AllocatorStats stats;
  size_t limit = kDefaultCacheLimit;
  uint64_t frees = 0;  // a clock: counts deallocations
  // The innermost AllocationLimit: in_use_bytes may not pass `ceiling` (-1: no limit).
  int64_t ceiling = -1;
  size_t limit_bytes = 0;
  std::string limit_what;

  // Called with the mutex held, before `size` more bytes are handed out.
  void check_ceiling(size_t size) const {
    if (ceiling >= 0 && stats.in_use_bytes + static_cast<int64_t>(size) > ceiling)
      throw Error(fmt::format("{}: needs more than the {:.3g} MB allowed for it (a request of {:.3g} MB went past "
                              "the limit)",
                              limit_what, limit_bytes / 1e6, size / 1e6));
  }

  int64_t most_in_use = 0;  // the peak since start (stats.peak_bytes can be reset)

  // What may stay cached: the limit, or at the default limit the peak in use if larger.
  size_t cap() const {
    return limit == kDefaultCacheLimit ? std::max(limit, static_cast<size_t>(most_in_use)) : limit;
  }

  // Gives back whole free lists, those freed longest ago first, until at most `target` bytes
  // stay cached. Called with the mutex held. Each call scans the lists once per list it
  // empties; trimming below the limit (to 7/8 of it) leaves room for many frees before the next.
  void trim_to(size_t target) {
    while (stats.cached_bytes > static_cast<int64_t>(target)) {
      auto oldest = free_blocks.end();
      for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it)
        if (!it->second.blocks.empty() && (oldest == free_blocks.end() || it->second.last_freed < oldest->second.last_freed))
          oldest = it;
      if (oldest == free_blocks.end()) return;
      for (void* p : oldest->second.blocks) std::free(p);
      stats.cached_bytes -= static_cast<int64_t>(oldest->first * oldest->second.blocks.size());
      free_blocks.erase(oldest);
    }
  }
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
    c.check_ceiling(size);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.blocks.empty()) {
      void* p = it->second.blocks.back();
      it->second.blocks.pop_back();
      c.stats.cached_bytes -= static_cast<int64_t>(size);
      c.stats.in_use_bytes += static_cast<int64_t>(size);
      c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.in_use_bytes);
      c.most_in_use = std::max(c.most_in_use, c.stats.in_use_bytes);
      ++c.stats.cache_hits;
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
  c.most_in_use = std::max(c.most_in_use, c.stats.in_use_bytes);
  ++c.stats.cache_misses;
  return p;
}

void deallocate_bytes(void* data, size_t nbytes) {
  if (data == nullptr) return;
  const size_t size = bucket_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.in_use_bytes -= static_cast<int64_t>(size);
  const size_t cap = c.cap();
  if (size > cap) {  // could never be kept (and 0 means no caching)
    std::free(data);
    return;
  }
  FreeList& list = c.free_blocks[size];
  list.blocks.push_back(data);
  list.last_freed = ++c.frees;
  c.stats.cached_bytes += static_cast<int64_t>(size);
  if (c.stats.cached_bytes > static_cast<int64_t>(cap)) c.trim_to(cap - cap / 8);
}

void set_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.limit = bytes;
  c.trim_to(c.cap());
}

size_t cache_limit() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().limit;
}

double machine_memory_bytes() {
  static const double bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  return bytes;
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
  for (auto& [size, list] : c.free_blocks)
    for (void* p : list.blocks) std::free(p);
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

struct AllocationLimit::Saved {
  int64_t ceiling;
  size_t limit_bytes;
  std::string what;
};

AllocationLimit::AllocationLimit(size_t bytes, std::string what) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  previous_ = std::make_unique<Saved>(Saved{c.ceiling, c.limit_bytes, std::move(c.limit_what)});
  c.ceiling = c.stats.in_use_bytes + static_cast<int64_t>(std::min<size_t>(bytes, std::numeric_limits<int64_t>::max() / 2));
  c.limit_bytes = bytes;
  c.limit_what = std::move(what);
}

AllocationLimit::~AllocationLimit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.ceiling = previous_->ceiling;
  c.limit_bytes = previous_->limit_bytes;
  c.limit_what = std::move(previous_->what);
}

}  // namespace cppgrad
