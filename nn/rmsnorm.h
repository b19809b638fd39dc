// RMSNorm (Zhang and Sennrich 2019), as torch.nn.RMSNorm (PyTorch 2.4): each row of the last
// normalized_shape.size() dims is divided by its root mean square, then scaled,
//
//   y = x / √(mean(x²) + eps) ⊙ weight,
//
// with no centring and no bias: LayerNorm without the mean, which is cheaper and trains as well
// in the decoders of Llama, Mistral and Gemma.
#pragma once

#include <optional>

#include "layers.h"

namespace cppgrad::nn {

namespace functional {
// x (..., *normalized_shape); weight of normalized_shape or undefined. eps: std::nullopt means
// the machine epsilon of x's dtype (torch.finfo(x.dtype).eps), as PyTorch's eps=None.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
}  // namespace functional

class RMSNorm : public UnaryModule {
 public:
  // weight starts at ones, as PyTorch's; elementwise_affine = false leaves it undefined.
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;

  Shape normalized_shape;
  std::optional<double> eps;
  Parameter weight;
};

}  // namespace cppgrad::nn
