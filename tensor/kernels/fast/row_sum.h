// Σ f(j) for j < width in double, with eight partial sums: the additions no longer wait on each
// other, so the loop runs at the adder's throughput instead of its latency, and vectorises. The
// order is fixed (partial k sums every eighth term from k, then the eight in pairs), so the
// result does not depend on the thread count, nor on the vector unit a caller was compiled for.
// Layer norm's and RMSNorm's rows and fused attention's backward use it. A first reading skips this file.
#pragma once

#include <cstdint>

namespace cppgrad::kernels::fast {

// Always inlined, so that each vector unit's copy of a caller (runtime/simd_clones.h) gets its
// own vectorised copy.
template <class F>
[[gnu::always_inline]] inline double row_sum(int64_t width, F f) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= width; j += 8)
    for (int k = 0; k < 8; ++k) part[k] += f(j + k);
  for (; j < width; ++j) part[0] += f(j);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace cppgrad::kernels::fast
