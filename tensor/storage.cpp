#include "tensor/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace cppgrad {

Storage::Storage(size_t bytes, Init init) : nbytes(bytes) {
  constexpr size_t kAlign = 64;  // a cache line, and what AVX-512 loads like
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  data = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (data == nullptr) throw std::bad_alloc();
  if (init == Init::Zeroed) std::memset(data, 0, bytes);
}

Storage::~Storage() { std::free(data); }

}  // namespace cppgrad
