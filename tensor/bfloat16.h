// bfloat16: the upper half of a float32. The same 8-bit exponent (so the same range, with
// denormals, infinities and NaN), and 7 bits of mantissa instead of 23: about 3 significant
// decimal digits. CPUs with AVX512_BF16 or AMX multiply pairs of them at twice float32's rate,
// accumulating in float32; that is what autocast (tensor/autocast.h) uses them for.
//
// Here it is a storage type: tensors of it can be created, converted, copied, viewed, indexed and
// printed, and arithmetic on them says to convert first (x.to(kFloat32)), as the one place they
// are multiplied is inside autocast's matrix products.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cppgrad {

// The bits of a float32 rounded to the nearest bfloat16, ties to even, as PyTorch, oneDNN and the
// CPU's own vcvtneps2bf16 round. Adding 0x7fff, plus 1 when the kept half is odd, carries into
// the kept half exactly when the dropped half is above one half, or exactly one half next to an
// odd kept half. A value past the largest bfloat16 rounds to infinity, as IEEE rounding does.
// A NaN keeps being a NaN: the quiet bit is set before the low half is dropped, since a NaN whose
// payload lies only in the low half would otherwise become infinity.
inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const uint32_t quiet_nan = u | 0x00400000u;
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>((is_nan ? quiet_nan : rounded) >> 16);
}

// Exact: every bfloat16 is a float32 whose low 16 bits are zero.
inline float bfloat16_bits_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// x rounded to the nearest bfloat16, as a float32: what autocast's products multiply.
inline float round_to_bfloat16(float x) { return bfloat16_bits_to_float(float_to_bfloat16_bits(x)); }

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  // From any arithmetic value through float32 (as c10::BFloat16 does): a float64 is rounded to
  // float32 first, then to bfloat16, so a value near a tie can round twice.
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  explicit bfloat16(T value) : bits(float_to_bfloat16_bits(static_cast<float>(value))) {}
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
  // Implicit, so that data movement (copies, gathers, sorting, printing) works on it unchanged.
  operator float() const { return bfloat16_bits_to_float(bits); }  // NOLINT
};
static_assert(sizeof(bfloat16) == 2);

}  // namespace cppgrad
