// The float row exp of softmax, out of line so that it is compiled once per vector unit.
#include "tensor/kernels/fast/exp_rows.h"

#include "runtime/simd_clones.h"

namespace cppgrad::kernels::fast {

CPPGRAD_SIMD_CLONES double exp_shifted_row(float* row, int64_t n, float shift) {
  constexpr int64_t block = 256;
  double total = 0;
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block);
    for (int64_t j = start; j < end; ++j) row[j] = exp_float(row[j] - shift);
    float block_total = 0;
#pragma omp simd reduction(+ : block_total)
    for (int64_t j = start; j < end; ++j) block_total += row[j];
    total += block_total;
  }
  return total;
}

}  // namespace cppgrad::kernels::fast
