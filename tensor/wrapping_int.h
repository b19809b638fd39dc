// int64 arithmetic that wraps, for the op tables' rows (tensor/op_tables.h) and the integer sums.
// A first reading skips this file.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

// The arithmetic of the rows (and of integer sums) that can overflow int64. PyTorch's int64
// arithmetic wraps in two's complement (INT64_MAX + 1 is INT64_MIN, -INT64_MIN is INT64_MIN);
// in C++ signed overflow is undefined, so int64 is computed in uint64, where it wraps, and
// converted back (modular since C++20). The other types are the plain operators.
namespace cppgrad {
template <class T>
constexpr bool wraps_int64 = std::is_same_v<T, int64_t>;
template <class T>
constexpr T wrapping_add(T x, T y) {
  if constexpr (wraps_int64<T>) return static_cast<T>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
  else return x + y;
}
template <class T>
constexpr T wrapping_sub(T x, T y) {
  if constexpr (wraps_int64<T>) return static_cast<T>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
  else return x - y;
}
template <class T>
constexpr T wrapping_mul(T x, T y) {
  if constexpr (wraps_int64<T>) return static_cast<T>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
  else return x * y;
}
template <class T>
constexpr T wrapping_neg(T x) {
  if constexpr (wraps_int64<T>) return static_cast<T>(uint64_t{0} - static_cast<uint64_t>(x));
  else return -x;
}
template <class T>
T wrapping_abs(T x) {
  if constexpr (wraps_int64<T>) return x < 0 ? wrapping_neg(x) : x;
  else return std::abs(x);
}
}  // namespace cppgrad
