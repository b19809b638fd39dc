#include "nn/functional_call.h"

#include <functional>

namespace cppgrad::nn {

FunctionalCallGuard::FunctionalCallGuard(Module& root, const std::map<std::string, Tensor>& tensors) {
  // Every registry entry under its dotted name (a tied tensor under each of its names).
  struct Found {
    Module* module;
    Module::Entry* entry;
    bool is_parameter;
    std::string name;
  };
  std::vector<Found> entries;
  std::function<void(Module&, const std::string&)> visit = [&](Module& m, const std::string& prefix) {
    for (Module::Entry& e : m.parameters_) entries.push_back({&m, &e, true, prefix + e.name});
    for (Module::Entry& e : m.buffers_)
      if (e.tensor.defined()) entries.push_back({&m, &e, false, prefix + e.name});
    for (auto& [name, child] : m.children_) visit(*child, prefix + name + ".");
  };
  visit(root, "");

  // What each given tensor replaces: a TensorImpl, wherever it is registered.
  std::map<const TensorImpl*, std::pair<std::string, Tensor>> replacement;
  for (const auto& given : tensors) {
    const std::string& name = given.first;  // named, not a structured binding: clang 14 cannot capture those
    const Tensor& t = given.second;
    const auto found = std::find_if(entries.begin(), entries.end(), [&](const Found& f) { return f.name == name; });
    if (found == entries.end()) {
      std::string known;
      for (size_t i = 0; i < entries.size() && i < 8; ++i) known += (i ? ", " : "") + entries[i].name;
      if (entries.size() > 8) known += fmt::format(" and {} more", entries.size() - 8);
      throw Error(fmt::format("functional_call: {} has no parameter or buffer '{}' (it has: {})", root.type_name(),
                              excerpt(name), known.empty() ? "none" : known));
    }
    const Tensor& own = found->entry->tensor;
    CPPGRAD_CHECK(t.defined(), "functional_call: the tensor given for '{}' is undefined", name);
    CPPGRAD_CHECK(t.shape() == own.shape(), "functional_call: '{}' is {} in the {}, the tensor given is {}", name,
                  shape_str(own.shape()), root.type_name(), shape_str(t.shape()));
    const auto [it, fresh] = replacement.emplace(own.impl(), std::pair{name, t});
    CPPGRAD_CHECK(fresh || it->second.second.is_same(t),
                  "functional_call: '{}' and '{}' name one tied tensor, and different tensors were given for them",
                  it->second.first, name);
  }

  // Each replaced entry and the members bound to it; nothing changes until all are found.
  std::vector<std::pair<Tensor*, Tensor>> planned;
  for (const Found& f : entries) {
    const auto it = replacement.find(f.entry->tensor.impl());
    if (it == replacement.end()) continue;
    const Tensor& t = it->second.second;
    size_t members = 0;
    for (RegisteredTensor* member : f.module->members_)
      if (member->name_ == f.entry->name && member->is_parameter_ == f.is_parameter) {
        planned.emplace_back(member, t);
        ++members;
      }
    CPPGRAD_CHECK(members > 0,
                  "functional_call: the {} '{}' of {} is kept in no nn::{} member, so its forward would not see the "
                  "tensor given; keep it in an nn::{} member (`{} = register_{}(...)`)",
                  f.is_parameter ? "parameter" : "buffer", f.name, f.module->type_name(),
                  f.is_parameter ? "Parameter" : "Buffer", f.is_parameter ? "Parameter" : "Buffer", f.entry->name,
                  f.is_parameter ? "parameter" : "buffer");
    planned.emplace_back(&f.entry->tensor, t);
  }
  for (auto& [slot, t] : planned) {
    swaps_.push_back({slot, *slot});
    *slot = t;
  }
}

FunctionalCallGuard::~FunctionalCallGuard() {
  for (auto it = swaps_.rbegin(); it != swaps_.rend(); ++it) *it->slot = it->original;
}

}  // namespace cppgrad::nn
