#pragma once

#include "../nn/options.h"
#include "optimizer.h"

namespace cppgrad::optim {

struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  CPPGRAD_ARG(double, lr, 1e-3)
  CPPGRAD_ARG(double, momentum, 0.0)
  CPPGRAD_ARG(double, dampening, 0.0)
  CPPGRAD_ARG(double, weight_decay, 0.0)
  CPPGRAD_ARG(bool, nesterov, false)
};

// Stochastic gradient descent, with PyTorch's update rule:
//   g = ∇p + λ·p
//   b = g on the first step, else b = μ·b + (1 - τ)·g      (with momentum μ, dampening τ)
//   g = g + μ·b with Nesterov, else g = b
//   p = p - lr·g
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  const SGDOptions options;  // the defaults of every group's unset options

 protected:
  void update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
              std::map<std::string, Tensor>& state) override;
  std::vector<std::string> elementwise_buffers() const override { return {"momentum_buffer"}; }
  // momentum_buffer, finite, exactly when momentum is on.
  void check_state(size_t index, const Tensor& param, const ParamGroup& group,
                   const std::map<std::string, Tensor>& state) const override;
};

}  // namespace cppgrad::optim
