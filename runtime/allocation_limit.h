// A ceiling on the bytes tensors may hold while something whose size a file decides is built.
//
// A checkpoint's metadata says how large a model is (layers, widths, sequence length); the
// program builds that model before its tensors can be compared with the file's. An edited number
// would then take the machine's memory (and minutes of initialisation) before the refusal. Under
//
//   AllocationLimit limit(4 * file_bytes + (64 << 20), "--resume: the model its metadata describes");
//
// an allocation that would take the bytes in use more than the limit above what was in use when
// the limit was set throws cppgrad::Error naming `what`, the limit and the request, so memory is
// bounded by the file and not by the numbers written in it. Limits nest (the innermost holds);
// the allocations of every thread count.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace cppgrad {

class AllocationLimit {
 public:
  AllocationLimit(size_t bytes, std::string what);
  ~AllocationLimit();
  AllocationLimit(const AllocationLimit&) = delete;
  AllocationLimit& operator=(const AllocationLimit&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> previous_;  // the enclosing limit, put back at the end
};

}  // namespace cppgrad
