// The safetensors reader's memory is bounded by its input: a hostile header is refused after
// holding at most about its own size, and an honest header of many entries parses in a small
// multiple of it. Each figure is the peak resident growth of a child process
// (tests/common/peak_memory.h); the header bytes themselves are in memory before it starts.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../common/peak_memory.h"
#include "cppgrad.h"
#include "nn_helpers.h"
#include "nn/safetensors.h"

using namespace cppgrad;
using testing_memory::peak_memory;
using testing_memory::PeakMemory;

namespace {

// `count` copies of `item` joined by commas.
std::string repeated(const std::string& item, int64_t count) {
  std::string out;
  out.reserve(static_cast<size_t>(count) * (item.size() + 1));
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) out += ',';
    out += item;
  }
  return out;
}

void report(const char* what, const PeakMemory& peak, size_t header_bytes) {
  if (!peak.measured) {
    MESSAGE(std::string(what), ": peak memory not measured (a sanitizer's quarantine holds freed memory); the release passes check it");
    return;
  }
  MESSAGE(std::string(what), ": peak ", peak.bytes / 1e6, " MB for a header of ", header_bytes / 1e6, " MB");
}

}  // namespace

// The memory checks are skipped where AddressSanitizer runs, which peak_memory.h asks the process:
// a wrong answer would skip them in the release build without a word. CMake tells this one file
// which build it is in.
TEST_CASE("peak_memory knows whether AddressSanitizer runs in the process") {
  CHECK(testing_memory::sanitized() == static_cast<bool>(CPPGRAD_EXPECT_SANITIZED));
}

TEST_CASE("safetensors memory: a hostile header is refused holding at most about its own size") {
  struct Case {
    const char* what;
    std::string header;
    const char* refusal;
  };
  constexpr int64_t kCount = 10'000'000;  // 20-70 MB of header text
  std::string metadata_keys;
  for (int64_t i = 0; i < kCount * 2 / 5; ++i) metadata_keys += fmt::format("{}\"k{}\":\"\"", i ? "," : "", i);
  const Case cases[] = {
      // A shape of ten million dimensions (before: 16-33x the header, 2 GB for 100 MB).
      {"a shape of 10^7 dimensions",
       fmt::format(R"({{"x":{{"dtype":"F32","shape":[{}],"data_offsets":[0,4]}}}})", repeated("1", kCount)),
       "an array of more than 64 values (in \"x\")"},
      // The whole header one big array (before: 3.2 GB for a 100 MB header).
      {"a top-level array", fmt::format("[{}]", repeated("1", kCount)), "top level is a JSON array"},
      // Millions of metadata strings.
      {"metadata of 4 million keys", fmt::format(R"({{"__metadata__":{{{}}}}})", metadata_keys),
       "an object of more than 65536 keys (in \"__metadata__\")"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::vector<uint8_t> bytes = nntest::safetensors_file_of(c.header);
    const PeakMemory peak = peak_memory([&] { nn::parse_safetensors(bytes, "hostile"); });
    CHECK(peak.error.find(c.refusal) != std::string::npos);
    report(c.what, peak, c.header.size());
    // The refusal comes at the first value past the limit, holding a few kB of parse state; the
    // bound leaves room for the allocator's arenas.
    if (peak.measured) CHECK(peak.bytes < static_cast<int64_t>(c.header.size()) / 4);
  }
}

TEST_CASE("safetensors memory: an honest header of 200,000 entries parses in a small multiple of its size") {
  std::string header = "{";
  constexpr int64_t kCount = 200'000;
  for (int64_t i = 0; i < kCount; ++i)
    header += fmt::format("{}\"layer.{}.w\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{},{}]}}",
                          i == 0 ? "" : ",", i, 4 * i, 4 * i + 4);
  header += "}";
  std::vector<uint8_t> bytes = nntest::safetensors_file_of(header);
  bytes.resize(bytes.size() + 4 * kCount, 0);
  const PeakMemory peak = peak_memory([&] {
    const nn::SafetensorsContents contents = nn::parse_safetensors(bytes, "honest");
    CPPGRAD_CHECK(contents.tensors.size() == kCount, "{} tensors read", contents.tensors.size());
  });
  CHECK(peak.error == "");
  report("200,000 entries", peak, header.size());
  // What it holds at the end is 200,000 tensors (a TensorImpl, a Storage and a name each, ~400
  // bytes) for ~70 bytes of header each; the parse itself adds the entries' names and fields.
  if (peak.measured) CHECK(peak.bytes < 12 * static_cast<int64_t>(header.size()));
}

TEST_CASE("safetensors: the writer keeps to what the reader takes (64 dimensions, 65,536 metadata keys)") {
  const Tensor deep = ones(Shape(64, 1));
  const nn::SafetensorsContents back = nn::parse_safetensors(nn::serialize_safetensors({{"deep", deep}}), "deep");
  CHECK(back.tensors.at(0).second.shape() == deep.shape());
  CHECK_THROWS_WITH_AS(nn::serialize_safetensors({{"deeper", ones(Shape(65, 1))}}),
                       doctest::Contains("tensor \"deeper\" has 65 dimensions; a safetensors shape has at most 64"),
                       Error);
  nn::Metadata many;
  for (int i = 0; i <= 65'536; ++i) many[fmt::format("k{}", i)] = "";
  CHECK_THROWS_WITH_AS(nn::serialize_safetensors({}, many), doctest::Contains("65537 __metadata__ entries"), Error);
}
