// Attention as one op: softmax(scale · q·kᵀ + mask) ⊙ M · v, M dropout's mask on the weights.
//
// Below is its reference, written as the formula reads: it builds the (..., h, T, S) weights,
// repeats each shared key/value head for the query heads that read it, and lets the ops it is
// made of (matmul, masked_softmax, expand, a product with the mask) record their own backward.
// The fast form (autograd/fast/attention.cpp, FlashAttention's recipe) never holds the weights
// nor copies a shared head; it runs unless reference mode is on, and draws the same mask from
// the same key.
#include <limits>

#include "autograd/fast/attention.h"
#include "autograd/functions.h"
#include "autograd/trace.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"
#include "tensor/keyed_dropout.h"

namespace cppgrad {

Tensor attention_position_bias(const AttentionPositions& o, bool is_causal, int64_t heads, int64_t target_len,
                               int64_t source_len, DType dtype) {
  // Positions are counted in float64, exact below 2⁵³: further, neighbouring positions would merge.
  constexpr int64_t kLastExactPosition = int64_t{1} << 53;
  CPPGRAD_CHECK(o.query_offset >= 0 && o.query_offset <= kLastExactPosition - target_len,
                "attention: query_offset {} must be in [0, 2^53 - {}] (the queries' positions, counted in float64)",
                o.query_offset, target_len);
  CPPGRAD_CHECK(!o.window || *o.window >= 1, "attention: window {} must be at least 1", o.window.value_or(0));
  const bool positional = o.window.has_value() || (is_causal && o.query_offset != 0);
  const bool alibi = o.alibi_slopes.defined();
  if (!positional && !alibi) return {};
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  // How far query i stands after key j: (T, 1) − (1, S) -> (T, S)
  Tensor query_pos = arange(static_cast<double>(o.query_offset), static_cast<double>(o.query_offset + target_len),
                            1.0, kFloat64)
                         .reshape({target_len, 1});
  Tensor distance = query_pos - arange(static_cast<double>(source_len), kFloat64).reshape({1, source_len});
  Tensor bias = zeros({target_len, source_len}, kFloat64);
  if (is_causal) bias = bias.masked_fill(distance.lt(zeros({}, kFloat64)), kNegInf);  // key after the query
  if (o.window) bias = bias.masked_fill(distance.abs().ge(full({}, static_cast<double>(*o.window), kFloat64)), kNegInf);
  if (alibi) {
    CPPGRAD_CHECK(o.alibi_slopes.dim() == 1 && o.alibi_slopes.size(0) == heads,
                  "scaled_dot_product_attention: alibi_slopes {} must hold one slope for each of the {} query heads",
                  shape_str(o.alibi_slopes.shape()), heads);
    Tensor slopes = o.alibi_slopes.to(kFloat64).reshape({heads, 1, 1});
    bias = bias - slopes * distance.abs();  // (T, S) − (h, 1, 1)·(T, S) -> (h, T, S)
  }
  return bias.to(dtype);
}

Tensor additive_mask(const Tensor& mask, DType dtype) {
  CPPGRAD_CHECK(is_floating(dtype), "additive_mask: dtype {} is not floating; an additive mask hides with -inf",
                dtype_name(dtype));
  autograd::TraceScope trace;  // zeros of the mask's shape: ONNX takes the shape from the mask
  Tensor out = mask.dtype() == kBool ? zeros(mask.shape(), dtype).masked_fill(mask, -std::numeric_limits<double>::infinity())
                                     : mask.to(dtype);
  return trace.note(out, [&] { return autograd::TracedOp{"additive_mask", {mask}, {}}; });
}

Tensor repeat_kv_heads(const Tensor& kv, int64_t r) {
  if (r == 1) return kv;
  CPPGRAD_CHECK(kv.dim() >= 3 && r > 1, "repeat_kv_heads: {} has no heads dim to repeat {} times", shape_str(kv.shape()), r);
  Shape expanded = kv.shape(), repeated = kv.shape();
  expanded.insert(expanded.end() - 2, r);  // (..., g, 1, S, d) -> (..., g, r, S, d)
  repeated[repeated.size() - 3] *= r;      // -> (..., g·r, S, d)
  return kv.unsqueeze(-3).expand(expanded).reshape(repeated);
}

namespace {
// Query heads per key/value head: q (..., h, T, d) against k (..., g, S, d).
int64_t heads_per_kv_head(const Tensor& q, const Tensor& k) {
  if (q.dim() < 3 || k.dim() < 3 || k.size(-3) == q.size(-3)) return 1;
  CPPGRAD_CHECK(k.size(-3) > 0 && q.size(-3) % k.size(-3) == 0,
                "fused_attention: q {} has {} heads, not a multiple of the {} key/value heads of k {}",
                shape_str(q.shape()), q.size(-3), k.size(-3), shape_str(k.shape()));
  return q.size(-3) / k.size(-3);
}
}  // namespace

Tensor attention_weights(const Tensor& q, const Tensor& k, const Tensor& mask, bool is_causal, double scale,
                         const AttentionPositions& positions) {
  Tensor keys = repeat_kv_heads(k, heads_per_kv_head(q, k));  // (..., g, S, d) -> (..., h, S, d)
  Tensor full_mask = mask;
  bool causal = is_causal;
  const int64_t heads = q.dim() >= 3 ? q.size(-3) : 1;
  if (Tensor bias = attention_position_bias(positions, is_causal, heads, q.size(-2), k.size(-2), q.dtype());
      bias.defined()) {
    full_mask = mask.defined() ? additive_mask(mask, q.dtype()) + bias : bias;  // -inf + anything stays -inf
    causal = false;  // the bias hides the keys after each query
  }
  return masked_softmax(q.matmul(keys.mT()), full_mask, causal, scale);  // (..., T, d) @ (..., d, S) -> (..., T, S)
}

namespace {
// fused_attention's operands, as its header states them. Unchecked, a k narrower than q made BLAS
// print an error and return garbage, and a short v was read past its end.
void check_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p) {
  CPPGRAD_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() && q.size(-1) == k.size(-1) &&
                    k.size(-2) == v.size(-2),
                "fused_attention: q {}, k {}, v {} do not fit (..., T, d), (..., S, d), (..., S, dv) of one rank",
                shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  bool lead_fits = true;  // the dims before (heads, length, d) equal; k and v's heads dividing q's
  for (int64_t d = 0; d + 3 < q.dim(); ++d) lead_fits = lead_fits && q.size(d) == k.size(d) && k.size(d) == v.size(d);
  if (q.dim() >= 3) lead_fits = lead_fits && k.size(-3) == v.size(-3) && k.size(-3) > 0 && q.size(-3) % k.size(-3) == 0;
  CPPGRAD_CHECK(lead_fits, "fused_attention: q {}, k {}, v {}: the leading dims must be equal, but k and v may have g "
                "heads (dim -3) dividing q's", shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  CPPGRAD_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                "fused_attention: q, k and v must share a floating dtype, got {}, {}, {}", dtype_name(q.dtype()),
                dtype_name(k.dtype()), dtype_name(v.dtype()));
  CPPGRAD_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "fused_attention: dropout_p {} must be in [0, 1)", dropout_p);
  if (!mask.defined()) return;
  Shape weights_shape(q.shape().begin(), q.shape().end() - 1);  // (..., h, T, S)
  weights_shape.push_back(k.size(-2));
  CPPGRAD_CHECK(mask.dim() <= q.dim() && (mask.dtype() == kBool || mask.is_floating_point()),
                "fused_attention: mask {} ({}) must be bool or floating, of at most the weights' {} dims",
                shape_str(mask.shape()), dtype_name(mask.dtype()), weights_shape.size());
  broadcast_shapes(weights_shape, mask.shape(), "fused_attention (mask)");
}
}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p, Generator& gen, const AttentionPositions& positions) {
  check_fused_attention(q, k, v, mask, dropout_p);
  // The draw dropout() makes on the weights (..., h, T, S): one key, or inside a KeyedDropout
  // scope one per example.
  Shape weights_shape(q.shape().begin(), q.shape().end() - 1);
  weights_shape.push_back(k.size(-2));
  fast::DropoutKeys keys;
  if (dropout_p > 0.0) {
    if (auto by_example = example_keys("fused_attention", weights_shape, gen))
      keys.by_example = std::move(*by_example);
    else
      keys.key = gen.next_u64();
  }
  if (!reference_mode()) return fast::fused_attention(q, k, v, mask, is_causal, scale, dropout_p, keys, positions);
  Tensor weights = attention_weights(q, k, mask, is_causal, scale, positions);
  if (dropout_p > 0.0)
    weights = weights * (keys.by_example.empty()
                             ? kernels::dropout_mask(weights.shape(), weights.dtype(), dropout_p, keys.key)
                             : kernels::example_dropout_mask("fused_attention", weights.shape(), weights.dtype(),
                                                             dropout_p, keys.by_example));
  return weights.matmul(repeat_kv_heads(v, heads_per_kv_head(q, v)));  // (..., T, S) @ (..., S, dv) -> (..., T, dv)
}

}  // namespace cppgrad
