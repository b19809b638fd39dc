// optim::TrainingState: a whole training run saved and resumed in one call each, as a PyTorch
// user saves a dict of state_dicts with torch.save and loads it back.
//
//   int64_t step = 0;
//   optim::TrainingState state;
//   state.add("model", *model).add("optim", opt).add("sched", schedule).add("loader", loader)
//       .add("rng", default_generator()).add_scalar("step", step, Bounds::at_least(0));
//   if (resuming) state.load("run.safetensors");    // every part, or an Error and nothing trains
//   for (; step < steps; ++step) { ... }
//   state.save("run.safetensors");
//
// A part is anything with state_dict() and load_state_dict(const NamedTensors&) (a Module, an
// optimizer, a schedule, a moving average, a DataLoader, a Generator, a type of one's own),
// held by reference: it must outlive the TrainingState. Its entries are saved under its name
// ("model.fc.weight"); a scalar or a single tensor is one entry of its own name ("step").
// One safetensors file holds it all, written to a temporary and renamed into place, so a crash
// never leaves a half-written file under the path.
//
// A file is untrusted input, and load refuses it, with one Error naming the entry, when
//   - an entry belongs to no part ("stray", "optim.param_groups.00.lr": a name the part would
//     not write back after loading is one it did not read);
//   - a part refuses its entries (missing, wrong dtype or shape, out of range: each part checks
//     its own, see tensor/state_dict.h);
//   - a scalar is missing, not a 0-d int64 / float64, or outside the bounds it was added with;
//   - a constant (a vocabulary) differs from this run's;
//   - a check added with require() fails (a relation between parts: the step counts agree).
// Parts are loaded in the order they were added, and a refused file may leave the parts before
// the one refused loaded: the programs exit, as after a failed torch.load.
#pragma once

#include <concepts>
#include <functional>
#include <string>
#include <vector>

#include "../nn/safetensors.h"
#include "../tensor/state_dict.h"

namespace cppgrad::optim {

// What TrainingState::add takes: a state_dict() and a load_state_dict() of one NamedTensors.
// The parts meet here without knowing each other, so optim/ needs nothing of data/ to hold a
// DataLoader (docs/design-decisions.md, "One checkpoint for a whole run").
template <class T>
concept Stateful = requires(T& part, const T& saved, const NamedTensors& state) {
  { saved.state_dict() } -> std::convertible_to<NamedTensors>;
  part.load_state_dict(state);
};

class TrainingState {
 public:
  using Save = std::function<NamedTensors()>;
  using Load = std::function<void(const NamedTensors&)>;

  // A part whose entries go under "<name>." ("model", "rng.default"). Names may not overlap:
  // "rng" and "rng.default" together are refused.
  template <Stateful T>
  TrainingState& add(const std::string& name, T& part) {
    return add(name, [&part] { return NamedTensors(part.state_dict()); },
               [&part](const NamedTensors& state) { part.load_state_dict(state); });
  }
  TrainingState& add(const std::string& name, Save save, Load load);

  // A number of the loop's own (the step, the best loss so far), one 0-d entry named `name`.
  TrainingState& add_scalar(const std::string& name, int64_t& value, Bounds bounds = {});
  TrainingState& add_scalar(const std::string& name, double& value, Bounds bounds = Bounds::finite());
  // One tensor entry named `name`, saved by `save` and checked and taken in by `load`.
  TrainingState& add_tensor(const std::string& name, std::function<Tensor()> save,
                            std::function<void(const Tensor&)> load);
  // A value the run is built from (a vocabulary): saved, and a file whose entry differs in
  // dtype, shape or any element is refused.
  TrainingState& add_constant(const std::string& name, const Tensor& value);
  // A check run after every part is loaded, throwing Error to refuse the file.
  TrainingState& require(std::function<void()> check);

  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

  // state_dict() in a safetensors file with `metadata`, written atomically (nn::save_safetensors);
  // refused, with an Error naming the entry, when an entry holds a NaN or an infinity.
  void save(const std::string& path, const nn::Metadata& metadata = {}) const;
  // Loads the file into every part; returns its metadata. Errors name the file.
  nn::Metadata load(const std::string& path);

 private:
  struct Part {
    std::string name;
    bool single_entry;  // a scalar, tensor or constant: the entry is `name` itself
    Save save;
    Load load;
  };
  const Part* owner_of(const std::string& entry) const;

  std::vector<Part> parts_;
  std::vector<std::function<void()>> checks_;
};

}  // namespace cppgrad::optim
