#include "common/run_state.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "common/cli.h"

using namespace cppgrad;

namespace examples {

namespace {

Tensor flatten(const std::vector<std::pair<double, double>>& curve) {
  std::vector<double> v;
  for (auto [x, y] : curve) v.insert(v.end(), {x, y});
  return tensor(v, {static_cast<int64_t>(v.size())});
}

// The curve `t` holds as (step, value) pairs, each at a step the run has taken.
std::vector<std::pair<double, double>> read_curve(const Tensor& t, const std::string& name, int64_t step) {
  CPPGRAD_CHECK(t.dtype() == kFloat64 && t.dim() == 1 && t.numel() % 2 == 0,
                "checkpoint: {} must be a float64 vector of (step, loss) pairs, got {} of shape {}", name,
                dtype_name(t.dtype()), excerpt(shape_str(t.shape()), 40));
  CPPGRAD_CHECK(t.numel() / 2 <= step, "checkpoint: {} holds {} points, more than the {} steps taken", name,
                t.numel() / 2, step);
  const std::vector<double> v = t.to_vector<double>();
  std::vector<std::pair<double, double>> curve;
  for (size_t i = 0; i < v.size(); i += 2) {
    CPPGRAD_CHECK(v[i] >= 1 && v[i] <= static_cast<double>(step), "checkpoint: {} has a point at step {}, not in [1, {}]",
                  name, v[i], step);
    // Finite: a run stops at its first non-finite loss, and writes no checkpoint after one.
    CPPGRAD_CHECK(std::isfinite(v[i + 1]), "checkpoint: {} has {} at step {}, not a finite value", name, v[i + 1], v[i]);
    curve.emplace_back(v[i], v[i + 1]);
  }
  return curve;
}

}  // namespace

namespace {

// "model.fc.weight holds nan (element 3)", for the first parameter (or gradient, when `grads`)
// of `model` that is not finite; empty when all are.
std::string first_non_finite_of(const nn::Module& model, bool grads) {
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor t = grads ? p.grad() : p;
    const int64_t at = first_non_finite(t);
    if (at < 0) continue;
    const double v = t.contiguous().to(kFloat64).reshape({-1}).to_vector<double>()[static_cast<size_t>(at)];
    return fmt::format("{}{} holds {} (element {})", grads ? "the gradient of " : "", name, v, at);
  }
  return {};
}

}  // namespace

void stop_if_non_finite(int64_t step, const std::string& quantity, double value, const nn::Module& model) {
  if (std::isfinite(value)) return;
  // The first non-finite tensor, when there is one, says where the nonsense entered.
  std::string where = first_non_finite_of(model, false);
  if (where.empty()) where = first_non_finite_of(model, true);
  throw Diverged(fmt::format("step {}: {} is {}; {}; training stopped, nothing saved", step, quantity, value,
                             where.empty() ? "every parameter and gradient is finite" : "the first non-finite: " + where));
}

void stop_if_weights_non_finite(int64_t step, const nn::Module& model) {
  const std::string where = first_non_finite_of(model, false);
  if (!where.empty()) throw Diverged(fmt::format("step {}: the weights are not finite: {}; nothing saved", step, where));
}

void stop_if_state_non_finite(const NamedTensors& entries) {
  try {
    check_finite(entries, "not saved");
  } catch (const Error& e) {
    throw Diverged(fmt::format("{}: a checkpoint is never written from a non-finite state", e.what()));
  }
}

void check_checkpoint_format(const std::map<std::string, std::string>& metadata) {
  // The release that reads each older format: kReaders[f - 1] for format f.
  constexpr const char* kReaders[kCheckpointFormat - 1] = {"cppgrad 0.1.0"};
  const auto found = metadata.find("checkpoint_format");
  int format = 1;  // the files that named none
  if (found != metadata.end()) {
    const std::string& text = found->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), format);
    CPPGRAD_CHECK(error == std::errc() && end == text.data() + text.size() && format >= 1,
                  "--resume: the checkpoint's checkpoint_format is '{}', not a format number", excerpt(text, 40));
  }
  if (format == kCheckpointFormat) return;
  if (format < kCheckpointFormat)
    throw Error(fmt::format("--resume: the checkpoint is of format {}{}, and this program reads format {} only: {} "
                            "reads format {} (or start a new run)", format,
                            found == metadata.end() ? " (its metadata names no checkpoint_format)" : "",
                            kCheckpointFormat, kReaders[format - 1], format));
  throw Error(fmt::format("--resume: the checkpoint is of format {}, newer than this program's {}: resume it with the "
                          "release that wrote it", format, kCheckpointFormat));
}

