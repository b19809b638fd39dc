#include "common/checkpoint.h"

#include <bit>
#include <cmath>

using namespace cppgrad;

namespace examples {

NamedTensors with_prefix(const std::string& prefix, const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(prefix + name, t);
  return out;
}

NamedTensors under_prefix(const std::string& prefix, const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

NamedTensors generator_state(const Generator& gen) {
  Generator::State s = gen.state();
  std::vector<int64_t> words;
  for (uint64_t w : s.s) words.push_back(std::bit_cast<int64_t>(w));
  words.push_back(std::bit_cast<int64_t>(s.seed));
  return {{"words", tensor(words, {5})},
          {"cached_normal", scalar_tensor(s.cached_normal, kFloat64)},
          {"has_cached_normal", scalar_tensor(s.has_cached_normal ? 1 : 0, kBool)}};
}

namespace {

// The entry `name` of `state`, which must exist with this dtype and shape.
const Tensor& entry(const NamedTensors& state, const std::string& prefix, const std::string& name, DType dtype,
                    const Shape& shape) {
  for (const auto& [key, t] : state) {
    if (key != name) continue;
    CPPGRAD_CHECK(t.dtype() == dtype && t.shape() == shape, "checkpoint: {}{} must be {} of shape {}, got {} of shape {}",
                  prefix, name, dtype_name(dtype), shape_str(shape), dtype_name(t.dtype()), shape_str(t.shape()));
    return t;
  }
  throw Error(fmt::format("checkpoint: {}{} is missing", prefix, name));
}

// Runs `load` (a state_dict loader), adding to its error which entries it was reading.
template <class Load>
void loading(const std::string& prefix, Load&& load) {
  try {
    load();
  } catch (const Error& e) {
    std::string message = e.what();  // on one line: a module lists its missing keys on lines of their own
    for (size_t at; (at = message.find("\n  ")) != std::string::npos;) message.replace(at, 3, "; ");
    throw Error(fmt::format("checkpoint: in the entries under \"{}\": {}", prefix, message));
  }
}

std::vector<std::pair<double, double>> read_curve(const NamedTensors& tensors, const std::string& name, int64_t step) {
  const Tensor* found = nullptr;
  for (const auto& [key, t] : tensors)
    if (key == name) found = &t;
  CPPGRAD_CHECK(found, "checkpoint: {} is missing", name);
  CPPGRAD_CHECK(found->dtype() == kFloat64 && found->dim() == 1 && found->numel() % 2 == 0,
                "checkpoint: {} must be a float64 vector of (step, loss) pairs, got {} of shape {}", name,
                dtype_name(found->dtype()), shape_str(found->shape()));
  CPPGRAD_CHECK(found->numel() / 2 <= step, "checkpoint: {} holds {} points, more than the {} steps taken", name,
                found->numel() / 2, step);
  const std::vector<double> v = found->to_vector<double>();
  std::vector<std::pair<double, double>> curve;
  for (size_t i = 0; i < v.size(); i += 2) {
    CPPGRAD_CHECK(v[i] >= 1 && v[i] <= static_cast<double>(step), "checkpoint: {} has a point at step {}, not in [1, {}]",
                  name, v[i], step);
    curve.emplace_back(v[i], v[i + 1]);  // a loss may be anything a diverging run printed
  }
  return curve;
}

Tensor flatten(const std::vector<std::pair<double, double>>& curve) {
  std::vector<double> v;
  for (auto [x, y] : curve) v.insert(v.end(), {x, y});
  return tensor(v, {static_cast<int64_t>(v.size())});
}

}  // namespace

void set_generator_state(Generator& gen, const NamedTensors& state, const std::string& prefix) {
  for (const auto& [name, t] : state)
    CPPGRAD_CHECK(name == "words" || name == "cached_normal" || name == "has_cached_normal",
                  "checkpoint: unexpected entry {}{}", prefix, excerpt(name));
  Generator::State s{};
  const auto words = entry(state, prefix, "words", kInt64, {5}).to_vector<int64_t>();
  for (int i = 0; i < 4; ++i) s.s[i] = std::bit_cast<uint64_t>(words[i]);
  s.seed = std::bit_cast<uint64_t>(words[4]);
  s.cached_normal = entry(state, prefix, "cached_normal", kFloat64, {}).item<double>();
  s.has_cached_normal = entry(state, prefix, "has_cached_normal", kBool, {}).item<bool>();
  try {
    gen.set_state(s);
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint: {}words: {}", prefix, e.what()));
  }
}

NamedTensors save_run(const Run& run, const TrainingLog& training) {
  NamedTensors state = with_prefix("model.", run.model.state_dict());
  auto add = [&](const NamedTensors& more) { state.insert(state.end(), more.begin(), more.end()); };
  add(with_prefix("optim.", run.optimizer.state_dict()));
  if (run.average) add(with_prefix("average.", run.average->state_dict()));
  add(with_prefix("sched.", run.schedule.state_dict()));
  add(with_prefix("rng.default.", generator_state(default_generator())));
  add(with_prefix("loader.", run.loader.state_dict()));
  add({{"train.step", scalar_tensor(static_cast<double>(training.step), kInt64)},
       {"train.loss_curve", flatten(training.train_curve)},
       {"train.eval_curve", flatten(training.eval_curve)},
       {"train.accuracy_curve", flatten(training.accuracy_curve)}});
  return state;
}

TrainingLog load_run(const NamedTensors& tensors, const Run& run, const std::set<std::string>& extra_keys,
                     const std::vector<std::string>& extra_prefixes) {
  std::vector<std::string> prefixes = {"model.", "optim.", "sched.", "rng.default.", "loader."};
  prefixes.insert(prefixes.end(), extra_prefixes.begin(), extra_prefixes.end());
  if (run.average) prefixes.push_back("average.");
  const std::set<std::string> train_keys = {"train.step", "train.loss_curve", "train.eval_curve",
                                            "train.accuracy_curve"};
  for (const auto& [name, t] : tensors) {
    bool known = train_keys.count(name) || extra_keys.count(name);
    for (const std::string& prefix : prefixes) known = known || name.rfind(prefix, 0) == 0;
    CPPGRAD_CHECK(known, "checkpoint: unexpected entry {}", excerpt(name));
  }

  TrainingLog training;
  training.step = entry(tensors, "", "train.step", kInt64, {}).item<int64_t>();
  loading("model.", [&] { run.model.load_state_dict(under_prefix("model.", tensors)); });
  if (run.average) loading("average.", [&] { run.average->load_state_dict(under_prefix("average.", tensors)); });
  loading("optim.", [&] { run.optimizer.load_state_dict(under_prefix("optim.", tensors)); });
  loading("sched.", [&] { run.schedule.load_state_dict(under_prefix("sched.", tensors)); });
  set_generator_state(default_generator(), under_prefix("rng.default.", tensors), "rng.default.");
  loading("loader.", [&] { run.loader.load_state_dict(under_prefix("loader.", tensors)); });
  // The schedule steps once per training step, from 0: the two counts agree in any checkpoint
  // the program wrote (and the loop's bound, the schedule's rate, stay sane).
  CPPGRAD_CHECK(training.step == run.schedule.last_step(),
                "checkpoint: train.step is {}, but sched.last_step is {}; they count the same steps", training.step,
                run.schedule.last_step());
  // An optimizer counts the updates each parameter had: at most one per training step.
  for (const auto& [name, t] : under_prefix("optim.state.", tensors))
    if (name.ends_with(".step") && t.dim() == 0 && t.dtype() == kInt64)
      CPPGRAD_CHECK(t.item<int64_t>() <= training.step, "checkpoint: optim.state.{} is {}, more than the {} steps taken",
                    name, t.item<int64_t>(), training.step);
  training.train_curve = read_curve(tensors, "train.loss_curve", training.step);
  training.eval_curve = read_curve(tensors, "train.eval_curve", training.step);
  training.accuracy_curve = read_curve(tensors, "train.accuracy_curve", training.step);
  return training;
}

}  // namespace examples
