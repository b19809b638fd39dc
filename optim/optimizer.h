// optim::Optimizer: updates parameters from their gradients. Subclasses (SGD, Adam, AdamW) say
// how, one parameter at a time, in update(); the base class keeps the parameter groups, skips
// parameters without a gradient, and saves and restores the per-parameter state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../autograd/node.h"
#include "../nn/safetensors.h"

namespace cppgrad::optim {

using nn::NamedTensors;

// The largest learning rate and weight decay an optimizer takes (when built, by set_lr, and from
// a checkpoint). Real runs stay far below: rates are at most about 10 (SGD scaled linearly to
// very large batches), and seq2seq's --lr, a factor of the paper's schedule, reaches 1e3 only at
// d_model 1; decoupled weight decay is at most about 1 (AdamW's 0.01 to 0.1, some recipes 1) and
// L2 decay 5e-4. Beyond them a step multiplies a weight by 1 - lr·λ far from 1: a file holding
// weight_decay 1e30 trained on NaN before these bounds.
inline constexpr double kMaxLearningRate = 1e3;
inline constexpr double kMaxWeightDecay = 1e2;

// Parameters that share their options (e.g. "no decay for biases"). As in PyTorch, a group
// inherits every option it leaves unset from the optimizer's options (SGDOptions, AdamOptions):
//   SGD({ParamGroup{.params = weights, .weight_decay = 5e-4}, ParamGroup{.params = biases}},
//       SGDOptions(0.1).momentum(0.9));      // both groups train at lr 0.1 with momentum 0.9
// The optimizer fills the unset options when it is built, so param_groups() shows the values in
// force. Setting an option the optimizer does not have (beta1 for SGD) is an error.
struct ParamGroup {  // (every member has an initializer: no warning for one left out)
  std::vector<Tensor> params{};
  std::optional<double> lr{};
  std::optional<double> weight_decay{};
  std::string name{};
  // SGD's
  std::optional<double> momentum{};
  std::optional<double> dampening{};
  std::optional<bool> nesterov{};
  // Adam's and AdamW's
  std::optional<double> beta1{};
  std::optional<double> beta2{};
  std::optional<double> eps{};
  std::optional<bool> amsgrad{};
};

// Calls f("lr", g.lr...) for each option, in the order state_dict() saves them, with that
// option of each group given (one group, or two side by side).
template <class F, class... Groups>
void for_each_option(F&& f, Groups&... g) {
  f("lr", g.lr...);
  f("weight_decay", g.weight_decay...);
  f("momentum", g.momentum...);
  f("dampening", g.dampening...);
  f("nesterov", g.nesterov...);
  f("beta1", g.beta1...);
  f("beta2", g.beta2...);
  f("eps", g.eps...);
  f("amsgrad", g.amsgrad...);
}

class Optimizer {
 public:
  // `defaults` sets every option this optimizer has (and only those); each group takes from it
  // what it leaves unset. `optimizer_name` ("SGD") names the optimizer in errors. A tensor
  // listed twice (tied weights), in one group or two, is updated once, in the first.
  Optimizer(std::vector<ParamGroup> groups, const ParamGroup& defaults, std::string optimizer_name);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient, under no-grad. (Virtual, as state_dict,
  // load_state_dict and state: distributed::ZeroRedundancyOptimizer shards them across ranks.)
  virtual void step();
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Sets every group's learning rate (what a schedule does).
  void set_lr(double lr);
  double lr() const { return groups_.at(0).lr.value(); }

  // "state.<i>.<name>" per parameter (i counts parameters across groups in order), and
  // "param_groups.<g>.<option>" for each option the optimizer has (lr, weight_decay, ...; a
  // bool as 0 or 1). Load expects the same parameters in the same order. A checkpoint is
  // untrusted: load checks every entry (present, dtype, shape, range; see check_state) and
  // throws an Error naming the key, leaving the optimizer as it was.
  virtual NamedTensors state_dict() const;
  virtual void load_state_dict(const NamedTensors& state);

  // One parameter's state by name ("exp_avg", "exp_avg_sq", "step"; "momentum_buffer"), as
  // PyTorch's optimizer.state[p]: empty until the parameter's first update. Writable: a tensor
  // changed in place, or an entry replaced by one of the parameter's shape, is what the next
  // step uses. Throws if `param` is not one of this optimizer's parameters.
  virtual std::map<std::string, Tensor>& state(const Tensor& param);
  virtual const std::map<std::string, Tensor>& state(const Tensor& param) const;

 protected:
  // Updates one parameter (contiguous) from its gradient (contiguous, same shape) with the
  // options of its group (every option of this optimizer is set there); `state`
  // holds this parameter's named buffers, created by the subclass on first use.
  virtual void update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
                      std::map<std::string, Tensor>& state) = 0;
  // Called once per step() after every update(): a subclass that queued its updates (to run
  // them all in one parallel loop) runs them here.
  virtual void finish_step() {}

  // The buffers update() reads and writes element by element as the parameter ("exp_avg", ...):
  // step() checks that each, if present, has the parameter's shape, dtype and dense layout.
  virtual std::vector<std::string> elementwise_buffers() const { return {}; }
  // That check, for every parameter, before any is updated; a "step" must be one int64 count.
  void check_state_layouts() const;
  // Checks the state that load_state_dict read for parameter `index` (keys "state.<index>.<name>"): the
  // names update() keeps, each buffer's dtype, shape and values. An empty state (a parameter
  // not stepped yet) passes. The default accepts buffers of the parameter's shape or 0-d.
  virtual void check_state(size_t index, const Tensor& param, const ParamGroup& group,
                           const std::map<std::string, Tensor>& state) const;
  // For check_state: `state` holds exactly `names` (throws naming the first missing or unexpected
  // key), and a buffer is floating, of the parameter's shape, finite (and >= 0 when asked).
  static void check_names(size_t index, const std::map<std::string, Tensor>& state,
                          const std::vector<std::string>& names);
  static void check_buffer(size_t index, const std::string& name, const Tensor& buffer, const Tensor& param,
                           bool non_negative = false);

 private:
  size_t index_of(const Tensor& param) const;  // across groups, in order
  // Throws if an option of `group` is out of range (negative lr, beta outside [0, 1), eps 0, ...);
  // `from_file`: the message names the entry ('param_groups.0.eps').
  void check_group(const ParamGroup& group, size_t index, bool from_file = false) const;

  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<std::map<std::string, Tensor>> state_;  // one per parameter, in group order
};

}  // namespace cppgrad::optim
