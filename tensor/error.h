// cppgrad::Error, the one exception type, and the helpers that build its messages.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
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

// CPPGRAD_CHECK(cond, "op: {} ...", args...) throws Error with the formatted message when cond
// is false. A macro, so the message's arguments (shape strings, say) are only evaluated on
// failure: every op checks its inputs, and formatting on each call would cost more than a
// small kernel.
#define CPPGRAD_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) throw ::cppgrad::Error(fmt::format(__VA_ARGS__)); \
  } while (false)

}  // namespace cppgrad
