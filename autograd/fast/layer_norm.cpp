#include "autograd/fast/layer_norm.h"

#include <utility>

#include "tensor/kernels.h"

namespace cppgrad::fast {

using autograd::Grads;
using autograd::Saved;

Tensor layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps,
                  Reference reference) {
  kernels::LayerNormResult r = kernels::layer_norm(x, normalized_dims, weight, bias, eps);
  const Shape row_shape(x.shape().end() - normalized_dims, x.shape().end());
  return record_fused("layer_norm", r.y, {x, weight, bias}, {x, weight, r.mean, r.rstd},
                      [row_shape](const Tensor& g, const Saved& s) -> Grads {
                        kernels::LayerNormGrads d = kernels::layer_norm_backward(
                            g, s[0], s[2], s[3], s[1], s.needs_grad(0), s.needs_grad(1), s.needs_grad(2));
                        return {d.dx, d.dweight.defined() ? d.dweight.reshape(row_shape) : Tensor(),
                                d.dbias.defined() ? d.dbias.reshape(row_shape) : Tensor()};
                      },
                      std::move(reference));
}

}  // namespace cppgrad::fast