optim::TrainingState training_state(const Run& run, TrainingLog& log) {
  optim::TrainingState state;
  state.add("model", run.model).add("optim", run.optimizer);
  if (run.average) state.add("average", *run.average);
  state.add("sched", run.schedule).add("rng.default", default_generator()).add("loader", run.loader);
  state.add_scalar("train.step", log.step, Bounds::at_least(0));
  using Curve = std::vector<std::pair<double, double>>;
  const std::pair<std::string, Curve*> curves[] = {
      {"train.loss_curve", &log.train_curve}, {"train.eval_curve", &log.eval_curve},
      {"train.accuracy_curve", &log.accuracy_curve}};
  for (const auto& entry : curves) {
    const std::string name = entry.first;
    Curve* curve = entry.second;
    state.add_tensor(name, [curve] { return flatten(*curve); },
                     [curve, name, &log](const Tensor& t) { *curve = read_curve(t, name, log.step); });  // after train.step
  }
  // The schedule steps once per training step, from 0: the two counts agree in any checkpoint
  // the program wrote (and the loop's bound, the schedule's rate, stay sane).
  const optim::LRScheduler* schedule = &run.schedule;
  state.require([schedule, &log] {
    CPPGRAD_CHECK(log.step == schedule->last_step(),
                  "checkpoint: train.step is {}, but sched.last_step is {}; they count the same steps", log.step,
                  schedule->last_step());
  });
  // An optimizer counts the updates each parameter had: at most one per training step.
  const optim::Optimizer* optimizer = &run.optimizer;
  state.require([optimizer, &log] {
    for (const auto& [name, t] : optimizer->state_dict())
      if (name.starts_with("state.") && name.ends_with(".step") && t.dim() == 0 && t.dtype() == kInt64)
        CPPGRAD_CHECK(t.item<int64_t>() <= log.step, "checkpoint: optim.{} is {}, more than the {} steps taken", name,
                      t.item<int64_t>(), log.step);
  });
  // Weights (and their averages) no training run reaches: a model entry of 1e30 is finite, but
  // one resumed from it trained on losses of 1e29 and exited 0.
  const nn::Module* model = &run.model;
  const optim::ExponentialMovingAverage* average = run.average;
  state.require([model, optimizer, schedule, average, &log] {
    const double bound = reachable_weight(*optimizer, *schedule, log.step);
    if (!std::isfinite(bound)) return;
    NoGradGuard no_grad;
    auto check = [&](const std::string& name, const Tensor& t) {
      if (t.numel() == 0 || t.abs().max().item<double>() <= bound) return;  // one pass; the rest names the element
      const std::vector<double> v = t.to(kFloat64).contiguous().reshape({-1}).to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i)
        CPPGRAD_CHECK(std::abs(v[i]) <= bound, "checkpoint: '{}' holds {} (element {}): {} steps of Adam at the "
                      "schedule's rates move a weight from its initialisation (within ±{}) to ±{:.4g} at most "
                      "(examples/common/run_state.cpp)", name, v[i], i, log.step, kInitialWeight, bound);
    };
    for (const auto& [name, p] : model->named_parameters()) check("model." + name, p);
    if (average)
      for (size_t i = 0; i < average->averages().size(); ++i) check(fmt::format("average.{}", i), average->averages()[i]);
  });
  return state;
}

double reachable_weight(const optim::Optimizer& optimizer, const optim::LRScheduler& schedule, int64_t steps) {
  // Adam's step moves a weight by lr·|m|/(√v+ε) ≤ lr·B, with B = (1-β1)/√((1-β2)(1-β1²/β2)) by
  // Cauchy–Schwarz (Adam::check_moments), whatever the gradients; AdamW's decay, p·(1 - lr·λ),
  // only shrinks a weight while lr·λ ≤ 2. So after `steps` steps a weight lies within
  // kInitialWeight + B·Σ lr, the rates the schedule gave (lr_at(0) .. lr_at(steps-1)).
  double largest_step = 0;
  for (const auto& g : optimizer.param_groups()) {
    if (!g.beta1 || !g.beta2) return std::numeric_limits<double>::infinity();  // not Adam: no such bound
    const double b1 = *g.beta1, b2 = *g.beta2;
    const double ratio = b1 == 0.0 ? 0.0 : b1 * b1 / b2;  // < 1: Optimizer::check_group
    largest_step = std::max(largest_step, (1.0 - b1) / std::sqrt((1.0 - b2) * (1.0 - ratio)));
  }
  // The sum, step by step up to the programs' largest --steps (linear in the steps, as the run
  // was); beyond, every rate at optim::kMaxLearningRate.
  double rates = static_cast<double>(steps) * optim::kMaxLearningRate;
  if (steps <= 100'000'000) {
    rates = 0;
    for (double base : schedule.base_lrs()) {
      double sum = 0;
      for (int64_t k = 0; k < steps; ++k) {
        const double lr = schedule.lr_at(k, base);
        sum += std::isfinite(lr) ? std::clamp(lr, 0.0, optim::kMaxLearningRate) : optim::kMaxLearningRate;
      }
      rates = std::max(rates, sum);
    }
  }
  return kInitialWeight + rates * largest_step;
}


std::vector<cppgrad::optim::ParamGroup> weight_decay_groups(const cppgrad::nn::Module& model, double lr,
                                                            double weight_decay) {
  std::vector<cppgrad::Tensor> matrices, others;
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? matrices : others).push_back(p);
  return {{matrices, lr, weight_decay, "decay"}, {others, lr, 0.0, "no_decay"}};
}

cppgrad::data::Batch spread_windows(const std::vector<int64_t>& tokens, int64_t seq_len, int64_t count) {
  const cppgrad::data::TextDataset windows(tokens, seq_len);
  count = std::min<int64_t>(windows.size(), count);
  std::vector<cppgrad::data::Example> examples;
  for (int64_t k = 0; k < count; ++k) examples.push_back(windows.get(k * windows.size() / count));
  return cppgrad::data::stack_collate(examples);
}
}  // namespace examples
