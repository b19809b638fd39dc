#include "nn/module.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <typeinfo>
#include <string_view>
#include <unordered_set>

#include "autograd/function.h"
#include "tensor/kernels.h"

namespace cppgrad::nn {

std::string Module::type_name() const { return autograd::short_type_name(typeid(*this)); }

namespace {
void check_name(const std::string& name, std::string_view what) {
  CPPGRAD_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_{}: invalid name '{}' (empty or has a '.')",
        what, name);
}
}  // namespace

Parameter Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(name, "parameter");
  CPPGRAD_CHECK(tensor.defined(), "register_parameter: '{}' is an undefined tensor", name);
  for (const Entry& e : parameters_) CPPGRAD_CHECK(e.name != name, "register_parameter: '{}' is already registered", name);
  if (requires_grad && !tensor.requires_grad()) tensor.requires_grad_(true);
  parameters_.push_back({name, tensor, true});
  return Parameter(tensor, this, name, /*is_parameter=*/true);
}

void Module::replace_parameter(const std::string& name, const Tensor& tensor) {
  CPPGRAD_CHECK(tensor.defined(), "{}: cannot assign an undefined tensor to the parameter '{}'", type_name(), name);
  CPPGRAD_CHECK(tensor.is_leaf(), "{}: the tensor assigned to the parameter '{}' is computed (it has a grad_fn): "
                "assign a parameter, e.g. another module's weight", type_name(), name);
  for (Entry& e : parameters_)
    if (e.name == name) {
      e.tensor = tensor;
      return;
    }
  throw Error(fmt::format("{}: no parameter '{}' to assign to", type_name(), name));
}

void Module::replace_buffer(const std::string& name, const Tensor& tensor) {
  for (Entry& e : buffers_)
    if (e.name == name) {
      e.tensor = tensor;
      return;
    }
  throw Error(fmt::format("{}: no buffer '{}' to assign to", type_name(), name));
}

void Module::unbind(const RegisteredTensor* member) { std::erase(members_, member); }

RegisteredTensor::~RegisteredTensor() {
  if (owner_ != nullptr) owner_->unbind(this);
}

void RegisteredTensor::assign(const Tensor& other) {
  if (owner_ != nullptr) {  // checks first: a refused tie changes nothing
    if (is_parameter_)
      owner_->replace_parameter(name_, other);
    else
      owner_->replace_buffer(name_, other);
  }
  Tensor::operator=(other);
}

void RegisteredTensor::assign(RegisteredTensor&& other) {
  if (owner_ == nullptr && other.owner_ != nullptr) {  // `weight = register_parameter(...)`: bind
    Tensor::operator=(static_cast<const Tensor&>(other));
    owner_ = other.owner_;
    name_ = std::move(other.name_);
    is_parameter_ = other.is_parameter_;
    other.owner_->unbind(&other);
    other.owner_ = nullptr;
    owner_->members_.push_back(this);
    return;
  }
  assign(static_cast<const Tensor&>(other));
}

Buffer Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_name(name, "buffer");
  for (const Entry& e : buffers_) CPPGRAD_CHECK(e.name != name, "register_buffer: '{}' is already registered", name);
  buffers_.push_back({name, tensor, persistent});
  return Buffer(tensor, this, name, /*is_parameter=*/false);
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  CPPGRAD_CHECK(module != nullptr, "register_module: '{}' is null", name);
  for (const auto& [n, m] : children_) CPPGRAD_CHECK(n != name, "register_module: '{}' is already registered", name);
  // A module inside its own tree (s->push_back(s), or a parent under its child) would make every
  // walk of the tree, parameters() or str(), recurse without end. The same module twice in
  // different places (shared weights) is a tree still, and allowed.
  CPPGRAD_CHECK(!module->is_or_holds(this), "register_module: '{}' is this module, or holds it: a module cannot be "
                "inside itself", name);
  children_.emplace_back(name, std::move(module));
}

bool Module::is_or_holds(const Module* module) const {
  if (this == module) return true;
  for (const auto& [name, child] : children_)
    if (child->is_or_holds(module)) return true;
  return false;
}

