#include "tensor/storage.h"

#include <cstring>

#include "runtime/allocator.h"

namespace cppgrad {

Storage::Storage(size_t bytes, Init init) : data(allocate_bytes(bytes)), nbytes(bytes) {
  if (init == Init::Zeroed) std::memset(data, 0, bytes);
}

Storage::~Storage() { deallocate_bytes(data, nbytes); }

}  // namespace cppgrad
