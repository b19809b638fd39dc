// optim::Optimizer: updates parameters from their gradients. Subclasses (SGD, Adam, AdamW) say
// how, one parameter at a time, in update(); the base class keeps the parameter groups, skips
// parameters without a gradient, and saves and restores the per-parameter state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../autograd/node.h"
#include "../nn/safetensors.h"

namespace cppgrad::optim {

using nn::NamedTensors;

// Parameters that share a learning rate and weight decay (e.g. "no decay for biases").
struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 1e-3;
  double weight_decay = 0.0;
  std::string name;
};

class Optimizer {
 public:
  // A tensor listed twice (tied weights), in one group or two, is updated once, in the first.
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient, under no-grad.
  void step();
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Sets every group's learning rate (what a schedule does).
  void set_lr(double lr);
  double lr() const { return groups_.at(0).lr; }

  // "state.<i>.<name>" per parameter (i counts parameters across groups in order), and
  // "param_groups.<g>.lr" / ".weight_decay". Load expects the same parameters in the same order.
  // A checkpoint is untrusted: load checks every entry (present, dtype, shape, range; see
  // check_state) and throws an Error naming the key, leaving the optimizer as it was.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

 protected:
  // Updates one parameter (contiguous) from its gradient (contiguous, same shape); `state`
  // holds this parameter's named buffers, created by the subclass on first use.
  virtual void update(const Tensor& param, const Tensor& grad, const ParamGroup& group,
                      std::map<std::string, Tensor>& state) = 0;
  // Called once per step() after every update(): a subclass that queued its updates (to run
  // them all in one parallel loop) runs them here.
  virtual void finish_step() {}

  // Checks the state that load_state_dict read for parameter `index` (keys "state.<index>.<name>"): the
  // names update() keeps, each buffer's dtype, shape and values. An empty state (a parameter
  // not stepped yet) passes. The default accepts buffers of the parameter's shape or 0-d.
  virtual void check_state(size_t index, const Tensor& param,
                           const std::map<std::string, Tensor>& state) const;
  // For check_state: `state` holds exactly `names` (throws naming the first missing or unexpected
  // key), and a buffer is floating, of the parameter's shape, finite (and >= 0 when asked).
  static void check_names(size_t index, const std::map<std::string, Tensor>& state,
                          const std::vector<std::string>& names);
  static void check_buffer(size_t index, const std::string& name, const Tensor& buffer, const Tensor& param,
                           bool non_negative = false);

 private:
  std::vector<ParamGroup> groups_;
  std::vector<std::map<std::string, Tensor>> state_;  // one per parameter, in group order
};

}  // namespace cppgrad::optim
