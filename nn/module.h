// nn::Module: the base of every layer. A module owns named parameters (tensors that
// require grad), buffers (tensors saved with it but not trained) and child modules, and hands
// them out by dotted name: "encoder.layers.0.self_attn.in_proj_weight".
//
// A subclass registers its pieces in its constructor and keeps handles to them:
//   weight = register_parameter("weight", empty({out, in}));
//   out_proj = register_module("out_proj", std::make_shared<Linear>(e, e));
// The handles share their TensorImpl with the registry, so to(), load_state_dict() and an
// optimizer's in-place updates are seen through both.
//
// Weight tying, PyTorch's way: a layer's parameter members are nn::Parameter handles, and
// assigning a tensor to one re-registers it under that name, `head->weight = tok->weight` (PyTorch:
// `self.head.weight = self.tok.weight`). The shared tensor is then one parameter: listed once by
// named_parameters() and state_dict(), under the name it is first reached by, trained once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../autograd/node.h"
#include "safetensors.h"

namespace cppgrad::nn {

class Module;

class RegisteredTensor;  // what a module's members keep (below):
template <bool IsParameter> class Registered;
using Parameter = Registered<true>;  //   a handle to a parameter it registered
using Buffer = Registered<false>;    //   a handle to a buffer it registered

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's type, for printing and error messages ("Linear"). By default the C++ class's
  // own name without its namespaces, so a user's `struct Net : nn::Module` prints as "Net(".
  virtual std::string type_name() const;
  // What str() prints inside the parentheses: "in_features=4, out_features=2, bias=true".
  virtual std::string extra_repr() const { return ""; }

  // ---- the registry ---------------------------------------------------------------------------
  Parameter register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // An undefined tensor registers a buffer that is not there (PyTorch's None): listed nowhere.
  Buffer register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Dotted names, depth first in registration order. A tensor registered in two places
  // (tied weights) appears once, under the name it was first reached by.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // Depth first; "" is this module (a null pointer if it is not held by a shared_ptr).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  int64_t parameter_count() const;  // elements, counting a shared tensor once

  // ---- modes and bulk changes ----------------------------------------------------------------
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad(bool set_to_none = true);
  // Converts every floating parameter and buffer in place: handles stay valid.
  void to(DType dtype);

  // ---- state -------------------------------------------------------------------------------
  // Parameters and persistent buffers, by dotted name, as PyTorch's state_dict, except that a
  // tensor registered in two places (tied weights) is one entry, under its first name.
  NamedTensors state_dict() const;
  // Copies values in (under no-grad). Strict: missing keys, unexpected keys and shape
  // mismatches are all listed in one Error. Not strict: only matching keys are loaded. A tied
  // tensor's other names (PyTorch's state_dict lists them all) are accepted, and stand for it
  // when its first name is missing.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // Indented tree of children, as PyTorch prints a model.
  std::string str() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  friend class RegisteredTensor;
  friend class FunctionalCallGuard;
  void replace_parameter(const std::string& name, const Tensor& tensor);
  void replace_buffer(const std::string& name, const Tensor& tensor);
  void unbind(const RegisteredTensor* member);
  struct Entry {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  template <class Visit>
  void walk(const std::string& prefix, bool recurse, Visit&& visit) const;
  void str_into(std::string& out, int indent) const;
  bool is_or_holds(const Module* module) const;  // this module, or one in its tree

  std::vector<Entry> parameters_;
  std::vector<Entry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<RegisteredTensor*> members_;  // the subclass's Parameter and Buffer members bound to entries
  bool training_ = true;
};

// ---- the handles a module's members keep ------------------------------------------------------
// A module's handle to a parameter it registered (what register_parameter returns; layers keep
// theirs in Parameter members). It is a Tensor. Assigning a tensor to the member replaces the
// registered parameter too, so that the module's forward and its registry never disagree. The
// tensor assigned must be a leaf (a parameter, not a computed tensor), as PyTorch requires.
// A copy of a Parameter is a plain handle, bound to no module. (Buffer, below, is its twin for
// buffers; RegisteredTensor what they share. The module knows its bound members: that is how
// nn::functional_call puts other tensors in their place for one call.)
class RegisteredTensor : public Tensor {
 public:
  RegisteredTensor(const RegisteredTensor& other) : Tensor(other) {}
  ~RegisteredTensor();

 protected:
  RegisteredTensor() = default;
  RegisteredTensor(Tensor tensor, Module* owner, std::string name, bool is_parameter)
      : Tensor(std::move(tensor)), owner_(owner), name_(std::move(name)), is_parameter_(is_parameter) {}
  void assign(const Tensor& other);
  void assign(RegisteredTensor&& other);  // a register_*(...) result binds: `weight = register_parameter(...)`

 private:
  friend class Module;
  friend class FunctionalCallGuard;
  Module* owner_ = nullptr;  // the module this member belongs to (it lives inside it), or null
  std::string name_;
  bool is_parameter_ = true;  // false: a buffer
};

// Parameter is Registered<true>; Buffer, Registered<false>, is its twin for a buffer (register_buffer's
// result): a tensor saved with the module but not trained, such as BatchNorm's running statistics.
// Assigning to a Buffer replaces the registered buffer, as `self.running_mean = t` in PyTorch.
template <bool IsParameter>
class Registered : public RegisteredTensor {
 public:
  Registered() = default;
  Registered(const Registered& other) = default;
  Registered& operator=(const Tensor& other) { return assign(other), *this; }
  Registered& operator=(const Registered& other) { return *this = static_cast<const Tensor&>(other); }
  Registered& operator=(Registered&& other) { return assign(std::move(other)), *this; }

 private:
  friend class Module;
  using RegisteredTensor::RegisteredTensor;
};

// Checkpoints: a module's state_dict in a safetensors file, and back. A state holding a NaN or an
// infinity is refused, naming the first (a program that saves after a step that diverged would
// otherwise keep nonsense as its result, silently); NonFinite::Allow writes it anyway, to study it.
enum class NonFinite { Refuse, Allow };
void save(const Module& module, const std::string& path, const Metadata& metadata = {},
          NonFinite non_finite = NonFinite::Refuse);
void load(Module& module, const std::string& path, bool strict = true);

// The module and every submodule in eval mode while the guard lives (a traced export, a picture of
// the attention), each given back its own mode after, a throw included: a child set to eval inside
// a training model stays in eval.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& module);
  ~EvalModeGuard();
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  std::vector<std::pair<Module*, bool>> modes_;  // depth first, each parent before its children
};

// std::cout << model and fmt::print("{}", model) print model.str(), as print(model) in PyTorch.
std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace cppgrad::nn

template <std::derived_from<cppgrad::nn::Module> M>
struct fmt::formatter<M> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(const M& module, FormatContext& ctx) const {
    std::string s = module.str();
    return fmt::formatter<std::string_view>::format(s, ctx);
  }
};
