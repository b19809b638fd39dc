// What a training program saves to resume exactly: model, optimizer, schedule, step counter,
// the data loader's position and random-number state, in one safetensors file under prefixes
// ("model.", "optim.", ...).
//
// A checkpoint is untrusted input: load_run checks every entry against what the program expects
// (presence, dtype, shape, range) and throws one cppgrad::Error naming the key, never trains on
// a state that update rules, schedules or generators cannot have produced.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cppgrad.h"

namespace examples {

using cppgrad::nn::NamedTensors;

// Prepends `prefix` to every name.
NamedTensors with_prefix(const std::string& prefix, const NamedTensors& tensors);
// The entries whose names start with `prefix`, with it removed.
NamedTensors under_prefix(const std::string& prefix, const NamedTensors& tensors);

// A generator's whole state as tensors (xoshiro words, seed, cached normal), and back. Setting
// checks each entry ("<prefix>words" in messages) and refuses a state no generator can reach.
NamedTensors generator_state(const cppgrad::Generator& gen);
void set_generator_state(cppgrad::Generator& gen, const NamedTensors& state, const std::string& prefix = "");

// The parts of a training run that a checkpoint holds.
struct Run {
  cppgrad::nn::Module& model;
  cppgrad::optim::Optimizer& optimizer;
  cppgrad::optim::LRScheduler& schedule;  // stepped once per training step
  cppgrad::data::DataLoader& loader;      // the default generator is saved too (weights, dropout)
  cppgrad::optim::ExponentialMovingAverage* average = nullptr;
};

// What the loop itself counts: steps taken, and the (step, value) curves drawn by --plot: the
// losses, and the held-out accuracy (seq2seq; empty for char_lm).
struct TrainingLog {
  int64_t step = 0;
  std::vector<std::pair<double, double>> train_curve, eval_curve, accuracy_curve;
};

// Everything under its prefix: model., optim., average. (when there is one), sched., loader.,
// rng.default., and train.step, train.loss_curve, train.eval_curve, train.accuracy_curve.
NamedTensors save_run(const Run& run, const TrainingLog& training);
// Loads all of it, checking every entry; `extra_keys` are other top-level entries the program
// reads itself (char_lm's data.vocab, the other ranks' streams of a data-parallel run), and
// `extra_prefixes` whole families of them. Any other entry is refused.
TrainingLog load_run(const NamedTensors& tensors, const Run& run, const std::set<std::string>& extra_keys = {},
                     const std::vector<std::string>& extra_prefixes = {});

}  // namespace examples
