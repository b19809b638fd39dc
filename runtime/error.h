// cppgrad::Error, the exception every public entry throws (OutOfMemoryError its one subtype), and the
// helpers that build its messages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace cppgrad {

// Thrown by every public entry on bad input. The message names the op first:
//   "matmul: [2,3] @ [4,5]: inner dimensions 3 and 4 differ"
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation the machine could not grant (torch.OutOfMemoryError): an Error naming the op and
// the shape, of its own type so that a program can tell it from bad input (the examples exit 3).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// "[2,3]" — the compact shape spelling used in every error message. A shape of more than 16
// dimensions (only a hostile file has one) is cut to its first 8 and last 2, so that a message
// stays a line: "[1,1,1,1,1,1,1,1,...(49999990 more),1,1]".
inline std::string shape_str(const std::vector<int64_t>& shape) {
  constexpr size_t kHead = 8, kTail = 2;
  if (shape.size() <= 16) return fmt::format("[{}]", fmt::join(shape, ","));
  return fmt::format("[{},...({} more),{}]", fmt::join(shape.begin(), shape.begin() + kHead, ","),
                     shape.size() - kHead - kTail, fmt::join(shape.end() - kTail, shape.end(), ","));
}

// The length of the well-formed UTF-8 character at the start of `text` (1 to 4), or 0 when its
// first bytes are not one (a stray continuation byte, an overlong form, a surrogate, a code point
// past U+10FFFF, or a character cut short).
inline size_t utf8_char_length(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  const size_t length = b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 0;
  if (length == 0 || text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i)
    if ((byte(i) & 0xC0) != 0x80) return 0;
  if (b0 == 0xE0 && byte(1) < 0xA0) return 0;  // overlong
  if (b0 == 0xED && byte(1) > 0x9F) return 0;  // a UTF-16 surrogate
  if (b0 == 0xF0 && byte(1) < 0x90) return 0;  // overlong
  if (b0 == 0xF4 && byte(1) > 0x8F) return 0;  // past U+10FFFF
  return length;
}

// Text that came from outside the program (a file's tensor name, a JSON parser's report, an
// option's value), shown in an error message: at most `max_bytes` of it, cut where no UTF-8
// character is split and followed by "...(N bytes)", with control characters and every byte that
// is not part of a well-formed UTF-8 character escaped as \xNN, so that a hostile 90 MB string
// still gives one short line of valid text. Every error that quotes input goes through it.
inline std::string excerpt(std::string_view text, size_t max_bytes = 80) {
  size_t cut = std::min(text.size(), max_bytes);
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80 &&
         max_bytes - cut < 3)
    --cut;
  std::string out;
  for (size_t i = 0; i < cut;) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const size_t length = utf8_char_length(text.substr(i, cut - i));
    if (text[i] == '\n') {
      out += "\\n";
    } else if (length == 0 || byte < 0x20 || byte == 0x7F) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    ++i;
  }
  if (cut < text.size()) out += fmt::format("...({} bytes)", text.size());
  return out;
}

// Builds every error of one call on one file or buffer: "<op>: <source>: <what>", e.g.
//   "load_safetensors: model.safetensors: header is not valid JSON: ..."
// A reader or writer makes one and passes it down, so no helper can forget the op or the file.
class Faults {
 public:
  Faults(std::string_view op, std::string_view source) : op_(op), source_(source) {}

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(fmt::format("{}: {}: {}", op_, source_, fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  std::string_view op_;
  std::string_view source_;
};

// CPPGRAD_CHECK(cond, "op: {} ...", args...) throws Error with the formatted message when cond
// is false. A macro, so the message's arguments (shape strings, say) are only evaluated on
// failure: every op checks its inputs, and formatting on each call would cost more than a
// small kernel.
#define CPPGRAD_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) throw ::cppgrad::Error(fmt::format(__VA_ARGS__)); \
  } while (false)

}  // namespace cppgrad
