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

#include "framed_mutator.h"
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

}  // namespace

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

// Edits the header or the data block on its own (framed_mutator.h).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fuzzing::mutate_framed(data, size, max_size, seed);
}
