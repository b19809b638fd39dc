#include "optim/sgd.h"

namespace cppgrad::optim {

namespace {

// The options every group starts from (and the only ones an SGD group may set).
ParamGroup sgd_defaults(const SGDOptions& o) {
  return {.lr = o.lr(), .weight_decay = o.weight_decay(), .momentum = o.momentum(), .dampening = o.dampening(),
          .nesterov = o.nesterov()};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : SGD({ParamGroup{.params = std::move(params)}}, o) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o)
    : Optimizer(std::move(groups), sgd_defaults(o), "SGD"), options(o) {}

void SGD::check_state(size_t index, const Tensor& param, const ParamGroup& group,
                      const std::map<std::string, Tensor>& state) const {
  if (state.empty()) return;  // not stepped yet
  const bool momentum = group.momentum.value_or(0.0) != 0.0;
  check_names(index, state, momentum ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{});
  check_buffer(index, "momentum_buffer", state.at("momentum_buffer"), param);
}

void SGD::update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
                 std::map<std::string, Tensor>& state) {
  const double mu = *group.momentum, tau = *group.dampening, wd = *group.weight_decay, lr = *group.lr;
  const bool nesterov = *group.nesterov;
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
        g = nesterov ? g + static_cast<T>(mu) * b[i] : b[i];
      }
      p[i] -= static_cast<T>(lr) * g;
    }
  });
}

}  // namespace cppgrad::optim