// Calls visit(dotted_name, entry, is_parameter) for every parameter and buffer.
template <class Visit>
void Module::walk(const std::string& prefix, bool recurse, Visit&& visit) const {
  for (const Entry& e : parameters_) visit(prefix + e.name, e, true);
  for (const Entry& e : buffers_) visit(prefix + e.name, e, false);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->walk(prefix + name + ".", true, visit);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  walk("", recurse, [&](const std::string& name, const Entry& e, bool is_param) {
    if (is_param && seen.insert(e.tensor.impl()).second) out.emplace_back(name, e.tensor);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  walk("", recurse, [&](const std::string& name, const Entry& e, bool is_param) {
    if (!is_param && e.tensor.defined() && seen.insert(e.tensor.impl()).second) out.emplace_back(name, e.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, m] : children_) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    out.emplace_back(prefix, m->weak_from_this().lock());  // null only for a root not held by a shared_ptr
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(prefix.empty() ? it->first : prefix + "." + it->first, it->second.get());
  }
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) p.zero_grad(set_to_none);
}

namespace {
// Swaps the data under a TensorImpl for a converted copy: every handle sees the new dtype.
void convert_in_place(const Tensor& t, DType dtype) {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype) return;
  Tensor converted = kernels::contiguous(kernels::to(t, dtype));
  TensorImpl* impl = t.impl();
  impl->storage = converted.storage();
  impl->strides = converted.strides();
  impl->offset = converted.offset();
  impl->dtype = dtype;
  if (t.grad().defined()) t.set_grad(kernels::to(t.grad(), dtype));
}
}  // namespace

void Module::to(DType dtype) {
  CPPGRAD_CHECK(is_floating(dtype), "Module::to: modules convert to float32 or float64, not {}", dtype_name(dtype));
  CPPGRAD_CHECK(dtype != kBFloat16, "Module::to: bfloat16 weights cannot run here (cppgrad has no bfloat16 arithmetic); "
                "keep float32 weights and run the forward under autocast::Guard(kBFloat16) (tensor/autocast.h)");
  std::unordered_set<const TensorImpl*> done;
  walk("", true, [&](const std::string&, const Entry& e, bool) {
    if (e.tensor.defined() && done.insert(e.tensor.impl()).second) convert_in_place(e.tensor, dtype);
  });
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  walk("", true, [&](const std::string& name, const Entry& e, bool is_param) {
    if (e.tensor.defined() && (is_param || e.persistent) && seen.insert(e.tensor.impl()).second)
      out.emplace_back(name, e.tensor);
  });
  return out;
}

// The other names of tied tensors: name -> the name state_dict() lists the tensor under.
static std::map<std::string, std::string> tied_aliases(const NamedTensors& own, const NamedTensors& all) {
  std::map<const TensorImpl*, std::string> first;
  for (const auto& [name, t] : own) first.emplace(t.impl(), name);
  std::map<std::string, std::string> aliases;
  for (const auto& [name, t] : all) {
    const auto it = first.find(t.impl());
    if (it != first.end() && it->second != name) aliases.emplace(name, it->second);
  }
  return aliases;
}

