// nn::Module: the base of every layer. A module owns named parameters (tensors that
// require grad), buffers (tensors saved with it but not trained) and child modules, and hands
// them out by dotted name: "encoder.layers.0.self_attn.in_proj_weight".
//
// A subclass registers its pieces in its constructor and keeps handles to them:
//   weight = register_parameter("weight", empty({out, in}));
//   out_proj = register_module("out_proj", std::make_shared<Linear>(e, e));
// The handles share their TensorImpl with the registry, so to(), load_state_dict() and an
// optimizer's in-place updates are seen through both.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../autograd/node.h"
#include "safetensors.h"

namespace cppgrad::nn {

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
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
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
  // Parameters and persistent buffers, by dotted name, as PyTorch's state_dict.
  NamedTensors state_dict() const;
  // Copies values in (under no-grad). Strict: missing keys, unexpected keys and shape
  // mismatches are all listed in one Error. Not strict: only matching keys are loaded.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // Indented tree of children, as PyTorch prints a model.
  std::string str() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  struct Entry {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  template <class Visit>
  void walk(const std::string& prefix, bool recurse, Visit&& visit) const;
  void str_into(std::string& out, int indent) const;

  std::vector<Entry> parameters_;
  std::vector<Entry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Checkpoints: a module's state_dict in a safetensors file, and back.
void save(const Module& module, const std::string& path, const Metadata& metadata = {});
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace cppgrad::nn
