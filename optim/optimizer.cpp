#include "optim/optimizer.h"

#include <string_view>
#include <type_traits>
#include <unordered_set>

#include "tensor/kernels.h"

namespace cppgrad::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, const ParamGroup& defaults, std::string optimizer_name)
    : name_(std::move(optimizer_name)) {
  CPPGRAD_CHECK(!groups.empty(), "{}: no parameter groups given", name_);
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    // Each option the group leaves unset comes from the optimizer's options, as in PyTorch; one
    // it sets must be an option of this optimizer (one `defaults` sets).
    ParamGroup resolved{.name = group.name};
    for_each_option(
        [&](const char* option, auto& out, const auto& own, const auto& fallback) {
          CPPGRAD_CHECK(!own || fallback, "{}: parameter group {} ('{}') sets {}, which {} does not have", name_, g,
                        group.name, option, name_);
          out = own ? own : fallback;
        },
        resolved, group, defaults);
    check_group(resolved, g);
    for (const Tensor& p : group.params) {
      CPPGRAD_CHECK(p.defined() && p.is_floating_point(), "{}: parameters must be defined floating tensors", name_);
      if (!p.is_leaf())
        throw Error(fmt::format("{}: can only optimise leaf tensors; got one with grad_fn {}", name_, p.grad_fn()->name()));
      if (seen.insert(p.impl()).second) resolved.params.push_back(p);
    }
    groups_.push_back(std::move(resolved));
  }
  size_t count = 0;
  for (const auto& g : groups_) count += g.params.size();
  state_.resize(count);
}

void Optimizer::check_group(const ParamGroup& group, size_t index) const {
  auto at_least_zero = [&](const std::optional<double>& v, const char* what) {
    CPPGRAD_CHECK(!v || *v >= 0.0, "{}: parameter group {}: {} {}", name_, index, what, *v);
  };
  at_least_zero(group.lr, "negative learning rate");
  at_least_zero(group.weight_decay, "negative weight_decay");
  at_least_zero(group.momentum, "negative momentum");
  at_least_zero(group.eps, "negative eps");
  for (const auto* beta : {&group.beta1, &group.beta2})
    CPPGRAD_CHECK(!*beta || (**beta >= 0.0 && **beta < 1.0), "{}: parameter group {}: betas must be in [0, 1), got ({}, {})",
                  name_, index, group.beta1.value_or(0.0), group.beta2.value_or(0.0));
  CPPGRAD_CHECK(!group.nesterov.value_or(false) || (group.momentum.value_or(0.0) > 0.0 && group.dampening.value_or(0.0) == 0.0),
                "{}: parameter group {}: Nesterov momentum needs momentum > 0 and dampening 0", name_, index);
}

void Optimizer::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  try {
    for (const ParamGroup& group : groups_) {
      for (const Tensor& p : group.params) {
        auto& state = state_[index++];
        Tensor g = p.grad();
        if (!g.defined()) continue;  // not used in this step's loss
        CPPGRAD_CHECK(p.is_contiguous(), "Optimizer: parameter of shape {} is not contiguous", shape_str(p.shape()));
        // A gradient may be a broadcast view (the gradient of a sum): give update() plain memory.
        update(p, kernels::contiguous(kernels::to(g, p.dtype())), group, state);
        p.bump_version();
      }
    }
  } catch (...) {
    finish_step();  // the parameters before the failing one are updated, as if none were queued
    throw;
  }
  finish_step();
}

size_t Optimizer::index_of(const Tensor& param) const {
  size_t index = 0;
  for (const ParamGroup& group : groups_)
    for (const Tensor& p : group.params) {
      if (p.is_same(param)) return index;
      ++index;
    }
  throw Error(fmt::format("{}::state: the tensor of shape {} is not one of this optimizer's parameters", name_,
                          param.defined() ? shape_str(param.shape()) : std::string("(undefined)")));
}

std::map<std::string, Tensor>& Optimizer::state(const Tensor& param) { return state_[index_of(param)]; }
const std::map<std::string, Tensor>& Optimizer::state(const Tensor& param) const { return state_[index_of(param)]; }

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& group : groups_)
    for (const Tensor& p : group.params) p.zero_grad(set_to_none);
}

void Optimizer::set_lr(double lr) {
  CPPGRAD_CHECK(lr >= 0.0, "{}::set_lr: negative learning rate {}", name_, lr);
  for (auto& group : groups_) group.lr = lr;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for_each_option(
        [&](const char* option, const auto& value) {
          if (value) out.emplace_back(fmt::format("param_groups.{}.{}", g, option), scalar_tensor(double(*value), kFloat64));
        },
        groups_[g]);
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [name, t] : state_[i]) out.emplace_back(fmt::format("state.{}.{}", i, name), kernels::clone(t));
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  std::vector<std::map<std::string, Tensor>> loaded(state_.size());
  std::vector<ParamGroup> groups = groups_;
  for (const auto& [key, t] : state) {
    size_t g = 0, i = 0;
    char field[64] = {0};
    if (std::sscanf(key.c_str(), "param_groups.%zu.%63s", &g, field) == 2) {
      CPPGRAD_CHECK(g < groups.size(), "Optimizer::load_state_dict: '{}' names group {} of {}", key, g, groups.size());
      // Only an option this optimizer has (one its groups have set) can be loaded.
      bool known = false;
      for_each_option(
          [&](const char* option, auto& value) {
            if (field != std::string_view(option) || !value) return;
            value = static_cast<typename std::remove_reference_t<decltype(value)>::value_type>(t.item<double>());
            known = true;
          },
          groups[g]);
      if (!known) throw Error(fmt::format("Optimizer::load_state_dict: unknown key '{}'", key));
    } else if (std::sscanf(key.c_str(), "state.%zu.%63s", &i, field) == 2) {
      CPPGRAD_CHECK(i < loaded.size(), "Optimizer::load_state_dict: '{}' names parameter {}, but there are {}", key, i,
            loaded.size());
      loaded[i][field] = kernels::clone(t);
    } else {
      throw Error(fmt::format("Optimizer::load_state_dict: unknown key '{}'", key));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) check_group(groups[g], g);
  // Each parameter's buffers must match its shape (a 0-d entry is a counter). Floating buffers
  // take the parameter's dtype, as in PyTorch: a float64 checkpoint resumes a float32 run.
  size_t index = 0;
  for (const auto& group : groups)
    for (const Tensor& p : group.params) {
      for (auto& [name, t] : loaded[index]) {
        CPPGRAD_CHECK(t.dim() == 0 || t.shape() == p.shape(),
              "Optimizer::load_state_dict: state.{}.{} has shape {}, but parameter {} has shape {}", index, name,
              shape_str(t.shape()), index, shape_str(p.shape()));
        if (t.is_floating_point()) t = kernels::to(t, p.dtype());
      }
      ++index;
    }
  groups_ = std::move(groups);
  state_ = std::move(loaded);
}

}  // namespace cppgrad::optim
