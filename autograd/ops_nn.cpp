// Fused ops for the nn layers: each is one kernel forward and one backward, where the same math
// written with separate tensor ops would make many passes over memory. When create_graph asks
// for a differentiable backward, each falls back to the formula in plain differentiable ops.
#include "autograd/fast/relu_dropout.h"
#include "autograd/functions.h"
#include "runtime/reference_mode.h"
#include "tensor/kernels.h"
#include "tensor/keyed_dropout.h"

namespace cppgrad {

using autograd::GradMode;
using autograd::Grads;
using autograd::record;
using autograd::Saved;

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  // y = x·Wᵀ + b;  dX = dY·W,  dW = dYᵀ·X (all rows of the batch in one GEMM),  db = Σ_rows dY
  return record("linear", kernels::linear(x, w, b), {x, w, b}, {x, w}, [](const Tensor& g, const Saved& s) -> Grads {
    const Tensor& X = s[0];
    const Tensor& W = s[1];
    Tensor rows = g.reshape({-1, g.size(-1)});  // (N, out)
    return {s.needs_grad(0) ? g.matmul(W) : Tensor(),
            s.needs_grad(1) ? rows.mT().matmul(X.reshape({-1, X.size(-1)})) : Tensor(),
            s.needs_grad(2) ? rows.sum({0}) : Tensor()};
  });
}

Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps) {
  kernels::LayerNormResult r = kernels::layer_norm(x, normalized_dims, weight, bias, eps);  // checks the arguments
  const Shape row_shape(x.shape().end() - normalized_dims, x.shape().end());
  // x̂ = (x - mean)·rstd, y = x̂ ⊙ w + b;  ĝ = dy ⊙ w:
  // dx = rstd·(ĝ - mean(ĝ) - x̂·mean(ĝ ⊙ x̂)),  dw = Σ_rows dy ⊙ x̂,  db = Σ_rows dy
  return record("layer_norm", r.y, {x, weight, bias}, {x, weight, r.mean, r.rstd},
                [row_shape, normalized_dims, eps](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor &X = s[0], &W = s[1];
                  if (!GradMode::is_enabled()) {
                    auto d = kernels::layer_norm_backward(g, X, s[2], s[3], W, s.needs_grad(0), s.needs_grad(1),
                                                          s.needs_grad(2));
                    return {d.dx, d.dweight.defined() ? d.dweight.reshape(row_shape) : Tensor(),
                            d.dbias.defined() ? d.dbias.reshape(row_shape) : Tensor()};
                  }
                  // create_graph: the same formulas, as functions of x so they differentiate again
                  std::vector<int64_t> dims;
                  for (int64_t d = X.dim() - normalized_dims; d < X.dim(); ++d) dims.push_back(d);
                  Tensor centred = X - X.mean(dims, true);
                  Tensor rstd = ((centred * centred).mean(dims, true) + eps).rsqrt();
                  Tensor x_hat = centred * rstd;
                  Tensor g_hat = W.defined() ? g * W : g;
                  Tensor dx = rstd * (g_hat - g_hat.mean(dims, true) - x_hat * (g_hat * x_hat).mean(dims, true));
                  return {dx, s.needs_grad(1) ? sum_to(g * x_hat, row_shape) : Tensor(),
                          s.needs_grad(2) ? sum_to(g, row_shape) : Tensor()};
                });
}

Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale) {
  Tensor y = kernels::masked_softmax(scores, mask, is_causal, scale);
  const bool float_mask = mask.defined() && mask.dtype() != kBool;
  // p = softmax(z), z = scale·scores + mask;  dz = p ⊙ (dp - Σ dp ⊙ p);  dscores = scale·dz,  dmask = dz
  return record("masked_softmax", y, {scores, float_mask ? mask : Tensor()}, {y},
                [scale](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor& p = s[0];
                  Tensor dz = GradMode::is_enabled() ? p * (g - (g * p).sum({-1}, true))
                                                     : kernels::softmax_backward(p, g, -1);
                  return {s.needs_grad(0) ? dz * scale : Tensor(), s.needs_grad(1) ? dz : Tensor()};
                });
}

namespace {
// x ⊙ mask keyed by example (a KeyedDropout scope): the mask is made once and kept, as the fast
// kernels draw a tensor from one key.
Tensor dropout_by_example(const char* op, const Tensor& x, double p, const std::vector<uint64_t>& keys) {
  kernels::check_dropout(op, p, x);
  Tensor mask = kernels::example_dropout_mask(op, x.shape(), x.dtype(), p, keys);
  // y = x ⊙ m;  dx = dy ⊙ m (differentiable in dy under create_graph)
  return record("dropout", kernels::binary(kernels::Binary::Mul, x, mask), {x}, {},
                [mask](const Tensor& g, const Saved&) -> Grads { return {g * mask}; });
}
}  // namespace

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  if (auto keys = example_keys("dropout", x.shape(), gen)) return dropout_by_example("dropout", x, p, *keys);
  const uint64_t key = gen.next_u64();  // the mask is word i of this key's stream for element i (p: checked by the kernel)
  // y = x ⊙ m, m = 0 or 1/(1-p);  dx = dy ⊙ m, m made again from the key rather than kept
  return record("dropout", kernels::dropout(x, p, key), {x}, {}, [p, key](const Tensor& g, const Saved&) -> Grads {
    if (!GradMode::is_enabled()) return {kernels::dropout(g, p, key)};
    return {g * kernels::dropout_mask(g.shape(), g.dtype(), p, key)};  // create_graph: differentiable in g
  });
}

Tensor relu_dropout(const Tensor& x, double p, Generator& gen) {
  if (reference_mode()) return dropout(x.relu(), p, gen);  // the two ops it fuses
  // the draw dropout makes: the same mask
  if (auto keys = example_keys("relu_dropout", x.shape(), gen)) return dropout_by_example("relu_dropout", x.relu(), p, *keys);
  return fast::relu_dropout(x, p, gen.next_u64());
}

}  // namespace cppgrad
