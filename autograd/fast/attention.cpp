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

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                       double scale, double dropout_p, uint64_t dropout_key) {
  kernels::fast::FusedDropout drop;
  if (dropout_p > 0.0) drop = {dropout_p, dropout_key};
  kernels::fast::FusedAttention r = kernels::fast::fused_attention(q, k, v, mask, is_causal, scale, drop);
  // P = softmax(scale·q·kᵀ + mask) ⊙ M (M: dropout's mask), out = P·v;
  // dv = Pᵀ·g,  dz = P̂ ⊙ (g·vᵀ ⊙ M − Σ_row g ⊙ out),  dq = scale·dz·k,  dk = scale·dzᵀ·q  (P̂: before dropout)
  return record("fused_attention", r.output, {q, k, v}, {q, k, v, mask, r.output, r.lse},
                [is_causal, scale, drop](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor &q = s[0], &k = s[1], &v = s[2], &mask = s[3];
                  if (!GradMode::is_enabled()) {
                    kernels::fast::FusedAttentionGrads d = kernels::fast::fused_attention_backward(
                        g, q, k, v, mask, s[4], s[5], is_causal, scale, drop);
                    return {d.dq, d.dk, d.dv};
                  }
                  // create_graph: the same formulas with differentiable ops, so they can be
                  // differentiated again. This builds the (T, S) weights: second derivatives are
                  // for checking, not for long sequences.
                  CPPGRAD_CHECK(drop.p == 0.0,
                                "fused_attention: double backward with dropout on the weights is not supported");
                  Tensor p = masked_softmax(q.matmul(k.mT()), mask, is_causal, scale);  // (..., T, S)
                  Tensor dp = g.matmul(v.mT());
                  Tensor dz = p * (dp - (dp * p).sum({-1}, true));
                  return {dz.matmul(k) * scale, dz.mT().matmul(q) * scale, p.mT().matmul(g)};
                });
}

}  // namespace cppgrad::fast
