// libFuzzer target for the NumPy readers (configure with the `fuzz` preset).
//
// Input starting with "PK" goes to parse_npz (a zip archive, through libzip), anything else to
// parse_npy. Property: either returns or throws cppgrad::Error; any other exception, crash,
// out-of-bounds access, leak or undefined behaviour (ASan + UBSan watch) is a finding. An array
// that parses must round-trip: written again and re-read, it has the same dtype, shape and bytes.
//
// Run it by hand:
//   build/fuzz/tests/fuzz/fuzz_npy -dict=tests/fuzz/npy.dict CORPUS_DIR tests/data_loading/fixtures
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "data/npz/npy.h"

namespace {

void check_round_trip(const cppgrad::Tensor& t) {
  const cppgrad::Tensor again = cppgrad::data::parse_npy(cppgrad::data::serialize_npy(t), "<re-serialized>");
  if (again.dtype() != t.dtype() || again.shape() != t.shape()) std::abort();
  const size_t nbytes = static_cast<size_t>(t.numel()) * cppgrad::dtype_size(t.dtype());
  if (nbytes > 0 && std::memcmp(again.raw_data(), t.raw_data(), nbytes) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
      for (const auto& entry : cppgrad::data::parse_npz(bytes, "<fuzz input>")) check_round_trip(entry.second);
    } else {
      check_round_trip(cppgrad::data::parse_npy(bytes, "<fuzz input>"));
    }
  } catch (const cppgrad::Error&) {
    // a clean rejection: what malformed input must get (the round trip itself never throws)
  }
  return 0;
}
