#include "common/observe.h"

#include <algorithm>

#include <fmt/core.h>

#include "common/cli_app.h"

namespace examples {

void add_trace_option(CLI::App& app, std::string& path) {
  app.add_option("--trace", path, "write a trace of training steps 2-4 (Chrome/Perfetto JSON: ui.perfetto.dev)")
      ->check(CLI::Validator(
          [](std::string& p) {
            try {
              check_writable("--trace", p);
            } catch (const std::exception& e) {
              // CLI11 puts the option's name before a validator's message: said once, not twice.
              const std::string message = e.what(), prefix = "--trace: ";
              return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
            }
            return std::string();
          },
          "FILE"));
}

StepTrace::StepTrace(std::string path, int64_t start_step, int64_t last_step, int64_t steps)
    : path_(std::move(path)),
      first_(std::min(start_step + 2, last_step)),
      last_(std::min(first_ + steps - 1, last_step)) {}

StepTrace::~StepTrace() {
  if (path_.empty() || written_ || !cppgrad::profile::tracing()) return;
  try {
    write();
  } catch (const std::exception& e) {  // a destructor must not throw, and the run is failing already
    fmt::print(stderr, "{}\n", e.what());
  }
}

void StepTrace::finish() {
  if (path_.empty() || written_) return;
  written_ = true;
  if (!cppgrad::profile::tracing()) {
    fmt::print("--trace: no training step ran, so nothing was traced ({} not written)\n", path_);
    return;
  }
  write();
}

void StepTrace::before(int64_t step) {
  if (path_.empty() || written_ || step < first_) return;
  step_.reset();  // the previous step's span ends
  if (step > last_) return write();
  if (step == first_) cppgrad::profile::start_trace();
  step_.emplace("step", fmt::format("step {}", step));
}

void StepTrace::write() {
  step_.reset();
  written_ = true;
  cppgrad::profile::write_trace(path_);
  const std::string steps = first_ == last_ ? fmt::format("step {}", first_) : fmt::format("steps {}-{}", first_, last_);
  fmt::print("trace of {} written to {} (open it in ui.perfetto.dev)\n", steps, path_);
}

void add_log_dir_option(CLI::App& app, std::string& dir) {
  app.add_option("--log-dir", dir, "write the training log there: metrics.jsonl and a TensorBoard event file "
                                   "(tensorboard --logdir DIR)")->check(names_a_path());
}

void open_log(TrainingLog& log, const std::string& dir) {
  if (dir.empty()) return;
  log.metrics = std::make_shared<cppgrad::metrics::Logger>(dir);
  log.logged_train = log.train_curve.size();
  log.logged_eval = log.eval_curve.size();
  log.logged_accuracy = log.accuracy_curve.size();
}

void log_new_points(TrainingLog& log, double lr) {
  if (!log.metrics) return;
  auto write = [&](const std::vector<std::pair<double, double>>& curve, size_t& logged, const char* tag) {
    for (; logged < curve.size(); ++logged)
      log.metrics->scalar(tag, curve[logged].second, static_cast<int64_t>(curve[logged].first));
  };
  write(log.train_curve, log.logged_train, "train/loss");
  write(log.eval_curve, log.logged_eval, "eval/loss");
  write(log.accuracy_curve, log.logged_accuracy, "eval/accuracy");
  log.metrics->scalar("train/lr", lr, log.step);
}

}  // namespace examples
