// The fast form of the rms_norm op (skip it on a first reading): each row of `width` elements
// normalised by its root mean square in one pass, and its backward in one more; the reference
// is the formula as tensor ops (autograd/ops_nn.cpp, reference mode).
#pragma once

#include "../../tensor.h"

namespace cppgrad::kernels::fast {

struct RMSNormResult {
  Tensor y;     // x · r ⊙ w, x's shape
  Tensor rstd;  // r = 1/√(mean(x²) + eps) of each row: (rows)
};
// weight (width elements) or undefined.
RMSNormResult rms_norm(const Tensor& x, int64_t width, const Tensor& weight, double eps);
struct RMSNormGrads {
  Tensor dx, dweight;  // dweight flat (width), undefined without a weight
};
RMSNormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                               bool need_dx, bool need_dweight);

}  // namespace cppgrad::kernels::fast
