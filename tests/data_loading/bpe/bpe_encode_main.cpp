// bpe_encode ENCODER_JSON VOCAB_BPE FILE...: GPT-2's tokens of each file (its bytes as they are),
// one line of space-separated ids per file. Exits 1 if a file's ids do not decode to its bytes.
// The CTest case data/bpe_matches_gpt3_encoder compares these lines with the JavaScript encoder's.
#include <cstdio>
#include <fstream>
#include <iterator>

#include "data/bpe/bpe.h"
#include "runtime/error.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bpe_encode ENCODER_JSON VOCAB_BPE FILE...\n");
    return 2;
  }
  try {
    const auto tok = cppgrad::data::BPETokenizer::load_gpt2(argv[1], argv[2]);
    for (int i = 3; i < argc; ++i) {
      std::ifstream file(argv[i], std::ios::binary);
      const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
      const auto ids = tok.encode(text);
      std::string line;
      for (int64_t id : ids) {
        if (!line.empty()) line += ' ';
        line += std::to_string(id);
      }
      std::printf("%s\n", line.c_str());
      if (tok.decode(ids) != text) {
        std::fprintf(stderr, "bpe_encode: %s: the ids do not decode to the file's bytes\n", argv[i]);
        return 1;
      }
    }
  } catch (const cppgrad::Error& e) {
    std::fprintf(stderr, "bpe_encode: %s\n", e.what());
    return 1;
  }
  return 0;
}
