// What the example programs save to resume a run exactly: the library's parts (model, optimizer,
// schedule, moving average, data loader, default generator) in one optim::TrainingState, and
// what the loop itself counts (the step, and the curves --plot draws).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cppgrad.h"
#include "tools/metrics.h"

namespace examples {

using cppgrad::NamedTensors;

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
  // --log-dir (examples/common/observe.h): where the curves' new points go as they are added.
  std::shared_ptr<cppgrad::metrics::Logger> metrics;
  size_t logged_train = 0, logged_eval = 0, logged_accuracy = 0;  // the points already written
};

// Every part under its name: model., optim., average. (when there is one), sched., rng.default.,
// loader., then train.step, train.loss_curve, train.eval_curve and train.accuracy_curve. Its load
// also refuses a step count the schedule or the optimizer disagrees with, a curve point past the
// step, and a weight or average beyond reachable_weight. `run` and `log` must outlive it.
cppgrad::optim::TrainingState training_state(const Run& run, TrainingLog& log);

// Held-out windows of a language model's text: at most `count` windows of `seq_len` tokens,
// spread evenly over `tokens`, as "input" (B, T) and "target" (B, T), the input shifted by one.
cppgrad::data::Batch spread_windows(const std::vector<int64_t>& tokens, int64_t seq_len, int64_t count);

// AdamW's two parameter groups as GPT-2's and nanoGPT's trainers make them: weight decay on the
// 2-D weights (matrices, embeddings) only, since decaying the norms' gains and the biases would
// only fight the normalisation. Named "decay" and "no_decay".
std::vector<cppgrad::optim::ParamGroup> weight_decay_groups(const cppgrad::nn::Module& model, double lr,
                                                            double weight_decay);

// The programs initialise every weight from a normal of standard deviation at most 1 (or as 0 or
// 1): none beyond 10 (a draw of 10σ has probability 1.5e-23). 1000 leaves a margin for
// pretrained weights (gpt's --init-from), whose largest are the checkpoint's, not ours to know.
inline constexpr double kInitialWeight = 1000;
// The largest magnitude a weight can reach in `steps` steps of `optimizer` (Adam or AdamW, each
// group's betas) at the rates `schedule` gave, from within ±kInitialWeight; infinity for another
// optimizer. training_state's load refuses model and average entries beyond it.
double reachable_weight(const cppgrad::optim::Optimizer& optimizer, const cppgrad::optim::LRScheduler& schedule,
                        int64_t steps);

// Stops the run (throws Diverged: exit code 4) when `value`, a step's `quantity` ("the training
// loss", "the gradient norm"), is NaN or infinite: one line naming the step, the quantity, and
// the first parameter of `model` (or else the first gradient) that is not finite. A number per
// step: the cheap check every step can afford.
void stop_if_non_finite(int64_t step, const std::string& quantity, double value, const cppgrad::nn::Module& model);
// Stops the run when a parameter of `model` is not finite (a full pass over the weights: at the
// end of training, before the checkpoint and the samples).
void stop_if_weights_non_finite(int64_t step, const cppgrad::nn::Module& model);
// Stops the run when an entry a checkpoint would hold is not finite, naming it.
void stop_if_state_non_finite(const NamedTensors& entries);

// The format of the programs' checkpoints, kept in their metadata as "checkpoint_format". It is
// raised whenever what a checkpoint holds changes so that a file of the format before would not
// load, or not resume exactly; such a file is refused, naming the release that reads it, never
// translated. Format 1, the files of cppgrad 0.1.0, named no format.
inline constexpr int kCheckpointFormat = 2;
// Refuses (cppgrad::Error) a checkpoint whose metadata is of another format than kCheckpointFormat,
// naming both formats and the release that reads the file's.
void check_checkpoint_format(const std::map<std::string, std::string>& metadata);

}  // namespace examples
