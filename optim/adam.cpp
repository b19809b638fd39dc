#include "optim/adam.h"

#include <cmath>

namespace cppgrad::optim {

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::vector<ParamGroup>{{std::move(params), o.lr(), o.weight_decay(), ""}}, o, false) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o) : Adam(std::move(groups), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(groups)), options(o), decoupled_(decoupled) {
  CPPGRAD_CHECK(o.beta1() >= 0.0 && o.beta1() < 1.0 && o.beta2() >= 0.0 && o.beta2() < 1.0,
        "Adam: betas must be in [0, 1), got ({}, {})", o.beta1(), o.beta2());
  CPPGRAD_CHECK(o.eps() >= 0.0, "Adam: negative eps {}", o.eps());
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::vector<ParamGroup>{{std::move(params), o.lr(), o.weight_decay(), ""}}, o, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamOptions& o) : Adam(std::move(groups), o, true) {}

void Adam::update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
                  std::map<std::string, Tensor>& state) {
  if (!state.count("step")) {
    state["step"] = zeros({}, kInt64);
    state["exp_avg"] = zeros_like(param);
    state["exp_avg_sq"] = zeros_like(param);
    if (options.amsgrad()) state["max_exp_avg_sq"] = zeros_like(param);
  }
  const int64_t t = ++state["step"].data<int64_t>()[0];
  const double b1 = options.beta1(), b2 = options.beta2(), lr = group.lr, wd = group.weight_decay;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double sqrt_bias2 = std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)));
  const double step_size = lr / bias1;
  dispatch_floating(param.dtype(), "Adam", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* dp = grad.data<T>();
    T* m = state["exp_avg"].data<T>();
    T* v = state["exp_avg_sq"].data<T>();
    T* v_max = options.amsgrad() ? state["max_exp_avg_sq"].data<T>() : nullptr;
    const T decay = static_cast<T>(1.0 - lr * wd);
    for (int64_t i = 0; i < param.numel(); ++i) {
      T g = dp[i];
      if (decoupled_)
        p[i] *= decay;
      else
        g += static_cast<T>(wd) * p[i];
      m[i] = static_cast<T>(b1) * m[i] + static_cast<T>(1.0 - b1) * g;
      v[i] = static_cast<T>(b2) * v[i] + static_cast<T>(1.0 - b2) * g * g;
      T second = v[i];
      if (v_max) second = v_max[i] = std::max(v_max[i], v[i]);
      T denom = std::sqrt(second) / static_cast<T>(sqrt_bias2) + static_cast<T>(options.eps());
      p[i] -= static_cast<T>(step_size) * m[i] / denom;
    }
  });
}

}  // namespace cppgrad::optim
