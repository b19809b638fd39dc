#include "optim/optimizer.h"

#include <algorithm>
#include <set>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string_view>
#include <type_traits>
#include <unordered_set>

#include "runtime/profile.h"
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

void Optimizer::check_group(const ParamGroup& group, size_t index, bool from_file) const {
  // "Adam: parameter group 0", and from a file also the entry: "('param_groups.0.eps')".
  auto at = [&](const char* option) {
    return from_file ? fmt::format("{}: parameter group {} ('param_groups.{}.{}')", name_, index, index, option)
                     : fmt::format("{}: parameter group {}", name_, index);
  };
  auto at_least_zero = [&](const std::optional<double>& v, const char* option, const char* what) {
    CPPGRAD_CHECK(!v || *v >= 0.0, "{}: {} {}", at(option), what, *v);
  };
  at_least_zero(group.lr, "lr", "negative learning rate");
  at_least_zero(group.weight_decay, "weight_decay", "negative weight_decay");
  at_least_zero(group.momentum, "momentum", "negative momentum");
  at_least_zero(group.eps, "eps", "negative eps");
  // The upper ends (kMaxLearningRate, kMaxWeightDecay): no real run comes near them, and a file
  // beyond them is refused rather than trained on.
  auto at_most = [&](const std::optional<double>& v, const char* option, double max) {
    CPPGRAD_CHECK(!v || *v <= max, "{}: {} {} is above {} (optim/optimizer.h says why)", at(option), option, *v, max);
  };
  at_most(group.lr, "lr", kMaxLearningRate);
  at_most(group.weight_decay, "weight_decay", kMaxWeightDecay);
  // momentum 1 sums every gradient so far and never forgets one; above 1 the buffer grows
  // without bound. dampening outside [0, 1] scales the gradient by a negative or a growing factor.
  CPPGRAD_CHECK(!group.momentum || *group.momentum < 1.0, "{}: momentum {} must be below 1", at("momentum"),
                *group.momentum);
  CPPGRAD_CHECK(!group.dampening || (*group.dampening >= 0.0 && *group.dampening <= 1.0),
                "{}: dampening {} must be in [0, 1]", at("dampening"), *group.dampening);
  // eps 0 divides 0 by 0 at a coordinate whose gradients have all been 0 (m = v = 0).
  CPPGRAD_CHECK(!group.eps || *group.eps > 0.0, "{}: eps must be positive, got {}", at("eps"), *group.eps);
  const char* beta_names[] = {"beta1", "beta2"};
  for (int b = 0; b < 2; ++b) {
    const std::optional<double>& beta = b == 0 ? group.beta1 : group.beta2;
    CPPGRAD_CHECK(!beta || (*beta >= 0.0 && *beta < 1.0), "{}: betas must be in [0, 1), got ({}, {})", at(beta_names[b]),
                  group.beta1.value_or(0.0), group.beta2.value_or(0.0));
  }
  // |m| / √v, the size of Adam's step in units of lr, is bounded only when beta1² < beta2
  // (Adam::check_moments derives the bound): with beta2 0 and beta1 0.9, a coordinate whose
  // gradient falls after large ones moves by a large multiple of lr (char_lm's held-out loss
  // once reached 28,573). Every published pair keeps beta2 above beta1²: (0.9, 0.999),
  // (0.9, 0.98), (0.9, 0.95), (0.5, 0.999), (0, 0.99).
  if (group.beta1 && group.beta2)
    CPPGRAD_CHECK(*group.beta1 == 0.0 || *group.beta1 * *group.beta1 < *group.beta2,
                  "{}: betas ({}, {}): beta2 must be above beta1² = {}, or Adam's step |m|/√v has no bound", at("beta2"),
                  *group.beta1, *group.beta2, *group.beta1 * *group.beta1);
  CPPGRAD_CHECK(!group.nesterov.value_or(false) || (group.momentum.value_or(0.0) > 0.0 && group.dampening.value_or(0.0) == 0.0),
                "{}: Nesterov momentum needs momentum > 0 and dampening 0", at("nesterov"));
}

