// What the training programs leave for other tools to read: --trace FILE, a timeline of a few
// training steps in the trace-event JSON that ui.perfetto.dev opens (runtime/profile.h,
// docs/profiling.md); --log-dir DIR, the training log as JSONL and TensorBoard event files
// (tools/metrics.h, docs/training-logs.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>


#include "common/cli_declarations.h"
#include "common/run_state.h"
#include "runtime/profile.h"

namespace examples {

// Declares --trace FILE on `app` (checked writable as it is parsed).
void add_trace_option(CLI::App& app, std::string& path);

// Traces steps of the run into `path` (nothing when empty: no --trace, or not rank 0): the second
// step this process takes and the `steps - 1` after it (the first fills the allocator's cache and
// starts the threads, which no later step repeats), each inside a span "step N"; then writes the
// file and says so. A run whose loop ends sooner writes what it traced at finish(), which throws
// cppgrad::Error naming the file when it cannot be written (a non-zero exit, never a run that
// looks whole). Destroyed unfinished (the run is throwing anyway), it writes what it can.
//   examples::StepTrace trace(lead ? o.trace : "", log.step, o.steps);
//   while (log.step < o.steps) { trace.before(log.step + 1); ... }
//   trace.finish();
class StepTrace {
 public:
  StepTrace(std::string path, int64_t start_step, int64_t last_step, int64_t steps = 3);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;
  void before(int64_t step);  // `step` is the step about to run
  void finish();              // after the training loop

 private:
  void write();
  std::string path_;
  int64_t first_, last_;  // the steps traced
  std::optional<cppgrad::profile::Span> step_;
  bool written_ = false;
};

// Declares --log-dir DIR on `app`.
void add_log_dir_option(CLI::App& app, std::string& dir);

// Opens the log `dir` into log.metrics (nothing when empty: no --log-dir, or not rank 0). Points
// already in the curves (a resumed run's) count as written: the log of the first part has them.
void open_log(TrainingLog& log, const std::string& dir);
// Writes the curves' points added since the last call: "train/loss", "eval/loss" and
// "eval/accuracy" (seq2seq's, in %), and "train/lr" at `step`. report_step calls it.
void log_new_points(TrainingLog& log, double lr);

}  // namespace examples
