// The fast form of rms_norm: one-pass kernels recorded with their formulas.
#include "autograd/fast/rms_norm.h"

#include "autograd/functions.h"
#include "tensor/kernels.h"
#include "tensor/kernels/fast/rms_norm.h"

namespace cppgrad::fast {

using autograd::GradMode;
using autograd::Grads;
using autograd::record;
using autograd::Saved;

Tensor rms_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, double eps) {
  const Shape row_shape(x.shape().end() - normalized_dims, x.shape().end());
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - normalized_dims; d < x.dim(); ++d) dims.push_back(d);
  kernels::fast::RMSNormResult r = kernels::fast::rms_norm(x, numel(row_shape), weight, eps);
  // r = 1/√(mean(x²) + eps), x̂ = x·r, y = x̂ ⊙ w;  ĝ = dy ⊙ w:
  // dx = r·(ĝ − x̂·mean(ĝ ⊙ x̂)),  dw = Σ_rows dy ⊙ x̂
  return record("rms_norm", r.y, {x, weight}, {x, weight, r.rstd},
                [row_shape, dims, eps](const Tensor& g, const Saved& s) -> Grads {
                  const Tensor &X = s[0], &W = s[1];
                  if (!GradMode::is_enabled()) {
                    kernels::fast::RMSNormGrads d =
                        kernels::fast::rms_norm_backward(g, X, s[2], W, s.needs_grad(0), s.needs_grad(1));
                    return {d.dx, d.dweight.defined() ? d.dweight.reshape(row_shape) : Tensor()};
                  }
                  // create_graph: the same formulas, as functions of x so they differentiate again
                  Tensor rstd = ((X * X).mean(dims, true) + eps).rsqrt();
                  Tensor x_hat = X * rstd;
                  Tensor g_hat = W.defined() ? g * W : g;
                  Tensor dx = rstd * (g_hat - x_hat * (g_hat * x_hat).mean(dims, true));
                  return {dx, s.needs_grad(1) ? sum_to(g * x_hat, row_shape) : Tensor()};
                });
}

}  // namespace cppgrad::fast
