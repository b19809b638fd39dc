// Attention as one op: softmax(scale · q·kᵀ + mask) ⊙ M · v, M dropout's mask on the weights.
//
// Below is its reference, written as the formula reads: it builds the (..., T, S) weights and
// lets the ops it is made of (matmul, masked_softmax, a product with the mask) record their own
// backward. The fast form (autograd/fast/attention.cpp, FlashAttention's recipe) never holds
// the weights; it runs unless reference mode is on, and draws the same mask from the same key.
#include "autograd/fast/attention.h"
#include "autograd/functions.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"

namespace cppgrad {

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p, Generator& gen) {
  const uint64_t key = dropout_p > 0.0 ? gen.next_u64() : 0;  // one draw, as dropout() takes
  if (!reference_mode()) return fast::fused_attention(q, k, v, mask, is_causal, scale, dropout_p, key);
  Tensor weights = masked_softmax(q.matmul(k.mT()), mask, is_causal, scale);  // (..., T, d) @ (..., d, S) -> (..., T, S)
  if (dropout_p > 0.0) weights = weights * kernels::dropout_mask(weights.shape(), weights.dtype(), dropout_p, key);
  return weights.matmul(v);  // (..., T, S) @ (..., S, dv) -> (..., T, dv)
}

}  // namespace cppgrad
