// What the example programs need to train on several processes (scripts/mpirun N program ...),
// with distributed::DistributedDataParallel averaging the gradients over the ranks.
//
// Each rank reads its own share of every global batch (data::DistributedSampler: rank r takes
// positions r, r + N, ... of the epoch's one permutation), so N processes of batch B/N see,
// step for step, the examples one process of batch B sees. Rank 0 alone evaluates, prints and
// writes files. Dropout is keyed by example (KeyedDropout, tensor/keyed_dropout.h: the scope
// dropout_scope makes), so an example's masks do not depend on which rank holds it, and the
// loader counts global batches: a checkpoint holds nothing of a rank's own and resumes on any
// number of processes that divides the global batch, continuing the same global batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "run_state.h"
#include "distributed/distributed.h"
#include "tools/progress.h"

namespace examples {

// Ends the program with `code`; under mpirun with a non-zero code, the whole job, so that no
// rank waits for ever in a collective its failed peer will never join.
int exit_job(int code);
// The prefix of the program's error lines: "seq2seq", or "seq2seq (rank 1)" under mpirun.
std::string name_in_job(const std::string& program);
// Parses the command line. Returns the exit code when the program must end now: 0 after --help
// (printed by rank 0), kExitRefused after a refused option (one line on stderr).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& program);
// Runs the program's body through run_main (common/cli.h: every exception reported after the
// output so far is flushed, one line on stderr, kExitRefused for a cppgrad::Error, ...) and
// returns its exit code; under mpirun a non-zero code ends the whole job.
int run_program(const std::string& program, const std::string& smaller, const std::function<int()>& body);

// Loads a checkpoint written by save_run_file into `state`, on any number of processes (its
// format was checked with its metadata: KeptOptions::resume_from). Errors name the file.
void resume_run(const std::string& path, const NamedTensors& checkpoint, cppgrad::optim::TrainingState& state);

// This rank's share of a global batch: `global_batch` / world size, or an Error naming `option`
// when it does not divide.
int64_t per_rank_batch(const std::string& option, int64_t global_batch);

// The scope of one forward and backward of the training step after `steps_taken` steps: this
// rank's rows are positions r, r + N, ... of the global batch of `global_batch` examples (as
// the DistributedSampler deals them), offset by micro × global_batch for micro-batch `micro` of
// a step that accumulates several. Dropout inside draws each example's masks from (seed, step,
// call, position): the masks one process draws on the whole batch.
std::unique_ptr<cppgrad::KeyedDropout> dropout_scope(uint64_t seed, int64_t steps_taken, int64_t global_batch,
                                                     int64_t micro = 0);

// Writes `state` to `path` with `metadata`, and says so. Every rank calls it (each checks the
// state is finite, so that none is left waiting); rank 0 writes.
void save_run_file(const std::string& path, const cppgrad::optim::TrainingState& state,
                   const cppgrad::nn::Metadata& metadata);

// Sums each value over the ranks (a collective; the values themselves in a world of one).
std::vector<double> sum_over_ranks(std::vector<double> values);

// Scales `loss`, this rank's mean over its `tokens` target tokens, so that the ranks' average of
// the gradients (DistributedDataParallel's) is the gradient of the global batch's token mean,
// however the padding falls on the ranks: the loss one process computes on the whole batch.
// Returns the global batch's target tokens (a collective; in a world of one, `tokens`, and
// `loss` stays as it is).
double to_global_token_mean(cppgrad::Tensor& loss, double tokens);

// Each training step's loss on this rank, kept until the next progress report, which takes the
// global batch's loss of each (the mean of the ranks' means) into the curve.
class StepLosses {
 public:
  void add(double loss) { recent_.push_back(loss); }
  int64_t count() const { return static_cast<int64_t>(recent_.size() + flushed_.size()); }  // since the last report
  // Appends each step since the last report, the last being `step`, to `curve` as (step, global
  // loss) and returns their mean; then starts again. A collective.
  double report(int64_t step, std::vector<std::pair<double, double>>& curve);
  // Appends each step since the last report or flush to `curve`, as report does, without ending
  // the report's mean: before a checkpoint of --save-every, so that it holds every step's loss
  // (a resumed run's first report then averages the steps since the checkpoint). A collective.
  void flush(int64_t step, std::vector<std::pair<double, double>>& curve);

 private:
  std::vector<double> recent_;
  std::vector<double> flushed_;  // global losses already in the curve, since the last report
};

// Stops a run whose training loss stays far above a uniform guess's, ln V nats for V classes:
// finite numbers, and nonsense (a learning rate the model cannot take: seq2seq at --lr 1000 once
// reported 663,211 nats at step 10 and exited 0). Above twice ln V at 3 reports in a row, or at
// the last step, check() throws Diverged (exit code 4) naming the step, the losses and the bound.
// While the last report is above it the run writes no checkpoint (above() is true), so the newest
// one kept is from before. A model starts near ln V and a run that learns goes below.
class LossAboveUniform {
 public:
  explicit LossAboveUniform(int64_t classes);
  // `mean_loss`: the global mean of the steps up to `step` since the last report.
  void check(int64_t step, double mean_loss, bool last_step);
  bool above() const { return !above_.empty(); }
  static constexpr int kReports = 3;

 private:
  double bound_;                // 2 ln V (infinite for fewer than 2 classes: no guess to compare)
  std::vector<double> above_;  // the reports in a row above the bound
};

// After a step is taken (log.step counts it): at every 10th step, every `eval_every`-th and the
// last, the mean of the losses since the last report joins log.train_curve and the progress line
// (a collective: every rank calls it), and goes to `diverging`'s check; at the evaluation steps
// rank 0 (`lead`) also computes `held_out_loss()` into log.eval_curve and returns it. `units` are
// the tokens or characters of one step on one rank.
std::optional<double> report_step(TrainingLog& log, StepLosses& losses, cppgrad::Progress& progress,
                                  int64_t last_step, int64_t eval_every, double lr, int64_t units, bool lead,
                                  const std::function<double()>& held_out_loss, LossAboveUniform& diverging);
// Rank 0's decision, on every rank (a collective).
bool decided_by_rank0(bool decision);

}  // namespace examples
