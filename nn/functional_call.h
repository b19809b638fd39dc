// nn::functional_call, as torch.func.functional_call: a module's forward run with other tensors
// in place of some of its parameters and buffers, named as in its state_dict,
//
//   Tensor y = nn::functional_call(*model, {{"fc.weight", w}, {"fc.bias", b}}, x);
//
// so that the output is a function of the tensors given, and autograd differentiates it with
// respect to them (a Hessian-vector product of a model's loss, meta-learning's inner step)
// without writing into the model's own parameters. The module is restored when the call returns
// or throws. A tensor that two names share (tied weights) is replaced under either name, as
// PyTorch's tie_weights=True. Buffers given are the ones the call updates (BatchNorm's running
// statistics in training write into the tensors given, as in PyTorch).
//
// The module's forward must read its parameters and buffers through its nn::Parameter and
// nn::Buffer members, as every cppgrad layer does: a tensor registered but kept in a plain
// Tensor member is refused (its forward would not see the replacement).
#pragma once

#include <concepts>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "module.h"

namespace cppgrad::nn {

// Puts the tensors in place for its lifetime; checks everything before changing anything.
// Errors: a name that is no parameter or buffer of the module, a shape that differs from the
// one it replaces, a tensor held in no member.
class FunctionalCallGuard {
 public:
  FunctionalCallGuard(Module& module, const std::map<std::string, Tensor>& tensors);
  ~FunctionalCallGuard();
  FunctionalCallGuard(const FunctionalCallGuard&) = delete;
  FunctionalCallGuard& operator=(const FunctionalCallGuard&) = delete;

 private:
  struct Swap {
    Tensor* slot;  // a registry entry's tensor or a member's
    Tensor original;
  };
  std::vector<Swap> swaps_;
};

template <class M, class... Inputs>
  requires std::derived_from<M, Module>
auto functional_call(M& module, const std::map<std::string, Tensor>& tensors, Inputs&&... inputs) {
  FunctionalCallGuard guard(module, tensors);
  return module.forward(std::forward<Inputs>(inputs)...);
}

template <class M, class... Inputs>
auto functional_call(const std::shared_ptr<M>& module, const std::map<std::string, Tensor>& tensors,
                     Inputs&&... inputs) {
  return functional_call(*module, tensors, std::forward<Inputs>(inputs)...);
}

}  // namespace cppgrad::nn
