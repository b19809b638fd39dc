// GPT-2's pre-tokenisation pattern, on PCRE2 (Debian: libpcre2-dev): std::regex has no Unicode
// letter and number classes (\p{L}, \p{N}), and writing Unicode's tables by hand would be a second,
// unmaintained copy of them. PCRE2 in UTF mode with PCRE2_UCP gives \s, \p{L}, \p{N} their Unicode
// meaning; PCRE2_MATCH_INVALID_UTF lets it run on bytes that are not valid UTF-8 (such bytes match
// nothing, so the text on each side of them is matched as if it ended or began there).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "data/bpe/bpe.h"
#include "runtime/error.h"

namespace cppgrad::data {

namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  return pcre2_get_error_message(code, buffer, sizeof buffer) < 0 ? fmt::format("PCRE2 error {}", code)
                                                                   : std::string(reinterpret_cast<char*>(buffer));
}

struct CompiledPattern {
  pcre2_code* code = nullptr;
  CompiledPattern() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern.data()), kGpt2Pattern.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    CPPGRAD_CHECK(code != nullptr, "BPETokenizer: PCRE2 refused GPT-2's pattern at offset {}: {}", offset,
                  pcre2_message(error));
    // JIT is several times faster; where PCRE2 was built without it, the interpreter gives the
    // same matches, so a failure here is not an error.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~CompiledPattern() { pcre2_code_free(code); }
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;
};

const CompiledPattern& gpt2_pattern() {
  static const CompiledPattern pattern;  // compiled once, read-only after: safe from many threads
  return pattern;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokens(std::string_view text) {
  const pcre2_code* code = gpt2_pattern().code;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  CPPGRAD_CHECK(match != nullptr, "gpt2_pretokens: out of memory for PCRE2's match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), at, 0, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // only bytes of invalid UTF-8 are left
      out.push_back(text.substr(at));
      break;
    }
    CPPGRAD_CHECK(rc >= 0, "gpt2_pretokens: PCRE2 failed at byte {} of {}: {}", at, text.size(), pcre2_message(rc));
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    const size_t begin = range[0], end = range[1];
    if (begin > at) out.push_back(text.substr(at, begin - at));  // invalid UTF-8 the pattern skipped
    if (end == begin) {  // the pattern cannot match empty text; were it to, take one byte and go on
      out.push_back(text.substr(begin, 1));
      at = begin + 1;
      continue;
    }
    out.push_back(text.substr(begin, end - begin));
    at = end;
  }
  return out;
}

}  // namespace cppgrad::data
