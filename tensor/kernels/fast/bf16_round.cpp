// The bfloat16 rounding pass of autocast's products, compiled per vector unit.
#include "tensor/kernels/fast/bf16_round.h"

#include <type_traits>

#include "runtime/simd_clones.h"

namespace cppgrad::kernels::fast {

namespace {
template <class Out>
CPPGRAD_SIMD_CLONES void round_rows_into(const float* __restrict from, int64_t rows, int64_t cols, int64_t ld,
                                         Out* __restrict to) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = from + r * ld;
    Out* out = to + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      if constexpr (std::is_same_v<Out, float>)
        out[j] = round_to_bfloat16(row[j]);
      else
        out[j] = bfloat16::from_bits(float_to_bfloat16_bits(row[j]));
    }
  }
}
}  // namespace

void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, float* to) {
  round_rows_into(from, rows, cols, ld, to);
}
void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, bfloat16* to) {
  round_rows_into(from, rows, cols, ld, to);
}

}  // namespace cppgrad::kernels::fast
