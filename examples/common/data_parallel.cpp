#include "data_parallel.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "common/cli_app.h"
#include "observe.h"

using namespace cppgrad;

namespace examples {

int exit_job(int code) {
  if (code != 0 && distributed::world_size() > 1) {
    std::fflush(stdout);  // MPI's abort ends the process without flushing what it printed
    distributed::abort(code);
  }
  return code;
}

std::string name_in_job(const std::string& program) {
  return distributed::world_size() > 1 ? fmt::format("{} (rank {})", program, distributed::rank()) : program;
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& program) {
  const auto code = parse_options(app, argc, argv, name_in_job(program), distributed::rank() == 0);
  if (code && *code != 0) return exit_job(*code);
  return code;
}

int run_program(const std::string& program, const std::string& smaller, const std::function<int()>& body) {
  return exit_job(run_main(name_in_job(program), body, smaller));
}

void resume_run(const std::string& path, const NamedTensors& checkpoint, optim::TrainingState& state) {
  try {
    state.load_state_dict(checkpoint);
  } catch (const Error& e) {
    throw Error(fmt::format("--resume: {}: {}", excerpt(path), e.what()));
  }
}

int64_t per_rank_batch(const std::string& option, int64_t global_batch) {
  const int world = distributed::world_size();
  CPPGRAD_CHECK(global_batch % world == 0, "{} {} does not divide among {} processes: give a multiple of {}", option,
                global_batch, world, world);
  return global_batch / world;
}

std::unique_ptr<KeyedDropout> dropout_scope(uint64_t seed, int64_t steps_taken, int64_t global_batch, int64_t micro) {
  const int world = distributed::world_size(), rank = distributed::rank();
  std::vector<int64_t> positions;
  for (int64_t g = rank; g < global_batch; g += world) positions.push_back(micro * global_batch + g);
  return std::make_unique<KeyedDropout>(seed, steps_taken, std::move(positions));
}

void save_run_file(const std::string& path, const optim::TrainingState& state, const nn::Metadata& metadata) {
  NamedTensors entries = state.state_dict();
  stop_if_state_non_finite(entries);  // on every rank: each stops, none goes on alone
  if (distributed::rank() != 0) return;
  nn::save_safetensors(path, entries, metadata);
  fmt::print("checkpoint written to {}\n", path);
}

double to_global_token_mean(Tensor& loss, double tokens) {
  const int world = distributed::world_size();
  if (world == 1) return tokens;
  const double all_tokens = sum_over_ranks({tokens})[0];
  loss = loss * (tokens * world / all_tokens);
  return all_tokens;
}

void StepLosses::flush(int64_t step, std::vector<std::pair<double, double>>& curve) {
  const std::vector<double> sums = sum_over_ranks(recent_);
  const int world = distributed::world_size();
  for (size_t i = 0; i < sums.size(); ++i) {
    const double global = sums[i] / world;
    curve.emplace_back(static_cast<double>(step - static_cast<int64_t>(sums.size() - 1 - i)), global);
    flushed_.push_back(global);
  }
  recent_.clear();
}

double StepLosses::report(int64_t step, std::vector<std::pair<double, double>>& curve) {
  flush(step, curve);
  double mean = 0;
  for (double global : flushed_) mean += global / static_cast<double>(flushed_.size());
  flushed_.clear();
  return mean;
}

std::vector<double> sum_over_ranks(std::vector<double> values) {
  if (distributed::world_size() == 1 || values.empty()) return values;
  Tensor t = tensor(values, {static_cast<int64_t>(values.size())});
  distributed::all_reduce(t, distributed::ReduceOp::Sum);
  return t.to_vector<double>();
}

bool decided_by_rank0(bool decision) {
  if (distributed::world_size() == 1) return decision;
  Tensor t = scalar_tensor(decision ? 1 : 0, kInt64);
  distributed::broadcast(t, 0);
  return t.item<int64_t>() != 0;
}

LossAboveUniform::LossAboveUniform(int64_t classes)
    : bound_(classes >= 2 ? 2 * std::log(static_cast<double>(classes)) : std::numeric_limits<double>::infinity()) {}

void LossAboveUniform::check(int64_t step, double mean_loss, bool last_step) {
  if (!(mean_loss > bound_)) {
    above_.clear();
    return;
  }
  above_.push_back(mean_loss);
  if (static_cast<int>(above_.size()) < kReports && !last_step) return;
  throw Diverged(fmt::format("step {}: the training loss was {:.4g} at the last {} report(s), above twice a uniform "
                             "guess's ({:.4g} nats): the run diverged (a lower --lr?); training stopped, no "
                             "checkpoint written since it rose",
                             step, fmt::join(above_, ", "), above_.size(), bound_));
}

std::optional<double> report_step(TrainingLog& log, StepLosses& losses, cppgrad::Progress& progress,
                                  int64_t last_step, int64_t eval_every, double lr, int64_t units, bool lead,
                                  const std::function<double()>& held_out_loss, LossAboveUniform& diverging) {
  const bool eval_now = log.step % eval_every == 0 || log.step == last_step;
  if (!eval_now && log.step % 10 != 0) return std::nullopt;
  const int64_t units_since = losses.count() * units;            // every rank has as many
  const double mean = losses.report(log.step, log.train_curve);  // a collective
  diverging.check(log.step, mean, log.step == last_step);        // the same global mean on every rank
  std::optional<double> eval_loss;
  if (eval_now && lead) {
    eval_loss = held_out_loss();
    if (!std::isfinite(*eval_loss))
      throw Diverged(fmt::format("step {}: the held-out loss is {}; training stopped, nothing saved", log.step, *eval_loss));
    log.eval_curve.emplace_back(static_cast<double>(log.step), *eval_loss);
  }
  if (lead) progress.update(log.step, mean, lr, units_since, eval_now, eval_loss);
  log_new_points(log, lr);  // --log-dir (rank 0's log.metrics; none elsewhere)
  return eval_loss;
}

}  // namespace examples
