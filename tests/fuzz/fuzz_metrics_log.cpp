// libFuzzer target for the training log's reader, metrics::read_scalars (configure with the
// `fuzz` preset). A log is a file a user may be handed (another run's metrics.jsonl), so it is
// read as untrusted input.
//
// The input is written to a file and read back for the tag "train/loss". Property: either the
// reader returns or it throws cppgrad::Error; any other exception, crash, out-of-bounds access,
// leak or undefined behaviour (ASan + UBSan watch) is a finding. What it returns is checked
// against the input: at most one point per line.
//
// Run it by hand:
//   build/fuzz/tests/fuzz/fuzz_metrics_log -dict=tests/fuzz/metrics_log.dict CORPUS_DIR tests/fuzz/corpus/metrics_*
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tools/metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/cppgrad_fuzz_metrics_" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    std::vector<std::string> warnings;  // a cut last line's, kept off stderr
    const auto points = cppgrad::metrics::read_scalars(path, "train/loss", &warnings);
    const auto lines = static_cast<size_t>(std::count(data, data + size, '\n')) + 1;
    if (points.size() > lines) std::abort();
  } catch (const cppgrad::Error&) {
    // a clean rejection: what a malformed log must get
  }
  return 0;
}
