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

// check(cond, "op: ...", args...) throws Error with the formatted message when cond is false.
template <class... Args>
inline void check(bool cond, fmt::format_string<Args...> format, Args&&... args) {
  if (!cond) throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace cppgrad
