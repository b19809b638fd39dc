// The seam between autocast's products (bf16_gemm.cpp) and a bfloat16 matrix product in
// hardware. The core has none of its own: the component cppgrad::onednn (tensor/onednn/)
// registers oneDNN's when a program links it, as PyTorch's CPU build carries oneDNN. Without it
// autocast multiplies as on a CPU without bfloat16 instructions (tensor/autocast.h). A first
// reading skips this file.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/bfloat16.h"

namespace cppgrad::kernels {

struct HardwareBFloat16Gemm {
  // Whether it multiplies bfloat16 in hardware on this CPU (AVX512_BF16 or AMX-BF16), and the
  // name of the instructions it would use.
  bool (*multiplies_bfloat16)();
  std::string_view (*isa_name)();
  // C = op(A)·op(B) + beta·C, row-major; A and B bfloat16, C and the sums float32; beta 0 or 1.
  void (*gemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b,
               int64_t ldb, float* c, int64_t ldc, float beta);
};

// Called once, by the component's static initialiser.
void register_hardware_bfloat16_gemm(const HardwareBFloat16Gemm& gemm);
// The registered product, or null when no component registered one.
const HardwareBFloat16Gemm* hardware_bfloat16_gemm();

}  // namespace cppgrad::kernels
