// libFuzzer target for the safetensors reader (configure with the `fuzz` preset).
//
// Property: on any bytes, parse_safetensors either returns or throws cppgrad::Error; any other
// exception, crash, out-of-bounds access, leak or undefined behaviour (ASan + UBSan watch) is a
// finding. A file that parses must also round-trip: written again and re-read, it gives the same
// names, dtypes, shapes, bytes and metadata, and writing that gives the very same bytes.
//
// Run it by hand:
//   build/fuzz/tests/fuzz/fuzz_safetensors -dict=tests/fuzz/safetensors.dict CORPUS_DIR SEED_DIRS...
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "nn/safetensors.h"

using cppgrad::nn::SafetensorsContents;

namespace {

bool same_bytes(const cppgrad::Tensor& a, const cppgrad::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t nbytes = static_cast<size_t>(a.numel()) * cppgrad::dtype_size(a.dtype());
  return nbytes == 0 || std::memcmp(a.raw_data(), b.raw_data(), nbytes) == 0;
}

bool same_contents(const SafetensorsContents& a, const SafetensorsContents& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].first != b.tensors[i].first) return false;
    if (!same_bytes(a.tensors[i].second, b.tensors[i].second)) return false;
  }
  return true;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

void write_u64_le(uint8_t* p, uint64_t value) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(value >> (8 * i));
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsContents contents;
  try {
    contents = cppgrad::nn::parse_safetensors({data, size}, "<fuzz input>");
  } catch (const cppgrad::Error&) {
    return 0;  // a clean rejection: what malformed input must get
  }
  // Accepted: no Error is expected from here on, so none is caught.
  const std::vector<uint8_t> written = cppgrad::nn::serialize_safetensors(contents.tensors, contents.metadata);
  const SafetensorsContents again = cppgrad::nn::parse_safetensors(written, "<re-serialized>");
  if (!same_contents(contents, again)) std::abort();
  if (cppgrad::nn::serialize_safetensors(again.tensors, again.metadata) != written) std::abort();
  return 0;
}

// Most byte edits change the header's length, and a header whose length prefix no longer matches
// stops at the first check. So three times in four this mutator edits the header text or the
// data block on its own and rewrites the prefix to fit; otherwise it edits the raw bytes, which
// keeps the prefix checks exercised too.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand random(seed);
  const bool framed = size >= 8 && read_u64_le(data) <= size - 8;
  if (!framed || random() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);

  const size_t header_size = static_cast<size_t>(read_u64_le(data));
  std::vector<uint8_t> header(data + 8, data + 8 + header_size);
  std::vector<uint8_t> block(data + 8 + header_size, data + size);
  const bool edit_header = block.empty() || (!header.empty() && random() % 3 != 0);
  std::vector<uint8_t>& part = edit_header ? header : block;
  const size_t other_size = edit_header ? block.size() : header.size();
  if (part.empty() || size >= max_size) return LLVMFuzzerMutate(data, size, max_size);

  const size_t capacity = max_size - 8 - other_size;  // > part.size(), since size < max_size
  const size_t old_size = part.size();
  part.resize(capacity);
  part.resize(LLVMFuzzerMutate(part.data(), old_size, capacity));

  write_u64_le(data, header.size());
  std::copy(header.begin(), header.end(), data + 8);
  std::copy(block.begin(), block.end(), data + 8 + header.size());
  return 8 + header.size() + block.size();
}
