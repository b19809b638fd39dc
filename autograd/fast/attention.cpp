// The fast form of the attention op: kernels::fast::fused_attention's forward, and a backward
// that rebuilds the weights block by block from the saved log-sum-exp instead of storing them.
#include "autograd/fast/attention.h"

#include "autograd/functions.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/attention.h"

namespace cppgrad::fast {

using autograd::GradMode;
using autograd::Grads;
using autograd::record;
using autograd::Saved;

namespace {
// The kernel's form of the positions: plain numbers, the slopes as a list.
kernels::fast::FusedPositions kernel_positions(const AttentionPositions& o) {
  kernels::fast::FusedPositions p;
  p.query_offset = o.query_offset;
  p.window = o.window.value_or(0);
  if (o.alibi_slopes.defined()) p.alibi = o.alibi_slopes.to(kFloat64).contiguous().to_vector<double>();
  return p;
}

// The gradient of r repeated key/value heads summed back onto the shared head:
// (..., g·r, S, d) -> (..., g, r, S, d) -> (..., g, S, d).
Tensor sum_repeated_heads(const Tensor& grad, int64_t r) {
  if (r == 1) return grad;
  Shape split(grad.shape().begin(), grad.shape().end() - 3);
  split.insert(split.end(), {grad.size(-3) / r, r, grad.size(-2), grad.size(-1)});
  return grad.reshape(split).sum({-3});
}
}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p, const DropoutKeys& dropout_keys,
                       const AttentionPositions& positions) {
  kernels::fast::FusedDropout drop;
  if (dropout_p > 0.0) drop = {dropout_p, dropout_keys.key, dropout_keys.by_example};
  const kernels::fast::FusedPositions where = kernel_positions(positions);
  kernels::fast::FusedAttention r = kernels::fast::fused_attention(q, k, v, mask, is_causal, scale, drop, where);
  // P = softmax(scale·q·kᵀ + mask) ⊙ M (M: dropout's mask), out = P·v;
  // dv = Pᵀ·g,  dz = P̂ ⊙ (g·vᵀ ⊙ M − Σ_row g ⊙ out),  dq = scale·dz·k,  dk = scale·dzᵀ·q  (P̂: before dropout)
  // With shared key/value heads, dk and dv of a head sum over the query heads that read it.
  // Under autocast the backward takes the forward's rounded q, k and v (3 of its 4 rounded operands).
  return record("fused_attention", r.output, {q, k, v},
                {q, k, v, mask, r.output, r.lse, r.rounded.q, r.rounded.k, r.rounded.v},
                [is_causal, scale, drop, where, positions](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor &q = s[0], &k = s[1], &v = s[2], &mask = s[3];
                  if (!GradMode::is_enabled()) {
                    kernels::fast::FusedAttentionGrads d = kernels::fast::fused_attention_backward(
                        g, q, k, v, mask, s[4], s[5], is_causal, scale, drop, where, {s[6], s[7], s[8]});
                    return {d.dq, d.dk, d.dv};
                  }
                  // create_graph: the same formulas with differentiable ops, so they can be
                  // differentiated again. This builds the (T, S) weights: second derivatives are
                  // for checking, not for long sequences.
                  CPPGRAD_CHECK(drop.p == 0.0,
                                "fused_attention: double backward with dropout on the weights is not supported");
                  const int64_t r = q.dim() >= 3 ? q.size(-3) / k.size(-3) : 1;
                  Tensor keys = repeat_kv_heads(k, r), values = repeat_kv_heads(v, r);  // (..., h, S, ·)
                  Tensor p = attention_weights(q, k, mask, is_causal, scale, positions);  // (..., h, T, S)
                  Tensor dp = g.matmul(values.mT());
                  Tensor dz = p * (dp - (dp * p).sum({-1}, true));
                  return {dz.matmul(keys) * scale, sum_repeated_heads(dz.mT().matmul(q), r) * scale,
                          sum_repeated_heads(p.mT().matmul(g), r)};
                });
}

}  // namespace cppgrad::fast