// A list of names for an error message: the first few, each an excerpt, then how many more
// (a hostile file may bring a million unexpected keys).
static std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i) shown.push_back(excerpt(names[i]));
  std::string out = fmt::format("{}", fmt::join(shown, ", "));
  if (names.size() > kShown) out += fmt::format(" and {} more", names.size() - kShown);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own = state_dict();
  NamedTensors all;  // every name, tied ones included
  std::set<std::string> parameters;
  walk("", true, [&](const std::string& name, const Entry& e, bool is_param) {
    if (is_param) parameters.insert(name);
    if (e.tensor.defined() && (is_param || e.persistent)) all.emplace_back(name, e.tensor);
  });
  const auto aliases = tied_aliases(own, all);
  std::map<std::string_view, const Tensor*> given;  // a map: the state may be a hostile file's million keys
  for (const auto& [name, t] : state) given.emplace(name, &t);
  for (const auto& [name, t] : state) {  // a tied tensor given only under another of its names
    const auto alias = aliases.find(name);
    if (alias != aliases.end()) given.emplace(alias->second, &t);
  }
  std::set<std::string_view> own_names;
  for (const auto& [name, t] : own) own_names.insert(name);
  for (const auto& [name, first] : aliases) own_names.insert(name);
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, target] : own) {
    auto found = given.find(name);
    if (found == given.end()) {
      missing.push_back(name);
    } else if (found->second->shape() != target.shape()) {
      mismatched.push_back(fmt::format("{}: checkpoint {} vs model {}", name, shape_str(found->second->shape()),
                                       shape_str(target.shape())));
    } else if (target.is_floating_point() && !found->second->is_floating_point()) {
      mismatched.push_back(fmt::format("{}: checkpoint dtype {} vs model {}", name,
                                       dtype_name(found->second->dtype()), dtype_name(target.dtype())));
    }
  }
  for (const auto& [name, t] : given)
    if (!own_names.count(name)) unexpected.emplace_back(name);
  if (!mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()))) {
    std::string msg = "load_state_dict: the state does not match the " + type_name();
    if (!missing.empty()) msg += fmt::format("\n  missing keys: {}", name_list(missing));
    if (!unexpected.empty() && strict) msg += fmt::format("\n  unexpected keys: {}", name_list(unexpected));
    if (!mismatched.empty()) msg += fmt::format("\n  shape mismatches: {}", fmt::join(mismatched, "; "));
    throw Error(msg);
  }
  // A weight that is NaN or infinite (or would be in the model's dtype) is no trained model's:
  // every output it touches is NaN, and training on it trains on nonsense. Buffers may hold
  // infinities on purpose (a mask of -inf), so only parameters are checked.
  for (const auto& [name, target] : own) {
    auto found = given.find(name);
    if (found == given.end() || !parameters.count(name) || !target.is_floating_point()) continue;
    const int64_t at = first_non_finite(*found->second, target.dtype());
    if (at < 0) continue;
    const double v = found->second->contiguous().to(kFloat64).reshape({-1}).to_vector<double>()[static_cast<size_t>(at)];
    throw Error(fmt::format("load_state_dict: '{}' holds {} (element {} of {}), not a finite {} weight", name, v, at,
                            shape_str(target.shape()), dtype_name(target.dtype())));
  }
  NoGradGuard no_grad;
  for (const auto& [name, target] : own) {
    auto found = given.find(name);
    if (found != given.end()) kernels::copy_(target, *found->second);
  }
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.str(); }

EvalModeGuard::EvalModeGuard(Module& module) {
  for (const auto& [name, held] : module.named_modules()) {
    Module* m = modes_.empty() ? &module : held.get();  // the first is `module` (null if not held)
    modes_.emplace_back(m, m->is_training());
  }
  module.eval();
}

EvalModeGuard::~EvalModeGuard() {  // train() sets a whole subtree: parents first, each child's own mode last
  for (auto& [m, training] : modes_) m->train(training);
}

void Module::str_into(std::string& out, int indent) const {
  out += type_name() + "(" + extra_repr();
  if (children_.empty()) {
    out += ")";
    return;
  }
  out += "\n";
  for (const auto& [name, child] : children_) {
    out += std::string(indent + 2, ' ') + "(" + name + "): ";
    child->str_into(out, indent + 2);
    out += "\n";
  }
  out += std::string(indent, ' ') + ")";
}

void save(const Module& module, const std::string& path, const Metadata& metadata, NonFinite non_finite) {
  NamedTensors state = module.state_dict();
  if (non_finite == NonFinite::Refuse)
    check_finite(state, fmt::format("nn::save('{}'), refused (nn::NonFinite::Allow writes it)", path));
  save_safetensors(path, state, metadata);
}

void load(Module& module, const std::string& path, bool strict) {
  NamedTensors state = load_safetensors(path).tensors;  // its errors name the file already
  try {
    module.load_state_dict(state, strict);
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {  // a checkpoint of another model: say which file
    throw Error(fmt::format("load '{}': {}", excerpt(path), e.what()));
  }
}

}  // namespace cppgrad::nn
