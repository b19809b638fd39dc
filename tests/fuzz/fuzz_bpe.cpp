// libFuzzer target for the BPE tokenizer's loaders (configure with the `fuzz` preset).
//
// Input starting with 'G' is GPT-2's pair of files: encoder.json, a NUL byte, vocab.bpe (parse_gpt2);
// anything else is the own format (BPETokenizer::parse). Property: either returns or throws
// cppgrad::Error; any other exception, crash, hang, leak or undefined behaviour is a finding. A
// tokenizer that loads must encode a text (this input's own bytes, invalid UTF-8 and all) to ids
// that decode back to it, and survive its own format unchanged.
//
// Run it by hand:
//   build/fuzz/tests/fuzz/fuzz_bpe -dict=tests/fuzz/bpe.dict CORPUS_DIR tests/fuzz/corpus/bpe_*
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "data/bpe/bpe.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  using cppgrad::data::BPETokenizer;
  try {
    const BPETokenizer tok = [&] {
      if (bytes.empty() || bytes[0] != 'G') return BPETokenizer::parse(bytes, "<fuzz input>");
      const std::string_view rest = bytes.substr(1);
      const size_t nul = rest.find('\0');
      return BPETokenizer::parse_gpt2(rest.substr(0, nul),
                                      nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1),
                                      "<fuzz input>");
    }();
    const std::string_view text = bytes.substr(0, 4096);
    if (tok.decode(tok.encode(text)) != text) std::abort();
    if (!(BPETokenizer::parse(tok.serialize(), "<re-serialized>") == tok)) std::abort();
  } catch (const cppgrad::Error&) {
    // a clean rejection: what malformed input must get
  }
  return 0;
}
