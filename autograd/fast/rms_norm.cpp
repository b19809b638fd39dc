// The fast form of rms_norm: one-pass kernels recorded as a fused op (autograd/fast/fused.h).
#include "autograd/fast/rms_norm.h"

#include <utility>

#include "tensor/kernels/fast/rms_norm.h"

namespace cppgrad::fast {

using autograd::Grads;
using autograd::Saved;

Tensor rms_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight, double eps, Reference reference) {
  const Shape row_shape(x.shape().end() - normalized_dims, x.shape().end());
  kernels::fast::RMSNormResult r = kernels::fast::rms_norm(x, numel(row_shape), weight, eps);
  // the derivative is the kernel's (tensor/kernels/fast/rms_norm.cpp)
  return record_fused("rms_norm", r.y, {x, weight}, {x, weight, r.rstd},
                      [row_shape](const Tensor& g, const Saved& s) -> Grads {
                        kernels::fast::RMSNormGrads d =
                            kernels::fast::rms_norm_backward(g, s[0], s[2], s[1], s.needs_grad(0), s.needs_grad(1));
                        return {d.dx, d.dweight.defined() ? d.dweight.reshape(row_shape) : Tensor()};
                      },
                      std::move(reference));
}

}  // namespace cppgrad::fast
