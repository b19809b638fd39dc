// `text` as a JSON string literal, quotes included: what the trace (runtime/profile.cpp) and the
// training log (tools/metrics.cpp) write their names with. Quotes, backslashes and control
// characters are escaped; other bytes pass as they are (the names are the program's own).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace cppgrad {

inline std::string json_quoted(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\')
      out += fmt::format("\\{}", static_cast<char>(c));
    else if (c < 0x20)
      out += fmt::format("\\u{:04x}", c);
    else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

}  // namespace cppgrad
