// How much memory a piece of code takes at its peak: the growth of the resident set over what
// the process held when the code started, measured in a child process so that nothing the
// parent allocated before (or the allocator's cache) counts. The child resets its peak resident
// size (Linux: "5" to /proc/self/clear_refs), runs the code, and reports its peak (VmHWM) less
// its size at the start, and the message of the Error the code threw, if any.
//
//   const PeakMemory peak = peak_memory([&] { nn::parse_safetensors(bytes, "big"); });
//   CHECK(peak.bytes < 2 * header_bytes);
//   CHECK(peak.error.find("an array of more than 64") != std::string::npos);
//
// Under AddressSanitizer the figure means nothing (freed memory waits in its quarantine, and
// its shadow takes an eighth more), so `measured` is false there and the tests say so.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "cppgrad.h"

namespace testing_memory {

// Whether AddressSanitizer's runtime is in this process. The sanitized build compiles the test
// drivers without instrumentation and with the release build's flags (tests/CMakeLists.txt), so no
// macro says so here, though the library and its allocator run under it; its runtime, linked in
// for them, defines __asan_init.
extern "C" void __asan_init() __attribute__((weak));
inline bool sanitized() { return __asan_init != nullptr; }

struct PeakMemory {
  bool measured = false;  // false under a sanitizer, or where /proc cannot reset the peak
  int64_t bytes = 0;      // peak resident size less the size at the start
  std::string error;      // what the code threw ("" when it returned)
};

// A field of /proc/self/status in bytes ("VmHWM", "VmRSS"), or -1.
inline int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;  // "…  1234 kB"
  return -1;
}

inline PeakMemory peak_memory(const std::function<void()>& code) {
  int channel[2];
  if (::pipe(channel) != 0) return {false, 0, "pipe failed"};
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(channel[0]);
    bool reset = false;
    if (std::FILE* refs = std::fopen("/proc/self/clear_refs", "w")) {
      reset = std::fputs("5", refs) >= 0;
      reset = std::fclose(refs) == 0 && reset;
    }
    const int64_t start = status_bytes("VmRSS");
    std::string error;
    try {
      code();
    } catch (const std::exception& e) {
      error = e.what();
    }
    const int64_t peak = status_bytes("VmHWM");
    const std::string report = std::to_string(reset && start >= 0 && peak >= 0 ? 1 : 0) + " " +
                               std::to_string(peak - start) + " " + error;
    [[maybe_unused]] ssize_t written = ::write(channel[1], report.data(), report.size());
    ::close(channel[1]);
    ::_exit(0);
  }
  ::close(channel[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t n; (n = ::read(channel[0], buffer, sizeof buffer)) > 0;) report.append(buffer, static_cast<size_t>(n));
  ::close(channel[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  PeakMemory out;
  const size_t first = report.find(' '), second = report.find(' ', first + 1);
  if (child < 0 || first == std::string::npos || second == std::string::npos) return {false, 0, "the child gave no report"};
  out.measured = report[0] == '1' && !sanitized();
  out.bytes = std::stoll(report.substr(first + 1, second - first - 1));
  out.error = report.substr(second + 1);
  return out;
}

}  // namespace testing_memory
