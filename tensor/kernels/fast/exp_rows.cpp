// The float rows of softmax's and log_softmax's exps and of log_softmax's backward, out of line
// so that each is compiled once per vector unit.
#include "tensor/kernels/fast/exp_rows.h"

#include <algorithm>

#include "runtime/simd_clones.h"
#include "tensor/kernels/fast/vector_math.h"

namespace cppgrad::kernels::fast {

CPPGRAD_SIMD_CLONES double exp_shifted_row(float* row, int64_t n, float shift, int64_t visible) {
  constexpr int64_t block = 256;
  double total = 0;
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block), computed = std::clamp(visible, start, end);
    for (int64_t j = start; j < computed; ++j) row[j] = exp_float(row[j] - shift);
    std::fill(row + computed, row + end, 0.0f);
    float block_total = 0;
#pragma omp simd reduction(+ : block_total)
    for (int64_t j = start; j < end; ++j) block_total += row[j];
    total += block_total;
  }
  return total;
}

CPPGRAD_SIMD_CLONES double exp_shifted_sum(const float* row, int64_t n, float shift) {
  constexpr int64_t block = 256;
  double total = 0;
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block);
    float block_total = 0;
#pragma omp simd reduction(+ : block_total)
    for (int64_t j = start; j < end; ++j) block_total += exp_float(row[j] - shift);
    total += block_total;
  }
  return total;
}

CPPGRAD_SIMD_CLONES void log_softmax_backward_row(const float* y, const float* g, float sum, float* dx, int64_t n,
                                                  int64_t step) {
  auto at = [&](int64_t j) { return g[j] - static_cast<float>(vmath::exp(static_cast<double>(y[j]))) * sum; };
  if (step == 1)
    for (int64_t j = 0; j < n; ++j) dx[j] = at(j);
  else
    for (int64_t j = 0; j < n; ++j) dx[j * step] = at(j * step);
}

CPPGRAD_SIMD_CLONES void log_softmax_backward_of_zero_row(const float* x, float m, float log_total, float sum,
                                                          float* dx, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const float y = x[j] - m - log_total;
    dx[j] = 0.0f - static_cast<float>(vmath::exp(static_cast<double>(y))) * sum;
  }
}

}  // namespace cppgrad::kernels::fast
