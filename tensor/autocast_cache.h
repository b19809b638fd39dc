// Autocast's cast cache: what rounding autocast's products cost, counted (tensor/autocast.h).
//
// A product in an autocast region multiplies its operands rounded to bfloat16. An operand that
// a caller names by its tensor (matmul, linear, and the products of their backward) is rounded
// once and its rounded copy reused while that tensor's storage is alive and unwritten (its
// version unchanged): a weight is rounded once per region and reused by its backward product
// (dX = dY·W), an activation by its weight's gradient (dW = dYᵀ·X), and a gradient by both
// products of its node, as PyTorch's autocast keeps a weight's cast for the region. The copies
// are held by this thread's cache until their tensor is freed (dropped at the next product),
// written, or a new region begins (Guard's entry from outside every region). The fused
// attention's tiles keep no cache entries: it rounds its inputs once a call, and each tile it
// computes once for the products that read it (tensor/kernels/fast/attention.cpp).
//
// The counts are the same whichever kernel rounds (Kernel::OneDnn or Kernel::RoundedFloat32),
// so a CPU without bfloat16 instructions counts what one with them does.
#pragma once

#include <cstdint>

namespace cppgrad::autocast {

struct CastStats {
  int64_t products = 0;       // autocast's products
  int64_t rounded = 0;        // operands rounded
  int64_t bytes_rounded = 0;  // bytes of the rounded copies written
  int64_t hits = 0;           // operands taken from the cast cache instead
};
CastStats cast_stats();  // all threads, since the start or reset_cast_stats()
void reset_cast_stats();
// Drops this thread's cached copies (a new region does it too).
void clear_cast_cache();

}  // namespace cppgrad::autocast
