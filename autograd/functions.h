// Differentiable ops that are not Tensor methods: the nn layers' ops (linear, layer_norm,
// masked_softmax, attention, dropout), and the inverses that views and indexing need for their
// backward (and that are useful on their own).
#pragma once

#include <optional>

#include "node.h"

namespace cppgrad {

// ---- the nn layers' ops (autograd/ops_nn.cpp, ops_attention.cpp) ----
// y = x·Wᵀ + b, x (..., in), W (out, in), b (out) or undefined: Linear's op, one GEMM.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// (x - mean) / √(var + eps) ⊙ weight + bias over the last `normalized_dims` dims (weight and
// bias of those dims' shape, or undefined).
Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps);
// softmax(scale · scores + mask) over the last dim: mask bool (true = hidden) or float (added,
// may require grad), broadcast to scores; is_causal hides key j from query i when j > i.
// A row with every key hidden (every z = -inf) gives zeros and a zero gradient; a NaN score
// makes its row NaN, as softmax does.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale);

// What the modern decoders add to attention besides the mask (F::AttentionOptions names them):
// query i stands at key position i + query_offset (causal then hides keys j > i + offset, the
// cached decoder's view); a window hides keys with |i + offset − j| ≥ window (Mistral's local
// attention); ALiBi adds −slope_h · |i + offset − j| to query head h's scores, slopes (h).
struct AttentionPositions {
  int64_t query_offset = 0;
  std::optional<int64_t> window;
  Tensor alibi_slopes;
  bool empty() const { return query_offset == 0 && !window && !alibi_slopes.defined(); }
};
// The positions as one float bias of 0 and −inf (causal with an offset, the window) plus ALiBi's
// terms, (1 or h, T, S) in dtype; undefined when there is nothing to add (causal with no offset
// is left to is_causal).
Tensor attention_position_bias(const AttentionPositions& positions, bool is_causal, int64_t heads, int64_t target_len,
                               int64_t source_len, DType dtype);
// A bool mask (true = hidden) as 0 / −inf, a float mask as it is, in dtype: masks to be added.
Tensor additive_mask(const Tensor& mask, DType dtype);
// Key/value heads (..., g, S, d) repeated for h = g·r query heads, query head i reading head
// i / r: torch.repeat_interleave(kv, r, dim=-3). The reference form of grouped-query attention;
// its gradient sums the r copies, as a shared head's must.
Tensor repeat_kv_heads(const Tensor& kv, int64_t r);

// softmax(scale · q·kᵀ + mask) · v as one op (autograd/ops_attention.cpp); its fast form never
// builds the (T, S) weights (FlashAttention's recipe): q (..., T, d), k (..., S, d), v (..., S, dv),
// same leading dims, except that k and v may have g heads (dim −3) where q has h, g dividing h:
// query head i reads key/value head i / (h / g) (grouped-query attention; the fast form never
// copies the shared heads). mask bool (true = hidden) or float (added, no gradient), broadcast
// to (..., h, T, S), or undefined. A fully hidden row gives zeros. dropout_p > 0 drops weights
// as dropout() would with the same generator state.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p = 0.0, Generator& gen = default_generator(),
                       const AttentionPositions& positions = {});
// The op's weights as the reference computes them: softmax(scale · q·kᵀ + mask + the
// positions' bias), k's heads repeated for q's (..., h, T, S).
Tensor attention_weights(const Tensor& q, const Tensor& k, const Tensor& mask, bool is_causal, double scale,
                         const AttentionPositions& positions = {});

// x ⊙ mask / (1 - p) with each mask element 0 with probability p: one pass (training mode only).
Tensor dropout(const Tensor& x, double p, Generator& gen);
// dropout(relu(x), p) in one op, the same numbers from the same generator state, saving x alone
// (not relu's output and the mask): the feed-forward block's activation and dropout.
Tensor relu_dropout(const Tensor& x, double p, Generator& gen);

// ---- inverses of views and indexing ----
// zeros(shape) with `src` written at start, start+step, ... of `dim`: the gradient of slice.
Tensor slice_scatter(const Tensor& src, const Shape& shape, int64_t dim, int64_t start, int64_t step);
// base with src.select(dim, i) added at base.select(dim, index[i]): the gradient of index_select.
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
// base with src[i][j] added at base[i][index[i][j]] (dim 1): the gradient of gather.
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace cppgrad
