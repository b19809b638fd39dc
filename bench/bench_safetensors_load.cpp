// bench_safetensors_load: a soak of the safetensors reader over generated files of 10, 1k, 100k
// and 1M tensors (the last one's header is about 90 MB, near the format's 100 MB cap).
//
// Each file holds one float32 tensor of shape [1] per entry, named like a model's weights
// ("blocks.000123.attn.weight"). A row times parse_safetensors on the bytes in memory (the median
// of a few runs; one for the largest) and reports the time per entry, which stays flat when the
// load time grows linearly, and the peak resident memory during the parse against the header's
// size. (The reader once took time growing with the square of the entry count: 11 s for 40,000
// entries, minutes for 200,000.)
//
//   bench_safetensors_load           # 10, 1k, 100k and 1M entries, about half a minute
//   bench_safetensors_load --quick   # up to 100k entries
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "nn/safetensors.h"

using namespace cppgrad;

namespace {

// A file of `count` float32 [1] tensors, written as the format lays it out.
std::vector<uint8_t> make_file(int64_t count) {
  std::string header = "{";
  for (int64_t i = 0; i < count; ++i) {
    header += fmt::format("{}\"blocks.{:06}.attn.weight\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{},{}]}}",
                          i == 0 ? "" : ",", i, 4 * i, 4 * i + 4);
  }
  header += "}";
  std::vector<uint8_t> bytes(8);
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * k));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + static_cast<size_t>(4 * count), 0);
  return bytes;
}

// Resident memory: the current and the peak since the last reset_peak(), in bytes (Linux).
size_t status_field(std::string_view field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else {
      std::printf("usage: %s [--quick]\n  times parse_safetensors on files of 10 to 1M tensors\n", argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  double load = 0;
  getloadavg(&load, 1);
  std::printf("parse_safetensors on generated files; load average %.2f at start\n\n", load);
  std::printf("%9s %12s %5s %12s %14s %16s %14s\n", "entries", "header MB", "runs", "median s", "ns per entry",
              "peak extra MB", "peak / header");
  std::vector<int64_t> counts = {10, 1'000, 100'000};
  if (!quick) counts.push_back(1'000'000);
  for (int64_t count : counts) {
    std::vector<uint8_t> file = make_file(count);
    const double header_mb = static_cast<double>(file.size() - 8 - 4 * static_cast<size_t>(count)) / 1e6;
    const int runs = count >= 1'000'000 ? 1 : count >= 100'000 ? 3 : 7;
    std::vector<double> seconds;
    size_t peak_extra = 0;
    for (int r = 0; r < runs; ++r) {
      reset_peak();
      const size_t before = status_field("VmRSS:");
      const auto start = std::chrono::steady_clock::now();
      {
        nn::SafetensorsContents contents = nn::parse_safetensors(file, "generated");
        if (static_cast<int64_t>(contents.tensors.size()) != count) return 1;
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      const size_t peak = status_field("VmHWM:");
      peak_extra = std::max(peak_extra, peak > before ? peak - before : 0);
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("%9lld %12.2f %5d %12.4f %14.0f %16.1f %14.1f\n", static_cast<long long>(count), header_mb, runs, median,
                median / static_cast<double>(count) * 1e9, static_cast<double>(peak_extra) / 1e6,
                static_cast<double>(peak_extra) / 1e6 / header_mb);
  }
  std::printf("\nns per entry stays flat when the time grows linearly; \"peak extra\" is the resident memory the\n"
              "parse added at its peak (the parsed tensors included), \"peak / header\" that over the header's size.\n");
  return 0;
}
