#include "optim/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
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
  constexpr const char* op = "Optimizer::load_state_dict";
  std::vector<std::map<std::string, Tensor>> loaded(state_.size());
  std::vector<ParamGroup> groups = groups_;
  std::vector<std::array<bool, 2>> group_found(groups.size(), {false, false});  // lr, weight_decay
  for (const auto& [key, t] : state) {
    size_t g = 0, i = 0;
    char field[64] = {0};
    if (std::sscanf(key.c_str(), "param_groups.%zu.%63s", &g, field) == 2) {
      CPPGRAD_CHECK(g < groups.size(), "{}: '{}' names group {} of {}", op, excerpt(key), g, groups.size());
      const std::string name = field;
      CPPGRAD_CHECK(name == "lr" || name == "weight_decay", "{}: unknown key '{}'", op, excerpt(key));
      CPPGRAD_CHECK(t.dim() == 0 && t.is_floating_point(), "{}: '{}' must be a 0-d floating tensor, got {} of shape {}",
                    op, key, dtype_name(t.dtype()), shape_str(t.shape()));
      const double v = t.item<double>();
      CPPGRAD_CHECK(std::isfinite(v) && v >= 0.0, "{}: '{}' is {}, not a finite non-negative number", op, key, v);
      (name == "lr" ? groups[g].lr : groups[g].weight_decay) = v;
      group_found[g][name == "lr" ? 0 : 1] = true;
    } else if (std::sscanf(key.c_str(), "state.%zu.%63s", &i, field) == 2) {
      CPPGRAD_CHECK(i < loaded.size(), "{}: '{}' names parameter {}, but there are {}", op, excerpt(key), i,
                    loaded.size());
      CPPGRAD_CHECK(key == fmt::format("state.{}.{}", i, field), "{}: unknown key '{}'", op, excerpt(key));
      loaded[i][field] = kernels::clone(t);
    } else {
      throw Error(fmt::format("{}: unknown key '{}'", op, excerpt(key)));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g)
    for (int f = 0; f < 2; ++f)
      CPPGRAD_CHECK(group_found[g][f], "{}: 'param_groups.{}.{}' is missing", op, g, f == 0 ? "lr" : "weight_decay");
  // Each parameter's buffers are checked by the subclass, which knows what update() keeps.
  // Floating buffers take the parameter's dtype, as in PyTorch: a float64 checkpoint resumes a
  // float32 run.
  size_t index = 0;
  for (const auto& group : groups)
    for (const Tensor& p : group.params) {
      check_state(index, p, loaded[index]);
      for (auto& [name, t] : loaded[index])
        if (t.is_floating_point()) t = kernels::to(t, p.dtype());
      ++index;
    }
  groups_ = std::move(groups);
  state_ = std::move(loaded);
}

void Optimizer::check_state(size_t index, const Tensor& param,
                            const std::map<std::string, Tensor>& state) const {
  for (const auto& [name, t] : state)
    CPPGRAD_CHECK(t.dim() == 0 || t.shape() == param.shape(),
                  "Optimizer::load_state_dict: state.{}.{} has shape {}, but parameter {} has shape {}", index, name,
                  shape_str(t.shape()), index, shape_str(param.shape()));
}

void Optimizer::check_names(size_t index, const std::map<std::string, Tensor>& state,
                            const std::vector<std::string>& names) {
  for (const std::string& name : names)
    CPPGRAD_CHECK(state.count(name), "Optimizer::load_state_dict: state.{}.{} is missing", index, name);
  for (const auto& [name, t] : state)
    CPPGRAD_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                  "Optimizer::load_state_dict: unexpected key state.{}.{} (this optimizer keeps {})", index, excerpt(name),
                  fmt::join(names, ", "));
}

void Optimizer::check_buffer(size_t index, const std::string& name, const Tensor& buffer, const Tensor& param,
                             bool non_negative) {
  const std::string key = fmt::format("state.{}.{}", index, name);
  constexpr const char* op = "Optimizer::load_state_dict";
  CPPGRAD_CHECK(buffer.is_floating_point(), "{}: {} has dtype {}, not a floating one", op, key,
                dtype_name(buffer.dtype()));
  CPPGRAD_CHECK(buffer.shape() == param.shape(), "{}: {} has shape {}, but parameter {} has shape {}", op, key,
                shape_str(buffer.shape()), index, shape_str(param.shape()));
  for (double v : buffer.to_vector<double>())
    CPPGRAD_CHECK(std::isfinite(v) && (!non_negative || v >= 0.0), "{}: {} holds {}, not a finite{} number", op, key,
                  v, non_negative ? " non-negative" : "");
}

}  // namespace cppgrad::optim
