// The fast form of attention: softmax(scale·q·kᵀ + mask)·v computed block by block, never
// holding the (..., T, S) weights (attention.cpp says how). Its reference is the materialising
// path (nn/functional.cpp's scaled_dot_product_attention: masked_softmax, then a matmul), which
// reference mode runs instead; tests/nn/test_fused_attention.cpp compares the two.
#pragma once

#include <vector>

#include "../../tensor.h"

namespace cppgrad::kernels::fast {

// Dropout on the attention weights: probability p, and the key of its counter-based stream
// (the stream dropout_mask draws, so the weights (..., T, S) get dropout_mask's mask), or when
// by_example is not empty a key per example, the weights' leading slices split among them
// (example_dropout_mask's mask: weight (n, i, j) of example b takes word (n mod N/B, i, j)).
struct FusedDropout {
  double p = 0.0;
  uint64_t key = 0;
  std::vector<uint64_t> by_example;
};
// What the modern decoders add besides the mask, computed tile by tile instead of as a (T, S)
// bias: query i stands at position i + query_offset of the keys (causal then hides keys
// j > i + offset); window > 0 hides keys with |i + offset − j| ≥ window; alibi, when not empty,
// holds one slope per query head, and −slope · |i + offset − j| is added to that head's scores.
struct FusedPositions {
  int64_t query_offset = 0;
  int64_t window = 0;  // 0: no window
  std::vector<double> alibi;
};
// Under autocast, q, k and v as the tile products read them: rounded once, each into a dense
// copy (bfloat16, or float32 for Kernel::RoundedFloat32); undefined otherwise. The forward returns
// them so that its backward, given them back, does not round the same inputs again.
struct RoundedOperands {
  Tensor q, k, v;
};
struct FusedAttention {
  Tensor output;  // softmax(scale·q·kᵀ + mask) · v: (..., T, dv)
  Tensor lse;     // each row's log-sum-exp of the masked scores (..., T); -inf for a fully hidden row
  RoundedOperands rounded;
};
// q (..., T, d), k (..., S, d), v (..., S, dv) with the same leading dims, except that k and v
// may have g heads (dim −3) where q has h, g dividing h: query head i reads key/value head
// i / (h / g), which is never copied. mask bool (true = hidden) or float (added),
// broadcastable to q's (..., T, S), or undefined; causal hides key j > i (+ query_offset).
// Any of them may be strided views (a projection's heads): rows are read in place. The output
// and the gradients are laid out as q (and k, v) are, heads inside positions for a projection's.
FusedAttention fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                               double scale, const FusedDropout& dropout = {}, const FusedPositions& positions = {});
struct FusedAttentionGrads {
  Tensor dq, dk, dv;
};
FusedAttentionGrads fused_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask, const Tensor& output, const Tensor& lse, bool causal,
                                             double scale, const FusedDropout& dropout = {},
                                             const FusedPositions& positions = {},
                                             const RoundedOperands& rounded = {});

}  // namespace cppgrad::kernels::fast
