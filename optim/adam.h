#pragma once

#include "../nn/options.h"
#include "fast/adam.h"
#include "optimizer.h"

namespace cppgrad::optim {

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  CPPGRAD_ARG(double, lr, 1e-3)
  CPPGRAD_ARG(double, beta1, 0.9)
  CPPGRAD_ARG(double, beta2, 0.999)
  CPPGRAD_ARG(double, eps, 1e-8)
  CPPGRAD_ARG(double, weight_decay, 0.0)
  CPPGRAD_ARG(bool, amsgrad, false)
};

// Adam (Kingma & Ba), with PyTorch's update rule; t counts this parameter's steps:
//   g = ∇p + λ·p                       (AdamW instead decays p itself: p = p·(1 - lr·λ))
//   m = β1·m + (1-β1)·g,  v = β2·v + (1-β2)·g²
//   v̂ = max(v̂, v) with AMSGrad, else v̂ = v
//   p = p - lr/(1-β1ᵗ) · m / (√v̂ / √(1-β2ᵗ) + ε)
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = AdamOptions());
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = AdamOptions());
  const AdamOptions options;  // the defaults of every group's unset options

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled_weight_decay);
  // Updates the parameter as the formulas above read (reference mode), or queues its update
  // (optim/fast/adam.h), which finish_step() runs with the others in one parallel loop.
  void update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
              std::map<std::string, Tensor>& state) override;
  void finish_step() override;
  std::vector<std::string> elementwise_buffers() const override {
    return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
  // step (int64, 0-d, 1 to 2^53), exp_avg and exp_avg_sq (>= 0), max_exp_avg_sq with amsgrad;
  // and the moments as gradients could have left them (check_moments).
  void check_state(size_t index, const Tensor& param, const ParamGroup& group,
                   const std::map<std::string, Tensor>& state) const override;

 private:
  // |exp_avg| within the bound t steps of betas (b1, b2) allow beside exp_avg_sq, and
  // max_exp_avg_sq (when kept) at least exp_avg_sq.
  static void check_moments(size_t index, const std::map<std::string, Tensor>& state, double b1, double b2, int64_t t);

  bool decoupled_;
  fast::AdamQueue queue_;  // the fast form's queued updates
};

// AdamW's options: Adam's, with PyTorch's default decay of 0.01 (libtorch's AdamWOptions).
// weight_decay(0) turns the decay off.
struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  CPPGRAD_ARG(double, lr, 1e-3)
  CPPGRAD_ARG(double, beta1, 0.9)
  CPPGRAD_ARG(double, beta2, 0.999)
  CPPGRAD_ARG(double, eps, 1e-8)
  CPPGRAD_ARG(double, weight_decay, 0.01)
  CPPGRAD_ARG(bool, amsgrad, false)
};

// Adam with decoupled weight decay (Loshchilov & Hutter). Its decay is 0.01 unless the options
// set another (as PyTorch's AdamW(params, lr=lr)); it takes AdamWOptions only, since
// AdamOptions' decay defaults to Adam's 0.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = AdamWOptions());
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = AdamWOptions());
  AdamW(std::vector<Tensor> params, const AdamOptions& options) = delete;       // use AdamWOptions
  AdamW(std::vector<ParamGroup> groups, const AdamOptions& options) = delete;  // use AdamWOptions
};

}  // namespace cppgrad::optim