void Optimizer::step() {
  // In a trace, each step is a span ("AdamW.step", category "optimizer"), as PyTorch's profiler
  // records "Optimizer.step#AdamW.step": a trace marks its training steps without a span of the
  // program's own.
  profile::Span span("optimizer", name_, ".step");
  NoGradGuard no_grad;
  check_state_layouts();
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

// state() is writable, as PyTorch's optimizer.state[p] is, and update() indexes each element-wise
// buffer as its parameter: one of another shape, dtype or layout written there by hand would be
// read and written past its end. So each is checked before any parameter is updated.
void Optimizer::check_state_layouts() const {
  const std::vector<std::string> elementwise = elementwise_buffers();
  size_t index = 0;
  for (const ParamGroup& group : groups_)
    for (const Tensor& p : group.params) {
      const auto& state = state_[index];
      if (const auto step = state.find("step"); step != state.end()) {
        const Tensor& t = step->second;
        CPPGRAD_CHECK(t.defined() && t.numel() == 1 && t.dtype() == kInt64,
                      "{}::step: state.{}.step must be one int64 count, got {}", name_, index,
                      t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape()))
                                  : std::string("an undefined tensor"));
      }
      for (const std::string& name : elementwise) {
        const auto found = state.find(name);
        if (found == state.end()) continue;
        const Tensor& buffer = found->second;
        CPPGRAD_CHECK(buffer.defined() && buffer.shape() == p.shape() && buffer.dtype() == p.dtype() &&
                          buffer.is_contiguous(),
                      "{}::step: state.{}.{} must be a contiguous {} {} like its parameter, got {}", name_, index, name,
                      dtype_name(p.dtype()), shape_str(p.shape()),
                      buffer.defined() ? fmt::format("{} {}{}", dtype_name(buffer.dtype()), shape_str(buffer.shape()),
                                                     buffer.is_contiguous() ? "" : " (not contiguous)")
                                       : std::string("an undefined tensor"));
      }
      ++index;
    }
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
  CPPGRAD_CHECK(lr <= kMaxLearningRate, "{}::set_lr: learning rate {} is above {} (optim/optimizer.h says why)", name_, lr,
                kMaxLearningRate);
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
  constexpr const char* op = "Optimizer::load_state_dict";
  std::vector<std::map<std::string, Tensor>> loaded(state_.size());
  std::vector<ParamGroup> groups = groups_;
  std::vector<std::set<std::string>> group_found(groups.size());  // the options read, per group
  for (const auto& [key, t] : state) {
    size_t g = 0, i = 0;
    char field[64] = {0};
    if (std::sscanf(key.c_str(), "param_groups.%zu.%63s", &g, field) == 2) {
      // Only the spelling state_dict() writes: "param_groups.00.lr", "param_groups. 0.lr" and
      // "param_groups.0.lr junk" read as group 0's lr, and would override it.
      CPPGRAD_CHECK(key == fmt::format("param_groups.{}.{}", g, field), "{}: unknown key '{}'", op, excerpt(key));
      CPPGRAD_CHECK(g < groups.size(), "{}: '{}' names group {} of {}", op, excerpt(key), g, groups.size());
      CPPGRAD_CHECK(t.dim() == 0 && t.is_floating_point(), "{}: '{}' must be a 0-d floating tensor, got {} of shape {}",
                    op, excerpt(key), dtype_name(t.dtype()), shape_str(t.shape()));
      const double v = t.item<double>();
      const std::string_view name = field;
      const bool non_negative = name == "lr" || name == "weight_decay";
      CPPGRAD_CHECK(std::isfinite(v) && (!non_negative || v >= 0.0), "{}: '{}' is {}, not a finite{} number", op,
                    excerpt(key), v, non_negative ? " non-negative" : "");
      // Only an option this optimizer has (one its groups have set) can be loaded; its range is
      // checked with the group's other options below.
      bool known = false;
      for_each_option(
          [&](const char* option, auto& value) {
            if (field != std::string_view(option) || !value) return;
            value = static_cast<typename std::remove_reference_t<decltype(value)>::value_type>(v);
            known = true;
          },
          groups[g]);
      if (!known) throw Error(fmt::format("{}: unknown key '{}'", op, excerpt(key)));
      group_found[g].insert(field);
    } else if (std::sscanf(key.c_str(), "state.%zu.%63s", &i, field) == 2) {
      CPPGRAD_CHECK(i < loaded.size(), "{}: '{}' names parameter {}, but there are {}", op, excerpt(key), i,
                    loaded.size());
      CPPGRAD_CHECK(key == fmt::format("state.{}.{}", i, field), "{}: unknown key '{}'", op, excerpt(key));
      loaded[i][field] = kernels::clone(t);
    } else {
      throw Error(fmt::format("{}: unknown key '{}'", op, excerpt(key)));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    // Every option this optimizer's groups have, as state_dict() writes them.
    for_each_option(
        [&](const char* option, const auto& value) {
          if (value) CPPGRAD_CHECK(group_found[g].count(option), "{}: 'param_groups.{}.{}' is missing", op, g, option);
        },
        groups[g]);
    check_group(groups[g], g, /*from_file=*/true);
  }
  // Each parameter's buffers are checked by the subclass, which knows what update() keeps.
  // Floating buffers take the parameter's dtype, as in PyTorch: a float64 checkpoint resumes a
  // float32 run.
  size_t index = 0;
  for (const auto& group : groups)
    for (const Tensor& p : group.params) {
      check_state(index, p, group, loaded[index]);
      for (auto& [name, t] : loaded[index])
        if (t.is_floating_point()) t = kernels::to(t, p.dtype());
      ++index;
    }
  groups_ = std::move(groups);
  state_ = std::move(loaded);
}

void Optimizer::check_state(size_t index, const Tensor& param, const ParamGroup&,
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
  // Finite in the parameter's dtype too: a float64 file's 1e300 would be inf in a float32 run.
  const bool as_float = param.dtype() == kFloat32;
  const double largest = as_float ? double{std::numeric_limits<float>::max()} : std::numeric_limits<double>::max();
  for (double v : buffer.to_vector<double>())
    CPPGRAD_CHECK(std::abs(v) <= largest && (!non_negative || v >= 0.0),  // false for NaN
                  "{}: {} holds {}, not a finite{} number{}", op, key, v, non_negative ? " non-negative" : "",
                  as_float ? " in float32" : "");
}

}  // namespace cppgrad::optim
