// oneDNN's bfloat16 matrix product, for autocast on CPUs with AVX512_BF16 or AMX (the readable
// form is ../bf16_gemm.cpp). A first reading skips this file.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/bfloat16.h"

namespace cppgrad::kernels::fast {

// Whether oneDNN finds bfloat16 instructions (AVX512_BF16, AMX-BF16) on this CPU.
bool onednn_multiplies_bfloat16();
std::string_view onednn_isa_name();

// The rows × cols matrix at `from` (rows ld apart) rounded to bfloat16, into a dense buffer of
// bfloat16 values or of float32 values that bfloat16 holds exactly (autocast's product on a CPU
// without bfloat16 instructions, ../bf16_gemm.cpp). This pass is what autocast costs over float32
// there, so it is compiled per vector unit (runtime/simd_clones.h; elementwise, the same bits in
// every clone).
void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, float* to);
void round_rows(const float* from, int64_t rows, int64_t cols, int64_t ld, bfloat16* to);

// C = op(A)·op(B) + beta·C, row-major; A and B bfloat16, C and the sums float32.
void onednn_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda,
                      const bfloat16* b, int64_t ldb, float* c, int64_t ldc, float beta);

}  // namespace cppgrad::kernels::fast
