// The .npz reader's memory follows the bytes an entry really gives, not the size it declares:
// a 1 MB archive whose entry claims 1 GB is refused holding tens of MB, never the gigabyte.
// The figure is the peak resident growth of a child process (tests/common/peak_memory.h).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "../common/peak_memory.h"
#include "cppgrad.h"
#include "data/npz/npy.h"

using namespace cppgrad;
using testing_memory::peak_memory;
using testing_memory::PeakMemory;
namespace fs = std::filesystem;

namespace {

void put_u32(std::vector<uint8_t>& bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

}  // namespace

TEST_CASE("npz memory: an entry that claims 1 GB and gives 1 MB is refused without the gigabyte") {
  // 1 MB of random float32s, deflated: incompressible, so the archive is ~1 MB.
  Generator generator(7);
  const std::string path = (fs::temp_directory_path() / fmt::format("cppgrad_lying_{}.npz", ::getpid())).string();
  data::save_npz(path, {{"x", randn({262'144}, kFloat32, generator)}}, /*compress=*/true);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(path);
  // The entry's uncompressed size, in its local header (offset 22) and in the central directory's
  // record of it (offset 24), rewritten to 1 GB: within deflate's ratio of ~1 MB, so it passes the
  // up-front check, and only reading shows the lie.
  constexpr uint32_t kClaimed = 1'000'000'000;
  REQUIRE(bytes.size() > 30);
  REQUIRE(std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0);
  put_u32(bytes, 22, kClaimed);
  const uint8_t central[] = {'P', 'K', 1, 2};
  const auto record = std::search(bytes.begin(), bytes.end(), std::begin(central), std::end(central));
  REQUIRE(record != bytes.end());
  put_u32(bytes, static_cast<size_t>(record - bytes.begin()) + 24, kClaimed);

  const PeakMemory peak = peak_memory([&] { data::parse_npz(bytes, "lying.npz"); });
  CHECK(peak.error.find("entry 'x.npy'") != std::string::npos);
  if (!peak.measured) {
    MESSAGE("peak memory not measured (a sanitizer's quarantine holds freed memory); the release passes check it");
    return;
  }
  MESSAGE("an entry claiming 1 GB: refused at a peak of ", peak.bytes / 1e6, " MB (the archive: ", bytes.size() / 1e6,
          " MB)");
  // The reader takes 16 MiB at a time: a chunk, and the next one while the first is copied.
  CHECK(peak.bytes < 64'000'000);
}
