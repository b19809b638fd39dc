#include "optim/training_state.h"

#include <set>

namespace cppgrad::optim {

namespace {

// The one entry of `state` named `name`, or an Error saying it is missing.
const Tensor& single(const NamedTensors& state, const std::string& name) {
  for (const auto& [key, t] : state)
    if (key == name) return t;
  throw Error(fmt::format("checkpoint: '{}' is missing", name));
}

// A part's error on one line (a module lists its missing keys on lines of their own), saying
// which part it is.
Error in_part(const std::string& name, const Error& e) {
  std::string message = e.what();
  for (size_t at; (at = message.find("\n  ")) != std::string::npos;) message.replace(at, 3, "; ");
  return Error(fmt::format("checkpoint: in the entries under \"{}.\": {}", name, message));
}

}  // namespace

TrainingState& TrainingState::add(const std::string& name, Save save, Load load) {
  CPPGRAD_CHECK(!name.empty(), "TrainingState: a part needs a name");
  for (const Part& p : parts_)
    CPPGRAD_CHECK(p.name != name && !p.name.starts_with(name + ".") && !name.starts_with(p.name + "."),
                  "TrainingState: the names '{}' and '{}' overlap: whose would '{}.x' be?", p.name, name,
                  name.size() > p.name.size() ? name : p.name);
  parts_.push_back({name, false, std::move(save), std::move(load)});
  return *this;
}

TrainingState& TrainingState::add_tensor(const std::string& name, std::function<Tensor()> save,
                                         std::function<void(const Tensor&)> load) {
  add(name, [save = std::move(save)] { return NamedTensors{{"", save()}}; },
      [name, load = std::move(load)](const NamedTensors& entry) { load(single(entry, name)); });
  parts_.back().single_entry = true;
  return *this;
}

TrainingState& TrainingState::add_scalar(const std::string& name, int64_t& value, Bounds bounds) {
  return add_tensor(name, [&value] { return tensor(std::vector<int64_t>{value}, {}); },
                    [&value, name, bounds](const Tensor& t) { value = StateReader({{name, t}}, "checkpoint").int64(name, bounds); });
}

TrainingState& TrainingState::add_scalar(const std::string& name, double& value, Bounds bounds) {
  return add_tensor(name, [&value] { return tensor(std::vector<double>{value}, {}); },
                    [&value, name, bounds](const Tensor& t) { value = StateReader({{name, t}}, "checkpoint").float64(name, bounds); });
}

TrainingState& TrainingState::add_constant(const std::string& name, const Tensor& value) {
  const Tensor kept = value.detach().clone();
  return add_tensor(name, [kept] { return kept; }, [kept, name](const Tensor& t) {
    const bool same = t.dtype() == kept.dtype() && t.shape() == kept.shape() &&
                      (kept.dtype() == kInt64 ? t.to_vector<int64_t>() == kept.to_vector<int64_t>()
                                              : t.to_vector<double>() == kept.to_vector<double>());  // exact for every other dtype
    CPPGRAD_CHECK(same, "checkpoint: '{}' is not this run's ({} {} saved, {} {} here)", name, dtype_name(t.dtype()),
                  excerpt(shape_str(t.shape()), 40), dtype_name(kept.dtype()), shape_str(kept.shape()));
  });
}

TrainingState& TrainingState::require(std::function<void()> check) {
  checks_.push_back(std::move(check));
  return *this;
}

const TrainingState::Part* TrainingState::owner_of(const std::string& entry) const {
  for (const Part& p : parts_)
    if (p.single_entry ? entry == p.name : entry.starts_with(p.name + ".")) return &p;
  return nullptr;
}

NamedTensors TrainingState::state_dict() const {
  NamedTensors out;
  for (const Part& p : parts_)
    for (auto& [name, t] : p.save()) out.emplace_back(p.single_entry ? p.name : p.name + "." + name, std::move(t));
  return out;
}

void TrainingState::load_state_dict(const NamedTensors& state) {
  for (const auto& [name, t] : state)
    CPPGRAD_CHECK(owner_of(name) != nullptr, "checkpoint: unexpected entry '{}': no part of this run is named so",
                  excerpt(name));
  for (const Part& p : parts_) {
    if (p.single_entry) {
      NamedTensors entry;
      for (const auto& [name, t] : state)
        if (name == p.name) entry.emplace_back(name, t);
      p.load(entry);  // its messages name the entry already
      continue;
    }
    const NamedTensors entries = under_prefix(p.name + ".", state);
    try {
      p.load(entries);
    } catch (const Error& e) {
      throw in_part(p.name, e);
    }
    // An entry the part does not write back is one it did not read: a misspelt name
    // ("param_groups.00.lr") would otherwise pass unnoticed.
    std::set<std::string> written;
    for (const auto& [name, t] : p.save()) written.insert(name);
    for (const auto& [name, t] : entries)
      CPPGRAD_CHECK(written.count(name), "checkpoint: unexpected entry '{}.{}': the part \"{}\" has no such entry",
                    p.name, excerpt(name), p.name);
  }
  for (const auto& check : checks_) check();
}

void TrainingState::save(const std::string& path, const nn::Metadata& metadata) const {
  const NamedTensors state = state_dict();
  // A checkpoint is never written from a non-finite state: its own load would refuse it (every
  // part refuses a NaN), and a run resumed from it would train on nonsense.
  check_finite(state, fmt::format("TrainingState::save: '{}' not written", excerpt(path)));
  nn::save_safetensors(path, state, metadata);
}

nn::Metadata TrainingState::load(const std::string& path) {
  nn::SafetensorsContents contents = nn::load_safetensors(path);
  try {
    load_state_dict(contents.tensors);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", excerpt(path), e.what()));
  }
  return std::move(contents.metadata);
}

}  // namespace cppgrad::optim
