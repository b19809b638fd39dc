#include "optim/sgd.h"

namespace cppgrad::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o)
    : SGD(std::vector<ParamGroup>{{std::move(params), o.lr(), o.weight_decay(), ""}}, o) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o) : Optimizer(std::move(groups)), options(o) {
  CPPGRAD_CHECK(o.momentum() >= 0.0, "SGD: negative momentum {}", o.momentum());
  CPPGRAD_CHECK(!o.nesterov() || (o.momentum() > 0.0 && o.dampening() == 0.0),
        "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
}

void SGD::check_state(size_t index, const Tensor& param,
                      const std::map<std::string, Tensor>& state) const {
  if (state.empty()) return;  // not stepped yet, or no momentum
  check_names(index, state, options.momentum() != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                                                       : std::vector<std::string>{});
  check_buffer(index, "momentum_buffer", state.at("momentum_buffer"), param);
}

void SGD::update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
                 std::map<std::string, Tensor>& state) {
  const double mu = options.momentum(), tau = options.dampening(), wd = group.weight_decay, lr = group.lr;
  const bool first = !state.count("momentum_buffer");
  if (mu != 0.0 && first) state["momentum_buffer"] = zeros_like(param);
  dispatch_floating(param.dtype(), "SGD", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* dp = grad.data<T>();
    T* b = mu != 0.0 ? state["momentum_buffer"].data<T>() : nullptr;
    for (int64_t i = 0; i < param.numel(); ++i) {
      T g = dp[i] + static_cast<T>(wd) * p[i];
      if (b) {
        b[i] = first ? g : static_cast<T>(mu) * b[i] + static_cast<T>(1.0 - tau) * g;
        g = options.nesterov() ? g + static_cast<T>(mu) * b[i] : b[i];
      }
      p[i] -= static_cast<T>(lr) * g;
    }
  });
}

}  // namespace cppgrad::optim
