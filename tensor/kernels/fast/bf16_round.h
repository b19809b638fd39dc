// Rounding float32 to bfloat16 in bulk, for autocast's products (the readable form is
// ../bf16_gemm.cpp). A first reading skips this file.
#pragma once

#include <cstdint>

#include "tensor/bfloat16.h"

namespace cppgrad::kernels::fast {

// The rows × cols matrix at `from` (rows ld apart) rounded to bfloat16, into a dense buffer of
// bfloat16 values or of float32 values that bfloat16 holds exactly (autocast's product on a CPU
// without bfloat16 instructions, ../bf16_gemm.cpp). This pass is what autocast costs over float32
// there, so it is compiled per vector unit (runtime/simd_clones.h; elementwise, the same bits in
// every clone).
void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, float* to);
void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, bfloat16* to);

}  // namespace cppgrad::kernels::fast
