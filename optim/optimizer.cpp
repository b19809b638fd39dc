#include "optim/optimizer.h"

#include <unordered_set>

#include "tensor/kernels.h"

namespace cppgrad::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups) {
  CPPGRAD_CHECK(!groups.empty(), "Optimizer: no parameter groups given");
  std::unordered_set<const TensorImpl*> seen;
  for (auto& group : groups) {
    CPPGRAD_CHECK(group.lr >= 0.0, "Optimizer: negative learning rate {}", group.lr);
    CPPGRAD_CHECK(group.weight_decay >= 0.0, "Optimizer: negative weight_decay {}", group.weight_decay);
    ParamGroup unique{{}, group.lr, group.weight_decay, group.name};
    for (const Tensor& p : group.params) {
      CPPGRAD_CHECK(p.defined() && p.is_floating_point(), "Optimizer: parameters must be defined floating tensors");
      if (!p.is_leaf())
        throw Error(fmt::format("Optimizer: can only optimise leaf tensors; got one with grad_fn {}", p.grad_fn()->name()));
      if (seen.insert(p.impl()).second) unique.params.push_back(p);
    }
    groups_.push_back(std::move(unique));
  }
  size_t count = 0;
  for (const auto& g : groups_) count += g.params.size();
  state_.resize(count);
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

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& group : groups_)
    for (const Tensor& p : group.params) p.zero_grad(set_to_none);
}

void Optimizer::set_lr(double lr) {
  CPPGRAD_CHECK(lr >= 0.0, "Optimizer::set_lr: negative learning rate {}", lr);
  for (auto& group : groups_) group.lr = lr;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    out.emplace_back(fmt::format("param_groups.{}.lr", g), scalar_tensor(groups_[g].lr, kFloat64));
    out.emplace_back(fmt::format("param_groups.{}.weight_decay", g), scalar_tensor(groups_[g].weight_decay, kFloat64));
  }
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
      double v = t.item<double>();
      if (std::string(field) == "lr")
        groups[g].lr = v;
      else if (std::string(field) == "weight_decay")
        groups[g].weight_decay = v;
      else
        throw Error(fmt::format("Optimizer::load_state_dict: unknown key '{}'", key));
    } else if (std::sscanf(key.c_str(), "state.%zu.%63s", &i, field) == 2) {
      CPPGRAD_CHECK(i < loaded.size(), "Optimizer::load_state_dict: '{}' names parameter {}, but there are {}", key, i,
            loaded.size());
      loaded[i][field] = kernels::clone(t);
    } else {
      throw Error(fmt::format("Optimizer::load_state_dict: unknown key '{}'", key));
    }
  }
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
