#include "optim/clip.h"

#include <cmath>

#include "autograd/node.h"
#include "tensor/kernels.h"

namespace cppgrad::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  CPPGRAD_CHECK(max_norm > 0.0, "clip_grad_norm_: max_norm must be positive, got {}", max_norm);
  NoGradGuard no_grad;
  double total_sq = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = kernels::to(g, kFloat64);
    total_sq += kernels::sum(kernels::binary(kernels::Binary::Mul, g64, g64), {}, false).item<double>();
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);  // PyTorch's epsilon
  if (coef < 1.0)
    for (const Tensor& p : params)
      if (p.grad().defined()) p.set_grad(kernels::binary(kernels::Binary::Mul, p.grad(), full({}, coef, p.grad().dtype())));
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  CPPGRAD_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be non-negative, got {}", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor hi = full({}, clip_value, g.dtype()), lo = full({}, -clip_value, g.dtype());
    p.set_grad(kernels::binary(kernels::Binary::Maximum, kernels::binary(kernels::Binary::Minimum, g, hi), lo));
  }
}

}  // namespace cppgrad::optim
