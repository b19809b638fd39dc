// Storage: one block of bytes that many tensor views share.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cppgrad {

struct Storage {
  // empty() leaves the bytes unset, since nearly every kernel overwrites all of its output;
  // zeros() asks for them zeroed. Memory comes from the caching allocator (runtime/allocator.h).
  enum class Init { Zeroed, Uninitialized };
  explicit Storage(size_t nbytes, Init init = Init::Zeroed);  // 64-byte aligned
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data = nullptr;
  size_t nbytes = 0;
  // Bumped by every in-place write through any view of this storage; autograd compares it
  // with the value it saw when it saved a tensor, to refuse a gradient computed from stale data.
  uint64_t version = 0;
};

}  // namespace cppgrad
