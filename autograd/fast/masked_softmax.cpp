#include "autograd/fast/masked_softmax.h"

#include "autograd/softmax.h"
#include "tensor/kernels.h"

namespace cppgrad::fast {

using autograd::Grads;
using autograd::record;
using autograd::Saved;

Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool is_causal, double scale) {
  Tensor y = kernels::masked_softmax(scores, mask, is_causal, scale);
  const bool float_mask = mask.defined() && mask.dtype() != kBool;
  // z = scale·scores + mask: dscores = scale·dz, dmask = dz, with dz softmax's backward
  return record("masked_softmax", y, {scores, float_mask ? mask : Tensor()}, {y},
                [scale](const Tensor& g, const Saved& s) -> Grads {
                  Tensor dz = autograd::softmax_backward(s[0], g, -1);
                  return {s.needs_grad(0) ? dz * scale : Tensor(), s.needs_grad(1) ? dz : Tensor()};
                });
}

}  // namespace cppgrad::fast
