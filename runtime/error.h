// cppgrad::Error, the one exception type, and the helpers that build its messages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace cppgrad {

// Thrown by every public entry on bad input. The message names the op first:
//   "matmul: [2,3] @ [4,5]: inner dimensions 3 and 4 differ"
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "[2,3]" — the compact shape spelling used in every error message.
inline std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

// Text that came from outside the program (a file's tensor name, a JSON parser's report, an
// option's value), shown in an error message: at most `max_bytes` of it, cut where no UTF-8
// character is split and followed by "...(N bytes)", with control characters escaped, so that a
// hostile 90 MB string still gives one short line. Every error that quotes input goes through it.
inline std::string excerpt(std::string_view text, size_t max_bytes = 80) {
  size_t cut = std::min(text.size(), max_bytes);
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string out;
  for (char c : text.substr(0, cut)) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (byte < 0x20 || byte == 0x7F) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  if (cut < text.size()) out += fmt::format("...({} bytes)", text.size());
  return out;
}

// CPPGRAD_CHECK(cond, "op: {} ...", args...) throws Error with the formatted message when cond
// is false. A macro, so the message's arguments (shape strings, say) are only evaluated on
// failure: every op checks its inputs, and formatting on each call would cost more than a
// small kernel.
#define CPPGRAD_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) throw ::cppgrad::Error(fmt::format(__VA_ARGS__)); \
  } while (false)

}  // namespace cppgrad
